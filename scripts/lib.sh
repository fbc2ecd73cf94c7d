# Shared helpers for rox's scripts (sourced, not executed).
# Everything built lives in $ROX_CACHE (default ~/.cache/rox), outside the clone.

ROX_TOP=${ROX_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
ROX_CACHE=${ROX_CACHE:-$HOME/.cache/rox}
mkdir -p "$ROX_CACHE"

# Pinned kernel source package; setup falls back to the newest linux-source-7.* offered.
ROX_KERNEL_PKG=${ROX_KERNEL_PKG:-linux-source-7.3}

log() { printf '[rox %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'rox: error: %s\n' "$*" >&2; exit 1; }

# Content key of a set of files: changing any of them changes the key.
content_key() { cat "$@" | sha256sum | cut -c1-16; }

# Bump when setup-root.sh changes what goes into the root (not how it reports or recovers).
ROX_ROOT_RECIPE=1
root_key() { { echo "$ROX_ROOT_RECIPE"; cat "$ROX_TOP/scripts/root-packages.txt"; } | sha256sum | cut -c1-16; }
root_dir() { echo "$ROX_CACHE/root-$(root_key)"; }

# Bump when setup-kernel.sh changes how the kernel is built (not how it reports progress).
ROX_KERNEL_RECIPE=1
# $1: flavour. The debug flavour adds its config fragment to the key.
kernel_key() {
	{ echo "$ROX_KERNEL_RECIPE"; cat "$ROX_TOP/scripts/root-packages.txt" "$ROX_TOP/qemu/kernel.config"
	  [ "${1:-release}" = release ] || cat "$ROX_TOP/qemu/kernel-$1.config"; } | sha256sum | cut -c1-16
}
# $1: flavour (release|debug|stock). The stock flavour is Debian's kernel, prepared by
# setup-stock-kernel.sh into the directory $ROX_CACHE/stock.current names.
kernel_dir() {
	if [ "${1:-}" = stock ]; then
		echo "$ROX_CACHE/$(cat "$ROX_CACHE/stock.current" 2>/dev/null || echo stock-none)"
	else
		echo "$ROX_CACHE/kernel-$(kernel_key "${1:-release}")-${1:-release}"
	fi
}
# Bump when setup-stock-kernel.sh changes what it prepares. $1: the Debian package version.
ROX_STOCK_RECIPE=1
stock_dir_name() { echo "stock-r$ROX_STOCK_RECIPE-$(echo "$1" | tr '~+:' '___')"; }
# $1: flavour. Where rox.ko of this clone is built (one per clone: builds never mix).
module_dir() { echo "$(kernel_dir "$1")/rox-module-$(echo "$ROX_TOP" | sha256sum | cut -c1-8)"; }

# Run a command inside the root (see scripts/in-root). To run one in the background and be
# able to stop it by pid, start scripts/in-root itself, not this function.
in_root() { "$ROX_TOP/scripts/in-root" "$@"; }

# Path inside the root of a path under the cache.
cache_path_in_root() { echo "/cache/${1#"$ROX_CACHE"/}"; }

# Time a stage and remember its duration for the summary.
ROX_TIMINGS=${ROX_TIMINGS:-$ROX_CACHE/.timings}
stage() {
	local name=$1 t0 rc
	shift
	t0=$(date +%s)
	log "stage $name: start"
	"$@"
	rc=$?
	log "stage $name: $(( $(date +%s) - t0 ))s (exit $rc)"
	printf '%-14s %5ss %s\n' "$name" "$(( $(date +%s) - t0 ))" "$([ $rc = 0 ] && echo ok || echo FAILED)" >>"$ROX_TIMINGS"
	return $rc
}

# A host without cargo on PATH builds with the toolchain root's (scripts/root-cargo/cargo);
# ROX_ROOT_CARGO=1 asks for it even when the host has one.
if [ -n "${ROX_ROOT_CARGO:-}" ] || ! command -v cargo >/dev/null; then
	case :$PATH: in *":$ROX_TOP/scripts/root-cargo:"*) ;; *) PATH=$ROX_TOP/scripts/root-cargo:$PATH ;; esac
fi
