//! The data-path thread: admin queue, event queues, doorbell polling with adaptive backoff and
//! the idle/arm/wake protocol, WQE fetch and decode, the transport engine, the Ethernet port
//! and the paired netdev.

use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use rox_uapi::admin::*;
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use super::admin::{current_state, execute};
use super::ring::{posted_entries, WildIndex};
use super::state::{Eq, Hw};
use super::{Control, DeviceConfig, DeviceError, Shared};
use crate::port::frame::{self, Rx, ETH_HEADER_LEN};
use crate::port::netdev::{Forwarded, Netdev};
use crate::port::{FrameRef, Port, DEFAULT_SOCKET_MTU};
use crate::roce::{
    self, AddressVector, Engine, FailedWr, FastReg, FlushSpec, Mtu, MwBind, SendData, SendWr,
    UdDest, WcStatus, WrOpcode,
};

pub use super::admin::DEVICE_CAPS;

/// How long the loop spins (no syscalls) after the last piece of work.
const SPIN_PERIOD: Duration = Duration::from_micros(50);
/// Longest nap between polls while backing off (before going idle).
const MAX_NAP: Duration = Duration::from_micros(500);
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

struct AdminQueue {
    cmd_base: u64,
    cpl_base: u64,
    depth: u32,
    ci: u32,
}

pub struct DataPath {
    shared: Arc<Shared>,
    ctl: Receiver<Control>,
    hw: Hw,
    engine: Engine,
    port: Option<Port>,
    netdev: Option<Netdev>,
    admin: Option<AdminQueue>,
    admin_pi: u32,
    mac: [u8; 6],
    idle_after: Duration,
    /// The port's own count of frames sent, as far as `STAT_PORT_TX_FRAMES` has it.
    port_tx_seen: u64,
    /// The last look at the port and netdev found frames.
    wire_busy: bool,
    last_wire_poll: Instant,
    scan_buf: Vec<Qpn>,
}

enum Flow {
    Continue,
    Shutdown,
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
        let mut hw = Hw::new(shared.clone(), cfg.mac);
        hw.has_port = port.is_some();
        Ok(DataPath {
            shared,
            ctl,
            hw,
            engine: Engine::with_ud_mtu(Mtu::largest_within(max_frame - ETH_HEADER_LEN)),
            port,
            netdev,
            admin: None,
            admin_pi: 0,
            mac: cfg.mac,
            idle_after: cfg.idle_after,
            port_tx_seen: 0,
            wire_busy: false,
            last_wire_poll: Instant::now(),
            scan_buf: Vec::new(),
        })
    }

    pub fn run(mut self) {
        self.shared.status.fetch_or(STATUS_READY, Ordering::AcqRel);
        let mut last_work = Instant::now();
        loop {
            self.shared.loop_passes.fetch_add(1, Ordering::Relaxed);
            let (flow, mut work) = self.drain_control();
            if let Flow::Shutdown = flow {
                break;
            }
            self.hw.mem = self.shared.mem();
            if !self.shared.is_fatal() {
                work |= self.run_admin();
                work |= self.scan_doorbells();
                work |= self.receive_loopback();
                if self.wire_due() {
                    let got = self.receive_port() | self.receive_netdev();
                    self.wire_busy = got;
                    self.last_wire_poll = Instant::now();
                    work |= got;
                }
                self.engine.poll(&mut self.hw);
                self.fail_broken_qps();
                self.hw.post_deferred_events();
                work |= self.flush_outbound();
            }
            if work {
                last_work = Instant::now();
                continue;
            }
            let idle_for = last_work.elapsed();
            if idle_for < SPIN_PERIOD {
                std::hint::spin_loop();
                continue;
            }
            if idle_for < self.idle_after {
                // Back off: nap longer the longer nothing happened, but wake at once for a
                // packet, a trapped register write or an engine timer.
                let nap = (idle_for / 8).min(MAX_NAP);
                let timeout = self.timer_timeout().map_or(nap, |t| t.min(nap));
                self.wait(Some(timeout));
                // The wait may have ended for a frame: look at once.
                self.wire_busy = true;
                continue;
            }
            if self.go_idle() {
                last_work = Instant::now();
                self.wire_busy = true;
            }
        }
        if let Some(p) = &mut self.port {
            let _ = p.flush_capture();
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

    /// Block on the wake eventfd, the port and the netdev for at most `timeout` (and no
    /// longer than until a link tries again to reach a missing peer).
    fn wait(&self, mut timeout: Option<Duration>) {
        let mut fds = [libc::pollfd {
            fd: self.shared.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }; 3];
        let mut nfds = 1;
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
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the first `nfds` entries of fds and ts are valid for the duration of the call.
        unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                nfds as libc::nfds_t,
                tsp,
                std::ptr::null(),
            )
        };
        self.shared.wake.drain();
    }

    /// The idle protocol: announce idleness in every doorbell page, re-scan once (a store that
    /// raced with the announcement is seen here), then sleep until woken. Returns true if it
    /// slept (or found work).
    fn go_idle(&mut self) -> bool {
        if let Some(p) = &mut self.port {
            p.flush_faults();
            let _ = p.flush_capture();
        }
        self.account_port_tx();
        self.shared.idle.store(DB_DEVICE_IDLE, Ordering::SeqCst);
        self.shared.doorbells.set_idle(DB_DEVICE_IDLE);
        fence(Ordering::SeqCst);
        let found = !self.shared.is_fatal() && self.scan_doorbells();
        if !found && self.ctl.is_empty() {
            self.wait(self.timer_timeout());
            self.hw.stats[STAT_WAKEUPS] += 1;
        }
        self.shared.doorbells.set_idle(DB_DEVICE_RUNNING);
        self.shared.idle.store(DB_DEVICE_RUNNING, Ordering::SeqCst);
        true
    }

    // ---- control messages ------------------------------------------------------------------

    fn drain_control(&mut self) -> (Flow, bool) {
        let mut work = false;
        while let Ok(msg) = self.ctl.try_recv() {
            work = true;
            match msg {
                Control::Shutdown => return (Flow::Shutdown, work),
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
        let has_port = self.port.is_some();
        self.hw = Hw::new(self.shared.clone(), self.mac);
        self.hw.has_port = has_port;
        self.engine = Engine::with_ud_mtu(self.engine.ud_mtu());
        self.admin = None;
        self.admin_pi = 0;
        self.shared.doorbells.clear();
        self.shared.fatal_code.store(FATAL_NONE, Ordering::Release);
        self.shared.status.store(STATUS_READY, Ordering::Release);
    }

    fn admin_enable(&mut self, cmd_base: u64, cpl_base: u64, log_depth: u32) {
        if !(ADMIN_LOG_DEPTH_MIN..=ADMIN_LOG_DEPTH_MAX).contains(&log_depth) {
            self.hw.set_fatal(FATAL_ADMIN_CONFIG);
            return;
        }
        let depth = 1u32 << log_depth;
        let mem = self.shared.mem();
        if mem
            .check(cmd_base, (depth as usize * ADMIN_CMD_SIZE) as u64)
            .is_err()
            || mem
                .check(cpl_base, (depth as usize * ADMIN_CPL_SIZE) as u64)
                .is_err()
        {
            self.hw.set_fatal(FATAL_ADMIN_DMA);
            return;
        }
        self.admin = Some(AdminQueue {
            cmd_base,
            cpl_base,
            depth,
            ci: 0,
        });
        self.admin_pi = 0;
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

    // ---- admin queue -----------------------------------------------------------------------

    fn run_admin(&mut self) -> bool {
        let Some(aq) = &self.admin else { return false };
        match posted_entries(self.admin_pi, aq.ci, aq.depth) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(WildIndex) => {
                self.hw.set_fatal(FATAL_ADMIN_DOORBELL);
                return true;
            }
        }
        let (cmd_base, cpl_base, depth, mut ci) = (aq.cmd_base, aq.cpl_base, aq.depth, aq.ci);
        while ci != self.admin_pi {
            let idx = ci & (depth - 1);
            let cmd: AdminCmd = match self
                .hw
                .mem
                .read_obj(cmd_base + (idx as u64) * ADMIN_CMD_SIZE as u64)
            {
                Ok(c) => c,
                Err(_) => {
                    self.hw.set_fatal(FATAL_ADMIN_DMA);
                    return true;
                }
            };
            let mut cpl = execute(&mut self.hw, &mut self.engine, &cmd);
            cpl.owner = owner_for(ci, depth);
            if self
                .hw
                .mem
                .write_entry_owner_last(cpl_base + (idx as u64) * ADMIN_CPL_SIZE as u64, &cpl)
                .is_err()
            {
                self.hw.set_fatal(FATAL_ADMIN_DMA);
                return true;
            }
            ci = ci.wrapping_add(1);
            if let Some(aq) = &mut self.admin {
                aq.ci = ci;
            }
            self.hw.post_event(EQ_ADMIN_ASYNC, EQE_TYPE_ADMIN, idx, 0);
            self.fail_broken_qps();
            self.hw.post_deferred_events();
        }
        true
    }

    // ---- doorbells and send queues ---------------------------------------------------------

    fn scan_doorbells(&mut self) -> bool {
        self.hw.stats[STAT_DOORBELL_SCANS] += 1;
        let mut work = false;
        // Reuse one buffer: this runs every few microseconds while busy.
        let mut qpns = std::mem::take(&mut self.scan_buf);
        qpns.clear();
        qpns.extend(self.hw.qps.keys().copied());
        for &qpn in &qpns {
            work |= self.process_sq(qpn);
            work |= self.process_rq(qpn);
        }
        self.scan_buf = qpns;
        work | self.scan_cq_arms()
    }

    /// A CQ armed while it still holds unconsumed CQEs gets its event at once, so software
    /// that arms after a poll never sleeps on a completion that already arrived.
    fn scan_cq_arms(&mut self) -> bool {
        let mut fire = Vec::new();
        for (&id, cq) in self.hw.cqs.iter_mut() {
            let slot = self.shared.doorbells.slot(cq.db_page, cq.db_slot);
            if CqArm::from_bits(slot.b).seq == cq.arm_seq {
                continue;
            }
            Hw::update_arm(cq, slot.b);
            if cq.armed != 0 && cq.pi != slot.a && !cq.error {
                cq.armed = 0;
                fire.push((id, cq.eqn));
            }
        }
        for (id, eqn) in &fire {
            self.hw.post_event(*eqn, EQE_TYPE_COMPLETION, *id, 0);
        }
        !fire.is_empty()
    }

    /// QPs the env found broken inside an engine call become fatal now.
    fn fail_broken_qps(&mut self) {
        for (qpn, why) in std::mem::take(&mut self.hw.fatal_qps) {
            self.qp_fatal(qpn, why);
        }
    }

    /// A QP whose queues cannot be trusted any more: async event, error state (which reports
    /// LAST_WQE for a QP with an SRQ).
    fn qp_fatal(&mut self, qpn: Qpn, why: u16) {
        if let Some(qp) = self.hw.qps.get_mut(&qpn) {
            qp.broken = true;
        }
        self.hw
            .async_event(EQE_TYPE_QP_FATAL, qpn.get(), why as u32);
        let _ = self.engine.set_error(&mut self.hw, qpn);
    }

    fn process_sq(&mut self, qpn: Qpn) -> bool {
        let Some(qp) = self.hw.qps.get(&qpn) else {
            return false;
        };
        if qp.broken {
            return false;
        }
        let state = current_state(&self.hw, &self.engine, qpn);
        // WQEs posted before RTS wait; in SQD new WQEs wait for the return to RTS.
        if !matches!(state, QPS_RTS | QPS_SQE | QPS_ERR) {
            return false;
        }
        let pi = self.shared.doorbells.slot(qp.db_page, qp.db_slot).a;
        let pending = match posted_entries(pi, qp.sq_ci, qp.sq.depth) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(WildIndex) => {
                self.qp_fatal(qpn, VENDOR_ERR_WILD_INDEX);
                return true;
            }
        };
        for _ in 0..pending.min(SQ_BATCH) {
            let Some(qp) = self.hw.qps.get_mut(&qpn) else {
                return true;
            };
            let addr = qp.sq.entry_addr(qp.sq_ci);
            qp.sq_ci = qp.sq_ci.wrapping_add(1);
            let sig_all = qp.sq_sig_all;
            let qp_type = qp.qp_type;
            let wqe: SqWqe = match self.hw.mem.read_obj(addr) {
                Ok(w) => w,
                Err(_) => {
                    self.qp_fatal(qpn, VENDOR_ERR_BAD_DMA);
                    return true;
                }
            };
            self.hw.stats[STAT_SEND_WQES] += 1;
            match decode_send(&self.hw, qp_type, sig_all, &wqe) {
                Ok(wr) => {
                    let _ = self.engine.post_send(&mut self.hw, qpn, wr);
                }
                Err((status, vendor_err)) => {
                    // Completes behind the WRs already in the engine, then the QP leaves RTS.
                    self.hw.stats[STAT_WQE_ERRORS] += 1;
                    let failed = FailedWr {
                        wr_id: wqe.wr_id,
                        // An unknown opcode completes as a SEND (what ibv reports for it).
                        opcode: WrOpcode::from_u8(wqe.opcode).unwrap_or(WrOpcode::Send),
                        status,
                        vendor_err,
                    };
                    let _ = self.engine.post_failed(&mut self.hw, qpn, failed);
                }
            }
        }
        true
    }

    /// Receive WQEs are consumed on demand by the engine; the doorbell only matters to flush
    /// new ones in the error state.
    fn process_rq(&mut self, qpn: Qpn) -> bool {
        let Some(qp) = self.hw.qps.get(&qpn) else {
            return false;
        };
        if qp.rq.is_none() || qp.broken {
            return false;
        }
        let pi = self.shared.doorbells.slot(qp.db_page, qp.db_slot).b;
        if pi == qp.rq_pi_seen {
            return false;
        }
        if let Some(qp) = self.hw.qps.get_mut(&qpn) {
            qp.rq_pi_seen = pi;
        }
        if current_state(&self.hw, &self.engine, qpn) == QPS_ERR {
            let _ = self.engine.recv_posted(&mut self.hw, qpn);
            return true;
        }
        false
    }

    // ---- port and netdev -------------------------------------------------------------------

    /// Packets the device sent to its own GIDs.
    fn receive_loopback(&mut self) -> bool {
        let mut work = false;
        for _ in 0..RX_BATCH {
            let Some(p) = self.hw.loopback.pop_front() else {
                break;
            };
            deliver(&mut self.engine, &mut self.hw, &p);
            work = true;
        }
        work
    }

    /// Whether to look at the port and netdev on this pass: always while frames keep coming,
    /// else at most every `WIRE_POLL_INTERVAL` (each look is a system call; doorbells are
    /// memory and are looked at on every pass).
    fn wire_due(&self) -> bool {
        (self.port.is_some() || self.netdev.is_some())
            && (self.wire_busy || self.last_wire_poll.elapsed() >= WIRE_POLL_INTERVAL)
    }

    /// Frames from the port: RoCEv2 for this device to the engine, the rest to the netdev.
    fn receive_port(&mut self) -> bool {
        let Some(port) = &mut self.port else {
            return false;
        };
        let mut work = false;
        let (mac, max_frame) = (port.mac(), port.max_frame());
        for _ in 0..RX_BATCHES_PER_PASS {
            let n = match port.recv() {
                Ok(n) => n,
                Err(e) => {
                    log::warn!("rox-nic: port receive: {e}");
                    break;
                }
            };
            if n == 0 {
                break;
            }
            work = true;
            self.hw.stats[STAT_PORT_RX_FRAMES] += n as u64;
            let mut to_netdev: Vec<FrameRef> = Vec::new();
            for f in port.frames() {
                match frame::classify(f, &mac, max_frame, |g| {
                    self.hw.is_own_gid(g) || self.hw.has_mcast_group(g)
                }) {
                    Rx::Roce(ip) => {
                        self.hw.stats[STAT_RX_BYTES] += ip.len() as u64;
                        deliver(&mut self.engine, &mut self.hw, &f[ip]);
                    }
                    Rx::Netdev => to_netdev.push(FrameRef::whole(f)),
                    Rx::Drop(counter) => self.hw.stats[counter] += 1,
                }
            }
            if !to_netdev.is_empty() {
                let forwarded = match &mut self.netdev {
                    Some(nd) => nd.forward(&to_netdev),
                    None => Forwarded {
                        delivered: 0,
                        dropped: to_netdev.len() as u64,
                    },
                };
                count_forwarded(&mut self.hw, forwarded);
            }
            if n < crate::port::BATCH {
                break;
            }
        }
        work
    }

    /// Frames the netdev sent: out on the port unchanged.
    fn receive_netdev(&mut self) -> bool {
        let Some(nd) = &mut self.netdev else {
            return false;
        };
        let backlog = nd.backlog();
        count_forwarded(&mut self.hw, nd.flush());
        let mut work = nd.backlog() < backlog;
        for _ in 0..RX_BATCHES_PER_PASS {
            let n = match nd.recv() {
                Ok(n) => n,
                Err(e) => {
                    log::warn!("rox-nic: netdev receive: {e}");
                    break;
                }
            };
            if n == 0 {
                break;
            }
            work = true;
            let Some(port) = &mut self.port else {
                // No wire: the frames have nowhere to go.
                continue;
            };
            for f in nd.frames() {
                if f.len() < ETH_HEADER_LEN {
                    self.hw.stats[STAT_PORT_DROP_MALFORMED] += 1;
                } else if f.len() > port.max_frame() {
                    self.hw.stats[STAT_PORT_DROP_OVERSIZE] += 1;
                } else {
                    self.hw.stats[STAT_PORT_FROM_NETDEV] += 1;
                    port.queue_frame(f);
                }
            }
            if n < crate::port::BATCH {
                break;
            }
        }
        work
    }

    /// Puts the engine's packets (and queued netdev frames) on the port.
    fn flush_outbound(&mut self) -> bool {
        let Some(port) = &mut self.port else {
            self.hw.outbound.clear();
            return false;
        };
        let queued = !self.hw.outbound.is_empty();
        for (dmac, p) in self.hw.outbound.drain(..) {
            port.queue_ip(&dmac, p);
        }
        let sent = port.flush();
        self.account_port_tx();
        queued || sent > 0
    }

    /// Adds the frames the port sent since the last look to `STAT_PORT_TX_FRAMES` (the port
    /// also sends on its own: a frame held back by reorder injection leaves when nothing
    /// arrives).
    fn account_port_tx(&mut self) {
        if let Some(port) = &self.port {
            let sent = port.stats().tx_frames;
            self.hw.stats[STAT_PORT_TX_FRAMES] += sent - self.port_tx_seen;
            self.port_tx_seen = sent;
        }
    }
}

fn count_forwarded(hw: &mut Hw, f: Forwarded) {
    hw.stats[STAT_PORT_TO_NETDEV] += f.delivered;
    hw.stats[STAT_PORT_DROP_NETDEV] += f.dropped;
}

/// Hands a received packet to the transport, unless the port is down (no link, no packets).
fn deliver(engine: &mut Engine, hw: &mut Hw, packet: &[u8]) {
    if hw.port_up() {
        // Drops (bad ICRC, no such QP, ...) are counted by the engine.
        let _ = engine.receive(hw, packet);
    } else {
        hw.rx_port_down_drops += 1;
    }
}

/// Decode a send WQE. Errors are (WC status, vendor_err) for the error CQE.
pub fn decode_send(
    hw: &Hw,
    qp_type: u8,
    sig_all: bool,
    w: &SqWqe,
) -> Result<SendWr, (WcStatus, u16)> {
    let opcode =
        WrOpcode::from_u8(w.opcode).ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    let flags =
        WqeFlags::from_bits(w.flags).ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    let data = if flags.contains(WqeFlags::INLINE) {
        if w.inline_len > SQ_MAX_INLINE {
            return Err((WcStatus::LocLenErr, VENDOR_ERR_BAD_INLINE));
        }
        SendData::Inline(w.data[..w.inline_len as usize].to_vec())
    } else {
        if w.num_sge as u32 > SQ_MAX_SGE {
            return Err((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_SGE_COUNT));
        }
        let sges = w.data[..w.num_sge as usize * size_of::<Sge>()]
            .chunks_exact(size_of::<Sge>())
            .map(|b| {
                let s: Sge = crate::dma::from_bytes(b);
                roce::Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                }
            })
            .collect();
        SendData::Sges(sges)
    };
    let mut wr = SendWr {
        wr_id: w.wr_id,
        opcode,
        signaled: sig_all || flags.contains(WqeFlags::SIGNALED),
        solicited: flags.contains(WqeFlags::SOLICITED),
        fence: flags.contains(WqeFlags::FENCE),
        data,
        imm: u32::from_be(w.imm_data),
        remote_addr: 0,
        rkey: Key::default(),
        compare_add: 0,
        swap: 0,
        flush: FlushSpec::default(),
        bind: None,
        fast_reg: None,
        ud: None,
    };
    if qp_type == QPT_UD || qp_type == QPT_GSI {
        // SAFETY: both union variants are plain integers.
        let ud = unsafe { w.seg.ud };
        let sgid = hw
            .gids
            .get(ud.sgid_index as usize)
            .copied()
            .flatten()
            .ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
        wr.ud = Some(UdDest {
            av: AddressVector {
                dgid: ud.dgid,
                sgid,
                traffic_class: ud.traffic_class,
                hop_limit: ud.hop_limit,
                flow_label: ud.flow_label,
                dmac: ud.dmac,
            },
            remote_qpn: ud.dest_qpn,
            remote_qkey: ud.qkey,
        });
    } else {
        // SAFETY: both union variants are plain integers.
        let r = unsafe { w.seg.rdma };
        wr.remote_addr = r.remote_addr;
        wr.rkey = r.rkey;
        wr.compare_add = r.compare_add;
        wr.swap = r.swap;
        match opcode {
            // The 8 bytes to write travel in compare_add; they become the WR's payload.
            WrOpcode::AtomicWrite => {
                wr.data = SendData::Inline(r.compare_add.to_ne_bytes().to_vec());
            }
            WrOpcode::BindMw => {
                // SAFETY: every union variant is plain integers.
                let b = unsafe { w.seg.bind };
                wr.bind = Some(MwBind {
                    addr: b.addr,
                    length: b.length,
                    new_rkey: b.new_rkey,
                    lkey: b.lkey,
                    access: b.access,
                });
                wr.data = SendData::Sges(Vec::new());
            }
            WrOpcode::RegMr => {
                // SAFETY: every union variant is plain integers.
                let f = unsafe { w.seg.fast_reg };
                wr.fast_reg = Some(FastReg {
                    iova: f.iova,
                    length: f.length,
                    page_list: f.page_list,
                    key: f.key,
                    access: f.access,
                    npages: f.npages,
                    page_shift: f.page_shift,
                });
                wr.data = SendData::Sges(Vec::new());
            }
            WrOpcode::Flush => {
                wr.flush = FlushSpec {
                    length: r.length,
                    placement_type: r.flush_type,
                    level: r.flush_level,
                };
            }
            _ => {}
        }
    }
    Ok(wr)
}
