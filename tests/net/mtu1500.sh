#!/bin/bash
# Guest side of tests/net/mtu1500.
set -u
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "FAIL: $*"; exit 1; }
insmod "$ROX_KO" || fail "insmod $ROX_KO"
for i in 0 1; do
	wait_port_active "rox_$i" || fail "rox_$i port not active"
	mtu=$(ibv_devinfo -d "rox_$i" | awk '/active_mtu/ { print $2; exit }')
	echo "rox_$i: active_mtu $mtu"
	[ "$mtu" = 1024 ] || fail "rox_$i active_mtu is $mtu, expected 1024 at Ethernet MTU 1500"
done
for dev in "$ROX_IF_0" "$ROX_IF_1"; do
	[ "$(cat /sys/class/net/"$dev"/mtu)" = 1500 ] || fail "$dev MTU is $(cat /sys/class/net/"$dev"/mtu), not 1500"
done
g0=$(gid_index rox_0) || fail "no IPv4 GID on rox_0"
g1=$(gid_index rox_1) || fail "no IPv4 GID on rox_1"
timeout 120 ibv_rc_pingpong -d rox_0 -g "$g0" -c -s 8192 -m 1024 -n 200 >/tmp/s.log 2>&1 &
server=$!
wait_for_server() { for _ in $(seq 200); do ss -Hltn "sport = :18515" | grep -q . && return 0; sleep 0.1; done; return 1; }
wait_for_server || fail "server did not listen: $(cat /tmp/s.log)"
timeout 120 ibv_rc_pingpong -d rox_1 -g "$g1" -c -s 8192 -m 1024 -n 200 127.0.0.1 >/tmp/c.log 2>&1
c=$?
wait $server
s=$?
cat /tmp/c.log
[ $c = 0 ] && [ $s = 0 ] && grep -q 'iters in' /tmp/c.log || { cat /tmp/s.log; fail "ibv_rc_pingpong -c -s 8192 -m 1024 (client $c, server $s)"; }
echo "ok   1500-byte path: active_mtu 1024, ibv_rc_pingpong -c -s 8192 -m 1024"
