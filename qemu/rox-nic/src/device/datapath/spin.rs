//! What the data path does when a pass found no work: poll again (spin), nap, or go idle.
//!
//! A nap is a `ppoll` with a timeout, and on a host whose cores are busy with vCPU threads it
//! overshoots: asked 6 µs, it took 80–94 µs in the trace of a two-guest ib_send_lat
//! (docs/debugging.md), and that overshoot was most of each bridge crossing. So while an
//! answer is expected soon the loop keeps polling for longer before the first nap:
//!
//! - a peer's answer: RC requests of this device are unacknowledged (an ACK or a READ
//!   response is due within a round trip);
//! - the guest's answer, or the peer's next request: since the last idle period the device
//!   took RoCE packets in or wrote CQEs (a ping-pong's other side posts its reply a guest
//!   turn after its CQE).
//!
//! The spin is bounded by the time since the last work ([`EXPECT_SPIN`]), not by a count of
//! events, so a device with nothing expected spins only [`SPIN_PERIOD`] and an idle device
//! (nothing arrives, nothing in flight) naps and then sleeps as before.

use std::time::Duration;

/// How long the loop spins (no system calls) after the last piece of work.
pub const SPIN_PERIOD: Duration = Duration::from_micros(50);
/// How long it spins after the last work while an answer is expected: about one guest turn
/// plus a bridge crossing of a ping-pong on a quiet host (135 + 15 µs in the trace), so a
/// conversation's next event usually lands inside the spin.
pub const EXPECT_SPIN: Duration = Duration::from_micros(200);
/// Longest nap between polls while backing off (before going idle).
pub const MAX_NAP: Duration = Duration::from_micros(500);

/// The next step of a pass that found no work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Look again at once.
    Spin,
    /// Sleep on the fds at most this long.
    Nap(Duration),
    /// Announce idleness and sleep until woken.
    Idle,
}

/// What to do `idle_for` after the last work, with an answer `expecting` or not, for a
/// device that goes idle after `idle_after`.
pub fn next_step(idle_for: Duration, expecting: bool, idle_after: Duration) -> Step {
    let spin = if expecting { EXPECT_SPIN } else { SPIN_PERIOD };
    if idle_for < spin {
        Step::Spin
    } else if idle_for < idle_after {
        // Nap longer the longer nothing happened.
        Step::Nap((idle_for / 8).min(MAX_NAP))
    } else {
        Step::Idle
    }
}

/// Whether the device expects an answer: decided once per idle period (at its first pass
/// without work) from the counters of what the device took in and wrote, and from what it
/// has in flight.
#[derive(Debug, Default)]
pub struct Expectation {
    /// RoCE packets received and CQEs written, as of the last decision.
    rx_packets_seen: u64,
    cqes_seen: u64,
    /// This idle period's decision (None: work was done since).
    decided: Option<bool>,
}

impl Expectation {
    /// Work was done: the next pass without work decides again.
    pub fn work_done(&mut self) {
        self.decided = None;
    }

    /// This idle period's decision, made now if not yet: true if packets came in or CQEs
    /// were written since the last decision, or `in_flight()` (RC request packets
    /// unacknowledged) is not zero. `in_flight` walks the QPs: it is called once per period.
    pub fn expecting(
        &mut self,
        rx_packets: u64,
        cqes: u64,
        in_flight: impl FnOnce() -> u64,
    ) -> bool {
        if let Some(d) = self.decided {
            return d;
        }
        let fresh = rx_packets != self.rx_packets_seen || cqes != self.cqes_seen;
        self.rx_packets_seen = rx_packets;
        self.cqes_seen = cqes;
        let d = fresh || in_flight() > 0;
        self.decided = Some(d);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE_AFTER: Duration = Duration::from_millis(20);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn without_an_answer_expected_it_spins_only_the_short_period() {
        assert_eq!(next_step(us(0), false, IDLE_AFTER), Step::Spin);
        assert_eq!(next_step(us(49), false, IDLE_AFTER), Step::Spin);
        assert_eq!(next_step(us(80), false, IDLE_AFTER), Step::Nap(us(10)));
    }

    #[test]
    fn while_an_answer_is_expected_it_spins_longer_and_then_naps() {
        assert_eq!(next_step(us(80), true, IDLE_AFTER), Step::Spin);
        assert_eq!(next_step(us(199), true, IDLE_AFTER), Step::Spin);
        assert_eq!(next_step(us(200), true, IDLE_AFTER), Step::Nap(us(25)));
    }

    #[test]
    fn naps_grow_to_their_cap_and_the_device_goes_idle() {
        assert_eq!(next_step(us(8_000), true, IDLE_AFTER), Step::Nap(MAX_NAP));
        assert_eq!(next_step(IDLE_AFTER, true, IDLE_AFTER), Step::Idle);
        assert_eq!(next_step(IDLE_AFTER, false, IDLE_AFTER), Step::Idle);
    }

    #[test]
    fn packets_in_or_cqes_out_make_one_idle_period_expecting() {
        let mut e = Expectation::default();
        assert!(!e.expecting(0, 0, || 0), "nothing happened");
        e.work_done();
        assert!(e.expecting(1, 0, || 0), "a packet came in");
        e.work_done();
        assert!(!e.expecting(1, 0, || 0), "nothing new since");
        e.work_done();
        assert!(e.expecting(1, 1, || 0), "a CQE was written");
        e.work_done();
        assert!(e.expecting(1, 1, || 3), "requests are in flight");
    }

    #[test]
    fn a_period_decides_once_and_walks_the_qps_at_most_once() {
        let mut e = Expectation::default();
        let mut walks = 0;
        for _ in 0..5 {
            assert!(e.expecting(0, 0, || {
                walks += 1;
                1
            }));
        }
        assert_eq!(walks, 1);
        // Within the period, new counters do not change the decision...
        e.decided = Some(false);
        assert!(!e.expecting(9, 9, || 1));
        // ...the next period sees them.
        e.work_done();
        assert!(e.expecting(9, 9, || 0));
    }
}
