//! Device objects owned by the data-path thread (MRs, CQs, EQs, QPs, SRQs, the GID table) and
//! the [`DeviceEnv`] the transport engine works through: every memory access on behalf of a
//! work request is checked here against key, PD, access flags and MR bounds.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use super::sys::signal_irq;
use super::Shared;
use crate::dma::{DmaError, GuestMemory};
use crate::roce::{
    self, AccessError, AddressVector, AtomicOp, Completion, DeviceEnv, FastReg, FlushSpec, Gid,
    MwBind, RecvWr,
};
use rox_uapi::ids::{Key, Qpn};

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
pub fn load_page_list(mem: &GuestMemory, pl: &PageList) -> Result<Vec<u64>, u8> {
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
        mem.check(p, size).map_err(|_| ADMIN_STATUS_BAD_DMA)?;
    }
    Ok(pages)
}

/// Build a ring of `1 << log_depth` entries of `1 << entry_shift` bytes.
pub fn load_ring(
    mem: &GuestMemory,
    pl: &PageList,
    log_depth: u8,
    entry_shift: u32,
    max_log: u8,
) -> Result<Ring, u8> {
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
    fn page_addr(&self, page: usize, write: bool) -> Result<u64, AccessError> {
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
    fn page_addr_upto(&self, page: usize, last: usize, write: bool) -> Result<u64, AccessError> {
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
    fn check_present(&self, va: u64, len: u64) -> Result<(), AccessError> {
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
    fn contains(&self, va: u64, len: u64) -> bool {
        va.checked_add(len)
            .is_some_and(|end| va >= self.iova && end <= self.iova + self.length)
    }

    /// The DMA chunks of `[va, va+len)` for a read or a `write`, after the bounds check (and,
    /// for on-demand regions, the presence check of every page: nothing is touched unless all
    /// pages are there).
    fn chunks(&self, va: u64, len: u64, write: bool) -> Result<Vec<(u64, u64)>, AccessError> {
        if !self.contains(va, len) {
            return Err(AccessError::OutOfBounds);
        }
        if self.physical {
            return Ok(vec![(va, len)]);
        }
        let mut out = Vec::new();
        let mut off = va - self.iova + self.offset;
        let last = ((off + len.max(1) - 1) >> self.page_shift) as usize;
        let mut left = len;
        let psize = 1u64 << self.page_shift;
        while left > 0 {
            let page = (off >> self.page_shift) as usize;
            let in_page = off & (psize - 1);
            let n = left.min(psize - in_page);
            let base = self.page_addr_upto(page, last, write)?;
            match out.last_mut() {
                Some((a, l)) if *a + *l == base + in_page => *l += n,
                _ => out.push((base + in_page, n)),
            }
            off += n;
            left -= n;
        }
        Ok(out)
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

#[derive(Debug)]
pub struct Cq {
    pub ring: Ring,
    pub eqn: u32,
    pub db_page: u32,
    pub db_slot: u32,
    /// Device producer index (free-running).
    pub pi: u32,
    pub arm_seq: u32,
    /// 0, CQ_ARM_NEXT or CQ_ARM_SOLICITED.
    pub armed: u32,
    /// Overflowed or unreachable: no more CQEs.
    pub error: bool,
    /// QPs using this CQ.
    pub users: u32,
}

#[derive(Debug)]
pub struct Eq {
    pub base: u64,
    pub depth: u32,
    pub pi: u32,
    /// Consumer index reported by the driver (mod 2^31).
    pub ci: u32,
    pub armed: bool,
}

#[derive(Debug)]
pub struct Srq {
    pub pd: u32,
    pub ring: Ring,
    pub db_page: u32,
    pub db_slot: u32,
    pub ci: u32,
    pub limit: u32,
    pub users: u32,
    pub error: bool,
}

#[derive(Debug)]
pub struct Qp {
    pub qpn: Qpn,
    pub qp_type: u8,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: u32,
    pub sq: Ring,
    pub rq: Option<Ring>,
    pub db_page: u32,
    pub db_slot: u32,
    pub sq_sig_all: bool,
    /// Next SQ WQE the device fetches.
    pub sq_ci: u32,
    /// Next RQ WQE the device consumes.
    pub rq_ci: u32,
    /// Last RQ producer index seen (to tell the engine about new receives).
    pub rq_pi_seen: u32,
    /// The state and attributes as last modified (the engine may move it to ERR by itself).
    pub attr: QpAttr,
    /// Stopped consuming its queues after a device-detected error (wild index, bad WQE).
    pub broken: bool,
}

/// Counters by `STAT_*` index.
pub type Stats = [u64; STATS_COUNT];

/// Everything the engine's environment touches.
pub struct Hw {
    pub shared: Arc<Shared>,
    pub mem: Arc<GuestMemory>,
    pub epoch: Instant,
    pub mac: [u8; 6],
    pub gids: [Option<Gid>; GID_TABLE_LEN as usize],
    /// MRs by key index ([`Key::index`]): an index names one MR whatever the variant part
    /// of its key; lookups compare the whole key ([`Hw::mr`]).
    pub mrs: HashMap<u32, Mr>,
    /// Memory windows by rkey index ([`Key::index`]).
    pub mws: HashMap<u32, Mw>,
    pub next_mw: u32,
    pub cqs: HashMap<u32, Cq>,
    pub qps: HashMap<Qpn, Qp>,
    pub srqs: HashMap<u32, Srq>,
    pub eqs: Vec<Option<Eq>>,
    /// (page, slot) -> in use.
    pub doorbells_used: HashMap<(u32, u32), ()>,
    /// Packets to local GIDs, fed back into the engine by the data path.
    pub loopback: VecDeque<Vec<u8>>,
    /// RoCEv2 IP packets for the port, with their destination MAC.
    pub outbound: Vec<([u8; 6], Vec<u8>)>,
    /// Async events (type, QPN) the engine caused during the current admin command or pass,
    /// posted after it by [`Hw::post_deferred_events`].
    pub deferred_events: Vec<(u8, Qpn)>,
    /// QPs whose receive queue turned out unusable while the engine was taking a WQE from it
    /// (`VENDOR_ERR_*` why): the data path makes them fatal once the engine call returned.
    pub fatal_qps: Vec<(Qpn, u16)>,
    /// `PORT_ACTIVE` or `PORT_DOWN`, as the driver last reported its netdev's link.
    pub port_state: u8,
    /// Packets received and dropped while the port was down.
    pub rx_port_down_drops: u64,
    /// The device has a port: packets to other GIDs go out on it (packets to its own GIDs
    /// never reach the wire either way).
    pub has_port: bool,
    /// Multicast groups: group GID -> attached QPNs, in attach order.
    pub mcast: HashMap<Gid, Vec<Qpn>>,
    pub stats: Stats,
    /// Next MR key index to try (`alloc_key` in admin.rs).
    pub next_mr_index: u32,
    pub next_cq: u32,
    /// Next QPN to try (`next_id` in admin.rs).
    pub next_qpn: u32,
    pub next_srq: u32,
}

/// The first QPN handed to ordinary QPs (0 and 1 are SMI/GSI).
pub const FIRST_QPN: Qpn = Qpn::new(2).unwrap();

/// What an invalidation (LOCAL_INV, SEND with invalidate) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InvalidationTarget {
    /// A bound type 2 window (its index).
    Window(u32),
    /// A valid fast-registration region (its index).
    Region(u32),
}

impl Hw {
    pub fn new(shared: Arc<Shared>, mac: [u8; 6]) -> Hw {
        let mem = shared.mem();
        Hw {
            shared,
            mem,
            epoch: Instant::now(),
            mac,
            gids: [None; GID_TABLE_LEN as usize],
            mrs: HashMap::new(),
            mws: HashMap::new(),
            next_mw: 1,
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashMap::new(),
            eqs: (0..MAX_EQS).map(|_| None).collect(),
            doorbells_used: HashMap::new(),
            loopback: VecDeque::new(),
            outbound: Vec::new(),
            deferred_events: Vec::new(),
            fatal_qps: Vec::new(),
            port_state: PORT_ACTIVE,
            rx_port_down_drops: 0,
            has_port: false,
            mcast: HashMap::new(),
            stats: [0; STATS_COUNT],
            next_mr_index: 1,
            next_cq: 1,
            next_qpn: FIRST_QPN.get(),
            next_srq: 1,
        }
    }

    pub fn port_up(&self) -> bool {
        self.port_state == PORT_ACTIVE
    }

    /// `gid` is in this device's GID table.
    pub fn is_own_gid(&self, gid: &Gid) -> bool {
        self.gids.iter().any(|g| g.as_ref() == Some(gid))
    }

    /// `gid` is a multicast group with at least one QP of this device attached.
    pub fn has_mcast_group(&self, gid: &Gid) -> bool {
        self.mcast.contains_key(gid)
    }

    /// QP attachments over all groups.
    pub fn mcast_attachments(&self) -> usize {
        self.mcast.values().map(Vec::len).sum()
    }

    pub fn gid_valid(&self) -> Vec<bool> {
        self.gids.iter().map(|g| g.is_some()).collect()
    }

    // ---- interrupts and events -------------------------------------------------------------

    pub fn fire_vector(&mut self, vector: u32) {
        let irqs = self.shared.irqs.lock().expect("irq lock");
        if let Some(Some(f)) = irqs.get(vector as usize) {
            signal_irq(f);
            self.stats[STAT_INTERRUPTS] += 1;
        }
    }

    /// Enter the fatal state: the driver sees STATUS_FATAL and must reset.
    pub fn set_fatal(&mut self, code: u32) {
        if self.shared.is_fatal() {
            return;
        }
        log::error!("rox-nic: fatal error code {code}");
        self.shared.fatal_code.store(code, Ordering::Release);
        self.shared.status.fetch_or(STATUS_FATAL, Ordering::AcqRel);
        if code != FATAL_EQ_DMA && code != FATAL_EQ_OVERFLOW {
            self.post_event_raw(EQ_ADMIN_ASYNC, EQE_TYPE_DEVICE_FATAL, 0, code);
        }
        // Vector 0 fires even if EQ 0 is unusable so the driver looks at STATUS.
        self.fire_vector(EQ_ADMIN_ASYNC);
    }

    /// Write one EQE to EQ `eqn` and interrupt if the EQ is armed.
    pub fn post_event(&mut self, eqn: u32, event_type: u8, handle: u32, aux: u32) {
        if self.shared.is_fatal() {
            return;
        }
        self.post_event_raw(eqn, event_type, handle, aux);
    }

    fn post_event_raw(&mut self, eqn: u32, event_type: u8, handle: u32, aux: u32) {
        self.post_eqe_raw(
            eqn,
            Eqe {
                event_type,
                handle,
                aux,
                ..Default::default()
            },
        );
    }

    /// Posts `eqe` (its owner bit is set here) to EQ `eqn`, unless the device is fatal.
    pub fn post_eqe(&mut self, eqn: u32, eqe: Eqe) {
        if self.shared.is_fatal() {
            return;
        }
        self.post_eqe_raw(eqn, eqe);
    }

    fn post_eqe_raw(&mut self, eqn: u32, eqe: Eqe) {
        let Some(Some(eq)) = self.eqs.get_mut(eqn as usize) else {
            return;
        };
        let used = eq.pi.wrapping_sub(eq.ci) & EQ_DB_CI_MASK;
        if used >= eq.depth {
            self.set_fatal(FATAL_EQ_OVERFLOW);
            return;
        }
        let eqe = Eqe {
            owner: owner_for(eq.pi, eq.depth),
            ..eqe
        };
        let addr = eq.base + (((eq.pi & (eq.depth - 1)) as u64) << EQE_SHIFT);
        if self.mem.write_entry_owner_last(addr, &eqe).is_err() {
            self.set_fatal(FATAL_EQ_DMA);
            return;
        }
        eq.pi = eq.pi.wrapping_add(1);
        let fire = std::mem::take(&mut eq.armed);
        self.stats[STAT_EQES] += 1;
        if fire {
            self.fire_vector(eqn);
        }
    }

    /// Driver wrote an EQ doorbell.
    pub fn eq_doorbell(&mut self, eqn: u32, value: u32) {
        let Some(Some(eq)) = self.eqs.get_mut(eqn as usize) else {
            return;
        };
        let db = EqDoorbell::from_bits(value);
        eq.ci = db.ci;
        if db.arm {
            if (eq.pi & EQ_DB_CI_MASK) != eq.ci {
                eq.armed = false;
                self.fire_vector(eqn);
            } else {
                eq.armed = true;
            }
        }
    }

    pub fn async_event(&mut self, event_type: u8, handle: u32, aux: u32) {
        self.post_event(EQ_ADMIN_ASYNC, event_type, handle, aux);
    }

    /// Posts the async events the engine caused. They wait so that a modify's own admin
    /// completion comes first, and SQ_DRAINED is posted only if software asked for it when it
    /// moved the QP to SQD (`en_sqd_async_notify`, known once the modify is done).
    pub fn post_deferred_events(&mut self) {
        for (event_type, qpn) in std::mem::take(&mut self.deferred_events) {
            let wanted = event_type != EQE_TYPE_SQ_DRAINED
                || self
                    .qps
                    .get(&qpn)
                    .is_some_and(|qp| qp.attr.en_sqd_async_notify != 0);
            if wanted {
                self.async_event(event_type, qpn.get(), 0);
            }
        }
    }

    // ---- completions -----------------------------------------------------------------------

    /// Write a CQE to CQ `cq_id`; handles overflow, arming and the completion event.
    pub fn write_cqe(&mut self, cq_id: u32, mut cqe: Cqe, solicited: bool) {
        let Some(cq) = self.cqs.get_mut(&cq_id) else {
            return;
        };
        if cq.error {
            return;
        }
        let slot = self.shared.doorbells.slot(cq.db_page, cq.db_slot);
        if cq.pi.wrapping_sub(slot.a) >= cq.ring.depth {
            cq.error = true;
            self.async_event(EQE_TYPE_CQ_ERROR, cq_id, 0);
            return;
        }
        cqe.owner = owner_for(cq.pi, cq.ring.depth);
        if self
            .mem
            .write_entry_owner_last(cq.ring.entry_addr(cq.pi), &cqe)
            .is_err()
        {
            cq.error = true;
            self.async_event(EQE_TYPE_CQ_ERROR, cq_id, VENDOR_ERR_BAD_DMA as u32);
            return;
        }
        cq.pi = cq.pi.wrapping_add(1);
        self.stats[STAT_CQES] += 1;
        Self::update_arm(cq, slot.b);
        let trigger = match cq.armed {
            CQ_ARM_NEXT => true,
            CQ_ARM_SOLICITED => solicited || cqe.status != WC_SUCCESS,
            _ => false,
        };
        if trigger {
            cq.armed = 0;
            let eqn = cq.eqn;
            self.post_event(eqn, EQE_TYPE_COMPLETION, cq_id, 0);
        }
    }

    /// Pick up a new arm request from the CQ's arm word.
    pub fn update_arm(cq: &mut Cq, word: u32) {
        let arm = CqArm::from_bits(word);
        if arm.seq != cq.arm_seq {
            cq.arm_seq = arm.seq;
            cq.armed = arm.arm_type;
        }
    }

    // ---- memory access with protection -----------------------------------------------------

    /// The MR a remote request reaches through `key` for `[va, va+len)`: the MR itself, or the
    /// MR a memory window is bound to (window in `pd`, bound, type 2 bound to `qpn`, granting
    /// `need`, containing the range).
    fn remote_mr(
        &self,
        pd: u32,
        qpn: Qpn,
        key: Key,
        need: u32,
        va: u64,
        len: u64,
    ) -> Result<&Mr, AccessError> {
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

    fn remote_read(
        &self,
        pd: u32,
        qpn: Qpn,
        key: Key,
        va: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let mr = self.remote_mr(pd, qpn, key, ACCESS_REMOTE_READ, va, buf.len() as u64)?;
        self.read_through(mr, va, buf)
    }

    fn remote_write(
        &self,
        pd: u32,
        qpn: Qpn,
        key: Key,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let mr = self.remote_mr(pd, qpn, key, ACCESS_REMOTE_WRITE, va, data.len() as u64)?;
        self.write_through(mr, va, data)
    }

    /// Binds a memory window (BIND_MW work request of QP `qpn` in `pd`).
    pub fn do_bind_mw(&mut self, pd: u32, qpn: Qpn, bind: &MwBind) -> Result<(), AccessError> {
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

    /// Invalidates `rkey` (see [`Hw::invalidation_target`]); a failure changes nothing.
    pub fn do_invalidate(
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
    pub fn do_fast_register(
        &mut self,
        pd: u32,
        _qpn: Qpn,
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
        let pages = load_page_list(&self.mem, &list).map_err(|_| AccessError::OutOfBounds)?;
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

    /// The MR `key` names: it exists, the whole key matches (variant included) and, for a
    /// fast-registration region, pages are bound. Every access through an MR key starts here.
    pub fn mr(&self, key: Key) -> Result<&Mr, AccessError> {
        self.mrs
            .get(&key.index())
            .filter(|mr| mr.key == key && mr.fast_reg.is_none_or(|f| f.valid))
            .ok_or(AccessError::InvalidKey)
    }

    fn mr_for(&self, pd: u32, key: Key, need: u32) -> Result<&Mr, AccessError> {
        let mr = self.mr(key)?;
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if mr.access & need != need {
            return Err(AccessError::AccessDenied);
        }
        Ok(mr)
    }

    fn mr_read(
        &self,
        pd: u32,
        key: Key,
        need: u32,
        va: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let mr = self.mr_for(pd, key, need)?;
        self.read_through(mr, va, buf)
    }

    fn read_through(&self, mr: &Mr, va: u64, buf: &mut [u8]) -> Result<(), AccessError> {
        let mut done = 0usize;
        for (addr, n) in mr.chunks(va, buf.len() as u64, false)? {
            let n = n as usize;
            self.mem
                .read(addr, &mut buf[done..done + n])
                .map_err(|_: DmaError| AccessError::OutOfBounds)?;
            done += n;
        }
        Ok(())
    }

    fn mr_write(
        &self,
        pd: u32,
        key: Key,
        need: u32,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let mr = self.mr_for(pd, key, need)?;
        self.write_through(mr, va, data)
    }

    fn write_through(&self, mr: &Mr, va: u64, data: &[u8]) -> Result<(), AccessError> {
        let chunks = mr.chunks(va, data.len() as u64, true)?;
        // Check every chunk first so a failing write changes nothing.
        for &(addr, n) in &chunks {
            self.mem
                .check_access(addr, n, true)
                .map_err(|_| AccessError::OutOfBounds)?;
        }
        let mut done = 0usize;
        for (addr, n) in chunks {
            let n = n as usize;
            self.mem
                .write(addr, &data[done..done + n])
                .map_err(|_| AccessError::OutOfBounds)?;
            done += n;
        }
        Ok(())
    }

    // ---- on-demand paging ---------------------------------------------------------------

    /// Passes `r` on; a page fault posts `EQE_TYPE_PAGE_FAULT` for the page unless one is
    /// outstanding already or EQ 0 is half full (then the access just waits and retries: the
    /// driver's own admin completions must always find room in EQ 0). A failed page fails
    /// this access and becomes not present again (a later access faults it anew).
    fn page_fault<T>(&mut self, r: Result<T, AccessError>) -> Result<T, AccessError> {
        match r {
            Err(AccessError::PageFault {
                key,
                page,
                write,
                count,
            }) => {
                let room = match self.eqs.get(EQ_ADMIN_ASYNC as usize) {
                    Some(Some(eq)) => (eq.pi.wrapping_sub(eq.ci) & EQ_DB_CI_MASK) < eq.depth / 2,
                    _ => false,
                };
                let need = if write {
                    ODP_PTE_PRESENT | ODP_PTE_WRITE
                } else {
                    ODP_PTE_PRESENT
                };
                let pages = self
                    .mrs
                    .get_mut(&key.index())
                    .filter(|mr| mr.key == key)
                    .map(|mr| &mut mr.pages[..]);
                if let Some(pages) = pages.filter(|p| (page as usize) < p.len()) {
                    if pages[page as usize] & ODP_PTE_FAULT_SENT == 0 && room {
                        // The fault covers every page of the access that is missing: none of
                        // them faults again until the driver's answer (which ends the fault
                        // of each of them: MAP, UNMAP or FAIL).
                        let end = (page as usize + count as usize).min(pages.len());
                        for entry in &mut pages[page as usize..end] {
                            if *entry & need != need && *entry & ODP_PTE_FAILED == 0 {
                                *entry |= ODP_PTE_FAULT_SENT;
                            }
                        }
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
                }
                r
            }
            Err(AccessError::PageFailed { key, page }) => {
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
                Err(AccessError::AccessDenied)
            }
            r => r,
        }
    }

    // ---- receive queues --------------------------------------------------------------------

    fn decode_recv(&self, w: &RqWqe) -> Option<RecvWr> {
        if w.num_sge as u32 > RQ_MAX_SGE {
            return None;
        }
        let sges = w.sge[..w.num_sge as usize]
            .iter()
            .map(|s| roce::Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect();
        Some(RecvWr {
            wr_id: w.wr_id,
            sges,
        })
    }

    fn pop_srq(&mut self, srq_id: u32) -> Option<RecvWr> {
        let srq = self.srqs.get_mut(&srq_id)?;
        if srq.error {
            return None;
        }
        let pi = self.shared.doorbells.slot(srq.db_page, srq.db_slot).a;
        let avail = match posted_entries(pi, srq.ci, srq.ring.depth) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(WildIndex) => {
                srq.error = true;
                self.async_event(EQE_TYPE_SRQ_ERROR, srq_id, VENDOR_ERR_WILD_INDEX as u32);
                return None;
            }
        };
        let w: Result<RqWqe, _> = self.mem.read_obj(srq.ring.entry_addr(srq.ci));
        srq.ci = srq.ci.wrapping_add(1);
        let left = avail - 1;
        let fire_limit = srq.limit != 0 && left < srq.limit;
        if fire_limit {
            srq.limit = 0;
        }
        let wr = match w {
            Ok(w) => self.decode_recv(&w),
            Err(_) => None,
        };
        if wr.is_none() {
            if let Some(srq) = self.srqs.get_mut(&srq_id) {
                srq.error = true;
            }
            self.async_event(EQE_TYPE_SRQ_ERROR, srq_id, VENDOR_ERR_BAD_SGE_COUNT as u32);
        }
        if fire_limit {
            self.async_event(EQE_TYPE_SRQ_LIMIT, srq_id, 0);
        }
        self.stats[STAT_RECV_WQES] += wr.is_some() as u64;
        wr
    }

    fn pop_rq(&mut self, qpn: Qpn) -> Option<RecvWr> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.broken {
            return None;
        }
        let rq = qp.rq.as_ref()?;
        let pi = self.shared.doorbells.slot(qp.db_page, qp.db_slot).b;
        match posted_entries(pi, qp.rq_ci, rq.depth) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(WildIndex) => {
                qp.broken = true;
                self.fatal_qps.push((qpn, VENDOR_ERR_WILD_INDEX));
                return None;
            }
        }
        let w: Result<RqWqe, _> = self.mem.read_obj(rq.entry_addr(qp.rq_ci));
        qp.rq_ci = qp.rq_ci.wrapping_add(1);
        let wr = w.ok().and_then(|w| self.decode_recv(&w));
        if wr.is_none() {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.broken = true;
            }
            self.fatal_qps.push((qpn, VENDOR_ERR_BAD_SGE_COUNT));
        } else {
            self.stats[STAT_RECV_WQES] += 1;
        }
        wr
    }
}

impl DeviceEnv for Hw {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn multicast_members(&self, group: &Gid) -> Vec<Qpn> {
        self.mcast.get(group).cloned().unwrap_or_default()
    }

    fn multicast_copy(&mut self) {
        self.stats[STAT_RX_MCAST_COPIES] += 1;
    }

    fn read_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let r = self.mr_read(pd, lkey, 0, addr, buf);
        self.page_fault(r)
    }

    fn write_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let r = self.mr_write(pd, lkey, ACCESS_LOCAL_WRITE, addr, data);
        self.page_fault(r)
    }

    fn read_remote(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        va: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let r = self.remote_read(pd, qpn, rkey, va, buf);
        self.page_fault(r)
    }

    fn write_remote(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let r = self.remote_write(pd, qpn, rkey, va, data);
        self.page_fault(r)
    }

    fn check_remote_read(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        va: u64,
        len: u64,
    ) -> Result<(), AccessError> {
        let r = self
            .remote_mr(pd, qpn, rkey, ACCESS_REMOTE_READ, va, len)
            .and_then(|mr| {
                if !mr.contains(va, len) {
                    return Err(AccessError::OutOfBounds);
                }
                // Pinned regions: the bounds suffice (every page of the list was checked at
                // registration); on-demand regions: every page must be present.
                mr.check_present(va, len)
            });
        self.page_fault(r)
    }

    fn check_remote_write(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        va: u64,
        len: u64,
    ) -> Result<(), AccessError> {
        let mr = self.remote_mr(pd, qpn, rkey, ACCESS_REMOTE_WRITE, va, len)?;
        if mr.contains(va, len) {
            Ok(())
        } else {
            Err(AccessError::OutOfBounds)
        }
    }

    fn bind_mw(&mut self, pd: u32, qpn: Qpn, bind: &MwBind) -> Result<(), AccessError> {
        self.do_bind_mw(pd, qpn, bind)
    }

    fn fast_register(&mut self, pd: u32, qpn: Qpn, reg: &FastReg) -> Result<(), AccessError> {
        self.do_fast_register(pd, qpn, reg)
    }

    fn invalidate(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        self.do_invalidate(pd, qpn, rkey, remote)
    }

    fn check_invalidate(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        self.invalidation_target(pd, qpn, rkey, remote).map(|_| ())
    }

    fn atomic_remote(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, AccessError> {
        if !va.is_multiple_of(ATOMIC_SIZE as u64) {
            return Err(AccessError::Misaligned);
        }
        let need = match op {
            AtomicOp::Write { .. } => ACCESS_REMOTE_WRITE,
            AtomicOp::CompareSwap { .. } | AtomicOp::FetchAdd { .. } => ACCESS_REMOTE_ATOMIC,
        };
        let mr = self.remote_mr(pd, qpn, rkey, need, va, ATOMIC_SIZE as u64)?;
        let chunks = mr.chunks(va, ATOMIC_SIZE as u64, true);
        let chunks = self.page_fault(chunks)?;
        let [(addr, _)] = chunks[..] else {
            return Err(AccessError::OutOfBounds);
        };
        // A real atomic on guest memory: atomic with respect to the guest's CPUs too.
        let cell = self
            .mem
            .atomic_u64(addr)
            .map_err(|_| AccessError::OutOfBounds)?;
        Ok(match op {
            AtomicOp::CompareSwap { compare, swap } => {
                match cell.compare_exchange(
                    compare.to_le(),
                    swap.to_le(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => u64::from_le(v),
                }
            }
            AtomicOp::FetchAdd { add } => {
                // Guest memory is little-endian like the host (x86); fetch_add is exact.
                u64::from_le(cell.fetch_add(add, Ordering::AcqRel))
            }
            // The value's bytes in memory order (the requester sent them as they were).
            AtomicOp::Write { value } => cell.swap(value, Ordering::AcqRel),
        })
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
        let need = flush.required_access();
        if rkey.is_window() {
            // Windows grant no FLUSH access.
            return Err(AccessError::AccessDenied);
        }
        let mr = self.mr_for(pd, rkey, need)?;
        // Only the range matters (the bytes were placed already): pages of an on-demand
        // region need not be present.
        if !whole_mr && !mr.contains(va, u64::from(len)) {
            return Err(AccessError::OutOfBounds);
        }
        // Every write of this device went straight into guest RAM (a shared mapping): a full
        // fence makes them visible to every CPU before the response leaves. rox has no
        // persistent memory, so no region grants FLUSH_PERSISTENT.
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    fn pop_recv(&mut self, qpn: Qpn) -> Option<RecvWr> {
        let srq = self.qps.get(&qpn)?.srq;
        if srq != SRQ_NONE {
            self.pop_srq(srq)
        } else {
            self.pop_rq(qpn)
        }
    }

    fn complete(&mut self, c: Completion) {
        let Some(qp) = self.qps.get(&c.qp_num) else {
            return;
        };
        let cq = if c.is_recv { qp.recv_cq } else { qp.send_cq };
        let cqe = Cqe {
            wr_id: c.wr_id,
            byte_len: c.byte_len,
            // Immediate data travels in network order, an invalidated rkey in host order.
            imm_data: if c.wc_flags & WC_FLAG_WITH_INV != 0 {
                c.imm
            } else {
                c.imm.to_be()
            },
            qp_num: c.qp_num,
            src_qp: c.src_qp,
            status: c.status as u8,
            opcode: c.opcode as u8,
            wc_flags: c.wc_flags,
            vendor_err: c.vendor_err,
            network_hdr: c.network_hdr,
            ..Default::default()
        };
        self.write_cqe(cq, cqe, c.solicited);
    }

    fn sq_drained(&mut self, qpn: Qpn) {
        // A modify to SQD with nothing in flight drains at once: deferred so the driver sees
        // its modify complete before the event.
        self.deferred_events.push((EQE_TYPE_SQ_DRAINED, qpn));
    }

    fn qp_entered_error(&mut self, qpn: Qpn) {
        // No more receive WQEs of this QP will be taken from its SRQ (IBA 11.6.3.2).
        if self.qps.get(&qpn).is_some_and(|qp| qp.srq != SRQ_NONE) {
            self.deferred_events.push((EQE_TYPE_QP_LAST_WQE, qpn));
        }
    }

    fn transmit(&mut self, av: &AddressVector, packet: Vec<u8>) {
        if !self.port_up() {
            // No link: the packet is lost like on a real wire (RC retransmits later).
            return;
        }
        self.stats[STAT_TX_PACKETS] += 1;
        self.stats[STAT_TX_BYTES] += packet.len() as u64;
        if self.is_own_gid(&av.dgid) {
            // Same-device QP to QP: looped back inside the device, never on the wire.
            self.loopback.push_back(packet);
            return;
        }
        if self.has_mcast_group(&av.dgid) {
            // Like mlx5 (and rdma_rxe through IP multicast loopback), a packet to a group
            // reaches this device's own attached QPs too, the sender included (IBA leaves
            // the sender's copy to the CA; nothing here asks to block it). It still goes
            // out on the port for the other members.
            self.loopback.push_back(packet.clone());
        }
        if !self.has_port {
            log::debug!("rox-nic: no port, dropping packet to a remote GID");
        } else if av.dmac == [0; 6] {
            if self.stats[STAT_PORT_DROP_NO_DMAC] == 0 {
                log::warn!(
                    "rox-nic: dropping packets to a GID of another device without a resolved \
                     destination MAC (logged once; counter port_drop_no_dmac)"
                );
            }
            self.stats[STAT_PORT_DROP_NO_DMAC] += 1;
        } else {
            self.outbound.push((av.dmac, packet));
        }
    }
}
