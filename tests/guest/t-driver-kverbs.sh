#!/bin/bash
# Kernel verbs through rox.ko (guest; skips without a rox-nic): loads the test module
# tests/kernel/rox_kverbs_test.ko (built next to rox.ko by scripts/build-module.sh), which
# drives kernel QPs between rox_0 and rox_1 (two rox NICs on one bridge): inline SEND and
# SEND_WITH_IMM, more RC SENDs than the port's flight in several doorbells (the later ones,
# rung while the idle device says its flight is full, must not wake it: its wake counters stay
# put; then every completion and byte), fast registration (alloc_mr / ib_map_mr_sg / IB_WR_REG_MR) with the peer's
# RDMA WRITE (also inline and WITH_IMM)/READ and atomics through the new rkey, SEND_WITH_INV and LOCAL_INV (the old rkey
# then fails), ib_inc_rkey re-registration, a kernel SRQ with its limit event, zero-depth
# RC/UC/UD QPs on both devices, a CQ per ib_cq poll context with ib_drain_qp, and issue 11's
# bad input (error completions, guard pages intact). Run twice: side B on rox_1, then on rox_0
# (loopback on one device, as rdma_cm-based ULPs in one guest use it). It prints one ok/FAIL line per check and
# "result: N passed, M failed"; this script asserts M = 0 and N = KVERBS_CHECKS (a check cut
# short by a failed setup step is missing from N), then a clean unload and dmesg (and no
# kmemleak report on debug kernels, whose DEBUG_ATOMIC_SLEEP also catches sleeping in the
# softirq/interrupt paths).
set -u
trap 'grep -q "^rox_kverbs_test " /proc/modules && rmmod rox_kverbs_test; grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -40; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f   # uapi/src/regs.rs PCI_VENDOR_ID
# The checks tests/kernel/kverbs_*.c make in a full run (their CHECK lines, loops counted): change it
# with the module. docs/driver.md gives the same number.
KVERBS_CHECKS=76
. "$(dirname "$0")/lib.sh"

grep -qx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
kverbs_setup skip
# Side B on rox_1 (traffic over the lab bridge), then on rox_0 itself (QP-to-QP loopback).
results=()
for peer in rox_1 rox_0; do
	dmesg -C
	start=$(date +%s)
	timeout 300 insmod "$test_ko" peer=$peer || fail "insmod rox_kverbs_test.ko peer=$peer failed"
	dmesg | grep 'rox_kverbs: ' | sed 's/^\[[^]]*\] //'
	result=$(dmesg | grep -o 'rox_kverbs: result: .*' | tail -1)
	[ -n "$result" ] || fail "the test module printed no result (peer $peer)"
	echo "kernel verbs checks rox_0 <-> $peer took $(( $(date +%s) - start )) s: ${result#rox_kverbs: result: }"
	rmmod rox_kverbs_test || fail "rmmod rox_kverbs_test failed"
	dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t:|hung task|sleeping function' && fail "kernel complained"
	[[ $result =~ result:\ ([0-9]+)\ passed,\ 0\ failed ]] && [ "${BASH_REMATCH[1]}" = $KVERBS_CHECKS ] ||
		fail "kernel verbs checks rox_0 <-> $peer: ${result#rox_kverbs: result: } (want $KVERBS_CHECKS passed, 0 failed)"
	results+=("rox_0<->$peer ${result#rox_kverbs: result: }")
done
rmmod rox || fail "rmmod rox failed"
kmemleak_check
lockdep_check
dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t:|hung task|sleeping function' && fail "kernel complained"
echo "ok   t-driver-kverbs: ${results[*]}"
