#!/bin/bash
# librox's data path with unmodified perftest programs (guest): ib_{send,write,read,atomic}_{bw,lat}
# (RC) and ib_send_bw over UD, server and client on rox_0 (same-device loopback over RoCEv2
# GID 0); each run must exit 0 on both sides and print its result row. Skips (exit 0) when the
# guest has no rox device.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

ROX_VENDOR=0x524f # rox_uapi::regs::PCI_VENDOR_ID
ITERS=200
RUN_TIMEOUT=120
GID_INDEX=0
# The TCP port both exchange connection data on (their default).
EXCHANGE_PORT=18515
RUNS=(
	"ib_send_bw -n $ITERS"
	"ib_send_bw -n $ITERS -c UD"
	"ib_write_bw -n $ITERS"
	"ib_read_bw -n $ITERS"
	"ib_atomic_bw -n $ITERS"
	"ib_send_lat -n $ITERS"
	"ib_write_lat -n $ITERS"
	"ib_read_lat -n $ITERS"
	"ib_atomic_lat -n $ITERS"
)

[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] ||
	skip "librox is not installed in the root (scripts/build-provider.sh installs it)"
if ! ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1; then
	grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null ||
		skip "no rox device in this guest (no PCI function with vendor $ROX_VENDOR)"
	if ! grep -q '^rox ' /proc/modules; then
		[ -f "${ROX_KO:-}" ] || fail "a rox PCI device exists but no rox.ko to load (ROX_KO=${ROX_KO:-})"
		insmod "$ROX_KO" || fail "insmod $ROX_KO failed"
	fi
	for _ in $(seq 50); do ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1 && break; sleep 0.2; done
	ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1 || fail "no rox_* ib device appeared"
fi
for _ in $(seq 50); do ibv_devinfo -d rox_0 | grep -q PORT_ACTIVE && break; sleep 0.2; done
ibv_devinfo -d rox_0 | grep -q PORT_ACTIVE || fail "rox_0 port 1 is not active"

# Wait until the server listens, so the client does not race it (up to 20 s under TCG).
wait_for_server() {
	for _ in $(seq 200); do
		ss -Hltn "sport = :$EXCHANGE_PORT" | grep -q . && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# One server+client run; sets $row to the client's result row. 0 when both succeed.
run_pair() {
	local -a cmd
	read -ra cmd <<<"$1"
	timeout "$RUN_TIMEOUT" "${cmd[@]}" -d rox_0 -x "$GID_INDEX" >/tmp/pt-server.log 2>&1 &
	local server=$!
	wait_for_server "$server"
	timeout "$RUN_TIMEOUT" "${cmd[@]}" -d rox_0 -x "$GID_INDEX" 127.0.0.1 >/tmp/pt-client.log 2>&1
	client_rc=$?
	wait "$server"
	server_rc=$?
	# The result row starts with the message size and the iteration count.
	row=$(grep -E "^ *[0-9]+ +$ITERS +" /tmp/pt-client.log | tail -1)
	[ $client_rc = 0 ] && [ $server_rc = 0 ] && [ -n "$row" ]
}

failed=() flaky=()
for run in "${RUNS[@]}"; do
	if run_pair "$run"; then
		echo "ok   $run: $(echo $row)"
		continue
	fi
	echo "FAIL $run (client exit $client_rc, server exit $server_rc); full logs:"
	sed 's/^/  client: /' /tmp/pt-client.log
	sed 's/^/  server: /' /tmp/pt-server.log
	# A second failure fails the test; a pass on the retry is reported as a flake (seen once
	# under heavy host load: ib_send_bw's client exited 1 after the header, server fine).
	if run_pair "$run"; then
		echo "FLAKY $run passed on its retry: $(echo $row)"
		flaky+=("$run")
	else
		echo "FAIL $run again (client exit $client_rc, server exit $server_rc)"
		sed 's/^/  client: /' /tmp/pt-client.log | tail -6
		sed 's/^/  server: /' /tmp/pt-server.log | tail -6
		failed+=("$run")
	fi
done
[ ${#flaky[@]} = 0 ] || echo "WARNING: flaky perftest runs on rox_0: ${flaky[*]}"
[ ${#failed[@]} = 0 ] || fail "perftest runs failed on rox_0: ${failed[*]}"
echo "all ${#RUNS[@]} perftest runs passed on rox_0"
