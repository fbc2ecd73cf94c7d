#!/bin/bash
# The three sides of tests/net/flood (rox-lab, one rox NIC in each of two guests):
#   flood.sh target   guest 0: the flooded rox_0; pingpong client; asserts its counters
#   flood.sh peer     guest 1: pingpong server
#   flood.sh host     rox-lab --host-cmd: floods guest 0's rox NIC from the lab's host
#                     interface on bridge 0 (tests/net/flood.py) while the pingpongs run
# The guests and the host command meet through files in guest 0's run directory (/run/rox in
# the guest, $ROX_RUN_0 on the host): flood.start (target: flood now), flood.running (host:
# flooding), flood.stop (target: pingpongs done), flood.out (host: what flood.py sent), done
# (target: finished; the host passes it on to guest 1, which then stops answering pings).
# Then a live RC QP under fire (audit M10): guest 0 WRITEs a buffer to guest 1 over an rdma_cm
# connection (tests/interop/rdma-xfer.c) again and again, publishing its QP number and expected
# PSN in live.qp; the host aims flood.py's live kinds at that QP from guest 1's address and
# says live.done; the transfer's checksums must agree, each kind be counted where the spec
# puts it (sequence error, duplicate, dropped, ICRC error), no remote access error counted.
# Each check prints one line, `ok   WHAT` or `FAIL WHAT`; the exit status is 1 if any failed.
# Environment: FLOOD_ITERS (pingpong iterations, default 5000: ~10 s each), FLOOD_RATE (frames/s,
# 2000), FLOOD_SEED (flood.py's seed: replays a run's frames; default a new one, printed).
set -u
role=$1
iters=${FLOOD_ITERS:-5000}
failed=0
ok() { echo "ok   $role: $*"; }
bad() { echo "FAIL $role: $*"; failed=1; }
# wait_file FILE SECONDS
wait_file() {
	local i
	for i in $(seq $(($2 * 10))); do
		[ -e "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

if [ "$role" = host ]; then
	run0=$ROX_RUN_0 run1=$ROX_RUN_1
	wait_file "$run0/flood.start" 600 || { bad "guest 0 never asked for the flood"; exit 1; }
	touch "$run0/flood.running"
	# --seconds: a cap in case guest 0 never says stop.
	# --drops-of: what the sending interface and guest 0's tap (its rox-nic's port, qemu/rox-lab
	# names it g0n0) dropped never reached rox-nic; the target's checks allow for exactly that.
	python3 tests/net/flood.py --iface "$ROX_HOST_IF" --dst-mac "$ROX_MAC_0_0" --dst-ip "$ROX_IP_0_0" \
		--target-mtu "$ROX_MTU" --rate "${FLOOD_RATE:-2000}" --seconds 300 --until "$run0/flood.stop" \
		--drops-of "$ROX_HOST_IF,g0n0" ${FLOOD_SEED:+--seed "$FLOOD_SEED"} \
		>"$run0/flood.out.tmp" || { bad "flood.py failed: $(cat "$run0/flood.out.tmp")"; exit 1; }
	mv "$run0/flood.out.tmp" "$run0/flood.out"
	cat "$run0/flood.out"
	# The live QP phase (or guest 0's end, if it stopped before).
	for _ in $(seq 6000); do [ -e "$run0/live.qp" ] || [ -e "$run0/done" ] && break; sleep 0.1; done
	if [ -e "$run0/live.qp" ]; then
		read -r qpn psn <"$run0/live.qp"
		python3 tests/net/flood.py --iface "$ROX_HOST_IF" --dst-mac "$ROX_MAC_0_0" --dst-ip "$ROX_IP_0_0" \
			--src-ip "$ROX_IP_1_0" --live-qp "$qpn" --live-psn "$psn" --per-kind "${LIVE_PER_KIND:-50}" \
			--rate 500 --drops-of "$ROX_HOST_IF,g0n0" ${FLOOD_SEED:+--seed "$FLOOD_SEED"} \
			>"$run0/live.out.tmp" || bad "flood.py --live-qp failed: $(cat "$run0/live.out.tmp")"
		mv "$run0/live.out.tmp" "$run0/live.out"
		cat "$run0/live.out"
		touch "$run0/live.done"
	fi
	wait_file "$run0/done" 600 || { bad "guest 0 did not finish"; exit 1; }
	touch "$run1/done"
	exit 0
fi

. "$(dirname "$0")/../guest/lab.sh"
fatal() { bad "$*"; exit 1; }
[ -f "${ROX_KO:-}" ] || fatal "no rox.ko (ROX_KO=${ROX_KO:-})"
insmod "$ROX_KO" || fatal "insmod $ROX_KO"
dev=rox_0
wait_port_active $dev || fatal "$dev port not active"
gid=$(gid_index $dev) || fatal "no IPv4 RoCE v2 GID on $dev"
pp="-d $dev -g $gid -n $iters"

# guest_health: no kernel warning or oops in dmesg; this guest's rox-nic log has no panic.
guest_health() {
	local oops
	oops=$(dmesg | grep -E 'WARNING:|Oops|BUG:|general protection|Call Trace' | head -5)
	[ -z "$oops" ] && ok "no kernel oops or WARN in dmesg" || bad "kernel: $oops"
	if grep -qi 'panick' /run/rox/rox-nic0.log; then
		bad "rox-nic: $(grep -i -m3 'panick' /run/rox/rox-nic0.log)"
	else
		ok "rox-nic log has no panic ($(wc -l </run/rox/rox-nic0.log) lines)"
	fi
}

live_port=20999 live_mib=16
build_xfer() {
	gcc -O2 -Wall -Wextra -Werror -o /tmp/rdma-xfer "$(dirname "$0")/../interop/rdma-xfer.c" \
		-lrdmacm -libverbs 2>/tmp/xfer-cc.log || { bad "cannot build rdma-xfer: $(cat /tmp/xfer-cc.log)"; return 1; }
}

if [ "$role" = peer ]; then
	for t in rc ud; do
		timeout 300 ibv_${t}_pingpong -c $pp >/tmp/$t.log 2>&1 &&
			ok "ibv_${t}_pingpong -c server ($iters iterations)" ||
			{ bad "ibv_${t}_pingpong -c server"; cat /tmp/$t.log; }
	done
	# The live QP phase's server: the buffer guest 0 WRITEs again and again, checksummed.
	# It ends on its client's disconnect; if guest 0 ends without connecting, it is stopped.
	if build_xfer; then
		/tmp/rdma-xfer -s "$ROX_IP_1_0" -p "$live_port" -m "$live_mib" >/tmp/live.log 2>&1 &
		srv=$!
		while kill -0 $srv 2>/dev/null && [ ! -e /run/rox/done ]; do sleep 0.5; done
		kill $srv 2>/dev/null
		wait $srv && ok "live QP: rdma-xfer server: $(grep -m1 'server checksum' /tmp/live.log)" ||
			{ bad "live QP: rdma-xfer server"; cat /tmp/live.log; }
	fi
	# Guest 0 pings this guest after the flood: stay up until it is done.
	wait_file /run/rox/done 300 || bad "guest 0 did not finish"
	guest_health
	exit $failed
fi

[ "$role" = target ] || fatal "unknown role"

# live_qp_phase: guest 0's side of the live QP phase (see the top); uses stats, counter, peer.
live_qp_phase() {
	local before after c check k n pd r counted_by
	build_xfer || return
	before=$(stats)
	local connect_by=$((SECONDS + 300))
	while :; do
		timeout 600 /tmp/rdma-xfer -c "$peer" -p "$live_port" -m "$live_mib" -o write \
			-L /run/rox/live.qp -W /run/rox/live.done >/tmp/live.log 2>&1
		c=$?
		[ $c = 0 ] && break
		# Only a server not listening yet (REJ reason 8, no QP published) is tried again.
		[ ! -e /run/rox/live.qp ] && grep -q REJECTED /tmp/live.log && [ $SECONDS -lt $connect_by ] || break
		sleep 1
	done
	if [ $c = 0 ] && grep -q ': equal' /tmp/live.log; then
		ok "live QP: the transfer under fire completed, checksums equal: $(grep -E 'written|equal' /tmp/live.log | tr '\n' ' ')"
	else
		bad "live QP: the transfer under fire (exit $c)"
		cat /tmp/live.log
	fi
	wait_file /run/rox/live.out 60 || { bad "live QP: the host did not report its frames"; return; }
	cat /run/rox/live.out
	live() { awk -v k="$1" '$1 == "FLOOD" && $2 == k { print $3 }' /run/rox/live.out; }
	pd=$(live path_dropped)
	[[ ${pd:-} =~ ^[0-9]+$ ]] || { bad "live QP: flood.py reported no path_dropped count"; return; }
	# COUNTER KIND...: the counter rose by at least what was sent of these kinds less what the
	# path dropped (the connection's own traffic may add duplicates or drops of its own).
	live_checks=("out_of_sequence live_psn_ahead" "duplicate_requests live_psn_behind live_bad_rkey_write"
		"rx_dropped live_unknown_opcode live_truncated" "rx_icrc_errors live_bad_icrc")
	live_sent() { local k n=0; for k in "$@"; do n=$((n + $(live "$k"))); done; echo $n; }
	live_rose() { echo $(($(counter "$after" "$1") - $(counter "$before" "$1"))); }
	live_counted() {
		local check
		for check in "${live_checks[@]}"; do
			set -- $check
			[ "$(live_rose "$1")" -ge $(($(live_sent "${@:2}") - pd)) ] || return 1
		done
	}
	after=$(stats)
	counted_by=$((SECONDS + 60))
	until live_counted || [ $SECONDS -ge $counted_by ]; do
		sleep 1
		after=$(stats)
	done
	for check in "${live_checks[@]}"; do
		set -- $check
		n=$(live_sent "${@:2}")
		r=$(live_rose "$1")
		[ "$r" -ge $((n - pd)) ] && ok "live QP: $1 rose by $r for $n sent (${*:2}; $pd dropped on the way)" ||
			bad "live QP: $1 rose by $r, flood.py sent $n (${*:2}), $pd dropped on the way"
	done
	r=$(live_rose rx_icrc_errors)
	[ "$r" -le "$(live live_bad_icrc)" ] || bad "live QP: rx_icrc_errors rose by $r, more than the bad ICRCs sent"
	r=$(live_rose naks_sent)
	[ "$r" -ge 1 ] && ok "live QP: the sequence errors were NAKed ($r NAKs)" ||
		bad "live QP: no NAK for $(live live_psn_ahead) requests far ahead of the expected PSN"
	r=$(live_rose resp_remote_access_errors)
	[ "$r" = 0 ] && ok "live QP: no R_Key checked for a duplicate WRITE (resp_remote_access_errors +0)" ||
		bad "live QP: resp_remote_access_errors rose by $r: a duplicate WRITE's R_Key was checked"
}
# Whatever happens, let the host stop flooding and guest 1 go.
trap 'touch /run/rox/flood.stop /run/rox/done' EXIT
peer=$ROX_IP_1_0
wait_ping "$peer" 120 || fatal "guest 1 ($peer) unreachable"

# stats: "name value" lines of rox_0's port counters.
stats() { rdma_counters "$dev"; }
before=$(stats)
[ -n "$before" ] || fatal "no counters of $dev/1 (rdma -j statistic)"
touch /run/rox/flood.start
wait_file /run/rox/flood.running 60 || fatal "the host did not start flooding"
sleep 1
# One ping at a time, each answered or given up on after 10 s, until told to stop: how many
# were answered does not depend on how many were still in flight when the pingpongs ended.
pinger() {
	local sent=0 got=0
	while [ ! -e /tmp/flood-ping.stop ]; do
		sent=$((sent + 1))
		ping -c 1 -W 10 "$peer" >/dev/null 2>&1 && got=$((got + 1))
		sleep 0.5
	done
	echo "$sent $got" >/tmp/ping.counts
}
rm -f /tmp/flood-ping.stop /tmp/ping.counts
pinger &
pinger=$!
start=$(date +%s)
for t in rc ud; do
	cmd="ibv_${t}_pingpong -c $pp $peer"
	# Retry only while the server is not listening yet, for up to 300 s (its guest may be slower).
	connect_by=$((SECONDS + 300))
	while :; do
		timeout 300 $cmd >/tmp/$t.log 2>&1
		c=$?
		[ $c = 0 ] && break
		grep -q "Couldn't connect" /tmp/$t.log || break
		[ $SECONDS -lt $connect_by ] || break
		sleep 1
	done
	if [ $c = 0 ] && grep -q 'iters in' /tmp/$t.log; then
		ok "ibv_${t}_pingpong -c during the flood: $(grep 'iters in' /tmp/$t.log)"
	else
		bad "ibv_${t}_pingpong -c during the flood (exit $c)"
		cat /tmp/$t.log
	fi
done
touch /tmp/flood-ping.stop
wait $pinger
touch /run/rox/flood.stop
wait_file /run/rox/flood.out 60 || fatal "the host did not report the flood"
echo "target: pingpongs took $(($(date +%s) - start)) s"
cat /run/rox/flood.out

counter() { echo "$1" | awk -v n="$2" '$1 == n { print $2 }'; }
rose() { echo $(($(counter "$after" "$1") - $(counter "$before" "$1"))); }
# Frames that never reached rox-nic (dropped by the host's interface or guest 0's tap), and
# netdev-bound frames rox-nic dropped because the netdev did not take them: all any count
# below may fall short by.
path_dropped=$(awk '$1 == "FLOOD" && $2 == "path_dropped" { print $3 }' /run/rox/flood.out)
[[ ${path_dropped:-} =~ ^[0-9]+$ ]] || fatal "flood.py reported no path_dropped count"
flooded() { # flooded KIND...: frames of these kinds flood.py sent
	local k n=0
	for k in "$@"; do n=$((n + $(awk -v k="$k" '$1 == "FLOOD" && $2 == k { print $3 }' /run/rox/flood.out))); done
	echo $n
}
# COUNTER EXTRA KIND...: each drop counter, what else may raise it, the flood kinds it counts
# (checked by expect below).
drop_checks=("rx_icrc_errors 0 bad_icrc" "rx_unknown_qp 0 unknown_qp" "rx_bad_key 0 bad_pkey"
	"port_drop_malformed 0 truncated garbage bad_ip ipv4_options" "port_drop_vlan 0 vlan"
	"port_drop_other_mac 50 other_mac" "port_drop_oversize 0 oversize")
# all_counted: every counter below has counted at least what was sent of its kinds, less what
# was dropped on the way.
all_counted() {
	local c
	for c in "${drop_checks[@]}"; do
		set -- $c
		local name=$1
		shift 2
		[ "$(rose "$name")" -ge $(($(flooded "$@") - path_dropped)) ] || return 1
	done
	[ $(($(rose port_to_netdev) + $(rose port_drop_netdev))) -ge $(($(flooded broadcast multicast) - path_dropped)) ]
}
# rox-nic counts a frame when its data path takes it from its tap, and a host that ran it late
# may still hold the last flood frames there: read the counters until they have caught up
# (up to 60 s; the checks below say which did not).
after=$(stats)
counted_by=$((SECONDS + 60))
until all_counted || [ $SECONDS -ge $counted_by ]; do
	sleep 1
	after=$(stats)
done
netdev_dropped=$(rose port_drop_netdev)
echo "target: $path_dropped flood frames dropped on the way, $netdev_dropped netdev frames dropped by rox-nic"
# Every ping, less what was dropped on the way, is answered.
read -r sent_pings got_pings </tmp/ping.counts
[ "${sent_pings:-0}" -gt 0 ] && [ "$got_pings" -ge $((sent_pings - path_dropped - netdev_dropped)) ] &&
	ok "netdev during the flood: ping $peer answered $got_pings of $sent_pings" ||
	bad "netdev during the flood: ping $peer answered ${got_pings:-0} of ${sent_pings:-0}"
ping -c 3 -W 10 "$peer" >/tmp/ping.log 2>&1 && ok "netdev after the flood: ping $peer answers" ||
	bad "netdev after the flood: $(tail -2 /tmp/ping.log)"
refused=$(grep -c '^FLOOD refused_' /run/rox/flood.out)
total=0
for k in truncated garbage bad_ip bad_icrc unknown_qp bad_pkey ipv4_options vlan other_mac oversize broadcast multicast; do
	n=$(flooded $k)
	[ "$n" -gt 0 ] || bad "flood.py sent no $k frames"
	total=$((total + n))
done
[ "$refused" = 0 ] && ok "flood.py sent every kind ($total frames)" || bad "the kernel refused some flood frames: $(grep refused_ /run/rox/flood.out)"

# expect COUNTER EXTRA KIND...: the counter rose by what was sent of these kinds, less what was
# dropped on the way, and by at most what was sent plus EXTRA (frames of the lab's own traffic
# that count there too: other_mac takes the unicast the bridge floods before it has learnt a
# guest's MAC; the other drop counters nothing else raises).
expect() {
	local counter=$1 extra=$2 sent r
	shift 2
	sent=$(flooded "$@")
	r=$(rose "$counter")
	if [ "$r" -lt $((sent - path_dropped)) ]; then
		bad "$counter rose by $r, flood.py sent $sent ($*), $path_dropped dropped on the way"
	elif [ "$r" -gt $((sent + extra)) ]; then
		bad "$counter rose by $r, more than the $sent flood.py sent ($*) + $extra"
	else
		ok "$counter rose by $r for $sent sent ($*; $path_dropped dropped on the way)"
	fi
}
for c in "${drop_checks[@]}"; do
	# shellcheck disable=SC2086 # the words of one check
	expect $c
done
# Broadcast and multicast go to the netdev, delivered or dropped there (port_drop_netdev),
# with the guests' own ARP, ND and IP traffic on top: a lower bound only.
sent=$(flooded broadcast multicast)
r=$(( $(rose port_to_netdev) + netdev_dropped ))
[ "$r" -ge $((sent - path_dropped)) ] &&
	ok "port_to_netdev + port_drop_netdev rose by $r for $sent broadcast/multicast sent" ||
	bad "port_to_netdev + port_drop_netdev rose by $r, flood.py sent $sent broadcast/multicast, $path_dropped dropped on the way"
echo "target: port_rx_frames rose by $(rose port_rx_frames), port_drop_netdev by $(rose port_drop_netdev)"
live_qp_phase
guest_health
exit $failed
