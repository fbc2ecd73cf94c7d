//! The transport context of one QP (as rxe_qp.c): its attributes, its requester and
//! responder state, state changes (ERR, SQE, SQD drain) and the flushes they cause, and the
//! packets every role sends on the QP's connection (BTH, ACK/NAK).
//!
//! It is the only copy of a QP's attributes and state: the admin path modifies and queries it
//! through the engine, the data path asks it for the state, the roles read it.

use super::req::Requester;
use super::resp::{InMessage, Responder};
use super::wqe::wc_opcode;
use super::EngineStats;
use crate::roce::cc::{QpCc, ECN_MASK, ECN_NOT_ECT};
use crate::roce::wire::{
    self, opcode as op, Aeth, Bth, Headers, IpInfo, OpcodeClass, Syndrome, DEFAULT_PKEY,
};
use crate::roce::*;
use rox_uapi::admin::PORT_NUM;
use rox_uapi::verbs::{
    QPS_RESET, QP_ACCESS_FLAGS, QP_AV, QP_DEST_QPN, QP_EN_SQD_ASYNC_NOTIFY, QP_MAX_DEST_RD_ATOMIC,
    QP_MAX_QP_RD_ATOMIC, QP_MIN_RNR_TIMER, QP_PATH_MTU, QP_PKEY_INDEX, QP_PORT, QP_QKEY,
    QP_RETRY_CNT, QP_RNR_RETRY, QP_RQ_PSN, QP_SQ_PSN, QP_TIMEOUT,
};

/// Local ACK timeout unit: 4.096 µs × 2^timeout.
pub(super) const ACK_TIMEOUT_UNIT_NS: u64 = 4096;
/// The timeout attribute is a 5-bit field.
pub(super) const MAX_ACK_TIMEOUT_EXPONENT: u8 = 31;
/// Hop limit / TTL of packets whose QP has no address vector hop limit set.
pub(super) const DEFAULT_HOP_LIMIT: u8 = 64;
/// retry_cnt and rnr_retry of a new QP.
const DEFAULT_RETRY: u8 = 7;

/// Transport context of one QP.
#[derive(Debug)]
pub(super) struct Qp {
    pub(super) cfg: QpConfig,
    pub(super) state: QpState,
    /// The attributes as software set them, what QUERY_QP returns (rxe's `qp->attr`); the
    /// fields below are the transport's working values derived from them, with IBA's defaults
    /// until set. `attr.qp_state` is unused: `state` is the state.
    pub(super) attr: QpAttr,
    pub(super) mtu: Mtu,
    pub(super) dest_qpn: Qpn,
    pub(super) timeout: u8,
    pub(super) retry_cnt: u8,
    pub(super) rnr_retry: u8,
    pub(super) min_rnr_timer: u8,
    pub(super) max_rd_atomic: u8,
    pub(super) max_dest_rd_atomic: u8,
    pub(super) qkey: u32,
    pub(super) access: u32,
    pub(super) av: Option<AddressVector>,
    pub(super) req: Requester,
    pub(super) resp: Responder,
    /// An XRC QP (RC's transport with XRC opcodes): its role.
    pub(super) xrc: Option<super::xrc::XrcRole>,
    /// An XRC target holding a receive WR (a SEND in progress, a spare after an RNR NAK): the
    /// XRC SRQ it came from, whose CQ its completion goes to even when the QP is flushed.
    pub(super) xrc_held_srq: Option<u32>,
    /// Congestion control: ECN, the CNPs it sends, its DCQCN rate and pacing.
    pub(super) cc: QpCc,
    /// READ responses waiting for the QP's DCQCN rate (congestion.rs).
    pub(super) paced_reads: super::congestion::PacedReads,
}

impl Qp {
    /// The context of a new QP in RESET with IBA's defaults (retries 7, one RD/atomic each
    /// way) and the path MTU `mtu` until modify_qp sets one.
    pub(super) fn new(cfg: QpConfig, mtu: Mtu) -> Qp {
        Qp {
            cfg,
            state: QpState::Reset,
            attr: QpAttr {
                qp_state: QPS_RESET,
                port_num: PORT_NUM,
                ..QpAttr::default()
            },
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
            xrc: None,
            xrc_held_srq: None,
            cc: QpCc::default(),
            paced_reads: Default::default(),
        }
    }

    /// Applies the attributes `mask` names, once (as rxe_qp_from_attr): each is recorded as
    /// set and turned into the transport's working value. `sgid` is the GID that
    /// `a.ah.sgid_index` names (the device resolves it); without it an AV is recorded but not
    /// used. `next` is the state the modify moves to (the caller changes it).
    pub(super) fn apply_attr(&mut self, mask: u32, a: &QpAttr, sgid: Option<Gid>, next: QpState) {
        // Each named attribute is recorded as set, then its working value derived.
        macro_rules! take {
            ($bit:ident, $field:ident $(, $derive:expr)*) => {
                if mask & $bit != 0 {
                    self.attr.$field = a.$field;
                    $($derive;)*
                }
            };
        }
        if mask & QP_PATH_MTU != 0 {
            self.attr.path_mtu = a.path_mtu;
            if let Some(mtu) = Mtu::from_u8(a.path_mtu) {
                self.mtu = mtu;
            }
        }
        // The device refused numbers wider than 24 bits; from_wire keeps the engine's numbers
        // in range whatever a caller passes.
        take!(
            QP_DEST_QPN,
            dest_qp_num,
            self.dest_qpn = Qpn::from_wire(a.dest_qp_num.get())
        );
        take!(
            QP_RQ_PSN,
            rq_psn,
            self.resp.epsn = Psn::from_wire(a.rq_psn.get())
        );
        take!(
            QP_SQ_PSN,
            sq_psn,
            self.req.next_psn = Psn::from_wire(a.sq_psn.get()),
            self.req.sent_end = self.req.next_psn,
            self.req.acked_psn = a.sq_psn.prev(),
            self.req.una_may_move()
        );
        take!(QP_TIMEOUT, timeout, self.timeout = a.timeout);
        take!(
            QP_RETRY_CNT,
            retry_cnt,
            self.retry_cnt = a.retry_cnt,
            self.req.retry_left = a.retry_cnt
        );
        take!(
            QP_RNR_RETRY,
            rnr_retry,
            self.rnr_retry = a.rnr_retry,
            self.req.rnr_left = a.rnr_retry
        );
        take!(
            QP_MIN_RNR_TIMER,
            min_rnr_timer,
            self.min_rnr_timer = a.min_rnr_timer
        );
        take!(
            QP_MAX_QP_RD_ATOMIC,
            max_rd_atomic,
            self.max_rd_atomic = a.max_rd_atomic
        );
        take!(
            QP_MAX_DEST_RD_ATOMIC,
            max_dest_rd_atomic,
            self.max_dest_rd_atomic = a.max_dest_rd_atomic
        );
        take!(QP_QKEY, qkey, self.qkey = a.qkey);
        take!(
            QP_ACCESS_FLAGS,
            qp_access_flags,
            self.access = a.qp_access_flags
        );
        take!(QP_PKEY_INDEX, pkey_index);
        take!(QP_PORT, port_num);
        take!(QP_AV, ah);
        if let Some(sgid) = sgid.filter(|_| mask & QP_AV != 0) {
            self.av = Some(AddressVector {
                dgid: a.ah.dgid,
                sgid,
                traffic_class: a.ah.traffic_class,
                hop_limit: a.ah.hop_limit,
                flow_label: a.ah.flow_label,
                dmac: a.ah.dmac,
            });
        }
        if next == QpState::Sqd && self.state != QpState::Sqd {
            // The notification request belongs to this transition into SQD only.
            self.attr.en_sqd_async_notify = if mask & QP_EN_SQD_ASYNC_NOTIFY != 0 {
                a.en_sqd_async_notify
            } else {
                0
            };
        }
    }

    /// QUERY_QP's answer: the attributes as set, with the current state.
    pub(super) fn query(&self) -> QpAttr {
        QpAttr {
            qp_state: self.state as u8,
            cur_qp_state: self.state as u8,
            sq_draining: u8::from(self.state == QpState::Sqd && self.sq_in_flight()),
            ..self.attr
        }
    }

    /// A peer's access through `key` at `va` on this QP (its PD; a type 2 window must be
    /// bound to it).
    pub(super) fn remote_target(&self, key: Key, va: u64) -> RemoteTarget {
        RemoteTarget {
            pd: self.cfg.pd,
            qpn: self.cfg.qpn,
            key,
            va,
        }
    }

    pub(super) fn ack_timeout_ns(&self) -> Option<u64> {
        (self.timeout != 0)
            .then(|| ACK_TIMEOUT_UNIT_NS << self.timeout.min(MAX_ACK_TIMEOUT_EXPONENT))
    }

    /// The ECN bits of a packet with `opcode`: ECT(0) only for what congestion control
    /// slows down when the path marks it (RFC 3168: ECT only from a transport that responds
    /// to CE): the requests and READ responses of an RC/UC QP (XRC's included), which DCQCN
    /// paces. ACKs, atomic ACKs, CNPs and UD packets are not paced: Not-ECT.
    fn ecn_of(&self, opcode: u8) -> u8 {
        let paced_transport = matches!(self.cfg.qp_type, QpType::Rc | QpType::Uc);
        let paced = wire::opcode_info(opcode).is_some_and(|info| {
            info.class == OpcodeClass::ReadResponse
                || (!info.class.is_response() && info.class != OpcodeClass::Cnp)
        });
        if paced_transport && paced {
            self.cc.ecn()
        } else {
            ECN_NOT_ECT
        }
    }

    pub(super) fn ip_info(&self, av: &AddressVector, opcode: u8) -> IpInfo {
        IpInfo {
            sgid: av.sgid,
            dgid: av.dgid,
            // The ECN field is the device's.
            traffic_class: (av.traffic_class & !ECN_MASK) | self.ecn_of(opcode),
            hop_limit: if av.hop_limit == 0 {
                DEFAULT_HOP_LIMIT
            } else {
                av.hop_limit
            },
            flow_label: av.flow_label,
            src_port: wire::flow_source_port(self.cfg.qpn),
        }
    }

    /// The transport bits (high 3) of the QP's opcodes.
    pub(super) fn transport_bits(&self) -> u8 {
        if self.xrc.is_some() {
            return op::CLASS_XRC;
        }
        match self.cfg.qp_type {
            QpType::Rc => op::CLASS_RC,
            QpType::Uc => op::CLASS_UC,
            QpType::Ud => op::CLASS_UD,
        }
    }

    /// The requester may transmit: in RTS anything, in SQD only the rest (and retransmissions)
    /// of WRs already started.
    pub(super) fn can_send(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// SQE stops only the send queue; the receive queue keeps working (IBA 10.3.1).
    pub(super) fn can_receive(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Sends a packet on the QP's connection (RC/UC).
    pub(super) fn send_connected(
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
        self.transmit_packet(env, stats, &av, hdr, payload);
    }

    /// Sends a responder's answer (an ACK, NAK, atomic ACK or READ response) on the QP's
    /// connection: the one place answers are counted (`EngineStats::tx_responses`, which the
    /// data path's flush after a receive batch watches), not a look at every packet's opcode.
    pub(super) fn send_answer(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        hdr: &Headers,
        payload: &[u8],
    ) {
        // Counted before the packet is built: one that fails to build costs one needless flush.
        stats.tx_responses += u64::from(self.av.is_some());
        self.send_connected(env, stats, hdr, payload);
    }

    /// Builds a packet of this QP along `av` and hands it to the device: the one place the
    /// engine sends (and counts) a packet.
    pub(super) fn transmit_packet(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        av: &AddressVector,
        hdr: &Headers,
        payload: &[u8],
    ) {
        let copied = self.transmit_filled(env, stats, av, hdr, payload.len(), |_, out| {
            out.copy_from_slice(payload);
            Ok::<(), std::convert::Infallible>(())
        });
        if let Err(never) = copied {
            match never {}
        }
    }

    /// [`Qp::transmit_packet`] whose payload `fill` writes straight into the packet
    /// ([`wire::build_packet_filled`]); if `fill` fails, nothing is sent or counted.
    pub(super) fn transmit_filled<E>(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        av: &AddressVector,
        hdr: &Headers,
        payload_len: usize,
        fill: impl FnOnce(&mut dyn DeviceEnv, &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let ip = self.ip_info(av, hdr.bth.opcode);
        let flush_icrc = env.flush_icrc();
        let packet =
            wire::build_packet_filled(&ip, hdr, payload_len, flush_icrc, |out| fill(env, out))?;
        stats.tx_packets += 1;
        stats.tx_bytes += packet.len() as u64;
        let (qpn, psn) = (self.cfg.qpn.get(), hdr.bth.psn.get());
        env.wqe_trace()
            .frame_out(qpn, psn, hdr.bth.opcode, payload_len);
        env.transmit(av, packet);
        Ok(())
    }

    pub(super) fn bth(&self, opcode: u8, psn: Psn) -> Bth {
        Bth {
            // The roles name RC opcodes; an XRC QP sends the same operation as XRC.
            opcode: match self.xrc {
                Some(_) => op::CLASS_XRC | (opcode & op::OP_MASK),
                None => opcode,
            },
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: self.dest_qpn,
            ack_req: false,
            psn,
        }
    }

    /// An ACK, NAK or RNR NAK, behind any READ responses still waiting (congestion.rs counts
    /// it when it leaves).
    pub(super) fn send_ack(
        &mut self,
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
        self.send_response(env, stats, hdr);
    }

    pub(super) fn complete_recv(
        &self,
        env: &mut dyn DeviceEnv,
        wr: (u64, u16),
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) {
        env.complete(Completion::recv(self.cfg.qpn, wr, status, opcode, byte_len));
    }

    /// Moves the QP to the error state: every outstanding send WR and (unless the QP uses an
    /// SRQ) every posted receive WR completes with WR_FLUSH_ERR.
    pub(super) fn enter_error(&mut self, env: &mut dyn DeviceEnv) {
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
    pub(super) fn enter_sq_error(&mut self, env: &mut dyn DeviceEnv) {
        if matches!(self.state, QpState::Sqe | QpState::Err) {
            return;
        }
        self.state = QpState::Sqe;
        self.flush_sq(env);
    }

    /// A send WR failed at the head of the SQ: RC QPs go to ERR, UC/UD QPs to SQE.
    pub(super) fn send_queue_failed(&mut self, env: &mut dyn DeviceEnv) {
        if self.cfg.qp_type == QpType::Rc {
            self.enter_error(env);
        } else {
            self.enter_sq_error(env);
        }
    }

    /// Completes every send WR with WR_FLUSH_ERR and stops the requester.
    pub(super) fn flush_sq(&mut self, env: &mut dyn DeviceEnv) {
        self.req.una_may_move();
        while let Some(wqe) = self.req.sq.pop_front() {
            env.complete(Completion::send(
                self.cfg.qpn,
                wqe.wr.name(),
                WcStatus::WrFlushErr,
                wc_opcode(wqe.kind, wqe.wr.opcode),
                0,
            ));
        }
        self.req.cursor = 0;
        self.req.cursor_pkt = 0;
        self.req.timer_deadline = None;
        self.req.rnr_until = None;
        self.req.nak_rewind = None;
        self.req.read_early.clear();
        self.req.read_asked.clear();
        self.req.read_resp_high = None;
        self.req.rtt.probe = None;
        self.req.rtt.timed_ack_req = None;
        self.cc.wake_at = None;
    }

    /// Completes the receive WRs the responder holds and (unless they belong to an SRQ) every
    /// posted one with WR_FLUSH_ERR.
    pub(super) fn flush_rq(&mut self, env: &mut dyn DeviceEnv) {
        let held = match self.resp.cur.take() {
            Some(InMessage::Send { wr, .. }) => Some(wr),
            _ => None,
        };
        let held_srq = self.xrc_held_srq.take();
        for wr in held.into_iter().chain(self.resp.spare_recv.take()) {
            let name = wr.name();
            match held_srq {
                Some(srqn) => {
                    let mut srq_env = super::xrc::SrqEnv::new(env, srqn);
                    self.complete_recv(&mut srq_env, name, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
                }
                None => self.complete_recv(env, name, WcStatus::WrFlushErr, WcOpcode::Recv, 0),
            }
        }
        if !self.cfg.uses_srq {
            while let Some(wr) = env.pop_recv(self.cfg.qpn) {
                self.complete_recv(env, wr.name(), WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            }
        }
    }

    /// Send WRs started (first packet sent) and not yet retired: what an SQD drain waits for.
    pub(super) fn sq_in_flight(&self) -> bool {
        self.req.sq.front().is_some_and(|w| w.started)
    }

    /// Reports the end of an SQD drain once.
    pub(super) fn check_drained(&mut self, env: &mut dyn DeviceEnv) {
        if self.state == QpState::Sqd && self.req.drain_pending && !self.sq_in_flight() {
            self.req.drain_pending = false;
            if self.attr.en_sqd_async_notify != 0 {
                env.sq_drained(self.cfg.qpn);
            }
        }
    }
}
