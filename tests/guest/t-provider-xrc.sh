#!/bin/bash
# XRC through librox, rox.ko and rox-nic with unmodified programs (guest):
#   - ibv_xsrq_pingpong (XRC domain opened on a file, one XRC SRQ per process, XRC_RECV
#     target and XRC_SEND initiator QPs, each send naming the peer's SRQ): one client and two
#     clients on rox_0 (same-device loopback), with CQ events, and rox_0 <-> rox_1 over IPv4;
#     each side must print its "success";
#   - rdma-core's pyverbs XRC tests (every test whose name has "xrc": send and send with
#     immediate through ibv_wr_*, atomics, the extended CQ, ODP, relaxed ordering) on rox_0:
#     each must pass, none may skip; rdma_rxe in the same guest is run beside it for the table
#     (rxe has no XRC: its column skips);
#   - the protection rule (xrc_domains.py): a target QP of one XRC domain refuses a send naming
#     an SRQ of another domain (the sender completes with REM_INV_REQ_ERR), nothing arrives in
#     that SRQ, while a send naming an SRQ of the target's own domain arrives, and
#     rx_xrc_domain_errors (`rdma statistic`) counts exactly the refused send;
#   - ibv_open_qp (xrc-open-qp.c): a second process opens the XRC target QP another process
#     created in a shared XRC domain, keeps it alive after its creator let go, connects and
#     receives through it; opening it as another type, in another domain or after its last
#     handle went fails;
#   - rdma_cm with XRC: rdma_xserver / rdma_xclient -c x on rox_0's address.
# Every part runs; the test fails at the end if any failed.
# Skips (exit 0) when the guest has no rox device; needs rox_1 too when rox_0 exists.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

TESTS_PER_CLIENT=100
RUN_TIMEOUT=180
EXCHANGE_PORT=18515
# rdma_xserver's rdma_cm port (its default, given explicitly: rdma_xclient starts once a
# listener on it shows in `rdma resource show cm_id`).
XSERVER_PORT=7471
PYVERBS_SUITE=/usr/share/doc/rdma-core/tests
# The pyverbs tests with XRC in their name (rdma-core 56.1).
PYVERBS_XRC_TESTS=7
# name | server device | client device | GID index | clients | extra arguments (both sides)
RUNS=(
	"1 client rox_0|rox_0|rox_0|0|1|"
	"2 clients rox_0|rox_0|rox_0|0|2|"
	"1 client rox_0 events|rox_0|rox_0|0|1|-e"
	"1 client 64 KiB rox_0|rox_0|rox_0|0|1|-s 65536"
	"2 clients rox_0-rox_1 IPv4|rox_0|rox_1|1|2|"
)

. "$(dirname "$0")/lib.sh"
need_rox_0
[ -e /sys/class/infiniband/rox_1 ] || fail "rox_0 exists but rox_1 does not (tests/guest/run attaches two rox NICs)"
for _ in $(seq 50); do ibv_devinfo -d rox_1 | grep -q PORT_ACTIVE && break; sleep 0.2; done
command -v ibv_xsrq_pingpong >/dev/null || fail "ibv_xsrq_pingpong is not installed (ibverbs-utils)"

# --- ibv_xsrq_pingpong
failed=()
for run in "${RUNS[@]}"; do
	IFS='|' read -r name server_dev client_dev gid clients extra <<<"$run"
	read -ra more <<<"$extra"
	# Each process opens the XRC domain on its own file (the example's default is one path).
	timeout "$RUN_TIMEOUT" ibv_xsrq_pingpong -d "$server_dev" -g "$gid" -c "$clients" \
		-n "$TESTS_PER_CLIENT" ${more[@]+"${more[@]}"} >/tmp/xsrq-server.log 2>&1 &
	server=$!
	if ! wait_for_server "$server" "$EXCHANGE_PORT"; then
		wait "$server"
		echo "FAIL $name: the server did not listen"
		sed 's/^/  server: /' /tmp/xsrq-server.log | tail -5
		failed+=("$name")
		continue
	fi
	pids=()
	for c in $(seq "$clients"); do
		timeout "$RUN_TIMEOUT" ibv_xsrq_pingpong -d "$client_dev" -g "$gid" \
			-n "$TESTS_PER_CLIENT" ${more[@]+"${more[@]}"} 127.0.0.1 >"/tmp/xsrq-client$c.log" 2>&1 &
		pids+=($!)
	done
	ok=1
	for c in $(seq "$clients"); do
		wait "${pids[$((c - 1))]}" && grep -qx success "/tmp/xsrq-client$c.log" || ok=0
	done
	wait "$server" && grep -qx success /tmp/xsrq-server.log || ok=0
	if [ $ok = 1 ]; then
		echo "ok   $name: $clients client(s) x $TESTS_PER_CLIENT messages each way"
	else
		echo "FAIL $name"
		sed 's/^/  server: /' /tmp/xsrq-server.log | tail -5
		for c in $(seq "$clients"); do sed "s/^/  client$c: /" "/tmp/xsrq-client$c.log" | tail -5; done
		failed+=("$name")
	fi
done
problems=()
[ ${#failed[@]} = 0 ] || problems+=("ibv_xsrq_pingpong runs failed: ${failed[*]}")

# --- the XRC domain as the protection boundary
python3 -B "$(dirname "$0")/xrc_domains.py" rox_0 || problems+=("xrc_domains.py on rox_0")

# --- ibv_open_qp: a target QP held by a process that did not create it
open_qp_dir=$(mktemp -d /tmp/xrc-open-qp.XXXXXX)
if ! gcc -O1 -Wall -Wextra -Werror -o "$open_qp_dir/xrc-open-qp" "$(dirname "$0")/xrc-open-qp.c" -libverbs; then
	problems+=("xrc-open-qp.c does not compile")
elif timeout 60 "$open_qp_dir/xrc-open-qp" rox_0 0 "$open_qp_dir/domain"; then
	echo "ok   ibv_open_qp of another process's XRC target QP"
else
	problems+=("xrc-open-qp on rox_0")
fi
rm -rf "$open_qp_dir"

# --- rdma_cm with XRC on rox_0 (QP-to-QP on one device, as t-driver-rdmacm.sh)
ndev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0 2>/dev/null)
server_ip=$(ip -4 -o addr show dev "$ndev" | awk '{ print $4 }' | cut -d/ -f1 | head -1)
if [ -z "$server_ip" ]; then
	problems+=("rox_0's netdev ${ndev:-?} has no IPv4 address for rdma_xserver")
else
	timeout 240 rdma_xserver -p $XSERVER_PORT -c x >/tmp/xserver.log 2>&1 &
	server=$!
	client_rc=-
	if wait_for_cm_listener "$server" $XSERVER_PORT 2>/tmp/xserver.wait; then
		timeout 60 rdma_xclient -s "$server_ip" -p $XSERVER_PORT -c x >/tmp/xclient.log 2>&1
		client_rc=$?
	else
		cat /tmp/xserver.wait >/tmp/xclient.log
	fi
	wait "$server"
	server_rc=$?
	if [ $client_rc = 0 ] && [ $server_rc = 0 ] && grep -q 'end 0' /tmp/xclient.log; then
		echo "ok   rdma_xserver / rdma_xclient -c x on $server_ip"
	else
		sed 's/^/  xclient: /' /tmp/xclient.log | tail -5
		sed 's/^/  xserver: /' /tmp/xserver.log | tail -5
		problems+=("rdma_xclient -c x (exit $client_rc) / rdma_xserver (exit $server_rc)")
	fi
fi

# --- pyverbs' XRC tests, rox_0 next to rxe0
suite=$(mktemp -d /tmp/rdma-tests.XXXXXX)
cp -r "$PYVERBS_SUITE/." "$suite/" && gunzip -f "$suite"/*.gz || fail "cannot unpack $PYVERBS_SUITE"
netdev=$(ip -o link show | awk -F': ' '$2 != "lo" { print $2; exit }')
devices=(rox_0)
if modprobe rdma_rxe && { rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$netdev"; }; then
	devices+=(rxe0)
else
	echo "note: no rxe0 for comparison (rdma_rxe on $netdev failed)"
fi
printf '\npyverbs tests with "xrc" in their name\n%-48s' test
for dev in "${devices[@]}"; do
	printf ' %-8s' "$dev"
	timeout 600 python3 -B "$suite/run_tests.py" --dev "$dev" -v -k xrc >"/tmp/pyverbs-xrc-$dev.log" 2>&1
done
echo
# Class.test status of each test in a unittest -v log (as t-provider-verbs.sh reads it).
results() {
	python3 "$(dirname "$0")/pyverbs_results.py" "$1"
}
declare -A status
for dev in "${devices[@]}"; do
	while read -r t s; do status[$dev.$t]=$s; done < <(results "/tmp/pyverbs-xrc-$dev.log")
done
tests=$(results /tmp/pyverbs-xrc-rox_0.log | awk '{ print $1 }')
bad=()
for t in $tests; do
	printf '%-48s' "$t"
	for dev in "${devices[@]}"; do printf ' %-8s' "${status[$dev.$t]:--}"; done
	echo
	[ "${status[rox_0.$t]}" = ok ] || bad+=("$t")
done
[ -e /sys/class/infiniband/rxe0 ] && rdma link delete rxe0
n=$(echo "$tests" | grep -c .)
grep -q '^OK' /tmp/pyverbs-xrc-rox_0.log || { tail -30 /tmp/pyverbs-xrc-rox_0.log; bad+=("(no OK line)"); }
[ "$n" -ge "$PYVERBS_XRC_TESTS" ] || problems+=("only $n pyverbs XRC tests ran on rox_0 (want $PYVERBS_XRC_TESTS)")
if [ ${#bad[@]} != 0 ]; then
	grep -E -A12 '^(FAIL|ERROR):' /tmp/pyverbs-xrc-rox_0.log | head -60
	problems+=("pyverbs XRC tests not passing on rox_0: ${bad[*]}")
fi
[ ${#problems[@]} = 0 ] || fail "$(printf '%s; ' "${problems[@]}")"
echo "all ${#RUNS[@]} xsrq_pingpong runs, the domain check, rdma_xserver/rdma_xclient and $n pyverbs XRC tests passed on rox"
