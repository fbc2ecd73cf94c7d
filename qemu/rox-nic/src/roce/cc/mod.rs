//! RoCEv2 congestion control: ECN on the wire, CNPs from the notification point (the receiver
//! of CE-marked packets), DCQCN in the reaction point (the sender), as mlx5 HCAs do.
//!
//! - [`CcConfig`]: the device's setting (`rox-nic --cc on|off --cc-param name=value,...`):
//!   whether congestion control runs, and the DCQCN / notification point parameters under
//!   mlx5's names, units and defaults ([`PARAMS`]);
//! - [`dcqcn`]: the reaction point's rate state machine of one QP (pure: times and byte
//!   counts in, rates out);
//! - [`QpCc`]: what one QP keeps: its DCQCN state and its pacing time;
//! - [`CnpLimiter`]: the port's notification point rate limit (min_time_between_cnps).
//!
//! With congestion control on, every RoCE packet the device sends is ECN-capable (ECT(0));
//! with it off they are Not-ECT, CNPs received are counted and ignored, and none are sent.

pub mod dcqcn;

use std::fmt;

pub use dcqcn::Dcqcn;

/// The ECN field: the low 2 bits of the IPv4 TOS / IPv6 traffic class (RFC 3168).
pub const ECN_MASK: u8 = 0b11;
pub const ECN_NOT_ECT: u8 = 0b00;
pub const ECN_ECT0: u8 = 0b10;
/// Congestion Experienced: set by a congested router on an ECN-capable packet.
pub const ECN_CE: u8 = 0b11;

/// Congestion control of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CcConfig {
    /// On (the default, as mlx5 enables DCQCN for RoCE): ECT on every packet, CNPs sent for
    /// CE-marked ones, CNPs received cut the QP's rate.
    pub enabled: bool,
    pub params: CcParams,
}

impl Default for CcConfig {
    fn default() -> CcConfig {
        CcConfig {
            enabled: true,
            params: CcParams::default(),
        }
    }
}

impl CcConfig {
    /// The ECN bits the device's RoCE packets carry.
    pub fn ecn(&self) -> u8 {
        if self.enabled {
            ECN_ECT0
        } else {
            ECN_NOT_ECT
        }
    }
}

/// The DCQCN and notification point parameters, under mlx5's names (its sysfs/debugfs
/// `cc_params` and NVIDIA's DCQCN parameter table), in mlx5's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcParams {
    /// Reaction point: µs between rate increase events of the timer.
    pub rpg_time_reset: u32,
    /// Bytes sent between rate increase events of the byte counter.
    pub rpg_byte_reset: u32,
    /// Increase events (of the timer or the byte counter) before fast recovery ends.
    pub rpg_threshold: u32,
    /// Mb/s the target rate grows per additive increase.
    pub rpg_ai_rate: u32,
    /// Mb/s the target rate grows per hyper increase step.
    pub rpg_hai_rate: u32,
    /// A cut multiplies the rate by 1 - alpha / 2^rpg_gd (alpha in 1/1024 units).
    pub rpg_gd: u32,
    /// One cut leaves at least this percentage of the rate.
    pub rpg_min_dec_fac: u32,
    /// Mb/s: the lowest rate a QP is cut to.
    pub rpg_min_rate: u32,
    /// Mb/s: the highest rate (0: the line rate).
    pub rpg_max_rate: u32,
    /// Mb/s the first CNP of a flow sets (0: the rate it has, the line rate).
    pub rate_to_set_on_first_cnp: u32,
    /// µs: at most one cut per this period (CNPs within it cut at its end).
    pub rate_reduce_monitor_period: u32,
    /// Alpha's gain: alpha = alpha * g/1024 (+ (1024 - g) if a CNP came in the period).
    pub dce_tcp_g: u32,
    /// µs between alpha updates.
    pub dce_tcp_rtt: u32,
    /// Alpha (1/1024 units) when the first CNP of a flow arrives.
    pub initial_alpha_value: u32,
    /// 1: every cut sets the target rate to the current rate (0: only the first cut, or one
    /// after a timer increase when clamp_tgt_rate_after_time_inc is set).
    pub clamp_tgt_rate: u32,
    pub clamp_tgt_rate_after_time_inc: u32,
    /// Notification point: µs between two CNPs the port sends ([`CnpLimiter`]).
    pub min_time_between_cnps: u32,
    /// The DSCP of the CNPs the notification point sends (IPv4 TOS / IPv6 traffic class bits
    /// 7..2), whatever the QP's own traffic class: switches queue CNPs apart (mlx5: 48, CS6).
    pub cnp_dscp: u32,
    /// The 802.1p priority of the CNPs (mlx5: 6). It belongs in an 802.1Q tag: rox's port
    /// sends untagged frames and has one transmit queue, so it is kept but changes nothing
    /// on rox's wire.
    pub cnp_802p_prio: u32,
    /// rox's own: the line rate in Mb/s a QP sends at while not cut (the rate QUERY_PORT
    /// reports: 4X EDR).
    pub line_rate: u32,
}

/// One parameter: its name, unit, default, valid range and what it does (the docs' table).
pub struct ParamSpec {
    pub name: &'static str,
    pub unit: &'static str,
    pub default: u32,
    pub min: u32,
    pub max: u32,
    pub what: &'static str,
    field: fn(&mut CcParams) -> &mut u32,
}

macro_rules! param {
    ($name:ident, $unit:expr, $default:expr, $min:expr, $max:expr, $what:expr) => {
        ParamSpec {
            name: stringify!($name),
            unit: $unit,
            default: $default,
            min: $min,
            max: $max,
            what: $what,
            field: |p| &mut p.$name,
        }
    };
}

/// Every parameter, with mlx5's defaults (rox's `line_rate` last).
pub const PARAMS: &[ParamSpec] = &[
    param!(
        rpg_time_reset,
        "µs",
        300,
        1,
        131_071,
        "time between rate increase events"
    ),
    param!(
        rpg_byte_reset,
        "bytes",
        32_767,
        1,
        u32::MAX,
        "bytes between rate increase events"
    ),
    param!(
        rpg_threshold,
        "events",
        1,
        1,
        31,
        "increase events of fast recovery"
    ),
    param!(
        rpg_ai_rate,
        "Mb/s",
        5,
        1,
        1_000_000,
        "additive increase step"
    ),
    param!(
        rpg_hai_rate,
        "Mb/s",
        50,
        1,
        1_000_000,
        "hyper increase step"
    ),
    param!(rpg_gd, "log2", 11, 1, 15, "cut: rate × (1 − α / 2^rpg_gd)"),
    param!(
        rpg_min_dec_fac,
        "%",
        50,
        0,
        100,
        "a cut keeps at least this share"
    ),
    param!(rpg_min_rate, "Mb/s", 1, 1, 1_000_000, "lowest rate"),
    param!(
        rpg_max_rate,
        "Mb/s",
        0,
        0,
        1_000_000,
        "highest rate (0: line rate)"
    ),
    param!(
        rate_to_set_on_first_cnp,
        "Mb/s",
        0,
        0,
        1_000_000,
        "rate a flow's first CNP sets, uncut (0: cut from line rate)"
    ),
    param!(
        rate_reduce_monitor_period,
        "µs",
        4,
        1,
        u32::MAX,
        "least time between cuts"
    ),
    param!(dce_tcp_g, "1/1024", 1019, 0, 1023, "alpha gain"),
    param!(dce_tcp_rtt, "µs", 1, 1, 131_071, "alpha update period"),
    param!(
        initial_alpha_value,
        "1/1024",
        1023,
        0,
        1023,
        "alpha on a flow's first CNP"
    ),
    param!(
        clamp_tgt_rate,
        "0/1",
        0,
        0,
        1,
        "every cut resets the target rate"
    ),
    param!(
        clamp_tgt_rate_after_time_inc,
        "0/1",
        1,
        0,
        1,
        "a cut after a timer increase resets the target rate"
    ),
    param!(
        min_time_between_cnps,
        "µs",
        4,
        0,
        4095,
        "notification point: least time between the port's CNPs"
    ),
    param!(cnp_dscp, "DSCP", 48, 0, 63, "the DSCP of the CNPs sent"),
    param!(
        cnp_802p_prio,
        "802.1p",
        6,
        0,
        7,
        "the CNPs' 802.1p priority (no 802.1Q tag on rox's port: unused)"
    ),
    param!(
        line_rate,
        "Mb/s",
        100_000,
        1,
        1_000_000,
        "rox: a QP's rate while not cut"
    ),
];

impl Default for CcParams {
    fn default() -> CcParams {
        let mut p = CcParams {
            rpg_time_reset: 0,
            rpg_byte_reset: 0,
            rpg_threshold: 0,
            rpg_ai_rate: 0,
            rpg_hai_rate: 0,
            rpg_gd: 0,
            rpg_min_dec_fac: 0,
            rpg_min_rate: 0,
            rpg_max_rate: 0,
            rate_to_set_on_first_cnp: 0,
            rate_reduce_monitor_period: 0,
            dce_tcp_g: 0,
            dce_tcp_rtt: 0,
            initial_alpha_value: 0,
            clamp_tgt_rate: 0,
            clamp_tgt_rate_after_time_inc: 0,
            min_time_between_cnps: 0,
            cnp_dscp: 0,
            cnp_802p_prio: 0,
            line_rate: 0,
        };
        for spec in PARAMS {
            *(spec.field)(&mut p) = spec.default;
        }
        p
    }
}

/// Why a `--cc-param` list was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadCcParam(String);

impl fmt::Display for BadCcParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadCcParam {}

impl CcParams {
    /// Sets one parameter by its name, within its range.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), BadCcParam> {
        let Some(spec) = PARAMS.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = PARAMS.iter().map(|s| s.name).collect();
            return Err(BadCcParam(format!(
                "unknown congestion control parameter {name:?} (known: {})",
                names.join(", ")
            )));
        };
        let v: u32 = value.parse().map_err(|_| {
            BadCcParam(format!(
                "{name}={value:?}: want a whole number ({})",
                spec.unit
            ))
        })?;
        if !(spec.min..=spec.max).contains(&v) {
            return Err(BadCcParam(format!(
                "{name}={v}: out of range {}..={} ({})",
                spec.min, spec.max, spec.unit
            )));
        }
        *(spec.field)(self) = v;
        Ok(())
    }

    /// Applies `name=value,name=value,...` on top of these values; nothing changes if any
    /// item is bad.
    pub fn apply_list(&mut self, list: &str) -> Result<(), BadCcParam> {
        let mut next = *self;
        for item in list.split(',').filter(|i| !i.is_empty()) {
            let (name, value) = item.split_once('=').ok_or_else(|| {
                BadCcParam(format!("{item:?}: want name=value (e.g. rpg_ai_rate=10)"))
            })?;
            next.set(name.trim(), value.trim())?;
        }
        if next.rpg_max_rate != 0 && next.rpg_max_rate < next.rpg_min_rate {
            return Err(BadCcParam(format!(
                "rpg_max_rate={} is below rpg_min_rate={}",
                next.rpg_max_rate, next.rpg_min_rate
            )));
        }
        *self = next;
        Ok(())
    }

    /// The highest rate in kb/s: rpg_max_rate, else the line rate.
    pub fn max_rate_kbps(&self) -> u64 {
        let mbps = match self.rpg_max_rate {
            0 => self.line_rate,
            r => r.min(self.line_rate),
        };
        u64::from(mbps) * 1000
    }
}

/// The notification point's CNP rate limit, one per port: at most one CNP leaves the port per
/// `min_time_between_cnps`, whichever QPs the CE-marked packets were for. mlx5 configures the
/// notification point per port and priority, not per QP (its `ecn/roce_np` sysfs and
/// firmware parameters), and its firmware register describes the field as the minimum time
/// between CNPs sent from the port; rox's port has one priority. A CE-marked packet inside
/// the gap is counted (`np_ecn_marked_roce_packets`) and gets no CNP, whichever QP it is for.
#[derive(Clone, Copy, Debug, Default)]
pub struct CnpLimiter {
    last_cnp_ns: Option<u64>,
}

impl CnpLimiter {
    /// Whether a CNP may leave the port at `now` (and notes it sent).
    pub fn due(&mut self, now: u64, params: &CcParams) -> bool {
        let gap = u64::from(params.min_time_between_cnps) * 1000;
        if self
            .last_cnp_ns
            .is_some_and(|t| now.saturating_sub(t) < gap)
        {
            return false;
        }
        self.last_cnp_ns = Some(now);
        true
    }
}

/// The congestion control state of one QP.
#[derive(Clone, Debug, Default)]
pub struct QpCc {
    /// The device's setting when the QP was created.
    pub enabled: bool,
    pub params: CcParams,
    /// The reaction point's rate (None: never cut, or recovered: the highest rate).
    pub rp: Option<Dcqcn>,
    /// A CNP cut the QP once: from then on it is paced, at its DCQCN rate or, recovered, at
    /// the highest rate. On hardware the line is the limit; rox's port has none, and a device
    /// faster than a line rate set below its speed (a lab's) would send a recovered QP's
    /// window as one burst far faster than the line. A QP never cut costs one test a packet.
    cut_once: bool,
    /// The requester sends its next packet no earlier than this (ns; pacing at the rate).
    pub not_before: u64,
    /// When the last paced packet's time began and its size: its wait is recomputed at the
    /// rate of the moment ([`QpCc::paced_until`]).
    last_sent: u64,
    last_bytes: u64,
    /// The requester stopped for pacing and has more to send at this time: a timer.
    pub wake_at: Option<u64>,
}

impl QpCc {
    pub fn new(cfg: &CcConfig) -> QpCc {
        QpCc {
            enabled: cfg.enabled,
            params: cfg.params,
            ..QpCc::default()
        }
    }

    /// The ECN bits of the QP's packets.
    pub fn ecn(&self) -> u8 {
        if self.enabled {
            ECN_ECT0
        } else {
            ECN_NOT_ECT
        }
    }

    /// Whether the QP's packets are paced: once a CNP has cut it.
    pub fn paced(&self) -> bool {
        self.cut_once
    }

    /// A CNP for the QP at `now` (congestion control on): DCQCN cuts the rate.
    pub fn on_cnp(&mut self, now: u64) {
        self.cut_once = true;
        // A flow that recovered while idle is forgotten: this CNP is a first one again.
        if let Some(rp) = &mut self.rp {
            rp.advance(now, &self.params);
            if rp.recovered(&self.params) {
                self.rp = None;
            }
        }
        match &mut self.rp {
            Some(rp) => rp.on_cnp(now, &self.params),
            None => self.rp = Some(Dcqcn::first_cnp(now, &self.params)),
        }
    }

    /// The time the requester's next packet must wait for (None: it may go now). Costs one
    /// test while the QP was never cut. The wait is the last packet's time at the rate now
    /// (the timer may have raised it since the packet went), and ends no later than the next
    /// increase event, which may shorten it again: a packet sent at a floor of 1 Mb/s does
    /// not hold the QP for its 33 ms at that rate.
    pub fn paced_until(&mut self, now: u64) -> Option<u64> {
        if !self.cut_once || now >= self.not_before {
            return None;
        }
        if let Some(rp) = &mut self.rp {
            rp.advance(now, &self.params);
            if rp.recovered(&self.params) {
                self.rp = None;
            }
        }
        let rate = self.rate_kbps();
        self.not_before = self.last_sent + dcqcn::wire_time_ns(self.last_bytes, rate);
        let next_increase = self.rp.as_ref().map_or(u64::MAX, Dcqcn::next_increase_ns);
        (now < self.not_before).then(|| self.not_before.min(next_increase))
    }

    /// The requester sent `bytes` at `now`: the next packet waits their time at the rate.
    pub fn sent(&mut self, bytes: u64, now: u64) {
        if !self.cut_once {
            return;
        }
        if let Some(rp) = &mut self.rp {
            rp.on_sent(bytes, now, &self.params);
        }
        self.last_sent = self.not_before.max(now);
        self.last_bytes = bytes;
        self.not_before = self.last_sent + dcqcn::wire_time_ns(bytes, self.rate_kbps());
        if self
            .rp
            .as_ref()
            .is_some_and(|rp| rp.recovered(&self.params))
        {
            self.rp = None;
        }
    }

    /// The current rate in kb/s (the highest while not cut).
    pub fn rate_kbps(&self) -> u64 {
        self.rp
            .as_ref()
            .map_or(self.params.max_rate_kbps(), Dcqcn::rate_kbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_mlx5s() {
        let p = CcParams::default();
        assert_eq!(
            (p.rpg_time_reset, p.rpg_byte_reset, p.rpg_threshold),
            (300, 32_767, 1)
        );
        assert_eq!((p.rpg_ai_rate, p.rpg_hai_rate, p.rpg_gd), (5, 50, 11));
        assert_eq!((p.rpg_min_dec_fac, p.rpg_min_rate), (50, 1));
        assert_eq!(
            (p.dce_tcp_g, p.dce_tcp_rtt, p.initial_alpha_value),
            (1019, 1, 1023)
        );
        assert_eq!(
            (p.rate_reduce_monitor_period, p.min_time_between_cnps),
            (4, 4)
        );
        assert_eq!((p.cnp_dscp, p.cnp_802p_prio), (48, 6));
        assert!(CcConfig::default().enabled);
        assert_eq!(CcConfig::default().ecn(), ECN_ECT0);
    }

    /// docs/transport.md's table has every parameter with its unit and default.
    #[test]
    fn the_docs_table_has_every_parameter_and_default() {
        let docs = include_str!("../../../../../docs/transport.md");
        for spec in PARAMS {
            let row = format!("| `{}` | {} | {} |", spec.name, spec.unit, spec.default);
            assert!(docs.contains(&row), "docs/transport.md lacks {row}");
        }
    }

    #[test]
    fn a_parameter_list_applies_whole_or_not_at_all() {
        let mut p = CcParams::default();
        p.apply_list("rpg_ai_rate=10, min_time_between_cnps=0")
            .unwrap();
        assert_eq!((p.rpg_ai_rate, p.min_time_between_cnps), (10, 0));
        let before = p;
        for (bad, says) in [
            (
                "rpg_ai_rate=20,nope=1",
                "unknown congestion control parameter \"nope\"",
            ),
            ("rpg_gd=99", "rpg_gd=99: out of range 1..=15"),
            ("cnp_dscp=64", "cnp_dscp=64: out of range 0..=63"),
            ("cnp_802p_prio=8", "cnp_802p_prio=8: out of range 0..=7"),
            ("rpg_ai_rate=fast", "want a whole number"),
            ("rpg_ai_rate", "want name=value"),
            ("rpg_max_rate=5,rpg_min_rate=10", "below rpg_min_rate"),
        ] {
            let e = p.apply_list(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert_eq!(p, before, "{bad} changed nothing");
        }
    }

    #[test]
    fn cnps_of_the_port_keep_their_least_gap() {
        let mut port = CnpLimiter::default();
        let p = CcParams::default();
        assert!(port.due(1_000, &p));
        assert!(!port.due(4_999, &p), "within 4 µs of the last");
        assert!(port.due(5_000, &p));
        let none = CcParams {
            min_time_between_cnps: 0,
            ..p
        };
        assert!(port.due(5_000, &none), "0: no limit");
    }

    #[test]
    fn a_cut_qp_is_paced_at_its_rate_and_a_recovered_one_at_the_line_rate() {
        let mut cc = QpCc::new(&CcConfig::default());
        assert_eq!(cc.paced_until(0), None, "never cut: line rate, no pacing");
        cc.sent(4096, 0);
        assert_eq!(cc.paced_until(0), None);
        cc.on_cnp(1_000);
        let rate = cc.rate_kbps();
        assert!(rate < cc.params.max_rate_kbps());
        cc.sent(4096, 1_000);
        let gap = dcqcn::wire_time_ns(4096, rate);
        assert_eq!(cc.paced_until(1_000), Some(1_000 + gap));
        assert_eq!(cc.paced_until(1_000 + gap), None);
        // A second afterwards the timer has brought it back to line rate: state forgotten,
        // paced at the line rate.
        cc.sent(4096, 1_000_000_000);
        assert!(cc.rp.is_none());
        let at_line = dcqcn::wire_time_ns(4096, cc.params.max_rate_kbps());
        assert_eq!(cc.paced_until(1_000_000_001), Some(1_000_000_000 + at_line));
        assert_eq!(cc.paced_until(1_000_000_000 + at_line), None);
    }

    /// A device faster than its line (a lab sets line_rate to its bottleneck's 400 Mb/s):
    /// a recovered QP goes on at the line rate, not at the device's speed. Forgotten along
    /// with its DCQCN state, it sent its whole window at once (the lab's tail drops).
    #[test]
    fn a_recovered_qp_sends_no_faster_than_the_line_rate() {
        let mut cfg = CcConfig::default();
        cfg.params.line_rate = 400;
        let mut cc = QpCc::new(&cfg);
        cc.on_cnp(0);
        // A device that can send a 4 KiB packet every 10 µs (3.3 Gb/s) sends as the pacing
        // lets it, for 2 s: the QP recovers.
        const DEVICE_GAP: u64 = 10_000;
        let mut now = 0;
        let send = |cc: &mut QpCc, now: &mut u64| {
            while let Some(until) = cc.paced_until(*now) {
                *now = until;
            }
            cc.sent(4096, *now);
            *now += DEVICE_GAP;
        };
        while now < 2_000_000_000 {
            send(&mut cc, &mut now);
        }
        assert!(cc.rp.is_none(), "recovered");
        let gap = dcqcn::wire_time_ns(4096, 400_000);
        assert_eq!(gap, 81_920);
        let start = now;
        for _ in 0..100 {
            send(&mut cc, &mut now);
        }
        let took = now - start;
        assert!(
            (99 * gap..=101 * gap).contains(&took),
            "100 packets of 4 KiB in {took} ns: at 400 Mb/s they take 100 × {gap}"
        );
    }

    #[test]
    fn a_paced_wait_follows_the_rate_the_timer_raises_not_the_rate_at_send_time() {
        let mut cc = QpCc::new(&CcConfig::default());
        cc.params.rate_to_set_on_first_cnp = 1;
        cc.on_cnp(0);
        assert_eq!(cc.rate_kbps(), 1_000, "1 Mb/s");
        cc.sent(4096, 0);
        let at_send_rate = dcqcn::wire_time_ns(4096, 1_000);
        assert_eq!(at_send_rate, 32_768_000);
        let period = u64::from(cc.params.rpg_time_reset) * 1000;
        let mut now = 0;
        while let Some(until) = cc.paced_until(now) {
            assert!(
                until > now && until - now <= period,
                "woken at each increase"
            );
            now = until;
        }
        // Additive increases every 300 µs: the packet's time at the risen rate has passed
        // after about 1.5 ms.
        assert!(now < at_send_rate / 10, "went at {now} ns");
        assert!(now >= 4 * period, "went at {now} ns: still paced");
    }

    #[test]
    fn a_flow_that_recovered_while_idle_is_cut_by_its_next_cnp_as_by_a_first_one() {
        let mut cc = QpCc::new(&CcConfig::default());
        cc.on_cnp(0);
        let first_cut = cc.rate_kbps();
        // Idle for a second (no packet sent): recovered by the timer alone.
        cc.on_cnp(1_000_000_000);
        assert_eq!(cc.rate_kbps(), first_cut, "cut as a first CNP, α fresh");
    }
}
