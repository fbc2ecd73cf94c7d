//! The engine's congestion control hooks (the algorithm is `crate::roce::cc`): the
//! notification point answering CE-marked packets with CNPs, the reaction point taking CNPs,
//! and the pacing at its QP's DCQCN rate of what a QP sends as data: its requests (the
//! requester asks [`crate::roce::cc::QpCc::paced_until`] itself) and its READ responses
//! (here: the decision to hold one, and [`PacedReads`], the responses waiting; resp_exec.rs
//! builds and sends them).

use std::collections::VecDeque;

use super::qp::Qp;
use super::resp_exec::ReadStream;
use super::{Engine, EngineStats, RxDrop};
use crate::roce::cc::{CnpLimiter, ECN_CE, ECN_MASK};
use crate::roce::wire::DEFAULT_PKEY;
use crate::roce::wire::{self, opcode as op, Bth, Headers, Parsed, Syndrome};
use crate::roce::*;

/// A CNP's reserved bytes, sent as zeros.
const CNP_RESERVED: [u8; op::CNP_RESERVED_LEN] = [0; op::CNP_RESERVED_LEN];
/// The DSCP is the traffic class's upper 6 bits, above the 2 ECN bits.
const DSCP_SHIFT: u8 = 2;
const DSCP_MAX: u8 = 0x3f;

impl Engine {
    /// Counts a received RoCE packet marked Congestion Experienced (whatever then becomes
    /// of it). Returns whether it was.
    pub(super) fn note_ce(&mut self, p: &Parsed<'_>) -> bool {
        let ce = wire::ecn_of(p.ip_header) & ECN_MASK == ECN_CE;
        if ce {
            self.stats.np_ecn_marked_roce_packets += 1;
        }
        ce
    }

    /// A CNP for one of this device's QPs: the reaction point of an RC/UC QP connected to
    /// the CNP's sender cuts its rate (congestion control on) or counts it ignored (off).
    /// Any other CNP is dropped and counted, and affects nothing else.
    pub(super) fn receive_cnp(
        &mut self,
        env: &mut dyn DeviceEnv,
        p: &Parsed<'_>,
    ) -> Result<(), RxDrop> {
        let qpn = p.hdr.bth.dest_qpn;
        let qp = self.qps.get_mut(&qpn).filter(|qp| {
            matches!(qp.cfg.qp_type, QpType::Rc | QpType::Uc)
                && qp.av.is_some_and(|av| av.dgid == p.sgid)
        });
        let Some(mut qp) = qp else {
            self.stats.rx_cnp_dropped += 1;
            return Err(RxDrop::UnwantedCnp(qpn));
        };
        if qp.cc.enabled {
            self.stats.rp_cnp_handled += 1;
            qp.cc.on_cnp(env.now_ns());
        } else {
            self.stats.rp_cnp_ignored += 1;
        }
        Ok(())
    }
}

impl Qp {
    /// The notification point: a CE-marked packet arrived for this QP. An RC/UC QP with
    /// congestion control on tells its peer's QP with a CNP, as the port's rate limit allows
    /// (at most one per min_time_between_cnps from the port, whichever QP: [`CnpLimiter`]).
    pub(super) fn congestion_experienced(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        port: &mut CnpLimiter,
    ) {
        // A QP before RTR has no peer to tell; one in ERR tells nobody.
        let connected = matches!(self.cfg.qp_type, QpType::Rc | QpType::Uc) && self.can_receive();
        let Some(mut av) = self.av.filter(|_| connected && self.cc.enabled) else {
            return;
        };
        if !port.due(env.now_ns(), &self.cc.params) {
            return;
        }
        // The CNP's DSCP is the notification point's, not the QP's (its ECN: Not-ECT).
        let dscp = self.cc.params.cnp_dscp as u8 & DSCP_MAX;
        av.traffic_class = dscp << DSCP_SHIFT;
        // Not `self.bth`: an XRC QP's CNP is a CNP too, and it names no PSN (A17.9.3).
        let hdr = Headers::new(Bth {
            opcode: op::CNP,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: self.dest_qpn,
            ack_req: false,
            psn: Psn::default(),
        });
        stats.np_cnp_sent += 1;
        self.transmit_packet(env, stats, &av, &hdr, &CNP_RESERVED);
    }
}

/// One response a QP owes behind paced READ responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owed {
    /// READ responses, sent at the QP's rate.
    Read(ReadStream),
    /// A response without data (ACK, NAK, RNR NAK, atomic ACK, empty READ response).
    Response(Headers),
}

/// The responses a cut QP owes, oldest first. DCQCN limits what a QP sends, and a READ's
/// responses are data its responder sends, so they take the QP's rate as its requests do (on
/// mlx5 the requester of a READ answers CE-marked responses with CNPs to this QP). Responses
/// leave in PSN order: while READ responses wait, every other response of the QP waits behind
/// them (a response past a READ's PSNs would tell the requester its responses were lost, and
/// it would ask for the READ again), and the QP's coalesced ACK waits for them all.
#[derive(Debug, Default)]
pub(super) struct PacedReads {
    queue: VecDeque<Owed>,
    /// When the first waiting response may go: an engine timer.
    pub(super) wake_at: Option<u64>,
}

impl PacedReads {
    pub(super) fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Forgets every waiting response at `psn` or later: a READ that failed at `psn` ends
    /// its responder's answers there (its NAK answers them).
    pub(super) fn forget_from(&mut self, psn: Psn) {
        self.queue.retain_mut(|owed| match owed {
            Owed::Read(s) => {
                let keep = psn.diff(s.psn).max(0) as u32;
                s.end = s.end.min(keep);
                s.next < s.end
            }
            Owed::Response(hdr) => hdr.bth.psn.before(psn),
        });
        if self.queue.is_empty() {
            self.wake_at = None;
        }
    }

    /// Forgets the waiting responses of PSNs `first..end` (end exclusive), which a duplicate
    /// READ asks for again; the rest keep their place. A READ's waiting responses on both
    /// sides of the range stay, as two streams. Only what the duplicate covers goes: rox's
    /// requester asks again for exactly the responses it lost, and the responses behind them
    /// would otherwise never be sent (it waited for a tail probe or its timer to find each
    /// READ behind); a go-back-N requester asks again for every later request too, and each
    /// of those duplicates replaces its own responses in turn.
    fn forget_range(&mut self, first: Psn, end: Psn) {
        let offset = |psn: Psn, s: &ReadStream| psn.diff(s.psn).max(0) as u32;
        let owed = std::mem::take(&mut self.queue);
        for o in owed {
            match o {
                Owed::Read(s) => {
                    let head_end = s.end.min(offset(first, &s));
                    let tail_next = s.next.max(offset(end, &s));
                    if s.next < head_end {
                        self.queue
                            .push_back(Owed::Read(ReadStream { end: head_end, ..s }));
                    }
                    if tail_next < s.end {
                        self.queue.push_back(Owed::Read(ReadStream {
                            next: tail_next,
                            ..s
                        }));
                    }
                }
                Owed::Response(hdr) => {
                    if !hdr.bth.psn.within(first, end.prev()) {
                        self.queue.push_back(o);
                    }
                }
            }
        }
        if self.queue.is_empty() {
            self.wake_at = None;
        }
    }

    /// Queues `stream` in PSN order: before the first waiting response past its first PSN.
    fn insert_in_order(&mut self, stream: ReadStream) {
        let first = stream.psn.add(stream.next);
        let at = self.queue.iter().position(|o| match o {
            Owed::Read(s) => s.psn.add(s.next).after(first),
            Owed::Response(hdr) => hdr.bth.psn.after(first),
        });
        self.queue
            .insert(at.unwrap_or(self.queue.len()), Owed::Read(stream));
    }
}

impl Qp {
    /// Sends the responses of `stream` (its range checked): all at once while the QP is not
    /// cut, else as its rate allows, the rest waiting for [`Qp::resume_read_responses`].
    /// Returns false if reading the memory failed (a NAK was sent).
    pub(super) fn read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        stream: ReadStream,
    ) -> bool {
        let (first, end) = (stream.psn.add(stream.next), stream.psn.add(stream.end));
        self.paced_reads.forget_range(first, end);
        if self.paced_reads.pending() {
            self.paced_reads.insert_in_order(stream);
            return true;
        }
        self.stream_read_responses(env, stats, stream)
    }

    /// Sends a response without data now, or behind the READ responses still waiting.
    pub(super) fn send_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        hdr: Headers,
    ) {
        if self.paced_reads.pending() {
            self.paced_reads.queue.push_back(Owed::Response(hdr));
        } else {
            self.send_response_now(env, stats, &hdr);
        }
    }

    /// Sends a response without data and counts an ACK, NAK or RNR NAK as it leaves: one
    /// forgotten in the queue (the QP errored, or a retried READ replaced it) was never sent.
    fn send_response_now(&self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, hdr: &Headers) {
        let is_ack = hdr.bth.opcode & op::OP_MASK == op::RC_ACKNOWLEDGE & op::OP_MASK;
        if let Some(aeth) = hdr.aeth.filter(|_| is_ack && self.av.is_some()) {
            match aeth.syndrome {
                Syndrome::Ack => stats.acks_sent += 1,
                Syndrome::RnrNak(_) => stats.rnr_naks_sent += 1,
                Syndrome::Nak(_) => stats.naks_sent += 1,
            }
        }
        self.send_answer(env, stats, hdr, &[]);
    }

    /// The pacing decision before READ response `s.next`: whether the QP's rate holds it
    /// (then `s` waits at the head of the queue and the QP's pacing timer is set).
    pub(super) fn read_response_held(&mut self, now: u64, s: ReadStream) -> bool {
        if !self.cc.paced() {
            return false;
        }
        let Some(until) = self.cc.paced_until(now) else {
            return false;
        };
        self.paced_reads.queue.push_front(Owed::Read(s));
        self.paced_reads.wake_at = Some(until);
        true
    }

    /// A READ response of `bytes` left: it spends the QP's rate.
    pub(super) fn read_response_sent(&mut self, bytes: u64, now: u64) {
        if self.cc.paced() {
            self.cc.sent(bytes, now);
        }
    }

    /// Sends what this responder owes now: the READ responses whose pacing wait is over, then
    /// a coalesced ACK (an ACK waits for the READ responses before it).
    pub(super) fn send_answers(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats) {
        self.resume_read_responses(env, stats);
        if self.resp.ack_pending && !self.paced_reads.pending() {
            self.resp.ack_pending = false;
            if self.can_receive() {
                let psn = self.resp.epsn.prev();
                self.send_ack(env, stats, psn, Syndrome::Ack);
            }
        }
    }

    /// The pacing timer of waiting READ responses (`Engine::poll`): sends them in order as
    /// the rate allows. A QP that can no longer respond drops them.
    pub(super) fn resume_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
    ) {
        if self.paced_reads.wake_at.is_none_or(|t| env.now_ns() < t) {
            return;
        }
        self.paced_reads.wake_at = None;
        while let Some(owed) = self.paced_reads.queue.pop_front() {
            if !self.can_receive() {
                self.paced_reads = PacedReads::default();
                return;
            }
            match owed {
                Owed::Response(hdr) => self.send_response_now(env, stats, &hdr),
                Owed::Read(s) => {
                    let sent_all = self.stream_read_responses(env, stats, s);
                    if self.paced_reads.wake_at.is_some() || !sent_all {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
