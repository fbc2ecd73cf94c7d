#!/bin/bash
# Guest side of ofi_rxm over XRC between two guests (rox-lab, tests/guest/run-pair): guest 1
# serves, guest 0 connects, each on its lab NIC 0's rox device, with libfabric 2.1.0 + rox's
# XRC patches (make libfabric-xrc) loaded by LD_LIBRARY_PATH under the root's fi_pingpong;
# every message checked (-c). Each guest's librox log must show an XRC_INI and an XRC_TGT QP
# moved to RTS (ofi_rxm connects both ways) and no RC QP. Run from the host:
#   ko=$(. scripts/lib.sh; cache_path_in_root "$(module_dir release)")/rox.ko
#   tests/guest/run-pair --rox 1 "ROX_KO=$ko bash /rox/tests/guest/libfabric/xrc-pair.sh server" \
#       "ROX_KO=$ko bash /rox/tests/guest/libfabric/xrc-pair.sh client"
set -u
role=$1
. "$(dirname "$0")/../lab.sh"
fail() { echo "FAIL $role: $*"; exit 1; }
dev=$(rox_dev_on "$ROX_IF_0") || fail "no rox device on $ROX_IF_0"
wait_port_active "$dev" || fail "$dev port not active"
prefix=$("$(dirname "$0")/../../../scripts/build-libfabric-xrc.sh" --prefix)
[ -e "$prefix/.complete" ] || fail "no $prefix: run 'make libfabric-xrc' on the host"
# FI_UNIVERSE_SIZE: as in t-provider-libfabric.sh (ofi_rxm's CQ at 256 peers exceeds max_cqe).
export FI_UNIVERSE_SIZE=16 FI_VERBS_PREFER_XRC=1 FI_OFI_RXM_USE_SRX=1 FI_LOG_LEVEL=warn \
	LD_LIBRARY_PATH=$prefix/lib VERBS_LOG_LEVEL=4 VERBS_LOG_FILE=/tmp/verbs.$role
args=(-p "verbs;ofi_rxm" -e rdm -I 200 -S 4096 -c -d "$dev-xrc")
if [ "$role" = client ]; then
	wait_ping "$ROX_IP_1_0" 120 || fail "guest 1 ($ROX_IP_1_0) unreachable"
	# fi_pingpong's client does not retry its out-of-band TCP connect (util/pingpong.c
	# pp_ctrl_init_client): retry only while the server is not listening yet (a refused
	# connect, as tests/net/pair.sh), for at most 120 s; any other failure is final. A probe
	# connect would take the server's one accept.
	listen_by=$((SECONDS + 120))
	while :; do
		timeout 150 fi_pingpong "${args[@]}" "$ROX_IP_1_0" >/tmp/out 2>&1
		rc=$?
		[ "$rc" != 0 ] && grep -q "failed to connect: Connection refused" /tmp/out &&
			[ $SECONDS -lt $listen_by ] || break
		sleep 1
	done
	(exit "$rc")
else
	timeout 180 fi_pingpong "${args[@]}" >/tmp/out 2>&1
fi
rc=$?
echo "$role ($dev, $(ldd "$(command -v fi_pingpong)" | awk '$1 ~ /^libfabric/ { print $3 }')): fi_pingpong exit $rc"
grep -E '^ *[0-9]+[kmg]?  |bytes' /tmp/out
grep -E '<warn>' /tmp/out | grep -v efadv | tail -5
rts=$(awk '$1 == "rox:" && $4 == "QP" && $6 == "to" && $7 == "RTS" { print $3 }' "/tmp/verbs.$role" | sort | uniq -c)
echo "QPs librox moved to RTS: $(echo "$rts" | tr '\n' ' ')"
[ "$rc" = 0 ] || fail "fi_pingpong exit $rc"
for t in XRC_INI XRC_TGT; do
	echo "$rts" | grep -q " $t$" || fail "no $t QP reached RTS"
done
! echo "$rts" | grep -q " RC$" || fail "an RC QP reached RTS"
echo "PASS $role"
