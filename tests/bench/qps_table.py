#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/bench/qps_table.py — the table of tests/bench/qps: from each lab's output (the guests'
QPS and QPSRX lines, tests/bench/qps.sh), every run in the order it ran, then per binary and
QP count the medians, the ratio of the medians (each count against the first of QPS_LIST), and
what the two devices did per MiB moved: counts that do not depend on the host's load. Where a
lab has a base run at a count (base=1: a few messages per QP), the per-MiB counts are the
transfer's alone: (run - base) / (run's bytes - base's bytes), the QPs' setup and teardown
(admin commands, each a wake and an interrupt) taken off.

    qps_table.py LABEL=LOG [LABEL=LOG ...]

One lab's bandwidth at one QP count follows how the host schedules the rox-nic threads that
minute; the runs of one lab alternate the counts (QPS_LIST "16 256 16 256 16 256") so that
the medians compare counts under the same load.
"""
import re
import statistics
import sys

LINE = re.compile(r"\b(QPS|QPSRX|HOSTCPU) (run=\d+ .*?)\s*$")
MIB = 1 << 20

# Every run's row: (heading, side, counter); side "c" the client (requester), "s" the server.
RUN_COLUMNS = (("tx_packets", "c", "tx_packets"), ("retransmits", "c", "retransmits"),
               ("ack_timeouts", "c", "local_ack_timeout_err"), ("tail_probes", "c", "roce_adp_retrans"),
               ("xmit_discards", "c", "port_xmit_discards"), ("srv_dups", "s", "duplicate_request"),
               ("srv_oos", "s", "out_of_sequence"))
# Per MiB moved: what each device did for the bytes.
PER_MIB = (("c_tx", "c", "tx_packets"), ("c_rx", "c", "rx_packets"), ("s_rx", "s", "rx_packets"),
           ("s_acks", "s", "acks_sent"), ("s_wakeups", "s", "wakeups"),
           ("s_db_scans", "s", "doorbell_scans"), ("s_irqs", "s", "interrupts"),
           ("c_wakeups", "c", "wakeups"), ("c_db_scans", "c", "doorbell_scans"),
           ("c_irqs", "c", "interrupts"),
           # Host CPU µs of the client's and the server's rox-nic and QEMU, and µs their
           # rox-nic threads waited runnable for a CPU (qps_hostcpu.py).
           ("c_nic_us", "h", "nic0"), ("s_nic_us", "h", "nic1"),
           ("c_qemu_us", "h", "qemu0"), ("s_qemu_us", "h", "qemu1"),
           ("c_nicwait", "h", "nicwait0"), ("s_nicwait", "h", "nicwait1"))


def fields(text):
    """{key: int or float or str} of a line's key=value words."""
    out = {}
    for word in text.split():
        k, _, v = word.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def parse(text):
    """The runs of one lab's output in run order: [{run, qps, bw, bytes, c: {..}, s: {..},
    h: {..}}] (h: the host's CPU µs of each process during the run, from the HOSTCPU lines at
    its start and end). A run the server reported and the client did not (it failed) is left
    out."""
    client, server, host = {}, {}, {}  # run number -> fields
    for line in text.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        f = fields(m.group(2))
        if m.group(1) == "HOSTCPU":
            host.setdefault(f["run"], {})[f.get("at")] = f
            continue
        (client if m.group(1) == "QPS" else server)[f["run"]] = f
    runs = []
    for n in sorted(client):
        c = client[n]
        runs.append({"run": n, "qps": c["qps"], "bw": float(c["bw_MiBps"]), "base": c.get("base", 0) == 1,
                     "bytes": c.get("bytes", c["messages"] * 8192), "c": c, "s": server.get(n, {}),
                     "h": host_cpu_us(host.get(n, {}))})
    return runs


def host_cpu_us(marks):
    """{process: µs} the lab's processes ran between a run's HOSTCPU start and end marks."""
    start, end = marks.get("start"), marks.get("end")
    if not start or not end:
        return {}
    return {k: (v - start[k]) // 1000 for k, v in end.items()
            if k not in ("run", "at") and isinstance(v, int) and isinstance(start.get(k), int)}


def net_of_base(runs):
    """The timed runs, each with `net`: its counts less its count's base run's, and the bytes
    between (the run itself where there is no base run)."""
    bases = {r["qps"]: r for r in runs if r["base"]}
    out = []
    for r in runs:
        if r["base"]:
            continue
        b = bases.get(r["qps"])
        if b is None or b["bytes"] >= r["bytes"]:
            net = {"bytes": r["bytes"], "c": r["c"], "s": r["s"], "h": r.get("h", {})}
        else:
            net = {"bytes": r["bytes"] - b["bytes"]}
            for side in "csh":
                net[side] = {k: v - b[side][k] for k, v in r[side].items()
                             if isinstance(v, int) and isinstance(b[side].get(k), int)}
        out.append(dict(r, net=net))
    return out


def per_mib(run, side, name):
    """Counter `name` of `side` per MiB of the run's transfer (its base run's taken off)."""
    net = run.get("net", run)
    v = net.get(side, {}).get(name)
    return None if v is None else v * MIB / net["bytes"]


def fmt(v, places=2):
    return "?" if v is None else f"{v:.{places}f}"


def summary(runs):
    """{qps: (median MiB/s, {per-MiB name: median}, runs)} of the timed runs (as net_of_base
    gives them), in the order the counts first ran."""
    out = {}
    for q in dict.fromkeys(r["qps"] for r in runs):
        mine = [r for r in runs if r["qps"] == q]
        per = {}
        for name, side, counter in PER_MIB:
            vals = [v for v in (per_mib(r, side, counter) for r in mine) if v is not None]
            per[name] = statistics.median(vals) if vals else None
        out[q] = (statistics.median(r["bw"] for r in mine), per, len(mine))
    return out


def beats(runs, q, base_q):
    """Of all pairs (a run at `base_q`, a run at `q`) of `runs`, the share where the `q` run
    moved more (ties count half): how often the count wins a coin toss of single runs, which
    does not hang on a few slow runs as a median of few does."""
    a = [r["bw"] for r in runs if r["qps"] == base_q]
    b = [r["bw"] for r in runs if r["qps"] == q]
    if not a or not b:
        return None
    wins = sum((y > x) + 0.5 * (y == x) for x in a for y in b)
    return wins / (len(a) * len(b))


def table(labs):
    """The report's lines for [(label, runs)] (runs as parse() gives them)."""
    base_lines = []
    for label, runs in labs:
        for r in (r for r in runs if r["base"]):
            base_lines.append(f"{label:<10} {r['run']:>3} {r['qps']:>5} {r['c'].get('messages', '?'):>8} "
                              + " ".join(f"{r[side].get(c, '?'):>10}" for _, side, c in PER_MIB))
    labs = [(label, net_of_base(runs)) for label, runs in labs]
    lines = ["every run, in the order it ran (c: the client's device, srv: the server's):",
             f"{'lab':<10} {'run':>3} {'qps':>5} {'MiB/s':>9} " + " ".join(f"{h:>13}" for h, _, _ in RUN_COLUMNS)]
    for label, runs in labs:
        for r in runs:
            cells = " ".join(f"{r[side].get(c, '?'):>13}" for _, side, c in RUN_COLUMNS)
            lines.append(f"{label:<10} {r['run']:>3} {r['qps']:>5} {r['bw']:>9.2f} {cells}")
    lines.append("per MiB moved, every run, its base run's counts taken off (c_: the client's device, "
                 "s_: the server's; tx/rx: RoCE packets):")
    lines.append(f"{'lab':<10} {'run':>3} {'qps':>5} " + " ".join(f"{h:>10}" for h, _, _ in PER_MIB))
    for label, runs in labs:
        for r in runs:
            lines.append(f"{label:<10} {r['run']:>3} {r['qps']:>5} "
                         + " ".join(f"{fmt(per_mib(r, s, c)):>10}" for _, s, c in PER_MIB))
    if base_lines:
        lines.append("base runs (connect, a few messages per QP, tear down), what the devices counted:")
        lines.append(f"{'lab':<10} {'run':>3} {'qps':>5} {'messages':>8} " + " ".join(f"{h:>10}" for h, _, _ in PER_MIB))
        lines += base_lines
    lines.append("medians per lab and QP count; ratio: the median MiB/s against the first count's:")
    lines.append(f"{'lab':<10} {'qps':>5} {'runs':>4} {'MiB/s':>9} {'ratio':>6} "
                 + " ".join(f"{h:>10}" for h, _, _ in PER_MIB))
    for label, runs in labs:
        if not runs:
            lines.append(f"{label:<10} no run finished")
            continue
        s = summary(runs)
        base = next(iter(s.values()))[0]
        for q, (bw, per, n) in s.items():
            ratio = bw / base if base else None
            lines.append(f"{label:<10} {q:>5} {n:>4} {bw:>9.2f} {fmt(ratio):>6} "
                         + " ".join(f"{fmt(per[h]):>10}" for h, _, _ in PER_MIB))
    pooled = {}
    for label, runs in labs:
        pooled.setdefault(label.split("#")[0], []).extend(runs)
    if len(pooled) < len(labs):
        lines.append("medians over every lab of a binary (labs of one label pooled):")
        lines.append(f"{'binary':<10} {'qps':>5} {'runs':>4} {'MiB/s':>9} {'ratio':>6} {'wins':>5} lab ratios "
                     "(wins: the share of pairs of single runs in which this count moved more than the first)")
        for binary, runs in pooled.items():
            s = summary(runs) if runs else {}
            if not s:
                continue
            base = next(iter(s.values()))[0]
            each = [summary(r) for label, r in labs if label.split("#")[0] == binary and r]
            for q, (bw, _, n) in s.items():
                ratios = "" if q == next(iter(s)) else " ".join(
                    fmt(e[q][0] / next(iter(e.values()))[0]) for e in each if q in e)
                win = beats(runs, q, next(iter(s)))
                lines.append(f"{binary:<10} {q:>5} {n:>4} {bw:>9.2f} {fmt(bw / base if base else None):>6} "
                             f"{fmt(win):>5} {ratios}".rstrip())
        lines.append("per MiB moved, medians over every lab of a binary:")
        lines.append(f"{'binary':<10} {'qps':>5} {'runs':>4} " + " ".join(f"{h:>10}" for h, _, _ in PER_MIB))
        for binary, runs in pooled.items():
            for q, (_, per, n) in (summary(runs) if runs else {}).items():
                lines.append(f"{binary:<10} {q:>5} {n:>4} " + " ".join(f"{fmt(per[h]):>10}" for h, _, _ in PER_MIB))
    return lines


def main(argv):
    if not argv or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    labs = []
    for arg in argv:
        label, _, path = arg.partition("=")
        with open(path, errors="replace") as f:
            labs.append((label, parse(f.read())))
    print("\n".join(table(labs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
