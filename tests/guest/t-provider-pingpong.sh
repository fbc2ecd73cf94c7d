#!/bin/bash
# librox's data path with unmodified libibverbs programs (guest): the ibv_*_pingpong examples,
# server and client on rox_0 (same-device QP-to-QP loopback over RoCEv2 GID 0), each asserting
# its own success output. Skips (exit 0) when the guest has no rox device.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

ITERS=200
RUN_TIMEOUT=120
GID_INDEX=0
# The TCP port both exchange connection data on (their default).
EXCHANGE_PORT=18515
# name | arguments (both sides)
RUNS=(
	"rc|ibv_rc_pingpong -n $ITERS"
	"rc events|ibv_rc_pingpong -n $ITERS -e"
	"rc check 4 KiB|ibv_rc_pingpong -n $ITERS -s 4096 -c"
	"rc inline 64 B|ibv_rc_pingpong -n $ITERS -s 64"
	"uc|ibv_uc_pingpong -n $ITERS"
	"uc events check|ibv_uc_pingpong -n $ITERS -e -c"
	"ud|ibv_ud_pingpong -n $ITERS -s 1024"
	"ud events check|ibv_ud_pingpong -n $ITERS -s 1024 -e -c"
	"srq 4 QPs|ibv_srq_pingpong -n $ITERS -q 4"
	"srq events check|ibv_srq_pingpong -n $ITERS -q 4 -e -c"
)

. "$(dirname "$0")/lib.sh"
need_rox_0

failed=()
for run in "${RUNS[@]}"; do
	name=${run%%|*}
	read -ra cmd <<<"${run#*|}"
	timeout "$RUN_TIMEOUT" "${cmd[@]}" -d rox_0 -g "$GID_INDEX" >/tmp/pp-server.log 2>&1 &
	server=$!
	wait_for_server "$server" "$EXCHANGE_PORT"
	timeout "$RUN_TIMEOUT" "${cmd[@]}" -d rox_0 -g "$GID_INDEX" 127.0.0.1 >/tmp/pp-client.log 2>&1
	client_rc=$?
	wait "$server"
	server_rc=$?
	# Each side prints "<n> iters in <t> seconds = <u> usec/iter" on success.
	if [ $client_rc = 0 ] && [ $server_rc = 0 ] &&
		grep -q "^$ITERS iters in" /tmp/pp-client.log && grep -q "^$ITERS iters in" /tmp/pp-server.log; then
		echo "ok   $name: $(grep 'iters in' /tmp/pp-client.log)"
	else
		echo "FAIL $name (client exit $client_rc, server exit $server_rc)"
		sed 's/^/  client: /' /tmp/pp-client.log | tail -5
		sed 's/^/  server: /' /tmp/pp-server.log | tail -5
		failed+=("$name")
	fi
done
[ ${#failed[@]} = 0 ] || fail "pingpong runs failed on rox_0: ${failed[*]}"
echo "all ${#RUNS[@]} pingpong runs passed on rox_0"
