"""Shared by the host-side Python runners (tests/interop/run, tests/net/*): where things are and
how to start a lab (qemu/rox-lab) with one command per guest."""
import os
import shlex
import subprocess
import time

TOP = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The kernel a runner boots unless --flavour says otherwise (make test sets it to stock).
DEFAULT_FLAVOUR = os.environ.get("ROX_KERNEL_FLAVOUR") or "release"


def _lib_sh(expr):
    """Evaluates a shell expression with scripts/lib.sh sourced (the one place cache paths are
    computed)."""
    out = subprocess.run(["bash", "-c", f'. "{TOP}/scripts/lib.sh"; {expr}'], check=True,
                         stdout=subprocess.PIPE, text=True)
    return out.stdout.strip()


def module_in_guest(flavour=DEFAULT_FLAVOUR):
    """Path of this clone's rox.ko as the guest sees it; fails clearly if it is not built."""
    host = _lib_sh(f'module_dir {shlex.quote(flavour)}') + "/rox.ko"
    if not os.path.exists(host):
        raise SystemExit(f"rox.ko not built ({host}); run 'make module'")
    return _lib_sh(f'cache_path_in_root {shlex.quote(os.path.dirname(host))}') + "/rox.ko"


def log_path(kind):
    d = os.path.join(_lib_sh('echo "$ROX_CACHE"'), kind)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.log")


def rox_lab():
    exe = os.environ.get("ROX_LAB_BIN", os.path.join(TOP, "target", "release", "rox-lab"))
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"no rox-lab binary at {exe}; run 'cargo build --release -p rox-lab'")
    return exe


def command(guests, mtu=9000, timeout=900, flavour=DEFAULT_FLAVOUR, capture=None, routed=False,
            raw_bridge_reader=False, extra=()):
    """rox-lab's command line for [(NICS, CMD), ...] (guest 0 first). `raw_bridge_reader`: the
    run reads bridge 0 raw (a --host-cmd's tcpdump or AF_PACKET socket), so rox-lab starts the
    rox-nics sending frames one by one (--raw-bridge-reader; --capture implies it)."""
    cmd = [rox_lab(), "--mtu", str(mtu), "--timeout", str(timeout), "--flavour", flavour]
    if capture:
        cmd += ["--capture", capture]
    if raw_bridge_reader:
        cmd.append("--raw-bridge-reader")
    if routed:
        cmd.append("--routed")
    cmd += list(extra)
    for nics, guest_cmd in guests:
        cmd += ["--guest", nics, "--cmd", guest_cmd]
    return cmd


quote = shlex.quote
