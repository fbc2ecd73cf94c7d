#!/bin/bash
# Memory keys cannot be guessed (guest; skips without a rox device): keys are
# index << 8 | key part, and the key part of each new MR is random (issue 10 item 6). A C program
# (keys.c) registers 32 MRs on rox_0 and checks that their indices are distinct and that their
# key parts (the low byte) take many values and follow no fixed step (a constant or a counter
# fails both), then connects two RC QPs of rox_0 (GID 0) and RDMA WRITEs to an MR: with its
# rkey the WRITE lands; with the same index but another key part it completes with
# REM_ACCESS_ERR and writes nothing. The same program runs on an rdma_rxe device on rox_0's
# netdev for comparison (printed, not asserted).
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
command -v gcc >/dev/null || skip "no C compiler in the guest"

work=$(mktemp -d /tmp/rox-keys.XXXXXX)
gcc -O1 -Wall -Werror -I"$(dirname "$0")" -o "$work/keys" "$(dirname "$0")/keys.c" -libverbs || fail "cannot compile the test program"

echo "--- rox_0"
timeout 120 "$work/keys" rox_0 0
rox_rc=$?

# An rdma_rxe device on rox_0's netdev for comparison: the one there already, else one made
# here and deleted again (a netdev takes one rxe device; later tests make their own).
netdev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0)
rxe=$(rdma link show | awk -v n="$netdev" '$NF == n && $2 !~ /^rox_/ { split($2, a, "/"); print a[1]; exit }')
made_rxe=
if [ -z "$rxe" ] && modprobe rdma_rxe 2>/dev/null && rdma link add rxe_cmp type rxe netdev "$netdev"; then
	rxe=rxe_cmp made_rxe=rxe_cmp
fi
if [ -n "$rxe" ]; then
	echo "--- $rxe (for comparison, not asserted)"
	timeout 120 "$work/keys" "$rxe" 0
	echo "$rxe: exit $?"
	[ -z "$made_rxe" ] || rdma link delete "$made_rxe"
else
	echo "note: no rxe device for comparison"
fi
rm -rf "$work"
[ "$rox_rc" = 0 ] || fail "rox_0: $rox_rc key checks failed"
echo "rox_0's memory keys carry a random key part; a wrong key part is refused"
