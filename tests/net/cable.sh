#!/bin/bash
# Guest side of tests/net/cable-pair: guest 1 serves, guest 0 connects, over NIC 0 (the cable).
#   cable.sh server|client
# ibv_rc_pingpong -c and ibv_srq_pingpong -c, perftest's ib_write_bw, ib_read_bw and
# ib_send_lat (tests/net/pair.sh), then rdma-xfer WRITE and READ of CABLE_XFER_MIB MiB (default
# 256), each checked by a checksum of every byte on both sides.
set -u
role=$1
. "$(dirname "$0")/../guest/lab.sh"
fail() { echo "FAIL cable $role: $*"; exit 1; }
[ "${ROX_CABLE:-0}" = 1 ] || fail "the lab has no cable (rox-lab --cable)"
mib=${CABLE_XFER_MIB:-256}
# Build rdma-xfer first: the compile overlaps the peer's boot.
gcc -O2 -Wall -Wextra -Werror -o /tmp/rdma-xfer /rox/tests/interop/rdma-xfer.c -lrdmacm -libverbs ||
	fail "cannot build rdma-xfer"
PAIR_ITERS=${PAIR_ITERS:-200} bash "$(dirname "$0")/pair.sh" "$role" rc srq write_bw read_bw send_lat || exit 1
server=$ROX_IP_1_0
port=18515
for op in write read; do
	port=$((port + 1))
	if [ "$role" = server ]; then
		# Bounds the wait for the client and the transfer; the lab's timeout bounds the whole.
		timeout 300 /tmp/rdma-xfer -s "$server" -p "$port" -m "$mib" -o "$op" >/tmp/x.log 2>&1 ||
			{ cat /tmp/x.log; fail "rdma-xfer server $op"; }
		continue
	fi
	# Retry only while the server is not listening yet (rdma_cm REJ reason 8, invalid service
	# ID), as tests/net/pair.sh does, for up to 300 s (the server starts once its previous
	# step is done, which a loaded host may make late).
	connect_by=$((SECONDS + 300))
	while :; do
		timeout 300 /tmp/rdma-xfer -c "$server" -p "$port" -m "$mib" -o "$op" >/tmp/x.log 2>&1
		c=$?
		[ $c = 0 ] && break
		grep -qE "REJECTED[^0-9]{1,12}8\b" /tmp/x.log || break
		[ $SECONDS -lt $connect_by ] || break
		sleep 0.5
	done
	grep -q ": equal" /tmp/x.log && [ "$c" = 0 ] || { cat /tmp/x.log; fail "rdma-xfer $op of $mib MiB (exit $c)"; }
	echo "ok   $op: $(grep ': equal' /tmp/x.log)"
done
echo "cable $role: ok"
