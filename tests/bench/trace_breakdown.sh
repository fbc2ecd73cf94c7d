#!/bin/bash
# Guest side of tests/bench/trace-breakdown: guest 1 serves, guest 0 runs, over each guest's rox
# NIC 0 (both rox-nics record every WQE's life), ib_send_lat -s 2 -n SEND_LAT_ITERS, then
# ib_write_lat -s 1048576 -n WRITE_LAT_ITERS, and prints perftest's result lines.
#   trace_breakdown.sh server|client
# Environment: ROX_KO, SEND_LAT_ITERS (default 1000), WRITE_LAT_ITERS (default 50).
set -u
role=$1
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "FAIL $role: $*"; exit 1; }

dev=$(rox_dev_on "$ROX_IF_0") || fail "no rox device on $ROX_IF_0"
wait_port_active "$dev" || fail "$dev port not active"
gid=$(gid_index "$dev") || fail "no IPv4 RoCE v2 GID on $dev"
peer=${ROX_IP_1_0:-}

n=0
for bench in "ib_send_lat -s 2 -n ${SEND_LAT_ITERS:-1000}" \
	"ib_write_lat -s 1048576 -n ${WRITE_LAT_ITERS:-50}"; do
	port=$((18700 + n))
	n=$((n + 1))
	cmd="$bench -d $dev -x $gid -F -p $port"
	if [ "$role" = server ]; then
		timeout 600 $cmd >/tmp/tb-server.log 2>&1 || { cat /tmp/tb-server.log; fail "$cmd"; }
		continue
	fi
	wait_ping "$peer" 120 || fail "guest 1 ($peer) unreachable"
	# The server may still be starting: try again while nobody listens (60 s).
	for _ in $(seq 120); do
		timeout 600 $cmd "$peer" >/tmp/tb-client.log 2>&1 && break
		grep -q "Couldn't connect\|Unable to open file descriptor" /tmp/tb-client.log || break
		sleep 0.5
	done
	# perftest's result row starts with the size in bytes.
	row=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print; exit }' /tmp/tb-client.log)
	[ -n "$row" ] || { cat /tmp/tb-client.log; fail "no result from $cmd $peer"; }
	echo "TB ${bench%% *} header: $(grep -m1 'bytes' /tmp/tb-client.log | tr -s ' ')"
	echo "TB ${bench%% *} result: $(echo "$row" | tr -s ' ')"
done
echo "trace_breakdown $role: done"
