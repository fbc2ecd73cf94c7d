#!/usr/bin/env bash
# Runs every rox-nic fuzz target (or those named in FUZZ_TARGETS) for FUZZ_SECONDS each with
# cargo-fuzz on the nightly toolchain, then prints per target: executions, executions/s,
# libFuzzer's coverage (cov: edges, ft: features), corpus size and crashes. `make fuzz` runs it.
#   FUZZ_SECONDS=300     time per target
#   FUZZ_TARGETS="wire"  a subset (default: every target of fuzz/Cargo.toml)
#   FUZZ_ARGS="..."      more libFuzzer flags (e.g. -jobs=2)
# New corpus inputs land in fuzz/corpus/<target>/, crashes in fuzz/artifacts/<target>/; a crash
# is fixed and its input copied to fuzz/regressions/<target>/ (tests/fuzz_replay.rs replays
# both on stable in `make test`). Exits 1 if any target crashed.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-300}
# `cargo fuzz list` names every binary of fuzz/Cargo.toml, the seed-corpus writer among them,
# which is not a target (run as one it fails at once and the run would report a crash).
targets=${FUZZ_TARGETS:-$(cargo +nightly fuzz list | grep -vx seed-corpus)}
logs=fuzz/artifacts/logs
mkdir -p "$logs"
if ! command -v cargo-fuzz >/dev/null && ! [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-fuzz" ]; then
	echo "fuzz: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
	exit 2
fi
missing=0
for t in $targets; do [ -d "fuzz/corpus/$t" ] || missing=1; done
if [ $missing = 1 ]; then
	cargo +nightly run --quiet --manifest-path fuzz/Cargo.toml --bin seed-corpus || exit 2
fi
nice -n 10 cargo +nightly fuzz build || exit 2
declare -A summary
crashed=0
for t in $targets; do
	before=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
	echo "fuzz: $t for ${seconds}s"
	# libFuzzer's status lines go to stderr; its own exit status says whether it crashed.
	nice -n 10 cargo +nightly fuzz run "$t" "fuzz/corpus/$t" -- \
		-max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
		${FUZZ_ARGS:-} >"$logs/$t.log" 2>&1
	rc=$?
	after=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
	last=$(grep -E '^#[0-9]+' "$logs/$t.log" | tail -1)
	cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
	ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
	execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$logs/$t.log" | tail -1)
	rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$logs/$t.log" | tail -1)
	corpus=$(ls "fuzz/corpus/$t" | wc -l)
	crashes=$((after - before))
	if [ $rc -ne 0 ]; then
		crashed=1
		[ $crashes -gt 0 ] || crashes="rc=$rc"
		grep -m1 -E "panicked at|ERROR: (libFuzzer|AddressSanitizer)" -A2 "$logs/$t.log" | sed "s/^/fuzz: $t: /"
	fi
	summary[$t]=$(printf '%-8s %10s %8s %8s %8s %8s %s' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes")
done
printf '%-8s %10s %8s %8s %8s %8s %s\n' target execs exec/s cov ft corpus crashes
for t in $targets; do echo "${summary[$t]}"; done
echo "fuzz: logs in qemu/rox-nic/$logs/"
exit $crashed
