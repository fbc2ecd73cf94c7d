#!/usr/bin/env bash
# Build rox.ko against the cached guest kernel: make -C $KDIR M=<clone>, output kept in the
# cache (MO=) so the clone stays clean. Usage: build-module.sh [release|debug|stock]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${1:-release}
kdir=$(kernel_dir "$flavour")
[ -e "$kdir/.complete" ] || die "no $flavour kernel in the cache; run 'make setup'"
mdir=$(module_dir "$flavour")
mkdir -p "$mdir"
# The stock kernel's tree names the compiler it was built with (make-args: CC=...).
kargs=()
[ ! -f "$kdir/make-args" ] || read -ra kargs <"$kdir/make-args"
in_root make -C "$(cache_path_in_root "$kdir")/linux" M=/rox MO="$(cache_path_in_root "$mdir")" \
	"${kargs[@]}" -j"$(nproc)" modules
log "module: $mdir/rox.ko"
# Debian's kernel is not built here: prove rox.ko fits it (vermagic, every import exported).
if [ "$flavour" = stock ]; then
	"$ROX_TOP/scripts/check-kernel" "$kdir" --module "$mdir/rox.ko" \
		--kernel-modules "$kdir/modules/lib/modules/$(cat "$kdir/kernelrelease")" ||
		die "rox.ko does not fit the stock kernel $(cat "$kdir/packages") (see above)"
fi
# The kernel verbs test module (tests/kernel, loaded by tests/guest/t-driver-kverbs.sh), next
# to rox.ko in the module directory's kverbs/.
mkdir -p "$mdir/kverbs"
in_root make -C "$(cache_path_in_root "$kdir")/linux" M=/rox/tests/kernel \
	MO="$(cache_path_in_root "$mdir")/kverbs" "${kargs[@]}" -j"$(nproc)" modules
log "test module: $mdir/kverbs/rox_kverbs_test.ko"
