// SPDX-License-Identifier: GPL-2.0
//! PCI devices rox.ko uses without binding them: a lookup by id with a held reference, memory
//! decoding switched on for as long as rox needs it, and small MMIO windows of their BARs
//! (the posted-wake companion, `wake.rs`). The kernel crate wraps only the device a driver is
//! bound to, so this layer does the rest with the kernel's own bindings.

use core::ptr::NonNull;
use kernel::{
    bindings as kb,
    device::{Bound, Device},
    error::to_result,
    pci,
    prelude::*,
};

fn c_ulong(value: u64) -> Result<kernel::ffi::c_ulong> {
    Ok(kernel::ffi::c_ulong::try_from(value)?)
}

/// A held reference to a `struct pci_dev` found by id (no driver of rox's is bound to it).
///
/// # Invariants
///
/// `raw` is a pci_dev we own one reference on (`pci_get_device`), dropped with it.
pub(crate) struct PeerPci {
    raw: NonNull<kb::pci_dev>,
}

// SAFETY: a referenced pci_dev may be used and released from any thread.
unsafe impl Send for PeerPci {}
// SAFETY: the accessors only read fields fixed after enumeration or call thread-safe PCI core
// functions.
unsafe impl Sync for PeerPci {}

impl PeerPci {
    /// Every PCI device `vendor:device`, each held.
    pub(crate) fn find_all(vendor: u16, device: u16) -> Result<KVec<PeerPci>> {
        let mut found = KVec::new();
        let mut cursor: *mut kb::pci_dev = core::ptr::null_mut();
        loop {
            // SAFETY: `cursor` is null or the device the previous call returned, whose reference
            // this call takes over (it is dropped by `pci_get_device`); the result is held.
            cursor = unsafe { kb::pci_get_device(vendor.into(), device.into(), cursor) };
            let Some(raw) = NonNull::new(cursor) else {
                return Ok(found);
            };
            // SAFETY: `raw` is a live pci_dev (the cursor's reference); one more for `found`.
            unsafe { kb::pci_dev_get(raw.as_ptr()) };
            // INVARIANT: the reference taken just above.
            let peer = PeerPci { raw };
            if let Err(e) = found.push(peer, GFP_KERNEL) {
                // SAFETY: drops the cursor's reference, ending the walk early.
                unsafe { kb::pci_dev_put(cursor) };
                return Err(e.into());
            }
        }
    }

    /// The device, as the kernel crate sees it (resources, logging).
    pub(crate) fn pci(&self) -> &pci::Device {
        // SAFETY: `pci::Device` is `#[repr(transparent)]` over `Opaque<pci_dev>`, and the device
        // is held (type invariant) for as long as `self` lends it.
        unsafe { &*self.raw.as_ptr().cast::<pci::Device>() }
    }

    /// Whether a driver is bound to the device (`pci_dev->driver` or `dev.driver`): uio,
    /// vfio-pci, ivshmem's own users. rox leaves such a device alone. A snapshot: a driver may
    /// still bind later; rox's enable is counted, so it does not undo theirs.
    pub(crate) fn has_driver(&self) -> bool {
        let raw = self.raw.as_ptr();
        // SAFETY: the device is held (type invariant); both fields are pointers the driver core
        // sets and clears whole, read here once each.
        unsafe { !(*raw).driver.is_null() || !(*raw).dev.driver.is_null() }
    }

    /// Whether BAR `bar` is a memory BAR (`IORESOURCE_MEM`), not I/O ports or unassigned.
    pub(crate) fn bar_is_mem(&self, bar: u32) -> bool {
        let Some(index) = usize::try_from(bar).ok().filter(|&i| i < 6) else {
            return false;
        };
        // SAFETY: the device is held (type invariant); `index` is a standard BAR (< 6) of the
        // `resource` array, whose flags are fixed after enumeration.
        let flags = unsafe { (*self.raw.as_ptr()).resource[index].flags };
        u64::try_from(flags).is_ok_and(|f| f & u64::from(kb::IORESOURCE_MEM) != 0)
    }

    /// Switches the device's memory decoding on (`pci_enable_device_mem`) for as long as the
    /// returned value lives (enables are counted, so other users are unaffected).
    pub(crate) fn enable_mem(self) -> Result<EnabledPci> {
        // SAFETY: the device is held (type invariant).
        to_result(unsafe { kb::pci_enable_device_mem(self.raw.as_ptr()) })?;
        Ok(EnabledPci { peer: self })
    }
}

impl Drop for PeerPci {
    fn drop(&mut self) {
        // SAFETY: the reference this value owns (type invariant).
        unsafe { kb::pci_dev_put(self.raw.as_ptr()) };
    }
}

/// A held [`PeerPci`] with memory decoding on; off again (one enable count) on drop.
pub(crate) struct EnabledPci {
    peer: PeerPci,
}

impl EnabledPci {
    pub(crate) fn pci(&self) -> &pci::Device {
        self.peer.pci()
    }

    pub(crate) fn bar_is_mem(&self, bar: u32) -> bool {
        self.peer.bar_is_mem(bar)
    }

    /// Checks that `len` bytes at `offset` lie inside assigned BAR `bar`.
    fn check_range(&self, bar: u32, offset: u64, len: u64) -> Result<kernel::ffi::c_int> {
        let start = self.pci().resource_start(bar)?;
        let bar_len = self.pci().resource_len(bar)?;
        if start == 0 || len == 0 || offset.checked_add(len).is_none_or(|end| end > bar_len) {
            return Err(ENXIO);
        }
        Ok(kernel::ffi::c_int::try_from(bar)?)
    }

    /// Reads `out.len()` 32-bit words at byte `offset` of BAR `bar` (mapped for the read only).
    pub(crate) fn read_u32s(&self, bar: u32, offset: u64, out: &mut [u32]) -> Result {
        let len = core::mem::size_of_val(out) as u64;
        let bar_c = self.check_range(bar, offset, len)?;
        let pdev = self.peer.raw.as_ptr();
        // SAFETY: the device is held and enabled; the range lies inside BAR `bar` (checked).
        let base = unsafe { kb::pci_iomap_range(pdev, bar_c, c_ulong(offset)?, c_ulong(len)?) };
        if base.is_null() {
            return Err(ENOMEM);
        }
        for (i, word) in out.iter_mut().enumerate() {
            // SAFETY: word `i` lies inside the `len`-byte mapping made above.
            *word = unsafe { kb::ioread32(base.cast::<u8>().add(i * 4).cast()) };
        }
        // SAFETY: the mapping made above, no longer used.
        unsafe { kb::pci_iounmap(pdev, base) };
        Ok(())
    }

    /// Maps the first `len` bytes of BAR `bar` for as long as the returned value lives.
    pub(crate) fn map(self, bar: u32, len: u64) -> Result<MappedPci> {
        let bar_c = self.check_range(bar, 0, len)?;
        // SAFETY: the device is held and enabled; the range lies inside BAR `bar` (checked).
        let raw = unsafe { kb::pci_iomap_range(self.peer.raw.as_ptr(), bar_c, 0, c_ulong(len)?) };
        let addr = NonNull::new(raw).ok_or(ENOMEM)?;
        // INVARIANT: mapped just above.
        Ok(MappedPci {
            addr,
            len: len as usize,
            enabled: self,
        })
    }
}

impl Drop for EnabledPci {
    fn drop(&mut self) {
        // SAFETY: balances the successful `pci_enable_device_mem` of `enable_mem`.
        unsafe { kb::pci_disable_device(self.peer.raw.as_ptr()) };
    }
}

/// An MMIO window at the start of a BAR of an [`EnabledPci`], unmapped on drop (then the
/// device is disabled and released, in field order).
///
/// # Invariants
///
/// `addr` is a `pci_iomap_range` mapping of `len` bytes of the device of `enabled`.
pub(crate) struct MappedPci {
    addr: NonNull<kernel::ffi::c_void>,
    len: usize,
    enabled: EnabledPci,
}

// SAFETY: MMIO accessors may be used from any thread; the mapping is released only on drop.
unsafe impl Send for MappedPci {}
// SAFETY: `read32`/`write32` are single MMIO accesses, safe to issue concurrently.
unsafe impl Sync for MappedPci {}

impl MappedPci {
    pub(crate) fn pci(&self) -> &pci::Device {
        self.enabled.pci()
    }

    fn word(&self, offset: usize) -> Result<*mut kernel::ffi::c_void> {
        if offset % 4 != 0 || offset.checked_add(4).is_none_or(|end| end > self.len) {
            return Err(EINVAL);
        }
        // SAFETY: `offset + 4 <= len`, inside the mapping (type invariant).
        Ok(unsafe { self.addr.as_ptr().cast::<u8>().add(offset).cast() })
    }

    /// Writes the 32-bit register at byte `offset` of the window (a posted MMIO write).
    pub(crate) fn write32(&self, offset: usize, value: u32) -> Result {
        let addr = self.word(offset)?;
        // SAFETY: `addr` is an aligned word of the live mapping (`word`).
        unsafe { kb::iowrite32(value, addr) };
        Ok(())
    }
}

impl Drop for MappedPci {
    fn drop(&mut self) {
        // SAFETY: the mapping of this value (type invariant), on the device it was made for.
        unsafe { kb::pci_iounmap(self.enabled.peer.raw.as_ptr(), self.addr.as_ptr()) };
    }
}

/// What a [`RemovalWatch`] calls when its device leaves the PCI bus.
pub(crate) trait PeerRemoved: Send + Sync {
    /// The device is being deleted (`BUS_NOTIFY_DEL_DEVICE`): its BARs are still assigned and
    /// decoded, and are released once this returns. May sleep. May be called again if another
    /// device later has the same address (implementations make a second call a no-op).
    fn removed(&self);
}

/// The notifier block and what it calls, at a fixed address while registered.
#[repr(C)]
struct Watch<H> {
    nb: kb::notifier_block,
    /// Address of the watched `struct device`, compared only (never dereferenced here).
    target: usize,
    handler: H,
}

/// Calls `H::removed` when the watched PCI device is deleted, through a notifier on the PCI bus
/// (rox binds no driver to the device, so no `remove` callback would tell it). Unregistered on
/// drop, which waits for a running call, and in any case when `owner` is unbound: the
/// unregistration is a devres action of `owner`, which drop runs early. So a watch never
/// dropped (`mem::forget` is safe) still ends before anything the handler borrows for
/// `'bound` does.
///
/// # Invariants
///
/// `watch` is a `KBox` allocation registered on `pci_bus_type`'s notifier chain, and
/// `release::<H>` of it is a devres action of `owner` that unregisters and frees it, until
/// drop runs that action (or `owner`'s unbinding does, if drop never comes).
pub(crate) struct RemovalWatch<'bound, H: PeerRemoved + 'bound> {
    watch: NonNull<Watch<H>>,
    owner: &'bound Device<Bound>,
}

// SAFETY: the handler is `Send + Sync`; the block is only touched by the notifier chain and
// the devres action, and `owner` is a shared reference to a `Sync` device.
unsafe impl<H: PeerRemoved> Send for RemovalWatch<'_, H> {}
// SAFETY: see `Send`; `&RemovalWatch` gives no access at all.
unsafe impl<H: PeerRemoved> Sync for RemovalWatch<'_, H> {}

fn device_raw(dev: &Device<impl kernel::device::DeviceContext>) -> *mut kb::device {
    // `Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`.
    core::ptr::from_ref(dev).cast_mut().cast()
}

impl<'bound, H: PeerRemoved + 'bound> RemovalWatch<'bound, H> {
    /// Watches `target` (a device rox holds, e.g. a [`MappedPci`]'s) for removal for at most
    /// as long as `owner` (the device rox is bound to) stays bound. Sleeps.
    pub(crate) fn new(owner: &'bound Device<Bound>, target: &Device, handler: H) -> Result<Self> {
        let target = core::ptr::from_ref(target) as usize;
        let boxed = KBox::new(
            Watch {
                nb: kb::notifier_block::default(),
                target,
                handler,
            },
            GFP_KERNEL,
        )?;
        // Made before registering, so that no error path can leave a registered block.
        let watch = NonNull::from(KBox::leak(boxed));
        let raw = watch.as_ptr();
        // SAFETY: `raw` is a live allocation with a valid callback; it stays registered (and
        // allocated) until `release` runs.
        let ret = unsafe {
            (*raw).nb.notifier_call = Some(Self::notify);
            kb::bus_register_notifier(&raw const kb::pci_bus_type, &raw mut (*raw).nb)
        };
        if let Err(e) = to_result(ret) {
            // SAFETY: not registered; ours again.
            drop(unsafe { KBox::from_raw(raw) });
            return Err(e);
        }
        // SAFETY: `owner` is bound for 'bound; `release` gets the registered block, and on
        // failure `devm_add_action_or_reset` has already run it (unregistered and freed).
        to_result(unsafe {
            kb::devm_add_action_or_reset(device_raw(owner), Some(Self::release), raw.cast())
        })?;
        // INVARIANT: registered, and its release a devres action of `owner`, just above.
        Ok(Self { watch, owner })
    }

    /// The devres action (run by drop, or by `owner`'s unbinding): unregisters the block, which
    /// waits for a running callback, then frees it with the handler.
    ///
    /// # Safety
    ///
    /// `data` is the registered `Watch<H>` of a `RemovalWatch`, released at most once.
    unsafe extern "C" fn release(data: *mut kernel::ffi::c_void) {
        let raw = data.cast::<Watch<H>>();
        // SAFETY: registered (contract); once unregistered nothing refers to the block and the
        // allocation is ours again.
        unsafe {
            kb::bus_unregister_notifier(&raw const kb::pci_bus_type, &raw mut (*raw).nb);
            drop(KBox::from_raw(raw));
        }
    }

    /// The notifier chain's callback: `data` is the `struct device` the event is about.
    ///
    /// # Safety
    ///
    /// Called by the notifier chain with `nb` the block of a registered `Watch<H>`.
    unsafe extern "C" fn notify(
        nb: *mut kb::notifier_block,
        action: kernel::ffi::c_ulong,
        data: *mut kernel::ffi::c_void,
    ) -> kernel::ffi::c_int {
        // SAFETY: `nb` is the first field of a registered `Watch<H>` (`repr(C)`), alive until
        // unregistered, which waits for this call.
        let watch = unsafe { &*nb.cast::<Watch<H>>() };
        if u64::try_from(action).ok() == Some(kb::bus_notifier_event_BUS_NOTIFY_DEL_DEVICE.into())
            && data as usize == watch.target
        {
            watch.handler.removed();
        }
        kb::NOTIFY_DONE as kernel::ffi::c_int
    }
}

impl<'bound, H: PeerRemoved + 'bound> Drop for RemovalWatch<'bound, H> {
    fn drop(&mut self) {
        // SAFETY: `owner` is still bound (it is borrowed for 'bound, and `self` lives within
        // it), so the action added by `new` is still on its devres list (type invariant):
        // `devm_release_action` runs it once (unregisters and frees) and removes it.
        unsafe {
            kb::devm_release_action(
                device_raw(self.owner),
                Some(Self::release),
                self.watch.as_ptr().cast(),
            )
        };
    }
}
