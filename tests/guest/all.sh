#!/bin/bash
# Guest side: run each tests/guest/t-*.sh (matching an optional pattern), report each,
# fail if any fails. Usage (in the guest): all.sh /path/to/rox.ko [patterns] [kernel flavour] [strict]
# Patterns: comma-separated substrings of the test names (any one selects a test).
# With "strict" (the guest has rox devices and librox), a test that skips ("SKIP: ...") fails:
# a missing device or library must not pass for a green run.
export ROX_KO=$1
pattern=${2:-}
export ROX_KERNEL_FLAVOUR=${3:-release}
strict=${4:-}
cd "$(dirname "$0")"
pass=0 fail=0 failed=()
for t in t-*.sh; do
	if [ -n "$pattern" ]; then
		selected=
		IFS=, read -ra wanted <<<"$pattern"
		for w in "${wanted[@]}"; do [[ $t == *$w* ]] && selected=1; done
		[ -n "$selected" ] || continue
	fi
	echo "=== guest test $t"
	start=$(date +%s)
	bash "$t" 2>&1 | tee /tmp/guest-test.out
	rc=${PIPESTATUS[0]}
	if [ "$rc" = 0 ] && [ "$strict" = strict ] && grep -q '^SKIP' /tmp/guest-test.out; then
		echo "strict run: $t skipped, which counts as a failure here"
		rc=1
	fi
	if [ "$rc" = 0 ]; then
		pass=$((pass + 1)); echo "=== PASS $t ($(( $(date +%s) - start ))s)"
	else
		fail=$((fail + 1)); failed+=("$t"); echo "=== FAIL $t ($(( $(date +%s) - start ))s)"
	fi
done
echo "=== guest tests: $pass passed, $fail failed ${failed[*]}"
[ $fail = 0 ] && [ $pass -gt 0 ]
