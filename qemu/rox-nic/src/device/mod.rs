//! The rox-nic device model: BAR0 register file (socket thread) and the data-path thread that
//! owns every device object (admin queue, EQs, CQs, QPs, SRQs, MRs) and the transport engine.
//!
//! Threads: the vfio-user socket thread calls [`RoxNic`]'s `ServerBackend` methods; they only
//! update registers and send [`Control`] messages (never long work: QEMU times out after 5 s).
//! The data-path thread ([`datapath`]) does everything else and sleeps when idle.

pub mod admin;
pub mod admin_fault;
pub(crate) mod counters;
pub mod datapath;
pub mod death;
pub(crate) mod deferred;
pub mod doorbell;
pub(crate) mod env;
pub(crate) mod events;
pub(crate) mod mem;
pub(crate) mod odp;
pub mod qp_state;
pub(crate) mod recv;
pub(crate) mod region;
pub(crate) mod ring;
pub(crate) mod spare_sges;
pub(crate) mod state;
#[cfg(feature = "testkit")]
pub mod test_hold;
#[cfg(feature = "testkit")]
pub mod test_spin_log;

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use rox_uapi::regs::*;

use crate::dma::{GuestMemory, MappedRegion};
use crate::pci::ConfigSpace;
use doorbell::DoorbellBar;

/// The eventfd type of the device's wake-up and interrupt vectors.
pub use crate::sys::fd::EventFd;

/// Everything needed to build a device.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// MAC of the guest's paired virtio-net NIC (reported by READ_MAC / QUERY_PORT).
    pub mac: [u8; 6],
    /// The Ethernet port. Without one there is no wire: only QP-to-QP loopback on this
    /// device works.
    pub port: Option<PortConfig>,
    /// The guest's paired virtio-net: frames it sends go out on the port; frames from the
    /// port that are not RoCEv2 for this device go to it.
    pub netdev: Option<LinkSpec>,
    /// How long the data path keeps polling with nothing to do before it sleeps.
    pub idle_after: std::time::Duration,
    /// How long the data path keeps polling after its last work before it naps.
    pub spin: std::time::Duration,
    /// How long the data path keeps polling after its last work while the driver wakes it
    /// through the companion (at most `spin`; as `spin` by default: `datapath/spin.rs`).
    pub posted_spin: std::time::Duration,
    /// Whether the posted spin is spun only where it brings the next work sooner than
    /// sleeping at once, judged from the device's recent idle periods (`datapath/spin.rs`,
    /// `SpinHistory`).
    pub adaptive_spin: bool,
    /// How long the data path keeps polling after its last work while an answer is expected
    /// (zero: off, the default; `datapath/spin.rs`).
    pub expect_spin: std::time::Duration,
    /// The data-path thread's timer slack, how much later than asked the kernel may end a nap
    /// (a doorbell stored during a nap is seen when it ends); None, the default, keeps the
    /// thread's own (50 µs for a normal thread). A 1 µs slack made latency worse on a 2-core
    /// host whose guests' vCPUs take every core: naps that end on time wake the device more
    /// often, and each wake takes a core from a vCPU (docs/benchmarks/session-10.md, "Session 10:
    /// timer slack for the data path's naps").
    pub nap_slack: Option<std::time::Duration>,
    /// The ICRC of the FLUSH requests the device sends (rdma_rxe's for an rxe peer).
    pub flush_icrc: crate::roce::wire::FlushIcrc,
    /// Congestion control (ECN, CNPs, DCQCN): on by default, as mlx5's RoCE.
    pub cc: crate::roce::cc::CcConfig,
    /// The device has a posted-wake companion (`server::ivshmem`, `rox_uapi::wake`): BAR0
    /// names it by a random token and `CAP_POSTED_WAKE`.
    pub posted_wake: bool,
    /// How long the data path keeps polling with nothing to do before it sleeps while the
    /// driver wakes it through the companion (`REG_WAKE_MODE` posted): a wake then costs the
    /// vCPU no round trip, so the device may sleep much sooner (`datapath/spin.rs`).
    pub posted_idle_after: std::time::Duration,
    /// Admin commands the device refuses with an error status (`admin_fault`; none by
    /// default).
    pub admin_faults: admin_fault::AdminFaultConfig,
}

pub use crate::port::{BottleneckConfig, FaultConfig, LinkSpec, PortConfig};
pub use death::{DeathMode, DieOn};

/// Default idle grace period of the data path.
pub const DEFAULT_IDLE_AFTER: std::time::Duration = std::time::Duration::from_millis(20);
/// Default idle grace period while wakes are posted (`DeviceConfig::posted_idle_after`): none,
/// the device sleeps as soon as its spin ends. 50, 200 and 1000 µs measured as trapped wakes
/// did (the device napped instead), 0 halved loopback ib_write_lat (docs/benchmarks/session-11.md,
/// "Session 11: the posted wake").
pub const DEFAULT_POSTED_IDLE_AFTER: std::time::Duration = std::time::Duration::ZERO;

impl DeviceConfig {
    pub fn new(mac: [u8; 6]) -> DeviceConfig {
        DeviceConfig {
            mac,
            port: None,
            netdev: None,
            idle_after: DEFAULT_IDLE_AFTER,
            spin: datapath::SPIN_PERIOD,
            posted_spin: datapath::POSTED_SPIN_PERIOD,
            adaptive_spin: true,
            expect_spin: std::time::Duration::ZERO,
            nap_slack: None,
            flush_icrc: crate::roce::wire::FlushIcrc::Iba,
            cc: crate::roce::cc::CcConfig::default(),
            posted_wake: false,
            posted_idle_after: DEFAULT_POSTED_IDLE_AFTER,
            admin_faults: admin_fault::AdminFaultConfig::default(),
        }
    }
}

/// Messages from the socket thread to the data-path thread.
#[derive(Debug)]
pub enum Control {
    AdminEnable {
        cmd_base: u64,
        cpl_base: u64,
        log_depth: u32,
    },
    AdminDisable,
    AdminDoorbell(u32),
    EqEnable {
        eqn: u32,
        base: u64,
        log_depth: u32,
    },
    EqDisable(u32),
    EqDoorbell {
        eqn: u32,
        value: u32,
    },
    Reset,
    /// Die for good (`death`).
    Die(death::DeathMode),
    Shutdown,
}

/// State shared by the socket thread and the data-path thread.
pub struct Shared {
    pub status: AtomicU32,
    pub fatal_code: AtomicU32,
    /// The device died (`death`): set once by the data path, never cleared.
    pub dead: AtomicBool,
    /// The death was `DeathMode::Hang`: the BARs still answer, a reset never completes.
    pub hung: AtomicBool,
    pub idle: AtomicU32,
    /// Passes of the data-path loop (to observe that an idle device does not poll).
    pub loop_passes: AtomicU64,
    /// Passes that found work (the rest spun, napped or went idle).
    pub loop_work_passes: AtomicU64,
    /// Naps on the fds between polls while backing off (not the idle sleeps: STAT_WAKEUPS).
    pub loop_naps: AtomicU64,
    /// SQ doorbells whose WQEs were fetched (up to a batch each; the WQE trace's doorbell
    /// notices).
    pub sq_fetches: AtomicU64,
    /// SQ doorbells of RC QPs parked while the port's flight was full (their WQEs fetched at
    /// the QP's turn; datapath/sched.rs).
    pub parked_doorbells: AtomicU64,
    /// The data-path thread's id, once it runs (0 before): its /proc/self/task entry shows
    /// how long it ran and waited for a core (`benchkit::watch`).
    pub datapath_tid: AtomicI32,
    /// Guest RAM; replaced as a whole on DMA_MAP/UNMAP (the data path snapshots the Arc).
    pub mem: RwLock<Arc<GuestMemory>>,
    /// MSI-X eventfds by vector (from SET_IRQS).
    pub irqs: Mutex<Vec<Option<File>>>,
    pub doorbells: DoorbellBar,
    pub wake: EventFd,
    /// The eventfd the posted-wake companion signals (`server::ivshmem`): the data path sleeps
    /// on it beside `wake`.
    pub posted_wake: EventFd,
    /// The token of the posted-wake companion (`REG_WAKE_TOKEN_*`); 0 without one.
    pub wake_token: u64,
    /// `REG_WAKE_MODE` (`WAKE_MODE_*`): how the driver says it wakes the device.
    pub wake_mode: AtomicU32,
    /// Writes of the trapped `WAKE_REG` (`STAT_WAKES_TRAPPED`; the socket thread counts them).
    pub wakes_trapped: AtomicU64,
    pub ctl: Sender<Control>,
    /// The WQE trace (off unless started; the data path's hooks write it).
    pub wqe_trace: crate::trace::WqeTrace,
    /// Tests only: holds the data path in a pass that received something, before it runs the
    /// engine's timers, as a host that took its core away there would.
    #[cfg(feature = "testkit")]
    pub hold_before_timers: test_hold::TestHold,
    /// Tests only: holds the data path after it answered a batch of frames from the port.
    #[cfg(feature = "testkit")]
    pub hold_after_rx_batch: test_hold::TestHold,
    /// Tests only: holds the data path going idle after its announcement, before its re-scan
    /// (a doorbell stored there by a driver that read the device running needs no wake).
    #[cfg(feature = "testkit")]
    pub hold_before_idle_rescan: test_hold::TestHold,
    /// Tests only: the side of each idle period the adaptive spin's records decided, once a
    /// test starts the log.
    #[cfg(feature = "testkit")]
    pub spin_sides: test_spin_log::SpinSideLog,
}

impl Shared {
    pub fn send(&self, msg: Control) {
        // The receiver lives as long as the data-path thread; after shutdown nothing listens.
        let _ = self.ctl.send(msg);
        self.wake.signal();
    }

    pub fn mem(&self) -> Arc<GuestMemory> {
        self.mem.read().expect("mem lock").clone()
    }

    pub fn is_fatal(&self) -> bool {
        self.status.load(Ordering::Acquire) & STATUS_FATAL != 0
    }

    /// The capabilities this device reports (`REG_CAPS`, `DeviceAttr::caps`).
    pub fn caps(&self) -> u32 {
        if self.wake_token != 0 {
            admin::DEVICE_CAPS | CAP_POSTED_WAKE
        } else {
            admin::DEVICE_CAPS
        }
    }

    /// Whether the driver wakes the device through its companion (`REG_WAKE_MODE`).
    pub fn wakes_posted(&self) -> bool {
        self.wake_mode.load(Ordering::Relaxed) == WAKE_MODE_POSTED
    }
}

/// A random nonzero token naming a device's posted-wake companion.
fn companion_token() -> u64 {
    loop {
        let t = rand::random::<u64>();
        if t != 0 {
            return t;
        }
    }
}

/// BAR0 registers the socket thread keeps (configuration latched on enable).
#[derive(Default)]
struct RegFile {
    admin_cmd_base: u64,
    admin_cpl_base: u64,
    admin_log_depth: u32,
    admin_ctrl: u32,
    scratch: u32,
    eq_addr: [u64; MAX_EQS as usize],
    eq_log_depth: [u32; MAX_EQS as usize],
    eq_ctrl: [u32; MAX_EQS as usize],
}

/// One rox-nic device: the object the vfio-user server loop (or a test) drives.
pub struct RoxNic {
    shared: Arc<Shared>,
    regs: RegFile,
    config: ConfigSpace,
    thread: Option<JoinHandle<()>>,
}

/// Errors building a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("cannot create the doorbell memory: {0}")]
    Doorbells(std::io::Error),
    #[error("cannot create an eventfd: {0}")]
    EventFd(std::io::Error),
    #[error("{0}")]
    Port(#[from] crate::port::PortError),
    #[error("paired netdev {spec:?}: {source}")]
    Netdev {
        spec: LinkSpec,
        source: std::io::Error,
    },
    #[error("cannot start the data-path thread: {0}")]
    Thread(std::io::Error),
    #[error(
        "the spin while wakes are posted ({} µs, --posted-spin-us) is at most the spin ({} µs, --spin-us)",
        posted_spin.as_micros(),
        spin.as_micros()
    )]
    PostedSpin {
        posted_spin: std::time::Duration,
        spin: std::time::Duration,
    },
}

fn set_lo(v: &mut u64, lo: u32) {
    *v = (*v & !0xffff_ffff) | lo as u64;
}
fn set_hi(v: &mut u64, hi: u32) {
    *v = (*v & 0xffff_ffff) | ((hi as u64) << 32);
}

impl RoxNic {
    pub fn new(config: DeviceConfig) -> Result<RoxNic, DeviceError> {
        let (tx, rx): (Sender<Control>, Receiver<Control>) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            status: AtomicU32::new(0),
            fatal_code: AtomicU32::new(FATAL_NONE),
            dead: AtomicBool::new(false),
            hung: AtomicBool::new(false),
            idle: AtomicU32::new(0),
            loop_passes: AtomicU64::new(0),
            loop_work_passes: AtomicU64::new(0),
            loop_naps: AtomicU64::new(0),
            sq_fetches: AtomicU64::new(0),
            parked_doorbells: AtomicU64::new(0),
            datapath_tid: AtomicI32::new(0),
            mem: RwLock::new(Arc::new(GuestMemory::default())),
            irqs: Mutex::new((0..MSIX_VECTORS).map(|_| None).collect()),
            doorbells: DoorbellBar::new().map_err(DeviceError::Doorbells)?,
            wake: EventFd::new().map_err(DeviceError::EventFd)?,
            posted_wake: EventFd::new().map_err(DeviceError::EventFd)?,
            wake_token: if config.posted_wake {
                companion_token()
            } else {
                0
            },
            wake_mode: AtomicU32::new(WAKE_MODE_TRAPPED),
            wakes_trapped: AtomicU64::new(0),
            ctl: tx,
            wqe_trace: crate::trace::WqeTrace::new(),
            #[cfg(feature = "testkit")]
            hold_before_timers: test_hold::TestHold::default(),
            #[cfg(feature = "testkit")]
            hold_after_rx_batch: test_hold::TestHold::default(),
            #[cfg(feature = "testkit")]
            hold_before_idle_rescan: test_hold::TestHold::default(),
            #[cfg(feature = "testkit")]
            spin_sides: test_spin_log::SpinSideLog::default(),
        });
        let dp = datapath::DataPath::new(shared.clone(), rx, &config)?;
        let thread = std::thread::Builder::new()
            .name("rox-datapath".into())
            .spawn(move || dp.run())
            .map_err(DeviceError::Thread)?;
        // The data path sets STATUS_READY when it starts; be ready before anyone connects.
        let nic = RoxNic {
            shared,
            regs: RegFile::default(),
            config: ConfigSpace::new(),
            thread: Some(thread),
        };
        const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
        if !nic.wait_ready(START_TIMEOUT) {
            log::warn!("rox-nic: data path slow to start; STATUS_READY will follow");
        }
        Ok(nic)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The memfd behind the doorbell BAR (for the sparse mmap area).
    pub fn doorbell_fd(&self) -> std::os::fd::RawFd {
        self.shared.doorbells.fd()
    }

    /// Wait until the device reports ready (after creation or reset).
    pub fn wait_ready(&self, timeout: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < timeout {
            if self.shared.status.load(Ordering::Acquire) & STATUS_READY != 0 {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        false
    }

    // ---- config space ----------------------------------------------------------------------

    pub fn config_read(&self, offset: u64, data: &mut [u8]) {
        self.config.read(offset, data)
    }

    pub fn config_write(&mut self, offset: u64, data: &[u8]) {
        self.config.write(offset, data)
    }

    // ---- BAR0 -------------------------------------------------------------------------------

    /// Read a BAR0 register (32-bit accesses; 64-bit reads return LO|HI pairs).
    pub fn bar0_read(&self, offset: u64, data: &mut [u8]) {
        match data.len() {
            4 => data.copy_from_slice(&self.read_reg(offset).to_le_bytes()),
            8 => {
                let lo = self.read_reg(offset) as u64;
                let hi = self.read_reg(offset + 4) as u64;
                data.copy_from_slice(&(lo | (hi << 32)).to_le_bytes());
            }
            _ => data.fill(0),
        }
    }

    /// Write a BAR0 register (32-bit, or 64-bit as two 32-bit writes LO then HI).
    pub fn bar0_write(&mut self, offset: u64, data: &[u8]) {
        match data.len() {
            4 => self.write_reg(
                offset,
                u32::from_le_bytes(data.try_into().expect("4 bytes")),
            ),
            8 => {
                let v = u64::from_le_bytes(data.try_into().expect("8 bytes"));
                self.write_reg(offset, v as u32);
                self.write_reg(offset + 4, (v >> 32) as u32);
            }
            _ => log::warn!("ignoring {}-byte BAR0 write at {offset:#x}", data.len()),
        }
    }

    fn eq_reg(offset: u64) -> Option<(u32, u64)> {
        if (REG_EQ_BASE..REG_END).contains(&offset) {
            let rel = offset - REG_EQ_BASE;
            Some(((rel / REG_EQ_STRIDE) as u32, rel % REG_EQ_STRIDE))
        } else {
            None
        }
    }

    fn read_reg(&self, offset: u64) -> u32 {
        let r = &self.regs;
        match offset {
            REG_VERSION => rox_uapi::ROX_VERSION,
            REG_CAPS => self.shared.caps(),
            REG_STATUS => {
                let mut s = self.shared.status.load(Ordering::Acquire);
                if r.admin_ctrl & ADMIN_CTRL_ENABLE != 0 {
                    s |= STATUS_ADMIN_ENABLED;
                }
                s
            }
            REG_FATAL_CODE => self.shared.fatal_code.load(Ordering::Acquire),
            REG_DB_PAGE_COUNT => DB_PAGE_COUNT,
            REG_MSIX_VECTORS => MSIX_VECTORS,
            REG_MAX_EQS => MAX_EQS,
            REG_ADMIN_CMD_BASE_LO => r.admin_cmd_base as u32,
            REG_ADMIN_CMD_BASE_HI => (r.admin_cmd_base >> 32) as u32,
            REG_ADMIN_CPL_BASE_LO => r.admin_cpl_base as u32,
            REG_ADMIN_CPL_BASE_HI => (r.admin_cpl_base >> 32) as u32,
            REG_ADMIN_LOG_DEPTH => r.admin_log_depth,
            REG_ADMIN_CTRL => r.admin_ctrl,
            REG_SCRATCH => r.scratch,
            REG_IDLE => self.shared.idle.load(Ordering::Acquire),
            REG_WAKE_TOKEN_LO => self.shared.wake_token as u32,
            REG_WAKE_TOKEN_HI => (self.shared.wake_token >> 32) as u32,
            REG_WAKE_MODE => self.shared.wake_mode.load(Ordering::Relaxed),
            o => match Self::eq_reg(o) {
                Some((n, EQ_ADDR_LO)) => r.eq_addr[n as usize] as u32,
                Some((n, EQ_ADDR_HI)) => (r.eq_addr[n as usize] >> 32) as u32,
                Some((n, EQ_LOG_DEPTH)) => r.eq_log_depth[n as usize],
                Some((n, EQ_CTRL)) => r.eq_ctrl[n as usize],
                // Write-only registers, the wake page, the PBA (no pending bits: we never
                // leave a message pending) and holes read as zero.
                _ => 0,
            },
        }
    }

    fn write_reg(&mut self, offset: u64, v: u32) {
        let r = &mut self.regs;
        match offset {
            REG_RESET => {
                if v == RESET_VALUE {
                    self.reset_device();
                }
            }
            REG_ADMIN_CMD_BASE_LO => set_lo(&mut r.admin_cmd_base, v),
            REG_ADMIN_CMD_BASE_HI => set_hi(&mut r.admin_cmd_base, v),
            REG_ADMIN_CPL_BASE_LO => set_lo(&mut r.admin_cpl_base, v),
            REG_ADMIN_CPL_BASE_HI => set_hi(&mut r.admin_cpl_base, v),
            REG_ADMIN_LOG_DEPTH => r.admin_log_depth = v,
            REG_ADMIN_CTRL => {
                let was = r.admin_ctrl & ADMIN_CTRL_ENABLE != 0;
                let now = v & ADMIN_CTRL_ENABLE != 0;
                r.admin_ctrl = v & ADMIN_CTRL_ENABLE;
                if now && !was {
                    let msg = Control::AdminEnable {
                        cmd_base: r.admin_cmd_base,
                        cpl_base: r.admin_cpl_base,
                        log_depth: r.admin_log_depth,
                    };
                    self.shared.send(msg);
                } else if was && !now {
                    self.shared.send(Control::AdminDisable);
                }
            }
            REG_ADMIN_DB => self.shared.send(Control::AdminDoorbell(v)),
            REG_SCRATCH => r.scratch = v,
            WAKE_REG => {
                self.shared.wakes_trapped.fetch_add(1, Ordering::Relaxed);
                self.shared.wqe_trace.wake();
                self.shared.wake.signal();
            }
            REG_WAKE_MODE => self.set_wake_mode(v),
            o => match Self::eq_reg(o) {
                Some((n, EQ_ADDR_LO)) => set_lo(&mut r.eq_addr[n as usize], v),
                Some((n, EQ_ADDR_HI)) => set_hi(&mut r.eq_addr[n as usize], v),
                Some((n, EQ_LOG_DEPTH)) => r.eq_log_depth[n as usize] = v,
                Some((n, EQ_CTRL)) => {
                    let i = n as usize;
                    let was = r.eq_ctrl[i] & EQ_CTRL_ENABLE != 0;
                    let now = v & EQ_CTRL_ENABLE != 0;
                    r.eq_ctrl[i] = v & EQ_CTRL_ENABLE;
                    if now && !was {
                        let msg = Control::EqEnable {
                            eqn: n,
                            base: r.eq_addr[i],
                            log_depth: r.eq_log_depth[i],
                        };
                        self.shared.send(msg);
                    } else if was && !now {
                        self.shared.send(Control::EqDisable(n));
                    }
                }
                Some((n, EQ_DB)) => self.shared.send(Control::EqDoorbell { eqn: n, value: v }),
                _ => log::debug!("ignoring BAR0 write {v:#x} at {offset:#x}"),
            },
        }
    }

    /// Device reset (REG_RESET or vfio-user DEVICE_RESET): registers to defaults, the data
    /// path forgets every object and clears the fatal state, then sets STATUS_READY again.
    pub fn reset_device(&mut self) {
        if self.shared.is_dead() {
            if self.shared.is_hung() {
                // Taken, never finished: STATUS_READY stays clear.
                self.shared
                    .status
                    .fetch_and(!STATUS_READY, Ordering::AcqRel);
            }
            return;
        }
        self.regs = RegFile::default();
        self.shared
            .wake_mode
            .store(WAKE_MODE_TRAPPED, Ordering::Relaxed);
        self.shared.wakes_trapped.store(0, Ordering::Relaxed);
        self.shared
            .status
            .fetch_and(!STATUS_READY, Ordering::AcqRel);
        self.shared.send(Control::Reset);
    }

    /// `REG_WAKE_MODE`: posted only on a device with a companion (else nothing could wake it
    /// without a trap); an unknown mode is ignored.
    fn set_wake_mode(&mut self, v: u32) {
        match v {
            WAKE_MODE_TRAPPED => {}
            WAKE_MODE_POSTED if self.shared.wake_token != 0 => {}
            _ => {
                log::debug!("ignoring REG_WAKE_MODE write {v:#x}");
                return;
            }
        }
        self.shared.wake_mode.store(v, Ordering::Relaxed);
        // The data path may be asleep under the other mode's idle policy: let it re-decide.
        self.shared.wake.signal();
    }

    // ---- DMA and interrupts ----------------------------------------------------------------

    pub fn dma_map(
        &self,
        fd: Option<File>,
        offset: u64,
        iova: u64,
        size: u64,
    ) -> std::io::Result<()> {
        self.dma_map_with(fd, offset, iova, size, true)
    }

    /// DMA_MAP with the client's protection: `writable` false for read-only memory (ROMs).
    /// A mapping that cannot be made is logged and left unreachable rather than failing QEMU.
    pub fn dma_map_with(
        &self,
        fd: Option<File>,
        offset: u64,
        iova: u64,
        size: u64,
        writable: bool,
    ) -> std::io::Result<()> {
        let Some(fd) = fd else {
            // Without a fd we would need DMA_READ/WRITE messages, which the crate cannot send.
            // QEMU also maps fd-less RAM (ROMs, VGA memory) that no driver points us at, so
            // accept the map and leave the range unreachable: DMA there fails like any bad
            // address. Guest RAM itself must be a share=on memfd backend.
            log::warn!("DMA_MAP of [{iova:#x}, +{size:#x}) without a fd: range not reachable by the device");
            return Ok(());
        };
        let region = match MappedRegion::map_with(&fd, offset, iova, size, writable) {
            Ok(r) => r,
            Err(e) => {
                log::error!(
                    "DMA_MAP of [{iova:#x}, +{size:#x}): mmap failed ({e}); range not reachable"
                );
                return Ok(());
            }
        };
        let mut mem = self.shared.mem.write().expect("mem lock");
        *mem = Arc::new(mem.with_region(region));
        Ok(())
    }

    pub fn dma_unmap(&self, iova: u64, size: u64) {
        let mut mem = self.shared.mem.write().expect("mem lock");
        *mem = Arc::new(mem.without_range(iova, size));
    }

    /// SET_IRQS for the MSI-X index: install (or with no fds, remove) vector eventfds.
    pub fn set_msix(&self, start: u32, count: u32, fds: Vec<File>) {
        let mut irqs = self.shared.irqs.lock().expect("irq lock");
        let mut fds = fds.into_iter();
        for v in start..start.saturating_add(count) {
            if let Some(slot) = irqs.get_mut(v as usize) {
                *slot = fds.next();
            }
        }
    }
}

impl Drop for RoxNic {
    fn drop(&mut self) {
        self.shared.send(Control::Shutdown);
        if let Some(t) = self.thread.take() {
            // A panicked data path is a dead device: carry its panic on (exit status 101).
            if let Err(panic) = t.join() {
                if !std::thread::panicking() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
}
