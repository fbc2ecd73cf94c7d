#!/bin/bash
# UD multicast over rdma_cm on rox (guest with two rox NICs on one bridge; skips without them):
# rdma-core's `mckey` joins a group with one process and sends to it with another —
#   - IPv4 group, receiver on rox_1, sender on rox_0 (out of rox_0's port, over the bridge,
#     into rox_1's port);
#   - IPv4 group, receiver and sender both on rox_0 (the device loops its send to the group
#     back to its own attached QPs);
#   - IPv6 group through libibverbs alone (tests/guest/mcast-verbs.c: the kernel's rdma_cm
#     does not join IPv6 groups on RoCEv2, cma_iboe_join_multicast answers ENOTSUPP for any
#     device): rox_0 sends, rox_1's attached QP receives every message intact; attach to a
#     unicast GID and detach of an unattached QP fail; nothing arrives after the detach.
# The receiver must get every message (mckey waits for that many completions; a lost one
# times it out), and the receiving device's rx_mcast_copies counter must have risen.
# ibv_devinfo -v must report the multicast limits.
set -u
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -20; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f   # uapi/src/regs.rs PCI_VENDOR_ID
messages=20
size=256

[ "$(grep -lx $rox_vendor /sys/bus/pci/devices/*/vendor 2>/dev/null | wc -l)" -ge 2 ] ||
	skip "this test needs two rox-nics"
[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] || skip "librox is not installed"
command -v mckey >/dev/null || skip "no mckey (rdmacm-utils)"
if ! grep -q '^rox ' /proc/modules; then
	[ -f "${ROX_KO:-}" ] || fail "no module at ${ROX_KO:-}"
	insmod "$ROX_KO" || fail "insmod failed"
fi
for dev in rox_0 rox_1; do
	for _ in $(seq 100); do ibv_devinfo -d $dev 2>/dev/null | grep -q PORT_ACTIVE && break; sleep 0.2; done
	ibv_devinfo -d $dev | grep -q PORT_ACTIVE || fail "$dev port 1 is not active"
done

ibv_devinfo -v -d rox_0 >/tmp/mcast-devinfo.out || fail "ibv_devinfo -v -d rox_0"
for cap in max_mcast_grp max_mcast_qp_attach max_total_mcast_qp_attach; do
	v=$(awk -v k="$cap" '$1 == k":" { print $2; exit }' /tmp/mcast-devinfo.out)
	[[ ${v:-0} =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || fail "rox_0 reports $cap='${v:-}' (want > 0)"
	echo "rox_0 $cap $v"
done

netdev_of() { cat /sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/0; }
# addr_of DEV 4|6: the netdev's global address of that family (IPv6: waits for DAD).
addr_of() {
	local a
	for _ in $(seq 100); do
		if [ "$2" = 4 ]; then
			a=$(ip -4 -o addr show dev "$(netdev_of "$1")" | awk '{ print $4 }' | cut -d/ -f1 | head -1)
		else
			a=$(ip -6 -o addr show dev "$(netdev_of "$1")" scope global -tentative |
				awk '{ print $4 }' | cut -d/ -f1 | head -1)
		fi
		[ -n "$a" ] && { echo "$a"; return 0; }
		sleep 0.2
	done
	return 1
}
# A device counter (tests/guest/lib.sh); empty makes the arithmetic below fail.
. "$(dirname "$0")/lib.sh"
counter() { rdma_counter "$@"; }

# run_mckey LABEL GROUP RECV_DEV SEND_DEV FAMILY
run_mckey() {
	local label=$1 group=$2 rdev=$3 sdev=$4 family=$5 raddr saddr before after out=/tmp/mckey-$1
	raddr=$(addr_of "$rdev" "$family") || fail "$label: $rdev has no IPv$family address"
	saddr=$(addr_of "$sdev" "$family") || fail "$label: $sdev has no IPv$family address"
	before=$(counter "$rdev" rx_mcast_copies)
	# stdbuf: mckey printf()s without flushing; its "joined" line must show while it waits.
	timeout 60 stdbuf -oL mckey -m "$group" -b "$raddr" -C $messages -S $size >"$out.recv" 2>&1 &
	local receiver=$!
	for _ in $(seq 100); do grep -q 'joined dgid' "$out.recv" && break; sleep 0.2; done
	grep -q 'joined dgid' "$out.recv" || { kill $receiver; fail "$label: receiver did not join: $(cat "$out.recv")"; }
	timeout 60 stdbuf -oL mckey -m "$group" -b "$saddr" -s -C $messages -S $size >"$out.send" 2>&1
	local src=$?
	wait $receiver
	local rrc=$?
	after=$(counter "$rdev" rx_mcast_copies)
	[ $src = 0 ] && grep -q 'return status 0' "$out.send" ||
		fail "$label: sender exit $src: $(cat "$out.send")"
	[ $rrc = 0 ] && grep -q 'data transfers complete' "$out.recv" && grep -q 'return status 0' "$out.recv" ||
		fail "$label: receiver exit $rrc (124: not all $messages messages arrived): $(cat "$out.recv")"
	[ $((after - before)) -ge $messages ] ||
		fail "$label: $rdev rx_mcast_copies rose by $((after - before)), want >= $messages"
	echo "ok   mckey $label: $messages x $size bytes to $group ($rdev rx_mcast_copies +$((after - before)))"
}

dmesg -C
run_mckey "IPv4 rox_0 -> rox_1" 239.1.1.1 rox_1 rox_0 4
run_mckey "IPv4 rox_0 -> rox_0" 239.1.1.2 rox_0 rox_0 4

gcc -O2 -Wall -Wextra -Werror -o /tmp/mcast-verbs "$(dirname "$0")/mcast-verbs.c" -libverbs || fail "cannot build mcast-verbs"
. "$(dirname "$0")/lab.sh"
gid6=$(gid_index rox_0 6) || fail "rox_0 has no IPv6 RoCE v2 GID"
before=$(counter rox_1 rx_mcast_copies)
timeout 300 /tmp/mcast-verbs rox_0 "$gid6" rox_1 ff0e::1:1 16 || fail "IPv6 multicast through verbs (exit $?)"
after=$(counter rox_1 rx_mcast_copies)
[ $((after - before)) = 16 ] || fail "IPv6: rox_1 rx_mcast_copies rose by $((after - before)), want 16"
echo "ok   IPv6 group ff0e::1:1 rox_0 -> rox_1 through verbs (rox_1 rx_mcast_copies +16)"
for dev in rox_0 rox_1; do echo "$dev: $(rdma_counters $dev rx_mcast_copies port_drop_no_dmac rx_bad_key | tr '\n' ' ')"; done
dmesg | grep -E 'BUG:|Oops|WARNING:' && fail "kernel complained"
echo "UD multicast over rdma_cm works on rox"
