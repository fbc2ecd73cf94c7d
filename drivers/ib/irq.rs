// SPDX-License-Identifier: GPL-2.0
//! MSI-X vectors of a bound PCI device, each with a threaded handler.
//!
//! The kernel crate ties every handler registration to a borrow of the vector allocation, which
//! a driver's device data cannot hold next to the allocation itself (it would borrow from
//! itself). [`MsixIrqs`] owns both and frees them in the required order.

use core::ptr::NonNull;
use kernel::{
    device::Bound,
    irq::{Flags, ThreadedHandler, ThreadedRegistration},
    pci,
    prelude::*,
};

/// `count` MSI-X vectors, vector `n` handled by the `n`-th handler.
///
/// # Invariants
///
/// `vectors` comes from `KBox::into_raw` and is freed only in `drop`, after every registration
/// in `handlers` (which borrow it) has been dropped.
pub(crate) struct MsixIrqs<'bound, H: ThreadedHandler + 'bound> {
    handlers: KVec<Pin<KBox<ThreadedRegistration<'bound, H>>>>,
    vectors: NonNull<pci::IrqVectorRegistration<'bound>>,
}

impl<'bound, H: ThreadedHandler + 'bound> MsixIrqs<'bound, H> {
    /// Allocates exactly `count` MSI-X vectors of `pdev` and registers `make_handler(n)` on
    /// vector `n`.
    pub(crate) fn new(
        pdev: &'bound pci::Device<Bound>,
        count: u32,
        name: &'static CStr,
        mut make_handler: impl FnMut(u32) -> H,
    ) -> Result<Self> {
        let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
        let vectors = KBox::new(pdev.alloc_irq_vectors(count, count, msix)?, GFP_KERNEL)?;
        // INVARIANT: freed in `drop` after the handlers.
        let mut this = Self {
            handlers: KVec::new(),
            vectors: NonNull::from(KBox::leak(vectors)),
        };
        // SAFETY: `this.vectors` stays allocated until `this` is dropped, and `this` drops every
        // registration borrowing it first (type invariant), so the borrow may live for 'bound
        // as far as the registrations that use it are concerned.
        let vectors: &'bound pci::IrqVectorRegistration<'bound> = unsafe { this.vectors.as_ref() };
        for n in 0..count {
            let request = vectors.index(n as usize)?.into();
            // SAFETY: the registration is stored in `this.handlers` and dropped by `drop` (or by
            // the unwinding of this function on error); it is never forgotten.
            let registration = unsafe {
                ThreadedRegistration::new(
                    request,
                    Flags::TRIGGER_NONE,
                    name,
                    Ok::<H, Error>(make_handler(n)),
                )
            };
            this.handlers
                .push(KBox::pin_init(registration, GFP_KERNEL)?, GFP_KERNEL)?;
        }
        Ok(this)
    }
}

impl<H: ThreadedHandler> Drop for MsixIrqs<'_, H> {
    fn drop(&mut self) {
        self.handlers.clear();
        // SAFETY: from `KBox::into_raw` (type invariant); no registration borrows it any more.
        drop(unsafe { KBox::from_raw(self.vectors.as_ptr()) });
    }
}

// SAFETY: the vector allocation is only touched through shared references of the kernel crate's
// `IrqVectorRegistration` (which is `Sync` through its `&Device<Bound>`), and the handlers are
// `Sync` by the `ThreadedHandler` bound.
unsafe impl<H: ThreadedHandler> Send for MsixIrqs<'_, H> {}
// SAFETY: see `Send`.
unsafe impl<H: ThreadedHandler> Sync for MsixIrqs<'_, H> {}
