#!/bin/bash
# rox.ko answers bad input from user space with an errno, never an oops or a leak (guest; skips
# without a rox-nic). A small C program talks to /dev/infiniband/uverbsN of rox_0 through the
# raw uverbs write() ABI (<rdma/ib_user_verbs.h>), bypassing librox's own checks, so every
# case reaches the driver: udata of the wrong size, zero/oversized queues, unaligned or
# unmapped rings, MRs over unmapped memory, on-demand paging MRs (unmapped memory is fine, no
# implicit or huge-page regions; ibv_advise_mr through pyverbs), bad handles, invalid QP transitions, bad port/pkey,
# bad SRQ limits and resizes (bad handles are ib_core's: ENOENT), and the destination MAC
# create_ah hands back (udata::CreateAhResp). The C program is negative.c, the advise_mr
# cases negative_advise_mr.py (without pyverbs: SKIP, a failure in strict runs). Then the
# objects are destroyed by closing the file, rox.ko is unloaded, dmesg must hold no warning
# and, on debug kernels, kmemleak no leak.
set -u
# Leave no rox.ko behind for the next test, whatever happens here.
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -20; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f   # uapi/src/regs.rs PCI_VENDOR_ID
. "$(dirname "$0")/lib.sh"

grep -qx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
command -v gcc >/dev/null || skip "no C compiler in the guest"
if ! grep -q '^rox ' /proc/modules; then
	[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
	insmod "$ROX_KO" || fail "insmod failed"
fi
for _ in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
uverbs=$(ls /sys/class/infiniband/rox_0/device/infiniband_verbs/ 2>/dev/null | head -1)
[ -n "$uverbs" ] || fail "rox_0 has no uverbs device"

# The udata structs as uapi defines them (tests/guest/run generates the header on the host).
uapi_header=$(realpath "$(dirname "$0")/../../target/rox-uapi.h")
[ -f "$uapi_header" ] || fail "$uapi_header missing: tests/guest/run generates it (cargo run -p rox-uapi --bin rox-uapi-header)"
work=$(mktemp -d /tmp/rox-negative.XXXXXX)
gcc -O1 -Wall -Wextra -Werror -I "$(dirname "$uapi_header")" -o "$work/negative" "$(dirname "$0")/negative.c" ||
	fail "cannot compile the negative test"
dmesg -C
kmemleak_clear
# ib_core's own objects on rox_0 (ib_mad's PD, CQ and QP1) stay; ours must all go.
before=$(rdma res show rox_0 | sed 's/^[0-9]*: //')
# GID 0 of rox_0 (the paired netdev's link-local address) and that netdev's MAC.
gid0=$(cat /sys/class/infiniband/rox_0/ports/1/gids/0)
ndev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0)
"$work/negative" "/dev/infiniband/$uverbs" "$gid0" "$(cat "/sys/class/net/$ndev/address")" || fail "some bad input got the wrong answer"
# No wait needed: the exiting process releases its uverbs file (and with it every object) in
# its own exit path, before the shell sees it exit.
after=$(rdma res show rox_0 | sed 's/^[0-9]*: //')
echo "objects before: $before"
echo "objects after:  $after"
[ "$after" = "$before" ] || fail "objects left after close"

# ibv_advise_mr (an ioctl, so through libibverbs/librox): prefetching on-demand regions.
if python3 -c 'import pyverbs' 2>/dev/null; then
	python3 "$(dirname "$0")/negative_advise_mr.py" || fail "ibv_advise_mr got the wrong answer"
else
	echo "SKIP: no pyverbs in the guest: the 8 ibv_advise_mr cases did not run"
fi
rmmod rox || fail "rmmod failed"
dmesg | grep -E 'BUG:|Oops|WARNING:|kmemleak' && fail "kernel complained"
kmemleak_check
lockdep_check
echo "rox.ko rejected every bad input with the expected errno and cleaned up"
