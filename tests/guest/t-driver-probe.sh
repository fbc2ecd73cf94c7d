#!/bin/bash
# rox.ko probes a rox-nic (needs `qemu/vm --vfio-user` / `tests/guest/run --rox 1`; skips
# without one): reset, version check, admin and event queues, MSI-X, ib_device rox_0 bound to
# the paired netdev (RoCEv2 GIDs from its addresses, port ACTIVE while it is up), device
# counters in `rdma statistic`; unbinds and rebinds cleanly; rmmod leaves no warning.
set -u
# Leave no rox.ko behind for the next test, whatever happens here.
trap 'grep -q "^rox " /proc/modules && rmmod rox' EXIT
fail() { echo "FAIL: $*"; dmesg | tail -30; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
rox_vendor=0x524f rox_device=0x0001   # uapi/src/regs.rs PCI_VENDOR_ID / PCI_DEVICE_ID

pcidev=
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/vendor")" = $rox_vendor ] && [ "$(cat "$d/device")" = $rox_device ] && { pcidev=${d##*/}; break; }
done
[ -n "$pcidev" ] || skip "no rox-nic attached"
[ -f "$ROX_KO" ] || fail "no module at $ROX_KO"

dmesg -C
insmod "$ROX_KO" || fail "insmod failed"
for i in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
[ -e /sys/class/infiniband/rox_0 ] || fail "no rox_0 after insmod"
dmesg | grep -E 'rox|infiniband'
[ "$(readlink -f /sys/class/infiniband/rox_0/device)" = "$(readlink -f /sys/bus/pci/devices/$pcidev)" ] ||
	fail "rox_0 is not the PCI device $pcidev"
grep -q "RoCE v2" /sys/class/infiniband/rox_0/ports/1/gid_attrs/types/0 ||
	fail "GID 0 is not a RoCEv2 GID: $(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/types/0)"
cat /sys/class/infiniband/rox_0/ports/1/state
grep -q ACTIVE /sys/class/infiniband/rox_0/ports/1/state || fail "port 1 not ACTIVE"
cat /sys/class/infiniband/rox_0/ports/1/link_layer | grep -q Ethernet || fail "link layer not Ethernet"
netdev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0 2>/dev/null)
echo "GID 0: $(cat /sys/class/infiniband/rox_0/ports/1/gids/0) on ${netdev:-?}"
[ -n "$netdev" ] || fail "GID 0 has no netdev (port not bound)"
rdma link show rox_0/1 || fail "rdma link does not show rox_0/1"
rdma statistic show link rox_0/1 | tee /tmp/rox-stat.out
grep -q 'tx_packets' /tmp/rox-stat.out || fail "no device counters in rdma statistic"
# Port follows the netdev.
ip link set "$netdev" down
for i in $(seq 25); do grep -q DOWN /sys/class/infiniband/rox_0/ports/1/state && break; sleep 0.2; done
grep -q DOWN /sys/class/infiniband/rox_0/ports/1/state || fail "port not DOWN with $netdev down"
ip link set "$netdev" up
for i in $(seq 25); do grep -q ACTIVE /sys/class/infiniband/rox_0/ports/1/state && break; sleep 0.2; done
grep -q ACTIVE /sys/class/infiniband/rox_0/ports/1/state || fail "port not ACTIVE again"
# Unbind/bind through sysfs.
echo "$pcidev" >/sys/bus/pci/drivers/rox/unbind || fail "unbind failed"
[ -e /sys/class/infiniband/rox_0 ] && fail "rox_0 still there after unbind"
echo "$pcidev" >/sys/bus/pci/drivers/rox/bind || fail "bind failed"
for i in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
[ -e /sys/class/infiniband/rox_0 ] || fail "no rox_0 after rebind"
rmmod rox || fail "rmmod failed"
[ -e /sys/class/infiniband/rox_0 ] && fail "rox_0 still there after rmmod"
dmesg | grep -E 'BUG:|Oops|WARNING:|rox.*(fail|error)' && fail "kernel complained"
echo "rox_0 probed, bound to $netdev, port follows it, unbind/bind/rmmod clean"
