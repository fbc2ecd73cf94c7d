#!/usr/bin/env python3
"""Guest side of tests/ulp/run and tests/bench/nvmeof: kernel RDMA upper layers between two
guests. Guest 0 is the target (nvmet-rdma, nfsd), guest 1 the initiator (nvme-rdma, the NFS
client). They keep step over a TCP control connection on the lab link (the initiator drives:
`setup CASE` / `ready CASE ok|fail DETAIL`, `teardown CASE ARG` / `torn CASE ok|fail DETAIL`).

Each side prints one machine-readable line per case:
    RESULT <case> <target|initiator> <ok|fail> | <detail>
and the initiator `ULP-FAULT-NOW` when its I/O for the fault case is running (tests/ulp/run
then kills the target's rox-nic, or takes its tap down for rxe). The bench mode prints
`BENCH <metric> <transport> <value>` lines too (the format of tests/bench/compare).

The RDMA device is rox (rox.ko on a rox NIC) or rdma_rxe on a virtio NIC, per transport.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, "/rox/tests/interop")
sys.path.insert(0, "/rox/tests/lib")
from cases import roce_v2_gid_index, sh  # noqa: E402  (shell runner, RoCE v2 GID lookup)
import lockdep  # noqa: E402  (the lockdep verdict, tests/lib/lockdep.py)
from services import (  # noqa: E402  (the NVMe-oF and NFS services, the step helpers)
    EXPORT, MNT, NQN, NULLB_MIB, STEP_TIMEOUT_S, Step, file_sum, fio, fio_verify, log, must,
    nfs_client, nfs_server_down, nfs_server_up, nvme_connect, nvme_disconnect, nvme_target_down,
    nvme_target_up, write,
)

CTL_PORT = 4499
# The fault case: how fast nvme-rdma gives up on a dead target (nvme connect options), and
# how long fio may take to fail after that before the case calls it a hang.
CTRL_LOSS_TMO_S = 10
RECONNECT_DELAY_S = 2
KEEP_ALIVE_TMO_S = 5
# nvme-rdma counts reconnect attempts, not time (ctrl_loss_tmo / reconnect_delay of them), and
# one attempt at a dead peer lasts as long as ib_cm's REQ retries (~80 s): without
# fast_io_fail_tmo the queued I/O would wait for all of them.
FAST_IO_FAIL_TMO_S = 4
FAULT_IO_LIMIT_S = 180
# How long fio may take to complete its first I/Os before the fault (it starts slowly on a
# loaded TCG host; the fault must hit I/O in flight, so the case waits for that, not for a time).
FIO_START_S = 180
# The target after the fault: rox.ko meets its dead device when nvmet tears the initiator's
# queues down (keep-alive expiry) or when the target does: its admin queue gets no completion,
# which it says once (drivers/admin.rs), failing every later command at once. The target waits
# this long for that line, then tears down (and unloads rox.ko) itself, within the limit.
ROX_DEAD_DEVICE = re.compile(r"rox: admin command \S+ got no completion|device fatal error|"
                             r"rox: device did not come back")
FAULT_NOTICE_S = 240
FAULT_TEARDOWN_LIMIT_S = 180
# rxe: the tap is taken down on the host, which the guest cannot see; wait this long instead.
RXE_FAULT_SETTLE_S = 90
# What must never appear in dmesg (lockdep's and RCU's reports start "WARNING:" or "BUG:"; the
# rest are named for the reader).
KERNEL_COMPLAINT = re.compile(
    r"Oops|BUG:|WARNING:|general protection|blocked for more than|hung_task|KASAN|KFENCE|"
    r"kmemleak:.*new suspected|Call Trace|possible circular locking dependency|"
    r"inconsistent lock state|suspicious RCU usage|sleeping function called from invalid context|"
    r"lockdep is turned off")
# lockdep (debug kernel): its reports, the known upstream ones and debug_locks are judged by
# tests/lib/lockdep.py, shared with tests/guest/lib.sh.
LOCKDEP_STATS = "/proc/lockdep_stats"

# ---- the RDMA device --------------------------------------------------------------------

class Rdma:
    """rox.ko on rox NIC `nic`, or rdma_rxe on virtio NIC `nic` (the lab's NIC index)."""

    def __init__(self, transport, nic, ko):
        self.transport, self.nic, self.ko = transport, nic, ko
        g = os.environ["ROX_GUEST"]
        self.ip = os.environ[f"ROX_IP_{g}_{nic}"]
        self.netdev = os.environ[f"ROX_IF_{nic}"]
        self.dev = None

    def up(self):
        if self.transport == "rox":
            if not os.path.exists("/sys/module/rox"):
                must(f"insmod {self.ko}")
            for _ in range(100):
                for d in sorted(os.listdir("/sys/class/infiniband") if os.path.isdir("/sys/class/infiniband") else []):
                    if d.startswith("rox") and os.path.exists(f"/sys/class/infiniband/{d}/ports/1/gid_attrs/ndevs/0"):
                        if open(f"/sys/class/infiniband/{d}/ports/1/gid_attrs/ndevs/0").read().strip() == self.netdev:
                            self.dev = d
                if self.dev:
                    break
                time.sleep(0.1)
            if not self.dev:
                raise Step(f"no rox device on {self.netdev}")
        else:
            self.dev = f"rxe{self.nic}"
            must("modprobe rdma_rxe")
            if not os.path.exists(f"/sys/class/infiniband/{self.dev}"):
                must(f"rdma link add {self.dev} type rxe netdev {self.netdev}")
        roce_v2_gid_index(self.dev, self.ip)  # exits if the address never becomes a GID
        return self.dev

    def down(self):
        if self.transport == "rox":
            if os.path.exists("/sys/module/rox"):
                must("rmmod rox", 120)
        else:
            if self.dev and os.path.exists(f"/sys/class/infiniband/{self.dev}"):
                must(f"rdma link del {self.dev}", 120)
            if os.path.exists("/sys/module/rdma_rxe"):
                must("modprobe -r rdma_rxe", 120)
        self.dev = None


def kernel_complaints(since, where):
    """New dmesg lines since line `since` that show a kernel problem (at most a few), and
    lockdep's verdict (tests/lib/lockdep.py) for case `where`; its notes (a known upstream
    report, where lockdep's coverage ended) are logged."""
    text = must("dmesg")
    every = text.splitlines()
    known = set(i for r in lockdep.parse_reports(every) if r.known for i in r.lines)
    bad = [l for i, l in enumerate(every) if i >= since and i not in known
           and KERNEL_COMPLAINT.search(l)]
    if os.path.exists(LOCKDEP_STATS):
        ok, msgs = lockdep.judge(text, lockdep.read_debug_locks(LOCKDEP_STATS), where,
                                 since=since)
        for m in msgs:
            log(m)
        if not ok:
            bad = msgs + bad
    return bad[:5]


def dmesg_mark():
    return len(must("dmesg").splitlines())


def kmemleak_report():
    """kmemleak's report after two scans, None without kmemleak; a refused scan (kmemleak
    disabled itself) or a "kmemleak: ... disabled" line raises Step: no check was made."""
    path = "/sys/kernel/debug/kmemleak"
    if not os.access(path, os.W_OK):
        return None
    # Past kmemleak's minimum object age (5 s), then two scans: an object is reported only
    # once it has stayed unreferenced over a scan.
    time.sleep(6)
    for _ in range(2):
        try:
            write(path, "scan")
        except OSError as e:
            raise Step(f"kmemleak refused a scan ({e}): it is off, no leak check possible")
        time.sleep(5)
    off = [l for l in must("dmesg").splitlines() if re.search(r"kmemleak: .*disabled", l)]
    if off:
        raise Step(f"kmemleak disabled itself: {off[0]}")
    return open(path).read()


def kmemleak_result(role):
    """Prints and returns (ok, detail) of this side's kmemleak check."""
    try:
        rep = kmemleak_report()
    except Step as e:
        rep, ok, detail = "", False, str(e)
    else:
        ok = rep is not None and "unreferenced object" not in rep
        detail = ("kmemleak reports nothing" if ok else
                  "no kmemleak in this kernel" if rep is None else rep[:600].replace("\n", " / "))
    result("kmemleak", role, ok, detail)
    return ok, detail


# ---- control connection --------------------------------------------------------------------

class Ctl:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    @classmethod
    def listen(cls, ip, timeout):
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((ip, CTL_PORT))
        srv.listen(1)
        srv.settimeout(timeout)
        conn, _ = srv.accept()
        srv.close()
        return cls(conn)

    @classmethod
    def connect(cls, peer, timeout):
        end = time.monotonic() + timeout
        while True:
            try:
                return cls(socket.create_connection((peer, CTL_PORT), timeout=5))
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(1)

    def send(self, *words):
        self.sock.sendall((" ".join(str(w) for w in words) + "\n").encode())

    def recv(self, timeout=STEP_TIMEOUT_S):
        """The next line, or None when the peer closed (or nothing came within timeout)."""
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return None
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


def result(case, role, ok, detail):
    print(f"RESULT {case} {role} {'ok' if ok else 'fail'} | {detail}", flush=True)


# ---- the two roles ----------------------------------------------------------------------

def target(a, rdma):
    ctl = Ctl.listen(rdma.ip, STEP_TIMEOUT_S)
    log(f"target: initiator connected; {rdma.dev} {rdma.ip}")
    while True:
        line = ctl.recv(STEP_TIMEOUT_S)
        if line is None:
            return
        words = line.split()
        verb, case = words[0], words[1] if len(words) > 1 else ""
        mark = getattr(target, "mark", 0)
        try:
            if verb == "setup":
                target.mark = dmesg_mark()
                if case in ("nvme", "fault", "bench"):
                    if rdma.dev is None:
                        rdma.up()
                    detail = nvme_target_up(rdma.ip)
                elif case == "nfs":
                    detail = nfs_server_up()
                elif case == "unload":
                    rdma.down()
                    detail = f"{a.transport} unloaded"
                else:
                    raise Step(f"unknown case {case}")
                ctl.send("ready", case, "ok", detail)
                if case == "fault":
                    # The NIC dies next; the last case: judge this side, then end.
                    try:
                        result(case, "target", True, target_after_fault(a, rdma, target.mark))
                    except Step as e:
                        result(case, "target", False, str(e).replace("\n", " "))
                    return
            elif verb == "teardown":
                if case in ("nvme", "bench"):
                    nvme_target_down()
                    detail = "nvmet and null_blk removed"
                elif case == "nfs":
                    theirs = words[2] if len(words) > 2 else ""
                    ours = file_sum(f"{EXPORT}/data")
                    nfs_server_down()
                    if ours != theirs:
                        raise Step(f"the export holds sha256 {ours}, the client wrote {theirs}")
                    detail = f"nfsd stopped; the exported file's sha256 equals the client's {ours[:16]}"
                elif case == "unload":
                    detail = "all ULP modules and the RDMA device unloaded"
                    left = [m for m in ("nvmet", "nvmet_rdma", "nfsd", "rpcrdma", "null_blk", "rox", "rdma_rxe")
                            if os.path.exists(f"/sys/module/{m}")]
                    if left:
                        raise Step(f"still loaded: {left}")
                else:
                    raise Step(f"unknown case {case}")
                bad = kernel_complaints(mark, f"case {case} (target)")
                if bad:
                    raise Step("kernel: " + " / ".join(bad))
                result(case, "target", True, detail)
                ctl.send("torn", case, "ok", detail)
            elif verb == "kmemleak":
                ok, detail = kmemleak_result("target")
                ctl.send("torn", "kmemleak", "ok" if ok else "fail", detail)
            elif verb == "bye":
                return
        except (Step, OSError, StopIteration) as e:
            detail = f"{type(e).__name__}: {e}" if not isinstance(e, Step) else str(e)
            if verb == "teardown":
                result(case, "target", False, detail)
            ctl.send("ready" if verb == "setup" else "torn", case, "fail", detail.replace("\n", " "))


def ask(ctl, *words):
    """Sends a request; returns (ok, detail) of the target's answer."""
    ctl.send(*words)
    line = ctl.recv()
    if line is None:
        return False, "target did not answer"
    parts = line.split(" ", 3)
    return parts[2] == "ok", parts[3] if len(parts) > 3 else ""


def initiator_case(a, ctl, rdma, case):
    mark = dmesg_mark()
    if case in ("nvme", "fault", "bench") and rdma.dev is None:
        rdma.up()
    ok, detail = ask(ctl, "setup", case)
    if not ok:
        raise Step(f"target setup: {detail}")
    arg = "-"
    if case == "nvme":
        ctrl, dev = nvme_connect(a.peer, rdma.ip, a.queues)
        queues = int(open(f"/sys/class/nvme/{ctrl}/queue_count").read())
        if queues != a.queues + 1:
            raise Step(f"{ctrl} has {queues} queues, wanted the admin queue + {a.queues} I/O queues")
        mine = f"{dev} over {rdma.dev}, {queues} queues (admin + I/O); " + fio_verify(dev, a.fio_mib)
        nvme_disconnect()
        mine += "; disconnected"
    elif case == "nfs":
        arg, mine = nfs_client(a.peer)
    elif case == "unload":
        rdma.down()
        left = [m for m in ("nvme_rdma", "nvme_fabrics", "nvme_core", "nfs", "nfsv4", "rpcrdma",
                            "rox", "rdma_rxe") if os.path.exists(f"/sys/module/{m}")]
        if left:
            raise Step(f"still loaded: {left}")
        mine = f"{a.transport} and every ULP module unloaded"
    elif case == "fault":
        return fault(a, ctl, rdma, mark)
    elif case == "bench":
        arg = "-"
        mine = bench(a, rdma)
    bad = kernel_complaints(mark, f"case {case} (initiator)")
    if bad:
        raise Step("kernel: " + " / ".join(bad))
    ok, theirs = ask(ctl, "teardown", case, arg)
    if not ok:
        raise Step(f"target: {theirs}")
    return mine


def fault(a, ctl, rdma, mark):
    """nvme-rdma with a short controller-loss timeout; fio runs while the host kills the
    target's NIC; fio must end with errors within the limit, and disconnect and unload work."""
    ctrl, dev = nvme_connect(a.peer, rdma.ip, a.queues,
                             f"--ctrl-loss-tmo {CTRL_LOSS_TMO_S} --reconnect-delay {RECONNECT_DELAY_S}"
                             f" --keep-alive-tmo {KEEP_ALIVE_TMO_S} --fast_io_fail_tmo {FAST_IO_FAIL_TMO_S}")
    job = (f"fio --output-format=json --name=ulp-fault --filename={dev} --direct=1 --ioengine=libaio"
           f" --iodepth=32 --rw=randrw --bs=64k --time_based --runtime={FAULT_IO_LIMIT_S * 2}")
    proc = subprocess.Popen(job, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    stat = f"/sys/block/{os.path.basename(dev)}/stat"
    # Reads and writes completed (fields 1 and 5): the fault must hit I/O in flight, so wait
    # (fio starts slowly on a loaded TCG host) until some has completed.
    def done():
        f = open(stat).read().split()
        return int(f[0]) + int(f[4])
    before, end = done(), time.monotonic() + FIO_START_S
    while done() < before + 64 and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.5)
    if proc.poll() is not None or done() < before + 64:
        proc.kill()
        out = proc.communicate()[0] if proc.poll() is not None else ""
        raise Step(f"fio made no progress within {FIO_START_S} s before the fault: {out.strip()[-300:]}")
    print("ULP-FAULT-NOW", flush=True)
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=FAULT_IO_LIMIT_S)
    except subprocess.TimeoutExpired:
        # fio is most likely in uninterruptible sleep: kill it, but never wait on it.
        proc.kill()
        raise Step(f"fio still running {FAULT_IO_LIMIT_S} s after the target's NIC died (hang);"
                   f" {blocked_tasks()}")
    took = time.monotonic() - t0
    start = out.find("{")
    err = None
    try:
        err = json.loads(out[start:])["jobs"][0]["error"] if start >= 0 else None
    except (ValueError, KeyError, IndexError):
        pass
    if proc.returncode == 0 and not err:
        raise Step(f"fio ended without an error {took:.0f} s after the fault")
    t1 = time.monotonic()
    for cmd in (f"nvme disconnect -n {NQN}", "modprobe -r nvme_rdma nvme_fabrics nvme_core"):
        rc, out2 = sh_bounded(cmd, 180)
        if rc != 0:
            raise Step(f"`{cmd}` exited {rc} after the fault: {out2.strip()[-300:]}; {blocked_tasks()}")
    rdma.down()
    bad = kernel_complaints(mark, "case fault (initiator)")
    if bad:
        raise Step("kernel: " + " / ".join(bad))
    errline = next((l for l in out.splitlines() if "error" in l.lower() and "fio" in l.lower()), "")
    return (f"fio failed {took:.0f} s after the target's NIC died (exit {proc.returncode},"
            f" error {err}{': ' + errline.strip()[:120] if errline else ''}); nvme disconnect and"
            f" unload took {time.monotonic() - t1:.0f} s")


def target_after_fault(a, rdma, mark):
    """The target once its NIC is due to die: rox.ko must notice the dead device (its admin
    queue gets no completion), nvmet must tear down and rox.ko unload within the limit, and
    dmesg must hold no complaint. Returns the detail; raises Step."""
    t0 = time.monotonic()
    noticed = None
    if a.transport == "rox":
        while noticed is None and time.monotonic() - t0 < FAULT_NOTICE_S:
            noticed = next((l for l in must("dmesg").splitlines()[mark:] if ROX_DEAD_DEVICE.search(l)), None)
            time.sleep(1)
    else:
        time.sleep(RXE_FAULT_SETTLE_S)
    waited = time.monotonic() - t0
    # nvmet and rox.ko down in a thread: a teardown stuck in the kernel is a hang to report,
    # not one to wait out.
    outcome = []

    def teardown():
        try:
            nvme_target_down()
            rdma.down()
            outcome.append(None)
        except (Step, OSError) as e:
            outcome.append(e)
    worker = threading.Thread(target=teardown, daemon=True)
    worker.start()
    worker.join(FAULT_TEARDOWN_LIMIT_S)
    if worker.is_alive():
        raise Step(f"nvmet teardown and unloading {a.transport} still running after"
                   f" {FAULT_TEARDOWN_LIMIT_S} s with the NIC dead (hang); {blocked_tasks()}")
    if outcome[0] is not None:
        raise Step(f"teardown after the fault: {outcome[0]}")
    lines = must("dmesg").splitlines()[mark:]
    if a.transport == "rox" and noticed is None:
        noticed = next((l for l in lines if ROX_DEAD_DEVICE.search(l)), None)
        if noticed is None:
            raise Step("rox.ko never reported its dead device (no admin command without completion"
                       " in dmesg), even through nvmet's teardown and its own unload")
    torn_s = time.monotonic() - t0 - waited
    bad = kernel_complaints(mark, "case fault (target)")
    if bad:
        raise Step("kernel: " + " / ".join(bad))
    leaks = ""
    if a.fault_kmemleak:
        # What the dead-device path allocated must be gone with rox.ko.
        rep = kmemleak_report()
        if rep is None:
            raise Step("--fault-kmemleak without kmemleak in this kernel")
        if "unreferenced object" in rep:
            raise Step("kmemleak after the fault: " + rep[:600].replace("\n", " / "))
        leaks = "; kmemleak reports nothing"
    how = (f"rox.ko noticed after {waited:.0f} s: {noticed.split('] ', 1)[-1].strip()[:100]}"
           if noticed else f"waited {waited:.0f} s")
    return (f"{how}; nvmet torn down and {a.transport} unloaded in {torn_s:.0f} s;"
            f" no kernel complaint{leaks}")


def sh_bounded(cmd, timeout):
    """Like sh(), but a command stuck in the kernel past `timeout` is killed and left behind
    (waiting on an unkillable process would turn a hang into a silent one). 124 on timeout."""
    proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        return 124, f"(timed out after {timeout} s)"


def blocked_tasks():
    """Which tasks sit in uninterruptible sleep, and where (/proc/PID/stack), printed in full;
    returns a one-line summary."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            if state != "D":
                continue
            comm = open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            continue
        try:
            stack = open(f"/proc/{pid}/stack").read()
        except OSError:
            stack = "(no /proc/PID/stack)"
        print(f"--- blocked task {pid} {comm}:\n{stack}", flush=True)
        funcs = [m.group(1) for m in re.finditer(r"\] (\w+)\+0x", stack)]
        found.append(f"{comm}: {' <- '.join(funcs[:6])}")
    states = {c: open(f"/sys/class/nvme/{c}/state").read().strip()
              for c in (os.listdir("/sys/class/nvme") if os.path.isdir("/sys/class/nvme") else [])}
    print("--- dmesg tail:\n" + "\n".join(must("dmesg").splitlines()[-40:]), flush=True)
    return (f"nvme controllers {states or 'none'}; blocked tasks: "
            + ("; ".join(found[:4]) if found else "none"))


def bench(a, rdma):
    """fio over NVMe-oF: 4 KiB random read IOPS at qd 32, 128 KiB sequential read MB/s."""
    ctrl, dev = nvme_connect(a.peer, rdma.ip, a.queues)
    # Fill the namespace once so reads hit written (memory-backed) blocks.
    rc, js, out = fio(f"--name=fill --filename={dev} --direct=1 --ioengine=libaio --iodepth=16"
                      f" --rw=write --bs=1m --size={NULLB_MIB}M", STEP_TIMEOUT_S)
    if rc != 0:
        raise Step(f"fio fill exited {rc}: {out[-400:]}")
    runs = (("randread_4k_qd32_iops", f"--rw=randread --bs=4k --iodepth=32", "iops"),
            ("seqread_128k_mbs", f"--rw=read --bs=128k --iodepth=32", "bw"))
    got = []
    for key, args, field in runs:
        rc, js, out = fio(f"--name={key} --filename={dev} --direct=1 --ioengine=libaio {args}"
                          f" --time_based --runtime={a.bench_seconds} --ramp_time=2", STEP_TIMEOUT_S)
        if rc != 0 or js is None or js["jobs"][0]["error"]:
            raise Step(f"fio {key} exited {rc}: {out[-400:]}")
        rd = js["jobs"][0]["read"]
        value = rd["iops"] if field == "iops" else rd["bw_bytes"] / 1e6
        print(f"BENCH {key} {a.transport} {value:.1f}", flush=True)
        got.append(f"{key} {value:.1f}")
    nvme_disconnect()
    return ", ".join(got)


def initiator(a, rdma):
    ctl = Ctl.connect(a.peer, STEP_TIMEOUT_S)
    log(f"initiator: connected to the target at {a.peer}; {rdma.dev} {rdma.ip}")
    for case in a.cases:
        try:
            detail = initiator_case(a, ctl, rdma, case)
            result(case, "initiator", True, detail)
        except (Step, OSError) as e:
            result(case, "initiator", False, str(e).replace("\n", " "))
            if case == "fault":
                break
            # Leave nothing behind for the next case.
            sh(f"nvme disconnect -n {NQN}; umount {MNT}", 120)
            ctl.send("teardown", case, "-")
            ctl.recv()
    if a.kmemleak:
        kmemleak_result("initiator")
        ask(ctl, "kmemleak")
    if "fault" not in a.cases:
        ctl.send("bye")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--role", choices=("target", "initiator"), required=True)
    ap.add_argument("--transport", choices=("rox", "rxe"), required=True)
    ap.add_argument("--nic", type=int, default=0, help="the lab NIC carrying the transport")
    ap.add_argument("--ko", help="rox.ko (transport rox)")
    ap.add_argument("--peer", required=True, help="the other guest's address on that NIC")
    ap.add_argument("--cases", default="nvme,nfs,unload,fault")
    ap.add_argument("--queues", type=int, default=2, help="nvme I/O queues")
    ap.add_argument("--fio-mib", type=int, default=256, help="MiB fio writes and verifies")
    ap.add_argument("--bench-seconds", type=int, default=15)
    ap.add_argument("--kmemleak", action="store_true", help="end with a kmemleak scan on both sides")
    ap.add_argument("--fault-kmemleak", action="store_true",
                    help="the target scans for leaks itself once rox.ko is unloaded after the fault")
    ap.add_argument("--cable", action="store_true",
                    help="the transport's NIC must be on rox-lab's rox-to-rox cable (no tap)")
    a = ap.parse_args()
    a.cases = a.cases.split(",")
    # rox-lab tells each guest whether its lab has a cable: a --cable run that got the bridge
    # would pass without crossing the cable.
    if a.cable and os.environ.get("ROX_CABLE") != "1":
        sys.exit("ulp: --cable, but rox-lab says this lab has no cable (ROX_CABLE != 1)")
    if a.cable and a.nic != 0:
        sys.exit(f"ulp: --cable joins NIC 0 only; --nic {a.nic} is on the bridge")
    if (a.kmemleak or a.fault_kmemleak) and os.access("/sys/kernel/debug/kmemleak", os.W_OK):
        write("/sys/kernel/debug/kmemleak", "clear")
    rdma = Rdma(a.transport, a.nic, a.ko)
    try:
        rdma.up()
    except Step as e:
        sys.exit(f"ulp: {e}")
    (target if a.role == "target" else initiator)(a, rdma)


if __name__ == "__main__":
    main()
