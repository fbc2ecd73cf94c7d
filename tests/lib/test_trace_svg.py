#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of trace_svg.py:  python3 -m unittest discover -s tests/lib -p 'test_*.py'"""
import os
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_svg  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def instant(pid, tid, ts, name, **args):
    return {"ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": ts, "name": name, "args": args}


# What rox-trace --json writes for one 2-packet WRITE from device 1 to device 2, QP 5 on both.
EVENTS = [
    {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "rox-a"}},
    {"ph": "M", "pid": 1, "tid": 5, "name": "thread_name", "args": {"name": "QP 0x5"}},
    {"ph": "M", "pid": 2, "tid": 0, "name": "process_name", "args": {"name": "rox-b"}},
    {"ph": "M", "pid": 2, "tid": 5, "name": "thread_name", "args": {"name": "QP 0x5"}},
    instant(1, 5, 10.0, "doorbell", pi=1), instant(1, 5, 11.0, "fetch", wr_id=7),
    instant(1, 5, 13.0, "frame out", psn=0, opcode="WRITE_FIRST"),
    instant(1, 5, 15.0, "frame out", psn=1, opcode="WRITE_LAST"),
    instant(2, 5, 40.0, "frame in", psn=0, opcode="WRITE_FIRST"),
    instant(2, 5, 42.0, "frame in", psn=1, opcode="WRITE_LAST"),
    instant(2, 5, 43.0, "frame out", psn=1, opcode="ACK"),
    instant(1, 5, 70.0, "frame in", psn=1, opcode="ACK"),
    instant(1, 5, 71.0, "response in", psn=1),
    instant(1, 5, 72.0, "cqe", wr_id=7),
    instant(1, 0, 73.0, "interrupt", vector=1),
    instant(1, 5, 500.0, "doorbell", pi=2),
    {"ph": "X", "pid": 1, "tid": 5, "ts": 10.0, "dur": 62.0, "name": "RDMA_WRITE 2048 B",
     "args": {"wr_id": 7, "stages": {"doorbell->fetch_us": 1.0, "fetch->first frame_us": 2.0,
                                     "last frame->ACK_us": 56.0, "ACK->CQE_us": 1.0,
                                     "CQE->interrupt_us": 1.0, "doorbell->CQE (total)_us": 62.0}}},
]


class TraceSvgTest(unittest.TestCase):
    def test_stages_follow_each_other_and_frames_out_is_the_rest(self):
        seg = trace_svg.stage_segments(EVENTS[-1])
        self.assertEqual([s[0] for s in seg], [n for n, _ in trace_svg.STAGES])
        self.assertEqual(seg[2], ("frames out", 13.0, 2.0))
        self.assertEqual(seg[3], ("last frame->ACK", 15.0, 56.0))
        self.assertEqual(seg[-1][1] + seg[-1][2], 72.0, "ends at the CQE")

    def test_window_around_a_wqe_leaves_later_records_out(self):
        lo, hi = trace_svg.window_of(EVENTS, wqe="RDMA_WRITE")
        self.assertEqual(lo, 10.0)
        self.assertTrue(73.0 <= hi < 500.0)
        self.assertEqual(trace_svg.window_of(EVENTS, wqe="RDMA_WRITE", nth=-1), (lo, hi))
        for nth in (2, 0, -2):
            with self.assertRaises(ValueError):
                trace_svg.window_of(EVENTS, wqe="RDMA_WRITE", nth=nth)

    def test_frames_join_their_receiver_by_psn_and_opcode(self):
        pairs = trace_svg.wire_lines(EVENTS, 0, 100)
        got = [(o["pid"], o["ts"], i["pid"], i["ts"]) for o, i in pairs]
        self.assertEqual(got, [(1, 13.0, 2, 40.0), (1, 15.0, 2, 42.0), (2, 43.0, 1, 70.0)])

    def test_render_has_a_track_per_qp_and_a_slice_per_stage(self):
        lo, hi = trace_svg.window_of(EVENTS, wqe="RDMA_WRITE")
        root = ET.fromstring(trace_svg.render(EVENTS, lo, hi, "one WRITE"))
        texts = [t.text for t in root.iter(f"{SVG}text")]
        for want in ("one WRITE", "rox-a QP 0x5", "rox-b QP 0x5", "RDMA_WRITE 2048 B (wr_id 0x7)"):
            self.assertIn(want, texts)
        titles = [t.text for t in root.iter(f"{SVG}title")]
        self.assertIn("RDMA_WRITE 2048 B: last frame->ACK 56.000 µs", titles)
        self.assertEqual(sum(1 for t in titles if t.startswith("RDMA_WRITE")), 5)
        # The doorbell at 500 µs is outside the window: 11 of the 12 records drawn.
        self.assertEqual(sum(1 for t in titles if " at " in t), 11)
        dashed = [ln for ln in root.iter(f"{SVG}line") if ln.get("stroke-dasharray")]
        self.assertEqual(len(dashed), 3)

    def test_empty_window_is_an_error(self):
        with self.assertRaises(ValueError):
            trace_svg.render(EVENTS, 1000.0, 2000.0, "nothing")


if __name__ == "__main__":
    unittest.main()
