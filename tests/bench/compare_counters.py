# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""What a rox device's counters moved by during one benchmark step of tests/bench/compare.

The guest side (compare_guest.py) reads the device's port counters (`rdma statistic`, through
tests/lib/rdma_tool.py, and the PMA's port_xmit_discards from sysfs) before and after each step
on a rox device and prints what moved as one line:
    COUNTERS <row-key> <column> <side> <device> name=delta ...   ("-" when nothing moved,
                                                                   "unreadable" when unread)
The host side (compare) parses those lines and prints them under the table, the transport's
retransmission picture first, so a slow bandwidth cell can be told apart from one that lost
frames (retransmissions, ACK timeouts, duplicates and out-of-sequence requests at the
receiver, port discards, refused segmentation requests).
"""
import re

# Shown for every step, in this order, zeros included: what says whether frames were lost.
HEADLINE = ("tx_packets", "rx_packets", "retransmits", "local_ack_timeout_err", "roce_adp_retrans",
            "duplicate_request", "out_of_sequence", "naks_sent", "port_xmit_discards",
            "port_rx_gso_refused", "rx_dropped")
LINE = re.compile(r"COUNTERS (\S+) (\S+) (\S+) (\S+) (.*?)\s*$")


def moved(before, after):
    """{name: after - before} of the counters whose value changed (`after`'s order)."""
    return {k: v - before[k] for k, v in after.items() if k in before and v != before[k]}


def line(key, col, side, dev, deltas):
    """The guest's line for one step; `deltas` None when the counters could not be read."""
    if deltas is None:
        what = "unreadable"
    else:
        what = " ".join(f"{k}={v}" for k, v in deltas.items()) or "-"
    return f"COUNTERS {key} {col} {side} {dev} {what}"


def parse(text):
    """A record {key, column, side, device, moved} from a guest line, or None if it is none.
    `moved` is None for an unreadable device."""
    m = LINE.search(text)
    if not m:
        return None
    rest = m.group(5)
    deltas = None
    if rest != "unreadable":
        deltas = {}
        for item in rest.split():
            name, _, value = item.partition("=")
            if item == "-" or not value.lstrip("-").isdigit():
                continue
            deltas[name] = int(value)
    return {"key": m.group(1), "column": m.group(2), "side": m.group(3), "device": m.group(4),
            "moved": deltas}


def report(records):
    """Text lines for the host's output: each step's headline counters, then the rest that moved."""
    if not records:
        return []
    out = ["rox device counters, what each step moved (client: guest 1, the sender of ib_write_bw;"
           " server: guest 0; absent = 0):"]
    for r in records:
        head = f"  {r['key']:<18} {r['column']:<8} {r['side']:<6} {r['device']:<6}"
        if r["moved"] is None:
            out.append(f"{head} counters unreadable")
            continue
        shown = [f"{k}={r['moved'].get(k, 0)}" for k in HEADLINE]
        shown += [f"{k}={v}" for k, v in r["moved"].items() if k not in HEADLINE]
        out.append(f"{head} " + " ".join(shown))
    return out
