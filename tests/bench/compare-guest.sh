#!/bin/bash
# Guest side of tests/bench/compare (run by it through qemu/vm, in /rox): loads rox.ko and
# rdma_rxe, then runs each benchmark on rox and on rxe in turn and prints one machine-readable
# line per number:
#   BENCH <row-key> <rox|rxe> <value>
# BENCH_MODE picks the devices:
#   pair      server on rox_0, client on rox_1 (two rox NICs, packets cross the rox fabric), and
#             server on rxe0 (on rox_0's netdev eth1), client on rxe1 (on rox_1's netdev eth2):
#             rxe's packets cross the guest's virtio-net NICs and the QEMU hub joining them.
#             The TCP side channel goes to the server NIC's IPv4 address. (default)
#   loopback  server and client on one device (rox_0; rxe0 on BENCH_RXE_NETDEV), TCP over
#             127.0.0.1: rox loops back inside rox-nic, rxe inside the guest kernel.
# A tool that fails has its output printed and its value reported as FAIL; the script then exits 1
# after the remaining benchmarks ran. Settings come from the environment (set by compare):
#   ROX_KO              rox.ko path in the guest (required unless rox is already loaded)
#   BENCH_PP_ITERS      ibv_rc_pingpong -n            (default 10000)
#   BENCH_PP_SIZE       ibv_rc_pingpong -s            (default 4096)
#   BENCH_BW_ITERS      ib_write_bw -n                (default 5000, perftest's own default)
#   BENCH_BW_SIZES      ib_write_bw -s, space list    (default "4096 65536")
#   BENCH_LAT_ITERS     ib_send_lat / ib_write_lat -n (default 1000)
#   BENCH_LAT_SIZE      ib_send_lat / ib_write_lat -s (default 2, perftest's own default)
#   BENCH_MODE          pair or loopback              (default pair)
#   BENCH_RXE_NETDEV    loopback mode: netdev rxe0 is bound to (default eth0)
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
MODE=${BENCH_MODE:-pair}
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

case $MODE in pair|loopback) ;; *) die "BENCH_MODE must be pair or loopback, not '$MODE'" ;; esac
# The netdev an ib device's port 1 is bound to, and that netdev's IPv4 address.
netdev_of() { rdma link show "$1/1" | awk '{ for (i = 1; i < NF; i++) if ($i == "netdev") print $(i + 1) }'; }
ipv4_of() { ip -4 -o addr show dev "$1" | awk '{ sub(/\/.*/, "", $4); print $4; exit }'; }

# --- rox
say "setup ($MODE): rox.ko, rdma_rxe"
[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] ||
	die "librox is not installed in the root (scripts/build-provider.sh installs it)"
if ! ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1; then
	grep -qx "$ROX_VENDOR" /sys/bus/pci/devices/*/vendor 2>/dev/null ||
		die "no rox device in this guest (no PCI function with vendor $ROX_VENDOR)"
	if ! grep -q '^rox ' /proc/modules; then
		[ -f "${ROX_KO:-}" ] || die "no rox.ko to load (ROX_KO=${ROX_KO:-})"
		insmod "$ROX_KO" || die "insmod $ROX_KO failed"
	fi
	for _ in $(seq 50); do ls -d /sys/class/infiniband/rox_1 >/dev/null 2>&1 && break; sleep 0.2; done
fi
wait_active rox_0 || die "rox_0 port 1 is not active"

# --- rxe on the guest's virtio-net NICs
modprobe rdma_rxe || die "modprobe rdma_rxe failed"
rxe_add() { # NAME NETDEV
	ip link show "$2" >/dev/null || die "no netdev $2 for $1"
	rdma link add "$1" type rxe netdev "$2" || die "rdma link add $1 type rxe netdev $2 failed"
	wait_active "$1" || die "$1 port 1 is not active"
}
declare -A SERVER CLIENT ADDR
if [ "$MODE" = pair ]; then
	wait_active rox_1 || die "rox_1 port 1 is not active (pair mode needs two rox NICs)"
	rox0_net=$(netdev_of rox_0) rox1_net=$(netdev_of rox_1)
	[ -n "$rox0_net" ] && [ -n "$rox1_net" ] || die "rox_0/rox_1 are not bound to netdevs"
	rxe_add rxe0 "$rox0_net"
	rxe_add rxe1 "$rox1_net"
	server_ip=$(ipv4_of "$rox0_net")
	[ -n "$server_ip" ] || die "$rox0_net has no IPv4 address"
	SERVER=([rox]=rox_0 [rxe]=rxe0) CLIENT=([rox]=rox_1 [rxe]=rxe1) ADDR=([rox]=$server_ip [rxe]=$server_ip)
else
	rxe_add rxe0 "$RXE_NETDEV"
	SERVER=([rox]=rox_0 [rxe]=rxe0) CLIENT=([rox]=rox_0 [rxe]=rxe0) ADDR=([rox]=127.0.0.1 [rxe]=127.0.0.1)
fi

say "setup: devices active, picking GIDs"
declare -A GID
for dev in "${SERVER[@]}" "${CLIENT[@]}"; do
	[ -n "${GID[$dev]:-}" ] && continue
	case $dev in rox_*) g=${BENCH_ROX_GID:-} ;; *) g=${BENCH_RXE_GID:-} ;; esac
	GID[$dev]=${g:-$(wait_gid "$dev")} || die "$dev has no RoCE v2 GID"
	say "$dev on $(netdev_of "$dev"): GID ${GID[$dev]} $(cat /sys/class/infiniband/"$dev"/ports/1/gids/"${GID[$dev]}")"
done
for t in rox rxe; do say "$t: server ${SERVER[$t]}, client ${CLIENT[$t]} -> ${ADDR[$t]}"; done
if [ "$MODE" = pair ]; then
	# What rxe's packets ride on: the round trip between the two virtio-net NICs (ping bound
	# to the client's NIC, so it crosses the hub instead of lo).
	rtt=$(ping -c 20 -i 0.05 -I "$rox1_net" "$server_ip" 2>/dev/null | awk -F/ '/^rtt/ { print $5 }')
	say "virtio-net round trip $rox1_net -> $rox0_net ($server_ip): ping avg ${rtt:-?} ms"
fi
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
# run_pair KEY rox|rxe GIDFLAG CMD...: server of CMD on SERVER[tag], then its client on
# CLIENT[tag]; the logs are left in $LOGS/KEY-TAG.client and .server. Returns 0 when both
# sides exit 0.
run_pair() {
	local key=$1 tag=$2 gflag=$3 base server src crc sdev cdev
	shift 3
	base=$LOGS/$key-$tag sdev=${SERVER[$tag]} cdev=${CLIENT[$tag]}
	timeout "$RUN_TIMEOUT" "$@" -d "$sdev" "$gflag" "${GID[$sdev]}" >"$base.server" 2>&1 &
	server=$!
	if ! wait_for_server "$server"; then
		kill "$server" 2>/dev/null
		wait "$server" 2>/dev/null
		echo "bench: $* -d $sdev: server did not listen on :$EXCHANGE_PORT"
		sed 's/^/  server: /' "$base.server"
		return 1
	fi
	timeout "$RUN_TIMEOUT" "$@" -d "$cdev" "$gflag" "${GID[$cdev]}" "${ADDR[$tag]}" >"$base.client" 2>&1
	crc=$?
	wait "$server"
	src=$?
	[ $crc = 0 ] && [ $src = 0 ] && return 0
	echo "bench: $* ($sdev <- $cdev) failed (client exit $crc, server exit $src; 124 = timeout ${RUN_TIMEOUT}s)"
	sed 's/^/  client: /' "$base.client"
	sed 's/^/  server: /' "$base.server"
	return 1
}
report() { # KEY rox|rxe VALUE
	echo "BENCH $1 $2 $3"
}
fail_row() { # KEY rox|rxe
	report "$1" "$2" FAIL
	failed+=("$1/$2")
}
selected() { [ -z "$ONLY" ] || [[ $1 == *"$ONLY"* ]]; }

# ibv_rc_pingpong: "<n> iters in <t> seconds = <u> usec/iter" and "<b> bytes in <t> seconds = <r> Mbit/sec".
pingpong() {
	local key=rc_pingpong_$PP_SIZE dev us mbit
	selected "$key" || return 0
	for tag in rox rxe; do
		say "ibv_rc_pingpong -s $PP_SIZE -n $PP_ITERS on $tag (${SERVER[$tag]} <- ${CLIENT[$tag]})"
		if run_pair "$key" "$tag" -g ibv_rc_pingpong -s "$PP_SIZE" -n "$PP_ITERS"; then
			us=$(awk -v n="$PP_ITERS" '$1 == n && $2 == "iters" { print $(NF-1) }' "$LOGS/$key-$tag.client")
			mbit=$(awk '$2 == "bytes" && $NF == "Mbit/sec" { print $(NF-1) }' "$LOGS/$key-$tag.client")
			if [ -n "$us" ] && [ -n "$mbit" ]; then
				grep -E 'iters in|bytes in' "$LOGS/$key-$tag.client" | sed 's/^/  /'
				report "${key}_us" "$tag" "$us"
				report "${key}_mbit" "$tag" "$mbit"
				continue
			fi
			echo "bench: no result lines in the ibv_rc_pingpong output:"
			sed 's/^/  client: /' "$LOGS/$key-$tag.client"
		fi
		fail_row "${key}_us" "$tag"
		fail_row "${key}_mbit" "$tag"
	done
}

# perftest: the result row starts with the message size and the iteration count; for *_bw the
# 4th field is "BW average[MB/sec]", for *_lat the 5th is "t_typical[usec]" (and the 3rd,
# t_min, is reported too as KEY_min when MINFIELD is given).
perftest() { # TOOL SIZE ITERS FIELD [MINFIELD]
	local tool=$1 size=$2 iters=$3 field=$4 minfield=${5:-} key=${1#ib_}_$2 dev row
	selected "$key" || return 0
	for tag in rox rxe; do
		say "$tool -s $size -n $iters on $tag (${SERVER[$tag]} <- ${CLIENT[$tag]})"
		if run_pair "$key" "$tag" -x "$tool" -F -s "$size" -n "$iters"; then
			row=$(grep -E "^ *$size +$iters +[0-9]" "$LOGS/$key-$tag.client" | tail -1)
			if [ -n "$row" ]; then
				echo "  $(echo $row)"
				report "$key" "$tag" "$(echo "$row" | awk -v f="$field" '{ print $f }')"
				[ -z "$minfield" ] || report "${key}_min" "$tag" "$(echo "$row" | awk -v f="$minfield" '{ print $f }')"
				continue
			fi
			echo "bench: no result row in the $tool output:"
			sed 's/^/  client: /' "$LOGS/$key-$tag.client"
		fi
		fail_row "$key" "$tag"
		[ -z "$minfield" ] || fail_row "${key}_min" "$tag"
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
rdma link delete rxe1 2>/dev/null
if [ ${#failed[@]} -gt 0 ]; then
	say "FAILED: ${failed[*]}"
	exit 1
fi
say "all benchmarks ran"
