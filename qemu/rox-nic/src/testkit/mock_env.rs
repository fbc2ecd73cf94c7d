//! The transport engine's test double: a [`DeviceEnv`] over plain memory (one `Vec`) with a
//! table of memory regions, receive queues and a completion list, so the engine's host tests
//! and fuzzers run without a device. Records what the engine asked for (frames, local
//! operations) for the tests to look at.

use std::collections::{HashMap, VecDeque};
use std::ops::{Index, IndexMut};

use crate::device::mem::MemTable;
use crate::device::region::Mr;
use crate::dma::SliceRam;
use crate::roce::*;

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
    /// Memory window operations the engine asked for, in order: (qpn, op).
    pub local_ops: Vec<(Qpn, LocalOp)>,
    /// rkeys that `invalidate` accepts (once each); binds with `new_rkey == BAD_RKEY` and fast
    /// registrations with `key == BAD_RKEY` fail.
    pub invalidatable: Vec<Key>,
    /// Bytes `read_remote` copied out of memory.
    pub remote_bytes_read: u64,
    /// `read_local` through this key answers a page fault until this time (an on-demand
    /// region whose page the driver is slow to map); `page_faults` counts the answers.
    pub fault_until: Option<(Key, u64)>,
    pub page_faults: u64,
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

/// A bind the mock refuses.
pub const BAD_RKEY: Key = Key::from_raw(0xdead_beef);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalOp {
    Bind(MwBind),
    FastReg(FastReg),
    Invalidate { rkey: Key, remote: bool },
}

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
            local_ops: Vec::new(),
            invalidatable: Vec::new(),
            remote_bytes_read: 0,
            fault_until: None,
            page_faults: 0,
            async_errors: Vec::new(),
            next_index: 0,
        }
    }

    /// Registers `[addr, addr+len)` (guest-physical, like a DMA MR); lkey == rkey.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Key {
        self.next_index += 1;
        let key = Key::region(self.next_index, 0);
        self.mrs.table.mrs.insert(
            key.index(),
            Mr {
                key,
                pd,
                access,
                iova: addr,
                length: len,
                offset: 0,
                pages: Vec::new(),
                page_shift: 0,
                physical: true,
                odp: false,
                fast_reg: None,
            },
        );
        self.mrs.order.push(key.index());
        key
    }

    /// The memory as the protection table reaches it.
    fn ram(&mut self) -> (&MemTable, SliceRam<'_>) {
        (&self.mrs.table, SliceRam::new(MEM_BASE, &mut self.mem))
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

impl DeviceEnv for MockEnv {
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn qp_async_error(&mut self, qpn: Qpn, error: QpAsyncError) {
        self.async_errors.push((qpn, error));
    }
    fn read_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let (table, ram) = self.ram();
        table.read_local(&ram, pd, lkey, addr, buf)?;
        if self
            .fault_until
            .is_some_and(|(key, until)| key == lkey && self.now < until)
        {
            self.page_faults += 1;
            return Err(AccessError::PageFault {
                key: lkey,
                page: 0,
                write: false,
                count: 1,
            });
        }
        Ok(())
    }
    fn write_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let (table, ram) = self.ram();
        table.write_local(&ram, pd, lkey, addr, data)
    }
    fn read_remote(&mut self, at: RemoteTarget, buf: &mut [u8]) -> Result<(), AccessError> {
        let (table, ram) = self.ram();
        table.read_remote(&ram, at, buf)?;
        self.remote_bytes_read += buf.len() as u64;
        Ok(())
    }
    fn write_remote(&mut self, at: RemoteTarget, data: &[u8]) -> Result<(), AccessError> {
        let (table, ram) = self.ram();
        table.write_remote(&ram, at, data)
    }
    fn check_remote_write(&mut self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        self.mrs.table.check_remote_write(at, len)
    }
    fn atomic_remote(&mut self, at: RemoteTarget, op: AtomicOp) -> Result<u64, AccessError> {
        let (table, ram) = self.ram();
        table.atomic_remote(&ram, at, op)
    }
    fn flush_remote(&mut self, at: RemoteTarget, flush: FlushSpec) -> Result<(), AccessError> {
        self.mrs.table.flush_remote(at, flush)
    }
    fn bind_mw(&mut self, _pd: u32, qpn: Qpn, bind: &MwBind) -> Result<(), AccessError> {
        self.local_ops.push((qpn, LocalOp::Bind(*bind)));
        if bind.new_rkey == BAD_RKEY {
            return Err(AccessError::InvalidKey);
        }
        Ok(())
    }
    fn fast_register(&mut self, _pd: u32, qpn: Qpn, reg: &FastReg) -> Result<(), AccessError> {
        self.local_ops.push((qpn, LocalOp::FastReg(*reg)));
        if reg.key == BAD_RKEY {
            return Err(AccessError::InvalidKey);
        }
        Ok(())
    }
    fn invalidate(
        &mut self,
        _pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        self.local_ops
            .push((qpn, LocalOp::Invalidate { rkey, remote }));
        let at = self
            .invalidatable
            .iter()
            .position(|&k| k == rkey)
            .ok_or(AccessError::InvalidKey)?;
        self.invalidatable.remove(at);
        Ok(())
    }
    fn check_invalidate(
        &mut self,
        _pd: u32,
        _qpn: Qpn,
        rkey: Key,
        _remote: bool,
    ) -> Result<(), AccessError> {
        if self.invalidatable.contains(&rkey) {
            Ok(())
        } else {
            Err(AccessError::InvalidKey)
        }
    }
    fn pop_recv(&mut self, qpn: Qpn) -> Option<RecvWr> {
        self.recv_queues.get_mut(&qpn)?.pop_front()
    }
    fn complete(&mut self, completion: Completion) {
        self.completions.push(completion);
    }
    fn transmit(&mut self, av: &AddressVector, packet: Vec<u8>) {
        self.outbox.push((av.dgid, packet));
        self.tx_dmacs.push(av.dmac);
    }
}
