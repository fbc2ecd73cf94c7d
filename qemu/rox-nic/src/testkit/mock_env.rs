//! The transport engine's test double: a [`DeviceEnv`] over plain memory (one `Vec`) guarded
//! by the device's own protection table ([`MemTable`], through [`super::protected`]), with
//! receive queues and a completion list, so the engine's host tests and fuzzers run without a
//! device and against the rules the device has. Records what the engine sent and completed
//! for the tests to look at; takes the driver's part for on-demand page faults.

use std::collections::{HashMap, VecDeque};
use std::ops::{Index, IndexMut};

use super::protected::{protected_memory_ops, region, window, ProtectedMemory, RegionKind};
use crate::device::mem::MemTable;
use crate::device::region::{FastRegState, Mr};
use crate::dma::SliceRam;
use crate::roce::*;
use rox_uapi::admin::{ODP_PTE_PRESENT, ODP_PTE_WRITE};

/// Guest-physical base of every mock device's memory (address 0 stays invalid).
pub const MEM_BASE: u64 = 0x10_0000;
pub const MEM_SIZE: usize = 4 << 20;
/// The mock's regions: the device's protection table ([`MemTable`]), plus the order the test
/// registered them in (`env.mrs[0]` is the first region a test registered).
#[derive(Debug, Default)]
pub struct MockRegions {
    pub table: MemTable,
    order: Vec<u32>,
}

impl Index<usize> for MockRegions {
    type Output = Mr;
    fn index(&self, n: usize) -> &Mr {
        &self.table.mrs[&self.order[n]]
    }
}

impl IndexMut<usize> for MockRegions {
    fn index_mut(&mut self, n: usize) -> &mut Mr {
        self.table
            .mrs
            .get_mut(&self.order[n])
            .expect("registered regions stay")
    }
}

/// A device's memory, MR table, receive queues and completion queue.
pub struct MockEnv {
    pub now: u64,
    pub mem: Vec<u8>,
    pub mrs: MockRegions,
    pub recv_queues: HashMap<Qpn, VecDeque<RecvWr>>,
    pub completions: Vec<Completion>,
    pub outbox: Vec<(Gid, Vec<u8>)>,
    /// The destination MAC of each packet transmitted, in order.
    pub tx_dmacs: Vec<[u8; 6]>,
    /// Bytes `read_remote` copied out of memory.
    pub remote_bytes_read: u64,
    /// Accesses answered with a page fault, and the faults the device would have posted to
    /// the driver (once a page until the driver's answer: the table's rule).
    pub page_faults: u64,
    pub faults_posted: u64,
    /// The driver's answer to faults: at this time every page of this on-demand region is
    /// mapped (a driver slow to map).
    pub driver_maps: Vec<(Key, u64)>,
    /// Affiliated asynchronous errors the engine reported, in order.
    pub async_errors: Vec<(Qpn, QpAsyncError)>,
    next_index: u32,
}

/// A signaled send work request of `opcode` with payload `data` and everything else zero:
/// what the engine's tests and fuzzers post (set the other fields on the result).
pub fn send_wr(wr_id: u64, opcode: WrOpcode, data: SendData) -> SendWr {
    SendWr {
        data,
        ..SendWr::new(wr_id, opcode)
    }
}

/// A receive work request `wr_id` scattering into `sges` (the engine assigns its WQE index).
pub fn recv_wr(wr_id: u64, sges: Vec<Sge>) -> RecvWr {
    RecvWr {
        wr_id,
        sges,
        wqe_index: 0,
    }
}

/// What the modifies of [`rts_steps`] set on an engine QP.
#[derive(Clone, Copy, Debug)]
pub struct QpSetup {
    pub access: u32,
    pub qkey: u32,
    pub mtu: Mtu,
    pub peer_qpn: Qpn,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    /// Both ways: as requester and as responder.
    pub max_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// The path of a connected QP (None for UD).
    pub av: Option<AddressVector>,
}

/// The modifies that take a new engine QP to INIT, RTR and RTS, in order (a test applies as
/// many as the state it wants).
pub fn rts_steps(s: &QpSetup) -> [QpModify; 3] {
    [
        QpModify {
            state: Some(QpState::Init),
            access_flags: Some(s.access),
            qkey: Some(s.qkey),
            ..Default::default()
        },
        QpModify {
            state: Some(QpState::Rtr),
            path_mtu: Some(s.mtu),
            dest_qpn: Some(s.peer_qpn),
            rq_psn: Some(s.rq_psn),
            max_dest_rd_atomic: Some(s.max_rd_atomic),
            min_rnr_timer: Some(s.min_rnr_timer),
            av: s.av,
            ..Default::default()
        },
        QpModify {
            state: Some(QpState::Rts),
            sq_psn: Some(s.sq_psn),
            timeout: Some(s.timeout),
            retry_cnt: Some(s.retry_cnt),
            rnr_retry: Some(s.rnr_retry),
            max_rd_atomic: Some(s.max_rd_atomic),
            ..Default::default()
        },
    ]
}

/// A window rkey no mock device has: binds, fast registrations and invalidations of it fail.
pub const BAD_RKEY: Key = Key::from_raw(0xdead_beef);

impl Default for MockEnv {
    fn default() -> MockEnv {
        MockEnv::new()
    }
}

impl MockEnv {
    pub fn new() -> MockEnv {
        MockEnv {
            now: 0,
            mem: vec![0; MEM_SIZE],
            mrs: MockRegions::default(),
            recv_queues: HashMap::new(),
            completions: Vec::new(),
            outbox: Vec::new(),
            tx_dmacs: Vec::new(),
            remote_bytes_read: 0,
            page_faults: 0,
            faults_posted: 0,
            driver_maps: Vec::new(),
            async_errors: Vec::new(),
            next_index: 0,
        }
    }

    /// Registers `[addr, addr+len)` (guest-physical, like a DMA MR); lkey == rkey.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Key {
        self.reg(pd, addr, len, access, RegionKind::Physical)
    }

    /// Registers `[addr, addr+len)` as a region of `kind` ([`RegionKind`]).
    pub fn reg(&mut self, pd: u32, addr: u64, len: u64, access: u32, kind: RegionKind) -> Key {
        self.next_index += 1;
        let key = Key::region(self.next_index, 0);
        let mr = region(key, pd, addr, len, access, kind);
        self.mrs.table.mrs.insert(key.index(), mr);
        self.mrs.order.push(key.index());
        key
    }

    /// Allocates an unbound type 2 memory window of `pd`; its rkey (variant 0).
    pub fn alloc_mw(&mut self, pd: u32) -> Key {
        self.next_index += 1;
        let rkey = Key::window(self.next_index, 0);
        self.mrs.table.mws.insert(rkey.index(), window(pd, rkey));
        rkey
    }

    /// Allocates an invalid fast-registration region of `pd` for up to `capacity` pages.
    pub fn alloc_fast_reg(&mut self, pd: u32, capacity: u32) -> Key {
        let key = self.reg(pd, 0, 0, 0, RegionKind::FastReg);
        let mr = self.mrs.table.mrs.get_mut(&key.index()).expect("just made");
        mr.pages.clear();
        mr.fast_reg = Some(FastRegState {
            capacity,
            valid: false,
        });
        key
    }

    /// The driver maps every page of the on-demand regions whose time has come (as its
    /// answer to the page faults: present and writable, at their own addresses).
    fn answer_faults(&mut self) {
        let now = self.now;
        let table = &mut self.mrs.table;
        self.driver_maps.retain(|&(key, at)| {
            if now < at {
                return true;
            }
            if let Some(mr) = table.mrs.get_mut(&key.index()) {
                let first = mr.iova - mr.offset;
                for (i, pte) in mr.pages.iter_mut().enumerate() {
                    *pte =
                        (first + ((i as u64) << mr.page_shift)) | ODP_PTE_PRESENT | ODP_PTE_WRITE;
                }
            }
            false
        });
    }

    pub fn fill(&mut self, addr: u64, data: &[u8]) {
        let at = (addr - MEM_BASE) as usize;
        self.mem[at..at + data.len()].copy_from_slice(data);
    }

    pub fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        let at = (addr - MEM_BASE) as usize;
        &self.mem[at..at + len]
    }

    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) {
        self.recv_queues.entry(qpn).or_default().push_back(wr);
    }

    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }
}

impl ProtectedMemory for MockEnv {
    fn protected(&mut self) -> (&mut MemTable, SliceRam<'_>) {
        self.answer_faults();
        (&mut self.mrs.table, SliceRam::new(MEM_BASE, &mut self.mem))
    }
    fn answer<T>(&mut self, r: Result<T, AccessError>) -> Result<T, AccessError> {
        let (r, posted) = self.mrs.table.answer_fault(r, || true);
        if matches!(r, Err(AccessError::PageFault { .. })) {
            self.page_faults += 1;
        }
        self.faults_posted += u64::from(posted.is_some());
        r
    }
    fn remote_read(&mut self, len: u64) {
        self.remote_bytes_read += len;
    }
}

impl DeviceEnv for MockEnv {
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn qp_async_error(&mut self, qpn: Qpn, error: QpAsyncError) {
        self.async_errors.push((qpn, error));
    }
    protected_memory_ops!();
    fn pop_recv(&mut self, qpn: Qpn) -> Option<RecvWr> {
        self.recv_queues.get_mut(&qpn)?.pop_front()
    }
    fn complete(&mut self, completion: Completion) {
        self.completions.push(completion);
    }
    fn transmit(&mut self, av: &AddressVector, packet: crate::roce::wire::Packet) {
        self.outbox.push((av.dgid, packet.into_vec()));
        self.tx_dmacs.push(av.dmac);
    }
}
