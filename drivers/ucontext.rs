// SPDX-License-Identifier: GPL-2.0
//! User contexts: the doorbell page a process gets (mapped by the provider, together with the
//! device's wake page) and the allocator of that page's slots, which its CQs, QPs and SRQs
//! take their doorbells from.

use crate::{
    dev::RoxDev,
    hw::{
        regs,
        uapi::{queue, udata as ud, wake},
    },
    ib::{mmap::MmapEntry, mmap::UcontextRef, Udata},
    ids::{DbSlot, DbSlots},
    wake::Wake,
};
use kernel::{prelude::*, sync::Arc};

/// A user context: its doorbell page (mapped by the provider, together with the wake page) and
/// the allocator of that page's slots.
pub(crate) struct Ucontext {
    db_page: u32,
    slots: Arc<DbSlots>,
    _db_entry: MmapEntry,
    _wake_entry: MmapEntry,
    /// Made before a companion's removal revoked the processes' mappings
    /// (`wake::PostedWake::context_before_cut_off`).
    before_cut_off: bool,
}

impl Ucontext {
    pub(crate) fn db_page(&self) -> u32 {
        self.db_page
    }

    /// Whether the companion's removal has cut the context off: its doorbell and wake pages no
    /// longer reach the device, so a new CQ, QP or SRQ of it would silently do nothing
    /// (docs/driver.md). Never sleeps (`Verbs::admits` asks under the registry's lock).
    pub(crate) fn is_cut_off(&self, dev: &RoxDev<'_>) -> bool {
        match &dev.wake {
            Wake::Posted(posted) => posted.cuts_off(self.before_cut_off),
            Wake::Trapped => false,
        }
    }

    /// A doorbell slot for a new CQ, QP or SRQ of the context. EIO once the context is cut
    /// off: an early check that saves the device's work; the one that counts is made when the
    /// object is registered (`Verbs::admits`, `cut_off.rs`).
    pub(crate) fn alloc_db_slot(&self, dev: &RoxDev<'_>) -> Result<DbSlot> {
        if self.is_cut_off(dev) {
            return Err(EIO);
        }
        DbSlot::alloc(&self.slots)
    }
}

/// The doorbell page of a context, returned when the context goes.
struct DbPage<'a, 'bound> {
    dev: &'a RoxDev<'bound>,
    page: u32,
}

impl Drop for DbPage<'_, '_> {
    fn drop(&mut self) {
        self.dev.db_pages.free(self.page);
    }
}

/// A new user context: a doorbell page of its own and the mappings of it and the wake page.
pub(crate) fn alloc(
    dev: &RoxDev<'_>,
    uctx: UcontextRef<'_>,
    udata: &mut Udata<'_>,
) -> Result<Ucontext> {
    udata.expect_no_input()?;
    // Read before anything is mapped: a removal that ends later cuts the context off.
    let before_cut_off = match &dev.wake {
        Wake::Posted(posted) => posted.context_before_cut_off(),
        Wake::Trapped => false,
    };
    let page = DbPage {
        dev,
        page: dev.db_pages.alloc().map_err(|_| ENOMEM)?,
    };
    let page_size = regs::ROX_PAGE_SIZE as u64;
    let db_pfn = (dev.db_bar_start + u64::from(page.page) * page_size) >> regs::ROX_PAGE_SHIFT;
    // The companion's register page when every wake is posted, else BAR0's trapped wake page.
    // A removed companion's contexts are trapped ones (`wake::PostedWake`).
    let companion = match &dev.wake {
        Wake::Posted(posted) => posted.user_page(),
        Wake::Trapped => None,
    };
    let (wake_pfn, wake_offset, wake_value) = match companion {
        Some((pfn, doorbell)) => (pfn, wake::IVSHMEM_DOORBELL as u32, doorbell),
        None => (
            (dev.ctrl_bar_start + regs::WAKE_PAGE_OFFSET) >> regs::ROX_PAGE_SHIFT,
            (regs::WAKE_REG - regs::WAKE_PAGE_OFFSET) as u32,
            page.page,
        ),
    };
    let db_entry = MmapEntry::new(uctx, db_pfn, regs::ROX_PAGE_SIZE)?;
    let wake_entry = MmapEntry::new(uctx, wake_pfn, regs::ROX_PAGE_SIZE)?;
    let slots = DbSlots::new_page()?;
    // The page's last context may have stored news; this one says so itself if it does.
    dev.say_news_on(page.page, false);
    let resp = ud::AllocUcontextResp {
        db_mmap_key: db_entry.offset(),
        wake_mmap_key: wake_entry.offset(),
        db_page: page.page,
        caps: dev.attr.caps,
        sq_wqe_size: queue::SQ_WQE_SIZE as u32,
        rq_wqe_size: queue::RQ_WQE_SIZE as u32,
        cqe_size: queue::CQE_SIZE as u32,
        max_inline: queue::SQ_MAX_INLINE.min(dev.attr.max_inline_data),
        wake_offset,
        wake_value,
    };
    udata.respond(&resp)?;
    // From here on the page belongs to the context (returned by `dealloc`).
    let db_page = page.page;
    core::mem::forget(page);
    Ok(Ucontext {
        db_page,
        slots,
        _db_entry: db_entry,
        _wake_entry: wake_entry,
        before_cut_off,
    })
}

/// A process maps device page `pfn` of one of its contexts (`Verbs::map_user_page`): refused
/// if it is the page of a companion removed since the context was made.
pub(crate) fn map_user_page(dev: &RoxDev<'_>, pfn: u64, map: impl FnOnce() -> Result) -> Result {
    match &dev.wake {
        Wake::Posted(posted) => posted.map_user_page(pfn, map),
        Wake::Trapped => map(),
    }
}

pub(crate) fn dealloc(dev: &RoxDev<'_>, uctx: &Ucontext) {
    dev.db_pages.free(uctx.db_page);
}
