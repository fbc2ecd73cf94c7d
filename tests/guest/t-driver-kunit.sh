#!/bin/bash
# rox.ko's KUnit suites (drivers/logic_tests.rs: rox_wq_record, rox_cq_clean, rox_cut_off,
# rox_slot_store, rox_query_len), which the kernel runs when rox.ko loads on a kernel with CONFIG_KUNIT=y.
# rox's debug kernel has KUnit (and kmemleak): there each suite must have reported, every case
# ok, the suite ok with fail:0 skip:0; a missing suite or any "not ok" fails. On a kernel
# without KUnit (release, Debian's stock) rox.ko must carry no KUnit section (the suites are
# compiled out). The KTAP is read from debugfs (/sys/kernel/debug/kunit/SUITE/results), else
# from dmesg.
set -u
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; exit 1; }
suites="rox_wq_record rox_cq_clean rox_cut_off rox_slot_store rox_query_len"

mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null
if [ ! -d /sys/module/kunit ]; then
	[ "${ROX_KERNEL_FLAVOUR:-}" != debug ] && [ ! -e /sys/kernel/debug/kmemleak ] ||
		fail "this is rox's debug kernel but it has no KUnit (CONFIG_KUNIT=y in qemu/kernel-debug.config)"
	# A kernel without KUnit (release, Debian's stock): the suites run on the debug kernel; here
	# the module built for this kernel must carry none (the cfg gate in rox_main.rs).
	[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
	! grep -qa kunit_test_suites "$ROX_KO" ||
		fail "$ROX_KO has a KUnit section but the kernel has no KUnit"
	echo "PASS: no KUnit in this kernel and none in rox.ko (the suites run on the debug kernel)"
	exit 0
fi
# kunit.enable has no sysfs file (permission 0): the command line is where it is turned off.
! grep -qw "kunit.enable=0" /proc/cmdline ||
	fail "KUnit is disabled (kunit.enable=0 on the command line): the suites would not run"
[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
grep -q "^rox " /proc/modules && rmmod rox
dmesg -C
insmod "$ROX_KO" || fail "insmod failed"

# ktap SUITE: the suite's KTAP from this load (debugfs keeps the last run of a loaded module).
ktap() {
	local f=/sys/kernel/debug/kunit/$1/results
	if [ -r "$f" ]; then
		cat "$f"
	else
		# Only the timestamp and its one space: the cases' indent is KTAP's nesting.
		dmesg | sed 's/^\[[^]]*\] //' | awk -v s="$1" '
			$0 ~ "# Subtest: " s "$" { on = 1 }
			on { print }
			on && $0 ~ "^(not )?ok [0-9]+ " s "$" { exit }'
	fi
}

failed=0
for s in $suites; do
	out=$(ktap "$s")
	echo "--- $s"
	echo "$out"
	cases=$(echo "$out" | grep -cE '^\s+ok [0-9]+ ')
	bad=$(echo "$out" | grep -E '^\s*not ok [0-9]+ ')
	if [ -z "$out" ]; then
		echo "FAIL: suite $s did not report (not built in, or KUnit did not run it at load)"
		failed=1
	elif [ -n "$bad" ]; then
		echo "FAIL: suite $s: $bad"
		failed=1
	elif ! echo "$out" | grep -qE "^\s*ok [0-9]+ $s\$"; then
		echo "FAIL: suite $s has no ok line of its own (cut off?)"
		failed=1
	elif ! echo "$out" | grep -qE "# $s: pass:$cases fail:0 skip:0 total:$cases\$" || [ "$cases" = 0 ]; then
		echo "FAIL: suite $s: counts are not pass:$cases fail:0 skip:0 total:$cases"
		failed=1
	else
		echo "ok   suite $s: $cases cases passed"
	fi
done
[ "$failed" = 0 ] || fail "rox.ko's KUnit suites"
echo "PASS: rox.ko's KUnit suites ($suites) all ok"
