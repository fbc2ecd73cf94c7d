#!/usr/bin/env bash
# Debian's stock kernel for rox guests: the trixie-backports linux-image (its vmlinuz and
# modules), its headers' Module.symvers, and linux-source of the same version configured with
# the image's exact config and prepared for external Rust modules (rust/ built, no vmlinux).
# Into $ROX_CACHE/stock-<version>; $ROX_CACHE/stock.current names the one in use.
# Idempotent: a finished preparation is never redone (ROX_STOCK_REFRESH=1 looks for a newer
# version in backports). Does not touch the toolchain root or its key.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

cur=$(kernel_dir stock)
if [ -e "$cur/.complete" ] && [ -z "${ROX_STOCK_REFRESH:-}" ]; then
	log "stock kernel: cached at $cur ($(cat "$cur/packages"))"
	exit 0
fi
[ -x "$(root_dir)/bin/sh" ] || die "no toolchain root; run 'make root' first"
read -r src ver img hdr < <(in_root /rox/scripts/stock-kernel-in-root.sh select) ||
	die "cannot select a stock kernel version"
log "stock kernel: $img $ver with $src $ver (and $hdr)"
dir=$ROX_CACHE/$(stock_dir_name "$ver")
if [ ! -e "$dir/.complete" ]; then
	mkdir -p "$dir"
	t0=$(date +%s)
	nice -n 10 "$ROX_TOP/scripts/in-root" /rox/scripts/stock-kernel-in-root.sh prepare \
		"$(cache_path_in_root "$dir")" "$src" "$ver" "$img" "$hdr"
	touch "$dir/.complete"
	log "stock kernel: prepared in $(( $(date +%s) - t0 ))s"
fi
basename "$dir" >"$ROX_CACHE/stock.current"
for old in "$ROX_CACHE"/stock-r*; do
	[ "$old" = "$dir" ] || { log "stock kernel: removing stale $old"; rm -rf "$old"; }
done
log "stock kernel: $(cat "$dir/kernelrelease") ready at $dir"
