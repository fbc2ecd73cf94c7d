# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Tests of trace_breakdown.py on a made-up trace whose every stage is known."""
import math
import os
import sys
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_breakdown as tb  # noqa: E402

CLIENT, SERVER, QP = 1, 2, 3


def meta(pid, name):
    return {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}


def rec(pid, ts, name, tid=QP, **args):
    return {"ph": "i", "pid": pid, "tid": tid, "ts": ts, "name": name, "args": args}


def send(pid, ts, psn):
    return {"ph": "X", "pid": pid, "tid": QP, "ts": ts, "dur": 1.0, "name": "SEND 2 B",
            "args": {"first_psn": psn, "psns": 1,
                     "stages": {"doorbell->fetch_us": 0.1, "fetch->first frame_us": 0.4}}}


def send_lat_events(iterations=3):
    """Client SEND, 60 µs across, server CQE, a guest gap of 180 µs of which the server's last
    nap covered 21, its reply 58 µs back, then the client's next doorbell at +1000."""
    ev = [meta(CLIENT, "client"), meta(SERVER, "server")]
    for i in range(iterations):
        b, p, q = 1000.0 * i, 100 + i, 500 + i
        ev += [send(CLIENT, b, p), rec(CLIENT, b, "doorbell"),
               rec(CLIENT, b + 0.5, "frame out", psn=p, opcode="SEND_ONLY"),
               rec(SERVER, b + 60.5, "frame in", psn=p, opcode="SEND_ONLY"),
               rec(SERVER, b + 61, "cqe", recv=True),
               rec(SERVER, b + 62, "frame out", psn=p, opcode="ACK"),
               rec(CLIENT, b + 130, "frame in", psn=p, opcode="ACK"),
               rec(CLIENT, b + 130.1, "response in", psn=p, opcode="ACK"),
               rec(CLIENT, b + 130.3, "cqe", recv=False),
               rec(SERVER, b + 150, "wait", tid=0, waited_us=5),
               rec(SERVER, b + 240, "wait", tid=0, waited_us=20),
               send(SERVER, b + 241, q), rec(SERVER, b + 241, "doorbell"),
               rec(SERVER, b + 242, "frame out", psn=q, opcode="SEND_ONLY"),
               rec(CLIENT, b + 300, "frame in", psn=q, opcode="SEND_ONLY"),
               rec(CLIENT, b + 301, "cqe", recv=True),
               rec(CLIENT, b + 302, "frame out", psn=q, opcode="ACK")]
    return ev


def write_events():
    ts = 5000.0
    return [meta(CLIENT, "client"), meta(SERVER, "server"),
            {"ph": "X", "pid": CLIENT, "tid": QP, "ts": ts, "dur": 200.0, "name": "RDMA_WRITE 8192 B",
             "args": {"first_psn": 10, "psns": 2, "frames": 2, "retransmits": 0,
                      "stages": {"doorbell->fetch_us": 0.2, "fetch->first frame_us": 0.8,
                                 "last frame->ACK_us": 188.7, "ACK->CQE_us": 0.3,
                                 "doorbell->CQE (total)_us": 200.0}}},
            rec(CLIENT, ts + 1, "frame out", psn=10, opcode="WRITE_FIRST"),
            rec(CLIENT, ts + 11, "frame out", psn=11, opcode="WRITE_LAST"),
            rec(SERVER, ts + 50, "frame in", psn=10, opcode="WRITE_FIRST"),
            rec(SERVER, ts + 70, "frame in", psn=11, opcode="WRITE_LAST"),
            rec(SERVER, ts + 71, "frame out", psn=11, opcode="ACK"),
            rec(CLIENT, ts + 199.5, "frame in", psn=11, opcode="ACK"),
            rec(SERVER, ts + 399, "wait", tid=0, waited_us=100),
            {"ph": "X", "pid": SERVER, "tid": QP, "ts": ts + 400, "dur": 1.0, "name": "RDMA_WRITE 8192 B",
             "args": {"first_psn": 90, "psns": 2, "stages": {}}}]


class SendLat(unittest.TestCase):
    def test_every_stage_of_an_iteration_and_the_nap_split(self):
        rows, wakes = tb.send_lat_iterations(tb.Trace(send_lat_events()), "client")
        self.assertEqual(len(rows), 2, "the last iteration has no next doorbell")
        self.assertEqual(wakes, 0)
        r = rows[0]
        want = {"client: doorbell -> SEND out": 0.5, "bridge client -> server": 60.0,
                "server: frame in -> recv CQE": 0.5, "server: device nap (at most)": 21.0,
                "server: guest (poll, post reply)": 159.0, "server: doorbell -> SEND out": 1.0,
                "bridge server -> client": 58.0, "client: frame in -> recv CQE": 1.0,
                "client: device nap (at most)": 0.0, "client: guest (poll, post next)": 699.0,
                "round trip": 1000.0, "ACK: bridge back": 68.1, "ACK: in -> send CQE": 0.2}
        for k, v in want.items():
            self.assertAlmostEqual(r[k], v, places=6, msg=k)
        self.assertAlmostEqual(sum(r[n] for n, _ in tb.SEND_STAGES), r["round trip"], places=6)

    def test_a_wake_register_write_before_the_doorbell_is_counted(self):
        for wake_at, nap in ((230.0, 11.0), (240.5, 0.5)):
            ev = send_lat_events(2)
            ev.append(rec(SERVER, wake_at, "wake", tid=0))
            rows, wakes = tb.send_lat_iterations(tb.Trace(ev), "client")
            self.assertEqual(wakes, 1)
            # The device's share runs from the wake-register write to the doorbell noticed.
            self.assertAlmostEqual(rows[0]["server: device nap (at most)"], nap)
            self.assertAlmostEqual(rows[0]["server: guest (poll, post reply)"], 180.0 - nap)

    def test_a_device_that_worked_after_its_last_wait_had_no_nap(self):
        ev = send_lat_events(2)
        ev.append(rec(SERVER, 240.5, "frame in", tid=7, psn=1, opcode="ACK"))
        rows, _ = tb.send_lat_iterations(tb.Trace(ev), "client")
        self.assertEqual(rows[0]["server: device nap (at most)"], 0.0)
        self.assertAlmostEqual(rows[0]["server: guest (poll, post reply)"], 180.0)

    def test_an_unknown_client_name_is_an_error(self):
        with self.assertRaises(ValueError):
            tb.send_lat_iterations(tb.Trace(send_lat_events()), "nobody")


class Write(unittest.TestCase):
    def test_the_write_stages_across_both_devices(self):
        rows = tb.write_iterations(tb.Trace(write_events()), 8192)
        self.assertEqual(len(rows), 1, "the server's WRITE has no frames")
        r = rows[0]
        want = {"frames out (first -> last)": 10.0, "bridge, last frame": 59.0,
                "peer: last frame in -> ACK out": 1.0, "bridge, ACK": 128.7,
                "peer: frames in (first -> last)": 20.0,
                "peer: last frame in -> its doorbell (guest + nap)": 330.0,
                "  of which the peer device's nap (at most)": 101.0}
        for k, v in want.items():
            self.assertAlmostEqual(r[k], v, places=6, msg=k)


class Bursts(unittest.TestCase):
    def test_runs_apart_are_reported_apart_with_their_stages_and_crossings(self):
        ev = write_events()
        later = [dict(e, ts=e["ts"] + 1e6) for e in ev if e["ph"] != "M"]
        for e in later:
            if e["ph"] == "X":
                e["tid"] = 4
        tr = tb.Trace(ev + later)
        runs = tb.bursts(tr, "RDMA_WRITE 8192 B")
        self.assertEqual([(pid, len(r)) for pid, r in runs], [(CLIENT, 1), (CLIENT, 1), (SERVER, 1), (SERVER, 1)])
        rows = tb.burst_rows(runs[0][1])
        self.assertAlmostEqual(rows[0]["frames out"], 10.0)
        self.assertAlmostEqual(rows[0]["last frame->ACK"], 188.7)
        self.assertEqual(sorted(tb.crossings(tr, CLIENT, 5000, 5200, ("WRITE_FIRST", "WRITE_LAST"))), [49.0, 59.0])
        text = tb.burst_report(tr, "RDMA_WRITE 8192 B")
        self.assertEqual(text.count("from client: 1 WQEs on 1 QPs"), 2)
        self.assertIn("bridge, request frames", text)
        self.assertIn("bridge, ACKs back", text)
        self.assertIn("sent again (retransmissions and tail probes): 0", text)
        self.assertEqual(tb.frame_rate(tr, CLIENT, 5000, 5200, bin_us=100.0), [(0.05, 20000.0)])
        ET.fromstring(tb.bursts_svg(tr, "RDMA_WRITE 8192 B", "s"))
        probe = rec(CLIENT, 5150.0, "frame out", psn=11, opcode="WRITE_LAST")
        self.assertEqual(tb.resent_frames(tb.Trace(ev + [probe]), CLIENT, 5000, 5200, ("WRITE_LAST",)), 1)


class Excerpt(unittest.TestCase):
    def test_a_window_keeps_names_and_what_overlaps_it(self):
        ev = send_lat_events(3)
        doc = tb.excerpt(ev, 900.0, 1100.0)
        kept = doc["traceEvents"]
        self.assertEqual(sum(e["ph"] == "M" for e in kept), 2)
        self.assertTrue(all(e["ph"] == "M" or 900.0 - e.get("dur", 0) <= e["ts"] <= 1100.0 for e in kept))
        self.assertIn(("X", 1000.0), [(e["ph"], e.get("ts")) for e in kept])
        self.assertNotIn(0.0, [e.get("ts") for e in kept])


class Output(unittest.TestCase):
    def test_tables_and_charts(self):
        rows, _ = tb.send_lat_iterations(tb.Trace(send_lat_events(5)), "client")
        text = tb.table(rows, ["round trip", "no such stage"], "t")
        self.assertIn("round trip", text)
        self.assertIn("1000.00", text)
        self.assertTrue(text.splitlines()[-1].split()[-1] == "0", "a stage without values: n 0")
        for svg in (tb.stacked_bars_svg(rows, tb.SEND_STAGES, "t", "s"),
                    tb.median_bar_svg(rows, tb.SEND_STAGES, "t", "s")):
            root = ET.fromstring(svg)
            self.assertTrue(root.tag.endswith("svg"))
        self.assertTrue(math.isclose(tb.pct([1, 2, 3, 4, 5], 0.5), 3))


if __name__ == "__main__":
    unittest.main()
