//! DCQCN's reaction point for one QP (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015), with mlx5's parameters ([`CcParams`]): a pure state machine
//! that takes CNPs, bytes sent and the time, and gives the rate the QP may send at.
//!
//! - A CNP cuts the current rate Rc by the factor 1 − α/2^rpg_gd (at most once per
//!   rate_reduce_monitor_period: CNPs within it cut when it ends), never below rpg_min_dec_fac
//!   percent of it nor below rpg_min_rate, and restarts the increase stages.
//! - α (how congested the path is, in 1/1024 units) is updated every dce_tcp_rtt: towards
//!   1 if a CNP came in the period, towards 0 otherwise.
//! - Every rpg_time_reset µs (the timer) and every rpg_byte_reset bytes sent (the byte
//!   counter) is an increase event: Rc moves half way to the target rate Rt; Rt itself stays
//!   while both stage counters are below rpg_threshold (fast recovery), grows by rpg_ai_rate
//!   once one of them reaches it (additive increase) and by a growing multiple of
//!   rpg_hai_rate once both pass it (hyper increase).
//!
//! Time advances lazily: every call first plays the timer and α periods that passed since the
//! last one, so an idle QP costs no wake-ups. A flow back at the highest rate is
//! [`Dcqcn::recovered`] and its owner forgets it (no pacing at line rate).

use super::CcParams;

const NS_PER_US: u64 = 1000;
/// α and its gain are fractions in 1/1024 units.
const ALPHA_ONE: u64 = 1024;
/// After this many α periods without a CNP α is 0 whatever it was (1023 · (1019/1024)^n
/// rounds down to 0 long before): the lazy update stops counting there.
const ALPHA_DECAY_LIMIT: u64 = 4096;

/// The reaction point's state of one flow (QP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dcqcn {
    /// Current rate Rc and target rate Rt, kb/s.
    rate: u64,
    target: u64,
    /// α in 1/1024 units.
    alpha: u64,
    /// A CNP arrived in the current α period.
    cnp_in_period: bool,
    /// When the next α update is due (ns).
    alpha_due: u64,
    /// The last cut, and whether a CNP waits for the monitor period to end to cut again.
    last_cut: u64,
    cut_pending: bool,
    /// When the timer's next increase event is due (ns).
    timer_due: u64,
    /// Increase events since the last cut: of the timer (T) and the byte counter (BC).
    timer_stage: u32,
    byte_stage: u32,
    /// Bytes sent since the last byte-counter event.
    bytes: u64,
    /// The last increase was the timer's (mlx5's clamp_tgt_rate_after_time_inc).
    last_increase_by_timer: bool,
}

impl Dcqcn {
    /// A flow's first CNP at `now`, α at initial_alpha_value: the rate and target become
    /// rate_to_set_on_first_cnp (mlx5: the rate set on the first CNP, not cut further), or
    /// with 0 the highest rate, cut at once.
    pub fn first_cnp(now: u64, p: &CcParams) -> Dcqcn {
        let max = p.max_rate_kbps();
        let start = match p.rate_to_set_on_first_cnp {
            0 => max,
            r => (u64::from(r) * 1000).min(max),
        };
        let mut d = Dcqcn {
            rate: start,
            target: start,
            alpha: u64::from(p.initial_alpha_value),
            cnp_in_period: true,
            alpha_due: now + alpha_period(p),
            last_cut: now,
            cut_pending: false,
            timer_due: now + timer_period(p),
            timer_stage: 0,
            byte_stage: 0,
            bytes: 0,
            last_increase_by_timer: false,
        };
        if p.rate_to_set_on_first_cnp == 0 {
            d.cut(now, p, true);
        }
        d
    }

    /// The rate the flow may send at now, kb/s.
    pub fn rate_kbps(&self) -> u64 {
        self.rate
    }

    pub fn target_kbps(&self) -> u64 {
        self.target
    }

    /// When the timer's next increase event is due (ns).
    pub fn next_increase_ns(&self) -> u64 {
        self.timer_due
    }

    /// α in 1/1024 units.
    pub fn alpha(&self) -> u64 {
        self.alpha
    }

    /// Back at the highest rate with nothing pending: the flow needs no state (nor pacing).
    pub fn recovered(&self, p: &CcParams) -> bool {
        let max = p.max_rate_kbps();
        self.rate >= max && self.target >= max && !self.cut_pending
    }

    /// A CNP for the flow at `now`.
    pub fn on_cnp(&mut self, now: u64, p: &CcParams) {
        self.advance(now, p);
        self.cnp_in_period = true;
        if now.saturating_sub(self.last_cut) >= monitor_period(p) {
            self.cut(now, p, false);
        } else {
            self.cut_pending = true;
        }
    }

    /// The flow sent `bytes` at `now`: the byte counter's increase events.
    pub fn on_sent(&mut self, bytes: u64, now: u64, p: &CcParams) {
        self.advance(now, p);
        self.bytes += bytes;
        let every = u64::from(p.rpg_byte_reset.max(1));
        while self.bytes >= every {
            self.bytes -= every;
            self.byte_stage = self.byte_stage.saturating_add(1);
            self.increase(false, p);
        }
    }

    /// Plays, in time order, what happened up to `now` without a call: a cut a CNP left
    /// pending, the α periods and the timer's increase events.
    pub fn advance(&mut self, now: u64, p: &CcParams) {
        let cut_at = self.last_cut + monitor_period(p);
        if self.cut_pending && now >= cut_at {
            self.update_alpha(cut_at, p);
            self.play_timer(cut_at, p);
            self.cut(cut_at, p, false);
        }
        self.update_alpha(now, p);
        self.play_timer(now, p);
    }

    /// The α periods that ended by `now`: the first one saw the CNPs since the last update,
    /// the rest none.
    fn update_alpha(&mut self, now: u64, p: &CcParams) {
        if now < self.alpha_due {
            return;
        }
        let period = alpha_period(p);
        let periods = (now - self.alpha_due) / period + 1;
        self.alpha_due += periods * period;
        let g = u64::from(p.dce_tcp_g);
        let mut left = periods;
        if std::mem::take(&mut self.cnp_in_period) {
            self.alpha = (self.alpha * g / ALPHA_ONE + (ALPHA_ONE - g)).min(ALPHA_ONE);
            left -= 1;
        }
        if left >= ALPHA_DECAY_LIMIT {
            self.alpha = 0;
            return;
        }
        for _ in 0..left {
            if self.alpha == 0 {
                break;
            }
            self.alpha = self.alpha * g / ALPHA_ONE;
        }
    }

    /// The timer's increase events due by `now` (none once the flow has recovered).
    fn play_timer(&mut self, now: u64, p: &CcParams) {
        let period = timer_period(p);
        while now >= self.timer_due {
            if self.recovered(p) {
                // Nothing left to recover: skip the periods that ended by `now` at once.
                let ended = (now - self.timer_due) / period + 1;
                self.timer_due += ended * period;
                break;
            }
            self.timer_due += period;
            self.timer_stage = self.timer_stage.saturating_add(1);
            self.increase(true, p);
        }
    }

    /// One increase event: fast recovery, additive or hyper increase of the target, and the
    /// rate half way to it.
    fn increase(&mut self, by_timer: bool, p: &CcParams) {
        let threshold = p.rpg_threshold;
        let (t, bc) = (self.timer_stage, self.byte_stage);
        if t.min(bc) > threshold {
            let steps = u64::from(t.min(bc) - threshold);
            self.target += steps * u64::from(p.rpg_hai_rate) * 1000;
        } else if t.max(bc) >= threshold {
            self.target += u64::from(p.rpg_ai_rate) * 1000;
        }
        let max = p.max_rate_kbps();
        self.target = self.target.min(max);
        // Half way, rounding up so the rate reaches its target.
        self.rate = (self.rate + self.target).div_ceil(2).min(max);
        self.last_increase_by_timer = by_timer;
    }

    /// A cut at `at`.
    fn cut(&mut self, at: u64, p: &CcParams, first: bool) {
        let clamp = p.clamp_tgt_rate != 0
            || (p.clamp_tgt_rate_after_time_inc != 0 && self.last_increase_by_timer);
        if first || clamp {
            self.target = self.rate;
        }
        let reduction = (self.rate * self.alpha) >> p.rpg_gd.min(63);
        let cut = self.rate.saturating_sub(reduction);
        let least_share = self.rate * u64::from(p.rpg_min_dec_fac.min(100)) / 100;
        let floor = u64::from(p.rpg_min_rate) * 1000;
        self.rate = cut.max(least_share).max(floor).min(p.max_rate_kbps());
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.timer_due = at + timer_period(p);
        self.last_cut = at;
        self.cut_pending = false;
        self.last_increase_by_timer = false;
    }
}

fn alpha_period(p: &CcParams) -> u64 {
    u64::from(p.dce_tcp_rtt.max(1)) * NS_PER_US
}

fn timer_period(p: &CcParams) -> u64 {
    u64::from(p.rpg_time_reset.max(1)) * NS_PER_US
}

fn monitor_period(p: &CcParams) -> u64 {
    u64::from(p.rate_reduce_monitor_period) * NS_PER_US
}

/// Nanoseconds `bytes` take at `rate_kbps`.
pub fn wire_time_ns(bytes: u64, rate_kbps: u64) -> u64 {
    // bits / (kb/s · 1000) s = bytes · 8 · 10^6 / kb/s ns.
    (bytes * 8_000_000).div_ceil(rate_kbps.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1000;
    const LINE: u64 = 100_000_000; // kb/s: 100 Gb/s

    fn params() -> CcParams {
        CcParams::default()
    }

    #[test]
    fn the_first_cnp_halves_the_line_rate_with_full_alpha() {
        let p = params();
        let d = Dcqcn::first_cnp(0, &p);
        // α = 1023/1024, rpg_gd 11: Rc × (1 − 1023/2048).
        assert_eq!(d.rate_kbps(), LINE - LINE * 1023 / 2048);
        assert_eq!(d.target_kbps(), LINE);
        assert_eq!(d.alpha(), 1023);
        assert!(!d.recovered(&p));
    }

    #[test]
    fn rate_to_set_on_first_cnp_is_the_rate_after_the_first_cnp() {
        let mut p = params();
        p.rate_to_set_on_first_cnp = 10_000;
        let d = Dcqcn::first_cnp(0, &p);
        assert_eq!(d.rate_kbps(), 10_000_000, "set, not cut again");
        assert_eq!(d.target_kbps(), 10_000_000);
        assert_eq!(d.alpha(), 1023);
        // Above the highest rate it is the highest rate.
        p.rate_to_set_on_first_cnp = 1_000_000;
        assert_eq!(Dcqcn::first_cnp(0, &p).rate_kbps(), LINE);
    }

    #[test]
    fn a_cut_keeps_rpg_min_dec_fac_and_the_min_rate() {
        let mut p = params();
        p.rpg_min_dec_fac = 80;
        let d = Dcqcn::first_cnp(0, &p);
        assert_eq!(d.rate_kbps(), LINE * 80 / 100, "at most a 20 % cut");
        let mut p = params();
        p.line_rate = 4;
        p.rpg_min_rate = 3;
        let d = Dcqcn::first_cnp(0, &p);
        assert_eq!(d.rate_kbps(), 3_000, "floored at rpg_min_rate");
    }

    #[test]
    fn cnps_within_the_monitor_period_cut_once_at_its_end() {
        let p = params();
        let mut d = Dcqcn::first_cnp(0, &p);
        let after_first = d.rate_kbps();
        d.on_cnp(US, &p);
        d.on_cnp(2 * US, &p);
        assert_eq!(d.rate_kbps(), after_first, "within 4 µs of the first cut");
        d.advance(4 * US, &p);
        assert!(
            d.rate_kbps() < after_first,
            "the pending cut happened at 4 µs"
        );
        let second = d.rate_kbps();
        d.advance(7 * US, &p);
        assert_eq!(d.rate_kbps(), second, "one cut for both CNPs");
    }

    #[test]
    fn alpha_rises_with_cnps_and_decays_without() {
        let p = params();
        let mut d = Dcqcn::first_cnp(0, &p);
        // The first period saw the first CNP: 1023·1019/1024 + 5 = 1023.
        d.advance(US, &p);
        assert_eq!(d.alpha(), 1023 * 1019 / 1024 + 5);
        // Ten periods without CNPs: ×1019/1024 each.
        let mut expect = d.alpha();
        for _ in 0..10 {
            expect = expect * 1019 / 1024;
        }
        d.advance(11 * US, &p);
        assert_eq!(d.alpha(), expect);
        d.advance(10_000 * US, &p);
        assert_eq!(d.alpha(), 0, "long without CNPs: no congestion left");
        d.on_cnp(10_000 * US + 1, &p);
        d.advance(10_001 * US, &p);
        assert_eq!(d.alpha(), 1024 - 1019, "one period with a CNP");
    }

    #[test]
    fn the_timer_recovers_fast_then_additively_then_hyper() {
        let mut p = params();
        p.rpg_threshold = 2;
        p.rpg_byte_reset = u32::MAX;
        let mut d = Dcqcn::first_cnp(0, &p);
        let (rc, rt) = (d.rate_kbps(), d.target_kbps());
        // Timer event 1 (T=1 < threshold 2): fast recovery, Rt unchanged.
        d.advance(300 * US, &p);
        assert_eq!(d.target_kbps(), rt);
        assert_eq!(d.rate_kbps(), (rc + rt).div_ceil(2));
        // T=2 reaches the threshold, BC=0 below it: additive increase, capped at line rate.
        let mut p2 = p;
        p2.rate_to_set_on_first_cnp = 50_000;
        let mut d = Dcqcn::first_cnp(0, &p2);
        d.advance(300 * US, &p2);
        let rt = d.target_kbps();
        d.advance(600 * US, &p2);
        assert_eq!(d.target_kbps(), rt + 5_000, "rpg_ai_rate");
    }

    #[test]
    fn both_counters_past_the_threshold_increase_hyper() {
        let mut p = params();
        p.rate_to_set_on_first_cnp = 50_000;
        p.rpg_threshold = 1;
        p.rpg_byte_reset = 1000;
        let mut d = Dcqcn::first_cnp(0, &p);
        let rt = d.target_kbps();
        // BC = 1, 2 (additive at both: T = 0 not past 1).
        d.on_sent(2000, 1, &p);
        assert_eq!(d.target_kbps(), rt + 2 * 5_000);
        // Two timer events: T = 1 (additive), T = 2 with BC = 2 (both past 1: hyper, 1 step).
        d.advance(600 * US, &p);
        assert_eq!(d.target_kbps(), rt + 3 * 5_000 + 50_000);
    }

    #[test]
    fn a_flow_recovers_to_the_line_rate_and_says_so() {
        let p = params();
        let mut d = Dcqcn::first_cnp(0, &p);
        d.on_sent(1 << 30, 1, &p);
        d.advance(1_000_000 * US, &p);
        assert_eq!(d.rate_kbps(), LINE);
        assert!(d.recovered(&p));
    }

    #[test]
    fn a_recovered_flow_skips_the_timer_periods_it_idled_through() {
        let p = params();
        let mut d = Dcqcn::first_cnp(0, &p);
        d.advance(1_000_000 * US + 7, &p);
        assert!(d.recovered(&p));
        // Any later time, on a period boundary or not.
        for now in [1_000_000 * US + 8, 1_000_300 * US, 1_000_301 * US + 1] {
            d.advance(now, &p);
            assert!(d.recovered(&p));
        }
        // α has decayed to 0: a CNP now cuts nothing (its owner forgets a recovered flow, so
        // there the next CNP is a first one, with initial_alpha_value).
        d.on_cnp(1_000_302 * US, &p);
        assert_eq!((d.alpha(), d.rate_kbps()), (0, LINE));
    }

    #[test]
    fn a_storm_of_cnps_holds_the_rate_at_its_floor() {
        let mut p = params();
        p.rpg_min_rate = 10;
        let mut d = Dcqcn::first_cnp(0, &p);
        let mut now = 0;
        for _ in 0..100_000 {
            now += US;
            d.on_cnp(now, &p);
        }
        assert_eq!(d.rate_kbps(), 10_000);
        assert!(d.alpha() > 1000);
    }

    #[test]
    fn the_clamp_after_a_timer_increase_resets_the_target() {
        let mut p = params();
        p.rpg_byte_reset = u32::MAX;
        let mut d = Dcqcn::first_cnp(0, &p);
        d.advance(300 * US, &p);
        let rc = d.rate_kbps();
        d.on_cnp(300 * US, &p);
        assert_eq!(d.target_kbps(), rc, "the last increase was the timer's");
        p.clamp_tgt_rate_after_time_inc = 0;
        let mut d = Dcqcn::first_cnp(0, &p);
        d.advance(300 * US, &p);
        d.on_cnp(300 * US, &p);
        assert_eq!(d.target_kbps(), LINE, "no clamp: the target stays");
    }

    #[test]
    fn wire_time_follows_the_rate() {
        assert_eq!(
            wire_time_ns(1250, 10_000),
            1_000_000,
            "10 kbit at 10 Mb/s: 1 ms"
        );
        assert_eq!(wire_time_ns(1, 8_000_000), 1);
    }
}
