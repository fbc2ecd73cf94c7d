#!/bin/bash
# librox on a rox device (guest): ibv_devinfo -v shows rox_0 with real caps (FLUSH, ATOMIC
# WRITE, SRQ resize, memory windows among them), PORT_ACTIVE and link layer Ethernet; rdma-core's own pyverbs
# suite — every module that is not vendor-specific, one python process per module and device,
# so one crash loses one module, not a column — runs on rox_0 and, for comparison, on rdma_rxe
# in the same guest, and a per-module table rox_0 | rxe0 is printed. Fails on any rox_0
# failure, error or crash (a module run that exits without its "Ran N tests" line is a crash),
# if a test in REQUIRED does not pass on rox_0, or if a test passes on rxe0 but not on rox_0
# unless RXE_ONLY names it with the reason. A failed module is not run again: only with
# ROX_ALLOW_FLAKY=1 (tests/guest/run passes it on) is it rerun, and a failure that does not
# repeat is then printed as "FLAKY (allowed by ROX_ALLOW_FLAKY=1)" with the failed tests.
# Then an SRQ resize with WRs posted must lose none.
# Skips (exit 0) when the guest has no rox device; prints SKIP (a failure in strict runs) and
# goes on without the comparison when no rxe0 can be made.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

ROX_VENDOR=0x524f # rox_uapi::regs::PCI_VENDOR_ID
# rdma-core's pyverbs suite as Debian ships it: most files gzipped by dh_compress, so it runs
# from an unpacked copy.
PYVERBS_SUITE=/usr/share/doc/rdma-core/tests
# Modules for one vendor's hardware (or for a GPU): not run.
VENDOR_MODULES='^test_(mlx5|efa|efadv|hns|irdma|bnxt|cuda)'
# Seconds allowed per module and device.
MODULE_TIMEOUT=600
# Tests that must pass on rox_0 (Class.test): what rox implemented for issue 5.
REQUIRED=(
	QpExTestCase.test_qp_ex_rc_flush
	QpExTestCase.test_qp_ex_rc_flush_type_violate
	QpExTestCase.test_qp_ex_rc_atomic_write
	QpExTestCase.test_qp_ex_rc_send
	QpExTestCase.test_qp_ex_rc_send_imm
	QpExTestCase.test_qp_ex_rc_rdma_write
	QpExTestCase.test_qp_ex_rc_rdma_write_imm
	QpExTestCase.test_qp_ex_rc_rdma_write_zero_length
	QpExTestCase.test_qp_ex_rc_rdma_read
	QpExTestCase.test_qp_ex_rc_rdma_read_zero_size
	QpExTestCase.test_qp_ex_rc_atomic_cmp_swp
	QpExTestCase.test_qp_ex_rc_atomic_fetch_add
	QpExTestCase.test_qp_ex_ud_send
	QpExTestCase.test_qp_ex_rc_bind_mw
	CQTest.test_resize_cq
	SrqTestCase.test_resize_srq
	SrqTestCase.test_rc_srq_traffic
	MWTest.test_mw_type1
	MWTest.test_invalidate_mw_type1
	MWTest.test_mw_type2
	MWTest.test_mw_type2_invalidate_local
	MWTest.test_mw_type2_invalidate_remote
	MWTest.test_mw_type2_invalidate_dealloc
	MWTest.test_reg_mw_wrong_type
	OdpTestCase.test_odp_rc_traffic
	OdpTestCase.test_odp_ud_traffic
	OdpTestCase.test_odp_rc_rdma_write
	OdpTestCase.test_odp_rc_rdma_read
	OdpTestCase.test_odp_rc_atomic_cmp_and_swp
	OdpTestCase.test_odp_rc_atomic_fetch_and_add
	OdpTestCase.test_odp_rc_mixed_mr
	OdpTestCase.test_odp_sync_prefetch_rc_traffic
	OdpTestCase.test_odp_async_prefetch_rc_traffic
	OdpTestCase.test_odp_prefetch_sync_no_page_fault_rc_traffic
	OdpTestCase.test_odp_prefetch_async_no_page_fault_rc_traffic
	CMTestCase.test_rdmacm_async_multicast_traffic
	CMTestCase.test_rdmacm_async_ex_multicast_traffic
	CMTestCase.test_rdmacm_async_ex_leave_multicast_traffic
)
# Tests rxe0 passes that rox_0 may skip, each with the reason (Class.test=reason). Empty: rox
# passes every non-vendor test rxe passes.
RXE_ONLY=()

[ -f /usr/lib/x86_64-linux-gnu/libibverbs/librox-rdmav34.so ] ||
	skip "librox is not installed in the root (scripts/build-provider.sh installs it)"

rox_pci=$(grep -l "^$ROX_VENDOR\$" /sys/bus/pci/devices/*/vendor 2>/dev/null | head -1)
if ! ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1; then
	[ -n "$rox_pci" ] || skip "no rox device in this guest (no PCI function with vendor $ROX_VENDOR)"
	if ! grep -q '^rox ' /proc/modules; then
		[ -f "${ROX_KO:-}" ] || fail "a rox PCI device exists but no rox.ko to load (ROX_KO=${ROX_KO:-})"
		insmod "$ROX_KO" || fail "insmod $ROX_KO failed"
	fi
	for _ in $(seq 50); do ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1 && break; sleep 0.2; done
	ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1 ||
		fail "rox.ko is loaded and a rox PCI device exists, but no rox_* ib device appeared"
fi

# --- ibv_devices / ibv_devinfo -v
ibv_devices | tee /tmp/ibv_devices.out
grep -qE '^ *rox_0 ' /tmp/ibv_devices.out || fail "ibv_devices does not list rox_0"
ibv_devinfo -v -d rox_0 >/tmp/devinfo.out 2>&1 || { cat /tmp/devinfo.out; fail "ibv_devinfo -v -d rox_0 failed"; }
cat /tmp/devinfo.out
devinfo_value() { awk -v k="$1" '$1 == k":" { print $2; exit }' /tmp/devinfo.out; }
grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo.out || fail "rox_0 port 1 is not PORT_ACTIVE"
grep -q 'link_layer:.*Ethernet' /tmp/devinfo.out || fail "rox_0 link layer is not Ethernet"
for cap in max_qp max_qp_wr max_cq max_cqe max_mr max_mw max_pd max_sge max_srq max_srq_wr; do
	v=$(devinfo_value "$cap")
	[[ ${v:-0} =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || fail "rox_0 reports $cap='${v:-}' (want > 0)"
done
[ "$(devinfo_value vendor_id)" = "$ROX_VENDOR" ] ||
	fail "rox_0 vendor_id is '$(devinfo_value vendor_id)', want $ROX_VENDOR"
for flag in SRQ_RESIZE MEM_WINDOW MEM_WINDOW_TYPE_2B; do
	grep -qw "$flag" /tmp/devinfo.out || fail "rox_0 does not advertise $flag"
done
# ibv_devinfo prints no names for these bits of device_cap_flags_ex (enum ib_uverbs_device_cap_flags).
caps_ex=$(devinfo_value device_cap_flags_ex)
for bit in 38:FLUSH_GLOBAL 40:ATOMIC_WRITE; do
	(( (${caps_ex:-0} >> ${bit%%:*}) & 1 )) || fail "rox_0 does not advertise ${bit#*:} ($caps_ex)"
done

# --- pyverbs object tests, rox_0 next to rxe0
netdev=$(ip -o link show | awk -F': ' '$2 != "lo" { print $2; exit }')
modprobe rdma_rxe && { rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$netdev"; } ||
	echo "SKIP: no rxe0 for comparison (rdma_rxe on $netdev failed): the rxe0 gate is off"

suite=$(mktemp -d /tmp/rdma-tests.XXXXXX)
cp -r "$PYVERBS_SUITE/." "$suite/" && gunzip -f "$suite"/*.gz || fail "cannot unpack $PYVERBS_SUITE"
modules=()
for f in "$suite"/test_*.py; do
	m=$(basename "$f" .py)
	[[ $m =~ $VENDOR_MODULES ]] || modules+=("$m")
done
[ ${#modules[@]} -ge 15 ] || fail "only ${#modules[@]} non-vendor pyverbs modules in $PYVERBS_SUITE: ${modules[*]}"
devices=(rox_0)
[ -e /sys/class/infiniband/rxe0 ] && devices+=(rxe0)

# One module on one device: prints "pass fail error skip exit"; the unittest log is
# /tmp/pyverbs-DEV/MODULE.log. The trailing dot of the -k pattern keeps test_qp from matching
# test_qpex.
module_counts() { # MODULE DEV
	local log=/tmp/pyverbs-$2/$1.log rc ran failures errors skipped
	timeout "$MODULE_TIMEOUT" python3 -B "$suite/run_tests.py" --dev "$2" -v -k "tests.$1." >"$log" 2>&1
	rc=$?
	ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\}.*/\1/p' "$log" | tail -1)
	failures=$(grep -oE 'failures=[0-9]+' "$log" | tail -1 | cut -d= -f2)
	errors=$(grep -oE 'errors=[0-9]+' "$log" | tail -1 | cut -d= -f2)
	skipped=$(grep -oE 'skipped=[0-9]+' "$log" | tail -1 | cut -d= -f2)
	# No "Ran" line (an import error, a crash at start-up): a crash whatever the exit status.
	[ -n "$ran" ] || [ "$rc" -gt 1 ] || rc=99
	ran=${ran:-0} failures=${failures:-0} errors=${errors:-0} skipped=${skipped:-0}
	echo "$((ran - failures - errors - skipped)) $failures $errors $skipped $rc"
}

declare -A total
crashed=() flaky=()
printf '\npyverbs, %d non-vendor modules (pass/fail/error/skip; ! = the python process died)\n' ${#modules[@]}
printf '%-24s %-22s %-22s\n' module rox_0 rxe0
for m in "${modules[@]}"; do
	line=$(printf '%-24s' "$m")
	for dev in "${devices[@]}"; do
		mkdir -p "/tmp/pyverbs-$dev"
		read -r p f e k rc <<<"$(module_counts "$m" "$dev")"
		if [ "$dev" = rox_0 ] && [ "${ROX_ALLOW_FLAKY:-0}" = 1 ] && { [ "$f" != 0 ] || [ "$e" != 0 ]; }; then
			# Allowed explicitly only: once more, and a failure that does not repeat is
			# reported as FLAKY (with the tests that failed); one that repeats fails.
			cp "/tmp/pyverbs-$dev/$m.log" "/tmp/pyverbs-$dev/$m.first-run"
			read -r p f e k rc <<<"$(module_counts "$m" "$dev")"
			if [ "$f" = 0 ] && [ "$e" = 0 ]; then
				flaky+=("$m: $(grep -E '^(FAIL|ERROR):' "/tmp/pyverbs-$dev/$m.first-run" | tr '\n' ' ')")
			fi
		fi
		for c in p f e k; do total[$dev.$c]=$(( ${total[$dev.$c]:-0} + ${!c} )); done
		# 0: all passed, 1: some test failed (counted above); anything else (99: no "Ran"
		# line) a crash or timeout.
		mark=
		if [ "$rc" -gt 1 ]; then
			mark=!
			[ "$dev" != rox_0 ] || crashed+=("$m (exit $rc)")
		fi
		line+=$(printf ' %-22s' "$p/$f/$e/$k$mark")
	done
	echo "$line"
done
for dev in "${devices[@]}"; do
	cat "/tmp/pyverbs-$dev"/*.log >"/tmp/pyverbs-$dev.log"
done
for fl in ${flaky[@]+"${flaky[@]}"}; do echo "FLAKY on rox_0 (allowed by ROX_ALLOW_FLAKY=1; failed once, passed when run again): $fl"; done
rox_pass=${total[rox_0.p]} rox_fail=${total[rox_0.f]} rox_err=${total[rox_0.e]} rox_skip=${total[rox_0.k]}
printf '%-24s %-22s %-22s\n' total "$rox_pass/$rox_fail/$rox_err/$rox_skip" \
	"${total[rxe0.p]:--}/${total[rxe0.f]:--}/${total[rxe0.e]:--}/${total[rxe0.k]:--}"
[ -e /sys/class/infiniband/rxe0 ] && rdma link delete rxe0

# Per-test results (Class.test status) of a unittest -v log; a status may follow output the
# test printed, on a later line.
results() {
	python3 "$(dirname "$0")/pyverbs_results.py" "$1"
}
results /tmp/pyverbs-rox_0.log >/tmp/pyverbs-rox_0.results
missing=()
for t in "${REQUIRED[@]}"; do
	grep -qx "$t ok" /tmp/pyverbs-rox_0.results || missing+=("$t ($(awk -v t="$t" '$1 == t { print $2 }' /tmp/pyverbs-rox_0.results))")
done
rxe_only=()
if [ -s /tmp/pyverbs-rxe0.log ]; then
	results /tmp/pyverbs-rxe0.log >/tmp/pyverbs-rxe0.results
	while read -r t status; do
		[ "$status" = ok ] || continue
		grep -qx "$t ok" /tmp/pyverbs-rox_0.results && continue
		reason=
		for r in ${RXE_ONLY[@]+"${RXE_ONLY[@]}"}; do [ "${r%%=*}" = "$t" ] && reason=${r#*=}; done
		if [ -n "$reason" ]; then
			echo "rxe0 only: $t ($reason)"
		else
			rxe_only+=("$t")
		fi
	done </tmp/pyverbs-rxe0.results
fi

if [ ${#crashed[@]} != 0 ]; then
	for c in "${crashed[@]}"; do tail -30 "/tmp/pyverbs-rox_0/${c%% *}.log"; done
	fail "pyverbs modules died or timed out on rox_0: ${crashed[*]}"
fi
if [ "$rox_fail" != 0 ] || [ "$rox_err" != 0 ] || [ "$rox_pass" = 0 ]; then
	grep -E '^(FAIL|ERROR):' /tmp/pyverbs-rox_0.log
	grep -B2 -A25 -E '^(FAIL|ERROR):' /tmp/pyverbs-rox_0.log | tail -80
	fail "pyverbs on rox_0: $rox_fail failed, $rox_err errors, $rox_pass passed"
fi
[ ${#missing[@]} = 0 ] || fail "required pyverbs tests did not pass on rox_0: ${missing[*]}"
[ ${#rxe_only[@]} = 0 ] || fail "pass on rxe0 but not on rox_0 (and RXE_ONLY gives no reason): ${rxe_only[*]}"
echo "librox: pyverbs tests pass on rox_0 (${#REQUIRED[@]} required ones among them)"

# --- SRQ resize with WRs posted: none is lost, every one completes with its own wr_id.
mkdir -p /tmp/rdma-tests-pkg && ln -sfn "$suite" /tmp/rdma-tests-pkg/tests
python3 -B "$(dirname "$0")/srq_resize.py" "$suite" /tmp/rdma-tests-pkg || fail "SRQ resize lost or reordered receive WRs"
echo "librox: SRQ resize keeps posted receive WRs"
