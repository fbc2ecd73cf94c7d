#!/bin/bash
# Guest side of the two-guest RDMA tests (rox-lab): guest 1 serves, guest 0 connects, each on
# its lab NIC 0 — a rox device (rox.ko, $ROX_KO) or, on a virtio NIC, rdma_rxe. Unmodified
# programs: the libibverbs pingpongs with -c validation (their TCP side channel and the RoCE
# packets both cross the lab network), rping and ucmatose over rdma_cm (the CM handshake over
# both guests' QP1), and perftest's bandwidth and latency tools (their TCP side channel too).
#   pair.sh server|client TEST...      TEST: rc rc-events uc ud srq rping ucmatose
#                                            write_bw read_bw send_lat
# Environment: PAIR_ITERS (default 200), PAIR_PP_ARGS (extra rc/uc/srq pingpong arguments,
# e.g. "-s 8192 -m 1024"), PAIR_ROUTED=1 (the client asserts the server is on another subnet,
# reached through the router), PAIR_ACTIVE_MTU (both assert the port's active_mtu).
# PAIR_PEER: the server's address when it is in another lab (rox-lab --uplink).
set -u
role=$1
shift
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "FAIL $role: $*"; exit 1; }

peer=${PAIR_PEER:-${ROX_IP_1_0:-}} # the server: guest 1's lab NIC 0 (PAIR_PEER: in another lab)
dev=$(lab_rdma_dev) || fail "no RDMA device on lab NIC 0 (above: why)"
wait_port_active "$dev" || fail "$dev port not active"
gid=$(gid_index "$dev") || fail "no IPv4 RoCE v2 GID on $dev"
active_mtu=$(ibv_devinfo -d "$dev" | awk '/active_mtu/ { print $2; exit }')
echo "$role: $dev on $ROX_IF_0 ($(ip -br addr show "$ROX_IF_0" | awk '{ print $3 }'), MTU $(cat /sys/class/net/"$ROX_IF_0"/mtu)), GID $gid, active_mtu $active_mtu"
[ -z "${PAIR_ACTIVE_MTU:-}" ] || [ "$active_mtu" = "$PAIR_ACTIVE_MTU" ] ||
	fail "$dev active_mtu is $active_mtu, expected $PAIR_ACTIVE_MTU"

if [ "$role" = client ]; then
	wait_ping "$peer" 120 || fail "guest 1 ($peer) unreachable"
	if [ "${PAIR_ROUTED:-0}" = 1 ]; then
		[ "$ROX_SUBNET_0" != "$ROX_SUBNET_1" ] || fail "routed test but both guests are on subnet $ROX_SUBNET_0"
		router_var=ROX_ROUTER_IP_$ROX_SUBNET_0
		ip route get "$peer" | grep -q "via ${!router_var} " || fail "$peer is not routed via ${!router_var}: $(ip route get "$peer")"
		# One router on the path: the reply's TTL is 64 - 1.
		ttl=$(ping -c1 -W2 "$peer" | sed -n 's/.*ttl=\([0-9]*\).*/\1/p')
		[ "$ttl" = 63 ] || fail "ping $peer: TTL ${ttl:-none}, expected 63 (one router hop)"
		peer6=$ROX_IP6_1_0
		hops=$(ping -6 -c1 -W2 "$peer6" | sed -n 's/.*ttl=\([0-9]*\).*/\1/p')
		[ "$hops" = 63 ] || fail "ping -6 $peer6: hop limit ${hops:-none}, expected 63 (one router hop)"
		echo "client: $peer ($peer6) is on subnet $ROX_SUBNET_1, routed via ${!router_var} (ping TTL 63, IPv4 and IPv6)"
	fi
fi

iters=${PAIR_ITERS:-200}
# A server waits for its client as long as the client may take to get to it: in tests/net/two-
# hosts one client runs all its tests against another server first. The lab's own timeout
# bounds the whole run.
SERVER_WAIT_S=480
# How long a client keeps trying while its server is not listening yet (the server's guest may
# boot and load its driver later and more slowly than this one).
CONNECT_WINDOW_S=300
# rdma_xserver's rdma_cm port (its default, given explicitly), and the server guest's ready
# board for it (tests/lib/ready_board.py; below Linux's ephemeral ports).
XSERVER_PORT=7471
READY_BOARD_PORT=7472
# How long the board and rdma_xserver may take in all: shorter than the server's outer timeout
# (SERVER_WAIT_S, which kills the board too), so the board itself stops rdma_xserver first and
# says what was missing (it never listened; it listened and no client asked; the client was
# told and never connected), or that no client asked after rdma_xserver ended early.
READY_BOARD_LIMIT_S=$((SERVER_WAIT_S - 30))
ready_board="python3 $(dirname "$0")/../lib/ready_board.py"
pp="-d $dev -g $gid -n $iters"
PERF_BW_SIZE=65536
PERF_LAT_SIZE=64
perf="-d $dev -x $gid -n $iters -F"
rc=0
for t in "$@"; do
	case $t in
	rc) cmd="ibv_rc_pingpong -c $pp ${PAIR_PP_ARGS:-}" ;;
	rc-events) cmd="ibv_rc_pingpong -c -e $pp ${PAIR_PP_ARGS:-}" ;;
	uc) cmd="ibv_uc_pingpong -c $pp ${PAIR_PP_ARGS:-}" ;;
	ud) cmd="ibv_ud_pingpong -c $pp" ;;
	srq) cmd="ibv_srq_pingpong -c $pp ${PAIR_PP_ARGS:-}" ;;
	# XRC: an XRC domain, an XRC SRQ and XRC_RECV/XRC_SEND QPs per side (issue 19).
	xsrq) cmd="ibv_xsrq_pingpong $pp" ;;
	# perftest: 64 KiB RDMA WRITE and READ streams, 64 B SEND latency. They check every
	# completion's status, not the data (rdma-xfer and the pingpongs' -c do that).
	write_bw) cmd="ib_write_bw $perf -s $PERF_BW_SIZE" ;;
	read_bw) cmd="ib_read_bw $perf -s $PERF_BW_SIZE" ;;
	send_lat) cmd="ib_send_lat $perf -s $PERF_LAT_SIZE" ;;
	rping | ucmatose | xclient) cmd= ;;
	*) fail "unknown test $t" ;;
	esac
	if [ "$role" = server ]; then
		case $t in
		rping) cmd="rping -s -a $peer -C 10 -v" ;;
		ucmatose) cmd="ucmatose -b $peer -c 2 -C 20 -S 1024" ;;
		# The board says "ready" once rdma_xserver listens (or why it never did).
		xclient) cmd="$ready_board serve $READY_BOARD_PORT xclient $XSERVER_PORT $READY_BOARD_LIMIT_S -- rdma_xserver -p $XSERVER_PORT -c x" ;;
		esac
		timeout $SERVER_WAIT_S $cmd >/tmp/s.log 2>&1 || { echo "FAIL server: $t ($cmd)"; cat /tmp/s.log; rc=1; }
		continue
	fi
	case $t in
	rping) cmd="rping -c -a $peer -C 10 -v"; check() { [ "$(grep -c 'ping data' /tmp/c.log)" = 10 ]; } ;;
	ucmatose) cmd="ucmatose -s $peer -c 2 -C 20 -S 1024"; check() { grep -q 'return status 0' /tmp/c.log; } ;;
	xclient) cmd="rdma_xclient -s $peer -p $XSERVER_PORT -c x"; check() { grep -q 'end 0' /tmp/c.log; } ;;
	xsrq) cmd="$cmd $peer"; check() { grep -qx success /tmp/c.log; } ;;
	# perftest's result row: bytes, iterations, then the numbers.
	write_bw | read_bw) cmd="$cmd $peer"; check() { grep -qE "^ *$PERF_BW_SIZE +$iters +[0-9.]+" /tmp/c.log; } ;;
	send_lat) cmd="$cmd $peer"; check() { grep -qE "^ *$PERF_LAT_SIZE +$iters +[0-9.]+" /tmp/c.log; } ;;
	*) cmd="$cmd $peer"; check() { grep -q 'iters in' /tmp/c.log; } ;;
	esac
	if [ "$t" = xclient ]; then
		# rdma_xclient prints only perror's text, where librdmacm turns every REJ into
		# ECONNREFUSED: it cannot tell a server not listening yet from a real reject. So it
		# runs once, when the server's board says rdma_xserver listens, and a refusal fails.
		if $ready_board wait "$peer" $READY_BOARD_PORT xclient $CONNECT_WINDOW_S $SERVER_WAIT_S >/tmp/c.log 2>&1; then
			timeout 120 $cmd >/tmp/c.log 2>&1
			c=$?
		else
			c=1
		fi
	else
		# Retry only while the server is not listening yet, and nothing else (as
		# tests/interop/cases.py): a refused TCP connection, or an rdma_cm REJ with reason 8
		# (invalid service ID). UNREACHABLE (lost CM MADs) or any other reject is a failure.
		not_listening="Couldn't connect to [^ ]+:[0-9]+|REJECTED[^0-9]{1,12}8\b"
		connect_by=$((SECONDS + CONNECT_WINDOW_S))
		while :; do
			timeout 120 $cmd >/tmp/c.log 2>&1
			c=$?
			[ $c = 0 ] && break
			grep -qE "$not_listening" /tmp/c.log || break
			[ $SECONDS -lt $connect_by ] || { echo "client: $t: no server listening within $CONNECT_WINDOW_S s"; break; }
			echo "retry $t: the server is not listening yet ($(grep -m1 -oE "$not_listening" /tmp/c.log))"
			sleep 1
		done
	fi
	if [ $c = 0 ] && check; then
		echo "ok   $t: $(grep -E 'iters in|^ *[0-9]+ +[0-9]+ +[0-9.]+' /tmp/c.log || tail -1 /tmp/c.log)"
	else
		echo "FAIL client: $t ($cmd, exit $c)"
		cat /tmp/c.log
		rc=1
	fi
	sleep 1
done
exit $rc
