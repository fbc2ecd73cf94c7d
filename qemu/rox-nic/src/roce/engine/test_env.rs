//! A minimal [`DeviceEnv`] for the engine's unit tests: one flat memory at address 0 guarded
//! by the device's own protection table (through [`crate::testkit::protected`]): [`LKEY`]
//! and [`RKEY`] reach all of it, [`FAULT_KEY`] is an on-demand region none of whose pages is
//! present, [`BAD_KEY`] names nothing; a receive queue, and what the engine sent and
//! completed. The integration tests (tests/roce_*.rs) run whole engines against a device-like
//! double over the same table.

use std::collections::{HashMap, VecDeque};

use super::qp::Qp;
use super::{Engine, EngineStats};
use crate::device::mem::MemTable;
use crate::dma::SliceRam;
use crate::roce::wire::{self, Bth, Headers, IpInfo, Parsed, DEFAULT_PKEY};
use crate::roce::*;
use crate::testkit::protected::{protected_memory_ops, region, ProtectedMemory, RegionKind};

/// The local key of all memory.
pub(super) const LKEY: Key = Key::region(1, 0);
/// The remote key of all memory.
pub(super) const RKEY: Key = Key::region(2, 0);
/// A key whose every access hits a page that is not present.
pub(super) const FAULT_KEY: Key = Key::region(3, 0);
/// A fast-registration region over all memory, valid until a LOCAL_INV invalidates it.
pub(super) const INV_KEY: Key = Key::region(4, 0);
/// A key the device does not know.
pub(super) const BAD_KEY: Key = Key::from_raw(0xbad);
pub(super) const MEM_LEN: usize = 1 << 16;
/// The protection domain of the test QPs and their regions.
const PD: u32 = 1;

pub(super) struct TestEnv {
    pub(super) mem: Vec<u8>,
    table: MemTable,
    pub(super) now: u64,
    pub(super) recv: VecDeque<RecvWr>,
    pub(super) completions: Vec<Completion>,
    pub(super) sent: Vec<Vec<u8>>,
    /// QPs whose SQD drain was reported.
    pub(super) drained: Vec<Qpn>,
    pub(super) async_errors: Vec<QpAsyncError>,
    /// The device's FLUSH ICRC configuration.
    pub(super) flush_icrc: wire::FlushIcrc,
    /// XRC SRQs by number: their domain and PD, and their posted receive WRs.
    pub(super) xrc_srqs: HashMap<u32, (XrcSrq, VecDeque<RecvWr>)>,
    /// Request packets the port's scheduler still lets go (None: any number), and each
    /// question the requester asked it: whether the packet adds to the flight.
    pub(super) send_allowance: Option<u32>,
    pub(super) asked: Vec<bool>,
    /// How often the engine read the clock ([`DeviceEnv::now_ns`]).
    pub(super) clock_reads: std::cell::Cell<u64>,
    /// The SGE lists the engine gave back ([`DeviceEnv::recycle_sges`]), by capacity.
    pub(super) recycled: Vec<usize>,
}

impl TestEnv {
    pub(super) fn new() -> TestEnv {
        let all = ACCESS_LOCAL_WRITE
            | ACCESS_REMOTE_WRITE
            | ACCESS_REMOTE_READ
            | ACCESS_REMOTE_ATOMIC
            | ACCESS_FLUSH_GLOBAL;
        let len = MEM_LEN as u64;
        let mut table = MemTable::default();
        for (key, kind) in [
            (LKEY, RegionKind::Physical),
            (RKEY, RegionKind::Physical),
            (FAULT_KEY, RegionKind::OnDemand),
            (INV_KEY, RegionKind::FastReg),
        ] {
            let mr = region(key, PD, 0, len, all, kind);
            table.mrs.insert(key.index(), mr);
        }
        TestEnv {
            mem: vec![0; MEM_LEN],
            table,
            now: 0,
            recv: VecDeque::new(),
            completions: Vec::new(),
            sent: Vec::new(),
            drained: Vec::new(),
            async_errors: Vec::new(),
            flush_icrc: wire::FlushIcrc::Iba,
            xrc_srqs: HashMap::new(),
            send_allowance: None,
            asked: Vec::new(),
            clock_reads: std::cell::Cell::new(0),
            recycled: Vec::new(),
        }
    }

    /// Registers `key` as a region over all memory in protection domain `pd`, with every
    /// access right (the keys [`TestEnv::new`] makes are in the test QPs' PD).
    pub(super) fn add_region(&mut self, key: Key, pd: u32) {
        let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        let mr = region(key, pd, 0, MEM_LEN as u64, access, RegionKind::Physical);
        self.table.mrs.insert(key.index(), mr);
    }

    /// The packets sent so far, parsed (each must be well-formed).
    pub(super) fn sent_parsed(&self) -> Vec<Parsed<'_>> {
        self.sent
            .iter()
            .map(|p| wire::parse_packet(p).expect("the engine sends well-formed packets"))
            .collect()
    }
}

impl ProtectedMemory for TestEnv {
    fn protected(&mut self) -> (&mut MemTable, SliceRam<'_>) {
        (&mut self.table, SliceRam::new(0, &mut self.mem))
    }
}

impl DeviceEnv for TestEnv {
    fn flush_icrc(&self) -> wire::FlushIcrc {
        self.flush_icrc
    }

    fn sq_drained(&mut self, qpn: Qpn) {
        self.drained.push(qpn);
    }

    fn now_ns(&self) -> u64 {
        self.clock_reads.set(self.clock_reads.get() + 1);
        self.now
    }
    fn qp_async_error(&mut self, _qpn: Qpn, error: QpAsyncError) {
        self.async_errors.push(error);
    }
    protected_memory_ops!();
    fn pop_recv(&mut self, _: Qpn) -> Option<RecvWr> {
        self.recv.pop_front()
    }
    fn complete(&mut self, completion: Completion) {
        self.completions.push(completion);
    }
    fn recycle_sges(&mut self, sges: Vec<Sge>) {
        self.recycled.push(sges.capacity());
    }
    fn transmit(&mut self, _: &AddressVector, packet: wire::Packet) {
        self.sent.push(packet.into_vec());
    }
    fn may_send_request(&mut self, _: Qpn, adds_to_flight: bool) -> bool {
        self.asked.push(adds_to_flight);
        match &mut self.send_allowance {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }
    fn request_budget_spent(&self, _: Qpn) -> bool {
        self.send_allowance == Some(0)
    }
    fn xrc_srq(&self, srqn: u32) -> Option<XrcSrq> {
        self.xrc_srqs.get(&srqn).map(|(srq, _)| *srq)
    }
    fn pop_xrc_srq(&mut self, srqn: u32) -> Option<RecvWr> {
        self.xrc_srqs.get_mut(&srqn)?.1.pop_front()
    }
}

pub(super) const LOCAL_QPN: Qpn = Qpn::from_wire(0x11);
pub(super) const PEER_QPN: Qpn = Qpn::from_wire(0x22);

/// The configuration of test QP `qpn` of `qp_type`: in the test regions' PD, with its own
/// receive queue.
pub(super) fn qp_config(qpn: Qpn, qp_type: QpType) -> QpConfig {
    QpConfig {
        qpn,
        qp_type,
        pd: PD,
        uses_srq: false,
    }
}

/// A QP of `qp_type` in RTS with every remote access, MTU 1024, talking to [`PEER_QPN`]
/// at 10.0.0.2 from 10.0.0.1, both PSNs at 100.
pub(super) fn rts_qp(qp_type: QpType) -> Qp {
    let mut qp = Qp::new(qp_config(LOCAL_QPN, qp_type), Mtu::Mtu1024);
    qp.state = QpState::Rts;
    qp.dest_qpn = PEER_QPN;
    qp.access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    qp.timeout = 14;
    qp.av = Some(AddressVector {
        dgid: wire::ipv4_gid([10, 0, 0, 2]),
        sgid: wire::ipv4_gid([10, 0, 0, 1]),
        traffic_class: 0,
        hop_limit: 0,
        flow_label: 0,
        dmac: [0; 6],
    });
    qp.resp.epsn = Psn::from_wire(100);
    qp.req.next_psn = Psn::from_wire(100);
    qp.req.acked_psn = Psn::from_wire(99);
    qp
}

/// The modify that takes a new engine QP straight to RTS as [`rts_qp`]'s: its address
/// vector, [`PEER_QPN`], both PSNs at 100, MTU 1024.
pub(super) fn rts_modify() -> QpModify {
    QpModify {
        state: Some(QpState::Rts),
        av: rts_qp(QpType::Rc).av,
        dest_qpn: Some(PEER_QPN),
        rq_psn: Some(Psn::from_wire(100)),
        sq_psn: Some(Psn::from_wire(100)),
        path_mtu: Some(Mtu::Mtu1024),
        ..QpModify::default()
    }
}

/// [`rts_modify`] with a local ACK timeout (14: 67.1 ms), so that a packet sent arms the
/// QP's ACK timer.
pub(super) fn rts_modify_timed() -> QpModify {
    QpModify {
        timeout: Some(14),
        ..rts_modify()
    }
}

/// Creates [`rts_qp`]`(qp_type)` in `engine` and takes it to RTS with [`rts_modify`].
pub(super) fn create_rts_qp(engine: &mut Engine, env: &mut TestEnv, qp_type: QpType) {
    engine.create_qp(rts_qp(qp_type).cfg).unwrap();
    engine.modify_qp(env, LOCAL_QPN, &rts_modify()).unwrap();
}

/// An engine with `count` RC QPs from [`LOCAL_QPN`] on, in RTS with an ACK timer
/// ([`rts_modify_timed`]), talking to the test's peer.
pub(super) fn engine_with_timed_qps(env: &mut TestEnv, count: u32) -> (Engine, Vec<Qpn>) {
    engine_with_qps(env, count, &rts_modify_timed())
}

/// An engine with `count` RC QPs from [`LOCAL_QPN`] on, each taken to RTS with `modify`.
pub(super) fn engine_with_qps(
    env: &mut TestEnv,
    count: u32,
    modify: &QpModify,
) -> (Engine, Vec<Qpn>) {
    let mut engine = Engine::new();
    let qpns: Vec<Qpn> = (0..count)
        .map(|i| Qpn::new(LOCAL_QPN.get() + i).unwrap())
        .collect();
    for &qpn in &qpns {
        engine.create_qp(qp_config(qpn, QpType::Rc)).unwrap();
        engine.modify_qp(env, qpn, modify).unwrap();
    }
    (engine, qpns)
}

/// A SEND WR of `len` bytes from address 0 through [`LKEY`] (to [`RKEY`] at 0x1000).
pub(super) fn send_wr(wr_id: u64, opcode: WrOpcode, len: u32) -> SendWr {
    SendWr {
        data: SendData::Sges(vec![Sge {
            addr: 0,
            length: len,
            lkey: LKEY,
        }]),
        remote_addr: 0x1000,
        rkey: RKEY,
        ..SendWr::new(wr_id, opcode)
    }
}

/// A FLUSH (global visibility) of 8 bytes at the [`send_wr`] target.
pub(super) fn flush_wr(wr_id: u64) -> SendWr {
    SendWr {
        flush: FlushSpec {
            length: 8,
            placement_type: FLUSH_TYPE_GLOBAL,
            level: FLUSH_LEVEL_RANGE,
        },
        ..send_wr(wr_id, WrOpcode::Flush, 0)
    }
}

/// A packet from the peer to the local QP: `opcode` (RC unless it carries transport bits)
/// with PSN `psn`, headers set by `fill`.
pub(super) fn packet_from_peer(
    opcode: u8,
    psn: u32,
    payload: &[u8],
    fill: impl FnOnce(&mut Headers),
) -> Vec<u8> {
    let mut hdr = Headers::new(Bth {
        opcode,
        solicited: false,
        pkey: DEFAULT_PKEY,
        dest_qpn: LOCAL_QPN,
        ack_req: true,
        psn: Psn::from_wire(psn),
    });
    fill(&mut hdr);
    let ip = IpInfo {
        sgid: wire::ipv4_gid([10, 0, 0, 2]),
        dgid: wire::ipv4_gid([10, 0, 0, 1]),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        src_port: wire::flow_source_port(PEER_QPN),
    };
    wire::build_packet(&ip, &hdr, payload)
}

/// The peer's atomic request `opcode` (FETCH_ADD, COMPARE_SWAP) with PSN `psn` on the 8
/// bytes at `va` through [`RKEY`]: add or swap `swap_add` (compare 0).
pub(super) fn atomic_from_peer(opcode: u8, psn: u32, va: u64, swap_add: u64) -> Vec<u8> {
    packet_from_peer(opcode, psn, &[], |h| {
        h.atomic_eth = Some(wire::AtomicEth {
            va,
            rkey: RKEY,
            swap_add,
            compare: 0,
        })
    })
}

/// The peer's RC ACKNOWLEDGE of PSN `psn` with `syndrome` (ACK, NAK or RNR NAK), handed to
/// `qp`'s completer.
pub(super) fn ack_from_peer(
    qp: &mut Qp,
    env: &mut TestEnv,
    stats: &mut EngineStats,
    psn: u32,
    syndrome: wire::Syndrome,
) {
    let bytes = packet_from_peer(wire::opcode::RC_ACKNOWLEDGE, psn, &[], |h| {
        h.aeth = peer_aeth(syndrome)
    });
    qp.completer_receive(env, stats, &wire::parse_packet(&bytes).unwrap());
}

/// The AETH of the peer's ACKs, NAKs and responses: `syndrome`, MSN 0 (the tests' requesters
/// do not read it).
pub(super) fn peer_aeth(syndrome: wire::Syndrome) -> Option<wire::Aeth> {
    Some(wire::Aeth {
        syndrome,
        msn: Msn::default(),
    })
}

/// `packet` (IPv4, as [`packet_from_peer`] builds it) as if sent from `src`: its IPv4 header
/// checksum and ICRC made right again, so only the source address tells it apart.
pub(super) fn from_source(mut packet: Vec<u8>, src: [u8; 4]) -> Vec<u8> {
    let ip_len = wire::IPV4_HEADER_LEN;
    packet[12..16].copy_from_slice(&src);
    packet[10..12].fill(0);
    let sum = wire::ipv4_header_checksum(&packet[..ip_len]);
    packet[10..12].copy_from_slice(&sum.to_be_bytes());
    let icrc_at = packet.len() - wire::ICRC_LEN;
    let icrc = wire::compute_icrc(&packet[..icrc_at], ip_len);
    packet[icrc_at..].copy_from_slice(&icrc.to_le_bytes());
    packet
}

/// A fresh environment, counters and RC QP in RTS.
pub(super) fn rc_fixture() -> (TestEnv, EngineStats, Qp) {
    (TestEnv::new(), EngineStats::default(), rts_qp(QpType::Rc))
}

/// Fills the first `len` bytes of memory with a counting pattern.
pub(super) fn fill_pattern(env: &mut TestEnv, len: usize) {
    env.mem[..len]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
}

/// The engine sends FLUSH requests with the ICRC its device is configured for (and every
/// other packet with IBA's).
#[test]
fn a_flush_carries_the_icrc_of_the_device_configuration() {
    use crate::roce::wire::{FlushIcrc, IPV4_HEADER_LEN};
    let flush = flush_wr(0);
    for how in [FlushIcrc::Iba, FlushIcrc::Rxe] {
        let (mut env, mut stats, mut qp) = rc_fixture();
        env.flush_icrc = how;
        for wr in [flush.clone(), send_wr(1, WrOpcode::Send, 8)] {
            let wqe = qp.make_wqe(wr);
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        let icrcs: Vec<(u32, u32, u32)> = env
            .sent
            .iter()
            .map(|p| {
                let (body, icrc) = p.split_at(p.len() - 4);
                let wire_icrc = u32::from_le_bytes(icrc.try_into().unwrap());
                let iba = wire::compute_icrc(body, IPV4_HEADER_LEN);
                let rxe = wire::rxe_flush_icrc(body, IPV4_HEADER_LEN);
                (wire_icrc, iba, rxe)
            })
            .collect();
        assert_eq!(icrcs.len(), 2);
        let (flush_icrc, iba, rxe) = icrcs[0];
        assert_ne!(iba, rxe);
        assert_eq!(flush_icrc, if how == FlushIcrc::Rxe { rxe } else { iba });
        assert_eq!(icrcs[1].0, icrcs[1].1, "a SEND always carries IBA's ICRC");
    }
}
