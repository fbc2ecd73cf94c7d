#!/bin/bash
# rdma_cm over rox (guest; skips without a rox-nic and librox): rox.ko's GSI QP1 (ib_mad's
# kernel QP and CQ, driven by the driver's kernel data path) carries the CM handshake, so
# `rping` connects and exchanges RDMA READ/WRITE pings, and `ucmatose` connects several QPs and
# exchanges SENDs, on rox_0 (QP-to-QP on one device). Between guests: tests/guest/pair-pingpong.
set -u
# Leave no rox.ko behind for the next test, whatever happens here.
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -20; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f   # uapi/src/regs.rs PCI_VENDOR_ID
pings=10
# The rdma_cm ports of the servers (rping's and ucmatose's defaults, given explicitly: the
# client starts once a listener on that port shows in `rdma resource show cm_id`).
RPING_PORT=7174
UCMATOSE_PORT=7471
. "$(dirname "$0")/lib.sh"

grep -qx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null || skip "no rox-nic attached"
[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] || skip "librox is not installed"
command -v rping >/dev/null && command -v ucmatose >/dev/null || skip "no rping/ucmatose (rdmacm-utils)"
if ! grep -q '^rox ' /proc/modules; then
	[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
	insmod "$ROX_KO" || fail "insmod failed"
fi
for _ in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
[ -e /sys/class/infiniband/rox_0 ] || fail "no rox_0 after 10 s"
dmesg | grep -q "rox_0: Couldn't" && fail "ib_mad could not open rox_0: $(dmesg | grep 'rox_0: Couldn')"

ipv4_of() {
	local ndev
	ndev=$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/0 2>/dev/null) || return 1
	ip -4 -o addr show dev "$ndev" | awk '{ print $4 }' | cut -d/ -f1 | head -1
}
server_ip=$(ipv4_of rox_0)
[ -n "$server_ip" ] || skip "rox_0's netdev has no IPv4 address"

run_rping() { # $1: label, $2...: client source options
	local label=$1 out=/tmp/rping-$1
	shift
	timeout 240 rping -s -a "$server_ip" -p $RPING_PORT -C $pings -v >"$out.server" 2>&1 &
	local server=$!
	wait_for_cm_listener $server $RPING_PORT || { wait $server; fail "rping $label: the server did not listen: $(tail -3 "$out.server")"; }
	timeout 60 rping -c -a "$server_ip" -p $RPING_PORT "$@" -C $pings -v >"$out.client" 2>&1
	local crc=$?
	wait $server
	local src=$?
	tail -2 "$out.client"
	[ $crc = 0 ] && [ $src = 0 ] || fail "rping $label: client exit $crc, server exit $src: $(tail -3 "$out.client" "$out.server")"
	[ "$(grep -c 'ping data' "$out.client")" = $pings ] || fail "rping $label: $(grep -c 'ping data' "$out.client") of $pings pings"
	echo "ok   rping $label: $pings pings"
}

run_ucmatose() { # $1: label, $2...: options of both sides
	local label=$1 out=/tmp/ucmatose-$1
	shift
	timeout 240 ucmatose -b "$server_ip" -p $UCMATOSE_PORT "$@" >"$out.server" 2>&1 &
	local server=$!
	wait_for_cm_listener $server $UCMATOSE_PORT || { wait $server; fail "ucmatose $label: the server did not listen: $(tail -3 "$out.server")"; }
	timeout 60 ucmatose -s "$server_ip" -p $UCMATOSE_PORT "$@" >"$out.client" 2>&1
	local crc=$?
	wait $server
	local src=$?
	[ $crc = 0 ] && [ $src = 0 ] || fail "ucmatose $label: client exit $crc, server exit $src: $(tail -3 "$out.client" "$out.server")"
	grep -q 'return status 0' "$out.client" && grep -q 'return status 0' "$out.server" ||
		fail "ucmatose $label: no 'return status 0': $(tail -3 "$out.client" "$out.server")"
	echo "ok   ucmatose $label"
}

dmesg -C
run_rping "rox_0 loopback"
run_ucmatose "rox_0 loopback, 1 connection"
run_ucmatose "rox_0 loopback, 4 connections, 1 KiB" -c 4 -C 20 -S 1024
# (rping from rox_1's address to rox_0's in one guest is rejected (RDMA_CM_EVENT_REJECTED,
# seen): rdma_cm resolves a destination local to the host through the netdev that owns it,
# not across the wire. rdma_cm between two devices is covered between guests by
# tests/guest/pair-pingpong.)
dmesg | grep -E 'BUG:|Oops|WARNING:' && fail "kernel complained"
echo "rdma_cm works over rox"
