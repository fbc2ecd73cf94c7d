#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/bench/compare_plot.py — SVG charts of a tests/bench/compare JSON result: ib_write_bw
MB/s against message size, and ib_send_lat / ib_write_lat typical µs against message size, one
line per column (rox over the bridge, rdma_rxe, rxe -> rox, rox over the cable). A cell that
failed or was not measured is left out of its line (its neighbours still join).

    compare_plot.py RESULT.json [--dir DIR]   writes DIR/<stem>-write_bw.svg, -send_lat.svg and
                                              -write_lat.svg (DIR: beside RESULT.json); prints
                                              their paths

tests/bench/compare calls plot_files() after writing its JSON (--plot DIR, or beside --json).
"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import svgplot  # noqa: E402

COLUMN_NAMES = {"rox": "rox (bridge)", "rxe": "rdma_rxe (bridge)", "rox-rxe": "rxe -> rox",
                "cable": "rox (cable)"}
MODE_NAMES = {"pair": "two guests", "loopback": "one guest, same-device loopback",
              "dual": "one guest, two NICs of each"}
# chart name -> (row key pattern with the size as group 1, title, y label, log y axis)
CHARTS = {
    "write_bw": (r"write_bw_(\d+)", "ib_write_bw bandwidth", "MB/s (higher is better)", False),
    "send_lat": (r"send_lat_(\d+)", "ib_send_lat typical latency", "µs, log scale (lower is better)",
                 True),
    "write_lat": (r"write_lat_(\d+)", "ib_write_lat typical latency",
                  "µs, log scale (lower is better)", True),
}


def cell_value(values):
    """The median of a cell's rounds, or None when any round failed or none ran."""
    if not values or "FAIL" in values:
        return None
    return statistics.median(float(v) for v in values)


def chart_series(result, pattern):
    """{column name: [(size, value), ...]} of the rows whose key matches `pattern` exactly."""
    series = {}
    for col in result["columns"]:
        points = []
        for row in result["rows"]:
            m = re.fullmatch(pattern, row["key"])
            if m:
                v = cell_value(row["values"].get(col, []))
                if v is not None:
                    points.append((int(m.group(1)), v))
        if points:
            series[COLUMN_NAMES.get(col, col)] = sorted(points)
    return series


def charts(result):
    """{chart name: SVG text} for every chart the result has points for."""
    where = MODE_NAMES.get(result.get("mode"), result.get("mode", "?"))
    out = {}
    load = result.get("host_load", {})
    conditions = (f"{where}, {result.get('date', '?')}, host load {load.get('start', '?')} at start"
                  f" on {result.get('host_cores', '?')} cores")
    for name, (pattern, title, ylabel, logy) in CHARTS.items():
        series = chart_series(result, pattern)
        if series:
            out[name] = svgplot.line_chart(series, f"{title}, rox vs rdma_rxe", "message size (bytes)",
                                           ylabel, logx=True, logy=logy, subtitle=conditions)
    return out


def plot_files(result, directory, stem):
    """Writes each chart as DIRECTORY/STEM-<chart>.svg; returns the paths written."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, svg in charts(result).items():
        path = os.path.join(directory, f"{stem}-{name}.svg")
        with open(path, "w") as f:
            f.write(svg)
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", help="a JSON file written by tests/bench/compare --json")
    ap.add_argument("--dir", help="where the SVGs go (default: beside RESULT)")
    a = ap.parse_args()
    try:
        with open(a.result) as f:
            result = json.load(f)
        stem = os.path.splitext(os.path.basename(a.result))[0]
        paths = plot_files(result, a.dir or os.path.dirname(os.path.abspath(a.result)), stem)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"compare_plot: {a.result}: {e}")
    if not paths:
        sys.exit(f"compare_plot: {a.result} has no ib_write_bw or latency rows to plot")
    print("\n".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
