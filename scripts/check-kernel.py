#!/usr/bin/env python3
"""Preflight: can rox.ko be built against, and loaded into, the kernel of KDIR?

KDIR is a configured kernel tree (prepared or not), a distribution's headers package
(/usr/src/linux-headers-<release>), or a stock-kernel directory of rox's cache. Each check
prints `ok` or `MISS` with the exact fix; the exit status is 1 when anything is missing.
With --module, rox.ko's vermagic and every symbol it imports are checked too.

Run through scripts/check-kernel (make check-kernel KDIR=...), which supplies --rustc: the
version text of the rustc that would build rox.ko (the toolchain root's).
"""

import argparse
import lzma
import os
import re
import struct
import subprocess
import sys
from pathlib import Path


class Report:
    """Collects the verdicts; prints each as it comes."""

    def __init__(self):
        self.misses = 0

    def ok(self, what):
        print(f"ok    {what}")

    def note(self, what):
        print(f"note  {what}")

    def miss(self, what, fix):
        self.misses += 1
        print(f"MISS  {what}")
        for i, line in enumerate(fix.splitlines()):
            print(f"      fix: {line}" if i == 0 else f"           {line}")


def read_config(path):
    """CONFIG_* settings of a .config or auto.conf ("n" for `# CONFIG_X is not set`)."""
    conf = {}
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(CONFIG_\w+)=(.*)$", line)
        if m:
            conf[m.group(1)] = m.group(2).strip('"')
            continue
        m = re.match(r"^# (CONFIG_\w+) is not set$", line)
        if m:
            conf[m.group(1)] = "n"
    return conf


def find_tree(kdir):
    """The build tree inside KDIR: a stock-kernel cache directory holds it in linux/."""
    if (kdir / "linux" / ".config").is_file() and (kdir / "kernelrelease").is_file():
        return kdir / "linux"
    return kdir


def read_symvers(path):
    """Module.symvers: symbol -> (module, namespace)."""
    syms = {}
    for line in path.read_text(errors="replace").splitlines():
        f = line.split("\t")
        if len(f) >= 4:
            syms[f[1]] = (f[2], f[4] if len(f) > 4 else "")
    return syms


def module_bytes(path):
    """A module file's bytes, decompressed (.ko, .ko.xz; .ko.zst through zstd)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".zst":
        return subprocess.run(["zstd", "-dcq", str(path)], check=True, capture_output=True).stdout
    return data


def modinfo(data, key):
    """Every value of `key=` in a module's .modinfo strings."""
    return [m.decode(errors="replace") for m in re.findall(rb"(?:^|\0)" + key.encode() + rb"=([^\0]*)", data)]


def undefined_symbols(data):
    """Names of the undefined symbols of an ELF64 little-endian relocatable (a .ko)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for s in sections:
        if s[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[s[6]]
        str_off = strtab[4]
        for off in range(s[4], s[4] + s[5], s[9]):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, off)
            if st_shndx == 0 and st_name and (st_info >> 4) in (1, 2):  # SHN_UNDEF, GLOBAL/WEAK
                end = data.index(b"\0", str_off + st_name)
                names.append(data[str_off + st_name:end].decode())
    return names


def check_config(r, conf, rustc):
    """CONFIG_RUST, the rustc that built the kernel, MODVERSIONS, ib_core."""
    if conf.get("CONFIG_RUST") == "y":
        r.ok("CONFIG_RUST=y")
    else:
        r.miss("CONFIG_RUST is not set: this kernel cannot load Rust modules",
               "use a kernel built with CONFIG_RUST=y: Debian trixie-backports 7.3 "
               "(make setup ROX_KERNEL_FLAVOUR=stock)\nor rox's own (make setup)")
    built_by = conf.get("CONFIG_RUSTC_VERSION_TEXT", "")
    if not built_by:
        r.miss("the config names no CONFIG_RUSTC_VERSION_TEXT (kernel older than 6.12 or no Rust)",
               "use a Rust-enabled kernel of 6.12 or later")
    elif rustc and built_by.strip() == rustc.strip():
        r.ok(f"rustc: the kernel's and the available one are both '{rustc}'")
    elif rustc:
        r.miss(f"rustc differs: the kernel was built by '{built_by}', the available one is '{rustc}'\n"
               "      (Rust has no stable ABI: the kernel's crates must be built by the rustc that builds rox.ko)",
               f"build rox.ko with the kernel's rustc: install that version ({built_by.split()[1]}) "
               "and pass RUSTC=... to make,\nor use a kernel built by the root's rustc")
    cc_built, cc_here = conf.get("CONFIG_CC_VERSION_TEXT", ""), os.environ.get("ROX_CC_VERSION", "")
    # The program's name differs (gcc-14 vs gcc) where the version is the same.
    if cc_built and cc_here and cc_built.split(" ", 1)[-1] != cc_here.split(" ", 1)[-1]:
        r.note(f"C compiler differs: kernel '{cc_built}', available '{cc_here}' (kbuild warns; usually harmless)")
    if conf.get("CONFIG_MODVERSIONS") == "y":
        if conf.get("CONFIG_GENDWARFKSYMS") == "y":
            r.note("CONFIG_MODVERSIONS=y with gendwarfksyms: symbol CRCs must match Module.symvers exactly")
        else:
            r.miss("CONFIG_MODVERSIONS=y without CONFIG_GENDWARFKSYMS: Rust modules get no symbol CRCs",
                   "use a kernel with CONFIG_MODVERSIONS off, or with CONFIG_GENDWARFKSYMS=y")
    else:
        r.ok("CONFIG_MODVERSIONS off (symbols match by name)")
    ib = conf.get("CONFIG_INFINIBAND", "n")
    if ib in ("y", "m"):
        r.ok(f"CONFIG_INFINIBAND={ib} (ib_core{' module' if ib == 'm' else ' built in'})")
    else:
        r.miss("CONFIG_INFINIBAND is not set: no ib_core for rox.ko to register with",
               "use a kernel with CONFIG_INFINIBAND=m or y (and CONFIG_INFINIBAND_USER_ACCESS for librox)")
    if conf.get("CONFIG_INFINIBAND_USER_ACCESS") not in ("y", "m"):
        r.miss("CONFIG_INFINIBAND_USER_ACCESS is not set: no uverbs, librox cannot reach rox.ko",
               "use a kernel with CONFIG_INFINIBAND_USER_ACCESS=m or y")
    for opt, what in (("CONFIG_RDMA_RXE", "rxe (interop tests)"), ("CONFIG_NVME_RDMA", "nvme-rdma (ULP tests)"),
                      ("CONFIG_NVME_TARGET_RDMA", "nvmet-rdma (ULP tests)"),
                      ("CONFIG_SUNRPC_XPRT_RDMA", "rpcrdma (ULP tests)")):
        if conf.get(opt) not in ("y", "m"):
            r.note(f"{opt} not set: no {what}")


def check_rust_side(r, tree):
    """The Rust side an external Rust module builds against: present, preparable, or neither."""
    need = ["rust/libcore.rmeta", "rust/libkernel.rmeta", "rust/libmacros.so", "rust/bindgen_parameters",
            "rust/Makefile", "scripts/target.json"]
    have = [n for n in need if (tree / n).exists()]
    if len(have) == len(need):
        r.ok("Rust side present (rust/libcore.rmeta, libkernel.rmeta, libmacros.so, bindgen_parameters)")
    elif (tree / "rust/kernel/lib.rs").is_file() and (tree / "Kconfig").is_file():
        missing = ", ".join(n for n in need if n not in have)
        r.miss(f"Rust side not built ({missing}) but the source is here: preparable",
               f"make -C {tree} modules_prepare rust/ KERNELRELEASE=<the running kernel's release>")
    elif have:
        # Ubuntu's linux-lib-rust-<abi> (26.04, 7.0.0-44-generic, checked 2026-11-26) ships the
        # crates' metadata, rust/Makefile and scripts/target.json, not rust/bindgen_parameters,
        # which rox's own bindgen run (Kbuild) reads.
        missing = ", ".join(n for n in need if n not in have)
        r.miss(f"Rust side incomplete: {missing} missing (present: {', '.join(have)})",
               f"copy {missing} from the kernel source of exactly this version into {tree}"
               " (on Ubuntu: apt-get source linux-image-unsigned-$(uname -r))")
    else:
        r.miss("no Rust side (no rust/*.rmeta, rust/Makefile or bindgen_parameters): a headers package "
               "ships none\n      (upstream's install-extmod-build copies nothing under rust/)",
               "prepare the matching kernel source with this config (make modules_prepare rust/);\n"
               "for Debian's kernel: scripts/setup-stock-kernel.sh (make setup ROX_KERNEL_FLAVOUR=stock);\n"
               "on Ubuntu: install linux-lib-rust-$(uname -r) beside linux-headers-$(uname -r)")


def check_module(r, ko, symvers, kernel_modules):
    """rox.ko's vermagic against a stock module's, and every import against Module.symvers."""
    data = module_bytes(ko)
    vm = (modinfo(data, "vermagic") or ["?"])[0]
    ref = None
    if kernel_modules:
        # ib_core's when it is a module, else any of the kernel's modules.
        mods = sorted(Path(kernel_modules).glob("kernel/drivers/infiniband/core/ib_core.ko*")) or \
            sorted(Path(kernel_modules).glob("kernel/**/*.ko*"))
        if mods:
            ref_name = mods[0].name
            ref = (modinfo(module_bytes(mods[0]), "vermagic") or ["?"])[0]
    if ref is None:
        r.note(f"vermagic of {ko.name}: '{vm}' (no kernel module to compare with)")
    elif ref == vm:
        r.ok(f"vermagic: {ko.name} '{vm}' = {ref_name}'s")
    else:
        r.miss(f"vermagic differs: {ko.name} '{vm}', the kernel's modules '{ref}'",
               "build against a tree configured with the kernel's exact config and KERNELRELEASE")
    if symvers is None:
        r.miss("no Module.symvers: cannot check rox.ko's imports", "point KDIR at a tree with the kernel's Module.symvers")
        return
    imports = undefined_symbols(data)
    missing = [s for s in imports if s not in symvers]
    rust = sum(1 for s in imports if s.startswith("_R"))
    if missing:
        r.miss(f"{len(missing)} of {len(imports)} imports not exported by the kernel: " + " ".join(sorted(missing)[:12]),
               "the Rust crates or ib_core differ from the kernel's (source version or rustc); rebuild against its tree")
    else:
        r.ok(f"all {len(imports)} imports of {ko.name} ({rust} Rust, {len(imports) - rust} C) resolve in Module.symvers")
    ns_needed = {symvers[s][1] for s in imports if s in symvers and symvers[s][1]}
    ns_have = set(modinfo(data, "import_ns"))
    if ns_needed - ns_have:
        r.miss(f"{ko.name} uses symbols of namespaces it does not import: {' '.join(sorted(ns_needed - ns_have))}",
               "add MODULE_IMPORT_NS for them")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kdir", type=Path)
    ap.add_argument("--rustc", default="", help="version text of the rustc that builds rox.ko")
    ap.add_argument("--module", type=Path, help="a built rox.ko to check against the kernel")
    ap.add_argument("--kernel-modules", help="the kernel's /lib/modules/<release> (vermagic reference)")
    a = ap.parse_args()
    r = Report()
    tree = find_tree(a.kdir)
    cfg = next((p for p in (tree / ".config", tree / "include/config/auto.conf") if p.is_file()), None)
    if cfg is None:
        print(f"MISS  {a.kdir}: no .config (not a configured kernel tree or headers package)")
        print("      fix: KDIR=/usr/src/linux-headers-$(uname -r), or a configured kernel source tree")
        return 1
    release = tree / "include/config/kernel.release"
    print(f"kernel {release.read_text().strip() if release.is_file() else '(release unknown)'} at {tree}")
    check_config(r, read_config(cfg), a.rustc)
    check_rust_side(r, tree)
    sv = tree / "Module.symvers"
    symvers = read_symvers(sv) if sv.is_file() else None
    if symvers is None:
        r.note("no Module.symvers: modpost cannot check imports (copy the kernel's, e.g. from its headers package)")
    elif not any(s for s in symvers if s == "ib_register_device"):
        r.miss("Module.symvers exports no ib_register_device: ib_core absent", "use a kernel with CONFIG_INFINIBAND")
    else:
        kernel_crate = [s for s in symvers if s.startswith("_R") and "6kernel" in s]
        r.ok(f"Module.symvers: ib_core exported, {len(kernel_crate)} kernel-crate Rust symbols")
    if a.module:
        check_module(r, a.module, symvers, a.kernel_modules)
    print("rox.ko can be built and loaded here" if r.misses == 0 else f"{r.misses} problem(s): see the fixes above")
    return 1 if r.misses else 0


if __name__ == "__main__":
    sys.exit(main())
