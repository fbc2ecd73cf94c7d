#!/usr/bin/env python3
"""Unit tests of the host-side counters report of tests/interop (cases.counters_report) fed the
COUNTERS lines cases.run_step prints: python3 tests/interop/test_cases.py"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases  # noqa: E402
import compare_counters  # noqa: E402  (cases puts tests/bench on the path)


class CountersReport(unittest.TestCase):
    def test_each_step_lists_both_sides_under_its_label_in_step_order(self):
        lines = [
            compare_counters.line("31", "server", "rxe", "rxe0", {"duplicate_request": 3, "sent_pkts": 9}),
            compare_counters.line("30", "client", "rox", "rox_0", {"roce_adp_retrans": 2}),
            compare_counters.line("31", "client", "rox", "rox_0", {}),
            compare_counters.line("30", "server", "rxe", "rxe0", None),
        ]
        records = [compare_counters.parse("[guest 1] " + line) for line in lines]
        labels = {30: "RDMA READ | rox client -> rxe server", 31: "RDMA READ | rxe client -> rox server"}
        self.assertEqual(cases.counters_report(labels, records), [
            "  RDMA READ | rox client -> rxe server:",
            "    rox rox_0 (client): roce_adp_retrans=2",
            "    rxe rxe0 (server): unreadable",
            "  RDMA READ | rxe client -> rox server:",
            "    rox rox_0 (client): nothing moved",
            "    rxe rxe0 (server): duplicate_request=3 sent_pkts=9",
        ])

    def test_a_step_without_a_result_line_is_named_by_its_number(self):
        record = compare_counters.parse(compare_counters.line("7", "client", "rox", "rox_0", {"x": 1}))
        self.assertEqual(cases.counters_report({}, [record]), ["  step 7:", "    rox rox_0 (client): x=1"])


if __name__ == "__main__":
    unittest.main()
