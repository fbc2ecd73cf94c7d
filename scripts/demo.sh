#!/usr/bin/env bash
# make demo: set everything up (cached), boot a guest, load rox.ko and show it loaded.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${ROX_KERNEL_FLAVOUR:-release}
"$ROX_TOP/scripts/setup-root.sh"
"$ROX_TOP/scripts/setup-kernel.sh" "$flavour"
"$ROX_TOP/scripts/build-module.sh" "$flavour"
ko=$(cache_path_in_root "$(module_dir "$flavour")")/rox.ko
exec "$ROX_TOP/qemu/vm" --flavour "$flavour" -- bash -c "
	set -e
	echo '# uname -r'; uname -r
	echo '# insmod rox.ko'; insmod $ko
	echo '# lsmod | grep rox'; grep '^rox ' /proc/modules
	echo '# dmesg | grep rox'; dmesg | grep -w rox
	echo '# modinfo rox.ko'; modinfo $ko | grep -E '^(name|description|license|vermagic)'
"
