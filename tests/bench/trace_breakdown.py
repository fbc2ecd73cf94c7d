#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/bench/trace_breakdown.py — where the microseconds of a two-device ping-pong go, from
rox-trace's JSON of both rox-nics: every ib_send_lat iteration (2-byte SENDs each way) and
every 1 MiB RDMA WRITE of ib_write_lat, cut into stages, with the median and spread of each
stage over all iterations, and SVG charts of them.

    trace_breakdown.py TRACE.json [--client NAME] [--write-bytes N] [--svg-dir DIR]

TRACE.json is what `rox-trace CLIENT.wqe-trace SERVER.wqe-trace --name client --name server
--json TRACE.json` writes (tests/bench/trace-breakdown runs it all). Frames are matched
across the two devices by PSN and opcode, as tests/lib/trace_svg.py draws them; a many-QP
run's bridge crossings (`crossings`) only on the QP paired with the sender's (`qp_peers`), as
QPs may share PSNs.

One ib_send_lat iteration, from the client's doorbell to its next one:
  client: doorbell noticed -> SEND frame out     (the device: fetch, PSN, build, send)
  bridge, client -> server                       (frame out -> frame in: taps, bridge, scheduling)
  server: frame in -> receive CQE written
  server: receive CQE -> reply's doorbell noticed, split into
      guest  (perftest polling its CQ, posting the reply: the vCPU under TCG), at least
      nap    (the device napping when the doorbell store landed), at most
  server: doorbell -> reply frame out; bridge back; client: frame in -> receive CQE;
  client: receive CQE -> next doorbell (guest + nap).
The nap is what the device's last wait before noticing the doorbell covered after the CQE
(the record `wait` of rox-nic's data path): the store landed somewhere in it, so that is an
upper bound of the device's share and the guest's share is a lower bound.
"""
import argparse
import bisect
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import svgplot  # noqa: E402

PSN_MASK = 0xFFFFFF

SEND_STAGES = [
    ("client: doorbell -> SEND out", "#8c564b"),
    ("bridge client -> server", "#9a9a9a"),
    ("server: frame in -> recv CQE", "#00798c"),
    ("server: guest (poll, post reply)", "#d1495b"),
    ("server: device nap (at most)", "#e08e0b"),
    ("server: doorbell -> SEND out", "#6a3d9a"),
    ("bridge server -> client", "#5f5f5f"),
    ("client: frame in -> recv CQE", "#2e8b57"),
    ("client: guest (poll, post next)", "#f28e9b"),
    ("client: device nap (at most)", "#f5c26b"),
]

# The stages of a WRITE that follow one another from its doorbell to its CQE (they add up to
# its total), for the chart.
WRITE_SEQUENCE = [
    ("doorbell -> fetch", "#8c564b"),
    ("fetch -> first frame out", "#e08e0b"),
    ("frames out (first -> last)", "#2e8b57"),
    ("bridge, last frame", "#9a9a9a"),
    ("peer: last frame in -> ACK out", "#00798c"),
    ("bridge, ACK", "#5f5f5f"),
    ("ACK in -> CQE", "#1f4e9c"),
]

WRITE_STAGES = [
    "doorbell -> fetch",
    "fetch -> first frame out",
    "frames out (first -> last)",
    "bridge, first frame",
    "bridge, last frame",
    "peer: last frame in -> ACK out",
    "bridge, ACK",
    "ACK in -> CQE",
    "total: doorbell -> CQE",
    "peer: frames in (first -> last)",
    "peer: last frame in -> its doorbell (guest + nap)",
    "  of which the peer device's nap (at most)",
]


class Trace:
    """The instants of a rox-trace JSON, indexed for the lookups below."""

    def __init__(self, events):
        self.names = {e["pid"]: e["args"]["name"] for e in events
                      if e.get("ph") == "M" and e.get("name") == "process_name"}
        self.slices = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"])
        self.by_key = {}      # (name, pid, tid, psn, opcode) -> sorted ts
        self.cqes = {}        # (pid, tid, recv) -> sorted ts
        self.device = {}      # pid -> sorted [(ts, name, args)] of every record
        for e in events:
            if e.get("ph") != "i":
                continue
            a = e.get("args", {})
            self.device.setdefault(e["pid"], []).append((e["ts"], e["name"], a))
            if e["name"] in ("frame out", "frame in", "response in"):
                key = (e["name"], e["pid"], a.get("psn"), a.get("opcode"))
                self.by_key.setdefault(key, []).append((e["ts"], e["tid"]))
            elif e["name"] == "cqe":
                self.cqes.setdefault((e["pid"], e["tid"], bool(a.get("recv"))), []).append(e["ts"])
        for v in self.by_key.values():
            v.sort()
        for v in self.cqes.values():
            v.sort()
        for v in self.device.values():
            v.sort(key=lambda r: r[0])
        self.device_ts = {pid: [r[0] for r in v] for pid, v in self.device.items()}

    def pid_named(self, name):
        for pid, n in self.names.items():
            if n == name:
                return pid
        raise ValueError(f"no device named {name!r} (have {sorted(self.names.values())})")

    def first(self, name, pid, psn, opcode, after, tid=None, other_pid=False):
        """(ts, tid) of the first such record at or after `after` (on any pid but `pid` when
        other_pid), or None."""
        pids = [p for p in self.names if p != pid] if other_pid else [pid]
        best = None
        for p in pids:
            rows = self.by_key.get((name, p, psn, opcode), [])
            i = bisect.bisect_left(rows, (after, -1))
            for ts, t in rows[i:]:
                if tid is None or t == tid:
                    if best is None or ts < best[0]:
                        best = (ts, t, p)
                    break
        return best

    def first_cqe(self, pid, tid, recv, after):
        rows = self.cqes.get((pid, tid, recv), [])
        i = bisect.bisect_left(rows, after)
        return rows[i] if i < len(rows) else None

    def last_wait(self, pid, lo, hi):
        """(end µs, args) of the device's last wait that ended in (lo, hi), or None."""
        ts = self.device_ts.get(pid, [])
        i = bisect.bisect_left(ts, hi) - 1
        while i >= 0 and ts[i] > lo:
            if self.device[pid][i][1] == "wait":
                return ts[i], self.device[pid][i][2]
            i -= 1
        return None

    def naps(self, pid, lo, hi):
        """The args of every nap (not the idle sleep) of the device that ended in [lo, hi]."""
        ts = self.device_ts.get(pid, [])
        i, j = bisect.bisect_left(ts, lo), bisect.bisect_right(ts, hi)
        return [r[2] for r in self.device[pid][i:j] if r[1] == "wait" and not r[2].get("idle")]

    def nap_before(self, pid, doorbell_ts, since):
        """How long of (since, doorbell_ts] the device was in the wait that ended just before it
        noticed the doorbell (0 when it was running or spinning), and whether a vCPU wrote the
        wake register meanwhile. After a wake-register write the device's share is from that
        write (the doorbell store came just before it) to the doorbell noticed."""
        ts = self.device_ts.get(pid, [])
        i = bisect.bisect_left(ts, doorbell_ts) - 1
        # The record just before the doorbell (other QPs' doorbells aside): the wait that
        # ended the nap, or work (the device was running).
        while i >= 0 and self.device[pid][i][1] in ("doorbell", "wake"):
            i -= 1
        if i < 0 or self.device[pid][i][0] <= since or self.device[pid][i][1] != "wait":
            return 0.0, False
        t, _, a = self.device[pid][i]
        start = max(t - a.get("waited_us", 0), since)
        j = bisect.bisect_left(ts, start)
        wakes = [r[0] for r in self.device[pid][j:i + 1 + 16] if r[1] == "wake" and start <= r[0] <= doorbell_ts]
        if wakes:
            return max(0.0, doorbell_ts - wakes[-1]), True
        return max(0.0, doorbell_ts - start), False


def slice_frames_out(tr, s):
    st = s["args"].get("stages", {})
    return s["ts"] + st.get("doorbell->fetch_us", 0.0) + st.get("fetch->first frame_us", 0.0)


def next_slice(tr, pid, tid, name, after):
    for s in tr.slices:
        if s["ts"] >= after and s["pid"] == pid and s["tid"] == tid and s["name"] == name:
            return s
    return None


def send_lat_iterations(tr, client, name="SEND 2 B"):
    """[{stage: µs}] per ib_send_lat iteration of the client, and the wake-ups seen."""
    cpid = tr.pid_named(client)
    sends = [s for s in tr.slices if s["name"] == name]
    by_qp = {}
    for s in sends:
        by_qp.setdefault((s["pid"], s["tid"]), []).append(s)
    out, wakes = [], 0
    for s in sends:
        if s["pid"] != cpid:
            continue
        hop1 = one_way(tr, s, by_qp)
        if hop1 is None:
            continue
        reply = hop1["next"]
        hop2 = one_way(tr, reply, by_qp)
        if hop2 is None or hop2["next"]["pid"] != cpid:
            continue
        wakes += hop1["woke"] + hop2["woke"]
        row = dict(zip([n for n, _ in SEND_STAGES], [
            hop1["tx"], hop1["wire"], hop1["rx"], hop1["guest"], hop1["nap"],
            hop2["tx"], hop2["wire"], hop2["rx"], hop2["guest"], hop2["nap"]]))
        row["round trip"] = hop2["next"]["ts"] - s["ts"]
        nan = float("nan")
        row["server: nap after a wake-register write"] = hop1["nap"] if hop1["woke"] else nan
        row["client: nap after a wake-register write"] = hop2["nap"] if hop2["woke"] else nan
        for who, hop in (("server", hop1), ("client", hop2)):
            row[f"bridge to {who}: frame out -> {who}'s wait ends"] = hop["wire_to_wake"]
            row[f"bridge to {who}: wait ended -> frame in"] = hop["wake_to_in"]
        row["ACK: bridge back"] = hop1["ack_wire"]
        row["ACK: in -> send CQE"] = hop1["ack_cqe"]
        out.append(row)
    return out, wakes


def one_way(tr, s, by_qp):
    """A SEND from its doorbell to the peer's next SEND's doorbell, or None when a piece is
    missing (the trace's first or last iteration, an overwritten record)."""
    pid, tid, psn = s["pid"], s["tid"], s["args"].get("first_psn")
    out = tr.first("frame out", pid, psn, "SEND_ONLY", s["ts"], tid=tid)
    if out is None:
        return None
    into = tr.first("frame in", pid, psn, "SEND_ONLY", out[0], other_pid=True)
    if into is None:
        return None
    peer, peer_qp = into[2], into[1]
    rcqe = tr.first_cqe(peer, peer_qp, True, into[0])
    if rcqe is None:
        return None
    later = [r for r in by_qp.get((peer, peer_qp), []) if r["ts"] >= rcqe]
    if not later:
        return None
    nxt = later[0]
    nap, woke = tr.nap_before(peer, nxt["ts"], rcqe)
    ack = tr.first("frame out", peer, psn, "ACK", into[0], tid=peer_qp)
    ack_in = ack and tr.first("response in", pid, psn, "ACK", ack[0], tid=tid)
    cqe = tr.first_cqe(pid, tid, False, s["ts"])
    # Was the receiving data path in a wait when the frame left (then the crossing includes
    # its wake-up), or running?
    woke_up = tr.last_wait(peer, out[0], into[0])
    nan = float("nan")
    return {
        "wire_to_wake": (woke_up[0] - out[0]) if woke_up else nan,
        "wake_to_in": (into[0] - woke_up[0]) if woke_up else nan,
        "tx": out[0] - s["ts"], "wire": into[0] - out[0], "rx": rcqe - into[0],
        "guest": nxt["ts"] - rcqe - nap, "nap": nap, "woke": int(woke), "next": nxt,
        "ack_wire": (ack_in[0] - ack[0]) if ack and ack_in else float("nan"),
        "ack_cqe": (cqe - ack_in[0]) if ack_in and cqe is not None else float("nan"),
    }


def write_iterations(tr, size):
    """[{stage: µs}] per RDMA WRITE of `size` bytes (both directions of ib_write_lat)."""
    name = f"RDMA_WRITE {size} B"
    out = []
    for s in (s for s in tr.slices if s["name"] == name):
        a, st = s["args"], s["args"].get("stages", {})
        pid, tid = s["pid"], s["tid"]
        first, count = a.get("first_psn"), a.get("psns")
        if first is None or not count or "doorbell->CQE (total)_us" not in st:
            continue
        last = (first + count - 1) & PSN_MASK
        ops = ("WRITE_ONLY", "WRITE_ONLY") if count == 1 else ("WRITE_FIRST", "WRITE_LAST")
        f_out = tr.first("frame out", pid, first, ops[0], s["ts"], tid=tid)
        l_out = tr.first("frame out", pid, last, ops[1], s["ts"], tid=tid)
        f_in = f_out and tr.first("frame in", pid, first, ops[0], f_out[0], other_pid=True)
        l_in = l_out and tr.first("frame in", pid, last, ops[1], l_out[0], other_pid=True)
        if not (f_out and l_out and f_in and l_in):
            continue
        peer, peer_qp = l_in[2], l_in[1]
        ack = tr.first("frame out", peer, last, "ACK", l_in[0], tid=peer_qp)
        resp = s["ts"] + st["doorbell->CQE (total)_us"] - st.get("ACK->CQE_us", 0.0)
        nxt = next_slice(tr, peer, peer_qp, name, l_in[0])
        row = {
            "doorbell -> fetch": st.get("doorbell->fetch_us"),
            "fetch -> first frame out": st.get("fetch->first frame_us"),
            "frames out (first -> last)": l_out[0] - f_out[0],
            "bridge, first frame": f_in[0] - f_out[0],
            "bridge, last frame": l_in[0] - l_out[0],
            "peer: last frame in -> ACK out": (ack[0] - l_in[0]) if ack else float("nan"),
            "bridge, ACK": (resp - ack[0]) if ack else float("nan"),
            "ACK in -> CQE": st.get("ACK->CQE_us"),
            "total: doorbell -> CQE": st["doorbell->CQE (total)_us"],
            "peer: frames in (first -> last)": l_in[0] - f_in[0],
            "retransmits": a.get("retransmits", 0),
            "frames": a.get("frames", 0),
            "_ts": s["ts"], "_pid": pid,
        }
        if nxt is not None:
            nap, _ = tr.nap_before(peer, nxt["ts"], l_in[0])
            row["peer: last frame in -> its doorbell (guest + nap)"] = nxt["ts"] - l_in[0]
            row["  of which the peer device's nap (at most)"] = nap
        out.append(row)
    return out


BURST_STAGES = ["doorbell->fetch", "fetch->first frame", "frames out", "last frame->ACK",
                "ACK->CQE", "doorbell->CQE (total)"]


def bursts(tr, name, gap_us=300000.0):
    """Per device, the runs of WQEs named `name` separated by more than `gap_us` of none (one
    ib_write_bw run each): [(pid, [slices])]."""
    out = []
    for pid in sorted(tr.names):
        mine = [s for s in tr.slices if s["pid"] == pid and s["name"] == name]
        run = []
        for s in mine:
            if run and s["ts"] - run[-1]["ts"] > gap_us:
                out.append((pid, run))
                run = []
            run.append(s)
        if run:
            out.append((pid, run))
    return out


def burst_rows(run):
    """{stage: µs} per WQE of a burst ("frames out" = first to last frame, what the others
    leave of the total)."""
    rows = []
    for s in run:
        st = s["args"].get("stages", {})
        total = st.get("doorbell->CQE (total)_us")
        if total is None:
            continue
        row = {k: st.get(f"{k}_us") for k in BURST_STAGES}
        known = sum(v for k, v in row.items() if v is not None and k not in ("frames out", "doorbell->CQE (total)"))
        row["frames out"] = max(0.0, total - known)
        rows.append(row)
    return rows


def qp_peers(tr, pid, lo, hi, wanted):
    """{QP of `pid`: (peer pid, peer QP)} from the frames `pid` sent in [lo, hi] whose opcode
    `wanted(opcode)` takes. PSN and opcode do not say which QP a frame is for: QPs that start
    at the same PSN (every QP of the host bench) send the same (PSN, opcode)s, and the nearest
    frame in with a frame's key is often another QP's. So, per key, the other devices' frames
    in are matched to the sends in order (the link keeps the order of frames), and each QP's
    peer is the QP most of its frames reached, one peer per QP (the most votes first)."""
    votes = {}
    for (name, p, psn, op), rows in tr.by_key.items():
        if name != "frame out" or p != pid or not wanted(op):
            continue
        sends = [r for r in rows if lo <= r[0] <= hi]
        arrivals = sorted((ts, q, t) for q in tr.names if q != pid
                          for ts, t in tr.by_key.get(("frame in", q, psn, op), []) if ts >= lo)
        i = 0
        for ts, q, t in arrivals:
            if i == len(sends):
                break
            if sends[i][0] <= ts:
                v = votes.setdefault(sends[i][1], {})
                v[(q, t)] = v.get((q, t), 0) + 1
                i += 1
    peers, taken = {}, set()
    for n, tid, peer in sorted(((n, tid, peer) for tid, v in votes.items() for peer, n in v.items()),
                               reverse=True):
        if tid not in peers and peer not in taken:
            peers[tid] = peer
            taken.add(peer)
    return peers


def crossings(tr, pid, lo, hi, opcodes):
    """µs from each frame `pid` sent in [lo, hi] (of these opcodes) to its QP's peer
    (`qp_peers`) taking it in."""
    out = []
    peers = qp_peers(tr, pid, lo, hi, lambda op: op in opcodes)
    for (name, p, psn, op), rows in tr.by_key.items():
        if name != "frame out" or p != pid or op not in opcodes:
            continue
        for ts, tid in rows:
            if lo <= ts <= hi and tid in peers:
                into = tr.first("frame in", peers[tid][0], psn, op, ts, tid=peers[tid][1])
                if into is not None:
                    out.append(into[0] - ts)
    return out


def resent_frames(tr, pid, lo, hi, opcodes):
    """How many request frames `pid` sent in [lo, hi] that it had sent before (same QP, PSN and
    opcode): retransmissions and tail probes alike."""
    seen = 0
    for (name, p, _psn, op), rows in tr.by_key.items():
        if name != "frame out" or p != pid or op not in opcodes:
            continue
        per_qp = {}
        for ts, tid in rows:
            if lo <= ts <= hi:
                per_qp[tid] = per_qp.get(tid, 0) + 1
        seen += sum(n - 1 for n in per_qp.values())
    return seen


def frame_rate(tr, pid, lo, hi, bin_us=50000.0):
    """[(ms from lo, request frames out per second)] in bins of `bin_us`."""
    counts = {}
    for (name, p, _psn, op), rows in tr.by_key.items():
        if name == "frame out" and p == pid and op.startswith("WRITE"):
            for ts, _ in rows:
                if lo <= ts <= hi:
                    k = int((ts - lo) // bin_us)
                    counts[k] = counts.get(k, 0) + 1
    if not counts:
        return []
    return [((k + 0.5) * bin_us / 1000, counts.get(k, 0) * 1e6 / bin_us) for k in range(max(counts) + 1)]


def bursts_svg(tr, name, subtitle):
    """Request frames out per second over time, a line per run of WQEs (per QP count)."""
    series = {}
    for pid, run in bursts(tr, name):
        lo, hi = run[0]["ts"], max(s["ts"] + s["dur"] for s in run)
        pts = frame_rate(tr, pid, lo, hi)
        if pts:
            series[f"{tr.names.get(pid, pid)}, {len({s['tid'] for s in run})} QPs"] = pts
    return svgplot.line_chart(series, f"{name}: request frames out per second (50 ms bins)",
                              "ms from the run's first doorbell", "frames/s", subtitle=subtitle)


def burst_report(tr, name):
    lines = []
    for pid, run in bursts(tr, name):
        rows = burst_rows(run)
        if not rows:
            continue
        lo, hi = run[0]["ts"], max(s["ts"] + s["dur"] for s in run)
        qps = len({s["tid"] for s in run})
        busy = sum(s["dur"] for s in run)
        title = (f"{name} from {tr.names.get(pid, pid)}: {len(run)} WQEs on {qps} QPs in "
                 f"{(hi - lo) / 1000:.1f} ms, {sum(s['args'].get('retransmits', 0) for s in run)} "
                 f"retransmissions, {busy / (hi - lo):.1f} WQEs in flight on average")
        requests = ("WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST", "WRITE_ONLY")
        title += (f"; request frames sent again (retransmissions and tail probes): "
                  f"{resent_frames(tr, pid, lo, hi, requests)}")
        lines.append(table(rows, BURST_STAGES, title))
        for what, ops in (("bridge, request frames", requests),
                          ("bridge, ACKs back", ("ACK",))):
            pids = [pid] if what.startswith("bridge, r") else [p for p in tr.names if p != pid]
            vals = [v for p in pids for v in crossings(tr, p, lo, hi, ops)]
            if vals:
                lines.append(f"{what:<52} {len(vals):>5} {statistics.median(vals):>9.2f} "
                             f"{pct(vals, .1):>9.2f} {pct(vals, .9):>9.2f} {statistics.fmean(vals):>9.2f}")
        lines.append("")
    return "\n".join(lines)


def nap_summary(tr, lo, hi):
    """One line per device: its naps in [lo, hi] µs, asked against taken (the host's timer
    slack and scheduling), and how many a frame or a doorbell ended early."""
    lines = []
    for pid in sorted(tr.names):
        naps = [a for a in tr.naps(pid, lo, hi) if a.get("asked_us") is not None]
        if not naps:
            continue
        asked = [a["asked_us"] for a in naps]
        took = [a["waited_us"] for a in naps]
        early = sum(a["waited_us"] < a["asked_us"] for a in naps)
        lines.append(f"{tr.names[pid]}: {len(naps)} naps, asked median {statistics.median(asked):.0f} µs "
                     f"(p90 {pct(asked, .9):.0f}), took median {statistics.median(took):.0f} µs "
                     f"(p90 {pct(took, .9):.0f}); {early} ended before their time (a frame or a wake)")
    return "\n".join(lines)


def excerpt(events, lo, hi):
    """The trace-event document of the events in [lo, hi] µs (slices that overlap it), with
    every device's and track's name: a small file for Perfetto or a document."""
    keep = [e for e in events if e.get("ph") == "M"
            or (e.get("ph") in ("X", "i") and e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo)]
    return {"traceEvents": keep, "displayTimeUnit": "ns"}


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def table(rows, stages, title, fastest_by=None):
    """Per stage: count, median, p10, p90, mean; with `fastest_by` (a stage) also the mean over
    the tenth of the rows where that stage is shortest (what the fastest iterations are made of)."""
    fast = []
    if fastest_by:
        ordered = sorted((r for r in rows if r.get(fastest_by) == r.get(fastest_by)), key=lambda r: r[fastest_by])
        fast = ordered[:max(1, len(ordered) // 10)]
    head = f"{'stage':<52} {'n':>5} {'median':>9} {'p10':>9} {'p90':>9} {'mean':>9}"
    lines = [title, head + (f" {'fast 10%':>9}" if fast else "") + "  (µs)"]
    for st in stages:
        vals = [r[st] for r in rows if isinstance(r.get(st), (int, float)) and r[st] == r[st]]
        if not vals:
            lines.append(f"{st:<52} {0:>5}")
            continue
        line = (f"{st:<52} {len(vals):>5} {statistics.median(vals):>9.2f} {pct(vals, .1):>9.2f} "
                f"{pct(vals, .9):>9.2f} {statistics.fmean(vals):>9.2f}")
        fv = [r[st] for r in fast if isinstance(r.get(st), (int, float)) and r[st] == r[st]]
        if fast:
            line += f" {statistics.fmean(fv):>9.2f}" if fv else f" {'-':>9}"
        lines.append(line)
    return "\n".join(lines)


def sorted_groups(rows, stages, groups=50):
    """The iterations sorted by their sum of `stages`, cut into `groups` groups of (nearly)
    equal size; per group {stage: mean µs} (so a group's bar is its mean round trip) and its
    share of the iterations as "_from"/"_to" (fractions)."""
    names = [n for n, _ in stages]
    ordered = sorted(rows, key=lambda r: sum(r[n] for n in names))
    groups = max(1, min(groups, len(ordered)))
    out = []
    for g in range(groups):
        part = ordered[g * len(ordered) // groups:(g + 1) * len(ordered) // groups]
        row = {n: statistics.fmean(r[n] for r in part) for n in names}
        row["_from"], row["_to"] = g / groups, (g + 1) / groups
        out.append(row)
    return out


def stacked_bars_svg(rows, stages, title, subtitle, groups=25, width=980, height=470):
    """Stacked bars of the stages' mean µs per group of iterations, the groups in order of
    their round trip (fastest left): which stage grows in the slow ones."""
    bars = sorted_groups(rows, stages, groups)
    left, right, top, bottom = 70, width - 20, 96, height - 50
    # The axis ends at the 80 % group's bar (x1.5): the slow tail is orders of magnitude
    # longer and would flatten the rest; bars past it are cut and their totals printed.
    totals = [sum(b[n] for n, _ in stages) for b in bars]
    hi = totals[min(len(bars) - 1, int(0.8 * len(bars)))] * 1.5
    sy = svgplot.Scale(0, hi, bottom, top)
    svg = svgplot.Svg(width, height)
    svg.text(width / 2, 20, title, size=15, anchor="middle", weight="bold")
    svg.text(width / 2, 36, subtitle, size=11, anchor="middle", fill="#555")
    for i, (name, colour) in enumerate(stages):
        col, line = i % 4, i // 4
        svg.rect(left + col * 225, 48 + line * 14, 10, 10, colour)
        svg.text(left + col * 225 + 14, 57 + line * 14, name, size=10)
    for t in svgplot.nice_ticks(0, hi, most=8):
        if t > hi:
            continue
        svg.line(left, sy(t), right, sy(t), stroke="#eeeeee")
        svg.text(left - 6, sy(t) + 4, svgplot.format_number(t), size=10, anchor="end")
    svg.text(16, (top + bottom) / 2, "µs (mean of the group)", size=12, anchor="middle", rotate=-90)
    w = (right - left) / len(bars)
    for i, b in enumerate(bars):
        y = 0.0
        for name, colour in stages:
            v = b[name]
            y0, y1 = sy(min(hi, y)), sy(min(hi, y + v))
            if y0 - y1 > 0:
                svg.rect(left + i * w + 0.5, y1, max(w - 1, 0.5), y0 - y1, colour)
            y += v
        if y > hi:
            svg.text(left + (i + 0.5) * w + 3, sy(hi) + 4, f"{y:.0f}", size=9, anchor="end",
                     rotate=-90, fill="#fff")
    for q in (0, 0.25, 0.5, 0.75, 1.0):
        svg.text(left + q * (right - left), bottom + 14, f"{q:.0%}", size=10, anchor="middle")
    svg.line(left, bottom, right, bottom, stroke="#444")
    svg.text((left + right) / 2, bottom + 32,
             f"{len(rows)} iterations sorted by round trip, in {len(bars)} groups (fastest left; "
             f"bars past the axis are cut, their totals printed)", size=12, anchor="middle")
    return svg.render()


def median_bar_svg(rows, stages, title, subtitle, width=980):
    """One horizontal bar: each stage's median, in order, labelled."""
    height = 150
    left, right = 20, width - 20
    meds = [(n, c, statistics.median(r[n] for r in rows)) for n, c in stages]
    total = sum(m for _, _, m in meds)
    sx = svgplot.Scale(0, total, left, right)
    svg = svgplot.Svg(width, height)
    svg.text(width / 2, 20, title, size=15, anchor="middle", weight="bold")
    svg.text(width / 2, 36, subtitle, size=11, anchor="middle", fill="#555")
    t = 0.0
    for i, (name, colour, m) in enumerate(meds):
        x0, x1 = sx(t), sx(t + m)
        svg.rect(x0, 56, max(0.6, x1 - x0), 34, colour, title=f"{name}: {m:.2f} µs")
        if x1 - x0 > 34:
            svg.text((x0 + x1) / 2, 78, f"{m:.0f}", size=11, anchor="middle", fill="#fff")
        t += m
    for i, (name, colour, m) in enumerate(meds):
        col, line = i % 4, i // 4
        svg.rect(left + col * 240, 102 + line * 14, 10, 10, colour)
        svg.text(left + col * 240 + 14, 111 + line * 14, f"{name} {m:.1f}", size=10)
    return svg.render()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="rox-trace --json output of both devices")
    ap.add_argument("--client", default="client", help="the client device's name (client)")
    ap.add_argument("--write-bytes", type=int, default=1048576, help="the WRITE size (1048576)")
    ap.add_argument("--svg-dir", help="write send-lat-iterations.svg and send-lat-median.svg here")
    ap.add_argument("--subtitle", default="", help="a line under the charts' titles (conditions)")
    ap.add_argument("--bursts-svg", metavar="OUT.svg",
                    help="with --bursts: also draw each run's request frames out per second over time")
    ap.add_argument("--excerpt", nargs=3, metavar=("FROM_US", "TO_US", "OUT"),
                    help="also write the events between these µs of the trace as OUT (JSON)")
    ap.add_argument("--bursts", metavar="WQE_NAME",
                    help="instead: per-stage tables of each run of WQEs so named (e.g. 'RDMA_WRITE 8192 B', "
                         "one per ib_write_bw of tests/bench/qps), with the bridge crossing times")
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            doc = json.load(f)
        tr = Trace(doc["traceEvents"])
        if a.excerpt:
            with open(a.excerpt[2], "w") as f:
                json.dump(excerpt(doc["traceEvents"], float(a.excerpt[0]), float(a.excerpt[1])), f,
                          separators=(",", ":"))
        if a.bursts:
            text = burst_report(tr, a.bursts)
            if not text:
                sys.exit(f"trace_breakdown: no WQE named {a.bursts!r} with a CQE")
            print(text)
            if a.bursts_svg:
                with open(a.bursts_svg, "w") as f:
                    f.write(bursts_svg(tr, a.bursts, a.subtitle))
            return 0
        sends, wakes = send_lat_iterations(tr, a.client)
        writes = write_iterations(tr, a.write_bytes)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"trace_breakdown: {a.trace}: {e}")
    if sends:
        stages = [n for n, _ in SEND_STAGES] + [
            "round trip",
            "bridge to server: frame out -> server's wait ends", "bridge to server: wait ended -> frame in",
            "bridge to client: frame out -> client's wait ends", "bridge to client: wait ended -> frame in",
            "server: nap after a wake-register write",
            "client: nap after a wake-register write", "ACK: bridge back", "ACK: in -> send CQE"]
        print(table(sends, stages, f"ib_send_lat, 2 B: {len(sends)} iterations "
                                   f"(round trip = 2 x the latency perftest reports); "
                                   f"wake-register writes in them: {wakes}", fastest_by="round trip"))
        lo = min(s["ts"] for s in tr.slices if s["name"] == "SEND 2 B")
        hi = max(s["ts"] for s in tr.slices if s["name"] == "SEND 2 B")
        print(nap_summary(tr, lo, hi))
        print()
    for pid in sorted({w["_pid"] for w in writes}):
        mine = [w for w in writes if w["_pid"] == pid]
        title = (f"RDMA WRITE {a.write_bytes} B from {tr.names.get(pid, pid)}: {len(mine)} WRITEs, "
                 f"{sum(w['retransmits'] for w in mine)} retransmissions, "
                 f"{statistics.median(w['frames'] for w in mine):.0f} frames each (median)")
        print(table(mine, WRITE_STAGES, title))
        rate = [a.write_bytes / w["frames out (first -> last)"] for w in mine if w["frames out (first -> last)"] > 0]
        if rate:
            print(f"{'frames out at (MB/s, median)':<52} {len(rate):>5} {statistics.median(rate):>9.1f}")
        print()
    if a.svg_dir and sends:
        sub = a.subtitle or f"{len(sends)} iterations of ib_send_lat -s 2 between two rox guests on the lab bridge"
        with open(os.path.join(a.svg_dir, "send-lat-iterations.svg"), "w") as f:
            f.write(stacked_bars_svg(sends, SEND_STAGES, "ib_send_lat round trip, stage by stage, from fastest to slowest", sub))
        with open(os.path.join(a.svg_dir, "send-lat-median.svg"), "w") as f:
            f.write(median_bar_svg(sends, SEND_STAGES, "ib_send_lat round trip: each stage's median (µs)", sub))
    whole = [w for w in writes if all(w.get(n) == w.get(n) and w.get(n) is not None for n, _ in WRITE_SEQUENCE)]
    if a.svg_dir and whole:
        sub = a.subtitle or (f"{len(whole)} WRITEs of {a.write_bytes} B (ib_write_lat, both directions) "
                             f"between two rox guests on the lab bridge")
        with open(os.path.join(a.svg_dir, "write-median.svg"), "w") as f:
            f.write(median_bar_svg(whole, WRITE_SEQUENCE, f"one {a.write_bytes} B RDMA WRITE: "
                                   "each stage's median (µs), doorbell to CQE", sub))
    if not sends and not writes:
        sys.exit("trace_breakdown: no ib_send_lat iteration and no WRITE of that size found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
