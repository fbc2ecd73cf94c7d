#!/usr/bin/env bash
# Build rox.ko against the cached guest kernel: make -C $KDIR M=<clone>, output kept in the
# cache (MO=) so the clone stays clean. Usage: build-module.sh [release|debug]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${1:-release}
kdir=$(kernel_dir "$flavour")
[ -e "$kdir/.complete" ] || die "no $flavour kernel in the cache; run 'make setup'"
mdir=$(module_dir "$flavour")
mkdir -p "$mdir"
in_root make -C "$(cache_path_in_root "$kdir")/linux" M=/rox MO="$(cache_path_in_root "$mdir")" \
	-j"$(nproc)" modules
log "module: $mdir/rox.ko"
# The kernel verbs test module (tests/kernel, loaded by tests/guest/t-driver-kverbs.sh), next
# to rox.ko in the module directory's kverbs/.
mkdir -p "$mdir/kverbs"
in_root make -C "$(cache_path_in_root "$kdir")/linux" M=/rox/tests/kernel \
	MO="$(cache_path_in_root "$mdir")/kverbs" -j"$(nproc)" modules
log "test module: $mdir/kverbs/rox_kverbs_test.ko"
