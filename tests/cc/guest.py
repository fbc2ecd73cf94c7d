#!/usr/bin/env python3
"""Guest side of tests/cc/run, the congestion lab: two flows into one receiver whose rox-nic sits
behind a bottleneck (rox-nic --bottleneck: a rate-limited switch queue that marks CE as RED does,
docs/congestion-lab.md). Flow 0 WRITEs into the receiver; flow 1 is a READ flow whose data
crosses the bottleneck too: the receiver READs from guest 1, so guest 1's READ responses are
what the bottleneck queues, marks and drops (and guest 1, the responder, takes the CNPs).

    guest.py receiver SECONDS SIZE      guest 2: the ib_write_bw server of flow 0 and the start
                                        barrier; after it, the ib_read_bw client of flow 1
                                        (timing its per-second reports); at the end its counters
                                        (the bottleneck's among them, `bottleneck_*`) and, to
                                        check them against, the bottleneck's own last log line
    guest.py sender 0 SECONDS SIZE      guest 0: waits at the barrier, then WRITEs SIZE bytes
                                        messages to the receiver for SECONDS, timing each of
                                        ib_write_bw's per-second reports
    guest.py sender 1 SECONDS SIZE      guest 1: the ib_read_bw server (the READ responder) of
                                        flow 1, up before the barrier, stopped after SECONDS

Each guest prints one line `CC {json}` for the host (rox-lab prefixes it [gN]) and exits 1 if a
step failed (its output is printed). $ROX_KO is rox.ko as the guest sees it.
"""
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, "/rox/tests/interop")
sys.path.insert(0, "/rox/tests/lib")
from cases import roce_v2_gid_index, sh  # noqa: E402  (shared with interop)
import in_guest  # noqa: E402  (the lab's addresses, device ports)
import rdma_tool  # noqa: E402  (rdma -j statistic)
from ready_port import listening  # noqa: E402  (TCP or rdma_cm listener on a port)

DEV = "rox_0"
BW_BASE_PORT = 18515
BARRIER_PORT = 18600
FLOWS = 2
# The guests boot at different times under TCG: how long the first may wait for the others.
BARRIER_WAIT_S = 400
# How long a perftest server may take to listen on its TCP port (a loaded TCG guest starts it
# in a second or two): perftest's client does not retry a refused connection.
LISTEN_WAIT_S = 60
# Receiver: how long after the flows' end before the last counters (the senders stop, their
# last frames drain through the bottleneck, rox-nic logs its counters within a second).
SETTLE_S = 3
# perftest's report line: bytes, iterations, BW peak, BW average [MB/s], MsgRate [Mpps].
BW_LINE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
BOTTLENECK_LINE = re.compile(r"bottleneck stats: (.*)$", re.M)

GUEST = in_guest.Guest("cc")


def say(msg):
    print(f"cc: {msg}", flush=True)


def setup():
    GUEST.load_rox(GUEST.env("ROX_KO"))
    # This guest's lab address: ROX_IP_<G>_0, G its number (ROX_GUEST).
    return roce_v2_gid_index(DEV, GUEST.env(f"ROX_IP_{GUEST.env('ROX_GUEST')}_0"))


def counters():
    try:
        return rdma_tool.port_counters(DEV)
    except rdma_tool.ToolError as e:
        return {"error": str(e)}


# Flow 1 is the READ flow (its data from guest 1 into the receiver); flow 0 WRITEs.
READ_FLOW = 1


def bw_cmd(gid, port, size, server_ip="", tool="ib_write_bw"):
    return (f"{tool} -d {DEV} -x {gid} -F -s {size} --run_infinitely -D 1 -p {port} "
            f"{server_ip}").strip()


def timed_reports(cmd, seconds):
    """Runs perftest client `cmd` for `seconds`: ([[t, MB/s] per report], its last lines)."""
    t0 = time.monotonic()
    p = subprocess.Popen(shlex.split(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    samples, raw = [], []
    # Reads perftest's reports on a thread: the main one stops it on time.
    def read():
        for line in p.stdout:
            raw.append(line)
            m = BW_LINE.match(line)
            if m:
                samples.append([round(time.monotonic() - t0, 3), float(m.group(4))])
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.kill()
    p.wait()
    reader.join(timeout=5)
    return samples, "".join(raw[-40:])


def wait_listening(port, proc, what):
    """Waits until `proc` (a perftest server) listens on `port`: None, or why it did not."""
    deadline = time.monotonic() + LISTEN_WAIT_S
    while not listening(port):
        if proc.poll() is not None:
            return f"{what} ended (exit {proc.returncode}) before it listened on port {port}"
        if time.monotonic() > deadline:
            return f"{what} did not listen on port {port} within {LISTEN_WAIT_S} s"
        time.sleep(0.2)
    return None


def barrier_serve(go_at, word="go"):
    """Accepts FLOWS senders, then tells them all `word` at once ("go": records when into
    go_at; anything else tells them the receiver failed)."""
    srv = socket.create_server(("", BARRIER_PORT))
    srv.settimeout(BARRIER_WAIT_S)
    conns = []
    try:
        while len(conns) < FLOWS:
            conns.append(srv.accept()[0])
        if word == "go":
            go_at.append(time.monotonic())
        for c in conns:
            c.sendall(f"{word}\n".encode())
    finally:
        for c in conns:
            c.close()
        srv.close()


def barrier_wait(receiver_ip):
    """Connects to the receiver's barrier (retrying while it is not up) and waits for go."""
    deadline = time.monotonic() + BARRIER_WAIT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((receiver_ip, BARRIER_PORT), timeout=5) as s:
                s.settimeout(BARRIER_WAIT_S)
                word = s.makefile().readline().strip()
                if word == "go":
                    return
                if word:
                    sys.exit(f"cc: the receiver's barrier said {word!r}")
        except OSError:
            time.sleep(0.5)
    sys.exit("cc: the receiver's barrier never said go")


def receiver(seconds, size):
    gid = setup()
    # No shell between: kill() must stop ib_write_bw itself (it holds the output pipe).
    servers = [subprocess.Popen(shlex.split(bw_cmd(gid, BW_BASE_PORT + f, size)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for f in range(FLOWS) if f != READ_FLOW]
    # The senders' clients connect once they pass the barrier: the servers listen first.
    write_flows = [f for f in range(FLOWS) if f != READ_FLOW]
    not_up = [wait_listening(BW_BASE_PORT + f, server, f"flow {f}'s ib_write_bw server")
              for f, server in zip(write_flows, servers)]
    not_up = [why for why in not_up if why]
    before = counters()
    go_at = []
    barrier = threading.Thread(target=barrier_serve,
                               args=(go_at, "fail" if not_up else "go"))
    barrier.start()
    barrier.join()
    failed = not go_at
    read_samples = []
    if not_up:
        say("FAIL: " + "; ".join(not_up))
    elif failed:
        say("FAIL: the senders never both reached the barrier")
    else:
        say(f"both senders started; the flows run {seconds} s")
        cmd = bw_cmd(gid, BW_BASE_PORT + READ_FLOW, size, GUEST.env(f"ROX_IP_{READ_FLOW}_0"),
                     tool="ib_read_bw")
        started = time.monotonic()
        read_samples, tail = timed_reports(cmd, seconds)
        # A READ client that ended early (it failed) must not cut the run short: the counters
        # are read after flow 0's `seconds` too, else they miss what still crossed the
        # bottleneck and disagree with its log.
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        # How many reports come in the time depends on the machine: the host judges the flow
        # by the counters (the data its responder sent), the reports only draw it.
        say(f"READ flow {READ_FLOW}: {len(read_samples)} reports in {seconds} s")
        if not read_samples:
            print(tail)
        time.sleep(SETTLE_S)
    after = counters()
    outs = []
    for s in servers:
        s.kill()
        try:
            outs.append(s.communicate(timeout=10)[0])
        except subprocess.TimeoutExpired:
            outs.append("(ib_write_bw server did not stop)")
    log = open("/run/rox/rox-nic0.log", errors="replace").read()
    stats = BOTTLENECK_LINE.findall(log)
    bottleneck = dict(kv.split("=") for kv in stats[-1].split()) if stats else {}
    bottleneck = {k: int(v) for k, v in bottleneck.items()}
    if not stats:
        say("FAIL: no bottleneck stats in rox-nic0.log")
        failed = True
    if "panicked" in log:
        say("FAIL: rox-nic panicked: " + log[log.index("panicked") - 200:][:600])
        failed = True
    # Every line (logged at most once a second while the counts change): where in time the
    # drops and marks fell.
    series = [{k: int(v) for k, v in (kv.split("=") for kv in line.split())} for line in stats]
    print("CC " + json.dumps({"role": "receiver", "counters_before": before,
                              "counters": after, "bottleneck_log": bottleneck,
                              "bottleneck_series": series,
                              "read_flow": READ_FLOW, "read_samples": read_samples}), flush=True)
    if failed:
        for o in outs:
            print(o[-2000:])
    return 1 if failed else 0


def read_responder(flow, seconds, size):
    """Flow `flow`'s READ responder: its ib_read_bw server is up before the barrier; the
    receiver's client READs for `seconds` after it (the receiver reports the throughput)."""
    gid = setup()
    server = subprocess.Popen(shlex.split(bw_cmd(gid, BW_BASE_PORT + flow, size,
                                                 tool="ib_read_bw")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The receiver's client connects once the barrier says go: the server listens first.
    # If it never does, the barrier is still joined (the others need not wait it out).
    not_up = wait_listening(BW_BASE_PORT + flow, server, f"flow {flow}'s ib_read_bw server")
    if not_up:
        say(f"FAIL: {not_up}")
    before = counters()
    barrier_wait(GUEST.env("ROX_IP_2_0"))
    time.sleep(seconds + SETTLE_S)
    after = counters()
    server.kill()
    try:
        out = server.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        out = "(ib_read_bw server did not stop)"
    # The server's exit status says nothing (it ends when its client is stopped): the
    # receiver judges the flow by its reports.
    say(f"flow {flow}: ib_read_bw server: {out[-300:]!r}")
    print("CC " + json.dumps({"role": "sender", "flow": flow, "op": "read", "samples": [],
                              "counters_before": before, "counters": after}), flush=True)
    return 1 if not_up else 0


def sender(flow, seconds, size):
    if flow == READ_FLOW:
        return read_responder(flow, seconds, size)
    gid = setup()
    receiver_ip = GUEST.env("ROX_IP_2_0")
    before = counters()
    barrier_wait(receiver_ip)
    samples, tail = timed_reports(bw_cmd(gid, BW_BASE_PORT + flow, size, receiver_ip), seconds)
    after = counters()
    # The host judges the flow by the counters; how many reports come depends on the machine.
    say(f"flow {flow}: {len(samples)} throughput reports in {seconds} s")
    if not samples:
        print(tail)
    print("CC " + json.dumps({"role": "sender", "flow": flow, "op": "write", "samples": samples,
                              "counters_before": before, "counters": after}), flush=True)
    return 0


def main():
    role = sys.argv[1]
    if role == "receiver":
        return receiver(int(sys.argv[2]), int(sys.argv[3]))
    if role == "sender":
        return sender(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    sys.exit(f"cc: unknown role {role}")


if __name__ == "__main__":
    sys.exit(main())
