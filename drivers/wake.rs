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
    hw::{
        regs,
        uapi::wake::{self as w, WakeCompanion},
        Regs,
    },
    ib::pci_peer::{EnabledPci, MappedPci, PeerPci},
};
use kernel::{pci, prelude::*};

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
    pub(crate) fn doorbell(&self) -> u32 {
        self.doorbell
    }

    /// Page frame of the register page user contexts map.
    pub(crate) fn regs_pfn(&self) -> u64 {
        self.regs_start >> regs::ROX_PAGE_SHIFT
    }

    /// Wakes the device (a posted write; never waits for rox-nic).
    pub(crate) fn ring(&self) {
        let _ = self
            .regs
            .write32(w::IVSHMEM_DOORBELL as usize, self.doorbell);
    }
}

/// Which wake the device gets.
pub(crate) enum Wake {
    /// BAR0 `WAKE_REG` (kernel) and BAR0's wake page (user contexts).
    Trapped,
    /// The companion's doorbell, for the kernel and every user context.
    Posted(Companion),
}

/// Tells the device the chosen mode (posted is written to `REG_WAKE_MODE`; the probe's reset
/// left it trapped) and says so in dmesg. Called once `RoxDev` owns `regs`: a later probe
/// failure drops it, and its reset puts the device back to trapped.
pub(crate) fn apply(dev: &pci::Device, regs: &Regs<'_>, wake: &Wake) {
    match wake {
        Wake::Posted(c) => {
            regs.write(regs::REG_WAKE_MODE, regs::WAKE_MODE_POSTED);
            dev_info!(
                dev,
                "wake mode: posted (companion {}, doorbell {:#x})\n",
                c.regs.pci().as_ref().name(),
                c.doorbell
            );
        }
        // The reset left the mode trapped (and a device without the companion may not know
        // the register at all).
        Wake::Trapped => {}
    }
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
    match enabled.map(w::IVSHMEM_BAR_REGS, w::IVSHMEM_BAR_REGS_SIZE) {
        Ok(mapped) => Wake::Posted(Companion {
            regs: mapped,
            doorbell: record.doorbell(),
            regs_start: start,
        }),
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
