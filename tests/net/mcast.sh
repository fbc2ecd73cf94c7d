#!/bin/bash
# Guest side of tests/net/mcast-pair (rox-lab, three guests on one bridge): UD multicast over
# rdma_cm with rdma-core's `mckey` between guests. Guest 0 and 1 have a rox NIC, guest 2 a
# virtio NIC with rdma_rxe. Each guest runs this script; the rounds:
#   rdma_cm (mckey, two processes):
#   1  IPv4 group, guest 1 (rox) sends, guest 0 (rox) receives
#   4  IPv4 group, guest 1 (rox) sends, guest 2 (rxe) receives
#   libibverbs alone (tests/guest/mcast-verbs.c send / recv):
#   5  IPv6 group, guest 1 (rox) sends, guest 0 (rox) receives
#   6  IPv4 group, guest 2 (rxe) sends, guest 0 (rox) receives
#   7  IPv6 group, guest 2 (rxe) sends, guest 0 (rox) receives
#   8  IPv6 group, guest 1 (rox) sends, guest 2 (rxe) receives
# No IPv6 group over rdma_cm: the kernel's rdma_cm does not join IPv6 groups on RoCEv2
# (ENOTSUPP from cma_iboe_join_multicast, for rxe as for rox). No mckey sender on rxe: mckey
# leaves and destroys its QP right after posting its (unsignaled) sends, and rxe, which sends
# from a work queue, had put none of them on the wire by then (seen in a capture of the
# bridge: rxe joined, then no frame to the group); mcast-verbs waits for each completion.
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

dev=$(lab_rdma_dev) || fail "no RDMA device on lab NIC 0 (above: why)"
wait_port_active "$dev" || fail "$dev port not active"
gid_index "$dev" 4 >/dev/null || fail "$dev lacks its lab IPv4 GID"
echo "guest $me: $dev on $ROX_IF_0"

counters() { echo "$dev counters: $(rdma_counters "$dev" rx_mcast_copies port_rx_frames port_to_netdev rx_unknown_qp rx_bad_key rx_dropped rx_packets 2>&1 | tr '\n' ' ')"; }
ip4_of() { local v=ROX_IP_$1_0; echo "${!v}"; }
ip6_of() { local v=ROX_IP6_$1_0; echo "${!v}"; }

# ready_port ROUND: tell the round's sender (one TCP connection) that this receiver is ready.
ready_port() {
	python3 "$(dirname "$0")/mcast_ready.py" "$(ip4_of "$me")" $((MCAST_READY_PORT + $1)) $SEND_WAIT
}

# wait_ready ROUND RECEIVER_GUEST
wait_ready() {
	local ok=
	wait_ping "$(ip4_of "$2")" $SEND_WAIT || fail "round $1: guest $2 unreachable"
	for _ in $(seq $SEND_WAIT); do
		if (exec 3<>"/dev/tcp/$(ip4_of "$2")/$((MCAST_READY_PORT + $1))") 2>/dev/null; then ok=1; break; fi
		sleep 1
	done
	[ -n "$ok" ] || fail "round $1: guest $2 never got ready"
}

# receive ROUND GROUP FAMILY
receive() {
	local round=$1 group=$2 family=$3 addr out=/tmp/mckey-$1
	[ "$family" = 4 ] && addr=$(ip4_of "$me") || addr=$(ip6_of "$me")
	timeout $RECV_TIMEOUT stdbuf -oL mckey -m "$group" -b "$addr" -C $MESSAGES -S $SIZE >"$out" 2>&1 &
	local pid=$!
	for _ in $(seq 150); do grep -q 'joined dgid' "$out" && break; sleep 0.2; done
	grep -q 'joined dgid' "$out" || { kill $pid; fail "round $round: $dev did not join $group: $(cat "$out")"; }
	ready_port "$round" &
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
	local round=$1 group=$2 family=$3 peer=$4 addr out=/tmp/mckey-$1
	[ "$family" = 4 ] && addr=$(ip4_of "$me") || addr=$(ip6_of "$me")
	wait_ready "$round" "$peer"
	timeout 60 stdbuf -oL mckey -m "$group" -b "$addr" -s -C $MESSAGES -S $SIZE >"$out" 2>&1 ||
		fail "round $round: sender on $dev: $(cat "$out")"
	# mckey reports "return status 0" even when its join failed (then it sends nothing).
	grep -q 'joined dgid' "$out" && grep -q 'return status 0' "$out" ||
		fail "round $round: sender on $dev: $(cat "$out")"
	echo "ok   round $round: $dev sent $MESSAGES x $SIZE bytes to $group"
}

# Rounds through libibverbs alone (tests/guest/mcast-verbs.c): IPv6 groups too (rdma_cm has
# none on RoCEv2), and a sender that waits for its send completions.
gcc -O2 -Wall -Wextra -Werror -o /tmp/mcast-verbs "$(dirname "$0")/../guest/mcast-verbs.c" -libverbs || fail "cannot build mcast-verbs"

# join_ip_group GROUP: hold an IP-level membership of GROUP on the lab NIC until killed. rxe
# receives through the IP stack, which delivers a group's packets only if the host joined it
# (rdma_cm joins for it; a bare ibv_attach_mcast on rxe adds only the group's MAC).
join_ip_group() {
	python3 "$(dirname "$0")/mcast_join.py" "$1" "$ROX_IF_0"
}

# verbs_receive ROUND GROUP
verbs_receive() {
	local round=$1 group=$2 out=/tmp/mcast-verbs-$1 member=
	if [ "$dev" = rxe0 ]; then
		join_ip_group "$group" >/tmp/ip-group-$round 2>&1 &
		member=$!
		for _ in $(seq 50); do grep -q joined /tmp/ip-group-$round && break; sleep 0.2; done
		grep -q joined /tmp/ip-group-$round || fail "round $round: cannot join $group: $(cat /tmp/ip-group-$round)"
	fi
	timeout $RECV_TIMEOUT /tmp/mcast-verbs recv "$dev" "$group" $MESSAGES >"$out" 2>&1 &
	local pid=$!
	for _ in $(seq 150); do grep -q attached "$out" && break; sleep 0.2; done
	grep -q attached "$out" || { kill $pid; fail "round $round: $dev could not attach to $group: $(cat "$out")"; }
	ready_port "$round" &
	local ready=$!
	wait $pid
	local rc=$?
	kill $ready 2>/dev/null
	wait $ready 2>/dev/null
	[ -z "$member" ] || kill $member
	[ $rc = 0 ] || fail "round $round: verbs receiver on $dev exit $rc: $(cat "$out"); $(counters)"
	echo "ok   round $round: $(sed -n 's/^ok *//p' "$out")"
}

# verbs_send ROUND GROUP FAMILY RECEIVER_GUEST
verbs_send() {
	local round=$1 group=$2 family=$3 peer=$4 out=/tmp/mcast-verbs-$1 gid
	gid=$(gid_index "$dev" "$family") || fail "round $round: $dev has no IPv$family GID"
	wait_ready "$round" "$peer"
	timeout 300 /tmp/mcast-verbs send "$dev" "$gid" "$group" $MESSAGES >"$out" 2>&1 ||
		fail "round $round: verbs sender on $dev: $(cat "$out")"
	echo "ok   round $round: $(sed -n 's/^ok *//p' "$out")"
}

case $me in
0)
	receive 1 239.1.2.1 4
	verbs_receive 5 ff0e::1:2:5
	verbs_receive 6 239.1.2.6
	verbs_receive 7 ff0e::1:2:7 ;;
1)
	send 1 239.1.2.1 4 0
	send 4 239.1.2.4 4 2
	verbs_send 5 ff0e::1:2:5 6 0
	verbs_send 8 ff0e::1:2:8 6 2 ;;
2)
	receive 4 239.1.2.4 4
	verbs_send 6 239.1.2.6 4 0
	verbs_send 7 ff0e::1:2:7 6 0
	verbs_receive 8 ff0e::1:2:8 ;;
*) fail "mcast.sh runs on guests 0..2" ;;
esac
counters
echo "guest $me: multicast rounds done"
