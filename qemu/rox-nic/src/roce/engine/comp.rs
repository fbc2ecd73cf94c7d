//! The completer (as rxe_comp.c): ACKs, NAKs, READ responses and atomic ACKs for the
//! requester, the go-back-N point, retiring WQEs in order, and the ACK and RNR timers.

use super::qp::Qp;
use super::sg::{scatter, SgError};
use super::wqe::{wc_opcode, WqeKind};
use super::EngineStats;
use crate::roce::wire::{NakCode, OpcodeClass, Parsed, Syndrome};
use crate::roce::*;
use crate::trace::Retransmit;

/// rnr_retry value meaning "retry forever".
pub(super) const RNR_RETRY_INFINITE: u8 = 7;
/// IBA table 45: RNR NAK timer codes in units of 10 µs (code 0 is the longest, 655.36 ms).
pub(super) const RNR_TIMER_10US: [u64; 32] = [
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
];
pub(super) const NS_PER_10US: u64 = 10_000;

/// The retry counters of a requester: retry_cnt (ACK timeouts, sequence NAKs) and
/// rnr_retry (RNR NAKs).
#[derive(Clone, Copy, Debug)]
enum Retry {
    Transport,
    Rnr,
}

/// The status of a send WR failed by a NAK other than a PSN sequence error.
fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        _ => WcStatus::RemInvReqErr,
    }
}

/// Counts a NAK the requester received, by kind.
fn count_received_nak(stats: &mut EngineStats, syndrome: Syndrome) {
    match syndrome {
        Syndrome::Ack => {}
        Syndrome::RnrNak(_) => stats.rx_rnr_naks += 1,
        Syndrome::Nak(NakCode::PsnSequenceError) => stats.rx_seq_naks += 1,
        Syndrome::Nak(NakCode::RemoteAccessError) => stats.rx_access_naks += 1,
        Syndrome::Nak(NakCode::InvalidRequest | NakCode::InvalidRdRequest) => {
            stats.rx_invalid_request_naks += 1
        }
        Syndrome::Nak(NakCode::RemoteOperationalError) => {}
    }
}

pub(super) fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_10US[usize::from(code) % RNR_TIMER_10US.len()] * NS_PER_10US
}

impl Qp {
    /// Oldest PSN not known to have arrived (the go-back-N point).
    pub(super) fn una(&self) -> Psn {
        self.req
            .sq
            .iter()
            .take_while(|w| w.started)
            .find(|w| !w.done())
            .map(|w| w.resume_psn(self.req.acked_psn))
            .unwrap_or(self.req.next_psn)
    }

    /// [`Qp::una`] without the walk while no change moved it since it was last found: the
    /// QP table counts the flight after every change of a QP, most of which move nothing.
    /// Debug builds check it against the walk. True with it if it was the kept one (not
    /// found afresh): what the table's release fallback may have to find again.
    pub(super) fn una_noted(&mut self) -> (Psn, bool) {
        if let Some(una) = self.req.una_known {
            #[cfg(test)]
            if self.req.una_known_corrupt {
                return (una, true);
            }
            debug_assert_eq!(
                una,
                self.una(),
                "QP {:#x}: a change moved una unnoted",
                self.cfg.qpn
            );
            return (una, true);
        }
        let una = self.una();
        self.req.una_known = Some(una);
        (una, false)
    }

    /// Tests: makes the kept `una` say `una` (a change that moved it unnoted, in a release
    /// build); the next note counts the flight from it.
    #[cfg(test)]
    pub(super) fn corrupt_una_cache(&mut self, una: Psn) {
        self.req.una_known = Some(una);
        self.req.una_known_corrupt = true;
    }

    /// A response (PSN `psn`) could not be placed because a local page is absent: drop it,
    /// go back to its request and send that again once the page-fault wait is over.
    pub(super) fn stall_response_for_fault(&mut self, stats: &mut EngineStats, psn: Psn, now: u64) {
        stats.page_fault_stalls += 1;
        self.rewind_to(psn);
        self.req.timer_deadline = None;
        self.req.fault_stall(now);
    }

    /// Points the cursor at PSN `psn` (go-back-N).
    pub(super) fn rewind_to(&mut self, psn: Psn) {
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
    pub(super) fn ack_through(&mut self, psn: Psn, now: u64) -> bool {
        let before = self.una();
        if psn.before(before) && psn.diff(self.req.acked_psn) <= 0 {
            return false;
        }
        if psn.after(self.req.acked_psn) {
            self.req.acked_psn = psn;
            self.rtt_acked_through(psn, now);
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
        self.req.una_known = Some(after);
        let progress = after != before;
        if progress {
            self.req.retry_left = self.retry_cnt;
            self.req.rnr_left = self.rnr_retry;
            self.req.nak_rewind = None;
            self.count_acked_since(before);
            self.rtt_progress(now);
            self.restart_timer(now);
        }
        progress
    }

    /// One past the newest PSN the peer can answer: the last one sent or, for a READ or
    /// atomic whose request went, the last response asked for. Not `next_psn`, which moves
    /// past all of a WR's PSNs when it starts, while pacing or the port's scheduler may
    /// hold the rest of it back.
    pub(super) fn flight_end(&self) -> Psn {
        let sent_end = self.req.sent_end;
        self.req
            .sq
            .iter()
            .take_while(|w| w.started)
            .filter(|w| w.kind.rd_atomic() && w.first_psn.before(sent_end))
            .map(|w| w.last_psn().next())
            .fold(sent_end, |end, e| if e.after(end) { e } else { end })
    }

    /// Whether a packet sent (or a response asked for) is not yet acknowledged: what the
    /// retransmission timer waits for.
    pub(super) fn in_flight(&self) -> bool {
        self.flight_end().diff(self.una()) > 0
    }

    pub(super) fn restart_timer(&mut self, now: u64) {
        if self.in_flight() {
            self.arm_timer(now);
        } else {
            self.req.timer_deadline = None;
        }
    }

    /// Retires finished WQEs from the head of the SQ in order, completing signaled ones and
    /// errored ones; an errored WQE moves the QP to the error state.
    pub(super) fn retire(&mut self, env: &mut dyn DeviceEnv) {
        while let Some(head) = self.req.sq.front() {
            let status = match head.error {
                Some(status) => status,
                None if head.done() => WcStatus::Success,
                None => break,
            };
            // What the completion and the clean-up need, read in place: the WQE (~270 bytes)
            // is not moved out of the queue to be read once.
            let (kind, first_psn, signaled) = (head.kind, head.first_psn, head.wr.signaled);
            let (name, opcode, len, vendor_err) =
                (head.wr.name(), head.wr.opcode, head.len, head.vendor_err);
            let sges = match self.req.sq.front_mut().map(|w| &mut w.wr.data) {
                Some(SendData::Sges(sges)) => Some(std::mem::take(sges)),
                _ => None,
            };
            self.req.sq.pop_front();
            if kind == WqeKind::Read {
                // A READ that failed with responses beyond a hole leaves their record behind.
                self.req.read_early.remove(&first_psn.get());
                self.req.read_asked.remove(&first_psn.get());
                if !self.req.sq.iter().any(|w| w.kind == WqeKind::Read) {
                    // Kept over 2^23 PSNs without READs, it would seem ahead of the next
                    // READ's responses and make each of them ask for the rest again.
                    self.req.read_resp_high = None;
                }
            }
            if self.req.cursor == 0 {
                // The cursor was inside the retired WQE (a go-back-N rewind that a late ACK
                // overtook): continue at the start of the next one, not at the same packet
                // index of a different message.
                self.req.cursor_pkt = 0;
            } else {
                self.req.cursor -= 1;
            }
            if status != WcStatus::Success || signaled {
                let byte_len = if status == WcStatus::Success {
                    len as u32
                } else {
                    0
                };
                env.complete(Completion {
                    vendor_err,
                    ..Completion::send(
                        self.cfg.qpn,
                        name,
                        status,
                        wc_opcode(kind, opcode),
                        byte_len,
                    )
                });
            }
            if let Some(sges) = sges {
                env.recycle_sges(sges);
            }
            if status != WcStatus::Success {
                // A failed WQE need not be done: its leaving may move `una`.
                self.req.una_may_move();
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
    pub(super) fn accept_nak(&mut self, psn: Psn, now: u64, stats: &mut EngineStats) -> bool {
        self.ack_through(psn.prev(), now);
        if psn == self.una() {
            true
        } else {
            stats.rx_stale_responses += 1;
            false
        }
    }

    /// Fails the WQE holding `psn` with `status` (NAKs).
    pub(super) fn fail_psn(&mut self, psn: Psn, status: WcStatus) {
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
    pub(super) fn completer_receive(
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
        let syndrome = p.hdr.aeth.map(|a| a.syndrome.encode());
        env.wqe_trace()
            .response_in(self.cfg.qpn.get(), psn.get(), p.hdr.bth.opcode, syndrome);
        // A response for a PSN never sent is bogus.
        if psn.diff(self.req.next_psn) >= 0 {
            stats.rx_stale_responses += 1;
            return;
        }
        let una_before = self.una();
        let go_on = match p.info.class {
            OpcodeClass::Ack => {
                let aeth = p.hdr.aeth.expect("parsed AETH");
                self.on_ack(env, stats, psn, aeth.syndrome, now)
            }
            class => match self.wqe_of_response(stats, psn) {
                None => {
                    // A copy of a response to a READ already complete.
                    if class == OpcodeClass::ReadResponse {
                        self.stale_response_postpones_timer(now);
                    }
                    false
                }
                Some(index) if class == OpcodeClass::AtomicAck => {
                    let original = p.hdr.atomic_ack.expect("parsed AtomicAckETH");
                    self.on_atomic_ack(env, stats, index, original, now)
                }
                Some(index) => self.on_read_response(env, stats, p, index, now),
            },
        };
        // A stale NAK (or a response stalled for a page fault) may still have acknowledged
        // WRs before it: complete them and use the window they opened now, not at the next
        // response or the ACK timer (a poll no longer transmits for every QP).
        let acked_more =
            self.una() != una_before && matches!(self.state, QpState::Rts | QpState::Sqd);
        if go_on || acked_more {
            self.retire(env);
            self.transmit(env, stats);
        }
    }

    /// An ACK, RNR NAK or NAK for `psn`. Returns false if the requester has nothing more to
    /// do (stale, or the SQ failed and was retired).
    fn on_ack(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        syndrome: Syndrome,
        now: u64,
    ) -> bool {
        count_received_nak(stats, syndrome);
        match syndrome {
            Syndrome::Ack => {
                let progress = self.ack_through(psn, now);
                if !progress {
                    stats.rx_stale_responses += 1;
                }
                if self.probe_answered(stats, psn, progress, now) {
                    env.wqe_trace().retransmit(
                        self.cfg.qpn.get(),
                        self.una().get(),
                        Retransmit::SequenceNak,
                    );
                }
            }
            Syndrome::RnrNak(code) => {
                if !self.accept_nak(psn, now, stats) {
                    return false;
                }
                if self.rnr_retry != RNR_RETRY_INFINITE && !self.spend_retry(env, psn, Retry::Rnr) {
                    return false;
                }
                stats.nak_rewinds += 1;
                env.wqe_trace()
                    .retransmit(self.cfg.qpn.get(), psn.get(), Retransmit::RnrNak);
                self.rewind_to(psn);
                self.req.timer_deadline = None;
                self.req.rnr_until = Some(now + rnr_timer_ns(code));
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                if !self.accept_nak(psn, now, stats) || self.repeated_nak(psn, now, stats) {
                    return false;
                }
                // The same loss NAKed again without progress (its resend was lost too) spends
                // a retry only per local ACK timeout, as the timer's timeouts do (rto.rs).
                let again = self
                    .req
                    .nak_rewind
                    .is_some_and(|(nak_psn, _)| nak_psn == psn);
                if (!again || self.retry_period_over(now))
                    && !self.spend_retry(env, psn, Retry::Transport)
                {
                    return false;
                }
                stats.nak_rewinds += 1;
                env.wqe_trace()
                    .retransmit(self.cfg.qpn.get(), psn.get(), Retransmit::SequenceNak);
                // Fast retransmit: go back to the NAKed PSN now, once for this loss.
                self.req.nak_rewind = Some((psn, now));
                self.req.on_loss();
                self.rtt_forget_probe();
                self.rewind_to(psn);
                self.restart_timer(now);
            }
            Syndrome::Nak(code) => {
                self.ack_through(psn.prev(), now);
                self.fail_psn(psn, nak_status(code));
            }
        }
        true
    }

    /// A sequence NAK for the PSN the requester went back to for the same NAK less than
    /// half a round trip ago: the responder answered packets sent before that rewind (or
    /// repeated its NAK before the resend could arrive); going back again would only resend
    /// the same packets twice. Counted as a stale response.
    fn repeated_nak(&mut self, psn: Psn, now: u64, stats: &mut EngineStats) -> bool {
        let repeated = self.req.nak_rewind.is_some_and(|(nak_psn, at)| {
            nak_psn == psn && now.saturating_sub(at) < self.req.rtt.nak_repeat_ns()
        });
        if repeated {
            stats.rx_stale_responses += 1;
        }
        repeated
    }

    /// A response arrived for a request (progress, whatever the WR's fate): both retry
    /// counts start over, the ACK timer restarts, and a tail probe it overtook is forgotten.
    pub(super) fn responded(&mut self, now: u64) {
        self.forget_overtaken_tail_probe(now);
        self.req.retry_left = self.retry_cnt;
        self.req.rnr_left = self.rnr_retry;
        self.req.nak_rewind = None;
        self.rtt_progress(now);
        self.restart_timer(now);
    }

    /// Takes one retry of `kind` for the WR at `psn`. None left: the WR fails (RETRY_EXC_ERR
    /// or RNR_RETRY_EXC_ERR) and the SQ retires up to it; returns false.
    fn spend_retry(&mut self, env: &mut dyn DeviceEnv, psn: Psn, kind: Retry) -> bool {
        let (left, status) = match kind {
            Retry::Transport => (&mut self.req.retry_left, WcStatus::RetryExcErr),
            Retry::Rnr => (&mut self.req.rnr_left, WcStatus::RnrRetryExcErr),
        };
        if *left == 0 {
            self.fail_psn(psn, status);
            self.retire(env);
            return false;
        }
        *left -= 1;
        true
    }

    /// Scatters response data at byte `offset` of the buffer of the READ or atomic WR at
    /// `index` (the response for its next PSN). Some(true): placed; Some(false): the WR
    /// failed (its error is set); None: a local page is absent, the response is dropped and
    /// its request sent again after the page-fault wait.
    pub(super) fn place_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
        offset: u64,
        data: &[u8],
        now: u64,
    ) -> Option<bool> {
        let wqe = &self.req.sq[index];
        let SendData::Sges(sges) = &wqe.wr.data else {
            unreachable!("READs and atomics take SGEs")
        };
        let psn = wqe.first_psn.add(wqe.read_pkts_done);
        match scatter(env, self.cfg.pd, sges, offset, data) {
            Ok(()) => {
                self.req.fault_wait_ns = 0;
                Some(true)
            }
            Err(SgError::Fault) => {
                self.stall_response_for_fault(stats, psn, now);
                None
            }
            Err(e) => {
                self.req.sq[index].error = Some(match e {
                    SgError::Length => WcStatus::LocLenErr,
                    SgError::Access | SgError::Fault => WcStatus::LocProtErr,
                });
                Some(false)
            }
        }
    }

    /// The index of the WQE a response for `psn` belongs to (none: a stale response).
    fn wqe_of_response(&self, stats: &mut EngineStats, psn: Psn) -> Option<usize> {
        let index = self.req.sq.iter().position(|w| w.contains(psn));
        if index.is_none() {
            stats.rx_stale_responses += 1;
        }
        index
    }

    /// The original value of a COMPARE SWAP / FETCH ADD came back: place it in the WR's
    /// buffer. Returns false if the requester has nothing more to do.
    fn on_atomic_ack(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
        original: u64,
        now: u64,
    ) -> bool {
        let wqe = &self.req.sq[index];
        if wqe.kind != WqeKind::Atomic || wqe.responded {
            stats.rx_stale_responses += 1;
            return false;
        }
        // An atomic has one PSN: the response's.
        self.ack_through(wqe.first_psn.prev(), now);
        // An absent result buffer: asked again later, the responder answers the duplicate
        // from its saved result.
        let bytes = original.to_le_bytes();
        let Some(placed) = self.place_response(env, stats, index, 0, &bytes, now) else {
            return false;
        };
        if placed {
            let before = self.una();
            self.req.sq[index].responded = true;
            self.req.una_may_move();
            self.count_acked_since(before);
        }
        self.responded(now);
        true
    }

    /// A READ RESPONSE FIRST/MIDDLE/LAST/ONLY: place its data (READ) or complete a FLUSH /
    /// ATOMIC WRITE. Returns false if the requester has nothing more to do.
    fn on_read_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
        index: usize,
        now: u64,
    ) -> bool {
        let wqe = &self.req.sq[index];
        if wqe.kind.ack_only_response() {
            // One zero-length READ RESPONSE ONLY answers it.
            let well_formed = p.info.first && p.info.last && p.payload.is_empty();
            return self.on_empty_read_response(env, stats, index, well_formed, now);
        }
        if wqe.kind != WqeKind::Read {
            stats.rx_stale_responses += 1;
            return false;
        }
        self.on_read_data(env, stats, p, index, now)
    }

    /// The response of the FLUSH / ATOMIC WRITE at `index` (`well_formed`: a READ RESPONSE
    /// ONLY without data, as it must be).
    fn on_empty_read_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
        well_formed: bool,
        now: u64,
    ) -> bool {
        let wqe = &self.req.sq[index];
        if wqe.responded {
            stats.rx_stale_responses += 1;
            return false;
        }
        if !well_formed {
            self.req.sq[index].error = Some(WcStatus::BadRespErr);
            self.retire(env);
            return false;
        }
        // FLUSH and ATOMIC WRITE have one PSN: the response's.
        self.ack_through(wqe.first_psn, now);
        self.responded(now);
        true
    }

    /// Timers: RNR wait over, or local ACK timeout (go-back-N or retry exhaustion).
    #[cfg(test)]
    pub(super) fn on_timers(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats) {
        let now = env.now_ns();
        self.on_timers_at(env, stats, now);
    }

    /// [`Qp::on_timers`] at `now` (one clock read serves a whole poll of all QPs).
    pub(super) fn on_timers_at(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        now: u64,
    ) {
        let due = |t: Option<u64>| t.is_some_and(|t| now >= t);
        // Only a timer that came due can let the QP send what it could not before (the RNR
        // or page-fault wait over, a rewind, the rate limiter's wait over); otherwise what
        // it has waits for an ACK or a turn of the port's scheduler, which resume it. A
        // transmit on every poll asked the scheduler for every QP with work on every pass
        // (at 256 QPs 11,574 refused asks for 4,096 packets, benches/qps under callgrind).
        let may_send_more =
            due(self.req.rnr_until) || due(self.req.timer_deadline) || due(self.cc.wake_at);
        if due(self.req.rnr_until) {
            self.req.rnr_until = None;
            self.restart_timer(now);
        }
        if due(self.req.timer_deadline) {
            let una = self.una();
            if !self.in_flight() {
                self.req.timer_deadline = None;
            } else if self.tail_probe_due(env, stats, now) {
                // The probe went; the RTO runs on.
            } else if self.timeout_spends_retry(now)
                && !self.spend_retry(env, una, Retry::Transport)
            {
                return;
            } else {
                stats.retransmit_timeouts += 1;
                env.wqe_trace()
                    .retransmit(self.cfg.qpn.get(), una.get(), Retransmit::AckTimeout);
                self.req.on_loss();
                // The loss stays known: a sequence NAK for `una` after this rewind is the
                // same loss (its resend lost again), which spends a retry only per local ACK
                // timeout; one that comes within half a round trip answers packets sent
                // before the rewind.
                // By the clock, not the time the timers are judged at (rto/clock.rs).
                self.req.nak_rewind = Some((una, env.now_ns().max(now)));
                self.rtt_forget_probe();
                self.rewind_to(una);
                self.req.timer_deadline = None;
            }
        }
        if may_send_more {
            self.transmit(env, stats);
        }
    }
}

#[cfg(test)]
mod tests;
