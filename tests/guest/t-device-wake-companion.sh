#!/bin/bash
# The posted-wake companions as the guest sees them (guest; skips without a rox device): each
# rox function that reports CAP_POSTED_WAKE has exactly one QEMU ivshmem-doorbell (1af4:1110)
# whose shared memory (BAR2) holds the rox_uapi::wake::WakeCompanion record naming it by its
# BAR0 token, and no rox function without the capability has one (rox-lab
# ROX_POSTED_WAKE=off). The companion's register BAR has a page of its own (rox-lab's
# pci=resource_alignment), as rox.ko needs to map it into user processes. A doorbell write
# to the companion (ivshmem: peer << 16 | vector at offset 12 of BAR0) reaches rox-nic, which
# counts it in wakes_posted (rox.ko's hw_counters, QUERY_STATS).
# Reads the devices through sysfs (resource mmaps), with python3. rox functions' BAR0 is read
# before rox.ko binds them: a kernel with CONFIG_IO_STRICT_DEVMEM (Debian's) refuses mmaps of a
# BAR a driver has claimed (EINVAL); the companions are never claimed (rox.ko maps them without
# requesting the region), so their doorbell is rung with rox.ko loaded, which reads the counter.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "no python3 in the guest"
grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null ||
	skip "no rox device in this guest (no PCI function with vendor $ROX_VENDOR)"
[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
was_loaded=
if grep -q '^rox ' /proc/modules; then
	was_loaded=1
	rmmod rox || fail "rmmod rox failed (its BAR0 must be unclaimed to be read)"
fi
# Leave rox.ko as it was found.
trap 'if [ -n "$was_loaded" ]; then grep -q "^rox " /proc/modules || insmod "$ROX_KO"; else ! grep -q "^rox " /proc/modules || rmmod rox; fi' EXIT
command -v lspci >/dev/null && lspci -nn -d 1af4:1110 # rox_uapi::wake::IVSHMEM_VENDOR_ID/DEVICE_ID

python3 - "$ROX_VENDOR" "$ROX_KO" <<'EOF' || fail "see above"
import ctypes, glob, mmap, os, struct, subprocess, sys, time

ROX_VENDOR = int(sys.argv[1], 16)
ROX_KO = sys.argv[2]
# Copies of uapi constants (no generator exists; keep them equal to these):
REG_CAPS = 0x004  # rox_uapi::regs::REG_CAPS
REG_WAKE_TOKEN_LO = 0x044  # rox_uapi::regs::REG_WAKE_TOKEN_LO
REG_WAKE_TOKEN_HI = 0x048  # rox_uapi::regs::REG_WAKE_TOKEN_HI
CAP_POSTED_WAKE = 1 << 13  # rox_uapi::regs::CAP_POSTED_WAKE
MAGIC = int.from_bytes(b"roxwake1", "little")  # rox_uapi::wake::COMPANION_MAGIC
IVSHMEM = (0x1AF4, 0x1110)  # rox_uapi::wake::IVSHMEM_VENDOR_ID, IVSHMEM_DEVICE_ID
DOORBELL = 12  # rox_uapi::wake::IVSHMEM_DOORBELL
SHM_BAR = 2  # rox_uapi::wake::IVSHMEM_BAR_SHM
PAGE = 4096  # rox_uapi::regs::ROX_PAGE_SIZE


def ids(dev):
    read = lambda f: int(open(f"{dev}/{f}").read(), 16)
    return read("vendor"), read("device")


def bars(dev):
    """(start, end) of each resource line of a PCI function."""
    out = []
    for line in open(f"{dev}/resource"):
        start, end, _ = (int(x, 16) for x in line.split())
        out.append((start, end))
    return out


def enable_memory(dev):
    """Turn on memory decoding: no driver enabled the companion, and the kernel turned it off
    when it moved the BARs to the requested alignment."""
    with open(f"{dev}/config", "r+b") as f:
        f.seek(4)
        cmd = struct.unpack("<H", f.read(2))[0]
        if not cmd & 2:
            f.seek(4)
            f.write(struct.pack("<H", cmd | 2))


def mapped(dev, bar, length):
    fd = os.open(f"{dev}/resource{bar}", os.O_RDWR | os.O_SYNC)
    try:
        return mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def reg32(m, off):
    return ctypes.c_uint32.from_buffer(m, off).value


def counter(dev, name):
    ib = glob.glob(f"{dev}/infiniband/rox_*")
    if not ib:
        sys.exit(f"FAIL: {dev} has no rox_* ib device")
    return int(open(f"{ib[0]}/ports/1/hw_counters/{name}").read())


devs = sorted(glob.glob("/sys/bus/pci/devices/*"))
rox = [d for d in devs if ids(d)[0] == ROX_VENDOR]
companions = [d for d in devs if ids(d) == IVSHMEM]
tokens = {}
for d in rox:
    enable_memory(d)
    m = mapped(d, 0, PAGE)
    caps = reg32(m, REG_CAPS)
    token = reg32(m, REG_WAKE_TOKEN_LO) | reg32(m, REG_WAKE_TOKEN_HI) << 32
    m.close()
    has = bool(caps & CAP_POSTED_WAKE)
    print(f"{os.path.basename(d)}: caps {caps:#x}, wake token {token:#x}")
    if has != (token != 0):
        sys.exit(f"FAIL: {d}: CAP_POSTED_WAKE {has} but token {token:#x}")
    if has:
        tokens[token] = d
if len(companions) != len(tokens):
    sys.exit(f"FAIL: {len(tokens)} rox functions with a companion, {len(companions)} companions")
rings = []
for c in companions:
    (r0, r0_end), (r2, r2_end) = bars(c)[0], bars(c)[SHM_BAR]
    print(f"{os.path.basename(c)}: BAR0 {r0:#x}-{r0_end:#x}, BAR2 {r2:#x}-{r2_end:#x}")
    if r0 % PAGE or r0_end - r0 + 1 < PAGE:
        sys.exit(f"FAIL: {c}: the register BAR does not have a page of its own")
    enable_memory(c)
    shm = mapped(c, SHM_BAR, PAGE)
    magic, token, peer, vector = struct.unpack_from("<QQII", shm, 0)
    shm.close()
    print(f"  record: magic {magic:#x} token {token:#x} peer {peer} vector {vector}")
    if magic != MAGIC:
        sys.exit(f"FAIL: {c}: no companion record (magic {magic:#x})")
    if token not in tokens:
        sys.exit(f"FAIL: {c}: token {token:#x} names no rox function")
    rings.append((c, tokens.pop(token), peer, vector))

# The counters are rox.ko's hw_counters: bind the rox functions now.
subprocess.run(["insmod", ROX_KO], check=True)
end = time.monotonic() + 10
while not all(glob.glob(f"{d}/infiniband/rox_*") for _, d, _, _ in rings):
    if time.monotonic() > end:
        sys.exit("FAIL: rox.ko registered no ib device within 10 s")
    time.sleep(0.2)
for c, d, peer, vector in rings:
    before = counter(d, "wakes_posted")
    regs = mapped(c, 0, PAGE)
    ctypes.c_uint32.from_buffer(regs, DOORBELL).value = peer << 16 | (vector & 0xFFFF)
    regs.close()
    end = time.monotonic() + 10
    while counter(d, "wakes_posted") <= before:
        if time.monotonic() > end:
            sys.exit(f"FAIL: {d}: wakes_posted stayed {before} after the doorbell")
        time.sleep(0.1)
    print(f"  {os.path.basename(d)}: wakes_posted {before} -> {counter(d, 'wakes_posted')}")
print(f"{len(companions)} companion(s) checked")
EOF
