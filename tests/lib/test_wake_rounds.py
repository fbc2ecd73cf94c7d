# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of wake_rounds.judge (python3 -m unittest discover -s tests/lib)."""
import unittest

from wake_rounds import LOST, NAMES, OTHER, WOKE, judge

BEFORE = {k: 100 for k in NAMES}


def after(**delta):
    return {k: 100 + delta.get(k, 0) for k in NAMES}


class Judge(unittest.TestCase):
    def test_a_trapped_or_posted_wake_counts(self):
        self.assertEqual(judge(BEFORE, after(wakes_trapped=1, wakeups_driver=1))[0], WOKE)
        self.assertEqual(judge(BEFORE, after(wakes_posted=1, wakeups_wire=3))[0], WOKE)

    def test_no_wake_with_a_frame_or_timer_in_the_window_is_not_counted(self):
        verdict, reason = judge(BEFORE, after(wakeups_wire=1, wakeups_driver=1))
        self.assertEqual(verdict, OTHER)
        self.assertIn("1 by a frame", reason)
        self.assertEqual(judge(BEFORE, after(wakeups_timer=2))[0], OTHER)

    def test_no_wake_and_no_frame_or_timer_is_a_lost_wake_whatever_the_driver_did(self):
        # The counter readings are admin commands: driver wake-ups excuse nothing.
        for driver in (0, 1, 6):
            verdict, reason = judge(BEFORE, after(wakeups_driver=driver))
            self.assertEqual(verdict, LOST, reason)
            self.assertIn("wakes_trapped +0", reason)


if __name__ == "__main__":
    unittest.main()
