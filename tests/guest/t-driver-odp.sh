#!/bin/bash
# On-demand paging through rox.ko (guest; skips without a rox-nic or librox):
#  1. one RDMA READ of 16 MiB from an on-demand region whose pages the device has never had
#     is resolved by (at most) a couple of page faults: the device's fault event names the
#     pages the READ needs and the driver maps them all (in ODP_MAX_UPDATE_PAGES chunks, each
#     an admin command whose completion event lands on EQ 0 while the fault is handled) —
#     16 pages per fault would take 256 faults (and RNR retries);
#  2. deregistering on-demand MRs and closing the device while faults are being resolved
#     (processes killed mid-READ, then rmmod) leaves no oops, warning or leak report.
set -u
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -30; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f   # uapi/src/regs.rs PCI_VENDOR_ID
. "$(dirname "$0")/lib.sh"
PYVERBS_SUITE=${PYVERBS_SUITE:-/usr/share/doc/rdma-core/tests}

grep -qx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] || skip "librox is not installed"
[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
grep -q '^rox ' /proc/modules && { rmmod rox || fail "cannot unload the rox.ko already loaded"; }
dmesg -C
kmemleak_clear
insmod "$ROX_KO" || fail "insmod failed"
for _ in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
[ -e /sys/class/infiniband/rox_0 ] || fail "no rox_0"

suite=$(mktemp -d /tmp/rdma-tests.XXXXXX)
cp -r "$PYVERBS_SUITE/." "$suite/" && gunzip -f "$suite"/*.gz || fail "cannot unpack $PYVERBS_SUITE"
# The checks (tests/guest/test_rox_odp.py) run inside the suite: they use its tests.base.
cp "$(dirname "$0")/test_rox_odp.py" "$suite/" || fail "cannot copy test_rox_odp.py into the suite"
timeout 600 python3 -B "$suite/run_tests.py" --dev rox_0 -v -k tests.test_rox_odp. >/tmp/rox-odp.log 2>&1
rc=$?
cat /tmp/rox-odp.log | tail -20
[ $rc = 0 ] || fail "pyverbs ODP checks failed"
grep -q "Ran 2 tests" /tmp/rox-odp.log || fail "the ODP checks did not run"
grep -qi "skipped" /tmp/rox-odp.log && fail "an ODP check was skipped"
rmmod rox || fail "rmmod after the ODP checks failed"
if dmesg | grep -E "BUG|WARNING|Oops|general protection|KASAN|use-after-free"; then
	fail "kernel complained"
fi
kmemleak_check
lockdep_check
echo "ODP: one fault per READ; dereg during faults is clean"
