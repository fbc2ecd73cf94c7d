# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/lib/ipv6_quiet.py — the guest's NICs send no IPv6 router solicitations while a test
rings a sleeping rox device (tests/guest/wake_after_idle.py).

Linux sends router solicitations from every NIC for as long as it is up and no router
answers, at doubling intervals (router_solicitations -1, the default: no end). Each one
reaches rox_0 through its port (another lab NIC on the bridge) or its paired netdev and keeps
it awake for its idle grace, so a ring then rightly writes no wake and is not counted
(tests/lib/wake_rounds.py). Session 18's capture of an idle guest showed them, plus the boot's
MLD reports and neighbour solicitations (over before any test), as the only frames there: with
router_solicitations 0 (read when the solicitation timer fires, so the next one is not sent)
such rings become rare, and a lost wake has no frames left to hide behind. The old values are
put back afterwards (each on its own: one that fails is printed and the rest still are); a
timer that stopped does not start again, so later tests stay quiet too.
"""
import contextlib
import glob
import os
import sys

CONF = "/proc/sys/net/ipv6/conf"


@contextlib.contextmanager
def no_router_solicitations():
    """Sets router_solicitations to 0 on every interface but lo (and on `default`, for NICs
    that appear meanwhile) for the block's duration; yields the interfaces it quieted. Without
    IPv6 (no /proc/sys/net/ipv6) there is nothing to quiet."""
    saved = {}
    try:
        for path in sorted(glob.glob(os.path.join(CONF, "*", "router_solicitations"))):
            if path.split(os.sep)[-2] in ("lo", "all"):  # `all` does not pass this one on
                continue
            with open(path) as f:
                saved[path] = f.read().strip()
            with open(path, "w") as f:
                f.write("0")
        yield sorted(p.split(os.sep)[-2] for p in saved)
    finally:
        # Each on its own: an interface gone meanwhile (its directory with it) is no reason to
        # leave the others quiet.
        for path, value in saved.items():
            try:
                with open(path, "w") as f:
                    f.write(value)
            except OSError as e:
                print(f"ipv6_quiet: could not restore {path} to {value}: {e}", file=sys.stderr)
