#!/usr/bin/env bash
# Build libfabric 2.1.0 (the root's libfabric1 version) with rox's XRC fixes
# (tests/guest/libfabric/*.patch, in the order of LIBFABRIC_PATCHES) inside the toolchain root,
# into a prefix of its own in the cache: $ROX_CACHE/libfabric-xrc-<key>/, keyed by this script
# (it pins the source's hash and the configure flags) and the patches. The root's own libfabric is not touched: guest
# tests load this one with LD_LIBRARY_PATH=<prefix>/lib and run the root's fi_pingpong
# (libfabric-bin, the same 2.1.0 ABI). Only the verbs and rxm providers are built.
#
#   1. on the host (the root builds offline, as build-provider.sh's crates and setup-root.sh's
#      rdma-core source): Debian's libfabric orig tarball and libtool's .deb, fetched from the
#      mirror setup-root.sh uses with curl --retry into $ROX_CACHE/downloads/ and checked
#      against their pinned sha256. Debian's tarball is a git export without configure, and
#      autoreconf needs libtoolize, which the root lacks: libtool's .deb is unpacked beside the
#      build, never installed.
#   2. in the root, without network: the patches, autoreconf, configure --enable-only
#      --enable-verbs --enable-rxm, make, make install, all in the root's private /tmp (gone
#      afterwards; only the prefix stays). One builder per prefix at a time ($dir.lock):
#      worktrees sharing the cache must not remove each other's build.
#
# Usage: scripts/build-libfabric-xrc.sh            build once (a no-op when cached)
#        scripts/build-libfabric-xrc.sh --prefix   print the prefix as seen inside the root
#                                                  (/cache/...; works in a guest too)
set -euo pipefail

LIBFABRIC_VERSION=2.1.0
LIBFABRIC_ORIG=libfabric_$LIBFABRIC_VERSION.orig.tar.xz
LIBFABRIC_ORIG_SHA256=1a66369772d5bb151737214af1c478993e969cf298e8f9ed369e7a2ab8d8c6df
# trixie's libtool (autoreconf's libtoolize only).
LIBTOOL_DEB=libtool_2.5.4-4_all.deb
LIBTOOL_DEB_SHA256=be5361a8c1fce2758c3e19608bf97393d5f3afdb7e926aeb83e2818355bd885f
MIRROR=http://deb.debian.org/debian
LIBFABRIC_CONFIGURE_FLAGS=(--enable-only --enable-verbs=yes --enable-rxm=yes
	--disable-static --disable-silent-rules)
# Applied in this order (the second fixes what the first lets run).
LIBFABRIC_PATCHES=(xrc-resolve.patch xrc-route-resolved.patch)

top=$(cd "$(dirname "$0")/.." && pwd)
patch_dir=$top/tests/guest/libfabric
key=$(cd "$patch_dir" && cat "$top/scripts/build-libfabric-xrc.sh" "${LIBFABRIC_PATCHES[@]}" |
	sha256sum | cut -c1-16)
name=libfabric-xrc-$key

case ${1:-} in
--prefix)
	echo "/cache/$name"
	exit 0
	;;
"") ;;
*)
	echo "usage: scripts/build-libfabric-xrc.sh [--prefix]" >&2
	exit 2
	;;
esac

. "$top/scripts/lib.sh"
root=$(root_dir)
[ -e "$root/.complete" ] || die "no toolchain root at $root; run 'make setup'"
dir=$ROX_CACHE/$name
if [ -e "$dir/.complete" ]; then
	log "libfabric $LIBFABRIC_VERSION + ${LIBFABRIC_PATCHES[*]}: $dir (cached)"
	exit 0
fi
exec 9>"$dir.lock"
flock 9
if [ -e "$dir/.complete" ]; then
	log "libfabric $LIBFABRIC_VERSION + ${LIBFABRIC_PATCHES[*]}: $dir (built meanwhile)"
	exit 0
fi

# fetch FILE POOL-PATH SHA256: into $ROX_CACHE/downloads/ unless there with that sha256.
downloads=$ROX_CACHE/downloads
fetch() {
	local file=$1 url=$MIRROR/pool/main/$2/$1 sha=$3
	if ! echo "$sha  $downloads/$file" | sha256sum -c --quiet >/dev/null 2>&1; then
		log "fetching $url"
		curl -fsSL --retry 5 -o "$downloads/$file.part" "$url" || die "cannot fetch $url"
		mv "$downloads/$file.part" "$downloads/$file"
		echo "$sha  $downloads/$file" | sha256sum -c --quiet ||
			die "$downloads/$file: sha256 is not the pinned $sha"
	fi
}
mkdir -p "$downloads"
fetch "$LIBFABRIC_ORIG" libf/libfabric "$LIBFABRIC_ORIG_SHA256"
fetch "$LIBTOOL_DEB" libt/libtool "$LIBTOOL_DEB_SHA256"

log "libfabric $LIBFABRIC_VERSION + ${LIBFABRIC_PATCHES[*]}: building into $dir"
start=$(date +%s)
rm -rf "$dir"
mkdir -p "$dir"
in_root bash -c '
	set -euo pipefail
	prefix=$1 orig=$2 libtool_deb=$3 patch_dir=$4 npatch=$5; shift 5
	patches=("${@:1:npatch}"); shift "$npatch"
	mkdir -p /tmp/libtool
	# libtoolize from the unpacked .deb, pointed at its own data files.
	dpkg-deb -x "$libtool_deb" /tmp/libtool
	lt=/tmp/libtool/usr
	sed -i "s|/usr/share/libtool|$lt/share/libtool|g; s|/usr/share/aclocal|$lt/share/aclocal|g" \
		"$lt/bin/libtoolize"
	export LIBTOOLIZE=$lt/bin/libtoolize ACLOCAL_PATH=$lt/share/aclocal PATH=$lt/bin:$PATH

	mkdir /tmp/src
	tar -C /tmp/src --strip-components=1 -xJf "$orig"
	cd /tmp/src
	for p in "${patches[@]}"; do
		patch -p1 --no-backup-if-mismatch <"$patch_dir/$p"
	done
	autoreconf -if >/tmp/autoreconf.log 2>&1 || { tail -30 /tmp/autoreconf.log; exit 1; }
	./configure --prefix="$prefix" "$@" >/tmp/configure.log 2>&1 ||
		{ tail -30 /tmp/configure.log; exit 1; }
	grep -E "^\*\*\* Built-in providers|^\*\*\* DSO providers" /tmp/configure.log || true
	make -j"$(nproc)" >/tmp/make.log 2>&1 || { tail -40 /tmp/make.log; exit 1; }
	make install >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
' _ "/cache/$name" "$(cache_path_in_root "$downloads/$LIBFABRIC_ORIG")" \
	"$(cache_path_in_root "$downloads/$LIBTOOL_DEB")" \
	/rox/tests/guest/libfabric "${#LIBFABRIC_PATCHES[@]}" "${LIBFABRIC_PATCHES[@]}" \
	"${LIBFABRIC_CONFIGURE_FLAGS[@]}" ||
	{
		rm -rf "$dir"
		die "libfabric build failed (see above)"
	}
[ -e "$dir/lib/libfabric.so.1" ] || { rm -rf "$dir"; die "libfabric build installed no lib/libfabric.so.1"; }
# Which fixes this build has, for whoever looks at the cache.
(cd "$patch_dir" && cp "${LIBFABRIC_PATCHES[@]}" "$dir/")
touch "$dir/.complete"
log "libfabric $LIBFABRIC_VERSION + ${LIBFABRIC_PATCHES[*]}: built in $(($(date +%s) - start)) s ($(du -sh "$dir" | cut -f1))"
