#!/usr/bin/env bash
# Build librox (provider/) inside the toolchain root and install it into the root, so guests
# (whose userspace is that root) load it.
#
#   1. Once per rdma-core source + recipe: unpack the root's rdma-core 56.1 source into
#      $ROX_CACHE/rdma-core-56.1-<key>/, configure it with cmake and build only the generated
#      headers the provider ABI needs (the private headers infiniband/driver.h, kern-abi.h,
#      cmd_ioctl.h, cmd_write.h and config.h exist only in such a build tree).
#   2. cargo build of provider/ (its own cargo project, not a workspace member: it links the
#      root's libibverbs 56.1) with CARGO_HOME and the target dir in the cache; build.rs runs
#      bindgen against the build tree's headers.
#   3. Install lib<name>-rdmav<PABI>.so into rdma-core's provider dir and <name>.driver into its
#      config dir (both read from the build tree's config.h), only when they changed.
#
# Usage: scripts/build-provider.sh [--test]   (--test also runs the crate's tests in the root)
# Idempotent; a no-op rebuild takes a few seconds.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

run_tests=false
case ${1:-} in
--test) run_tests=true ;;
"") ;;
*) die "usage: scripts/build-provider.sh [--test]" ;;
esac

RDMA_CORE_VERSION=56.1
# Inside the root (setup-root.sh puts the Debian source there).
RDMA_CORE_TARBALL=/usr/src/rdma-core/rdma-core_${RDMA_CORE_VERSION}.orig.tar.gz
# Configured like Debian's package so config.h names the same provider and config dirs as the
# root's libibverbs; no pyverbs, man pages or static libraries (we build none of it anyway).
RDMA_CORE_CMAKE_FLAGS=(-GNinja -Wno-dev -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 -DENABLE_STATIC=0
	-DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_INSTALL_SYSCONFDIR=/etc
	-DCMAKE_INSTALL_LIBDIR=lib/x86_64-linux-gnu)
# The only build-time generated header the private headers include (kern-abi.h includes it);
# everything else under build/include is made at configure time.
RDMA_CORE_GENERATED_HEADERS=(include/kernel-abi/ib_user_verbs.h)
PROVIDER_NAME=rox

root=$(root_dir)
[ -e "$root/.complete" ] || die "no toolchain root at $root; run 'make setup'"
[ -f "$root$RDMA_CORE_TARBALL" ] || die "no rdma-core source at $RDMA_CORE_TARBALL in the root"

rc_key=$({
	sha256sum <"$root$RDMA_CORE_TARBALL"
	printf '%s\n' "${RDMA_CORE_CMAKE_FLAGS[@]}" "${RDMA_CORE_GENERATED_HEADERS[@]}"
} | sha256sum | cut -c1-16)
rc_dir=$ROX_CACHE/rdma-core-$RDMA_CORE_VERSION-$rc_key
rc_in_root=$(cache_path_in_root "$rc_dir")

if [ -e "$rc_dir/.complete" ]; then
	log "rdma-core $RDMA_CORE_VERSION build tree: $rc_dir (cached)"
else
	log "rdma-core $RDMA_CORE_VERSION build tree: preparing $rc_dir"
	rm -rf "$rc_dir"
	mkdir -p "$rc_dir"
	# cmake's header symlinks are absolute paths as seen inside the root (/cache/...).
	in_root bash -c '
		set -euo pipefail
		dir=$1 tarball=$2; shift 2
		ngen=$1; shift
		generated=("${@:1:ngen}"); shift "$ngen"
		mkdir -p "$dir/src" "$dir/build"
		tar -C "$dir/src" --strip-components=1 -xzf "$tarball"
		cmake -S "$dir/src" -B "$dir/build" "$@" >"$dir/cmake.log" 2>&1 ||
			{ tail -30 "$dir/cmake.log"; exit 1; }
		ninja -C "$dir/build" "${generated[@]}"
	' _ "$rc_in_root" "$RDMA_CORE_TARBALL" \
		"${#RDMA_CORE_GENERATED_HEADERS[@]}" "${RDMA_CORE_GENERATED_HEADERS[@]}" \
		"${RDMA_CORE_CMAKE_FLAGS[@]}"
	for h in infiniband/driver.h infiniband/kern-abi.h infiniband/cmd_ioctl.h \
		infiniband/cmd_write.h config.h "${RDMA_CORE_GENERATED_HEADERS[@]#include/}"; do
		[ -e "$rc_dir/build/include/$h" ] || [ -L "$rc_dir/build/include/$h" ] ||
			die "rdma-core build tree lacks include/$h"
	done
	touch "$rc_dir/.complete"
	log "rdma-core $RDMA_CORE_VERSION build tree: ready"
fi

# Facts from rdma-core's own config.h: the private ABI version and where libibverbs looks.
config_value() {
	sed -n "s/^#define $1 \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$rc_dir/build/include/config.h"
}
pabi=$(config_value IBVERBS_PABI_VERSION)
provider_dir=$(config_value VERBS_PROVIDER_DIR)
config_dir=$(config_value IBV_CONFIG_DIR)
[ -n "$pabi" ] && [ -n "$provider_dir" ] && [ -n "$config_dir" ] ||
	die "cannot read IBVERBS_PABI_VERSION/VERBS_PROVIDER_DIR/IBV_CONFIG_DIR from config.h"
so_name=lib$PROVIDER_NAME-rdmav$pabi.so
log "provider ABI $pabi: building $so_name"

prov_cache=$ROX_CACHE/provider
# One target directory per clone: every clone's sources appear at the same path (/rox) inside
# the root, so a shared one would let cargo take another clone's newer build for fresh and
# install that librox.
prov_target=$prov_cache/target-$(echo "$ROX_TOP" | sha256sum | cut -c1-8)
mkdir -p "$prov_cache/cargo-home" "$prov_target"
# Crates are fetched by the host's cargo (the host's TLS setup reaches crates.io; the root's
# may not), into the CARGO_HOME the root's cargo then builds from, offline.
if ! CARGO_HOME=$prov_cache/cargo-home cargo fetch --manifest-path "$ROX_TOP/provider/Cargo.toml" \
	--locked --offline >/dev/null 2>&1; then
	log "provider: fetching crates (host cargo) into $prov_cache/cargo-home"
	CARGO_HOME=$prov_cache/cargo-home cargo fetch --manifest-path "$ROX_TOP/provider/Cargo.toml" --locked
fi
cargo_env=(env CARGO_HOME="$(cache_path_in_root "$prov_cache/cargo-home")"
	CARGO_TARGET_DIR="$(cache_path_in_root "$prov_target")"
	ROX_RDMA_CORE_BUILD="$rc_in_root/build")
cargo_args=(--manifest-path /rox/provider/Cargo.toml --release --locked --offline)
in_root "${cargo_env[@]}" cargo build "${cargo_args[@]}"
if $run_tests; then
	log "provider: cargo test (in the root)"
	in_root "${cargo_env[@]}" cargo test "${cargo_args[@]}"
fi

built=$prov_target/release/lib$PROVIDER_NAME.so
[ -f "$built" ] || die "cargo did not produce $built"
# Keep the bindings build.rs generated (the newest build's) where scripts/quality.sh finds them:
# clippy runs on the host, which has no rdma-core build tree of its own.
generated=$(ls -td "$prov_target"/release/build/rox-provider-*/out 2>/dev/null | head -1)
[ -n "$generated" ] && [ -f "$generated/rdma_core.rs" ] || die "no generated bindings under $prov_target"
mkdir -p "$prov_target/bindings"
cp "$generated/rdma_core.rs" "$generated/pabi.rs" "$prov_target/bindings/"

# Install into the root only what changed (keeps timestamps stable for a no-op run).
install_if_changed() { # src dest
	if cmp -s "$1" "$2"; then
		log "up to date: root:${2#"$root"}"
	else
		install -D -m 0644 "$1" "$2"
		log "installed: root:${2#"$root"}"
	fi
}
install_if_changed "$built" "$root$provider_dir/$so_name"
driver_file=$prov_cache/$PROVIDER_NAME.driver
echo "driver $PROVIDER_NAME" >"$driver_file"
install_if_changed "$driver_file" "$root$config_dir/$PROVIDER_NAME.driver"
log "provider ready: $provider_dir/$so_name (driver file $config_dir/$PROVIDER_NAME.driver)"
