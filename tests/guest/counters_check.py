#!/usr/bin/env python3
"""Counter snapshots and exact-delta checks for tests/guest/t-driver-counters.sh.

  counters_check.py snapshot <device> <file>
      Writes the port 1 counters of <device> to <file> (JSON): sysfs ports/1/counters/*
      (the PMA answers of rox.ko's process_mad) as "sysfs", and `rdma -j statistic show link`
      (the hw_counters) as "rdma".
  counters_check.py settle <device> <before> <after>
      Snapshots <device> into <after> once the traffic since <before> has settled (every
      frame sent received: one device loops back to itself; every tail probe answered as a
      duplicate), at most 5 s; prints the number of tail probes sent (roce_adp_retrans).
  counters_check.py delta <before> <after> <source>.<name>=<value>...
      Checks that each named counter grew by exactly <value> (or, for <low>..<high>, by
      at least <low> and at most <high>) between the snapshots; prints
      each check and exits 1 if any failed (or a named counter is missing).
  counters_check.py perfquery <before> <perfquery output> <after>
      Checks that every counter perfquery printed (PortCounters or PortCountersExtended)
      that sysfs also has lies between the two sysfs snapshots taken around it; exits 1 if
      one does not, or if none was compared.
"""
import json
import os
import re
import subprocess
import sys
import time


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


def grown(before, after, name):
    if name not in before["rdma"] or name not in after["rdma"]:
        raise SystemExit(f"no rdma statistic counter {name}")
    return after["rdma"][name] - before["rdma"][name]


def settle(device, before_path, after_path, seconds=5.0):
    # A data-path thread that loses its core for longer than the probe timeout (a loaded
    # host) sends a tail probe: the last request again, answered again as a duplicate; its
    # answer may still be on the wire when the program saw its last completion.
    with open(before_path) as f:
        before = json.load(f)
    deadline = time.monotonic() + seconds
    while True:
        snapshot(device, after_path)
        with open(after_path) as f:
            after = json.load(f)
        probes = grown(before, after, "roce_adp_retrans")
        settled = (grown(before, after, "tx_packets") == grown(before, after, "rx_packets")
                   and grown(before, after, "duplicate_request") == probes)
        if settled or time.monotonic() > deadline:
            return probes
        time.sleep(0.01)


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
        low, _, high = want.partition("..")
        ok = int(low) <= got <= int(high or low)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {key:42} +{got} (expected +{want})")
    return failed


# perfquery's field names and the sysfs counters of the same PMA fields.
PERFQUERY_SYSFS = {
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortRcvErrors": "port_rcv_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
}


def perfquery(before_path, output_path, after_path):
    with open(before_path) as f:
        before = json.load(f)["sysfs"]
    with open(after_path) as f:
        after = json.load(f)["sysfs"]
    failed = compared = 0
    with open(output_path) as f:
        for line in f:
            m = re.match(r"^(\w+):\.*(\d+)$", line.strip())
            if not m or m.group(1) not in PERFQUERY_SYSFS:
                continue
            name = PERFQUERY_SYSFS[m.group(1)]
            value = int(m.group(2))
            ok = before[name] <= value <= after[name]
            compared += 1
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} perfquery {m.group(1):22} {value} "
                  f"(sysfs {name} {before[name]}..{after[name]})")
    if not compared:
        print("FAIL: no counter of perfquery's output has a sysfs counterpart")
        return 1
    return 1 if failed else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "snapshot":
        snapshot(argv[2], argv[3])
        return 0
    if len(argv) == 5 and argv[1] == "settle":
        print(settle(argv[2], argv[3], argv[4]))
        return 0
    if len(argv) >= 5 and argv[1] == "delta":
        return 1 if delta(argv[2], argv[3], argv[4:]) else 0
    if len(argv) == 5 and argv[1] == "perfquery":
        return perfquery(argv[2], argv[3], argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
