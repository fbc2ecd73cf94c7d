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


def rox_nic():
    """The rox-nic binary rox-lab starts: $ROX_NIC_BIN (rox-lab reads it too), else this clone's
    release build; fails clearly if it is not there."""
    exe = os.environ.get("ROX_NIC_BIN", os.path.join(TOP, "target", "release", "rox-nic"))
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"no rox-nic binary at {exe}; run 'cargo build --release -p rox-nic'")
    return exe


def rox_trace():
    """rox-trace: $ROX_TRACE_BIN, else the one beside the rox-nic in use (one crate, one build)."""
    exe = os.environ.get("ROX_TRACE_BIN") or os.path.join(os.path.dirname(rox_nic()), "rox-trace")
    if not os.access(exe, os.X_OK):
        raise SystemExit(f"no rox-trace binary at {exe}; run 'cargo build --release -p rox-nic'")
    return exe


LIBROX_SUFFIX = "-rdmav34.so"


def librox_drivers(librox, cache, root):
    """The environment prefix that makes the guests' libibverbs load `librox` (a file named
    lib<x>-rdmav34.so under the cache or this clone, seen in the guest at /cache or /rox) before
    the configured providers, so nothing shared is installed: "RDMAV_DRIVERS=<path> ". Without
    `librox`, "" once the root (`root`) has librox installed. A bad path fails clearly."""
    if not librox:
        if not os.path.exists(f"{root}/usr/lib/x86_64-linux-gnu/libibverbs/librox{LIBROX_SUFFIX}"):
            raise SystemExit("librox is not installed in the root; run 'make provider'")
        return ""
    path = os.path.realpath(librox)
    if not path.endswith(LIBROX_SUFFIX) or not os.path.isfile(path):
        raise SystemExit(f"--librox needs an existing file named lib<x>{LIBROX_SUFFIX}: {librox}")
    cache = os.path.realpath(cache)
    if path.startswith(cache + "/"):
        in_guest = "/cache" + path[len(cache):]
    elif path.startswith(TOP + "/"):
        in_guest = "/rox" + path[len(TOP):]
    else:
        raise SystemExit(f"--librox must be under $ROX_CACHE ({cache}) or the clone ({TOP}): {librox}")
    # libibverbs appends the suffix itself.
    return f"RDMAV_DRIVERS={in_guest[:-len(LIBROX_SUFFIX)]} "


def guest_librox(librox):
    """librox_drivers for this host's cache and root."""
    return librox_drivers(librox, _lib_sh('echo "$ROX_CACHE"'), _lib_sh("root_dir"))


def command(guests, mtu=9000, timeout=900, flavour=DEFAULT_FLAVOUR, capture=None, routed=False,
            raw_bridge_reader=False, extra=()):
    """rox-lab's command line for [(NICS, CMD), ...] (guest 0 first). `raw_bridge_reader`: the
    run reads bridge 0 raw (a --host-cmd's tcpdump or AF_PACKET socket), so rox-lab starts the
    rox-nics sending frames one by one (--raw-bridge-reader; --capture implies it). `mtu` None:
    rox-lab's default, or an --mtu in `extra`."""
    cmd = [rox_lab(), "--timeout", str(timeout), "--flavour", flavour]
    if mtu is not None:
        cmd += ["--mtu", str(mtu)]
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
