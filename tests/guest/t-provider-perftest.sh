#!/bin/bash
# librox's data path with unmodified perftest programs (guest): ib_{send,write,read,atomic}_{bw,lat}
# (RC) and ib_send_bw over UD, server and client on rox_0 (same-device loopback over RoCEv2
# GID 0); each run must exit 0 on both sides and print its result row, at the first attempt
# (ROX_ALLOW_FLAKY=1 allows one visible retry). Skips (exit 0) when the guest has no rox device.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

ITERS=200
RUN_TIMEOUT=120
GID_INDEX=0
# The TCP port both exchange connection data on (their default).
EXCHANGE_PORT=18515
RUNS=(
	"ib_send_bw -n $ITERS"
	"ib_send_bw -n $ITERS -c UD"
	"ib_write_bw -n $ITERS"
	"ib_read_bw -n $ITERS"
	"ib_atomic_bw -n $ITERS"
	"ib_send_lat -n $ITERS"
	"ib_write_lat -n $ITERS"
	"ib_read_lat -n $ITERS"
	"ib_atomic_lat -n $ITERS"
)

. "$(dirname "$0")/lib.sh"
need_rox_0

# One server+client run; sets $row to the client's result row. 0 when both succeed.
run_pair() {
	local -a cmd
	read -ra cmd <<<"$1"
	# The server waits for its client too: its bound covers its own start and the whole run.
	timeout $((SERVER_START_S + RUN_TIMEOUT)) "${cmd[@]}" -d rox_0 -x "$GID_INDEX" >/tmp/pt-server.log 2>&1 &
	local server=$!
	if wait_for_server "$server" "$EXCHANGE_PORT" 2>/tmp/pt-client.log; then
		timeout "$RUN_TIMEOUT" "${cmd[@]}" -d rox_0 -x "$GID_INDEX" 127.0.0.1 >/tmp/pt-client.log 2>&1
		client_rc=$?
	else
		client_rc=not-run
	fi
	wait "$server"
	server_rc=$?
	# The result row starts with the message size and the iteration count.
	row=$(grep -E "^ *[0-9]+ +$ITERS +" /tmp/pt-client.log | tail -1)
	[ $client_rc = 0 ] && [ $server_rc = 0 ] && [ -n "$row" ]
}

failed=() flaky=()
for run in "${RUNS[@]}"; do
	if run_pair "$run"; then
		echo "ok   $run: $(echo $row)"
		continue
	fi
	echo "FAIL $run (client exit $client_rc, server exit $server_rc); full logs:"
	sed 's/^/  client: /' /tmp/pt-client.log
	sed 's/^/  server: /' /tmp/pt-server.log
	# A failure fails the test. Only with ROX_ALLOW_FLAKY=1 (set on purpose, passed on by
	# tests/guest/run) is it run once more, and a pass on the retry is printed as a flake.
	if [ "${ROX_ALLOW_FLAKY:-0}" = 1 ] && run_pair "$run"; then
		echo "FLAKY $run passed on its retry (allowed by ROX_ALLOW_FLAKY=1): $(echo $row)"
		flaky+=("$run")
	else
		failed+=("$run")
	fi
done
[ ${#flaky[@]} = 0 ] || echo "WARNING: flaky perftest runs on rox_0 (allowed by ROX_ALLOW_FLAKY=1): ${flaky[*]}"
[ ${#failed[@]} = 0 ] || fail "perftest runs failed on rox_0: ${failed[*]}"
echo "all ${#RUNS[@]} perftest runs passed on rox_0"
