#!/bin/bash
# libfabric's verbs;ofi_rxm over rox (guest; skips without a rox device): RDM endpoints that
# ofi_rxm builds from verbs MSG endpoints (RC or XRC QPs connected through rdma_cm).
# fi_pingpong (libfabric-bin, from scripts/root-extras.txt) runs a server and a client on
# rox_0 (same-device loopback, as t-driver-rdmacm: in one guest rdma_cm resolves an address of
# this guest to the device that owns it, so a client on rox_1 asking for rox_0's address gets
# no verbs fabric info at all), addresses exchanged over TCP, every message checked (-c), over
# RC (FI_VERBS_PREFER_XRC=0). librox's debug log (VERBS_LOG_LEVEL=4, one VERBS_LOG_FILE per
# process) names every QP each process moved to RTS on rox: it must show RC QPs and no XRC QP.
# (QPs merely created say nothing: libfabric's verbs provider creates and destroys QPs of every
# type while probing capabilities. An earlier form polled `rdma resource show qp` during the
# run and saw nothing when fi_pingpong finished between two polls, in 0.29 s on a faster host.)
# Over XRC (FI_VERBS_PREFER_XRC=1, FI_OFI_RXM_USE_SRX=1, domain rox_0-xrc) the root's libfabric
# 2.1 cannot run on any device: its XRC initiator path creates the QP on a CM ID whose address
# was never resolved (libfabric commit d6d1ca3cf, v1.21.0), and librdmacm refuses that with
# EINVAL (docs/provider.md). So the XRC run loads libfabric 2.1.0 with rox's fix
# (libfabric/xrc-resolve.patch, xrc-route-resolved.patch), built into the cache by `make libfabric-xrc`
# (scripts/build-libfabric-xrc.sh), through LD_LIBRARY_PATH with the root's fi_pingpong; its
# librox logs must show XRC_INI and XRC_TGT QPs reaching RTS and no RC QP, and every message is
# checked (libfabric gives its XRC targets an SRQ, which librox ignores as libibverbs does).
# Without that build the test fails and says how to make it.
# xrc-cm-qp.c does the unfixed sequence on rox_0 and shows why: the new ID has no
# device and rdma_create_qp_ex fails with EINVAL; once the same ID's address is resolved, its
# device is rox_0's rdma_get_devices() context and the same XRC_SEND rdma_create_qp_ex
# succeeds (must pass on rox_0). On an rxe device beside it (RC; printed, not asserted) the
# first step fails the same way; its address is rox_0's, so resolving it binds rox_0.
# FI_UNIVERSE_SIZE is 16 peers (libfabric's default is 256): ofi_rxm sizes its verbs CQ as
# (receive + send queue size) x the universe size, which at the default is more than rox's
# max_cqe (65536): verbs' CQ open fails with EINVAL and so does fi_enable.
set -u
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }
. "$(dirname "$0")/lib.sh"
need_rox_0
for tool in fi_info fi_pingpong; do
	command -v "$tool" >/dev/null || fail "$tool is not in the root (libfabric-bin: scripts/root-extras.txt)"
done
xrc_prefix=$("$(dirname "$0")/../../scripts/build-libfabric-xrc.sh" --prefix)
[ -e "$xrc_prefix/.complete" ] ||
	fail "no libfabric with rox's XRC fix at $xrc_prefix: run 'make libfabric-xrc' on the host (scripts/build-libfabric-xrc.sh, ~2 min once)"

SERVER_DEV=rox_0
CLIENT_DEV=rox_0
PROVIDER="verbs;ofi_rxm"
ITERATIONS=200
# One message size, under ofi_rxm's eager limit (16 KiB): each message is one verbs send.
SIZE=4096
RUN_TIMEOUT=120
# fi_pingpong's out-of-band TCP port (its default).
OOB_PORT=47592
export FI_UNIVERSE_SIZE=16

ipv4_of() {
	local ndev
	ndev=$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/0" 2>/dev/null)
	ip -4 -o addr show dev "$ndev" | awk '{ print $4 }' | cut -d/ -f1 | head -1
}
server_ip=$(ipv4_of $SERVER_DEV)
[ -n "$server_ip" ] || fail "$SERVER_DEV's netdev has no IPv4 address"
work=$(mktemp -d /tmp/rox-libfabric.XXXXXX)
trap 'rm -rf "$work"' EXIT

fi_info --version | head -1
for xrc in 0 1; do
	FI_VERBS_PREFER_XRC=$xrc fi_info -p "$PROVIDER" -t FI_EP_RDM >"$work/fi_info.$xrc" 2>&1
	echo "FI_VERBS_PREFER_XRC=$xrc: $PROVIDER domains: $(awk '/domain:/ { print $2 }' "$work/fi_info.$xrc" | sort -u | tr '\n' ' ')"
done

# qp_types_of FILE LOG...: "<device> <QP type>" of every QP librox's debug logs LOG... say
# reached RTS ("rox: rox_0: RC QP 17 to RTS"), one line each, deduplicated, into FILE; the
# creations (probes included) are counted by type and printed.
qp_types_of() {
	local out=$1
	shift
	cat "$@" 2>/dev/null | awk '$1 == "rox:" && $4 == "QP" && $6 == "to" && $7 == "RTS" {
		dev = $2; sub(":$", "", dev); print dev, $3 }' | sort -u >"$out"
	echo "  QPs librox created (libfabric's probes included): $(cat "$@" 2>/dev/null |
		awk '$1 == "rox:" && $3 == "created" { print $4 }' | sort | uniq -c | awk '{ printf "%s %s, ", $2, $1 }')"
}

# The XRC initiator's CM ID sequence (xrc-cm-qp.c), on rox_0 and an rxe device beside it.
command -v gcc >/dev/null || fail "no C compiler in the guest"
gcc -O1 -Wall -Wextra -Werror -o "$work/xrc-cm-qp" "$(dirname "$0")/xrc-cm-qp.c" -lrdmacm -libverbs ||
	fail "xrc-cm-qp.c does not compile"
run_on_rox_0_and_rxe "$work/xrc-cm-qp"
[ "$rox_rc" = 0 ] || fail "xrc-cm-qp on rox_0: the XRC initiator's CM ID sequence did not behave as librdmacm 56.1 says"

problems=()
# mode NAME PREFER_XRC SERVER_DOMAIN CLIENT_DOMAIN WANTED_TYPES FORBIDDEN_TYPES [LIBDIR]
# (LIBDIR: where to load libfabric from instead of the root's)
mode() {
	local name=$1 xrc=$2 sdom=$3 cdom=$4 wanted=$5 forbidden=$6 libdir=${7:-} server client srv_rc cli_rc t
	local args=(-p "$PROVIDER" -e rdm -I "$ITERATIONS" -S "$SIZE" -c)
	local lib_env=()
	if [ -n "$libdir" ]; then
		lib_env=(LD_LIBRARY_PATH="$libdir")
		# The loader's choice, by the rules the run uses: the fixed build, not the root's.
		t=$(env "${lib_env[@]}" ldd "$(command -v fi_pingpong)" | awk '$1 ~ /^libfabric\.so/ { print $3 }')
		echo "--- $name: fi_pingpong loads $t"
		[ "$(realpath "$t")" = "$(realpath "$libdir/libfabric.so.1")" ] ||
			problems+=("$name: fi_pingpong loads $t, not $libdir/libfabric.so.1")
	fi
	FI_VERBS_PREFER_XRC=$xrc FI_OFI_RXM_USE_SRX=$xrc FI_LOG_LEVEL=info timeout "$RUN_TIMEOUT" \
		env "${lib_env[@]}" VERBS_LOG_LEVEL=4 VERBS_LOG_FILE="$work/verbs.$name.server" \
		fi_pingpong "${args[@]}" -d "$sdom" >"$work/server.$name" 2>&1 &
	server=$!
	if ! wait_for_server "$server" $OOB_PORT; then
		wait "$server"
		sed 's/^/  server: /' "$work/server.$name" | grep -v ':core:' | tail -15
		problems+=("$name: the fi_pingpong server on $sdom did not start")
		return
	fi
	FI_VERBS_PREFER_XRC=$xrc FI_OFI_RXM_USE_SRX=$xrc FI_LOG_LEVEL=info timeout "$RUN_TIMEOUT" \
		env "${lib_env[@]}" VERBS_LOG_LEVEL=4 VERBS_LOG_FILE="$work/verbs.$name.client" \
		fi_pingpong "${args[@]}" -d "$cdom" "$server_ip" >"$work/client.$name" 2>&1 &
	client=$!
	wait "$client"
	cli_rc=$?
	wait "$server"
	srv_rc=$?
	echo "--- $name ($sdom <- $cdom, FI_VERBS_PREFER_XRC=$xrc FI_OFI_RXM_USE_SRX=$xrc): client exit $cli_rc, server exit $srv_rc"
	grep -E '^ *[0-9]+[kmg]?  ' "$work/client.$name" | sed 's/^/  /'
	qp_types_of "$work/types.$name" "$work/verbs.$name.server" "$work/verbs.$name.client"
	echo "  QPs librox moved to RTS: $(tr '\n' ',' <"$work/types.$name")"
	echo "  libfabric log lines naming XRC: client $(grep -ci xrc "$work/client.$name"), server $(grep -ci xrc "$work/server.$name")"
	if [ "$cli_rc" != 0 ] || [ "$srv_rc" != 0 ]; then
		grep -E '<warn>|error' "$work/client.$name" | grep -v efadv_query | sed 's/^/  client: /' | tail -15
		grep -E '<warn>|error' "$work/server.$name" | grep -v efadv_query | sed 's/^/  server: /' | tail -15
		problems+=("$name: fi_pingpong failed (client $cli_rc, server $srv_rc)")
	fi
	if [ ! -s "$work/types.$name" ]; then
		echo "  librox's debug logs:"
		cat "$work/verbs.$name.server" "$work/verbs.$name.client" 2>/dev/null | head -20 | sed 's/^/    /'
		grep -i xrc "$work/server.$name" | grep -v ':core:' | head -10 | sed 's/^/  server: /'
	fi
	for t in $wanted; do
		grep -q " $t$" "$work/types.$name" || problems+=("$name: no $t QP on a rox device during the run")
	done
	for t in $forbidden; do
		! grep -q " $t$" "$work/types.$name" || problems+=("$name: a $t QP during the run")
	done
}

mode rc 0 $SERVER_DEV $CLIENT_DEV "RC" "XRC_INI XRC_TGT"
mode xrc 1 $SERVER_DEV-xrc $CLIENT_DEV-xrc "XRC_INI XRC_TGT" "RC" "$xrc_prefix/lib"
[ ${#problems[@]} = 0 ] || fail "$(printf '%s; ' "${problems[@]}")"
echo "fi_pingpong over $PROVIDER passed on RC QPs (root's libfabric) and on XRC QPs (libfabric with rox's XRC patches) ($SERVER_DEV <- $CLIENT_DEV)"
