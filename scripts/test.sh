#!/usr/bin/env bash
# make test: every stage in order, each timed; a summary table at the end. Stops at the
# first failing stage and exits non-zero.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
# The release stages boot Debian's stock kernel (docs/kernel.md: no kernel build for them;
# rox.ko checked against it; the distribution's own ib_core, rxe and ULPs). The debug stages
# below boot rox's debug kernel, which stock lacks (kmemleak, KFENCE, SLUB debugging).
# ROX_TEST_FLAVOUR=release runs the release stages on rox's own trimmed kernel instead.
flavour=${ROX_TEST_FLAVOUR:-stock}
# Every runner, rox-lab and quality.sh --module take their kernel from this.
export ROX_KERNEL_FLAVOUR=$flavour
: >"$ROX_TIMINGS"
summary() {
	echo
	echo "== stage timings"
	cat "$ROX_TIMINGS"
}
trap summary EXIT
cd "$ROX_TOP"
# The quality gate first: rustfmt and clippy (warnings denied, unsafe documented) take a minute.
stage quality scripts/quality.sh --workspace || exit 1
stage root scripts/setup-root.sh || exit 1
stage kernel scripts/setup-kernel.sh "$flavour" || exit 1
stage module scripts/build-module.sh "$flavour" || exit 1
stage quality-module scripts/quality.sh --module || exit 1
stage provider scripts/build-provider.sh --test || exit 1
stage quality-provider scripts/quality.sh --provider || exit 1
# libfabric 2.1.0 with rox's XRC fixes (tests/guest/libfabric/*.patch) into the cache,
# once: t-provider-libfabric runs ofi_rxm over XRC with it (~2 min cold, docs/provider.md).
stage libfabric-xrc scripts/build-libfabric-xrc.sh || exit 1
stage host-tests cargo test --workspace || exit 1
# The Python helpers' own unit tests (plots, trace pictures, result parsing).
stage host-python sh -c 'for d in tests/lib tests/bench tests/interop; do python3 -m unittest discover -s "$d" -p "test_*.py" || exit 1; done' || exit 1
stage capture tests/host/tshark-capture.sh || exit 1
stage device cargo build --release -p rox-nic -p rox-lab || exit 1
# The lab's own failure detection: a guest that does not boot fails within its deadline with a
# diagnosis, and a rox-nic that panics fails the lab (qemu/rox-lab/selftest).
stage lab-selftest qemu/rox-lab/selftest || exit 1
stage guest-tests tests/guest/run "$flavour" || exit 1
stage guest-pair tests/guest/pair-pingpong || exit 1
# Two guests joined by a rox-to-rox cable (shared-memory rings, docs/networking.md): no tap for
# those NICs, so the pingpongs, perftest and the checksummed 256 MiB WRITE and READ cross the
# cable or fail; then NVMe-oF (nvmet-rdma/nvme-rdma, fio crc32c verify) and clean unloads across it.
stage guest-cable tests/net/cable-pair || exit 1
stage guest-ulp-cable tests/ulp/run --cable --cases nvme,unload || exit 1
# The lab's other shapes (rox-lab, docs/networking.md): two guests on two subnets through the
# router namespace, and one guest on a 1500-byte Ethernet.
stage guest-routed tests/net/routed-pingpong || exit 1
stage guest-mtu1500 tests/net/mtu1500 || exit 1
# Two hosts joined only by a VXLAN (docs/networking.md, "Two machines"): two namespaces, a lab
# in each with --uplink, rox<->rox and rox<->rxe pingpongs across the tunnel.
stage two-hosts tests/net/two-hosts || exit 1
# Interop with Linux's rdma_rxe over the bridge, both directions (tests/interop/run), capturing
# every frame on the bridge; then the RoCEv2 frames of that capture (rox's and rxe's) must
# decode as InfiniBand in tshark (a sample: every frame but most MIDDLE packets) and every one
# must carry the ICRC rox-nic recomputes, with every opcode the cases send present, over IPv4
# and IPv6: SEND first/middle/last/only, RDMA WRITE first/middle/last/only, READ request and
# response first/middle/last/only, ACK, atomic ACK, FETCH_ADD, SEND only with invalidate, FLUSH,
# ATOMIC WRITE (RC), UC SEND first/middle/last, UD SEND only.
capture=$ROX_CACHE/capture/interop.pcap
interop_opcodes=0x00,0x01,0x02,0x04,0x06,0x07,0x08,0x0a,0x0c,0x0d,0x0e,0x0f,0x10,0x11,0x12,0x14,0x17,0x1c,0x1d,0x20,0x21,0x22,0x64
mkdir -p "$(dirname "$capture")" && rm -f "$capture"
stage interop tests/interop/run --capture "$capture" || exit 1
stage bridge-tshark tests/host/tshark-capture.sh --pcap "$capture" --bridge || exit 1
stage bridge-icrc target/release/rox-pcap-check "$capture" --min-roce 1000 \
	--require-opcodes "$interop_opcodes" --require-ipv6 || exit 1
stage guest-mcast tests/net/mcast-pair || exit 1
# A hostile RoCE peer on the bridge (qemu/rox-peer) runs IBA RC conformance cases against a rox
# guest and an rdma_rxe guest side by side (tests/peer/run, docs/peer.md).
stage guest-peer tests/peer/run || exit 1
# Congestion (tests/cc/run, docs/congestion-lab.md): a WRITE flow and a READ flow (guest 1's READ
# responses) into a third rox guest behind rox-nic's RED/ECN bottleneck, CC off then on: no CNPs
# off; CNPs sent and handled on (by the READ responder too), with fewer drops and drops +
# retransmits than off; both flows' throughput over time in cc.svg, the numbers in cc.json
# (two 3-guest labs, about 2 minutes warm).
stage congestion tests/cc/run || exit 1
# The wire under seeded loss, duplication, reordering and corruption (rox-nic's port faults):
# verified rsockets streams, checksummed WRITE/READ and a numbered RC SEND stream, rox<->rox and
# rox<->rxe; 0 lost, 0 duplicated, 0 corrupted (tests/soak/run; the long form in docs/transport.md).
stage soak tests/soak/run --plan soak --short || exit 1
# Kernel RDMA upper layers between two rox guests (tests/ulp/run): NVMe-oF (nvmet-rdma/nvme-rdma,
# fio crc32c verify), NFS over RDMA, clean unloads, and the target's NIC dying mid-I/O (both
# guests judged; rox.ko's dead-device path, docs/driver.md). The NIC dies as hardware does
# (rox-nic --die-on: BARs all-ones, nothing answered); SIGKILLing the rox-nic process instead
# (`--fault kill`) often aborts QEMU 11.1.3's vfio-user client (docs/debugging.md).
stage guest-ulp tests/ulp/run --cases nvme,nfs,unload,fault || exit 1
# Bad input on the wire: a host on the bridge floods rox_0's port with every kind of frame it
# must drop (and broadcast/multicast for its netdev) while pingpongs run; each drop counted.
stage port-flood tests/net/flood || exit 1
# Reliability under the debug kernel (kmemleak, KFENCE, SLUB debug, lockdep): 50 load/probe/unload
# cycles and rmmod with live objects, kernel verbs, ODP and raw-uverbs bad input, probes that
# the device refuses (t-driver-probe-fault.sh: the error path's reset and frees), each test
# with a kmemleak scan that must run and report nothing, and no lockdep report; rox.ko's KUnit
# suites (drivers/logic_tests.rs), run by the kernel at load, all ok (t-driver-kunit.sh).
stage kernel-debug scripts/setup-kernel.sh debug || exit 1
stage module-debug scripts/build-module.sh debug || exit 1
# Without the posted-wake companion (ROX_POSTED_WAKE=off): every other guest stage has it, so
# this one keeps the trapped wake (BAR0's wake page, librox's wake_offset 0) exercised, and
# t-driver-wake checks its trapped branch.
stage guest-debug env ROX_POSTED_WAKE=off tests/guest/run debug driver-load-cycles,driver-kverbs,driver-odp,driver-negative,driver-kunit,driver-wake,driver-probe-fault || exit 1
# The companion's removal under lockdep and kmemleak (the notifier, RCU and the revocation of
# user mappings), with the companion on: the stage above has none to remove.
stage guest-debug-companion tests/guest/run debug driver-companion-removal || exit 1
# One NVMe-oF connect / fio / disconnect cycle and unload on the debug kernel: kmemleak silent.
stage guest-ulp-debug tests/ulp/run --flavour debug || exit 1
