#!/bin/bash
# Guest side of tests/net/mcast-pair (rox-lab, three guests on one bridge): UD multicast over
# rdma_cm with rdma-core's `mckey` between guests. Guest 0 and 1 have a rox NIC, guest 2 a
# virtio NIC with rdma_rxe. Each guest runs this script; the rounds, in order:
#   1  IPv4 group, guest 1 (rox) sends, guest 0 (rox) receives
#   3  IPv4 group, guest 2 (rxe) sends, guest 0 (rox) receives
#   4  IPv4 group, guest 1 (rox) sends, guest 2 (rxe) receives
# (No IPv6 round: the kernel's rdma_cm does not join IPv6 groups on RoCEv2 — ENOTSUPP from
# cma_iboe_join_multicast, for rxe as for rox; tests/guest/t-provider-mcast.sh covers IPv6
# groups through libibverbs.)
# A receiver joins, then opens TCP port MCAST_READY_PORT+round on its lab address; the sender
# of the round waits until it can connect there before it sends (mckey has no handshake, and a
# message sent before the join is lost). The receiver must get all messages (mckey waits for
# that many completions: a loss ends in the timeout).
#   mcast.sh
set -u
. "$(dirname "$0")/../guest/lab.sh"
me=$ROX_GUEST
fail() { echo "FAIL guest $me: $*"; exit 1; }
MESSAGES=20
SIZE=256
MCAST_READY_PORT=7100
# Seconds a receiver waits for its messages, a sender for its receiver.
RECV_TIMEOUT=150
SEND_WAIT=240

kind_var=ROX_NIC_${me}_0
case ${!kind_var:-} in
virtio)
	modprobe rdma_rxe || fail "modprobe rdma_rxe"
	rdma link add rxe0 type rxe netdev "$ROX_IF_0" || fail "rdma link add rxe0 on $ROX_IF_0"
	dev=rxe0 ;;
rox)
	[ -f "${ROX_KO:-}" ] || fail "no rox.ko (ROX_KO=${ROX_KO:-})"
	grep -q '^rox ' /proc/modules || insmod "$ROX_KO" || fail "insmod $ROX_KO"
	dev=
	for _ in $(seq 100); do
		dev=$(rdma link show | awk -v nd="$ROX_IF_0" '$0 ~ "netdev " nd "( |$)" { split($2, a, "/"); print a[1] }')
		[ -n "$dev" ] && break
		sleep 0.2
	done
	[ -n "$dev" ] || fail "no RDMA device on $ROX_IF_0: $(rdma link show)" ;;
*) fail "guest $me has no lab NIC 0" ;;
esac
wait_port_active "$dev" || fail "$dev port not active"
gid_index "$dev" 4 >/dev/null || fail "$dev lacks its lab IPv4 GID"
echo "guest $me: $dev on $ROX_IF_0"

counters() { echo "$dev counters: $(rdma statistic show link $dev/1 2>/dev/null | grep -oE '(rx_mcast_copies|port_rx_frames|port_to_netdev|rx_unknown_qp|rx_bad_key|rx_dropped|rx_packets) [0-9]+' | tr '\n' ' ')"; }
ip4_of() { local v=ROX_IP_$1_0; echo "${!v}"; }
ip6_of() { local v=ROX_IP6_$1_0; echo "${!v}"; }

# receive ROUND GROUP FAMILY
receive() {
	local round=$1 group=$2 family=$3 addr out=/tmp/mckey-$1
	[ "$family" = 4 ] && addr=$(ip4_of "$me") || addr=$(ip6_of "$me")
	timeout $RECV_TIMEOUT stdbuf -oL mckey -m "$group" -b "$addr" -C $MESSAGES -S $SIZE >"$out" 2>&1 &
	local pid=$!
	for _ in $(seq 150); do grep -q 'joined dgid' "$out" && break; sleep 0.2; done
	grep -q 'joined dgid' "$out" || { kill $pid; fail "round $round: $dev did not join $group: $(cat "$out")"; }
	python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
s.settimeout(float(sys.argv[3]))
c, _ = s.accept()
c.close()
' "$(ip4_of "$me")" $((MCAST_READY_PORT + round)) $SEND_WAIT &
	local ready=$!
	wait $pid
	local rc=$?
	kill $ready 2>/dev/null
	wait $ready 2>/dev/null
	[ $rc = 0 ] && grep -q 'data transfers complete' "$out" && grep -q 'return status 0' "$out" ||
		fail "round $round: receiver on $dev exit $rc (124: not all $MESSAGES messages arrived): $(cat "$out"); $(counters)"
	echo "ok   round $round: $dev received $MESSAGES x $SIZE bytes on $group"
}

# send ROUND GROUP FAMILY RECEIVER_GUEST
send() {
	local round=$1 group=$2 family=$3 peer=$4 addr out=/tmp/mckey-$1 ok=
	[ "$family" = 4 ] && addr=$(ip4_of "$me") || addr=$(ip6_of "$me")
	wait_ping "$(ip4_of "$peer")" $SEND_WAIT || fail "round $round: guest $peer unreachable"
	for _ in $(seq $SEND_WAIT); do
		if (exec 3<>"/dev/tcp/$(ip4_of "$peer")/$((MCAST_READY_PORT + round))") 2>/dev/null; then ok=1; break; fi
		sleep 1
	done
	[ -n "$ok" ] || fail "round $round: guest $peer never got ready"
	timeout 60 stdbuf -oL mckey -m "$group" -b "$addr" -s -C $MESSAGES -S $SIZE >"$out" 2>&1 ||
		fail "round $round: sender on $dev: $(cat "$out")"
	# mckey reports "return status 0" even when its join failed (then it sends nothing).
	grep -q 'joined dgid' "$out" && grep -q 'return status 0' "$out" ||
		fail "round $round: sender on $dev: $(cat "$out")"
	echo "ok   round $round: $dev sent $MESSAGES x $SIZE bytes to $group"
}

case $me in
0)
	receive 1 239.1.2.1 4
	receive 3 239.1.2.3 4 ;;
1)
	send 1 239.1.2.1 4 0
	send 4 239.1.2.4 4 2 ;;
2)
	send 3 239.1.2.3 4 0
	receive 4 239.1.2.4 4 ;;
*) fail "mcast.sh runs on guests 0..2" ;;
esac
counters
echo "guest $me: multicast rounds done"
