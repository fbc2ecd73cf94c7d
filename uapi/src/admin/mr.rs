//! Memory regions (REG_MR, on-demand paging updates) and memory windows (ALLOC_MW).

use super::super::ids::Key;
use super::super::queue::PageList;

/// Register a memory region.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RegMrCmd {
    pub pd: u32,
    /// `verbs::ACCESS_*`.
    pub access: u32,
    /// First virtual address of the region as seen in WQEs and by remote peers.
    pub iova: u64,
    pub length: u64,
    /// Data pages; `iova` maps to `offset_in_first_page` bytes into page 0.
    pub pbl: PageList,
    /// Byte offset of `iova` in the first page (user buffers need not be page aligned).
    pub offset_in_first_page: u32,
    /// `MR_FLAG_*`.
    pub flags: u32,
}
/// The region is guest-physical: `iova` is the DMA address itself, `pbl` is ignored (the
/// kernel's DMA MR / local_dma_lkey-like use).
pub const MR_FLAG_PHYSICAL: u32 = 1 << 0;
/// On-demand paging: `pbl.addr` is ignored, `pbl.npages` pages of `pbl.page_shift` =
/// `ROX_PAGE_SHIFT` describe the region and all start not present. The driver maps pages with
/// `ADMIN_OP_ODP_UPDATE`; an access to a page that is not present (or not writable, for a
/// write) posts `EQE_TYPE_PAGE_FAULT` and waits: a requester stalls its send queue, a responder
/// answers RNR NAK; a page the driver failed (`ODP_OP_FAIL`) makes the next access fail with
/// a protection / remote access error (then the page is not present again).
pub const MR_FLAG_ON_DEMAND: u32 = 1 << 1;
/// A fast-registration MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`): `pbl.npages` is its capacity
/// (the most pages one `verbs::WR_REG_MR` may bind, at most `DEV_MAX_FAST_REG_PAGES`); `iova`,
/// `length`, `access`, `pbl.addr`, `pbl.page_shift` and `offset_in_first_page` are ignored. The
/// key starts invalid (no access through it) until a `WR_REG_MR` on a QP of the same PD binds
/// pages to it; `WR_LOCAL_INV` or a remote `WR_SEND_WITH_INV` makes it invalid again.
pub const MR_FLAG_FAST_REG: u32 = 1 << 2;
/// Most pages a fast-registration MR may hold (`max_fast_reg_page_list_len`).
pub const DEV_MAX_FAST_REG_PAGES: u32 = 4096;

/// Update the translation of pages `[first_page, first_page + npages)` of on-demand region
/// `key` (its lkey). `ODP_OP_MAP`: `pages` is the DMA address of `npages` little-endian u64
/// entries, each `ODP_PTE_PRESENT | ODP_PTE_WRITE? | page DMA address` (an entry without
/// `ODP_PTE_PRESENT` leaves its page as it is); `npages <= ODP_MAX_UPDATE_PAGES`.
/// `ODP_OP_UNMAP`: the pages become not present (`pages` ignored). `ODP_OP_FAIL`: the pages
/// cannot be made present (the fault failed): the next access to each fails, after which the
/// page is not present again (a later access faults anew). Each op ends an outstanding page
/// fault of its pages (UNMAP of a not-present page just lets its access fault again).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct OdpUpdateCmd {
    pub key: Key,
    pub first_page: u32,
    pub npages: u32,
    /// `ODP_OP_*`.
    pub op: u32,
    pub pages: u64,
}
pub const ODP_OP_MAP: u32 = 1;
pub const ODP_OP_UNMAP: u32 = 2;
pub const ODP_OP_FAIL: u32 = 3;
/// Page table entry bits (a page is at least 4 KiB aligned, the low bits are free).
pub const ODP_PTE_PRESENT: u64 = 1 << 0;
pub const ODP_PTE_WRITE: u64 = 1 << 1;
pub const ODP_PTE_FLAGS: u64 = ODP_PTE_PRESENT | ODP_PTE_WRITE;
/// Most pages one `ODP_OP_MAP` carries (one 4 KiB page of entries).
pub const ODP_MAX_UPDATE_PAGES: u32 = 512;
const _: () = assert!(core::mem::size_of::<OdpUpdateCmd>() == 24);
const _: () = assert!(core::mem::size_of::<RegMrCmd>() == 48);

/// Allocate a memory window.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct AllocMwCmd {
    pub pd: u32,
    /// `verbs::MW_TYPE_1` or `verbs::MW_TYPE_2`.
    pub mw_type: u8,
    pub reserved: [u8; 3],
}
// Keys (MR lkey/rkey, window rkey): `super::ids::Key`. The device picks a random variant for
// every new MR and window, so keys cannot be guessed from one another.
