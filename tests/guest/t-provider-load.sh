#!/bin/bash
# librox loads into libibverbs 56.1 cleanly (guest, rox hardware not needed): with an rdma_rxe
# device present libibverbs loads every provider of /etc/libibverbs.d, librox included; the
# dlopen must succeed (its constructor registers with verbs_register_driver_34), rxe0 must
# still be listed, and no warning may name librox. With a rox device, rox_0 is listed too.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

provider_dir=/usr/lib/x86_64-linux-gnu/libibverbs
[ -f "$provider_dir/librox-rdmav34.so" ] && [ -f /etc/libibverbs.d/rox.driver ] ||
	skip "librox is not installed in the root (scripts/build-provider.sh installs it)"

netdev=$(ip -o link show | awk -F': ' '$2 != "lo" { print $2; exit }')
[ -n "$netdev" ] || fail "no network device for rdma_rxe"
modprobe rdma_rxe || fail "modprobe rdma_rxe failed"
rdma link show rxe0 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev "$netdev" ||
	fail "rdma link add rxe0 on $netdev failed"

out=$(IBV_SHOW_WARNINGS=1 LD_DEBUG=files ibv_devices 2>&1)
echo "$out" | grep -v '^ *[0-9]*:' # ibv_devices' own output and libibverbs' warnings
echo "$out" | grep -q "calling init: $provider_dir/librox-rdmav34.so" ||
	fail "libibverbs did not load librox (no 'calling init' for it in LD_DEBUG output)"
echo "$out" | grep -i 'librox\|rox' | grep -iE "couldn't|error|undefined|cannot" &&
	fail "loading librox reported an error"
echo "$out" | grep -qE '^ *rxe0 ' || fail "rxe0 is not listed with librox loaded"
if ls -d /sys/class/infiniband/rox_* >/dev/null 2>&1; then
	echo "$out" | grep -qE '^ *rox_0 ' || fail "a rox device exists but ibv_devices does not list rox_0"
fi
rdma link delete rxe0 || fail "rdma link delete rxe0 failed"
echo "librox loaded by libibverbs without errors; rxe0 listed"
