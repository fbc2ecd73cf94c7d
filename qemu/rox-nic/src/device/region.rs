//! What a memory region and a memory window are: their state, the rules of their ranges and
//! access flags, and how an access finds the DMA addresses of its bytes (page lists, on-demand
//! page table entries). The protection table ([`super::mem::MemTable`]) holds them.

use rox_uapi::admin::*;
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

use crate::roce::AccessError;

/// The access flags of a region are ones the device knows, and (IB) remote write or atomic
/// access comes with local write.
pub fn region_access_valid(access: u32) -> bool {
    Access::valid_for_region(access)
}

/// `[iova, iova + length)` is a range a region may have.
pub fn region_fits(iova: u64, length: u64) -> bool {
    length <= DEV_MAX_MR_SIZE && iova.checked_add(length).is_some()
}

/// `npages` pages of `1 << page_shift` bytes (`page_shift` in `PAGE_SHIFT_MIN..=MAX`) hold a
/// region of `length` bytes starting `offset` bytes into the first page.
pub fn pages_cover(offset: u64, length: u64, npages: u32, page_shift: u8) -> bool {
    let page_size = 1u64 << page_shift;
    offset < page_size && offset + length <= u64::from(npages) << page_shift
}

/// A registered memory region.
#[derive(Clone, Debug)]
pub struct Mr {
    /// Its lkey (= rkey). A fast-registration region's changes with every `WR_REG_MR` (the
    /// consumer picks the variant); the index part never changes.
    pub key: Key,
    pub pd: u32,
    pub access: u32,
    pub iova: u64,
    pub length: u64,
    /// Byte offset of `iova` in page 0.
    pub offset: u64,
    pub pages: Vec<u64>,
    pub page_shift: u32,
    pub physical: bool,
    /// On-demand paging (`MR_FLAG_ON_DEMAND`): `pages` holds page table entries
    /// (`ODP_PTE_*` bits | DMA address; 0 = not present, see [`ODP_PTE_FAULT_SENT`] and
    /// [`ODP_PTE_FAILED`]).
    pub odp: bool,
    /// A fast-registration region (`MR_FLAG_FAST_REG`); None for the others.
    pub fast_reg: Option<FastRegState>,
}

/// What a fast-registration region is between `WR_REG_MR`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastRegState {
    /// The most pages one `WR_REG_MR` may bind (`pbl.npages` at allocation).
    pub capacity: u32,
    /// Pages are bound (by a `WR_REG_MR`, until LOCAL_INV / SEND with invalidate): only then
    /// does the key reach memory. An invalid region answers like an unknown key.
    pub valid: bool,
}

/// Device-internal PTE bit of an on-demand region: a page fault event for this page is
/// outstanding (not posted again until the driver answers).
pub const ODP_PTE_FAULT_SENT: u64 = 1 << 2;
/// Device-internal PTE bit: the driver could not make the page present (`ODP_OP_FAIL`).
pub const ODP_PTE_FAILED: u64 = 1 << 3;
/// Low bits of a PTE that are not address bits.
const ODP_PTE_ALL_FLAGS: u64 = ODP_PTE_FLAGS | ODP_PTE_FAULT_SENT | ODP_PTE_FAILED;

impl Mr {
    /// The DMA address of page `page` for an access (`write` or not): on-demand regions check
    /// the page is present (and writable).
    pub(crate) fn page_addr(&self, page: usize, write: bool) -> Result<u64, AccessError> {
        let entry = *self.pages.get(page).ok_or(AccessError::OutOfBounds)?;
        if !self.odp {
            return Ok(entry);
        }
        let need = if write {
            ODP_PTE_PRESENT | ODP_PTE_WRITE
        } else {
            ODP_PTE_PRESENT
        };
        if entry & need == need {
            Ok(entry & !ODP_PTE_ALL_FLAGS)
        } else if entry & ODP_PTE_FAILED != 0 {
            Err(AccessError::PageFailed {
                key: self.key,
                page: page as u32,
            })
        } else {
            Err(AccessError::PageFault {
                key: self.key,
                page: page as u32,
                write,
                count: 1,
            })
        }
    }

    /// Page `page` for an access that needs pages up to `last`: a page fault names the pages
    /// from `page` to `last`.
    pub(crate) fn page_addr_upto(
        &self,
        page: usize,
        last: usize,
        write: bool,
    ) -> Result<u64, AccessError> {
        self.page_addr(page, write).map_err(|e| match e {
            AccessError::PageFault {
                key, page, write, ..
            } => AccessError::PageFault {
                key,
                page,
                write,
                count: ((last as u64 + 1).saturating_sub(u64::from(page)))
                    .clamp(1, u64::from(EQE_PAGE_FAULT_MAX_COUNT)) as u32,
            },
            e => e,
        })
    }

    /// Whether every page of `[va, va+len)` (inside the region, `len` > 0) is present for a
    /// read, without touching memory; the first missing page is the error.
    pub(crate) fn check_present(&self, va: u64, len: u64) -> Result<(), AccessError> {
        if !self.odp {
            return Ok(());
        }
        let first = ((va - self.iova + self.offset) >> self.page_shift) as usize;
        let last = ((va - self.iova + self.offset + len - 1) >> self.page_shift) as usize;
        for page in first..=last {
            self.page_addr_upto(page, last, false)?;
        }
        Ok(())
    }

    /// Whether `[va, va+len)` lies inside the region.
    pub(crate) fn contains(&self, va: u64, len: u64) -> bool {
        va.checked_add(len)
            .is_some_and(|end| va >= self.iova && end <= self.iova + self.length)
    }

    /// The DMA chunks of `[va, va+len)` for a read or a `write`, after the bounds check (and,
    /// for on-demand regions, the presence check of every page: nothing is touched unless all
    /// pages are there).
    pub(crate) fn chunks(&self, va: u64, len: u64, write: bool) -> Result<Chunks, AccessError> {
        if !self.contains(va, len) {
            return Err(AccessError::OutOfBounds);
        }
        if self.physical {
            return Ok(Chunks::One([(va, len)]));
        }
        let off = va - self.iova + self.offset;
        let last = ((off + len.max(1) - 1) >> self.page_shift) as usize;
        let psize = 1u64 << self.page_shift;
        let first = (off >> self.page_shift) as usize;
        if len > 0 && first == last {
            // Inside one page (every small message): one page lookup, no chunk merging. (No
            // bytes touch no page: an empty access looks nothing up, as below.)
            let base = self.page_addr_upto(first, last, write)?;
            return Ok(Chunks::One([(base + (off & (psize - 1)), len)]));
        }
        self.chunks_by_page(off, len, last, write)
    }

    /// [`Self::chunks`] page by page from offset `off` into the region's pages, merging
    /// contiguous pages: `last` is the last page the access needs.
    fn chunks_by_page(
        &self,
        mut off: u64,
        len: u64,
        last: usize,
        write: bool,
    ) -> Result<Chunks, AccessError> {
        let psize = 1u64 << self.page_shift;
        let mut out = Chunks::Many(Vec::new());
        let mut left = len;
        while left > 0 {
            let page = (off >> self.page_shift) as usize;
            let in_page = off & (psize - 1);
            let n = left.min(psize - in_page);
            let base = self.page_addr_upto(page, last, write)?;
            out.push(base + in_page, n);
            off += n;
            left -= n;
        }
        Ok(out)
    }
}

/// The DMA chunks `(address, length)` of an access, in order ([`Mr::chunks`]). Most accesses
/// are one contiguous chunk: that one is kept inline, with no allocation per access.
#[derive(Debug)]
pub(crate) enum Chunks {
    One([(u64, u64); 1]),
    Many(Vec<(u64, u64)>),
}

impl Chunks {
    /// Appends `n` bytes at `addr`, merged into the last chunk if they continue it.
    fn push(&mut self, addr: u64, n: u64) {
        match self {
            Chunks::One([(a, l)]) if *a + *l == addr => *l += n,
            Chunks::One([first]) => *self = Chunks::Many(vec![*first, (addr, n)]),
            Chunks::Many(v) => match v.last_mut() {
                Some((a, l)) if *a + *l == addr => *l += n,
                Some(_) => v.push((addr, n)),
                None => *self = Chunks::One([(addr, n)]),
            },
        }
    }
}

impl std::ops::Deref for Chunks {
    type Target = [(u64, u64)];

    fn deref(&self) -> &[(u64, u64)] {
        match self {
            Chunks::One(one) => one,
            Chunks::Many(many) => many,
        }
    }
}

/// A memory window: a window into one MR that a peer reaches through the window's rkey.
#[derive(Clone, Debug)]
pub struct Mw {
    pub pd: u32,
    /// `MW_TYPE_1` or `MW_TYPE_2`.
    pub mw_type: u8,
    /// The current rkey (`Key::window(index, variant)`).
    pub rkey: Key,
    pub binding: Option<MwBinding>,
}

#[derive(Clone, Copy, Debug)]
pub struct MwBinding {
    /// The MR (its lkey) the window looks into.
    pub mr: Key,
    pub addr: u64,
    pub length: u64,
    /// `ACCESS_REMOTE_*` the window grants.
    pub access: u32,
    /// Type 2: the only QP that may use (and remotely invalidate) the window.
    pub qpn: Option<Qpn>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks_of(pieces: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = Chunks::Many(Vec::new());
        for &(addr, n) in pieces {
            out.push(addr, n);
        }
        out.to_vec()
    }

    #[test]
    fn contiguous_pieces_merge_into_one_chunk_and_gaps_start_new_ones() {
        assert_eq!(chunks_of(&[]), vec![]);
        assert_eq!(chunks_of(&[(0x1000, 0x10)]), vec![(0x1000, 0x10)]);
        assert_eq!(
            chunks_of(&[(0x1000, 0x1000), (0x2000, 0x1000), (0x3000, 8)]),
            vec![(0x1000, 0x2008)]
        );
        assert_eq!(
            chunks_of(&[(0x1000, 0x1000), (0x8000, 0x1000), (0x9000, 4), (0x4000, 2)]),
            vec![(0x1000, 0x1000), (0x8000, 0x1004), (0x4000, 2)]
        );
    }

    /// The one-page shortcut of `chunks` answers as the page-by-page walk: same chunks, same
    /// error (bounds, an absent or read-only on-demand page, a failed one), for every access
    /// of up to 70 bytes at every offset of a three-page region whose pages are not contiguous.
    #[test]
    fn a_one_page_access_gets_the_chunks_and_errors_of_the_page_walk() {
        let page = |i: u64| 0x10_0000 + i * 0x3000;
        let plain = Mr {
            key: Key::from_raw(0x100),
            pd: 1,
            access: 0,
            iova: 0x7000_0010,
            length: 3 * 64 - 0x10 - 5,
            offset: 0x10,
            pages: (0..3).map(page).collect(),
            page_shift: 6,
            physical: false,
            odp: false,
            fast_reg: None,
        };
        let odp = Mr {
            odp: true,
            pages: vec![
                page(0) | ODP_PTE_PRESENT | ODP_PTE_WRITE,
                page(1) | ODP_PTE_PRESENT,
                ODP_PTE_FAILED,
            ],
            ..plain.clone()
        };
        let absent = Mr {
            pages: vec![page(0) | ODP_PTE_PRESENT | ODP_PTE_WRITE, 0, 0],
            ..odp.clone()
        };
        let mut one_page = 0;
        for mr in [&plain, &odp, &absent] {
            for va in mr.iova - 2..mr.iova + mr.length + 2 {
                for len in 0..70 {
                    for write in [false, true] {
                        let got = mr.chunks(va, len, write).map(|c| c.to_vec());
                        let walked = if mr.contains(va, len) {
                            let off = va - mr.iova + mr.offset;
                            let last = ((off + len.max(1) - 1) >> mr.page_shift) as usize;
                            one_page +=
                                usize::from(len > 0 && (off >> mr.page_shift) as usize == last);
                            mr.chunks_by_page(off, len, last, write).map(|c| c.to_vec())
                        } else {
                            Err(AccessError::OutOfBounds)
                        };
                        assert_eq!(got, walked, "va {va:#x} len {len} write {write}");
                    }
                }
            }
        }
        assert!(one_page > 1000, "the shortcut was taken {one_page} times");
    }

    /// What `chunks` must give for `[va, va+len)` of `mr`, from the region's definition in
    /// 128-bit arithmetic (no sum can wrap): out of bounds unless the range lies inside
    /// `[iova, iova + length)`, else the bytes page by page through the page list, merged
    /// where pages are contiguous, and out of bounds where the list has no such page. (An
    /// on-demand region's pages are all present here.)
    fn chunks_by_definition(mr: &Mr, va: u64, len: u64) -> Result<Vec<(u64, u64)>, AccessError> {
        let (va, len, iova) = (u128::from(va), u128::from(len), u128::from(mr.iova));
        if va < iova || va + len > iova + u128::from(mr.length) {
            return Err(AccessError::OutOfBounds);
        }
        let psize = 1u128 << mr.page_shift;
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut off = va - iova + u128::from(mr.offset);
        let end = off + len;
        while off < end {
            let entry = *mr
                .pages
                .get((off / psize) as usize)
                .ok_or(AccessError::OutOfBounds)?;
            let page = if mr.odp {
                entry & !ODP_PTE_ALL_FLAGS
            } else {
                entry
            };
            let n = (end - off).min(psize - off % psize);
            let addr = (u128::from(page) + off % psize) as u64;
            match out.last_mut() {
                Some((a, l)) if u128::from(*a) + u128::from(*l) == u128::from(addr) => {
                    *l += n as u64
                }
                _ => out.push((addr, n as u64)),
            }
            off += n;
        }
        Ok(out)
    }

    /// A region of three scattered 4 KiB pages, 0x10 bytes into the first.
    fn three_pages(iova: u64, length: u64) -> Mr {
        Mr {
            key: Key::from_raw(0x200),
            pd: 1,
            access: 0,
            iova,
            length,
            offset: 0x10,
            pages: vec![0x40_0000, 0x10_0000, 0x10_1000],
            page_shift: 12,
            physical: false,
            odp: false,
            fast_reg: None,
        }
    }

    /// A region that ends at the top of the address space (`iova + length == u64::MAX`, the
    /// most `region_fits` allows): an access whose end would pass `u64::MAX` is out of bounds,
    /// never wrapped to a low address, and the region's last bytes are reached through its
    /// last page.
    #[test]
    fn an_access_near_u64_max_is_out_of_bounds_never_wrapped() {
        let length = 3 * 4096 - 0x10 - 1;
        assert!(region_fits(u64::MAX - length, length));
        assert!(
            !region_fits(u64::MAX - length + 1, length),
            "one byte past u64::MAX"
        );
        assert!(!region_fits(0, DEV_MAX_MR_SIZE + 1));
        let top = three_pages(u64::MAX - length, length);
        assert!(pages_cover(top.offset, length, 3, 12));
        let odp = Mr {
            odp: true,
            pages: top
                .pages
                .iter()
                .map(|p| p | ODP_PTE_PRESENT | ODP_PTE_WRITE)
                .collect(),
            ..top.clone()
        };
        let lens = (0..70).chain([4096, length - 1, length, length + 1]);
        let lens: Vec<u64> = lens.chain((0..70).map(|k| u64::MAX - k)).collect();
        let mut reached = 0;
        for mr in [&top, &odp] {
            for va in (0..140)
                .map(|k| u64::MAX - k)
                .chain([top.iova - 1, top.iova])
            {
                for &len in &lens {
                    let want = chunks_by_definition(&top, va, len);
                    assert_eq!(
                        mr.contains(va, len),
                        want.is_ok(),
                        "va {va:#x} len {len:#x}"
                    );
                    let got = mr.chunks(va, len, true).map(|c| c.to_vec());
                    assert_eq!(got, want, "va {va:#x} len {len:#x} odp {}", mr.odp);
                    if want.is_ok() && len > 0 {
                        assert_eq!(mr.check_present(va, len), Ok(()));
                        reached += 1;
                    }
                }
            }
        }
        assert!(reached > 1000, "{reached} accesses inside the region");
        assert_eq!(
            top.chunks(u64::MAX - 1, 1, false).map(|c| c.to_vec()),
            Ok(vec![(0x10_1000 + 0xffe, 1)]),
            "the region's last byte is the last page's"
        );
        let physical = Mr {
            physical: true,
            pages: Vec::new(),
            ..top.clone()
        };
        assert_eq!(
            physical.chunks(u64::MAX - 8, 8, false).map(|c| c.to_vec()),
            Ok(vec![(u64::MAX - 8, 8)])
        );
        assert_eq!(
            physical.chunks(u64::MAX - 8, 9, false).map(|c| c.to_vec()),
            Err(AccessError::OutOfBounds),
            "a physical region's end is u64::MAX too"
        );
    }

    /// A page list shorter than the region claims (the registration checks refuse such a
    /// region; this is the data path's own guard): an access that needs a page past the
    /// list's end is out of bounds as a whole, with no chunk of the pages before it, pinned or
    /// on demand; the pages the list has still work.
    #[test]
    fn a_page_list_shorter_than_the_region_is_out_of_bounds_past_its_end() {
        let full = three_pages(0x7000_0000, 3 * 4096 - 0x10);
        let short = Mr {
            pages: full.pages[..2].to_vec(),
            ..full.clone()
        };
        let odp = Mr {
            odp: true,
            pages: short.pages.iter().map(|p| p | ODP_PTE_PRESENT).collect(),
            ..short.clone()
        };
        let empty = Mr {
            pages: Vec::new(),
            ..full.clone()
        };
        let second_page_end = full.iova + 2 * 4096 - 0x10;
        for mr in [&short, &odp, &empty] {
            for va in (full.iova..full.iova + full.length).step_by(61) {
                for len in [1, 8, 4096, 3 * 4096] {
                    let want = chunks_by_definition(mr, va, len);
                    assert_eq!(
                        mr.chunks(va, len, false).map(|c| c.to_vec()),
                        want,
                        "va {va:#x} len {len}"
                    );
                    if mr.contains(va, len) && va + len > second_page_end {
                        assert_eq!(want, Err(AccessError::OutOfBounds), "va {va:#x} len {len}");
                        if mr.odp {
                            assert_eq!(mr.check_present(va, len), Err(AccessError::OutOfBounds));
                        }
                    }
                }
            }
        }
        assert_eq!(
            short
                .chunks(full.iova, 2 * 4096 - 0x10, false)
                .map(|c| c.to_vec()),
            Ok(vec![(0x40_0010, 4096 - 0x10), (0x10_0000, 4096)]),
            "the pages the list has"
        );
        assert_eq!(
            short
                .chunks(full.iova, 2 * 4096 - 0xf, true)
                .map(|c| c.to_vec()),
            Err(AccessError::OutOfBounds),
            "one byte into the missing page"
        );
    }
}
