//! What the retransmission timer counts: from when a packet left the device to when the device
//! last read its wire for the answer, not the device's thread's clock around them.
//!
//! A data-path pass builds packets (the engine arms the timer then), reads the wire, runs the
//! timers and at its end flushes the port (a receive batch that made answers flushes them
//! at once, docs/transport.md "When answers leave"). On a loaded host the thread can lose its core
//! anywhere in that pass for longer than the RTO floor (docs/benchmarks/session-17.md, "Session 17:
//! 256 QPs, retransmissions traced").
//! Measured by the thread's clock, a stall between building a
//! packet and the flush timed out (or probed) a packet that had not left yet, and a stall
//! between the wire read and the timers timed out QPs whose ACKs had arrived and sat unread
//! in the port's socket: retransmissions of the device's own making, with nothing lost and
//! the peer on time. So:
//! - a timer armed for packets just queued counts from the flush that sent them
//!   ([`Engine::packets_left`], called when the port's queue is empty again);
//! - the timers are judged at the time the wire was last read ([`Engine::wire_read`]), so a
//!   timer is due only if its deadline passed before a look at the wire found no answer.
//!
//! Left: a read takes at most `RX_BATCHES_PER_PASS` batches, so answers beyond that many
//! frames, queued before the read, are still unread when the timers run.

use super::super::qp::Qp;
use super::super::Engine;
use crate::roce::DeviceEnv;

impl Qp {
    /// Arms the retransmission timer at `now` for packets just queued on the port: it is
    /// moved to count from their departure when they leave ([`Self::packets_left_at`]).
    pub(in crate::roce::engine) fn arm_timer_on_departure(&mut self, now: u64) {
        self.arm_timer(now);
        self.req.timer_queued_at = self.req.timer_deadline.map(|_| now);
    }

    /// The packets this QP queued left the device at `now`: a timer armed when they were
    /// queued (and not armed again since) runs from now, as long as it was to run.
    pub(in crate::roce::engine) fn packets_left_at(&mut self, now: u64) {
        let Some(queued_at) = self.req.timer_queued_at.take() else {
            return;
        };
        if let Some(deadline) = &mut self.req.timer_deadline {
            *deadline += now.saturating_sub(queued_at);
        }
    }
}

impl Engine {
    /// The port sent everything queued on it (its queue is empty) at `env`'s time now: the
    /// timers armed for those packets count from now. Reads the clock only if some were.
    pub fn packets_left(&mut self, env: &dyn DeviceEnv) {
        if self.qps.departing_is_empty() {
            return;
        }
        let now = env.now_ns();
        self.qps.for_each_departing(|qp| qp.packets_left_at(now));
    }

    /// The data path began reading its wire at `now` (ns of the engine's clock): the answers
    /// that arrived before it are taken before the timers next run.
    pub fn wire_read(&mut self, now: u64) {
        self.answers_read_at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_env::*;
    use super::*;
    use crate::roce::wire::{self, opcode as op};
    use crate::roce::*;

    const MS: u64 = 1_000_000;
    /// The QP's ACK timeout attribute (14: 67.1 ms), its RTO before a first round trip.
    const RTO: u64 = 4096 << 14;

    /// An engine with one RC QP that sent a one-packet SEND at time 0 (PSN 100).
    fn sent_at_zero(env: &mut TestEnv) -> Engine {
        let (mut engine, _) = engine_with_timed_qps(env, 1);
        env.now = 0;
        let wr = send_wr(1, WrOpcode::Send, 8);
        engine.post_send(env, LOCAL_QPN, wr).unwrap();
        assert_eq!(env.sent.len(), 1);
        engine
    }

    fn deadline(engine: &Engine) -> Option<u64> {
        engine.qps.get(&LOCAL_QPN).unwrap().req.timer_deadline
    }

    fn ack(engine: &mut Engine, env: &mut TestEnv) {
        let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
            h.aeth = Some(wire::Aeth {
                syndrome: wire::Syndrome::Ack,
                msn: Msn::default(),
            })
        });
        engine.receive(env, &ack).unwrap();
    }

    #[test]
    fn a_timer_armed_for_queued_packets_counts_from_when_they_left() {
        let mut env = TestEnv::new();
        let mut engine = sent_at_zero(&mut env);
        assert_eq!(deadline(&engine), Some(RTO));
        // The thread lost its core before the port's flush: the packet left 30 ms later.
        env.now = 30 * MS;
        engine.packets_left(&env);
        assert_eq!(deadline(&engine), Some(30 * MS + RTO));
        // Once only: the next flush had nothing of this QP's.
        env.now = 40 * MS;
        engine.packets_left(&env);
        assert_eq!(deadline(&engine), Some(30 * MS + RTO));
        env.now = RTO + 10 * MS;
        engine.poll(&mut env);
        assert_eq!(
            engine.stats().retransmit_timeouts,
            0,
            "67 ms after it was queued"
        );
        env.now = 30 * MS + RTO;
        engine.poll(&mut env);
        assert_eq!(engine.stats().retransmit_timeouts, 1, "67 ms after it left");
    }

    #[test]
    fn the_timers_are_judged_at_the_last_read_of_the_wire() {
        let mut env = TestEnv::new();
        let mut engine = sent_at_zero(&mut env);
        engine.packets_left(&env);
        // The wire was read before the deadline; the thread then stalled past it, while the
        // ACK arrived: not a timeout, the ACK is taken at the next read.
        engine.wire_read(RTO - MS);
        env.now = RTO + 50 * MS;
        engine.poll(&mut env);
        assert_eq!(engine.stats().retransmit_timeouts, 0);
        engine.wire_read(env.now);
        ack(&mut engine, &mut env);
        engine.poll(&mut env);
        assert_eq!(engine.stats().retransmit_timeouts, 0);
        assert_eq!(deadline(&engine), None, "acknowledged");
        // A read after the deadline that found no ACK: the timer fires.
        env.now = 100 * MS;
        let wr = send_wr(2, WrOpcode::Send, 8);
        engine.post_send(&mut env, LOCAL_QPN, wr).unwrap();
        engine.packets_left(&env);
        engine.wire_read(100 * MS + RTO);
        env.now = 100 * MS + RTO + 5 * MS;
        engine.poll(&mut env);
        assert_eq!(engine.stats().retransmit_timeouts, 1);
    }
}
