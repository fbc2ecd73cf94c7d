// SPDX-License-Identifier: GPL-2.0
//! Event queues: rings of events the device writes (`uapi/src/queue.rs`), one per MSI-X vector.
//! EQ 0 carries admin completions and asynchronous events, EQs 1.. completion events.

use crate::hw::{
    regs,
    uapi::queue::{owner_for, Eqe},
    Regs,
};
use crate::ib::dma::DmaArray;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    device::{Bound, Device},
    prelude::*,
};

/// log2 of the number of entries of every event queue.
const EQ_LOG_DEPTH: u32 = 10;
const _: () =
    assert!(EQ_LOG_DEPTH >= regs::EQ_LOG_DEPTH_MIN && EQ_LOG_DEPTH <= regs::EQ_LOG_DEPTH_MAX);

pub(crate) struct EventQueue {
    eqn: u32,
    ring: DmaArray<Eqe>,
    /// Free-running consumer index; only the EQ's interrupt thread advances it.
    consumer: AtomicU32,
}

impl EventQueue {
    pub(crate) fn new(dev: &Device<Bound>, eqn: u32) -> Result<Self> {
        Ok(Self {
            eqn,
            ring: DmaArray::zeroed(dev, 1 << EQ_LOG_DEPTH)?,
            consumer: AtomicU32::new(0),
        })
    }

    /// Hands the ring to the device and enables it (the device arms a newly enabled EQ).
    pub(crate) fn enable(&self, regs: &Regs<'_>) -> Result {
        regs.write_eq_addr(self.eqn, self.ring.dma_address())?;
        regs.write_eq(self.eqn, regs::EQ_LOG_DEPTH, EQ_LOG_DEPTH)?;
        regs.write_eq(self.eqn, regs::EQ_CTRL, regs::EQ_CTRL_ENABLE)
    }

    /// Stops the device from writing the ring.
    pub(crate) fn disable(&self, regs: &Regs<'_>) {
        let _ = regs.write_eq(self.eqn, regs::EQ_CTRL, 0);
    }

    /// Hands every new event to `handle`, then tells the device how far we got and re-arms
    /// the interrupt. Called from the EQ's interrupt thread only.
    pub(crate) fn service(&self, regs: &Regs<'_>, mut handle: impl FnMut(&Eqe)) -> u32 {
        let depth = 1u32 << EQ_LOG_DEPTH;
        let mut consumer = self.consumer.load(Ordering::Relaxed);
        let mut handled = 0;
        loop {
            let slot = (consumer & (depth - 1)) as usize;
            match self.ring.read_owner(slot) {
                Ok(owner) if owner == owner_for(consumer, depth) => {}
                _ => break,
            }
            if let Ok(eqe) = self.ring.read(slot) {
                handle(&eqe);
            }
            consumer = consumer.wrapping_add(1);
            handled += 1;
        }
        self.consumer.store(consumer, Ordering::Relaxed);
        let _ = regs.write_eq(
            self.eqn,
            regs::EQ_DB,
            (consumer & regs::EQ_DB_CI_MASK) | regs::EQ_DB_ARM,
        );
        handled
    }
}
