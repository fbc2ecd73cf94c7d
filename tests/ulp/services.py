"""The services tests/ulp/guest.py runs its cases with, and its step helpers: the NVMe-oF
target (nvmet-rdma over a null_blk disk) and initiator (nvme-rdma, fio's verified writes), and
NFS over RDMA (nfsd and the client). A failed step raises Step, saying which command and why."""
import json
import os
import re
import time

from cases import sh  # (the guest scripts' shell runner; guest.py puts tests/interop on the path)

NVME_PORT = 4420
NFS_RDMA_PORT = 20049
NQN = "nqn.2026-11.dev.rox:ulp"
NULLB_MIB = 512
NFS_MIB = 256
CFS = "/sys/kernel/config"
STEP_TIMEOUT_S = 600


def log(msg):
    print(f"ulp: {msg}", flush=True)


def must(cmd, timeout=120):
    rc, out = sh(cmd, timeout)
    if rc != 0:
        raise Step(f"`{cmd}` exited {rc}: {out.strip()[-600:]}")
    return out


class Step(Exception):
    """A case step failed; the message says which command and why."""


def write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


# ---- NVMe-oF target and initiator ------------------------------------------------------

def nvme_target_up(ip):
    must("modprobe null_blk nr_devices=0")
    nb = f"{CFS}/nullb/ulp0"
    os.makedirs(nb, exist_ok=True)
    for attr, val in (("size", NULLB_MIB), ("blocksize", 4096), ("memory_backed", 1), ("power", 1)):
        write(f"{nb}/{attr}", val)
    index = open(f"{nb}/index").read().strip()
    # The disk is named after the configfs item in newer kernels, nullb<index> in older ones.
    blk = next(p for p in ("/dev/ulp0", f"/dev/nullb{index}") if os.path.exists(p))
    must("modprobe nvmet_rdma")
    sub = f"{CFS}/nvmet/subsystems/{NQN}"
    os.makedirs(sub, exist_ok=True)
    write(f"{sub}/attr_allow_any_host", 1)
    os.makedirs(f"{sub}/namespaces/1", exist_ok=True)
    write(f"{sub}/namespaces/1/device_path", blk)
    write(f"{sub}/namespaces/1/enable", 1)
    port = f"{CFS}/nvmet/ports/1"
    os.makedirs(port, exist_ok=True)
    for attr, val in (("addr_trtype", "rdma"), ("addr_adrfam", "ipv4"), ("addr_traddr", ip),
                      ("addr_trsvcid", NVME_PORT)):
        write(f"{port}/{attr}", val)
    os.symlink(sub, f"{port}/subsystems/{NQN}")
    return f"{blk} as {NQN} on rdma {ip}:{NVME_PORT}"


def nvme_target_down():
    port = f"{CFS}/nvmet/ports/1"
    sub = f"{CFS}/nvmet/subsystems/{NQN}"
    if os.path.islink(f"{port}/subsystems/{NQN}"):
        os.unlink(f"{port}/subsystems/{NQN}")
    if os.path.isdir(port):
        os.rmdir(port)
    if os.path.isdir(f"{sub}/namespaces/1"):
        write(f"{sub}/namespaces/1/enable", 0)
        os.rmdir(f"{sub}/namespaces/1")
    if os.path.isdir(sub):
        os.rmdir(sub)
    must("modprobe -r nvmet_rdma nvmet", 120)
    if os.path.isdir(f"{CFS}/nullb/ulp0"):
        write(f"{CFS}/nullb/ulp0/power", 0)
        os.rmdir(f"{CFS}/nullb/ulp0")
    must("modprobe -r null_blk", 60)


def host_ids():
    uuid = open("/proc/sys/kernel/random/uuid").read().strip()
    return f"--hostnqn nqn.2014-08.org.nvmexpress:uuid:{uuid} --hostid {uuid}"


def nvme_connect(peer, src_ip, queues, extra=""):
    """Connects to the target; returns the namespace's block device (/dev/nvmeXn1)."""
    # Debian's kernel has native NVMe multipath (a head disk over hidden paths, I/O requeued
    # while a path may come back): off, as rox's kernels build it, so the cases mean the same.
    if "multipath:" in sh("modinfo -p nvme_core", 30)[1]:
        must("modprobe nvme_core multipath=N")
    must("modprobe nvme_rdma")
    must(f"nvme connect -t rdma -a {peer} -s {NVME_PORT} -n {NQN} -w {src_ip}"
         f" --nr-io-queues {queues} {host_ids()} {extra}", 120)
    # The namespace appears when the controller's scan work has run: late on a loaded guest.
    end = time.monotonic() + 120
    while time.monotonic() < end:
        for c in sorted(os.listdir("/sys/class/nvme") if os.path.isdir("/sys/class/nvme") else []):
            try:
                if open(f"/sys/class/nvme/{c}/subsysnqn").read().strip() == NQN:
                    # Without multipath the namespace is the controller's child; with it (Debian's
                    # kernel: CONFIG_NVME_MULTIPATH=y) the controller holds only a hidden path
                    # (nvmeXcYnZ, no /dev node) and the disk is its subsystem's.
                    subsys = "/sys/class/nvme-subsystem"
                    dirs = [f"/sys/class/nvme/{c}"] + [
                        f"{subsys}/{s}" for s in sorted(os.listdir(subsys) if os.path.isdir(subsys) else [])
                        if open(f"{subsys}/{s}/subsysnqn").read().strip() == NQN]
                    for d in dirs:
                        for name in sorted(os.listdir(d)):
                            if re.fullmatch(r"nvme\d+n\d+", name) and os.path.exists(f"/dev/{name}"):
                                return c, f"/dev/{name}"
            except OSError:
                pass
        time.sleep(0.1)
    raise Step("nvme connect succeeded but no namespace block device appeared within 120 s")


def nvme_disconnect():
    out = must(f"nvme disconnect -n {NQN}", 180)
    if "disconnected 0" in out:
        raise Step(f"nvme disconnect found no controller: {out.strip()}")
    must("modprobe -r nvme_rdma nvme_fabrics nvme_core", 120)


def fio(args, timeout):
    """Runs fio with JSON output; returns (rc, parsed json or None, raw output)."""
    rc, out = sh(f"fio --output-format=json {args}", timeout)
    start = out.find("{")
    try:
        return rc, json.loads(out[start:]) if start >= 0 else None, out
    except ValueError:
        return rc, None, out


# The largest block of fio_verify's bssplit.
FIO_LARGEST_BLOCK = 2**20


def fio_verify(dev, size_mib, jobs=2):
    """Writes `size_mib` over `jobs` jobs with crc32c verification, reading everything back."""
    per_job = size_mib // jobs
    args = (f"--name=ulp-verify --filename={dev} --direct=1 --ioengine=libaio --iodepth=32"
            f" --rw=write --bssplit=4k/25:16k/15:64k/20:256k/20:1m/20 --verify=crc32c"
            f" --do_verify=1 --verify_fatal=1 --numjobs={jobs} --size={per_job}M"
            f" --offset_increment={per_job}M --group_reporting")
    rc, js, out = fio(args, STEP_TIMEOUT_S)
    if rc != 0 or js is None:
        raise Step(f"fio exited {rc}: {out.strip()[-800:]}")
    job = js["jobs"][0]
    if job["error"] != 0:
        raise Step(f"fio error {job['error']}")
    w, r = job["write"]["io_bytes"], job["read"]["io_bytes"]
    # Every job writes its whole region (short by at most its last, largest block) and the
    # verify pass reads back everything written.
    want = jobs * per_job * 2**20
    if not want - FIO_LARGEST_BLOCK <= w <= want or r < w:
        raise Step(f"fio wrote {w} and read back {r} bytes, wanted {want} both ways")
    return (f"fio wrote {w >> 20} MiB (4k-1m, qd32, {jobs} jobs), read back and verified"
            f" crc32c {r >> 20} MiB")


# ---- NFS over RDMA ---------------------------------------------------------------------

EXPORT = "/tmp/ulp-export"
MNT = "/tmp/ulp-mnt"


def nfs_server_up():
    os.makedirs(EXPORT, exist_ok=True)
    must(f"mount -t tmpfs -o size={NFS_MIB + 64}M tmpfs {EXPORT}")
    # The root is read-only: nfs-utils' state directory goes on a tmpfs.
    must("mount -t tmpfs tmpfs /var/lib/nfs && mkdir -p /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery"
         " /var/lib/nfs/sm /var/lib/nfs/sm.bak && touch /var/lib/nfs/etab /var/lib/nfs/rmtab")
    must("modprobe nfsd && modprobe rpcrdma")
    if not os.path.exists("/proc/fs/nfsd/portlist"):
        must("mount -t nfsd nfsd /proc/fs/nfsd")
    must("mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs")
    must(f"exportfs -i -o rw,no_root_squash,insecure,no_subtree_check,fsid=0 '*:{EXPORT}'")
    must("rpc.mountd -N 3 --no-udp")
    # A short grace period: the client may open files 10 s after nfsd starts, not 90.
    must("rpc.nfsd -N 3 -G 10 -L 10 4")
    write("/proc/fs/nfsd/portlist", f"rdma {NFS_RDMA_PORT}")
    ports = open("/proc/fs/nfsd/portlist").read().split("\n")
    if f"rdma {NFS_RDMA_PORT}" not in ports:
        raise Step(f"nfsd portlist has no RDMA listener: {ports}")
    return f"nfsd exports {EXPORT} (tmpfs), listeners {', '.join(p for p in ports if p)}"


def nfs_server_down():
    must("rpc.nfsd 0", 120)
    must("exportfs -ua")
    sh("kill $(pidof rpc.mountd)", 10)
    # Gone before rpc_pipefs is unmounted (a loaded guest may take a while to run its exit).
    end = time.monotonic() + 60
    while sh("pidof rpc.mountd", 5)[0] == 0 and time.monotonic() < end:
        time.sleep(0.1)
    must("umount /var/lib/nfs/rpc_pipefs && umount /proc/fs/nfsd && umount /var/lib/nfs")
    must(f"umount {EXPORT}")
    must("modprobe -r nfsd rpcrdma", 120)


def file_sum(path):
    return must(f"sha256sum {path}", STEP_TIMEOUT_S).split()[0]


def nfs_client(peer):
    must("modprobe rpcrdma && modprobe nfsv4")
    os.makedirs(MNT, exist_ok=True)
    opts = f"proto=rdma,port={NFS_RDMA_PORT},vers=4.1"
    mount = f"mount -t nfs4 -o {opts} {peer}:/ {MNT}"
    must(mount, 180)
    mounted = [l for l in open("/proc/mounts") if f" {MNT} " in l]
    if not mounted or "proto=rdma" not in mounted[0]:
        raise Step(f"{MNT} is not an RDMA mount: {mounted}")
    src = "/tmp/ulp-src"
    must(f"head -c {NFS_MIB}M /dev/urandom >{src}")
    want = file_sum(src)
    t0 = time.monotonic()
    must(f"cp {src} {MNT}/data && sync", STEP_TIMEOUT_S)
    wrote = time.monotonic() - t0
    os.unlink(src)
    # Read back through the wire, not the page cache: a fresh mount.
    must(f"umount {MNT}", 120)
    must(mount, 180)
    t0 = time.monotonic()
    got = file_sum(f"{MNT}/data")
    read = time.monotonic() - t0
    must(f"umount {MNT}", 120)
    must("modprobe -r nfsv4 nfs rpcrdma", 120)
    if got != want:
        raise Step(f"read back sha256 {got}, wrote {want}")
    return want, (f"{opts}: wrote {NFS_MIB} MiB in {wrote:.1f} s, read back in {read:.1f} s,"
                  f" sha256 equal {want[:16]}")
