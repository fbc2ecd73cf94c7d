//! The data-path thread: admin queue, event queues, doorbell polling with adaptive backoff and
//! the idle/arm/wake protocol, WQE fetch and decode, the transport engine, the Ethernet port
//! and the paired netdev. This file: the thread's loop, its sleep and wake protocol and its
//! control messages; `admin_queue`, `sq` (doorbells, send queues, WQE decoding) and `wire_io`
//! (frames in and out) are the rest.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use rox_uapi::admin::*;
use rox_uapi::ids::Qpn;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

mod admin_queue;
mod dead;
pub(super) mod sched;
mod spin;
mod sq;
mod wire_io;

use super::admin::execute;
use super::admin_fault::AdminFaults;
use super::deferred::Deferred;
use super::ring::{posted_entries, WildIndex};
use super::state::{Eq, Hw};
use super::{Control, DeviceConfig, DeviceError, Shared};
use crate::port::frame::{self, Arrival, Mac, ETH_HEADER_LEN};
use crate::port::netdev::{Forwarded, Netdev};
use crate::port::{FrameRef, Port, DEFAULT_SOCKET_MTU};
use crate::roce::cc::CcConfig;
use crate::roce::wire::{self, FlushIcrc, IpView};
use crate::roce::{
    self, AddressVector, Engine, FailedWr, FastReg, FlushSpec, Gid, Mtu, MwBind, SendData, SendWr,
    UdDest, WcStatus, WrOpcode,
};
use crate::sys;

use admin_queue::AdminQueue;
use sched::TxScheduler;
use spin::{Backoff, Expectation, Step};
pub use spin::{Side, POSTED_SPIN_PERIOD, SPIN_PERIOD};
pub use sq::decode_send;

pub use super::admin::DEVICE_CAPS;

/// WQEs fetched from one SQ per pass, so one busy QP cannot starve the others.
const SQ_BATCH: u32 = 64;
/// Loopback packets handled per pass.
const RX_BATCH: usize = 256;
/// While no frame arrives, the data path looks at the port and netdev at most this often; an
/// empty `recvmmsg` per pass of a spinning loop cost more system calls than the traffic did.
const WIRE_POLL_INTERVAL: Duration = Duration::from_micros(5);
/// Receive batches per pass and link (each up to `port::BATCH` frames): bounds a pass so
/// doorbells and timers are looked at between bursts.
const RX_BATCHES_PER_PASS: usize = 4;
pub struct DataPath {
    shared: Arc<Shared>,
    ctl: Receiver<Control>,
    hw: Hw,
    engine: Engine,
    port: Option<Port>,
    netdev: Option<Netdev>,
    admin: Option<AdminQueue>,
    admin_pi: u32,
    /// Injected refusals (`admin_fault`): outlive resets, so a count runs across loads.
    admin_faults: AdminFaults,
    mac: [u8; 6],
    /// The ICRC of the FLUSH requests it sends: configuration, which a reset keeps.
    flush_icrc: FlushIcrc,
    /// Congestion control: configuration, which a reset keeps.
    cc: CcConfig,
    /// When a pass without work spins, naps or goes idle (with `--adaptive-spin`, from the
    /// recent idle periods it records).
    backoff: Backoff,
    /// The timer slack this thread sets for its naps (None: the thread's default).
    nap_slack: Option<Duration>,
    /// The port's own count of frames sent, as far as `STAT_PORT_TX_FRAMES` has it.
    port_tx_seen: u64,
    /// The port's own count of frames lost, as far as the port's discards counter has it.
    port_drops_seen: u64,
    /// The port's own count of refused segmentation requests, as far as
    /// `STAT_PORT_RX_GSO_REFUSED` has it.
    port_gso_refused_seen: u64,
    /// The last look at the port and netdev found frames.
    wire_busy: bool,
    last_wire_poll: Instant,
    /// What the last doorbell scan looked at (kept for its allocations).
    scan_news: sq::DoorbellNews,
    /// Packets the device sent to its own GIDs, received on the next look.
    loopback: VecDeque<wire::Packet>,
    /// Something was queued on the port since the last flush.
    port_queued: bool,
    /// The engine's `tx_responses` when the port was last flushed: answers made since then
    /// may wait in the port's queue.
    responses_at_flush: u64,
    /// Whether an answer is expected in this idle period (how long to spin before a nap).
    expectation: Expectation,
    /// Where the first work since the last pass without work came from (None: nothing
    /// QP-specific, or no work yet): the side of the device's work that ended an idle period,
    /// for the adaptive spin's record.
    work_side: Option<Side>,
}

enum Flow {
    Continue,
    Shutdown,
}

/// Which of its fds ended a wait (none: it timed out or a signal came).
#[derive(Clone, Copy, Default)]
struct Woken {
    /// The wake eventfd: a trapped `WAKE_REG` write, a control message or another register
    /// write that wakes the device.
    wake: bool,
    /// The posted-wake companion's eventfd.
    posted: bool,
    /// The port or the paired netdev.
    wire: bool,
}

impl DataPath {
    pub fn new(
        shared: Arc<Shared>,
        ctl: Receiver<Control>,
        cfg: &DeviceConfig,
    ) -> Result<DataPath, DeviceError> {
        let port = match &cfg.port {
            Some(pc) => Some(Port::open(pc, cfg.mac)?),
            None => None,
        };
        let max_frame = port
            .as_ref()
            .map_or(DEFAULT_SOCKET_MTU + ETH_HEADER_LEN, Port::max_frame);
        let netdev = match &cfg.netdev {
            Some(spec) => {
                Some(
                    Netdev::open(spec, max_frame).map_err(|source| DeviceError::Netdev {
                        spec: spec.clone(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        let hw = fresh_hw(&shared, cfg.mac, port.is_some(), cfg.flush_icrc);
        Ok(DataPath {
            shared,
            ctl,
            hw,
            engine: Engine::with_ud_mtu(Mtu::largest_within(max_frame - ETH_HEADER_LEN))
                .with_cc(cfg.cc.clone()),
            port,
            netdev,
            admin: None,
            admin_pi: 0,
            admin_faults: AdminFaults::new(&cfg.admin_faults),
            mac: cfg.mac,
            flush_icrc: cfg.flush_icrc,
            cc: cfg.cc.clone(),
            backoff: Backoff::new(cfg)?,
            nap_slack: cfg.nap_slack,
            port_tx_seen: 0,
            port_drops_seen: 0,
            port_gso_refused_seen: 0,
            wire_busy: false,
            last_wire_poll: Instant::now(),
            scan_news: sq::DoorbellNews::default(),
            loopback: VecDeque::new(),
            port_queued: false,
            responses_at_flush: 0,
            expectation: Expectation::default(),
            work_side: None,
        })
    }

    pub fn run(mut self) {
        self.set_nap_timer_slack();
        self.shared
            .datapath_tid
            .store(sys::poll::thread_id(), Ordering::Relaxed);
        self.shared.status.fetch_or(STATUS_READY, Ordering::AcqRel);
        let mut last_work = Instant::now();
        // The end of the last work, which a sleep does not move (`last_work` restarts the
        // backoff after one): an idle period's gap for the backoff's spin history.
        let mut work_ended = last_work;
        loop {
            self.shared.loop_passes.fetch_add(1, Ordering::Relaxed);
            let (flow, mut work) = self.drain_control();
            if let Flow::Shutdown = flow {
                break;
            }
            if self.shared.is_dead() {
                self.dead_pass();
                continue;
            }
            self.hw.mem = self.shared.mem();
            // The pass's one clock read for its own bookkeeping (when the wire is due, how
            // long nothing happened): a read costs 24-60 ns, and a pass that found no work
            // read the clock four times, most of what a spinning pass does (a `perf` profile
            // of the 8 B WRITE bench, docs/benchmarks/session-09.md, "Session 9: 8 B messages over
            // the cable").
            let pass_now = Instant::now();
            if !self.shared.is_fatal() {
                // Each engine call site drains the deferred work it left.
                work |= self.run_admin();
                self.refill_tx_budget();
                work |= self.scan_doorbells();
                work |= self.run_deferred();
                work |= self.receive(pass_now);
                self.engine.poll(&mut self.hw);
                work |= self.run_deferred();
                work |= self.run_tx_turns();
                work |= self.flush_port();
            }
            if work {
                self.shared.loop_work_passes.fetch_add(1, Ordering::Relaxed);
                last_work = Instant::now();
                self.expectation.work_done();
                let side = self.work_side.take().unwrap_or(Side::OTHER);
                self.backoff
                    .work_came(pass_now.saturating_duration_since(work_ended), side);
                work_ended = last_work;
                continue;
            }
            // Every side named is taken by the work it came with (`go_idle`'s re-scan takes its
            // own): cleared only to be sure no stale one names a later period.
            self.work_side = None;
            // Taken during this pass, which found no work: as good as a fresh read.
            let idle_for = pass_now.saturating_duration_since(last_work);
            let expecting = self.backoff.uses_expectation()
                && self.expectation.expecting(
                    self.hw.stats[STAT_RX_PACKETS],
                    self.hw.stats[STAT_CQES],
                    || self.engine.packets_in_flight(),
                );
            let posted = self.shared.wakes_posted();
            let step = self.backoff.next_step(idle_for, expecting, posted);
            #[cfg(feature = "testkit")]
            if let Some(side) = self.backoff.take_opened() {
                self.shared.spin_sides.record(side);
            }
            match step {
                Step::Spin => std::hint::spin_loop(),
                Step::Nap(nap) => {
                    self.shared.loop_naps.fetch_add(1, Ordering::Relaxed);
                    // Wake at once for a packet, a trapped register write or an engine timer.
                    let timeout = self.timer_timeout().map_or(nap, |t| t.min(nap));
                    self.wait(Some(timeout));
                    // The wait may have ended for a frame: look at once.
                    self.wire_busy = true;
                }
                Step::Idle => {
                    let rescan_found_work = self.go_idle();
                    last_work = Instant::now();
                    self.expectation.work_done();
                    self.wire_busy = true;
                    if rescan_found_work {
                        // The re-scan's work ends the idle period as a work pass would: it
                        // may leave the next pass nothing (a flush, a parked QP, a CQ arm),
                        // and the period would stay open to take a later gap.
                        let side = self.work_side.take().unwrap_or(Side::OTHER);
                        self.backoff
                            .work_came(last_work.saturating_duration_since(work_ended), side);
                        work_ended = last_work;
                    }
                }
            }
        }
        if let Some(p) = &mut self.port {
            let _ = p.flush_capture();
        }
    }

    /// Takes what arrived (the loopback queue, and the wire when due: the answers to each batch
    /// of the port's frames leave right after it, `answer_taken`); after a pass that took
    /// something, sends the answers still owed and takes the same-device ones at once, so
    /// that the engine's timers, which run next, never see a request whose answer is one pass
    /// away: a thread that lost its core between the two (a loaded host) would send a tail
    /// probe or time the request out (t-driver-counters counts exactly; docs/testing.md).
    fn receive(&mut self, pass_now: Instant) -> bool {
        let mut got = self.receive_loopback();
        if self.wire_due(pass_now) {
            let wire = self.receive_port() | self.receive_netdev();
            self.wire_busy = wire;
            self.last_wire_poll = pass_now;
            got |= wire;
        }
        if got {
            self.answer_taken();
            self.receive_loopback();
            #[cfg(feature = "testkit")]
            self.shared.hold_before_timers.reached();
        }
        got
    }

    /// Sets this thread's timer slack (how late its naps may end) as configured (the kernel
    /// shows it in /proc/TID/timerslack_ns). A refusal leaves the default slack: naps end
    /// later, nothing breaks.
    fn set_nap_timer_slack(&self) {
        if let Some(slack) = self.nap_slack {
            if let Err(e) = sys::poll::set_timer_slack(slack) {
                log::warn!("rox-nic: data path keeps its default timer slack: {e}");
            }
        }
    }

    /// Time until the engine's next timer, if any.
    fn timer_timeout(&self) -> Option<Duration> {
        use roce::DeviceEnv;
        let deadline = self.engine.next_deadline()?;
        Some(Duration::from_nanos(
            deadline.saturating_sub(self.hw.now_ns()),
        ))
    }

    /// Block on the wake eventfds (trapped and posted), the port and the netdev for at most
    /// `timeout` (and no longer than until a link tries again to reach a missing peer).
    /// Returns which of them ended the wait.
    fn wait(&mut self, mut timeout: Option<Duration>) -> Woken {
        // Only a running trace reads the clock here (the trace's nap records).
        let began = self.shared.wqe_trace.is_on().then(Instant::now);
        let mut fds = [libc::pollfd {
            fd: self.shared.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }; 4];
        fds[1].fd = self.shared.posted_wake.as_raw_fd();
        let mut nfds = 2;
        let links = [
            self.port.as_ref().map(|p| (p.poll_fd(), p.retry_in())),
            self.netdev.as_ref().map(|l| (l.poll_fd(), l.retry_in())),
        ];
        for (poll_fd, retry_in) in links.into_iter().flatten() {
            if let Some((fd, wants_write)) = poll_fd {
                fds[nfds] = libc::pollfd {
                    fd,
                    events: libc::POLLIN | if wants_write { libc::POLLOUT } else { 0 },
                    revents: 0,
                };
                nfds += 1;
            }
            if let Some(r) = retry_in {
                timeout = Some(timeout.map_or(r, |t| t.min(r)));
            }
        }
        sys::poll::ppoll(&mut fds[..nfds], timeout);
        // Only an eventfd ppoll saw readable is read: the posted wake's is shared with
        // another process, which may have made it blocking.
        let woken = Woken {
            wake: self.shared.wake.drain_if_ready(&fds[0]),
            posted: self.shared.posted_wake.drain_if_ready(&fds[1]),
            wire: fds[2..nfds].iter().any(|f| f.revents != 0),
        };
        if woken.posted {
            self.hw.stats[STAT_WAKES_POSTED] += 1;
        }
        if let Some(began) = began {
            let idle = self.shared.idle.load(Ordering::Relaxed) == DB_DEVICE_IDLE;
            self.shared.wqe_trace.wait(began.elapsed(), timeout, idle);
        }
        woken
    }

    /// Counts why an idle sleep ended when no wake ended it (`STAT_WAKEUPS_*`): a doorbell
    /// rung while the device is up for one of these needs no wake, and tests that count wakes
    /// must know (tests/guest/wake_after_idle.py). A trapped wake is counted where it is
    /// written (`STAT_WAKES_TRAPPED`), a posted one by `wait`.
    fn count_wakeup(&mut self, woken: Woken) {
        let stats = &mut self.hw.stats;
        stats[STAT_WAKEUPS] += 1;
        if woken.wire {
            stats[STAT_WAKEUPS_WIRE] += 1;
        }
        // A control message is a driver's register write (each one signals the wake eventfd).
        if !self.ctl.is_empty() {
            stats[STAT_WAKEUPS_DRIVER] += 1;
        }
        if !(woken.wake || woken.posted || woken.wire) {
            stats[STAT_WAKEUPS_TIMER] += 1;
        }
    }

    /// The idle protocol: announce idleness in every doorbell page, re-scan once (a store that
    /// raced with the announcement is seen here), then sleep until woken unless the re-scan
    /// found work. Returns whether it did.
    fn go_idle(&mut self) -> bool {
        if let Some(p) = &mut self.port {
            p.flush_faults();
            let _ = p.flush_capture();
        }
        self.account_port_tx();
        let (rq_wake, rc_sq_quiet) = self.idle_wake_pages();
        // Only pages with objects: nothing else is rung (no admin command runs before the
        // wake below, so these are also the pages to set running again).
        let pages = self.hw.doorbells_used.pages();
        self.shared.idle.store(DB_DEVICE_IDLE, Ordering::SeqCst);
        self.shared
            .doorbells
            .set_idle_with_wakes(&pages, &rq_wake, &rc_sq_quiet);
        fence(Ordering::SeqCst);
        #[cfg(feature = "testkit")]
        self.shared.hold_before_idle_rescan.reached();
        let found = !self.shared.is_fatal() && self.scan_doorbells();
        if !found && self.ctl.is_empty() {
            let woken = self.wait(self.timer_timeout());
            self.count_wakeup(woken);
        }
        self.shared.doorbells.set_running(&pages);
        self.shared.idle.store(DB_DEVICE_RUNNING, Ordering::SeqCst);
        found
    }

    // ---- control messages ------------------------------------------------------------------

    fn drain_control(&mut self) -> (Flow, bool) {
        let mut work = false;
        while let Ok(msg) = self.ctl.try_recv() {
            work = true;
            match msg {
                Control::Shutdown => return (Flow::Shutdown, work),
                Control::Die(mode) => self.die(mode),
                _ if self.shared.is_dead() => {}
                Control::Reset => self.reset(),
                _ if self.shared.is_fatal() => {}
                Control::AdminEnable {
                    cmd_base,
                    cpl_base,
                    log_depth,
                } => self.admin_enable(cmd_base, cpl_base, log_depth),
                Control::AdminDisable => self.admin = None,
                Control::AdminDoorbell(pi) => self.admin_pi = pi,
                Control::EqEnable {
                    eqn,
                    base,
                    log_depth,
                } => self.eq_enable(eqn, base, log_depth),
                Control::EqDisable(eqn) => self.hw.eqs[eqn as usize] = None,
                Control::EqDoorbell { eqn, value } => self.hw.eq_doorbell(eqn, value),
            }
        }
        (Flow::Continue, work)
    }

    fn reset(&mut self) {
        // The device's configuration outlives a reset; only its state goes.
        self.hw = fresh_hw(&self.shared, self.mac, self.port.is_some(), self.flush_icrc);
        self.engine = Engine::with_ud_mtu(self.engine.ud_mtu()).with_cc(self.cc.clone());
        self.loopback.clear();
        self.admin = None;
        self.admin_pi = 0;
        self.shared.doorbells.clear();
        self.shared.fatal_code.store(FATAL_NONE, Ordering::Release);
        self.shared.status.store(STATUS_READY, Ordering::Release);
    }
    fn eq_enable(&mut self, eqn: u32, base: u64, log_depth: u32) {
        if !(EQ_LOG_DEPTH_MIN..=EQ_LOG_DEPTH_MAX).contains(&log_depth) {
            self.hw.set_fatal(FATAL_EQ_DMA);
            return;
        }
        let depth = 1u32 << log_depth;
        if self
            .shared
            .mem()
            .check(base, (depth as usize * EQE_SIZE) as u64)
            .is_err()
        {
            self.hw.set_fatal(FATAL_EQ_DMA);
            return;
        }
        self.hw.eqs[eqn as usize] = Some(Eq {
            base,
            depth,
            pi: 0,
            ci: 0,
            armed: true,
        });
    }
}

/// The device state of a new or reset device with these parts of its configuration.
fn fresh_hw(shared: &Arc<Shared>, mac: [u8; 6], has_port: bool, flush_icrc: FlushIcrc) -> Hw {
    let mut hw = Hw::new(shared.clone(), mac);
    hw.has_port = has_port;
    hw.tx_sched = TxScheduler::new(has_port);
    hw.flush_icrc = flush_icrc;
    hw
}
