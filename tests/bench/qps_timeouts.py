#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Why each ACK timeout of a traced run happened: reads rox-trace's text timeline of the
requester (device `a`) and its peer (`b`) (`rox-trace A.wqe-trace B.wqe-trace --name a --name b
--timeline`, e.g. of benches/qps with ROX_QPS_TRACE_DIR) and prints, per timeout of QP q from
PSN p at time T: when p was first built, when the peer took it in and built the ACK covering
it (if before T), and the longest silence of each device's thread (no record at all, not even a
nap's end: the thread held no core, or was inside one pass) between p's build and T.

    python3 tests/bench/qps_timeouts.py TIMELINE.txt

The verdict per timeout:
- "peer's ACK waited in the peer": the peer built the ACK before T and its thread then had
  no record for over 1 ms (the ACK sat in its port queue: until session 18 the flush was at
  the pass's end; a rox-nic since flushes after the receive batch that owed it, so with one
  this verdict means the silence fell inside that batch's handling);
- "ACK on its way": the peer built the ACK before T and went on;
- "peer took p but had not ACKed it" / "peer had not taken p": the peer's backlog and stalls;
- "requester stalled with p unsent": the requester's thread had no record for over 1 ms, and
  longer than the peer's longest silence, within 100 us of building p (inside the pass,
  before its flush).
"""
import re
import sys

LINE = re.compile(
    r"^\s+(?P<t>[0-9.]+) us  (?P<dev>\S+)\s+(?:qp (?P<qp>0x[0-9a-f]+))?\s+(?P<kind>frame out|frame in|RETRANSMIT|napped|response in)\s+(?P<rest>.*)$"
)
PSN = re.compile(r"psn=0x([0-9a-f]+)")
NAP = re.compile(r"napped\s+([0-9]+) us \(asked ([0-9]+) us\)")


def parse(path):
    recs = []
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        d = m.groupdict()
        t = float(d["t"])
        psn = PSN.search(d["rest"])
        recs.append(
            (t, d["dev"], d["qp"], d["kind"], int(psn.group(1), 16) if psn else None, d["rest"])
        )
    return recs


def silence(recs, dev, start, end):
    """The longest gap between successive records of `dev` that overlaps [start, end]: the
    thread's longest time without a core or inside one pass there."""
    times = [r[0] for r in recs if r[1] == dev]
    return max((b - a for a, b in zip(times, times[1:]) if b > start and a < end), default=0.0)


def explain(recs):
    out = []
    for i, (t, dev, qp, kind, psn, rest) in enumerate(recs):
        if dev != "a" or kind != "RETRANSMIT" or "ACK timeout" not in rest:
            continue
        built = next(
            (r[0] for r in recs if r[1] == "a" and r[2] == qp and r[3] == "frame out" and r[4] == psn and r[0] < t),
            None,
        )
        if built is None:
            out.append((t, qp, psn, "other (p's build not in the trace)"))
            continue
        taken = next((r[0] for r in recs if r[1] == "b" and r[2] == qp and r[3] == "frame in" and r[4] == psn and built < r[0] < t), None)
        ack = next(
            (r[0] for r in recs if r[1] == "b" and r[2] == qp and r[3] == "frame out" and "ACK" in r[5] and r[4] is not None and r[4] >= psn and (taken or t) <= r[0] < t),
            None,
        )
        a_gap, b_gap = silence(recs, "a", built, t), silence(recs, "b", built, t)
        if ack is not None:
            verdict = (
                "peer's ACK waited in the peer (its thread held no core before the flush)"
                if silence(recs, "b", ack, t) > 1000
                else "ACK on its way (unread at a)"
            )
        elif taken is not None:
            verdict = "peer took p but had not ACKed it (its backlog, its stalls)"
        elif silence(recs, "a", built, built + 100) > max(1000, b_gap):
            verdict = "requester stalled with p unsent"
        else:
            verdict = "peer had not taken p (its backlog, its stalls)"
        fmt = lambda x: "-" if x is None else f"{x - built:9.0f}"
        out.append(
            (t, qp, psn, f"built {built:9.0f}; taken +{fmt(taken)}; ACK built +{fmt(ack)}; timeout +{t - built:6.0f} us; "
             f"longest silence a {a_gap:6.0f} b {b_gap:6.0f}: {verdict}")
        )
    return out


def main():
    for path in sys.argv[1:]:
        rows = explain(sorted(parse(path), key=lambda r: r[0]))
        print(f"{path}: {len(rows)} ACK timeouts")
        for t, qp, psn, why in rows:
            print(f"  {t:10.0f} us qp {qp} psn {psn:#x}: {why}")


if __name__ == "__main__":
    main()
