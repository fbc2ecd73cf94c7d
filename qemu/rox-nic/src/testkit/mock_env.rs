//! The transport engine's test double: a [`DeviceEnv`] over plain memory (one `Vec`) with a
//! table of memory regions, receive queues and a completion list, so the engine's host tests
//! and fuzzers run without a device. Records what the engine asked for (frames, local
//! operations) for the tests to look at.

use std::collections::{HashMap, VecDeque};

use crate::roce::*;

/// Guest-physical base of every mock device's memory (address 0 stays invalid).
pub const MEM_BASE: u64 = 0x10_0000;
pub const MEM_SIZE: usize = 4 << 20;
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    pub pd: u32,
    pub key: Key,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// A device's memory, MR table, receive queues and completion queue.
pub struct MockEnv {
    pub now: u64,
    pub mem: Vec<u8>,
    pub mrs: Vec<Mr>,
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
    next_key: u32,
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
            mrs: Vec::new(),
            recv_queues: HashMap::new(),
            completions: Vec::new(),
            outbox: Vec::new(),
            tx_dmacs: Vec::new(),
            local_ops: Vec::new(),
            invalidatable: Vec::new(),
            remote_bytes_read: 0,
            fault_until: None,
            page_faults: 0,
            next_key: 0x100,
        }
    }

    /// Registers `[addr, addr+len)`; lkey == rkey.
    pub fn reg_mr(&mut self, pd: u32, addr: u64, len: u64, access: u32) -> Key {
        self.next_key += 1;
        let key = Key::from_raw(self.next_key);
        self.mrs.push(Mr {
            pd,
            key,
            addr,
            len,
            access,
        });
        key
    }

    fn check(
        &self,
        pd: u32,
        key: Key,
        addr: u64,
        len: usize,
        need: u32,
    ) -> Result<usize, AccessError> {
        let mr = self
            .mrs
            .iter()
            .find(|m| m.key == key)
            .ok_or(AccessError::InvalidKey)?;
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if mr.access & need != need {
            return Err(AccessError::AccessDenied);
        }
        let end = addr
            .checked_add(len as u64)
            .ok_or(AccessError::OutOfBounds)?;
        if addr < mr.addr || end > mr.addr + mr.len {
            return Err(AccessError::OutOfBounds);
        }
        Ok((addr - MEM_BASE) as usize)
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
    fn read_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let at = self.check(pd, lkey, addr, buf.len(), 0)?;
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
        buf.copy_from_slice(&self.mem[at..at + buf.len()]);
        Ok(())
    }
    fn write_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let at = self.check(pd, lkey, addr, data.len(), ACCESS_LOCAL_WRITE)?;
        self.mem[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read_remote(
        &mut self,
        pd: u32,
        _qpn: Qpn,
        rkey: Key,
        va: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let at = self.check(pd, rkey, va, buf.len(), ACCESS_REMOTE_READ)?;
        buf.copy_from_slice(&self.mem[at..at + buf.len()]);
        self.remote_bytes_read += buf.len() as u64;
        Ok(())
    }
    fn write_remote(
        &mut self,
        pd: u32,
        _qpn: Qpn,
        rkey: Key,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let at = self.check(pd, rkey, va, data.len(), ACCESS_REMOTE_WRITE)?;
        self.mem[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn check_remote_write(
        &mut self,
        pd: u32,
        _qpn: Qpn,
        rkey: Key,
        va: u64,
        len: u64,
    ) -> Result<(), AccessError> {
        let len = usize::try_from(len).map_err(|_| AccessError::OutOfBounds)?;
        self.check(pd, rkey, va, len, ACCESS_REMOTE_WRITE)
            .map(|_| ())
    }
    fn atomic_remote(
        &mut self,
        pd: u32,
        _qpn: Qpn,
        rkey: Key,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, AccessError> {
        if !va.is_multiple_of(8) {
            return Err(AccessError::Misaligned);
        }
        let need = match op {
            AtomicOp::Write { .. } => ACCESS_REMOTE_WRITE,
            _ => ACCESS_REMOTE_ATOMIC,
        };
        let at = self.check(pd, rkey, va, 8, need)?;
        let old = u64::from_le_bytes(self.mem[at..at + 8].try_into().unwrap());
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            AtomicOp::Write { value } => u64::from_le(value),
        };
        self.mem[at..at + 8].copy_from_slice(&new.to_le_bytes());
        Ok(old)
    }
    fn flush_remote(
        &mut self,
        pd: u32,
        _qpn: Qpn,
        rkey: Key,
        va: u64,
        flush: FlushSpec,
    ) -> Result<(), AccessError> {
        let (len, whole_mr) = (flush.length, flush.level == FLUSH_LEVEL_MR);
        let mut need = 0;
        if flush.placement_type & FLUSH_TYPE_GLOBAL != 0 {
            need |= ACCESS_FLUSH_GLOBAL;
        }
        if flush.placement_type & FLUSH_TYPE_PERSISTENT != 0 {
            need |= ACCESS_FLUSH_PERSISTENT;
        }
        if whole_mr {
            let mr = self
                .mrs
                .iter()
                .find(|m| m.key == rkey)
                .ok_or(AccessError::InvalidKey)?;
            return self.check(pd, rkey, mr.addr, 0, need).map(|_| ());
        }
        self.check(pd, rkey, va, len as usize, need).map(|_| ())
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
