#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/bench/qps_probes.py — why request frames went twice in a lossless tests/bench/qps run:
for every WRITE frame the client sent twice (a tail probe; nothing else resends on a lossless
link), when the original left the client, reached the server, when the server's ACK covering
it left and reached the client, against when the probe left; whether the server's thread
overslept a wait while the original crossed; how many frames were ahead of the original on
its way; and whether the ACK that covered the probed frame was repeated next (the server
answering the probe as a duplicate, which the requester takes as proof the probe was
spurious, roce/engine/rto.rs).

    qps_probes.py TRACE.json

TRACE.json: `rox-trace CLIENT.wqe-trace SERVER.wqe-trace --name client --name server --json
TRACE.json` of a traced lab (`ROX_NIC_TRACE=1048576 ROX_NIC_TRACE_DIR=DIR tests/bench/qps`).
Both rox-nics trace on the host's one clock. Frames are matched across devices by PSN and
opcode, as trace_breakdown.py does.
"""
import bisect
import collections
import json
import statistics
import sys

PSN_MASK = 0xFFFFFF
CLIENT, SERVER = 1, 2


def covers(ack_psn, psn):
    return ((ack_psn - psn) & PSN_MASK) < (1 << 23)


def load(path):
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    tr = {
        "out_c": collections.defaultdict(list),  # (client tid, psn) -> [ts]
        "opcode": {},  # (client tid, psn) -> opcode
        "in_s": {},  # (psn, opcode) -> (ts, server tid), first arrival
        "ack_out_s": collections.defaultdict(list),  # server tid -> [(ts, psn)]
        "ack_in_c": collections.defaultdict(list),  # client tid -> [(ts, psn)]
        "waits_s": [],  # (start, waited_us, asked_us, idle)
        "req_in_s": [],
        "req_out_c": [],
    }
    for e in ev:
        if e.get("ph") != "i":
            continue
        a, pid, name = e.get("args", {}), e["pid"], e["name"]
        if name == "wait" and pid == SERVER:
            tr["waits_s"].append((e["ts"], a["waited_us"], a["asked_us"], a["idle"]))
            continue
        if name not in ("frame out", "frame in"):
            continue
        op = a["opcode"]
        if pid == CLIENT and name == "frame out" and op.startswith("WRITE"):
            tr["out_c"][(e["tid"], a["psn"])].append(e["ts"])
            tr["opcode"][(e["tid"], a["psn"])] = op
            tr["req_out_c"].append(e["ts"])
        elif pid == SERVER and name == "frame in" and op.startswith("WRITE"):
            tr["in_s"].setdefault((a["psn"], op), (e["ts"], e["tid"]))
            tr["req_in_s"].append(e["ts"])
        elif pid == SERVER and name == "frame out" and op == "ACK":
            tr["ack_out_s"][e["tid"]].append((e["ts"], a["psn"]))
        elif pid == CLIENT and name == "frame in" and op == "ACK":
            tr["ack_in_c"][e["tid"]].append((e["ts"], a["psn"]))
    for k in ("waits_s", "req_in_s", "req_out_c"):
        tr[k].sort()
    for d in (tr["ack_out_s"], tr["ack_in_c"]):
        for v in d.values():
            v.sort()
    return tr


def first_cover(acks, after, psn):
    return next((ts for ts, p in acks if ts >= after and covers(p, psn)), None)


def probes(tr):
    """(original out, probe out, original in at the server, its ACK out, ACK in, client tid, psn)."""
    rows = []
    for (tid, psn), ts in tr["out_c"].items():
        if len(ts) < 2:
            continue
        o, p = sorted(ts)[:2]
        s_ts, s_tid = tr["in_s"].get((psn, tr["opcode"][(tid, psn)]), (None, None))
        a_out = first_cover(tr["ack_out_s"][s_tid], s_ts, psn) if s_ts else None
        a_in = first_cover(tr["ack_in_c"][tid], o, psn)
        rows.append((o, p, s_ts, a_out, a_in, tid, psn))
    return rows


def classify(rows):
    c = collections.Counter()
    for o, p, s, ao, ai, _, _ in rows:
        if s is None:
            c["the original never reached the server"] += 1
        elif s > p:
            c["the original reached the server after the probe left"] += 1
        elif ao is None or ao > p:
            c["the original was at the server before the probe; its ACK left after it"] += 1
        elif ai is None or ai > p:
            c["the ACK left the server before the probe and reached the client after it"] += 1
        else:
            c["the ACK was in before the probe"] += 1
    return c


def crossing(tr, rows):
    """For originals that reached the server after their probe left: frames ahead of them,
    and the largest oversleep of a server wait overlapping their crossing (µs)."""
    ahead, overslept = [], []
    starts = [w[0] for w in tr["waits_s"]]
    for o, p, s, *_ in rows:
        if s is None or s <= p:
            continue
        ahead.append(bisect.bisect_left(tr["req_out_c"], o) - bisect.bisect_right(tr["req_in_s"], o))
        worst = 0
        i = bisect.bisect_left(starts, o - 100_000)
        while i < len(starts) and starts[i] < s:
            ts, waited, asked, idle = tr["waits_s"][i]
            if ts + waited >= o and not idle:
                worst = max(worst, waited - asked)
            i += 1
        overslept.append(worst)
    return ahead, overslept


def repeats(tr, rows):
    c = collections.Counter()
    for _, p, _, _, _, tid, psn in rows:
        acks = [a for a in tr["ack_in_c"][tid] if a[0] >= p]
        cov = [a for a in acks if covers(a[1], psn)]
        if not cov:
            c["no covering ACK after the probe"] += 1
            continue
        nxt = [a for a in acks if a[0] > cov[0][0]]
        if nxt and nxt[0][1] == cov[0][1]:
            c["the covering ACK was repeated next (the probe answered as a duplicate)"] += 1
        else:
            c["not repeated next"] += 1
    return c


def median_ms(xs):
    return f"{statistics.median(xs) / 1000:.2f} ms" if xs else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tr = load(sys.argv[1])
    rows = probes(tr)
    print(f"{len(rows)} request frames sent twice")
    for c, n in classify(rows).most_common():
        print(f"  {n:5d}  {c}")
    print("  original out -> probe out, median", median_ms([p - o for o, p, *_ in rows]))
    print("  probe out -> covering ACK in, median",
          median_ms([ai - p for o, p, s, ao, ai, *_ in rows if ai and ai > p]))
    ahead, overslept = crossing(tr, rows)
    if ahead:
        print(f"  of those that reached the server after their probe: request frames ahead of them on"
              f" the way, median {statistics.median(ahead)}, max {max(ahead)}; a server wait"
              f" overlapping the crossing overslept its timeout by >= 1 ms for"
              f" {sum(1 for x in overslept if x >= 1000)} of {len(overslept)}")
    for c, n in repeats(tr, rows).most_common():
        print(f"  {n:5d}  {c}")


if __name__ == "__main__":
    main()
