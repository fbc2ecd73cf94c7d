#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of qps_hostcpu.py:  python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import io
import os
import subprocess
import sys
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qps_hostcpu  # noqa: E402

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 5: pass"


class SampleTest(unittest.TestCase):
    def test_the_labs_processes_below_the_shell_are_counted_by_guest(self):
        exe = os.readlink("/proc/self/exe")
        # A stand-in for guest 1's rox-nic: this interpreter, run/lab.N/g1/ on its command line, as the lab names it.
        child = subprocess.Popen([exe, "-c", BUSY, "/root/.cache/rox/run/lab.77/g1/rox0.sock"])
        try:
            time.sleep(0.3)
            first = qps_hostcpu.sample(exe, os.getpid())
            time.sleep(0.3)
            second = qps_hostcpu.sample(exe, os.getpid())
            self.assertEqual(sorted(first), ["nic1", "nicwait1"], "only the child: this process is not below itself")
            self.assertGreater(second["nic1"], first["nic1"])
            self.assertGreaterEqual(second["nicwait1"], first["nicwait1"])
            self.assertEqual(qps_hostcpu.sample(exe, child.pid), {}, "nothing below the child")
            self.assertEqual(qps_hostcpu.sample("/nonexistent/rox-nic", os.getpid()), {})
        finally:
            child.kill()
            child.wait()


class FilterTest(unittest.TestCase):
    def test_lines_pass_through_and_each_run_mark_adds_a_hostcpu_line(self):
        lab = "[g0] QPSSTART run=3 qps=16 base=0\n[g1] QPSRX run=3 qps=16\n[g0] QPS run=3 qps=16 bw_MiBps=1\n"
        out = io.StringIO()
        with mock.patch.object(sys, "stdin", io.StringIO(lab)), mock.patch.object(sys, "stdout", out), \
                mock.patch.object(qps_hostcpu, "sample", return_value={"nic0": 5, "qemu1": 7}):
            self.assertEqual(qps_hostcpu.main(["/bin/true"]), 0)
        lines = out.getvalue().splitlines()
        walls = [int(x.rsplit(" wall=", 1)[1]) for x in lines if x.startswith("HOSTCPU")]
        self.assertEqual(len(walls), 2)
        self.assertLessEqual(walls[0], walls[1])
        self.assertEqual([x.rsplit(" wall=", 1)[0] for x in lines], [
            "[g0] QPSSTART run=3 qps=16 base=0",
            "HOSTCPU run=3 at=start nic0=5 qemu1=7",
            "[g1] QPSRX run=3 qps=16",
            "[g0] QPS run=3 qps=16 bw_MiBps=1",
            "HOSTCPU run=3 at=end nic0=5 qemu1=7",
        ])


if __name__ == "__main__":
    unittest.main()
