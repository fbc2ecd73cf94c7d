#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of compare_plot.py:  python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import os
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_plot  # noqa: E402

NS = {"s": "http://www.w3.org/2000/svg"}
RESULT = {
    "mode": "pair", "date": "2026-11-26 16:00:00 UTC", "columns": ["rox", "rxe", "cable"],
    "rows": [
        {"key": "rc_pingpong_4096_us", "values": {"rox": ["100"], "rxe": ["200"], "cable": ["90"]}},
        {"key": "write_bw_65536", "values": {"rox": ["500", "520", "510"], "rxe": ["200"],
                                             "cable": ["900"]}},
        {"key": "write_bw_4096", "values": {"rox": ["300"], "rxe": ["FAIL"], "cable": ["400"]}},
        {"key": "write_bw_4194304", "values": {"rox": ["590"], "rxe": ["230"], "cable": []}},
        {"key": "send_lat_2", "values": {"rox": ["150"], "rxe": ["300"], "cable": ["120"]}},
        {"key": "send_lat_2_min", "values": {"rox": ["100"], "rxe": ["250"], "cable": ["80"]}},
    ],
}


class ChartSeriesTest(unittest.TestCase):
    def test_bandwidth_points_sorted_by_size_with_medians(self):
        s = compare_plot.chart_series(RESULT, compare_plot.CHARTS["write_bw"][0])
        self.assertEqual(s["rox (bridge)"], [(4096, 300.0), (65536, 510.0), (4194304, 590.0)])
        # A failed cell and an empty one are left out, not drawn as zero.
        self.assertEqual(s["rdma_rxe (bridge)"], [(65536, 200.0), (4194304, 230.0)])
        self.assertEqual(s["rox (cable)"], [(4096, 400.0), (65536, 900.0)])

    def test_latency_takes_typical_not_minimum(self):
        s = compare_plot.chart_series(RESULT, compare_plot.CHARTS["send_lat"][0])
        self.assertEqual(s["rox (bridge)"], [(2, 150.0)])

    def test_files_are_svg_and_only_charts_with_points(self):
        with tempfile.TemporaryDirectory() as d:
            paths = compare_plot.plot_files(RESULT, d, "run")
            self.assertEqual(sorted(os.path.basename(p) for p in paths),
                             ["run-send_lat.svg", "run-write_bw.svg"])
            root = ET.parse(os.path.join(d, "run-write_bw.svg")).getroot()
            labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
            self.assertIn("rox (cable)", labels)
            self.assertIn("4M", labels)
            self.assertEqual(len(root.findall(".//s:g[@id='series-0']/s:circle", NS)), 3)


if __name__ == "__main__":
    unittest.main()
