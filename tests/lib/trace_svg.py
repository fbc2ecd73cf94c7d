#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/lib/trace_svg.py — a WQE trace as an SVG timeline, for docs and for a quick look
without Perfetto: one track per QP of each device (and a device track for EQEs and
interrupts), one slice per WQE split into its stages, a tick per record, and a line per frame
from the device that sent it to the device that took it in.

    trace_svg.py TRACE.json -o OUT.svg [--wqe TEXT [--nth K]] [--from US --to US] [--title T]

TRACE.json is what `rox-trace DUMP... --json TRACE.json` writes (Chrome trace-event JSON; the
slices carry each stage's µs in args.stages). --wqe draws the time around the K-th (from 1)
WQE whose name contains TEXT (e.g. RDMA_WRITE; K=-1: the last); --from/--to a window in the JSON's µs; else
everything. Drawn with tests/lib/svgplot.py's primitives; tested by test_trace_svg.py.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svgplot  # noqa: E402

# A slice's stages in the order they happen; "frames out" (first frame to last frame) is what
# is left of the total once the others are taken, as lives.rs measures them.
STAGES = [("doorbell->fetch", "#8c564b"), ("fetch->first frame", "#e08e0b"),
          ("frames out", "#2e8b57"), ("last frame->ACK", "#d1495b"), ("ACK->CQE", "#1f4e9c")]
TOTAL = "doorbell->CQE (total)"
RECORD_COLOURS = {"doorbell": "#8c564b", "fetch": "#e08e0b", "psns": "#bcbd22",
                  "frame out": "#2e8b57", "frame in": "#00798c", "response in": "#d1495b",
                  "retransmit": "#000000", "cqe": "#1f4e9c", "eqe": "#6a3d9a",
                  "interrupt": "#6a3d9a"}
LABEL_W, RIGHT, TOP, TRACK_H, AXIS_H = 170, 24, 76, 64, 46
BAR_Y, BAR_H, TICK_Y, TICK_H = 10, 20, 38, 14


def load(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ValueError("no traceEvents list")
    return events


def stage_segments(event):
    """[(stage name, start µs, length µs)] of a WQE slice, in order; [] when it has no stages."""
    st = event.get("args", {}).get("stages", {})
    total = st.get(f"{TOTAL}_us")
    if total is None:
        return []
    lengths = {name: st.get(f"{name}_us", 0.0) for name, _ in STAGES}
    known = sum(v for k, v in lengths.items() if k != "frames out")
    lengths["frames out"] = max(0.0, total - known)
    out, t = [], event["ts"]
    for name, _ in STAGES:
        out.append((name, t, lengths[name]))
        t += lengths[name]
    return out


def window_of(events, wqe=None, nth=1, start=None, end=None):
    """(from µs, to µs) to draw: around a chosen WQE, the given bounds, or everything."""
    if wqe is not None:
        slices = sorted((e for e in events if e.get("ph") == "X" and wqe in e.get("name", "")),
                        key=lambda e: e["ts"])
        if nth == 0 or len(slices) < abs(nth):
            raise ValueError(f"{len(slices)} WQEs named like {wqe!r}, asked for number {nth}")
        s = slices[nth - 1 if nth > 0 else nth]
        # From its doorbell; past its CQE a little, for the EQE and interrupt that follow.
        return s["ts"], s["ts"] + s["dur"] * 1.08 + 0.5
    times = [e["ts"] + e.get("dur", 0) for e in events if "ts" in e] + \
            [e["ts"] for e in events if "ts" in e]
    if not times:
        raise ValueError("no timed events")
    return (min(times) if start is None else start), (max(times) if end is None else end)


def tracks_in(events, lo, hi):
    """[(pid, tid, label)] of the tracks with something in [lo, hi], devices then QPs in order."""
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[(e["name"], e["pid"], e.get("tid", 0))] = e["args"]["name"]
    used = set()
    for e in events:
        if e.get("ph") in ("X", "i") and e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo:
            used.add((e["pid"], e["tid"]))
    out = []
    for pid, tid in sorted(used):
        dev = names.get(("process_name", pid, 0), f"device {pid}")
        track = names.get(("thread_name", pid, tid), f"QP {tid:#x}")
        out.append((pid, tid, f"{dev} {track}"))
    return out


def wire_lines(events, lo, hi):
    """[(out event, in event)]: each frame out matched to the next frame in on another device
    with the same PSN and opcode."""
    ins = sorted((e for e in events if e.get("name") == "frame in"), key=lambda e: e["ts"])
    pairs, taken = [], set()
    for out in sorted((e for e in events if e.get("name") == "frame out"), key=lambda e: e["ts"]):
        if not lo <= out["ts"] <= hi:
            continue
        for i, e in enumerate(ins):
            if (i not in taken and e["pid"] != out["pid"] and e["ts"] >= out["ts"]
                    and e["args"].get("psn") == out["args"].get("psn")
                    and e["args"].get("opcode") == out["args"].get("opcode")):
                taken.add(i)
                pairs.append((out, e))
                break
    return pairs


def describe(e):
    args = ", ".join(f"{k}={v}" for k, v in e.get("args", {}).items() if k != "stages" and v is not None)
    return f"{e['name']} at {e['ts']:.3f} µs" + (f": {args}" if args else "")


def render(events, lo, hi, title, width=980, subtitle=None):
    """The SVG text of the events in [lo, hi] µs; `subtitle` a smaller line under the title."""
    tracks = tracks_in(events, lo, hi)
    if not tracks:
        raise ValueError(f"nothing recorded between {lo:.3f} and {hi:.3f} µs")
    row = {(pid, tid): i for i, (pid, tid, _) in enumerate(tracks)}
    height = TOP + TRACK_H * len(tracks) + AXIS_H + 24
    left, right = LABEL_W, width - RIGHT
    ticks = [t for t in svgplot.nice_ticks(0, hi - lo, most=10) if t <= hi - lo]
    sx = svgplot.Scale(lo, hi, left, right)
    svg = svgplot.Svg(width, height)
    svg.text(width / 2, 20, title, size=15, anchor="middle", weight="bold")
    if subtitle:
        svg.text(width / 2, 34, subtitle, size=11, anchor="middle", fill="#555")
    _legend(svg, left)
    bottom = TOP + TRACK_H * len(tracks)
    for t in ticks:
        x = sx(lo + t)
        svg.line(x, TOP, x, bottom, stroke="#eeeeee")
        svg.text(x, bottom + 16, svgplot.format_number(t), size=11, anchor="middle")
    svg.line(left, bottom, right, bottom, stroke="#444")
    svg.text((left + right) / 2, bottom + 36, f"µs from {lo:.3f} µs of the trace", size=12,
             anchor="middle")
    for i, (_, _, label) in enumerate(tracks):
        y = TOP + TRACK_H * i
        svg.rect(0, y, width, TRACK_H, fill="#f7f7f7" if i % 2 else "#ffffff")
        svg.text(left - 8, y + TRACK_H / 2 + 4, label, size=12, anchor="end")
    for out, into in wire_lines(events, lo, hi):
        a, b = row.get((out["pid"], out["tid"])), row.get((into["pid"], into["tid"]))
        if a is not None and b is not None and into["ts"] <= hi:
            ya = TOP + TRACK_H * a + TICK_Y + (TICK_H if b > a else 0)
            yb = TOP + TRACK_H * b + TICK_Y + (0 if b > a else TICK_H)
            svg.line(sx(out["ts"]), ya, sx(into["ts"]), yb, stroke="#9a9a9a", width=0.8,
                     stroke_dasharray="3 2")
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if key not in row or e.get("ph") not in ("X", "i"):
            continue
        y = TOP + TRACK_H * row[key]
        if e["ph"] == "X" and e["ts"] <= hi and e["ts"] + e["dur"] >= lo:
            _slice(svg, sx, e, y, lo, hi)
        elif e["ph"] == "i" and lo <= e["ts"] <= hi:
            x = sx(e["ts"])
            svg.rect(x - 0.75, y + TICK_Y, 1.5, TICK_H, RECORD_COLOURS.get(e["name"], "#555"),
                     title=describe(e))
    return svg.render()


def _slice(svg, sx, e, y, lo, hi):
    colours = dict(STAGES)
    segments = stage_segments(e) or [("WQE", e["ts"], e["dur"])]
    for name, start, length in segments:
        a, b = max(lo, start), min(hi, start + length)
        if b <= a:
            continue
        x, w = sx(a), max(0.6, sx(b) - sx(a))
        svg.rect(x, y + BAR_Y, w, BAR_H, colours.get(name, "#999"),
                 title=f"{e['name']}: {name} {length:.3f} µs")
        text = f"{length:.1f}"
        if w > 7 * len(text) + 6:
            svg.text(x + w / 2, y + BAR_Y + 14, text, size=10, anchor="middle", fill="#fff")
    x0 = sx(max(lo, e["ts"]))
    wr_id = e["args"].get("wr_id")
    svg.text(x0, y + BAR_Y - 2, e["name"] + (f" (wr_id {wr_id:#x})" if isinstance(wr_id, int) else ""),
             size=10)


def _legend(svg, left):
    x = left
    for name, colour in STAGES:
        svg.rect(x, 40, 12, 12, colour)
        svg.text(x + 16, 50, name, size=11)
        x += 30 + 6.5 * len(name)
    x = left
    for name in ("doorbell", "fetch", "frame out", "frame in", "response in", "cqe", "interrupt"):
        svg.rect(x, 56, 2, 12, RECORD_COLOURS[name])
        svg.text(x + 6, 66, name, size=11)
        x += 18 + 6.5 * len(name)
    svg.text(x + 4, 66, "- - frame on the wire", size=11, fill="#777")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="Chrome trace-event JSON from rox-trace --json")
    ap.add_argument("-o", "--output", required=True, help="the SVG file to write")
    ap.add_argument("--wqe", help="draw around the WQE whose name contains this")
    ap.add_argument("--nth", type=int, default=1, help="with --wqe: which one in time order, from 1; -1 the last (1)")
    ap.add_argument("--from", dest="start", type=float, help="window start, µs of the trace")
    ap.add_argument("--to", dest="end", type=float, help="window end, µs of the trace")
    ap.add_argument("--title", default="WQE trace (rox-nic)")
    ap.add_argument("--subtitle", help="a smaller line under the title (conditions)")
    a = ap.parse_args()
    try:
        events = load(a.trace)
        lo, hi = window_of(events, a.wqe, a.nth, a.start, a.end)
        svg = render(events, lo, hi, a.title, subtitle=a.subtitle)
        with open(a.output, "w") as f:
            f.write(svg)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"trace_svg: {a.trace}: {e}")
    print(f"trace_svg: wrote {a.output} ({lo:.3f} to {hi:.3f} µs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
