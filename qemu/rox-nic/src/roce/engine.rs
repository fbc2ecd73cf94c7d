//! The RC/UC/UD transport engine: requester, responder and completer of every QP of a device.
//!
//! Reliability (RC) is go-back-N: every packet has a PSN; the responder accepts only the
//! expected PSN, answers the first gap with a PSN-sequence-error NAK, re-acknowledges
//! duplicates, replays READ responses and saved atomic results for duplicate requests, and
//! coalesces ACKs (one per [`Engine::poll`] batch for all packets that asked for one). The
//! requester rewinds to the oldest unacknowledged PSN on a NAK or on the local ACK timeout,
//! counting retries (retry_cnt) and RNR retries (rnr_retry) that reset whenever progress is made.
//!
//! One file per role, as rdma_rxe: `recv.rs` checks and dispatches received packets,
//! `req.rs` turns send WQEs into requests, `comp.rs` takes the responses and runs the timers,
//! `resp.rs` checks requests (PSN, op sequence, duplicates) and `resp_exec.rs` executes them;
//! `qp.rs` is a QP's transport context, `window.rs` the requester's send window, `wqe.rs` the
//! send WQEs, `sg.rs` scatter/gather.
//!
//! A requester's invariants: `sq` holds WQEs in post order, the started ones first, and they
//! own consecutive PSNs up to `next_psn`; `una` (the go-back-N point: the first PSN of the
//! first started, unfinished WQE not known to have arrived) is never after `next_psn`; RC
//! sends a PSN only while it is before `una + window`. The cursor (what to send next) may lag
//! behind `una` after a rewind that a late ACK overtook: finished WQEs are skipped, not resent.

mod comp;
mod congestion;
mod qp;
mod read_retry;
mod recv;
mod req;
mod resp;
mod resp_exec;
mod rto;
mod sg;
mod table;
#[cfg(test)]
mod test_env;
mod window;
mod wqe;
mod xrc;

pub use xrc::XrcRole;

use super::cc::{CcConfig, CnpLimiter, QpCc};
use super::wire::ParseError;
use super::*;
use qp::Qp;
use table::QpTable;

/// Most PSNs a requester keeps in flight (unacknowledged) per QP; bounds retransmission bursts
/// and the port's socket buffer use.
pub const MAX_INFLIGHT_PSNS: u32 = 256;
/// The send window never shrinks below this many packets.
pub const MIN_INFLIGHT_PSNS: u32 = 16;
/// A requester asks for an ACK at the end of every message and at least every this many packets
/// (or twice per send window, if that is smaller, so a small window never waits for a timeout).
pub const ACK_REQ_INTERVAL: u32 = 64;
/// How long a requester waits before trying again an access that hit a page of an on-demand
/// region that was not present (the driver answers the device's page fault meanwhile).
pub const PAGE_FAULT_RETRY_NS: u64 = 100_000;
/// Consecutive page-fault stalls of a requester double its wait, up to this (a page the
/// driver does not answer for a while costs no busy retrying).
pub const PAGE_FAULT_RETRY_MAX_NS: u64 = 10_000_000;

/// Counters of the engine (all QPs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub tx_packets: u64,
    /// Bytes of the RoCEv2 IP packets sent (what DCQCN's byte counter and pacing count).
    pub tx_bytes: u64,
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
    /// Rewinds caused by NAKs (sequence error or RNR), and READ retries for missing responses.
    pub nak_rewinds: u64,
    /// RDMA WRITE / READ / atomic (incl. ATOMIC WRITE) messages a responder received in
    /// sequence (counted at their first packet, before their checks).
    pub rx_write_requests: u64,
    pub rx_read_requests: u64,
    pub rx_atomic_requests: u64,
    /// Requests a responder refused for their key, bounds or access.
    pub rx_remote_access_errors: u64,
    /// NAKs a requester received, by kind (stale ones included: each is a packet received).
    pub rx_seq_naks: u64,
    pub rx_rnr_naks: u64,
    pub rx_access_naks: u64,
    pub rx_invalid_request_naks: u64,
    /// READ responses past a gap: an implied NAK (an earlier response was lost).
    pub rx_read_gaps: u64,
    /// Tail probes: a requester's first packet not known to have arrived sent again after two
    /// round trips without progress, to learn what its window lost (engine/rto.rs).
    pub tail_probes: u64,
    /// XRC requests naming an SRQ that is not an XRC SRQ of the target QP's domain.
    pub rx_xrc_domain_errors: u64,
    /// Congestion control, under mlx5's counter names: RoCE packets received with CE, CNPs
    /// sent for them, CNPs received that cut a QP's rate (congestion control on) or did not
    /// (off).
    pub np_ecn_marked_roce_packets: u64,
    pub np_cnp_sent: u64,
    pub rp_cnp_handled: u64,
    pub rp_cnp_ignored: u64,
    /// CNPs dropped: for no QP, a QP that is not RC/UC or not connected, or from an address
    /// other than the QP's peer.
    pub rx_cnp_dropped: u64,
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
    #[error("CNP for QP {0:#x}, which is not an RC/UC QP connected to the sender")]
    UnwantedCnp(Qpn),
}

/// Transport engine of one device: the QP table of transport contexts and their state machines.
#[derive(Debug)]
pub struct Engine {
    qps: QpTable,
    stats: EngineStats,
    /// MTU of UD (and GSI) QPs, which no modify_qp sets: the largest the port carries.
    ud_mtu: Mtu,
    /// Congestion control of the device (each QP takes it when created).
    cc: CcConfig,
    /// The port's CNP rate limit (congestion.rs).
    cnp_limiter: CnpLimiter,
    /// The lateness spurious tail probes taught, shared by the QPs (rto.rs).
    pto_lateness: rto::ProbeLateness,
    /// When the data path last began reading its wire (rto/clock.rs; MAX: no wire).
    answers_read_at: u64,
}

impl Default for Engine {
    fn default() -> Engine {
        Engine {
            qps: QpTable::default(),
            stats: EngineStats::default(),
            ud_mtu: Mtu::Mtu4096,
            cc: CcConfig::default(),
            cnp_limiter: CnpLimiter::default(),
            pto_lateness: Default::default(),
            answers_read_at: u64::MAX,
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

    /// The same engine with congestion control `cc` for the QPs it creates.
    pub fn with_cc(self, cc: CcConfig) -> Engine {
        Engine { cc, ..self }
    }

    pub fn cc(&self) -> &CcConfig {
        &self.cc
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Creates the transport context of a new QP (state RESET).
    pub fn create_qp(&mut self, cfg: QpConfig) -> Result<(), EngineError> {
        if self.qps.contains_key(&cfg.qpn) {
            return Err(EngineError::QpExists(cfg.qpn));
        }
        // RC/UC get their path MTU from modify_qp; UD has none and uses the port's.
        let mtu = if cfg.qp_type == QpType::Ud {
            self.ud_mtu
        } else {
            Mtu::Mtu1024
        };
        let mut qp = Qp::new(cfg, mtu);
        qp.cc = QpCc::new(&self.cc);
        qp.req.pto_lateness = std::sync::Arc::clone(&self.pto_lateness);
        self.qps.insert(cfg.qpn, qp);
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

    /// Applies a modify_qp given in the engine's types (see [`QpModify::to_attr`]).
    pub fn modify_qp(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        m: &QpModify,
    ) -> Result<(), EngineError> {
        let (mask, attr, sgid) = m.to_attr();
        self.modify_qp_attr(env, qpn, mask, &attr, sgid)
    }

    /// Applies a modify_qp already validated against the IB state table by the device: the
    /// attributes `mask` names, then the state change if it names one. `sgid`: the GID
    /// `attr.ah.sgid_index` names. Entering RTR sets the responder's expected PSN, RTS the
    /// requester's next PSN; ERR flushes; RESET forgets all transport state.
    pub fn modify_qp_attr(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        mask: u32,
        attr: &QpAttr,
        sgid: Option<Gid>,
    ) -> Result<(), EngineError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        let state = if mask & rox_uapi::verbs::QP_STATE != 0 {
            Some(QpState::from_u8(attr.qp_state).ok_or(EngineError::BadState(qpn, attr.qp_state))?)
        } else {
            None
        };
        let connected = qp.cfg.qp_type != QpType::Ud;
        let gets_av = mask & rox_uapi::verbs::QP_AV != 0 && sgid.is_some();
        if state == Some(QpState::Rtr) && connected && qp.av.is_none() && !gets_av {
            return Err(EngineError::MissingAttribute(qpn, "av"));
        }
        let new_state = state.unwrap_or(qp.state);
        qp.apply_attr(mask, attr, sgid, new_state);
        let Some(state) = state else { return Ok(()) };
        match state {
            QpState::Reset => {
                let cfg = qp.cfg;
                drop(qp);
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

    /// QUERY_QP: the attributes as software set them, the current state (the engine moves a
    /// QP to ERR or SQE by itself) and whether an SQD drain is still going on.
    pub fn query_qp(&self, qpn: Qpn) -> Option<QpAttr> {
        self.qps.get(&qpn).map(Qp::query)
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
        self.queue_send(env, qpn, Ok(wr))?;
        self.send_queued(env, qpn)
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
        self.queue_send(env, qpn, Err(failed))?;
        self.send_queued(env, qpn)
    }

    /// Queues a send WR (or one the device could not decode, as [`Engine::post_failed`])
    /// without sending anything: a doorbell's WQEs are queued one by one, then
    /// [`Engine::send_queued`] sends them in one burst.
    pub fn queue_send(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        wr: Result<SendWr, FailedWr>,
    ) -> Result<(), EngineError> {
        let slot = self.send_slot(qpn)?;
        let decoded = wr.map(|wr| *slot = wr);
        self.queue_decoded(env, qpn, decoded)
    }

    /// A blank send WR ([`SendWr::new`]) at the tail of QP `qpn`'s send queue, for the device
    /// to decode a WQE into where it stays (decoded apart and moved in, a 168-byte WR was
    /// copied four times on its way), then queued by [`Engine::queue_decoded`]. Until then
    /// it is a failed WR: one whose decoding never finished completes in error, unsent.
    pub fn send_slot(&mut self, qpn: Qpn) -> Result<&mut SendWr, EngineError> {
        let qp = self
            .qps
            .get_mut_unnoted(&qpn)
            .ok_or(EngineError::NoSuchQp(qpn))?;
        Ok(qp.push_blank_wr())
    }

    /// Queues the WR decoded into QP `qpn`'s [`Engine::send_slot`] (validated against the QP,
    /// as [`Engine::queue_send`] does), or, if the device could not decode it, `failed`
    /// instead: it completes with `failed.status` in SQ order.
    pub fn queue_decoded(
        &mut self,
        env: &mut dyn DeviceEnv,
        qpn: Qpn,
        decoded: Result<(), FailedWr>,
    ) -> Result<(), EngineError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        qp.finish_tail_wr(decoded);
        qp.queued(env);
        Ok(())
    }

    /// Sends what the WRs queued on QP `qpn` may (its window, the port's scheduler, ...).
    pub fn send_queued(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) -> Result<(), EngineError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        qp.send_queued(env, &mut self.stats);
        Ok(())
    }

    /// Tells the engine receive WRs were posted to a QP: in the error state they are flushed.
    pub fn recv_posted(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) -> Result<(), EngineError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        if qp.state == QpState::Err {
            qp.flush_rq(env);
        }
        Ok(())
    }

    /// Sends what the responders owe now: READ responses whose pacing wait is over and
    /// coalesced ACKs. [`Engine::poll`] does this too; the data path calls it first after a
    /// pass that received requests, so that it can take same-device answers before any timer
    /// runs (a thread that lost its core between a request and the ACK it makes would
    /// otherwise probe or time out a request whose ACK is one pass away).
    /// Visits only the QPs that owe answers (the table lists them as they take requests).
    pub fn send_answers(&mut self, env: &mut dyn DeviceEnv) {
        let stats = &mut self.stats;
        self.qps.for_each_owing(|qp| qp.send_answers(env, stats));
    }

    /// Sends coalesced ACKs and runs timers. Call after each batch of [`Engine::receive`]s and
    /// whenever [`Engine::next_deadline`] passes.
    pub fn poll(&mut self, env: &mut dyn DeviceEnv) {
        // At most one clock read for all QPs (a read costs 24-60 ns in a VM, and a pass of
        // 256 QPs read it 256 times), and none while no QP has anything to poll: the data
        // path polls on every pass, an idle one too. Only the QPs with a timer armed or an
        // answer owed are visited (the table lists them as they change).
        let mut now = None;
        // Judged at the last read of the wire, not later (rto/clock.rs).
        let read_at = self.answers_read_at;
        let stats = &mut self.stats;
        self.qps.for_each_active(|qp| {
            let now = *now.get_or_insert_with(|| env.now_ns().min(read_at));
            qp.send_answers(env, stats);
            if qp.state == QpState::Rts || qp.state == QpState::Sqd {
                qp.on_timers_at(env, stats, now);
            }
        });
    }

    /// The earliest time [`Engine::poll`] has timer work to do (None: no timer armed).
    pub fn next_deadline(&self) -> Option<u64> {
        // A plain loop: the data path asks before every nap, and with hundreds of QPs the
        // iterator adapters cost more than the comparisons (callgrind, docs/benchmarks.md).
        let mut next: Option<u64> = None;
        for qp in self.qps.active() {
            for t in [
                qp.req.timer_deadline,
                qp.req.rnr_until,
                qp.cc.wake_at,
                qp.paced_reads.wake_at,
            ]
            .into_iter()
            .flatten()
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// Gives QP `qpn` a turn to send what its window allows (the port's transmit scheduler
    /// held it back); a QP that is gone or cannot send is left alone.
    pub fn resume_send(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) {
        if let Some(mut qp) = self.qps.get_mut(&qpn) {
            if qp.can_send() {
                qp.transmit(env, &mut self.stats);
            }
        }
    }

    /// RC request packets sent and not yet acknowledged (or answered), over all QPs.
    /// Kept by the table as QPs change: the scheduler asks on every pass.
    pub fn packets_in_flight(&self) -> u64 {
        let flight = self.qps.flight();
        debug_assert_eq!(
            flight,
            self.qps
                .values()
                .map(table::rc_packets_in_flight)
                .sum::<u64>(),
            "the table's count of packets in flight"
        );
        flight
    }

    /// Moves a QP to the error state (flushing its WRs), e.g. on a device-detected fatal error.
    pub fn set_error(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) -> Result<(), EngineError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        qp.enter_error(env);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::test_env::*;
    use super::*;
    use crate::roce::wire::{self, opcode as op};

    #[test]
    fn the_qps_of_an_engine_share_the_lateness_tail_probes_learn() {
        let mut e = Engine::new();
        for n in [0x11, 0x12] {
            e.create_qp(rc_config(Qpn::from_wire(n))).unwrap();
        }
        let [a, b] = [0x11, 0x12].map(|n| &e.qps[&Qpn::from_wire(n)].req.pto_lateness);
        assert!(std::sync::Arc::ptr_eq(a, b));
    }

    fn rc_config(qpn: Qpn) -> QpConfig {
        QpConfig {
            qpn,
            qp_type: QpType::Rc,
            pd: 1,
            uses_srq: false,
        }
    }

    #[test]
    fn rtr_without_address_vector_is_refused_for_connected_qps() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        let qpn = Qpn::new(5).unwrap();
        engine.create_qp(rc_config(qpn)).unwrap();
        let rtr = QpModify {
            state: Some(QpState::Rtr),
            ..Default::default()
        };
        let e = engine.modify_qp(&mut env, qpn, &rtr).unwrap_err();
        assert_eq!(e, EngineError::MissingAttribute(qpn, "av"));
        assert_eq!(engine.qp_state(qpn), Some(QpState::Reset));
        assert_eq!(
            engine.create_qp(rc_config(qpn)),
            Err(EngineError::QpExists(qpn))
        );
    }

    #[test]
    fn one_context_records_what_the_mask_names_and_reports_the_current_state() {
        use rox_uapi::verbs::{
            QPS_ERR, QPS_RTS, QPS_SQD, QP_EN_SQD_ASYNC_NOTIFY, QP_QKEY, QP_STATE, QP_TIMEOUT,
        };
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        create_rts_qp(&mut engine, &mut env, QpType::Rc);
        let before = engine.query_qp(LOCAL_QPN).unwrap();
        assert_eq!((before.qp_state, before.dest_qp_num), (QPS_RTS, PEER_QPN));
        assert_eq!(before.rq_psn.get(), 100);
        // Only the named attributes change: the timeout and the Q_Key given outside the mask
        // are not taken.
        let attr = QpAttr {
            qp_state: QPS_SQD,
            qkey: 0x1234,
            timeout: 9,
            en_sqd_async_notify: 1,
            ..QpAttr::default()
        };
        let mask = QP_STATE | QP_QKEY | QP_EN_SQD_ASYNC_NOTIFY;
        engine
            .modify_qp_attr(&mut env, LOCAL_QPN, mask, &attr, None)
            .unwrap();
        let after = engine.query_qp(LOCAL_QPN).unwrap();
        assert_eq!((after.qp_state, after.cur_qp_state), (QPS_SQD, QPS_SQD));
        assert_eq!((after.qkey, after.timeout), (0x1234, before.timeout));
        assert_eq!(after.en_sqd_async_notify, 1);
        assert_eq!(after.ah, before.ah);
        // Nothing was in flight: the drain ended at once and was reported, as asked.
        assert_eq!(after.sq_draining, 0);
        assert_eq!(env.drained, [LOCAL_QPN]);
        // A state the engine enters by itself shows in the query too.
        engine
            .modify_qp_attr(
                &mut env,
                LOCAL_QPN,
                mask & !QP_STATE | QP_TIMEOUT,
                &attr,
                None,
            )
            .unwrap();
        assert_eq!(engine.query_qp(LOCAL_QPN).unwrap().timeout, 9);
        engine.set_error(&mut env, LOCAL_QPN).unwrap();
        assert_eq!(engine.query_qp(LOCAL_QPN).unwrap().qp_state, QPS_ERR);
        let bad = QpAttr {
            qp_state: 9,
            ..attr
        };
        assert_eq!(
            engine.modify_qp_attr(&mut env, LOCAL_QPN, QP_STATE, &bad, None),
            Err(EngineError::BadState(LOCAL_QPN, 9))
        );
    }

    #[test]
    fn a_failed_wr_completes_in_order_and_stops_the_queue() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        create_rts_qp(&mut engine, &mut env, QpType::Rc);
        engine
            .post_send(&mut env, LOCAL_QPN, send_wr(1, WrOpcode::Send, 8))
            .unwrap();
        let failed = FailedWr {
            wr_id: 2,
            opcode: WrOpcode::Send,
            status: WcStatus::LocQpOpErr,
            vendor_err: 7,
            wqe_index: 1,
        };
        engine.post_failed(&mut env, LOCAL_QPN, failed).unwrap();
        engine
            .post_send(&mut env, LOCAL_QPN, send_wr(3, WrOpcode::Send, 8))
            .unwrap();
        assert!(env.completions.is_empty(), "WR 1 is not acknowledged yet");
        assert_eq!(engine.sq_outstanding(LOCAL_QPN), 3);
        let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
            h.aeth = Some(wire::Aeth {
                syndrome: wire::Syndrome::Ack,
                msn: Msn::default(),
            })
        });
        engine.receive(&mut env, &ack).unwrap();
        // Each completion names its WQE's index (the test's WRs 1 and 3 were posted at 0).
        let done: Vec<(u64, WcStatus, u8, u16)> = env
            .completions
            .iter()
            .map(|c| (c.wr_id, c.status, c.vendor_err, c.wqe_index))
            .collect();
        assert_eq!(
            done,
            [
                (1, WcStatus::Success, 0, 0),
                (2, WcStatus::LocQpOpErr, 7, 1),
                (3, WcStatus::WrFlushErr, 0, 0)
            ]
        );
        assert_eq!(engine.qp_state(LOCAL_QPN), Some(QpState::Err));
    }

    #[test]
    fn a_doorbells_wrs_are_queued_then_sent_in_one_burst_in_post_order() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        create_rts_qp(&mut engine, &mut env, QpType::Rc);
        for wr_id in 1..=2 {
            let wr = send_wr(wr_id, WrOpcode::Send, 8);
            engine.queue_send(&mut env, LOCAL_QPN, Ok(wr)).unwrap();
        }
        let failed = FailedWr {
            wr_id: 3,
            opcode: WrOpcode::Send,
            status: WcStatus::LocQpOpErr,
            vendor_err: 0,
            wqe_index: 2,
        };
        engine.queue_send(&mut env, LOCAL_QPN, Err(failed)).unwrap();
        let after = send_wr(4, WrOpcode::Send, 8);
        engine.queue_send(&mut env, LOCAL_QPN, Ok(after)).unwrap();
        assert!(env.sent.is_empty(), "queued, not sent");
        assert_eq!(engine.sq_outstanding(LOCAL_QPN), 4);
        engine.send_queued(&mut env, LOCAL_QPN).unwrap();
        let psns: Vec<u32> = env
            .sent_parsed()
            .iter()
            .map(|p| p.hdr.bth.psn.get())
            .collect();
        assert_eq!(psns, [100, 101], "in order, up to the failed WR");
        assert_eq!(
            engine.queue_send(&mut env, Qpn::new(0x999).unwrap(), Err(failed)),
            Err(EngineError::NoSuchQp(Qpn::new(0x999).unwrap()))
        );
    }

    #[test]
    fn a_wr_decoded_in_its_slot_is_queued_as_one_moved_in_and_an_unfinished_slot_fails() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        create_rts_qp(&mut engine, &mut env, QpType::Rc);
        // Decoded in place, field by field, into the blank slot.
        let slot = engine.send_slot(LOCAL_QPN).unwrap();
        let wr = send_wr(1, WrOpcode::Send, 8);
        (slot.wr_id, slot.opcode, slot.data) = (wr.wr_id, wr.opcode, wr.data);
        engine.queue_decoded(&mut env, LOCAL_QPN, Ok(())).unwrap();
        // A slot left blank (never decoded into) fails in SQ order rather than being sent.
        engine.send_slot(LOCAL_QPN).unwrap();
        engine.send_queued(&mut env, LOCAL_QPN).unwrap();
        assert_eq!(
            env.sent.len(),
            1,
            "the decoded WR went out, the blank did not"
        );
        // One the device could not decode completes with its status and its own name.
        let slot = engine.send_slot(LOCAL_QPN).unwrap();
        slot.wr_id = 77;
        let failed = FailedWr {
            wr_id: 3,
            opcode: WrOpcode::RdmaWrite,
            status: WcStatus::LocLenErr,
            vendor_err: 9,
            wqe_index: 2,
        };
        engine
            .queue_decoded(&mut env, LOCAL_QPN, Err(failed))
            .unwrap();
        assert_eq!(engine.sq_outstanding(LOCAL_QPN), 3);
        assert_eq!(
            engine.send_slot(Qpn::new(0x999).unwrap()).err(),
            Some(EngineError::NoSuchQp(Qpn::new(0x999).unwrap()))
        );
    }

    #[test]
    fn poll_reads_the_clock_only_while_a_qp_has_something_to_poll() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        engine.create_qp(rts_qp(QpType::Rc).cfg).unwrap();
        let with_ack_timer = QpModify {
            timeout: Some(14),
            ..rts_modify()
        };
        engine
            .modify_qp(&mut env, LOCAL_QPN, &with_ack_timer)
            .unwrap();
        let reads = env.clock_reads.get();
        engine.poll(&mut env);
        assert_eq!(env.clock_reads.get(), reads, "an idle QP: no clock read");
        let wr = send_wr(1, WrOpcode::Send, 8);
        engine.queue_send(&mut env, LOCAL_QPN, Ok(wr)).unwrap();
        engine.send_queued(&mut env, LOCAL_QPN).unwrap();
        assert_eq!(env.sent.len(), 1, "the SEND went out and waits for its ACK");
        let reads = env.clock_reads.get();
        engine.poll(&mut env);
        assert_eq!(env.clock_reads.get(), reads + 1, "one read for its timers");
    }

    #[test]
    fn poll_asks_the_port_for_a_held_qp_only_when_one_of_its_timers_is_due() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        engine.create_qp(rts_qp(QpType::Rc).cfg).unwrap();
        let with_ack_timer = QpModify {
            timeout: Some(14),
            ..rts_modify()
        };
        engine
            .modify_qp(&mut env, LOCAL_QPN, &with_ack_timer)
            .unwrap();
        // One packet may go, then the port's scheduler holds the QP (it waits for a turn).
        env.send_allowance = Some(1);
        for wr_id in [1, 2] {
            let wr = send_wr(wr_id, WrOpcode::Send, 8);
            engine.queue_send(&mut env, LOCAL_QPN, Ok(wr)).unwrap();
        }
        engine.send_queued(&mut env, LOCAL_QPN).unwrap();
        assert_eq!(env.sent.len(), 1);
        let asked = env.asked.len();
        for _ in 0..10 {
            engine.poll(&mut env);
        }
        assert_eq!(
            env.asked.len(),
            asked,
            "no timer due: the QP waits for its turn"
        );
        // The ACK timer comes due: the QP may have to resend, so it asks.
        env.now = engine.next_deadline().expect("the SEND's timer");
        engine.poll(&mut env);
        assert!(env.asked.len() > asked, "a due timer asks the port");
    }

    #[test]
    fn poll_sends_one_coalesced_ack_and_reset_forgets_the_qp() {
        let (mut engine, mut env) = (Engine::new(), TestEnv::new());
        create_rts_qp(&mut engine, &mut env, QpType::Rc);
        for (n, wr_id) in [(100, 1), (101, 2)] {
            env.recv.push_back(RecvWr {
                wqe_index: 0,
                wr_id,
                sges: Vec::new(),
            });
            let send = packet_from_peer(op::RC_SEND_ONLY, n, &[], |_| {});
            engine.receive(&mut env, &send).unwrap();
        }
        assert!(env.sent.is_empty(), "ACKs wait for the poll");
        engine.poll(&mut env);
        let acks = env.sent_parsed();
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].hdr.bth.psn.get(), 101);
        assert_eq!(acks[0].hdr.aeth.unwrap().msn.get(), 2);
        let reset = QpModify {
            state: Some(QpState::Reset),
            ..Default::default()
        };
        engine.modify_qp(&mut env, LOCAL_QPN, &reset).unwrap();
        assert_eq!(engine.qp_state(LOCAL_QPN), Some(QpState::Reset));
        assert_eq!(engine.next_deadline(), None);
        assert_eq!(engine.destroy_qp(LOCAL_QPN), Ok(()));
        assert_eq!(
            engine.destroy_qp(LOCAL_QPN),
            Err(EngineError::NoSuchQp(LOCAL_QPN))
        );
    }
}
