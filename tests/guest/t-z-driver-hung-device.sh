#!/bin/bash
# A device that hangs under busy kernel QPs (guest; named t-z- so that it runs last: it kills
# rox_0's device for good, and the guest's other tests need it). rox_kverbs_test.ko hang=1
# keeps 12 kernel work requests in flight on rox_0 (8 receives, 4 SENDs meeting RNR NAKs);
# then this script asks rox-lab (through the guest's run directory, /run/rox/rox0.die) to make
# rox-nic 0's device hang: it reports a fatal error, keeps answering its registers and never
# completes the reset rox.ko asks for (rox-nic --die-on ...,fatal=hang). Checks: rox.ko gives
# up waiting for the reset after its 2 s deadline (QUIESCE_DEADLINE, drivers/dead.rs) with its
# dmesg line, which says how long after the death it gave up by the deadline's own clock:
# GIVE_UP_MIN_MS-GIVE_UP_LIMIT_MS; all 12 work
# requests complete with IB_WC_WR_FLUSH_ERR; both modules unload; no oops, lockdep report or
# hung task (and no kmemleak report on debug kernels).
set -u
trap 'grep -q "^rox_kverbs_test " /proc/modules && rmmod rox_kverbs_test; grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -60; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f   # uapi/src/regs.rs PCI_VENDOR_ID
# The checks tests/kernel/kverbs_hang.c's check_hung_device makes (its CHECK lines).
HANG_CHECKS=3
# rox.ko gives up at the first CQ poll after its 2 s deadline, and says when, in ms since the
# death by the clock the deadline runs on: not before 2000. Each poll reads a register of the
# device (a vfio-user round trip to a rox-nic process that a loaded host may not run for a
# while), so the upper bound leaves room for that and still tells the deadline from none.
GIVE_UP_MIN_MS=2000
GIVE_UP_LIMIT_MS=20000
. "$(dirname "$0")/lib.sh"

rox_functions=$(grep -lx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null | wc -l)
# A guest of ROX_GUEST_NICS=0 or 1 cannot run it (all.sh's strict runs count the skip as failure).
[ "$rox_functions" -ge 2 ] || skip "$rox_functions rox-nic(s) attached: the test needs two"
# Only rox-lab attaches rox-nics, and its guests mount their run directory at boot
# (qemu/guest-init writes /run/rox/booted): with a rox-nic and no run directory, the harness
# is broken, which must not pass as a skip.
[ -e /run/rox/booted ] || fail "a rox-nic is attached but rox-lab's run directory /run/rox is not mounted"
kverbs_setup fail
# rox-nic 0 is the first rox function (rox-lab adds them in order): rox_0.
pci=$(basename "$(readlink -f /sys/class/infiniband/rox_0/device)")
first=$(for d in /sys/bus/pci/devices/*; do grep -qx $rox_vendor "$d/vendor" && basename "$d"; done | sort | head -1)
[ "$pci" = "$first" ] || fail "rox_0 is $pci, not the first rox function $first (rox-nic 0)"
dmesg -C
timeout 120 insmod "$test_ko" peer=rox_1 hang=1 &
insmod_pid=$!
# Until the module says its work requests are in flight, for as long as its insmod runs.
until dmesg | grep -q 'rox_kverbs: hang: ready'; do
	kill -0 $insmod_pid 2>/dev/null || break
	sleep 0.2
done
dmesg | grep -q 'rox_kverbs: hang: ready' || fail "the test module never had its work requests in flight"
printf hang >/run/rox/rox0.die.tmp && mv /run/rox/rox0.die.tmp /run/rox/rox0.die
wait $insmod_pid || fail "insmod rox_kverbs_test.ko hang=1 failed"
dmesg | grep 'rox_kverbs: \|rox ' | sed 's/^\[[^]]*\] //'
[ -e /run/rox/rox0.die.done ] || fail "rox-lab did not take the death request"
result=$(dmesg | grep -o 'rox_kverbs: result: .*' | tail -1)
[[ $result =~ result:\ ([0-9]+)\ passed,\ 0\ failed ]] && [ "${BASH_REMATCH[1]}" = $HANG_CHECKS ] ||
	fail "hung-device checks: ${result#rox_kverbs: result: } (want $HANG_CHECKS passed, 0 failed)"
# The death (the device's fatal event), and the deadline by rox.ko's own clock.
dmesg | grep -q "rox $pci: device fatal error" || fail "no 'device fatal error' line of rox_0 ($pci)"
gave_up=$(dmesg | grep -m1 "rox $pci: the dead device's reset did not complete in 2 s")
[ "$(dmesg | grep -c "rox $pci: the dead device.s reset did not complete")" -le 1 ] || fail "rox.ko said more than once that it gave up on the reset"
[ -n "$gave_up" ] || fail "no line of rox.ko giving up on the hung device's reset"
[[ $gave_up =~ gave\ up\ ([0-9]+)\ ms\ after\ its\ death ]] ||
	fail "rox.ko's give-up line does not say when: $gave_up"
after_ms=${BASH_REMATCH[1]}
echo "rox.ko gave up on the reset $after_ms ms after the device's death"
[ "$after_ms" -ge $GIVE_UP_MIN_MS ] && [ "$after_ms" -le $GIVE_UP_LIMIT_MS ] ||
	fail "gave up after $after_ms ms, not $GIVE_UP_MIN_MS-$GIVE_UP_LIMIT_MS ms"
rmmod rox_kverbs_test || fail "rmmod rox_kverbs_test failed"
timeout 60 rmmod rox || fail "rmmod rox failed (or hung)"
dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t:|hung task|sleeping function|possible .*deadlock|lock held' &&
	fail "kernel complained"
kmemleak_check
echo "hung device: work requests flushed, rox.ko unloaded, dmesg clean"
