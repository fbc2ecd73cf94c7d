#!/bin/bash
# UCX and Open MPI run over rox_0 with DEFAULT UCX settings (guest; skips without a rox
# device). UCX's UD transport reads the RoCE packet type of each UD receive from ibv_wc.sl, as
# mlx5 reports it (bit 3: UDP, bits 2:0: 1 IPv6, 2 IPv4), to find the destination GID in the
# 40-byte GRH area; a device that reports nothing there has its IPv4 packets parsed as IPv6
# and dropped (UCX_UD_VERBS_ETH_DGID_CHECK=n hides that; it is NOT set here). Runs, server
# and client processes in this guest over the device's loopback:
#   - ucx_perftest UCT tests: ud_verbs am_lat and am_bw (bcopy), rc_verbs am_lat and put_bw
#     (zcopy: the default short layout takes only what fits inline);
#   - ucx_perftest UCP tag_bw over ud_verbs and over rc (rc_verbs, ud_verbs for wireup);
#   - a two-rank MPI program (built with mpicc) under mpirun with pml ucx over ud_verbs and rc.
# Each must succeed on rox_0 and move packets through it (rox_0's rx_packets grows). The same
# runs on rxe0 in this guest are printed for comparison, not judged.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
for tool in ucx_perftest mpirun mpicc; do
	command -v "$tool" >/dev/null || fail "$tool is not in the root (ucx-utils, openmpi-bin, libopenmpi-dev)"
done

RUN_TIMEOUT=180
# ucx_perftest exchanges test parameters and addresses over TCP on this port (its default;
# -P 0: not through MPI, which Debian's build would otherwise use).
PERFTEST_PORT=13337

work=$(mktemp -d /tmp/rox-ucx.XXXXXX)
trap 'rm -rf "$work"; [ -e /sys/class/infiniband/rxe0 ] && rdma link delete rxe0' EXIT

mpicc -O1 -Wall -Wextra -Werror -o "$work/mpi_pingpong" "$(dirname "$0")/ucx-mpi-pingpong.c" || fail "cannot compile the MPI program"

netdev=$(ip -o link show | awk -F': ' '$2 != "lo" { print $2; exit }')
modprobe rdma_rxe && { rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$netdev"; } ||
	echo "note: no rxe0 for comparison (rdma_rxe on $netdev failed)"


# perftest DEV NAME VAR=VALUE... -- ARGS...: ucx_perftest server and client (127.0.0.1) with
# ARGS and the environment; prints the client's final line; status 0 if both succeeded.
perftest() {
	local dev=$1 name=$2 envs=() server rc_client rc_server
	shift 2
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env "${envs[@]}" timeout "$RUN_TIMEOUT" ucx_perftest "$@" -P 0 -p "$PERFTEST_PORT" >"$work/server.log" 2>&1 &
	server=$!
	if ! wait_for_server "$server" "$PERFTEST_PORT"; then
		wait "$server"
		echo "$dev $name: server did not start:"; tail -5 "$work/server.log"
		return 1
	fi
	env "${envs[@]}" timeout "$RUN_TIMEOUT" ucx_perftest "$@" -P 0 -p "$PERFTEST_PORT" 127.0.0.1 >"$work/client.log" 2>&1
	rc_client=$?
	wait "$server"
	rc_server=$?
	if [ $rc_client = 0 ] && [ $rc_server = 0 ] && grep -q 'Final:' "$work/client.log"; then
		echo "$dev $name: ok: $(grep 'Final:' "$work/client.log" | tr -s ' ')"
		return 0
	fi
	echo "$dev $name: FAILED (client $rc_client, server $rc_server); client, then server:"
	tail -8 "$work/client.log"
	tail -4 "$work/server.log"
	return 1
}

# mpi DEV NAME UCX_TLS: the MPI program over UCX on DEV with these transports.
mpi() {
	local dev=$1 name=$2 tls=$3 rc
	timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np 2 \
		--mca pml ucx -x UCX_NET_DEVICES="$dev:1" -x UCX_TLS="$tls" \
		"$work/mpi_pingpong" >"$work/mpi.log" 2>&1
	rc=$?
	if [ $rc = 0 ] && grep -q '^mpi ok' "$work/mpi.log"; then
		echo "$dev $name: ok: $(grep '^mpi ok' "$work/mpi.log")"
		return 0
	fi
	echo "$dev $name: FAILED (exit $rc):"
	tail -12 "$work/mpi.log"
	return 1
}

# run_all DEV: every run on DEV; prints one line each, returns the names that failed or
# moved no packet through DEV (in $failed).
run_all() {
	local dev=$1 before after rx=rx_packets
	# rdma_rxe names its receive counter otherwise.
	[[ $dev == rxe* ]] && rx=rcvd_pkts
	failed=()
	one() {
		local name=$1
		shift
		before=$(rdma_counter "$dev" $rx)
		"$@" || { failed+=("$name"); return; }
		after=$(rdma_counter "$dev" $rx)
		if [ -z "$before" ] || [ -z "$after" ]; then
			echo "$dev $name: no $rx counter of $dev/1 (rdma -j statistic)"
			failed+=("$name")
		elif [ "$after" -le "$before" ]; then
			echo "$dev $name: no packet went through $dev ($rx $before -> $after)"
			failed+=("$name")
		fi
	}
	one "uct ud_verbs am_lat" perftest "$dev" "uct ud_verbs am_lat" -- -d "$dev:1" -x ud_verbs -t am_lat -n 1000
	one "uct ud_verbs am_bw" perftest "$dev" "uct ud_verbs am_bw" -- -d "$dev:1" -x ud_verbs -t am_bw -D bcopy -s 1000 -n 1000
	one "uct rc_verbs am_lat" perftest "$dev" "uct rc_verbs am_lat" -- -d "$dev:1" -x rc_verbs -t am_lat -n 1000
	one "uct rc_verbs put_bw" perftest "$dev" "uct rc_verbs put_bw" -- -d "$dev:1" -x rc_verbs -t put_bw -D zcopy -s 65536 -n 500
	one "ucp tag_bw ud_verbs" perftest "$dev" "ucp tag_bw ud_verbs" UCX_NET_DEVICES="$dev:1" UCX_TLS=ud_verbs -- -t tag_bw -s 4096 -n 1000
	one "ucp tag_bw rc" perftest "$dev" "ucp tag_bw rc" UCX_NET_DEVICES="$dev:1" UCX_TLS=rc -- -t tag_bw -s 65536 -n 500
	one "mpi ud_verbs" mpi "$dev" "mpi ud_verbs" ud_verbs,self
	one "mpi rc" mpi "$dev" "mpi rc" rc,self
}

ucx_info -v | head -2
# UCX picks a RoCEv2 IPv4 GID first, then IPv6: show which the devices have.
for dev in rox_0 rxe0; do
	[ -e /sys/class/infiniband/$dev ] && ibv_devinfo -v -d $dev | grep -E 'GID\[' | sed "s/^/$dev /"
done
echo "--- rox_0"
run_all rox_0
rox_failed=("${failed[@]}")
if [ -e /sys/class/infiniband/rxe0 ]; then
	# rxe's failing UD runs wait for their timeout: keep it short.
	RUN_TIMEOUT=60
	echo "--- rxe0 (for comparison, not judged)"
	run_all rxe0
	echo "rxe0: ${#failed[@]} of 8 failed: ${failed[*]}"
fi
[ ${#rox_failed[@]} = 0 ] || fail "rox_0 with default UCX settings: ${rox_failed[*]}"
echo "PASS: UCX (UCT ud_verbs/rc_verbs, UCP tag) and Open MPI over UCX run on rox_0 with default settings"
