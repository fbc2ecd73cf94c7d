#!/bin/bash
# An RDMA WRITE that overruns its target MR fails with IBV_WC_REM_ACCESS_ERR and writes not one
# byte (guest; skips without a rox device). A small C program (built here with gcc) connects
# two RC QPs of one device (loopback over GID 0) and WRITEs 8001 bytes into an 8000-byte MR,
# 65537 into 65536, and 5000 bytes starting 4000 bytes into an 8000-byte MR, each MR in the
# middle of a known pattern; after the completion the whole area must be byte-for-byte
# unchanged (the responder checks the whole RETH range on the first packet, as the IBA and
# rxe's check_rkey do). Runs on rox_0 (must pass) and on rxe0 in the same guest (printed).
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
command -v gcc >/dev/null || fail "no C compiler in the root (gcc and libibverbs-dev are part of it)"

work=$(mktemp -d /tmp/rox-write-bounds.XXXXXX)
trap 'rm -rf "$work"; [ -e /sys/class/infiniband/rxe0 ] && rdma link delete rxe0' EXIT
gcc -O1 -Wall -Wextra -Werror -o "$work/write_bounds" "$(dirname "$0")/write-bounds.c" -libverbs ||
	fail "cannot compile the write-bounds program"

netdev=$(ip -o link show | awk -F': ' '$2 != "lo" { print $2; exit }')
modprobe rdma_rxe && { rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$netdev"; } ||
	echo "note: no rxe0 for comparison (rdma_rxe on $netdev failed)"
if [ -e /sys/class/infiniband/rxe0 ]; then
	echo "--- rxe0 (for comparison, not judged)"
	timeout 300 "$work/write_bounds" rxe0
	echo "rxe0 exit status $?"
fi
echo "--- rox_0"
timeout 300 "$work/write_bounds" rox_0
rc=$?
[ $rc = 0 ] || fail "rox_0: an overrunning WRITE did not fail cleanly (exit $rc)"
echo "PASS: rox_0 overrunning WRITEs fail with REM_ACCESS_ERR and write nothing"
