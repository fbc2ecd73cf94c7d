# Shared by the guest tests that need rox_0 (sourced). Each test defines fail() and skip().

ROX_VENDOR=0x524f # rox_uapi::regs::PCI_VENDOR_ID
LIBROX=/usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so

# Make sure librox is installed, rox.ko is loaded ($ROX_KO) and rox_0's port is active; skip
# when the guest has no rox device (tests/guest/all.sh turns that skip into a failure in
# strict runs, where devices are attached).
need_rox_0() {
	[ -f "$LIBROX" ] || skip "librox is not installed in the root (scripts/build-provider.sh installs it)"
	if ! ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1; then
		grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null ||
			skip "no rox device in this guest (no PCI function with vendor $ROX_VENDOR)"
		if ! grep -q '^rox ' /proc/modules; then
			[ -f "${ROX_KO:-}" ] || fail "a rox PCI device exists but no rox.ko to load (ROX_KO=${ROX_KO:-})"
			insmod "$ROX_KO" || fail "insmod $ROX_KO failed"
		fi
		for _ in $(seq 50); do ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1 && break; sleep 0.2; done
		ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1 || fail "no rox_* ib device appeared"
	fi
	for _ in $(seq 50); do ibv_devinfo -d rox_0 | grep -q PORT_ACTIVE && break; sleep 0.2; done
	ibv_devinfo -d rox_0 | grep -q PORT_ACTIVE || fail "rox_0 port 1 is not active"
}

# What the kernel-verbs test module needs: sets test_ko, clears dmesg and kmemleak, loads
# rox.ko ($ROX_KO) unless it is loaded and waits (10 s each) for rox_0 and rox_1 and their IPv4
# RoCEv2 GIDs. A missing device goes to $1 (skip or fail) with why; a device without its GID fails.
kverbs_setup() {
	local on_missing=$1 dev
	test_ko=$(dirname "${ROX_KO:-/nonexistent}")/kverbs/rox_kverbs_test.ko
	[ -f "$test_ko" ] || fail "no test module at $test_ko (scripts/build-module.sh builds it)"
	dmesg -C
	kmemleak_clear
	if ! grep -q '^rox ' /proc/modules; then
		[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
		insmod "$ROX_KO" || fail "insmod rox.ko failed"
	fi
	for dev in rox_0 rox_1; do
		for _ in $(seq 50); do [ -e /sys/class/infiniband/$dev ] && break; sleep 0.2; done
		[ -e /sys/class/infiniband/$dev ] || "$on_missing" "no $dev (the test needs two rox NICs)"
		for _ in $(seq 50); do
			grep -q '0000:0000:0000:0000:0000:ffff' /sys/class/infiniband/$dev/ports/1/gids/* 2>/dev/null && break
			sleep 0.2
		done
		grep -q '0000:0000:0000:0000:0000:ffff' /sys/class/infiniband/$dev/ports/1/gids/* 2>/dev/null ||
			fail "$dev has no IPv4 RoCEv2 GID after 10 s"
	done
}

# One run of the kernel-verbs test module (after kverbs_setup) with side B on $1: fails unless
# it reports every check passed.
kverbs_run() {
	local peer=$1 result
	timeout 300 insmod "$test_ko" peer="$peer" || fail "insmod rox_kverbs_test.ko failed"
	rmmod rox_kverbs_test || fail "rmmod rox_kverbs_test failed"
	result=$(dmesg | grep -o 'rox_kverbs: result: .*' | tail -1)
	[[ $result =~ result:\ [0-9]+\ passed,\ 0\ failed ]] || fail "kernel verbs: ${result:-no result}"
}

# The wake counters of $DEV (rox-nic's, `rdma statistic`; lab.sh). read_wakes sets
# wakes[trapped] and wakes[posted]; expect_wakes MODE WHAT LEAST (MODE: posted or trapped):
# since the last read_wakes, $DEV took at least LEAST wakes of MODE and none of the other.
declare -A wakes
read_wakes() {
	local kind
	for kind in trapped posted; do
		wakes[$kind]=$(rdma_counter "$DEV" wakes_$kind)
		[[ ${wakes[$kind]} =~ ^[0-9]+$ ]] || fail "no wakes_$kind in 'rdma statistic show link $DEV/1'"
	done
}
expect_wakes() {
	local mode=$1 what=$2 least=$3 other=posted mine others
	case $mode in posted | trapped) ;; *) fail "expect_wakes: mode '$mode' (posted or trapped)" ;; esac
	[ "$mode" = posted ] && other=trapped
	mine=${wakes[$mode]} others=${wakes[$other]}
	read_wakes
	mine=$((${wakes[$mode]} - mine)) others=$((${wakes[$other]} - others))
	echo "$what: wakes_$mode +$mine, wakes_$other +$others"
	[ "$mine" -ge "$least" ] || fail "$what: $mine $mode wakes (want at least $least)"
	[ "$others" = 0 ] || fail "$what: $others $other wakes in $mode mode"
}

# How long a server program may take to start listening: a program that loads libibverbs and
# its providers and opens a device takes seconds in a TCG guest on a loaded host.
SERVER_START_S=120

# Wait until the server (pid $1) listens on TCP port $2, so the client does not race it.
# Status 1 with the reason on stderr when the server died first or did not listen within
# SERVER_START_S.
wait_for_server() {
	local end=$((SECONDS + SERVER_START_S))
	while [ $SECONDS -lt $end ]; do
		ss -Hltn "sport = :$2" | grep -q . && return 0
		kill -0 "$1" 2>/dev/null || { echo "the server (pid $1) exited before listening on TCP port $2" >&2; return 1; }
		sleep 0.1
	done
	echo "nothing listened on TCP port $2 within $SERVER_START_S s" >&2
	return 1
}

# Wait until the server (pid $1) has an rdma_cm listener on port $2 (`rdma resource show
# cm_id`: a cm_id in state LISTEN with that source port), so that its client's connect request
# does not arrive before it (rdma_cm rejects that: REJECTED, reason 8). Status 1 with the
# reason on stderr when the server died first or did not listen within SERVER_START_S.
wait_for_cm_listener() {
	local end=$((SECONDS + SERVER_START_S))
	while [ $SECONDS -lt $end ]; do
		rdma resource show cm_id 2>/dev/null | grep -qE "state LISTEN .*src-addr [^ ]*:$2( |\$)" && return 0
		kill -0 "$1" 2>/dev/null || { echo "the server (pid $1) exited before listening on rdma_cm port $2" >&2; return 1; }
		sleep 0.1
	done
	echo "no rdma_cm listener on port $2 within $SERVER_START_S s: $(rdma resource show cm_id 2>&1 | tr '\n' ' ')" >&2
	return 1
}

# kmemleak on debug kernels (CONFIG_DEBUG_KMEMLEAK). kmemleak_clear at the start of a test
# forgets what earlier tests left; kmemleak_check at its end reports what leaked since, and
# fails (through the test's fail()) when the check could not be made: a debug kernel without
# kmemleak, a scan kmemleak refuses (it disables itself, e.g. when its object pool runs out,
# and then an empty report means nothing), or a "kmemleak: ... disabled" line in dmesg.
# On a release kernel (no kmemleak) it prints a note and returns.
KMEMLEAK=/sys/kernel/debug/kmemleak
# kmemleak reports only objects older than this (its minimum object age, 5 s) at a scan.
KMEMLEAK_MIN_AGE_S=5
kmemleak_clear() {
	[ -w $KMEMLEAK ] || return 0
	echo clear >$KMEMLEAK || fail "echo clear >$KMEMLEAK failed: kmemleak is off"
}
kmemleak_check() {
	local leaks
	if [ ! -w $KMEMLEAK ]; then
		[ "${ROX_KERNEL_FLAVOUR:-release}" != debug ] || fail "debug kernel without a writable $KMEMLEAK"
		echo "note: no kmemleak in this kernel (release flavour); leak check not made"
		return 0
	fi
	# Past the minimum age of the last objects freed (or leaked) just before, then two scans:
	# the second sees what the first still took for referenced from a stale stack or register.
	sleep $((KMEMLEAK_MIN_AGE_S + 1))
	echo scan >$KMEMLEAK || fail "echo scan >$KMEMLEAK failed: kmemleak is off, no leak check possible"
	sleep 1
	echo scan >$KMEMLEAK || fail "the second kmemleak scan failed: kmemleak is off"
	if dmesg | grep -E 'kmemleak: .*disabled'; then
		fail "kmemleak disabled itself: no leak check possible"
	fi
	leaks=$(grep -c '^unreferenced object' $KMEMLEAK)
	[ "$leaks" = 0 ] || { head -60 $KMEMLEAK; fail "kmemleak reports $leaks leaks"; }
	echo "kmemleak: no leaks (scanned after ${KMEMLEAK_MIN_AGE_S} s, twice)"
}

# lockdep on debug kernels (CONFIG_PROVE_LOCKING, CONFIG_PROVE_RCU, CONFIG_DEBUG_ATOMIC_SLEEP),
# judged by tests/lib/lockdep.py (shared with tests/ulp/guest.py): fails (through the test's
# fail()) on a lockdep, RCU or atomic-sleep report in dmesg, and when lockdep has turned itself
# off (debug_locks 0: it reports only its first finding, then stops proving) with no known
# upstream report seen in this boot. A known upstream report passes with a note saying where
# lockdep's coverage ended. A debug kernel without lockdep fails; on a release kernel it prints
# a note and returns.
LOCKDEP_STATS=/proc/lockdep_stats
ROX_LOCKDEP_TOOL=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/lockdep.py
lockdep_check() {
	if [ ! -r $LOCKDEP_STATS ]; then
		[ "${ROX_KERNEL_FLAVOUR:-release}" != debug ] || fail "debug kernel without lockdep (no $LOCKDEP_STATS)"
		echo "note: no lockdep in this kernel (release flavour); lock check not made"
		return 0
	fi
	dmesg | python3 "$ROX_LOCKDEP_TOOL" --where "$(basename "$0")" --stats $LOCKDEP_STATS ||
		fail "lockdep (or the RCU / atomic-sleep checks) reported a locking problem (above)"
	grep -Eq '^ *debug_locks: *1$' $LOCKDEP_STATS &&
		echo "lockdep: nothing reported, still proving ($(grep -E 'dependency chains:' $LOCKDEP_STATS | tr -s ' '))"
	return 0
}

# rdma_counter, rdma_counters, rdma_link_dev (iproute2's JSON, tests/lib/rdma_tool.py).
. "$(dirname "${BASH_SOURCE[0]}")/lab.sh"

# Run "$@ <device> 0" (a check program: device, GID index) on rox_0, its exit status in
# $rox_rc, and then, for comparison (printed, not asserted), on an rdma_rxe device on rox_0's
# netdev: the one there already, else one made here and deleted again (a netdev takes one rxe
# device; later tests make their own).
run_on_rox_0_and_rxe() {
	local netdev rxe made_rxe=
	echo "--- rox_0"
	timeout 120 "$@" rox_0 0
	rox_rc=$?
	netdev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0)
	rxe=$(rdma_link_dev "$netdev" --not-prefix rox_)
	if [ -z "$rxe" ] && modprobe rdma_rxe 2>/dev/null && rdma link add rxe_cmp type rxe netdev "$netdev"; then
		rxe=rxe_cmp made_rxe=rxe_cmp
	fi
	if [ -n "$rxe" ]; then
		echo "--- $rxe (for comparison, not asserted)"
		timeout 120 "$@" "$rxe" 0
		echo "$rxe: exit $?"
		[ -z "$made_rxe" ] || rdma link delete "$made_rxe"
	else
		echo "note: no rxe device for comparison"
	fi
}
