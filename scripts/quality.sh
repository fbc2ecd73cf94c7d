#!/usr/bin/env bash
# The quality gate: rustfmt and clippy with warnings denied and every unsafe block documented
# (`// SAFETY:`), for each userspace crate; and the size of all of rox's Rust.
#   scripts/quality.sh --workspace  uapi, rox-nic, rox-lab (host toolchain), rustfmt of librox
#                                   and rox.ko, and scripts/code-size.py over the whole tree
#                                   (Rust, Python, C and shell source files <= 800 lines,
#                                   functions <= 120; test code too), and scripts/doc-links.py
#                                   (every relative link and #anchor in the tracked Markdown
#                                   resolves; well under a second)
#   scripts/quality.sh --provider   clippy of librox (provider/, its own cargo project, built in
#                                   the toolchain root with its own cargo setup): on the
#                                   host, with the bindings the root build generated
#                                   (scripts/build-provider.sh keeps them)
#   scripts/quality.sh --module     rox.ko built by the kernel's own
#                                   `make CLIPPY=1` (clippy-driver of the root's rustc, the
#                                   kernel's clippy lints) with warnings denied, into a scratch
#                                   output directory (the module make test loads is not touched),
#                                   against the $ROX_KERNEL_FLAVOUR kernel (default release)
#   scripts/quality.sh              all three (`make quality`)
# make test runs --workspace first, --module after the module build and --provider right after
# the provider build.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROX_TOP"
part=${1:-all}
case $part in --workspace | --provider | --module | all) ;; *) die "usage: scripts/quality.sh [--workspace|--provider|--module]" ;; esac
if [ "$part" = --module ] || [ "$part" = all ]; then
	flavour=${ROX_KERNEL_FLAVOUR:-release}
	kdir=$(kernel_dir "$flavour")
	[ -e "$kdir/.complete" ] || die "no $flavour kernel in the cache; run 'make setup'"
	in_root test -x /usr/bin/clippy-driver || die "the toolchain root has no clippy-driver (rust-clippy)"
	scratch=$(module_dir "$flavour")-clippy
	# The stock kernel's tree names the compiler it was built with (make-args: CC=...).
	kargs=()
	[ ! -f "$kdir/make-args" ] || read -ra kargs <"$kdir/make-args"
	log "clippy: kernel build of rox.ko against the $flavour kernel with CLIPPY=1, warnings denied"
	rm -rf "$scratch" && mkdir -p "$scratch"
	# KRUSTFLAGS reaches every rustc (here clippy-driver) call of the module build.
	in_root make -C "$(cache_path_in_root "$kdir")/linux" M=/rox MO="$(cache_path_in_root "$scratch")" \
		"${kargs[@]}" CLIPPY=1 KRUSTFLAGS=-Dwarnings -j"$(nproc)" modules ||
		die "clippy found problems in rox.ko's Rust (above)"
	rm -rf "$scratch"
	[ "$part" = --module ] && { log "quality gate passed (--module)"; exit 0; }
fi
lints=(-D warnings -D clippy::undocumented_unsafe_blocks)
# Without a host toolchain cargo is the root's (scripts/root-cargo): its clippy lints, and no
# rustfmt (the root has none), so formatting is not checked there and the log says so.
root_cargo=false
[ "$(command -v cargo)" != "$ROX_TOP/scripts/root-cargo/cargo" ] || root_cargo=true
if $root_cargo; then
	in_root test -x /usr/bin/clippy-driver || die "the toolchain root has no clippy-driver (rust-clippy)"
else
	for tool in rustfmt clippy-driver; do
		command -v "$tool" >/dev/null || [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/$tool" ] ||
			die "the host Rust toolchain has no $tool (rustup component add rustfmt clippy)"
	done
fi
if [ "$part" != --provider ]; then
	log "size: source files and functions of the whole tree (scripts/code-size.py)"
	python3 scripts/code-size.py || die "files or functions over the size limits (above)"
	log "docs: relative links and anchors of the Markdown files (scripts/doc-links.py)"
	python3 scripts/doc-links.py || die "broken links in the docs (above)"
	if $root_cargo; then
		log "rustfmt: NOT CHECKED (no host Rust toolchain, and the root has no rustfmt)"
	else
		log "rustfmt: workspace"
		cargo fmt --all --check
		log "rustfmt: provider"
		cargo fmt --manifest-path provider/Cargo.toml --check
		log "rustfmt: rox.ko (drivers/, from its crate root)"
		rustfmt --edition 2021 --check drivers/rox_main.rs
	fi
	log "clippy: workspace (uapi, rox-nic, rox-lab), all targets"
	cargo clippy --workspace --all-targets --quiet -- "${lints[@]}"
fi
if [ "$part" != --workspace ]; then
	prov_cache=$ROX_CACHE/provider
	prov_target=$prov_cache/target-$(echo "$ROX_TOP" | sha256sum | cut -c1-8)
	[ -f "$prov_target/bindings/rdma_core.rs" ] ||
		die "librox's generated bindings are missing: build it first (make provider)"
	log "clippy: provider (host clippy over the root build's bindings), all targets"
	CARGO_HOME=$prov_cache/cargo-home CARGO_TARGET_DIR=$prov_target/host-clippy \
		ROX_PROVIDER_BINDINGS=$prov_target/bindings \
		cargo clippy --manifest-path provider/Cargo.toml --locked --offline --all-targets --quiet -- "${lints[@]}"
fi
log "quality gate passed ($part)"
