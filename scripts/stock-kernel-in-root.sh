#!/usr/bin/env bash
# Runs inside the toolchain root (scripts/in-root), called by scripts/setup-stock-kernel.sh:
#   stock-kernel-in-root.sh select                      print "SRCPKG VERSION IMAGEPKG HEADERSPKG"
#   stock-kernel-in-root.sh prepare DIR SRC VER IMG HDR download, unpack and prepare into DIR
# apt runs with its own lists and archive cache under /cache/stock-apt, so the shared root's
# state is never changed.
set -euo pipefail

apt_dir=/cache/stock-apt
apt_opts=(-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1
	-o Acquire::Retries=5)
say() { printf '[rox stock %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'rox: error: %s\n' "$*" >&2; exit 1; }

# The backports version of package $1 (empty when backports has none).
bpo_version() {
	apt-cache "${apt_opts[@]}" madison "$1" 2>/dev/null | awk -F' *\\| *' '$3 ~ /backports/ { print $2; exit }'
}

# Source and image of one version: the pinned source package's backports version (else the
# newest linux-source-7.*), then the generic amd64 image of exactly that version.
select_versions() {
	local src=${ROX_KERNEL_PKG:-linux-source-7.3} ver img abi
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
	say "apt-get update (lists in $apt_dir, the root's own are untouched)"
	apt-get "${apt_opts[@]}" update -qq >&2 || die "apt-get update failed (network?)"
	ver=$(bpo_version "$src")
	if [ -z "$ver" ]; then
		local fallback
		fallback=$(apt-cache "${apt_opts[@]}" pkgnames linux-source-7. | sort -V | tail -n1)
		[ -n "$fallback" ] || die "no linux-source-7.* in trixie-backports"
		say "$src not in backports; using $fallback"
		src=$fallback
		ver=$(bpo_version "$src")
	fi
	[ -n "$ver" ] || die "no backports version of $src"
	img=
	for p in $(apt-cache "${apt_opts[@]}" pkgnames linux-image-7. |
		grep -E '^linux-image-[0-9][0-9.]*\+deb[0-9]+-amd64$' | sort -rV); do
		[ "$(bpo_version "$p")" = "$ver" ] && { img=$p; break; }
	done
	[ -n "$img" ] || die "backports has $src $ver but no linux-image-*-amd64 of that version (image and source disagree; retry later or set ROX_KERNEL_PKG)"
	abi=${img#linux-image-}
	[ "$(bpo_version "linux-headers-$abi")" = "$ver" ] ||
		die "no linux-headers-$abi of version $ver in backports"
	echo "$src $ver $img linux-headers-$abi"
}

# Unpack the image and headers debs and the source tarball of version $ver into $dir.
unpack() {
	local dir=$1 src=$2 ver=$3 img=$4 hdr=$5 tarball parts p
	# Each step is kept once done: removing a kernel tree takes minutes on a busy disk.
	[ -e "$dir/.unpacked" ] && return 0
	mkdir -p "$dir/debs"
	# The image package may be a shell over its parts (linux-binary-, linux-modules-,
	# linux-base-<abi>): every linux-*-<abi> it depends on at this version is part of it.
	parts=$(apt-cache "${apt_opts[@]}" show "$img=$ver" | sed -n 's/^Depends: //p' | tr ',|' '\n\n' |
		sed -n "s/^ *\(linux-[a-z]*-${img#linux-image-}\) (= $ver)\$/\1/p" | sort -u)
	(cd "$dir/debs" && apt-get "${apt_opts[@]}" download -q "$img=$ver" "$hdr=$ver" \
		$(for p in $parts; do echo "$p=$ver"; done) >../download.log 2>&1) ||
		{ cat "$dir/download.log" >&2; die "apt-get download $img=$ver $hdr=$ver $parts failed"; }
	say "image parts: $img ${parts//$'\n'/ }"
	rm -rf "$dir/image" "$dir/headers"
	for p in $img $parts; do dpkg-deb -x "$dir/debs/${p}_"*.deb "$dir/image"; done
	dpkg-deb -x "$dir/debs/${hdr}_"*.deb "$dir/headers"
	# The root's installed source is used when it is this version; else that version's deb.
	if [ "$(dpkg-query -W -f='${Version}' "$src" 2>/dev/null)" = "$ver" ]; then
		tarball=$(ls /usr/src/"$src".tar.* | head -n1)
	else
		(cd "$dir/debs" && apt-get "${apt_opts[@]}" download -q "$src=$ver" >&2) ||
			die "apt-get download $src=$ver failed"
		rm -rf "$dir/source-deb"
		dpkg-deb -x "$dir/debs/${src}_"*.deb "$dir/source-deb"
		tarball=$(ls "$dir"/source-deb/usr/src/"$src".tar.* | head -n1)
	fi
	if [ ! -e "$dir/linux/.unpacked" ]; then
		say "unpacking $tarball"
		rm -rf "$dir/linux"
		mkdir "$dir/linux"
		tar -xf "$tarball" -C "$dir/linux" --strip-components=1
		touch "$dir/linux/.unpacked"
	fi
	touch "$dir/.unpacked"
}

# The image's kernel and config: /usr/lib/modules/<release>/{vmlinuz,config} in the split
# packages of 7.x, /boot/{vmlinuz,config}-<release> before.
image_file() {
	local dir=$1 rel=$2 what=$3 f
	for f in "$dir/image/usr/lib/modules/$rel/$what" "$dir/image/boot/$what-$rel"; do
		[ -f "$f" ] && { echo "$f"; return 0; }
	done
	die "the image has no $what (looked in usr/lib/modules/$rel and boot/)"
}

# The release of the unpacked image (its modules directory's name).
image_release() {
	local m
	m=$(ls -d "$1"/image/usr/lib/modules/*/ "$1"/image/lib/modules/*/ "$1"/modules/lib/modules/*/ 2>/dev/null |
		head -n1 || true)
	[ -n "$m" ] || die "the image deb has no lib/modules/<release>"
	basename "$m"
}

# Configure the source with the image's exact config and build what an external Rust module
# needs: scripts, generated headers, and rust/ (core, kernel crate, bindings, macros). No vmlinux.
prepare_tree() {
	local dir=$1 rel=$2 jobs t0 changed config cc make_args
	[ -e "$dir/linux/.prepared" ] && return 0
	config=$(image_file "$dir" "$rel" config)
	# The compiler the image was built with, by the name it was called (Debian:
	# x86_64-linux-gnu-gcc-14), so CONFIG_CC_VERSION_TEXT stays the image's.
	cc=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\) .*/\1/p' "$config")
	command -v "$cc" >/dev/null || die "the image was built by $cc, which this root lacks"
	make_args="CC=$cc KERNELRELEASE=$rel"
	echo "CC=$cc" >"$dir/make-args"
	cd "$dir/linux"
	cp "$config" .config
	make -s olddefconfig $make_args
	# olddefconfig must keep every option the image's config sets: a different compiler or
	# rustc shows here (CONFIG_RUST silently dropped when this rustc is not the image's).
	# Options the distribution strips from its installed config (signing keys, build salt)
	# come back as defaults; they do not touch what a module is built against.
	changed=$(diff <(grep '^CONFIG_' "$config" | sort) <(grep '^CONFIG_' .config | sort) |
		grep '^[<>]' || true)
	local added=
	while IFS= read -r l; do
		case $l in
		">"*) o=${l#> }; o=${o%%=*}
			grep -q "^$o=\|^# $o is not set" "$config" || { added="$added ${o#CONFIG_}"; changed=$(echo "$changed" | grep -vxF "$l" || true); } ;;
		esac
	done <<<"$changed"
	[ -z "$added" ] || say "options absent from the image's config, defaulted:$added"
	if [ -n "$changed" ]; then
		echo "$changed" | sed 's/^</  image: /; s/^>/  here:  /' >&2
		grep -qx 'CONFIG_RUST=y' .config ||
			die "CONFIG_RUST did not survive olddefconfig: the image was built by $(grep RUSTC_VERSION_TEXT "$config"), this root has '$(rustc --version)'"
		die "configuring linux-source with the image's config changed it (above): toolchain differs from the image's"
	fi
	jobs=$(( $(nproc) + 1 ))
	t0=$(date +%s)
	make -s -j"$jobs" $make_args modules_prepare
	say "modules_prepare: $(( $(date +%s) - t0 ))s"
	t0=$(date +%s)
	make -s -j"$jobs" $make_args rust/
	say "rust/ (core, kernel crate, bindings, macros): $(( $(date +%s) - t0 ))s"
	# modpost checks rox.ko's every import against the stock kernel's exports.
	cp "$dir/headers/usr/src/linux-headers-$rel/Module.symvers" Module.symvers
	[ "$(cat include/config/kernel.release)" = "$rel" ] || die "prepared tree's release is not $rel"
	touch .prepared
}

# The guest's modules: the image's, with the module index the deb leaves to its postinst.
install_modules() {
	local dir=$1 rel=$2 m
	[ -e "$dir/modules/.installed" ] && return 0
	cp "$(image_file "$dir" "$rel" vmlinuz)" "$dir/bzImage"
	m=$(ls -d "$dir"/image/usr/lib/modules "$dir"/image/lib/modules 2>/dev/null | head -n1 || true)
	rm -rf "$dir/modules"
	mkdir -p "$dir/modules/lib"
	mv "$m" "$dir/modules/lib/modules"
	depmod -b "$dir/modules" "$rel"
	touch "$dir/modules/.installed"
}

# A small initramfs: the stock kernel has 9p and virtio-pci as modules, and the guest's root is
# 9p. Its /init loads them (busybox insmod, dependency order from modprobe), mounts the root
# and hands over to the init named on the command line.
make_initrd() {
	local dir=$1 rel=$2 ird=$dir/initrd.d mods l
	rm -rf "$ird"
	mkdir -p "$ird"/{bin,lib,proc,sys,dev,newroot,modules}
	cp /usr/bin/busybox "$ird/bin/busybox"
	for l in $(ldd /usr/bin/busybox | grep -o '/[^ ]*'); do
		mkdir -p "$ird$(dirname "$l")"
		cp -L "$l" "$ird$l"
	done
	mods=$(for m in virtio_pci 9pnet_virtio 9p; do
		modprobe -d "$dir/modules" -S "$rel" --show-depends "$m" || die "modprobe: no $m for $rel"
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }')
	echo "$mods" | grep -q '/9p\.ko' || grep -qx 'CONFIG_9P_FS=y' "$dir/linux/.config" ||
		die "no 9p module for the initramfs: $mods"
	: >"$ird/modules/order"
	for m in $mods; do
		local base
		base=$(basename "$m")
		base=${base%.xz}
		base=${base%.zst}
		case $m in
		*.xz) xz -dc "$m" >"$ird/modules/$base" ;;
		*.zst) zstd -dcq "$m" >"$ird/modules/$base" ;;
		*) cp "$m" "$ird/modules/$base" ;;
		esac
		echo "$base" >>"$ird/modules/order"
	done
	cp /rox/scripts/stock-initrd-init "$ird/init"
	chmod +x "$ird/init"
	(cd "$ird" && find . | cpio -o -H newc --quiet) >"$dir/initrd"
	rm -rf "$ird"
	say "initrd: $(echo "$mods" | wc -w) modules ($(echo "$mods" | xargs -n1 basename | tr '\n' ' '))"
}

case ${1:-} in
select) select_versions ;;
prepare)
	[ $# = 6 ] || die "usage: $0 prepare DIR SRC VER IMG HDR"
	dir=$2
	unpack "$dir" "$3" "$4" "$5" "$6"
	rel=$(image_release "$dir")
	say "image $5 $4: release $rel"
	prepare_tree "$dir" "$rel"
	install_modules "$dir" "$rel"
	make_initrd "$dir" "$rel"
	echo "$rel" >"$dir/kernelrelease"
	echo "$3 $4 $5 $6" >"$dir/packages"
	rm -rf "$dir/image" "$dir/source-deb" "$dir/debs" "$dir/.unpacked"
	;;
*) die "usage: $0 select | prepare DIR SRC VER IMG HDR" ;;
esac
