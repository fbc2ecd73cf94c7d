//! The host benchmarks' message stream: two devices on a wire, one connected RC QP each; side
//! `a` keeps a window of signaled WRITEs or SENDs in flight to side `b`, which keeps receive
//! WRs posted for the SENDs.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

use super::watch::Watch;
use super::Rate;
use crate::device::Shared;
use crate::port::LinkSpec;
use crate::testkit::pair::Side;
use crate::testkit::*;

const PD: u32 = 1;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
/// The devices own GIDs 127.0.9.1 and .2.
const SUBNET: u8 = 9;
/// Whether the devices' posted spin adapts (`--adaptive-spin`): `ROX_BENCH_ADAPTIVE_SPIN` 1 or
/// 0 if set, else the device's default.
fn adaptive_spin_from_env() -> Option<bool> {
    match std::env::var("ROX_BENCH_ADAPTIVE_SPIN").ok()?.as_str() {
        "1" => Some(true),
        "0" => Some(false),
        v => panic!("ROX_BENCH_ADAPTIVE_SPIN: 1 or 0, not {v}"),
    }
}

/// The QPs' local ACK timeout: 17 (537 ms), what rdma_cm gives a RoCE connection (its packet
/// lifetime 16, plus one). With ibv_rc_pingpong's 14 (67 ms) a WR failed with RETRY_EXC_ERR in
/// 11 of 300 runs of tests/bench_stream.rs on a loaded 2-core host (3 copies beside 2 busy
/// loops): in every one the responder's data-path thread was runnable and waited for a core
/// for 89-100 % of a 0.65-2.7 s gap (docs/benchmarks/session-10.md, "Session 10: the abort at 256
/// WQEs", its session 13 paragraph). A peer that does not
/// run answers no probe: only the timeout guards against it. `ROX_BENCH_ACK_TIMEOUT` (0-31)
/// sets another, to reproduce that.
const ACK_TIMEOUT: u8 = 17;
/// A gap without a completion this long or longer gets a report of the device threads
/// ([`Stream::longest_gap`]).
pub const REPORTED_GAP: Duration = Duration::from_millis(100);
/// The QPs' SQ and RQ hold 2^10 WQEs each, their CQ 2^12 CQEs.
const QUEUE_LOG_DEPTH: u8 = 10;
const CQ_LOG_DEPTH: u8 = 12;
/// The most WQEs a stream keeps in flight: half the SQ, and the RQ holds a window of receive
/// WRs at every point.
pub const MAX_WINDOW: u32 = 1 << (QUEUE_LOG_DEPTH - 1);

/// When a run of messages ends: after a time, or after a fixed number of messages.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Secs(f64),
    Msgs(u64),
}

/// How the application side waits while it has nothing to do (ROX_BENCH_WAIT).
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// `sched_yield` in a loop (the default, as the numbers of earlier sessions): the thread
    /// stays runnable; at load 13 it had a third of the process's CPU samples, most in the
    /// system call.
    Yield,
    /// `event`: sleep on the CQs' completion events (a verbs application's completion
    /// channel), leaving the cores to the device threads; the device then writes an EQE and
    /// signals an interrupt per wait (about 350 more instructions per 8 B WRITE).
    Event,
}

impl Wait {
    pub fn from_env() -> Wait {
        match std::env::var("ROX_BENCH_WAIT").as_deref() {
            Ok("yield") | Err(_) => Wait::Yield,
            Ok("event") => Wait::Event,
            Ok(other) => panic!("ROX_BENCH_WAIT: event or yield, not {other}"),
        }
    }
}

/// How the application side wakes an idle device (ROX_BENCH_WAKE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// `posted` (the default): through the device's posted-wake companion, as rox.ko does in
    /// rox-lab's guests, whose devices have one by default; the device then sleeps as soon as
    /// its spin ends, without napping first (`device/datapath/spin.rs`).
    Posted,
    /// `trapped`: through the wake register, as a driver of a device without a companion; the
    /// device then spins and naps 20 ms before it sleeps (what this bench measured until
    /// session 14).
    Trapped,
}

impl Wake {
    pub fn from_env() -> Wake {
        match std::env::var("ROX_BENCH_WAKE").as_deref() {
            Ok("posted") | Err(_) => Wake::Posted,
            Ok("trapped") => Wake::Trapped,
            Ok(other) => panic!("ROX_BENCH_WAKE: posted or trapped, not {other}"),
        }
    }
}

/// The devices' spin while wakes are posted, if `ROX_BENCH_POSTED_SPIN_US` sets one (else the
/// device's default, `POSTED_SPIN_PERIOD`, 10 µs); 0 has them sleep as soon as they have
/// nothing to do (`--posted-spin-us 0`). `spin` is the devices' spin, which it may not exceed.
fn posted_spin_from_env(spin: Duration) -> Option<Duration> {
    let v = std::env::var("ROX_BENCH_POSTED_SPIN_US").ok()?;
    Some(posted_spin(&v, spin).unwrap_or_else(|e| panic!("{e}")))
}

/// `ROX_BENCH_POSTED_SPIN_US`'s value `v` for devices whose spin is `spin`: refused here, with
/// the variable named, where it is longer than the spin (every device refuses that,
/// `Backoff::new`, which would otherwise stop the bench at device creation).
fn posted_spin(v: &str, spin: Duration) -> Result<Duration, String> {
    let us = v
        .parse()
        .map_err(|_| format!("ROX_BENCH_POSTED_SPIN_US: microseconds, not {v}"))?;
    let posted = Duration::from_micros(us);
    if posted > spin {
        return Err(format!(
            "ROX_BENCH_POSTED_SPIN_US={v}: at most the devices' spin, {} µs (a device never \
             spins longer while wakes are posted)",
            spin.as_micros()
        ));
    }
    Ok(posted)
}

/// The QPs' local ACK timeout: `ROX_BENCH_ACK_TIMEOUT` if set, else [`ACK_TIMEOUT`].
fn ack_timeout() -> u8 {
    match std::env::var("ROX_BENCH_ACK_TIMEOUT") {
        Err(_) => ACK_TIMEOUT,
        Ok(v) => match v.parse::<u8>() {
            Ok(t) if t <= 31 => t,
            _ => panic!("ROX_BENCH_ACK_TIMEOUT: 0 to 31 (4.096 us x 2^timeout), not {v}"),
        },
    }
}

/// The two sides of a stream and what it keeps posted.
pub struct Stream {
    pub a: Side,
    pub b: Side,
    /// WQEs in flight.
    window: u32,
    /// The largest message: a SEND lands at the start of `b`'s buffer, a WRITE `max_msg` in.
    max_msg: u64,
    /// Receive WRs posted on `b`'s RQ and not consumed yet. A SEND run leaves a window of them
    /// posted, so the next one tops them up to its window: posting a whole window per run
    /// overran the RQ (1024 WQEs) in the 5th SEND run at 256 WQEs in flight, the device made
    /// `b`'s QP fatal (a wild producer index), and `a`'s first SEND ended in
    /// `WC_RETRY_EXC_ERR` on a wire that lost nothing.
    recvs_posted: u32,
    /// When the current run started and when it last saw a completion, for a failure's report.
    run_start: Instant,
    last_done: Instant,
    /// The device threads, sampled at the last completion and through a gap after it.
    watch: Watch,
    /// The longest time the stream went without a completion of `a`'s, over all its runs.
    longest_gap: Duration,
    longest_gap_report: Option<String>,
}

impl Stream {
    /// Two devices on the wire of `la` and `lb`, connected at MTU 4096 with `window` WQEs in
    /// flight (1 to [`MAX_WINDOW`]), messages up to `max_msg` bytes, and one 8 B WRITE done
    /// between them: the ends of a cable meet on their data-path threads, so a first message
    /// may be lost and retransmitted before anything is measured.
    pub fn new(la: LinkSpec, lb: LinkSpec, window: u32, max_msg: u64) -> Stream {
        assert!((1..=MAX_WINDOW).contains(&window), "window {window}");
        let a = side(la, 1, max_msg);
        let b = side(lb, 2, max_msg);
        let mut s = Stream {
            a,
            b,
            window,
            max_msg,
            recvs_posted: 0,
            run_start: Instant::now(),
            last_done: Instant::now(),
            watch: Watch::new(),
            longest_gap: Duration::ZERO,
            longest_gap_report: None,
        };
        let (qa, qb) = (s.a.qp, s.b.qp);
        let params = ConnectParams {
            mtu: MTU_4096,
            timeout: ack_timeout(),
            ..Default::default()
        };
        s.a.d
            .connect_with(&qa, gid_v4(127, 0, SUBNET, 2), qb.qpn, ALL, &params);
        s.b.d
            .connect_with(&qb, gid_v4(127, 0, SUBNET, 1), qa.qpn, ALL, &params);
        s.run(WR_RDMA_WRITE, 8, Limit::Msgs(1), Wait::Yield);
        s
    }

    /// The longest time the stream went without a completion of `a`'s, over all its runs
    /// (a stalled device shows here before any WR fails), and what the device threads did
    /// through it if it lasted [`REPORTED_GAP`] or more (as a failure's report says it).
    pub fn longest_gap(&self) -> (Duration, Option<&str>) {
        (self.longest_gap, self.longest_gap_report.as_deref())
    }

    /// Completions came after `gap` without one: the longest gap's report is taken now, while
    /// the watch still holds the gap's samples.
    fn gap_ended(&mut self, gap: Duration) {
        let sides: [&Shared; 2] = [self.a.d.shared(), self.b.d.shared()];
        if gap > self.longest_gap {
            self.longest_gap = gap;
            if gap >= REPORTED_GAP {
                self.longest_gap_report = Some(self.watch.report(sides));
            }
        }
        self.watch.completion(sides);
    }

    pub fn window(&self) -> u32 {
        self.window
    }

    /// Posts receive WRs on `b` until `window` of them are posted and not consumed, as librox
    /// does: a receive WR wakes an idle device only if its doorbell page asks for it (the
    /// engine reads the RQ when a message needs a receive WR). Waking it for every one, with
    /// wakes posted (the device sleeps as soon as it has nothing to do), was a wake per SEND:
    /// 70-110k context switches per 100,000 8 B SENDs.
    fn top_up_recvs(&mut self) {
        let b = &mut self.b;
        while self.recvs_posted < self.window {
            assert!(self.recvs_posted < b.qp.rq_depth, "b's RQ is full");
            let len = self.max_msg as u32;
            b.d.post_recv_as_librox(
                &mut b.qp,
                u64::from(self.recvs_posted),
                &[sge(b.buf, len, b.key)],
            );
            self.recvs_posted += 1;
        }
    }

    /// Panics, saying what `b`'s QP is in and what the transport saw, if a completion of
    /// `side` failed.
    fn check(&mut self, side: &str, c: &Cqe) {
        if c.status != WC_SUCCESS {
            let report = self.failure_report();
            panic!(
                "{side}: WR {} completed with status {} (vendor error {:#x}) {:?} into the run, \
                 {:?} after the last completion; {report}",
                c.wr_id,
                c.status,
                c.vendor_err,
                self.run_start.elapsed(),
                self.last_done.elapsed()
            );
        }
    }

    /// What a failed completion needs said: `b`'s QP state, `a`'s QP's ACK timeout and retry
    /// count, and both sides' transport counters.
    fn failure_report(&mut self) -> String {
        let qa = self.a.d.query_qp(self.a.qp.qpn);
        let state = self.b.d.query_qp(self.b.qp.qpn).qp_state;
        let (sa, sb) = (self.a.d.query_stats(), self.b.d.query_stats());
        let (ca, cb) = (self.a.d.port_counters(), self.b.d.port_counters());
        format!(
            "b's QP is in state {state}; a's QP: timeout {} retry_cnt {}; \
             a: {} timeouts, {} retransmits (timeouts + rewinds), {} tail probes, \
             {} sequence NAKs received, {} transmit discards, {} frames sent, {} received; \
             b: {} duplicate requests, {} out of sequence, {} NAKs sent, {} ACKs sent, \
             {} transmit discards, {} frames sent, {} received, {} dropped; {}",
            qa.timeout,
            qa.retry_cnt,
            sa[STAT_TIMEOUTS],
            sa[STAT_RETRANSMITS],
            ca.roce_adp_retrans,
            ca.packet_seq_err,
            ca.xmit_discards,
            sa[STAT_PORT_TX_FRAMES],
            sa[STAT_PORT_RX_FRAMES],
            cb.duplicate_request,
            cb.out_of_sequence,
            sb[STAT_NAKS_SENT],
            sb[STAT_ACKS_SENT],
            cb.xmit_discards,
            sb[STAT_PORT_TX_FRAMES],
            sb[STAT_PORT_RX_FRAMES],
            sb[STAT_RX_DROPPED],
            self.watch.report([self.a.d.shared(), self.b.d.shared()]),
        )
    }

    /// Streams `opcode` messages of `size` bytes from `a` to `b` until `limit`, then waits for
    /// every one posted; the rate of those done.
    pub fn run(&mut self, opcode: u8, size: u64, limit: Limit, wait: Wait) -> Rate {
        assert!(size <= self.max_msg);
        let (mut posted, mut done) = (0u64, 0u64);
        let window = u64::from(self.window);
        let send = opcode == WR_SEND;
        if send {
            self.top_up_recvs();
        }
        let start = Instant::now();
        (self.run_start, self.last_done) = (start, start);
        self.watch
            .completion([self.a.d.shared(), self.b.d.shared()]);
        let mut stop = false;
        let mut idle_polls = 0u32;
        while !stop || done < posted {
            // The machine may have only two cores for two device threads: the application side
            // does not spin when it has nothing to do.
            if idle_polls > 0 {
                self.watch.idle([self.a.d.shared(), self.b.d.shared()]);
                match wait {
                    Wait::Yield => std::thread::yield_now(),
                    Wait::Event if send => wait_for_cqe(&mut [&mut self.a, &mut self.b]),
                    Wait::Event => wait_for_cqe(&mut [&mut self.a]),
                }
            }
            if !stop {
                stop = match limit {
                    Limit::Secs(secs) => start.elapsed().as_secs_f64() > secs,
                    Limit::Msgs(n) => posted >= n,
                };
            }
            let before = done;
            let mut n = 0;
            let a = &mut self.a;
            while !stop && posted - done < window && !matches!(limit, Limit::Msgs(n) if posted >= n)
            {
                let w = send_wqe(
                    posted,
                    opcode,
                    WQE_FLAG_SIGNALED,
                    &[sge(a.buf, size as u32, a.key)],
                );
                let w = with_rdma(w, self.b.buf + self.max_msg, self.b.key);
                a.d.write_send(&mut a.qp, &w);
                posted += 1;
                n += 1;
            }
            if n > 0 {
                let qp = a.qp;
                a.d.ring_sq(&qp);
            }
            let done_before = done;
            let before_poll = self.last_done;
            while let Some(c) = self.a.d.poll_cq(&mut self.a.cq) {
                self.check("a", &c);
                done += 1;
                self.last_done = Instant::now();
            }
            if done > done_before {
                self.gap_ended(self.last_done.duration_since(before_poll));
            }
            if send {
                while let Some(c) = self.b.d.poll_cq(&mut self.b.cq) {
                    self.check("b", &c);
                    self.recvs_posted -= 1;
                    self.top_up_recvs();
                }
            }
            idle_polls = if done == before && n == 0 {
                idle_polls + 1
            } else {
                0
            };
        }
        let t = start.elapsed().as_secs_f64();
        if send {
            // Receives of SENDs still being completed on b: consumed, not posted any more.
            while let Some(c) = self.b.d.poll_cq(&mut self.b.cq) {
                self.check("b", &c);
                self.recvs_posted -= 1;
            }
        }
        Rate::new(done, size, t)
    }
}

/// Device `last` on `link` with its CQ, its RC QP and a buffer of two largest messages.
fn side(link: LinkSpec, last: u8, max_msg: u64) -> Side {
    let wake = Wake::from_env();
    let port = crate::port::PortConfig::new(link);
    let mut d = port_device_config(port, SUBNET, last, |cfg| {
        cfg.posted_wake = wake == Wake::Posted;
        if let Some(spin) = posted_spin_from_env(cfg.spin) {
            cfg.posted_spin = spin;
        }
        if let Some(adaptive) = adaptive_spin_from_env() {
            cfg.adaptive_spin = adaptive;
        }
    });
    if wake == Wake::Posted {
        d.wake_through_companion();
    }
    let cq = d.create_cq(CQ_LOG_DEPTH);
    let (c, mut qp) = d.create_qp_cmd(
        QPT_RC,
        PD,
        cq.id,
        cq.id,
        rox_uapi::admin::SRQ_NONE,
        QUEUE_LOG_DEPTH,
        QUEUE_LOG_DEPTH,
    );
    qp.qpn = d.run::<rox_uapi::admin::CreateQp>(c);
    let (buf, key) = d.buffer(PD, 2 * max_msg, ALL);
    Side {
        d,
        cq,
        qp,
        buf,
        key,
    }
}

/// Arms the CQs of `sides` and sleeps until one of them has a completion event (a CQE that
/// came before the arm fires at once: the device checks) or 1 ms passed; then re-arms their
/// completion EQs.
fn wait_for_cqe(sides: &mut [&mut Side]) {
    const SAFETY_NET: Duration = Duration::from_millis(1);
    let mut fds = Vec::with_capacity(sides.len());
    for s in sides.iter_mut() {
        s.d.arm_cq(&mut s.cq, rox_uapi::regs::CQ_ARM_NEXT);
        fds.push(libc::pollfd {
            fd: s.d.vectors[COMP_EQ as usize].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    crate::sys::poll::ppoll(&mut fds, Some(SAFETY_NET));
    for s in sides.iter_mut() {
        s.d.vectors[COMP_EQ as usize].drain();
        while s.d.poll_eq(COMP_EQ).is_some() {}
        s.d.ack_eq(COMP_EQ, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_posted_spin_longer_than_the_spin_is_refused_naming_the_variable() {
        let spin = Duration::from_micros(10);
        assert_eq!(posted_spin("0", spin), Ok(Duration::ZERO));
        assert_eq!(posted_spin("10", spin), Ok(spin));
        let err = posted_spin("11", spin).unwrap_err();
        assert!(
            err.starts_with("ROX_BENCH_POSTED_SPIN_US=11: at most the devices' spin, 10 µs"),
            "{err}"
        );
        let err = posted_spin("ten", spin).unwrap_err();
        assert_eq!(err, "ROX_BENCH_POSTED_SPIN_US: microseconds, not ten");
    }
}
