#!/bin/bash
# Guest side: run each tests/guest/t-*.sh (matching an optional pattern), report each,
# fail if any fails. Usage (in the guest): all.sh /path/to/rox.ko [pattern] [kernel flavour]
export ROX_KO=$1
pattern=${2:-}
export ROX_KERNEL_FLAVOUR=${3:-release}
cd "$(dirname "$0")"
pass=0 fail=0 failed=()
for t in t-*.sh; do
	[ -z "$pattern" ] || [[ $t == *$pattern* ]] || continue
	echo "=== guest test $t"
	start=$(date +%s)
	if bash "$t"; then
		pass=$((pass + 1)); echo "=== PASS $t ($(( $(date +%s) - start ))s)"
	else
		fail=$((fail + 1)); failed+=("$t"); echo "=== FAIL $t ($(( $(date +%s) - start ))s)"
	fi
done
echo "=== guest tests: $pass passed, $fail failed ${failed[*]}"
[ $fail = 0 ] && [ $pass -gt 0 ]
