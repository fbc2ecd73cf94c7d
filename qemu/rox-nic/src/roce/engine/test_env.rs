//! A minimal [`DeviceEnv`] for the engine's unit tests: one flat memory every key may use
//! (but [`FAULT_KEY`] and [`BAD_KEY`]), a receive queue, and what the engine sent and
//! completed. Protection itself is the device's and is tested there; the integration tests
//! (tests/roce_*.rs) run whole engines against a device-like double.

use std::collections::{HashMap, VecDeque};

use super::qp::Qp;
use super::EngineStats;
use crate::roce::wire::{self, Bth, Headers, IpInfo, Parsed, DEFAULT_PKEY};
use crate::roce::*;

/// A key whose every access hits a page that is not present.
pub(super) const FAULT_KEY: Key = Key::from_raw(0xfa);
/// A key the device does not know.
pub(super) const BAD_KEY: Key = Key::from_raw(0xbad);
pub(super) const MEM_LEN: usize = 1 << 16;

pub(super) struct TestEnv {
    pub(super) mem: Vec<u8>,
    pub(super) now: u64,
    pub(super) recv: VecDeque<RecvWr>,
    pub(super) completions: Vec<Completion>,
    pub(super) sent: Vec<Vec<u8>>,
    /// QPs whose SQD drain was reported.
    pub(super) drained: Vec<Qpn>,
    pub(super) async_errors: Vec<QpAsyncError>,
    /// XRC SRQs by number: their domain and PD, and their posted receive WRs.
    pub(super) xrc_srqs: HashMap<u32, (XrcSrq, VecDeque<RecvWr>)>,
}

impl TestEnv {
    pub(super) fn new() -> TestEnv {
        TestEnv {
            mem: vec![0; MEM_LEN],
            now: 0,
            recv: VecDeque::new(),
            completions: Vec::new(),
            sent: Vec::new(),
            drained: Vec::new(),
            async_errors: Vec::new(),
            xrc_srqs: HashMap::new(),
        }
    }

    fn range(
        &self,
        key: Key,
        addr: u64,
        len: usize,
    ) -> Result<std::ops::Range<usize>, AccessError> {
        if key == FAULT_KEY {
            return Err(AccessError::PageFault {
                key,
                page: 0,
                write: false,
                count: 1,
            });
        }
        if key == BAD_KEY {
            return Err(AccessError::InvalidKey);
        }
        let start = usize::try_from(addr).map_err(|_| AccessError::OutOfBounds)?;
        let end = start.checked_add(len).filter(|&e| e <= self.mem.len());
        end.map(|end| start..end).ok_or(AccessError::OutOfBounds)
    }

    fn read(&self, key: Key, addr: u64, buf: &mut [u8]) -> Result<(), AccessError> {
        let r = self.range(key, addr, buf.len())?;
        buf.copy_from_slice(&self.mem[r]);
        Ok(())
    }

    fn write(&mut self, key: Key, addr: u64, data: &[u8]) -> Result<(), AccessError> {
        let r = self.range(key, addr, data.len())?;
        self.mem[r].copy_from_slice(data);
        Ok(())
    }

    /// The packets sent so far, parsed (each must be well-formed).
    pub(super) fn sent_parsed(&self) -> Vec<Parsed<'_>> {
        self.sent
            .iter()
            .map(|p| wire::parse_packet(p).expect("the engine sends well-formed packets"))
            .collect()
    }
}

impl DeviceEnv for TestEnv {
    fn sq_drained(&mut self, qpn: Qpn) {
        self.drained.push(qpn);
    }

    fn now_ns(&self) -> u64 {
        self.now
    }
    fn qp_async_error(&mut self, _qpn: Qpn, error: QpAsyncError) {
        self.async_errors.push(error);
    }
    fn read_local(
        &mut self,
        _: u32,
        key: Key,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        self.read(key, addr, buf)
    }
    fn write_local(&mut self, _: u32, key: Key, addr: u64, data: &[u8]) -> Result<(), AccessError> {
        self.write(key, addr, data)
    }
    fn read_remote(&mut self, at: RemoteTarget, buf: &mut [u8]) -> Result<(), AccessError> {
        self.read(at.key, at.va, buf)
    }
    fn check_remote_write(&mut self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        self.range(at.key, at.va, len as usize).map(|_| ())
    }
    fn write_remote(&mut self, at: RemoteTarget, data: &[u8]) -> Result<(), AccessError> {
        self.write(at.key, at.va, data)
    }
    fn atomic_remote(&mut self, at: RemoteTarget, op: AtomicOp) -> Result<u64, AccessError> {
        let mut old = [0u8; 8];
        self.read(at.key, at.va, &mut old)?;
        let old = u64::from_le_bytes(old);
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } if compare == old => swap,
            AtomicOp::CompareSwap { .. } => old,
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            AtomicOp::Write { value } => value,
        };
        self.write(at.key, at.va, &new.to_le_bytes())?;
        Ok(old)
    }
    fn flush_remote(&mut self, at: RemoteTarget, _: FlushSpec) -> Result<(), AccessError> {
        self.range(at.key, at.va, 0).map(|_| ())
    }
    fn bind_mw(&mut self, _: u32, _: Qpn, _: &MwBind) -> Result<(), AccessError> {
        Err(AccessError::AccessDenied)
    }
    fn fast_register(&mut self, _: u32, _: Qpn, _: &FastReg) -> Result<(), AccessError> {
        Err(AccessError::AccessDenied)
    }
    fn invalidate(&mut self, _: u32, _: Qpn, key: Key, _: bool) -> Result<(), AccessError> {
        self.range(key, 0, 0).map(|_| ())
    }
    fn check_invalidate(&mut self, _: u32, _: Qpn, key: Key, _: bool) -> Result<(), AccessError> {
        self.range(key, 0, 0).map(|_| ())
    }
    fn pop_recv(&mut self, _: Qpn) -> Option<RecvWr> {
        self.recv.pop_front()
    }
    fn complete(&mut self, completion: Completion) {
        self.completions.push(completion);
    }
    fn transmit(&mut self, _: &AddressVector, packet: Vec<u8>) {
        self.sent.push(packet);
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

/// A QP of `qp_type` in RTS with every remote access, MTU 1024, talking to [`PEER_QPN`]
/// at 10.0.0.2 from 10.0.0.1, both PSNs at 100.
pub(super) fn rts_qp(qp_type: QpType) -> Qp {
    let cfg = QpConfig {
        qpn: LOCAL_QPN,
        qp_type,
        pd: 1,
        uses_srq: false,
    };
    let mut qp = Qp::new(cfg, Mtu::Mtu1024);
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

/// A SEND WR of `len` bytes from address 0 through key 1.
pub(super) fn send_wr(wr_id: u64, opcode: WrOpcode, len: u32) -> SendWr {
    SendWr {
        data: SendData::Sges(vec![Sge {
            addr: 0,
            length: len,
            lkey: Key::from_raw(1),
        }]),
        remote_addr: 0x1000,
        rkey: Key::from_raw(2),
        ..SendWr::new(wr_id, opcode)
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
