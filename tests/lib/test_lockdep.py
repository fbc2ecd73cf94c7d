"""lockdep.py's verdicts on the real nvmet-rdma report (guest-ulp-debug, 2026-11-26) and
variants of it."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lockdep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "testdata", "lockdep-nvmet-rdma.dmesg")) as f:
    NVMET_REPORT = f.read()
BEFORE = "[   40.100000] rox 0000:00:03.0: rox_0: port 1 ACTIVE\n"
AFTER = "[   47.000000] nvmet: adding nsid 1 to subsystem nqn.2026-11.dev.rox:ulp\n"


class Judge(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.state = os.path.join(self.dir.name, "state.json")

    def tearDown(self):
        self.dir.cleanup()

    def judge(self, text, debug_locks, where="case nvme", boot="boot-a", since=0):
        return lockdep.judge(text, debug_locks, where, self.state, boot, since)

    def test_the_known_report_passes_and_says_where_coverage_ended(self):
        ok, msgs = self.judge(BEFORE + NVMET_REPORT + AFTER, 0)
        self.assertTrue(ok, msgs)
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("known upstream report", msgs[0])
        self.assertIn("lockdep coverage ended at case nvme", msgs[0])

    def test_the_same_report_with_a_rox_frame_fails(self):
        text = NVMET_REPORT.replace("nvmet_rdma_execute_command+0x42/0xc0 [nvmet_rdma]",
                                    "rox_post_recv+0x42/0xc0 [rox]")
        self.assertNotEqual(text, NVMET_REPORT)
        ok, msgs = self.judge(text, 0)
        self.assertFalse(ok)
        self.assertTrue(any("names a [rox] frame" in m for m in msgs), msgs)
        # The failing report's own lines are printed with the verdict.
        self.assertTrue(any("nvmet_config_sem" in m for m in msgs[1:]), msgs)

    def test_a_report_on_another_lock_fails(self):
        text = NVMET_REPORT.replace("(nvmet_config_sem)", "(&dev->rox_qp_lock)")
        ok, msgs = self.judge(text, 0)
        self.assertFalse(ok)
        self.assertTrue(any("not a known upstream one" in m and "rox_qp_lock" in m
                            for m in msgs), msgs)

    def test_a_cut_off_report_fails(self):
        cut = "\n".join(NVMET_REPORT.splitlines()[:60]) + "\n"
        ok, msgs = self.judge(cut, 0)
        self.assertFalse(ok)
        self.assertTrue(any("incomplete" in m for m in msgs), msgs)

    def test_debug_locks_0_without_a_report_fails(self):
        ok, msgs = self.judge(BEFORE + AFTER, 0)
        self.assertFalse(ok)
        self.assertIn("debug_locks 0", msgs[0])

    def test_a_quiet_dmesg_with_lockdep_on_passes_silently(self):
        self.assertEqual(self.judge(BEFORE + AFTER, 1), (True, []))

    def test_interleaved_lines_of_another_cpu_are_judged_on_their_own(self):
        lines = NVMET_REPORT.splitlines()
        other = "[   46.461030] nvme nvme0: creating 2 I/O queues."
        for at in (5, 30, 70, 100):
            lines.insert(at, other)
        ok, msgs = self.judge("\n".join(lines) + "\n", 0)
        self.assertTrue(ok, msgs)
        report = lockdep.parse_reports(lines)[0]
        self.assertEqual(report.known is not None, True)
        self.assertFalse(any(lines[i] == other for i in report.lines))
        # ... and an interleaved complaint is not swallowed by the report around it.
        lines[30] = "[   46.461030] BUG: sleeping function called from invalid context at x.c:1"
        ok, msgs = self.judge("\n".join(lines) + "\n", 0)
        self.assertFalse(ok)
        self.assertTrue(any("sleeping function" in m for m in msgs), msgs)

    def test_the_report_is_remembered_after_dmesg_is_cleared(self):
        ok, _ = self.judge(NVMET_REPORT, 0, where="t-driver-kverbs.sh")
        self.assertTrue(ok)
        ok, msgs = self.judge(AFTER, 0, where="t-driver-odp.sh")
        self.assertTrue(ok, msgs)
        self.assertIn("off since t-driver-kverbs.sh", msgs[0])
        self.assertIn("nothing is proven here", msgs[0])

    def test_a_remembered_report_of_another_boot_explains_nothing(self):
        self.judge(NVMET_REPORT, 0, boot="boot-a")
        ok, msgs = self.judge(AFTER, 0, boot="boot-b")
        self.assertFalse(ok)
        self.assertIn("debug_locks 0", msgs[0])

    def test_only_lines_since_the_mark_are_judged_but_known_reports_anywhere_count(self):
        text = ("[   10.000000] WARNING: suspicious RCU usage\n" + NVMET_REPORT + AFTER)
        ok, msgs = self.judge(text, 0, since=1)
        self.assertTrue(ok, msgs)
        self.assertIn("lockdep coverage ended at case nvme", msgs[0])
        ok, msgs = self.judge(text, 0, since=0, where="case unload")
        self.assertFalse(ok)

    def test_a_known_report_before_the_mark_ended_coverage_before_this_case(self):
        text = NVMET_REPORT + AFTER
        ok, msgs = self.judge(text, 0, since=len(text.splitlines()) - 1)
        self.assertTrue(ok, msgs)
        self.assertIn("lockdep coverage ended before case nvme", msgs[0])

    def test_the_console_prefix_of_rox_lab_is_read_too(self):
        lines = ["[g0] " + l.split("] ", 1)[1] if "] " in l else "[g0]"
                 for l in NVMET_REPORT.splitlines()]
        ok, msgs = self.judge("\n".join(lines) + "\n", 0)
        self.assertTrue(ok, msgs)


if __name__ == "__main__":
    unittest.main()
