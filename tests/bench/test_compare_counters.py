#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of compare_counters.py:  python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_counters  # noqa: E402


class MovedTest(unittest.TestCase):
    def test_only_changed_counters_with_their_difference(self):
        before = {"tx_packets": 100, "retransmits": 3, "rx_packets": 7, "naks_sent": 0}
        after = {"tx_packets": 16484, "retransmits": 19, "rx_packets": 7, "naks_sent": 0}
        self.assertEqual(compare_counters.moved(before, after), {"tx_packets": 16384, "retransmits": 16})

    def test_a_counter_missing_before_is_not_invented(self):
        self.assertEqual(compare_counters.moved({"a": 1}, {"a": 1, "b": 5}), {})


class LineTest(unittest.TestCase):
    def test_round_trip_through_the_guest_line(self):
        deltas = {"tx_packets": 16384, "retransmits": 16, "local_ack_timeout_err": 1}
        text = compare_counters.line("write_bw_65536", "rox", "client", "rox_0", deltas)
        self.assertEqual(text, "COUNTERS write_bw_65536 rox client rox_0 "
                               "tx_packets=16384 retransmits=16 local_ack_timeout_err=1")
        # As the host reads it from the lab's output, prefixed with the guest.
        r = compare_counters.parse("[g1] " + text + "\n")
        self.assertEqual(r, {"key": "write_bw_65536", "column": "rox", "side": "client",
                             "device": "rox_0", "moved": deltas})

    def test_nothing_moved_and_unreadable_differ(self):
        quiet = compare_counters.parse(compare_counters.line("k", "rox", "server", "rox_0", {}))
        self.assertEqual(quiet["moved"], {})
        lost = compare_counters.parse(compare_counters.line("k", "rox", "server", "rox_0", None))
        self.assertIsNone(lost["moved"])

    def test_other_lines_are_not_records(self):
        self.assertIsNone(compare_counters.parse("BENCH write_bw_65536 rox 586.12"))
        self.assertIsNone(compare_counters.parse("bench: [+3s] COUNTERS are read per step"))


class ReportTest(unittest.TestCase):
    def test_headline_counters_shown_with_zeros_then_the_rest(self):
        records = [
            {"key": "write_bw_1048576", "column": "rox", "side": "client", "device": "rox_0",
             "moved": {"wakeups": 40, "tx_packets": 131072, "retransmits": 16}},
            {"key": "write_bw_1048576", "column": "rox", "side": "server", "device": "rox_0",
             "moved": None},
        ]
        out = compare_counters.report(records)
        self.assertEqual(len(out), 3)
        client = out[1]
        self.assertIn("tx_packets=131072", client)
        self.assertIn("retransmits=16", client)
        self.assertIn("local_ack_timeout_err=0", client)
        self.assertIn("port_rx_gso_refused=0", client)
        # Headline first, in HEADLINE order; the others after.
        self.assertLess(client.index("tx_packets="), client.index("retransmits="))
        self.assertLess(client.index("rx_dropped="), client.index("wakeups=40"))
        self.assertIn("counters unreadable", out[2])

    def test_no_records_no_section(self):
        self.assertEqual(compare_counters.report([]), [])


if __name__ == "__main__":
    unittest.main()
