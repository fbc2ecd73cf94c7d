#!/bin/bash
# NVMe over Fabrics (RDMA) through rox.ko inside ONE guest (a manual smoke check of the kernel
# data path with a real consumer; the two-guest tests are tests/ulp/run): nvmet-rdma exports a
# memory-backed null_blk on rox_0's IPv4 address, nvme-rdma connects to it (rdma_cm picks
# rox_0: QP-to-QP loopback on one device), fio writes and verifies (crc32c), disconnect, unload.
# With "cross" as second argument the host side binds to rox_1's address (nvme connect -w):
# traffic rox_1 -> lab bridge -> rox_0, if rdma_cm resolves that local route.
# Usage (host): qemu/vm --rox 2 -- tests/kernel/nvmeof-one-guest.sh /cache/<kernel>/<module dir>/rox.ko [cross]
set -u
ko=$1 mode=${2:-loopback} queues=${NVME_QUEUES:-2}
fail() { echo "FAIL: $*"; dmesg | tail -40; exit 1; }
insmod "$ko" || fail "insmod rox.ko"
for _ in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
ndev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0)
ip=$(ip -4 -o addr show dev "$ndev" | awk '{ print $4 }' | cut -d/ -f1 | head -1)
[ -n "$ip" ] || fail "no IPv4 address on $ndev"
modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
modprobe nvmet-rdma || fail "modprobe nvmet-rdma"
modprobe nvme-rdma || fail "modprobe nvme-rdma"
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
nb=/sys/kernel/config/nullb/nullb1
mkdir $nb && echo 1 >$nb/memory_backed && echo 256 >$nb/size && echo 4096 >$nb/blocksize &&
	echo 1 >$nb/power || fail "null_blk setup"
t=/sys/kernel/config/nvmet
nqn=rox-test
mkdir $t/subsystems/$nqn && echo 1 >$t/subsystems/$nqn/attr_allow_any_host &&
	mkdir $t/subsystems/$nqn/namespaces/1 &&
	echo /dev/nullb1 >$t/subsystems/$nqn/namespaces/1/device_path &&
	echo 1 >$t/subsystems/$nqn/namespaces/1/enable || fail "nvmet subsystem"
mkdir $t/ports/1 && echo "$ip" >$t/ports/1/addr_traddr && echo rdma >$t/ports/1/addr_trtype &&
	echo 4420 >$t/ports/1/addr_trsvcid && echo ipv4 >$t/ports/1/addr_adrfam &&
	ln -s $t/subsystems/$nqn $t/ports/1/subsystems/$nqn || fail "nvmet port"
echo "nvmet-rdma listens on $ip:4420 ($ndev, rox_0)"
host=()
if [ "$mode" = cross ]; then
	ndev1=$(cat /sys/class/infiniband/rox_1/ports/1/gid_attrs/ndevs/0)
	ip1=$(ip -4 -o addr show dev "$ndev1" | awk '{ print $4 }' | cut -d/ -f1 | head -1)
	host=(-w "$ip1")
	echo "host side from $ip1 ($ndev1, rox_1)"
fi
timeout 120 nvme connect -t rdma -a "$ip" -s 4420 -n $nqn -i "$queues" "${host[@]}" || fail "nvme connect"
for _ in $(seq 50); do dev=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$dev" ] && break; sleep 0.2; done
[ -n "$dev" ] || fail "no namespace block device"
nvme list
for d in rox_0 rox_1; do echo "$d QPs: $(rdma res show qp link $d/1 | grep -vc 'qpn 1 ')"; done
for bs in 4k 128k 1M; do
	timeout 300 fio --name=verify-$bs --filename="$dev" --rw=randwrite --bs=$bs --size=32M \
		--iodepth=32 --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 \
		--verify_fatal=1 --output-format=terse --terse-version=3 >/tmp/fio-$bs.out 2>&1 ||
		{ cat /tmp/fio-$bs.out; fail "fio bs=$bs"; }
	grep "^3;" /tmp/fio-$bs.out | awk -F";" -v bs=$bs '{ printf "fio bs=%s: write %s KiB/s, read %s KiB/s, errors %s\n", bs, $48, $7, $5 }'
done
# Mixed sizes from 4 jobs at once (several I/O queues busy).
timeout 600 fio --name=mixed --filename="$dev" --rw=randwrite --bsrange=4k-1M --size=64M \
	--numjobs=4 --offset_increment=64M --iodepth=32 --ioengine=libaio --direct=1 \
	--verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting \
	--output-format=terse --terse-version=3 >/tmp/fio-mixed.out 2>&1 ||
	{ cat /tmp/fio-mixed.out; fail "fio mixed 4k-1M, 4 jobs"; }
grep "^3;" /tmp/fio-mixed.out | awk -F";" '{ printf "fio 4k-1M x4 jobs: write %s KiB/s, read %s KiB/s, errors %s\n", $48, $7, $5 }'
nvme disconnect -n $nqn || fail "nvme disconnect"
rm $t/ports/1/subsystems/$nqn; rmdir $t/ports/1 $t/subsystems/$nqn/namespaces/1 $t/subsystems/$nqn
echo 0 >$nb/power; rmdir $nb
modprobe -r nvme-rdma nvmet-rdma || fail "unload nvme modules"
rmmod rox || fail "rmmod rox"
kmemleak=/sys/kernel/debug/kmemleak
if [ -w $kmemleak ]; then
	echo scan >$kmemleak; sleep 5; echo scan >$kmemleak
	echo "kmemleak: $(grep -c unreferenced $kmemleak) unreferenced objects"
fi
dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|hung task|sleeping function' && fail "kernel complained"
echo "ok   nvmeof-one-guest"
