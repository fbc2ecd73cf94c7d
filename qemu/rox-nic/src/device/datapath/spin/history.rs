//! The adaptive spin's record (`--adaptive-spin`): for each side of the device's work, which
//! way of ending an idle period — spinning the posted spin, or sleeping at once — brought the
//! next work sooner.
//!
//! Why per side: a ping-pong's idle periods alternate between its two sides, and the two can
//! want opposite ways. In a loopback guest whose data path shared the client's core, the
//! client's next SEND came 14 µs after a device that slept at once and 20–25 µs after one that
//! spun (the spin held the core the client needed), while the server's came 35–45 µs after a
//! sleep and within the spin when the device spun; one history for the whole device weighed
//! the mix and spun for both (docs/benchmarks/session-19-spin.md, 16:40:22). So each idle
//! period is weighed under the [`Side`] it follows — what ended the idle period before it: the
//! QP whose doorbell the device found, or the QP a received packet was for (a request, or an
//! answer: an ACK, a READ or atomic response), each its own side — and decided from that
//! side's record. A ping-pong's period that follows the client's doorbell always awaits the
//! server, and the one that follows the server's awaits the client.

use std::time::Duration;

use rox_uapi::ids::Qpn;

/// The side of the device's work an idle period follows: what ended the idle period before
/// it (see the module's head), or [`Side::OTHER`] for work that came from nothing QP-specific
/// (an admin command, a control message, a timer, a CQ's arm, a frame for the netdev, a packet
/// the engine dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Side(u32);

/// [`Side`]'s bits above a QPN's 24: a packet that was a request, one that was an answer, a
/// doorbell of the receive queue (none of them: of the send queue).
const SIDE_REQUEST: u32 = 1 << 24;
const SIDE_ANSWER: u32 = 1 << 25;
const SIDE_RQ_DOORBELL: u32 = 1 << 26;

impl Side {
    /// Work that came from nothing QP-specific.
    pub const OTHER: Side = Side(u32::MAX);

    /// A doorbell of QP `qpn`'s send queue: WQEs the device fetched (and sent, or flushed).
    pub fn sq_doorbell(qpn: Qpn) -> Side {
        Side(qpn.get())
    }

    /// A doorbell of QP `qpn`'s receive queue that was work: receive WQEs flushed in the error
    /// state (elsewhere an RQ doorbell is no work, `process_rq`). Its own side: what follows a
    /// QP's flushed receives is not what follows its sends.
    pub fn rq_doorbell(qpn: Qpn) -> Side {
        Side(qpn.get() | SIDE_RQ_DOORBELL)
    }

    /// A packet received for QP `qpn`: an `answer` (its requester's: ACK, READ or atomic
    /// response) or a request (its responder's).
    pub fn packet(qpn: Qpn, answer: bool) -> Side {
        Side(qpn.get() | if answer { SIDE_ANSWER } else { SIDE_REQUEST })
    }
}

/// How many sides keep a record of their own: a ping-pong has two per device (one in each
/// direction), a device with a few QPs a few more. The side used least recently gives its
/// entry up to a new one, which starts from the whole device's record (so a device with more
/// sides than entries in turn decides as one record for the device would, not as a new
/// record that has tried nothing: such a record takes a tie, and a tie sleeps).
const SIDES: usize = 8;

/// The records of the device's sides: one for [`Side::OTHER`] (never given up) and up to
/// [`SIDES`] more, and the idle period now open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SideHistories {
    other: SpinHistory,
    /// Every period's gap under the way it took, whichever side it followed: what a new
    /// side's record starts from.
    device: SpinHistory,
    sides: [Option<SideEntry>; SIDES],
    /// The side the next idle period follows (what ended the last one).
    follows: Side,
    /// Whose record decided the open idle period (None: none is open).
    open: Option<Slot>,
    /// Counts decisions: an entry's `used` says how recently it decided.
    clock: u64,
    /// Tests only: the side of the last idle period the records were asked about, until the
    /// data path takes it for the test's log (`Backoff::take_opened`).
    #[cfg(feature = "testkit")]
    opened: Option<Side>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SideEntry {
    side: Side,
    history: SpinHistory,
    used: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Other,
    Side(usize),
    /// A period the records are not asked about (an expected answer's spin, a trapped wake):
    /// nothing is recorded, but the work that ends it names the side the next follows.
    Unasked,
}

impl Default for SideHistories {
    fn default() -> SideHistories {
        SideHistories {
            other: SpinHistory::default(),
            device: SpinHistory::default(),
            sides: [None; SIDES],
            follows: Side::OTHER,
            open: None,
            clock: 0,
            #[cfg(feature = "testkit")]
            opened: None,
        }
    }
}

impl SideHistories {
    /// Whether this idle period spins: decided at its first pass without work from the record
    /// of the side it follows, then kept.
    pub(super) fn spins(&mut self) -> bool {
        let slot = match self.open {
            Some(slot) if slot != Slot::Unasked => slot,
            _ => {
                let slot = self.slot_of(self.follows);
                self.open = Some(slot);
                #[cfg(feature = "testkit")]
                {
                    self.opened = Some(self.follows);
                }
                slot
            }
        };
        self.history(slot).spins()
    }

    /// Work came `gap` after the last work, first from `side`: an open idle period ends, its
    /// gap goes to the record that decided it, and the next period follows `side`. Work after
    /// work (no period open) changes nothing: a burst's later passes are the same side's.
    pub(super) fn work_came(&mut self, gap: Duration, side: Side) {
        if let Some(slot) = self.open.take() {
            if slot != Slot::Unasked {
                let history = self.history(slot);
                let way = history.spins;
                history.work_came(gap);
                if let Some(spun) = way {
                    self.device.record(spun, gap);
                }
            }
            self.follows = side;
        }
    }

    /// Tests only: the side of the idle period opened since the last call, if the records
    /// were asked about one.
    #[cfg(feature = "testkit")]
    pub(super) fn take_opened(&mut self) -> Option<Side> {
        self.opened.take()
    }

    /// A pass without work in an idle period the records are not asked about: the period is
    /// open all the same, so the work that ends it names the side the next one follows.
    pub(super) fn unasked_period(&mut self) {
        if self.open.is_none() {
            self.open = Some(Slot::Unasked);
        }
    }

    fn history(&mut self, slot: Slot) -> &mut SpinHistory {
        match slot {
            // An unasked period is never asked or told (`spins`, `work_came`).
            Slot::Other | Slot::Unasked => &mut self.other,
            Slot::Side(i) => match &mut self.sides[i] {
                Some(entry) => &mut entry.history,
                None => &mut self.other,
            },
        }
    }

    /// `side`'s entry, made if it has none (in a free one, else in the least recently used).
    fn slot_of(&mut self, side: Side) -> Slot {
        if side == Side::OTHER {
            return Slot::Other;
        }
        self.clock += 1;
        let used = self.clock;
        if let Some(i) = self
            .sides
            .iter()
            .position(|e| e.is_some_and(|e| e.side == side))
        {
            if let Some(entry) = &mut self.sides[i] {
                entry.used = used;
            }
            return Slot::Side(i);
        }
        let i = self
            .sides
            .iter()
            .position(Option::is_none)
            .unwrap_or_else(|| {
                (0..SIDES)
                    .min_by_key(|&i| self.sides[i].map_or(0, |e| e.used))
                    .unwrap_or(0)
            });
        self.sides[i] = Some(SideEntry {
            side,
            history: SpinHistory {
                spun: self.device.spun,
                slept: self.device.slept,
                ..SpinHistory::default()
            },
            used,
        });
        Slot::Side(i)
    }
}

/// How many recent idle periods of each way (spun, slept at once) [`SpinHistory`] weighs.
pub(super) const HISTORY: usize = 8;
/// Every this many idle periods of a record the device takes the way the record does not
/// prefer, so that way's gaps stay fresh. Odd: where one record holds periods of two sides
/// that alternate ([`Side::OTHER`]'s), an even interval would try the other way on one side
/// only.
pub const PROBE_EVERY: u32 = 7;

/// How much sooner a spin's typical gap must be than a sleep's for the device to spin: at least
/// this many µs, and at least 1/[`SPIN_MARGIN_DIV`] of the sleep's gap. Where the way makes no
/// difference (the gaps are the workload's), the two typicals differ by noise alone, and
/// without a margin that noise would make the device spin in about half its periods.
const SPIN_MARGIN_MIN_US: u64 = 2;
const SPIN_MARGIN_DIV: u64 = 8;

/// Which way of ending an idle period brings the next work sooner on one side of the device's
/// work now: spinning the posted spin, or sleeping at once (a posted wake then ends the
/// sleep). Each way keeps the gaps (from the last work to the next) of its last [`HISTORY`]
/// periods; the device takes the
/// way whose typical gap ([`Gaps::typical`]) is shorter, sleeping unless the spin's is shorter
/// by a margin (a spin must bring the work sooner to earn the core it holds), and every
/// [`PROBE_EVERY`]th period the other.
///
/// Why the gap itself and not "did the work come within the spin": where the device's spin
/// holds the core the awaited party needs, a spin only delays it (the host bench at window 64;
/// a loopback guest whose vCPU the data path preempted answered 13 µs after the device slept
/// at once and 23 µs after a 10 µs spin), and where it does not, sleeping can cost more than
/// the spin (a loopback guest with both vCPUs busy answered 35-45 µs after the device slept at
/// once and 20-25 µs after a spin, docs/benchmarks/session-19-spin.md). Only the gaps say which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SpinHistory {
    /// Gaps of the last periods that spun.
    spun: Gaps,
    /// Gaps of the last periods that slept at once.
    slept: Gaps,
    /// Periods since the last one that took the way not preferred.
    unprobed: u32,
    /// Whether the current idle period spins (None: not decided yet, work was done since).
    spins: Option<bool>,
}

impl Default for SpinHistory {
    /// A new record has no gaps: both ways count as instant until tried, so it tries both
    /// before it prefers one.
    fn default() -> SpinHistory {
        SpinHistory {
            spun: Gaps::default(),
            slept: Gaps::default(),
            unprobed: 0,
            spins: None,
        }
    }
}

impl SpinHistory {
    /// Whether this idle period spins: decided at its first pass without work, then kept.
    fn spins(&mut self) -> bool {
        if let Some(s) = self.spins {
            return s;
        }
        let slept = self.slept.typical();
        let prefer =
            self.spun.typical() + (slept / SPIN_MARGIN_DIV).max(SPIN_MARGIN_MIN_US) < slept;
        let probe = self.unprobed + 1 >= PROBE_EVERY;
        self.unprobed = if probe { 0 } else { self.unprobed + 1 };
        let s = prefer != probe;
        self.spins = Some(s);
        s
    }

    /// Work came `gap` after the last work: the idle period ends and its gap is recorded under
    /// the way it took (a no-op unless one was decided, i.e. a pass without work came between).
    fn work_came(&mut self, gap: Duration) {
        if let Some(spun) = self.spins.take() {
            self.record(spun, gap);
        }
    }

    /// A period that `spun` (or slept at once) ended `gap` after the last work.
    fn record(&mut self, spun: bool, gap: Duration) {
        if spun {
            self.spun.record(gap);
        } else {
            self.slept.record(gap);
        }
    }
}

/// The last [`HISTORY`] gaps of one way, in µs (saturating: a device idle for an hour weighs
/// as one idle for 71 minutes), oldest overwritten first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Gaps {
    us: [u32; HISTORY],
    /// How many of `us` were recorded (at most [`HISTORY`]).
    len: usize,
    next: usize,
}

impl Gaps {
    fn record(&mut self, gap: Duration) {
        self.us[self.next] = u32::try_from(gap.as_micros()).unwrap_or(u32::MAX);
        self.next = (self.next + 1) % HISTORY;
        self.len = (self.len + 1).min(HISTORY);
    }

    /// The mean of the middle half of the recorded gaps (0 if none: an untried way looks
    /// instant, so it is tried). Two long gaps (a host that took the core away for a tick)
    /// move it by a place each, not by their length; a mix of two kinds of period (a
    /// ping-pong's two sides) weighs both.
    fn typical(&self) -> u64 {
        let mut sorted = self.us;
        let recorded = &mut sorted[..self.len];
        recorded.sort_unstable();
        let middle = &recorded[self.len / 4..self.len - self.len / 4];
        let sum: u64 = middle.iter().map(|&g| u64::from(g)).sum();
        sum.checked_div(middle.len() as u64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn qp(n: u32) -> Qpn {
        Qpn::new(n).unwrap()
    }

    /// One idle period on `h` in a world where work comes `spun_us` after the last work when
    /// the device spins and `slept_us` when it sleeps at once; returns whether it spun.
    fn period(h: &mut SpinHistory, spun_us: u64, slept_us: u64) -> bool {
        let spun = h.spins();
        assert_eq!(h.spins(), spun, "decided once per period");
        h.work_came(us(if spun { spun_us } else { slept_us }));
        spun
    }

    /// How many of `n` periods spin after a new device's first 4 × [`HISTORY`] in this world.
    fn spun_of(n: u32, spun_us: u64, slept_us: u64) -> u32 {
        let mut h = SpinHistory::default();
        for _ in 0..4 * HISTORY {
            period(&mut h, spun_us, slept_us);
        }
        (0..n).filter(|_| period(&mut h, spun_us, slept_us)).count() as u32
    }

    #[test]
    fn where_the_spin_delays_the_awaited_party_the_device_sleeps_at_once_and_probes() {
        // A loopback guest whose vCPU the data path preempted: it answers 13 µs after the
        // device slept at once, 23 µs after a 10 µs spin. The host bench at window 64 alike.
        assert_eq!(
            spun_of(10 * PROBE_EVERY, 23, 13),
            10,
            "only one probe in {PROBE_EVERY} periods spins"
        );
    }

    #[test]
    fn where_sleeping_costs_more_than_the_spin_the_device_spins_even_past_the_spin() {
        // A loopback guest with both vCPUs busy: 35-45 µs after the device slept at once,
        // 20-25 µs after a spin. Work later than the spin, yet the spin brought it sooner.
        assert_eq!(
            spun_of(10 * PROBE_EVERY, 22, 40),
            10 * (PROBE_EVERY - 1),
            "all but one period in {PROBE_EVERY} spin"
        );
    }

    #[test]
    fn a_ping_pongs_two_sides_are_weighed_together() {
        // Loopback ib_send_lat with the data path on the client's core: the server answers
        // within a pass either way, the client 13 µs after a sleep or 23 after a spin. The
        // quick side must not make the device spin for the slow one.
        let mut h = SpinHistory::default();
        let mut side = 0;
        let mut spun = 0;
        for i in 0..20 * PROBE_EVERY {
            side ^= 1;
            let s = if side == 0 {
                period(&mut h, 1, 1)
            } else {
                period(&mut h, 23, 13)
            };
            if i >= 6 * PROBE_EVERY && s {
                spun += 1;
            }
        }
        assert_eq!(spun, 14, "only the probes spin");
    }

    #[test]
    fn a_long_gap_now_and_then_does_not_change_the_way() {
        let mut h = SpinHistory::default();
        for _ in 0..4 * HISTORY {
            period(&mut h, 22, 40);
        }
        // One period in eight lost the core for a tick, whichever way it took.
        let spun = (0..8 * PROBE_EVERY)
            .filter(|i| {
                let tick = if i % 8 == 0 { 4_000 } else { 0 };
                period(&mut h, 22 + tick, 40 + tick)
            })
            .count() as u32;
        assert_eq!(spun, 8 * (PROBE_EVERY - 1), "still spins, probes aside");
    }

    #[test]
    fn where_the_way_makes_no_difference_the_device_sleeps_probes_aside() {
        // The gaps are the workload's (±10 % noise, the same either way): only the probes spin.
        for base in [30, 200, 1_000, 100_000] {
            let mut h = SpinHistory::default();
            let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut noisy = || {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                base * (90 + (seed >> 33) % 21) / 100
            };
            for _ in 0..4 * HISTORY {
                let gap = noisy();
                period(&mut h, gap, gap);
            }
            let n = 100 * PROBE_EVERY;
            let spun = (0..n)
                .filter(|_| {
                    let gap = noisy();
                    period(&mut h, gap, gap)
                })
                .count() as u32;
            assert_eq!(
                spun,
                n / PROBE_EVERY,
                "gaps of {base} µs: only the probes spin"
            );
        }
    }

    #[test]
    fn a_device_tries_both_ways_before_it_prefers_one() {
        let mut h = SpinHistory::default();
        let first: Vec<bool> = (0..2 * HISTORY).map(|_| period(&mut h, 23, 13)).collect();
        assert!(!first[0], "a tie sleeps: the spin must earn its core");
        let spun = first.iter().filter(|&&s| s).count();
        assert!(
            (3..HISTORY).contains(&spun),
            "{spun} spins among the first {} periods: {first:?}",
            2 * HISTORY
        );
    }

    #[test]
    fn a_period_without_a_pass_that_found_nothing_is_not_counted() {
        let mut h = SpinHistory::default();
        for _ in 0..4 * HISTORY {
            period(&mut h, 23, 13);
        }
        let before = h;
        h.work_came(us(3));
        assert_eq!(h, before, "work after work: no idle period");
    }

    /// A loopback ping-pong on one device, `rounds` round trips: the period that follows the
    /// client's doorbell awaits the server, whose doorbell comes 5 µs after the last work when
    /// the device spins and 40 µs when it sleeps at once (the server's vCPU was on the other
    /// core); the one that follows the server's doorbell awaits the client, 23 µs after a spin
    /// and 13 after a sleep (the spin held the client's core). Returns how many periods spun
    /// awaiting each side, (server, client), after the first 6 × [`PROBE_EVERY`] rounds.
    fn ping_pong(h: &mut SideHistories, rounds: u32) -> (u32, u32) {
        let (client, server) = (Side::sq_doorbell(qp(3)), Side::sq_doorbell(qp(2)));
        let mut spun = (0, 0);
        let mut last = client;
        for period in 0..2 * rounds {
            let spins = h.spins();
            let (gap, next) = if last == client {
                (if spins { 5 } else { 40 }, server)
            } else {
                (if spins { 23 } else { 13 }, client)
            };
            if period >= 12 * PROBE_EVERY && spins {
                if last == client {
                    spun.0 += 1;
                } else {
                    spun.1 += 1;
                }
            }
            h.work_came(us(gap), next);
            last = next;
        }
        spun
    }

    #[test]
    fn a_ping_pongs_two_sides_each_get_the_way_that_answers_sooner() {
        // One record for both sides gets one of them wrong: over the mix, spinning looks
        // better (14 against 26.5 µs) and the device spins for the client too.
        let mut h = SideHistories::default();
        let rounds = 20 * PROBE_EVERY;
        let (server, client) = ping_pong(&mut h, rounds);
        let counted = rounds - 6 * PROBE_EVERY;
        assert_eq!(
            server,
            counted - counted / PROBE_EVERY,
            "awaiting the server: every period spins but the probes"
        );
        assert_eq!(
            client,
            counted / PROBE_EVERY,
            "awaiting the client: only the probes spin"
        );
        assert_eq!(
            h.other.spun.len + h.other.slept.len,
            1,
            "only the first period, before either side's work, is Side::OTHER's"
        );
    }

    #[test]
    fn a_burst_of_passes_is_the_side_that_began_it() {
        let mut h = SideHistories::default();
        let (a, b) = (Side::sq_doorbell(qp(7)), Side::packet(qp(7), true));
        h.spins();
        h.work_came(us(30), a);
        // The burst's later passes (no pass without work between) took b's packets.
        h.work_came(us(31), b);
        h.work_came(us(32), b);
        assert_eq!(
            h.follows, a,
            "the next period follows what ended the last one"
        );
        h.spins();
        assert_eq!(h.open, Some(Slot::Side(0)));
        assert_eq!(h.sides[0].map(|e| e.side), Some(a));
        assert!(h.sides[1].is_none(), "b never began a burst: no entry");
    }

    #[test]
    fn more_sides_in_turn_than_entries_decide_as_the_devices_record_would() {
        // Each side is given up before it comes back: a record of its own that started empty
        // would tie, and a tie sleeps, in every period (a review's count: 0 of 900 spun where
        // a spin answers in 5 µs and a sleep in 40). A new side starts from the device's.
        let mut h = SideHistories::default();
        let sides: Vec<Side> = (0..=SIDES as u32)
            .map(|n| Side::sq_doorbell(qp(n)))
            .collect();
        let rounds = 100;
        let mut spun = 0;
        for round in 0..rounds {
            for &side in &sides {
                let spins = h.spins();
                if round >= 10 && spins {
                    spun += 1;
                }
                h.work_came(us(if spins { 5 } else { 40 }), side);
            }
        }
        let counted = (rounds - 10) * sides.len() as u32;
        assert!(
            spun >= counted - counted / PROBE_EVERY,
            "{spun} of {counted} periods spun"
        );
    }

    #[test]
    fn an_unasked_period_names_the_side_the_next_one_follows_and_records_nothing() {
        let mut h = SideHistories::default();
        let (five, six) = (Side::sq_doorbell(qp(5)), Side::sq_doorbell(qp(6)));
        h.spins();
        h.work_came(us(10), five);
        h.spins();
        h.work_came(us(10), five);
        let record = record_of(&h, five);
        // An expected answer's spin (or a trapped wake's period), ended by QP 6's doorbell.
        h.unasked_period();
        h.work_came(us(160), six);
        assert_eq!(
            h.follows, six,
            "the next period follows what ended this one"
        );
        assert_eq!(
            record_of(&h, five),
            record,
            "nothing filed under QP 5's record"
        );
        assert!(record_of(&h, six).is_none(), "nor a record made for QP 6");
    }

    #[test]
    fn a_side_is_its_qp_and_what_came_a_doorbell_of_either_queue_or_a_packet() {
        let sides = [
            Side::sq_doorbell(qp(5)),
            Side::rq_doorbell(qp(5)),
            Side::packet(qp(5), false),
            Side::packet(qp(5), true),
            Side::sq_doorbell(qp(6)),
            Side::OTHER,
        ];
        for (i, a) in sides.iter().enumerate() {
            for (j, b) in sides.iter().enumerate() {
                assert_eq!(a == b, i == j, "{a:?} {b:?}");
            }
        }
        for multicast in [
            Side::sq_doorbell(Qpn::MULTICAST),
            Side::rq_doorbell(Qpn::MULTICAST),
            Side::packet(Qpn::MULTICAST, true),
        ] {
            assert_ne!(multicast, Side::OTHER);
        }
    }

    /// One idle period that follows `side` and ends `gap_us` later, by `side` again.
    fn period_after(h: &mut SideHistories, side: Side, gap_us: u64) {
        h.follows = side;
        h.spins();
        h.work_came(us(gap_us), side);
    }

    fn record_of(h: &SideHistories, side: Side) -> Option<SpinHistory> {
        h.sides
            .iter()
            .flatten()
            .find(|e| e.side == side)
            .map(|e| e.history)
    }

    #[test]
    fn the_table_is_bounded_and_gives_up_the_side_used_least_recently() {
        let mut h = SideHistories::default();
        period_after(&mut h, Side::OTHER, 50);
        let other = h.other;
        let kept = Side::sq_doorbell(qp(100));
        for _ in 0..2 * HISTORY {
            period_after(&mut h, kept, 8);
        }
        let trained = record_of(&h, kept).unwrap();
        let others: Vec<Side> = (0..2 * SIDES as u32)
            .map(|n| Side::sq_doorbell(qp(n)))
            .collect();
        for &side in &others[..SIDES - 1] {
            period_after(&mut h, side, 20);
        }
        assert_eq!(h.sides.iter().flatten().count(), SIDES, "the table is full");
        // The kept side decides again (its record is the most recently used), then a new
        // side comes: the least recently used entry, the first other's, is given up.
        h.follows = kept;
        h.spins();
        h.open = None;
        period_after(&mut h, others[SIDES - 1], 20);
        assert_eq!(h.sides.iter().flatten().count(), SIDES, "bounded");
        assert!(
            record_of(&h, others[0]).is_none(),
            "the least recently used went"
        );
        assert_eq!(
            record_of(&h, kept).map(|r| (r.spun, r.slept)),
            Some((trained.spun, trained.slept)),
            "the side used recently kept its record"
        );
        for &side in &others[SIDES..] {
            period_after(&mut h, side, 20);
        }
        assert!(
            record_of(&h, kept).is_none(),
            "{SIDES} new sides in a row: given up"
        );
        assert_eq!(h.other, other, "Side::OTHER's record is never given up");
    }
}
