#!/bin/bash
# librox's data path with unmodified libibverbs programs (guest): the ibv_*_pingpong examples,
# each asserting its own success output,
#   - server and client on rox_0 (same-device QP-to-QP loopback over RoCEv2 GID 0), and
#   - server on rox_0, client on rox_1 (two devices of one guest, as two RDMA NICs of one host
#     on one switch: ib_core resolves the peer's MAC by ARP/ND across the shared hub), over
#     the IPv4 GID (1) and the IPv6 link-local GID (0).
# Skips (exit 0) when the guest has no rox device; needs rox_1 too when rox_0 exists.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

ITERS=200
RUN_TIMEOUT=120
# The TCP port both exchange connection data on (their default).
EXCHANGE_PORT=18515
# name | server device | client device | GID index | arguments (both sides)
RUNS=(
	"rc|rox_0|rox_0|0|ibv_rc_pingpong -n $ITERS"
	"rc events|rox_0|rox_0|0|ibv_rc_pingpong -n $ITERS -e"
	"rc check 4 KiB|rox_0|rox_0|0|ibv_rc_pingpong -n $ITERS -s 4096 -c"
	"rc inline 64 B|rox_0|rox_0|0|ibv_rc_pingpong -n $ITERS -s 64"
	"uc|rox_0|rox_0|0|ibv_uc_pingpong -n $ITERS"
	"uc events check|rox_0|rox_0|0|ibv_uc_pingpong -n $ITERS -e -c"
	"ud|rox_0|rox_0|0|ibv_ud_pingpong -n $ITERS -s 1024"
	"ud events check|rox_0|rox_0|0|ibv_ud_pingpong -n $ITERS -s 1024 -e -c"
	"srq 4 QPs|rox_0|rox_0|0|ibv_srq_pingpong -n $ITERS -q 4"
	"srq events check|rox_0|rox_0|0|ibv_srq_pingpong -n $ITERS -q 4 -e -c"
	"rc rox_0-rox_1 IPv4|rox_0|rox_1|1|ibv_rc_pingpong -n $ITERS -c"
	"rc rox_0-rox_1 IPv4 events|rox_0|rox_1|1|ibv_rc_pingpong -n $ITERS -e -c"
	"rc rox_0-rox_1 IPv6 link-local|rox_0|rox_1|0|ibv_rc_pingpong -n $ITERS -c"
	"uc rox_0-rox_1 IPv4|rox_0|rox_1|1|ibv_uc_pingpong -n $ITERS -c"
	"ud rox_0-rox_1 IPv4|rox_0|rox_1|1|ibv_ud_pingpong -n $ITERS -s 1024 -c"
	"srq rox_0-rox_1 IPv4|rox_0|rox_1|1|ibv_srq_pingpong -n $ITERS -q 4 -c"
)

. "$(dirname "$0")/lib.sh"
need_rox_0
[ -e /sys/class/infiniband/rox_1 ] || fail "rox_0 exists but rox_1 does not (tests/guest/run attaches two rox NICs)"
for _ in $(seq 50); do ibv_devinfo -d rox_1 | grep -q PORT_ACTIVE && break; sleep 0.2; done

# A device counter (tests/guest/lib.sh); empty makes the arithmetic below fail.
counter() { rdma_counter "$@"; }
rox_1_rx_before=$(counter rox_1 rx_packets)
cross_runs=0

failed=()
for run in "${RUNS[@]}"; do
	IFS='|' read -r name server_dev client_dev gid args <<<"$run"
	read -ra cmd <<<"$args"
	[ "$server_dev" = "$client_dev" ] || cross_runs=$((cross_runs + 1))
	# The server waits for its client too: its bound covers its own start and the whole run.
	timeout $((SERVER_START_S + RUN_TIMEOUT)) "${cmd[@]}" -d "$server_dev" -g "$gid" >/tmp/pp-server.log 2>&1 &
	server=$!
	if wait_for_server "$server" "$EXCHANGE_PORT" 2>/tmp/pp-client.log; then
		timeout "$RUN_TIMEOUT" "${cmd[@]}" -d "$client_dev" -g "$gid" 127.0.0.1 >/tmp/pp-client.log 2>&1
		client_rc=$?
	else
		client_rc=not-run
	fi
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
[ ${#failed[@]} = 0 ] || fail "pingpong runs failed: ${failed[*]}"
# The rox_0 <-> rox_1 runs really crossed devices: rox_1 received at least one packet per
# iteration of each (each iteration is a ping and a pong).
rox_1_rx=$(( $(counter rox_1 rx_packets) - rox_1_rx_before ))
[ "$rox_1_rx" -ge $((cross_runs * ITERS)) ] ||
	fail "rox_1 received $rox_1_rx packets in $cross_runs runs of $ITERS iterations"
echo "rox_1 received $rox_1_rx RoCEv2 packets in the $cross_runs rox_0 <-> rox_1 runs"
echo "all ${#RUNS[@]} pingpong runs passed (rox_0 loopback and rox_0 <-> rox_1)"
