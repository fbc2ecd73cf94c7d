# ODP checks of tests/guest/t-driver-odp.sh, run as a module of rdma-core's pyverbs suite
# (copied into the unpacked suite: it uses tests.base).
import os, re, select, subprocess, time
import pyverbs.enums as e
from pyverbs.wr import SGE
from pyverbs.mem_alloc import madvise, mmap, MAP_ANONYMOUS_, MAP_PRIVATE_
from pyverbs.mr import MR
import tests.base as base
import tests.test_odp as odp
import tests.utils as u

MSG = 16 << 20
# How long a child may take to set up and post its first READ (a loaded TCG guest is slow).
READ_START_S = 300


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
        # MRs are deregistered while the device's faults on them are being resolved. The kill
        # comes once the child has posted its first READ (it says so through a pipe), however
        # long a loaded guest takes to get there, so it never lands before the faults begin.
        for _ in range(5):
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(ready_r)
                    self.create_players(BigOdpRC, msg_size=MSG,
                                        odp_caps=e.IBV_ODP_SUPPORT_READ)
                    wr = u.get_send_elements(self.client, False, e.IBV_WR_RDMA_READ)[0]
                    u.send(self.client, wr, e.IBV_WR_RDMA_READ)
                    os.write(ready_w, b'r')
                    while True:
                        u.poll_cq(self.client.cq)
                        # The source leaves the device again (invalidation) and refaults.
                        madvise(self.server.mr.buf, MSG)
                        u.send(self.client, wr, e.IBV_WR_RDMA_READ)
                except BaseException as ex:
                    # Before the READ was posted this fails the case (the parent sees no 'r');
                    # after it (a slow READ's poll timeout, say) the exit deregisters too.
                    print(f'child: {type(ex).__name__}: {ex}', flush=True)
                finally:
                    os._exit(0)
            os.close(ready_w)
            readable = select.select([ready_r], [], [], READ_START_S)[0]
            said = os.read(ready_r, 1) if readable else b''
            os.close(ready_r)
            if said != b'r':
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                self.fail('the child posted no READ' +
                          ('' if readable else f' within {READ_START_S} s'))
            time.sleep(0.5)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
