#!/bin/bash
# librox's control path on a rox device (guest): ibv_devinfo -v shows rox_0 with real caps,
# PORT_ACTIVE and link layer Ethernet; rdma-core's own pyverbs object tests (device, PD, MR, CQ,
# QP, SRQ) run on rox_0 and, for comparison, on rdma_rxe in the same guest. Passes when rox_0
# has no failure and no error. Skips (exit 0) when the guest has no rox device.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

ROX_VENDOR=0x524f # rox_uapi::regs::PCI_VENDOR_ID
# rdma-core's pyverbs suite as Debian ships it: most files gzipped by dh_compress, so it runs
# from an unpacked copy.
PYVERBS_SUITE=/usr/share/doc/rdma-core/tests
# Test modules of the control path (issue 4); the trailing dot keeps test_qp from matching
# test_qpex.
MODULES=(test_device test_pd test_mr test_cq test_qp test_srq)
TEST_TIMEOUT=1200

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
for cap in max_qp max_qp_wr max_cq max_cqe max_mr max_pd max_sge max_srq max_srq_wr; do
	v=$(devinfo_value "$cap")
	[[ ${v:-0} =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || fail "rox_0 reports $cap='${v:-}' (want > 0)"
done
[ "$(devinfo_value vendor_id)" = "$ROX_VENDOR" ] ||
	fail "rox_0 vendor_id is '$(devinfo_value vendor_id)', want $ROX_VENDOR"

# --- pyverbs object tests, rox_0 next to rxe0
netdev=$(ip -o link show | awk -F': ' '$2 != "lo" { print $2; exit }')
modprobe rdma_rxe && { rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$netdev"; } ||
	echo "note: no rxe0 for comparison (rdma_rxe on $netdev failed)"

suite=$(mktemp -d /tmp/rdma-tests.XXXXXX)
cp -r "$PYVERBS_SUITE/." "$suite/" && gunzip -f "$suite"/*.gz || fail "cannot unpack $PYVERBS_SUITE"
patterns=()
for m in "${MODULES[@]}"; do patterns+=(-k "tests.$m."); done

# Prints "pass fail error skip" for one device; the full unittest log goes to /tmp/pyverbs-$1.log.
pyverbs_counts() {
	local dev=$1 log=/tmp/pyverbs-$1.log ran failures errors skipped
	timeout "$TEST_TIMEOUT" python3 -B "$suite/run_tests.py" --dev "$dev" -v "${patterns[@]}" >"$log" 2>&1
	ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\}.*/\1/p' "$log" | tail -1)
	failures=$(grep -oE 'failures=[0-9]+' "$log" | tail -1 | cut -d= -f2)
	errors=$(grep -oE 'errors=[0-9]+' "$log" | tail -1 | cut -d= -f2)
	skipped=$(grep -oE 'skipped=[0-9]+' "$log" | tail -1 | cut -d= -f2)
	ran=${ran:-0} failures=${failures:-0} errors=${errors:-0} skipped=${skipped:-0}
	echo "$((ran - failures - errors - skipped)) $failures $errors $skipped"
}

# (No process substitution: the guest has no /dev/fd.)
read -r rox_pass rox_fail rox_err rox_skip <<<"$(pyverbs_counts rox_0)"
if [ -e /sys/class/infiniband/rxe0 ]; then
	read -r rxe_pass rxe_fail rxe_err rxe_skip <<<"$(pyverbs_counts rxe0)"
else
	rxe_pass=- rxe_fail=- rxe_err=- rxe_skip=-
fi
printf '\npyverbs %s\n' "${MODULES[*]}"
printf '%-8s %6s %6s %6s %6s\n' device pass fail error skip
printf '%-8s %6s %6s %6s %6s\n' rox_0 "$rox_pass" "$rox_fail" "$rox_err" "$rox_skip"
printf '%-8s %6s %6s %6s %6s\n' rxe0 "$rxe_pass" "$rxe_fail" "$rxe_err" "$rxe_skip"
[ -e /sys/class/infiniband/rxe0 ] && rdma link delete rxe0

if [ "$rox_fail" != 0 ] || [ "$rox_err" != 0 ] || [ "$rox_pass" = 0 ]; then
	grep -E '^(FAIL|ERROR):' /tmp/pyverbs-rox_0.log
	tail -60 /tmp/pyverbs-rox_0.log
	fail "pyverbs object tests on rox_0: $rox_fail failed, $rox_err errors, $rox_pass passed"
fi
echo "librox: pyverbs object tests pass on rox_0"
