// SPDX-License-Identifier: GPL-2.0
//! How rox.ko and its user contexts wake an idle device: through the posted-wake companion
//! (`uapi::wake`, a QEMU `ivshmem-doorbell` device rox-nic serves) when there is one and its
//! register page is the companion's alone, else through BAR0's trapped `WAKE_REG`.
//!
//! Why: a trapped wake stalls the writing vCPU for a vfio-user round trip; a companion
//! doorbell is a posted write. The device idles sooner once told (`REG_WAKE_MODE`) that every
//! wake is posted, so the mode is written only when both the kernel's wakes and the mappings
//! handed to processes go through the companion.

use crate::{
    cut_off::CutOff,
    hw::{
        regs,
        uapi::wake::{self as w, WakeCompanion},
        Regs,
    },
    ib::pci_peer::{EnabledPci, MappedPci, PeerPci, PeerRemoved, RemovalWatch},
};
use kernel::{
    device::{Bound, Device},
    new_mutex, pci,
    prelude::*,
    revocable::Revocable,
    sync::aref::ARef,
    sync::Mutex,
};

/// A matched companion: its register BAR mapped for the kernel's wakes, the doorbell word, and
/// where its register page is for user mappings. Holds the device (reference, memory
/// decoding) until dropped.
pub(crate) struct Companion {
    regs: MappedPci,
    doorbell: u32,
    /// Physical address of the register BAR (page-aligned, at least a page long: checked).
    regs_start: u64,
}

impl Companion {
    /// The 32-bit word a wake writes at [`w::IVSHMEM_DOORBELL`].
    fn doorbell(&self) -> u32 {
        self.doorbell
    }

    /// Page frame of the register page user contexts map.
    fn regs_pfn(&self) -> u64 {
        self.regs_start >> regs::ROX_PAGE_SHIFT
    }

    /// Wakes the device (a posted write; never waits for rox-nic).
    fn ring(&self) {
        let _ = self
            .regs
            .write32(w::IVSHMEM_DOORBELL as usize, self.doorbell);
    }
}

/// Which wake the device gets.
pub(crate) enum Wake {
    /// BAR0 `WAKE_REG` (kernel) and BAR0's wake page (user contexts).
    Trapped,
    /// The companion's doorbell, for the kernel and every user context, until the companion is
    /// removed ([`PostedWake::companion_removed`]); trapped from then on.
    Posted(PostedWake),
}

/// The companion while it lasts, and what outlives it: its register page's frame (so that a
/// context made before the removal cannot map it afterwards).
pub(crate) struct PostedWake {
    /// Revoked (unmapped, disabled, released) when the companion leaves the bus. RCU: a
    /// kernel wake in progress finishes its posted write before the mapping goes.
    companion: Pin<KBox<Revocable<Companion>>>,
    regs_pfn: u64,
    /// The companion's `struct device`, held past the removal: what the removal watch looks
    /// for (outside the RCU section of `companion`: registering it sleeps) and its name.
    device: ARef<Device>,
    /// Whether the companion is gone. User mappings of its page are made under this lock, and
    /// it is set under it before the mappings are revoked, so no mapping survives the removal.
    gone: Pin<KBox<Mutex<bool>>>,
    /// The contexts the removal cuts off ([`Self::cuts_off`]): begun with `gone`, before the
    /// user QPs are listed; ended once the processes' mappings are revoked.
    cut_off: CutOff,
}

impl PostedWake {
    fn new(companion: Companion) -> Result<Self> {
        let regs_pfn = companion.regs_pfn();
        let device = companion.regs.pci().as_ref().into();
        Ok(Self {
            companion: KBox::pin_init(Revocable::new(companion), GFP_KERNEL)?,
            regs_pfn,
            device,
            gone: KBox::pin_init(new_mutex!(false), GFP_KERNEL)?,
            cut_off: CutOff::new(),
        })
    }

    /// Rings the companion; false if it is gone (the caller wakes the trapped way).
    pub(crate) fn ring(&self) -> bool {
        self.companion.try_access_with(Companion::ring).is_some()
    }

    /// The register page's frame and the doorbell word for a new context, unless the
    /// companion is gone or going (then the context is a trapped one).
    pub(crate) fn user_page(&self) -> Option<(u64, u32)> {
        let gone = self.gone.lock();
        if *gone {
            return None;
        }
        self.companion
            .try_access_with(|c| (c.regs_pfn(), c.doorbell()))
    }

    /// Whether a context made now is one a removal would cut off: its pages may be mapped
    /// before the removal revokes them (recorded by the context, asked of [`Self::cuts_off`]).
    pub(crate) fn context_before_cut_off(&self) -> bool {
        self.cut_off.context_made_before()
    }

    /// Whether a context made when [`Self::context_before_cut_off`] said `made_before` is cut
    /// off: the removal has begun, so its doorbell and wake pages are (or are about to be)
    /// ib_core's dummy page, and a CQ, QP or SRQ it made now would never reach the device.
    /// Never sleeps: asked under the registry's lock too (`cut_off.rs`).
    pub(crate) fn cuts_off(&self, made_before: bool) -> bool {
        self.cut_off.refuses(made_before)
    }

    /// Runs `map` (a process maps page `pfn`) unless `pfn` is the removed companion's page.
    pub(crate) fn map_user_page(&self, pfn: u64, map: impl FnOnce() -> Result) -> Result {
        let gone = self.gone.lock();
        if *gone && pfn == self.regs_pfn {
            return Err(ENXIO);
        }
        map()
    }

    /// The companion leaves the bus (`dev`'s PCI bus notifier, before its BARs are released):
    /// the device goes back to trapped wakes (told first, so a wake posted meanwhile still
    /// counts), the kernel's wakes switch to `WAKE_REG` and the companion is released (after
    /// every kernel wake already ringing it), then `cut_off_users` revokes the processes'
    /// mappings (none of its page is made after `gone` is set) and fails their QPs: it answers
    /// how many QPs, or None when the device is not registered (nothing to revoke). The cut-off
    /// begins with `gone`, before `cut_off_users` lists the QPs, so a QP registered after the
    /// listing is refused instead (`cut_off.rs`). Says so in dmesg. A second call does nothing.
    pub(crate) fn companion_removed(
        &self,
        dev: &pci::Device,
        regs: &Regs<'_>,
        cut_off_users: impl FnOnce() -> Option<usize>,
    ) {
        {
            let mut gone = self.gone.lock();
            if *gone {
                return;
            }
            *gone = true;
            self.cut_off.begin();
        }
        regs.write(regs::REG_WAKE_MODE, regs::WAKE_MODE_TRAPPED);
        self.companion.revoke();
        let cut_off = cut_off_users();
        self.cut_off.end();
        match cut_off {
            Some(qps) => dev_warn!(
                dev,
                "wake mode: trapped (companion {} removed; user mappings of the device revoked \
                 and its user QPs moved to error ({}), processes must reopen it)\n",
                self.device.name(),
                qps
            ),
            None => dev_warn!(
                dev,
                "wake mode: trapped (companion {} removed; no user mappings to revoke)\n",
                self.device.name()
            ),
        }
    }
}

/// Tells the device the chosen mode (posted is written to `REG_WAKE_MODE`; the probe's reset
/// left it trapped) and says so in dmesg. Called once `RoxDev` owns `regs`: a later probe
/// failure drops it, and its reset puts the device back to trapped.
pub(crate) fn apply(dev: &pci::Device, regs: &Regs<'_>, wake: &Wake) {
    match wake {
        Wake::Posted(p) => {
            regs.write(regs::REG_WAKE_MODE, regs::WAKE_MODE_POSTED);
            let _ = p.companion.try_access_with(|c| {
                dev_info!(
                    dev,
                    "wake mode: posted (companion {}, doorbell {:#x})\n",
                    p.device.name(),
                    c.doorbell
                )
            });
        }
        // The reset left the mode trapped (and a device without the companion may not know
        // the register at all).
        Wake::Trapped => {}
    }
}

/// The watched companion, as seen by the PCI bus notifier: a [`RemovalWatch`] of its device.
/// The watch ends when `owner` (the rox device) is unbound at the latest.
pub(crate) fn watch<'bound, H: PeerRemoved + 'bound>(
    owner: &'bound Device<Bound>,
    wake: &Wake,
    handler: H,
) -> Result<Option<RemovalWatch<'bound, H>>> {
    let Wake::Posted(p) = wake else {
        return Ok(None);
    };
    Ok(Some(RemovalWatch::new(owner, &p.device, handler)?))
}

/// Finds the device's companion and chooses the wake mode. Says in dmesg why when it is the
/// trapped one. Never fails the probe: a missing or unusable companion only costs speed. The
/// device is not told yet: [`apply`] does, once nothing in the probe can fail before the
/// device's reset-on-drop owner exists.
pub(crate) fn setup(dev: &pci::Device, regs: &Regs<'_>) -> Wake {
    let offered = regs.read(regs::REG_CAPS) & regs::CAP_POSTED_WAKE != 0;
    // Token 0 names no companion (`REG_WAKE_TOKEN_LO`), whatever the capability says.
    let token = if offered {
        u64::from(regs.read(regs::REG_WAKE_TOKEN_LO))
            | (u64::from(regs.read(regs::REG_WAKE_TOKEN_HI)) << 32)
    } else {
        0
    };
    if token == 0 {
        dev_info!(
            dev,
            "wake mode: trapped (device offers no posted-wake companion)\n"
        );
        return Wake::Trapped;
    }
    let Some((enabled, record)) = find(token) else {
        dev_warn!(
            dev,
            "wake mode: trapped (no ivshmem-doorbell {:04x}:{:04x} carries token {:#x})\n",
            w::IVSHMEM_VENDOR_ID,
            w::IVSHMEM_DEVICE_ID,
            token
        );
        return Wake::Trapped;
    };
    let companion = enabled.pci();
    let start = companion.resource_start(w::IVSHMEM_BAR_REGS).unwrap_or(0);
    let len = companion.resource_len(w::IVSHMEM_BAR_REGS).unwrap_or(0);
    if !page_isolated(enabled.bar_is_mem(w::IVSHMEM_BAR_REGS), start, len) {
        // Mapping that page into processes would hand them whatever else shares it.
        dev_warn!(
            dev,
            "wake mode: trapped (companion {} registers at {:#x}+{:#x} are no page of their own; \
             boot with pci=resource_alignment={}@pci:{:04x}:{:04x})\n",
            companion.as_ref().name(),
            start,
            len,
            regs::ROX_PAGE_SHIFT,
            w::IVSHMEM_VENDOR_ID,
            w::IVSHMEM_DEVICE_ID
        );
        return Wake::Trapped;
    }
    let companion = enabled
        .map(w::IVSHMEM_BAR_REGS, w::IVSHMEM_BAR_REGS_SIZE)
        .and_then(|mapped| {
            PostedWake::new(Companion {
                regs: mapped,
                doorbell: record.doorbell(),
                regs_start: start,
            })
        });
    match companion {
        Ok(posted) => Wake::Posted(posted),
        Err(e) => {
            dev_warn!(dev, "wake mode: trapped (companion registers: {:?})\n", e);
            Wake::Trapped
        }
    }
}

/// Whether a BAR at `start` of `len` bytes has its first page to itself (and is memory: an
/// I/O-port BAR's numbers are no page of anything).
fn page_isolated(is_mem: bool, start: u64, len: u64) -> bool {
    let page = regs::ROX_PAGE_SIZE as u64;
    is_mem && start != 0 && start % page == 0 && len >= page
}

/// The enabled companion whose record carries `token`, and the record. Candidates that do not
/// match are disabled and released again. Only an unbound ivshmem with memory BARs is touched:
/// ivshmem-plain shares the id, and a device bound to uio or vfio-pci is someone else's.
fn find(token: u64) -> Option<(EnabledPci, WakeCompanion)> {
    let candidates = PeerPci::find_all(w::IVSHMEM_VENDOR_ID, w::IVSHMEM_DEVICE_ID).ok()?;
    for candidate in candidates {
        if candidate.has_driver()
            || !candidate.bar_is_mem(w::IVSHMEM_BAR_REGS)
            || !candidate.bar_is_mem(w::IVSHMEM_BAR_SHM)
        {
            continue;
        }
        let Ok(enabled) = candidate.enable_mem() else {
            continue;
        };
        if let Some(record) = read_record(&enabled) {
            if record.magic == w::COMPANION_MAGIC && record.token == token {
                return Some((enabled, record));
            }
        }
    }
    None
}

/// The [`WakeCompanion`] at the start of a candidate's shared memory BAR.
fn read_record(enabled: &EnabledPci) -> Option<WakeCompanion> {
    let mut words = [0u32; core::mem::size_of::<WakeCompanion>() / 4];
    enabled.read_u32s(w::IVSHMEM_BAR_SHM, 0, &mut words).ok()?;
    let qword = |i: usize| u64::from(words[i]) | (u64::from(words[i + 1]) << 32);
    Some(WakeCompanion {
        magic: qword(0),
        token: qword(2),
        peer: words[4],
        vector: words[5],
    })
}
