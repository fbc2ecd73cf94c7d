#!/bin/bash
# The posted-wake companion removed under a loaded rox.ko (guest; docs/driver.md "Companion
# removed while held"): rox_0's companion is removed through sysfs while a process holds a
# context of rox_0 with its pages mapped and a receive posted. rox.ko must say so in dmesg (one
# line naming the companion), move the holder's QP to error (IBV_EVENT_QP_FATAL, its receive
# flushed; a new CQ or QP of that context refused with EIO: hold_context.py checks all three),
# put rox_0 back to trapped wakes — a new process's rings of the sleeping device
# and the kernel's own wakes count as wakes_trapped, none as wakes_posted —, keep it working (a
# new ibv_rc_pingpong on rox_0), let the holder post again and exit, and unload cleanly, with
# no kernel complaint (nor, on the debug kernel, a leak or a lockdep report). Then the bus is rescanned: the companion comes back and a fresh load of
# rox.ko uses it again (so the tests after this one find the lab as it was).
# Passes at once when rox_0 is offered no companion (rox-lab ROX_POSTED_WAKE=off).
set -u
companion_dir=
trap 'rm -f /tmp/hold-ready /tmp/hold-go; [ -n "${holder:-}" ] && kill "$holder" 2>/dev/null
grep -q "^rox_kverbs_test " /proc/modules && rmmod rox_kverbs_test
grep -q "^rox " /proc/modules && rmmod rox
[ -n "$companion_dir" ] && [ ! -e "$companion_dir" ] && echo 1 >/sys/bus/pci/rescan' EXIT
fail() { echo "FAIL: $*"; dmesg | grep -i 'rox\|BUG\|WARN' | tail -20; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
DEV=rox_0
PAUSE_S=0.5 # > idle_after (20 ms trapped; docs/hardware.md)

grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
command -v python3 >/dev/null || fail "no python3 in the root"
grep -q '^rox ' /proc/modules && { rmmod rox || fail "cannot unload the rox.ko already loaded"; }
dmesg -C
need_rox_0
pci=$(basename "$(readlink -f /sys/class/infiniband/$DEV/device)")
# "rox <pci>: wake mode: posted (companion <address>, doorbell <word>)"
companion=$(dmesg | sed -n "s/.* $pci: wake mode: posted (companion \([^,]*\),.*/\1/p" | tail -1)
if [ -z "$companion" ]; then
	# Without companions (guest-debug) there is nothing to remove; a device that offers one and
	# did not take it is t-driver-wake's failure. (A SKIP would fail a strict run.)
	dmesg | grep -q "$pci: wake mode: trapped (device offers no posted-wake companion)" ||
		fail "$DEV ($pci) has no companion: $(dmesg | grep "$pci: wake mode" | tail -1)"
	rmmod rox || fail "rmmod rox failed"
	echo "ok   t-driver-companion-removal: $DEV has no companion in this lab, nothing to remove"
	exit 0
fi
companion_dir=/sys/bus/pci/devices/$companion
[ -e "$companion_dir" ] || fail "$DEV's companion $companion is not in sysfs"
echo "$DEV ($pci), companion $companion"

# A process holding a context (doorbell and wake pages mapped) across the removal.
rm -f /tmp/hold-ready /tmp/hold-go
timeout 120 python3 "$(dirname "$0")/hold_context.py" $DEV /tmp/hold-ready /tmp/hold-go >/tmp/hold.out 2>&1 &
holder=$!
for _ in $(seq 100); do [ -e /tmp/hold-ready ] && break; sleep 0.1; done
[ -e /tmp/hold-ready ] || fail "the holder made no context: $(cat /tmp/hold.out)"

echo 1 >"$companion_dir/remove" || fail "cannot remove $companion"
[ -e "$companion_dir" ] && fail "$companion is still in sysfs after its removal"
line=$(dmesg | grep "$pci: wake mode: trapped (companion $companion removed")
[ -n "$line" ] || fail "rox.ko said nothing of its companion's removal"
echo "dmesg: ${line#*] }"
# The holder's one QP is the only user QP of $DEV.
[[ $line == *"user QPs moved to error (1)"* ]] || fail "rox.ko failed not exactly the holder's QP"

# The holder posts again (its mappings were revoked: its stores must hurt nobody), gets its
# QP's fatal event and its first receive flushed, and exits.
touch /tmp/hold-go
wait $holder || fail "the holder failed: $(cat /tmp/hold.out)"
holder=
grep -q "^held $DEV across the removal" /tmp/hold.out || fail "holder: $(cat /tmp/hold.out)"
echo "holder: $(grep QP_FATAL /tmp/hold.out)"
echo "holder: $(grep 'refused with EIO' /tmp/hold.out)"

# A new process's context: trapped wakes (BAR0's wake page), each ring finds the device asleep.
read_wakes
python3 "$(dirname "$0")/wake_after_idle.py" 3 $PAUSE_S || fail "wake_after_idle.py failed"
expect_wakes trapped "librox, 3 SRQ rings of a sleeping $DEV" 3

# The device is not stalled: RC pingpong on rox_0 (QP-to-QP loopback).
timeout 120 ibv_rc_pingpong -d $DEV -g 0 -n 20 >/tmp/comp-server.out 2>&1 &
server=$!
wait_for_server $server 18515 || fail "pingpong server: $(cat /tmp/comp-server.out)"
timeout 120 ibv_rc_pingpong -d $DEV -g 0 -n 20 127.0.0.1 >/tmp/comp-client.out 2>&1 ||
	fail "pingpong client: $(cat /tmp/comp-client.out)"
wait $server || fail "pingpong server: $(cat /tmp/comp-server.out)"
grep -q '^20 iters in' /tmp/comp-client.out || fail "pingpong client printed no result"
echo "ibv_rc_pingpong on $DEV: $(grep 'iters in' /tmp/comp-client.out)"

dmesg | grep -E 'BUG:|Oops|WARNING:|general protection' && fail "kernel complained"
lockdep_check # before kverbs_setup clears dmesg: the removal's locking, on the debug kernel
# The kernel's own wakes (kernel QPs, rox_kverbs_test.ko, side B on rox_1): trapped on rox_0.
kverbs_setup fail
read_wakes
kverbs_run rox_1
expect_wakes trapped "kernel verbs rox_0 <-> rox_1" 0

dmesg | grep -E 'BUG:|Oops|WARNING:|general protection' && fail "kernel complained"
rmmod rox || fail "rmmod rox failed after the removal"
kmemleak_check
lockdep_check

# Put the lab back: the companion returns with a rescan, and a new probe uses it.
echo 1 >/sys/bus/pci/rescan
[ -e "$companion_dir" ] || fail "$companion did not come back with a rescan"
dmesg -C
need_rox_0
dmesg | grep -q "$pci: wake mode: posted" || fail "after the rescan: $(dmesg | grep "$pci: wake mode")"
rmmod rox || fail "rmmod rox failed"
echo "ok   t-driver-companion-removal: $DEV back to trapped wakes when $companion left; lab restored"
