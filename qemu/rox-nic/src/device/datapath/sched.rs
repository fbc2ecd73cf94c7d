//! The port's transmit scheduler: QPs share the port in turns instead of each filling its own
//! send window into it.
//!
//! Each RC QP's window alone is up to `MAX_INFLIGHT_PSNS` packets; 256 QPs each filling theirs
//! put far more frames on the port than its queue (`port::TX_QUEUE_LIMIT`) or the wire's
//! buffers (a socket's, a tap's 1000-frame queue at the receiving end) hold, and what
//! overflows comes back as ACK timeouts. Here the port has one budget, refilled on every pass
//! of the data path from what the port can take now:
//!
//! - queue room: frames its transmit queue may still take before the scheduler stops
//!   ([`SCHED_QUEUE_TARGET`], far below the limit where the port drops); this is the back
//!   pressure of a wire that cannot take more (a full socket buffer leaves frames queued);
//! - flight room: packets of RC requests the port's QPs may have unacknowledged in all
//!   ([`PORT_INFLIGHT_LIMIT`]), which bounds what any queue between here and the peer's
//!   device must hold even when the wire never pushes back (a tap: a bridge drops silently).
//!
//! The requester asks before every packet ([`crate::roce::DeviceEnv::may_send_request`]). A
//! QP that may not send joins the ready list; each data path pass gives QPs from its front a
//! turn of at most [`TURN_PACKETS`] packets while the budget lasts, round robin (a QP whose
//! turn ended with work left is back at the end of the list). While QPs wait, a QP that is
//! not on turn (a doorbell, an ACK opening its window, a timer) joins the list instead of
//! sending: nobody overtakes. A retransmission adds no packet to the flight, so it needs only
//! queue room: packets lost in flight can always be resent. While the flight is full, only a
//! QP that waits to resend gets a turn (the others keep their places): a turn for a QP whose
//! next packet is new could only be refused (at 256 QPs most of the turns given were, 8,882
//! turns for 4,096 packets in benches/qps under callgrind).
//!
//! **Parked QPs.** While the flight is full, an RC QP in RTS whose doorbell brings new WQEs is
//! parked instead of having them fetched: it joins the ready list (once), its doorbell's news
//! is taken as seen, and its WQEs stay in its SQ until its turn, when `run_tx_turns` fetches
//! them (a batch, as a doorbell would) and sends what the turn allows. A fetch then could only
//! queue the WQEs behind a refused packet: with perftest posting 12,800 WQEs to 256 QPs before
//! it polls once, main's device took them one or two a pass while the flight was full (up to
//! 691 passes in 1 ms, 2,348 doorbell notices a run against ~260 at 16 QPs;
//! docs/benchmarks/session-19-qps.md), every such pass counting as work, so the thread never
//! napped and held a core the peer's device needed. A parked doorbell is no work, and the
//! idle device tells software such doorbells need no wake (`DbPage::rc_sq_no_wake`,
//! `DataPath::idle_wake_pages`): in a guest each would otherwise wake it for nothing. Nothing
//! else waits: UD, UC and GSI sends, CQ arms, receive doorbells and error flushes are taken
//! in the same pass as before, and a parked QP that enters the error state is unparked and
//! its news stored again, so the next pass flushes its WQEs (`Hw::qp_entered_error`).

use std::collections::VecDeque;

use rox_uapi::ids::Qpn;

use super::DataPath;
use crate::roce::id_map::{IdMap, IdSet};

/// Frames the port's transmit queue may hold before the scheduler stops giving turns.
pub const SCHED_QUEUE_TARGET: usize = 4 * crate::port::BATCH;
/// RC request packets all QPs of the port may have unacknowledged: what one QP's full send
/// window may (so one QP sends as it did alone on the port), well within a tap's 1000-frame
/// queue, which responses and ACKs share.
pub const PORT_INFLIGHT_LIMIT: u64 = crate::roce::engine::MAX_INFLIGHT_PSNS as u64;
/// Packets one QP sends in one turn. 64 was tried (session 22): a full flight then held
/// about four QPs' turns instead of 16, so ACKs a MiB fell from ~16 to ~4 and tail probes by
/// half or more, but 256 QPs' share of 16 QPs' rate between two guests did not move, and a QP
/// joining N busy QPs would wait for up to N × 64 packets instead of N × 16 — a latency cost
/// nobody measured (docs/transport.md, "The turn's length").
pub const TURN_PACKETS: u32 = 16;

/// The port's transmit budget and ready list.
#[derive(Debug, Default)]
pub struct TxScheduler {
    /// Without a port there is nothing to share: every request may go.
    limited: bool,
    /// Frames the port's queue may still take in this pass.
    queue_room: usize,
    /// New RC request packets that may still enter the flight in this pass.
    flight_room: u64,
    /// QPs waiting for a turn, in order, and the same set for lookups, each with whether
    /// the packet it was refused was a retransmission (needs no flight room).
    ready: VecDeque<Qpn>,
    waiting: IdMap<Qpn, bool>,
    /// QPs of `waiting` refused a retransmission.
    resends_waiting: usize,
    /// QPs of `waiting` whose new WQEs were left in their SQ ([`Self::park`]).
    parked: IdSet<Qpn>,
    /// The QP whose turn it is and the packets left in its turn.
    turn: Option<(Qpn, u32)>,
    /// Something was sent since the last refill.
    spent: bool,
    /// Requests that had to wait (for the device's counters and tests).
    pub deferred_requests: u64,
}

impl TxScheduler {
    /// A scheduler for a device with a port (`limited`) or without one.
    /// A port's starts with an empty queue and nothing in flight.
    pub fn new(limited: bool) -> TxScheduler {
        TxScheduler {
            limited,
            queue_room: SCHED_QUEUE_TARGET,
            flight_room: PORT_INFLIGHT_LIMIT,
            ..Default::default()
        }
    }

    /// Whether QP `qpn` may send a request packet now; one that `adds_to_flight` (a first
    /// transmission of an RC packet) also needs flight room. A QP that may not joins the
    /// ready list (once).
    pub fn may_send(&mut self, qpn: Qpn, adds_to_flight: bool) -> bool {
        if !self.limited {
            return true;
        }
        let on_turn = match &self.turn {
            Some((q, left)) if *q == qpn => Some(*left),
            _ => None,
        };
        let allowed = match on_turn {
            Some(left) => left > 0,
            // Others wait: no overtaking.
            None => self.ready.is_empty(),
        } && self.queue_room > 0
            && (!adds_to_flight || self.flight_room > 0);
        if !allowed {
            self.deferred_requests += 1;
            self.wait_for_turn(qpn, !adds_to_flight);
            return false;
        }
        self.queue_room -= 1;
        if adds_to_flight {
            self.flight_room -= 1;
        }
        if let Some((_, left)) = &mut self.turn {
            if on_turn.is_some() {
                *left -= 1;
            }
        }
        self.spent = true;
        true
    }

    /// Puts QP `qpn` on the ready list (once); `resends`: the packet it waits to send is a
    /// retransmission (a QP already waiting keeps its place and learns that).
    fn wait_for_turn(&mut self, qpn: Qpn, resends: bool) {
        match self.waiting.entry(qpn) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(resends);
                self.ready.push_back(qpn);
                self.resends_waiting += usize::from(resends);
            }
            std::collections::hash_map::Entry::Occupied(mut o) => {
                if resends && !*o.get() {
                    o.insert(true);
                    self.resends_waiting += 1;
                }
            }
        }
    }

    /// Parks QP `qpn`, an RC QP in RTS whose doorbell brought new WQEs, if the flight is
    /// full: it waits for a turn with its WQEs left in its SQ, and true says the caller must
    /// not fetch them (they are fetched at its turn, [`Self::unpark`]). A QP waiting to resend
    /// keeps its place and its claim to a turn while the flight is full.
    pub fn park(&mut self, qpn: Qpn) -> bool {
        if !self.would_park() {
            return false;
        }
        self.wait_for_turn(qpn, false);
        self.parked.insert(qpn);
        true
    }

    /// Whether [`Self::park`] would park a QP on this budget's count of the flight.
    pub fn would_park(&self) -> bool {
        self.limited && self.flight_room == 0
    }

    /// Whether QP `qpn` was parked; it is not any more (its turn came, or it left RTS).
    pub fn unpark(&mut self, qpn: Qpn) -> bool {
        self.parked.remove(&qpn)
    }

    /// Whether QP `qpn` is parked (its doorbell's news needs no second look).
    pub fn is_parked(&self, qpn: Qpn) -> bool {
        self.parked.contains(&qpn)
    }

    /// Whether QP `qpn`, which just sent, may send no further packet now: its turn or the
    /// port's budget is spent (conservatively: a retransmission needs no flight room). The
    /// requester then asks for an ACK on the packet it is building, so that what it sent is
    /// acknowledged while it waits for its next turn; a packet without AckReq waited there
    /// unacknowledged (the responder ACKs only AckReq packets) until the tail probe sent it
    /// again.
    pub fn budget_spent(&self, qpn: Qpn) -> bool {
        if !self.limited {
            return false;
        }
        let turn_over = match &self.turn {
            Some((q, left)) if *q == qpn => *left == 0,
            // Not on turn: it went because nobody waited, and so may the next.
            _ => !self.ready.is_empty(),
        };
        turn_over || self.queue_room == 0 || self.flight_room == 0
    }

    /// Whether the budget must be computed again: something was sent since the last refill
    /// (rooms shrank) or QPs wait (rooms may have grown). Otherwise the old budget is still
    /// a safe one: the queue and the flight only shrank.
    pub fn needs_refill(&self) -> bool {
        self.limited && (self.spent || !self.ready.is_empty())
    }

    /// A new budget for this pass: the port's queue holds `backlog` frames and the QPs have
    /// `in_flight` RC packets unacknowledged.
    pub fn refill(&mut self, backlog: usize, in_flight: u64) {
        self.queue_room = SCHED_QUEUE_TARGET.saturating_sub(backlog);
        self.flight_room = PORT_INFLIGHT_LIMIT.saturating_sub(in_flight);
        self.spent = false;
    }

    /// QPs waiting for a turn.
    pub fn waiting(&self) -> usize {
        self.ready.len()
    }

    /// Whether a turn could send anything now: the queue has room, and the flight has or a
    /// QP waits to resend.
    pub fn has_room(&self) -> bool {
        self.queue_room > 0 && (self.flight_room > 0 || self.resends_waiting > 0)
    }

    /// Gives the QP at the front of the ready list its turn, or while the flight is full the
    /// first that waits to resend (None: nobody waits who could send).
    pub fn start_turn(&mut self) -> Option<Qpn> {
        let at = if self.flight_room > 0 {
            0
        } else if self.resends_waiting > 0 {
            // Rare (a loss while the flight is full): a walk of the list is fine.
            self.ready.iter().position(|q| self.waiting[q])?
        } else {
            return None;
        };
        let qpn = self.ready.remove(at)?;
        if self.waiting.remove(&qpn) == Some(true) {
            self.resends_waiting -= 1;
        }
        self.turn = Some((qpn, TURN_PACKETS));
        Some(qpn)
    }

    /// Ends the current turn; returns the packets it sent.
    pub fn end_turn(&mut self) -> u32 {
        self.turn.take().map_or(0, |(_, left)| TURN_PACKETS - left)
    }
}

impl DataPath {
    /// A new transmit budget from the port's backlog and the QPs' flight, unless the last
    /// one is still good.
    pub(super) fn refill_tx_budget(&mut self) {
        if self.hw.tx_sched.needs_refill() {
            self.refill_tx_budget_now();
        }
    }

    /// A new transmit budget from the port's backlog and the QPs' flight as they are now.
    pub(super) fn refill_tx_budget_now(&mut self) {
        let backlog = self.port.as_ref().map_or(0, |p| p.backlog());
        let in_flight = self.engine.flight_for_budget(PORT_INFLIGHT_LIMIT);
        self.hw.tx_sched.refill(backlog, in_flight);
    }

    /// Rounds of turns for the QPs on the ready list while the port has room, until a round
    /// sends nothing (what waits then waits for the flight or the wire); returns whether any
    /// QP sent. Bounded: every round that sends spends the budget.
    pub(super) fn run_tx_turns(&mut self) -> bool {
        self.refill_tx_budget();
        let mut sent = 0;
        loop {
            let mut round_sent = 0;
            for _ in 0..self.hw.tx_sched.waiting() {
                if !self.hw.tx_sched.has_room() {
                    break;
                }
                let Some(qpn) = self.hw.tx_sched.start_turn() else {
                    break;
                };
                self.engine.resume_send(&mut self.hw, qpn);
                if self.hw.tx_sched.unpark(qpn) {
                    // Its new WQEs are still in its SQ: taken now, for this turn.
                    self.fetch_parked(qpn);
                }
                round_sent += self.hw.tx_sched.end_turn();
                self.run_deferred();
            }
            sent += round_sent;
            if round_sent == 0 || !self.hw.tx_sched.has_room() {
                return sent > 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qpn(n: u32) -> Qpn {
        Qpn::new(n).unwrap()
    }

    fn refilled(backlog: usize, in_flight: u64) -> TxScheduler {
        let mut s = TxScheduler::new(true);
        s.refill(backlog, in_flight);
        s
    }

    #[test]
    fn without_a_port_everything_may_go() {
        let mut s = TxScheduler::new(false);
        for _ in 0..10_000 {
            assert!(s.may_send(qpn(2), true));
        }
        assert_eq!(s.waiting(), 0);
        assert!(!s.needs_refill());
    }

    #[test]
    fn the_queue_room_bounds_what_is_sent_and_the_rest_waits_once() {
        let mut s = refilled(SCHED_QUEUE_TARGET - 3, 0);
        assert!(s.may_send(qpn(2), true));
        assert!(s.may_send(qpn(2), false));
        assert!(s.may_send(qpn(3), true));
        assert!(!s.may_send(qpn(3), true), "the queue is at its target");
        assert!(!s.may_send(qpn(3), true));
        assert!(!s.may_send(qpn(2), false));
        assert_eq!(s.waiting(), 2, "each QP is on the ready list once");
        assert_eq!(s.deferred_requests, 3);
        assert!(s.needs_refill());
    }

    #[test]
    fn the_flight_room_holds_new_packets_but_not_retransmissions() {
        let mut s = refilled(0, PORT_INFLIGHT_LIMIT - 1);
        assert!(s.may_send(qpn(2), true));
        assert!(!s.may_send(qpn(2), true), "the flight is full");
        assert!(
            !s.has_room(),
            "a turn for a new packet could only be refused"
        );
        assert_eq!(s.start_turn(), None);
        // A rewind (a timer, a NAK): the QP now waits to resend.
        assert!(!s.may_send(qpn(2), false), "not on turn: it waits");
        assert_eq!(s.waiting(), 1, "in its old place");
        assert!(s.has_room());
        assert_eq!(s.start_turn(), Some(qpn(2)));
        assert!(
            s.may_send(qpn(2), false),
            "a retransmission needs only queue room"
        );
        assert!(
            !s.may_send(qpn(2), true),
            "a new packet still needs flight room"
        );
        assert_eq!(s.end_turn(), 1);
    }

    #[test]
    fn while_the_flight_is_full_only_a_qp_waiting_to_resend_gets_a_turn() {
        // Three QPs wait (the queue was full); QP 3 waits to resend.
        let mut s = refilled(SCHED_QUEUE_TARGET, 0);
        assert!(!s.may_send(qpn(2), true));
        assert!(!s.may_send(qpn(3), false));
        assert!(!s.may_send(qpn(4), true));
        s.refill(0, PORT_INFLIGHT_LIMIT);
        assert!(s.has_room(), "QP 3's retransmission fits the queue");
        assert_eq!(s.start_turn(), Some(qpn(3)), "it goes ahead of QP 2");
        assert!(s.may_send(qpn(3), false));
        s.end_turn();
        assert!(!s.has_room(), "QPs 2 and 4 need flight room");
        assert_eq!(s.start_turn(), None);
        assert_eq!(s.waiting(), 2);
        // ACKs empty the flight: both get their turns, in their order.
        s.refill(0, 0);
        assert!(s.has_room());
        assert_eq!(s.start_turn(), Some(qpn(2)));
        s.end_turn();
        assert_eq!(s.start_turn(), Some(qpn(4)));
        s.end_turn();
        assert_eq!(s.start_turn(), None);
    }

    #[test]
    fn while_qps_wait_nobody_overtakes_them() {
        let mut s = refilled(SCHED_QUEUE_TARGET, 0);
        assert!(!s.may_send(qpn(2), true));
        s.refill(0, 0);
        assert!(
            !s.may_send(qpn(3), true),
            "QP 2 waits: QP 3 queues behind it"
        );
        assert_eq!(s.start_turn(), Some(qpn(2)));
        assert!(s.may_send(qpn(2), true));
        assert!(!s.may_send(qpn(4), true), "not on turn");
        s.end_turn();
        assert_eq!(s.start_turn(), Some(qpn(3)));
        s.end_turn();
        assert_eq!(s.start_turn(), Some(qpn(4)));
        s.end_turn();
        assert_eq!(s.start_turn(), None);
        assert!(s.may_send(qpn(5), true), "nobody waits: send at once");
    }

    #[test]
    fn a_turn_is_at_most_turn_packets_then_the_qp_goes_to_the_back() {
        // Two QPs wait (as after a full queue).
        let mut s = refilled(SCHED_QUEUE_TARGET, 0);
        assert!(!s.may_send(qpn(2), true));
        assert!(!s.may_send(qpn(3), true));
        s.refill(0, 0);
        assert_eq!(s.start_turn(), Some(qpn(2)));
        let mut sent = 0;
        while s.may_send(qpn(2), true) {
            sent += 1;
        }
        assert_eq!(sent, TURN_PACKETS);
        assert_eq!(s.end_turn(), TURN_PACKETS);
        assert_eq!(s.start_turn(), Some(qpn(3)), "round robin");
        s.end_turn();
        assert_eq!(
            s.start_turn(),
            Some(qpn(2)),
            "QP 2 had work left: back at the end"
        );
    }

    #[test]
    fn the_last_packet_a_budget_allows_is_known_as_it_goes() {
        let mut s = refilled(SCHED_QUEUE_TARGET - 2, 0);
        assert!(s.may_send(qpn(2), true));
        assert!(!s.budget_spent(qpn(2)), "one more frame fits the queue");
        assert!(s.may_send(qpn(2), true));
        assert!(s.budget_spent(qpn(2)), "the queue is at its target");
        let mut s = refilled(0, PORT_INFLIGHT_LIMIT - 1);
        assert!(s.may_send(qpn(2), true));
        assert!(s.budget_spent(qpn(2)), "the flight is full");
        // A turn's last packet.
        let mut s = refilled(SCHED_QUEUE_TARGET, 0);
        assert!(!s.may_send(qpn(3), true));
        s.refill(0, 0);
        assert_eq!(s.start_turn(), Some(qpn(3)));
        for _ in 1..TURN_PACKETS {
            assert!(s.may_send(qpn(3), true));
            assert!(!s.budget_spent(qpn(3)));
        }
        assert!(s.may_send(qpn(3), true));
        assert!(s.budget_spent(qpn(3)), "the turn is over");
        assert!(!TxScheduler::new(false).budget_spent(qpn(3)), "no port");
    }

    #[test]
    fn a_qp_is_parked_only_while_the_flight_is_full_and_waits_for_its_turn_once() {
        let mut s = refilled(0, PORT_INFLIGHT_LIMIT - 1);
        assert!(!s.park(qpn(2)), "the flight has room: its WQEs are fetched");
        assert!(
            !TxScheduler::new(false).park(qpn(2)),
            "no port: nothing to wait for"
        );
        assert!(s.may_send(qpn(2), true));
        assert!(s.park(qpn(3)));
        assert!(s.park(qpn(3)), "a second doorbell: still parked");
        assert!(s.park(qpn(4)));
        assert_eq!(s.waiting(), 2, "each parked QP is on the ready list once");
        assert_eq!(s.start_turn(), None, "new packets need flight room");
        // An ACK: the turns come in order, and each says its WQEs are still in its SQ.
        s.refill(0, 0);
        assert_eq!(s.start_turn(), Some(qpn(3)));
        assert!(s.unpark(qpn(3)) && !s.is_parked(qpn(3)));
        s.end_turn();
        assert_eq!(s.start_turn(), Some(qpn(4)));
        assert!(s.unpark(qpn(4)));
        s.end_turn();
        assert!(!s.unpark(qpn(4)), "unparked once");
        assert_eq!(s.start_turn(), None);
    }

    #[test]
    fn a_new_port_may_send_at_once() {
        let mut s = TxScheduler::new(true);
        assert!(s.may_send(qpn(2), true));
    }

    #[test]
    fn an_unspent_budget_with_nobody_waiting_needs_no_refill() {
        let mut s = refilled(0, 0);
        assert!(!s.needs_refill());
        assert!(s.may_send(qpn(2), true));
        assert!(s.needs_refill());
        s.refill(1, 1);
        assert!(!s.needs_refill());
    }

    /// 256 QPs with endless work share the port as its passes do: each pass gives the flight
    /// room to the QPs at the front of the ready list, then the oldest turn's ACK comes back
    /// (the responder answers what one batch took of a QP once, and a turn's packets leave
    /// together). The flight holds whole turns, at most as many as fit, and no QP falls
    /// behind: over the run each sends within one turn of every other.
    #[test]
    fn a_full_flight_is_whole_turns_and_every_qp_keeps_up() {
        const QPS: u32 = 256;
        let mut s = refilled(0, PORT_INFLIGHT_LIMIT);
        for q in 0..QPS {
            assert!(
                !s.may_send(qpn(2 + q), true),
                "the flight is full: it waits"
            );
        }
        let mut flight: VecDeque<(Qpn, u64)> = VecDeque::new();
        let mut in_flight = 0;
        let mut sent_by = vec![0u64; QPS as usize];
        let mut most_qps_in_flight = 0;
        for _ in 0..4 * QPS {
            s.refill(0, in_flight);
            while s.has_room() {
                let Some(q) = s.start_turn() else { break };
                let mut sent = 0;
                // Endless work: it sends until refused, which puts it back in the list.
                while s.may_send(q, true) {
                    sent += 1;
                }
                assert_eq!(u64::from(s.end_turn()), sent);
                flight.push_back((q, sent));
                in_flight += sent;
                sent_by[(q.get() - 2) as usize] += sent;
            }
            most_qps_in_flight = most_qps_in_flight.max(flight.len());
            let (_, acked) = flight.pop_front().expect("a full flight");
            in_flight -= acked;
        }
        let turns_that_fit = PORT_INFLIGHT_LIMIT.div_ceil(u64::from(TURN_PACKETS)) as usize;
        assert!(
            most_qps_in_flight <= turns_that_fit,
            "{most_qps_in_flight} QPs' turns in a flight of {PORT_INFLIGHT_LIMIT} packets"
        );
        let least = *sent_by.iter().min().unwrap();
        let most = *sent_by.iter().max().unwrap();
        assert!(least > 0, "a QP never sent");
        assert!(
            most - least <= u64::from(TURN_PACKETS),
            "unfair: one QP sent {most} packets, another {least}"
        );
    }
}
