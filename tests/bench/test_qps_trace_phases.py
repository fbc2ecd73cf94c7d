#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Unit tests of qps_trace_phases.py on hand-written two-QP traces whose every phase is known
(one with QPs at distinct PSNs, one with QPs in lockstep at the same PSNs, as the host bench's):
python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qps_trace_phases as qp  # noqa: E402
import trace_breakdown as tb  # noqa: E402

CLIENT, SERVER = 1, 2


def meta(pid, name):
    return {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}}


def rec(pid, ts, name, tid, **args):
    return {"ph": "i", "pid": pid, "tid": tid, "ts": ts, "name": name, "args": args}


def write(tid, ts, stages):
    keys = ("doorbell->fetch", "fetch->first frame", "last frame->ACK", "ACK->CQE", "doorbell->CQE (total)")
    return {"ph": "X", "pid": CLIENT, "tid": tid, "ts": ts, "dur": stages[-1], "name": "RDMA_WRITE 8192 B",
            "args": {"bytes": 8192, "stages": {f"{k}_us": v for k, v in zip(keys, stages)}}}


def one_run(t0=0.0):
    """Client QP 5 writes PSNs 100-101, QP 6 PSNs 200-201 (server QPs 7 and 8). In flight, µs
    from t0: 1 at 3, 2 at 8, 3 at 9, 4 at 20, 2 at 59 (QP 5's ACK), 0 at 90. QP 6 sends 200
    again at 50 (going back: no packet leaves the flight, and it is no new packet's round
    trip though the server takes it at 52 and ACKs 201 again at 53); the server's ACK at 30.5
    covers none of QP 6's PSNs: 201's is the one at 31. The client's nap ending at 40 is
    followed by another wait (a wake register write between them is no work): one wake-up
    that found nothing."""
    c, s = CLIENT, SERVER
    ev = [
        write(5, t0, (1, 2, 50, 1, 60)), write(6, t0 + 2, (2, 4, 70, 2, 90)),
        rec(c, t0 + 0, "doorbell", 5), rec(c, t0 + 1, "fetch", 5), rec(c, t0 + 2, "doorbell", 6),
        rec(c, t0 + 3, "frame out", 5, psn=100, opcode="WRITE_FIRST"), rec(c, t0 + 4, "fetch", 6),
        rec(c, t0 + 8, "frame out", 6, psn=200, opcode="WRITE_FIRST"),
        rec(c, t0 + 9, "frame out", 5, psn=101, opcode="WRITE_LAST"),
        rec(s, t0 + 10, "wait", 0, waited_us=10, idle=True),
        rec(s, t0 + 15, "frame in", 7, psn=100, opcode="WRITE_FIRST"),
        rec(s, t0 + 17, "frame in", 7, psn=101, opcode="WRITE_LAST"),
        rec(s, t0 + 19, "frame out", 7, psn=101, opcode="ACK"),
        rec(c, t0 + 20, "frame out", 6, psn=201, opcode="WRITE_LAST"),
        rec(s, t0 + 25, "frame in", 8, psn=200, opcode="WRITE_FIRST"),
        rec(s, t0 + 30, "frame in", 8, psn=201, opcode="WRITE_LAST"),
        rec(s, t0 + 30.5, "frame out", 8, psn=199, opcode="ACK"),
        rec(s, t0 + 31, "frame out", 8, psn=201, opcode="ACK"),
        rec(c, t0 + 40, "wait", 0, waited_us=5, asked_us=5, idle=False),
        rec(c, t0 + 44, "wake", 0),
        rec(c, t0 + 45, "wait", 0, waited_us=5, asked_us=5, idle=False),
        rec(c, t0 + 50, "frame out", 6, psn=200, opcode="WRITE_FIRST"),
        rec(s, t0 + 52, "frame in", 8, psn=200, opcode="WRITE_FIRST"),
        rec(s, t0 + 53, "frame out", 8, psn=201, opcode="ACK"),
        rec(c, t0 + 55, "wait", 0, waited_us=4, idle=True),
        rec(c, t0 + 59, "response in", 5, psn=101, opcode="ACK", syndrome=0x1F),
        rec(c, t0 + 60, "cqe", 5, recv=False),
        rec(c, t0 + 90, "response in", 6, psn=201, opcode="ACK", syndrome=0x1F),
        rec(c, t0 + 92, "cqe", 6, recv=False),
    ]
    return ev


def events(*starts):
    ev = [meta(CLIENT, "client"), meta(SERVER, "server")]
    for t0 in starts:
        ev += one_run(t0)
    return ev


def lockstep_run(t0=0.0, d=10):
    """Client QPs 5 and 6 (server QPs 7 and 8) both start at PSN 0, as the host bench's do:
    A (QP 5, PSN 0), B (QP 5, 1), C (QP 6, 0), D (QP 6, 1), one WRITE_ONLY each, sent at 10,
    12, 11, 13 µs from t0; each reaches the server `d` µs later, in the order sent; the server
    ACKs PSN 1 of QP 7 at 14+d and of QP 8 at 15+d, each back 10 µs later. So the nearest
    frame in with QP 6's PSN is QP 7's, and the first ACK of PSN 1 back is QP 5's. QP 5 sends
    PSN 2 (a third WQE, not complete in the run) at 30: 1 packet is still in flight at the
    span's end (30+d); QP 6 takes an ACK of PSN 5, past what it sent, at 26+d. One notice
    brings QP 5's three WQEs (three fetches), one QP 6's two. The server has one WQE of its
    own (a SEND): the client is the device with the most. The client's idle sleep ending at
    15 is followed by a nap: one wake-up that found nothing."""
    c, s, t = CLIENT, SERVER, t0
    ack = {"opcode": "ACK", "syndrome": 0x1F}
    return [
        write(5, t, (1, 9, 14 + d, 4, 28 + d)), write(5, t, (2, 10, 12 + d, 4, 28 + d)),
        write(6, t + 4, (1, 6, 14 + d, 5, 26 + d)), write(6, t + 4, (2, 7, 12 + d, 5, 26 + d)),
        {"ph": "X", "pid": s, "tid": 7, "ts": t + 1, "dur": 1, "name": "SEND 2 B", "args": {}},
        rec(c, t, "doorbell", 5, new_wqes=3), rec(c, t + 1, "fetch", 5), rec(c, t + 2, "fetch", 5),
        rec(c, t + 3, "fetch", 5), rec(c, t + 4, "doorbell", 6, new_wqes=2), rec(c, t + 5, "fetch", 6),
        rec(c, t + 6, "fetch", 6),
        rec(c, t + 10, "frame out", 5, psn=0, opcode="WRITE_ONLY"),
        rec(c, t + 11, "frame out", 6, psn=0, opcode="WRITE_ONLY"),
        rec(c, t + 12, "frame out", 5, psn=1, opcode="WRITE_ONLY"),
        rec(c, t + 13, "frame out", 6, psn=1, opcode="WRITE_ONLY"),
        rec(c, t + 15, "wait", 0, waited_us=5, idle=True), rec(c, t + 16, "wake", 0),
        rec(c, t + 17, "wait", 0, waited_us=2, asked_us=2, idle=False),
        rec(s, t + 9 + d, "wait", 0, waited_us=9, idle=True),
        rec(s, t + 10 + d, "frame in", 7, psn=0, opcode="WRITE_ONLY"),
        rec(s, t + 11 + d, "frame in", 8, psn=0, opcode="WRITE_ONLY"),
        rec(s, t + 12 + d, "frame in", 7, psn=1, opcode="WRITE_ONLY"),
        rec(s, t + 13 + d, "frame in", 8, psn=1, opcode="WRITE_ONLY"),
        rec(s, t + 14 + d, "frame out", 7, psn=1, opcode="ACK"),
        rec(s, t + 15 + d, "frame out", 8, psn=1, opcode="ACK"),
        rec(c, t + 30, "frame out", 5, psn=2, opcode="WRITE_ONLY"),
        rec(c, t + 24 + d, "frame in", 5, psn=1, opcode="ACK"), rec(c, t + 24 + d, "response in", 5, psn=1, **ack),
        rec(c, t + 25 + d, "frame in", 6, psn=1, opcode="ACK"), rec(c, t + 25 + d, "response in", 6, psn=1, **ack),
        rec(c, t + 26 + d, "frame in", 6, psn=5, opcode="ACK"), rec(c, t + 26 + d, "response in", 6, psn=5, **ack),
        rec(c, t + 28 + d, "cqe", 5, recv=False), rec(c, t + 30 + d, "cqe", 6, recv=False),
    ]


def lockstep_events(*runs):
    ev = [meta(CLIENT, "client"), meta(SERVER, "server")]
    for t0, d in runs:
        ev += lockstep_run(t0, d)
    return ev


class Psn(unittest.TestCase):
    def test_psn_arithmetic_wraps_and_responses_ack_what_they_say(self):
        self.assertEqual(qp.psn_diff(0, 0xFFFFFF), 1)
        self.assertEqual(qp.psn_diff(0xFFFFFF, 0), -1)
        self.assertEqual(qp.acked_up_to("ACK", 0xFFFFFF, 0x1F), 0)
        self.assertEqual(qp.acked_up_to("ACK", 10, 0x60), 10, "a sequence NAK: the PSNs before it")
        self.assertIsNone(qp.acked_up_to("ACK", 10, 0x21), "an RNR NAK acknowledges nothing")
        self.assertIsNone(qp.acked_up_to("WRITE_LAST", 10, None))


class Refill(unittest.TestCase):
    def test_a_response_that_opens_a_full_flight_starts_the_refill_and_the_next_new_frame_ends_it(self):
        rows = [(0.0, "frame out", 5, {"psn": 1, "opcode": "WRITE_FIRST"}),
                (1.0, "frame out", 5, {"psn": 2, "opcode": "WRITE_LAST"}),
                (10.0, "response in", 5, {"psn": 1, "opcode": "ACK", "syndrome": 0x1F}),
                (12.0, "frame out", 5, {"psn": 2, "opcode": "WRITE_LAST"}),
                (14.0, "frame out", 5, {"psn": 3, "opcode": "WRITE_FIRST"}),
                (20.0, "response in", 5, {"psn": 3, "opcode": "ACK", "syndrome": 0x1F}),
                (21.0, "frame out", 5, {"psn": 4, "opcode": "WRITE_ONLY"}),
                (25.0, "response in", 5, {"psn": 4, "opcode": "ACK", "syndrome": 0x1F}),
                (27.0, "frame out", 5, {"psn": 5, "opcode": "WRITE_ONLY"})]
        full_us, _, top, refills = qp.flight(rows, 0.0, 30.0, 2)
        # Full from 1 to 10 and from 14 to 20, each ended by an ACK; the ACK at 25 found one
        # packet in flight: what follows it is no refill.
        self.assertEqual((full_us, top), (15.0, 2))
        self.assertEqual(refills, [4.0, 1.0], "the packet sent again at 12 is no refill")


    def test_a_flight_full_at_the_spans_end_counts_to_its_end(self):
        rows = [(0.0, "frame out", 5, {"psn": 1, "opcode": "WRITE_FIRST"}),
                (1.0, "frame out", 5, {"psn": 2, "opcode": "WRITE_LAST"})]
        full_us, mean, top, _ = qp.flight(rows, 0.0, 10.0, 2)
        self.assertEqual((full_us, top), (9.0, 2))
        self.assertAlmostEqual(mean, (1 * 1 + 2 * 9) / 10)


class OneRun(unittest.TestCase):
    def setUp(self):
        runs = qp.analyse(events(0.0), limit=3)
        self.assertEqual(len(runs), 1)
        self.names, self.r = runs[0]

    def test_the_flight_over_time(self):
        r = self.r
        self.assertEqual((r["qps"], r["wqes"], r["client"]), (2, 2, CLIENT))
        self.assertAlmostEqual(r["span_ms"], 0.092)
        # At 3 or over from 9 to 59 µs; the area 1*5 + 2*1 + 3*11 + 4*39 + 2*31 = 258 over 92.
        self.assertAlmostEqual(r["full_ms"], 0.050)
        self.assertAlmostEqual(r["not_full_ms"], 0.042)
        self.assertAlmostEqual(r["mean_flight"], 258 / 92)
        self.assertEqual(r["max_flight"], 4, "the packet sent again adds nothing")
        self.assertEqual(r["refills"], [], "no new packet after the ACK at 59 opened the flight")
        self.assertAlmostEqual(r["MiB/s"], 16384 / (1 << 20) / 92e-6)

    def test_the_phases_add_up_to_each_wqes_total(self):
        ph = self.r["phases"]
        self.assertEqual(ph["doorbell->first frame"], [3, 6])
        self.assertEqual(ph["first->last frame"], [6, 12])
        self.assertEqual(ph["last frame->ACK"], [50, 70])
        self.assertEqual(ph["ACK->CQE"], [1, 2])
        self.assertEqual(sum(sum(ph[p]) for p in qp.PHASES), sum(ph["total"]))
        self.assertEqual(sum(ph["total"]), 150)

    def test_each_packets_round_trip_in_three_legs(self):
        legs = self.r["legs"]
        self.assertEqual(sorted(legs["client out->server in"]), [8, 10, 12, 17])
        self.assertEqual(sorted(legs["server in->ACK out"]), [1, 2, 4, 6], "the ACK that covers each")
        self.assertEqual(sorted(legs["ACK out->client in"]), [40, 40, 59, 59])

    def test_posting_notices_and_waits(self):
        r = self.r
        self.assertAlmostEqual(r["posting_ms"], 0.002)
        self.assertEqual((r["notices"], r["fetched"], r["retransmits"]), (2, 2, 0))
        self.assertEqual(r["waits"][CLIENT], (2, 1, 0.014, 1))
        self.assertEqual(r["waits"][SERVER], (0, 1, 0.010, 0))

    def test_the_report_says_it(self):
        text = qp.run_report(self.names, self.r, "t")
        self.assertIn("2 QPs, 2 WQEs in 0.1 ms", text)
        self.assertIn("client (client): 2 naps, 1 idle sleeps", text)
        self.assertIn("1 wake-ups found nothing", text)


class Lockstep(unittest.TestCase):
    def setUp(self):
        self.ev = lockstep_events((0.0, 10))
        runs = qp.analyse(self.ev, limit=4)
        self.assertEqual(len(runs), 1)
        self.names, self.r = runs[0]

    def test_qps_at_the_same_psns_pair_with_their_own_server_qps(self):
        legs = self.r["legs"]
        self.assertEqual(legs["client out->server in"], [10, 10, 10, 10], "not QP 7's frame for QP 6's")
        self.assertEqual(legs["server in->ACK out"], [4, 4, 2, 2])
        self.assertEqual(legs["ACK out->client in"], [10, 10, 10, 10], "not QP 5's ACK for QP 6's")
        tr = tb.Trace(self.ev)
        self.assertEqual(tb.qp_peers(tr, CLIENT, 0, 40, qp.is_request), {5: (SERVER, 7), 6: (SERVER, 8)})
        self.assertEqual(tb.crossings(tr, CLIENT, 0, 40, ("WRITE_ONLY",)), [10, 10, 10, 10])
        self.assertEqual(tb.crossings(tr, SERVER, 0, 40, ("ACK",)), [10, 10])

    def test_wqes_qps_notices_fetches_and_phases(self):
        r = self.r
        self.assertEqual((r["qps"], r["wqes"], r["client"]), (2, 4, CLIENT))
        self.assertEqual((r["notices"], r["fetched"]), (2, 5))
        self.assertAlmostEqual(r["posting_ms"], 0.004)
        ph = r["phases"]
        self.assertEqual(ph["doorbell->first frame"], [10, 12, 7, 9])
        self.assertEqual(ph["first->last frame"], [0, 0, 0, 0])
        self.assertEqual(ph["last frame->ACK"], [24, 22, 24, 22])
        self.assertEqual(ph["ACK->CQE"], [4, 4, 5, 5])
        self.assertEqual(sum(ph["total"]), 148)
        self.assertEqual(r["waits"][CLIENT], (1, 1, 0.007, 1))
        self.assertEqual(r["waits"][SERVER], (0, 1, 0.009, 0))

    def test_the_flight_skips_an_ack_past_what_was_sent_and_runs_to_the_spans_end(self):
        r = self.r
        self.assertAlmostEqual(r["span_ms"], 0.040)
        # 1 at 10, 2 at 11, 3 at 12, 4 at 13, 5 at 30, 3 at 34, 1 at 35 to the end at 40.
        self.assertAlmostEqual(r["mean_flight"], (1 + 2 + 3 + 4 * 17 + 5 * 4 + 3 + 1 * 5) / 40)
        self.assertEqual(r["max_flight"], 5)
        self.assertAlmostEqual(r["full_ms"], 0.021)
        _, one = qp.analyse(self.ev, limit=1)[0]
        self.assertAlmostEqual(one["full_ms"], 0.030, msg="at 1 or over from 10 to the span's end")


class Runs(unittest.TestCase):
    def test_runs_apart_by_more_than_the_gap_are_two(self):
        ev = events(0.0, 2e6)
        self.assertEqual(len(qp.analyse(ev)), 2)
        self.assertEqual(len(qp.analyse(ev, gap_ms=3000)), 1)
        by_name = qp.analyse(ev, client="client")
        self.assertEqual([r["wqes"] for _, r in by_name], [2, 2])
        with self.assertRaises(ValueError):
            qp.analyse(ev, client="nobody")

    def test_the_command_prints_each_run_and_the_medians_per_qp_count(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": events(0.0, 2e6)}, f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(qp.main([path, "--flight-limit", "3", "--min-wqes-per-qp", "1"]), 0)
        text = out.getvalue()
        self.assertEqual(text.count(" run "), 2)
        row = [line for line in text.splitlines() if line.startswith("| 2 |")]
        self.assertEqual(len(row), 1)
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        self.assertEqual(cells[1], "2", "two runs of 2 QPs")
        self.assertEqual(cells[3], f"{100 * 50 / 92:.1f}", "flight full %")

    def test_the_summary_leaves_out_runs_of_few_wqes_a_qp_and_takes_medians(self):
        ev = events(0.0) + lockstep_events((2e6, 10), (4e6, 20))[2:]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump({"traceEvents": ev}, f)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(qp.main([path, "--flight-limit", "4", "--min-wqes-per-qp", "2"]), 0)
        text = out.getvalue()
        self.assertEqual(text.count(" run "), 3)
        self.assertIn("(1 runs of fewer than 2 WQEs a QP left out)", text)
        row = [line for line in text.splitlines() if line.startswith("| 2 |")]
        self.assertEqual(len(row), 1)
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        self.assertEqual(cells[1], "2", "the two lockstep runs, not the run of one WQE a QP")
        self.assertEqual(cells[10], "15.0", "out->in: the median of 10 and 20 µs")
        self.assertEqual(cells[13], "1.0", "the client's wake-ups that found nothing, a run")
        runs = [r for _, r in qp.analyse(ev)]
        self.assertIn("(3 runs of fewer than 20 WQEs a QP left out)", qp.summary(runs))


if __name__ == "__main__":
    unittest.main()
