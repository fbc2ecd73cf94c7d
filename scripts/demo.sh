#!/usr/bin/env bash
# make demo: set everything up (cached), then
#   1. one guest with two rox NICs on the lab bridge: rox.ko loaded, the devices as the RDMA
#      stack sees them, and unmodified ibv_rc_pingpong and ib_write_bw between rox_0 (server)
#      and rox_1 (client) — their RoCEv2 frames cross the Linux bridge between their taps;
#   2. two guests on one bridge (guest 0: a rox NIC; guest 1: a rox NIC and a virtio-net NIC
#      with rdma_rxe on it): ibv_rc_pingpong rox_0 -> rox_0, then rox <-> rdma_rxe in both
#      directions, with the bridge captured (rox-lab --capture);
#   3. a few of the captured rox <-> rxe RoCEv2 frames, decoded by tshark;
#   4. one RDMA WRITE's life, from part 1's WQE trace (both rox-nics record every WQE, the
#      newest 4096 records; docs/debugging.md): the last WRITE of an ib_write_lat run as a text
#      timeline, and the whole trace as Perfetto JSON and that WRITE as an SVG timeline.
# ROX_GUEST_LOCK=<file>: take that flock before the guests boot (a host shared with other runs).
# ROX_LIBROX=$ROX_CACHE/.../librox-rdmav34.so: use that librox build (guests load it through
# RDMAV_DRIVERS) instead of building and installing librox into the shared root.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${ROX_KERNEL_FLAVOUR:-release}
t0=$(date +%s)
# Each step's wall time (a newcomer's first hour, docs/kernel.md), printed at the end as make
# test prints its stages, also when a step failed.
lap_start=$t0 laps=
lap() {
	local now
	now=$(date +%s)
	laps+=$(printf '%-14s %5ss' "$1" $((now - lap_start)))$'\n'
	lap_start=$now
}
# shellcheck disable=SC2317 # called by the trap
print_laps() {
	local rc=$?
	echo
	echo "== demo timings ($flavour kernel)"
	printf '%s' "$laps"
	printf '%-14s %5ss\n' total $(( $(date +%s) - t0 ))
	return $rc
}
trap print_laps EXIT
"$ROX_TOP/scripts/setup-root.sh"
lap root
"$ROX_TOP/scripts/setup-kernel.sh" "$flavour"
lap kernel
"$ROX_TOP/scripts/build-module.sh" "$flavour"
lap module
drivers=
if [ -n "${ROX_LIBROX:-}" ]; then
	case $ROX_LIBROX in "$ROX_CACHE"/*-rdmav34.so) ;; *) die "ROX_LIBROX must be a lib<x>-rdmav34.so under $ROX_CACHE" ;; esac
	[ -f "$ROX_LIBROX" ] || die "no file $ROX_LIBROX"
	# libibverbs appends the suffix; providers named here register before the configured ones.
	drivers="export RDMAV_DRIVERS=$(cache_path_in_root "${ROX_LIBROX%-rdmav34.so}")"
else
	"$ROX_TOP/scripts/build-provider.sh"
fi
lap provider
(cd "$ROX_TOP" && cargo build --release -p rox-nic -p rox-lab)
lap device
# On a host shared with other guest runs: ROX_GUEST_LOCK=<file> holds that flock for the guest
# parts only (not the builds); the wait for it is its own line in the timings.
if [ -n "${ROX_GUEST_LOCK:-}" ]; then
	exec 9>>"$ROX_GUEST_LOCK"
	flock -w 900 9 || die "could not take the guest lock $ROX_GUEST_LOCK in 900 s"
	lap lock-wait
fi
ko=$(cache_path_in_root "$(module_dir "$flavour")")/rox.ko

# Guest-side helpers, prepended to each guest command: echo a command, then run it; a client
# that tries again only while its server is not listening yet.
helpers="$drivers"'
. tests/guest/lab.sh
show() { echo; echo "\$ $*"; "$@"; }
client() {
	local out rc
	for _ in $(seq 90); do
		out=$(timeout 120 "$@" 2>&1) && { echo "$out"; return 0; }
		rc=$?
		case $out in *"Couldn'"'"'t connect to"*) sleep 1 ;; *) echo "$out"; return $rc ;; esac
	done
	echo "$out"; return 1
}
'

trace_dir=$ROX_CACHE/demo/trace-$(date +%Y%m%d-%H%M%S)
mkdir -p "$trace_dir"
echo
echo "=== 1. one guest, two rox NICs on one Linux bridge"
# The WQE trace of both rox-nics (part 4): the ring keeps the newest records, so the last
# thing part 1 runs, an ib_write_lat, is what part 4 shows.
ROX_NIC_TRACE=4096 ROX_NIC_TRACE_DIR=$trace_dir \
"$ROX_TOP/qemu/vm" --flavour "$flavour" --rox 2 -- bash -c "$helpers
	set -e
	show uname -r
	show lspci -nn -d 524f:
	show insmod $ko
	show bash -c 'dmesg --notime | grep -E \"^rox[ :]\" | grep -v ib_mad'
	wait_port_active rox_0; wait_port_active rox_1
	show rdma link
	show ibv_devices
	show ibv_devinfo -d rox_0
	g0=\$(gid_index rox_0) g1=\$(gid_index rox_1)
	echo; echo \"\\\$ ibv_rc_pingpong -d rox_0 -g \$g0 -n 1000 (server)  &&  ibv_rc_pingpong -d rox_1 -g \$g1 -n 1000 \$ROX_IP_0_0 (client)\"
	ibv_rc_pingpong -d rox_0 -g \$g0 -n 1000 >/tmp/server.log 2>&1 &
	client ibv_rc_pingpong -d rox_1 -g \$g1 -n 1000 \$ROX_IP_0_0
	wait \$!
	echo; echo \"\\\$ ib_write_bw -d rox_0 -x \$g0 -s 65536 -n 2000 (server)  &&  ib_write_bw -d rox_1 -x \$g1 -s 65536 -n 2000 \$ROX_IP_0_0 (client)\"
	ib_write_bw -d rox_0 -x \$g0 -s 65536 -n 2000 -F >/tmp/server.log 2>&1 &
	client ib_write_bw -d rox_1 -x \$g1 -s 65536 -n 2000 -F \$ROX_IP_0_0
	wait \$!
	show rdma statistic show link rox_1/1
	echo; echo \"\\\$ ib_write_lat -d rox_0 -x \$g0 -s 4096 -n 10 (server)  &&  ib_write_lat -d rox_1 -x \$g1 -s 4096 -n 10 \$ROX_IP_0_0 (client)\"
	ib_write_lat -d rox_0 -x \$g0 -s 4096 -n 10 -F >/tmp/server.log 2>&1 &
	client ib_write_lat -d rox_1 -x \$g1 -s 4096 -n 10 -F \$ROX_IP_0_0
	wait \$!
"
lap part1-guest

mkdir -p "$ROX_CACHE/demo"
pcap=$ROX_CACHE/demo/demo-$(date +%Y%m%d-%H%M%S).pcap
echo
echo "=== 2. two guests on one bridge: guest 0 rox_0 (10.50.0.11), guest 1 rox_0 (10.50.0.21) and rxe0 on virtio-net (10.50.0.22)"
# Guest 1 serves steps 1 and 2 and is the client of step 3; ports 19001-19003, one per step.
# Part 3 decodes the capture even when part 2 failed; the demo's status is part 2's.
lab_rc=0
"$ROX_TOP/qemu/lab" --flavour "$flavour" --timeout 900 --capture "$pcap" \
	--guest rox --cmd "$helpers
	set -e
	insmod $ko >/dev/null; wait_port_active rox_0
	g=\$(gid_index rox_0)
	wait_ping \$ROX_IP_1_0
	echo \"\\\$ ibv_rc_pingpong -d rox_0 -g \$g -n 1000 -p 19001 \$ROX_IP_1_0    # guest 0 rox_0 -> guest 1 rox_0\"
	client ibv_rc_pingpong -d rox_0 -g \$g -n 1000 -p 19001 \$ROX_IP_1_0
	wait_ping \$ROX_IP_1_1
	echo \"\\\$ ibv_rc_pingpong -d rox_0 -g \$g -n 200 -p 19002 \$ROX_IP_1_1    # guest 0 rox_0 -> guest 1 rxe0\"
	client ibv_rc_pingpong -d rox_0 -g \$g -n 200 -p 19002 \$ROX_IP_1_1
	echo \"\\\$ ibv_rc_pingpong -d rox_0 -g \$g -n 200 -p 19003    # server for guest 1 rxe0 -> guest 0 rox_0\"
	timeout 150 ibv_rc_pingpong -d rox_0 -g \$g -n 200 -p 19003
" \
	--guest rox,virtio --cmd "$helpers
	set -e
	insmod $ko >/dev/null; wait_port_active rox_0
	modprobe rdma_rxe
	show rdma link add rxe0 type rxe netdev \$ROX_IF_1
	wait_port_active rxe0
	show rdma link
	gr=\$(gid_index rox_0) gx=\$(gid_index rxe0)
	timeout 300 ibv_rc_pingpong -d rox_0 -g \$gr -n 1000 -p 19001 >/tmp/s1.log 2>&1 || { cat /tmp/s1.log; exit 1; }
	timeout 150 ibv_rc_pingpong -d rxe0 -g \$gx -n 200 -p 19002 >/tmp/s2.log 2>&1 || { cat /tmp/s2.log; exit 1; }
	echo '(guest 1 rxe0, server of guest 0 rox_0 -> guest 1 rxe0:)'; grep -E 'iters|bytes' /tmp/s2.log
	wait_ping \$ROX_IP_0_0
	echo \"\\\$ ibv_rc_pingpong -d rxe0 -g \$gx -n 200 -p 19003 \$ROX_IP_0_0    # guest 1 rxe0 -> guest 0 rox_0\"
	client ibv_rc_pingpong -d rxe0 -g \$gx -n 200 -p 19003 \$ROX_IP_0_0
" || lab_rc=$?
lap part2-lab

echo
echo "=== 3. RoCEv2 frames between rox (10.50.0.11) and rxe (10.50.0.22), captured on the bridge ($pcap)"
in_pcap=$(cache_path_in_root "$pcap")
rxe_frames='infiniband && ip.addr == 10.50.0.22 && ip.addr == 10.50.0.11'
# tshark's -c counts frames read, not shown: the first lines of the filtered view instead (sed
# reads to the end, so tshark never sees a closed pipe). Its "running as root" note is dropped.
tshark() { "$ROX_TOP/scripts/in-root" tshark -r "$in_pcap" -Y "$rxe_frames" "$@" 2> >(grep -v 'Running as user' >&2); }
echo "\$ tshark -r $in_pcap -Y '$rxe_frames' | sed -n 1,10p"
tshark | sed -n 1,10p
fields=(-e frame.number -e ip.src -e ip.dst -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn
	-e infiniband.bth.a -e infiniband.aeth.syndrome -e infiniband.aeth.msn)
echo
echo "\$ tshark -r $in_pcap -Y '$rxe_frames' -E header=y -T fields ${fields[*]} | sed -n 1,11p"
tshark -E header=y -T fields "${fields[@]}" | sed -n 1,11p
first=$(tshark -T fields -e frame.number | sed -n 1p)
if [ -n "$first" ]; then
	echo
	echo "\$ tshark -r $in_pcap -Y 'frame.number == $first' -O infiniband    # the first one in full"
	"$ROX_TOP/scripts/in-root" tshark -r "$in_pcap" -Y "frame.number == $first" -O infiniband 2> >(grep -v 'Running as user' >&2)
else
	echo "demo: no RoCEv2 frames between 10.50.0.11 and 10.50.0.22 in the capture" >&2
	[ "$lab_rc" != 0 ] || lab_rc=1
fi
lap part3-tshark
echo
echo "=== 4. one RDMA WRITE's life: the last WRITE of part 1's ib_write_lat, as both rox-nics traced it"
traces=("$trace_dir/g0-rox0.wqe-trace" "$trace_dir/g0-rox1.wqe-trace")
trace_rc=0
rox_trace=("$ROX_TOP/target/release/rox-trace" "${traces[@]}" --name rox_0 --name rox_1)
echo "\$ rox-trace ${traces[*]} --name rox_0 --name rox_1 --wqe RDMA_WRITE"
"${rox_trace[@]}" --wqe RDMA_WRITE || trace_rc=$?
"${rox_trace[@]}" --json "$trace_dir/trace.json" 2>/dev/null || trace_rc=$?
python3 "$ROX_TOP/tests/lib/trace_svg.py" "$trace_dir/trace.json" -o "$trace_dir/write.svg" \
	--wqe RDMA_WRITE --nth -1 --title "make demo: one RDMA WRITE (4096 B) of ib_write_lat, rox_1 <-> rox_0" \
	>/dev/null || trace_rc=$?
echo "Perfetto (ui.perfetto.dev, every WQE of the trace): $trace_dir/trace.json"
echo "SVG timeline of that WRITE: $trace_dir/write.svg"
lap part4-trace
[ "$trace_rc" = 0 ] || die "part 4: the WQE trace of part 1 could not be read or drawn (above)"
[ "$lab_rc" = 0 ] || die "part 2 failed (rox-lab exit $lab_rc) or captured no rox <-> rxe frames"
