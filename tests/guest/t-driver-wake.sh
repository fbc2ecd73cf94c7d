#!/bin/bash
# How rox.ko and librox wake an idle rox-nic (guest; docs/driver.md "Waking the device"):
#   - with a posted-wake companion (rox-nic offers CAP_POSTED_WAKE; rox-lab's default: a QEMU
#     ivshmem-doorbell 1af4:1110 beside each NIC), every rox device must say "wake mode:
#     posted" at probe, and every wake must be a posted doorbell (rox-nic's wakes_posted
#     grows, wakes_trapped does not) for librox (wake_after_idle.py rings rox_0's SRQ ROUNDS times
#     while it sleeps; then ibv_rc_pingpong) and for the kernel (rox_kverbs_test.ko, kernel
#     QPs only, between rox_0 and rox_1);
#   - without one (ROX_POSTED_WAKE=off in the lab), every device says "wake mode: trapped
#     (device offers no posted-wake companion)", the same traffic works, and the rings on the
#     sleeping device are trapped wakes (wakes_trapped grows by at least ROUNDS, wakes_posted
#     not at all).
# A device that offers the companion but falls back to trapped wakes fails here, whatever the
# reason rox.ko gives. The counters are rox-nic's, read through `rdma statistic`.
set -u
trap 'grep -q "^rox_kverbs_test " /proc/modules && rmmod rox_kverbs_test; grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | grep -i 'rox' | tail -20; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
DEV=rox_0
ROUNDS=3
PAUSE_S=0.5 # > idle_after (20 ms trapped, 200 us posted; docs/hardware.md)

grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
command -v python3 >/dev/null || fail "no python3 in the root"
# Probe afresh so this test reads what rox.ko said about every device.
grep -q '^rox ' /proc/modules && { rmmod rox || fail "cannot unload the rox.ko already loaded"; }
dmesg -C
need_rox_0

nics=$(grep -lx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor | wc -l)
# The ivshmem-doorbell devices (rox_uapi::wake::IVSHMEM_VENDOR_ID:IVSHMEM_DEVICE_ID).
companion_dirs=()
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/vendor")" = 0x1af4 ] && [ "$(cat "$d/device")" = 0x1110 ] && companion_dirs+=("$d")
done
companions=${#companion_dirs[@]}
# enabled_companions: how many companions have memory decoding enabled by someone (sysfs
# `enable`: the kernel's enable count; nothing but rox.ko enables them).
enabled_companions() {
	local d n=0
	for d in "${companion_dirs[@]}"; do [ "$(cat "$d/enable")" != 0 ] && n=$((n + 1)); done
	echo $n
}
# each_enabled_once: every companion's enable count is exactly 1 (docs/driver.md: rox.ko holds
# one enable on the companion it uses and none on the candidates it released), else fails.
each_enabled_once() {
	local d
	for d in "${companion_dirs[@]}"; do
		[ "$(cat "$d/enable")" = 1 ] || fail "companion ${d##*/} has enable count $(cat "$d/enable") while rox.ko holds it (want 1)"
	done
}
posted=$(dmesg | grep -c 'wake mode: posted')
no_cap=$(dmesg | grep -c 'wake mode: trapped (device offers no posted-wake companion)')
dmesg | grep 'wake mode:' | sed 's/^\[[^]]*\] //'
echo "$nics rox NICs, $companions ivshmem-doorbell devices"
if [ "$posted" = "$nics" ]; then
	mode=posted
	[ "$(enabled_companions)" = "$nics" ] || fail "rox.ko holds $(enabled_companions) companions enabled, not $nics"
	each_enabled_once
elif [ "$no_cap" = "$nics" ]; then
	mode=trapped
	[ "$companions" = 0 ] || fail "no device offers a companion, yet $companions ivshmem-doorbell devices exist"
else
	fail "of $nics rox NICs $posted wake posted and $no_cap have no companion: the others fell back to trapped wakes"
fi

# librox, deterministically: each ring finds the device asleep.
read_wakes
python3 "$(dirname "$0")/wake_after_idle.py" $ROUNDS $PAUSE_S || fail "wake_after_idle.py failed"
expect_wakes $mode "librox, $ROUNDS SRQ rings of a sleeping $DEV" $ROUNDS
# An RQ doorbell needs no wake while no QP of its page is in the error state (the device
# reads the RQ when a message needs a receive WQE; DbPage::rq_no_wake): none at all.
read_wakes
python3 "$(dirname "$0")/wake_after_idle.py" $ROUNDS $PAUSE_S rq || fail "wake_after_idle.py rq failed"
before_posted=${wakes[posted]} before_trapped=${wakes[trapped]}
read_wakes
rq_wakes=$((${wakes[posted]} - before_posted + ${wakes[trapped]} - before_trapped))
echo "librox, $ROUNDS RQ rings of a sleeping $DEV: $rq_wakes wakes"
[ "$rq_wakes" = 0 ] || fail "librox woke $DEV $rq_wakes times for RQ doorbells of QPs not in the error state"

# librox under traffic: RC pingpong on rox_0 (QP-to-QP loopback), started on an idle device.
read_wakes
timeout 120 ibv_rc_pingpong -d $DEV -g 0 -n 20 >/tmp/wake-server.out 2>&1 &
server=$!
wait_for_server $server 18515 || fail "pingpong server: $(cat /tmp/wake-server.out)"
sleep $PAUSE_S
timeout 120 ibv_rc_pingpong -d $DEV -g 0 -n 20 127.0.0.1 >/tmp/wake-client.out 2>&1 ||
	fail "pingpong client: $(cat /tmp/wake-client.out)"
wait $server || fail "pingpong server: $(cat /tmp/wake-server.out)"
grep -q '^20 iters in' /tmp/wake-client.out || fail "pingpong client printed no result"
expect_wakes $mode "ibv_rc_pingpong on $DEV" 0

# The kernel: kernel QPs only (rox_kverbs_test.ko, side B on rox_1). Posted mode idles after
# 200 us, so its 76 checks' doorbells find the device asleep many times.
kverbs_setup fail
read_wakes
kverbs_run rox_1
if [ $mode = posted ]; then
	expect_wakes $mode "kernel verbs rox_0 <-> rox_1" 1
else
	expect_wakes $mode "kernel verbs rox_0 <-> rox_1" 0
fi

dmesg | grep -E 'BUG:|Oops|WARNING:|general protection' && fail "kernel complained"
[ $mode = posted ] && each_enabled_once # still exactly one enable each after the traffic
# rmmod releases the companions: none stays enabled.
rmmod rox || fail "rmmod rox failed"
[ "$(enabled_companions)" = 0 ] || fail "$(enabled_companions) companions still enabled after rmmod rox"
echo "ok   t-driver-wake: mode $mode on all $nics rox NICs; $DEV woken only by $mode wakes"
