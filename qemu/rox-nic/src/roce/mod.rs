//! RoCEv2 transport of rox-nic: wire format and the RC/UC/UD transport engine.
//!
//! The engine ([`Engine`]) is pure logic: it never touches guest memory, queues, sockets or
//! clocks itself. The device hands it decoded work requests and received packets and gives it a
//! [`DeviceEnv`] through which it reads/writes memory (the env checks keys, PD, access and
//! bounds on every access), pops receive WRs, delivers completions, transmits packets and reads
//! the clock. That keeps every protocol path testable on the host without a device.
//!
//! How the device drives it (one engine per device, called from the data-path thread):
//! - control path: [`Engine::create_qp`], [`Engine::modify_qp`], [`Engine::destroy_qp`];
//! - SQ doorbell: decode each WQE into a [`SendWr`] and call [`Engine::post_send`];
//! - RQ doorbell: [`Engine::recv_posted`] (flushes new receive WRs of a QP in the error state);
//! - port: for each received RoCEv2 packet call [`Engine::receive`], then after the batch call
//!   [`Engine::poll`] — it sends the coalesced ACKs and runs the retransmit/RNR timers; call it
//!   again no later than [`Engine::next_deadline`].
//!
//! Packets leave through [`DeviceEnv::transmit`] as complete RoCEv2 IP packets (IPv4 or IPv6
//! header, UDP to port 4791, BTH and extension headers, payload, ICRC); the device's port
//! (`crate::port`) puts them in Ethernet frames.

pub mod cc;
pub mod engine;
pub mod id_map;
pub mod verbs;
pub mod wire;

pub use engine::{Engine, EngineStats, RxDrop};
pub use rox_uapi::admin::{AddrVector, QpAttr};
pub use rox_uapi::ids::{Key, Msn, Psn, Qpn};
pub use verbs::*;

/// A 128-bit GID (RoCEv2: an IPv6 address, or an IPv4-mapped one `::ffff:a.b.c.d`).
pub type Gid = [u8; 16];

/// One scatter/gather element of a work request, in the QP's PD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: Key,
}

/// Where the payload of a send work request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendData {
    /// Gathered from local memory at send time (and again on retransmission).
    Sges(Vec<Sge>),
    /// Copied out of the WQE at post time (IBV_SEND_INLINE).
    Inline(Vec<u8>),
}

impl SendData {
    /// Total payload length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            SendData::Sges(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
            SendData::Inline(bytes) => bytes.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Address vector: where a packet goes and the IP header fields it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// Destination GID (selects IPv4 when v4-mapped, IPv6 otherwise).
    pub dgid: Gid,
    /// Source GID, resolved by the device from the sgid_index.
    pub sgid: Gid,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    /// Destination MAC of the Ethernet frame (ib_core's resolved `rdma_ah_attr.roce.dmac`);
    /// all zeroes when unresolved (then only a GID of this device is reachable).
    pub dmac: [u8; 6],
}

/// UD destination of a send work request (from the `ibv_ah` and the WR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    pub av: AddressVector,
    pub remote_qpn: Qpn,
    /// Q_Key for the DETH; a value with the most significant bit set means "use the QP's Q_Key".
    pub remote_qkey: u32,
}

/// A decoded send-queue work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
    /// Wait for all earlier RDMA READs and atomics to complete before starting.
    pub fence: bool,
    /// Payload source for SEND/WRITE; the local destination for READ (SGEs only);
    /// the 8-byte local result buffer for atomics (SGEs only).
    pub data: SendData,
    /// Immediate data, host order (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM).
    pub imm: u32,
    /// RDMA/atomic target.
    pub remote_addr: u64,
    pub rkey: Key,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// What a FLUSH asks for (other opcodes ignore it).
    pub flush: FlushSpec,
    /// BIND_MW: the binding (other opcodes: None; boxed, as `fast_reg`: rare, and the WR is
    /// moved into and out of the engine's queues whole). LOCAL_INV and SEND_WITH_INV name the
    /// window or fast-registration region to invalidate in `rkey`.
    pub bind: Option<Box<MwBind>>,
    /// REG_MR: the registration (other opcodes: None).
    pub fast_reg: Option<Box<FastReg>>,
    /// UD only.
    pub ud: Option<UdDest>,
    /// Where the device fetched it: the low 16 bits of its SQ index, for its CQE.
    pub wqe_index: u16,
    /// XRC initiator QPs: the remote XRC SRQ the message is for (its XRCETH).
    pub xrc_srqn: u32,
}

impl SendWr {
    /// What its completion names it by: (wr_id, wqe_index).
    pub fn name(&self) -> (u64, u16) {
        (self.wr_id, self.wqe_index)
    }

    /// A signaled WR `wr_id` of `opcode` with no payload, no remote target and no segments:
    /// set the fields its opcode uses on the result.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
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
            wqe_index: 0,
            xrc_srqn: 0,
        }
    }
}

/// A memory window bind (`IB_WR_BIND_MW`): the WQE's segment as posted, whose layout and rule
/// uapi defines once.
pub use rox_uapi::queue::BindSeg as MwBind;

/// A fast registration (`IB_WR_REG_MR`): the WQE's segment as posted, whose layout and rule
/// uapi defines once.
pub use rox_uapi::queue::FastRegSeg as FastReg;

/// The target of a FLUSH work request (IBA memory placement extensions): `remote_addr` /
/// `rkey` of the [`SendWr`] and these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushSpec {
    /// Bytes from `remote_addr` (level RANGE; level MR flushes the whole region).
    pub length: u32,
    /// `rox_uapi::verbs::FLUSH_TYPE_*` bits.
    pub placement_type: u8,
    /// `rox_uapi::verbs::FLUSH_LEVEL_*`.
    pub level: u8,
}

impl FlushSpec {
    /// At least one placement type, only known types, a known level.
    pub fn is_valid(&self) -> bool {
        self.placement_type != 0
            && self.placement_type & !verbs::FLUSH_TYPES_ALL == 0
            && self.level <= verbs::FLUSH_LEVEL_MR
    }

    /// The `ACCESS_FLUSH_*` bits a QP and a region must grant for this FLUSH: one per
    /// placement type asked for.
    pub fn required_access(&self) -> u32 {
        let mut need = 0;
        if self.placement_type & verbs::FLUSH_TYPE_GLOBAL != 0 {
            need |= verbs::ACCESS_FLUSH_GLOBAL;
        }
        if self.placement_type & verbs::FLUSH_TYPE_PERSISTENT != 0 {
            need |= verbs::ACCESS_FLUSH_PERSISTENT;
        }
        need
    }
}

/// A decoded receive work request (from an RQ or an SRQ).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
    /// Where the device fetched it: the low 16 bits of its RQ or SRQ index, for its CQE.
    pub wqe_index: u16,
}

impl RecvWr {
    /// What its completion names it by: (wr_id, wqe_index).
    pub fn name(&self) -> (u64, u16) {
        (self.wr_id, self.wqe_index)
    }
}

/// A completion for the device to write into the QP's send CQ (`is_recv == false`) or
/// receive CQ (`is_recv == true`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// Immediate data, host order; valid when `wc_flags` has [`WC_FLAG_WITH_IMM`].
    pub imm: u32,
    /// UD: the sender's QPN.
    pub src_qp: Qpn,
    /// The local QP this completion belongs to.
    pub qp_num: Qpn,
    /// [`WC_FLAG_GRH`], [`WC_FLAG_WITH_IMM`].
    pub wc_flags: u8,
    pub is_recv: bool,
    /// The incoming message had the solicited-event bit (for armed-solicited CQs).
    pub solicited: bool,
    /// Device-specific detail of an error status (`rox_uapi::queue::VENDOR_ERR_*`), 0 if none.
    pub vendor_err: u8,
    /// The `wqe_index` of the work request it completes (the CQE's).
    pub wqe_index: u16,
    /// UD receives: the network header of the packet (`rox_uapi::queue::CQE_NETWORK_HDR_*`),
    /// `CQE_NETWORK_HDR_NONE` otherwise.
    pub network_hdr: u8,
    /// Receives of an XRC target QP: the XRC SRQ the message went into, whose CQ takes the
    /// completion (the QP has no receive CQ of its own).
    pub xrc_srq: Option<u32>,
}

impl Completion {
    /// A send-queue completion of QP `qp_num` (no immediate data, flags or source QP) for the
    /// work request `wr_id` fetched at `wqe_index`.
    pub fn send(
        qp_num: Qpn,
        (wr_id, wqe_index): (u64, u16),
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm: 0,
            src_qp: Qpn::default(),
            qp_num,
            wc_flags: 0,
            is_recv: false,
            solicited: false,
            vendor_err: 0,
            wqe_index,
            network_hdr: rox_uapi::queue::CQE_NETWORK_HDR_NONE,
            xrc_srq: None,
        }
    }

    /// A receive-queue completion of QP `qp_num`; set `imm`, `wc_flags`, `src_qp` and
    /// `solicited` on the result where the message carried them.
    pub fn recv(
        qp_num: Qpn,
        wr: (u64, u16),
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Completion {
        Completion {
            is_recv: true,
            ..Completion::send(qp_num, wr, status, opcode, byte_len)
        }
    }
}

/// A send WR the device could not even decode (unknown opcode, too many SGEs, oversized
/// inline data, ...). [`Engine::post_failed`] queues it behind the WRs already posted so its
/// error completion keeps IB ordering: it completes after every earlier WR, then the QP leaves
/// RTS and flushes the WRs behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailedWr {
    pub wr_id: u64,
    /// The opcode the completion reports (the device picks one for an unknown opcode).
    pub opcode: WrOpcode,
    pub status: WcStatus,
    /// `rox_uapi::queue::VENDOR_ERR_*`: why the device refused the WQE.
    pub vendor_err: u8,
    /// As [`SendWr::wqe_index`].
    pub wqe_index: u16,
}

/// An affiliated asynchronous error of a QP's responder (IBA 11.6.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpAsyncError {
    /// Invalid Request Local Work Queue Error (IB_EVENT_QP_REQ_ERR): a malformed request.
    InvalidRequest,
    /// Local Access Violation Work Queue Error (IB_EVENT_QP_ACCESS_ERR): an R_Key, bounds or
    /// access-rights violation of a remote request.
    AccessViolation,
}

/// Why a memory access was refused by the device. The engine maps it to the IB status of the
/// side that attempted it (local: LOC_PROT_ERR; remote: NAK remote access error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    #[error("no memory region with this key")]
    InvalidKey,
    #[error("memory region belongs to another protection domain")]
    PdMismatch,
    #[error("memory region does not grant the required access")]
    AccessDenied,
    #[error("access outside the memory region")]
    OutOfBounds,
    #[error("atomic target not 8-byte aligned")]
    Misaligned,
    /// An on-demand region's page is not present (or not writable for a write): the device
    /// asked the driver to map it; the access must wait (requester: retry later; responder:
    /// RNR NAK) and nothing was read or written.
    /// `count`: pages the access needs from `page` on (≥ 1), so that one fault can make the
    /// whole access present.
    #[error("page {page} of on-demand region {key:#x} not present")]
    PageFault {
        key: Key,
        page: u32,
        write: bool,
        count: u32,
    },
    /// A page of an on-demand region that the driver could not make present
    /// (`ODP_OP_FAIL`): the device fails this access (as [`AccessError::AccessDenied`]) and
    /// forgets the failure, so a later access faults the page again.
    #[error("page {page} of on-demand region {key:#x} failed")]
    PageFailed { key: Key, page: u32 },
}

/// Where a remote peer's access lands: `va` through `key` (an MR's rkey, or a memory window
/// bound in `pd` and, for type 2, to the responder QP `qpn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteTarget {
    pub pd: u32,
    pub qpn: Qpn,
    pub key: Key,
    pub va: u64,
}

impl RemoteTarget {
    /// The same target `offset` bytes further on.
    pub fn offset(self, offset: u64) -> RemoteTarget {
        RemoteTarget {
            va: self.va.wrapping_add(offset),
            ..self
        }
    }
}

/// An 8-byte atomic operation on remote memory (done under the device's memory lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// If `*va == compare` then `*va = swap`.
    CompareSwap { compare: u64, swap: u64 },
    /// `*va += add` (wrapping).
    FetchAdd { add: u64 },
    /// `*va = value` (ATOMIC WRITE): needs IBV_ACCESS_REMOTE_WRITE instead of REMOTE_ATOMIC.
    Write { value: u64 },
}

/// What the device provides to the engine. Every method must be cheap and must not call back
/// into the engine (e.g. `transmit` of a packet to a local GID queues it for a later
/// [`Engine::receive`]).
pub trait DeviceEnv {
    /// Monotonic clock in nanoseconds.
    fn now_ns(&self) -> u64;
    /// Read local memory `[addr, addr+buf.len())` through `lkey` in protection domain `pd`.
    fn read_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError>;
    /// Write local memory through `lkey`; the region must grant IBV_ACCESS_LOCAL_WRITE.
    fn write_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        data: &[u8],
    ) -> Result<(), AccessError>;
    /// Read memory for a remote peer at `at` (an MR, or a memory window bound in `at.pd`
    /// and, for type 2, to the responder QP `at.qpn`); requires IBV_ACCESS_REMOTE_READ.
    fn read_remote(&mut self, at: RemoteTarget, buf: &mut [u8]) -> Result<(), AccessError>;
    /// Checks that `len` bytes at `at` could be read for a remote peer (as `read_remote`)
    /// without reading them: the key, PD, access and bounds, and for an on-demand region that
    /// every page is present (the first missing one posts its page fault and answers
    /// [`AccessError::PageFault`]). `len` > 0. The default probes the first and the last byte
    /// (enough for a region whose pages are all there).
    fn check_remote_read(&mut self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        at.va
            .checked_add(len.saturating_sub(1))
            .ok_or(AccessError::OutOfBounds)?;
        let mut probe = [0u8; 1];
        self.read_remote(at, &mut probe)?;
        self.read_remote(at.offset(len.saturating_sub(1)), &mut probe)
    }
    /// Checks that `len` bytes at `at` may be written for a remote peer (as `write_remote`)
    /// without writing: the key, PD, access and bounds (of the region, and of a memory
    /// window's binding). The responder checks a WRITE's whole RETH range with it on the
    /// first packet, so a WRITE that overruns its target writes no byte.
    /// Pages of an on-demand region need not be present: each packet faults its own pages.
    /// `len` > 0.
    fn check_remote_write(&mut self, at: RemoteTarget, len: u64) -> Result<(), AccessError>;
    /// Write memory for a remote peer at `at` (as for `read_remote`); requires
    /// IBV_ACCESS_REMOTE_WRITE.
    fn write_remote(&mut self, at: RemoteTarget, data: &[u8]) -> Result<(), AccessError>;
    /// 8-byte atomic for a remote peer at `at`; requires IBV_ACCESS_REMOTE_ATOMIC
    /// (IBV_ACCESS_REMOTE_WRITE for [`AtomicOp::Write`]) and 8-byte alignment. Returns the
    /// original value.
    fn atomic_remote(&mut self, at: RemoteTarget, op: AtomicOp) -> Result<u64, AccessError>;
    /// FLUSH for a remote peer at `at`: the region must grant the FLUSH access bit of every
    /// type in `flush.placement_type` (`FLUSH_TYPE_GLOBAL` → IBV_ACCESS_FLUSH_GLOBAL,
    /// `FLUSH_TYPE_PERSISTENT` → IBV_ACCESS_FLUSH_PERSISTENT) and, unless the level is
    /// `FLUSH_LEVEL_MR`, contain `[at.va, at.va + flush.length)`; then every earlier write
    /// through the device is made globally visible.
    fn flush_remote(&mut self, at: RemoteTarget, flush: FlushSpec) -> Result<(), AccessError>;
    /// Bind a memory window for QP `qpn` of `pd` (BIND_MW work request, executed in SQ order).
    fn bind_mw(&mut self, pd: u32, qpn: Qpn, bind: &MwBind) -> Result<(), AccessError>;
    /// Register pages to a fast-registration region for QP `qpn` of `pd` (REG_MR work
    /// request, executed in SQ order); a failure changes nothing.
    fn fast_register(&mut self, pd: u32, qpn: Qpn, reg: &FastReg) -> Result<(), AccessError>;
    /// Invalidate `rkey` of `pd` — a bound type 2 memory window or a valid fast-registration
    /// region — locally (LOCAL_INV) or for a peer (SEND with invalidate, `remote`: a window
    /// must be bound to QP `qpn`); a failure changes nothing.
    fn invalidate(&mut self, pd: u32, qpn: Qpn, rkey: Key, remote: bool)
        -> Result<(), AccessError>;
    /// Whether [`DeviceEnv::invalidate`] with these arguments would succeed, changing nothing:
    /// the responder asks before it places the last packet of a SEND with invalidate, so a
    /// message naming a key it may not invalidate writes no byte of that packet.
    fn check_invalidate(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError>;
    /// Take the next receive WR of QP `qpn` (from its RQ, or its SRQ if it has one).
    fn pop_recv(&mut self, qpn: Qpn) -> Option<RecvWr>;
    /// An SGE list the engine is done with (a retired send WR's, a completed receive WR's):
    /// the device may reuse its allocation for the next WR it decodes.
    fn recycle_sges(&mut self, sges: Vec<Sge>) {
        drop(sges);
    }
    /// Deliver a completion to the QP's send or receive CQ.
    fn complete(&mut self, completion: Completion);
    /// Send one RoCEv2 IP packet along `av` (to the device owning `av.dgid`, in an Ethernet
    /// frame to `av.dmac`).
    fn transmit(&mut self, av: &AddressVector, packet: wire::Packet);
    /// Whether QP `qpn`'s requester may send its next request packet now (the port's
    /// transmit scheduler); `adds_to_flight`: a first transmission of an RC packet (not a
    /// retransmission, not UC/UD). If not, the device gives the QP a turn later through
    /// [`crate::roce::Engine::resume_send`].
    fn may_send_request(&mut self, _qpn: Qpn, _adds_to_flight: bool) -> bool {
        true
    }
    /// Whether QP `qpn`, whose request packet [`Self::may_send_request`] just let go, may
    /// send no further one now (its turn or the port's budget is spent): that packet then
    /// asks for an ACK.
    fn request_budget_spent(&self, _qpn: Qpn) -> bool {
        false
    }
    /// The device's WQE trace, which the engine's hooks write (packets out, responses in,
    /// retransmissions); off unless the device has one running.
    fn wqe_trace(&self) -> &crate::trace::WqeTrace {
        &crate::trace::OFF
    }
    /// QP `qpn` is in SQD and its last outstanding send WR has completed (the drain is over;
    /// IB_EVENT_SQ_DRAINED). Called once per entry into SQD, and only if the modify into SQD
    /// asked for it (`en_sqd_async_notify`). Must not call back into the engine.
    fn sq_drained(&mut self, _qpn: Qpn) {}
    /// QP `qpn` entered the error state (modify, device-detected fatal error or a transport
    /// error), after its flush completions: e.g. IB_EVENT_QP_LAST_WQE_REACHED for a QP with
    /// an SRQ. Must not call back into the engine.
    fn qp_entered_error(&mut self, _qpn: Qpn) {}
    /// The responder of RC QP `qpn` met an error in a request that no receive WR is part of
    /// and the QP went to the error state: an affiliated asynchronous error for its owner
    /// (IBA 11.6.3.2). Called after [`DeviceEnv::qp_entered_error`]. Must not call back into
    /// the engine.
    fn qp_async_error(&mut self, _qpn: Qpn, _error: QpAsyncError) {}
    /// The QPs attached to multicast group `group` (none: the device has no such group).
    fn multicast_members(&self, _group: &Gid) -> Vec<Qpn> {
        Vec::new()
    }
    /// A copy of a multicast packet was handed to one attached QP.
    fn multicast_copy(&mut self) {}
    /// How this device computes the ICRC of the FLUSH requests it sends (its configuration).
    fn flush_icrc(&self) -> wire::FlushIcrc {
        wire::FlushIcrc::Iba
    }
    /// The XRC SRQ numbered `srqn`: its XRC domain and PD (None: no such SRQ, or not an XRC
    /// one). An XRC target QP delivers only into an SRQ of its own domain.
    fn xrc_srq(&self, _srqn: u32) -> Option<XrcSrq> {
        None
    }
    /// Take the next receive WR of XRC SRQ `srqn`.
    fn pop_xrc_srq(&mut self, _srqn: u32) -> Option<RecvWr> {
        None
    }
}

/// What the engine needs to know of an XRC SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XrcSrq {
    pub xrcd: u32,
    /// The PD whose regions the SRQ's receive WRs name, and in which an XRC target checks
    /// the R_Keys of requests naming this SRQ (IBA: the XRC SRQ's PD, the QP has none).
    pub pd: u32,
}

/// Static properties of a QP, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    pub qpn: Qpn,
    pub qp_type: QpType,
    pub pd: u32,
    /// Receive WRs come from an SRQ: they are not flushed when the QP enters the error state.
    pub uses_srq: bool,
}

/// A `modify_qp` in the engine's types: each `Some` field is applied. The device passes the
/// verbs form (mask and [`QpAttr`]) to [`Engine::modify_qp_attr`] instead, after validating the
/// IB state machine (required/optional attributes per transition); this form becomes the same
/// mask and attributes ([`QpModify::to_attr`]), so both apply in one place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpModify {
    pub state: Option<QpState>,
    pub path_mtu: Option<Mtu>,
    pub dest_qpn: Option<Qpn>,
    /// Expected PSN of the responder (rq_psn).
    pub rq_psn: Option<Psn>,
    /// First PSN the requester sends (sq_psn).
    pub sq_psn: Option<Psn>,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout, 0 = infinite.
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    /// 7 = retry forever.
    pub rnr_retry: Option<u8>,
    /// RNR NAK timer code (IBA table 45) this QP asks senders to wait.
    pub min_rnr_timer: Option<u8>,
    /// Outstanding RDMA READ/atomic requests this QP may have as requester.
    pub max_rd_atomic: Option<u8>,
    /// Outstanding RDMA READ/atomic requests this QP accepts as responder.
    pub max_dest_rd_atomic: Option<u8>,
    pub qkey: Option<u32>,
    /// IBV_ACCESS_REMOTE_{WRITE,READ,ATOMIC} allowed on this QP as responder.
    pub access_flags: Option<u32>,
    /// Primary path (RC/UC).
    pub av: Option<AddressVector>,
}

impl QpModify {
    /// The verbs form of this modify: the `QP_*` mask of the fields set, their values, and the
    /// source GID of the address vector (which the verbs form names by table index).
    pub fn to_attr(&self) -> (u32, QpAttr, Option<Gid>) {
        use rox_uapi::verbs::*;
        let mut mask = 0;
        let mut a = QpAttr::default();
        let mut set = |bit: u32, present: bool| {
            if present {
                mask |= bit;
            }
            present
        };
        if set(QP_STATE, self.state.is_some()) {
            a.qp_state = self.state.map_or(0, |s| s as u8);
        }
        if set(QP_PATH_MTU, self.path_mtu.is_some()) {
            a.path_mtu = self.path_mtu.map_or(0, |m| m as u8);
        }
        if set(QP_DEST_QPN, self.dest_qpn.is_some()) {
            a.dest_qp_num = self.dest_qpn.unwrap_or_default();
        }
        if set(QP_RQ_PSN, self.rq_psn.is_some()) {
            a.rq_psn = self.rq_psn.unwrap_or_default();
        }
        if set(QP_SQ_PSN, self.sq_psn.is_some()) {
            a.sq_psn = self.sq_psn.unwrap_or_default();
        }
        let bytes = [
            (QP_TIMEOUT, self.timeout, &mut a.timeout),
            (QP_RETRY_CNT, self.retry_cnt, &mut a.retry_cnt),
            (QP_RNR_RETRY, self.rnr_retry, &mut a.rnr_retry),
            (QP_MIN_RNR_TIMER, self.min_rnr_timer, &mut a.min_rnr_timer),
            (
                QP_MAX_QP_RD_ATOMIC,
                self.max_rd_atomic,
                &mut a.max_rd_atomic,
            ),
            (
                QP_MAX_DEST_RD_ATOMIC,
                self.max_dest_rd_atomic,
                &mut a.max_dest_rd_atomic,
            ),
        ];
        for (bit, value, field) in bytes {
            if set(bit, value.is_some()) {
                *field = value.unwrap_or_default();
            }
        }
        if set(QP_QKEY, self.qkey.is_some()) {
            a.qkey = self.qkey.unwrap_or_default();
        }
        if set(QP_ACCESS_FLAGS, self.access_flags.is_some()) {
            a.qp_access_flags = self.access_flags.unwrap_or_default();
        }
        if let Some(av) = self.av {
            set(QP_AV, true);
            a.ah = AddrVector {
                dgid: av.dgid,
                flow_label: av.flow_label,
                hop_limit: av.hop_limit,
                traffic_class: av.traffic_class,
                dmac: av.dmac,
                ..AddrVector::default()
            };
        }
        (mask, a, self.av.map(|av| av.sgid))
    }
}

/// Errors of the engine's control entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("no QP {0:#x}")]
    NoSuchQp(Qpn),
    #[error("QP {0:#x} already exists")]
    QpExists(Qpn),
    #[error("QP {0:#x} lacks attribute {1} required to enter its state")]
    MissingAttribute(Qpn, &'static str),
    #[error("QP {0:#x}: {1} is not a QP state")]
    BadState(Qpn, u8),
}
