#!/usr/bin/env bash
# Configure and build the guest kernel (Rust-enabled) from the root's linux-source package.
# Usage: setup-kernel.sh [release|debug]. Idempotent: keyed by the config fragments, the
# package list and ROX_KERNEL_RECIPE; a finished build is never redone.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

flavour=${1:-release}
case $flavour in
release|debug) ;;
stock) exec "$(dirname "$0")/setup-stock-kernel.sh" ;;
*) die "unknown kernel flavour '$flavour' (release|debug|stock)" ;;
esac
kdir=$(kernel_dir "$flavour")
if [ -e "$kdir/.complete" ]; then
	log "kernel($flavour): cached at $kdir"
	exit 0
fi
root=$(root_dir)
ksrc=$(cat "$root/.rox-kernel-pkg")
mkdir -p "$kdir"
kin=$(cache_path_in_root "$kdir")

frags="/rox/qemu/kernel.config"
[ "$flavour" = debug ] && frags="$frags /rox/qemu/kernel-debug.config"

jobs=$(( $(nproc) + 1 ))
log "kernel($flavour): $ksrc, $jobs jobs, into $kdir"
in_root /bin/bash -c '
	set -euo pipefail
	kin=$1 ksrc=$2 jobs=$3 frags=$4
	cd "$kin"
	if [ ! -e linux/.unpacked ]; then
		rm -rf linux
		tarball=$(ls /usr/src/$ksrc.tar.* | head -n1)
		echo "unpacking $tarball"
		mkdir linux
		tar -xf "$tarball" -C linux --strip-components=1
		touch linux/.unpacked
	fi
	cd linux
	make -s allnoconfig
	./scripts/kconfig/merge_config.sh -m .config $frags >/dev/null
	make -s olddefconfig
	# Every fragment line must have survived olddefconfig (a silently dropped
	# CONFIG_RUST would build a kernel rox.ko cannot load into).
	missing=0
	for f in $frags; do
		while IFS= read -r line; do
			case $line in CONFIG_*=n) continue ;; CONFIG_*) ;; *) continue ;; esac
			grep -qxF "$line" .config || { echo "config: $line did not stick"; missing=1; }
		done <"$f"
	done
	[ $missing = 0 ] || { make rustavailable || true; exit 1; }
	start=$(date +%s)
	# Show the build moving: one line per 250 compiled objects, with elapsed time.
	make -j"$jobs" bzImage modules 2>&1 | {
		n=0
		while IFS= read -r l; do
			case $l in
			*" error:"*|*"Error "*|*"Error:"*) echo "$l" ;;
			"  CC"*|"  RUSTC"*|"  LD"*|"  AR"*|"  BINDGEN"*)
				n=$((n + 1))
				[ $((n % 250)) != 0 ] || echo "  ... $n objects built, $(( $(date +%s) - start ))s" ;;
			esac
		done
	}
	test ${PIPESTATUS[0]} = 0
	rm -rf ../modules
	make -s modules_install INSTALL_MOD_PATH=../modules INSTALL_MOD_STRIP=1
	make -s kernelrelease >../kernelrelease
' _ "$kin" "$ksrc" "$jobs" "$frags"
cp "$kdir/linux/arch/x86/boot/bzImage" "$kdir/bzImage"
touch "$kdir/.complete"
for old in "$ROX_CACHE"/kernel-*-"$flavour"; do
	[ "$old" = "$kdir" ] || { log "kernel: removing stale $old"; rm -rf "$old"; }
done
log "kernel($flavour): $(cat "$kdir/kernelrelease") ready"
