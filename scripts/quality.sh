#!/usr/bin/env bash
# The quality gate (make test's first check after setup, `make quality` alone): rustfmt and
# clippy with warnings denied and every unsafe block documented (`// SAFETY:`), for each
# userspace crate: the workspace (uapi, rox-nic, rox-lab) on the host, librox (provider/, its
# own cargo project) formatted on the host and linted where it builds, in the toolchain root.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROX_TOP"
lints=(-D warnings -D clippy::undocumented_unsafe_blocks)
for tool in rustfmt clippy-driver; do
	command -v "$tool" >/dev/null || [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/$tool" ] ||
		die "the host Rust toolchain has no $tool (rustup component add rustfmt clippy)"
done
log "rustfmt: workspace"
cargo fmt --all --check
log "rustfmt: provider"
cargo fmt --manifest-path provider/Cargo.toml --check
log "clippy: workspace (uapi, rox-nic, rox-lab), all targets"
cargo clippy --workspace --all-targets --quiet -- "${lints[@]}"
log "quality gate passed"
