#!/bin/bash
# Guest side of tests/peer/run: builds tests/peer/peer-cases.c with the root's gcc and
# libibverbs, brings up the RDMA device of lab NIC 0 and runs the cases against rox-peer.
#   guest.sh rox|rxe PEER_IP PORT CASE...
# rox: rox.ko ($ROX_KO) on a rox NIC; rxe: rdma_rxe on a virtio NIC. A setup failure prints
# `RESULT setup fail WHY` (the runner counts every case of this guest as failed).
set -u
role=$1 peer=$2 port=$3
shift 3
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "RESULT setup fail $*"; exit 1; }
gcc -O2 -Wall -Wextra -Werror -o /tmp/peer-cases "$(dirname "$0")/peer-cases.c" -libverbs || fail "cannot build peer-cases"
case $role in
rox)
	insmod "${ROX_KO:?}" || fail "insmod $ROX_KO"
	dev=rox_0 ;;
rxe)
	modprobe rdma_rxe || fail "modprobe rdma_rxe"
	rdma link add rxe0 type rxe netdev "$ROX_IF_0" || fail "rdma link add rxe0"
	dev=rxe0 ;;
*) fail "unknown role $role" ;;
esac
wait_port_active "$dev" || fail "$dev port not active"
gid=$(gid_index "$dev") || fail "no IPv4 RoCE v2 GID on $dev"
/tmp/peer-cases "$dev" "$gid" "$peer" "$port" "$@"
status=$?
# Exit 1 means a case failed: every case reports a RESULT line, which the host runner judges
# (known deviations included). Any other status (a crash) fails the guest here.
[ "$status" -eq 1 ] && status=0
if [ "$role" = rox ]; then
	# A hostile peer must never make the device panic or the kernel warn.
	if grep -qi panick /run/rox/rox-nic0.log; then
		echo "RESULT rox-nic fail $(grep -i -m1 panick /run/rox/rox-nic0.log)"
		status=1
	fi
fi
oops=$(dmesg | grep -E 'WARNING:|Oops|BUG:|Call Trace' | head -3)
if [ -n "$oops" ]; then
	echo "RESULT kernel fail $(echo "$oops" | head -1)"
	dmesg | grep -B15 -A25 -m1 -E 'WARNING:|Oops|BUG:|Call Trace' | sed 's/^/dmesg: /'
	status=1
fi
# rdma_rxe is the reference, not the device under test: its verdicts are its RESULT lines.
[ "$role" = rxe ] && exit 0
exit $status
