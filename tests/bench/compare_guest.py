#!/usr/bin/env python3
"""Guest side of tests/bench/compare: the same benchmark steps, in the same order, on each guest.

Pair mode (two guests on one bridge, each with a rox NIC (rox_0, netdev $ROX_IF_0) and a
virtio-net NIC ($ROX_IF_1, rdma_rxe rxe0 on it)): guest 0 runs every server, guest 1 every
client. Columns:
    rox      guest 1 rox_0 -> guest 0 rox_0
    rxe      guest 1 rxe0  -> guest 0 rxe0   (both on the virtio-net NICs)
    rox-rxe  guest 1 rxe0  -> guest 0 rox_0
    cable    guest 1 rox on the cable -> guest 0 rox on the cable (--cable: the guests' NICs are
             rox,virtio,rox, NIC 0 joined by rox-lab's rox-to-rox cable, NIC 2 the bridge's rox
             NIC; rox devices are found by their netdev)
Loopback mode (one guest): server and client on one device, TCP over 127.0.0.1; columns rox
(rox_0) and rxe (rxe0 on the virtio NIC).
Dual mode (one guest with NICs rox,rox,virtio,virtio, like the first harness's pair mode):
    rox      rox_1 -> rox_0 (out of one rox-nic's tap, across the bridge, into the other's)
    rxe      rxe1 (on the second virtio NIC) -> rxe0 (on the first)

Every step has its own TCP port, so a server left waiting by a failed step never meets the
client of a later one; a client tries again only while its server is not listening yet.
Output, one line per number (the host's compare parses it):
    BENCH <row-key> <column> <value|FAIL>
Exits 1 if any tool failed (its output is printed).
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, "/rox/tests/interop")
sys.path.insert(0, "/rox/tests/lib")
sys.path.insert(0, "/rox/tests/bench")
from cases import NOT_LISTENING, roce_v2_gid_index, sh  # noqa: E402  (shared with interop)
import compare_counters  # noqa: E402  (tests/bench/compare_counters.py: the COUNTERS lines)
import in_guest  # noqa: E402  (tests/lib/in_guest.py: lab addresses, rox.ko, rxe, ports)
import rdma_tool  # noqa: E402  (tests/lib/rdma_tool.py: `rdma statistic` as a dict)

BASE_PORT = 22000
BW_BYTES_PER_STEP = 512 << 20
CONNECT_WINDOW_S = 150
T0 = time.monotonic()


def say(msg):
    print(f"bench: [+{int(time.monotonic() - T0)}s] {msg}", flush=True)


GUEST = in_guest.Guest("bench")
env, wait_active = GUEST.env, GUEST.wait_active


def rox_dev_on(netdev):
    """The rox device whose netdev is `netdev` (`rdma link show`: "link rox_1/1 ... netdev eth3")."""
    for _ in range(100):
        for line in sh("rdma link show", 30)[1].splitlines():
            m = re.match(r"link (rox_\d+)/\d+ .*netdev (\S+)", line)
            if m and m.group(2) == netdev:
                return m.group(1)
        time.sleep(0.2)
    sys.exit(f"bench: no rox device on {netdev}")


def setup(ko, rxe_netdevs):
    """Loads rox.ko and makes rxe<i> on each of `rxe_netdevs`; returns the rxe devices."""
    GUEST.load_rox(ko)
    for i, netdev in enumerate(rxe_netdevs):
        GUEST.add_rxe(f"rxe{i}", netdev)
    return [f"rxe{i}" for i in range(len(rxe_netdevs))]


class Side:
    """One end of a column: device, its GID index, and the address its peer connects to."""

    def __init__(self, dev, ip, here=True):
        # The GID index only exists (and is looked up) on the guest holding the device.
        self.dev, self.ip = dev, ip
        self.gid = roce_v2_gid_index(dev, ip) if here else None


def rows(a):
    """(key, tool template, parser) in table order. The parser returns {key: value} or None."""
    out = []

    def pingpong(text):
        us = re.search(r"iters in [\d.]+ seconds = ([\d.]+) usec/iter", text)
        mbit = re.search(r"= ([\d.]+) Mbit/sec", text)
        if not (us and mbit):
            return None
        k = f"rc_pingpong_{a.pp_size}"
        return {f"{k}_us": us.group(1), f"{k}_mbit": mbit.group(1)}

    out.append((f"rc_pingpong_{a.pp_size}",
                f"ibv_rc_pingpong -d {{dev}} -g {{gid}} -s {a.pp_size} -n {a.pp_iters} -p {{port}}",
                pingpong))

    def perf(key, size, iters, field, minfield=None):
        def parse(text):
            m = re.search(rf"^\s*{size}\s+{iters}\s+[\d.].*$", text, re.M)
            if not m:
                return None
            f = m.group(0).split()
            r = {key: f[field]}
            if minfield is not None:
                r[f"{key}_min"] = f[minfield]
            return r
        return parse

    for s in a.bw_sizes.split():
        iters = bw_iters(a.bw_iters, int(s))
        out.append((f"write_bw_{s}",
                    f"ib_write_bw -d {{dev}} -x {{gid}} -F -s {s} -n {iters} -p {{port}}",
                    perf(f"write_bw_{s}", s, iters, 3)))
    for tool in ("send_lat", "write_lat"):
        for s in a.lat_sizes.split():
            key = f"{tool}_{s}"
            # perftest's latency row: bytes, iterations, t_min, t_max, t_typical, ...
            out.append((key, f"ib_{tool} -d {{dev}} -x {{gid}} -F -s {s} -n {a.lat_iters} -p {{port}}",
                        perf(key, s, a.lat_iters, 4, 2)))
    return [r for r in out if not a.only or a.only in r[0]]


def bw_iters(iters, size):
    """ib_write_bw iterations for `size`: `iters`, but at most BW_BYTES_PER_STEP bytes a step
    (4 MiB x 5000 would be 20 GB per column in a TCG guest), and at least 50."""
    return max(50, min(iters, BW_BYTES_PER_STEP // size))


def client_run(cmd, timeout):
    t0 = time.monotonic()
    while True:
        rc, out = sh(cmd, timeout)
        if rc == 0 or not NOT_LISTENING.search(out) or time.monotonic() - t0 > CONNECT_WINDOW_S:
            return rc, out
        time.sleep(0.5)


def show_failure(who, cmd, rc, out):
    print(f"bench: {who} '{cmd}' exited {rc}:", flush=True)
    for line in out.strip().splitlines()[-25:]:
        print(f"  {line}", flush=True)


def device_counters(dev):
    """{name: value} of rox device `dev`'s port counters and its PMA's port_xmit_discards, or
    None when they cannot be read (the step still runs; its COUNTERS line says so)."""
    try:
        values = rdma_tool.port_counters(dev)
        with open(f"/sys/class/infiniband/{dev}/ports/1/counters/port_xmit_discards") as f:
            values["port_xmit_discards"] = int(f.read())
        return values
    except (rdma_tool.ToolError, OSError, ValueError) as e:
        print(f"bench: cannot read {dev}'s counters: {e}", flush=True)
        return None


def step(n, role, key, col, tmpl, parse, server, client, timeout):
    """Runs one step as `role` (server, client or both for loopback) and prints what the
    counters of the rox devices on this guest's side of it moved by. Returns False on failure."""
    sides = {"server": [("server", server.dev)], "client": [("client", client.dev)],
             "both": [("server", server.dev), ("client", client.dev)]}[role]
    if role == "both" and server.dev == client.dev:
        sides = [("both", server.dev)]
    sides = [(side, dev) for side, dev in sides if dev.startswith("rox")]
    before = [device_counters(dev) for _, dev in sides]
    ok = run_step(n, role, key, col, tmpl, parse, server, client, timeout)
    for (side, dev), b in zip(sides, before):
        a = device_counters(dev)
        deltas = compare_counters.moved(b, a) if a is not None and b is not None else None
        print(compare_counters.line(key, col, side, dev, deltas), flush=True)
    return ok


def run_step(n, role, key, col, tmpl, parse, server, client, timeout):
    """Runs one step as `role`. Returns False on failure."""
    port = BASE_PORT + n
    srv_cmd = tmpl.format(dev=server.dev, gid=server.gid, port=port)
    cli_cmd = tmpl.format(dev=client.dev, gid=client.gid, port=port) + f" {server.ip}"
    if role == "server":
        rc, out = sh(srv_cmd, timeout)
        if rc != 0:
            show_failure(f"{col} server", srv_cmd, rc, out)
            print(f"BENCH {key} {col} FAIL", flush=True)
        return rc == 0
    say(f"{key} on {col}: {client.dev} -> {server.dev} {server.ip}")
    srv = None
    if role == "both":
        srv = subprocess.Popen(f"exec timeout {timeout} {srv_cmd}", shell=True, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace")
    rc, out = client_run(cli_cmd, timeout)
    ok = rc == 0
    if srv:
        srv_out = srv.communicate()[0]
        if srv.returncode != 0:
            show_failure(f"{col} server", srv_cmd, srv.returncode, srv_out)
            ok = False
    values = parse(out) if rc == 0 else None
    if values is None:
        if rc == 0:
            print(f"bench: no result in the output of '{cli_cmd}'", flush=True)
        show_failure(f"{col} client", cli_cmd, rc, out)
        ok = False
    else:
        for line in out.splitlines():
            if re.search(r"iters in|bytes in|^\s*\d+\s+\d+\s+[\d.]", line):
                print(f"  {line.strip()}", flush=True)
        for k, v in values.items():
            print(f"BENCH {k} {col} {v if ok else 'FAIL'}", flush=True)
    if not ok and values is None:
        # One FAIL line per row key the step would have reported.
        for k in ([f"{key}_us", f"{key}_mbit"] if key.startswith("rc_pingpong") else
                  [key, f"{key}_min"] if "_lat_" in key else [key]):
            print(f"BENCH {k} {col} FAIL", flush=True)
    return ok


def ping_rows(pairs):
    """Round trip of the guests' NICs (avg and min µs over 20 pings), per column."""
    ok = True
    for col, ifname, dst in pairs:
        rc, out = sh(f"ping -c 20 -i 0.05 -I {ifname} {dst}", 60)
        m = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)", out)
        if rc != 0 or not m:
            show_failure(f"ping {col}", f"ping -I {ifname} {dst}", rc, out)
            print(f"BENCH ping {col} FAIL\nBENCH ping_min {col} FAIL", flush=True)
            ok = False
            continue
        say(f"ping {ifname} -> {dst}: rtt min/avg/max {m.group(1)}/{m.group(2)}/{m.group(3)} ms")
        print(f"BENCH ping {col} {float(m.group(2)) * 1000:.0f}", flush=True)
        print(f"BENCH ping_min {col} {float(m.group(1)) * 1000:.0f}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--me", type=int, choices=(0, 1), required=True)
    ap.add_argument("--mode", choices=("pair", "loopback", "dual"), default="pair")
    ap.add_argument("--ko", required=True, help="rox.ko path in the guest")
    ap.add_argument("--pp-iters", type=int, default=10000)
    ap.add_argument("--pp-size", type=int, default=4096)
    ap.add_argument("--bw-iters", type=int, default=5000)
    ap.add_argument("--bw-sizes", default="4096 65536")
    ap.add_argument("--lat-iters", type=int, default=1000)
    ap.add_argument("--lat-sizes", default="2")
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--step-timeout", type=int, default=300)
    ap.add_argument("--cable", action="store_true", help="pair mode: NICs rox,virtio,rox, NIC 0 on the cable")
    a = ap.parse_args()

    g = a.me
    if a.mode == "dual":
        rxe_devs = setup(a.ko, [env("ROX_IF_2"), env("ROX_IF_3")])
        wait_active("rox_1")
        columns = [("rox", Side("rox_0", env("ROX_IP_0_0")), Side("rox_1", env("ROX_IP_0_1"))),
                   ("rxe", Side("rxe0", env("ROX_IP_0_2")), Side("rxe1", env("ROX_IP_0_3")))]
        role = "both"
    elif a.mode == "loopback":
        rxe_devs = setup(a.ko, [env("ROX_IF_1")])
        lo = {"rox": Side("rox_0", env(f"ROX_IP_{g}_0")), "rxe": Side("rxe0", env(f"ROX_IP_{g}_1"))}
        for s in lo.values():
            s.ip = "127.0.0.1"
        columns = [(c, lo[c], lo[c]) for c in ("rox", "rxe")]
        role = "both"
    else:
        rxe_devs = setup(a.ko, [env("ROX_IF_1")])
        # With the cable, NIC 0 is on it and the bridge's rox NIC is NIC 2.
        bridge_nic = 2 if a.cable else 0
        rox_if, virtio_if = env(f"ROX_IF_{bridge_nic}"), env("ROX_IF_1")
        rox_dev = rox_dev_on(rox_if)
        wait_active(rox_dev)
        peer = 1 - g
        for n in (0, 1, 2) if a.cable else (0, 1):
            ip = env(f"ROX_IP_{peer}_{n}")
            if sh(f"for i in $(seq 120); do ping -c1 -W1 {ip} >/dev/null && exit 0; done; exit 1", 200)[0]:
                sys.exit(f"bench: {ip} (guest {peer} NIC {n}) does not answer ping")
        # Guest 0's server ends and guest 1's client ends of each column.
        srv_rox = Side(rox_dev, env(f"ROX_IP_0_{bridge_nic}"), here=g == 0)
        srv_rxe = Side("rxe0", env("ROX_IP_0_1"), here=g == 0)
        cli_rox = Side(rox_dev, env(f"ROX_IP_1_{bridge_nic}"), here=g == 1)
        cli_rxe = Side("rxe0", env("ROX_IP_1_1"), here=g == 1)
        columns = [("rox", srv_rox, cli_rox), ("rxe", srv_rxe, cli_rxe), ("rox-rxe", srv_rox, cli_rxe)]
        if a.cable:
            cable_dev = rox_dev_on(env("ROX_IF_0"))
            wait_active(cable_dev)
            columns.append(("cable", Side(cable_dev, env("ROX_IP_0_0"), here=g == 0),
                            Side(cable_dev, env("ROX_IP_1_0"), here=g == 1)))
        role = "server" if g == 0 else "client"
    for col, s, c in columns:
        say(f"{col}: server {s.dev} {s.ip} (GID {s.gid}), client {c.dev} (GID {c.gid})")
    say(f"guest {g}: {os.cpu_count()} vCPUs, {os.uname().release}, load {open('/proc/loadavg').read().split()[:3]}")

    ok = True
    if a.mode == "pair" and role == "client" and (not a.only or a.only in "ping"):
        pings = [("rox", rox_if, env(f"ROX_IP_0_{bridge_nic}")), ("rxe", virtio_if, env("ROX_IP_0_1")),
                 ("rox-rxe", virtio_if, env(f"ROX_IP_0_{bridge_nic}"))]
        if a.cable:
            pings.append(("cable", env("ROX_IF_0"), env("ROX_IP_0_0")))
        ok &= ping_rows(pings)
    n = 0
    for rnd in range(1, a.repeat + 1):
        if a.repeat > 1:
            say(f"round {rnd} of {a.repeat}")
        for key, tmpl, parse in rows(a):
            for col, s, c in columns:
                ok &= step(n, role, key, col, tmpl, parse, s, c, a.step_timeout)
                n += 1
                # Let the other side's program finish and release its port.
                time.sleep(1)
    for dev in rxe_devs:
        sh(f"rdma link delete {dev}", 30)
    say("all benchmarks ran" if ok else "some benchmarks FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
