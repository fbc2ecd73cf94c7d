//! The protection table: memory regions and windows, and every rule a memory access on
//! behalf of a work request obeys (key, PD, access flags, bounds, on-demand pages, window
//! binding and invalidation, fast registration, atomics, FLUSH). One implementation, generic
//! over the guest-memory backend ([`GuestRam`]): the device uses it over its DMA mappings, the
//! engine's test double (`testkit::mock_env`) over plain memory, so host tests run
//! against the rules the device has.

use std::sync::atomic::{fence, Ordering};

use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

use super::region::*;
use super::ring::load_page_list;
use crate::dma::GuestRam;
use crate::roce::id_map::IdMap;
use crate::roce::{AccessError, AtomicOp, FastReg, FlushSpec, MwBind, RemoteTarget};

/// Regions and windows by key index ([`Key::index`]): an index names one object whatever the
/// variant part of its key; lookups compare the whole key ([`MemTable::mr`]).
#[derive(Debug, Default)]
pub struct MemTable {
    pub mrs: IdMap<u32, Mr>,
    pub mws: IdMap<u32, Mw>,
}

/// What an invalidation (LOCAL_INV, SEND with invalidate) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InvalidationTarget {
    /// A bound type 2 window (its index).
    Window(u32),
    /// A valid fast-registration region (its index).
    Region(u32),
}

impl MemTable {
    /// The MR `key` names: it exists, the whole key matches (variant included) and, for a
    /// fast-registration region, pages are bound. Every access through an MR key starts here.
    pub fn mr(&self, key: Key) -> Result<&Mr, AccessError> {
        self.mrs
            .get(&key.index())
            .filter(|mr| mr.key == key && mr.fast_reg.is_none_or(|f| f.valid))
            .ok_or(AccessError::InvalidKey)
    }

    /// The MR `key` names, in `pd`, granting `need`.
    pub fn mr_for(&self, pd: u32, key: Key, need: u32) -> Result<&Mr, AccessError> {
        let mr = self.mr(key)?;
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if mr.access & need != need {
            return Err(AccessError::AccessDenied);
        }
        Ok(mr)
    }

    /// The MR a remote request reaches at `at` for `len` bytes: the MR itself, or the MR a
    /// memory window is bound to (window in `at.pd`, bound, type 2 bound to `at.qpn`,
    /// granting `need`, containing the range).
    pub fn remote_mr(&self, at: RemoteTarget, need: u32, len: u64) -> Result<&Mr, AccessError> {
        let RemoteTarget { pd, qpn, key, va } = at;
        if !key.is_window() {
            return self.mr_for(pd, key, need);
        }
        let mw = self.mws.get(&key.index()).ok_or(AccessError::InvalidKey)?;
        if mw.rkey != key {
            return Err(AccessError::InvalidKey);
        }
        if mw.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        let b = mw.binding.ok_or(AccessError::InvalidKey)?;
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(AccessError::InvalidKey);
        }
        if b.access & need != need {
            return Err(AccessError::AccessDenied);
        }
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if va < b.addr || end > b.addr + b.length {
            return Err(AccessError::OutOfBounds);
        }
        // The MR outlives its bindings (DEREG_MR and the invalidation of a fast-registration
        // region unbind); its access was checked at bind.
        self.mr(b.mr)
    }

    /// A local read through `lkey` (a gather of the requester, a read of the responder).
    pub fn read_local<R: GuestRam + ?Sized>(
        &self,
        ram: &R,
        pd: u32,
        lkey: Key,
        va: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let mr = self.mr_for(pd, lkey, 0)?;
        read_through(ram, mr, va, buf)
    }

    /// A local write through `lkey` (needs local write access).
    pub fn write_local<R: GuestRam + ?Sized>(
        &self,
        ram: &R,
        pd: u32,
        lkey: Key,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let mr = self.mr_for(pd, lkey, ACCESS_LOCAL_WRITE)?;
        write_through(ram, mr, va, data)
    }

    /// An RDMA READ's source, through an MR or window rkey.
    pub fn read_remote<R: GuestRam + ?Sized>(
        &self,
        ram: &R,
        at: RemoteTarget,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let mr = self.remote_mr(at, ACCESS_REMOTE_READ, buf.len() as u64)?;
        read_through(ram, mr, at.va, buf)
    }

    /// An RDMA WRITE's target, through an MR or window rkey.
    pub fn write_remote<R: GuestRam + ?Sized>(
        &self,
        ram: &R,
        at: RemoteTarget,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let mr = self.remote_mr(at, ACCESS_REMOTE_WRITE, data.len() as u64)?;
        write_through(ram, mr, at.va, data)
    }

    /// Whether an RDMA READ of `[va, va+len)` through `rkey` would succeed, touching nothing.
    pub fn check_remote_read(&self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        let va = at.va;
        let mr = self.remote_mr(at, ACCESS_REMOTE_READ, len)?;
        if !mr.contains(va, len) {
            return Err(AccessError::OutOfBounds);
        }
        // Pinned regions: the bounds suffice (every page of the list was checked at
        // registration); on-demand regions: every page must be present.
        mr.check_present(va, len)
    }

    /// Whether an RDMA WRITE of `[va, va+len)` through `rkey` may go ahead (key, PD, access,
    /// bounds; pages of an on-demand region are checked by the write itself).
    pub fn check_remote_write(&self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        let va = at.va;
        let mr = self.remote_mr(at, ACCESS_REMOTE_WRITE, len)?;
        if mr.contains(va, len) {
            Ok(())
        } else {
            Err(AccessError::OutOfBounds)
        }
    }

    /// An 8-byte atomic (or ATOMIC WRITE) at `va` through `rkey`; returns the old value.
    pub fn atomic_remote<R: GuestRam + ?Sized>(
        &self,
        ram: &R,
        at: RemoteTarget,
        op: AtomicOp,
    ) -> Result<u64, AccessError> {
        let va = at.va;
        if va % (ATOMIC_SIZE as u64) != 0 {
            return Err(AccessError::Misaligned);
        }
        let need = match op {
            AtomicOp::Write { .. } => ACCESS_REMOTE_WRITE,
            AtomicOp::CompareSwap { .. } | AtomicOp::FetchAdd { .. } => ACCESS_REMOTE_ATOMIC,
        };
        let mr = self.remote_mr(at, need, ATOMIC_SIZE as u64)?;
        let chunks = mr.chunks(va, ATOMIC_SIZE as u64, true)?;
        let [(addr, _)] = chunks[..] else {
            return Err(AccessError::OutOfBounds);
        };
        let mut update = |old: u64| match op {
            AtomicOp::CompareSwap { compare, swap } => (old == compare).then_some(swap),
            AtomicOp::FetchAdd { add } => Some(old.wrapping_add(add)),
            // The value's bytes in memory order (the requester sent them as they were).
            AtomicOp::Write { value } => Some(u64::from_le(value)),
        };
        ram.fetch_update_u64(addr, &mut update)
            .map_err(|_| AccessError::OutOfBounds)
    }

    /// A FLUSH of `[va, va+length)` (or of the whole region) through `rkey`.
    pub fn flush_remote(&self, at: RemoteTarget, flush: FlushSpec) -> Result<(), AccessError> {
        let RemoteTarget {
            pd, key: rkey, va, ..
        } = at;
        let (len, whole_mr) = (flush.length, flush.level == FLUSH_LEVEL_MR);
        if rkey.is_window() {
            // Windows grant no FLUSH access.
            return Err(AccessError::AccessDenied);
        }
        let mr = self.mr_for(pd, rkey, flush.required_access())?;
        // Only the range matters (the bytes were placed already): pages of an on-demand
        // region need not be present.
        if !whole_mr && !mr.contains(va, u64::from(len)) {
            return Err(AccessError::OutOfBounds);
        }
        // Every write went straight into guest RAM (a shared mapping): a full fence makes
        // them visible to every CPU before the response leaves. rox has no persistent
        // memory, so no region grants FLUSH_PERSISTENT.
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Binds a memory window (BIND_MW work request of QP `qpn` in `pd`).
    pub fn bind_mw(&mut self, pd: u32, qpn: Qpn, bind: &MwBind) -> Result<(), AccessError> {
        let index = bind.new_rkey.index();
        let mw = self.mws.get(&index).ok_or(AccessError::InvalidKey)?;
        if !bind.new_rkey.is_window() {
            return Err(AccessError::InvalidKey);
        }
        if mw.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if bind.access & !ACCESS_MW_ALLOWED != 0 {
            return Err(AccessError::AccessDenied);
        }
        let binding = if bind.length == 0 && mw.mw_type == MW_TYPE_1 {
            // A zero-length bind of a type 1 window unbinds it.
            None
        } else {
            // Type 2 windows are bound once, then invalidated before the next bind, and never
            // to an empty range (only a type 1 bind of length 0 means "unbind").
            if mw.mw_type == MW_TYPE_2 && (mw.binding.is_some() || bind.length == 0) {
                return Err(AccessError::AccessDenied);
            }
            let mr = self.mr_for(pd, bind.lkey, ACCESS_MW_BIND)?;
            let remote_writes = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
            if bind.access & remote_writes != 0 && mr.access & ACCESS_LOCAL_WRITE == 0 {
                return Err(AccessError::AccessDenied);
            }
            let end = bind
                .addr
                .checked_add(bind.length)
                .ok_or(AccessError::OutOfBounds)?;
            if mr.physical || bind.addr < mr.iova || end > mr.iova + mr.length {
                return Err(AccessError::OutOfBounds);
            }
            Some(MwBinding {
                mr: bind.lkey,
                addr: bind.addr,
                length: bind.length,
                access: bind.access & !ACCESS_LOCAL_WRITE,
                qpn: (mw.mw_type == MW_TYPE_2).then_some(qpn),
            })
        };
        let mw = self.mws.get_mut(&index).expect("looked up above");
        mw.rkey = bind.new_rkey;
        mw.binding = binding;
        Ok(())
    }

    /// What `rkey` names for an invalidation by QP `qpn` of `pd` (LOCAL_INV, or a peer's SEND
    /// with invalidate when `remote`): a bound type 2 window of `pd` (remotely: bound to
    /// `qpn`), or a valid fast-registration region of `pd`; the key must match exactly.
    fn invalidation_target(
        &self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<InvalidationTarget, AccessError> {
        if !rkey.is_window() {
            let mr = self.mr(rkey)?;
            if mr.fast_reg.is_none() {
                // Ordinary regions are only ever deregistered.
                return Err(AccessError::InvalidKey);
            }
            if mr.pd != pd {
                return Err(AccessError::PdMismatch);
            }
            return Ok(InvalidationTarget::Region(rkey.index()));
        }
        let index = rkey.index();
        let mw = self.mws.get(&index).ok_or(AccessError::InvalidKey)?;
        if mw.rkey != rkey || mw.mw_type != MW_TYPE_2 {
            return Err(AccessError::InvalidKey);
        }
        if mw.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        let Some(b) = mw.binding else {
            return Err(AccessError::InvalidKey);
        };
        if remote && b.qpn != Some(qpn) {
            return Err(AccessError::InvalidKey);
        }
        Ok(InvalidationTarget::Window(index))
    }

    /// Whether [`MemTable::invalidate`] of `rkey` would succeed, changing nothing.
    pub fn check_invalidate(
        &self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        self.invalidation_target(pd, qpn, rkey, remote).map(|_| ())
    }

    /// Invalidates `rkey`: a bound type 2 window or a valid fast-registration region of `pd`
    /// (remotely: a window bound to `qpn`); a failure changes nothing.
    pub fn invalidate(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        match self.invalidation_target(pd, qpn, rkey, remote)? {
            InvalidationTarget::Window(index) => {
                let mw = self.mws.get_mut(&index).expect("looked up above");
                mw.binding = None;
            }
            InvalidationTarget::Region(index) => {
                let mr = self.mrs.get_mut(&index).expect("looked up above");
                mr.fast_reg = mr.fast_reg.map(|f| FastRegState { valid: false, ..f });
                // The pages go back to the consumer: nothing may reach them any more.
                mr.pages = Vec::new();
                mr.length = 0;
                // Only a registration with MW_BIND can have windows bound into it (kernel
                // ULPs' never do: no walk over the windows per I/O).
                if mr.access & ACCESS_MW_BIND != 0 {
                    self.unbind_windows_into(index);
                }
            }
        }
        Ok(())
    }

    /// Unbinds every memory window bound to the MR of index `index` (it was deregistered or,
    /// a fast-registration region, invalidated): their rkeys then reach nothing.
    pub fn unbind_windows_into(&mut self, index: u32) {
        for mw in self.mws.values_mut() {
            if mw.binding.is_some_and(|b| b.mr.index() == index) {
                mw.binding = None;
            }
        }
    }

    /// Executes a `WR_REG_MR` of QP `qpn` in `pd`: binds the page list to the invalid
    /// fast-registration region whose index `reg.key` names. Every rule is checked (and the
    /// page list read and checked) before anything changes.
    pub fn fast_register<R: GuestRam + ?Sized>(
        &mut self,
        ram: &R,
        pd: u32,
        reg: &FastReg,
    ) -> Result<(), AccessError> {
        if reg.key.is_window() {
            return Err(AccessError::InvalidKey);
        }
        let index = reg.key.index();
        let mr = self.mrs.get(&index).ok_or(AccessError::InvalidKey)?;
        let Some(state) = mr.fast_reg else {
            return Err(AccessError::InvalidKey);
        };
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if state.valid {
            // IB: a fast registration needs the region invalid (invalidate first).
            return Err(AccessError::AccessDenied);
        }
        if !region_access_valid(reg.access) {
            return Err(AccessError::AccessDenied);
        }
        if !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&reg.page_shift)
            || reg.npages == 0
            || reg.npages > state.capacity
        {
            return Err(AccessError::OutOfBounds);
        }
        // The iova's own low bits say where it sits in the first page (its high bits are the
        // consumer's to choose).
        let offset = reg.iova & ((1u64 << reg.page_shift) - 1);
        if !region_fits(reg.iova, reg.length)
            || !pages_cover(offset, reg.length, reg.npages, reg.page_shift)
        {
            return Err(AccessError::OutOfBounds);
        }
        // The same reading and checks (alignment, mapped guest RAM) as every page list.
        let list = PageList {
            addr: reg.page_list,
            npages: reg.npages,
            page_shift: reg.page_shift,
            level: PBL_LEVEL_1,
            reserved: 0,
        };
        let pages = load_page_list(ram, &list).map_err(|_| AccessError::OutOfBounds)?;
        let mr = self.mrs.get_mut(&index).expect("looked up above");
        mr.key = reg.key;
        mr.access = reg.access;
        mr.iova = reg.iova;
        mr.length = reg.length;
        mr.offset = offset;
        mr.pages = pages;
        mr.page_shift = u32::from(reg.page_shift);
        mr.fast_reg = Some(FastRegState {
            valid: true,
            ..state
        });
        Ok(())
    }
}

/// Copies `[va, va+len)` of `mr` out of guest memory (after the bounds and page checks).
fn read_through<R: GuestRam + ?Sized>(
    ram: &R,
    mr: &Mr,
    va: u64,
    buf: &mut [u8],
) -> Result<(), AccessError> {
    let mut done = 0usize;
    for &(addr, n) in mr.chunks(va, buf.len() as u64, false)?.iter() {
        let n = n as usize;
        ram.read(addr, &mut buf[done..done + n])
            .map_err(|_| AccessError::OutOfBounds)?;
        done += n;
    }
    Ok(())
}

/// Copies `data` into `[va, va+len)` of `mr`: nothing is written unless all of it can be.
fn write_through<R: GuestRam + ?Sized>(
    ram: &R,
    mr: &Mr,
    va: u64,
    data: &[u8],
) -> Result<(), AccessError> {
    let chunks = mr.chunks(va, data.len() as u64, true)?;
    // Check every chunk first so a failing write changes nothing. One chunk (nearly every
    // write) is one `ram.write`, which stores nothing it refuses ([`GuestRam::write`]): a
    // check before it looked the guest region up a second time per packet.
    if chunks.len() > 1 {
        for &(addr, n) in chunks.iter() {
            ram.check_access(addr, n, true)
                .map_err(|_| AccessError::OutOfBounds)?;
        }
    }
    let mut done = 0usize;
    for &(addr, n) in chunks.iter() {
        let n = n as usize;
        ram.write(addr, &data[done..done + n])
            .map_err(|_| AccessError::OutOfBounds)?;
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::SliceRam;

    const BASE: u64 = 0x1000;
    const PD: u32 = 1;
    const QPN: Qpn = Qpn::new(5).unwrap();
    const ALL: u32 = ACCESS_LOCAL_WRITE
        | ACCESS_REMOTE_WRITE
        | ACCESS_REMOTE_READ
        | ACCESS_REMOTE_ATOMIC
        | ACCESS_MW_BIND
        | ACCESS_FLUSH_GLOBAL;

    fn at(pd: u32, qpn: Qpn, key: Key, va: u64) -> RemoteTarget {
        RemoteTarget { pd, qpn, key, va }
    }

    /// A table with one region `[BASE, BASE+0x100)` on one page at BASE (index 1) and one type 2 window
    /// (index 2) of the same PD, over 0x200 bytes of memory.
    fn table(access: u32) -> (MemTable, Vec<u8>, Key) {
        let (t, key) = table_at(BASE, 0x100, &[BASE], access);
        (t, vec![0; 0x200], key)
    }

    /// A table with one region `[iova, iova+length)` on the 4 KiB `pages` (index 1) and one
    /// unbound type 2 window (index 2) of the same PD; returns the region's key.
    fn table_at(iova: u64, length: u64, pages: &[u64], access: u32) -> (MemTable, Key) {
        let key = Key::region(1, 0);
        let mut t = MemTable::default();
        t.mrs.insert(
            1,
            Mr {
                key,
                pd: PD,
                access,
                iova,
                length,
                offset: 0,
                pages: pages.to_vec(),
                page_shift: 12,
                physical: false,
                odp: false,
                fast_reg: None,
            },
        );
        let rkey = Key::window(2, 0);
        t.mws.insert(
            2,
            Mw {
                pd: PD,
                mw_type: MW_TYPE_2,
                rkey,
                binding: None,
            },
        );
        (t, key)
    }

    #[test]
    fn key_pd_access_and_bounds_are_checked_in_that_order() {
        let (t, mut mem, key) = table(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ);
        let ram = SliceRam::new(BASE, &mut mem);
        let mut buf = [0u8; 8];
        let read = |pd, key, va, buf: &mut [u8]| t.read_remote(&ram, at(pd, QPN, key, va), buf);
        assert_eq!(
            read(PD, key.with_variant(1), BASE, &mut buf),
            Err(AccessError::InvalidKey)
        );
        assert_eq!(
            read(PD + 1, key, BASE, &mut buf),
            Err(AccessError::PdMismatch)
        );
        assert_eq!(
            read(PD, key, BASE + 0xf9, &mut buf),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            read(PD, key, u64::MAX - 2, &mut buf),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(read(PD, key, BASE + 0xf8, &mut buf), Ok(()));
        assert_eq!(
            t.write_remote(&ram, at(PD, QPN, key, BASE), &buf),
            Err(AccessError::AccessDenied)
        );
    }

    #[test]
    fn a_write_lands_and_a_read_returns_it() {
        let (t, mut mem, key) = table(ALL);
        let ram = SliceRam::new(BASE, &mut mem);
        t.write_local(&ram, PD, key, BASE + 0x10, b"rox").unwrap();
        let mut back = [0u8; 3];
        t.read_remote(&ram, at(PD, QPN, key, BASE + 0x10), &mut back)
            .unwrap();
        assert_eq!(&back, b"rox");
        assert_eq!(&mem[0x10..0x13], b"rox");
    }

    /// A write through a region whose second page lies outside guest memory: one chunk
    /// there, or one inside and one outside, is refused whole and stores nothing (the
    /// single-chunk write relies on the memory's own refusal, the split one on the check of
    /// every chunk first).
    #[test]
    fn a_write_refused_anywhere_stores_nothing() {
        const IOVA: u64 = 0x10_0000;
        let (t, key) = table_at(IOVA, 0x2000, &[BASE, 0x4000_0000], ALL);
        let mut mem = vec![0u8; 0x1000];
        let ram = SliceRam::new(BASE, &mut mem);
        let write = |va, data: &[u8]| t.write_remote(&ram, at(PD, QPN, key, va), data);
        assert_eq!(write(IOVA + 0x1000, &[7; 8]), Err(AccessError::OutOfBounds));
        assert_eq!(write(IOVA + 0xff0, &[7; 32]), Err(AccessError::OutOfBounds));
        let mut seen = [0u8; 16];
        ram.read(BASE + 0xff0, &mut seen).unwrap();
        assert_eq!(
            seen, [0; 16],
            "the split write's first chunk stored nothing"
        );
        assert_eq!(write(IOVA + 0xff0, &[9; 16]), Ok(()));
        assert!(mem[..0xff0].iter().all(|&b| b == 0));
        assert_eq!(&mem[0xff0..], &[9; 16], "only the accepted write landed");
    }

    #[test]
    fn atomics_need_alignment_and_their_access_and_return_the_old_value() {
        let (t, mut mem, key) = table(ALL & !ACCESS_REMOTE_ATOMIC);
        mem[8..16].copy_from_slice(&5u64.to_le_bytes());
        let ram = SliceRam::new(BASE, &mut mem);
        let add = AtomicOp::FetchAdd { add: 2 };
        assert_eq!(
            t.atomic_remote(&ram, at(PD, QPN, key, BASE + 4), add),
            Err(AccessError::Misaligned)
        );
        assert_eq!(
            t.atomic_remote(&ram, at(PD, QPN, key, BASE + 8), add),
            Err(AccessError::AccessDenied)
        );
        // ATOMIC WRITE needs remote write, not remote atomic.
        let write = AtomicOp::Write {
            value: 9u64.to_le(),
        };
        assert_eq!(
            t.atomic_remote(&ram, at(PD, QPN, key, BASE + 8), write),
            Ok(5)
        );
        let (t, mut mem, key) = table(ALL);
        mem[8..16].copy_from_slice(&5u64.to_le_bytes());
        let ram = SliceRam::new(BASE, &mut mem);
        let cas = |compare| AtomicOp::CompareSwap { compare, swap: 7 };
        assert_eq!(
            t.atomic_remote(&ram, at(PD, QPN, key, BASE + 8), cas(4)),
            Ok(5)
        );
        assert_eq!(
            t.atomic_remote(&ram, at(PD, QPN, key, BASE + 8), cas(5)),
            Ok(5)
        );
        assert_eq!(
            t.atomic_remote(&ram, at(PD, QPN, key, BASE + 8), add),
            Ok(7)
        );
        assert_eq!(mem[8..16], 9u64.to_le_bytes());
    }

    #[test]
    fn flush_needs_the_placement_types_access_and_windows_grant_none() {
        let (t, _mem, key) = table(ALL);
        let flush = |placement_type, level, length| FlushSpec {
            length,
            placement_type,
            level,
        };
        let global = flush(FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE, 16);
        assert_eq!(t.flush_remote(at(PD, QPN, key, BASE), global), Ok(()));
        assert_eq!(
            t.flush_remote(at(PD, QPN, key, BASE + 0xf8), global),
            Err(AccessError::OutOfBounds)
        );
        // The whole region: the range does not matter.
        let whole = flush(FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_MR, 0);
        assert_eq!(t.flush_remote(at(PD, QPN, key, 0), whole), Ok(()));
        let persistent = flush(FLUSH_TYPE_PERSISTENT, FLUSH_LEVEL_RANGE, 16);
        assert_eq!(
            t.flush_remote(at(PD, QPN, key, BASE), persistent),
            Err(AccessError::AccessDenied)
        );
        assert_eq!(
            t.flush_remote(at(PD, QPN, Key::window(2, 0), BASE), global),
            Err(AccessError::AccessDenied)
        );
    }

    #[test]
    fn a_type_2_window_reaches_its_range_for_its_qp_until_invalidated() {
        let (mut t, mut mem, key) = table(ALL);
        let rkey = Key::window(2, 1);
        let bind = MwBind {
            addr: BASE + 0x40,
            length: 0x20,
            new_rkey: rkey,
            lkey: key,
            access: ACCESS_REMOTE_READ,
            ..Default::default()
        };
        t.bind_mw(PD, QPN, &bind).unwrap();
        // Bound once: a second bind needs an invalidation first.
        assert_eq!(t.bind_mw(PD, QPN, &bind), Err(AccessError::AccessDenied));
        let ram = SliceRam::new(BASE, &mut mem);
        let mut buf = [0u8; 0x20];
        assert_eq!(
            t.read_remote(&ram, at(PD, QPN, rkey, BASE + 0x40), &mut buf),
            Ok(())
        );
        let other = Qpn::new(6).unwrap();
        assert_eq!(
            t.read_remote(&ram, at(PD, other, rkey, BASE + 0x40), &mut buf),
            Err(AccessError::InvalidKey)
        );
        assert_eq!(
            t.read_remote(&ram, at(PD, QPN, rkey, BASE + 0x41), &mut buf),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.write_remote(&ram, at(PD, QPN, rkey, BASE + 0x40), &buf),
            Err(AccessError::AccessDenied)
        );
        // Remotely, only the QP it is bound to may invalidate it.
        assert_eq!(
            t.check_invalidate(PD, other, rkey, true),
            Err(AccessError::InvalidKey)
        );
        t.invalidate(PD, QPN, rkey, true).unwrap();
        assert_eq!(
            t.read_remote(&ram, at(PD, QPN, rkey, BASE + 0x40), &mut buf),
            Err(AccessError::InvalidKey)
        );
    }

    #[test]
    fn deregistering_a_region_unbinds_the_windows_into_it() {
        let (mut t, _mem, key) = table(ALL);
        let rkey = Key::window(2, 1);
        let bind = MwBind {
            addr: BASE,
            length: 8,
            new_rkey: rkey,
            lkey: key,
            access: ACCESS_REMOTE_READ,
            ..Default::default()
        };
        t.bind_mw(PD, QPN, &bind).unwrap();
        t.unbind_windows_into(key.index());
        assert!(t.mws[&2].binding.is_none());
    }

    #[test]
    fn a_fast_registration_binds_checked_pages_and_an_invalidation_unbinds_them() {
        let (mut t, mut mem, _) = table(ALL);
        let key = Key::region(3, 0);
        t.mrs.insert(
            3,
            Mr {
                key,
                pd: PD,
                access: 0,
                iova: 0,
                length: 0,
                offset: 0,
                pages: Vec::new(),
                page_shift: 12,
                physical: false,
                odp: false,
                fast_reg: Some(FastRegState {
                    capacity: 1,
                    valid: false,
                }),
            },
        );
        // The page list (one 4 KiB page at guest address 0) lives at BASE.
        let page_list = BASE;
        mem[..8].copy_from_slice(&0u64.to_le_bytes());
        let ram = SliceRam::new(0, &mut mem);
        let reg = FastReg {
            iova: 0x7000,
            length: 0x80,
            page_list,
            key: key.with_variant(4),
            access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
            npages: 1,
            page_shift: 12,
            ..Default::default()
        };
        // Too many pages for its capacity.
        let two = FastReg { npages: 2, ..reg };
        assert_eq!(
            t.fast_register(&ram, PD, &two),
            Err(AccessError::OutOfBounds)
        );
        // The page (guest address 0..4096) is not all memory here: 0x200 bytes.
        assert_eq!(
            t.fast_register(&ram, PD, &reg),
            Err(AccessError::OutOfBounds)
        );
        let mut big = vec![0u8; 0x2000];
        big[0x1000..0x1008].copy_from_slice(&0u64.to_le_bytes());
        let ram = SliceRam::new(0, &mut big);
        let reg = FastReg {
            page_list: 0x1000,
            ..reg
        };
        t.fast_register(&ram, PD, &reg).unwrap();
        assert_eq!(
            t.fast_register(&ram, PD, &reg),
            Err(AccessError::AccessDenied)
        );
        t.write_local(&ram, PD, reg.key, 0x7010, b"x").unwrap();
        t.invalidate(PD, QPN, reg.key, false).unwrap();
        assert_eq!(
            t.write_local(&ram, PD, reg.key, 0x7010, b"x"),
            Err(AccessError::InvalidKey)
        );
        assert_eq!(big[0x10], b'x');
    }
}
