//! The requester's retransmission timer: a round-trip estimate from ACKs and responses and a
//! retransmission timeout (RTO) computed from it as TCP does (RFC 6298), bounded by the QP's
//! local ACK timeout attribute (IBA: 4.096 µs × 2^timeout).
//!
//! Before the RTO, up to twice per stall, a tail probe (TCP's tail loss probe, RFC 8985 §7): after
//! two round trips without progress (and the lateness spurious probes taught) the requester
//! sends its first packet not known to have arrived again, asking for an ACK (for a READ: asks
//! again for its first missing response).
//! A responder takes it in sequence or ACKs it again as a duplicate, so the answer says where
//! the responder is, whatever was lost — the last packets, the NAK, the last ACK, a resend, a
//! READ retry — and whatever the responder does with packets past a gap: rdma_rxe NAKs a gap
//! once and then drops what follows it in silence, so a probe of the last packet would get no
//! answer from it. The packets sent before the probe that its ACK does not cover were lost:
//! the requester goes back to them at once (RACK's rule: what was sent before a packet that
//! arrived, and is not acknowledged, is lost), and recovery goes on at the speed of a round
//! trip instead of a timeout.
//!
//! IBA only says the requester must not give up before retry_cnt timeouts of the attribute's
//! length without progress. So a timeout of the (shorter) RTO retransmits at once but spends a
//! retry only when the attribute's full time has passed since the last progress or the last
//! retry spent: a peer that is really gone fails the WR after retry_cnt × timeout, as before,
//! while a lost tail packet costs a few round trips instead of the attribute's 0.5 s or more.
//!
//! A READ retry costs the rest of the READ, and a responder that answers in order (rdma_rxe)
//! sends that replay after what it was sending: its copies then arrive while the timer runs.
//! They restart it (never past the attribute's timeout since the last progress), and a READ
//! retry forgets only a timed packet it repeats; otherwise each stall of a slow responder
//! asked for another replay (docs/interop.md, "READ from rdma_rxe").

use std::sync::atomic::{AtomicU64, Ordering};

use super::qp::Qp;
use super::wqe::WqeKind;
use super::EngineStats;
use crate::roce::{DeviceEnv, Psn};

/// The scheduler tick of the hosts rox-nic runs on (HZ=250: Debian's kernels, and these
/// machines').
pub(super) const SCHED_TICK_NS: u64 = 4_000_000;
/// The RTO never goes below this. A peer's device answers within a few hundred µs when its
/// thread runs, but a host with more runnable threads than cores leaves a woken thread
/// waiting for a core: its naps overran by 1–4 ms most often (one to a few ticks), up to
/// 71 ms (docs/benchmarks/session-05.md, "What those ACK timeouts are"). A timeout then resends the
/// window with nothing lost. At 2 ms (half a tick) a loaded host timed out 4.5× as often as
/// at three ticks (docs/transport.md, "The RTO floor"), while a real loss waits for the RTO
/// only when the tail probes and NAKs could not find it (1 of 6 lossy transfers of
/// tests/roce_loss_recovery.rs, which took 12 % longer).
pub(super) const RTO_MIN_NS: u64 = 3 * SCHED_TICK_NS;
/// A repeated sequence NAK for the PSN the requester already went back to is taken as a new
/// loss (the resend did not arrive) only this long after that rewind, at least: sooner it
/// answers packets sent before the rewind. Half the smoothed round trip, at least this.
pub(super) const NAK_REPEAT_MIN_NS: u64 = 10_000;

/// A tail probe never comes sooner than this after the last progress.
pub(super) const PTO_MIN_NS: u64 = 10_000;
/// Tail probes per stall, each after twice the wait of the one before: a probe or its answer
/// may be lost too.
pub(super) const MAX_TAIL_PROBES: u8 = 2;

/// Round-trip estimate of one requester (RFC 6298 §2, in ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RttEstimator {
    /// Smoothed round trip; 0 until the first sample.
    pub(super) srtt_ns: u64,
    pub(super) rttvar_ns: u64,
    /// Timeouts in a row since the last progress: each doubles the RTO.
    pub(super) backoff: u32,
    /// The smallest round trip yet of a packet that asked for an ACK itself, answered by an
    /// ACK of exactly it (0: none): no tail probe's answer comes sooner. Not the smallest of
    /// the samples: those time the first packet of a burst, whose ACK waits for the burst's
    /// AckReq packet, so at 16 packets per AckReq each includes the responder's work on up to
    /// 15 more, and a probe (one packet) is answered sooner than any of them.
    pub(super) min_rtt_ns: u64,
    /// Tail probes sent since the last progress.
    pub(super) probes_sent: u8,
    /// A tail probe of a SEND/WRITE-like packet is out and not answered yet.
    pub(super) tail_probe: Option<TailProbe>,
    /// A tail probe overtaken by ACKs (everything sent before it acknowledged) later than
    /// the smallest round trip after it: (the PSN acknowledged then, when the probe left,
    /// when it was overtaken). An ACK repeating that PSN next is the responder answering the
    /// probe as a duplicate: the probe was spurious (TCP's DSACK).
    pub(super) overtaken_probe: Option<(Psn, u64, u64)>,
    /// The packet being timed (PSN, sent at); only first transmissions are timed and a
    /// rewind forgets it (Karn's rule: an ACK after a resend does not say which copy arrived).
    pub(super) probe: Option<(Psn, u64)>,
    /// The first-transmitted packet asking for an ACK being timed for [`Self::min_rtt_ns`]
    /// (PSN, sent at); forgotten as [`Self::probe`] is.
    pub(super) timed_ack_req: Option<(Psn, u64)>,
}

/// A tail probe of a SEND/WRITE-like packet, out and not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TailProbe {
    /// The PSN it sent again.
    pub(super) psn: Psn,
    /// When it left.
    pub(super) sent_at: u64,
    /// One past the last PSN sent when it left: what its answer can speak for.
    pub(super) sent_end: Psn,
}

impl RttEstimator {
    /// Takes one round-trip sample.
    pub(super) fn sample(&mut self, rtt_ns: u64) {
        if self.srtt_ns == 0 {
            self.srtt_ns = rtt_ns.max(1);
            self.rttvar_ns = rtt_ns / 2;
        } else {
            let err = self.srtt_ns.abs_diff(rtt_ns);
            // rttvar = 3/4 rttvar + 1/4 |srtt - r|; srtt = 7/8 srtt + 1/8 r.
            self.rttvar_ns = (3 * self.rttvar_ns + err) / 4;
            self.srtt_ns = ((7 * self.srtt_ns + rtt_ns) / 8).max(1);
        }
    }

    /// Takes the round trip of a packet that asked for an ACK, answered by an ACK of exactly
    /// it: the time a tail probe's answer takes at least.
    pub(super) fn sample_ack_req(&mut self, rtt_ns: u64) {
        self.min_rtt_ns = match self.min_rtt_ns {
            0 => rtt_ns.max(1),
            min => min.min(rtt_ns.max(1)),
        };
    }

    /// The RTO within `[RTO_MIN_NS, bound_ns]`: the attribute's timeout until a sample
    /// exists, then srtt + 4·rttvar, doubled per timeout in a row.
    pub(super) fn rto_ns(&self, bound_ns: u64) -> u64 {
        if self.srtt_ns == 0 {
            return bound_ns;
        }
        let base = (self.srtt_ns + 4 * self.rttvar_ns).max(RTO_MIN_NS);
        base.checked_shl(self.backoff.min(32))
            .unwrap_or(u64::MAX)
            .min(bound_ns)
    }

    /// Two smoothed round trips (RFC 8985 §7.2), at least [`PTO_MIN_NS`]: the tail probe's
    /// time before the lateness learnt ([`Qp::pto_ns`]). None: no round trip measured.
    pub(super) fn pto_ns(&self) -> Option<u64> {
        (self.srtt_ns != 0).then(|| (2 * self.srtt_ns).max(PTO_MIN_NS))
    }

    /// How long after a rewind for a sequence NAK a repeated NAK for the same PSN still
    /// answers packets sent before it.
    pub(super) fn nak_repeat_ns(&self) -> u64 {
        (self.srtt_ns / 2).max(NAK_REPEAT_MIN_NS)
    }
}

/// The learnt lateness halves every this long after it was last learnt: it follows the
/// host's load (a stall a few times a second keeps it), and a link whose answers stopped
/// being late gets its fast probes back within seconds.
pub(super) const LATENESS_HALF_LIFE_NS: u64 = 1_000_000_000;
/// The learnt lateness never exceeds this: a quarter of the RTO floor, so that two round
/// trips and the lateness stay below the RTO and a real tail loss is still found by a probe
/// (within ~3 ms), not by the RTO, whatever a stall taught. Stalls longer than this still cost
/// a spurious probe.
pub(super) const LATENESS_MAX_NS: u64 = RTO_MIN_NS / 4;

/// How much later than two round trips a tail probe comes, shared by all QPs of an engine
/// (`Engine::create_qp` hands each QP the engine's): the lateness of answers that made a
/// probe spurious. What delays an answer on a lossless link is the peers' data-path threads
/// waiting for a core, which every QP in flight at that moment sees at once: at 256 QPs a
/// QP learning for itself had sent its probe before it had anything to learn from.
pub(super) type ProbeLateness = std::sync::Arc<Lateness>;

/// The lateness and when it was last learnt (ns of the device's clock).
#[derive(Debug, Default)]
pub(super) struct Lateness {
    late_ns: AtomicU64,
    learnt_at_ns: AtomicU64,
}

impl Lateness {
    /// The lateness at `now`: halved per [`LATENESS_HALF_LIFE_NS`] since it was learnt.
    pub(super) fn at(&self, now: u64) -> u64 {
        let age = now.saturating_sub(self.learnt_at_ns.load(Ordering::Relaxed));
        let halvings = (age / LATENESS_HALF_LIFE_NS).min(63) as u32;
        self.late_ns.load(Ordering::Relaxed) >> halvings
    }

    /// An answer came `late_ns` after a probe that was not needed, at `now`.
    fn learn(&self, late_ns: u64, now: u64) {
        let late = self.at(now).max(late_ns).min(LATENESS_MAX_NS);
        self.late_ns.store(late, Ordering::Relaxed);
        self.learnt_at_ns.store(now, Ordering::Relaxed);
    }

    fn forget(&self) {
        self.late_ns.store(0, Ordering::Relaxed);
    }
}

impl Qp {
    /// When the tail probe is due after the last progress (None: no round trip measured):
    /// two smoothed round trips (RFC 8985 §7.2) and the lateness learnt from spurious probes
    /// ([`Self::probe_was_spurious`]). Not srtt + 4·rttvar: the samples time a burst's first
    /// packet, whose answer queues behind the answers to what was sent before it, so their
    /// variation measures that queue, not lateness; a READ stream at 5 % loss had rttvar
    /// 1.3–1.6× srtt, and probes that waited for it left the wire idle 40 of 92 ms
    /// (tests/roce_loss_recovery.rs allows a quarter). The timer restarts on every progress,
    /// so what a probe must outwait is a gap in progress, which only a probe that was not
    /// needed measures. RFC 8985 adds the peer's delayed-ACK time with one packet in flight;
    /// a rox responder delays no ACK (it ACKs every packet asking, right after the receive
    /// batch that took it), so nothing is added. No probe comes at or after the RTO (`arm_timer`): RFC
    /// 8985's min(PTO, RTO).
    pub(super) fn pto_ns(&self, now: u64) -> Option<u64> {
        let late = self.req.pto_lateness.at(now);
        self.req.rtt.pto_ns().map(|pto| pto + late)
    }

    /// A tail probe sent at `probe_sent_at` was not needed: everything sent before it was
    /// acknowledged at `now`, sooner after it than any probe is answered (the smallest round
    /// trip), so by ACKs that left the responder before the probe reached it — the answer was
    /// late, nothing was lost. The engine's next probes wait that much longer (RFC 8985 §6.2
    /// grows its reordering window on a spurious retransmission alike), never past the RTO
    /// floor, fading by half a second later ([`LATENESS_HALF_LIFE_NS`]); a probe that finds
    /// a loss forgets it ([`Self::probe_answered`]).
    pub(super) fn probe_was_spurious(&self, probe_sent_at: u64, now: u64) {
        self.req
            .pto_lateness
            .learn(now.saturating_sub(probe_sent_at), now);
    }

    /// The retransmission timeout now, or None if the QP's timeout attribute is 0 (IBA: wait
    /// for ever, no local ACK timer).
    pub(super) fn rto_ns(&self) -> Option<u64> {
        self.ack_timeout_ns()
            .map(|bound| self.req.rtt.rto_ns(bound))
    }

    /// Arms the retransmission timer at `now`: for the tail probe if one is due before the
    /// RTO (not after a timeout until progress is made), else for the RTO.
    pub(super) fn arm_timer(&mut self, now: u64) {
        self.req.timer_queued_at = None;
        let Some(rto) = self.rto_ns() else {
            self.req.timer_deadline = None;
            return;
        };
        let probes = self.req.rtt.probes_sent;
        let pto = (self.req.rtt.backoff == 0 && probes < MAX_TAIL_PROBES)
            .then(|| self.pto_ns(now))
            .flatten()
            .map(|pto| pto << probes)
            .filter(|&pto| pto < rto);
        self.req.timer_probe = pto.is_some();
        self.req.timer_deadline = Some(now + pto.unwrap_or(rto));
    }

    /// The timer expired at `now`: if it was the tail probe's, sends the probe, arms the RTO
    /// and returns true.
    pub(super) fn tail_probe_due(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        now: u64,
    ) -> bool {
        if !self.req.timer_probe {
            return false;
        }
        self.req.timer_probe = false;
        self.send_tail_probe(env, stats, now);
        self.req.rtt.probes_sent += 1;
        // Its answer comes after the probe leaves, at the end of the pass.
        self.arm_timer_on_departure(now);
        true
    }

    /// Sends the tail probe: the first packet not known to have arrived (of the oldest
    /// unfinished WR), asking for an ACK, or for a READ a request for its first missing
    /// responses. The cursor stays.
    fn send_tail_probe(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, now: u64) {
        let started = self.req.sq.iter().take_while(|w| w.started).count();
        let Some(index) = (0..started).find(|&i| {
            let w = &self.req.sq[i];
            !w.done() && w.error.is_none() && w.kind != WqeKind::Local
        }) else {
            return;
        };
        let wqe = &self.req.sq[index];
        let is_read = wqe.kind == WqeKind::Read;
        let pkt = if is_read {
            wqe.read_pkts_done
        } else {
            let first_missing = wqe.resume_psn(self.req.acked_psn);
            let last_sent = self.req.sent_end.prev().distance_from(wqe.first_psn);
            first_missing
                .distance_from(wqe.first_psn)
                .min(wqe.npsn - 1)
                .min(last_sent)
        };
        let saved = (
            self.req.cursor,
            self.req.cursor_pkt,
            self.req.pkts_since_ack_req,
        );
        let read_last = is_read.then(|| wqe.last_psn());
        let sent_end = self.req.sent_end;
        let psn = wqe.first_psn.add(pkt);
        self.req.cursor = index;
        self.req.cursor_pkt = pkt;
        // Whatever packet it is, it asks for an ACK.
        self.req.pkts_since_ack_req = u32::MAX - 1;
        match read_last {
            Some(last) => self.rtt_forget_probe_through(last),
            None => self.rtt_forget_probe(),
        }
        if self.send_packet(env, stats, index).is_ok() {
            stats.tail_probes += 1;
            // A READ's answer is its responses, which find their own gaps (read_retry.rs).
            // Sent now by the clock: `now` is the time the timers are judged at, the last
            // read of the wire (rto/clock.rs), which a stall may put well before this; an
            // answer timed from it would look slower than it was and be taken for the
            // probe's.
            let sent_at = env.now_ns().max(now);
            self.req.rtt.tail_probe = (!is_read).then_some(TailProbe {
                psn,
                sent_at,
                sent_end,
            });
        }
        (
            self.req.cursor,
            self.req.cursor_pkt,
            self.req.pkts_since_ack_req,
        ) = saved;
    }

    /// Starts timing the packet `psn` sent now (`ack_req`: it asked for an ACK), if no
    /// packet is being timed.
    pub(super) fn time_packet(&mut self, psn: Psn, ack_req: bool, now: u64) {
        let rtt = &mut self.req.rtt;
        if rtt.probe.is_none() {
            rtt.probe = Some((psn, now));
        }
        if ack_req && rtt.timed_ack_req.is_none() {
            rtt.timed_ack_req = Some((psn, now));
        }
    }

    /// An ACK or response showed that every PSN through `psn` arrived: a timed packet among
    /// them gives a round-trip sample, and the timed AckReq packet gives one for the smallest
    /// round trip if `psn` is exactly it (an ACK of a later packet waited for that one too).
    pub(super) fn rtt_acked_through(&mut self, psn: Psn, now: u64) {
        let rtt = &mut self.req.rtt;
        if let Some((timed, sent)) = rtt.probe {
            if psn.diff(timed) >= 0 {
                rtt.sample(now.saturating_sub(sent));
                rtt.probe = None;
            }
        }
        if let Some((timed, sent)) = rtt.timed_ack_req {
            if psn == timed {
                rtt.sample_ack_req(now.saturating_sub(sent));
            }
            if psn.diff(timed) >= 0 {
                rtt.timed_ack_req = None;
            }
        }
    }

    /// The requester went back (NAK, timeout, READ hole): what is in flight now may be a
    /// copy, so nothing is timed until a first transmission again.
    pub(super) fn rtt_forget_probe(&mut self) {
        self.req.rtt.probe = None;
        self.req.rtt.timed_ack_req = None;
        self.req.rtt.tail_probe = None;
        self.req.rtt.overtaken_probe = None;
    }

    /// A READ retry (a tail probe of a READ, or a hole asked for again) went out for
    /// responses of the READ whose last PSN is `last`: their answers carry PSNs through
    /// `last` only. Karn's rule forgets the timed packet only if it is at or before `last`;
    /// one after it (a later READ's request, sent once) still gives a clean sample.
    /// Forgetting it on every READ retry kept the estimate at its first sample against
    /// rdma_rxe, whose responder stalls for milliseconds: each stall brought a probe and each
    /// probe forgot the sample that would have shown the longer round trip (docs/interop.md,
    /// "READ from rdma_rxe").
    pub(super) fn rtt_forget_probe_through(&mut self, last: Psn) {
        let rtt = &mut self.req.rtt;
        rtt.tail_probe = None;
        let repeated = |timed: Option<(Psn, u64)>| timed.is_some_and(|(t, _)| t.diff(last) <= 0);
        if repeated(rtt.probe) {
            rtt.probe = None;
        }
        if repeated(rtt.timed_ack_req) {
            rtt.timed_ack_req = None;
        }
    }

    /// A stale READ response came (a copy of a placed one, or of a READ already complete):
    /// the responder is alive and answering, in order, requests older than the outstanding
    /// ones — the replay a retry asked for (rdma_rxe answers a duplicate READ only after what
    /// it was answering). A request now would only queue another replay behind it, so the
    /// timer starts over from `now`, its backoff and probe count kept. Never past the end of
    /// the retry period (the local ACK timeout since the last progress or retry spent): a
    /// peer that sends nothing but copies still runs the QP out of retries.
    /// Only while the oldest unacknowledged WR is a READ: once the READ completed, its
    /// copies say nothing about a SEND or WRITE after it, whose loss is found at its own RTO.
    pub(super) fn stale_response_postpones_timer(&mut self, now: u64) {
        let (Some(due), Some(attr)) = (self.req.timer_deadline, self.ack_timeout_ns()) else {
            return;
        };
        if !self.oldest_unacked_is_read() {
            return;
        }
        let period_end = self.req.retry_period_start.saturating_add(attr);
        let was_probe = self.req.timer_probe;
        self.arm_timer(now);
        match self.req.timer_deadline.map(|t| t.min(period_end)) {
            Some(later) if later > due => self.req.timer_deadline = Some(later),
            _ => {
                self.req.timer_deadline = Some(due);
                self.req.timer_probe = was_probe;
            }
        }
    }

    /// Whether the oldest WR sent and not yet complete is a READ.
    fn oldest_unacked_is_read(&self) -> bool {
        self.req
            .sq
            .iter()
            .take_while(|w| w.started)
            .find(|w| !w.done())
            .is_some_and(|w| w.kind == WqeKind::Read)
    }

    /// An ACK of `psn` came at `now` while a tail probe was out (`progress`: it moved the
    /// oldest unacknowledged PSN). An ACK does not name the request it answers, so which one
    /// answers the probe is told from the responder's order (IBA 9.7: in PSN order, an ACK
    /// for the newest PSN taken; rdma_rxe answers a duplicate with its newest PSN, C9-105):
    /// - once everything sent before the probe is acknowledged, nothing is left for its
    ///   answer to show lost;
    /// - an ACK that arrives sooner after the probe than the smallest round trip (measured on
    ///   packets that asked for an ACK, [`RttEstimator::min_rtt_ns`]) left the responder
    ///   before the probe reached it (RFC 8985 §6.2's test for an original's ACK), so it is
    ///   progress, not the answer: the rest of a receive batch the probe's timer interrupted;
    /// - the answer is an ACK of exactly the probed PSN (the responder took it in sequence and
    ///   nothing after it) or one repeating the newest ACK at or past it (the probe was a
    ///   duplicate and nothing after that came);
    /// - an ACK moving past the probed PSN but short of what was sent may have left before
    ///   the probe arrived (a slow responder ACKing every few packets, woken after the
    ///   probe): progress only. If it was the answer, the next probe, of the first packet
    ///   still missing, is taken in sequence and its ACK goes back (one probe time later).
    ///   Still taken for the answer: a late ACK of exactly the probed PSN from a responder
    ///   that ACKs every packet (rdma_rxe, when rox asks on each): nothing tells them apart.
    ///
    /// The answer was sent after every packet it does not cover, so those were lost (the
    /// responder dropped them after a gap, or they never came): back to the first of them
    /// now. Returns whether it went back.
    pub(super) fn probe_answered(
        &mut self,
        stats: &mut EngineStats,
        psn: Psn,
        progress: bool,
        now: u64,
    ) -> bool {
        self.repeat_shows_spurious_probe(psn, progress);
        self.forget_overtaken_tail_probe(now);
        let Some(probe) = self.req.rtt.tail_probe else {
            return false;
        };
        let una = self.una();
        if now.saturating_sub(probe.sent_at) < self.req.rtt.min_rtt_ns {
            return false;
        }
        let repeated = !progress && psn == self.req.acked_psn && psn.diff(probe.psn) >= 0;
        if psn != probe.psn && !repeated {
            return false;
        }
        self.req.rtt.tail_probe = None;
        // The probe was needed: waiting longer for the next one would only delay recovery.
        self.req.pto_lateness.forget();
        stats.nak_rewinds += 1;
        self.req.on_loss();
        self.rtt_forget_probe();
        self.rewind_to(una);
        true
    }

    /// Once everything sent before the tail probe is acknowledged (by ACKs, READ responses or
    /// atomic results) at `now`, nothing is left for its answer to show lost: the probe is
    /// forgotten, and if that came sooner after it than its answer could, it was spurious.
    pub(super) fn forget_overtaken_tail_probe(&mut self, now: u64) {
        let una = self.una();
        let acked = self.req.acked_psn;
        let rtt = &mut self.req.rtt;
        let Some(probe) = rtt.tail_probe.filter(|p| una.diff(p.sent_end) >= 0) else {
            return;
        };
        rtt.tail_probe = None;
        if rtt.min_rtt_ns != 0 && now.saturating_sub(probe.sent_at) < rtt.min_rtt_ns {
            self.probe_was_spurious(probe.sent_at, now);
        } else {
            // Its answer or the originals' ACK, or both: a repeat of this ACK will tell.
            rtt.overtaken_probe = Some((acked, probe.sent_at, now));
        }
    }

    /// An ACK of `psn` (`progress`: it moved the oldest unacknowledged PSN): if it repeats
    /// the ACK that overtook a tail probe, the responder had the probed packet already and
    /// answered the probe as a duplicate: the probe was spurious, and the originals' ACK came
    /// that late after it. Any other ACK ends the wait for that repeat.
    fn repeat_shows_spurious_probe(&mut self, psn: Psn, progress: bool) {
        let Some((acked, sent_at, overtaken_at)) = self.req.rtt.overtaken_probe.take() else {
            return;
        };
        if !progress && psn == acked {
            self.probe_was_spurious(sent_at, overtaken_at);
        }
    }

    /// Progress: the RTO stops backing off and the attribute's retry period starts over.
    pub(super) fn rtt_progress(&mut self, now: u64) {
        self.req.rtt.backoff = 0;
        self.req.rtt.probes_sent = 0;
        self.req.retry_period_start = now;
    }

    /// A timeout at `now`: whether it spends a retry (the attribute's whole timeout passed
    /// since the last progress or retry spent); the RTO backs off either way.
    pub(super) fn timeout_spends_retry(&mut self, now: u64) -> bool {
        self.req.rtt.backoff = self.req.rtt.backoff.saturating_add(1);
        self.retry_period_over(now)
    }

    /// Whether the attribute's whole timeout passed at `now` since the last progress or retry
    /// spent (then a new period starts): what lets a timeout, or a repeated sequence NAK for
    /// the same loss, spend a retry.
    pub(super) fn retry_period_over(&mut self, now: u64) -> bool {
        let attr = self.ack_timeout_ns().unwrap_or(0);
        if now.saturating_sub(self.req.retry_period_start) >= attr {
            self.req.retry_period_start = now;
            true
        } else {
            false
        }
    }
}

mod clock;
#[cfg(test)]
mod tests;
