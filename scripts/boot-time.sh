#!/usr/bin/env bash
# boot-time.sh [N] [flavours...]: boot-to-command time of each kernel flavour, N boots each
# (default 3; flavours default: release stock), the same command (`true`) under the same
# accelerator, interleaved so load from elsewhere falls on both alike. Prints each boot's wall
# time (qemu/vm start to its exit) and the mean per flavour. Hold /work/guest.lock around it.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
n=${1:-3}
shift || true
flavours=("${@:-release}")
[ $# -gt 0 ] || flavours=(release stock)
declare -A total
for ((i = 1; i <= n; i++)); do
	for f in "${flavours[@]}"; do
		t0=$(date +%s.%N)
		"$ROX_TOP/qemu/vm" --flavour "$f" -- true >/dev/null 2>&1 || die "boot $i of $f failed"
		t=$(echo "$(date +%s.%N) - $t0" | bc)
		total[$f]=$(echo "${total[$f]:-0} + $t" | bc)
		printf 'boot %d %-8s %6.1f s\n' "$i" "$f" "$t"
	done
done
for f in "${flavours[@]}"; do
	printf 'mean   %-8s %6.1f s over %d boots\n' "$f" "$(echo "${total[$f]} / $n" | bc -l)" "$n"
done
