#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/bench/qps_trace_phases.py — where a traced many-QP WRITE run's time goes on the
client (the requester), per run and per QP count, from rox-trace's JSON of both devices.

    qps_trace_phases.py TRACE.json... [--client NAME] [--wqe NAME] [--gap-ms MS]
                        [--flight-limit N] [--min-wqes-per-qp N]

Each TRACE.json is `rox-trace CLIENT.wqe-trace SERVER.wqe-trace --name client --name server
--json TRACE.json`: the host bench's pair (`ROX_QPS_TRACE_DIR=DIR cargo bench -p rox-nic
--bench qps` writes DIR/SUBNET-QPS-{a,b}.wqe-trace, `a` the sender), or a two-guest lab's
(`ROX_NIC_TRACE=N ROX_NIC_TRACE_DIR=DIR tests/bench/qps …`: DIR/g0-rox0.wqe-trace the client,
DIR/g1-rox0.wqe-trace the server). The client is the device named --client, else the one with
the most WQEs. A run is a stretch of the client's WQEs (default the most common name, e.g.
"RDMA_WRITE 8192 B") with no gap over --gap-ms between two doorbells (one ib_write_bw or one
bench run); its span is its first doorbell to its last CQE. Per run:

- the client's RC packets in flight (request PSNs sent and not yet acknowledged, per QP, as
  the engine counts its port's flight: sent_end − una), time-weighted over the span: how long
  it was at --flight-limit (the port's 256) or over, and how long under it; and the refill:
  from each response that opened a full flight to the client's next new request frame out
  (the device's own share of the flight's round);
- each WQE's life cut into phases that add up to its doorbell→CQE total (rox-trace's
  stages): doorbell noticed → first frame out (fetch, decode, the wait for its turn), first →
  last frame out, last frame → ACK in, ACK → CQE. WQEs overlap, so their sums exceed the span:
  each phase's sum, its share of the WQEs' total, its median and 90th percentile;
- each request packet's round trip in three legs (needs both devices): client frame out →
  server frame in (the wire and the server thread's wake-up), server frame in → the ACK that
  covers it out, that ACK out → the client's response in; all on the packet's QP and the
  server QP paired with it (trace_breakdown.qp_peers: the frames in of each PSN and opcode
  matched to the sends in order, each client QP's peer by majority; PSNs alone do not say
  the QP, as every host-bench QP starts at PSN 0);
- the posting phase: the span's start to the client's last doorbell notice (perftest still
  posting), and the notices with the WQEs they brought;
- each device's waits that ended in the span (naps, idle sleeps, ms waited) and its wake-ups
  that found nothing: a wait whose next record on the device is another wait. The trace has
  no record of a pass itself, so a pass that did nothing is seen only this way: after a
  wait, as nothing before the next wait.

Then per QP count, the medians over its runs of at least --min-wqes-per-qp WQEs a QP (default
20: a lab's base runs, 10 a QP, are left out). A parked doorbell (docs/transport.md, "Parked
QPs") leaves no record: its WQEs' doorbell is the notice at the QP's turn, when they were
fetched, so "doorbell → first frame" does not hold the time they waited parked.
Tests: tests/bench/test_qps_trace_phases.py.
"""
import argparse
import bisect
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_breakdown as tb  # noqa: E402

PSN_MOD = 1 << 24
PORT_INFLIGHT_LIMIT = 256
# A lab's base runs move QPS_BASE_ITERS (10) WQEs a QP (tests/bench/qps.sh); its timed runs
# at least 50 (perftest's 12,800 over 256 QPs).
MIN_WQES_PER_QP = 20
REQUEST_PREFIXES = ("WRITE_", "SEND_", "READ_REQUEST", "COMPARE_SWAP", "FETCH_ADD", "FLUSH",
                    "ATOMIC_WRITE")
# The phases of a WQE's life that follow one another from its doorbell to its CQE.
PHASES = ["doorbell->first frame", "first->last frame", "last frame->ACK", "ACK->CQE"]
LEGS = ["client out->server in", "server in->ACK out", "ACK out->client in"]


def psn_diff(a, b):
    """a − b in 24-bit PSN space (negative when a is before b)."""
    return (a - b + PSN_MOD // 2) % PSN_MOD - PSN_MOD // 2


def is_request(opcode):
    return opcode is not None and opcode.startswith(REQUEST_PREFIXES)


def acked_up_to(opcode, psn, syndrome):
    """The PSN a response says the requester may forget up to (exclusive), or None: an ACK
    covers its PSN, a PSN-sequence NAK the ones before it, an RNR or other NAK nothing."""
    if opcode in ("ACK", "ATOMIC_ACK") or (opcode or "").startswith("READ_RESPONSE"):
        if syndrome is None or syndrome >> 5 == 0:
            return (psn + 1) % PSN_MOD
        if syndrome == 0x60:
            return psn
    return None


class Records:
    """Every instant of a rox-trace JSON as (ts µs, name, tid, args), per device, in time order."""

    def __init__(self, events):
        self.by_pid = {}
        for e in events:
            if e.get("ph") == "i":
                self.by_pid.setdefault(e["pid"], []).append((e["ts"], e["name"], e["tid"], e.get("args", {})))
        for rows in self.by_pid.values():
            rows.sort(key=lambda r: r[0])
        self.ts = {pid: [r[0] for r in rows] for pid, rows in self.by_pid.items()}

    def between(self, pid, lo, hi):
        rows, ts = self.by_pid.get(pid, []), self.ts.get(pid, [])
        return rows[bisect.bisect_left(ts, lo):bisect.bisect_right(ts, hi)]


def flight(records, lo, hi, limit):
    """The client's RC packets in flight over [lo, hi] µs, from its request frames out and the
    responses in (`records`: the device's records in [lo, hi], in time order): (µs at `limit`
    or over, time-weighted mean, the largest, [µs from each response that opened a full
    flight to the next new request frame out]: the device's refill)."""
    una, end = {}, {}
    now, last_t, full_us, area, top = 0, lo, 0.0, 0.0, 0
    opened, refills = None, []
    for ts, name, tid, a in records:
        if name == "frame out" and is_request(a.get("opcode")):
            nxt = (a["psn"] + 1) % PSN_MOD
            if tid not in end:
                una[tid] = end[tid] = a["psn"]
            grow = psn_diff(nxt, end[tid])
            if grow <= 0:
                continue
            delta, end[tid] = grow, nxt
            if opened is not None:
                refills.append(ts - opened)
                opened = None
        elif name == "response in" and tid in una:
            new = acked_up_to(a.get("opcode"), a.get("psn", 0), a.get("syndrome"))
            if new is None or psn_diff(new, una[tid]) <= 0 or psn_diff(end[tid], new) < 0:
                continue
            delta, una[tid] = -psn_diff(new, una[tid]), new
            if now >= limit and opened is None:
                opened = ts
        else:
            continue
        area += now * (ts - last_t)
        if now >= limit:
            full_us += ts - last_t
        now, last_t = now + delta, ts
        top = max(top, now)
    area += now * (hi - last_t)
    if now >= limit:
        full_us += hi - last_t
    return full_us, area / (hi - lo) if hi > lo else 0.0, top, refills


def wqe_phases(slices):
    """{phase: [µs per WQE]} of the run's completed WQEs; the phases add up to each total."""
    out = {p: [] for p in PHASES + ["total"]}
    for s in slices:
        st = s["args"].get("stages", {})
        total = st.get("doorbell->CQE (total)_us")
        parts = [st.get(f"{k}_us") for k in ("doorbell->fetch", "fetch->first frame", "last frame->ACK", "ACK->CQE")]
        if total is None or None in parts:
            continue
        first = parts[0] + parts[1]
        row = [first, max(0.0, total - first - parts[2] - parts[3]), parts[2], parts[3]]
        for p, v in zip(PHASES, row):
            out[p].append(v)
        out["total"].append(total)
    return out


def ack_index(records):
    """{tid: ([ts], [psn])} of a device's ACKs out, in time order."""
    idx = {}
    for ts, name, tid, a in records:
        if name == "frame out" and a.get("opcode") == "ACK":
            t, p = idx.setdefault(tid, ([], []))
            t.append(ts)
            p.append(a["psn"])
    return idx


def packet_legs(tr, recs, cpid, lo, hi):
    """{leg: [µs]} of each request packet the client first sent in [lo, hi] whose whole round
    trip is in the trace (the frame in on its QP's server QP, the ACK of that QP covering it,
    the client's QP taking it). The server QP of each client QP is `tb.qp_peers`'s: PSN and
    opcode alone do not say it."""
    legs = {k: [] for k in LEGS}
    acks = {}
    sent = set()
    peers = tb.qp_peers(tr, cpid, lo, hi, is_request)
    for ts, name, tid, a in recs.between(cpid, lo, hi):
        if name != "frame out" or not is_request(a.get("opcode")) or (tid, a["psn"]) in sent:
            continue
        sent.add((tid, a["psn"]))
        if tid not in peers:
            continue
        spid, stid = peers[tid]
        into = tr.first("frame in", spid, a["psn"], a["opcode"], ts, tid=stid)
        if into is None:
            continue
        t_in = into[0]
        if spid not in acks:
            acks[spid] = ack_index(recs.by_pid.get(spid, []))
        times, psns = acks[spid].get(stid, ([], []))
        i = bisect.bisect_left(times, t_in)
        while i < len(times) and psn_diff(psns[i], a["psn"]) < 0:
            i += 1
        if i == len(times):
            continue
        back = tr.first("response in", cpid, psns[i], "ACK", times[i], tid=tid)
        if back is None:
            continue
        for k, v in zip(LEGS, (t_in - ts, times[i] - t_in, back[0] - times[i])):
            legs[k].append(v)
    return legs


def waits(rows):
    """(naps, idle sleeps, ms waited, wake-ups that found nothing) of a device's records."""
    naps = sleeps = empty = 0
    waited = 0.0
    work = [r for r in rows if r[1] != "wake"]
    for i, (_, name, _, a) in enumerate(work):
        if name != "wait":
            continue
        if a.get("idle"):
            sleeps += 1
        else:
            naps += 1
        waited += a.get("waited_us", 0)
        if i + 1 < len(work) and work[i + 1][1] == "wait":
            empty += 1
    return naps, sleeps, waited / 1000, empty


def run_phases(tr, recs, cpid, slices, limit):
    """Everything the report says of one run (`slices`: its WQEs on the client)."""
    lo = min(s["ts"] for s in slices)
    hi = max(s["ts"] + s["dur"] for s in slices)
    span = hi - lo
    mine = recs.between(cpid, lo, hi)
    full_us, mean_flight, top, refills = flight(mine, lo, hi, limit)
    doorbells = [r for r in mine if r[1] == "doorbell"]
    posting_end = doorbells[-1][0] if doorbells else lo
    r = {
        "qps": len({s["tid"] for s in slices}), "wqes": len(slices), "span_ms": span / 1000,
        "MiB/s": sum(s["args"].get("bytes", 0) for s in slices) / (1 << 20) / (span / 1e6) if span else 0.0,
        "full_ms": full_us / 1000, "not_full_ms": (span - full_us) / 1000, "mean_flight": mean_flight,
        "max_flight": top, "refills": refills, "posting_ms": (posting_end - lo) / 1000, "notices": len(doorbells),
        "fetched": sum(1 for x in mine if x[1] == "fetch"),
        "retransmits": sum(1 for x in mine if x[1] == "retransmit"),
        "phases": wqe_phases(slices), "legs": packet_legs(tr, recs, cpid, lo, hi), "waits": {},
    }
    for pid in sorted(recs.by_pid):
        r["waits"][pid] = waits(recs.between(pid, lo, hi))
    return r


def client_pid(tr, name):
    if name:
        return tr.pid_named(name)
    counts = {}
    for s in tr.slices:
        counts[s["pid"]] = counts.get(s["pid"], 0) + 1
    if not counts:
        raise ValueError("no WQE in the trace")
    return max(counts, key=counts.get)


def analyse(events, client=None, wqe=None, gap_ms=1000.0, limit=PORT_INFLIGHT_LIMIT):
    """[(names by pid, run)] of one trace's runs, in time order."""
    tr = tb.Trace(events)
    recs = Records(events)
    cpid = client_pid(tr, client)
    if wqe is None:
        names = [s["name"] for s in tr.slices if s["pid"] == cpid]
        wqe = max(set(names), key=names.count)
    runs = [run for pid, run in tb.bursts(tr, wqe, gap_ms * 1000) if pid == cpid]
    out = []
    for run in runs:
        r = run_phases(tr, recs, cpid, run, limit)
        r["client"] = cpid
        out.append((tr.names, r))
    return out


def stat(vals, q=None):
    if not vals:
        return float("nan")
    return statistics.median(vals) if q is None else tb.pct(vals, q)


def run_report(names, r, title):
    lines = [f"{title}: {r['qps']} QPs, {r['wqes']} WQEs in {r['span_ms']:.1f} ms ({r['MiB/s']:.1f} MiB/s), "
             f"{r['retransmits']} retransmissions"]
    span = r["span_ms"] or float("nan")
    lines.append(f"  flight at the limit or over: {r['full_ms']:.1f} ms ({r['full_ms'] / span:.0%}), under it "
                 f"{r['not_full_ms']:.1f} ms; mean {r['mean_flight']:.0f} packets, max {r['max_flight']}")
    v = r["refills"]
    lines.append(f"  refill (a response opened the full flight -> next new request frame out): {len(v)}, "
                 f"median {stat(v):.1f} p90 {stat(v, .9):.1f} µs")
    lines.append(f"  posting (to the last doorbell notice): {r['posting_ms']:.1f} ms; {r['notices']} notices, "
                 f"{r['fetched']} WQEs fetched ({r['fetched'] / max(1, r['notices']):.1f} a notice)")
    total = sum(r["phases"]["total"]) or float("nan")
    lines.append(f"  {'WQE phase':<24} {'n':>6} {'sum ms':>9} {'share':>6} {'median':>9} {'p90':>9} µs")
    for p in PHASES + ["total"]:
        v = r["phases"][p]
        lines.append(f"  {p:<24} {len(v):>6} {sum(v) / 1000:>9.1f} {sum(v) / total:>6.0%} "
                     f"{stat(v):>9.1f} {stat(v, .9):>9.1f}")
    for k in LEGS:
        v = r["legs"][k]
        lines.append(f"  {'packet: ' + k:<32} {len(v):>6} median {stat(v):>8.1f} p90 {stat(v, .9):>8.1f} µs")
    for pid, (naps, sleeps, ms, empty) in r["waits"].items():
        who = str(names.get(pid, pid)) + (" (client)" if pid == r["client"] else "")
        lines.append(f"  {who}: {naps} naps, {sleeps} idle sleeps, {ms:.1f} ms waited; "
                     f"{empty} wake-ups found nothing")
    return "\n".join(lines)


SUMMARY = [
    ("MiB/s", lambda r: r["MiB/s"]),
    ("flight full %", lambda r: 100 * r["full_ms"] / r["span_ms"] if r["span_ms"] else float("nan")),
    ("posting ms", lambda r: r["posting_ms"]),
    ("WQEs a notice", lambda r: r["fetched"] / max(1, r["notices"])),
    ("doorbell->1st frame µs", lambda r: stat(r["phases"]["doorbell->first frame"])),
    ("last frame->ACK µs", lambda r: stat(r["phases"]["last frame->ACK"])),
    ("ACK->CQE µs", lambda r: stat(r["phases"]["ACK->CQE"])),
    ("refill µs", lambda r: stat(r["refills"])),
    ("out->in µs", lambda r: stat(r["legs"][LEGS[0]])),
    ("in->ACK µs", lambda r: stat(r["legs"][LEGS[1]])),
    ("ACK->in µs", lambda r: stat(r["legs"][LEGS[2]])),
    ("client empty wake-ups", lambda r: r["waits"].get(r["client"], (0, 0, 0, 0))[3]),
]


def summary(runs, min_wqes_per_qp=MIN_WQES_PER_QP):
    """Per QP count, the medians over its runs of the main figures (a Markdown table); runs of
    fewer than `min_wqes_per_qp` WQEs a QP (a lab's base runs) are left out."""
    by = {}
    for r in runs:
        if r["wqes"] >= min_wqes_per_qp * r["qps"]:
            by.setdefault(r["qps"], []).append(r)
    head = "| QPs | runs | " + " | ".join(n for n, _ in SUMMARY) + " |"
    lines = [head, "|" + "---|" * (2 + len(SUMMARY))]
    for q in sorted(by):
        vals = [statistics.median(f(r) for r in by[q]) for _, f in SUMMARY]
        lines.append(f"| {q} | {len(by[q])} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
    left = len(runs) - sum(len(v) for v in by.values())
    if left:
        lines.append(f"({left} runs of fewer than {min_wqes_per_qp} WQEs a QP left out)")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", help="rox-trace --json output of a client and its server")
    ap.add_argument("--client", help="the client device's name (default: the one with the most WQEs)")
    ap.add_argument("--wqe", help="the WQEs of a run, as rox-trace names them (default: the most common)")
    ap.add_argument("--gap-ms", type=float, default=1000.0, help="a gap between doorbells that starts a new run")
    ap.add_argument("--flight-limit", type=int, default=PORT_INFLIGHT_LIMIT, help="the port's flight (256)")
    ap.add_argument("--min-wqes-per-qp", type=int, default=MIN_WQES_PER_QP,
                    help="runs of fewer WQEs a QP (a lab's base runs) stay out of the summary")
    a = ap.parse_args(argv)
    runs = []
    for path in a.traces:
        try:
            with open(path) as f:
                events = json.load(f)["traceEvents"]
            found = analyse(events, a.client, a.wqe, a.gap_ms, a.flight_limit)
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"qps_trace_phases: {path}: {e}")
        for n, (names, r) in enumerate(found, 1):
            print(run_report(names, r, f"{path} run {n}"))
            print()
            runs.append(r)
    if not runs:
        sys.exit("qps_trace_phases: no run found")
    print(summary(runs, a.min_wqes_per_qp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
