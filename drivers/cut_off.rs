// SPDX-License-Identifier: GPL-2.0
//! The cut-off of the user contexts that a posted-wake companion's removal leaves without a
//! way to the device (`wake.rs`, docs/driver.md "Companion removed while held"): their doorbell
//! and wake pages are revoked, so their QPs are failed and their new CQs, QPs and SRQs refused
//! (EIO). Kernel-free, so that its tests (`logic_tests.rs`) run on the host and in KUnit.
//!
//! The order that leaves no QP behind: the removal [`CutOff::begin`]s, then lists the user QPs
//! to fail under the registry's lock; a create registers its object under that same lock, and
//! only where [`CutOff::refuses`] says no there. A registration before the listing is listed
//! (and its QP failed); one after it sees the cut-off begun and is refused. The create's early
//! check (before the device makes the object) only saves work: a create may pass it just
//! before the removal begins and register after the listing.

use core::sync::atomic::{AtomicBool, Ordering};

/// Whether the removal has begun cutting contexts off, and whether it has ended (the
/// processes' mappings revoked: a context made after that maps only pages that stay live).
pub(crate) struct CutOff {
    begun: AtomicBool,
    ended: AtomicBool,
}

impl CutOff {
    pub(crate) const fn new() -> Self {
        Self {
            begun: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }

    /// A context is being made: whether it is one a removal cuts off (it may map its pages
    /// before the removal revokes them). Read before anything of the context is mapped.
    pub(crate) fn context_made_before(&self) -> bool {
        !self.ended.load(Ordering::Acquire)
    }

    /// The removal begins: from now on, objects of the contexts made before are refused.
    /// Before the removal lists the objects it fails.
    pub(crate) fn begin(&self) {
        self.begun.store(true, Ordering::Release);
    }

    /// The removal has revoked the processes' mappings: contexts made from now on are live.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// Whether a new object of a context made when [`Self::context_made_before`] said
    /// `made_before` is refused. Never sleeps: asked under the registry's (spin) lock.
    pub(crate) fn refuses(&self, made_before: bool) -> bool {
        made_before && self.begun.load(Ordering::Acquire)
    }
}
