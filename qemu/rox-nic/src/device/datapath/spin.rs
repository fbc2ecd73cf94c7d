//! What the data path does when a pass found no work: poll again (spin), nap, or go idle.
//!
//! After its last work the loop spins [`SPIN_PERIOD`] (`--spin-us`), then naps on its fds
//! for longer and longer, then goes idle. A device may also spin longer while an answer is
//! expected soon (`--expect-spin-us`, off by default):
//!
//! - a peer's answer: RC requests of this device are unacknowledged (an ACK or a READ
//!   response is due within a round trip);
//! - the guest's answer, or the peer's next request: since the last idle period the device
//!   took RoCE packets in or wrote CQEs (a ping-pong's other side posts its reply a guest
//!   turn after its CQE).
//!
//! While the driver wakes the device through its posted-wake companion (`REG_WAKE_MODE`
//! posted), a wake costs the vCPU one eventfd write instead of a vfio-user round trip, and the
//! device goes idle after `posted_idle_after` (`--posted-idle-us`) instead of `idle_after`:
//! an idle device wakes as soon as the guest rings, where a napping one waits for its nap to
//! end (a nap asked 1 µs took 60-74 µs on a 2-core host, docs/benchmarks/session-11.md "Session 11:
//! the posted wake").
//!
//! While wakes are posted it spins `posted_spin` instead (`--posted-spin-us`, at most the
//! spin; the same 10 µs by default). With 0 the device sleeps as soon as a pass finds nothing
//! and the party whose turn it is (the driver storing a doorbell, the peer device sending a
//! frame) wakes it through an fd: in the host bench at 64 WQEs in flight, three threads on two
//! busy cores, the 10 µs spins held the core the awaited thread needed
//! (docs/benchmarks/session-14.md, "Session 14: the host engine at window 64");
//! in loopback guests it made ib_send_lat's typical bimodal, hence not the default.
//!
//! `--adaptive-spin true` spins the posted spin only where it brings the next work sooner
//! than sleeping at once: for each side of the device's work (the QP whose doorbell or packet
//! ended the idle period before, [`history`]; below), the backoff keeps the gaps of the recent idle
//! periods that followed it and spun and of those that slept, takes the way whose gaps are
//! shorter and the other one period in [`PROBE_EVERY`](history::PROBE_EVERY)
//! (docs/benchmarks/session-19-spin.md;
//! Session 15's first rule, "spin while half the periods ended within the spin", spun for the
//! side of a loopback ping-pong that the spin delayed and slept where sleeping cost more;
//! Session 19's one record for the whole device weighed a ping-pong's two sides together and
//! spun for both, docs/benchmarks/session-20-spin.md). While an answer is expected
//! (`--expect-spin-us`) the expect spin is spun and the record is neither asked nor told. On by
//! default since session 22 (`--adaptive-spin false` gives the plain spin): per side, loopback
//! latency was lower than the plain spin's in every cell of five pairs (two with a busy loop on
//! a host core, docs/benchmarks/session-20-spin.md); on a quiet host the host engine's medians
//! were 1.54M WRITE / 1.17M SEND msg/s against the plain spin's 1.05M / 0.94M (10 alternated
//! runs each, docs/benchmarks/session-21-lead.md); with a compiler on a host core loopback
//! ib_send_lat's typical was worse than the plain spin's in 1 of 3 pairs and the plain spin's
//! once 408 µs (docs/benchmarks/session-21-spin.md). Session 19's one record for the whole
//! device, the rule before per-side records, took loopback ib_send_lat's typical to
//! milliseconds in 2 of 3 fair runs on a host that lost a core (session-19-spin.md).
//!
//! A side is what the data path found first in the pass that ended an idle period: a QP's SQ
//! doorbell, its RQ doorbell (work only in the error state, where it flushes) and a packet for
//! it are different sides (`sq.rs`, `wire_io.rs`). A packet no QP took (the engine's checks
//! refused it: no such QP, a bad P_Key, one that did not parse) names no side, and a pass whose
//! work named none is [`Side::OTHER`]'s, as a frame for the netdev, an admin command or a CQ's
//! arm is. Chosen over "the period stays open and the drop records nothing": a drop is work all
//! the same (the loop restarts its spin after it, so the period did end and its gap is real for
//! the way it took), and a stream of drops would leave that rule's side deciding period after
//! period on a record that is never told; named after the packet's QP instead, stray packets
//! for QPNs that do not exist would each take one of the few records' entries from a side that
//! does (the review of session 20). `tests/device_spin_sides.rs` drives the wiring through a
//! device.
//!
//! The spin is bounded by the time since the last work, not by a count of events, so an idle
//! device (nothing arrives, nothing in flight) naps and then sleeps as before. A nap ends up
//! to the thread's timer slack late (the kernel's 50 µs unless `--nap-slack-us` sets it: a
//! 1 µs slack woke the device three times as often and made latency worse on a 2-core host,
//! docs/benchmarks/session-10.md "Session 10: timer slack for the data path's naps"). The longer
//! spin is off by default because a spinning device holds a core: with two guests' busy vCPUs
//! and two rox-nics on 2 cores, a crossing waited for the sender's spin to end, and
//! ib_send_lat got worse in every A/B run (docs/benchmarks/session-06.md, "What a crossing waits
//! for").

use std::time::Duration;

mod history;

pub use history::Side;
use history::SideHistories;

/// How long the loop spins (no system calls) after the last piece of work, by default
/// (`--spin-us`). While it spins it holds a core: on a 2-core host whose other core runs a
/// guest's busy vCPU, a peer device woken by the frame just sent waits for that core, and in
/// the two-guest ib_send_lat trace the receiver's wait ended a median 10 µs after the
/// sender's spin did. At 10 µs instead of 50 the crossing went from 68 to 28 µs and the round
/// trip from 415 to 164 µs (docs/benchmarks/session-06.md, "What a crossing waits for").
pub const SPIN_PERIOD: Duration = Duration::from_micros(10);
/// How long the loop spins after the last work while wakes are posted, by default
/// (`--posted-spin-us`): as long as with trapped wakes. 0 (sleep at once; a posted wake costs
/// the waker one eventfd write) made the host bench's window-64 turn 1.3-1.8x faster and
/// two-guest latency lower, but loopback ib_send_lat's typical landed at 27-32 µs (0.74-0.82x
/// rxe's) in 2 of 4 runs against 13.6-16.1 with the spin (docs/benchmarks/session-14.md, "Session
/// 14: the host engine at window 64"),
/// so it is an option, not the default.
pub const POSTED_SPIN_PERIOD: Duration = SPIN_PERIOD;
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

/// When a pass that found no work spins, naps or goes idle: the one answer to "spin or sleep",
/// from the configuration and, with `--adaptive-spin`, the device's recent idle periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// How long the loop spins after the last work ([`SPIN_PERIOD`] by default).
    pub spin: Duration,
    /// How long it spins after the last work while wakes are posted (at most `spin`;
    /// [`POSTED_SPIN_PERIOD`] by default).
    pub posted_spin: Duration,
    /// Whether the posted spin is spun only while it pays (the sides' records, [`history`]).
    pub adaptive: bool,
    /// How long it spins after the last work while an answer is expected (longer than
    /// `spin`, or it changes nothing: [`Backoff::uses_expectation`]).
    pub expect_spin: Duration,
    /// How long without work before the device goes idle.
    pub idle_after: Duration,
    /// How long without work before the device goes idle while wakes are posted (at most
    /// `idle_after`).
    pub posted_idle_after: Duration,
    /// Whether the posted spin paid off in the recent idle periods of each side (kept while
    /// it [`adapts`]).
    ///
    /// [`adapts`]: Backoff::adapts
    history: SideHistories,
}

impl Backoff {
    /// The backoff a device's configuration asks for. One rule is checked here, for every
    /// way a device is made (the command line, the benches, the tests): the spin while wakes
    /// are posted is at most the spin (a posted wake is the cheaper one, so a device never
    /// spins longer for it).
    pub fn new(cfg: &super::DeviceConfig) -> Result<Backoff, super::DeviceError> {
        if cfg.posted_spin > cfg.spin {
            return Err(super::DeviceError::PostedSpin {
                posted_spin: cfg.posted_spin,
                spin: cfg.spin,
            });
        }
        Ok(Backoff {
            spin: cfg.spin,
            posted_spin: cfg.posted_spin,
            adaptive: cfg.adaptive_spin,
            expect_spin: cfg.expect_spin,
            idle_after: cfg.idle_after,
            posted_idle_after: cfg.posted_idle_after,
            history: SideHistories::default(),
        })
    }

    /// Whether an expected answer changes anything (else the caller need not ask).
    pub fn uses_expectation(&self) -> bool {
        self.expect_spin > self.spin
    }

    /// Whether the posted spin adapts to the device's recent idle periods.
    fn adapts(&self) -> bool {
        self.adaptive && !self.posted_spin.is_zero()
    }

    /// Work came `gap` after the end of the last work (a sleep in between does not move that
    /// end), first from `side`: the idle period, if one began, ends, and the record of the
    /// side it followed (while the backoff adapts) takes its gap under the way it took; the
    /// next period follows `side`.
    pub fn work_came(&mut self, gap: Duration, side: Side) {
        if self.adapts() {
            self.history.work_came(gap, side);
        }
    }

    /// Tests only: the side of the idle period opened since the last call, if the sides'
    /// records were asked about one (the data path's log for the tests,
    /// `test_spin_log::SpinSideLog`).
    #[cfg(feature = "testkit")]
    pub fn take_opened(&mut self) -> Option<Side> {
        self.history.take_opened()
    }

    /// What to do `idle_for` after the last work, with an answer `expecting` or not, with
    /// wakes `posted` through the companion or trapped. Adaptive, a posted spin is spun only
    /// in idle periods where the record of the side they follow says it brings the next work
    /// sooner than sleeping at once (decided at the period's first pass); trapped wakes spin
    /// regardless (a trapped wake costs the vCPU a round trip, and without a spin such a
    /// device naps, a nap that ends late). An expected answer spins the expect spin, the
    /// record not asked: such a period neither spun the posted spin nor slept at once, and
    /// filed under either it would skew that way's gaps.
    pub fn next_step(&mut self, idle_for: Duration, expecting: bool, posted: bool) -> Step {
        let expect = if expecting {
            self.expect_spin
        } else {
            Duration::ZERO
        };
        let asked = posted && expect.is_zero() && self.adapts();
        if self.adapts() && !asked {
            self.history.unasked_period();
        }
        let spin = if !posted {
            self.spin
        } else if asked && !self.history.spins() {
            Duration::ZERO
        } else {
            self.posted_spin
        };
        let spin = spin.max(expect);
        let idle_after = if posted {
            self.posted_idle_after.min(self.idle_after)
        } else {
            self.idle_after
        };
        if idle_for < spin {
            Step::Spin
        } else if idle_for < idle_after {
            // Nap longer the longer nothing happened.
            Step::Nap((idle_for / 8).min(MAX_NAP))
        } else {
            Step::Idle
        }
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
    use super::history::{HISTORY, PROBE_EVERY};
    use super::*;

    const IDLE_AFTER: Duration = Duration::from_millis(20);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn backoff(expect_spin_us: u64) -> Backoff {
        Backoff {
            spin: SPIN_PERIOD,
            posted_spin: SPIN_PERIOD,
            adaptive: false,
            expect_spin: us(expect_spin_us),
            idle_after: IDLE_AFTER,
            posted_idle_after: us(200),
            history: SideHistories::default(),
        }
    }

    #[test]
    fn without_an_answer_expected_it_spins_only_the_short_period() {
        let mut b = backoff(200);
        assert_eq!(b.next_step(us(0), false, false), Step::Spin);
        assert_eq!(b.next_step(SPIN_PERIOD - us(1), false, false), Step::Spin);
        assert_eq!(b.next_step(us(80), false, false), Step::Nap(us(10)));
    }

    #[test]
    fn while_an_answer_is_expected_it_spins_longer_and_then_naps() {
        let mut b = backoff(200);
        assert!(b.uses_expectation());
        assert_eq!(b.next_step(us(80), true, false), Step::Spin);
        assert_eq!(b.next_step(us(199), true, false), Step::Spin);
        assert_eq!(b.next_step(us(200), true, false), Step::Nap(us(25)));
    }

    #[test]
    fn off_an_expected_answer_changes_nothing() {
        let mut b = backoff(0);
        assert!(!b.uses_expectation());
        assert_eq!(b.next_step(SPIN_PERIOD - us(1), true, false), Step::Spin);
        assert_eq!(b.next_step(us(80), true, false), Step::Nap(us(10)));
    }

    #[test]
    fn a_shorter_spin_naps_sooner() {
        let mut b = Backoff {
            spin: us(10),
            ..backoff(0)
        };
        assert_eq!(b.next_step(us(9), false, false), Step::Spin);
        assert_eq!(b.next_step(us(16), false, false), Step::Nap(us(2)));
        assert_eq!(
            Backoff {
                spin: Duration::ZERO,
                ..b
            }
            .next_step(us(0), false, false),
            Step::Nap(us(0)),
            "no spin: a nap at once"
        );
    }

    #[test]
    fn naps_grow_to_their_cap_and_the_device_goes_idle() {
        let mut b = backoff(200);
        assert_eq!(b.next_step(us(8_000), true, false), Step::Nap(MAX_NAP));
        assert_eq!(b.next_step(IDLE_AFTER, true, false), Step::Idle);
        assert_eq!(b.next_step(IDLE_AFTER, false, false), Step::Idle);
    }

    #[test]
    fn with_posted_wakes_it_goes_idle_sooner_after_its_spin() {
        let mut b = backoff(0);
        assert_eq!(b.next_step(us(5), false, true), Step::Spin);
        assert_eq!(b.next_step(us(96), false, true), Step::Nap(us(12)));
        assert_eq!(b.next_step(us(200), false, true), Step::Idle);
        assert_eq!(
            b.next_step(us(200), false, false),
            Step::Nap(us(25)),
            "trapped wakes keep the long grace"
        );
        let mut at_once = Backoff {
            posted_idle_after: Duration::ZERO,
            ..b
        };
        assert_eq!(at_once.next_step(us(5), false, true), Step::Spin);
        assert_eq!(at_once.next_step(SPIN_PERIOD, false, true), Step::Idle);
        let mut longer = Backoff {
            posted_idle_after: Duration::from_secs(1),
            ..b
        };
        assert_eq!(
            longer.next_step(IDLE_AFTER, false, true),
            Step::Idle,
            "never later than with trapped wakes"
        );
    }

    #[test]
    fn with_posted_wakes_it_spins_only_the_posted_spin() {
        assert_eq!(
            POSTED_SPIN_PERIOD, SPIN_PERIOD,
            "by default as trapped wakes"
        );
        let mut b = Backoff {
            posted_spin: Duration::ZERO,
            posted_idle_after: crate::device::DEFAULT_POSTED_IDLE_AFTER,
            ..backoff(0)
        };
        assert_eq!(
            b.next_step(us(0), false, true),
            Step::Idle,
            "posted wakes, posted spin 0: idle at once, no spin"
        );
        assert_eq!(
            b.next_step(us(0), false, false),
            Step::Spin,
            "trapped wakes keep the spin"
        );
        let mut some = Backoff {
            posted_spin: us(3),
            posted_idle_after: us(50),
            ..b
        };
        assert_eq!(some.next_step(us(2), false, true), Step::Spin);
        assert_eq!(some.next_step(us(8), false, true), Step::Nap(us(1)));
        let mut expecting = Backoff {
            expect_spin: us(40),
            ..some
        };
        assert_eq!(
            expecting.next_step(us(30), true, true),
            Step::Spin,
            "an expected answer still spins as asked"
        );
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

    #[test]
    fn a_posted_spin_longer_than_the_spin_is_refused_where_the_device_is_made() {
        let mut cfg = crate::device::DeviceConfig::new([2, 0, 0, 0, 0, 1]);
        cfg.spin = us(50);
        cfg.posted_spin = us(50);
        assert_eq!(Backoff::new(&cfg).unwrap().posted_spin, us(50));
        cfg.posted_spin = us(51);
        let err = Backoff::new(&cfg).unwrap_err().to_string();
        assert!(err.contains("at most the spin"), "{err}");
    }

    /// One idle period on `b` with posted wakes, in a world where work comes `spun_us` after
    /// the last work when the device spins and `slept_us` when it sleeps at once: the step of
    /// its first pass without work, then the work that ends it (from nothing QP-specific).
    fn posted_period(b: &mut Backoff, spun_us: u64, slept_us: u64) -> Step {
        let step = b.next_step(us(0), false, true);
        assert_eq!(
            b.next_step(us(0), false, true),
            step,
            "decided once per period"
        );
        b.work_came(
            us(if step == Step::Spin {
                spun_us
            } else {
                slept_us
            }),
            Side::OTHER,
        );
        step
    }

    #[test]
    fn an_adaptive_backoff_sleeps_at_once_where_its_posted_spin_delays_the_work() {
        let adaptive = Backoff {
            adaptive: true,
            posted_idle_after: Duration::ZERO,
            ..backoff(0)
        };
        let mut b = adaptive;
        for _ in 0..4 * HISTORY {
            posted_period(&mut b, 30, 15);
        }
        let idle = (0..PROBE_EVERY)
            .filter(|_| posted_period(&mut b, 30, 15) == Step::Idle)
            .count() as u32;
        assert_eq!(
            idle,
            PROBE_EVERY - 1,
            "posted wakes, a spin that delays the work: idle at once, as a posted spin of 0"
        );
        let before = b.history;
        for _ in 0..20 {
            assert_eq!(
                b.next_step(us(0), false, false),
                Step::Spin,
                "trapped wakes spin regardless"
            );
            b.work_came(us(30), Side::OTHER);
        }
        assert_eq!(b.history, before, "trapped wakes' periods are not weighed");
        assert_eq!(
            Backoff {
                adaptive: false,
                ..b
            }
            .next_step(us(0), false, true),
            Step::Spin,
            "off, the posted spin is spun whatever the history"
        );
        // The world changes: now sleeping costs more than the spin.
        let mut again = 0;
        let spun_of_seven = |b: &mut Backoff| {
            (0..PROBE_EVERY)
                .filter(|_| posted_period(b, 12, 40) == Step::Spin)
                .count()
        };
        while spun_of_seven(&mut b) < (PROBE_EVERY - 1) as usize {
            again += 1;
            assert!(again < 10, "a spin that pays never came back");
        }
        let mut no_spin = Backoff {
            posted_spin: Duration::ZERO,
            ..adaptive
        };
        for _ in 0..20 {
            assert_eq!(posted_period(&mut no_spin, 30, 15), Step::Idle);
        }
        assert_eq!(
            no_spin.history, adaptive.history,
            "no posted spin: nothing to adapt, nothing recorded"
        );
    }

    #[test]
    fn an_expected_answer_spins_the_expect_spin_and_leaves_the_record_alone() {
        let mut b = Backoff {
            adaptive: true,
            posted_idle_after: Duration::ZERO,
            ..backoff(200)
        };
        for _ in 0..4 * HISTORY {
            posted_period(&mut b, 30, 15);
        }
        let before = b.history;
        for _ in 0..3 * HISTORY {
            assert_eq!(
                b.next_step(us(150), true, true),
                Step::Spin,
                "an expected answer spins the expect spin whatever the record"
            );
            // The answer came within the expect spin: no way of the record's took it.
            b.work_came(us(160), Side::OTHER);
        }
        assert_eq!(
            b.history, before,
            "the expect spin's periods are filed under neither way"
        );
        let idle = (0..PROBE_EVERY)
            .filter(|_| posted_period(&mut b, 30, 15) == Step::Idle)
            .count() as u32;
        assert_eq!(idle, PROBE_EVERY - 1, "the record's way is as before");
    }
}
