#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/bench/qps_hostcpu.py — the host's side of tests/bench/qps: passes a lab's output
through and, at each run's start and end as the client guest announces them (`QPSSTART run=N`
and `QPS run=N`, tests/bench/qps.sh), adds what the lab's processes have run on the host's
CPUs so far, and how long they waited runnable for a CPU, in ns (the sums of their threads'
/proc/PID/task/TID/schedstat), and the host's monotonic clock (wall):

    HOSTCPU run=N at=start|end nic0=NS nic1=NS qemu0=NS qemu1=NS nicwait0=NS ... wall=NS

nicG is guest G's rox-nic, qemuG its QEMU (G from the run/lab.N/gG/ paths in their command
lines; guest 0 is the client). qps_table.py turns the two into each run's CPU per MiB moved:
whether the devices or the guests cost more at 256 QPs than at 16 does not depend on the load
as a single run's MiB/s does.

    qemu/lab ... | qps_hostcpu.py ROX_NIC_BINARY

Only processes below this pipeline's shell (its parent) are counted.
"""
import os
import re
import sys
import time

MARK = re.compile(r"\b(QPSSTART|QPS) run=(\d+)\b")
GUEST = re.compile(r"/run/lab\.\d+/g(\d+)/")


def ancestors(pid, parents):
    """The chain of parent pids above `pid`."""
    seen = set()
    while pid in parents and pid not in seen:
        seen.add(pid)
        pid = parents[pid]
        yield pid


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def cpu_ns(pid):
    """(on-CPU ns, ns waited runnable) of all of `pid`'s threads ((0, 0) if it is gone)."""
    ran = waited = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for tid in tids:
        s = read(f"/proc/{pid}/task/{tid}/schedstat")
        if s:
            fields = s.split()
            ran += int(fields[0])
            waited += int(fields[1])
    return ran, waited


def processes():
    """{pid: (ppid, exe, cmdline)} of every process readable now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read(f"/proc/{name}/stat")
        if not stat:
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        try:
            exe = os.readlink(f"/proc/{name}/exe")
        except OSError:
            exe = ""
        cmd = (read(f"/proc/{name}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace")
        out[int(name)] = (ppid, exe, cmd)
    return out


def sample(nic_bin, top):
    """{nicG/qemuG: ns run, nicwaitG/qemuwaitG: ns waited} of the lab's processes below pid
    `top`."""
    procs = processes()
    parents = {pid: p[0] for pid, p in procs.items()}
    out = {}
    for pid, (_, exe, cmd) in procs.items():
        if top not in ancestors(pid, parents):
            continue
        if exe == nic_bin:
            kind = "nic"
        elif os.path.basename(exe).startswith("qemu-system"):
            kind = "qemu"
        else:
            continue
        g = GUEST.search(cmd)
        if g:
            ran, waited = cpu_ns(pid)
            for key, ns in ((f"{kind}{g.group(1)}", ran), (f"{kind}wait{g.group(1)}", waited)):
                out[key] = out.get(key, 0) + ns
    return out


def hostcpu_line(run, at, counts):
    counts = dict(counts, wall=time.monotonic_ns())
    return f"HOSTCPU run={run} at={at} " + " ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    nic_bin = os.path.realpath(argv[0])
    top = os.getppid()
    for line in sys.stdin:
        sys.stdout.write(line)
        m = MARK.search(line)
        if m:
            at = "start" if m.group(1) == "QPSSTART" else "end"
            sys.stdout.write(hostcpu_line(m.group(2), at, sample(nic_bin, top)) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
