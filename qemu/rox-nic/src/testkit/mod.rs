//! A userspace "driver" for tests and benchmarks: it programs a [`RoxNic`] through the same
//! BAR0 registers, admin queue, doorbell pages and event queues a kernel driver uses, with
//! "guest RAM" in a memfd handed to the device through DMA_MAP. Two links:
//! [`TestDriver::new`] calls the device model in process (exactly what the vfio-user server
//! loop calls); [`TestDriver::over_socket`] serves the device on a real vfio-user socket and
//! drives it with the `vfio_user` crate's client, mapping the doorbell BAR from the fd the
//! server sends, as QEMU does.
//!
//! By fixture family: `ram` (the guest RAM), `link` (how the driver reaches the device),
//! this file (the driver, its objects, set-up and registers), `admin` (admin commands),
//! `datapath` (posting, doorbells, polling), `wqe` (work request builders), [`frames`] (a
//! peer's packets on the wire), [`loopback`] (one device, two QPs), [`pair`] (two
//! devices back to back, a QP each) and
//! [`mock_env`] (the engine's test double, no device at all) over [`protected`] (the
//! device's protection table over plain memory, shared by every engine test double);
//! [`process`]: a rox-nic process a test starts (listening yet? stopped on drop).

mod admin;
mod datapath;
pub mod frames;
mod link;
pub mod loopback;
pub mod mock_env;
pub mod pair;
pub mod process;
pub mod protected;
mod ram;
mod wqe;

pub use datapath::SrqPair;
pub use link::{DbMap, Link};
pub use ram::GuestRam;
pub use wqe::*;

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSIX_IRQ_INDEX,
};

use rox_uapi::admin::*;
pub use rox_uapi::ids::{Key, Psn, Qpn};
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use crate::device::EventFd;
use crate::device::{DeviceConfig, RoxNic, Shared};
use crate::dma::{as_bytes, from_bytes, Pod};
pub use crate::port::limit::dgram_wire;
pub use crate::port::{LinkSpec, PortConfig};

/// Guest-physical address where the test RAM starts (not 0, so address 0 is a bad address).
pub const RAM_BASE: u64 = 0x1_0000_0000;
/// Default test RAM size.
pub const RAM_SIZE: u64 = 256 << 20;
/// How long helpers wait for the device before failing a test.
pub const TIMEOUT: Duration = Duration::from_secs(10);
pub const ADMIN_LOG_DEPTH: u32 = 6;
/// Q_Key of the UD QPs [`TestDriver::qp_pair`] makes.
pub const PAIR_QKEY: u32 = 0x1111;
pub const TEST_EQ_LOG_DEPTH: u32 = 10;
/// The completion EQ the helpers put CQs on.
pub const COMP_EQ: u32 = 1;
/// The doorbell page the test driver uses for its objects (as a user context would).
pub const TEST_DB_PAGE: u32 = 1;

/// A consumer of a device-written ring with owner bits.
#[derive(Clone, Copy, Debug)]
pub struct OwnerRing {
    pub base: u64,
    pub depth: u32,
    pub entry_size: u64,
    pub ci: u32,
}

impl OwnerRing {
    fn addr(&self, i: u32) -> u64 {
        self.base + (i & (self.depth - 1)) as u64 * self.entry_size
    }
    fn ready(&self, ram: &GuestRam) -> bool {
        ram.owner(self.addr(self.ci) + self.entry_size - 1) == owner_for(self.ci, self.depth)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct TestCq {
    pub id: u32,
    pub ring: OwnerRing,
    pub db_slot: u32,
    pub arm_seq: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct TestQp {
    pub qpn: Qpn,
    pub qp_type: u8,
    pub pd: u32,
    pub sq: u64,
    pub sq_depth: u32,
    pub sq_pi: u32,
    pub rq: u64,
    pub rq_depth: u32,
    pub rq_pi: u32,
    pub db_slot: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct TestSrq {
    pub id: u32,
    pub ring: u64,
    pub depth: u32,
    pub pi: u32,
    pub db_slot: u32,
}

/// Transport parameters of [`TestDriver::connect_with`].
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams {
    /// `MTU_*`.
    pub mtu: u8,
    /// Local ACK timeout exponent (4.096 us << timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    /// The peer's MAC; None: [`test_mac`] of its GID (Some([0; 6]): not resolved).
    pub dmac: Option<[u8; 6]>,
}

impl Default for ConnectParams {
    /// ibv_rc_pingpong's choices: timeout 14 (67 ms) survives a heavily loaded 2-core host.
    fn default() -> Self {
        const IB_RNR_TIMER_0_01_MS: u8 = 1;
        ConnectParams {
            mtu: MTU_1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: IB_RNR_TIMER_0_01_MS,
            dmac: None,
        }
    }
}

/// The test driver.
pub struct TestDriver {
    pub link: Link,
    /// The device's shared state, for observing it (idle flag, loop counter) in tests.
    shared: Arc<Shared>,
    pub db: DbMap,
    pub ram: GuestRam,
    admin_cmd: u64,
    admin_cpl: OwnerRing,
    admin_pi: u32,
    next_cmd_id: u16,
    pub eqs: Vec<Option<OwnerRing>>,
    /// One eventfd per MSI-X vector (what QEMU would hand over in SET_IRQS).
    pub vectors: Vec<EventFd>,
    next_slot: u32,
    /// Times the driver woke the idle device (the wake register, or the companion's eventfd).
    pub wakes: u64,
    /// The driver wakes the device through its companion (`REG_WAKE_MODE` posted), as rox.ko
    /// does when the device has one; else through the trapped wake register.
    posted_wakes: bool,
    /// The driver stores a news byte after each doorbell, as rox.ko and librox do on a device
    /// with `CAP_DB_SUMMARY` (`DbPage::news`); see [`TestDriver::stop_news`].
    news: bool,
}

/// The MAC of the testkit device owning `gid`: 02:00 and the GID's last 4 bytes (so a test
/// that knows a peer's GID knows its MAC, as ib_core would after neighbour resolution).
pub fn test_mac(gid: &[u8; 16]) -> [u8; 6] {
    const LOCALLY_ADMINISTERED: u8 = 0x02;
    [LOCALLY_ADMINISTERED, 0, gid[12], gid[13], gid[14], gid[15]]
}

/// A device owning GID `::ffff:127.0.<subnet>.<host>` (set at index 0), with MAC
/// [`test_mac`] of it and the port `port`.
pub fn port_device_with(port: PortConfig, subnet: u8, host: u8) -> TestDriver {
    port_device_config(port, subnet, host, |_| {})
}

/// [`port_device_with`], its configuration changed by `tune` before the device starts.
pub fn port_device_config(
    port: PortConfig,
    subnet: u8,
    host: u8,
    tune: impl FnOnce(&mut DeviceConfig),
) -> TestDriver {
    let gid = gid_v4(127, 0, subnet, host);
    let mut cfg = DeviceConfig::new(test_mac(&gid));
    cfg.port = Some(port);
    tune(&mut cfg);
    let mut d = TestDriver::new(cfg);
    d.set_gid(0, gid);
    d
}

/// [`port_device_with`] a port on `link` with `faults` injected on what it sends.
pub fn port_device(
    link: LinkSpec,
    subnet: u8,
    host: u8,
    faults: Option<crate::device::FaultConfig>,
) -> TestDriver {
    let mut port = PortConfig::new(link);
    port.faults = faults;
    port_device_with(port, subnet, host)
}

/// An IPv4-mapped GID `::ffff:a.b.c.d`.
pub fn gid_v4(a: u8, b: u8, c: u8, d: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[a, b, c, d]);
    g
}

pub fn payload<T: Pod>(v: &T) -> AdminPayload {
    let mut raw = [0u8; ADMIN_PAYLOAD_SIZE];
    raw[..size_of::<T>()].copy_from_slice(as_bytes(v));
    AdminPayload { raw }
}

/// A query's payload ([`QueryCmd`]) with a response buffer of one page at `resp_addr`.
pub fn page_query(index: u32, resp_addr: u64) -> AdminPayload {
    payload(&QueryCmd {
        index,
        resp_len: ROX_PAGE_SIZE as u32,
        resp_addr,
    })
}

static SOCKET_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl TestDriver {
    /// A device with test RAM mapped, MSI-X eventfds installed, admin queue, EQ 0 and the
    /// completion EQ enabled; driven in process, or over a vfio-user socket when the
    /// environment has `ROX_TEST_LINK=socket` (so every test can run both ways).
    pub fn new(config: DeviceConfig) -> TestDriver {
        match std::env::var("ROX_TEST_LINK").as_deref() {
            Ok("socket") => Self::over_socket(config),
            _ => Self::in_process(config),
        }
    }

    /// [`TestDriver::new`] with direct calls into the device model.
    pub fn in_process(config: DeviceConfig) -> TestDriver {
        let nic = RoxNic::new(config).expect("create device");
        let shared = nic.shared().clone();
        let db = DbMap::map(nic.shared().doorbells.file().try_clone().expect("dup"))
            .expect("map the doorbell BAR");
        Self::setup(Link::InProcess(Box::new(nic)), shared, db)
    }

    /// The same, over a real vfio-user socket (a server thread runs rox-nic's server loop).
    pub fn over_socket(config: DeviceConfig) -> TestDriver {
        let nic = RoxNic::new(config).expect("create device");
        let shared = nic.shared().clone();
        let seq = SOCKET_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("rox-test-{}-{seq}.sock", std::process::id()));
        let server = crate::server::bind(&path, &nic).expect("bind vfio-user socket");
        let thread = std::thread::Builder::new()
            .name("rox-vfio-user".into())
            .spawn(move || {
                let mut nic = nic;
                if let Err(e) = server.run(&mut nic) {
                    log::error!("vfio-user server: {e}");
                }
            })
            .expect("server thread");
        let client = vfio_user::Client::new(&path).expect("connect");
        let fd = client
            .region(BAR_DB)
            .and_then(|r| r.file_offset.as_ref())
            .expect("doorbell BAR comes with an mmap fd")
            .file()
            .try_clone()
            .expect("dup");
        let db = DbMap::map(fd).expect("map the doorbell BAR");
        let link = Link::Socket {
            client: RefCell::new(client),
            server: Some(thread),
            path,
        };
        Self::setup(link, shared, db)
    }

    fn setup(link: Link, shared: Arc<Shared>, db: DbMap) -> TestDriver {
        let mut ram = GuestRam::new(RAM_BASE, RAM_SIZE);
        let depth = 1u32 << ADMIN_LOG_DEPTH;
        let admin_cmd = ram.alloc(depth as u64 * ADMIN_CMD_SIZE as u64, ROX_PAGE_SIZE as u64);
        let cpl = ram.alloc(depth as u64 * ADMIN_CPL_SIZE as u64, ROX_PAGE_SIZE as u64);
        let vectors: Vec<EventFd> = (0..MSIX_VECTORS)
            .map(|_| EventFd::new().expect("eventfd"))
            .collect();
        let mut d = TestDriver {
            link,
            shared,
            db,
            ram,
            admin_cmd,
            admin_cpl: OwnerRing {
                base: cpl,
                depth,
                entry_size: ADMIN_CPL_SIZE as u64,
                ci: 0,
            },
            admin_pi: 0,
            next_cmd_id: 0,
            eqs: (0..MAX_EQS).map(|_| None).collect(),
            vectors,
            next_slot: 0,
            wakes: 0,
            posted_wakes: false,
            news: std::env::var("ROX_TEST_DOORBELLS").as_deref() != Ok("slots"),
        };
        let start = Instant::now();
        while d.read_reg(REG_STATUS) & STATUS_READY == 0 {
            assert!(start.elapsed() < TIMEOUT, "device not ready");
            std::thread::yield_now();
        }
        d.say_news();
        d.dma_map_ram();
        d.install_vectors();
        d.enable_admin();
        d.enable_eq(EQ_ADMIN_ASYNC);
        d.enable_eq(COMP_EQ);
        d
    }

    pub fn enable_admin(&mut self) {
        let depth = self.admin_cpl.depth;
        self.write_reg(REG_ADMIN_CMD_BASE_LO, self.admin_cmd as u32);
        self.write_reg(REG_ADMIN_CMD_BASE_HI, (self.admin_cmd >> 32) as u32);
        self.write_reg(REG_ADMIN_CPL_BASE_LO, self.admin_cpl.base as u32);
        self.write_reg(REG_ADMIN_CPL_BASE_HI, (self.admin_cpl.base >> 32) as u32);
        self.write_reg(REG_ADMIN_LOG_DEPTH, depth.trailing_zeros());
        self.write_reg(REG_ADMIN_CTRL, ADMIN_CTRL_ENABLE);
    }

    pub fn enable_eq(&mut self, eqn: u32) {
        let depth = 1u32 << TEST_EQ_LOG_DEPTH;
        let base = self
            .ram
            .alloc(depth as u64 * EQE_SIZE as u64, ROX_PAGE_SIZE as u64);
        self.write_reg(reg_eq(eqn, EQ_ADDR_LO), base as u32);
        self.write_reg(reg_eq(eqn, EQ_ADDR_HI), (base >> 32) as u32);
        self.write_reg(reg_eq(eqn, EQ_LOG_DEPTH), TEST_EQ_LOG_DEPTH);
        self.write_reg(reg_eq(eqn, EQ_CTRL), EQ_CTRL_ENABLE);
        self.eqs[eqn as usize] = Some(OwnerRing {
            base,
            depth,
            entry_size: EQE_SIZE as u64,
            ci: 0,
        });
    }

    /// Wakes the device from now on through its posted-wake companion, as rox.ko does for a
    /// device that has one (`DeviceConfig::posted_wake`): `REG_WAKE_MODE` posted, and each
    /// wake a write of the companion's eventfd (what QEMU's ivshmem doorbell does for a guest)
    /// instead of the trapped wake register.
    pub fn wake_through_companion(&mut self) {
        self.write_reg(REG_WAKE_MODE, WAKE_MODE_POSTED);
        assert_eq!(
            self.read_reg(REG_WAKE_MODE),
            WAKE_MODE_POSTED,
            "the device has no companion (DeviceConfig::posted_wake)"
        );
        self.posted_wakes = true;
    }

    /// Says in the doorbell pages whether this driver stores news (`DbPage::news_on` of its
    /// page, and of the kernel's page, which is the driver's own as rox.ko's is). With
    /// `ROX_TEST_DOORBELLS=slots` in the environment the test driver never stores news, and the
    /// device scans its page slot by slot (every test can run both ways).
    pub fn say_news(&self) {
        self.db.set_news_on(DB_PAGE_KERNEL, self.news);
        self.db.set_news_on(TEST_DB_PAGE, self.news);
    }

    /// From now on the test page's owner never stores news: a provider without
    /// `CAP_DB_SUMMARY` (rox.ko, the kernel page's owner, still says it does).
    pub fn stop_news(&mut self) {
        self.news = false;
        self.db.set_news_on(TEST_DB_PAGE, false);
    }

    /// Wakes the idle device, the way [`Self::wake_through_companion`] chose.
    fn ring_wake(&mut self) {
        self.wakes += 1;
        if self.posted_wakes {
            self.shared.posted_wake.signal();
        } else {
            self.write_reg(WAKE_REG, TEST_DB_PAGE);
        }
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// DMA_MAP the whole test RAM.
    pub fn dma_map_ram(&self) {
        let (fd, base, size) = (&self.ram.file, self.ram.base, self.ram.size);
        match &self.link {
            Link::InProcess(nic) => nic
                .dma_map(Some(fd.try_clone().expect("dup")), 0, base, size)
                .expect("dma_map"),
            Link::Socket { client, .. } => client
                .borrow_mut()
                .dma_map(0, base, size, fd.as_raw_fd())
                .expect("dma_map"),
        }
    }

    /// DMA_UNMAP the whole test RAM (as QEMU would on a memory hot-unplug).
    pub fn dma_unmap_ram(&self) {
        match &self.link {
            Link::InProcess(nic) => nic.dma_unmap(self.ram.base, self.ram.size),
            Link::Socket { client, .. } => client
                .borrow_mut()
                .dma_unmap(self.ram.base, self.ram.size)
                .expect("dma_unmap"),
        }
    }

    /// SET_IRQS: one eventfd per MSI-X vector.
    fn install_vectors(&self) {
        match &self.link {
            Link::InProcess(nic) => nic.set_msix(
                0,
                MSIX_VECTORS,
                self.vectors
                    .iter()
                    .map(|e| e.try_clone_file().expect("dup"))
                    .collect(),
            ),
            Link::Socket { client, .. } => {
                let fds: Vec<RawFd> = self.vectors.iter().map(|e| e.as_raw_fd()).collect();
                let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
                client
                    .borrow_mut()
                    .set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 0, MSIX_VECTORS, &fds)
                    .expect("set_irqs");
            }
        }
    }

    /// A BAR0 write of any size (for robustness tests).
    pub fn bar0_write_raw(&mut self, off: u64, data: &[u8]) {
        match &mut self.link {
            Link::InProcess(nic) => nic.bar0_write(off, data),
            Link::Socket { client, .. } => {
                // The server may refuse odd accesses; only its survival matters here.
                let _ = client.get_mut().region_write(BAR_CTRL, off, data);
            }
        }
    }

    pub fn read_reg(&self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        match &self.link {
            Link::InProcess(nic) => nic.bar0_read(off, &mut b),
            Link::Socket { client, .. } => client
                .borrow_mut()
                .region_read(BAR_CTRL, off, &mut b)
                .expect("region_read"),
        }
        u32::from_le_bytes(b)
    }

    pub fn write_reg(&mut self, off: u64, v: u32) {
        match &mut self.link {
            Link::InProcess(nic) => nic.bar0_write(off, &v.to_le_bytes()),
            Link::Socket { client, .. } => client
                .get_mut()
                .region_write(BAR_CTRL, off, &v.to_le_bytes())
                .expect("region_write"),
        }
    }

    /// Reset the device and set the admin queue and EQs up again.
    pub fn reset(&mut self) {
        self.write_reg(REG_RESET, RESET_VALUE);
        let start = Instant::now();
        while self.read_reg(REG_STATUS) & STATUS_READY == 0 {
            assert!(start.elapsed() < TIMEOUT, "reset did not complete");
            std::thread::yield_now();
        }
        // Fresh rings: the device starts again at index 0.
        let depth = self.admin_cpl.depth;
        self.admin_cmd = self
            .ram
            .alloc(depth as u64 * ADMIN_CMD_SIZE as u64, ROX_PAGE_SIZE as u64);
        let cpl = self
            .ram
            .alloc(depth as u64 * ADMIN_CPL_SIZE as u64, ROX_PAGE_SIZE as u64);
        self.admin_cpl = OwnerRing {
            base: cpl,
            depth,
            entry_size: ADMIN_CPL_SIZE as u64,
            ci: 0,
        };
        self.admin_pi = 0;
        self.next_slot = 0;
        // The reset cleared the doorbell pages, `news_on` too.
        self.say_news();
        self.enable_admin();
        self.enable_eq(EQ_ADMIN_ASYNC);
        self.enable_eq(COMP_EQ);
    }
}

impl Drop for TestDriver {
    fn drop(&mut self) {
        if let Link::Socket {
            client,
            server,
            path,
        } = &mut self.link
        {
            // The server loop ends when its client goes away; it then drops the device.
            let _ = client.get_mut().shutdown();
            if let Some(t) = server.take() {
                let _ = t.join();
            }
            let _ = std::fs::remove_file(path);
        }
    }
}

pub fn admin_port() -> u8 {
    PORT_NUM
}

/// Waits until `done` holds (a device's thread reached a test's hold, a counter moved);
/// fails the test with `what` after [`TIMEOUT`].
pub fn wait_until(mut done: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < TIMEOUT, "{what}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Bytes of a deterministic pattern (for checksummed payloads).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
