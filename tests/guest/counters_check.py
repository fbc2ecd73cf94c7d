#!/usr/bin/env python3
"""Counter snapshots and exact-delta checks for tests/guest/t-driver-counters.sh.

  counters_check.py snapshot <device> <file>
      Writes the port 1 counters of <device> to <file> (JSON): sysfs ports/1/counters/*
      (the PMA answers of rox.ko's process_mad) as "sysfs", and `rdma -j statistic show link`
      (the hw_counters) as "rdma".
  counters_check.py delta <before> <after> <source>.<name>=<value>...
      Checks that each named counter grew by exactly <value> between the snapshots; prints
      each check and exits 1 if any failed (or a named counter is missing).
"""
import json
import os
import subprocess
import sys


def sysfs_counters(device):
    base = f"/sys/class/infiniband/{device}/ports/1/counters"
    values = {}
    for name in sorted(os.listdir(base)):
        with open(os.path.join(base, name)) as f:
            values[name] = int(f.read().strip())
    return values


def rdma_counters(device):
    out = subprocess.run(
        ["rdma", "-j", "statistic", "show", "link", f"{device}/1"],
        check=True, capture_output=True, text=True,
    ).stdout
    values = {}
    for entry in json.loads(out):
        if entry.get("ifname") != device:
            continue
        # iproute2 puts the counters beside ifname/port; newer ones may nest them.
        nested = entry.get("counters", {})
        for key, value in list(entry.items()) + list(nested.items()):
            if isinstance(value, int) and key not in ("ifindex", "port"):
                values[key] = value
    if not values:
        raise SystemExit(f"no counters of {device} in `rdma -j statistic show`: {out!r}")
    return values


def snapshot(device, path):
    with open(path, "w") as f:
        json.dump({"sysfs": sysfs_counters(device), "rdma": rdma_counters(device)}, f)


def delta(before_path, after_path, expectations):
    with open(before_path) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    failed = 0
    for spec in expectations:
        key, want = spec.split("=")
        source, name = key.split(".", 1)
        if name not in before.get(source, {}) or name not in after.get(source, {}):
            print(f"FAIL {key}: missing")
            failed += 1
            continue
        got = after[source][name] - before[source][name]
        ok = got == int(want)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {key:42} +{got} (expected +{want})")
    return failed


def main(argv):
    if len(argv) == 4 and argv[1] == "snapshot":
        snapshot(argv[2], argv[3])
        return 0
    if len(argv) >= 5 and argv[1] == "delta":
        return 1 if delta(argv[2], argv[3], argv[4:]) else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
