// SPDX-License-Identifier: GPL-2.0
//! On-demand paging regions: user memory that is not pinned. The device's page table of a
//! region is filled on its page fault events ([`odp_fault`]) and advise_mr prefetches
//! ([`odp_prefetch`]), and emptied, synchronously, before the mmu notifier lets the kernel
//! change the CPU mapping ([`odp_invalidate`]). [`OdpMrs`] is the device's table of them.

use crate::{
    dev::{RoxDev, RoxVerbs},
    hw::{
        regs,
        uapi::{admin, ids::Key, queue, verbs},
    },
    ib::{
        dma::DmaArray,
        umem_odp::{OdpLocked, UmemOdp},
        IbDev, MrAdvice, OdpCaps, OdpTransportCaps, RegisteredMr,
    },
};
use core::{
    ops::Deref,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::{Arc, CondVar, Mutex},
};

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
    // A dead device touches no page any more.
    if let Err(err) = odp_update(dev, lkey, first, count, admin::ODP_OP_UNMAP, 0)
        .or_else(|e| crate::dead::gone_if_dead(dev, e))
    {
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

/// Registers user memory `[start, start + length)` as an on-demand paging region of PD `pdn`
/// at `iova`: no page is pinned; what the CPU has mapped already is handed to the device, the
/// rest on its page faults.
pub(crate) fn reg_odp_mr(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    pdn: u32,
    start: u64,
    length: u64,
    iova: u64,
    access: u32,
) -> Result<RegisteredMr<Arc<OdpMr>>> {
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
    odp.umem.locked(|_| odp.umem.data().set_lkey(Some(lkey)));
    let entry = OdpEntry {
        mr: odp.clone(),
        users: 0,
        dying: false,
    };
    if let Err(err) = dev.odp_mrs.insert(lkey, entry) {
        if let Err(dereg) = dereg_odp_mr(dev, &odp, lkey) {
            dev_warn!(
                dev.pdev.as_ref(),
                "DEREG_MR {:#x} failed: {:?}\n",
                lkey,
                dereg
            );
        }
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
        data: odp,
        lkey,
        rkey: keys.rkey,
    })
}

/// DEREG_MR of on-demand region `odp` (key `lkey`). No fault handler or prefetch uses the
/// region after this (so the region's last reference, the Mr's, releases the umem while the
/// device exists). Under the umem's mutex: no invalidation may skip the device while it still
/// uses the pages.
pub(crate) fn dereg_odp_mr(dev: &RoxDev<'_>, odp: &OdpMr, lkey: Key) -> Result {
    dev.odp_mrs.remove(lkey);
    odp.umem.locked(|_| {
        odp.umem.data().set_lkey(None);
        let cmd = admin::KeyCmd {
            key: lkey,
            reserved: 0,
        };
        dev.run::<admin::DeregMr>(cmd)
    })
}
