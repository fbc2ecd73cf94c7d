#!/bin/bash
# NFS over RDMA through rox.ko inside ONE guest (manual smoke check; the two-guest test is
# tests/ulp/run): nfsd with an RDMA listener (port 20049) exports a tmpfs, the client mounts
# rox_0's IPv4 address with proto=rdma (svcrdma and xprtrdma on rox_0, QP-to-QP loopback),
# writes and reads back a file, checksums compared, unmount, unload.
# Usage (host): qemu/vm --rox 2 -- tests/kernel/nfsrdma-one-guest.sh /cache/<kernel>/<module dir>/rox.ko [MiB]
set -u
ko=$1 mib=${2:-64}
fail() { echo "FAIL: $*"; dmesg | tail -40; exit 1; }
insmod "$ko" || fail "insmod rox.ko"
for _ in $(seq 50); do [ -e /sys/class/infiniband/rox_0 ] && break; sleep 0.2; done
ndev=$(cat /sys/class/infiniband/rox_0/ports/1/gid_attrs/ndevs/0)
ip=$(ip -4 -o addr show dev "$ndev" | awk '{ print $4 }' | cut -d/ -f1 | head -1)
[ -n "$ip" ] || fail "no IPv4 address on $ndev"
modprobe rpcrdma || fail "modprobe rpcrdma"
modprobe nfsd || fail "modprobe nfsd"
# nfsd's state and the export live in tmpfs: nothing is written into the shared root.
for d in /srv /var/lib/nfs /mnt; do mkdir -p $d && mount -t tmpfs tmpfs $d; done
mkdir -p /srv/export /var/lib/nfs/v4recovery /var/lib/nfs/rpc_pipefs
touch /var/lib/nfs/etab /var/lib/nfs/rmtab /var/lib/nfs/xtab
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs 2>/dev/null
(rpcbind -w 2>/dev/null || rpcbind) || true
exportfs -o rw,no_root_squash,insecure,fsid=0 "*:/srv/export" || fail "exportfs"
rpc.mountd || fail "rpc.mountd"
# A fresh nfsd refuses OPENs for its NFSv4 grace period (90 s by default): keep it short.
echo 10 >/proc/fs/nfsd/nfsv4gracetime && echo 10 >/proc/fs/nfsd/nfsv4leasetime
rpc.nfsd -N 3 4 || fail "rpc.nfsd"
echo "rdma 20049" >/proc/fs/nfsd/portlist || fail "nfsd RDMA listener"
cat /proc/fs/nfsd/portlist
mkdir -p /mnt/nfs
sleep 11 # the grace period
timeout 120 mount -t nfs4 -o proto=rdma,port=20049 "$ip:/" /mnt/nfs || fail "mount proto=rdma"
grep /mnt/nfs /proc/mounts
head -c $((mib << 20)) /dev/urandom >/tmp/src || fail "source file"
start=$(date +%s.%N)
cp /tmp/src /mnt/nfs/file && sync || fail "write over NFS/RDMA"
mid=$(date +%s.%N)
echo 3 >/proc/sys/vm/drop_caches
a=$(sha256sum </tmp/src) b=$(sha256sum </mnt/nfs/file) c=$(sha256sum </srv/export/file)
end=$(date +%s.%N)
echo "write $mib MiB: $(echo "$mid - $start" | bc) s, read back: $(echo "$end - $mid" | bc) s"
[ "$a" = "$b" ] && [ "$a" = "$c" ] || fail "checksums differ: src $a nfs $b export $c"
echo "checksums equal ($mib MiB)"
rdma statistic show link rox_0/1 | tr ' ' '\n' | grep -A1 -E '^(retransmits|timeouts|naks_sent|wqe_errors|rx_dropped)$' | paste - - | tr '\n' ' '; echo
dmesg | grep -iE 'rpcrdma|svcrdma|xprtrdma|nfs:' | tail -10
umount /mnt/nfs || fail "umount"
rpc.nfsd 0; exportfs -ua
modprobe -r rpcrdma 2>/dev/null
rmmod rox || fail "rmmod rox"
dmesg | grep -E 'BUG:|Oops|WARNING:|general protection|hung task' && fail "kernel complained"
echo "ok   nfsrdma-one-guest"
