//! The device's protection table over a test's plain memory: the engine's test doubles
//! ([`super::mock_env::MockEnv`] and the engine's unit-test environment) reach memory only
//! through it, so every rule they apply (key, PD, access, bounds, on-demand pages, window
//! binding and invalidation, fast registration) is the device's [`MemTable`]. What a double
//! does with the answer of an access (count it, take the driver's part for a page fault) is
//! its own.

use crate::device::mem::MemTable;
use crate::device::region::{FastRegState, Mr, Mw};
use crate::dma::SliceRam;
use crate::roce::{AccessError, Key};
use rox_uapi::verbs::MW_TYPE_2;

/// A test double whose memory the device's protection table guards.
pub trait ProtectedMemory {
    /// The table and the memory it guards.
    fn protected(&mut self) -> (&mut MemTable, SliceRam<'_>);
    /// What the double does with the result of an access (default: nothing).
    fn answer<T>(&mut self, r: Result<T, AccessError>) -> Result<T, AccessError> {
        r
    }
    /// `len` bytes were read for a remote peer (default: not counted).
    fn remote_read(&mut self, _len: u64) {}
}

/// The memory operations of [`crate::roce::DeviceEnv`] for a [`ProtectedMemory`]: each one
/// call of the device's table (written once, for every double). `through_ram` operations
/// reach the memory, `checked` ones answer from the table alone; both pass their result
/// through [`ProtectedMemory::answer`]; `table_only` ones return the table's answer as it is.
macro_rules! protected_memory_ops {
    () => {
        $crate::testkit::protected::protected_memory_ops!(through_ram
            read_local(pd: u32, lkey: $crate::roce::Key, addr: u64, buf: &mut [u8]) -> ();
            write_local(pd: u32, lkey: $crate::roce::Key, addr: u64, data: &[u8]) -> ();
            write_remote(at: $crate::roce::RemoteTarget, data: &[u8]) -> ();
            atomic_remote(at: $crate::roce::RemoteTarget, op: $crate::roce::AtomicOp) -> u64;
        );
        $crate::testkit::protected::protected_memory_ops!(table_only
            check_remote_write(at: $crate::roce::RemoteTarget, len: u64);
            flush_remote(at: $crate::roce::RemoteTarget, flush: $crate::roce::FlushSpec);
            bind_mw(pd: u32, qpn: $crate::roce::Qpn, bind: &$crate::roce::MwBind);
            invalidate(pd: u32, qpn: $crate::roce::Qpn, rkey: $crate::roce::Key, remote: bool);
            check_invalidate(pd: u32, qpn: $crate::roce::Qpn, rkey: $crate::roce::Key, remote: bool);
        );
        fn read_remote(
            &mut self,
            at: $crate::roce::RemoteTarget,
            buf: &mut [u8],
        ) -> Result<(), $crate::roce::AccessError> {
            use $crate::testkit::protected::ProtectedMemory as P;
            let (table, ram) = P::protected(self);
            let r = table.read_remote(&ram, at, buf);
            if r.is_ok() {
                P::remote_read(self, buf.len() as u64);
            }
            P::answer(self, r)
        }
        fn check_remote_read(
            &mut self,
            at: $crate::roce::RemoteTarget,
            len: u64,
        ) -> Result<(), $crate::roce::AccessError> {
            use $crate::testkit::protected::ProtectedMemory as P;
            let r = P::protected(self).0.check_remote_read(at, len);
            P::answer(self, r)
        }
        fn fast_register(
            &mut self,
            pd: u32,
            _qpn: $crate::roce::Qpn,
            reg: &$crate::roce::FastReg,
        ) -> Result<(), $crate::roce::AccessError> {
            use $crate::testkit::protected::ProtectedMemory as P;
            let (table, ram) = P::protected(self);
            table.fast_register(&ram, pd, reg)
        }
    };
    (through_ram $($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        fn $name(&mut self, $($arg: $ty),*) -> Result<$ret, $crate::roce::AccessError> {
            use $crate::testkit::protected::ProtectedMemory as P;
            let (table, ram) = P::protected(self);
            let r = table.$name(&ram, $($arg),*);
            P::answer(self, r)
        }
    )*};
    (table_only $($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $name(&mut self, $($arg: $ty),*) -> Result<(), $crate::roce::AccessError> {
            use $crate::testkit::protected::ProtectedMemory as P;
            P::protected(self).0.$name($($arg),*)
        }
    )*};
}
pub(crate) use protected_memory_ops;

/// Page size of the regions the doubles register with a page list.
pub const PAGE_SHIFT: u32 = 12;

/// A region `[addr, addr+len)` of `pd` with `access`: `physical` (one range, no pages), or
/// pages of 4 KiB at their own addresses (`odp`: on-demand, none present yet).
pub fn region(key: Key, pd: u32, addr: u64, len: u64, access: u32, kind: RegionKind) -> Mr {
    let size = 1u64 << PAGE_SHIFT;
    let offset = addr & (size - 1);
    let first = addr - offset;
    let npages = (offset + len).div_ceil(size).max(1);
    let pages = match kind {
        RegionKind::Physical => Vec::new(),
        RegionKind::Paged | RegionKind::FastReg => (0..npages).map(|i| first + i * size).collect(),
        RegionKind::OnDemand => vec![0; npages as usize],
    };
    Mr {
        key,
        pd,
        access,
        iova: addr,
        length: len,
        offset,
        pages,
        page_shift: PAGE_SHIFT,
        physical: kind == RegionKind::Physical,
        odp: kind == RegionKind::OnDemand,
        fast_reg: (kind == RegionKind::FastReg).then_some(FastRegState {
            capacity: npages as u32,
            valid: true,
        }),
    }
}

/// How a double's region reaches its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// A DMA region: one physical range.
    Physical,
    /// Pinned pages (windows can be bound into it with `ACCESS_MW_BIND`).
    Paged,
    /// On-demand pages: every page faults until the driver's answer maps it.
    OnDemand,
    /// A fast-registration region, valid (as after its `WR_REG_MR`).
    FastReg,
}

/// A type 2 memory window of `pd`, unbound, named by `rkey`.
pub fn window(pd: u32, rkey: Key) -> Mw {
    Mw {
        pd,
        mw_type: MW_TYPE_2,
        rkey,
        binding: None,
    }
}
