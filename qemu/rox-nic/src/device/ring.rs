//! Rings and page lists in guest memory: where a queue's entries are, how many are posted,
//! and the reading and checking of the page lists software hands the device.

use rox_uapi::admin::*;
use rox_uapi::queue::*;

use crate::dma::GuestRam;

/// A ring in guest memory described by a page list.
#[derive(Clone, Debug)]
pub struct Ring {
    pub pages: Vec<u64>,
    pub page_shift: u32,
    pub depth: u32,
    pub entry_shift: u32,
}

impl Ring {
    pub fn entry_addr(&self, index: u32) -> u64 {
        let off = ((index & (self.depth - 1)) as u64) << self.entry_shift;
        let page = (off >> self.page_shift) as usize;
        self.pages[page] + (off & ((1u64 << self.page_shift) - 1))
    }
}

/// A producer index more than a ring's depth ahead of the device's consumer index: software
/// wrote garbage (or attacks the device); the object stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WildIndex;

/// Entries posted and not yet consumed on a ring of `depth`, from software's free-running
/// producer index and the device's consumer index.
pub fn posted_entries(pi: u32, ci: u32, depth: u32) -> Result<u32, WildIndex> {
    let posted = pi.wrapping_sub(ci);
    if posted > depth {
        Err(WildIndex)
    } else {
        Ok(posted)
    }
}

/// Read and validate a page list from guest memory. Errors are admin statuses.
pub fn load_page_list<R: GuestRam + ?Sized>(mem: &R, pl: &PageList) -> Result<Vec<u64>, u8> {
    if !(PAGE_SHIFT_MIN..=PAGE_SHIFT_MAX).contains(&pl.page_shift)
        || pl.npages == 0
        || pl.npages > DEV_MAX_PBL_PAGES
    {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let n = pl.npages as usize;
    let read_u64s = |addr: u64, count: usize| -> Result<Vec<u64>, u8> {
        let mut bytes = vec![0u8; count * 8];
        mem.read(addr, &mut bytes)
            .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect())
    };
    let pages = match pl.level {
        PBL_LEVEL_1 => read_u64s(pl.addr, n)?,
        PBL_LEVEL_2 => {
            let per = PBL_ENTRIES_PER_PAGE as usize;
            let l1 = read_u64s(pl.addr, n.div_ceil(per))?;
            let mut pages = Vec::with_capacity(n);
            for (i, l2) in l1.iter().enumerate() {
                pages.extend(read_u64s(*l2, per.min(n - i * per))?);
            }
            pages
        }
        _ => return Err(ADMIN_STATUS_BAD_PARAM),
    };
    let size = 1u64 << pl.page_shift;
    for &p in &pages {
        if p & (size - 1) != 0 {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        mem.check_access(p, size, false)
            .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
    }
    Ok(pages)
}

/// What a ring holds: its entry size and deepest depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingKind {
    /// Send WQEs.
    Sq,
    /// Receive WQEs (of a QP's RQ or an SRQ).
    Rq,
    /// CQEs.
    Cq,
}

impl RingKind {
    fn entry_shift(self) -> u32 {
        match self {
            RingKind::Sq => SQ_WQE_SHIFT,
            RingKind::Rq => RQ_WQE_SHIFT,
            RingKind::Cq => CQE_SHIFT,
        }
    }

    fn max_log_depth(self) -> u8 {
        match self {
            RingKind::Sq | RingKind::Rq => DEV_MAX_LOG_WQ_DEPTH,
            RingKind::Cq => DEV_MAX_LOG_CQ_DEPTH,
        }
    }
}

/// Build a ring of `1 << log_depth` entries of `kind`.
pub fn load_ring<R: GuestRam + ?Sized>(
    mem: &R,
    pl: &PageList,
    log_depth: u8,
    kind: RingKind,
) -> Result<Ring, u8> {
    let (entry_shift, max_log) = (kind.entry_shift(), kind.max_log_depth());
    if !(DEV_MIN_LOG_DEPTH..=max_log).contains(&log_depth) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let pages = load_page_list(mem, pl)?;
    let bytes = 1u64 << (log_depth as u32 + entry_shift);
    if (pages.len() as u64) << pl.page_shift < bytes {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    Ok(Ring {
        pages,
        page_shift: pl.page_shift as u32,
        depth: 1 << log_depth,
        entry_shift,
    })
}
