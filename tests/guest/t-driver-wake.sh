#!/bin/bash
# How rox.ko and librox wake an idle rox-nic (guest; docs/driver.md "Waking the device"):
#   - with a posted-wake companion (rox-nic offers CAP_POSTED_WAKE; rox-lab's default: a QEMU
#     ivshmem-doorbell 1af4:1110 beside each NIC), every rox device must say "wake mode:
#     posted" at probe, and traffic after a pause long enough for the device to go idle — a
#     user RC pingpong (librox's wakes) and rdma_cm's handshake (the kernel's GSI QP1 wakes)
#     — must wake it only by posted doorbells: wakes_posted grows, wakes_trapped does not;
#   - without one (ROX_POSTED_WAKE=off in the lab), every device says "wake mode: trapped
#     (device offers no posted-wake companion)", the same traffic works, and wakes_trapped grows.
# A device that offers the companion but falls back to trapped wakes fails here, whatever the
# reason rox.ko gives. The counters are rox-nic's, read through `rdma statistic`.
set -u
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | grep -i 'rox' | tail -20; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
DEV=rox_0
PAUSE_S=1 # idle after 20 ms trapped, sooner posted (docs/hardware.md)
RPING_PORT=7174

grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
command -v rping >/dev/null || fail "no rping (rdmacm-utils) in the root"
# Probe afresh so this test reads what rox.ko said about every device.
grep -q '^rox ' /proc/modules && { rmmod rox || fail "cannot unload the rox.ko already loaded"; }
dmesg -C
need_rox_0

nics=$(grep -lx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor | wc -l)
companions=0 # ivshmem-doorbell devices (rox_uapi::wake::IVSHMEM_VENDOR_ID:IVSHMEM_DEVICE_ID)
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/vendor")" = 0x1af4 ] && [ "$(cat "$d/device")" = 0x1110 ] && companions=$((companions + 1))
done
posted=$(dmesg | grep -c 'wake mode: posted')
no_cap=$(dmesg | grep -c 'wake mode: trapped (device offers no posted-wake companion)')
dmesg | grep 'wake mode:' | sed 's/^\[[^]]*\] //'
echo "$nics rox NICs, $companions ivshmem-doorbell devices"
if [ "$posted" = "$nics" ]; then
	mode=posted
elif [ "$no_cap" = "$nics" ]; then
	mode=trapped
	[ "$companions" = 0 ] || fail "no device offers a companion, yet $companions ivshmem-doorbell devices exist"
else
	fail "of $nics rox NICs $posted wake posted and $no_cap have no companion: the others fell back to trapped wakes"
fi

# Sets trapped_now and posted_now: rox_0's wake counters from `rdma statistic` (lab.sh).
read_wakes() {
	trapped_now=$(rdma_counter $DEV wakes_trapped)
	posted_now=$(rdma_counter $DEV wakes_posted)
	[[ $trapped_now =~ ^[0-9]+$ && $posted_now =~ ^[0-9]+$ ]] ||
		fail "no wakes_trapped/wakes_posted in 'rdma statistic show link $DEV/1'"
}

ipv4=$(ip -4 -o addr show dev "$(cat /sys/class/infiniband/$DEV/ports/1/gid_attrs/ndevs/0)" |
	awk '{ print $4 }' | cut -d/ -f1 | head -1)
[ -n "$ipv4" ] || fail "$DEV's netdev has no IPv4 address"

read_wakes
trapped0=$trapped_now posted0=$posted_now

# librox's wakes: RC pingpong on rox_0 (QP-to-QP loopback), started on an idle device.
sleep $PAUSE_S
timeout 120 ibv_rc_pingpong -d $DEV -g 0 -n 20 >/tmp/wake-server.out 2>&1 &
server=$!
wait_for_server $server 18515 || fail "pingpong server: $(cat /tmp/wake-server.out)"
sleep $PAUSE_S
timeout 120 ibv_rc_pingpong -d $DEV -g 0 -n 20 127.0.0.1 >/tmp/wake-client.out 2>&1 ||
	fail "pingpong client: $(cat /tmp/wake-client.out)"
wait $server || fail "pingpong server: $(cat /tmp/wake-server.out)"
grep -q 'iters in' /tmp/wake-client.out || fail "pingpong client printed no result"
echo "ok   ibv_rc_pingpong after ${PAUSE_S} s idle"

# The kernel's wakes: rdma_cm's handshake is MADs on rox.ko's GSI QP1.
sleep $PAUSE_S
timeout 120 rping -s -a "$ipv4" -p $RPING_PORT -C 3 >/tmp/wake-rping.server 2>&1 &
server=$!
wait_for_cm_listener $server $RPING_PORT || fail "rping server did not listen: $(cat /tmp/wake-rping.server)"
sleep $PAUSE_S
timeout 60 rping -c -a "$ipv4" -p $RPING_PORT -C 3 >/tmp/wake-rping.client 2>&1 ||
	fail "rping client: $(cat /tmp/wake-rping.client)"
wait $server || fail "rping server: $(cat /tmp/wake-rping.server)"
echo "ok   rping after ${PAUSE_S} s idle"

read_wakes
trapped=$((trapped_now - trapped0))
posted_n=$((posted_now - posted0))
echo "$DEV during the traffic: wakes_posted +$posted_n, wakes_trapped +$trapped"
dmesg | grep -E 'BUG:|Oops|WARNING:|general protection' && fail "kernel complained"
if [ $mode = posted ]; then
	[ "$posted_n" -gt 0 ] || fail "wake mode posted, but no posted wake reached the device"
	[ "$trapped" = 0 ] || fail "wake mode posted, but $trapped wakes were trapped writes"
else
	[ "$trapped" -gt 0 ] || fail "wake mode trapped, but no trapped wake reached the device"
	[ "$posted_n" = 0 ] || fail "wake mode trapped, but $posted_n wakes were posted"
fi
echo "ok   t-driver-wake: mode $mode on all $nics rox NICs; $DEV woken only by $mode wakes"
