#!/usr/bin/env bash
# make test: every stage in order, each timed; a summary table at the end. Stops at the
# first failing stage and exits non-zero.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
flavour=${ROX_KERNEL_FLAVOUR:-release}
: >"$ROX_TIMINGS"
summary() {
	echo
	echo "== stage timings"
	cat "$ROX_TIMINGS"
}
trap summary EXIT
cd "$ROX_TOP"
stage root scripts/setup-root.sh || exit 1
stage kernel scripts/setup-kernel.sh "$flavour" || exit 1
stage module scripts/build-module.sh "$flavour" || exit 1
stage provider scripts/build-provider.sh --test || exit 1
stage host-tests cargo test --workspace || exit 1
stage capture tests/host/tshark-capture.sh || exit 1
stage device cargo build --release -p rox-nic || exit 1
stage guest-tests tests/guest/run "$flavour" || exit 1
stage guest-pair tests/guest/pair-pingpong || exit 1
stage guest-mcast tests/net/mcast-pair || exit 1
# Reliability under the debug kernel (kmemleak, KFENCE, SLUB debug): 50 load/probe/unload
# cycles and rmmod with live objects, with kmemleak required to report nothing.
stage kernel-debug scripts/setup-kernel.sh debug || exit 1
stage module-debug scripts/build-module.sh debug || exit 1
stage guest-debug tests/guest/run debug driver-load-cycles || exit 1
