#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""tests/lib/rdma_tool.py — what the guest tests read from iproute2's `rdma`, through its JSON
output (`rdma -j`), in one place: port counters and the RDMA device of a netdev.

    rdma_tool.py counter DEV NAME        the value of port 1 counter NAME of DEV; exit 1 (and
                                         why, on stderr) when DEV or NAME is missing
    rdma_tool.py counters DEV [NAME...]  "name value" lines of DEV's port 1 counters (all, or
                                         the NAMEs; a NAME DEV lacks reads "name missing"),
                                         for reports; exit 1 when DEV has no counters
    rdma_tool.py link-dev NETDEV [--not-prefix P]
                                         the RDMA device whose port 1 is on NETDEV (not one
                                         named P...); exit 1 when there is none

Scripts run it by its path in the clone (tests/guest/lib.sh wraps it: rdma_counter,
rdma_counters, rdma_link_dev).
"""
import json
import subprocess
import sys

# Keys of a `rdma -j statistic show link` object that name the port, not a counter.
PORT_KEYS = {"ifindex", "ifname", "port"}


class ToolError(Exception):
    pass


def rdma_json(*args):
    """The parsed JSON of `rdma -j ARGS...`."""
    try:
        out = subprocess.run(["rdma", "-j", *args], check=True, capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolError(f"rdma -j {' '.join(args)}: {e}") from e
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        raise ToolError(f"rdma -j {' '.join(args)}: not JSON ({e}): {out[:200]!r}") from e


def port_counters(dev, port=1):
    """{name: value} of DEV's port counters (the device's hardware counters on that port)."""
    for obj in rdma_json("statistic", "show", "link", f"{dev}/{port}"):
        if obj.get("ifname") == dev and obj.get("port") == port:
            counters = {k: v for k, v in obj.items() if k not in PORT_KEYS}
            if not all(isinstance(v, int) for v in counters.values()):
                raise ToolError(f"{dev}/{port}: counters that are not numbers: {counters}")
            return counters
    raise ToolError(f"no statistics of {dev}/{port}")


def link_dev(netdev, not_prefix=None):
    """The RDMA device whose port 1 is on NETDEV, or None."""
    for link in rdma_json("link", "show"):
        name = link.get("ifname", "")
        if link.get("netdev") != netdev or link.get("port") != 1:
            continue
        if not_prefix and name.startswith(not_prefix):
            continue
        return name
    return None


def main(argv):
    if argv[:1] == ["counter"] and len(argv) == 3:
        counters = port_counters(argv[1])
        if argv[2] not in counters:
            raise ToolError(f"{argv[1]} has no counter {argv[2]} (it has {', '.join(counters)})")
        print(counters[argv[2]])
    elif argv[:1] == ["counters"] and len(argv) >= 2:
        counters = port_counters(argv[1])
        for name in argv[2:] or counters:
            print(name, counters.get(name, "missing"))
    elif argv[:1] == ["link-dev"] and (len(argv) == 2 or (len(argv) == 4 and argv[2] == "--not-prefix")):
        dev = link_dev(argv[1], argv[3] if len(argv) == 4 else None)
        if dev is None:
            raise ToolError(f"no RDMA device on {argv[1]}")
        print(dev)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ToolError as e:
        print(f"rdma_tool: {e}", file=sys.stderr)
        sys.exit(1)
