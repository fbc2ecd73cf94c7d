#!/bin/bash
# Capture test of the rox port: produce a pcap of every packet kind rox-nic sends (RC/UC/UD
# opcodes, ACK/NAK/RNR NAK, READ responses, atomic ACKs; IPv4 and IPv6) as the Ethernet frames
# its port puts on the wire, with the roce_capture test, then decode it with tshark from the
# toolchain root. Fails if any frame is not Ethernet, if any UDP 4791 frame is not decoded as
# InfiniBand (RoCEv2), or if a frame is malformed or carries an expert warning/error (bad
# lengths or checksums). tshark 4.4 shows the ICRC but does not verify it: every frame's ICRC
# is recomputed by tests/host/icrc-check.py, written from IBA annex 17 apart from rox-nic's
# code (and by roce_port's and device_port's capture tests, and every receive in the engine
# tests).
#
# Usage: tests/host/tshark-capture.sh [--pcap FILE [--bridge]]
#   --pcap FILE  check an existing capture instead (inside the clone or the cache, which the root
#                sees as /rox and /cache)
#   --bridge     FILE is a capture of a lab bridge (tests/interop/run --capture): it also holds
#                ARP, IP, TCP... of the guests' netdevs; every RoCEv2 frame (UDP 4791) must
#                decode as InfiniBand with no malformed or flagged field, and RoCEv2 frames
#                must come from at least two MACs (rox's and rxe's). A full interop capture is
#                over a gigabyte: tshark reads a sample of it, every frame except the MIDDLE
#                packets of multi-packet messages (SEND, RDMA WRITE, READ response), of which it
#                keeps those whose PSN is a multiple of 64 (rox-pcap-check reads every frame).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/scripts/lib.sh"

fail() {
	printf 'tshark-capture: FAIL: %s\n' "$*" >&2
	exit 1
}

pcap= bridge=
if [ "${1:-}" = "--pcap" ]; then
	pcap=$(realpath "${2:?--pcap needs a file}")
	[ "${3:-}" != --bridge ] || bridge=1
else
	out_dir="$top/target/roce-capture"
	mkdir -p "$out_dir"
	pcap="$out_dir/roce.pcap"
	rm -f "$pcap"
	log "writing capture $pcap"
	ROX_PCAP_OUT="$pcap" cargo test --quiet --manifest-path "$top/Cargo.toml" -p rox-nic \
		--test roce_capture -- --nocapture >&2 || fail "the roce_capture test failed"
fi
[ -s "$pcap" ] || fail "no capture at $pcap"
case "$pcap" in
"$top"/*) in_root_pcap="/rox/${pcap#"$top"/}" ;;
"$ROX_CACHE"/*) in_root_pcap=$(cache_path_in_root "$pcap") ;;
*) fail "capture $pcap is outside the clone $top and the cache $ROX_CACHE (the root sees only those)" ;;
esac

root=$(root_dir)
[ -x "$root/usr/bin/tshark" ] || fail "no tshark in the toolchain root $root (run 'make setup')"

# tshark's own errors (bad filter, unreadable file) fail the script with their message.
tshark() {
	local err rc=0
	err=$(mktemp)
	in_root tshark -r "$in_root_pcap" "$@" 2>"$err" || rc=$?
	grep -v 'Running as user "root"' "$err" >&2 || true
	rm -f "$err"
	[ $rc = 0 ] || fail "tshark $* exited with $rc"
}

frames=$(tshark -T fields -e frame.number | wc -l)
[ "$frames" -gt 0 ] || fail "tshark read no frames from $pcap"

if [ -n "$bridge" ]; then
	# BTH at the UDP payload: opcode byte 0, PSN's low byte 11 (IPv4 without options: udp[];
	# IPv6 without extension headers: the UDP header at ip6[40]).
	middle4='udp dst port 4791 and (udp[8] = 0x01 or udp[8] = 0x07 or udp[8] = 0x0e) and udp[19] & 0x3f != 0'
	middle6='ip6 and ip6[6] = 17 and ip6[42:2] = 4791 and (ip6[48] = 0x01 or ip6[48] = 0x07 or ip6[48] = 0x0e) and ip6[59] & 0x3f != 0'
	sampled=${pcap%.pcap}.sampled.pcap
	in_root tcpdump -r "$in_root_pcap" -w "${in_root_pcap%.pcap}.sampled.pcap" \
		"not (($middle4) or ($middle6))" 2>/dev/null || fail "tcpdump could not sample $pcap"
	in_root_pcap=${in_root_pcap%.pcap}.sampled.pcap
	sampled_frames=$(tshark -T fields -e frame.number | wc -l)
	echo "tshark-capture: $frames frames, $sampled_frames in the sample tshark decodes ($sampled)"
	roce=$(tshark -Y 'udp.dstport == 4791' -T fields -e frame.number | wc -l)
	[ "$roce" -gt 0 ] || fail "no RoCEv2 frames (UDP 4791) among the $frames frames of $pcap"
	not_ib=$(tshark -Y 'udp.dstport == 4791 && !infiniband' -T fields -e frame.number)
	[ -z "$not_ib" ] || fail "RoCEv2 frames not decoded as InfiniBand: $(echo $not_ib | head -c 300)"
	# The interop cases carry plain verbs payloads: tshark's payload heuristics (RPC-over-RDMA,
	# Ethernet over IB, ...) guess at those bytes and report their own exceptions, which says
	# nothing about the RoCEv2 frame. Only the transport is judged here.
	no_payload_guess=()
	for h in smcr_infiniband smb_direct_infiniband rpcrdma_infiniband nvme_rdma lnet_ib \
		iser_infiniband eth_over_ib mellanox_eoib sdp_infiniband fc_infiniband; do
		no_payload_guess+=(--disable-heuristic "$h")
	done
	# rdma_rxe sends RoCEv2 over IPv6 with UDP checksum 0, which RoCEv2 receivers accept (the
	# ICRC covers the packet; rox takes 0 or a correct checksum) and tshark flags per RFC 8200:
	# counted per sender below, not a failure.
	zero6='ipv6 && udp.checksum == 0'
	bad=$(tshark "${no_payload_guess[@]}" -Y "udp.dstport == 4791 && (_ws.malformed || \
(_ws.expert.severity >= \"Warning\" && !($zero6)))" -T fields -e frame.number -e _ws.expert.message)
	[ -z "$bad" ] || fail "malformed or flagged RoCEv2 frames:"$'\n'"$(echo "$bad" | head -20)"
	zero=$(tshark -Y "udp.dstport == 4791 && $zero6" -T fields -e eth.src | sort | uniq -c | tr -s ' ')
	[ -z "$zero" ] || echo "tshark-capture: note: IPv6 RoCEv2 frames with UDP checksum 0, per source MAC:$zero"
	macs=$(tshark -Y 'udp.dstport == 4791' -T fields -e eth.src | sort -u | wc -l)
	[ "$macs" -ge 2 ] || fail "RoCEv2 frames from $macs MAC(s): the bridge capture should hold both peers'"
	opcodes=$(tshark -Y 'udp.dstport == 4791' -T fields -e infiniband.bth.opcode | sort -n | uniq | wc -l)
	printf 'tshark-capture: OK: %d frames on the bridge; of the %d sampled, %d RoCEv2 from %d MACs all decoded as InfiniBand (%d distinct BTH opcodes), none malformed or flagged\n' \
		"$frames" "$sampled_frames" "$roce" "$macs" "$opcodes"
	rm -f "$sampled"
	exit 0
fi

not_eth=$(tshark -T fields -e frame.number -e frame.protocols | awk -F'\t' '$2 !~ /^eth:ethertype:/ {print $1}')
[ -z "$not_eth" ] || fail "frames that are not Ethernet II: $(echo $not_eth)"

roce=$(tshark -Y 'udp.dstport == 4791' -T fields -e frame.number | wc -l)
[ "$roce" -gt 0 ] || fail "no UDP 4791 frame in $pcap"
not_roce=$(tshark -Y 'udp.dstport == 4791' -T fields -e frame.number -e frame.protocols |
	awk -F'\t' '$2 !~ /^eth:ethertype:ipv?6?:udp:infiniband/ {print $1}')
[ -z "$not_roce" ] || fail "UDP 4791 frames not decoded as RoCEv2 (InfiniBand): $(echo $not_roce)"

bad=$(tshark -Y '_ws.malformed || _ws.expert.severity >= "Warning"' \
	-T fields -e frame.number -e _ws.expert.message)
[ -z "$bad" ] || fail "malformed or flagged frames:"$'\n'"$bad"

# The ICRCs against an implementation of annex 17 that is not rox-nic's (tests/host/icrc-check.py).
icrc=$(python3 "$top/tests/host/icrc-check.py" "$pcap" --min-roce "$roce") || fail "$icrc"
echo "$icrc"
summary=$(tshark -T fields -e infiniband.bth.opcode | sort -n | uniq | wc -l)
printf 'tshark-capture: OK: %d Ethernet frames, %d RoCEv2 frames all decoded as InfiniBand over UDP 4791 (%d distinct BTH opcodes), none malformed or flagged\n' \
	"$frames" "$roce" "$summary"
