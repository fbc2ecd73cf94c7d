//! On-demand paging faults: an access that found a page of an on-demand region missing asks
//! the driver for it (`EQE_TYPE_PAGE_FAULT` on EQ 0) and waits; a page the driver could not map
//! fails the access once.

use rox_uapi::admin::*;
use rox_uapi::ids::Key;
use rox_uapi::queue::*;
use rox_uapi::regs::*;

use super::mem::MemTable;
use super::region::{ODP_PTE_FAILED, ODP_PTE_FAULT_SENT};
use super::state::Hw;
use crate::roce::AccessError;

impl MemTable {
    /// Marks the missing pages `page..page+count` of the region `key` as asked for; false if
    /// the region is gone or a fault for `page` is outstanding already (nothing to post).
    pub(crate) fn mark_fault_sent(&mut self, key: Key, page: u32, count: u32, write: bool) -> bool {
        let need = if write {
            ODP_PTE_PRESENT | ODP_PTE_WRITE
        } else {
            ODP_PTE_PRESENT
        };
        let Some(pages) = self
            .mrs
            .get_mut(&key.index())
            .filter(|mr| mr.key == key)
            .map(|mr| &mut mr.pages[..])
        else {
            return false;
        };
        let first = page as usize;
        if first >= pages.len() || pages[first] & ODP_PTE_FAULT_SENT != 0 {
            return false;
        }
        // The fault covers every page of the access that is missing: none of them faults
        // again until the driver's answer (which ends the fault of each of them: MAP, UNMAP or
        // FAIL).
        let end = (first + count as usize).min(pages.len());
        for entry in &mut pages[first..end] {
            if *entry & need != need && *entry & ODP_PTE_FAILED == 0 {
                *entry |= ODP_PTE_FAULT_SENT;
            }
        }
        true
    }

    /// Forgets that page `page` of the region `key` failed: a later access faults it anew.
    pub(crate) fn forget_failed_page(&mut self, key: Key, page: u32) {
        if let Some(entry) = self
            .mrs
            .get_mut(&key.index())
            .filter(|mr| mr.key == key)
            .and_then(|mr| mr.pages.get_mut(page as usize))
        {
            if *entry & ODP_PTE_FAILED != 0 {
                *entry = 0;
            }
        }
    }
}

/// A page fault the driver is to be told of (`EQE_TYPE_PAGE_FAULT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultToPost {
    pub key: Key,
    pub page: u32,
    pub write: bool,
    pub count: u32,
}

impl MemTable {
    /// What an access's result `r` means for on-demand paging, the one rule the device and
    /// the engine's test double share: a page fault is to be posted unless one is outstanding
    /// already or `room` says the event queue has none (then the access just waits and
    /// retries); a failed page fails this access once and becomes not present again (a later
    /// access faults it anew).
    pub fn answer_fault<T>(
        &mut self,
        r: Result<T, AccessError>,
        room: impl FnOnce() -> bool,
    ) -> (Result<T, AccessError>, Option<FaultToPost>) {
        match r {
            Err(AccessError::PageFault {
                key,
                page,
                write,
                count,
            }) => {
                let post = room() && self.mark_fault_sent(key, page, count, write);
                let fault = FaultToPost {
                    key,
                    page,
                    write,
                    count,
                };
                (r, post.then_some(fault))
            }
            Err(AccessError::PageFailed { key, page }) => {
                self.forget_failed_page(key, page);
                (Err(AccessError::AccessDenied), None)
            }
            r => (r, None),
        }
    }
}

impl Hw {
    /// Passes `r` on ([`MemTable::answer_fault`]), posting a page fault on EQ 0 when there
    /// is one to post and EQ 0 is less than half full (the driver's own admin completions
    /// must always find room in EQ 0).
    #[inline]
    pub(crate) fn page_fault<T>(&mut self, r: Result<T, AccessError>) -> Result<T, AccessError> {
        // Every access of the data path passes here: the one that succeeded returns at once.
        if r.is_ok() {
            return r;
        }
        self.post_page_fault(r)
    }

    /// [`Self::page_fault`] for a refused access.
    fn post_page_fault<T>(&mut self, r: Result<T, AccessError>) -> Result<T, AccessError> {
        let eqs = &self.eqs;
        let room = || match eqs.get(EQ_ADMIN_ASYNC as usize) {
            Some(Some(eq)) => (eq.pi.wrapping_sub(eq.ci) & EQ_DB_CI_MASK) < eq.depth / 2,
            _ => false,
        };
        let (r, fault) = self.mem_table.answer_fault(r, room);
        if let Some(FaultToPost {
            key,
            page,
            write,
            count,
        }) = fault
        {
            self.stats[STAT_PAGE_FAULTS] += 1;
            let aux = page | if write { EQE_PAGE_FAULT_WRITE } else { 0 };
            let c = count.min(EQE_PAGE_FAULT_MAX_COUNT).to_le_bytes();
            self.post_eqe(
                EQ_ADMIN_ASYNC,
                Eqe {
                    event_type: EQE_TYPE_PAGE_FAULT,
                    handle: key.get(),
                    aux,
                    count: [c[0], c[1], c[2]],
                    ..Default::default()
                },
            );
        }
        r
    }
}
