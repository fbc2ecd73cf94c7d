#!/bin/bash
# Guest side of tests/bench/qps: guest 1 serves, guest 0 runs ib_write_bw -s 8192 over its rox
# NIC 0 with each QP count of QPS_LIST, the same messages in all (QPS_MESSAGES, spread over the
# QPs), and prints one line per count: bandwidth and what the device's counters moved by on
# this side (packets sent, retransmissions, ACK timeouts, tail probes, frames its port
# discarded); the server prints what its device saw: duplicate requests (a retransmission of
# what had arrived: a spurious timeout or probe) and out-of-sequence ones (a packet before them
# was lost).
#   qps.sh server|client
# Environment: ROX_KO, QPS_LIST (default "16 256"), QPS_MESSAGES (default 12800).
set -u
role=$1
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "FAIL $role: $*"; exit 1; }
list=${QPS_LIST:-16 256}
messages=${QPS_MESSAGES:-12800}
size=8192
counters="tx_packets retransmits local_ack_timeout_err roce_adp_retrans"

dev=$(rox_dev_on "$ROX_IF_0") || fail "no rox device on $ROX_IF_0"
wait_port_active "$dev" || fail "$dev port not active"
gid=$(gid_index "$dev") || fail "no IPv4 RoCE v2 GID on $dev"
peer=${ROX_IP_1_0:-}

# counter_values: the counters' values, in $counters order.
counter_values() {
	local c
	for c in $counters; do rdma_counter "$dev" "$c" || echo 0; done | tr '\n' ' '
	# The port's PMA counter (sysfs; not among `rdma statistic`'s).
	cat "/sys/class/infiniband/$dev/ports/1/counters/port_xmit_discards"
}

n=0
for q in $list; do
	iters=$((messages / q))
	port=$((18600 + n))
	n=$((n + 1))
	cmd="ib_write_bw -d $dev -x $gid -F -s $size -q $q -n $iters -p $port"
	if [ "$role" = server ]; then
		dup=$(rdma_counter "$dev" duplicate_request) oos=$(rdma_counter "$dev" out_of_sequence)
		timeout 600 $cmd >/tmp/qps-server.log 2>&1 || { cat /tmp/qps-server.log; fail "$cmd"; }
		echo "QPSRX qps=$q duplicates=$(($(rdma_counter "$dev" duplicate_request) - dup)) out_of_sequence=$(($(rdma_counter "$dev" out_of_sequence) - oos))"
		continue
	fi
	wait_ping "$peer" 120 || fail "guest 1 ($peer) unreachable"
	before=$(counter_values)
	# The server may still be starting: try again while nobody listens (60 s).
	for _ in $(seq 120); do
		timeout 600 $cmd "$peer" >/tmp/qps-client.log 2>&1 && break
		grep -q "Couldn't connect\|Unable to open file descriptor" /tmp/qps-client.log || break
		sleep 0.5
	done
	after=$(counter_values)
	# perftest's row: bytes, iterations (of all QPs), BW peak, BW average [MiB/s], MsgRate.
	bw=$(awk -v s=$size -v i=$((iters * q)) '$1 == s && $2 == i { print $4; exit }' /tmp/qps-client.log)
	[ -n "$bw" ] || { cat /tmp/qps-client.log; fail "no result from $cmd $peer"; }
	read -ra b <<<"$before"
	read -ra a <<<"$after"
	echo "QPS qps=$q messages=$((iters * q)) bw_MiBps=$bw tx_packets=$((a[0] - b[0])) retransmits=$((a[1] - b[1])) ack_timeouts=$((a[2] - b[2])) tail_probes=$((a[3] - b[3])) xmit_discards=$((a[4] - b[4]))"
done
echo "qps $role: done"
