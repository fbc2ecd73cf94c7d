#!/bin/bash
# rox.ko's probe against a device whose firmware refuses a bring-up command (guest; needs
# rox-lab's run directory and rox-lab asked for admin fault files, `--admin-faults` or
# ROX_LAB_ADMIN_FAULTS=1 as tests/guest/run sets: rox-lab then gives each rox-nic
# `--admin-fault-file` there, created empty). For each
# command the probe sends once the admin queue is enabled (QUERY_DEVICE, QUERY_PORT, READ_MAC),
# this script has rox-nic 0 refuse it (/run/rox/rox0.admin-fault, read at each admin queue
# enable) with a status whose errno rox.ko documents (admin.rs status_to_result), or answer a
# query short or longer than its buffer (EIO, with rox.ko's line saying so): the probe of
# that function fails (by insmod, then by sysfs bind) with the kernel's "probe with driver rox
# failed with error -ERRNO" and rox.ko's "bring-up failed ... the device is reset"; no ib device
# appears for it; the device is alive and was reset (BAR0 read through sysfs by
# admin_reset_state.py: ready, not fatal, admin queue disabled, no ring address left — without
# rox.ko's reset on that error path the device keeps the freed rings' addresses). With a
# count=1 fault a bind fails once and the next one binds; with the fault gone the function
# binds and ibv_devinfo shows its port ACTIVE. No oops or warning; kmemleak and lockdep on
# debug kernels (lockdep after each refusal: the next one clears dmesg).
set -u
fault=/run/rox/rox0.admin-fault
# Left empty (no fault), as rox-lab made it: a later test's driver loads find no fault.
trap 'rm -f "$fault.tmp"; [ -f "$fault" ] && : >"$fault"; grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -40; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"

[ -f "$LIBROX" ] || skip "librox is not installed in the root (scripts/build-provider.sh installs it)"
command -v python3 >/dev/null || skip "no python3 in the guest"
# rox-nic 0 is the first rox function (rox-lab adds them in order).
pci=$(for d in /sys/bus/pci/devices/*; do grep -qx $ROX_VENDOR "$d/vendor" && basename "$d"; done | sort | head -1)
[ -n "$pci" ] || skip "no rox-nic attached"
# Only rox-lab attaches rox-nics, and it mounts the run directory (qemu/guest-init writes
# /run/rox/booted): a rox-nic without it is a broken harness, not a skip.
[ -e /run/rox/booted ] || fail "a rox-nic is attached but rox-lab's run directory /run/rox is not mounted"
[ -f "$fault" ] || fail "no $fault: rox-lab was not asked for admin fault files (rox-lab --admin-faults or ROX_LAB_ADMIN_FAULTS=1, which tests/guest/run sets), so rox-nic 0 has no --admin-fault-file"
[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
driver=/sys/bus/pci/drivers/rox
grep -q '^rox ' /proc/modules && { rmmod rox || fail "rmmod rox failed"; }
kmemleak_clear

set_fault() {
	printf '%s\n' "$1" >"$fault.tmp" && mv "$fault.tmp" "$fault" || fail "cannot write $fault"
}
ib_of() { ls "/sys/bus/pci/devices/$pci/infiniband" 2>/dev/null; }
dmesg_clean() {
	dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t:|hung task|sleeping function|possible .*deadlock|lock held' &&
		fail "kernel complained ($1)"
	return 0
}

# The probe of $pci fails with errno $2 ($3, its name) under fault $1; $4: how it is asked
# (insmod or bind); $5, if given: a line rox.ko must print about the answer.
expect_refused() {
	local spec=$1 errno=$2 name=$3 how=$4 line=${5:-}
	set_fault "$spec"
	dmesg -C
	if [ "$how" = insmod ]; then
		insmod "$ROX_KO" || fail "insmod failed (a probe's failure must not fail the module's load)"
	else
		echo "$pci" >$driver/bind 2>/dev/null && fail "$spec: bind of $pci succeeded"
	fi
	dmesg | grep -E "rox|$pci" | sed 's/^\[[^]]*\] //'
	[ -e "/sys/bus/pci/devices/$pci/driver" ] && fail "$spec: $pci has a driver after its probe failed"
	[ -z "$(ib_of)" ] || fail "$spec: $pci has ib device $(ib_of) after its probe failed"
	dmesg | grep -qF "$pci: probe with driver rox failed with error -$errno" ||
		fail "$spec: no 'probe with driver rox failed with error -$errno' line for $pci"
	dmesg | grep -qF "$pci: bring-up failed after the admin queue's enable (error -$errno); the device is reset" ||
		fail "$spec: no line of rox.ko saying the bring-up failed with -$errno ($name)"
	[ -z "$line" ] || dmesg | grep -qF "$line" || fail "$spec: no line '$line'"
	python3 "$(dirname "$0")/admin_reset_state.py" "$pci" || fail "$spec: the device is not in its reset state"
	dmesg_clean "$spec"
	lockdep_check # before the next refusal clears dmesg
	echo "$spec: probe of $pci failed with $name (-$errno), device reset"
}

# Bound, with an ib device whose port comes up.
expect_bound() {
	local what=$1 ib
	for _ in $(seq 50); do [ -n "$(ib_of)" ] && break; sleep 0.2; done
	ib=$(ib_of)
	[ -n "$ib" ] || fail "$what: no ib device for $pci"
	for _ in $(seq 50); do ibv_devinfo -d "$ib" | grep -q PORT_ACTIVE && break; sleep 0.2; done
	ibv_devinfo -d "$ib" | grep -E 'hca_id|state' || fail "$what: ibv_devinfo -d $ib failed"
	ibv_devinfo -d "$ib" | grep -q PORT_ACTIVE || fail "$what: $ib's port is not ACTIVE"
	echo "$what: $pci bound as $ib, port ACTIVE"
}

# Statuses and their errnos: uapi/src/admin/mod.rs ADMIN_STATUS_*, drivers/admin.rs
# status_to_result (a status uapi does not define is EIO).
expect_refused QUERY_DEVICE:BAD_PARAM 22 EINVAL insmod
expect_refused QUERY_PORT:NO_RESOURCES 12 ENOMEM bind
expect_refused READ_MAC:200 5 EIO bind
# A query that runs but answers short, or more than the buffer (drivers/query_len.rs).
expect_refused QUERY_PORT:written=8 5 EIO bind "rox: admin query QUERY_PORT answered 8 bytes written, fewer than the"
expect_refused QUERY_DEVICE:written=5000 5 EIO bind "rox: admin query QUERY_DEVICE answered 5000 bytes written into a buffer of"
# A refusal that runs out: the next probe binds.
expect_refused QUERY_PORT:BUSY,count=1 16 EBUSY bind
echo "$pci" >$driver/bind || fail "bind after the count ran out failed"
expect_bound "after QUERY_PORT:BUSY,count=1"
# The fault gone: unbind, bind again.
: >"$fault"
echo "$pci" >$driver/unbind || fail "unbind failed"
echo "$pci" >$driver/bind || fail "bind without a fault failed"
expect_bound "without a fault"
rmmod rox || fail "rmmod rox failed"
dmesg_clean "at the end"
kmemleak_check
lockdep_check
echo "probe refused 6 ways: each failed with its errno and reset the device; then bound and active"
