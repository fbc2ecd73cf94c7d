#!/bin/bash
# GID table and port changes reach user space (guest; skips without a rox device; issue 10
# item 5): a C program opens rox_0 and, for comparison, an rdma_rxe device on rox_1's netdev,
# adds and removes IPv4 and IPv6 addresses on each device's netdev and takes it down and up;
# ibv_get_async_event must report IBV_EVENT_GID_CHANGE after every address change, PORT_ERR
# after link down and PORT_ACTIVE after link up (asserted for rox_0, printed for rxe).
# guest-init sets keep_addr_on_down, so a link down keeps the global IPv6 address (and its GID):
# the address added before the down is removed after the up, and that removal is the GID change.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
command -v gcc >/dev/null || skip "no C compiler in the guest"

netdev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0)
[ -n "$netdev" ] || fail "rox_0 has no netdev"
# The rxe device for comparison goes on another netdev (rox_1's): ib_core sends a netdev's port events
# (PORT_ERR/PORT_ACTIVE) to the first ib_device bound to it only (ib_device_get_by_netdev), so
# two devices on one netdev cannot both see them.
pairs=(rox_0 "$netdev")
rxe_netdev=$(cat /sys/class/infiniband/rox_1/ports/1/gid_attrs/ndevs/0 2>/dev/null)
made_rxe=
if [ -n "$rxe_netdev" ] && modprobe rdma_rxe 2>/dev/null &&
	rdma link add rxe_gid type rxe netdev "$rxe_netdev"; then
	made_rxe=rxe_gid
	pairs+=(rxe_gid "$rxe_netdev")
else
	echo "note: no rxe device for comparison"
fi

work=$(mktemp -d /tmp/rox-gid-events.XXXXXX)
gcc -O1 -Wall -Wextra -Werror -o "$work/gid-events" "$(dirname "$0")/gid-events.c" -libverbs || fail "cannot compile the test program"
timeout 300 "$work/gid-events" "${pairs[@]}"
rc=$?
# Leave the netdevs as they were, whatever happened.
for ((d = 0; d < ${#pairs[@]} / 2; d++)); do
	dev=${pairs[2 * d + 1]}
	for a in 10.77.$d.1/24 fd77:$d::1/64 fd78:$d::1/64; do ip addr del "$a" dev "$dev" 2>/dev/null; done
	ip link set "$dev" up
done
[ -z "$made_rxe" ] || rdma link delete "$made_rxe"
for _ in $(seq 50); do ibv_devinfo -d rox_0 | grep -q PORT_ACTIVE && break; sleep 0.2; done
rm -rf "$work"
[ "$rc" = 0 ] || fail "rox_0 missed $rc of the events its netdev's changes must cause"
echo "rox_0 reports GID_CHANGE on address changes and PORT_ERR/PORT_ACTIVE on link down/up"
