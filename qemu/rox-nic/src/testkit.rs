//! A userspace "driver" for tests and benchmarks: it programs a [`RoxNic`] through the same
//! BAR0 registers, admin queue, doorbell pages and event queues a kernel driver uses, with
//! "guest RAM" in a memfd handed to the device through DMA_MAP. Two links:
//! [`TestDriver::new`] calls the device model in process (exactly what the vfio-user server
//! loop calls); [`TestDriver::over_socket`] serves the device on a real vfio-user socket and
//! drives it with the `vfio_user` crate's client, mapping the doorbell BAR from the fd the
//! server sends, as QEMU does.

pub mod mock_env;

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
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

use crate::device::sys::EventFd;
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

/// Guest RAM in a memfd, mapped into the test too.
pub struct GuestRam {
    pub file: File,
    ptr: *mut u8,
    pub base: u64,
    pub size: u64,
    next: u64,
}

// SAFETY: shared memory accessed by copies.
unsafe impl Send for GuestRam {}

impl GuestRam {
    pub fn new(base: u64, size: u64) -> GuestRam {
        // SAFETY: plain syscalls; results checked.
        unsafe {
            let fd = libc::memfd_create(c"rox-test-ram".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0, "memfd_create");
            let file = File::from_raw_fd(fd);
            file.set_len(size).expect("size test RAM");
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert!(ptr != libc::MAP_FAILED, "mmap test RAM");
            GuestRam {
                file,
                ptr: ptr as *mut u8,
                base,
                size,
                next: base,
            }
        }
    }

    /// Allocate `size` bytes aligned to `align` (zeroed: the memfd starts zeroed and nothing is
    /// ever freed).
    pub fn alloc(&mut self, size: u64, align: u64) -> u64 {
        let addr = self.next.div_ceil(align) * align;
        assert!(addr + size <= self.base + self.size, "test RAM exhausted");
        self.next = addr + size;
        addr
    }

    fn host(&self, addr: u64, len: usize) -> *mut u8 {
        assert!(
            addr >= self.base && addr + len as u64 <= self.base + self.size,
            "address {addr:#x} outside test RAM"
        );
        // SAFETY: bounds checked above.
        unsafe { self.ptr.add((addr - self.base) as usize) }
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        // SAFETY: host() checks bounds.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.host(addr, data.len()), data.len())
        }
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        // SAFETY: host() checks bounds.
        unsafe { std::ptr::copy_nonoverlapping(self.host(addr, len), v.as_mut_ptr(), len) };
        v
    }

    pub fn fill(&self, addr: u64, len: usize, byte: u8) {
        // SAFETY: host() checks bounds.
        unsafe { std::ptr::write_bytes(self.host(addr, len), byte, len) }
    }

    pub fn write_obj<T: Pod>(&self, addr: u64, v: &T) {
        self.write(addr, as_bytes(v))
    }

    pub fn read_obj<T: Pod>(&self, addr: u64) -> T {
        from_bytes(&self.read(addr, size_of::<T>()))
    }

    /// The owner byte of an entry, read with acquire ordering.
    pub fn owner(&self, addr: u64) -> u8 {
        // SAFETY: bounds checked; u8 atomics need no alignment.
        unsafe { (*(self.host(addr, 1) as *const AtomicU8)).load(Ordering::Acquire) }
    }
}

impl Drop for GuestRam {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.size as usize) };
    }
}

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

/// How the test driver reaches the device.
pub enum Link {
    /// Direct calls into the device model.
    InProcess(Box<RoxNic>),
    /// A vfio-user socket served by a thread running the crate's server loop.
    Socket {
        client: RefCell<vfio_user::Client>,
        server: Option<JoinHandle<()>>,
        path: PathBuf,
    },
}

/// The doorbell BAR as the driver sees it: a shared mapping of the BAR's fd.
pub struct DbMap {
    ptr: *mut u8,
}

// SAFETY: shared memory accessed through atomics only.
unsafe impl Send for DbMap {}

impl DbMap {
    fn map(fd: RawFd) -> DbMap {
        // SAFETY: mapping the doorbell BAR fd; failure checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BAR_DB_SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap doorbell BAR");
        DbMap {
            ptr: ptr as *mut u8,
        }
    }

    fn word(&self, page: u32, offset: usize) -> &AtomicU32 {
        assert!(page < DB_PAGE_COUNT && offset < ROX_PAGE_SIZE);
        // SAFETY: inside the mapping, 4-byte aligned (offsets are multiples of 4).
        unsafe { &*(self.ptr.add(page as usize * ROX_PAGE_SIZE + offset) as *const AtomicU32) }
    }

    pub fn slot(&self, page: u32, slot: u32) -> DbSlot {
        let off = db_slot_offset(slot);
        DbSlot {
            a: self.word(page, off).load(Ordering::Acquire),
            b: self.word(page, off + 4).load(Ordering::Acquire),
        }
    }

    pub fn store_a(&self, page: u32, slot: u32, v: u32) {
        self.word(page, db_slot_offset(slot))
            .store(v, Ordering::Release);
    }

    pub fn store_b(&self, page: u32, slot: u32, v: u32) {
        self.word(page, db_slot_offset(slot) + 4)
            .store(v, Ordering::Release);
    }

    /// The page's `device_idle` word.
    pub fn idle(&self, page: u32) -> u32 {
        self.word(page, 0).load(Ordering::SeqCst)
    }
}

impl Drop for DbMap {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, BAR_DB_SIZE as usize) };
    }
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
    /// Times the driver rang the wake register.
    pub wakes: u64,
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
    let gid = gid_v4(127, 0, subnet, host);
    let mut cfg = DeviceConfig::new(test_mac(&gid));
    cfg.port = Some(port);
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
        let db = DbMap::map(nic.doorbell_fd());
        Self::setup(Link::InProcess(Box::new(nic)), shared, db)
    }

    /// The same, over a real vfio-user socket (a server thread runs the crate's loop).
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
            .as_raw_fd();
        let db = DbMap::map(fd);
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
        };
        let start = Instant::now();
        while d.read_reg(REG_STATUS) & STATUS_READY == 0 {
            assert!(start.elapsed() < TIMEOUT, "device not ready");
            std::thread::yield_now();
        }
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
        self.enable_admin();
        self.enable_eq(EQ_ADMIN_ASYNC);
        self.enable_eq(COMP_EQ);
    }

    // ---- admin -----------------------------------------------------------------------------

    /// Submit one command and wait for its completion.
    pub fn admin(&mut self, opcode: u8, payload: AdminPayload) -> AdminCpl {
        let id = self.next_cmd_id;
        self.next_cmd_id = self.next_cmd_id.wrapping_add(1);
        let cmd = AdminCmd {
            hdr: AdminCmdHdr {
                opcode,
                cmd_id: id,
                ..Default::default()
            },
            payload,
        };
        let idx = self.admin_pi & (self.admin_cpl.depth - 1);
        self.ram
            .write_obj(self.admin_cmd + idx as u64 * ADMIN_CMD_SIZE as u64, &cmd);
        self.admin_pi = self.admin_pi.wrapping_add(1);
        fence(Ordering::SeqCst);
        self.write_reg(REG_ADMIN_DB, self.admin_pi);
        let start = Instant::now();
        while !self.admin_cpl.ready(&self.ram) {
            assert!(
                start.elapsed() < TIMEOUT,
                "admin command {opcode:#x} timed out"
            );
            assert!(
                self.read_reg(REG_STATUS) & STATUS_FATAL == 0 || self.admin_cpl.ready(&self.ram),
                "device fatal"
            );
            std::thread::yield_now();
        }
        let cpl: AdminCpl = self.ram.read_obj(self.admin_cpl.addr(self.admin_cpl.ci));
        self.admin_cpl.ci = self.admin_cpl.ci.wrapping_add(1);
        assert_eq!(cpl.cmd_id, id);
        cpl
    }

    pub fn admin_ok(&mut self, opcode: u8, p: AdminPayload) -> AdminCpl {
        let cpl = self.admin(opcode, p);
        assert_eq!(
            cpl.status, ADMIN_STATUS_SUCCESS,
            "admin opcode {opcode:#x} failed"
        );
        cpl
    }

    /// Runs admin command `C`, which must succeed; answers its typed result (the `MrKeys` of
    /// a REG_MR, the `Key` of an ALLOC_MW, the `Qpn` of a CREATE_QP, ...).
    pub fn run<C: AdminCommand>(&mut self, p: C::Payload) -> C::Result {
        let cpl = self.admin_ok(C::OPCODE, C::payload(p));
        C::Result::from_words(cpl.result0, cpl.result1)
    }

    pub fn set_gid(&mut self, index: u32, gid: [u8; 16]) {
        let c = SetGidCmd {
            index,
            gid_type: GID_TYPE_ROCE_UDP_ENCAP,
            valid: 1,
            gid,
            ..Default::default()
        };
        self.admin_ok(ADMIN_OP_SET_GID, payload(&c));
    }

    /// A level-1 page list of 4 KiB pages covering `[addr, addr+len)` (addr page aligned).
    pub fn page_list(&mut self, addr: u64, len: u64) -> PageList {
        let first = addr & !(ROX_PAGE_SIZE as u64 - 1);
        let npages = (addr + len - first).div_ceil(ROX_PAGE_SIZE as u64).max(1);
        let list = self.ram.alloc(npages * 8, ROX_PAGE_SIZE as u64);
        for i in 0..npages {
            self.ram.write(
                list + i * 8,
                &(first + i * ROX_PAGE_SIZE as u64).to_le_bytes(),
            );
        }
        PageList {
            addr: list,
            npages: npages as u32,
            page_shift: ROX_PAGE_SHIFT as u8,
            level: PBL_LEVEL_1,
            reserved: 0,
        }
    }

    pub fn reg_mr_cmd(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> RegMrCmd {
        let pbl = self.page_list(addr, len);
        RegMrCmd {
            pd,
            access,
            iova: addr,
            length: len,
            pbl,
            offset_in_first_page: (addr & (ROX_PAGE_SIZE as u64 - 1)) as u32,
            flags: 0,
        }
    }

    /// Register `[addr, addr+len)` with iova = addr; returns the key or the admin status.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Result<Key, u8> {
        let c = self.reg_mr_cmd(pd, addr, len, access);
        let cpl = self.admin(ADMIN_OP_REG_MR, payload(&c));
        if cpl.status == ADMIN_STATUS_SUCCESS {
            Ok(MrKeys::from_words(cpl.result0, cpl.result1).lkey)
        } else {
            Err(cpl.status)
        }
    }

    pub fn alloc_slot(&mut self) -> u32 {
        let s = self.next_slot;
        self.next_slot += 1;
        s
    }

    pub fn create_cq(&mut self, log_depth: u8) -> TestCq {
        let depth = 1u32 << log_depth;
        let bytes = depth as u64 * CQE_SIZE as u64;
        let base = self.ram.alloc(bytes, ROX_PAGE_SIZE as u64);
        let ring = self.page_list(base, bytes);
        let db_slot = self.alloc_slot();
        let c = CreateCqCmd {
            ring,
            log_depth,
            eqn: COMP_EQ,
            db_page: TEST_DB_PAGE,
            db_slot,
            ..Default::default()
        };
        let cpl = self.admin_ok(ADMIN_OP_CREATE_CQ, payload(&c));
        TestCq {
            id: cpl.result0,
            ring: OwnerRing {
                base,
                depth,
                entry_size: CQE_SIZE as u64,
                ci: 0,
            },
            db_slot,
            arm_seq: 0,
        }
    }

    pub fn create_srq(&mut self, pd: u32, log_depth: u8, limit: u32) -> TestSrq {
        let depth = 1u32 << log_depth;
        let bytes = depth as u64 * RQ_WQE_SIZE as u64;
        let base = self.ram.alloc(bytes, ROX_PAGE_SIZE as u64);
        let ring = self.page_list(base, bytes);
        let db_slot = self.alloc_slot();
        let c = CreateSrqCmd {
            pd,
            log_depth,
            limit,
            db_page: TEST_DB_PAGE,
            db_slot,
            ring,
            ..Default::default()
        };
        let cpl = self.admin_ok(ADMIN_OP_CREATE_SRQ, payload(&c));
        TestSrq {
            id: cpl.result0,
            ring: base,
            depth,
            pi: 0,
            db_slot,
        }
    }

    /// Build (but do not submit) a create-QP command with fresh rings.
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_cmd(
        &mut self,
        qp_type: u8,
        pd: u32,
        scq: u32,
        rcq: u32,
        srq: u32,
        log_sq: u8,
        log_rq: u8,
    ) -> (CreateQpCmd, TestQp) {
        let sq_bytes = (1u64 << log_sq) * SQ_WQE_SIZE as u64;
        let rq_bytes = (1u64 << log_rq) * RQ_WQE_SIZE as u64;
        let sq = self.ram.alloc(sq_bytes, ROX_PAGE_SIZE as u64);
        let rq = self.ram.alloc(rq_bytes, ROX_PAGE_SIZE as u64);
        let sq_pl = self.page_list(sq, sq_bytes);
        let rq_pl = self.page_list(rq, rq_bytes);
        let db_slot = self.alloc_slot();
        let c = CreateQpCmd {
            qp_type,
            sq_sig_all: 0,
            log_sq_depth: log_sq,
            log_rq_depth: log_rq,
            pd,
            send_cq: scq,
            recv_cq: rcq,
            srq,
            db_page: TEST_DB_PAGE,
            db_slot,
            sq: sq_pl,
            rq: rq_pl,
            ..Default::default()
        };
        let qp = TestQp {
            qpn: Qpn::default(),
            qp_type,
            pd,
            sq,
            sq_depth: 1 << log_sq,
            sq_pi: 0,
            rq,
            rq_depth: 1 << log_rq,
            rq_pi: 0,
            db_slot,
        };
        (c, qp)
    }

    pub fn create_qp(&mut self, qp_type: u8, pd: u32, scq: u32, rcq: u32, srq: u32) -> TestQp {
        let (c, mut qp) = self.create_qp_cmd(qp_type, pd, scq, rcq, srq, 8, 8);
        qp.qpn = self.run::<CreateQp>(c);
        qp
    }

    pub fn modify_qp(&mut self, qpn: Qpn, attr_mask: u32, attr: QpAttr) -> AdminCpl {
        self.admin(
            ADMIN_OP_MODIFY_QP,
            payload(&ModifyQpCmd {
                qpn,
                attr_mask,
                attr,
            }),
        )
    }

    pub fn query_qp(&mut self, qpn: Qpn) -> QpAttr {
        let resp = self.ram.alloc(ROX_PAGE_SIZE as u64, ROX_PAGE_SIZE as u64);
        self.admin_ok(
            ADMIN_OP_QUERY_QP,
            payload(&QueryCmd {
                index: qpn.get(),
                resp_addr: resp,
                ..Default::default()
            }),
        );
        self.ram.read_obj(resp)
    }

    pub fn query_stats(&mut self) -> Vec<u64> {
        let resp = self.ram.alloc(ROX_PAGE_SIZE as u64, ROX_PAGE_SIZE as u64);
        let cpl = self.admin_ok(
            ADMIN_OP_QUERY_STATS,
            payload(&QueryCmd {
                resp_addr: resp,
                ..Default::default()
            }),
        );
        let b = self.ram.read(resp, cpl.result0 as usize * 8);
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect()
    }

    /// RESET -> INIT -> RTR -> RTS for an RC/UC QP towards (dgid, dest_qpn), with
    /// [`ConnectParams::default`].
    pub fn connect(&mut self, qp: &TestQp, dgid: [u8; 16], dest_qpn: Qpn, access: u32) {
        self.connect_with(qp, dgid, dest_qpn, access, &ConnectParams::default())
    }

    /// [`TestDriver::connect`] with a chosen path MTU (`MTU_*`).
    pub fn connect_mtu(
        &mut self,
        qp: &TestQp,
        dgid: [u8; 16],
        dest_qpn: Qpn,
        access: u32,
        mtu: u8,
    ) {
        self.connect_with(
            qp,
            dgid,
            dest_qpn,
            access,
            &ConnectParams {
                mtu,
                ..Default::default()
            },
        )
    }

    /// [`TestDriver::connect`] with explicit transport parameters.
    pub fn connect_with(
        &mut self,
        qp: &TestQp,
        dgid: [u8; 16],
        dest_qpn: Qpn,
        access: u32,
        p: &ConnectParams,
    ) {
        let mtu = p.mtu;
        let mut a = QpAttr {
            qp_state: QPS_INIT,
            port_num: admin_port(),
            qp_access_flags: access,
            ..Default::default()
        };
        let rc = qp.qp_type == QPT_RC;
        let cpl = self.modify_qp(
            qp.qpn,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
            a,
        );
        assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS, "to INIT");
        a.qp_state = QPS_RTR;
        a.path_mtu = mtu;
        a.dest_qp_num = dest_qpn;
        a.rq_psn = Psn::default();
        a.ah.dgid = dgid;
        a.ah.dmac = test_mac(&dgid);
        a.ah.hop_limit = 64;
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = p.min_rnr_timer;
        let mut m = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
        if rc {
            m |= QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
        }
        assert_eq!(
            self.modify_qp(qp.qpn, m, a).status,
            ADMIN_STATUS_SUCCESS,
            "to RTR"
        );
        a.qp_state = QPS_RTS;
        a.sq_psn = Psn::default();
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = 4;
        let mut m = QP_STATE | QP_SQ_PSN;
        if rc {
            m |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
        }
        assert_eq!(
            self.modify_qp(qp.qpn, m, a).status,
            ADMIN_STATUS_SUCCESS,
            "to RTS"
        );
    }

    /// Two QPs of `qp_type` in `pd`, each with its own CQ of 2^`log_cq` entries, ready to talk
    /// over GID 0 (127.0.0.1): RC/UC connected to each other with `access`, UD activated with
    /// [`PAIR_QKEY`]. Returns (cq_a, cq_b, a, b).
    pub fn qp_pair(
        &mut self,
        qp_type: u8,
        pd: u32,
        log_cq: u8,
        access: u32,
    ) -> (TestCq, TestCq, TestQp, TestQp) {
        let gid = gid_v4(127, 0, 0, 1);
        self.set_gid(0, gid);
        let cq_a = self.create_cq(log_cq);
        let cq_b = self.create_cq(log_cq);
        let a = self.create_qp(qp_type, pd, cq_a.id, cq_a.id, SRQ_NONE);
        let b = self.create_qp(qp_type, pd, cq_b.id, cq_b.id, SRQ_NONE);
        if qp_type == QPT_UD {
            self.activate_ud(&a, PAIR_QKEY);
            self.activate_ud(&b, PAIR_QKEY);
        } else {
            self.connect(&a, gid, b.qpn, access);
            self.connect(&b, gid, a.qpn, access);
        }
        (cq_a, cq_b, a, b)
    }

    /// RESET -> INIT -> RTR -> RTS for a UD QP.
    pub fn activate_ud(&mut self, qp: &TestQp, qkey: u32) {
        let mut a = QpAttr {
            qp_state: QPS_INIT,
            port_num: admin_port(),
            qkey,
            ..Default::default()
        };
        assert_eq!(
            self.modify_qp(qp.qpn, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY, a)
                .status,
            ADMIN_STATUS_SUCCESS
        );
        a.qp_state = QPS_RTR;
        assert_eq!(
            self.modify_qp(qp.qpn, QP_STATE, a).status,
            ADMIN_STATUS_SUCCESS
        );
        a.qp_state = QPS_RTS;
        assert_eq!(
            self.modify_qp(qp.qpn, QP_STATE | QP_SQ_PSN, a).status,
            ADMIN_STATUS_SUCCESS
        );
    }

    // ---- data path -------------------------------------------------------------------------

    /// The software half of the idle protocol after a doorbell store.
    fn kick(&mut self) {
        fence(Ordering::SeqCst);
        if self.db.idle(TEST_DB_PAGE) == DB_DEVICE_IDLE {
            self.wakes += 1;
            self.write_reg(WAKE_REG, TEST_DB_PAGE);
        }
    }

    /// Write a send WQE at the SQ producer index (not yet rung).
    pub fn write_send(&mut self, qp: &mut TestQp, wqe: &SqWqe) {
        let addr = qp.sq + (qp.sq_pi & (qp.sq_depth - 1)) as u64 * SQ_WQE_SIZE as u64;
        self.ram.write_obj(addr, wqe);
        qp.sq_pi = qp.sq_pi.wrapping_add(1);
    }

    pub fn ring_sq(&mut self, qp: &TestQp) {
        fence(Ordering::Release);
        self.db.store_a(TEST_DB_PAGE, qp.db_slot, qp.sq_pi);
        self.kick();
    }

    pub fn post_send(&mut self, qp: &mut TestQp, wqe: &SqWqe) {
        self.write_send(qp, wqe);
        self.ring_sq(qp);
    }

    /// Set the SQ producer index to anything (for wild-index tests).
    pub fn ring_sq_raw(&mut self, qp: &TestQp, pi: u32) {
        self.db.store_a(TEST_DB_PAGE, qp.db_slot, pi);
        self.kick();
    }

    pub fn post_recv(&mut self, qp: &mut TestQp, wr_id: u64, sges: &[Sge]) {
        let addr = qp.rq + (qp.rq_pi & (qp.rq_depth - 1)) as u64 * RQ_WQE_SIZE as u64;
        self.ram.write_obj(addr, &recv_wqe(wr_id, sges));
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        fence(Ordering::Release);
        self.db.store_b(TEST_DB_PAGE, qp.db_slot, qp.rq_pi);
        self.kick();
    }

    pub fn post_srq(&mut self, srq: &mut TestSrq, wr_id: u64, sges: &[Sge]) {
        let addr = srq.ring + (srq.pi & (srq.depth - 1)) as u64 * RQ_WQE_SIZE as u64;
        self.ram.write_obj(addr, &recv_wqe(wr_id, sges));
        srq.pi = srq.pi.wrapping_add(1);
        fence(Ordering::Release);
        self.db.store_a(TEST_DB_PAGE, srq.db_slot, srq.pi);
        self.kick();
    }

    pub fn poll_cq(&mut self, cq: &mut TestCq) -> Option<Cqe> {
        if !cq.ring.ready(&self.ram) {
            return None;
        }
        let cqe: Cqe = self.ram.read_obj(cq.ring.addr(cq.ring.ci));
        cq.ring.ci = cq.ring.ci.wrapping_add(1);
        self.db.store_a(TEST_DB_PAGE, cq.db_slot, cq.ring.ci);
        Some(cqe)
    }

    pub fn wait_cqe(&mut self, cq: &mut TestCq) -> Cqe {
        let start = Instant::now();
        loop {
            if let Some(c) = self.poll_cq(cq) {
                return c;
            }
            assert!(start.elapsed() < TIMEOUT, "no CQE on CQ {}", cq.id);
            std::thread::yield_now();
        }
    }

    /// Expect no CQE for `dur`.
    pub fn expect_no_cqe(&mut self, cq: &mut TestCq, dur: Duration) {
        let start = Instant::now();
        while start.elapsed() < dur {
            if let Some(c) = self.poll_cq(cq) {
                panic!("unexpected CQE {c:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn arm_cq(&mut self, cq: &mut TestCq, arm_type: u32) {
        cq.arm_seq = cq.arm_seq.wrapping_add(1);
        self.db
            .store_b(TEST_DB_PAGE, cq.db_slot, cq_arm_word(cq.arm_seq, arm_type));
        self.kick();
    }

    pub fn poll_eq(&mut self, eqn: u32) -> Option<Eqe> {
        let ring = self.eqs[eqn as usize].as_mut().expect("EQ enabled");
        if !ring.ready(&self.ram) {
            return None;
        }
        let e: Eqe = self.ram.read_obj(ring.addr(ring.ci));
        ring.ci = ring.ci.wrapping_add(1);
        Some(e)
    }

    /// Next event of `event_type` on `eqn` (other events are skipped), acknowledging the EQ.
    pub fn wait_event(&mut self, eqn: u32, event_type: u8) -> Eqe {
        let start = Instant::now();
        loop {
            while let Some(e) = self.poll_eq(eqn) {
                self.ack_eq(eqn, false);
                if e.event_type == event_type {
                    return e;
                }
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "no event {event_type} on EQ {eqn}"
            );
            std::thread::yield_now();
        }
    }

    /// Report the EQ consumer index (and re-arm the interrupt if `arm`).
    pub fn ack_eq(&mut self, eqn: u32, arm: bool) {
        let ci = self.eqs[eqn as usize].expect("EQ enabled").ci & EQ_DB_CI_MASK;
        self.write_reg(reg_eq(eqn, EQ_DB), ci | if arm { EQ_DB_ARM } else { 0 });
    }

    /// Drain EQ 0 (admin completion events pile up there).
    pub fn drain_eq(&mut self, eqn: u32) -> Vec<Eqe> {
        let mut v = Vec::new();
        while let Some(e) = self.poll_eq(eqn) {
            v.push(e);
        }
        self.ack_eq(eqn, false);
        v
    }

    /// Wait until the MSI-X vector fired (consumes the eventfd count).
    pub fn wait_vector(&self, vector: u32, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.vectors[vector as usize].drain() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
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

pub fn recv_wqe(wr_id: u64, sges: &[Sge]) -> RqWqe {
    let mut w = RqWqe {
        wr_id,
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    w.sge[..sges.len()].copy_from_slice(sges);
    w
}

/// A send WQE with SGEs.
/// One scatter/gather element (`lkey` names the MR).
pub fn sge(addr: u64, length: u32, lkey: Key) -> Sge {
    Sge { addr, length, lkey }
}

pub fn send_wqe(wr_id: u64, opcode: u8, flags: u8, sges: &[Sge]) -> SqWqe {
    let mut data = [0u8; SQ_WQE_DATA_SIZE];
    for (i, s) in sges.iter().enumerate() {
        data[i * size_of::<Sge>()..(i + 1) * size_of::<Sge>()].copy_from_slice(as_bytes(s));
    }
    SqWqe {
        wr_id,
        opcode,
        flags,
        num_sge: sges.len() as u8,
        reserved0: 0,
        imm_data: 0,
        inline_len: 0,
        reserved1: 0,
        seg: SqSeg {
            rdma: RdmaSeg::default(),
        },
        data,
    }
}

/// A send WQE with inline payload.
pub fn inline_wqe(wr_id: u64, opcode: u8, flags: u8, bytes: &[u8]) -> SqWqe {
    let mut w = send_wqe(wr_id, opcode, flags | WQE_FLAG_INLINE, &[]);
    w.inline_len = bytes.len() as u32;
    w.data[..bytes.len()].copy_from_slice(bytes);
    w
}

pub fn with_rdma(mut w: SqWqe, remote_addr: u64, rkey: Key) -> SqWqe {
    w.seg = SqSeg {
        rdma: RdmaSeg {
            remote_addr,
            rkey,
            ..Default::default()
        },
    };
    w
}

pub fn with_atomic(
    mut w: SqWqe,
    remote_addr: u64,
    rkey: Key,
    compare_add: u64,
    swap: u64,
) -> SqWqe {
    w.seg = SqSeg {
        rdma: RdmaSeg {
            remote_addr,
            rkey,
            compare_add,
            swap,
            ..Default::default()
        },
    };
    w
}

pub fn with_ud(mut w: SqWqe, dgid: [u8; 16], dest_qpn: Qpn, qkey: u32) -> SqWqe {
    w.seg = SqSeg {
        ud: UdSeg {
            dgid,
            dest_qpn,
            qkey,
            hop_limit: 64,
            dmac: test_mac(&dgid),
            ..Default::default()
        },
    };
    w
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
