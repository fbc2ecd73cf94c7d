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
PYVERBS_SUITE=${PYVERBS_SUITE:-/usr/share/doc/rdma-core/tests}

grep -qx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] || skip "librox is not installed"
[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
grep -q '^rox ' /proc/modules && { rmmod rox || fail "cannot unload the rox.ko already loaded"; }
dmesg -C
insmod "$ROX_KO" || fail "insmod failed"
for _ in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
[ -e /sys/class/infiniband/rox_0 ] || fail "no rox_0"

suite=$(mktemp -d /tmp/rdma-tests.XXXXXX)
cp -r "$PYVERBS_SUITE/." "$suite/" && gunzip -f "$suite"/*.gz || fail "cannot unpack $PYVERBS_SUITE"
cat >"$suite/test_rox_odp.py" <<'EOF'
import os, re, subprocess, time
import pyverbs.enums as e
from pyverbs.wr import SGE
from pyverbs.mem_alloc import madvise, mmap, MAP_ANONYMOUS_, MAP_PRIVATE_
from pyverbs.mr import MR
import tests.base as base
import tests.test_odp as odp
import tests.utils as u

MSG = 16 << 20


class BigOdpRC(odp.OdpRC):
    # OdpRC sizes its MR before it knows msg_size: register MSG bytes of untouched memory.
    def create_mr(self):
        self.user_addr = mmap(length=MSG, flags=MAP_ANONYMOUS_ | MAP_PRIVATE_)
        self.mr = MR(self.pd, MSG, self.access, address=self.user_addr)


def page_faults(dev):
    out = subprocess.run(['rdma', 'statistic', 'show', 'link', dev + '/1'],
                         capture_output=True, text=True, check=True).stdout
    return int(re.search(r'page_faults (\d+)', out).group(1))


class RoxOdpTest(base.RDMATestCase):
    def create_players(self, resource, **resource_arg):
        super().create_players(resource, True, **resource_arg)

    def tearDown(self):
        for side in (self.server, self.client):
            if side and side.user_addr:
                odp.munmap(side.user_addr, MSG)
        super().tearDown()

    def test_big_read_from_untouched_region_faults_once(self):
        self.create_players(BigOdpRC, msg_size=MSG,
                            odp_caps=e.IBV_ODP_SUPPORT_READ)
        # The source's pages exist for the CPU only (the region was registered untouched).
        self.server.mr.write('s' * MSG, MSG)
        # The destination is made present first: only the source may fault.
        u.prefetch_mrs(self.client, [SGE(self.client.mr.buf, MSG, self.client.mr.lkey)])
        before = page_faults(self.dev_name)
        wr = u.get_send_elements(self.client, False, e.IBV_WR_RDMA_READ)[0]
        u.send(self.client, wr, e.IBV_WR_RDMA_READ)
        u.poll_cq(self.client.cq)
        faults = page_faults(self.dev_name) - before
        got = self.client.mem_read(MSG)
        got = got.encode() if isinstance(got, str) else bytes(got)
        self.assertEqual(got, b's' * MSG)
        self.assertLessEqual(faults, 2, f'{faults} page faults for one READ')

    def test_dereg_while_faulting(self):
        # A child reads from untouched regions and is killed mid-way, again and again: its
        # MRs are deregistered while the device's faults on them are being resolved.
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                try:
                    self.create_players(BigOdpRC, msg_size=MSG,
                                        odp_caps=e.IBV_ODP_SUPPORT_READ)
                    wr = u.get_send_elements(self.client, False, e.IBV_WR_RDMA_READ)[0]
                    while True:
                        u.send(self.client, wr, e.IBV_WR_RDMA_READ)
                        u.poll_cq(self.client.cq)
                        # The source leaves the device again (invalidation) and refaults.
                        madvise(self.server.mr.buf, MSG)
                finally:
                    os._exit(0)
            time.sleep(1.5)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
EOF
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
kmemleak=/sys/kernel/debug/kmemleak
if [ -w $kmemleak ]; then
	echo scan >$kmemleak; sleep 1; echo scan >$kmemleak
	grep -q "unreferenced object" $kmemleak && { head -40 $kmemleak; fail "kmemleak reports leaks"; }
fi
echo "ODP: one fault per READ; dereg during faults is clean"
