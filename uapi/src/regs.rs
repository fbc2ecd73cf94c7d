//! PCI identity, BAR0 control registers, the doorbell BAR and the arm/wake protocol.
//!
//! BAR0 (trapped, 16 KiB): page 0 control registers, page 1 the wake page (the only thing in it
//! is the wake register; the kernel may map this page into user processes), page 2 the MSI-X
//! table, page 3 the MSI-X PBA. Every BAR0 access is a vfio-user socket round trip (~10 us), so
//! nothing on the data path touches BAR0 except the wake register, and that only when the
//! device has said it is idle.
//!
//! BAR2 (memory-mapped, no VM exits): `DB_PAGE_COUNT` doorbell pages of 4 KiB, see [`DbPage`].

/// PCI vendor id: ASCII "RO".
pub const PCI_VENDOR_ID: u16 = 0x524f;
/// PCI device id of the rox RoCEv2 NIC.
pub const PCI_DEVICE_ID: u16 = 0x0001;
pub const PCI_SUBSYSTEM_VENDOR_ID: u16 = PCI_VENDOR_ID;
pub const PCI_SUBSYSTEM_ID: u16 = 0x0001;
pub const PCI_REVISION: u8 = 1;
/// Class code: network controller (0x02), Ethernet (0x00), prog-if 0.
pub const PCI_CLASS_CODE: u32 = 0x02_00_00;

/// Size of one page in every rox structure (doorbell pages, DMA page lists, queue pages).
pub const ROX_PAGE_SHIFT: u32 = 12;
pub const ROX_PAGE_SIZE: usize = 1 << ROX_PAGE_SHIFT;

// ---------------------------------------------------------------------------------------------
// BARs
// ---------------------------------------------------------------------------------------------

/// BAR index of the control registers (64-bit memory BAR, trapped).
pub const BAR_CTRL: u32 = 0;
pub const BAR_CTRL_SIZE: u64 = 0x4000;
/// Offset in BAR0 of the wake page (one page, only [`WAKE_REG`] is meaningful).
pub const WAKE_PAGE_OFFSET: u64 = 0x1000;
/// The wake register: any 32-bit write wakes a sleeping device. Writing the index of the
/// doorbell page that has news is customary (the device logs it) but not required.
pub const WAKE_REG: u64 = WAKE_PAGE_OFFSET;
/// MSI-X table offset in BAR0 (16 bytes per vector, emulated by QEMU's vfio-pci).
pub const MSIX_TABLE_OFFSET: u32 = 0x2000;
/// MSI-X pending bit array offset in BAR0.
pub const MSIX_PBA_OFFSET: u32 = 0x3000;

/// BAR index of the doorbell pages (64-bit memory BAR, mmappable as one sparse area).
pub const BAR_DB: u32 = 2;
/// Number of 4 KiB doorbell pages. Page [`DB_PAGE_KERNEL`] belongs to the kernel driver
/// (its own QPs/CQs); each user context gets one of the others.
pub const DB_PAGE_COUNT: u32 = 256;
pub const BAR_DB_SIZE: u64 = DB_PAGE_COUNT as u64 * ROX_PAGE_SIZE as u64;
pub const DB_PAGE_KERNEL: u32 = 0;

// ---------------------------------------------------------------------------------------------
// MSI-X
// ---------------------------------------------------------------------------------------------

/// Number of MSI-X vectors. Vector n serves event queue n: vector 0 / EQ 0 carries admin
/// completions and async events; vectors 1.. carry completion events.
pub const MSIX_VECTORS: u32 = 8;
/// Event queues, one per vector.
pub const MAX_EQS: u32 = MSIX_VECTORS;
/// The event queue of admin completions and async events.
pub const EQ_ADMIN_ASYNC: u32 = 0;

// ---------------------------------------------------------------------------------------------
// BAR0 page 0: control registers (all 32-bit, little-endian; 64-bit addresses are LO/HI pairs)
// ---------------------------------------------------------------------------------------------

/// RO: interface version, `ROX_VERSION` (lib.rs).
pub const REG_VERSION: u64 = 0x000;
/// RO: capability bits `CAP_*`.
pub const REG_CAPS: u64 = 0x004;
/// WO: write [`RESET_VALUE`] to reset the device: every QP/CQ/SRQ/MR/EQ and the admin queue is
/// forgotten, the fatal state is cleared. `STATUS_READY` reads 0 until the reset is complete.
pub const REG_RESET: u64 = 0x008;
/// RO: `STATUS_*` bits.
pub const REG_STATUS: u64 = 0x00c;
/// RO: why the device is in the fatal state, `FATAL_*` (0 when not fatal).
pub const REG_FATAL_CODE: u64 = 0x010;
/// RO: number of doorbell pages, [`DB_PAGE_COUNT`].
pub const REG_DB_PAGE_COUNT: u64 = 0x014;
/// RO: number of MSI-X vectors, [`MSIX_VECTORS`].
pub const REG_MSIX_VECTORS: u64 = 0x018;
/// RO: number of event queues, [`MAX_EQS`].
pub const REG_MAX_EQS: u64 = 0x01c;
/// RW: admin command ring DMA address (contiguous, `ADMIN_CMD_SIZE << log_depth` bytes).
pub const REG_ADMIN_CMD_BASE_LO: u64 = 0x020;
pub const REG_ADMIN_CMD_BASE_HI: u64 = 0x024;
/// RW: admin completion ring DMA address (contiguous, `ADMIN_CPL_SIZE << log_depth` bytes).
pub const REG_ADMIN_CPL_BASE_LO: u64 = 0x028;
pub const REG_ADMIN_CPL_BASE_HI: u64 = 0x02c;
/// RW: log2 of the number of entries of both admin rings (`ADMIN_LOG_DEPTH_MIN..=MAX`).
pub const REG_ADMIN_LOG_DEPTH: u64 = 0x030;
/// RW: `ADMIN_CTRL_ENABLE`. Base/depth are latched when enable goes 0 -> 1.
pub const REG_ADMIN_CTRL: u64 = 0x034;
/// WO: admin doorbell, the free-running (wrapping u32) producer index of the command ring.
pub const REG_ADMIN_DB: u64 = 0x038;
/// RW: scratch register for driver sanity checks; no effect.
pub const REG_SCRATCH: u64 = 0x03c;
/// RO: 1 while the data-path thread sleeps (mirror of [`DbPage::device_idle`]).
pub const REG_IDLE: u64 = 0x040;
/// RO: the token that names this device's posted-wake companion (`super::wake`), low and high
/// halves; 0 when the device has none ([`CAP_POSTED_WAKE`] clear).
pub const REG_WAKE_TOKEN_LO: u64 = 0x044;
pub const REG_WAKE_TOKEN_HI: u64 = 0x048;
/// RW: `WAKE_MODE_*`: how software wakes this device. The driver writes [`WAKE_MODE_POSTED`]
/// once every wake it and its user contexts send goes through the companion; the device may
/// then go idle much sooner, since waking it no longer stalls a vCPU. Reset: trapped.
pub const REG_WAKE_MODE: u64 = 0x04c;
/// Wakes are trapped [`WAKE_REG`] writes (each one a vfio-user round trip the vCPU waits for).
pub const WAKE_MODE_TRAPPED: u32 = 0;
/// Wakes are posted doorbell writes to the companion (`super::wake`).
pub const WAKE_MODE_POSTED: u32 = 1;

/// Event queue register banks: EQ n at `REG_EQ_BASE + n * REG_EQ_STRIDE`.
pub const REG_EQ_BASE: u64 = 0x100;
pub const REG_EQ_STRIDE: u64 = 0x20;
/// RW: EQ ring DMA address (contiguous, `EQE_SIZE << log_depth` bytes).
pub const EQ_ADDR_LO: u64 = 0x00;
pub const EQ_ADDR_HI: u64 = 0x04;
/// RW: log2 of the number of EQEs (`EQ_LOG_DEPTH_MIN..=MAX`).
pub const EQ_LOG_DEPTH: u64 = 0x08;
/// RW: `EQ_CTRL_ENABLE`. Address/depth are latched when enable goes 0 -> 1; a newly enabled
/// EQ is armed.
pub const EQ_CTRL: u64 = 0x0c;
/// WO: EQ doorbell: bits 0..=30 the free-running consumer index (mod 2^31), bit 31 `EQ_DB_ARM`
/// to request one MSI-X message for the next event (immediately if unconsumed EQEs exist).
pub const EQ_DB: u64 = 0x10;
pub const EQ_DB_ARM: u32 = 1 << 31;
pub const EQ_DB_CI_MASK: u32 = !EQ_DB_ARM;

/// An EQ doorbell word (`EQ_DB`), as fields.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct EqDoorbell {
    /// Free-running consumer index, mod 2^31.
    pub ci: u32,
    /// Request one MSI-X message for the next event.
    pub arm: bool,
}
impl EqDoorbell {
    pub const fn bits(self) -> u32 {
        (self.ci & EQ_DB_CI_MASK) | if self.arm { EQ_DB_ARM } else { 0 }
    }
    pub const fn from_bits(word: u32) -> Self {
        EqDoorbell {
            ci: word & EQ_DB_CI_MASK,
            arm: word & EQ_DB_ARM != 0,
        }
    }
}
pub const EQ_CTRL_ENABLE: u32 = 1;

/// Offset of register `reg` (`EQ_*`) of event queue `eqn`.
pub const fn reg_eq(eqn: u32, reg: u64) -> u64 {
    REG_EQ_BASE + eqn as u64 * REG_EQ_STRIDE + reg
}
/// End of the control register block (all registers live below this offset).
pub const REG_END: u64 = REG_EQ_BASE + MAX_EQS as u64 * REG_EQ_STRIDE;
const _: () = assert!(REG_END <= WAKE_PAGE_OFFSET);

pub const RESET_VALUE: u32 = 1;
pub const ADMIN_CTRL_ENABLE: u32 = 1;
pub const ADMIN_LOG_DEPTH_MIN: u32 = 2;
pub const ADMIN_LOG_DEPTH_MAX: u32 = 12;
pub const EQ_LOG_DEPTH_MIN: u32 = 2;
pub const EQ_LOG_DEPTH_MAX: u32 = 16;

/// The device is operational (cleared while a reset is in progress).
pub const STATUS_READY: u32 = 1 << 0;
/// The admin queue is enabled.
pub const STATUS_ADMIN_ENABLED: u32 = 1 << 1;
/// The device hit an unrecoverable error (see `REG_FATAL_CODE`); only `REG_RESET` helps.
pub const STATUS_FATAL: u32 = 1 << 2;

pub const FATAL_NONE: u32 = 0;
/// The admin command or completion ring address is not mapped DMA memory.
pub const FATAL_ADMIN_DMA: u32 = 1;
/// An event queue address is not mapped DMA memory.
pub const FATAL_EQ_DMA: u32 = 2;
/// An event queue overflowed (the driver did not consume EQEs in time).
pub const FATAL_EQ_OVERFLOW: u32 = 3;
/// Bad admin queue configuration (depth out of range) at enable time.
pub const FATAL_ADMIN_CONFIG: u32 = 4;
/// Internal device error.
pub const FATAL_INTERNAL: u32 = 5;
/// The admin doorbell announced more commands than the ring holds.
pub const FATAL_ADMIN_DOORBELL: u32 = 6;

pub const CAP_RC: u32 = 1 << 0;
pub const CAP_UC: u32 = 1 << 1;
pub const CAP_UD: u32 = 1 << 2;
pub const CAP_SRQ: u32 = 1 << 3;
pub const CAP_ATOMIC: u32 = 1 << 4;
pub const CAP_INLINE: u32 = 1 << 5;
pub const CAP_IMM: u32 = 1 << 6;
/// RC FLUSH (placement type GLOBAL) and RC ATOMIC_WRITE (IBA memory placement extensions).
pub const CAP_FLUSH: u32 = 1 << 7;
pub const CAP_ATOMIC_WRITE: u32 = 1 << 8;
/// MODIFY_SRQ with `SRQ_ATTR_MAX_WR` switches an SRQ to a new ring (resize).
pub const CAP_SRQ_RESIZE: u32 = 1 << 9;
/// Memory windows of type 1 and 2 (2B: bound to one QP), LOCAL_INV, SEND_WITH_INV.
pub const CAP_MW: u32 = 1 << 10;
/// RESIZE_CQ.
pub const CAP_CQ_RESIZE: u32 = 1 << 11;
/// On-demand paging: `MR_FLAG_ON_DEMAND` regions, `ADMIN_OP_ODP_UPDATE`, `EQE_TYPE_PAGE_FAULT`.
pub const CAP_ODP: u32 = 1 << 12;
/// The device has a posted-wake companion (`super::wake`; its token in `REG_WAKE_TOKEN_*`).
pub const CAP_POSTED_WAKE: u32 = 1 << 13;
/// The summary doorbell: the device looks only at the slots of groups whose news byte is set
/// on the pages that say they store news ([`DbPage::news`], [`DbPage::news_on`]).
pub const CAP_DB_SUMMARY: u32 = 1 << 14;

uapi_flags! {
    /// `REG_STATUS`, typed.
    pub struct DeviceStatus: u32 {
        READY = STATUS_READY,
        ADMIN_ENABLED = STATUS_ADMIN_ENABLED,
        FATAL = STATUS_FATAL,
    }
}

uapi_flags! {
    /// `REG_CAPS` / `DeviceAttr::caps`, typed.
    pub struct DeviceCaps: u32 {
        RC = CAP_RC,
        UC = CAP_UC,
        UD = CAP_UD,
        SRQ = CAP_SRQ,
        ATOMIC = CAP_ATOMIC,
        INLINE = CAP_INLINE,
        IMM = CAP_IMM,
        FLUSH = CAP_FLUSH,
        ATOMIC_WRITE = CAP_ATOMIC_WRITE,
        SRQ_RESIZE = CAP_SRQ_RESIZE,
        MW = CAP_MW,
        CQ_RESIZE = CAP_CQ_RESIZE,
        ODP = CAP_ODP,
        POSTED_WAKE = CAP_POSTED_WAKE,
        DB_SUMMARY = CAP_DB_SUMMARY,
    }
}

// ---------------------------------------------------------------------------------------------
// Doorbell pages (BAR2)
// ---------------------------------------------------------------------------------------------

/// Offset of the slot array in a doorbell page.
pub const DB_SLOTS_OFFSET: usize = 64;
/// Number of 8-byte doorbell slots in one page. The driver hands out slots of its contexts'
/// pages to QPs, CQs and SRQs and passes (page, slot) in the create command.
pub const DB_SLOTS_PER_PAGE: usize = (ROX_PAGE_SIZE - DB_SLOTS_OFFSET) / 8;

/// Value of [`DbPage::device_idle`] while the device sleeps.
pub const DB_DEVICE_IDLE: u32 = 1;
pub const DB_DEVICE_RUNNING: u32 = 0;
/// Value of [`DbPage::rq_no_wake`] while no QP with a receive queue on the page needs its RQ
/// producer index seen at once.
pub const DB_RQ_NO_WAKE: u32 = 1;
/// Value of [`DbPage::rc_sq_no_wake`] while the port's flight is full: an RC SQ doorbell of
/// WQEs that all send packets need not wake the idle device.
pub const DB_RC_SQ_NO_WAKE: u32 = 1;
/// Value of [`DbPage::news_on`] on a page whose owner stores a news byte after each slot.
pub const DB_NEWS_ON: u32 = 1;
/// Offset of [`DbPage::news`] in a doorbell page (8-byte aligned: the device takes news a
/// 64-bit word at a time).
pub const DB_NEWS_OFFSET: usize = 16;
/// Bytes of [`DbPage::news`]: what the 64-byte header has left.
pub const DB_NEWS_BYTES: usize = DB_SLOTS_OFFSET - DB_NEWS_OFFSET;
/// Slots per news byte: slot `s` is in group `s / DB_NEWS_GROUP_SLOTS`.
pub const DB_NEWS_GROUP_SLOTS: usize = DB_SLOTS_PER_PAGE.div_ceil(DB_NEWS_BYTES);
/// News groups in use (the last news bytes of the header cover no slot).
pub const DB_NEWS_GROUPS: usize = DB_SLOTS_PER_PAGE.div_ceil(DB_NEWS_GROUP_SLOTS);
const _: () = assert!(DB_NEWS_OFFSET % 8 == 0 && DB_NEWS_GROUPS <= DB_NEWS_BYTES);
/// The news byte's value that says "a slot of this group changed".
pub const DB_NEWS_SET: u8 = 1;

/// The news group of slot `slot`.
pub const fn db_news_group(slot: u32) -> usize {
    slot as usize / DB_NEWS_GROUP_SLOTS
}

/// Byte offset in a doorbell page of the news byte of slot `slot`'s group.
pub const fn db_news_offset(slot: u32) -> usize {
    DB_NEWS_OFFSET + db_news_group(slot)
}

/// One doorbell slot. Meaning by object:
/// - QP: `a` = SQ producer index, `b` = RQ producer index;
/// - CQ: `a` = consumer index, `b` = arm word (`CQ_ARM_*`);
/// - SRQ: `a` = producer index, `b` unused.
///
/// All indices are free-running wrapping u32 counters (never masked by software); the ring slot
/// is `index & (depth - 1)`. Write WQEs/consume CQEs first, then a release fence, then the slot.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct DbSlot {
    pub a: u32,
    pub b: u32,
}
const _: () = assert!(core::mem::size_of::<DbSlot>() == 8);

/// One 4 KiB doorbell page (BAR2 page n).
///
/// Arm/wake protocol (Dekker-style, both sides use full fences):
/// - software: store the slot (and its news byte, below); `fence(SeqCst)`; load
///   `device_idle`; if it is [`DB_DEVICE_IDLE`], write [`WAKE_REG`] (one trapped write).
/// - device: after finding nothing for a while it stores [`DB_DEVICE_IDLE`] in every page that
///   holds a doorbell slot of one of its objects (and in page [`DB_PAGE_KERNEL`]),
///   `fence(SeqCst)`, re-scans all slots once, and only then sleeps until the wake register is
///   written (or a packet / admin command / timer needs it). It stores
///   [`DB_DEVICE_RUNNING`] when it wakes.
/// - an RQ doorbell (a QP's `b`) may skip the wake when the page's `rq_no_wake` is
///   [`DB_RQ_NO_WAKE`]: the device reads an RQ's producer index when a message needs a receive
///   WQE, so only a QP in the error state, whose new receive WQEs the device flushes, needs its
///   RQ doorbell seen; the device stores `rq_no_wake` before `device_idle`.
/// - an RC (or XRC initiator: [`super::verbs::qp_type_counts_in_flight`]) QP's SQ doorbell
///   whose new WQEs all send packets (no BIND_MW, LOCAL_INV, REG_MR:
///   [`super::verbs::WrOpcode::is_local`]) may skip the wake when the page's `rc_sq_no_wake` is
///   [`DB_RC_SQ_NO_WAKE`]: the device went idle with its port's flight full, so none of them
///   could be sent before an ACK or a retransmission timer, each of which wakes the device;
///   the device stores it before `device_idle`, and not on a page with an RC QP in the error
///   state (whose WQEs it flushes at once).
///
/// Summary doorbell ([`CAP_DB_SUMMARY`]; docs/summary-doorbell.md). On a page whose `news_on`
/// is [`DB_NEWS_ON`] the device looks only at the slots of groups whose news byte is set:
/// - software: store the slot; store [`DB_NEWS_SET`] in `news[db_news_group(slot)]` with
///   release ordering (a plain byte store: BAR2 may be an I/O region to the guest, where a
///   read-modify-write is not atomic against the device); then the wake protocol above.
/// - device: load the news words; swap each nonzero one with 0 (acquire: a slot stored
///   before its news byte is seen by the loads after the swap; a news byte stored after the
///   swap stays for the next pass); then look at the objects of those groups. Its re-scan
///   after announcing idleness takes news the same way, so the fences above cover the news
///   byte as they cover the slot.
/// - `news_on`: the owner of the page stores it once, before it rings any slot of the page.
///   The device trusts a user page's `news_on` only while the driver's page
///   ([`DB_PAGE_KERNEL`]) has it too: a driver that stores it there clears a user page's
///   `news_on` before it hands the page to a new context, so a context that never stores news
///   (an older provider) never inherits its predecessor's. A page without it is scanned slot by
///   slot, as before the summary doorbell.
/// - Access sizes: software stores a news byte, the device swaps the 8-byte word holding it.
///   Mixed sizes on one location are outside the Rust/C++ memory model, but x86-64 and ARMv8
///   order and never tear them (a byte store is never lost inside the swap); the device's
///   race tests check this on the host. Where BAR2 is trapped rather than mapped, the device
///   applies a byte write to its word atomically (rox-nic's `DoorbellBar::write_byte`).
#[repr(C)]
pub struct DbPage {
    /// Written by the device only.
    pub device_idle: u32,
    /// Written by the device only, meaningful while `device_idle` is [`DB_DEVICE_IDLE`]:
    /// [`DB_RQ_NO_WAKE`] when no QP with a receive queue on this page is in the error state;
    /// else (and on a device that never writes it) 0: RQ doorbells wake the device as any other.
    /// A wake for nothing costs a loopback ib_send_lat iteration a vCPU exit and hands the
    /// device a core while the poster's next doorbell waits (docs/benchmarks/session-13.md,
    /// "Session 13: loopback ib_send_lat").
    pub rq_no_wake: u32,
    /// Written by software: [`DB_NEWS_ON`] when it stores a news byte after every slot.
    pub news_on: u32,
    /// Written by the device only, meaningful while `device_idle` is [`DB_DEVICE_IDLE`]:
    /// [`DB_RC_SQ_NO_WAKE`] when the device went idle with its port's flight full (above);
    /// else (and on a device that never writes it) 0. A doorbell of perftest's, posting 12,800
    /// WQEs to 256 QPs before it polls once, would wake a device that can send none of them
    /// (docs/benchmarks/session-20-qps.md).
    pub rc_sq_no_wake: u32,
    /// One byte per group of [`DB_NEWS_GROUP_SLOTS`] slots: set by software after a slot of the
    /// group, cleared by the device when it takes the news.
    pub news: [u8; DB_NEWS_BYTES],
    pub slots: [DbSlot; DB_SLOTS_PER_PAGE],
}
const _: () = assert!(core::mem::size_of::<DbPage>() == ROX_PAGE_SIZE);
const _: () = assert!(core::mem::offset_of!(DbPage, slots) == DB_SLOTS_OFFSET);
const _: () = assert!(core::mem::offset_of!(DbPage, news) == DB_NEWS_OFFSET);

/// Byte offset of slot `slot` in a doorbell page.
pub const fn db_slot_offset(slot: u32) -> usize {
    DB_SLOTS_OFFSET + slot as usize * core::mem::size_of::<DbSlot>()
}

/// CQ arm word (`DbSlot::b` of a CQ): bits 0..=1 the arm type, bits 2..=31 a sequence number
/// software increments on every arm request; the device arms the CQ when the sequence changes,
/// and after the matching completion writes one completion EQE (and MSI-X if the EQ is armed).
pub const CQ_ARM_TYPE_MASK: u32 = 0x3;
/// Arm for the next completion of any kind (IB_CQ_NEXT_COMP).
pub const CQ_ARM_NEXT: u32 = 1;
/// Arm for the next solicited (or error) completion (IB_CQ_SOLICITED).
pub const CQ_ARM_SOLICITED: u32 = 2;
pub const CQ_ARM_SEQ_SHIFT: u32 = 2;

/// Build a CQ arm word.
pub const fn cq_arm_word(seq: u32, arm_type: u32) -> u32 {
    CqArm { seq, arm_type }.bits()
}

/// A CQ arm word, as fields.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CqArm {
    /// Incremented by software on every arm request (30 bits).
    pub seq: u32,
    /// `CQ_ARM_NEXT` or `CQ_ARM_SOLICITED` (0: not an arm request).
    pub arm_type: u32,
}
impl CqArm {
    pub const fn bits(self) -> u32 {
        (self.seq << CQ_ARM_SEQ_SHIFT) | (self.arm_type & CQ_ARM_TYPE_MASK)
    }
    pub const fn from_bits(word: u32) -> Self {
        CqArm {
            seq: word >> CQ_ARM_SEQ_SHIFT,
            arm_type: word & CQ_ARM_TYPE_MASK,
        }
    }
}
