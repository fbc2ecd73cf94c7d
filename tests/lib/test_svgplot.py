#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of svgplot.py:  python3 -m unittest discover -s tests/lib -p 'test_*.py'"""
import math
import os
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svgplot  # noqa: E402

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(svg_text):
    return ET.fromstring(svg_text)


def texts(root):
    return [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]


def series_points(root, index):
    """The (x, y) pixel centres of series `index`'s markers, in drawing order."""
    group = root.find(f".//s:g[@id='series-{index}']", NS)
    return [(float(c.get("cx")), float(c.get("cy"))) for c in group.findall("s:circle", NS)]


class ScaleTest(unittest.TestCase):
    def test_linear_maps_ends_and_middle(self):
        s = svgplot.Scale(0, 100, 10, 210)
        self.assertEqual(s(0), 10)
        self.assertEqual(s(100), 210)
        self.assertEqual(s(25), 60)

    def test_log2_spaces_octaves_evenly(self):
        s = svgplot.Scale(1, 1024, 0, 100, log=True)
        self.assertAlmostEqual(s(32), 50)
        self.assertAlmostEqual(s(2) - s(1), s(1024) - s(512))

    def test_inverted_pixels_for_y(self):
        s = svgplot.Scale(0, 10, 300, 100)
        self.assertEqual(s(10), 100)
        self.assertEqual(s(0), 300)

    def test_log_refuses_zero(self):
        with self.assertRaises(ValueError):
            svgplot.Scale(0, 8, 0, 100, log=True)


class TicksTest(unittest.TestCase):
    def test_nice_ticks_cover_range_with_round_steps(self):
        t = svgplot.nice_ticks(0, 583)
        self.assertLessEqual(t[0], 0)
        self.assertGreaterEqual(t[-1], 583)
        self.assertLessEqual(len(t), 8)
        step = t[1] - t[0]
        self.assertIn(step / 10 ** math.floor(math.log10(step)), (1, 2, 5))

    def test_nice_ticks_of_one_value(self):
        t = svgplot.nice_ticks(5, 5)
        self.assertLessEqual(t[0], 5)
        self.assertGreater(t[-1], 5)

    def test_log2_ticks_bound_count(self):
        t = svgplot.log2_ticks(2, 4 << 20)
        self.assertEqual(t[0], 2)
        self.assertLessEqual(t[-1], 4 << 20)
        self.assertLessEqual(len(t), 10)
        self.assertTrue(all(math.log2(v).is_integer() for v in t))

    def test_format_size(self):
        self.assertEqual(svgplot.format_size(2), "2")
        self.assertEqual(svgplot.format_size(65536), "64K")
        self.assertEqual(svgplot.format_size(4 << 20), "4M")
        self.assertEqual(svgplot.format_size(1536), "1\u2009536")


class LineChartTest(unittest.TestCase):
    def chart(self, **kw):
        series = {"rox bridge": [(2, 10.0), (1024, 300.0), (4 << 20, 580.0)],
                  "rxe <&> bridge": [(2, 5.0), (4 << 20, 200.0)]}
        return svgplot.line_chart(series, "Bandwidth", "message size (B)", "MB/s", logx=True, **kw)

    def test_is_well_formed_svg_with_labels(self):
        root = parse(self.chart())
        self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
        labels = texts(root)
        for want in ("Bandwidth", "message size (B)", "MB/s", "rox bridge", "rxe <&> bridge",
                     "4M", "1K"):
            self.assertIn(want, labels)

    def test_points_land_on_their_scale(self):
        root = parse(self.chart())
        pts = series_points(root, 0)
        self.assertEqual(len(pts), 3)
        left, right = svgplot.MARGIN_LEFT, svgplot.WIDTH - svgplot.MARGIN_RIGHT
        bottom = svgplot.HEIGHT - svgplot.MARGIN_BOTTOM
        # x: the ticks span exactly 2 .. 4M (powers of two), so the ends are the plot's edges and
        # 1024 is 9 octaves of 21 from the left.
        self.assertAlmostEqual(pts[0][0], left, places=1)
        self.assertAlmostEqual(pts[2][0], right, places=1)
        self.assertAlmostEqual(pts[1][0], left + (right - left) * 9 / 21, places=1)
        # y: linear from 0, so larger values are higher (smaller pixel y) and y=0 is the bottom.
        self.assertGreater(pts[0][1], pts[1][1])
        self.assertGreater(pts[1][1], pts[2][1])
        top = svgplot.MARGIN_TOP
        yticks = svgplot.nice_ticks(0, 580)
        want = bottom - (300 - yticks[0]) / (yticks[-1] - yticks[0]) * (bottom - top)
        self.assertAlmostEqual(pts[1][1], want, places=1)

    def test_polyline_matches_markers(self):
        root = parse(self.chart())
        line = root.find(".//s:g[@id='series-1']/s:polyline", NS)
        self.assertEqual(line.get("data-series"), "rxe <&> bridge")
        coords = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
        for (a, b), (c, d) in zip(coords, series_points(root, 1)):
            self.assertAlmostEqual(a, c, places=1)
            self.assertAlmostEqual(b, d, places=1)

    def test_linear_x_and_single_point_series(self):
        root = parse(svgplot.line_chart({"one": [(3.0, 7.0)]}, "t", "s", "MB/s"))
        (px, py), = series_points(root, 0)
        self.assertTrue(svgplot.MARGIN_LEFT <= px <= svgplot.WIDTH - svgplot.MARGIN_RIGHT)
        self.assertIsNone(root.find(".//s:polyline", NS))

    def test_bad_input_is_refused(self):
        with self.assertRaises(ValueError):
            svgplot.line_chart({}, "t", "x", "y")
        with self.assertRaises(ValueError):
            svgplot.line_chart({"a": [(0, 1)]}, "t", "x", "y", logx=True)
        with self.assertRaises(ValueError):
            svgplot.line_chart({"a": [(1, float("nan"))]}, "t", "x", "y")


class SvgTest(unittest.TestCase):
    def test_text_is_escaped_and_rect_has_title(self):
        svg = svgplot.Svg(100, 50)
        svg.text(1, 2, "a<b & 'c'")
        svg.rect(0, 0, 10, 10, "#f00", title="WRITE <PSN 3>")
        root = parse(svg.render())
        self.assertIn("a<b & 'c'", texts(root))
        self.assertEqual(root.find(".//s:rect/s:title", NS).text, "WRITE <PSN 3>")


if __name__ == "__main__":
    unittest.main()
