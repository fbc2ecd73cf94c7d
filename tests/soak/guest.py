#!/usr/bin/env python3
"""Guest side of tests/soak/run: rounds of verified RDMA streams between two guests, each
guest holding a rox NIC (rox_0) and a virtio-net NIC with rdma_rxe on it (rxe0), both guests
running this script with the same arguments but --me. Guest 0 runs every server, guest 1
every client; each job of a round has its own port, so a server left waiting by a failed job
never meets the client of a later one; a client starts once its server says it listens (guest
0's ready board, one TCP port: tests/lib/ready_port.py), however far apart the guests run.

Jobs (--plan):
  hunt   per round, a verified rsockets stream rox_0 <-> rox_0 (`rstream -S 65536 -C 200 -T v`,
         every third round riostream), with, at the same time, other traffic in turn: perftest
         over 8 rox QPs, rdma_rxe traffic on the virtio NICs plus rox READs, a second
         rsockets stream, or nothing.
  soak   per round, one after the other: rsockets streams rox <-> rox and rox <-> rxe
         (rstream, riostream, verified), RDMA WRITE and READ of --xfer-mib checksummed
         (tests/interop/rdma-xfer.c) both pairs, and a sequence-numbered RC SEND stream of
         --messages (tests/soak/send-seq.c) both pairs; the rox <-> rox transfers between
         `COUNTERS` lines as in the loss plan.
  loss   per round, RDMA WRITE then READ of --xfer-mib checksummed between the --pair (server
         device on guest 0 - client device on guest 1, the client the requester): rox-rox,
         rox-rxe (rxe0 WRITEs to / READs from rox_0) or rxe-rox (rox_0 WRITEs to / READs from
         rxe0), or both of the last two one after the other; each job between two `COUNTERS` lines of both devices of both guests (before
         and after) so tests/soak/run can tell what each transfer sent: the loss-recovery
         measurement (retransmitted bytes, goodput).

Each side prints one line per job:
    RESULT <round> <job> <server|client> <ok|fail> | <detail>
and at the end the devices' counters (`rdma statistic`) as `COUNTERS <dev> name=value ...`.
"""
import argparse
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, "/rox/tests/interop")
sys.path.insert(0, "/rox/tests/lib")
from cases import roce_v2_gid_index, sh  # noqa: E402  (shell runner, RoCE v2 GID lookup)
import in_guest  # noqa: E402  (tests/lib/in_guest.py: lab addresses, rox.ko, rxe, ports)
import ready_port  # noqa: E402  (tests/lib/ready_port.py: the server's "ready" to its client)

# Job ports BASE_PORT..+PORT_SPAN, the ready board just above: all below Linux's ephemeral
# range (32768-60999), where any outgoing connection may hold a port.
BASE_PORT = 10000
PORT_SPAN = 10000
BOARD_PORT = ready_port.board_port(BASE_PORT, PORT_SPAN)
JOB_TIMEOUT_S = 900
CONNECT_WINDOW_S = 120
# A client starts only once its server listens: an rsockets client that meets no listener fails
# in rpoll with no clear "not listening" message (its server then waits for a client that never
# comes), and the server's guest may be seconds behind this one. So the server side, once its
# program listens (a TCP or rdma_cm listener on the job's port), posts "ready" for the job on
# its board (opened when guest 0's script starts) and the client asks there first; the line it
# gets says "ready", or why the server's side failed (tests/lib/ready_port.py).
# How long a client waits for its server to be ready: the server's guest starts the job only
# when its previous job is over, however long that took (its board says "pending" meanwhile,
# so a server's guest that stopped is told within ready_port.STALL_S, not this).
READY_WAIT_S = 600
# How long a client tries to reach the board the first time: guest 0 opens it as its script
# starts, and both guests boot together (this client starts once guest 0 answers ping).
BOARD_FIRST_CONTACT_S = 120
# In a hunt round the other traffic starts first; the verified stream joins it this much later.
BACKGROUND_HEAD_START_S = 3
# Guest 0's board (guest 0), or the client of it (guest 1), set by main: reached on guest 0's
# virtio NIC's address (TCP recovers from whatever the rox ports' faults do to frames).
board = None
# What a client sees while its server is not listening yet (the only reason to try again):
# a refused TCP connection (perftest) or an rdma_cm reject (rsockets, rdma-xfer, send-seq).
NOT_LISTENING = re.compile(r"Couldn't connect to \S+:\d+|REJECTED|Connection refused|"
                           r"unable to connect|rconnect")
# A verified stream that went wrong says so, whatever its exit status.
BAD_DATA = re.compile(r"verification failed|DIFFERENT|corrupted [1-9]|lost [1-9]|duplicated [1-9]")
SUMMARY = re.compile(r"^\s*\S+\s+\S+\s+\d+\s+[\d.]+\S*\s+[\d.]+|rdma-xfer: (write|read)|"
                     r"send-seq: .*messages|^\s*\d+\s+\d+\s+[\d.]+")


GUEST = in_guest.Guest("soak")
env = GUEST.env


def setup(ko, rxe_netdev):
    GUEST.load_rox(ko)
    GUEST.add_rxe("rxe0", rxe_netdev)
    for src, exe in (("/rox/tests/interop/rdma-xfer.c", "/tmp/rdma-xfer"),
                     ("/rox/tests/soak/send-seq.c", "/tmp/send-seq")):
        rc, out = sh(f"gcc -O2 -o {exe} {src} -lrdmacm -libverbs", 300)
        if rc != 0:
            sys.exit(f"soak: cannot build {exe}: {out}")


class Ends:
    """Addresses and GID indexes of one pair of devices: server side (guest 0), client side
    (guest 1). Only this guest's own GID index is looked up (the other guest holds the other)."""

    def __init__(self, me, srv_dev, srv_ip, cli_dev, cli_ip):
        self.srv_dev, self.srv_ip, self.cli_dev, self.cli_ip = srv_dev, srv_ip, cli_dev, cli_ip
        dev, ip = (srv_dev, srv_ip) if me == 0 else (cli_dev, cli_ip)
        self.gid = roce_v2_gid_index(dev, ip)


def route(ip, dev, src):
    """Traffic to `ip` leaves through `dev` from `src` (both NICs of a guest share a subnet; the
    RDMA device under test is chosen by the netdev rdma_cm's route takes)."""
    rc, out = sh(f"ip route replace {ip}/32 dev {dev} src {src}", 30)
    if rc != 0:
        sys.exit(f"soak: ip route {ip} via {dev}: {out}")


def setup_routes(me, plan, ip, ifs):
    """rox <-> rox on the rox netdevs, rxe <-> rxe on the virtio ones; in a soak, guest 0's rox
    answers guest 1's rxe (rox <-> rxe). ARP answers only for an interface's own address."""
    for knob in ("arp_ignore=1", "arp_announce=2"):
        sh(f"sysctl -qw net.ipv4.conf.all.{knob}", 30)
    peer = 1 - me
    route(ip[peer, 0], ifs[0], ip[me, 0])
    if me == 1 or plan == "hunt":
        route(ip[peer, 1], ifs[1], ip[me, 1])
    else:
        route(ip[peer, 1], ifs[0], ip[me, 0])


def loss_ends(me, pair, ip, ifs):
    """The loss plan's server (guest 0) and client (guest 1) devices of `pair`, and the routes
    that make each side's traffic to the other leave through the netdev of its device (the
    server's, guest 0's, answers through it too)."""
    names = {"rox": ("rox_0", 0), "rxe": ("rxe0", 1)}
    (srv_dev, srv_n), (cli_dev, cli_n) = (names[d] for d in pair.split("-"))
    if me == 0:
        route(ip[1, cli_n], ifs[srv_n], ip[0, srv_n])
    else:
        route(ip[0, srv_n], ifs[cli_n], ip[1, cli_n])
    return Ends(me, srv_dev, ip[0, srv_n], cli_dev, ip[1, cli_n])


def rsockets(tool, ends, size, count):
    common = f"-S {size} -C {count} -T v -p {{port}}"
    return (f"{tool} -b {ends.srv_ip} {common}", f"{tool} -s {ends.srv_ip} {common}")


def perftest(tool, ends, extra):
    srv = f"{tool} -d {ends.srv_dev} -x {ends.gid} -F -p {{port}} {extra}"
    cli = f"{tool} -d {ends.cli_dev} -x {ends.gid} -F -p {{port}} {extra} {ends.srv_ip}"
    return srv, cli


def xfer(ends, op, mib):
    return (f"/tmp/rdma-xfer -s {ends.srv_ip} -p {{port}} -m {mib}",
            f"/tmp/rdma-xfer -c {ends.srv_ip} -p {{port}} -m {mib} -o {op}")


def send_seq(ends, n):
    return (f"/tmp/send-seq -s {ends.srv_ip} -p {{port}} -n {n}",
            f"/tmp/send-seq -c {ends.srv_ip} -p {{port}} -n {n}")


def hunt_round(r, rox, rxe):
    """Jobs run at the same time in round r: (name, (server, client), verified)."""
    tool = "riostream" if r % 3 == 2 else "rstream"
    jobs = [(f"{tool}-64k-x200-rox", rsockets(tool, rox, 65536, 200), True)]
    bg = r % 4
    if bg == 0:
        jobs.append(("write_bw-8qp-rox", perftest("ib_write_bw", rox, "-q 8 -D 8"), False))
    elif bg == 1:
        jobs.append(("send_bw-rxe", perftest("ib_send_bw", rxe, "-D 8"), False))
        jobs.append(("read_bw-4qp-rox", perftest("ib_read_bw", rox, "-q 4 -D 8"), False))
    elif bg == 2:
        jobs.append(("rstream-1m-x8-rox", rsockets("rstream", rox, 1 << 20, 8), True))
        jobs.append(("send_lat-rxe", perftest("ib_send_lat", rxe, "-n 200 -C"), False))
    return jobs


def soak_round(a, rox, roxrxe):
    """Jobs run one after the other in a soak round: (pair, jobs) for rox <-> rox, then for
    rox <-> rxe."""
    rounds = []
    for pair, ends in (("rox-rox", rox), ("rox-rxe", roxrxe)):
        jobs = []
        jobs += [
            (f"rstream-64k-x200-{pair}", rsockets("rstream", ends, 65536, 200), True),
            (f"riostream-64k-x100-{pair}", rsockets("riostream", ends, 65536, 100), True),
            (f"rdma-write-{a.xfer_mib}m-{pair}", xfer(ends, "write", a.xfer_mib), True),
            (f"rdma-read-{a.xfer_mib}m-{pair}", xfer(ends, "read", a.xfer_mib), True),
            (f"send-seq-{a.messages}-{pair}", send_seq(ends, a.messages), True),
        ]
        rounds.append((pair, jobs))
    return rounds


LOSS_PAIRS = ("rox-rox", "rox-rxe", "rxe-rox")


def loss_round(pair, mib, ends):
    """The loss-recovery measurement: WRITE and READ of `pair`, one after the other."""
    return [(f"rdma-write-{mib}m-{pair}", xfer(ends, "write", mib), True),
            (f"rdma-read-{mib}m-{pair}", xfer(ends, "read", mib), True)]


def start(cmd):
    return subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")


def finish(proc, timeout):
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return 124, out + f"\n(timed out after {timeout} s)"


def start_server(cmd, job, port):
    """A server program, its readiness posted for `job` on the board (tests/lib/ready_port.py)."""
    proc = start(cmd)
    threading.Thread(target=ready_port.announce, args=(board, job, port, proc),
                     daemon=True).start()
    return proc


def run_client(cmd, job, delay=0):
    """A client: started once its server listens (the board's answer for `job`); tried again
    only while its server is not listening yet. `delay`: start this much later still (the
    verified stream starts once the other traffic is running)."""
    not_ready = board.wait(job, READY_WAIT_S)
    if not_ready:
        return 1, not_ready
    time.sleep(delay)
    t0 = time.monotonic()
    while True:
        rc, out = finish(start(cmd), JOB_TIMEOUT_S)
        if rc == 0 or not NOT_LISTENING.search(out) or BAD_DATA.search(out):
            return rc, out
        if time.monotonic() - t0 > CONNECT_WINDOW_S:
            return rc, out
        time.sleep(1)


def report(r, name, role, cmd, rc, out):
    ok = rc == 0 and not BAD_DATA.search(out)
    lines = [line for line in out.strip().splitlines() if line.strip()]
    summary = [line for line in lines if SUMMARY.search(line) or BAD_DATA.search(line)]
    detail = (summary or lines or ["(no output)"])[-1].strip()
    print(f"RESULT {r} {name} {role} {'ok' if ok else 'fail'} | {detail}", flush=True)
    if not ok:
        print(f"--- {role} of {name} round {r} ({cmd}) exited {rc}:", flush=True)
        print("\n".join(lines[-25:]), flush=True)
    return ok


def run_jobs(me, r, jobs, parallel, first_job=0):
    """Runs this guest's side of `jobs` (all at once if `parallel`); returns the failures. Job
    j of round r has its own port (jobs of a round numbered from `first_job`)."""
    role = "server" if me == 0 else "client"
    indices = [r * 16 + first_job + j for j in range(len(jobs))]
    cmds = [(name, (srv if me == 0 else cli).format(port=port), index, port)
            for (name, (srv, cli), _), index in zip(jobs, indices)
            for port in [ready_port.job_port(BASE_PORT, PORT_SPAN, index)]]
    failed = 0
    if parallel:
        if me == 0:
            procs = [(name, cmd, start_server(cmd, index, port))
                     for name, cmd, index, port in cmds]
            done = [(name, cmd, *finish(p, JOB_TIMEOUT_S)) for name, cmd, p in procs]
        else:
            import concurrent.futures as cf
            with cf.ThreadPoolExecutor(len(cmds)) as ex:
                main = BACKGROUND_HEAD_START_S if len(cmds) > 1 else 0
                futs = [(name, cmd, ex.submit(run_client, cmd, index, main if j == 0 else 0))
                        for j, (name, cmd, index, _) in enumerate(cmds)]
                done = [(name, cmd, *f.result()) for name, cmd, f in futs]
        for name, cmd, rc, out in done:
            failed += not report(r, name, role, cmd, rc, out)
    else:
        for name, cmd, index, port in cmds:
            rc, out = (finish(start_server(cmd, index, port), JOB_TIMEOUT_S) if me == 0
                       else run_client(cmd, index))
            failed += not report(r, name, role, cmd, rc, out)
            time.sleep(1)
    return failed


def counters(dev, tag=""):
    rc, out = sh(f"rdma statistic show link {dev}/1", 30)
    pairs = re.findall(r"(\w+) (\d+)", out) if rc == 0 else []
    print(f"COUNTERS {dev}{tag} " + " ".join(f"{k}={v}" for k, v in pairs if k != "link"), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--me", type=int, required=True, choices=(0, 1))
    ap.add_argument("--ko", required=True, help="rox.ko as the guest sees it")
    ap.add_argument("--plan", choices=("hunt", "soak", "loss"), required=True)
    ap.add_argument("--first-round", type=int, default=0)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--xfer-mib", type=int, default=64)
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--pair", default="rox-rox",
                    help="loss plan: server device (guest 0) - client device (guest 1): rox-rox, "
                         "rox-rxe or rxe-rox, or rox-rxe,rxe-rox for both, one after the other")
    a = ap.parse_args()
    pairs = a.pair.split(",")
    if any(p not in LOSS_PAIRS for p in pairs) or ("rox-rox" in pairs and len(pairs) > 1):
        sys.exit(f"soak: --pair {a.pair}: want one of {', '.join(LOSS_PAIRS)}, or rox-rxe,rxe-rox")
    global board
    if a.me == 0:
        # First: guest 1's clients look for it from their start (BOARD_FIRST_CONTACT_S).
        try:
            board = ready_port.Board(BOARD_PORT)
        except OSError as e:
            sys.exit(f"soak: guest 0 FAIL cannot open its ready board on port {BOARD_PORT}: {e}")
    ifs = (env("ROX_IF_0"), env("ROX_IF_1"))
    setup(a.ko, ifs[1])
    ip = {(g, n): env(f"ROX_IP_{g}_{n}") for g in (0, 1) for n in (0, 1)}
    setup_routes(a.me, a.plan, ip, ifs)
    rox = Ends(a.me, "rox_0", ip[0, 0], "rox_0", ip[1, 0])
    rxe = Ends(a.me, "rxe0", ip[0, 1], "rxe0", ip[1, 1])
    roxrxe = Ends(a.me, "rox_0", ip[0, 0], "rxe0", ip[1, 1])
    # Each pair's routes name the other side's address of its own device: they coexist.
    loss_pairs = [(p, loss_ends(a.me, p, ip, ifs)) for p in pairs] if a.plan == "loss" else []
    peer = 1 - a.me
    for n in (0, 1):
        for _ in range(120):
            if sh(f"ping -c1 -W1 {ip[peer, n]}", 5)[0] == 0:
                break
        else:
            sys.exit(f"soak: {ip[peer, n]} does not answer ping")
    if a.me == 1:
        board = ready_port.Client(ip[0, 1], BOARD_PORT, BOARD_FIRST_CONTACT_S)
    print(f"soak: guest {a.me} ready: rox_0 {ip[a.me, 0]}, rxe0 {ip[a.me, 1]}", flush=True)
    failed = 0
    for r in range(a.first_round, a.first_round + a.rounds):
        if a.plan == "hunt":
            failed += run_jobs(a.me, r, hunt_round(r, rox, rxe), parallel=True)
        elif a.plan == "loss":
            jobs = [job for pair, ends in loss_pairs for job in loss_round(pair, a.xfer_mib, ends)]
            for j, job in enumerate(jobs):
                for dev in ("rox_0", "rxe0"):
                    counters(dev, f"@g{a.me}:before:{r}:{job[0]}")
                failed += run_jobs(a.me, r, [job], parallel=False, first_job=j)
                for dev in ("rox_0", "rxe0"):
                    counters(dev, f"@g{a.me}:after:{r}:{job[0]}")
        else:
            first_job = 0
            for pair, jobs in soak_round(a, rox, roxrxe):
                if a.me == 1:
                    # The client's rxe (virtio netdev) reaches guest 0's rox address.
                    dev, src = (ifs[1], ip[1, 1]) if pair == "rox-rxe" else (ifs[0], ip[1, 0])
                    route(ip[0, 0], dev, src)
                for j, job in enumerate(jobs):
                    # rox <-> rox transfers between counters: what each one sent (run's check).
                    measured = pair == "rox-rox" and job[0].startswith("rdma-")
                    if measured:
                        counters("rox_0", f"@g{a.me}:before:{r}:{job[0]}")
                    failed += run_jobs(a.me, r, [job], parallel=False, first_job=first_job + j)
                    if measured:
                        counters("rox_0", f"@g{a.me}:after:{r}:{job[0]}")
                first_job += len(jobs)
        time.sleep(1)
    counters("rox_0")
    counters("rxe0")
    # A kernel complaint fails the run; rox's own error lines are shown.
    rc, out = sh("dmesg | grep -E 'Oops|BUG:|WARNING:|general protection|Call Trace' | tail -20", 30)
    if out.strip():
        print(f"soak: guest {a.me} FAIL kernel complaint:\n{out}", flush=True)
        failed += 1
    rc, out = sh("dmesg | grep -iE 'rox.*(error|fatal)' | tail -20", 30)
    if out.strip():
        print(f"soak: guest {a.me} dmesg:\n{out}", flush=True)
    print(f"soak: guest {a.me} done, {failed} jobs failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
