//! The engine's QP table, and what it keeps up to date about its QPs so that a pass of the
//! data path visits only the QPs with something to do instead of every QP: the QPs with a
//! timer armed or an answer owed (what [`Engine::poll`](super::Engine::poll) runs), the QPs
//! owing answers (what [`Engine::send_answers`](super::Engine::send_answers) sends), and the
//! RC packets in flight over all QPs (what the port's scheduler refills its budget from).
//!
//! Every change to a QP goes through [`QpTable::get_mut`] (or a walk of this table), whose
//! guard notes the QP's state when it is dropped: a QP whose timer was armed, or that took a
//! request it owes an ACK for, is listed then. At 256 QPs every pass walked all of them two
//! or three times (the poll, the answers after a pass that received anything, the flight
//! for the scheduler's budget), though only the few in flight had anything to do.

use std::ops::{Deref, DerefMut};

use super::qp::Qp;
use crate::roce::id_map::IdMap;
use crate::roce::*;

/// A QP and what the table last noted of it.
#[derive(Debug)]
struct Slot {
    qp: Qp,
    /// Its RC packets in flight, as counted in [`QpTable::flight`].
    flight: u64,
    /// On [`QpTable::active`].
    active: bool,
    /// On [`QpTable::owing`].
    owing: bool,
    /// On [`QpTable::departing`].
    departing: bool,
    /// On [`QpTable::unchecked`].
    unchecked: bool,
}

/// The QPs of an engine by QPN.
#[derive(Debug, Default)]
pub(super) struct QpTable {
    map: IdMap<Qpn, Slot>,
    /// QPs that had a timer armed or an answer owed when last noted, each once.
    active: Vec<Qpn>,
    /// QPs that owed an answer when last noted, each once.
    owing: Vec<Qpn>,
    /// QPs whose timer was armed for packets not yet out of the device when last noted,
    /// each once (rto/clock.rs).
    departing: Vec<Qpn>,
    /// RC request packets sent and not yet acknowledged, over all QPs.
    flight: u64,
    /// QPs whose packets in flight were counted from a kept `una` since the last
    /// [`Self::recount_stuck_flight`] (each once): the only ones a missed `una` invalidation
    /// could have overcounted, so the only ones that walk finds again. A QP whose count came
    /// from its `una` found afresh or that the walk counted, and that no change touched since,
    /// is right. An ACK stores the `una` it learnt as the kept one, so a QP still in flight after
    /// an ACK is listed too: more walks than needed, never fewer.
    unchecked: Vec<Qpn>,
}

/// A QP borrowed for a change; dropping it notes the change in its table.
pub(super) struct QpMut<'a> {
    qpn: Qpn,
    slot: &'a mut Slot,
    lists: Lists<'a>,
}

/// The table's lists, which a noted change may add to.
struct Lists<'a> {
    active: &'a mut Vec<Qpn>,
    owing: &'a mut Vec<Qpn>,
    departing: &'a mut Vec<Qpn>,
    flight: &'a mut u64,
    unchecked: &'a mut Vec<Qpn>,
}

impl QpTable {
    pub fn contains_key(&self, qpn: &Qpn) -> bool {
        self.map.contains_key(qpn)
    }

    pub fn get(&self, qpn: &Qpn) -> Option<&Qp> {
        self.map.get(qpn).map(|s| &s.qp)
    }

    /// QP `qpn` for a change (noted when the guard is dropped).
    pub fn get_mut(&mut self, qpn: &Qpn) -> Option<QpMut<'_>> {
        let QpTable {
            map,
            active,
            owing,
            departing,
            flight,
            unchecked,
        } = self;
        let slot = map.get_mut(qpn)?;
        Some(QpMut {
            qpn: *qpn,
            slot,
            lists: Lists {
                active,
                owing,
                departing,
                flight,
                unchecked,
            },
        })
    }

    /// QP `qpn` for a change that nothing notes: only for one that alters none of what the
    /// table keeps (timers, answers owed, packets in flight), such as a blank WR pushed at
    /// the tail of the SQ ([`super::Engine::send_slot`]), which [`Self::get_mut`] notes
    /// once it is filled and queued.
    pub fn get_mut_unnoted(&mut self, qpn: &Qpn) -> Option<&mut Qp> {
        self.map.get_mut(qpn).map(|s| &mut s.qp)
    }

    /// Adds a new QP (one of the same QPN must not be in the table).
    pub fn insert(&mut self, qpn: Qpn, qp: Qp) {
        let slot = Slot {
            qp,
            flight: 0,
            active: false,
            owing: false,
            departing: false,
            unchecked: false,
        };
        let old = self.map.insert(qpn, slot);
        debug_assert!(old.is_none(), "QP {qpn:#x} inserted twice");
        // A new QP has no timer and owes nothing, but note it like any change.
        drop(self.get_mut(&qpn));
    }

    /// Removes QP `qpn` and everything noted of it.
    pub fn remove(&mut self, qpn: &Qpn) -> Option<Qp> {
        let slot = self.map.remove(qpn)?;
        self.flight = self.flight.saturating_sub(slot.flight);
        // Rare (a destroy or a reset): the lists are walked once.
        if slot.active {
            self.active.retain(|q| q != qpn);
        }
        if slot.owing {
            self.owing.retain(|q| q != qpn);
        }
        if slot.departing {
            self.departing.retain(|q| q != qpn);
        }
        if slot.unchecked {
            self.unchecked.retain(|q| q != qpn);
        }
        Some(slot.qp)
    }

    /// QPs on the active list (tests: right after a poll, the QPs with a timer armed or
    /// an answer owed).
    #[cfg(test)]
    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    /// RC request packets in flight over all QPs.
    pub fn flight(&self) -> u64 {
        self.flight
    }

    /// Counts the flight again if it fills a budget of `limit` packets (the port's) while no
    /// QP has a timer armed; returns the QPs counted again. Such a count is not trusted: a
    /// packet in flight of a QP with an ACK timeout arms its timer (or, held after a loss,
    /// waits to be resent), and with no timer nothing may come to move any `una`. A missed
    /// [`Qp::una_noted`] invalidation (which debug builds catch) would otherwise overcount the
    /// flight for good and hold every first transmission of the port. The QPs whose count
    /// came from a kept `una` since the last such walk ([`Self::unchecked`]) find theirs
    /// again: the walk costs what changed since the last one, not the table's size. So QPs
    /// without an ACK timeout (IBA: 0, no timer; their flight fills the budget with no timer
    /// armed and nothing wrong) cost each refill only the QPs that sent since the last, and
    /// a stuck count that nothing changes is walked once.
    pub fn recount_stuck_flight(&mut self, limit: u64) -> u64 {
        if self.flight < limit || self.unchecked.is_empty() || self.active().any(has_timer_armed) {
            return 0;
        }
        let mut unchecked = std::mem::take(&mut self.unchecked);
        let walked = unchecked.len() as u64;
        for qpn in unchecked.drain(..) {
            if let Some(mut qp) = self.get_mut(&qpn) {
                qp.slot.unchecked = false;
                // Its count is found afresh as the guard drops: the QP is not listed again.
                qp.req.una_may_move();
            }
        }
        // Keep the list's buffer (refills of QPs without a timer walk every few passes).
        if self.unchecked.is_empty() {
            self.unchecked = unchecked;
        }
        walked
    }

    /// Every QP (a walk of the whole table: for checks in debug builds, not for a pass of
    /// the data path).
    pub fn values(&self) -> impl Iterator<Item = &Qp> {
        self.map.values().map(|s| &s.qp)
    }

    /// The QPs that have a timer armed or an answer owed (and perhaps a few that had them
    /// when last noted).
    pub fn active(&self) -> impl Iterator<Item = &Qp> {
        self.active
            .iter()
            .filter_map(|q| self.map.get(q))
            .map(|s| &s.qp)
    }

    /// Calls `f` for every QP with a timer armed or an answer owed; a QP left with neither
    /// leaves the list until a change arms or owes again.
    pub fn for_each_active(&mut self, mut f: impl FnMut(&mut Qp)) {
        let mut i = 0;
        while i < self.active.len() {
            let qpn = self.active[i];
            let Some(slot) = self.map.get_mut(&qpn) else {
                self.active.swap_remove(i);
                continue;
            };
            f(&mut slot.qp);
            let mut lists = Lists {
                active: &mut self.active,
                owing: &mut self.owing,
                departing: &mut self.departing,
                flight: &mut self.flight,
                unchecked: &mut self.unchecked,
            };
            lists.note(qpn, slot);
            if has_poll_work(&slot.qp) {
                i += 1;
            } else {
                slot.active = false;
                self.active.swap_remove(i);
            }
        }
    }

    /// Calls `f` for every QP that owed an answer when last noted (each once; one still
    /// owing after `f` is listed again).
    pub fn for_each_owing(&mut self, mut f: impl FnMut(&mut Qp)) {
        let mut owing = std::mem::take(&mut self.owing);
        for qpn in owing.drain(..) {
            let Some(mut qp) = self.get_mut(&qpn) else {
                continue;
            };
            qp.slot.owing = false;
            f(&mut qp);
        }
        // Keep the list's buffer: this runs on every pass that received anything.
        if self.owing.is_empty() {
            self.owing = owing;
        }
    }

    /// Whether no QP's timer waits for its packets to leave the device.
    pub fn departing_is_empty(&self) -> bool {
        self.departing.is_empty()
    }

    /// Calls `f` for every QP whose timer was armed for packets not yet out of the device
    /// (each once), and empties that list. `f` moves only the timer's deadline, which keeps
    /// the QP on the active list: nothing else to note.
    pub fn for_each_departing(&mut self, mut f: impl FnMut(&mut Qp)) {
        for qpn in self.departing.drain(..) {
            if let Some(slot) = self.map.get_mut(&qpn) {
                slot.departing = false;
                f(&mut slot.qp);
            }
        }
    }
}

#[cfg(test)]
impl std::ops::Index<&Qpn> for QpTable {
    type Output = Qp;

    fn index(&self, qpn: &Qpn) -> &Qp {
        &self.map[qpn].qp
    }
}

impl Lists<'_> {
    /// Notes what changed of QP `qpn`: its packets in flight, and whether it joins the
    /// active or the owing list.
    fn note(&mut self, qpn: Qpn, slot: &mut Slot) {
        // `una` as the requester last found it: the walk of its SQ runs only after a change
        // that may have moved it (an ACK, a response), not after every change.
        let (una, kept) = slot.qp.una_noted();
        let flight = rc_flight(&slot.qp, una);
        // Saturating: were the count ever wrong (debug builds check it), a wrap would hold
        // every new packet of the port back for good.
        *self.flight = self.flight.saturating_sub(slot.flight) + flight;
        slot.flight = flight;
        if !slot.unchecked && kept && flight > 0 {
            slot.unchecked = true;
            self.unchecked.push(qpn);
        }
        if !slot.active && has_poll_work(&slot.qp) {
            slot.active = true;
            self.active.push(qpn);
        }
        if !slot.owing && owes_answers(&slot.qp) {
            slot.owing = true;
            self.owing.push(qpn);
        }
        if !slot.departing && slot.qp.req.timer_queued_at.is_some() {
            slot.departing = true;
            self.departing.push(qpn);
        }
    }
}

impl Deref for QpMut<'_> {
    type Target = Qp;

    fn deref(&self) -> &Qp {
        &self.slot.qp
    }
}

impl DerefMut for QpMut<'_> {
    fn deref_mut(&mut self) -> &mut Qp {
        &mut self.slot.qp
    }
}

impl Drop for QpMut<'_> {
    fn drop(&mut self) {
        self.lists.note(self.qpn, self.slot);
    }
}

/// RC request packets `qp` sent that are not yet acknowledged (or answered), found by the
/// walk of its SQ (debug builds check the table's count against it).
pub(super) fn rc_packets_in_flight(qp: &Qp) -> u64 {
    rc_flight(qp, qp.una())
}

/// RC request packets `qp` sent that are not yet acknowledged (or answered), `una` being its
/// [`Qp::una`].
fn rc_flight(qp: &Qp, una: Psn) -> u64 {
    if qp.cfg.qp_type != QpType::Rc || !qp.can_send() {
        return 0;
    }
    qp.req.sent_end.diff(una).max(0) as u64
}

/// Whether `qp` owes an answer: a coalesced ACK or READ responses held by its rate.
pub(super) fn owes_answers(qp: &Qp) -> bool {
    qp.resp.ack_pending || qp.paced_reads.wake_at.is_some()
}

/// Whether [`super::Engine::poll`] has anything to do for `qp`: an answer owed or a timer
/// armed. Most QPs of a device with hundreds have neither in any pass (a responder's
/// requester side, a QP between messages, a QP waiting for the port's scheduler with
/// nothing in flight).
pub(super) fn has_poll_work(qp: &Qp) -> bool {
    owes_answers(qp) || has_timer_armed(qp)
}

/// Whether a timer of `qp`'s requester is armed: its retransmission timer, an RNR (or
/// page-fault) wait, its rate's next release.
fn has_timer_armed(qp: &Qp) -> bool {
    qp.req.rnr_until.is_some() || qp.req.timer_deadline.is_some() || qp.cc.wake_at.is_some()
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::super::*;
    use crate::roce::wire::{self, opcode as op};

    #[test]
    fn a_pass_visits_only_the_qps_with_a_timer_armed_or_an_answer_owed() {
        let mut env = TestEnv::new();
        let (mut engine, qpns) = engine_with_timed_qps(&mut env, 64);
        // Every QP has a WR the port's scheduler holds back: work, but nothing to poll.
        env.send_allowance = Some(0);
        for (i, &qpn) in qpns.iter().enumerate() {
            let wr = send_wr(i as u64, WrOpcode::Send, 8);
            engine.post_send(&mut env, qpn, wr).unwrap();
        }
        engine.poll(&mut env);
        assert_eq!(engine.qps.active_len(), 0, "no QP has a timer or owes");
        assert_eq!(engine.packets_in_flight(), 0);
        // Two QPs get a turn each: one packet in flight and its ACK timer armed.
        env.send_allowance = None;
        for &qpn in &qpns[5..7] {
            engine.resume_send(&mut env, qpn);
        }
        assert_eq!(env.sent.len(), 2);
        assert_eq!(engine.packets_in_flight(), 2);
        engine.poll(&mut env);
        assert_eq!(engine.qps.active_len(), 2, "the two QPs with a timer");
        // Their ACKs: nothing in flight, no timer, nothing to visit.
        for &qpn in &qpns[5..7] {
            let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
                h.bth.dest_qpn = qpn;
                h.aeth = peer_aeth(wire::Syndrome::Ack)
            });
            engine.receive(&mut env, &ack).unwrap();
        }
        assert_eq!(engine.packets_in_flight(), 0);
        engine.poll(&mut env);
        assert_eq!(engine.qps.active_len(), 0);
        assert_eq!(engine.next_deadline(), None);
    }

    /// The flight the table counts follows each change that moves a requester's oldest
    /// outstanding PSN (an ACK, a READ response), though the note no longer walks the SQ.
    #[test]
    fn the_flight_follows_the_acks_and_read_responses_that_move_una() {
        let mut env = TestEnv::new();
        let (mut engine, _) = engine_with_timed_qps(&mut env, 1);
        for wr in [
            send_wr(1, WrOpcode::RdmaWrite, 2048),
            send_wr(2, WrOpcode::RdmaRead, 2048),
        ] {
            engine.post_send(&mut env, LOCAL_QPN, wr).unwrap();
        }
        // PSNs 100-101 the WRITE's, 102 the READ's request (its responses: 102-103).
        assert_eq!(engine.packets_in_flight(), 3);
        let aeth = peer_aeth(wire::Syndrome::Ack);
        let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 101, &[], |h| h.aeth = aeth);
        engine.receive(&mut env, &ack).unwrap();
        assert_eq!(engine.packets_in_flight(), 1, "the WRITE acknowledged");
        let first = packet_from_peer(op::RC_READ_RESPONSE_FIRST, 102, &[1; 1024], |h| {
            h.aeth = aeth
        });
        engine.receive(&mut env, &first).unwrap();
        assert_eq!(engine.packets_in_flight(), 0, "the READ's request answered");
        let last = packet_from_peer(op::RC_READ_RESPONSE_LAST, 103, &[2; 1024], |h| {
            h.aeth = aeth
        });
        engine.receive(&mut env, &last).unwrap();
        assert_eq!(engine.packets_in_flight(), 0);
        let done: Vec<u64> = env.completions.iter().map(|c| c.wr_id).collect();
        assert_eq!(done, [1, 2]);
    }

    /// A kept `una` that a change moved unnoted (here corrupted on purpose) overcounts the
    /// flight; once that fills the port's budget with no timer armed, nothing would ever
    /// correct it and the port would send no new packet. The budget's count walks again.
    /// Without the walk the QP sends nothing (release builds; debug builds' check of the
    /// count fails first).
    #[test]
    fn a_flight_that_fills_the_budget_with_no_timer_armed_is_counted_again() {
        let limit = u64::from(MAX_INFLIGHT_PSNS);
        let mut env = TestEnv::new();
        let (mut engine, _) = engine_with_timed_qps(&mut env, 1);
        let write = |id| send_wr(id, WrOpcode::RdmaWrite, 8);
        engine.post_send(&mut env, LOCAL_QPN, write(1)).unwrap();
        let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
            h.aeth = peer_aeth(wire::Syndrome::Ack)
        });
        engine.receive(&mut env, &ack).unwrap();
        engine.poll(&mut env);
        assert_eq!(
            (engine.packets_in_flight(), engine.next_deadline()),
            (0, None)
        );

        let mut qp = engine.qps.get_mut(&LOCAL_QPN).unwrap();
        let stale = qp.req.sent_end.sub(MAX_INFLIGHT_PSNS);
        qp.corrupt_una_cache(stale);
        drop(qp);
        assert_eq!(engine.qps.flight(), limit, "the whole budget, as counted");
        // The port's budget, as the scheduler refills it (sched.rs), for the next WRITE.
        let flight = engine.flight_for_budget(limit);
        env.send_allowance = Some(limit.saturating_sub(flight) as u32);
        engine.post_send(&mut env, LOCAL_QPN, write(2)).unwrap();
        assert_eq!(env.sent.len(), 2, "the second WRITE went");
        assert_eq!(engine.stats.flight_recounts, 1);
        assert_eq!(engine.packets_in_flight(), 1);
        // In flight with its timer armed: nothing to walk.
        engine.flight_for_budget(1);
        assert_eq!(engine.stats.flight_recounts, 1);
    }

    /// A QP without an ACK timeout (IBA: 0, none) fills the budget with no timer armed and
    /// a right count: walked once, not again at each refill. Once an ACK shrinks the flight,
    /// a later stuck count (here the same number, from a corrupted `una`) is walked afresh:
    /// the QP changed since the walk (a walk kept for a count would hold the port for good).
    #[test]
    fn a_stuck_count_is_walked_once_until_the_flight_shrinks() {
        let mut env = TestEnv::new();
        let mut engine = Engine::new();
        create_rts_qp(&mut engine, &mut env, QpType::Rc);
        for id in 0..4 {
            let wr = send_wr(id, WrOpcode::RdmaWrite, 8);
            engine.post_send(&mut env, LOCAL_QPN, wr).unwrap();
        }
        assert_eq!((env.sent.len(), engine.next_deadline()), (4, None));
        assert_eq!(engine.flight_for_budget(4), 4);
        assert_eq!(engine.flight_for_budget(4), 4);
        assert_eq!(
            engine.stats.flight_recounts, 1,
            "the same count walked once"
        );

        let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 103, &[], |h| {
            h.aeth = peer_aeth(wire::Syndrome::Ack)
        });
        engine.receive(&mut env, &ack).unwrap();
        assert_eq!(engine.packets_in_flight(), 0);
        let mut qp = engine.qps.get_mut(&LOCAL_QPN).unwrap();
        let stale = qp.req.sent_end.sub(4);
        qp.corrupt_una_cache(stale);
        drop(qp);
        assert_eq!(engine.qps.flight(), 4, "stuck at the walked count again");
        assert_eq!(engine.flight_for_budget(4), 0);
        assert_eq!(engine.stats.flight_recounts, 2);
    }

    /// QPs without an ACK timeout (IBA: 0, no timer) keep the port's flight at its budget
    /// with no timer armed and a right count while their ACKs come and they send again: each
    /// refill walks only the QP that sent since the last one, not the whole table (every
    /// refill walked all 64 QPs before).
    #[test]
    fn qps_without_a_timer_at_the_full_budget_walk_only_what_changed() {
        const ROUNDS: u32 = 32;
        let mut env = TestEnv::new();
        let (mut engine, qpns) = engine_with_qps(&mut env, 64, &rts_modify());
        let write = |id| send_wr(id, WrOpcode::RdmaWrite, 8);
        for (id, &qpn) in qpns[..4].iter().enumerate() {
            engine.post_send(&mut env, qpn, write(id as u64)).unwrap();
        }
        assert_eq!(
            (engine.flight_for_budget(4), engine.next_deadline()),
            (4, None)
        );
        for round in 0..ROUNDS {
            let qpn = qpns[(round % 4) as usize];
            let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100 + round / 4, &[], |h| {
                h.bth.dest_qpn = qpn;
                h.aeth = peer_aeth(wire::Syndrome::Ack)
            });
            engine.receive(&mut env, &ack).unwrap();
            assert_eq!(
                engine.flight_for_budget(4),
                3,
                "round {round}: its ACK came"
            );
            engine
                .post_send(&mut env, qpn, write(4 + u64::from(round)))
                .unwrap();
            assert_eq!(
                engine.flight_for_budget(4),
                4,
                "round {round}: it sent again"
            );
        }
        assert_eq!(env.sent.len(), 4 + ROUNDS as usize);
        assert!(
            engine.stats.flight_recounts <= u64::from(ROUNDS) + 4,
            "QPs walked: {} (the QPs that sent, or the table at every refill?)",
            engine.stats.flight_recounts
        );
    }

    #[test]
    fn every_answer_owed_is_sent_and_only_once() {
        let mut env = TestEnv::new();
        let (mut engine, qpns) = engine_with_timed_qps(&mut env, 32);
        // Requests to every fourth QP, two to one of them: each owes one coalesced ACK.
        let asked: Vec<Qpn> = qpns.iter().copied().step_by(4).collect();
        for (n, &qpn) in asked.iter().chain(&asked[..1]).enumerate() {
            env.recv.push_back(RecvWr {
                wqe_index: 0,
                wr_id: n as u64,
                sges: Vec::new(),
            });
            let psn = if n < asked.len() { 100 } else { 101 };
            let send = packet_from_peer(op::RC_SEND_ONLY, psn, &[], |h| h.bth.dest_qpn = qpn);
            engine.receive(&mut env, &send).unwrap();
        }
        assert!(env.sent.is_empty(), "ACKs wait for the pass's answers");
        engine.send_answers(&mut env);
        let acks = env.sent_parsed();
        let mut acked: Vec<(Qpn, u32)> = acks
            .iter()
            .map(|p| (p.hdr.bth.dest_qpn, p.hdr.bth.psn.get()))
            .collect();
        acked.sort();
        let mut expected: Vec<(Qpn, u32)> = asked.iter().map(|_| PEER_QPN).zip([100; 8]).collect();
        expected[0].1 = 101;
        expected.sort();
        assert_eq!(acked, expected, "one ACK per QP that took requests");
        env.sent.clear();
        engine.send_answers(&mut env);
        engine.poll(&mut env);
        assert!(env.sent.is_empty(), "nothing is owed twice");
    }
}
