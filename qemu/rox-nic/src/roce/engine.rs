//! The RC/UC/UD transport engine: requester, responder and completer of every QP of a device.
//!
//! Reliability (RC) is go-back-N: every packet has a PSN; the responder accepts only the
//! expected PSN, answers the first gap with a PSN-sequence-error NAK, re-acknowledges
//! duplicates, replays READ responses and saved atomic results for duplicate requests, and
//! coalesces ACKs (one per [`Engine::poll`] batch for all packets that asked for one). The
//! requester rewinds to the oldest unacknowledged PSN on a NAK or on the local ACK timeout,
//! counting retries (retry_cnt) and RNR retries (rnr_retry) that reset whenever progress is made.

use std::collections::{HashMap, VecDeque};

use super::wire::{
    self, opcode as op, Aeth, AtomicEth, Bth, Deth, Feth, Headers, IpInfo, NakCode, ParseError,
    Parsed, Reth, Syndrome, DEFAULT_PKEY, GRH_LEN, IPV4_HEADER_LEN,
};
use super::*;
use rox_uapi::queue::{CQE_NETWORK_HDR_IPV4, CQE_NETWORK_HDR_IPV6};

/// Most PSNs a requester keeps in flight (unacknowledged) per QP; bounds retransmission bursts
/// and the port's socket buffer use.
pub const MAX_INFLIGHT_PSNS: u32 = 256;
/// The send window never shrinks below this many packets.
pub const MIN_INFLIGHT_PSNS: u32 = 16;
/// A requester asks for an ACK at the end of every message and at least every this many packets
/// (or twice per send window, if that is smaller, so a small window never waits for a timeout).
pub const ACK_REQ_INTERVAL: u32 = 64;
/// Largest message (IBA: 2^31 bytes).
const MAX_MESSAGE_BYTES: u64 = rox_uapi::verbs::MAX_MSG_SIZE as u64;
/// Size of an atomic operand.
const ATOMIC_BYTES: usize = rox_uapi::verbs::ATOMIC_SIZE as usize;
/// Local ACK timeout unit: 4.096 µs × 2^timeout.
const ACK_TIMEOUT_UNIT_NS: u64 = 4096;
/// The timeout attribute is a 5-bit field.
const MAX_ACK_TIMEOUT_EXPONENT: u8 = 31;
/// rnr_retry value meaning "retry forever".
const RNR_RETRY_INFINITE: u8 = 7;
/// IBA table 45: RNR NAK timer codes in units of 10 µs (code 0 is the longest, 655.36 ms).
const RNR_TIMER_10US: [u64; 32] = [
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
];
const NS_PER_10US: u64 = 10_000;
/// A send WR Q_Key with this bit set means "use the QP's own Q_Key" (IBA 10.2.5).
const QKEY_USE_QP_QKEY: u32 = 0x8000_0000;
/// Hop limit / TTL of packets whose QP has no address vector hop limit set.
const DEFAULT_HOP_LIMIT: u8 = 64;

/// Counters of the engine (all QPs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// Received packets that failed the ICRC check (dropped).
    pub rx_icrc_errors: u64,
    /// Received packets that were not well-formed RoCEv2 (dropped).
    pub rx_malformed: u64,
    /// Received packets for a QP that does not exist, is in the wrong state or of another type.
    pub rx_no_qp: u64,
    /// RC/UC packets from an address other than the QP's peer (dropped).
    pub rx_wrong_source: u64,
    /// UD packets dropped for a Q_Key mismatch.
    pub rx_qkey_violations: u64,
    /// Packets dropped for a partition key that is not ours.
    pub rx_bad_pkey: u64,
    /// UD/UC messages dropped because no receive WR was posted.
    pub rx_no_recv_wr: u64,
    /// Duplicate requests (PSN below the expected one) seen by responders.
    pub rx_duplicates: u64,
    /// Requests beyond the expected PSN (a gap: lost or reordered packets) seen by responders.
    pub rx_out_of_sequence: u64,
    /// Responses/ACKs a requester could not use (stale, duplicate or out of order).
    pub rx_stale_responses: u64,
    pub acks_sent: u64,
    pub naks_sent: u64,
    pub rnr_naks_sent: u64,
    /// RNR NAKs a responder sent because a page of an on-demand region was not present.
    pub page_fault_naks: u64,
    /// Requester stalls on a page of an on-demand region that was not present.
    pub page_fault_stalls: u64,
    /// Local ACK timeouts that caused a go-back-N retransmission.
    pub retransmit_timeouts: u64,
    /// Rewinds caused by NAKs (sequence error or RNR).
    pub nak_rewinds: u64,
}

/// Why [`Engine::receive`] dropped a packet (also counted in [`EngineStats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RxDrop {
    #[error("bad packet: {0}")]
    Parse(#[from] ParseError),
    #[error("no QP {0:#x} able to take this packet")]
    NoQp(Qpn),
    #[error("packet for connected QP {0:#x} from an address other than its peer")]
    WrongSource(Qpn),
    #[error("partition key {0:#06x} not ours")]
    BadPkey(u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WqeKind {
    Send,
    Write,
    Read,
    Atomic,
    /// FLUSH: one request packet, answered by a zero-length READ RESPONSE ONLY.
    Flush,
    /// ATOMIC WRITE: one request packet with 8 bytes, answered like FLUSH.
    AtomicWrite,
    /// BIND_MW / LOCAL_INV / REG_MR: executed by the device when its turn comes; no packet,
    /// no PSN.
    Local,
}

impl WqeKind {
    /// Uses a responder resource (counts against max_rd_atomic, waits for a response).
    fn rd_atomic(self) -> bool {
        matches!(
            self,
            WqeKind::Read | WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite
        )
    }

    /// Completes on a response without data (an ACK beyond it also proves it was executed).
    fn ack_only_response(self) -> bool {
        matches!(self, WqeKind::Flush | WqeKind::AtomicWrite)
    }
}

/// A send WR the requester owns until it retires.
#[derive(Debug)]
struct Wqe {
    wr: SendWr,
    kind: WqeKind,
    len: u64,
    /// PSNs were assigned (the first packet was sent).
    started: bool,
    first_psn: Psn,
    /// PSNs the message consumes (packets of a SEND/WRITE, response packets of a READ, 1 for atomics).
    npsn: u32,
    /// SEND/WRITE: every packet acknowledged (UC/UD: every packet sent).
    acked: bool,
    /// READ: response packets received, in order.
    read_pkts_done: u32,
    /// Atomic: the original value came back; FLUSH / ATOMIC WRITE: the response came.
    responded: bool,
    /// The WR failed; it completes with this status when it reaches the head of the SQ.
    error: Option<WcStatus>,
    /// `VENDOR_ERR_*` detail reported with `error`.
    vendor_err: u16,
}

impl Wqe {
    fn new(wr: SendWr, kind: WqeKind, len: u64, npsn: u32) -> Wqe {
        Wqe {
            wr,
            kind,
            len,
            started: false,
            first_psn: Psn::default(),
            npsn,
            acked: false,
            read_pkts_done: 0,
            responded: false,
            error: None,
            vendor_err: 0,
        }
    }

    /// A WR that failed before it started: it only waits for its turn to complete.
    fn failed(wr: SendWr, kind: WqeKind, status: WcStatus, vendor_err: u16) -> Wqe {
        Wqe {
            error: Some(status),
            vendor_err,
            ..Wqe::new(wr, kind, 0, 1)
        }
    }

    fn done(&self) -> bool {
        match self.kind {
            WqeKind::Send | WqeKind::Write | WqeKind::Local => self.acked,
            WqeKind::Read => self.started && self.read_pkts_done == self.npsn,
            WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite => self.responded,
        }
    }

    /// The last PSN of the WQE (a local operation has none: the PSN before its first).
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn).prev()
    }

    fn contains(&self, psn: Psn) -> bool {
        self.started && psn.within(self.first_psn, self.last_psn())
    }

    /// The oldest PSN of this WQE not yet known to have arrived.
    fn resume_psn(&self, acked_psn: Psn) -> Psn {
        match self.kind {
            WqeKind::Read => self.first_psn.add(self.read_pkts_done),
            WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite => self.first_psn,
            WqeKind::Send | WqeKind::Write | WqeKind::Local => {
                if self.contains(acked_psn) {
                    acked_psn.next()
                } else {
                    self.first_psn
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct Requester {
    sq: VecDeque<Wqe>,
    /// PSN of the next never-sent packet.
    next_psn: Psn,
    /// Highest PSN acknowledged by an ACK (or implied by a response).
    acked_psn: Psn,
    /// Index in `sq` of the WQE to (re)transmit next, and its next packet.
    cursor: usize,
    cursor_pkt: u32,
    retry_left: u8,
    rnr_left: u8,
    /// Local ACK timer.
    timer_deadline: Option<u64>,
    /// Waiting out an RNR NAK until then.
    rnr_until: Option<u64>,
    /// A READ was re-requested from this PSN after an out-of-order response.
    read_gap_psn: Option<Psn>,
    /// The wait of the last page-fault stall (0: the last attempt made progress).
    fault_wait_ns: u64,
    pkts_since_ack_req: u32,
    /// In SQD and the drain has not been reported yet ([`DeviceEnv::sq_drained`]).
    drain_pending: bool,
    /// Send window in packets (flow control): halved on every loss (ACK timeout, sequence
    /// NAK), grown by one per ACK that makes progress, between [`MIN_INFLIGHT_PSNS`] and
    /// [`MAX_INFLIGHT_PSNS`]. A receiver whose socket buffer holds less than a full window
    /// loses the tail of every burst; go-back-N would resend into the same overflow forever,
    /// the shrinking window makes the bursts fit.
    window: u32,
}

impl Requester {
    fn new() -> Requester {
        Requester {
            window: MAX_INFLIGHT_PSNS,
            ..Default::default()
        }
    }

    /// A loss: halve the window.
    fn on_loss(&mut self) {
        self.window = (self.window / 2).max(MIN_INFLIGHT_PSNS);
    }

    /// An ACK made progress: grow the window.
    fn on_progress(&mut self) {
        self.window = (self.window + 1).min(MAX_INFLIGHT_PSNS);
    }

    /// A page-fault stall at `now`: wait [`PAGE_FAULT_RETRY_NS`], doubled on every stall
    /// in a row up to [`PAGE_FAULT_RETRY_MAX_NS`].
    fn fault_stall(&mut self, now: u64) {
        self.fault_wait_ns = match self.fault_wait_ns {
            0 => PAGE_FAULT_RETRY_NS,
            w => (w * 2).min(PAGE_FAULT_RETRY_MAX_NS),
        };
        self.rnr_until = Some(now + self.fault_wait_ns);
    }

    fn ack_req_interval(&self) -> u32 {
        ACK_REQ_INTERVAL.min(self.window / 2)
    }
}

/// A multi-packet message the responder is in the middle of.
#[derive(Debug)]
enum InMessage {
    Send {
        wr: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: Key,
        remaining: u64,
        total: u32,
    },
}

/// Saved READ/atomic request, for duplicates.
#[derive(Clone, Copy, Debug)]
enum RdAtomic {
    Read {
        first_psn: Psn,
        last_psn: Psn,
    },
    Atomic {
        psn: Psn,
        original: u64,
    },
    /// FLUSH / ATOMIC WRITE: executed; a duplicate is only answered again.
    Executed {
        psn: Psn,
    },
}

#[derive(Debug, Default)]
struct Responder {
    /// Expected PSN.
    epsn: Psn,
    /// Message sequence number: messages completed.
    msn: Msn,
    cur: Option<InMessage>,
    /// UC: a receive WR taken for a message that was then dropped; used for the next one.
    spare_recv: Option<RecvWr>,
    /// A packet asked for an ACK; send one (for epsn - 1) at the next poll.
    ack_pending: bool,
    /// A PSN-sequence NAK was sent for the current epsn (one per gap).
    nak_sent: bool,
    /// UC: drop packets until the next first/only packet.
    uc_dropping: bool,
    history: VecDeque<RdAtomic>,
}

/// Transport context of one QP.
#[derive(Debug)]
struct Qp {
    cfg: QpConfig,
    state: QpState,
    mtu: Mtu,
    dest_qpn: Qpn,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    qkey: u32,
    access: u32,
    av: Option<AddressVector>,
    req: Requester,
    resp: Responder,
}

/// Transport engine of one device: the QP table of transport contexts and their state machines.
#[derive(Debug)]
pub struct Engine {
    qps: HashMap<Qpn, Qp>,
    stats: EngineStats,
    /// MTU of UD (and GSI) QPs, which no modify_qp sets: the largest the port carries.
    ud_mtu: Mtu,
}

impl Default for Engine {
    fn default() -> Engine {
        Engine {
            qps: HashMap::new(),
            stats: EngineStats::default(),
            ud_mtu: Mtu::Mtu4096,
        }
    }
}

fn wc_opcode(kind: WqeKind, opcode: WrOpcode) -> WcOpcode {
    match kind {
        WqeKind::Send => WcOpcode::Send,
        WqeKind::Write => WcOpcode::RdmaWrite,
        WqeKind::Read => WcOpcode::RdmaRead,
        WqeKind::Atomic if opcode == WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        WqeKind::Atomic => WcOpcode::FetchAdd,
        WqeKind::Flush => WcOpcode::Flush,
        WqeKind::AtomicWrite => WcOpcode::AtomicWrite,
        WqeKind::Local if opcode == WrOpcode::BindMw => WcOpcode::BindMw,
        WqeKind::Local if opcode == WrOpcode::RegMr => WcOpcode::RegMr,
        WqeKind::Local => WcOpcode::LocalInv,
    }
}

fn wqe_kind(opcode: WrOpcode) -> WqeKind {
    match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WqeKind::Send,
        WrOpcode::BindMw | WrOpcode::LocalInv | WrOpcode::RegMr => WqeKind::Local,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WqeKind::Write,
        WrOpcode::RdmaRead => WqeKind::Read,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => WqeKind::Atomic,
        WrOpcode::Flush => WqeKind::Flush,
        WrOpcode::AtomicWrite => WqeKind::AtomicWrite,
    }
}

fn sges_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

enum SgError {
    /// The data does not fit the SGE list.
    Length,
    /// The device refused an access (key, PD, access flags or bounds).
    Access,
    /// A page of an on-demand region is not present yet: try again later.
    Fault,
}

/// Walks bytes `[offset, offset + len)` of the buffer an SGE list describes, in pieces that
/// each lie in one SGE: `piece(sge, address in it, range of the walked bytes)`. Returns how
/// many bytes the list covered (less than `len` if it is too short).
fn walk_sges(
    sges: &[Sge],
    offset: u64,
    len: usize,
    mut piece: impl FnMut(&Sge, u64, std::ops::Range<usize>) -> Result<(), SgError>,
) -> Result<usize, SgError> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let sge_len = u64::from(sge.length);
        if skip >= sge_len {
            skip -= sge_len;
            continue;
        }
        let n = ((sge_len - skip) as usize).min(len - done);
        piece(sge, sge.addr + skip, done..done + n)?;
        done += n;
        skip = 0;
    }
    Ok(done)
}

/// Why the requester could not send a packet.
enum SendStop {
    /// The WR fails with this status.
    Error(WcStatus),
    /// A page of an on-demand region is not present: the SQ waits and tries again.
    Fault,
}

impl From<SgError> for SendStop {
    fn from(e: SgError) -> SendStop {
        match e {
            SgError::Length => SendStop::Error(WcStatus::LocLenErr),
            SgError::Access => SendStop::Error(WcStatus::LocProtErr),
            SgError::Fault => SendStop::Fault,
        }
    }
}

/// How long a requester waits before trying again an access that hit a page of an on-demand
/// region that was not present (the driver answers the device's page fault meanwhile).
pub const PAGE_FAULT_RETRY_NS: u64 = 100_000;
/// Consecutive page-fault stalls of a requester double its wait, up to this (a page the
/// driver does not answer for a while costs no busy retrying).
pub const PAGE_FAULT_RETRY_MAX_NS: u64 = 10_000_000;

fn access_refused(e: AccessError) -> SgError {
    log::debug!("local access refused: {e}");
    match e {
        AccessError::PageFault { .. } => SgError::Fault,
        _ => SgError::Access,
    }
}

/// Copies `out.len()` bytes starting at byte `offset` of the payload described by `data`.
fn gather(
    env: &mut dyn DeviceEnv,
    pd: u32,
    data: &SendData,
    offset: u64,
    out: &mut [u8],
) -> Result<(), SgError> {
    match data {
        SendData::Inline(bytes) => {
            let start = offset as usize;
            let src = bytes.get(start..start + out.len()).ok_or(SgError::Length)?;
            out.copy_from_slice(src);
            Ok(())
        }
        SendData::Sges(sges) => {
            let len = out.len();
            let done = walk_sges(sges, offset, len, |sge, addr, range| {
                env.read_local(pd, sge.lkey, addr, &mut out[range])
                    .map_err(access_refused)
            })?;
            if done == len {
                Ok(())
            } else {
                Err(SgError::Length)
            }
        }
    }
}

/// Writes `data` at byte `offset` of the buffer described by `sges`.
fn scatter(
    env: &mut dyn DeviceEnv,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), SgError> {
    if offset + data.len() as u64 > sges_len(sges) {
        return Err(SgError::Length);
    }
    walk_sges(sges, offset, data.len(), |sge, addr, range| {
        env.write_local(pd, sge.lkey, addr, &data[range])
            .map_err(access_refused)
    })?;
    Ok(())
}

fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_10US[usize::from(code) % RNR_TIMER_10US.len()] * NS_PER_10US
}

impl Qp {
    fn ack_timeout_ns(&self) -> Option<u64> {
        (self.timeout != 0)
            .then(|| ACK_TIMEOUT_UNIT_NS << self.timeout.min(MAX_ACK_TIMEOUT_EXPONENT))
    }

    fn ip_info(&self, av: &AddressVector) -> IpInfo {
        IpInfo {
            sgid: av.sgid,
            dgid: av.dgid,
            traffic_class: av.traffic_class,
            hop_limit: if av.hop_limit == 0 {
                DEFAULT_HOP_LIMIT
            } else {
                av.hop_limit
            },
            flow_label: av.flow_label,
            src_port: wire::flow_source_port(self.cfg.qpn),
        }
    }

    fn class(&self) -> u8 {
        match self.cfg.qp_type {
            QpType::Rc => op::CLASS_RC,
            QpType::Uc => op::CLASS_UC,
            QpType::Ud => op::CLASS_UD,
        }
    }

    /// The requester may transmit: in RTS anything, in SQD only the rest (and retransmissions)
    /// of WRs already started.
    fn can_send(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// SQE stops only the send queue; the receive queue keeps working (IBA 10.3.1).
    fn can_receive(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Sends a packet on the QP's connection (RC/UC).
    fn send_connected(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        hdr: &Headers,
        payload: &[u8],
    ) {
        let Some(av) = self.av else {
            log::warn!("QP {:#x}: no address vector; packet dropped", self.cfg.qpn);
            return;
        };
        let packet = wire::build_packet(&self.ip_info(&av), hdr, payload);
        stats.tx_packets += 1;
        env.transmit(&av, packet);
    }

    fn bth(&self, opcode: u8, psn: Psn) -> Bth {
        Bth {
            opcode,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: self.dest_qpn,
            ack_req: false,
            psn,
        }
    }

    fn send_ack(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        syndrome: Syndrome,
    ) {
        let mut hdr = Headers::new(self.bth(op::RC_ACKNOWLEDGE, psn));
        hdr.aeth = Some(Aeth {
            syndrome,
            msn: self.resp.msn,
        });
        match syndrome {
            Syndrome::Ack => stats.acks_sent += 1,
            Syndrome::RnrNak(_) => stats.rnr_naks_sent += 1,
            Syndrome::Nak(_) => stats.naks_sent += 1,
        }
        self.send_connected(env, stats, &hdr, &[]);
    }

    fn complete_recv(
        &self,
        env: &mut dyn DeviceEnv,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) {
        env.complete(Completion::recv(
            self.cfg.qpn,
            wr_id,
            status,
            opcode,
            byte_len,
        ));
    }

    /// Moves the QP to the error state: every outstanding send WR and (unless the QP uses an
    /// SRQ) every posted receive WR completes with WR_FLUSH_ERR.
    fn enter_error(&mut self, env: &mut dyn DeviceEnv) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        self.flush_sq(env);
        self.flush_rq(env);
        env.qp_entered_error(self.cfg.qpn);
    }

    /// Moves a UC/UD QP to the Send Queue Error state (IBA 10.3.1: a send WR completed in
    /// error): the send WRs behind the failed one are flushed, the receive queue keeps working,
    /// and software may return the QP to RTS.
    fn enter_sq_error(&mut self, env: &mut dyn DeviceEnv) {
        if matches!(self.state, QpState::Sqe | QpState::Err) {
            return;
        }
        self.state = QpState::Sqe;
        self.flush_sq(env);
    }

    /// A send WR failed at the head of the SQ: RC QPs go to ERR, UC/UD QPs to SQE.
    fn send_queue_failed(&mut self, env: &mut dyn DeviceEnv) {
        if self.cfg.qp_type == QpType::Rc {
            self.enter_error(env);
        } else {
            self.enter_sq_error(env);
        }
    }

    /// Completes every send WR with WR_FLUSH_ERR and stops the requester.
    fn flush_sq(&mut self, env: &mut dyn DeviceEnv) {
        while let Some(wqe) = self.req.sq.pop_front() {
            env.complete(Completion::send(
                self.cfg.qpn,
                wqe.wr.wr_id,
                WcStatus::WrFlushErr,
                wc_opcode(wqe.kind, wqe.wr.opcode),
                0,
            ));
        }
        self.req.cursor = 0;
        self.req.cursor_pkt = 0;
        self.req.timer_deadline = None;
        self.req.rnr_until = None;
    }

    /// Completes the receive WRs the responder holds and (unless they belong to an SRQ) every
    /// posted one with WR_FLUSH_ERR.
    fn flush_rq(&mut self, env: &mut dyn DeviceEnv) {
        let held = match self.resp.cur.take() {
            Some(InMessage::Send { wr, .. }) => Some(wr),
            _ => None,
        };
        for wr in held.into_iter().chain(self.resp.spare_recv.take()) {
            self.complete_recv(env, wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        }
        if !self.cfg.uses_srq {
            while let Some(wr) = env.pop_recv(self.cfg.qpn) {
                self.complete_recv(env, wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            }
        }
    }

    /// Send WRs started (first packet sent) and not yet retired: what an SQD drain waits for.
    fn sq_in_flight(&self) -> bool {
        self.req.sq.front().is_some_and(|w| w.started)
    }

    /// Reports the end of an SQD drain once.
    fn check_drained(&mut self, env: &mut dyn DeviceEnv) {
        if self.state == QpState::Sqd && self.req.drain_pending && !self.sq_in_flight() {
            self.req.drain_pending = false;
            env.sq_drained(self.cfg.qpn);
        }
    }

    // ---------------------------------------------------------------- requester

    /// Queues a WQE on the SQ; in ERR or SQE it is flushed at once.
    fn enqueue(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, wqe: Wqe) {
        self.req.sq.push_back(wqe);
        match self.state {
            QpState::Err => {
                self.flush_sq(env);
                // Receive WRs posted since the QP entered ERR are flushed too.
                self.flush_rq(env);
            }
            QpState::Sqe => self.flush_sq(env),
            _ => self.transmit(env, stats),
        }
    }

    /// Validates a WR and makes it a WQE; an invalid one becomes a failed WQE that completes
    /// with its error status in SQ order.
    fn make_wqe(&self, wr: SendWr) -> Wqe {
        let kind = wqe_kind(wr.opcode);
        match self.check_wr(&wr, kind) {
            Ok((len, npsn)) => Wqe::new(wr, kind, len, npsn),
            Err(status) => Wqe::failed(wr, kind, status, 0),
        }
    }

    /// The payload length and PSN count of a valid WR, or its error status.
    fn check_wr(&self, wr: &SendWr, kind: WqeKind) -> Result<(u64, u32), WcStatus> {
        let len = wr.data.len();
        let mtu = u64::from(self.mtu.bytes());
        let invalidates = wr.opcode == WrOpcode::SendWithInv;
        let allowed = match self.cfg.qp_type {
            QpType::Rc => true,
            QpType::Uc => {
                matches!(kind, WqeKind::Send | WqeKind::Write | WqeKind::Local) && !invalidates
            }
            QpType::Ud => kind == WqeKind::Send && wr.ud.is_some() && !invalidates,
        };
        let segment_missing = (wr.opcode == WrOpcode::BindMw && wr.bind.is_none())
            || (wr.opcode == WrOpcode::RegMr && wr.fast_reg.is_none());
        if !allowed || segment_missing {
            return Err(WcStatus::LocQpOpErr);
        }
        if kind == WqeKind::Local {
            return Ok((0, 0));
        }
        let inline = matches!(wr.data, SendData::Inline(_));
        if inline && matches!(kind, WqeKind::Read | WqeKind::Atomic | WqeKind::Flush) {
            return Err(WcStatus::LocQpOpErr);
        }
        if kind == WqeKind::Flush && !wr.flush.is_valid() {
            return Err(WcStatus::LocQpOpErr);
        }
        let bad_len = len > MAX_MESSAGE_BYTES
            || (matches!(kind, WqeKind::Atomic | WqeKind::AtomicWrite)
                && len != ATOMIC_BYTES as u64)
            || (kind == WqeKind::Flush && len != 0)
            || (self.cfg.qp_type == QpType::Ud && len > mtu);
        if bad_len {
            return Err(WcStatus::LocLenErr);
        }
        let npsn = match kind {
            WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite => 1,
            _ => len.div_ceil(mtu).max(1) as u32,
        };
        Ok((len, npsn))
    }

    /// READ/atomic WRs started and not yet retired. A finished one behind an unfinished one
    /// still counts: a go-back-N retransmission resends it, and the responder only keeps the
    /// last max_dest_rd_atomic of them for replay.
    fn outstanding_rd_atomic(&self) -> usize {
        self.req
            .sq
            .iter()
            .take_while(|w| w.started)
            .filter(|w| w.kind.rd_atomic())
            .count()
    }

    /// Sends what the window, the RD/atomic limit, fences and RNR waits allow.
    fn transmit(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats) {
        while self.can_send() && self.req.rnr_until.is_none() && self.req.cursor < self.req.sq.len()
        {
            let cursor = self.req.cursor;
            let wqe = &self.req.sq[cursor];
            if wqe.error.is_some() {
                break;
            }
            if wqe.started && wqe.done() {
                // Go-back-N resends from the oldest gap; a WR after it whose response or ACK
                // already arrived was executed by the responder and needs no resending.
                self.req.cursor += 1;
                self.req.cursor_pkt = 0;
                continue;
            }
            if !wqe.started {
                if self.state == QpState::Sqd {
                    // SQD: no new WR starts until the QP returns to RTS.
                    break;
                }
                let rd_atomic = wqe.kind.rd_atomic();
                let outstanding = self.outstanding_rd_atomic();
                if (rd_atomic && outstanding >= usize::from(self.max_rd_atomic.max(1)))
                    || (wqe.wr.fence && outstanding > 0)
                {
                    break;
                }
                if wqe.kind == WqeKind::Local {
                    self.execute_local(env, cursor);
                    continue;
                }
            }
            let psn = if wqe.started {
                wqe.first_psn.add(self.req.cursor_pkt)
            } else {
                self.req.next_psn
            };
            if self.cfg.qp_type == QpType::Rc {
                let una = self.una();
                if psn.diff(una.add(self.req.window)) >= 0 {
                    break;
                }
            }
            let wqe = &mut self.req.sq[cursor];
            let fresh = !wqe.started;
            if fresh {
                wqe.started = true;
                wqe.first_psn = self.req.next_psn;
                self.req.next_psn = self.req.next_psn.add(wqe.npsn);
            }
            match self.send_packet(env, stats, cursor) {
                Ok(()) => {
                    self.req.fault_wait_ns = 0;
                    if self.cfg.qp_type == QpType::Rc && self.req.timer_deadline.is_none() {
                        self.req.timer_deadline = self.ack_timeout_ns().map(|t| env.now_ns() + t);
                    }
                }
                Err(SendStop::Fault) => {
                    // Nothing was sent: a WR that had not started gives its PSNs back; the SQ
                    // waits like after an RNR NAK and tries again.
                    if fresh {
                        let wqe = &mut self.req.sq[cursor];
                        wqe.started = false;
                        self.req.next_psn = wqe.first_psn;
                    }
                    stats.page_fault_stalls += 1;
                    let now = env.now_ns();
                    self.req.fault_stall(now);
                    break;
                }
                Err(SendStop::Error(status)) => {
                    self.req.sq[cursor].error = Some(status);
                    break;
                }
            }
        }
        self.retire(env);
        self.check_drained(env);
    }

    /// Executes the local operation (BIND_MW, LOCAL_INV, REG_MR) at the cursor: it takes no
    /// PSN and completes at once, in SQ order. Any failure is MW_BIND_ERR (a memory
    /// management operation failed) and changes nothing.
    fn execute_local(&mut self, env: &mut dyn DeviceEnv, index: usize) {
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        let next_psn = self.req.next_psn;
        let wqe = &mut self.req.sq[index];
        wqe.started = true;
        wqe.first_psn = next_psn;
        let result = match (wqe.wr.opcode, wqe.wr.bind, wqe.wr.fast_reg) {
            (WrOpcode::BindMw, Some(bind), _) => env.bind_mw(pd, qpn, &bind),
            (WrOpcode::RegMr, _, Some(reg)) => env.fast_register(pd, qpn, &reg),
            _ => env.invalidate(pd, qpn, wqe.wr.rkey, false),
        }
        .map_err(|_| WcStatus::MwBindErr);
        match result {
            Ok(()) => {
                wqe.acked = true;
                self.req.cursor += 1;
                self.req.cursor_pkt = 0;
            }
            // Like a send error, the cursor stays on the failed WR: nothing after it may be
            // sent (it completes in error once the WRs before it have, the rest flush).
            Err(status) => wqe.error = Some(status),
        }
    }

    /// Sends the packet at the cursor and advances the cursor.
    fn send_packet(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
    ) -> Result<(), SendStop> {
        let mtu = u64::from(self.mtu.bytes());
        let class = self.class();
        let pkt = self.req.cursor_pkt;
        let wqe = &self.req.sq[index];
        let psn = wqe.first_psn.add(pkt);
        let mut bth = self.bth(0, psn);
        if wqe.kind == WqeKind::Read {
            // One request covers the rest of the READ (a retransmission resumes mid-way).
            let offset = u64::from(pkt) * mtu;
            bth.opcode = op::RC_READ_REQUEST;
            bth.ack_req = true;
            let mut hdr = Headers::new(bth);
            hdr.reth = Some(Reth {
                va: wqe.wr.remote_addr.wrapping_add(offset),
                rkey: wqe.wr.rkey,
                dma_len: (wqe.len - offset.min(wqe.len)) as u32,
            });
            self.send_connected(env, stats, &hdr, &[]);
            self.req.cursor += 1;
            self.req.cursor_pkt = 0;
            self.req.pkts_since_ack_req = 0;
            return Ok(());
        }
        if wqe.kind == WqeKind::Atomic {
            bth.opcode = if wqe.wr.opcode == WrOpcode::AtomicCmpAndSwp {
                op::RC_COMPARE_SWAP
            } else {
                op::RC_FETCH_ADD
            };
            bth.ack_req = true;
            let mut hdr = Headers::new(bth);
            hdr.atomic_eth = Some(AtomicEth {
                va: wqe.wr.remote_addr,
                rkey: wqe.wr.rkey,
                swap_add: if wqe.wr.opcode == WrOpcode::AtomicCmpAndSwp {
                    wqe.wr.swap
                } else {
                    wqe.wr.compare_add
                },
                compare: wqe.wr.compare_add,
            });
            self.send_connected(env, stats, &hdr, &[]);
            self.req.cursor += 1;
            self.req.cursor_pkt = 0;
            self.req.pkts_since_ack_req = 0;
            return Ok(());
        }
        if wqe.kind == WqeKind::Flush {
            bth.opcode = op::RC_FLUSH;
            bth.ack_req = true;
            let mut hdr = Headers::new(bth);
            hdr.feth = Some(Feth {
                placement_type: wqe.wr.flush.placement_type,
                selectivity_level: wqe.wr.flush.level,
            });
            hdr.reth = Some(Reth {
                va: wqe.wr.remote_addr,
                rkey: wqe.wr.rkey,
                dma_len: wqe.wr.flush.length,
            });
            self.send_connected(env, stats, &hdr, &[]);
            self.req.cursor += 1;
            self.req.cursor_pkt = 0;
            self.req.pkts_since_ack_req = 0;
            return Ok(());
        }
        if wqe.kind == WqeKind::AtomicWrite {
            let mut value = [0u8; ATOMIC_BYTES];
            gather(env, self.cfg.pd, &wqe.wr.data, 0, &mut value).map_err(SendStop::from)?;
            bth.opcode = op::RC_ATOMIC_WRITE;
            bth.ack_req = true;
            let mut hdr = Headers::new(bth);
            hdr.reth = Some(Reth {
                va: wqe.wr.remote_addr,
                rkey: wqe.wr.rkey,
                dma_len: ATOMIC_BYTES as u32,
            });
            self.send_connected(env, stats, &hdr, &value);
            self.req.cursor += 1;
            self.req.cursor_pkt = 0;
            self.req.pkts_since_ack_req = 0;
            return Ok(());
        }
        let offset = u64::from(pkt) * mtu;
        let chunk = (wqe.len - offset).min(mtu) as usize;
        let mut payload = vec![0u8; chunk];
        gather(env, self.cfg.pd, &wqe.wr.data, offset, &mut payload).map_err(SendStop::from)?;
        let first = pkt == 0;
        let last = pkt + 1 == wqe.npsn;
        let imm = matches!(
            wqe.wr.opcode,
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
        );
        let inv = wqe.wr.opcode == WrOpcode::SendWithInv;
        let base = match (wqe.kind, first, last) {
            (WqeKind::Send, true, true) if inv => op::RC_SEND_ONLY_INV,
            (WqeKind::Send, false, true) if inv => op::RC_SEND_LAST_INV,
            (WqeKind::Send, true, true) if imm => op::RC_SEND_ONLY_IMM,
            (WqeKind::Send, true, true) => op::RC_SEND_ONLY,
            (WqeKind::Send, true, false) => op::RC_SEND_FIRST,
            (WqeKind::Send, false, false) => op::RC_SEND_MIDDLE,
            (WqeKind::Send, false, true) if imm => op::RC_SEND_LAST_IMM,
            (WqeKind::Send, false, true) => op::RC_SEND_LAST,
            (_, true, true) if imm => op::RC_WRITE_ONLY_IMM,
            (_, true, true) => op::RC_WRITE_ONLY,
            (_, true, false) => op::RC_WRITE_FIRST,
            (_, false, false) => op::RC_WRITE_MIDDLE,
            (_, false, true) if imm => op::RC_WRITE_LAST_IMM,
            (_, false, true) => op::RC_WRITE_LAST,
        };
        bth.opcode = class | base;
        bth.solicited = last && wqe.wr.solicited;
        self.req.pkts_since_ack_req += 1;
        bth.ack_req = self.cfg.qp_type == QpType::Rc
            && (last || self.req.pkts_since_ack_req >= self.req.ack_req_interval());
        if bth.ack_req {
            self.req.pkts_since_ack_req = 0;
        }
        let mut hdr = Headers::new(bth);
        if last && imm {
            hdr.imm = Some(wqe.wr.imm);
        }
        if last && inv {
            hdr.ieth = Some(wqe.wr.rkey);
        }
        if first && wqe.kind == WqeKind::Write {
            hdr.reth = Some(Reth {
                va: wqe.wr.remote_addr,
                rkey: wqe.wr.rkey,
                dma_len: wqe.len as u32,
            });
        }
        if let Some(ud) = wqe.wr.ud {
            hdr.bth.dest_qpn = ud.remote_qpn;
            let qkey = if ud.remote_qkey & QKEY_USE_QP_QKEY != 0 {
                self.qkey
            } else {
                ud.remote_qkey
            };
            hdr.deth = Some(Deth {
                qkey,
                src_qpn: self.cfg.qpn,
            });
            let packet = wire::build_packet(&self.ip_info(&ud.av), &hdr, &payload);
            stats.tx_packets += 1;
            env.transmit(&ud.av, packet);
        } else {
            self.send_connected(env, stats, &hdr, &payload);
        }
        let wqe = &mut self.req.sq[index];
        if last {
            if self.cfg.qp_type != QpType::Rc {
                wqe.acked = true; // UC/UD complete once sent
            }
            self.req.cursor += 1;
            self.req.cursor_pkt = 0;
        } else {
            self.req.cursor_pkt += 1;
        }
        Ok(())
    }

    /// Oldest PSN not known to have arrived (the go-back-N point).
    fn una(&self) -> Psn {
        self.req
            .sq
            .iter()
            .take_while(|w| w.started)
            .find(|w| !w.done())
            .map(|w| w.resume_psn(self.req.acked_psn))
            .unwrap_or(self.req.next_psn)
    }

    /// A response (PSN `psn`) could not be placed because a local page is absent: drop it,
    /// go back to its request and send that again once the page-fault wait is over.
    fn stall_response_for_fault(&mut self, stats: &mut EngineStats, psn: Psn, now: u64) {
        stats.page_fault_stalls += 1;
        self.rewind_to(psn);
        self.req.timer_deadline = None;
        self.req.fault_stall(now);
    }

    /// Points the cursor at PSN `psn` (go-back-N).
    fn rewind_to(&mut self, psn: Psn) {
        let Some(index) = self.req.sq.iter().position(|w| w.contains(psn)) else {
            return;
        };
        let wqe = &self.req.sq[index];
        self.req.cursor = index;
        self.req.cursor_pkt = psn.distance_from(wqe.first_psn);
        self.req.pkts_since_ack_req = 0;
    }

    /// Marks SEND/WRITE WQEs whose every PSN is at or before `psn` as acknowledged.
    /// Returns true if the oldest outstanding PSN moved (progress).
    fn ack_through(&mut self, psn: Psn, now: u64) -> bool {
        let before = self.una();
        if psn.before(before) && psn.diff(self.req.acked_psn) <= 0 {
            return false;
        }
        if psn.after(self.req.acked_psn) {
            self.req.acked_psn = psn;
        }
        for wqe in self.req.sq.iter_mut().take_while(|w| w.started) {
            if wqe.first_psn.after(psn) {
                break;
            }
            if wqe.last_psn().diff(psn) <= 0 {
                match wqe.kind {
                    WqeKind::Send | WqeKind::Write => wqe.acked = true,
                    // The responder executes in PSN order: an ACK beyond a FLUSH / ATOMIC
                    // WRITE means it was executed (its own response may have been lost).
                    WqeKind::Flush | WqeKind::AtomicWrite => wqe.responded = true,
                    WqeKind::Read | WqeKind::Atomic | WqeKind::Local => {}
                }
            }
        }
        let after = self.una();
        let progress = after != before;
        if progress {
            self.req.retry_left = self.retry_cnt;
            self.req.rnr_left = self.rnr_retry;
            self.req.on_progress();
            self.restart_timer(now);
        }
        progress
    }

    fn restart_timer(&mut self, now: u64) {
        let outstanding = self.una() != self.req.next_psn;
        self.req.timer_deadline = if outstanding {
            self.ack_timeout_ns().map(|t| now + t)
        } else {
            None
        };
    }

    /// Retires finished WQEs from the head of the SQ in order, completing signaled ones and
    /// errored ones; an errored WQE moves the QP to the error state.
    fn retire(&mut self, env: &mut dyn DeviceEnv) {
        while let Some(head) = self.req.sq.front() {
            let status = match head.error {
                Some(status) => status,
                None if head.done() => WcStatus::Success,
                None => break,
            };
            let wqe = self.req.sq.pop_front().expect("head exists");
            if self.req.cursor == 0 {
                // The cursor was inside the retired WQE (a go-back-N rewind that a late ACK
                // overtook): continue at the start of the next one, not at the same packet
                // index of a different message.
                self.req.cursor_pkt = 0;
            } else {
                self.req.cursor -= 1;
            }
            if status != WcStatus::Success || wqe.wr.signaled {
                let byte_len = if status == WcStatus::Success {
                    wqe.len as u32
                } else {
                    0
                };
                env.complete(Completion {
                    vendor_err: wqe.vendor_err,
                    ..Completion::send(
                        self.cfg.qpn,
                        wqe.wr.wr_id,
                        status,
                        wc_opcode(wqe.kind, wqe.wr.opcode),
                        byte_len,
                    )
                });
            }
            if status != WcStatus::Success {
                self.send_queue_failed(env);
                return;
            }
        }
        if self.req.sq.is_empty() {
            self.req.timer_deadline = None;
        }
    }

    /// An RNR or sequence NAK for `psn` acknowledges every PSN before it; it asks for a
    /// rewind only if `psn` is then the oldest outstanding PSN (otherwise it is stale).
    fn accept_nak(&mut self, psn: Psn, now: u64, stats: &mut EngineStats) -> bool {
        self.ack_through(psn.prev(), now);
        if psn == self.una() {
            true
        } else {
            stats.rx_stale_responses += 1;
            false
        }
    }

    /// Fails the WQE holding `psn` with `status` (NAKs).
    fn fail_psn(&mut self, psn: Psn, status: WcStatus) {
        let index = self
            .req
            .sq
            .iter()
            .position(|w| w.contains(psn))
            .unwrap_or(0);
        if let Some(wqe) = self.req.sq.get_mut(index) {
            wqe.error = Some(status);
        }
        // Nothing at or after the failed WR may be sent any more.
        self.req.cursor = self.req.cursor.min(index);
        self.req.timer_deadline = None;
    }

    /// An ACK, NAK, READ response or atomic ACK arrived for this requester.
    fn requester_receive(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        if self.cfg.qp_type != QpType::Rc || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            stats.rx_stale_responses += 1;
            return;
        }
        let psn = p.hdr.bth.psn;
        let now = env.now_ns();
        // A response for a PSN never sent is bogus.
        if psn.diff(self.req.next_psn) >= 0 {
            stats.rx_stale_responses += 1;
            return;
        }
        let base = p.hdr.bth.opcode & op::OP_MASK;
        match base {
            op::RC_ACKNOWLEDGE => {
                let aeth = p.hdr.aeth.expect("parsed AETH");
                match aeth.syndrome {
                    Syndrome::Ack => {
                        if !self.ack_through(psn, now) {
                            stats.rx_stale_responses += 1;
                        }
                    }
                    Syndrome::RnrNak(code) => {
                        if !self.accept_nak(psn, now, stats) {
                            return;
                        }
                        if self.rnr_retry != RNR_RETRY_INFINITE {
                            if self.req.rnr_left == 0 {
                                self.fail_psn(psn, WcStatus::RnrRetryExcErr);
                                self.retire(env);
                                return;
                            }
                            self.req.rnr_left -= 1;
                        }
                        stats.nak_rewinds += 1;
                        self.rewind_to(psn);
                        self.req.timer_deadline = None;
                        self.req.rnr_until = Some(now + rnr_timer_ns(code));
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        if !self.accept_nak(psn, now, stats) {
                            return;
                        }
                        if self.req.retry_left == 0 {
                            self.fail_psn(psn, WcStatus::RetryExcErr);
                            self.retire(env);
                            return;
                        }
                        self.req.retry_left -= 1;
                        stats.nak_rewinds += 1;
                        self.req.on_loss();
                        self.rewind_to(psn);
                        self.restart_timer(now);
                    }
                    Syndrome::Nak(code) => {
                        self.ack_through(psn.prev(), now);
                        let status = match code {
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                            _ => WcStatus::RemInvReqErr,
                        };
                        self.fail_psn(psn, status);
                    }
                }
            }
            op::RC_ATOMIC_ACKNOWLEDGE => {
                let Some(index) = self.req.sq.iter().position(|w| w.contains(psn)) else {
                    stats.rx_stale_responses += 1;
                    return;
                };
                if self.req.sq[index].kind != WqeKind::Atomic || self.req.sq[index].responded {
                    stats.rx_stale_responses += 1;
                    return;
                }
                self.ack_through(psn.prev(), now);
                let original = p.hdr.atomic_ack.expect("parsed AtomicAckETH");
                let wqe = &self.req.sq[index];
                let SendData::Sges(sges) = &wqe.wr.data else {
                    unreachable!("atomics take SGEs")
                };
                let result = scatter(env, self.cfg.pd, sges, 0, &original.to_le_bytes());
                let wqe = &mut self.req.sq[index];
                match result {
                    Ok(()) => {
                        wqe.responded = true;
                        self.req.fault_wait_ns = 0;
                    }
                    Err(SgError::Fault) => {
                        // The result buffer is not present: ask again later (the responder
                        // answers the duplicate from its saved result).
                        self.stall_response_for_fault(stats, psn, now);
                        return;
                    }
                    Err(_) => wqe.error = Some(WcStatus::LocProtErr),
                }
                self.restart_timer(now);
                self.req.retry_left = self.retry_cnt;
            }
            _ => {
                // READ response FIRST/MIDDLE/LAST/ONLY.
                let Some(index) = self.req.sq.iter().position(|w| w.contains(psn)) else {
                    stats.rx_stale_responses += 1;
                    return;
                };
                let wqe = &self.req.sq[index];
                if wqe.kind.ack_only_response() {
                    // FLUSH / ATOMIC WRITE: a zero-length READ RESPONSE ONLY.
                    if wqe.responded {
                        stats.rx_stale_responses += 1;
                        return;
                    }
                    if base != op::RC_READ_RESPONSE_ONLY || !p.payload.is_empty() {
                        self.req.sq[index].error = Some(WcStatus::BadRespErr);
                        self.retire(env);
                        return;
                    }
                    self.ack_through(psn, now);
                    self.req.retry_left = self.retry_cnt;
                    self.req.rnr_left = self.rnr_retry;
                    self.restart_timer(now);
                    self.retire(env);
                    self.transmit(env, stats);
                    return;
                }
                let next = wqe.first_psn.add(wqe.read_pkts_done);
                if wqe.kind != WqeKind::Read || psn != next {
                    stats.rx_stale_responses += 1;
                    let gap = wqe.kind == WqeKind::Read && psn.after(next);
                    if gap && self.req.read_gap_psn != Some(next) {
                        // A response was lost (responses arrive in order): ask again from the
                        // gap now rather than at the ACK timeout; once per gap.
                        self.req.read_gap_psn = Some(next);
                        stats.nak_rewinds += 1;
                        self.rewind_to(next);
                        self.transmit(env, stats);
                    }
                    return;
                }
                self.ack_through(psn.prev(), now);
                let mtu = u64::from(self.mtu.bytes());
                let wqe = &self.req.sq[index];
                let offset = u64::from(wqe.read_pkts_done) * mtu;
                let expected = (wqe.len - offset).min(mtu) as usize;
                if p.payload.len() != expected {
                    self.req.sq[index].error = Some(WcStatus::BadRespErr);
                    self.retire(env);
                    return;
                }
                let SendData::Sges(sges) = &wqe.wr.data else {
                    unreachable!("reads take SGEs")
                };
                let result = scatter(env, self.cfg.pd, sges, offset, p.payload);
                let wqe = &mut self.req.sq[index];
                match result {
                    Ok(()) => {
                        wqe.read_pkts_done += 1;
                        self.req.fault_wait_ns = 0;
                    }
                    Err(SgError::Fault) => {
                        // The destination page is not present: request the rest of the READ
                        // again later.
                        self.stall_response_for_fault(stats, psn, now);
                        return;
                    }
                    Err(SgError::Length) => wqe.error = Some(WcStatus::LocLenErr),
                    Err(SgError::Access) => wqe.error = Some(WcStatus::LocProtErr),
                }
                self.req.retry_left = self.retry_cnt;
                self.req.rnr_left = self.rnr_retry;
                self.restart_timer(now);
            }
        }
        self.retire(env);
        self.transmit(env, stats);
    }

    /// Timers: RNR wait over, or local ACK timeout (go-back-N or retry exhaustion).
    fn on_timers(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats) {
        let now = env.now_ns();
        if self.req.rnr_until.is_some_and(|t| now >= t) {
            self.req.rnr_until = None;
            self.restart_timer(now);
        }
        if self.req.timer_deadline.is_some_and(|t| now >= t) {
            let una = self.una();
            if una == self.req.next_psn {
                self.req.timer_deadline = None;
            } else if self.req.retry_left == 0 {
                self.fail_psn(una, WcStatus::RetryExcErr);
                self.retire(env);
                return;
            } else {
                self.req.retry_left -= 1;
                stats.retransmit_timeouts += 1;
                self.req.on_loss();
                self.rewind_to(una);
                self.req.timer_deadline = None;
            }
        }
        self.transmit(env, stats);
    }

    // ---------------------------------------------------------------- responder

    fn nak(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn, code: NakCode) {
        // One NAK per expected PSN: the rest of the requester's window is dropped silently.
        self.resp.nak_sent = true;
        self.send_ack(env, stats, psn, Syndrome::Nak(code));
    }

    /// A responder-side error of class "QP goes to error" (invalid request, remote operational
    /// error, local length/protection error on a receive WR).
    fn responder_fatal(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        code: NakCode,
        recv: Option<(u64, WcStatus)>,
    ) {
        if let Some((wr_id, status)) = recv {
            self.complete_recv(env, wr_id, status, WcOpcode::Recv, 0);
        }
        if self.cfg.qp_type == QpType::Rc {
            self.nak(env, stats, psn, code);
        }
        self.enter_error(env);
    }

    fn take_recv(&mut self, env: &mut dyn DeviceEnv) -> Option<RecvWr> {
        self.resp
            .spare_recv
            .take()
            .or_else(|| env.pop_recv(self.cfg.qpn))
    }

    /// A request hit a page of an on-demand region that is not present: the device asked the
    /// driver for it; RC answers RNR NAK (the requester retries after its RNR timer, the
    /// request is not executed), UC drops the message.
    fn page_fault_rnr(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn) {
        stats.page_fault_naks += 1;
        if self.cfg.qp_type == QpType::Rc {
            let timer = self.min_rnr_timer;
            self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
            // Later packets of the window are dropped silently until the retry.
            self.resp.nak_sent = true;
        } else {
            self.uc_drop_message();
            self.resp.epsn = psn.next();
        }
    }

    fn remember(&mut self, entry: RdAtomic) {
        self.resp.history.push_back(entry);
        while self.resp.history.len() > usize::from(self.max_dest_rd_atomic.max(1)) {
            self.resp.history.pop_front();
        }
    }

    /// Sends READ response packets for `reth` starting at `psn`. Returns false on an access error.
    fn send_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        reth: &Reth,
    ) -> bool {
        let mtu = self.mtu.bytes();
        let len = reth.dma_len;
        let npkts = len.div_ceil(mtu).max(1);
        // Check the whole range before the first response leaves, without reading it (the
        // device walks an on-demand region's page entries; other regions are contiguous
        // behind their key, so their bounds suffice).
        if len > 0 {
            match env.check_remote_read(
                self.cfg.pd,
                self.cfg.qpn,
                reth.rkey,
                reth.va,
                u64::from(len),
            ) {
                Ok(()) => {}
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return false;
                }
                Err(_) => {
                    self.nak(env, stats, psn, NakCode::RemoteAccessError);
                    return false;
                }
            }
        }
        let mut buf = vec![0u8; mtu.min(len) as usize];
        for i in 0..npkts {
            let offset = i * mtu;
            let chunk = (len - offset).min(mtu) as usize;
            let data = &mut buf[..chunk];
            if chunk > 0
                && env
                    .read_remote(
                        self.cfg.pd,
                        self.cfg.qpn,
                        reth.rkey,
                        reth.va.wrapping_add(u64::from(offset)),
                        data,
                    )
                    .is_err()
            {
                self.nak(env, stats, psn.add(i), NakCode::RemoteAccessError);
                return false;
            }
            let base = match (i == 0, i + 1 == npkts) {
                (true, true) => op::RC_READ_RESPONSE_ONLY,
                (true, false) => op::RC_READ_RESPONSE_FIRST,
                (false, false) => op::RC_READ_RESPONSE_MIDDLE,
                (false, true) => op::RC_READ_RESPONSE_LAST,
            };
            let mut hdr = Headers::new(self.bth(base, psn.add(i)));
            if wire::opcode_info(base).is_some_and(|info| info.aeth) {
                hdr.aeth = Some(Aeth {
                    syndrome: Syndrome::Ack,
                    msn: self.resp.msn,
                });
            }
            self.send_connected(env, stats, &hdr, data);
        }
        true
    }

    fn send_atomic_ack(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        original: u64,
    ) {
        let mut hdr = Headers::new(self.bth(op::RC_ATOMIC_ACKNOWLEDGE, psn));
        hdr.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: self.resp.msn,
        });
        hdr.atomic_ack = Some(original);
        self.send_connected(env, stats, &hdr, &[]);
    }

    /// The response to a FLUSH or ATOMIC WRITE: a READ RESPONSE ONLY without data (IBA A19).
    fn send_empty_read_response(&self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn) {
        let mut hdr = Headers::new(self.bth(op::RC_READ_RESPONSE_ONLY, psn));
        hdr.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: self.resp.msn,
        });
        self.send_connected(env, stats, &hdr, &[]);
    }

    /// An RC duplicate request: re-acknowledge, replay a READ, or replay a saved atomic result.
    fn duplicate(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        stats.rx_duplicates += 1;
        let psn = p.hdr.bth.psn;
        match p.hdr.bth.opcode & op::OP_MASK {
            op::RC_READ_REQUEST => {
                let known = self.resp.history.iter().any(|h| match *h {
                    RdAtomic::Read {
                        first_psn,
                        last_psn,
                    } => psn.within(first_psn, last_psn),
                    RdAtomic::Atomic { .. } | RdAtomic::Executed { .. } => false,
                });
                if known && self.access & ACCESS_REMOTE_READ != 0 {
                    let reth = p.hdr.reth.expect("parsed RETH");
                    self.send_read_responses(env, stats, psn, &reth);
                }
            }
            op::RC_COMPARE_SWAP | op::RC_FETCH_ADD => {
                let saved = self.resp.history.iter().find_map(|h| match *h {
                    RdAtomic::Atomic {
                        psn: saved_psn,
                        original,
                    } if saved_psn == psn => Some(original),
                    _ => None,
                });
                if let Some(original) = saved {
                    self.send_atomic_ack(env, stats, psn, original);
                }
            }
            op::RC_FLUSH | op::RC_ATOMIC_WRITE => {
                // Executed once; a duplicate (its response was lost) is answered again.
                let known = self
                    .resp
                    .history
                    .iter()
                    .any(|h| matches!(*h, RdAtomic::Executed { psn: saved } if saved == psn));
                if known {
                    self.send_empty_read_response(env, stats, psn);
                }
            }
            _ => self.resp.ack_pending = true,
        }
    }

    /// A request packet arrived for this responder.
    fn responder_receive(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        if !self.can_receive() {
            stats.rx_no_qp += 1;
            return;
        }
        match self.cfg.qp_type {
            QpType::Ud => self.ud_receive(env, stats, p),
            QpType::Rc => {
                let diff = p.hdr.bth.psn.diff(self.resp.epsn);
                if diff > 0 {
                    stats.rx_out_of_sequence += 1;
                    if !self.resp.nak_sent {
                        self.resp.nak_sent = true;
                        let epsn = self.resp.epsn;
                        self.nak(env, stats, epsn, NakCode::PsnSequenceError);
                    }
                } else if diff < 0 {
                    self.duplicate(env, stats, p);
                } else {
                    self.execute(env, stats, p);
                }
            }
            QpType::Uc => {
                if p.hdr.bth.psn != self.resp.epsn {
                    // A gap: the message in progress is lost; resynchronise on this packet.
                    stats.rx_out_of_sequence += 1;
                    self.uc_drop_message();
                    self.resp.epsn = p.hdr.bth.psn;
                }
                if self.resp.uc_dropping && !p.info.first {
                    self.resp.epsn = p.hdr.bth.psn.next();
                    return;
                }
                self.resp.uc_dropping = false;
                self.execute(env, stats, p);
            }
        }
    }

    fn uc_drop_message(&mut self) {
        if let Some(InMessage::Send { wr, .. }) = self.resp.cur.take() {
            self.resp.spare_recv = Some(wr);
        }
        self.resp.uc_dropping = true;
    }

    /// Executes the request with the expected PSN (RC and UC).
    fn execute(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let rc = self.cfg.qp_type == QpType::Rc;
        let bth = p.hdr.bth;
        let psn = bth.psn;
        let base = bth.opcode & op::OP_MASK;
        let in_send = matches!(self.resp.cur, Some(InMessage::Send { .. }));
        let in_write = matches!(self.resp.cur, Some(InMessage::Write { .. }));
        let is_send = base <= op::RC_SEND_ONLY_IMM
            || base == op::RC_SEND_LAST_INV
            || base == op::RC_SEND_ONLY_INV;
        let is_write = (op::RC_WRITE_FIRST..=op::RC_WRITE_ONLY_IMM).contains(&base);
        let continues = !p.info.first;
        let sequence_ok = if continues {
            (is_send && in_send) || (is_write && in_write)
        } else {
            !in_send && !in_write
        };
        if !sequence_ok {
            if rc {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
            } else {
                self.uc_drop_message();
                self.resp.epsn = psn.next();
            }
            return;
        }
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        if is_send {
            if p.info.first {
                let Some(wr) = self.take_recv(env) else {
                    if rc {
                        let timer = self.min_rnr_timer;
                        self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
                        // Later packets of the window are dropped silently until the retry.
                        self.resp.nak_sent = true;
                    } else {
                        stats.rx_no_recv_wr += 1;
                        self.resp.uc_dropping = true;
                        self.resp.epsn = psn.next();
                    }
                    return;
                };
                self.resp.cur = Some(InMessage::Send { wr, offset: 0 });
            }
            let Some(InMessage::Send { wr, offset }) = &mut self.resp.cur else {
                unreachable!("checked")
            };
            // The key a SEND with invalidate names is checked before its last packet is
            // placed; it is invalidated only once the whole message has been.
            let bad_invalidation = p.info.last
                && p.hdr
                    .ieth
                    .is_some_and(|rkey| env.check_invalidate(pd, qpn, rkey, true).is_err());
            if bad_invalidation {
                let wr_id = wr.wr_id;
                self.resp.cur = None;
                self.responder_fatal(
                    env,
                    stats,
                    psn,
                    NakCode::InvalidRequest,
                    Some((wr_id, WcStatus::LocQpOpErr)),
                );
                return;
            }
            match scatter(env, pd, &wr.sges, *offset, p.payload) {
                Ok(()) => *offset += p.payload.len() as u64,
                Err(SgError::Fault) => {
                    // Nothing of this packet was written; the first packet gives its receive
                    // WR back for the retry.
                    if p.info.first {
                        if let Some(InMessage::Send { wr, .. }) = self.resp.cur.take() {
                            self.resp.spare_recv = Some(wr);
                        }
                    }
                    self.page_fault_rnr(env, stats, psn);
                    return;
                }
                Err(e) => {
                    let wr_id = wr.wr_id;
                    self.resp.cur = None;
                    let (code, status) = match e {
                        SgError::Length => (NakCode::InvalidRequest, WcStatus::LocLenErr),
                        SgError::Access | SgError::Fault => {
                            (NakCode::RemoteOperationalError, WcStatus::LocProtErr)
                        }
                    };
                    self.responder_fatal(env, stats, psn, code, Some((wr_id, status)));
                    return;
                }
            }
            if p.info.last {
                let Some(InMessage::Send { wr, offset }) = self.resp.cur.take() else {
                    unreachable!("checked")
                };
                if let Some(rkey) = p.hdr.ieth {
                    // Checked before the packet was placed; nothing ran in between.
                    let done = env.invalidate(pd, qpn, rkey, true);
                    debug_assert!(done.is_ok(), "invalidation checked: {done:?}");
                }
                let (imm, wc_flags) = match (p.hdr.imm, p.hdr.ieth) {
                    (Some(imm), _) => (imm, WC_FLAG_WITH_IMM),
                    (None, Some(rkey)) => (rkey.get(), WC_FLAG_WITH_INV),
                    (None, None) => (0, 0),
                };
                env.complete(Completion {
                    imm,
                    wc_flags,
                    solicited: bth.solicited,
                    ..Completion::recv(
                        self.cfg.qpn,
                        wr.wr_id,
                        WcStatus::Success,
                        WcOpcode::Recv,
                        offset as u32,
                    )
                });
                self.resp.msn = self.resp.msn.next();
            }
        } else if is_write {
            if p.info.first {
                let reth = p.hdr.reth.expect("parsed RETH");
                if self.access & ACCESS_REMOTE_WRITE == 0 {
                    self.remote_access_error(env, stats, psn);
                    return;
                }
                self.resp.cur = Some(InMessage::Write {
                    va: reth.va,
                    rkey: reth.rkey,
                    remaining: u64::from(reth.dma_len),
                    total: reth.dma_len,
                });
            }
            let Some(InMessage::Write { remaining, .. }) = &self.resp.cur else {
                unreachable!("checked")
            };
            let too_long = p.payload.len() as u64 > *remaining;
            let short_last = p.info.last && (p.payload.len() as u64) < *remaining;
            if too_long || short_last {
                self.resp.cur = None;
                if rc {
                    self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                } else {
                    self.uc_drop_message();
                    self.resp.epsn = psn.next();
                }
                return;
            }
            // The first packet checks the whole RETH range before any byte lands (as the IBA
            // responder, rxe's check_rkey and the READ path do): a WRITE that overruns its
            // target writes nothing. Later packets stay inside it (`remaining`).
            let reth = p.hdr.reth.filter(|reth| p.info.first && reth.dma_len > 0);
            if let Some(reth) = reth {
                let len = u64::from(reth.dma_len);
                if let Err(e) = env.check_remote_write(pd, qpn, reth.rkey, reth.va, len) {
                    self.resp.cur = None;
                    if let AccessError::PageFault { .. } = e {
                        self.page_fault_rnr(env, stats, psn);
                    } else {
                        self.remote_access_error(env, stats, psn);
                    }
                    return;
                }
            }
            // WRITE with immediate consumes a receive WR; get it before touching memory so an
            // RNR NAK leaves nothing half-done.
            let recv = if p.hdr.imm.is_some() {
                match self.take_recv(env) {
                    Some(wr) => Some(wr),
                    None => {
                        if rc {
                            if p.info.first {
                                // The retransmitted first packet starts the message again.
                                self.resp.cur = None;
                            }
                            let timer = self.min_rnr_timer;
                            self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
                            // Later packets of the window are dropped silently until the retry.
                            self.resp.nak_sent = true;
                        } else {
                            stats.rx_no_recv_wr += 1;
                            self.uc_drop_message();
                            self.resp.epsn = psn.next();
                        }
                        return;
                    }
                }
            } else {
                None
            };
            let Some(InMessage::Write {
                va,
                rkey,
                remaining,
                total,
            }) = &mut self.resp.cur
            else {
                unreachable!("checked")
            };
            if !p.payload.is_empty() {
                match env.write_remote(pd, qpn, *rkey, *va, p.payload) {
                    Ok(()) => {}
                    Err(AccessError::PageFault { .. }) => {
                        // Not written: the retry of this packet starts over from here.
                        if let Some(wr) = recv {
                            self.resp.spare_recv = Some(wr);
                        }
                        if p.info.first {
                            self.resp.cur = None;
                        }
                        self.page_fault_rnr(env, stats, psn);
                        return;
                    }
                    Err(_) => {
                        if let Some(wr) = recv {
                            self.resp.spare_recv = Some(wr);
                        }
                        self.resp.cur = None;
                        self.remote_access_error(env, stats, psn);
                        return;
                    }
                }
                *va = va.wrapping_add(p.payload.len() as u64);
                *remaining -= p.payload.len() as u64;
            }
            let total = *total;
            if p.info.last {
                self.resp.cur = None;
                if let Some(wr) = recv {
                    env.complete(Completion {
                        imm: p.hdr.imm.unwrap_or(0),
                        wc_flags: WC_FLAG_WITH_IMM,
                        solicited: bth.solicited,
                        ..Completion::recv(
                            self.cfg.qpn,
                            wr.wr_id,
                            WcStatus::Success,
                            WcOpcode::RecvRdmaWithImm,
                            total,
                        )
                    });
                }
                self.resp.msn = self.resp.msn.next();
            }
        } else if base == op::RC_READ_REQUEST {
            let reth = p.hdr.reth.expect("parsed RETH");
            if self.max_dest_rd_atomic == 0 || u64::from(reth.dma_len) > MAX_MESSAGE_BYTES {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            }
            if self.access & ACCESS_REMOTE_READ == 0 {
                self.remote_access_error(env, stats, psn);
                return;
            }
            let npkts = reth.dma_len.div_ceil(self.mtu.bytes()).max(1);
            self.resp.msn = self.resp.msn.next();
            if !self.send_read_responses(env, stats, psn, &reth) {
                self.resp.msn = self.resp.msn.prev();
                return;
            }
            self.remember(RdAtomic::Read {
                first_psn: psn,
                last_psn: psn.add(npkts - 1),
            });
            self.resp.epsn = psn.add(npkts);
            self.resp.nak_sent = false;
            return;
        } else if base == op::RC_FLUSH {
            let feth = p.hdr.feth.expect("parsed FETH");
            let reth = p.hdr.reth.expect("parsed RETH");
            let flush = FlushSpec {
                length: reth.dma_len,
                placement_type: feth.placement_type,
                level: feth.selectivity_level,
            };
            if self.max_dest_rd_atomic == 0 || !flush.is_valid() {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            }
            let need = flush.required_access();
            if self.access & need != need
                || env
                    .flush_remote(pd, qpn, reth.rkey, reth.va, flush)
                    .is_err()
            {
                self.remote_access_error(env, stats, psn);
                return;
            }
            self.finish_executed(env, stats, psn);
            return;
        } else if base == op::RC_ATOMIC_WRITE {
            let reth = p.hdr.reth.expect("parsed RETH");
            let value: Option<[u8; ATOMIC_BYTES]> = p.payload.try_into().ok();
            let Some(value) = value.filter(|_| {
                self.max_dest_rd_atomic != 0
                    && reth.dma_len == ATOMIC_BYTES as u32
                    && reth.va.is_multiple_of(ATOMIC_BYTES as u64)
            }) else {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            };
            let write = AtomicOp::Write {
                value: u64::from_ne_bytes(value),
            };
            if self.access & ACCESS_REMOTE_WRITE == 0 {
                self.remote_access_error(env, stats, psn);
                return;
            }
            match env.atomic_remote(pd, qpn, reth.rkey, reth.va, write) {
                Ok(_) => {}
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return;
                }
                Err(_) => {
                    self.remote_access_error(env, stats, psn);
                    return;
                }
            }
            self.finish_executed(env, stats, psn);
            return;
        } else {
            // Atomics.
            let a = p.hdr.atomic_eth.expect("parsed AtomicETH");
            if self.max_dest_rd_atomic == 0 || !a.va.is_multiple_of(ATOMIC_BYTES as u64) {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            }
            if self.access & ACCESS_REMOTE_ATOMIC == 0 {
                self.remote_access_error(env, stats, psn);
                return;
            }
            let atomic = if base == op::RC_COMPARE_SWAP {
                AtomicOp::CompareSwap {
                    compare: a.compare,
                    swap: a.swap_add,
                }
            } else {
                AtomicOp::FetchAdd { add: a.swap_add }
            };
            let original = match env.atomic_remote(pd, qpn, a.rkey, a.va, atomic) {
                Ok(v) => v,
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return;
                }
                Err(_) => {
                    self.remote_access_error(env, stats, psn);
                    return;
                }
            };
            self.resp.msn = self.resp.msn.next();
            self.remember(RdAtomic::Atomic { psn, original });
            self.send_atomic_ack(env, stats, psn, original);
            self.resp.epsn = psn.next();
            self.resp.nak_sent = false;
            return;
        }
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
        if rc && bth.ack_req {
            self.resp.ack_pending = true;
        }
    }

    /// A FLUSH / ATOMIC WRITE was executed: count the message, remember it for duplicates,
    /// answer it and expect the next PSN.
    fn finish_executed(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn) {
        self.resp.msn = self.resp.msn.next();
        self.remember(RdAtomic::Executed { psn });
        self.send_empty_read_response(env, stats, psn);
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
    }

    /// R_Key/access/bounds violation of a remote request: RC NAKs (the requester's WR fails
    /// with REM_ACCESS_ERR); UC drops the message.
    fn remote_access_error(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn) {
        if self.cfg.qp_type == QpType::Rc {
            self.nak(env, stats, psn, NakCode::RemoteAccessError);
        } else {
            self.uc_drop_message();
            self.resp.epsn = psn.next();
        }
    }

    fn ud_receive(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let deth = p.hdr.deth.expect("parsed DETH");
        if deth.qkey != self.qkey {
            stats.rx_qkey_violations += 1;
            return;
        }
        let Some(wr) = env.pop_recv(self.cfg.qpn) else {
            stats.rx_no_recv_wr += 1;
            return;
        };
        // The GRH area: for IPv4 the IP header sits in its last 20 bytes (as rdma_rxe and
        // RoCEv2 HCAs do), for IPv6 the 40-byte IP header is the GRH.
        let mut grh = [0u8; GRH_LEN];
        let network_hdr = if p.ip_header.len() == IPV4_HEADER_LEN {
            grh[GRH_LEN - IPV4_HEADER_LEN..].copy_from_slice(p.ip_header);
            CQE_NETWORK_HDR_IPV4
        } else {
            grh.copy_from_slice(p.ip_header);
            CQE_NETWORK_HDR_IPV6
        };
        let pd = self.cfg.pd;
        let total = GRH_LEN + p.payload.len();
        let result = scatter(env, pd, &wr.sges, 0, &grh)
            .and_then(|()| scatter(env, pd, &wr.sges, GRH_LEN as u64, p.payload));
        let status = match result {
            Ok(()) => WcStatus::Success,
            Err(SgError::Length) => WcStatus::LocLenErr,
            // UD has no RNR: a receive buffer of an on-demand region must be present.
            Err(SgError::Access | SgError::Fault) => WcStatus::LocProtErr,
        };
        let with_imm = p.hdr.imm.is_some();
        let byte_len = if status == WcStatus::Success {
            total as u32
        } else {
            0
        };
        env.complete(Completion {
            imm: p.hdr.imm.unwrap_or(0),
            src_qp: deth.src_qpn,
            wc_flags: WC_FLAG_GRH | if with_imm { WC_FLAG_WITH_IMM } else { 0 },
            solicited: p.hdr.bth.solicited,
            network_hdr,
            ..Completion::recv(self.cfg.qpn, wr.wr_id, status, WcOpcode::Recv, byte_len)
        });
        if status == WcStatus::LocProtErr {
            self.enter_error(env);
        }
    }
}

impl Engine {
    pub fn new() -> Engine {
        Engine::default()
    }

    pub fn ud_mtu(&self) -> Mtu {
        self.ud_mtu
    }

    /// An engine whose UD QPs send at most `ud_mtu` bytes per message (the port's limit).
    pub fn with_ud_mtu(ud_mtu: Mtu) -> Engine {
        Engine {
            ud_mtu,
            ..Engine::default()
        }
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Creates the transport context of a new QP (state RESET).
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<(), EngineError> {
        if self.qps.contains_key(&cfg.qpn) {
            return Err(EngineError::QpExists(cfg.qpn));
        }
        const DEFAULT_RETRY: u8 = 7;
        // RC/UC get their path MTU from modify_qp; UD has none and uses the port's.
        let mtu = if cfg.qp_type == QpType::Ud {
            self.ud_mtu
        } else {
            Mtu::Mtu1024
        };
        self.qps.insert(
            cfg.qpn,
            Qp {
                cfg,
                state: QpState::Reset,
                mtu,
                dest_qpn: Qpn::default(),
                timeout: 0,
                retry_cnt: DEFAULT_RETRY,
                rnr_retry: DEFAULT_RETRY,
                min_rnr_timer: 0,
                max_rd_atomic: 1,
                max_dest_rd_atomic: 1,
                qkey: 0,
                access: 0,
                av: None,
                req: Requester::new(),
                resp: Responder::default(),
            },
        );
        Ok(())
    }

    /// Destroys a QP's transport context (no completions: the device destroys its queues).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), EngineError> {
        self.qps
            .remove(&qpn)
            .map(|_| ())
            .ok_or(EngineError::NoSuchQp(qpn))
    }

    /// The current state of a QP (it changes by itself to ERR on fatal errors).
    pub fn qp_state(&self, qpn: Qpn) -> Option<QpState> {
        self.qps.get(&qpn).map(|qp| qp.state)
    }

    /// Applies a modify_qp already validated against the IB state table by the device.
    /// Entering RTR sets the responder's expected PSN, RTS the requester's next PSN; ERR
    /// flushes; RESET forgets all transport state.
    pub fn modify_qp(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        m: &QpModify,
    ) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        if let Some(v) = m.path_mtu {
            qp.mtu = v;
        }
        // The device refused numbers wider than 24 bits; from_wire keeps the engine's
        // numbers in range whatever a caller passes.
        if let Some(v) = m.dest_qpn {
            qp.dest_qpn = Qpn::from_wire(v.get());
        }
        if let Some(v) = m.timeout {
            qp.timeout = v;
        }
        if let Some(v) = m.retry_cnt {
            qp.retry_cnt = v;
            qp.req.retry_left = v;
        }
        if let Some(v) = m.rnr_retry {
            qp.rnr_retry = v;
            qp.req.rnr_left = v;
        }
        if let Some(v) = m.min_rnr_timer {
            qp.min_rnr_timer = v;
        }
        if let Some(v) = m.max_rd_atomic {
            qp.max_rd_atomic = v;
        }
        if let Some(v) = m.max_dest_rd_atomic {
            qp.max_dest_rd_atomic = v;
        }
        if let Some(v) = m.qkey {
            qp.qkey = v;
        }
        if let Some(v) = m.access_flags {
            qp.access = v;
        }
        if let Some(v) = m.av {
            qp.av = Some(v);
        }
        if let Some(v) = m.rq_psn {
            qp.resp.epsn = Psn::from_wire(v.get());
        }
        if let Some(v) = m.sq_psn {
            qp.req.next_psn = Psn::from_wire(v.get());
            qp.req.acked_psn = v.prev();
        }
        let Some(state) = m.state else { return Ok(()) };
        let connected = qp.cfg.qp_type != QpType::Ud;
        match state {
            QpState::Rtr if connected && qp.av.is_none() => {
                return Err(EngineError::MissingAttribute(qpn, "av"))
            }
            QpState::Reset => {
                let cfg = qp.cfg;
                self.qps.remove(&qpn);
                self.create_qp(cfg)?;
                return Ok(());
            }
            QpState::Err => {
                qp.enter_error(env);
                return Ok(());
            }
            // Only the engine enters SQE (the IB table has no modify into it).
            QpState::Sqe => {
                qp.enter_sq_error(env);
                return Ok(());
            }
            _ => {}
        }
        let entering_sqd = state == QpState::Sqd && qp.state != QpState::Sqd;
        qp.state = state;
        match state {
            QpState::Rts => {
                qp.req.drain_pending = false;
                qp.req.retry_left = qp.retry_cnt;
                qp.req.rnr_left = qp.rnr_retry;
                qp.transmit(env, &mut self.stats);
            }
            QpState::Sqd if entering_sqd => {
                // The drain ends when the WRs already started have completed (at once if
                // none has).
                qp.req.drain_pending = true;
                qp.check_drained(env);
            }
            _ => {}
        }
        Ok(())
    }

    /// Send WRs the QP has taken that have not completed yet.
    pub fn sq_outstanding(&self, qpn: Qpn) -> usize {
        self.qps.get(&qpn).map_or(0, |qp| qp.req.sq.len())
    }

    /// True while a QP in SQD still has started send WRs to complete (QUERY_QP's
    /// `sq_draining`).
    pub fn sq_draining(&self, qpn: Qpn) -> bool {
        self.qps
            .get(&qpn)
            .is_some_and(|qp| qp.state == QpState::Sqd && qp.sq_in_flight())
    }

    /// Posts a decoded send WR. In the error state it completes at once with WR_FLUSH_ERR;
    /// a malformed WR (opcode not valid for the QP type, bad length) completes with
    /// LOC_QP_OP_ERR / LOC_LEN_ERR in order and moves the QP to the error state.
    pub fn post_send(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        wr: SendWr,
    ) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        let wqe = qp.make_wqe(wr);
        qp.enqueue(env, &mut self.stats, wqe);
        Ok(())
    }

    /// Posts a send WR the device could not decode. It completes with `failed.status` after
    /// every WR posted before it (IB completion ordering), then the QP leaves RTS (RC: ERR,
    /// UC/UD: SQE) and flushes what follows.
    pub fn post_failed(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        failed: FailedWr,
    ) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        let kind = wqe_kind(failed.opcode);
        let wr = SendWr {
            wr_id: failed.wr_id,
            opcode: failed.opcode,
            signaled: true,
            solicited: false,
            fence: false,
            data: SendData::Inline(Vec::new()),
            imm: 0,
            remote_addr: 0,
            rkey: Key::default(),
            compare_add: 0,
            swap: 0,
            flush: FlushSpec::default(),
            bind: None,
            fast_reg: None,
            ud: None,
        };
        let wqe = Wqe::failed(wr, kind, failed.status, failed.vendor_err);
        qp.enqueue(env, &mut self.stats, wqe);
        Ok(())
    }

    /// Tells the engine receive WRs were posted to a QP: in the error state they are flushed.
    pub fn recv_posted(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        if qp.state == QpState::Err {
            qp.flush_rq(env);
        }
        Ok(())
    }

    /// Handles one received RoCEv2 IP packet (from the port or a local loopback).
    pub fn receive(&mut self, env: &mut dyn DeviceEnv, packet: &[u8]) -> Result<(), RxDrop> {
        self.stats.rx_packets += 1;
        let p = match wire::parse_packet(packet) {
            Ok(p) => p,
            Err(e) => {
                match e {
                    ParseError::BadIcrc => self.stats.rx_icrc_errors += 1,
                    _ => self.stats.rx_malformed += 1,
                }
                return Err(RxDrop::Parse(e));
            }
        };
        const PKEY_MEMBER_BITS: u16 = 0x7fff;
        if p.hdr.bth.pkey & PKEY_MEMBER_BITS != DEFAULT_PKEY & PKEY_MEMBER_BITS {
            self.stats.rx_bad_pkey += 1;
            return Err(RxDrop::BadPkey(p.hdr.bth.pkey));
        }
        let qpn = p.hdr.bth.dest_qpn;
        if qpn == Qpn::MULTICAST {
            return self.receive_multicast(env, &p);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(qpn));
        };
        if p.hdr.bth.opcode & op::CLASS_MASK != qp.class() {
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(qpn));
        }
        // A connected QP talks to one peer: packets from any other address are not its own
        // (e.g. a stale connection that used the same QPN).
        if let Some(av) = qp.av.filter(|_| qp.cfg.qp_type != QpType::Ud) {
            if p.sgid != av.dgid {
                self.stats.rx_wrong_source += 1;
                return Err(RxDrop::WrongSource(qpn));
            }
        }
        let base = p.hdr.bth.opcode & op::OP_MASK;
        let is_response = qp.cfg.qp_type == QpType::Rc
            && (op::RC_READ_RESPONSE_FIRST..=op::RC_ATOMIC_ACKNOWLEDGE).contains(&base);
        if is_response {
            qp.requester_receive(env, &mut self.stats, &p);
        } else if !qp.can_receive() {
            // The caller learns of the drop too, not only the counter.
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(qpn));
        } else {
            qp.responder_receive(env, &mut self.stats, &p);
        }
        Ok(())
    }

    /// A packet to the multicast QPN: a UD SEND for every QP attached to its destination
    /// GID, each checking its own Q_Key and state (IBA 10.5.2.5). Reliable and connected
    /// opcodes never go to a group.
    fn receive_multicast(&mut self, env: &mut dyn DeviceEnv, p: &Parsed<'_>) -> Result<(), RxDrop> {
        let members = env.multicast_members(&p.dgid);
        if members.is_empty() || p.hdr.bth.opcode & op::CLASS_MASK != op::CLASS_UD {
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(Qpn::MULTICAST));
        }
        for qpn in members {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if qp.cfg.qp_type == QpType::Ud {
                env.multicast_copy();
                qp.responder_receive(env, &mut self.stats, p);
            }
        }
        Ok(())
    }

    /// Sends coalesced ACKs and runs timers. Call after each batch of [`Engine::receive`]s and
    /// whenever [`Engine::next_deadline`] passes.
    pub fn poll(&mut self, env: &mut dyn DeviceEnv) {
        for qp in self.qps.values_mut() {
            if qp.resp.ack_pending {
                qp.resp.ack_pending = false;
                if qp.can_receive() {
                    let psn = qp.resp.epsn.prev();
                    qp.send_ack(env, &mut self.stats, psn, Syndrome::Ack);
                }
            }
            if qp.state == QpState::Rts || qp.state == QpState::Sqd {
                qp.on_timers(env, &mut self.stats);
            }
        }
    }

    /// The earliest time [`Engine::poll`] has timer work to do (None: no timer armed).
    pub fn next_deadline(&self) -> Option<u64> {
        self.qps
            .values()
            .flat_map(|qp| [qp.req.timer_deadline, qp.req.rnr_until])
            .flatten()
            .min()
    }

    /// Moves a QP to the error state (flushing its WRs), e.g. on a device-detected fatal error.
    pub fn set_error(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) -> Result<(), EngineError> {
        let qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        qp.enter_error(env);
        Ok(())
    }
}
