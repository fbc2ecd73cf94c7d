# Guest-side helpers for commands run by rox-lab (sourced). rox-lab exports the lab's
# addresses (ROX_GUEST, ROX_IP_<G>_<N>, ROX_IP6_<G>_<N>, ROX_IF_<N>, ...; docs/networking.md).
# The guest tests' lib.sh sources it too (the rdma_* readings).

# What tests read from iproute2's `rdma`, through its JSON output, by tests/lib/rdma_tool.py:
# rdma_counter DEV NAME: port 1 counter NAME of DEV, nothing when missing (callers fail then;
# the tool says why on stderr); rdma_counters DEV [NAME...]: "name value" lines, for reports;
# rdma_link_dev NETDEV [--not-prefix P]: the RDMA device on NETDEV, nothing when none.
ROX_RDMA_TOOL=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/rdma_tool.py
rdma_counter() { python3 "$ROX_RDMA_TOOL" counter "$1" "$2"; }
rdma_counters() { python3 "$ROX_RDMA_TOOL" counters "$@"; }
rdma_link_dev() { python3 "$ROX_RDMA_TOOL" link-dev "$@" 2>/dev/null; }

# rox_dev_on NETDEV: load rox.ko ($ROX_KO) unless it is loaded, wait up to 20 s for the RDMA
# device on NETDEV and print its name; status 1 with the reason on stderr when there is none.
rox_dev_on() {
	local dev
	[ -f "${ROX_KO:-}" ] || { echo "no rox.ko (ROX_KO=${ROX_KO:-})" >&2; return 1; }
	grep -q '^rox ' /proc/modules || insmod "$ROX_KO" || { echo "insmod $ROX_KO failed" >&2; return 1; }
	for _ in $(seq 100); do
		dev=$(rdma_link_dev "$1")
		[ -n "$dev" ] && { echo "$dev"; return 0; }
		sleep 0.2
	done
	echo "no RDMA device on $1: $(rdma link show 2>&1 | tr '\n' ' ')" >&2
	return 1
}

# lab_rdma_dev: set up and print the RDMA device of this guest's lab NIC 0: rdma_rxe's rxe0 on
# a virtio NIC, rox.ko's device on a rox NIC (rox_dev_on). On failure says why on stderr and
# returns 1.
lab_rdma_dev() {
	local kind_var=ROX_NIC_${ROX_GUEST}_0
	case ${!kind_var:-} in
	virtio)
		modprobe rdma_rxe >&2 || { echo "modprobe rdma_rxe failed" >&2; return 1; }
		rdma link add rxe0 type rxe netdev "$ROX_IF_0" >&2 ||
			{ echo "rdma link add rxe0 on $ROX_IF_0 failed" >&2; return 1; }
		echo rxe0 ;;
	rox)
		rox_dev_on "$ROX_IF_0" || { echo "no rox device on $ROX_IF_0" >&2; return 1; } ;;
	*) echo "guest $ROX_GUEST has no lab NIC 0" >&2; return 1 ;;
	esac
}

# gid_index DEV [4|6]: print the index of DEV's (port 1) RoCEv2 GID holding this guest's lab
# IPv4 (default) or IPv6 address. GIDs appear asynchronously after an address or a device is
# added: waits up to 20 s. ib_core's table order depends on when addresses and devices came
# up, so tests look the index up instead of assuming one.
gid_index() {
	local dev=$1 family=${2:-4} d=/sys/class/infiniband/$1/ports/1 i gid type
	for _ in $(seq 100); do
		for i in $(ls "$d/gids" 2>/dev/null | sort -n); do
			read -r gid <"$d/gids/$i" 2>/dev/null || continue
			read -r type <"$d/gid_attrs/types/$i" 2>/dev/null || continue
			[ "$type" = "RoCE v2" ] || continue
			case $family:$gid in
			4:0000:0000:0000:0000:0000:ffff:0a32:*) echo "$i"; return 0 ;;
			6:fd00:0050:*) echo "$i"; return 0 ;;
			esac
		done
		sleep 0.2
	done
	echo "gid_index: $dev has no RoCE v2 GID for a lab IPv$family address" >&2
	return 1
}

# wait_ping ADDR [SECONDS]: wait until ADDR answers ping (a peer guest still booting).
wait_ping() {
	local i
	for i in $(seq "${2:-90}"); do
		ping -c1 -W1 "$1" >/dev/null 2>&1 && return 0
	done
	echo "wait_ping: $1 did not answer within ${2:-90} s" >&2
	return 1
}

# wait_port_active DEV: wait until DEV's port 1 is ACTIVE (up to 20 s).
wait_port_active() {
	for _ in $(seq 100); do
		ibv_devinfo -d "$1" 2>/dev/null | grep -q PORT_ACTIVE && return 0
		sleep 0.2
	done
	echo "wait_port_active: $1 port 1 is not active" >&2
	return 1
}
