#!/usr/bin/env bash
# Build the hermetic Debian trixie root: kernel toolchain, QEMU 11.1, rdma-core userspace,
# kernel and rdma-core sources. Idempotent: keyed by the package list and ROX_ROOT_RECIPE.
# Then the guest test tools of root-extras.txt go into that root (install_extras below).
#   setup-root.sh              build the root (if the cache has none for this key), add extras
#   setup-root.sh customize R  (mmdebstrap hook) finish root R while its apt lists exist
set -euo pipefail
. "$(dirname "$0")/lib.sh"
mirror=http://deb.debian.org/debian

packages() { grep -vE '^\s*(#|$)' "$ROX_TOP/scripts/root-packages.txt"; }
extras() { grep -vE '^\s*(#|$)' "$ROX_TOP/scripts/root-extras.txt"; }

# The guest test tools of root-extras.txt, added to the finished root with its own apt (it has
# the sources; mmdebstrap left no package lists, so they are fetched and dropped again). The
# list is not in the root's key: a marker named by its hash says the root has them. apt only
# adds files, so guests already running on the root are not disturbed.
install_extras() {
	local root=$1 key marker pkgs
	key=$(extras | sha256sum | cut -c1-16)
	marker=$root/.rox-extras-$key
	mapfile -t pkgs < <(extras)
	if [ -e "$marker" ]; then
		log "root extras: present (${pkgs[*]})"
		return 0
	fi
	log "root extras: installing ${pkgs[*]}"
	# One installer at a time (helpers may run setup at once); apt waits for dpkg's own lock.
	flock "$root.extras.lock" "$ROX_TOP/scripts/in-root" bash -c '
		ok=0
		if apt-get update -q >/tmp/apt.log 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
				-o DPkg::Lock::Timeout=300 "$@" >>/tmp/apt.log 2>&1; then
			ok=1
			grep "^Setting up" /tmp/apt.log || true
		else
			tail -20 /tmp/apt.log
		fi
		apt-get clean
		rm -rf /var/lib/apt/lists/*
		[ $ok = 1 ]' _ "${pkgs[@]}" ||
		die "root extras: apt-get install ${pkgs[*]} failed (see above)"
	rm -f "$root"/.rox-extras-*
	touch "$marker"
	log "root extras: installed (marker $(basename "$marker"))"
}

customize() {
	local r=$1 ksrc ver upver
	# Backports packages, with their dependencies from backports where they need it.
	mapfile -t bpo < <(packages | grep / | cut -d/ -f1)
	chroot "$r" apt-get install -y --no-install-recommends -t trixie-backports "${bpo[@]}"

	# Kernel source: the pinned package, else the newest linux-source-7.* the archive offers.
	ksrc=$ROX_KERNEL_PKG
	if ! chroot "$r" apt-get install -y --no-install-recommends -t trixie-backports "$ksrc"; then
		ksrc=$(chroot "$r" apt-cache pkgnames linux-source-7. | sort -V | tail -n1)
		[ -n "$ksrc" ] || die "no linux-source-7.* package in trixie-backports"
		log "root: $ROX_KERNEL_PKG not available; using $ksrc"
		chroot "$r" apt-get install -y --no-install-recommends -t trixie-backports "$ksrc"
	fi
	log "root: kernel source package $ksrc $(chroot "$r" dpkg-query -W -f='${Version}' "$ksrc")"
	echo "$ksrc" >"$r/.rox-kernel-pkg"

	# rdma-core source matching the installed rdma-core: the provider's private headers
	# (infiniband/driver.h) exist only there. The .dsc may 404; the orig tarball is enough.
	ver=$(chroot "$r" dpkg-query -W -f='${Version}' rdma-core)
	upver=${ver%%-*}
	mkdir -p "$r/usr/src/rdma-core"
	chroot "$r" sh -c 'cd /usr/src/rdma-core && apt-get source --download-only rdma-core' || true
	if ! ls "$r"/usr/src/rdma-core/rdma-core_"$upver".orig.tar.* >/dev/null 2>&1; then
		log "root: apt-get source failed; fetching the orig tarball from the pool"
		curl -fsSL --retry 5 -o "$r/usr/src/rdma-core/rdma-core_$upver.orig.tar.gz" \
			"$mirror/pool/main/r/rdma-core/rdma-core_$upver.orig.tar.gz" ||
			die "cannot fetch rdma-core $upver source"
	fi
	echo "$upver" >"$r/.rox-rdma-core-version"
	log "root: rdma-core $ver source in /usr/src/rdma-core"
}

if [ "${1:-}" = customize ]; then
	customize "$2"
	exit 0
fi

root=$(root_dir)
if [ -e "$root/.complete" ]; then
	log "root: cached at $root"
	install_extras "$root"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "make setup needs root (mmdebstrap, chroot)"
command -v mmdebstrap >/dev/null || {
	log "installing mmdebstrap from the host's apt"
	apt-get install -y mmdebstrap >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y mmdebstrap >/dev/null; } ||
		die "cannot install mmdebstrap (apt-get install mmdebstrap)"
}

tmp="$root.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mapfile -t main_pkgs < <(packages | grep -v /)
self=$(realpath "$0")

log "root: mmdebstrap trixie (+backports) into $tmp"
mmdebstrap --variant=apt --mode=root --format=directory \
	--aptopt='APT::Install-Recommends "false"' \
	--aptopt='Acquire::Retries "5"' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--include="$(IFS=,; echo "${main_pkgs[*]}")" \
	--customize-hook='echo rox-guest > "$1/etc/hostname"' \
	--customize-hook="'$self' customize \"\$1\"" \
	trixie "$tmp" \
	"deb $mirror trixie main" \
	"deb $mirror trixie-backports main" \
	"deb-src $mirror trixie main" \
	"deb $mirror-security trixie-security main" \
	2>&1 | grep --line-buffered -vE '^(Get:|Preparing|Unpacking|Selecting|Setting up|Processing|\(Reading)' || true
[ -x "$tmp/usr/bin/qemu-system-x86_64" ] && [ -e "$tmp/.rox-kernel-pkg" ] ||
	die "root: mmdebstrap failed (see the messages above)"

touch "$tmp/.complete"
rm -rf "$root"
mv "$tmp" "$root"
trap - EXIT
for old in "$ROX_CACHE"/root-*; do
	[ "$old" = "$root" ] || { log "root: removing stale $old"; rm -rf "$old"; }
done
log "root: ready at $root"
install_extras "$root"
