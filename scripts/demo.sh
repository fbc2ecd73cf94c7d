#!/usr/bin/env bash
# make demo: set everything up (cached), then
#   1. one guest with two rox NICs: rox.ko loaded, the devices as the RDMA stack sees them, and
#      unmodified ibv_rc_pingpong and ib_write_bw between rox_0 (server) and rox_1 (client);
#   2. two guests on one lab bridge: ibv_rc_pingpong from guest 0's rox_0 to guest 1's rox_0.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${ROX_KERNEL_FLAVOUR:-release}
"$ROX_TOP/scripts/setup-root.sh"
"$ROX_TOP/scripts/setup-kernel.sh" "$flavour"
"$ROX_TOP/scripts/build-module.sh" "$flavour"
"$ROX_TOP/scripts/build-provider.sh"
(cd "$ROX_TOP" && cargo build --release -p rox-nic)
ko=$(cache_path_in_root "$(module_dir "$flavour")")/rox.ko

echo
echo "=== 1. one guest, two rox NICs"
"$ROX_TOP/qemu/vm" --flavour "$flavour" --rox 2 -- bash -c "
	set -e
	show() { echo; echo \"\$ \$*\"; \"\$@\"; }
	show uname -r
	show lspci -nn -d 524f:
	show insmod $ko
	show bash -c 'dmesg | grep -w rox | grep -v ib_mad'
	show rdma link
	show ibv_devices
	show ibv_devinfo -d rox_0
	echo; echo '\$ ibv_rc_pingpong -d rox_0 -g 1 -n 1000 (server)  &&  ibv_rc_pingpong -d rox_1 -g 1 -n 1000 10.50.0.11 (client)'
	ibv_rc_pingpong -d rox_0 -g 1 -n 1000 >/tmp/server.log 2>&1 &
	sleep 2
	ibv_rc_pingpong -d rox_1 -g 1 -n 1000 10.50.0.11
	wait
	echo; echo '\$ ib_write_bw -d rox_0 -x 1 -s 65536 -n 2000 (server)  &&  ib_write_bw -d rox_1 -x 1 -s 65536 -n 2000 10.50.0.11 (client)'
	ib_write_bw -d rox_0 -x 1 -s 65536 -n 2000 >/tmp/server.log 2>&1 &
	sleep 2
	ib_write_bw -d rox_1 -x 1 -s 65536 -n 2000 10.50.0.11
	wait
	show rdma statistic show link rox_1/1
"
echo
echo "=== 2. two guests on one lab bridge: guest 0 rox_0 (10.50.0.11) -> guest 1 rox_0 (10.50.0.21)"
"$ROX_TOP/tests/guest/run-pair" --rox 1 --flavour "$flavour" \
	"insmod $ko && sleep 2 && ibv_rc_pingpong -d rox_0 -g 1 -n 1000" \
	"insmod $ko && for i in \$(seq 30); do ping -c1 -W1 10.50.0.21 >/dev/null && break; sleep 1; done; sleep 3; ibv_rc_pingpong -d rox_0 -g 1 -n 1000 10.50.0.21"
