#!/usr/bin/env python3
"""Reads a rox function's BAR0 through sysfs (resource0; no driver may hold it: a kernel with
CONFIG_IO_STRICT_DEVMEM refuses the mmap then) and checks the device is alive and in its reset
state: ready, not fatal, the admin queue disabled and its ring addresses zero. After a probe
that failed once the admin queue was enabled, that state says rox.ko reset the device
(admin::quiesce): without the reset the device still holds the freed rings' addresses, and
its admin queue stays enabled. Usage: admin_reset_state.py PCI_ADDRESS. Exit 1 with the
registers printed when not."""

import ctypes
import mmap
import os
import struct
import sys

# uapi's constants, from the header rox-uapi-header generates (tests/guest/run writes it into
# target/ before each run): no hand copy to drift from uapi/src/regs.rs.
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/rox-uapi.h")
NEEDED = [
    "VERSION",
    "PAGE_SIZE",
    "REG_VERSION",
    "REG_STATUS",
    "REG_FATAL_CODE",
    "REG_ADMIN_CMD_BASE_LO",
    "REG_ADMIN_CMD_BASE_HI",
    "REG_ADMIN_CPL_BASE_LO",
    "REG_ADMIN_CPL_BASE_HI",
    "REG_ADMIN_CTRL",
    "STATUS_READY",
    "STATUS_ADMIN_ENABLED",
    "STATUS_FATAL",
]


def uapi_constants(path):
    """The `#define ROX_<name> <number>` lines of rox-uapi.h, by name without ROX_."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"FAIL: {e} (tests/guest/run generates it: cargo run -p rox-uapi --bin rox-uapi-header)")
    defs = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "#define" and words[1].startswith("ROX_"):
            try:
                defs[words[1][len("ROX_"):]] = int(words[2], 0)
            except ValueError:
                pass
    missing = [n for n in NEEDED if n not in defs]
    if missing:
        sys.exit(f"FAIL: {path} defines no ROX_{', ROX_'.join(missing)} (rox-uapi-header prints them)")
    return defs


U = uapi_constants(HEADER)
PCI_COMMAND = 4
PCI_COMMAND_MEMORY = 2


def enable_memory(dev):
    """Memory decoding on (a failed probe may leave it either way)."""
    with open(f"{dev}/config", "r+b") as f:
        f.seek(PCI_COMMAND)
        cmd = struct.unpack("<H", f.read(2))[0]
        if not cmd & PCI_COMMAND_MEMORY:
            f.seek(PCI_COMMAND)
            f.write(struct.pack("<H", cmd | PCI_COMMAND_MEMORY))


def registers(dev):
    fd = os.open(f"{dev}/resource0", os.O_RDWR | os.O_SYNC)
    try:
        m = mmap.mmap(fd, U["PAGE_SIZE"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    # One 32-bit load each (the device answers only 4- and 8-byte accesses).
    reg = lambda off: ctypes.c_uint32.from_buffer(m, off).value
    pair = lambda lo, hi: reg(U[lo]) | reg(U[hi]) << 32
    regs = {
        "version": reg(U["REG_VERSION"]),
        "status": reg(U["REG_STATUS"]),
        "fatal_code": reg(U["REG_FATAL_CODE"]),
        "admin_ctrl": reg(U["REG_ADMIN_CTRL"]),
        "admin_cmd_base": pair("REG_ADMIN_CMD_BASE_LO", "REG_ADMIN_CMD_BASE_HI"),
        "admin_cpl_base": pair("REG_ADMIN_CPL_BASE_LO", "REG_ADMIN_CPL_BASE_HI"),
    }
    m.close()
    return regs


def main():
    dev = f"/sys/bus/pci/devices/{sys.argv[1]}"
    if os.path.exists(f"{dev}/driver"):
        sys.exit(f"FAIL: {dev} has a driver: its BAR0 cannot be read from here")
    enable_memory(dev)
    r = registers(dev)
    print(" ".join(f"{k} {v:#x}" for k, v in r.items()))
    wrong = []
    if r["version"] != U["VERSION"]:
        wrong.append(f"version {r['version']:#x}, not {U['VERSION']} (a dead or absent device?)")
    if not r["status"] & U["STATUS_READY"]:
        wrong.append("not ready (a reset that never completed?)")
    if r["status"] & U["STATUS_FATAL"]:
        wrong.append(f"fatal, code {r['fatal_code']}")
    if r["status"] & U["STATUS_ADMIN_ENABLED"] or r["admin_ctrl"]:
        wrong.append("the admin queue is still enabled: the device was not reset")
    if r["admin_cmd_base"] or r["admin_cpl_base"]:
        wrong.append("the device still holds the admin rings' addresses: it was not reset")
    for w in wrong:
        print(f"FAIL: {sys.argv[1]}: {w}")
    sys.exit(1 if wrong else 0)


main()
