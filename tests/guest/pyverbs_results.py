#!/usr/bin/env python3
"""pyverbs_results.py LOG: the per-test results of a unittest -v log as "Class.test status"
lines (a status may follow output the test printed, on a later line); used by
t-provider-verbs.sh and t-provider-xrc.sh."""
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
for i, line in enumerate(lines):
    m = re.match(r"^(test\w+) \(([\w.]+)\)(?: \.\.\. ?(.*))?$", line)
    if not m:
        continue
    status, j = (m.group(3) or "").strip(), i
    while not re.match(r"(ok|FAIL|ERROR|skipped)", status):
        j += 1
        if j >= len(lines) or re.match(r"^test\w+ \(", lines[j]):
            status = "?"
            break
        found = re.search(r"(?:^|\s)(ok|FAIL|ERROR|skipped .*)$", lines[j])
        status = found.group(1) if found else status
    print(m.group(2).split(".")[-2] + "." + m.group(1), status.split()[0])
