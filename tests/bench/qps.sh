#!/bin/bash
# Guest side of tests/bench/qps: guest 1 serves, guest 0 runs ib_write_bw -s 8192 over its rox
# NIC 0 once per entry of QPS_LIST (QP counts, repeats allowed: "16 256 16 256" alternates
# them), the same messages in every run (QPS_MESSAGES, spread over the QPs). Per run both
# sides print what their device's counters moved by (tests/bench/qps_table.py reads them):
#   QPS run=N qps=Q messages=M bw_MiBps=B <counter>=<delta> ...    (the client)
#   QPSRX run=N qps=Q <counter>=<delta> ...                          (the server)
# and the client marks each run's start (QPSSTART run=N), where the host reads its processes'
# CPU time (tests/bench/qps_hostcpu.py; again at the QPS line).
# The counters (`rdma statistic`, and the PMA's port_xmit_discards) say what the transport did
# (packets each way, ACKs sent, retransmissions, ACK timeouts, tail probes, duplicates,
# out-of-sequence requests) and how often the device had to be woken or looked at its
# doorbells: counts that do not depend on the host's load.
#   qps.sh server|client
# Before them, a base run per QP count with QPS_BASE_ITERS (default 10) messages per QP, its
# lines marked base=1: what connecting, tearing down and a few messages cost (admin commands
# wake the device and interrupt the driver once or more per QP), which qps_table.py takes off
# the other runs' counts to show what the transfer alone cost per MiB. QPS_BASE_ITERS=0: none.
# Environment: ROX_KO, QPS_LIST (default "16 256"), QPS_MESSAGES (default 12800),
# QPS_BASE_ITERS.
set -u
role=$1
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "FAIL $role: $*"; exit 1; }
list=${QPS_LIST:-16 256}
messages=${QPS_MESSAGES:-12800}
size=8192
counters="tx_packets rx_packets acks_sent naks_sent retransmits local_ack_timeout_err roce_adp_retrans
duplicate_request out_of_sequence rx_write_requests wakeups wakes_posted wakes_trapped doorbell_scans
interrupts cqes"

dev=$(rox_dev_on "$ROX_IF_0") || fail "no rox device on $ROX_IF_0"
wait_port_active "$dev" || fail "$dev port not active"
gid=$(gid_index "$dev") || fail "no IPv4 RoCE v2 GID on $dev"
peer=${ROX_IP_1_0:-}

# snapshot FILE: "name value" lines of $counters and the port's PMA port_xmit_discards (sysfs;
# not among `rdma statistic`'s).
snapshot() {
	# shellcheck disable=SC2086 # the names are words
	rdma_counters "$dev" $counters >"$1" || fail "cannot read $dev's counters"
	echo "port_xmit_discards $(cat "/sys/class/infiniband/$dev/ports/1/counters/port_xmit_discards")" >>"$1"
}

# deltas BEFORE AFTER: "name=after-before ..." of every counter.
deltas() {
	awk 'NR == FNR { b[$1] = $2; next } { printf "%s=%d ", $1, $2 - b[$1] }' "$1" "$2"
}

base_iters=${QPS_BASE_ITERS:-10}
plan=""
if [ "$base_iters" -gt 0 ]; then
	for q in $(printf '%s\n' $list | awk '!seen[$0]++'); do plan="$plan $q:$base_iters:1"; done
fi
for q in $list; do plan="$plan $q:$((messages / q)):0"; done

n=0
for step in $plan; do
	IFS=: read -r q iters base <<<"$step"
	port=$((18600 + n))
	n=$((n + 1))
	cmd="ib_write_bw -d $dev -x $gid -F -s $size -q $q -n $iters -p $port"
	snapshot /tmp/qps-before
	if [ "$role" = server ]; then
		timeout 600 $cmd >/tmp/qps-server.log 2>&1 || { cat /tmp/qps-server.log; fail "$cmd"; }
		snapshot /tmp/qps-after
		echo "QPSRX run=$n qps=$q base=$base $(deltas /tmp/qps-before /tmp/qps-after)"
		continue
	fi
	wait_ping "$peer" 120 || fail "guest 1 ($peer) unreachable"
	# The host reads the lab's CPU time here and at the QPS line (tests/bench/qps_hostcpu.py).
	echo "QPSSTART run=$n qps=$q base=$base"
	# The server may still be starting: try again while nobody listens (60 s).
	for _ in $(seq 120); do
		timeout 600 $cmd "$peer" >/tmp/qps-client.log 2>&1 && break
		grep -q "Couldn't connect\|Unable to open file descriptor" /tmp/qps-client.log || break
		sleep 0.5
	done
	snapshot /tmp/qps-after
	# perftest's row: bytes, iterations (of all QPs), BW peak, BW average [MiB/s], MsgRate.
	bw=$(awk -v s=$size -v i=$((iters * q)) '$1 == s && $2 == i { print $4; exit }' /tmp/qps-client.log)
	[ -n "$bw" ] || { cat /tmp/qps-client.log; fail "no result from $cmd $peer"; }
	echo "QPS run=$n qps=$q base=$base messages=$((iters * q)) bytes=$((iters * q * size)) bw_MiBps=$bw $(deltas /tmp/qps-before /tmp/qps-after)"
done
echo "qps $role: done"
