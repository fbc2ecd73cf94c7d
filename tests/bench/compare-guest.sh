#!/bin/bash
# Guest side of tests/bench/compare (run by it through qemu/vm, in /rox): loads rox.ko and
# rdma_rxe, then runs each benchmark on rox_0 and on rxe0 in turn (server and client on the same
# device, TCP side channel over 127.0.0.1) and prints one machine-readable line per number:
#   BENCH <row-key> <rox|rxe> <value>
# A tool that fails has its output printed and its value reported as FAIL; the script then exits 1
# after the remaining benchmarks ran. Settings come from the environment (set by compare):
#   ROX_KO              rox.ko path in the guest (required unless rox is already loaded)
#   BENCH_PP_ITERS      ibv_rc_pingpong -n            (default 10000)
#   BENCH_PP_SIZE       ibv_rc_pingpong -s            (default 4096)
#   BENCH_BW_ITERS      ib_write_bw -n                (default 5000, perftest's own default)
#   BENCH_BW_SIZES      ib_write_bw -s, space list    (default "4096 65536")
#   BENCH_LAT_ITERS     ib_send_lat / ib_write_lat -n (default 1000)
#   BENCH_LAT_SIZE      ib_send_lat / ib_write_lat -s (default 2, perftest's own default)
#   BENCH_RXE_NETDEV    netdev rxe0 is bound to       (default eth0: the guest's virtio-net NIC)
#   BENCH_ROX_GID, BENCH_RXE_GID   GID index to use   (default: first non-zero RoCE v2 GID)
#   BENCH_RUN_TIMEOUT   seconds allowed per server/client pair (default 300)
#   BENCH_ONLY          run only rows whose key contains this string (default: all)
#   BENCH_REPEAT        run the whole set this many times (default 1; compare takes medians)
set -u
ROX_VENDOR=0x524f # rox_uapi::regs::PCI_VENDOR_ID
PP_ITERS=${BENCH_PP_ITERS:-10000}
PP_SIZE=${BENCH_PP_SIZE:-4096}
BW_ITERS=${BENCH_BW_ITERS:-5000}
BW_SIZES=${BENCH_BW_SIZES:-4096 65536}
LAT_ITERS=${BENCH_LAT_ITERS:-1000}
LAT_SIZE=${BENCH_LAT_SIZE:-2}
RXE_NETDEV=${BENCH_RXE_NETDEV:-eth0}
RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-300}
ONLY=${BENCH_ONLY:-}
REPEAT=${BENCH_REPEAT:-1}
# The TCP port pingpong and perftest exchange connection data on (their default).
EXCHANGE_PORT=18515
LOGS=/tmp/bench
mkdir -p "$LOGS"

die() { echo "bench: error: $*"; exit 1; }
T0=$(date +%s)
say() { echo "bench: [+$(( $(date +%s) - T0 ))s] $*"; }

wait_active() { # $1: ib device
	for _ in $(seq 100); do
		ibv_devinfo -d "$1" 2>/dev/null | grep -q PORT_ACTIVE && return 0
		sleep 0.2
	done
	ibv_devinfo -d "$1"
	return 1
}

# First GID index of port 1 that is RoCE v2 and not all zero (IPv4-mapped preferred). Only
# builtins in the loop: rxe has 1024 GID entries and a fork per entry costs minutes under TCG.
pick_gid() { # $1: ib device
	local d=/sys/class/infiniband/$1/ports/1 i n gid type first= entries
	entries=("$d"/gids/*)
	n=${#entries[@]}
	for ((i = 0; i < n; i++)); do
		read -r gid <"$d/gids/$i" 2>/dev/null || continue
		[ "$gid" != 0000:0000:0000:0000:0000:0000:0000:0000 ] || continue
		read -r type <"$d/gid_attrs/types/$i" 2>/dev/null || continue
		[ "$type" = "RoCE v2" ] || continue
		case $gid in 0000:0000:0000:0000:0000:ffff:*) echo "$i"; return 0 ;; esac
		[ -n "$first" ] || first=$i
	done
	[ -n "$first" ] && echo "$first"
}
wait_gid() { # $1: ib device
	local g
	for _ in $(seq 100); do
		g=$(pick_gid "$1") && [ -n "$g" ] && { echo "$g"; return 0; }
		sleep 0.2
	done
	return 1
}

# --- rox_0
say "setup: rox.ko, rdma_rxe"
[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] ||
	die "librox is not installed in the root (scripts/build-provider.sh installs it)"
if ! ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1; then
	grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null ||
		die "no rox device in this guest (no PCI function with vendor $ROX_VENDOR)"
	if ! grep -q '^rox ' /proc/modules; then
		[ -f "${ROX_KO:-}" ] || die "no rox.ko to load (ROX_KO=${ROX_KO:-})"
		insmod "$ROX_KO" || die "insmod $ROX_KO failed"
	fi
	for _ in $(seq 50); do ls -d /sys/class/infiniband/rox_0 >/dev/null 2>&1 && break; sleep 0.2; done
fi
wait_active rox_0 || die "rox_0 port 1 is not active"

# --- rxe0 over the guest's virtio-net
modprobe rdma_rxe || die "modprobe rdma_rxe failed"
ip link show "$RXE_NETDEV" >/dev/null || die "no netdev $RXE_NETDEV for rxe0"
rdma link add rxe0 type rxe netdev "$RXE_NETDEV" || die "rdma link add rxe0 type rxe netdev $RXE_NETDEV failed"
wait_active rxe0 || die "rxe0 port 1 is not active"

say "setup: rox_0 and rxe0 active, picking GIDs"
ROX_GID=${BENCH_ROX_GID:-$(wait_gid rox_0)} || die "rox_0 has no RoCE v2 GID"
RXE_GID=${BENCH_RXE_GID:-$(wait_gid rxe0)} || die "rxe0 has no RoCE v2 GID"
declare -A GID=([rox_0]=$ROX_GID [rxe0]=$RXE_GID)
declare -A TAG=([rox_0]=rox [rxe0]=rxe)
say "rox_0: GID $ROX_GID $(cat /sys/class/infiniband/rox_0/ports/1/gids/"$ROX_GID")"
say "rxe0 on $RXE_NETDEV: GID $RXE_GID $(cat /sys/class/infiniband/rxe0/ports/1/gids/"$RXE_GID")"
say "guest: $(nproc) vCPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
for t in ibv_rc_pingpong ib_write_bw ib_send_lat ib_write_lat; do
	command -v "$t" >/dev/null || die "$t is not installed in the root"
done

wait_for_server() { # $1: server pid
	for _ in $(seq 300); do
		ss -Hltn "sport = :$EXCHANGE_PORT" | grep -q . && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

failed=()
# run_pair KEY DEV GIDFLAG CMD...: server then client of CMD on DEV; the client's log is left
# in $LOGS/KEY-DEV.client (and .server). Returns 0 when both sides exit 0.
run_pair() {
	local key=$1 dev=$2 gflag=$3 base server src crc
	shift 3
	base=$LOGS/$key-$dev
	timeout "$RUN_TIMEOUT" "$@" -d "$dev" "$gflag" "${GID[$dev]}" >"$base.server" 2>&1 &
	server=$!
	if ! wait_for_server "$server"; then
		kill "$server" 2>/dev/null
		wait "$server" 2>/dev/null
		echo "bench: $* -d $dev: server did not listen on :$EXCHANGE_PORT"
		sed 's/^/  server: /' "$base.server"
		return 1
	fi
	timeout "$RUN_TIMEOUT" "$@" -d "$dev" "$gflag" "${GID[$dev]}" 127.0.0.1 >"$base.client" 2>&1
	crc=$?
	wait "$server"
	src=$?
	[ $crc = 0 ] && [ $src = 0 ] && return 0
	echo "bench: $* -d $dev failed (client exit $crc, server exit $src; 124 = timeout ${RUN_TIMEOUT}s)"
	sed 's/^/  client: /' "$base.client"
	sed 's/^/  server: /' "$base.server"
	return 1
}
report() { # KEY DEV VALUE
	echo "BENCH $1 ${TAG[$2]} $3"
}
fail_row() { # KEY DEV
	report "$1" "$2" FAIL
	failed+=("$1/$2")
}
selected() { [ -z "$ONLY" ] || [[ $1 == *"$ONLY"* ]]; }

# ibv_rc_pingpong: "<n> iters in <t> seconds = <u> usec/iter" and "<b> bytes in <t> seconds = <r> Mbit/sec".
pingpong() {
	local key=rc_pingpong_$PP_SIZE dev us mbit
	selected "$key" || return 0
	for dev in rox_0 rxe0; do
		say "ibv_rc_pingpong -s $PP_SIZE -n $PP_ITERS on $dev"
		if run_pair "$key" "$dev" -g ibv_rc_pingpong -s "$PP_SIZE" -n "$PP_ITERS"; then
			us=$(awk -v n="$PP_ITERS" '$1 == n && $2 == "iters" { print $(NF-1) }' "$LOGS/$key-$dev.client")
			mbit=$(awk '$2 == "bytes" && $NF == "Mbit/sec" { print $(NF-1) }' "$LOGS/$key-$dev.client")
			if [ -n "$us" ] && [ -n "$mbit" ]; then
				grep -E 'iters in|bytes in' "$LOGS/$key-$dev.client" | sed 's/^/  /'
				report "${key}_us" "$dev" "$us"
				report "${key}_mbit" "$dev" "$mbit"
				continue
			fi
			echo "bench: no result lines in the ibv_rc_pingpong output:"
			sed 's/^/  client: /' "$LOGS/$key-$dev.client"
		fi
		fail_row "${key}_us" "$dev"
		fail_row "${key}_mbit" "$dev"
	done
}

# perftest: the result row starts with the message size and the iteration count; for *_bw the
# 4th field is "BW average[MB/sec]", for *_lat the 5th is "t_typical[usec]" (and the 3rd,
# t_min, is reported too as KEY_min when MINFIELD is given).
perftest() { # TOOL SIZE ITERS FIELD [MINFIELD]
	local tool=$1 size=$2 iters=$3 field=$4 minfield=${5:-} key=${1#ib_}_$2 dev row
	selected "$key" || return 0
	for dev in rox_0 rxe0; do
		say "$tool -s $size -n $iters on $dev"
		if run_pair "$key" "$dev" -x "$tool" -F -s "$size" -n "$iters"; then
			row=$(grep -E "^ *$size +$iters +[0-9]" "$LOGS/$key-$dev.client" | tail -1)
			if [ -n "$row" ]; then
				echo "  $(echo $row)"
				report "$key" "$dev" "$(echo "$row" | awk -v f="$field" '{ print $f }')"
				[ -z "$minfield" ] || report "${key}_min" "$dev" "$(echo "$row" | awk -v f="$minfield" '{ print $f }')"
				continue
			fi
			echo "bench: no result row in the $tool output:"
			sed 's/^/  client: /' "$LOGS/$key-$dev.client"
		fi
		fail_row "$key" "$dev"
		[ -z "$minfield" ] || fail_row "${key}_min" "$dev"
	done
}

for ((round = 1; round <= REPEAT; round++)); do
	[ "$REPEAT" = 1 ] || say "round $round of $REPEAT"
	pingpong
	for s in $BW_SIZES; do perftest ib_write_bw "$s" "$BW_ITERS" 4; done
	perftest ib_send_lat "$LAT_SIZE" "$LAT_ITERS" 5 3
	perftest ib_write_lat "$LAT_SIZE" "$LAT_ITERS" 5 3
done

say "guest load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
rdma link delete rxe0 2>/dev/null
if [ ${#failed[@]} -gt 0 ]; then
	say "FAILED: ${failed[*]}"
	exit 1
fi
say "all benchmarks ran"
