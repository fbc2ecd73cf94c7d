//! What the retransmission timer counts: from when a packet left the device to when the device
//! last read its wire for the answer, not the device's thread's clock around them.
//!
//! A data-path pass builds packets (the engine arms the timer then), reads the wire, runs the
//! timers and only at its end flushes the port. On a loaded host the thread can lose its core
//! anywhere in that pass for longer than the RTO floor (docs/benchmarks.md, "Session 17: 256
//! QPs, retransmissions traced"). Measured by the thread's clock, a stall between building a
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
