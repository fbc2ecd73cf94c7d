// SPDX-License-Identifier: GPL-2.0
//! Memory regions and the DMA page lists that describe pinned user memory to the device
//! (MR buffers and the rings of CQs, QPs and SRQs).

use crate::{
    dev::RoxDev,
    hw::{
        regs,
        uapi::{admin, ids::Key, queue, verbs},
    },
    ib::{
        dma::DmaArray,
        umem::Umem,
        umem_odp::{OdpLocked, UmemOdp},
        IbDev, MrAdvice, OdpCaps, OdpTransportCaps, RegisteredMr, Udata, UserRange,
    },
    verbs::RoxVerbs,
};
use core::{
    ops::Deref,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{
    device::{Bound, Device},
    new_condvar, new_mutex,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::{Arc, CondVar, Mutex},
};

/// A page list in DMA memory (`uapi::queue::PageList`), kept alive as long as the device may
/// read it.
pub(crate) struct PageList {
    /// Level 1: the data page addresses. Level 2: the addresses of `leaves`.
    _top: DmaArray<u64>,
    /// Level 2 only: pages of data page addresses.
    _leaves: KVec<DmaArray<u64>>,
    desc: queue::PageList,
}

impl PageList {
    /// Describes `umem` in pages of `1 << page_shift` bytes.
    pub(crate) fn new(dev: &Device<Bound>, umem: &Umem, page_shift: u8) -> Result<Self> {
        let page_size = 1u64 << page_shift;
        let npages = umem.num_blocks(page_size);
        if npages == 0 || npages > admin::DEV_MAX_PBL_PAGES as usize {
            return Err(EINVAL);
        }
        let per_page = queue::PBL_ENTRIES_PER_PAGE as usize;
        let (top, leaves, level) = if npages <= per_page {
            let top = DmaArray::<u64>::zeroed(dev, npages)?;
            let mut index = 0;
            umem.for_each_block(page_size, |addr| {
                top.write(index, addr)?;
                index += 1;
                Ok(())
            })?;
            (top, KVec::new(), queue::PBL_LEVEL_1)
        } else {
            let nleaves = npages.div_ceil(per_page);
            let top = DmaArray::<u64>::zeroed(dev, nleaves)?;
            let mut leaves = KVec::with_capacity(nleaves, GFP_KERNEL)?;
            for leaf in 0..nleaves {
                let page = DmaArray::<u64>::zeroed(dev, per_page)?;
                top.write(leaf, page.dma_address())?;
                leaves.push(page, GFP_KERNEL)?;
            }
            let mut index = 0;
            umem.for_each_block(page_size, |addr| {
                leaves
                    .get(index / per_page)
                    .ok_or(EINVAL)?
                    .write(index % per_page, addr)?;
                index += 1;
                Ok(())
            })?;
            (top, leaves, queue::PBL_LEVEL_2)
        };
        let desc = queue::PageList {
            addr: top.dma_address(),
            npages: npages as u32,
            page_shift,
            level,
            reserved: 0,
        };
        Ok(Self {
            _top: top,
            _leaves: leaves,
            desc,
        })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.desc
    }
}

/// A user ring: `bytes` of page-aligned user memory at `addr`, pinned, with its page list.
pub(crate) struct UserRing {
    _umem: Umem,
    pbl: PageList,
}

impl UserRing {
    pub(crate) fn new(
        dev: &RoxDev<'_>,
        ib: IbDev<'_>,
        addr: u64,
        bytes: usize,
        access: u32,
    ) -> Result<Self> {
        if addr % regs::ROX_PAGE_SIZE as u64 != 0 {
            return Err(EINVAL);
        }
        let umem = Umem::get(ib, addr, bytes, access)?;
        let pbl = PageList::new(dev.pdev.as_ref(), &umem, regs::ROX_PAGE_SHIFT as u8)?;
        Ok(Self { _umem: umem, pbl })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.pbl.desc()
    }
}

/// A registered memory region.
pub(crate) struct Mr {
    lkey: Key,
    /// User MRs: the pinned pages and their page list, which the device may read any time.
    _mem: Option<(Umem, PageList)>,
    /// On-demand paging regions (not pinned).
    odp: Option<Arc<OdpMr>>,
    /// Fast-registration MRs: the page list `IB_WR_REG_MR` hands the device.
    fast_reg: Option<FastRegPages>,
}

/// The page list of a fast-registration MR (`admin::MR_FLAG_FAST_REG`): `ib_map_mr_sg` fills
/// it (through `ib_sg_to_pages`), an `IB_WR_REG_MR` names it, and the device reads it when it
/// executes that WQE. Its capacity is the MR's (`max_num_sg` of `ib_alloc_mr`).
pub(crate) struct FastRegPages {
    list: DmaArray<u64>,
    /// Pages of the current mapping. Kernel consumers map an MR from one thread at a time and
    /// only post its REG_MR after mapping it (the verbs' rules); atomic so that a `&Mr` will do.
    count: AtomicU32,
}

/// What an `IB_WR_REG_MR` WQE needs of a fast-registration MR.
pub(crate) struct FastRegList {
    pub(crate) dma_address: u64,
    pub(crate) npages: u32,
    pub(crate) capacity: u32,
}

impl Mr {
    /// The page list of a fast-registration MR; None for other MRs.
    pub(crate) fn fast_reg_list(&self) -> Option<FastRegList> {
        self.fast_reg.as_ref().map(|f| FastRegList {
            dma_address: f.list.dma_address(),
            npages: f.count.load(Ordering::Acquire),
            capacity: f.list.len() as u32,
        })
    }

    /// `ib_map_mr_sg` starts a new mapping.
    pub(crate) fn clear_pages(&self) -> Result {
        let f = self.fast_reg.as_ref().ok_or(EINVAL)?;
        f.count.store(0, Ordering::Release);
        Ok(())
    }

    /// Appends one page (its DMA address) to the mapping; ENOMEM once the list is full (then
    /// `ib_sg_to_pages` stops and `ib_map_mr_sg` reports how much it mapped).
    pub(crate) fn set_page(&self, addr: u64) -> Result {
        let f = self.fast_reg.as_ref().ok_or(EINVAL)?;
        let n = f.count.load(Ordering::Acquire);
        if n as usize >= f.list.len() {
            return Err(ENOMEM);
        }
        f.list.write(n as usize, addr.to_le())?;
        f.count.store(n + 1, Ordering::Release);
        Ok(())
    }
}

/// `ib_alloc_mr(IB_MR_TYPE_MEM_REG, max_num_sg)`: a device MR with `MR_FLAG_FAST_REG` whose
/// capacity is `max_num_sg` pages (1..=`DEV_MAX_FAST_REG_PAGES`, else EINVAL), and its page
/// list in coherent DMA memory. Its key is invalid until a REG_MR binds pages to it.
pub(crate) fn alloc_fast_reg_mr(
    dev: &RoxDev<'_>,
    pdn: u32,
    max_num_sg: u32,
) -> Result<RegisteredMr<Mr>> {
    if max_num_sg == 0 || max_num_sg > admin::DEV_MAX_FAST_REG_PAGES {
        return Err(EINVAL);
    }
    let list = DmaArray::<u64>::zeroed(dev.pdev.as_ref(), max_num_sg as usize)?;
    let cmd = admin::RegMrCmd {
        pd: pdn,
        pbl: queue::PageList {
            npages: max_num_sg,
            ..Default::default()
        },
        flags: admin::MR_FLAG_FAST_REG,
        ..Default::default()
    };
    let keys = dev.run::<admin::RegMr>(cmd)?;
    Ok(RegisteredMr {
        data: Mr {
            lkey: keys.lkey,
            _mem: None,
            odp: None,
            fast_reg: Some(FastRegPages {
                list,
                count: AtomicU32::new(0),
            }),
        },
        lkey: keys.lkey,
        rkey: keys.rkey,
    })
}

// ---------------------------------------------------------------------------------------------
// On-demand paging
// ---------------------------------------------------------------------------------------------

/// The driver's state of an on-demand paging region that the mmu notifier sees.
pub(crate) struct OdpState {
    /// The device's key of the region (`Key::get`); 0 while the device does not use its pages
    /// (before REG_MR completes, after DEREG_MR): no MR key is 0, the device never uses key
    /// index 0. Changed under the umem's mutex.
    lkey: AtomicU32,
}

impl OdpState {
    fn new() -> Self {
        Self {
            lkey: AtomicU32::new(0),
        }
    }

    /// The region's key while the device uses its pages.
    fn lkey(&self) -> Option<Key> {
        match self.lkey.load(Ordering::Relaxed) {
            0 => None,
            word => Some(Key::from_raw(word)),
        }
    }

    /// Sets the key (None: the device no longer uses the pages). Under the umem's mutex.
    fn set_lkey(&self, lkey: Option<Key>) {
        self.lkey.store(lkey.map_or(0, Key::get), Ordering::Relaxed);
    }
}

/// An on-demand paging region: user memory that is not pinned. The device's page table of it
/// (`MR_FLAG_ON_DEMAND`) is kept current under the umem's mutex: pages are handed to the device
/// when its page fault events ask for them, and taken back (synchronously, `ODP_OP_UNMAP`)
/// before the mmu notifier lets the kernel change the CPU mapping.
pub(crate) struct OdpMr {
    umem: UmemOdp<RoxVerbs>,
    pdn: u32,
    /// The region's iova range, and the byte offset of its start in the umem's first page.
    iova: u64,
    length: u64,
    offset: u64,
    /// One page of page table entries for `ODP_OP_MAP` (used under the umem's mutex).
    list: DmaArray<u64>,
}

/// A region in [`OdpMrs`]: the handlers using it (page faults, prefetches) and whether it is
/// being deregistered (then no new user finds it).
struct OdpEntry {
    mr: Arc<OdpMr>,
    users: u32,
    dying: bool,
}

/// The on-demand paging regions of a device by lkey, for its page fault events and advise_mr.
/// `dereg_mr` waits until no handler uses a region before it lets it go, so the umem is always
/// released by `dereg_mr` itself, while the ib_device exists.
pub(crate) struct OdpMrs {
    inner: Pin<KBox<Mutex<RBTree<Key, OdpEntry>>>>,
    /// Signalled when the last user of a dying region is gone.
    idle: Pin<KBox<CondVar>>,
}

/// A use of a registered on-demand region (see [`OdpMrs::get`]).
pub(crate) struct OdpRef<'a> {
    mrs: &'a OdpMrs,
    lkey: Key,
    mr: Option<Arc<OdpMr>>,
}

impl Deref for OdpRef<'_> {
    type Target = OdpMr;

    fn deref(&self) -> &OdpMr {
        self.mr.as_deref().expect("set until drop")
    }
}

impl Drop for OdpRef<'_> {
    fn drop(&mut self) {
        // Our reference goes first: the table's entry (and the Mr) still hold theirs, so this
        // never releases the umem.
        drop(self.mr.take());
        let mut tree = self.mrs.inner.lock();
        if let Some(entry) = tree.get_mut(&self.lkey) {
            entry.users -= 1;
            if entry.users == 0 && entry.dying {
                self.mrs.idle.notify_all();
            }
        }
    }
}

impl OdpMrs {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            inner: KBox::pin_init(new_mutex!(RBTree::new()), GFP_KERNEL)?,
            idle: KBox::pin_init(new_condvar!(), GFP_KERNEL)?,
        })
    }

    /// The region `lkey`, unless it is unknown or being deregistered.
    fn get(&self, lkey: Key) -> Option<OdpRef<'_>> {
        let mut tree = self.inner.lock();
        let entry = tree.get_mut(&lkey).filter(|e| !e.dying)?;
        entry.users += 1;
        let mr = entry.mr.clone();
        Some(OdpRef {
            mrs: self,
            lkey,
            mr: Some(mr),
        })
    }

    /// Enters region `lkey`.
    fn insert(&self, lkey: Key, entry: OdpEntry) -> Result {
        let node = RBTreeNode::new(lkey, entry, GFP_KERNEL)?;
        self.inner.lock().insert(node);
        Ok(())
    }

    /// Takes region `lkey` out of the table once no handler uses it any more.
    fn remove(&self, lkey: Key) {
        let mut tree = self.inner.lock();
        if let Some(entry) = tree.get_mut(&lkey) {
            entry.dying = true;
        }
        while tree.get(&lkey).is_some_and(|e| e.users > 0) {
            self.idle.wait(&mut tree);
        }
        tree.remove(&lkey);
    }
}

/// Pages a page fault makes present at once (the faulting page and the ones after it).
const ODP_FAULT_PAGES: usize = 16;
const _: () = assert!(ODP_FAULT_PAGES <= admin::ODP_MAX_UPDATE_PAGES as usize);

/// What rox reports in `ib_device_attr.odp_caps`: RC requesters and responders wait for
/// missing pages (SQ stall / RNR NAK), UD senders stall; UD receives have no RNR (a missing
/// page fails the receive), so they are not claimed.
pub(crate) fn odp_caps() -> OdpCaps {
    OdpCaps {
        rc: OdpTransportCaps::SEND
            | OdpTransportCaps::RECV
            | OdpTransportCaps::WRITE
            | OdpTransportCaps::READ
            | OdpTransportCaps::ATOMIC
            | OdpTransportCaps::SRQ_RECV,
        ud: OdpTransportCaps::SEND,
    }
}

/// Tells the device the current state of pages `[first, first + count)` (at most
/// `ODP_MAX_UPDATE_PAGES`), under the umem's mutex. Nothing is sent if none is present (an
/// entry without `ODP_PTE_PRESENT` would leave its page as it is anyway).
fn odp_push(
    dev: &RoxDev<'_>,
    odp: &OdpMr,
    locked: &OdpLocked<'_>,
    first: usize,
    count: usize,
) -> Result {
    let Some(lkey) = odp.umem.data().lkey() else {
        return Ok(());
    };
    let mut any = false;
    for i in 0..count {
        let entry = match locked.page(first + i)? {
            Some((dma, writable)) => {
                any = true;
                dma | admin::ODP_PTE_PRESENT | if writable { admin::ODP_PTE_WRITE } else { 0 }
            }
            None => 0,
        };
        odp.list.write(i, entry)?;
    }
    if !any {
        return Ok(());
    }
    odp_update(
        dev,
        lkey,
        first,
        count,
        admin::ODP_OP_MAP,
        odp.list.dma_address(),
    )
}

fn odp_update(
    dev: &RoxDev<'_>,
    lkey: Key,
    first: usize,
    count: usize,
    op: u32,
    pages: u64,
) -> Result {
    let cmd = admin::OdpUpdateCmd {
        key: lkey,
        first_page: u32::try_from(first)?,
        npages: u32::try_from(count)?,
        op,
        pages,
    };
    dev.run::<admin::OdpUpdate>(cmd)
}

/// The mmu notifier: pages `[first, first + count)` lose their CPU mapping. Once the device
/// has completed `ODP_OP_UNMAP` it no longer touches them.
pub(crate) fn odp_invalidate(dev: &RoxDev<'_>, state: &OdpState, first: usize, count: usize) {
    let Some(lkey) = state.lkey() else {
        return;
    };
    if let Err(err) = odp_update(dev, lkey, first, count, admin::ODP_OP_UNMAP, 0) {
        dev_warn!(
            dev.pdev.as_ref(),
            "ODP unmap of MR {:#x} pages {}+{} failed: {:?}\n",
            lkey,
            first,
            count,
            err
        );
    }
}

/// Whether a failure to make pages present is worth a later retry rather than failing the
/// accesses (the range was busy being invalidated, memory was short, a signal came).
fn transient(err: Error) -> bool {
    [EBUSY, ENOMEM, EINTR, EAGAIN, ERESTARTSYS]
        .iter()
        .any(|e| e.to_errno() == err.to_errno())
}

/// A page fault event of the device (`EQE_TYPE_PAGE_FAULT`, on EQ 0's interrupt thread): makes
/// the `count` pages the access needs from `page` on (at least a few) present and maps them on
/// the device, in `ODP_MAX_UPDATE_PAGES` chunks, so that one fault resolves one access. A read
/// fault maps pages as the CPU has them (a later write faults again), a write fault writable.
/// A page that cannot be had is failed on the device (its access fails); after a transient
/// error, or for a region the driver does not know (yet: a fault can come between REG_MR and
/// the region's insertion), the device is told to forget the fault (`ODP_OP_UNMAP` of the
/// page), so the access faults again later.
pub(crate) fn odp_fault(dev: &RoxDev<'_>, lkey: Key, aux: u32, count: u32) {
    let page = (aux & !queue::EQE_PAGE_FAULT_WRITE) as usize;
    let write = aux & queue::EQE_PAGE_FAULT_WRITE != 0;
    // The device marked the `count` pages from `page` on as faulting: each of them must get an
    // answer (MAP, FAIL or UNMAP), or it would never fault again.
    let count = (count as usize).max(1);
    let Some(odp) = dev.odp_mrs.get(lkey) else {
        let _ = odp_update(dev, lkey, page, count, admin::ODP_OP_UNMAP, 0);
        return;
    };
    let npages = odp.umem.npages();
    if page >= npages {
        return;
    }
    let count = count.min(npages - page);
    let resolve = |first: usize, count: usize| {
        odp.umem
            .map(first, count, write, true, |locked| {
                odp_push(dev, &odp, locked, first, count)
            })
            .and_then(|r| r)
    };
    let want = count.max(ODP_FAULT_PAGES).min(npages - page);
    let chunk = admin::ODP_MAX_UPDATE_PAGES as usize;
    // Pages `[page, done)` are answered.
    let mut done = page;
    while done < page + want {
        let n = chunk.min(page + want - done);
        match resolve(done, n) {
            Ok(()) => done += n,
            // The faulting page is present: the access faults again for the rest.
            Err(_) if done > page => break,
            Err(err) => {
                if n == 1 || resolve(page, 1).is_err() {
                    odp_fault_failed(dev, &odp, page, err);
                }
                done = page + 1;
                break;
            }
        }
        // Each chunk's admin completion posts an event to EQ 0: keep its ring from filling.
        dev.skim_async_eq();
    }
    if done < page + count {
        // The device forgets the fault of the pages not answered (they fault again).
        let _ = odp_update(dev, lkey, done, page + count - done, admin::ODP_OP_UNMAP, 0);
    }
}

/// Page `page` of `odp` could not be made present (`err`).
fn odp_fault_failed(dev: &RoxDev<'_>, odp: &OdpMr, page: usize, err: Error) {
    odp.umem.locked(|_| {
        let Some(lkey) = odp.umem.data().lkey() else {
            return;
        };
        let op = if transient(err) {
            admin::ODP_OP_UNMAP
        } else {
            // No mapping, no permission: accesses to the page fail.
            admin::ODP_OP_FAIL
        };
        let _ = odp_update(dev, lkey, page, 1, op, 0);
    });
}

/// ibv_advise_mr: makes `(addr, length, lkey)` ranges of on-demand regions of PD `pdn` present
/// on the device (PREFETCH: readable, PREFETCH_WRITE: writable, PREFETCH_NO_FAULT: only what
/// the CPU has mapped already).
pub(crate) fn odp_prefetch(
    dev: &RoxDev<'_>,
    pdn: u32,
    advice: MrAdvice,
    sges: &[(u64, u32, Key)],
) -> Result {
    let (write, fault) = match advice {
        MrAdvice::Prefetch => (false, true),
        MrAdvice::PrefetchWrite => (true, true),
        MrAdvice::PrefetchNoFault => (false, false),
    };
    for &(addr, length, lkey) in sges {
        let odp = dev.odp_mrs.get(lkey).ok_or(EINVAL)?;
        if odp.pdn != pdn {
            return Err(EINVAL);
        }
        if write && !odp.umem.writable() {
            return Err(EPERM);
        }
        let end = addr.checked_add(u64::from(length)).ok_or(EINVAL)?;
        if addr < odp.iova || end > odp.iova + odp.length {
            return Err(EINVAL);
        }
        if length == 0 {
            continue;
        }
        let shift = odp.umem.page_shift();
        let first = ((addr - odp.iova + odp.offset) >> shift) as usize;
        let last = ((end - 1 - odp.iova + odp.offset) >> shift) as usize;
        let chunk = admin::ODP_MAX_UPDATE_PAGES as usize;
        let mut page = first;
        while page <= last {
            let count = chunk.min(last + 1 - page);
            odp.umem
                .map(page, count, write || odp.umem.writable(), fault, |locked| {
                    odp_push(dev, &odp, locked, page, count)
                })??;
            page += count;
        }
    }
    Ok(())
}

fn reg_odp_mr(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    pdn: u32,
    start: u64,
    length: u64,
    iova: u64,
    access: u32,
) -> Result<RegisteredMr<Mr>> {
    if dev.attr.caps & regs::CAP_ODP == 0 {
        return Err(EOPNOTSUPP);
    }
    let page_size = regs::ROX_PAGE_SIZE as u64;
    // Implicit ODP (the whole address space) is not supported; iova keeps the page offset; the
    // device's page table holds at most DEV_MAX_PBL_PAGES pages (checked again exactly below,
    // but before ib_umem_odp_get sizes its own tables after `length`).
    if (iova ^ start) & (page_size - 1) != 0
        || length > u64::from(admin::DEV_MAX_PBL_PAGES) << regs::ROX_PAGE_SHIFT
    {
        return Err(EINVAL);
    }
    let state = OdpState::new();
    let umem = UmemOdp::<RoxVerbs>::get(
        ib,
        start,
        usize::try_from(length)?,
        access | verbs::ACCESS_ON_DEMAND,
        state,
    )?;
    let npages = umem.npages();
    if umem.page_shift() != regs::ROX_PAGE_SHIFT || npages > admin::DEV_MAX_PBL_PAGES as usize {
        return Err(EINVAL);
    }
    let list = DmaArray::<u64>::zeroed(dev.pdev.as_ref(), admin::ODP_MAX_UPDATE_PAGES as usize)?;
    let offset = start - umem.start();
    let odp = Arc::new(
        OdpMr {
            umem,
            pdn,
            iova,
            length,
            offset,
            list,
        },
        GFP_KERNEL,
    )?;
    let cmd = admin::RegMrCmd {
        pd: pdn,
        access,
        iova,
        length,
        pbl: queue::PageList {
            addr: 0,
            npages: npages as u32,
            page_shift: regs::ROX_PAGE_SHIFT as u8,
            level: queue::PBL_LEVEL_1,
            reserved: 0,
        },
        offset_in_first_page: offset as u32,
        flags: admin::MR_FLAG_ON_DEMAND,
    };
    let keys = dev.run::<admin::RegMr>(cmd)?;
    let lkey = keys.lkey;
    let mr = Mr {
        lkey,
        _mem: None,
        odp: Some(odp.clone()),
        fast_reg: None,
    };
    odp.umem.locked(|_| odp.umem.data().set_lkey(Some(lkey)));
    let entry = OdpEntry {
        mr: odp.clone(),
        users: 0,
        dying: false,
    };
    if let Err(err) = dev.odp_mrs.insert(lkey, entry) {
        dereg_mr(dev, &mr);
        return Err(err);
    }
    // Hand the device what the CPU has mapped already (no faulting, nothing pinned).
    let chunk = admin::ODP_MAX_UPDATE_PAGES as usize;
    let mut first = 0;
    while first < npages {
        let count = chunk.min(npages - first);
        let _ = odp.umem.map(first, count, false, false, |locked| {
            odp_push(dev, &odp, locked, first, count)
        });
        first += count;
    }
    Ok(RegisteredMr {
        data: mr,
        lkey,
        rkey: keys.rkey,
    })
}

/// The IB access flags the device implements; the optional ones (hints) are ignored.
fn device_access(access: u32) -> Result<u32> {
    let access = access & !verbs::ACCESS_OPTIONAL_MASK;
    if access & !verbs::ACCESS_SUPPORTED != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(access)
}

fn register(
    dev: &RoxDev<'_>,
    cmd: admin::RegMrCmd,
    mem: Option<(Umem, PageList)>,
) -> Result<RegisteredMr<Mr>> {
    let keys = dev.run::<admin::RegMr>(cmd)?;
    Ok(RegisteredMr {
        data: Mr {
            lkey: keys.lkey,
            _mem: mem,
            odp: None,
            fast_reg: None,
        },
        lkey: keys.lkey,
        rkey: keys.rkey,
    })
}

pub(crate) fn reg_user_mr(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    pdn: u32,
    range: UserRange,
    access: u32,
    udata: &mut Udata<'_>,
) -> Result<RegisteredMr<Mr>> {
    let UserRange {
        start,
        length,
        iova,
    } = range;
    udata.expect_no_input()?;
    let on_demand = access & verbs::ACCESS_ON_DEMAND != 0;
    let access = device_access(access & !verbs::ACCESS_ON_DEMAND)?;
    if length == 0 || length > dev.attr.max_mr_size {
        return Err(EINVAL);
    }
    if on_demand {
        let mr = reg_odp_mr(dev, ib, pdn, start, length, iova, access)?;
        if let Err(err) = udata.respond_empty() {
            dereg_mr(dev, &mr.data);
            return Err(err);
        }
        return Ok(mr);
    }
    let umem = Umem::get(ib, start, usize::try_from(length)?, access)?;
    let page_size = umem
        .best_page_size(dev.attr.page_size_cap, iova)
        .ok_or(EINVAL)?;
    let page_shift = page_size.trailing_zeros() as u8;
    let pbl = PageList::new(dev.pdev.as_ref(), &umem, page_shift)?;
    let cmd = admin::RegMrCmd {
        pd: pdn,
        access,
        iova,
        length,
        pbl: pbl.desc(),
        offset_in_first_page: (iova & (page_size - 1)) as u32,
        flags: 0,
    };
    let mr = register(dev, cmd, Some((umem, pbl)))?;
    udata.respond_empty()?;
    Ok(mr)
}

/// The kernel's DMA MR: DMA addresses used as they are (as far as the device reaches).
pub(crate) fn get_dma_mr(dev: &RoxDev<'_>, pdn: u32, access: u32) -> Result<RegisteredMr<Mr>> {
    let cmd = admin::RegMrCmd {
        pd: pdn,
        access: device_access(access)?,
        iova: 0,
        length: dev.attr.max_mr_size,
        flags: admin::MR_FLAG_PHYSICAL,
        ..Default::default()
    };
    register(dev, cmd, None)
}

pub(crate) fn dereg_mr(dev: &RoxDev<'_>, mr: &Mr) {
    let cmd = admin::KeyCmd {
        key: mr.lkey,
        reserved: 0,
    };
    let result = match &mr.odp {
        // No fault handler or prefetch uses the region after this (so the Mr's drop releases
        // the umem, here, while the device exists). Under the umem's mutex: no invalidation
        // may skip the device while it still uses the pages.
        Some(odp) => {
            dev.odp_mrs.remove(mr.lkey);
            odp.umem.locked(|_| {
                odp.umem.data().set_lkey(None);
                dev.run::<admin::DeregMr>(cmd)
            })
        }
        None => dev.run::<admin::DeregMr>(cmd),
    };
    if let Err(err) = result {
        dev_warn!(
            dev.pdev.as_ref(),
            "DEREG_MR {:#x} failed: {:?}\n",
            mr.lkey,
            err
        );
    }
}

/// A ring of `T` in coherent DMA memory for a kernel consumer's queue, with the page list that
/// describes it to the device (whole 4 KiB pages; the device uses the first `entries`).
pub(crate) struct KernelRing<T: kernel::transmute::AsBytes + kernel::transmute::FromBytes + Copy> {
    pub(crate) ring: DmaArray<T>,
    _pbl: DmaArray<u64>,
    desc: queue::PageList,
}

impl<T: kernel::transmute::AsBytes + kernel::transmute::FromBytes + Copy> KernelRing<T> {
    pub(crate) fn new(dev: &Device<Bound>, entries: usize) -> Result<Self> {
        let page = regs::ROX_PAGE_SIZE;
        let bytes = entries
            .checked_mul(core::mem::size_of::<T>())
            .ok_or(EINVAL)?;
        let npages = bytes.div_ceil(page);
        if npages == 0 || npages > queue::PBL_ENTRIES_PER_PAGE as usize {
            return Err(EINVAL);
        }
        let ring = DmaArray::<T>::zeroed(dev, npages * page / core::mem::size_of::<T>())?;
        let pbl = DmaArray::<u64>::zeroed(dev, npages)?;
        for i in 0..npages {
            pbl.write(i, ring.dma_address() + (i * page) as u64)?;
        }
        let desc = queue::PageList {
            addr: pbl.dma_address(),
            npages: npages as u32,
            page_shift: regs::ROX_PAGE_SHIFT as u8,
            level: queue::PBL_LEVEL_1,
            reserved: 0,
        };
        Ok(Self {
            ring,
            _pbl: pbl,
            desc,
        })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.desc
    }
}

/// A memory window (type 1 or 2): the device keeps its binding; the driver only names it.
pub(crate) struct Mw {
    rkey: Key,
}

/// Allocates a memory window in PD `pdn`; returns its rkey (the device's).
pub(crate) fn alloc_mw(
    dev: &RoxDev<'_>,
    pdn: u32,
    mw_type: u32,
    udata: &mut Udata<'_>,
) -> Result<(Key, Mw)> {
    udata.expect_no_input()?;
    let mw_type = match u8::try_from(mw_type) {
        Ok(t @ (verbs::MW_TYPE_1 | verbs::MW_TYPE_2)) => t,
        _ => return Err(EINVAL),
    };
    let cmd = admin::AllocMwCmd {
        pd: pdn,
        mw_type,
        ..Default::default()
    };
    let rkey = dev.run::<admin::AllocMw>(cmd)?;
    let mw = Mw { rkey };
    if let Err(err) = udata.respond_empty() {
        dealloc_mw(dev, &mw);
        return Err(err);
    }
    Ok((rkey, mw))
}

pub(crate) fn dealloc_mw(dev: &RoxDev<'_>, mw: &Mw) {
    let cmd = admin::KeyCmd {
        key: mw.rkey,
        reserved: 0,
    };
    if let Err(err) = dev.run::<admin::DeallocMw>(cmd) {
        dev_warn!(
            dev.pdev.as_ref(),
            "DEALLOC_MW {:#x} failed: {:?}\n",
            mw.rkey,
            err
        );
    }
}
