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
    /// Of those, a responder's answers (ACKs, NAKs, READ responses, atomic ACKs): the data
    /// path flushes the port after a receive batch that made some (docs/transport.md, "When
    /// answers leave").
    pub tx_responses: u64,
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
    /// QPs whose packets in flight were counted again because the count filled the port's
    /// budget with no timer armed ([`Engine::flight_for_budget`]: a fallback for a change
    /// that moved a `una` unnoted; QPs without an ACK timeout get there legitimately).
    pub flight_recounts: u64,
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
        if decoded.is_err() {
            // The SGE list a failed decode filled goes back to the device for its next WR
            // (the failed WR is remade blank): no allocation lost per failed WQE.
            let tail = qp.req.sq.back_mut().map(|w| &mut w.wr.data);
            if let Some(SendData::Sges(sges)) = tail {
                env.recycle_sges(std::mem::take(sges));
            }
        }
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
        // iterator adapters cost more than the comparisons (callgrind,
        // docs/benchmarks/session-07.md, "Session 7: why 256 QPs moved half of what 16 do").
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

    /// [`Self::packets_in_flight`] for the port's budget of `limit` packets: a count that
    /// fills it while no QP has a timer armed is found again by a walk of the QPs that
    /// changed since the last such walk (the release fallback of the table's kept `una`s,
    /// table.rs).
    pub fn flight_for_budget(&mut self, limit: u64) -> u64 {
        self.stats.flight_recounts += self.qps.recount_stuck_flight(limit);
        self.packets_in_flight()
    }

    /// Moves a QP to the error state (flushing its WRs), e.g. on a device-detected fatal error.
    pub fn set_error(&mut self, env: &mut dyn DeviceEnv, qpn: Qpn) -> Result<(), EngineError> {
        let mut qp = self.qps.get_mut(&qpn).ok_or(EngineError::NoSuchQp(qpn))?;
        qp.enter_error(env);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
