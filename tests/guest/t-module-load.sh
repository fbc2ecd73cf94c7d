#!/bin/bash
# rox.ko loads into the unpatched kernel, logs its version, and unloads cleanly.
set -u
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$ROX_KO" ] || fail "no module at $ROX_KO"
for i in 1 2 3; do
	dmesg -C
	insmod "$ROX_KO" || fail "insmod failed (round $i)"
	grep -q '^rox ' /proc/modules || fail "rox not in /proc/modules after insmod"
	dmesg | grep -qE 'rox [0-9.]+ loaded' || fail "no version line in dmesg: $(dmesg | tail -5)"
	rmmod rox || fail "rmmod failed (round $i)"
	grep -q '^rox ' /proc/modules && fail "rox still loaded after rmmod"
	dmesg | grep -qiE 'BUG|Oops|WARNING' && fail "kernel complained: $(dmesg | grep -iE 'BUG|Oops|WARNING')"
done
echo "rox.ko loaded and unloaded 3 times"
