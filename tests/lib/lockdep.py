#!/usr/bin/env python3
"""lockdep's verdict on a debug kernel's dmesg, shared by tests/guest/lib.sh `lockdep_check`
and tests/ulp/guest.py (one list of known upstream reports, one parser).

lockdep reports only its first finding per boot and then turns itself off (debug_locks 0 in
/proc/lockdep_stats): after any report nothing more is proven in that boot. So:
- a report of Linux's own code that rox cannot cause or mend (KNOWN_UPSTREAM: the set of locks
  of its dependency chain, and no "[rox]" frame) passes, with a note saying where lockdep's
  coverage ended; it is remembered (a file in the guest's /run, keyed by boot id) so that a
  later check, after `dmesg -C` or a wrapped buffer, still knows why debug_locks is 0;
- any other report, or that one naming rox, fails; so do the other lock/RCU/atomic-sleep
  complaints, and debug_locks 0 with no known report seen in this boot.

A report is read by its lockdep-format lines only (banner, lock lines, chain, frames,
scenario, held locks, backtrace): a line another CPU printed in between is not part of it and
is judged on its own.

Command line: dmesg on stdin; `--where` names the test or case, `--stats` lockdep_stats.
Exit status 0 pass, 1 fail; the reasons on stdout."""
import argparse
import json
import os
import re
import sys

# Linux's own reports, each the set of locks of the chain. nvmet-rdma runs a queue's first
# command (the I/O connect, which takes nvmet_config_sem) inside the rdma_cm handler (under
# id_priv->handler_mutex) when it arrives before ESTABLISHED, which IB allows; removing a port
# calls rdma_destroy_id (handler_mutex) under nvmet_config_sem. Seen on 7.3.4 in make test's
# guest-ulp-debug, 2026-11-26, when the connect overtakes ESTABLISHED (docs/debugging.md).
KNOWN_UPSTREAM = {
    frozenset({"nvmet_config_sem", "&id_priv->handler_mutex"}):
        "nvmet-rdma against rdma_cm: nvmet_config_sem vs id_priv->handler_mutex",
}

# Everything lockdep, RCU and the atomic-sleep check say when they find something.
COMPLAINT = re.compile(
    r"possible circular locking dependency|inconsistent lock state|possible recursive locking|"
    r"suspicious RCU usage|BUG: sleeping function called from invalid context|"
    r"bad unlock balance|lock held when returning to user space|held lock freed|BUG: MAX_LOCK|"
    r"lockdep is turned off|Invalid wait context")
REPORT_TITLE = re.compile(
    r"WARNING: (possible circular locking dependency|inconsistent lock state|"
    r"possible recursive locking) detected")
# dmesg's "[   46.461898] " stamp, rox-lab's "[g0] " console prefix.
PREFIX = re.compile(r"^(\[g\d+\] ?)?(\[\s*\d+\.\d+\] ?)?")
CHAIN_LOCK = re.compile(r"^-> #\d+ \((.+?)\)\{")
HELD_OR_WANTED_LOCK = re.compile(r"^ *(#\d+: )?[0-9a-f]{8,16} \((.+?)\)\{")
# The lines of a report's body that lockdep (and dump_stack) print; anything else inside a
# report's span is another CPU's line.
REPORT_LINE = re.compile(
    r"^$|^=+$|^-+$|^ *\*\*\* DEADLOCK \*\*\*$|"
    r"^WARNING: |^\S+ #\d+ (Not tainted|Tainted:)|^\S+/\d+ (is trying to acquire lock|"
    r"just changed the state of lock|is trying to acquire)|"
    r"^but task is already holding lock:|^which lock already depends on the new lock\.|"
    r"^the existing dependency chain \(in reverse order\) is:|^-> #\d+ \(|"
    r"^other info that might help us debug this:|^ *Possible unsafe locking scenario:|"
    r"^ *CPU0( +CPU1)?$|^ *-+( +-+)?$|^ *lock\(.*\);$|^ *<Interrupt>$|"
    r"^ *(#\d+: )?[0-9a-f]{8,16} \(|^(\d+ )?locks? held by |^no locks held by |"
    r"^stack backtrace:|^CPU: \d+ |^Tainted: |^Hardware name: |^Call Trace:|^ *</?TASK>$|"
    r"^ *(\? )?[\w.]+\+0x[0-9a-f]+/0x[0-9a-f]+( \[\w+\])?$|"
    r"^(RIP|Code|RSP|RAX|RDX|RBP|R10|R13): |"
    r"^irq event stamp: |^hardirqs (last|first) |^softirqs (last|first) |"
    r"^\{[A-Z-]+\} state was registered at:|^.* \{[A-Z-]+\} -> \{[A-Z-]+\} usage\.")
REPORT_END = re.compile(r"^ *</TASK>$")
STATE_FILE = "/run/rox-lockdep-known.json"


def strip(line):
    return PREFIX.sub("", line, count=1).rstrip()


class Report:
    """One lockdep report: its title, the indices of its own lines, its locks, whether any
    frame is rox.ko's, whether it ran to its backtrace's end, and which known report it is."""

    def __init__(self, title, lines, locks, names_rox, complete):
        self.title, self.lines, self.locks = title, lines, locks
        self.names_rox, self.complete = names_rox, complete
        self.known = (KNOWN_UPSTREAM.get(frozenset(locks))
                      if complete and not names_rox else None)


def parse_reports(lines):
    """The lockdep reports in dmesg `lines`, each from its banner to its backtrace's
    "</TASK>", keeping only lockdep-format lines (an interleaved line is not the report's)."""
    reports = []
    i = 0
    while i < len(lines):
        if not REPORT_TITLE.search(strip(lines[i])):
            i += 1
            continue
        title_at = i
        own = [i - 1] if i > 0 and re.fullmatch(r"=+", strip(lines[i - 1]).strip()) else []
        own.append(i)
        locks, names_rox, complete = set(), False, False
        in_chain = False
        j = i + 1
        while j < len(lines):
            text = strip(lines[j])
            if REPORT_TITLE.search(text):
                break  # a second report without the first's end
            if REPORT_LINE.search(text):
                own.append(j)
                if text.startswith("the existing dependency chain"):
                    in_chain = True
                elif text.startswith("other info"):
                    in_chain = False
                m = CHAIN_LOCK.search(text)
                if m:
                    locks.add(m.group(1))
                m = HELD_OR_WANTED_LOCK.search(text)
                if m and not in_chain and not m.group(1):
                    # the lock being taken and the one held ("but task is already holding")
                    locks.add(m.group(2))
                if text.rstrip().endswith("[rox]"):
                    names_rox = True
                if REPORT_END.search(text):
                    complete = True
                    j += 1
                    break
            j += 1
        reports.append(Report(strip(lines[title_at]).strip(), own, locks, names_rox, complete))
        i = j
    return reports


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def load_state(path, boot):
    """The known report remembered in this boot: {"title":…, "where":…} or None."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return state if state.get("boot") == boot else None


def judge(text, debug_locks, where, state_path=STATE_FILE, boot=None, since=0):
    """(ok, messages) for dmesg `text`; `debug_locks` is lockdep_stats' value (None: no
    lockdep). Reports and complaints from line `since` on are judged (earlier ones were, by an
    earlier check); a known report anywhere seen for the first time is remembered in
    `state_path`."""
    boot = boot if boot is not None else boot_id()
    lines = text.splitlines()
    reports = parse_reports(lines)
    remembered = load_state(state_path, boot)
    ok, msgs = True, []
    explained = set()
    for r in reports:
        head = f"{r.title} ({', '.join(sorted(r.locks)) or 'no locks read'})"
        if r.known:
            explained.update(r.lines)
            if remembered is None:
                remembered = {"boot": boot, "title": lines[r.lines[0]].strip(), "where": where,
                              "what": r.known}
                try:
                    with open(state_path, "w") as f:
                        json.dump(remembered, f)
                except OSError as e:  # a later check then fails on debug_locks 0: safe
                    msgs.append(f"lockdep: cannot remember the report in {state_path}: {e}")
                at = "before" if r.lines[-1] < since else "at"
                msgs.append(f"lockdep: known upstream report, not rox's ({r.known}): {head}; "
                            f"lockdep coverage ended {at} {where}: nothing after it is proven "
                            "in this boot")
            continue
        if r.lines[-1] < since:
            continue
        ok = False
        why = ("names a [rox] frame" if r.names_rox else
               "incomplete (no end of its backtrace)" if not r.complete else
               "not a known upstream one")
        msgs.append(f"lockdep report {why}: {head}")
        # The report itself: on CI the run's output is the only evidence there is.
        msgs.extend("    " + strip(lines[j]).rstrip() for j in r.lines)
    for i, line in enumerate(lines):
        if i >= since and i not in explained and COMPLAINT.search(strip(line)) and \
                not any(i in r.lines for r in reports):
            ok = False
            msgs.append(f"kernel lock/RCU check complained: {strip(line).strip()}")
    if debug_locks == 0:
        if remembered is not None:
            if remembered["where"] != where:
                msgs.append(f"lockdep: off since {remembered['where']} (known upstream report, "
                            f"{remembered['what']}): nothing is proven here")
        elif ok:
            ok = False
            msgs.append("lockdep is off (debug_locks 0) and no known report was seen in this "
                        "boot: it reported a locking problem earlier (before a dmesg -C, or "
                        "the buffer wrapped), or ran out of room")
    return ok, msgs


def read_debug_locks(stats_path):
    """debug_locks from /proc/lockdep_stats, None when there is no such file."""
    try:
        with open(stats_path) as f:
            stats = f.read()
    except OSError:
        return None
    m = re.search(r"^\s*debug_locks:\s*(\d+)\s*$", stats, re.M)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", required=True, help="the test or case the check ends")
    ap.add_argument("--stats", default="/proc/lockdep_stats")
    ap.add_argument("--state", default=STATE_FILE)
    args = ap.parse_args()
    ok, msgs = judge(sys.stdin.read(), read_debug_locks(args.stats), args.where, args.state)
    for m in msgs:
        print(m)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
