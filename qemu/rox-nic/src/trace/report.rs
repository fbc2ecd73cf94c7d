//! The text forms of WQE traces: a timeline (one line per record, microseconds from the first
//! record, with each WQE's stages summed up when its CQE comes) and per-stage latency
//! histograms over every WQE.

use std::fmt::Write;

use super::lives::{lives, Life, Stage};
use super::record::{Dump, Kind, Record, NO_SYNDROME, WAIT_IDLE};
use crate::roce::wire::opcode::*;
use rox_uapi::verbs::*;

/// A BTH opcode's name (RC names; UC/UD carry their class as a prefix).
pub fn opcode_name(op: u8) -> String {
    let base = match op & OP_MASK {
        RC_SEND_FIRST => "SEND_FIRST",
        RC_SEND_MIDDLE => "SEND_MIDDLE",
        RC_SEND_LAST => "SEND_LAST",
        RC_SEND_LAST_IMM => "SEND_LAST_IMM",
        RC_SEND_ONLY => "SEND_ONLY",
        RC_SEND_ONLY_IMM => "SEND_ONLY_IMM",
        RC_WRITE_FIRST => "WRITE_FIRST",
        RC_WRITE_MIDDLE => "WRITE_MIDDLE",
        RC_WRITE_LAST => "WRITE_LAST",
        RC_WRITE_LAST_IMM => "WRITE_LAST_IMM",
        RC_WRITE_ONLY => "WRITE_ONLY",
        RC_WRITE_ONLY_IMM => "WRITE_ONLY_IMM",
        RC_READ_REQUEST => "READ_REQUEST",
        RC_READ_RESPONSE_FIRST => "READ_RESPONSE_FIRST",
        RC_READ_RESPONSE_MIDDLE => "READ_RESPONSE_MIDDLE",
        RC_READ_RESPONSE_LAST => "READ_RESPONSE_LAST",
        RC_READ_RESPONSE_ONLY => "READ_RESPONSE_ONLY",
        RC_ACKNOWLEDGE => "ACK",
        RC_ATOMIC_ACKNOWLEDGE => "ATOMIC_ACK",
        RC_COMPARE_SWAP => "COMPARE_SWAP",
        RC_FETCH_ADD => "FETCH_ADD",
        RC_SEND_LAST_INV => "SEND_LAST_INV",
        RC_SEND_ONLY_INV => "SEND_ONLY_INV",
        RC_FLUSH => "FLUSH",
        RC_ATOMIC_WRITE => "ATOMIC_WRITE",
        _ => return format!("opcode {op:#04x}"),
    };
    match op & CLASS_MASK {
        CLASS_RC => base.to_string(),
        CLASS_UC => format!("UC_{base}"),
        CLASS_UD => format!("UD_{base}"),
        _ => format!("opcode {op:#04x}"),
    }
}

/// A send WR opcode's name (`WR_*`).
pub fn wr_opcode_name(op: u8) -> &'static str {
    match op {
        WR_RDMA_WRITE => "RDMA_WRITE",
        WR_RDMA_WRITE_WITH_IMM => "RDMA_WRITE_WITH_IMM",
        WR_SEND => "SEND",
        WR_SEND_WITH_IMM => "SEND_WITH_IMM",
        WR_RDMA_READ => "RDMA_READ",
        WR_ATOMIC_CMP_AND_SWP => "ATOMIC_CMP_AND_SWP",
        WR_ATOMIC_FETCH_AND_ADD => "ATOMIC_FETCH_AND_ADD",
        WR_LOCAL_INV => "LOCAL_INV",
        WR_BIND_MW => "BIND_MW",
        WR_SEND_WITH_INV => "SEND_WITH_INV",
        WR_FLUSH => "FLUSH",
        WR_ATOMIC_WRITE => "ATOMIC_WRITE",
        WR_REG_MR => "REG_MR",
        _ => "WR?",
    }
}

fn describe(r: &Record) -> String {
    match r.kind() {
        Some(Kind::Doorbell) => format!("doorbell     sq pi={} new={}", r.a, r.b),
        Some(Kind::WqeFetch) => format!(
            "fetch        sq[{}] {} {} B wr_id={:#x}",
            r.a,
            wr_opcode_name(r.op),
            r.b,
            r.wr_id
        ),
        Some(Kind::WqeStart) => format!("psns         {:#08x}+{} wr_id={:#x}", r.a, r.b, r.wr_id),
        Some(Kind::FrameOut) => {
            format!(
                "frame out    psn={:#08x} {} {} B",
                r.a,
                opcode_name(r.op),
                r.b
            )
        }
        Some(Kind::FrameIn) => {
            format!(
                "frame in     psn={:#08x} {} {} B",
                r.a,
                opcode_name(r.op),
                r.b
            )
        }
        Some(Kind::ResponseIn) if r.b == NO_SYNDROME => {
            format!("response in  psn={:#08x} {}", r.a, opcode_name(r.op))
        }
        Some(Kind::ResponseIn) => format!(
            "response in  psn={:#08x} {} syndrome={:#04x}",
            r.a,
            opcode_name(r.op),
            r.b
        ),
        Some(Kind::Retransmit) => {
            let why = [
                "ACK timeout",
                "sequence NAK",
                "RNR NAK",
                "READ response gap",
            ];
            let why = why.get(r.b as usize).copied().unwrap_or("?");
            format!("RETRANSMIT   from psn={:#08x} ({why})", r.a)
        }
        Some(Kind::Cqe) => format!(
            "cqe          {} wr_id={:#x} status={} cq={}",
            if r.flags != 0 { "recv" } else { "send" },
            r.wr_id,
            r.a,
            r.b
        ),
        Some(Kind::Eqe) => format!("eqe          eq={} type={} handle={}", r.a, r.op, r.qpn),
        Some(Kind::Interrupt) => format!("interrupt    vector={}", r.a),
        Some(Kind::Wait) => {
            let what = if r.flags & WAIT_IDLE != 0 {
                "slept"
            } else {
                "napped"
            };
            let asked = match r.b {
                u32::MAX => "no limit".to_string(),
                b => format!("{b} us"),
            };
            format!("{what:<13}{} us (asked {asked})", r.a)
        }
        Some(Kind::Wake) => "wake         (wake register written)".to_string(),
        None => format!("unknown record kind {}", r.kind),
    }
}

fn fmt_us(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1000.0)
}

/// One WQE's stages on one line.
pub fn life_summary(l: &Life) -> String {
    let mut s = format!(
        "{} {} B wr_id={:#x}:",
        wr_opcode_name(l.wr_opcode),
        l.bytes,
        l.wr_id
    );
    for stage in Stage::ALL {
        if let Some(ns) = l.stage_ns(stage) {
            let _ = write!(s, " {} {} us;", stage.name(), fmt_us(ns));
        }
    }
    if l.retransmits > 0 {
        let _ = write!(s, " {} retransmissions;", l.retransmits);
    }
    s.pop();
    s
}

/// The timeline of `dumps` (device `i` is `names[i]`), records of all devices merged in time.
pub fn timeline(dumps: &[Dump], names: &[String]) -> String {
    timeline_between(dumps, names, 0, u64::MAX)
}

/// The timeline of the last WQE whose work-request opcode is named `wr_opcode` (e.g.
/// `RDMA_WRITE`): every device's records from its doorbell to the last thing seen of it (its
/// interrupt when one was raised), microseconds from that doorbell. None if no WQE has it.
pub fn wqe_timeline(dumps: &[Dump], names: &[String], wr_opcode: &str) -> Option<String> {
    let lives = lives(dumps);
    // The last in time: lives come device by device.
    let l = lives
        .iter()
        .filter(|l| wr_opcode_name(l.wr_opcode) == wr_opcode)
        .max_by_key(|l| (l.doorbell, l.fetch))?;
    let end = l.interrupt.map_or(l.end(), |i| i.max(l.end()));
    Some(timeline_between(dumps, names, l.doorbell, end))
}

/// The records with `from <= ts <= to`, microseconds from the first of them.
fn timeline_between(dumps: &[Dump], names: &[String], from: u64, to: u64) -> String {
    let mut all: Vec<(usize, &Record)> = dumps
        .iter()
        .enumerate()
        .flat_map(|(d, dump)| dump.records.iter().map(move |r| (d, r)))
        .filter(|(_, r)| (from..=to).contains(&r.ts_ns))
        .collect();
    all.sort_by_key(|(_, r)| r.ts_ns);
    let t0 = all.first().map_or(0, |(_, r)| r.ts_ns);
    let lives = lives(dumps);
    let mut out = String::new();
    for (d, r) in all {
        let name = names.get(d).map_or("?", String::as_str);
        let qp = match r.kind() {
            Some(Kind::Eqe | Kind::Interrupt | Kind::Wait | Kind::Wake) => "        ".to_string(),
            _ => format!("qp {:#05x}", r.qpn),
        };
        let _ = writeln!(
            out,
            "{:>12} us  {name}  {qp}  {}",
            fmt_us(r.ts_ns - t0),
            describe(r)
        );
        if r.kind() == Some(Kind::Cqe) {
            for l in lives
                .iter()
                .filter(|l| l.device == d && l.qpn == r.qpn && l.cqe == Some(r.ts_ns))
            {
                let _ = writeln!(out, "{:>15}  => {}", "", life_summary(l));
            }
        }
    }
    for dump in dumps.iter().filter(|d| d.overwritten > 0) {
        let _ = writeln!(out, "({} older records were overwritten)", dump.overwritten);
    }
    out
}

/// Per-stage latency histograms over every WQE of `dumps`: count, min, median, 99th
/// percentile and max, and the counts in power-of-two microsecond buckets.
pub fn histograms(dumps: &[Dump]) -> String {
    let lives = lives(dumps);
    let mut out = String::new();
    let _ = writeln!(out, "{} WQEs", lives.len());
    for stage in Stage::ALL {
        let mut ns: Vec<u64> = lives.iter().filter_map(|l| l.stage_ns(stage)).collect();
        if ns.is_empty() {
            let _ = writeln!(out, "\n{}: no samples", stage.name());
            continue;
        }
        ns.sort_unstable();
        // Nearest rank: the smallest sample with at least p % of them at or below it.
        let pct = |p: usize| ns[(ns.len() * p).div_ceil(100).max(1) - 1];
        let _ = writeln!(
            out,
            "\n{}: n={} min={} p50={} p99={} max={} us",
            stage.name(),
            ns.len(),
            fmt_us(ns[0]),
            fmt_us(pct(50)),
            fmt_us(pct(99)),
            fmt_us(ns[ns.len() - 1]),
        );
        for (upper_us, count) in buckets(&ns) {
            let bar = "#".repeat((count * 40).div_ceil(ns.len()));
            let _ = writeln!(out, "  < {upper_us:>8} us {count:>7} {bar}");
        }
    }
    out
}

/// Counts of `ns` below 1, 2, 4, ... microseconds (only the buckets from the first to the last
/// that holds a sample).
fn buckets(ns: &[u64]) -> Vec<(u64, usize)> {
    let bucket = |v: u64| {
        let us = v / 1000;
        if us == 0 {
            0
        } else {
            64 - us.leading_zeros()
        }
    };
    let (lo, hi) = (bucket(ns[0]), bucket(ns[ns.len() - 1]));
    (lo..=hi)
        .map(|b| {
            let count = ns.iter().filter(|&&v| bucket(v) == b).count();
            (1u64 << b, count)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::lives::tests::two_writes;
    use super::*;

    #[test]
    fn the_timeline_has_a_line_per_record_and_sums_up_each_completed_wqe() {
        let dump = two_writes();
        let text = timeline(std::slice::from_ref(&dump), &["rox0".into()]);
        let records = text.lines().filter(|l| l.contains(" us  rox0")).count();
        assert_eq!(records, dump.records.len());
        assert!(
            text.contains("frame out    psn=0xfffffe WRITE_FIRST 4096 B"),
            "{text}"
        );
        assert!(
            text.contains("RETRANSMIT   from psn=0x000000 (sequence NAK)"),
            "{text}"
        );
        let sums: Vec<&str> = text.lines().filter(|l| l.contains("=>")).collect();
        assert_eq!(sums.len(), 2, "{text}");
        assert!(sums[1].contains("CQE->interrupt 0.200 us"), "{text}");
        assert!(sums[1].contains("1 retransmissions"), "{text}");
    }

    #[test]
    fn naps_sleeps_and_wakes_are_device_lines_of_the_timeline() {
        use super::super::lives::tests::rec;
        let mut dump = two_writes();
        let nap = rec(1, Kind::Wait, 0, 12, 9, 0, 0);
        let mut sleep = rec(2, Kind::Wait, 0, 70_000, u32::MAX, 0, 0);
        sleep.flags = WAIT_IDLE;
        dump.records
            .splice(0..0, [nap, rec(2, Kind::Wake, 0, 0, 0, 0, 0), sleep]);
        let text = timeline(std::slice::from_ref(&dump), &["rox0".into()]);
        assert!(text.contains("napped       12 us (asked 9 us)"), "{text}");
        assert!(
            text.contains("slept        70000 us (asked no limit)"),
            "{text}"
        );
        assert!(
            text.contains("wake         (wake register written)"),
            "{text}"
        );
        let sums = text.lines().filter(|l| l.contains("=>")).count();
        assert_eq!(sums, 2, "they change no WQE's life: {text}");
    }

    #[test]
    fn one_wqes_timeline_runs_from_its_doorbell_to_its_interrupt() {
        use super::super::lives::tests::rec;
        let mut dump = two_writes();
        // A later SEND on the same QP: not part of the last WRITE's life.
        dump.records.push(rec(9000, Kind::Doorbell, 5, 3, 1, 0, 0));
        dump.records
            .push(rec(9100, Kind::WqeFetch, 5, 2, 8, WR_SEND, 12));
        let names = ["rox0".to_string()];
        let text = wqe_timeline(std::slice::from_ref(&dump), &names, "RDMA_WRITE").unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(" us  rox0")).collect();
        assert_eq!(lines.len(), 18, "{text}");
        assert!(lines[0].trim_start().starts_with("0.000 us"), "{text}");
        assert!(lines[17].contains("interrupt    vector=1"), "{text}");
        assert!(text.contains("=> RDMA_WRITE 8192 B wr_id=0xb"), "{text}");
        let send = wqe_timeline(std::slice::from_ref(&dump), &names, "SEND").unwrap();
        assert_eq!(send.lines().count(), 2, "{send}");
        assert!(wqe_timeline(&[two_writes()], &names, "SEND").is_none());
    }

    #[test]
    fn the_last_wqe_is_the_last_in_time_whichever_device_it_is_on() {
        let later = || {
            let mut d = two_writes();
            d.records.iter_mut().for_each(|r| r.ts_ns += 100_000);
            d
        };
        for (dumps, names) in [
            ([later(), two_writes()], ["late", "early"]),
            ([two_writes(), later()], ["early", "late"]),
        ] {
            let names = names.map(String::from);
            let text = wqe_timeline(&dumps, &names, "RDMA_WRITE").unwrap();
            assert!(text.lines().all(|l| !l.contains("early")), "{text}");
            assert!(text.contains("late"), "{text}");
        }
    }

    #[test]
    fn histograms_count_every_stage_sample() {
        let text = histograms(&[two_writes()]);
        assert!(text.starts_with("2 WQEs"), "{text}");
        assert!(text.contains("doorbell->fetch: n=2 min=0.100"), "{text}");
        assert!(text.contains("CQE->interrupt: n=1"), "{text}");
        assert!(text.contains("<        1 us       2"), "{text}");
        assert!(
            text.contains("min=0.200 p50=0.200 p99=0.200 max=0.200"),
            "{text}"
        );
    }

    #[test]
    fn buckets_are_powers_of_two_microseconds() {
        assert_eq!(
            buckets(&[500, 1500, 5000]),
            [(1, 1), (2, 1), (4, 0), (8, 1)]
        );
    }

    #[test]
    fn opcodes_have_names_by_class() {
        assert_eq!(opcode_name(RC_WRITE_ONLY), "WRITE_ONLY");
        assert_eq!(opcode_name(UD_SEND_ONLY), "UD_SEND_ONLY");
        assert_eq!(opcode_name(CLASS_UC | RC_SEND_FIRST), "UC_SEND_FIRST");
        assert_eq!(opcode_name(0x1f), "opcode 0x1f");
    }
}
