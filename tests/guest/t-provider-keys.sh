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
gcc -O1 -Wall -Wextra -Werror -I"$(dirname "$0")" -o "$work/keys" "$(dirname "$0")/keys.c" -libverbs || fail "cannot compile the test program"

run_on_rox_0_and_rxe "$work/keys"
rm -rf "$work"
[ "$rox_rc" = 0 ] || fail "rox_0: $rox_rc key checks failed"
echo "rox_0's memory keys carry a random key part; a wrong key part is refused"
