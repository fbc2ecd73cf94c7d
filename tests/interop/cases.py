#!/usr/bin/env python3
"""Guest side of tests/interop/run: the interop cases between two guests, each running this
script at the same time. Every case runs twice, once with each guest as the client; per step
one guest is the server and the other the client, in the same order on both sides. Each step
uses its own TCP/rdma_cm port, so a server left waiting by a failed step can never meet the
client of a later one.

Each side prints one machine-readable line per step:
    RESULT <step> <server|client> <ok|fail> <case> | <detail>
tests/interop/run pairs them up: a case passes in one direction only if both sides said ok.
After each step each side prints what its own RDMA device's port counters (`rdma statistic`:
rox's or rdma_rxe's) moved by during it, as tests/bench/compare_counters.py's line:
    COUNTERS <step> <server|client> <guest name> <device> name=delta ...
so a slow or failed step can be told apart from one that lost or repeated packets.
"""
import argparse
import ipaddress
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import compare_counters  # noqa: E402  (tests/bench/compare_counters.py: the COUNTERS lines)
import rdma_tool  # noqa: E402  (tests/lib/rdma_tool.py: `rdma statistic` as a dict)

BASE_PORT = 21000
# How long a client keeps trying while the server of its step is not listening yet, and how
# long a server waits for its client: a lost step costs at most this, and never meets a later one.
CONNECT_WINDOW_S = 150
STEP_TIMEOUT_S = 300
XFER_MIB = 256
# Smaller transfers for the cases that add a path (IPv6) or an opcode (FLUSH, ATOMIC WRITE)
# to what the 256 MiB cases already move: ATOMIC WRITE goes 8 bytes per WR.
XFER6_MIB = 32
FLUSH_MIB = 32
ATOMIC_WRITE_KIB = 64
MW_MIB = 16


def sh(cmd, timeout):
    """Runs a shell command; returns (exit status, combined output). 124 on timeout."""
    try:
        p = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, text=True, errors="replace")
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n(timed out after {timeout} s)"


def roce_v2_gid_index(dev, ip):
    """The GID index of `dev` whose GID is `ip` (IPv4: mapped into IPv6) with type RoCE v2."""
    port = f"/sys/class/infiniband/{dev}/ports/1"
    addr = ipaddress.ip_address(ip)
    if addr.version == 4:
        addr = ipaddress.IPv6Address(b"\0" * 10 + b"\xff" * 2 + addr.packed)
    for _ in range(100):
        for name in sorted(os.listdir(f"{port}/gids"), key=int):
            try:
                gid = open(f"{port}/gids/{name}").read().strip()
                kind = open(f"{port}/gid_attrs/types/{name}").read().strip()
            except OSError:
                continue
            if ipaddress.IPv6Address(gid) == addr and kind == "RoCE v2":
                return int(name)
        time.sleep(0.2)
    sys.exit(f"interop: {dev} has no RoCE v2 GID for {ip}")


class Ctx:
    def __init__(self, dev, gid, ip, peer, gid6, ip6, peer6):
        self.dev, self.gid, self.ip, self.peer = dev, gid, ip, peer
        self.gid6, self.ip6, self.peer6 = gid6, ip6, peer6


def pingpong(prog, gid="{gid}"):
    # -c validates every received buffer. gid: "{gid6}" for the IPv6 RoCE v2 GID.
    srv = f"{prog} -d {{dev}} -g {gid} -n 200 -c -p {{port}}"
    cli = srv + " {peer}"
    return srv, cli, lambda out: "iters in" in out


def perftest(prog, extra=""):
    srv = f"{prog} -d {{dev}} -x {{gid}} -p {{port}} -F {extra}"
    cli = srv + " {peer}"
    # A result row: a number at the start of a line after the header (bytes column).
    return srv, cli, lambda out: re.search(r"^\s*\d+\s+\d+\s+[\d.]+", out, re.M) is not None


def rping(ip="{ip}", peer="{peer}"):
    n = 10
    srv = f"rping -s -a {ip} -p {{port}} -C {n} -v -V"
    cli = f"rping -c -a {peer} -p {{port}} -C {n} -v -V"
    return srv, cli, lambda out: out.count("ping data") == n


def ucmatose():
    srv = "ucmatose -b {ip} -p {port} -c 2 -C 20 -S 1024"
    cli = "ucmatose -s {peer} -p {port} -c 2 -C 20 -S 1024"
    return srv, cli, lambda out: "return status 0" in out


def xfer(op, size=f"-m {XFER_MIB}", ip="{ip}", peer="{peer}"):
    srv = f"/tmp/rdma-xfer -s {ip} -p {{port}} {size} -o {op}"
    cli = f"/tmp/rdma-xfer -c {peer} -p {{port}} {size} -o {op}"
    return srv, cli, lambda out: ": equal" in out


CASES = [
    ("ibv_rc_pingpong", pingpong("ibv_rc_pingpong")),
    ("ibv_uc_pingpong", pingpong("ibv_uc_pingpong")),
    ("ibv_ud_pingpong", pingpong("ibv_ud_pingpong")),
    ("ibv_srq_pingpong", pingpong("ibv_srq_pingpong")),
    ("ib_send_bw RC", perftest("ib_send_bw", "-n 500")),
    ("ib_send_bw UD", perftest("ib_send_bw", "-c UD -n 500")),
    ("ib_write_bw", perftest("ib_write_bw", "-n 500")),
    ("ib_read_bw", perftest("ib_read_bw", "-n 500")),
    ("ib_atomic_bw", perftest("ib_atomic_bw", "-n 500")),
    # -C: latencies in CPU cycles. In microseconds perftest divides by a CPU MHz it estimates at
    # start, and under TCG on a loaded host that estimate can fail ("Correlation coefficient
    # r^2 < 0.9"): every latency then prints as inf although all iterations ran. These cases
    # check the exchange, not the clock; tests/bench/compare measures time.
    ("ib_send_lat", perftest("ib_send_lat", "-n 200 -C")),
    ("ib_write_lat", perftest("ib_write_lat", "-n 200 -C")),
    ("ib_read_lat", perftest("ib_read_lat", "-n 200 -C")),
    ("rping", rping()),
    ("ucmatose", ucmatose()),
    (f"RDMA WRITE {XFER_MIB} MiB checksummed", xfer("write")),
    (f"RDMA READ {XFER_MIB} MiB checksummed", xfer("read")),
    # FLUSH: rdma_rxe puts a non-standard ICRC on its FLUSH requests and drops FLUSH requests
    # with the IBA one (docs/interop.md); rox-nic accepts both and, in this lab, sends rxe's
    # (tests/interop/run sets ROX_NIC_FLUSH_ICRC=rxe). The server grants its QP FLUSH access.
    (f"RDMA WRITE {FLUSH_MIB} MiB + FLUSH checksummed", xfer("flush", f"-m {FLUSH_MIB}")),
    (f"ATOMIC WRITE {ATOMIC_WRITE_KIB} KiB checksummed", xfer("atomic-write", f"-K {ATOMIC_WRITE_KIB}")),
    # A type 2 memory window bound by a BIND_MW work request, RDMA WRITE through it, the
    # checksum sent by SEND with invalidate of its R_Key (the receiver requires
    # IBV_WC_WITH_INV and that key), then a WRITE through the dead window must be refused with
    # a remote access error (rdma-xfer -o mw).
    (f"MW bind + SEND_WITH_INV, RDMA WRITE {MW_MIB} MiB through the window checksummed",
     xfer("mw", f"-m {MW_MIB}")),
    # IPv6 RoCE v2 GIDs: verbs with the GID given, rdma_cm with IPv6 addresses.
    ("ibv_rc_pingpong IPv6", pingpong("ibv_rc_pingpong", "{gid6}")),
    ("rping IPv6", rping("{ip6}", "{peer6}")),
    (f"RDMA WRITE {XFER6_MIB} MiB checksummed IPv6", xfer("write", f"-m {XFER6_MIB}", "{ip6}", "{peer6}")),
    (f"RDMA READ {XFER6_MIB} MiB checksummed IPv6", xfer("read", f"-m {XFER6_MIB}", "{ip6}", "{peer6}")),
]

# What a client sees while its server is not listening yet, and nothing else (the only reason
# to try again): a refused TCP connection (pingpong, perftest), or an rdma_cm REJ with reason 8,
# invalid service ID (rping, ucmatose, rdma-xfer).
NOT_LISTENING = re.compile(r"Couldn't connect to \S+:\d+|REJECTED\D{1,12}8\b")
# The line that says what a passing run achieved, per kind of program.
SUMMARY = re.compile(r"iters in|^\s*\d+\s+\d+\s+[\d.]+|ping data|return status|rdma-xfer: (write|read|mw)")


def device_counters(dev):
    """{name: value} of `dev`'s port 1 counters, or None when they cannot be read (the step
    still runs; its COUNTERS line says "unreadable")."""
    try:
        return rdma_tool.port_counters(dev)
    except rdma_tool.ToolError as e:
        print(f"interop: cannot read {dev}'s counters: {e}", flush=True)
        return None


def counters_report(labels, records):
    """The host's lines for the COUNTERS records of the steps (compare_counters.parse's dicts,
    `key` the step): under each step's label ({step: label}), each side's device and what
    moved, in step order."""
    by_step = {}
    for r in records:
        by_step.setdefault(int(r["key"]), []).append(r)
    out = []
    for step in sorted(by_step):
        out.append(f"  {labels.get(step, f'step {step}')}:")
        for r in sorted(by_step[step], key=lambda r: r["column"]):
            if r["moved"] is None:
                what = "unreadable"
            else:
                what = " ".join(f"{k}={v}" for k, v in r["moved"].items()) or "nothing moved"
            out.append(f"    {r['side']} {r['device']} ({r['column']}): {what}")
    return out


def run_step(step, me, ctx, names, case, srv_tmpl, cli_tmpl, check):
    client = step % 2  # even steps: guest 0 is the client; odd: guest 1
    role = "client" if me == client else "server"
    port = BASE_PORT + step
    cmd = (cli_tmpl if role == "client" else srv_tmpl).format(
        dev=ctx.dev, gid=ctx.gid, ip=ctx.ip, peer=ctx.peer, port=port, gid6=ctx.gid6,
        ip6=ctx.ip6, peer6=ctx.peer6)
    label = f"{case} | {names[client]} client -> {names[1 - client]} server"
    before = device_counters(ctx.dev)
    t0 = time.monotonic()
    if role == "server":
        rc, out = sh(cmd, STEP_TIMEOUT_S)
    else:
        while True:
            rc, out = sh(cmd, STEP_TIMEOUT_S)
            if rc == 0 or not NOT_LISTENING.search(out):
                break
            if time.monotonic() - t0 > CONNECT_WINDOW_S:
                break
            time.sleep(1)
    # The client's output must show the result; a server proves itself by its exit status
    # (perftest's latency servers print no result row; pingpong -c and rdma-xfer servers
    # verify the data and exit non-zero on a mismatch).
    after = device_counters(ctx.dev)
    deltas = compare_counters.moved(before, after) if before is not None and after is not None else None
    ok = rc == 0 and (role == "server" or check(out))
    lines = [l for l in out.strip().splitlines() if l.strip()]
    summary = [l for l in lines if SUMMARY.search(l)]
    detail = (summary or lines or ["(no output)"])[-1].strip()
    print(f"RESULT {step} {role} {'ok' if ok else 'fail'} {label} | {detail}", flush=True)
    print(compare_counters.line(str(step), role, names[me], ctx.dev, deltas), flush=True)
    if not ok:
        print(f"--- {role} of step {step} ({cmd}) exited {rc}:", flush=True)
        print("\n".join(lines[-25:]), flush=True)
    # Let the other side's program finish and release its port before the next step.
    time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--me", type=int, required=True, choices=(0, 1), help="this guest's index")
    ap.add_argument("--dev", required=True, help="this guest's RDMA device (rox_0 or rxe0)")
    ap.add_argument("--netdev-mac", help="create rdma_rxe (named --dev) on the netdev with this MAC first")
    ap.add_argument("--ip", required=True, help="this guest's IPv4 address on the link")
    ap.add_argument("--peer", required=True, help="the other guest's IPv4 address")
    ap.add_argument("--ip6", required=True, help="this guest's IPv6 address on the link")
    ap.add_argument("--peer6", required=True, help="the other guest's IPv6 address")
    ap.add_argument("--names", default="rox,rxe", help="names of guests 0 and 1")
    ap.add_argument("--only", help="run only cases whose name matches this regular expression")
    a = ap.parse_args()
    if a.netdev_mac:
        netdev = next((n for n in os.listdir("/sys/class/net")
                       if open(f"/sys/class/net/{n}/address").read().strip() == a.netdev_mac.lower()),
                      None)
        if netdev is None:
            sys.exit(f"interop: no netdev has MAC {a.netdev_mac}")
        rc, out = sh(f"modprobe rdma_rxe && rdma link add {a.dev} type rxe netdev {netdev}", 60)
        if rc != 0:
            sys.exit(f"interop: cannot create {a.dev} on {netdev}: {out}")
    rc, out = sh("gcc -O2 -Wall -Wextra -Werror -o /tmp/rdma-xfer /rox/tests/interop/rdma-xfer.c -lrdmacm -libverbs", 300)
    if rc != 0:
        sys.exit(f"interop: cannot build rdma-xfer: {out}")
    ctx = Ctx(a.dev, roce_v2_gid_index(a.dev, a.ip), a.ip, a.peer,
              roce_v2_gid_index(a.dev, a.ip6), a.ip6, a.peer6)
    names = a.names.split(",")
    print(f"interop: guest {a.me} ({names[a.me]}): {a.dev} GID index {ctx.gid}, {a.ip} <-> {a.peer};"
          f" IPv6 GID index {ctx.gid6}, {a.ip6} <-> {a.peer6}", flush=True)
    # The peer must answer on the link before the first step (its NIC may come up later).
    for peer in (a.peer, a.peer6):
        for _ in range(120):
            if sh(f"ping -c1 -W1 {peer}", 5)[0] == 0:
                break
        else:
            sys.exit(f"interop: {peer} does not answer ping")
    step = 0
    for case, (srv, cli, check) in CASES:
        for _direction in range(2):
            if not a.only or re.search(a.only, case):
                run_step(step, a.me, ctx, names, case, srv, cli, check)
            step += 1


if __name__ == "__main__":
    main()
