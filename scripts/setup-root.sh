#!/usr/bin/env bash
# Build the hermetic Debian trixie root: kernel toolchain, QEMU 11.1, rdma-core userspace,
# kernel and rdma-core sources. Idempotent: keyed by the package list and this script.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

root=$(root_dir)
if [ -e "$root/.complete" ]; then
	log "root: cached at $root"
	exit 0
fi
command -v mmdebstrap >/dev/null || {
	log "installing mmdebstrap from the host's apt"
	apt-get install -y mmdebstrap >/dev/null || die "cannot install mmdebstrap (apt-get install mmdebstrap)"
}
[ "$(id -u)" = 0 ] || die "make setup needs root (mmdebstrap, chroot)"

tmp="$root.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT

mapfile -t main_pkgs < <(grep -vE '^\s*(#|$)' "$ROX_TOP/scripts/root-packages.txt" | grep -v /)
mapfile -t bpo_pkgs < <(grep -vE '^\s*(#|$)' "$ROX_TOP/scripts/root-packages.txt" | grep / | cut -d/ -f1)

mirror=http://deb.debian.org/debian
log "root: mmdebstrap trixie (+backports) into $tmp"
mmdebstrap --variant=apt --mode=root --format=directory \
	--aptopt='APT::Install-Recommends "false"' \
	--aptopt='Acquire::Retries "5"' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--include="$(IFS=,; echo "${main_pkgs[*]}")" \
	--customize-hook='echo rox-guest > "$1/etc/hostname"' \
	--customize-hook="chroot \"\$1\" apt-get install -y --no-install-recommends -t trixie-backports ${bpo_pkgs[*]}" \
	trixie "$tmp" \
	"deb $mirror trixie main" \
	"deb $mirror trixie-backports main" \
	"deb-src $mirror trixie main" \
	"deb $mirror-security trixie-security main" \
	2>&1 | grep -vE '^(I: |Get:|Preparing|Unpacking|Selecting|Setting up|Processing)' || true
[ -x "$tmp/usr/bin/qemu-system-x86_64" ] || die "root: mmdebstrap failed (no qemu-system-x86_64)"

# Kernel source: the pinned package, else the newest linux-source-7.* the archive offers.
ksrc=$ROX_KERNEL_PKG
if ! chroot "$tmp" apt-get install -y --no-install-recommends -t trixie-backports "$ksrc" >/dev/null 2>&1; then
	ksrc=$(chroot "$tmp" apt-cache pkgnames linux-source-7. | sort -V | tail -n1)
	[ -n "$ksrc" ] || die "no linux-source-7.* package in trixie-backports"
	log "root: $ROX_KERNEL_PKG not available; using $ksrc"
	chroot "$tmp" apt-get install -y --no-install-recommends -t trixie-backports "$ksrc" >/dev/null
fi
log "root: kernel source package $ksrc ($(chroot "$tmp" dpkg-query -W -f='${Version}' "$ksrc"))"
echo "$ksrc" >"$tmp/.rox-kernel-pkg"

# rdma-core source matching the installed rdma-core (private provider headers live only there).
ver=$(chroot "$tmp" dpkg-query -W -f='${Version}' rdma-core)
upver=${ver%%-*}
mkdir -p "$tmp/usr/src/rdma-core"
( cd "$tmp/usr/src/rdma-core" && chroot "$tmp" sh -c "cd /usr/src/rdma-core && apt-get source --download-only rdma-core >/dev/null 2>&1" ) || true
orig=$(ls "$tmp"/usr/src/rdma-core/rdma-core_"$upver".orig.tar.* 2>/dev/null | head -n1)
if [ -z "$orig" ]; then
	# The .dsc may 404 while the orig tarball exists: fetch it from the pool directly.
	url="$mirror/pool/main/r/rdma-core/rdma-core_$upver.orig.tar.gz"
	log "root: apt-get source failed; fetching $url"
	curl -fsSL --retry 5 -o "$tmp/usr/src/rdma-core/rdma-core_$upver.orig.tar.gz" "$url" ||
		die "cannot fetch rdma-core $upver source"
fi
log "root: rdma-core $ver source in /usr/src/rdma-core"

chroot "$tmp" apt-get clean
touch "$tmp/.complete"
rm -rf "$root"
mv "$tmp" "$root"
trap - EXIT
# Older roots of other keys are dead weight.
for old in "$ROX_CACHE"/root-*; do
	[ "$old" = "$root" ] || { log "root: removing stale $old"; rm -rf "$old"; }
done
log "root: ready at $root"
