#!/bin/bash
# Send-only and receive-only QPs (guest; skips without a rox device): for RC, UC and UD,
# ibv_create_qp with max_recv_wr = 0 (send-only) and with max_send_wr = 0 (receive-only)
# succeeds and reports 0 for that queue (ibv_create_qp and ibv_query_qp); posting to the
# zero-depth queue fails with ENOMEM; a SEND from the send-only QP to the receive-only QP (same
# device, GID 0) completes on both sides. Runs on rox_0 (must pass) and, for comparison, on
# an rdma_rxe device on rox_0's netdev (printed only).
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
command -v gcc >/dev/null || skip "no C compiler in the guest"

work=$(mktemp -d /tmp/rox-qp-depth.XXXXXX)
gcc -O1 -Wall -Wextra -Werror -I"$(dirname "$0")" -o "$work/qp-depth" "$(dirname "$0")/qp-depth.c" -libverbs || fail "cannot compile the test program"

run_on_rox_0_and_rxe "$work/qp-depth"
rm -rf "$work"
[ "$rox_rc" = 0 ] || fail "rox_0: $rox_rc send-only/receive-only QP checks failed"
echo "send-only and receive-only RC/UC/UD QPs work on rox_0"
