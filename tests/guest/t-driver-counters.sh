#!/bin/bash
# rox_0's counters as monitoring tools read them (guest; skips without a rox device): the PMA
# counters in sysfs ports/1/counters/ (rox.ko's process_mad answering PortCounters and
# PortCountersExtended) and the hw_counters of `rdma statistic` (mlx5's names for the
# transport's events). counters.c runs known traffic on one RC QP pair of rox_0 connected to
# itself over the IPv4 GID (same-device loopback: each packet is sent and received by rox_0)
# and counters_check.py checks that every counter grew by exactly what that traffic makes:
#   - N RDMA WRITEs, READs and fetch-and-adds, one packet each way per operation (a request
#     and its ACK / READ response / atomic ACK), in packets, 4-octet data words and requests;
#   - one WRITE with a bad rkey (right index, other key part): one responder access error,
#     one NAK remote access error received, one requester error completion.
# Every error counter stays unchanged for the good traffic; a tail probe (a loaded host) is
# counted as its operation answered again.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
command -v gcc >/dev/null || skip "no C compiler in the guest"
command -v python3 >/dev/null || skip "no python3 in the guest"

DEV=rox_0
GID_INDEX=1 # the IPv4 GID, as t-provider-pingpong's IPv4 runs use
OPS=20
SIZE=512 # one packet at the path MTU (1024) the program sets; a multiple of 4
here=$(dirname "$0")
check=$here/counters_check.py
counters=/sys/class/infiniband/$DEV/ports/1/counters
[ -d "$counters" ] || fail "$counters missing: ib_core found no PMA (process_mad) on $DEV"
for name in port_xmit_data port_rcv_data port_xmit_packets port_rcv_packets \
	unicast_xmit_packets multicast_rcv_packets port_rcv_errors port_xmit_discards; do
	[ -r "$counters/$name" ] || fail "no $counters/$name"
done

# The GID's IP version sets the header size in every packet.
gid=$(cat "/sys/class/infiniband/$DEV/ports/1/gids/$GID_INDEX")
case $gid in
0000:0000:0000:0000:0000:ffff:*) ip_header=20 ;;
*) ip_header=40 ;;
esac
# RoCEv2 octets from the IP header through the ICRC: IP, UDP 8, BTH 12, ICRC 4, and
# RETH 16 (WRITE, READ request), AETH 4 (ACK, NAK, READ response), AtomicETH 28,
# AtomicAckETH 8.
base=$((ip_header + 8 + 12 + 4))
write_octets=$(((base + 16 + SIZE) + (base + 4)))
read_octets=$(((base + 16) + (base + 4 + SIZE)))
atomic_octets=$(((base + 28) + (base + 4 + 8)))

work=$(mktemp -d /tmp/rox-counters.XXXXXX)
# Leave no rox.ko behind for the next test (t-driver-probe loads its own), whatever happens.
trap 'rm -rf "$work"; grep -q "^rox " /proc/modules && rmmod rox' EXIT
gcc -O1 -Wall -Wextra -Werror -I"$here" -o "$work/counters" "$here/counters.c" -libverbs ||
	fail "cannot compile the test program"

# The error and event counters good traffic must leave alone.
quiet=(out_of_sequence duplicate_request packet_seq_err implied_nak_seq_err
	local_ack_timeout_err rnr_nak_retry_err req_cqe_error resp_cqe_error
	req_remote_access_errors resp_remote_access_errors req_remote_invalid_request
	resp_local_length_error np_cnp_sent np_ecn_marked_roce_packets rp_cnp_handled
	rp_cnp_ignored rx_xrc_domain_errors roce_adp_retrans)
failed=0
# run <operation> <count> <octets per operation> <expectations...>: runs the traffic between
# two snapshots and checks the traffic counters and <expectations> (source.name=delta);
# every quiet counter not named there must not move. A tail probe (the data-path thread lost
# its core for longer than the probe timeout on a loaded host) sends the last request again
# and is answered again as a duplicate: one operation's packets and octets more, counted by
# roce_adp_retrans and duplicate_request (as tests/device_counters.rs on the host). A run may
# hold at most MAX_PROBES of them (a probe timer firing on every operation is a bug, loaded
# host or not). The bad-key run's NAK ends the QP: a probe sent before it came back may be
# answered or not, so its counts lie between the WRITE alone and the WRITE sent twice.
MAX_PROBES=3
# span <low> <high>: an expectation of exactly <low>, or of <low>..<high>.
span() { if [ "$1" = "$2" ]; then echo "$1"; else echo "$1..$2"; fi; }
run() {
	local op=$1 count=$2 octets=$3
	shift 3
	local expect=("$@") name probes
	echo "--- $count x $op ($octets octets each, $ip_header-byte IP header)"
	python3 "$check" snapshot $DEV "$work/before.json" || fail "snapshot failed"
	"$work/counters" $DEV $GID_INDEX "$op" "$count" $SIZE || fail "$op traffic failed"
	probes=$(python3 "$check" settle $DEV "$work/before.json" "$work/after.json") ||
		fail "snapshot failed"
	if [ "$probes" -gt "$MAX_PROBES" ]; then
		echo "FAIL: $probes tail probes for $count x $op (at most $MAX_PROBES)"
		failed=$((failed + 1))
		return
	fi
	[ "$probes" = 0 ] || echo "($probes tail probe(s): counted as operations answered again)"
	local low=$((count + probes)) high=$((count + probes)) dups=$probes
	if [ "$op" = badkey ]; then
		low=$count
		dups=$(span 0 "$probes")
	fi
	expect+=("rdma.roce_adp_retrans=$probes" "rdma.duplicate_request=$dups")
	local packets total words
	packets=$(span $((2 * low)) $((2 * high)))
	total=$(span $((low * octets)) $((high * octets)))
	words=$(span $((low * octets / 4)) $((high * octets / 4)))
	for name in "${quiet[@]}"; do
		[[ " ${expect[*]} " == *" rdma.$name="* ]] || expect+=("rdma.$name=0")
	done
	python3 "$check" delta "$work/before.json" "$work/after.json" \
		sysfs.port_xmit_packets=$packets sysfs.port_rcv_packets=$packets \
		sysfs.unicast_xmit_packets=$packets sysfs.unicast_rcv_packets=$packets \
		sysfs.multicast_xmit_packets=0 sysfs.multicast_rcv_packets=0 \
		sysfs.port_xmit_data=$words sysfs.port_rcv_data=$words \
		sysfs.port_rcv_errors=0 sysfs.port_xmit_discards=0 \
		rdma.tx_packets=$packets rdma.rx_packets=$packets \
		rdma.tx_bytes=$total rdma.rx_bytes=$total "${expect[@]}" ||
		failed=$((failed + 1))
}

run write $OPS $write_octets rdma.rx_write_requests=$OPS rdma.rx_read_requests=0 rdma.rx_atomic_requests=0
run read $OPS $read_octets rdma.rx_read_requests=$OPS rdma.rx_write_requests=0 rdma.rx_atomic_requests=0
run atomic $OPS $atomic_octets rdma.rx_atomic_requests=$OPS rdma.rx_write_requests=0 rdma.rx_read_requests=0
run badkey 1 $write_octets rdma.rx_write_requests=1 rdma.resp_remote_access_errors=1 \
	rdma.req_remote_access_errors=1 rdma.req_cqe_error=1 rdma.resp_cqe_error=0

# The hw_counters sysfs view reads the same counters as rdma statistic.
hw=/sys/class/infiniband/$DEV/ports/1/hw_counters
for name in req_remote_access_errors resp_remote_access_errors rx_write_requests; do
	[ -r "$hw/$name" ] || fail "no $hw/$name"
done
[ "$failed" = 0 ] || fail "$failed of 4 traffic runs counted other than the traffic they made"

# perfquery (infiniband-diags, scripts/root-extras.txt) would ask the same PMA through umad (a
# PerfMgt GET on QP1), but libibmad opens its port by registering umad agents for the SMI
# class (QP0) as well, and ib_core has no QP0 on a RoCE port: ib_register_mad_agent refuses
# IB_QPT_SMI where !rdma_cap_ib_smi (drivers/infiniband/core/mad.c), so perfquery stops with
# "client_register for mgmt 1 failed" before sending anything, on any RoCE HCA
# (docs/driver.md "PMA counters"). The check: where perfquery answers, each counter it reads
# lies between sysfs before and after it (its own MADs are RoCE packets too); on an Ethernet
# port the refusal must be that one (any other failure fails).
command -v perfquery >/dev/null || fail "perfquery is not in the root (infiniband-diags: scripts/root-extras.txt)"
modprobe ib_umad 2>/dev/null
link_layer=$(cat "/sys/class/infiniband/$DEV/ports/1/link_layer")
for extended in "" -x; do
	python3 "$check" snapshot $DEV "$work/pq-before.json" || fail "snapshot failed"
	pq_out=$(perfquery $extended -C $DEV -P 1 2>&1)
	pq_rc=$?
	python3 "$check" snapshot $DEV "$work/pq-after.json" || fail "snapshot failed"
	if [ $pq_rc = 0 ]; then
		echo "$pq_out" >"$work/pq.txt"
		python3 "$check" perfquery "$work/pq-before.json" "$work/pq.txt" "$work/pq-after.json" ||
			fail "perfquery $extended read other values than sysfs"
	elif [ "$link_layer" = Ethernet ] && grep -q "client_register for mgmt 1 failed" <<<"$pq_out"; then
		echo "perfquery $extended -C $DEV -P 1: refused on a RoCE port (no SMI agent): $(grep -m1 'client_register' <<<"$pq_out")"
	else
		echo "$pq_out" | tail -5
		fail "perfquery $extended -C $DEV -P 1 failed (exit $pq_rc) other than by the RoCE port's missing SMI agent (link layer $link_layer)"
	fi
done
echo "$DEV's PMA counters and mlx5-named hw_counters count exactly the traffic and errors made"
