#!/usr/bin/env bash
# make demo: set everything up (cached), boot a guest with two rox NICs, load rox.ko and show
# what the RDMA stack sees.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${ROX_KERNEL_FLAVOUR:-release}
"$ROX_TOP/scripts/setup-root.sh"
"$ROX_TOP/scripts/setup-kernel.sh" "$flavour"
"$ROX_TOP/scripts/build-module.sh" "$flavour"
[ ! -x "$ROX_TOP/scripts/build-provider.sh" ] || "$ROX_TOP/scripts/build-provider.sh"
(cd "$ROX_TOP" && cargo build --release -p rox-nic)
ko=$(cache_path_in_root "$(module_dir "$flavour")")/rox.ko
exec "$ROX_TOP/qemu/vm" --flavour "$flavour" --rox 2 -- bash -c "
	set -e
	show() { echo; echo \"\$ \$*\"; \"\$@\"; }
	show uname -r
	show lspci -nn -d 524f:
	show insmod $ko
	show grep '^rox ' /proc/modules
	show bash -c 'dmesg | grep -w rox | grep -v ib_mad'
	show rdma link
	show ibv_devices
	show ibv_devinfo -d rox_0
	show rmmod rox
"
