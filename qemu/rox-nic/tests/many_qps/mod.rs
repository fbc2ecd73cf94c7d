//! Many RC QPs sharing one port: two devices on a `dgram` wire (a unix datagram socket pair,
//! whose buffer pushes back when the peer is slow), N QPs each WRITEing 8 KiB messages, all
//! posted at once. Shared by tests/device_sched.rs (every byte arrives, nothing is lost in the
//! device's own queue) and benches/qps.rs (what a run costs at 16 against 256 QPs).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rox_nic::testkit::pair::{rc_qps_over_dgram, RcQps};
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
/// ib_write_bw -s 8192 at a 4 KiB path MTU: two packets per message.
pub const MSG: u64 = 8192;
/// Messages in each run, spread evenly over its QPs: 16 MiB.
pub const MESSAGES: u64 = 2048;

/// Messages in each run: `ROX_QPS_MESSAGES` (the bench's; perftest's 12,800 is 50 a QP at 256
/// QPs, which the chase of session 19 needed), else [`MESSAGES`].
pub fn messages() -> u64 {
    std::env::var("ROX_QPS_MESSAGES").map_or(MESSAGES, |v| {
        v.parse()
            .ok()
            .filter(|&n| (1..=16_384).contains(&n))
            .unwrap_or_else(|| panic!("ROX_QPS_MESSAGES: {v:?} is not 1..=16384"))
    })
}

/// Whether each QP sends all its messages from one buffer to one (`ROX_QPS_BUFFERS=per-qp`,
/// as perftest does) instead of every message from and to bytes of its own (`per-message`,
/// the default).
pub fn per_qp_buffers() -> bool {
    match std::env::var("ROX_QPS_BUFFERS").as_deref() {
        Err(_) | Ok("per-message") => false,
        Ok("per-qp") => true,
        Ok(v) => panic!("ROX_QPS_BUFFERS: {v:?} is not per-message or per-qp"),
    }
}

/// What one run measured on the sending device, and how both devices' data-path loops ran.
pub struct Run {
    pub elapsed: Duration,
    pub retransmits: u64,
    pub timeouts: u64,
    pub port_tx_frames: u64,
    /// Frames the receiving device sent: its ACKs.
    pub acks: u64,
    /// Frames the sending port lost (its queue full, the wire refused them).
    pub xmit_discards: u64,
    /// The sender's and the receiver's data-path loop over the timed part of the run.
    pub loops: [Loop; 2],
}

/// How one device's data-path loop ran: counters moved over the timed part of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Loop {
    /// Passes of the loop.
    pub passes: u64,
    /// Passes that found work.
    pub work_passes: u64,
    /// Naps on the fds while backing off.
    pub naps: u64,
    /// Idle sleeps (the device announced idleness and slept until woken).
    pub sleeps: u64,
    /// SQ doorbells whose WQEs the device fetched (a batch each).
    pub fetches: u64,
    /// SQ doorbells of RC QPs parked while the port's flight was full.
    pub parked: u64,
}

/// How the run posts its WRITEs.
#[derive(Clone, Copy, Debug)]
pub enum Posting {
    /// Every WQE written, then every QP's doorbell rung once.
    AtOnce,
    /// As perftest's ib_write_bw does: QP after QP, each WQE rung on its own (librox rings
    /// per post), `gap` between posts (a guest's vCPU posts one every few µs).
    OneByOne { gap: Duration },
}

impl Posting {
    /// `ROX_QPS_POSTING`: `at-once` (the default) or `one-by-one[:GAP_NS]`.
    pub fn from_env() -> Posting {
        let v = std::env::var("ROX_QPS_POSTING").unwrap_or_default();
        match v.split_once(':').unwrap_or((&v, "0")) {
            ("" | "at-once", _) => Posting::AtOnce,
            ("one-by-one", gap) => Posting::OneByOne {
                gap: Duration::from_nanos(
                    gap.parse()
                        .unwrap_or_else(|_| panic!("ROX_QPS_POSTING: {gap:?} is not a gap in ns")),
                ),
            },
            _ => panic!("ROX_QPS_POSTING: {v:?} is not at-once or one-by-one[:GAP_NS]"),
        }
    }
}

impl Loop {
    fn now(d: &mut TestDriver) -> Loop {
        let s = d.shared().clone();
        Loop {
            passes: s.loop_passes.load(Ordering::Relaxed),
            work_passes: s.loop_work_passes.load(Ordering::Relaxed),
            naps: s.loop_naps.load(Ordering::Relaxed),
            sleeps: d.query_stats()[STAT_WAKEUPS],
            fetches: s.sq_fetches.load(Ordering::Relaxed),
            parked: s.parked_doorbells.load(Ordering::Relaxed),
        }
    }

    fn since(self, earlier: Loop) -> Loop {
        Loop {
            passes: self.passes - earlier.passes,
            work_passes: self.work_passes - earlier.work_passes,
            naps: self.naps - earlier.naps,
            sleeps: self.sleeps - earlier.sleeps,
            fetches: self.fetches - earlier.fetches,
            parked: self.parked - earlier.parked,
        }
    }
}

/// The ACK timeout of the test's QPs: 268 ms, since a loaded 2-core host is no reason for a WR
/// to fail.
pub const ACK_TIMEOUT: u8 = 16;

/// Called where the timed part of a run begins and ends, so that callgrind can count that
/// part alone (`--dump-before=*timed_part_*` writes one profile per part).
#[inline(never)]
pub fn timed_part_begins() {
    std::hint::black_box(());
}

/// See [`timed_part_begins`].
#[inline(never)]
pub fn timed_part_ends() {
    std::hint::black_box(());
}

/// `qps` RC QPs from a new device pair on `subnet` each WRITE `messages() / qps` messages, all
/// posted at once; waits for every completion and checks every byte at the receiver. The QPs'
/// ACK timeout is `ack_timeout` (IB's exponent: 4.096 µs × 2^n); `posting` says how they are
/// posted.
pub fn write_over_qps(dir: &Path, subnet: u8, qps: u64, ack_timeout: u8, posting: Posting) -> Run {
    let messages = messages();
    let per_qp = messages / qps;
    let spec = RcQps {
        subnet,
        count: qps,
        pd: PD,
        access: ACCESS,
        log_sq: (per_qp.next_power_of_two().trailing_zeros() as u8).max(2),
        // ROX_QPS_WAKE=posted: as rox.ko in a guest (the device sleeps once its spin ends).
        posted_wakes: std::env::var("ROX_QPS_WAKE").is_ok_and(|v| v == "posted"),
    };
    // Every message is signaled; the CQ (at least 2^12) holds all of them.
    let cq_log = (messages.next_power_of_two().trailing_zeros() as u8).max(12);
    let (mut a, mut b, mut a_cq, mut pairs) = rc_qps_over_dgram(dir, &spec, cq_log, ack_timeout);
    let total = messages * MSG;
    let (src, src_key) = a.buffer(PD, total, ACCESS);
    let (dst, dst_key) = b.buffer(PD, total, ACCESS);
    let data = pattern(u64::from(subnet), total as usize);
    // perftest's ib_write_bw -s 8192 sends every message of a QP from one 8 KiB buffer of its
    // own to one of the peer's (larger than its 4 KiB cycle buffer: no cycling), so the bytes
    // the devices touch grow with the QP count: 128 KiB a side at 16 QPs, 2 MiB at 256.
    let per_qp_buffers = per_qp_buffers();
    a.ram.write(src, &data);

    let trace_dir = std::env::var_os("ROX_QPS_TRACE_DIR").map(std::path::PathBuf::from);
    if trace_dir.is_some() {
        // Both devices' WQE traces over the timed part (docs/debugging.md), for rox-trace.
        a.shared().wqe_trace.start(Some(1 << 20));
        b.shared().wqe_trace.start(Some(1 << 20));
    }
    let loops_before = [Loop::now(&mut a), Loop::now(&mut b)];
    timed_part_begins();
    let start = Instant::now();
    for (q, qa) in pairs.iter_mut().enumerate() {
        for i in 0..per_qp {
            let at = if per_qp_buffers {
                q as u64 * MSG
            } else {
                (q as u64 * per_qp + i) * MSG
            };
            let w = send_wqe(
                at,
                WR_RDMA_WRITE,
                WQE_FLAG_SIGNALED,
                &[sge(src + at, MSG as u32, src_key)],
            );
            let w = with_rdma(w, dst + at, dst_key);
            match posting {
                Posting::AtOnce => a.write_send(qa, &w),
                Posting::OneByOne { gap } => {
                    // As librox rings an RC SQ of WRITEs (no wake while the idle device
                    // says its flight is full).
                    a.post_rc_send_as_librox(qa, &w);
                    let posted = Instant::now();
                    while posted.elapsed() < gap {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }
    if let Posting::AtOnce = posting {
        // Ring every doorbell at once: the device finds all QPs' work in one scan.
        for qa in &pairs {
            a.ring_sq(qa);
        }
    }
    for n in 0..messages {
        let c = a.wait_cqe(&mut a_cq);
        assert_eq!(c.status, WC_SUCCESS, "completion {n} (wr_id {})", c.wr_id);
    }
    let elapsed = start.elapsed();
    timed_part_ends();
    if let Some(dir) = trace_dir {
        for (d, side) in [(&a, "a"), (&b, "b")] {
            let path = dir.join(format!("{subnet}-{qps}-{side}.wqe-trace"));
            d.shared()
                .wqe_trace
                .write_dump(&path)
                .expect("the trace written");
        }
    }
    let loops = [
        Loop::now(&mut a).since(loops_before[0]),
        Loop::now(&mut b).since(loops_before[1]),
    ];
    let written = if per_qp_buffers { qps * MSG } else { total } as usize;
    assert!(
        b.ram.read(dst, written) == data[..written],
        "{qps} QPs: the received bytes differ from the sent ones"
    );
    let acks = b.query_stats()[STAT_PORT_TX_FRAMES];
    let stats = a.query_stats();
    Run {
        elapsed,
        retransmits: stats[STAT_RETRANSMITS],
        timeouts: stats[STAT_TIMEOUTS],
        port_tx_frames: stats[STAT_PORT_TX_FRAMES],
        acks,
        xmit_discards: a.port_counters().xmit_discards,
        loops,
    }
}
