// SPDX-License-Identifier: GPL-2.0
//! Event queues: rings of events the device writes (`uapi/src/queue.rs`), one per MSI-X vector.
//! EQ 0 carries admin completions and asynchronous events, EQs 1.. completion events.

use crate::hw::{
    regs,
    uapi::queue::{owner_for, Eqe, EQE_TYPE_ADMIN},
    Regs,
};
use crate::ib::dma::DmaArray;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    device::{Bound, Device},
    new_mutex,
    prelude::*,
    sync::Mutex,
};

/// log2 of the number of entries of every event queue.
const EQ_LOG_DEPTH: u32 = 10;
const _: () =
    assert!(EQ_LOG_DEPTH >= regs::EQ_LOG_DEPTH_MIN && EQ_LOG_DEPTH <= regs::EQ_LOG_DEPTH_MAX);

/// Events taken off the ring but not yet handled (FIFO: `items[head..]`).
struct Backlog {
    items: KVec<Eqe>,
    head: usize,
}

pub(crate) struct EventQueue {
    eqn: u32,
    ring: DmaArray<Eqe>,
    /// Free-running consumer index; only the EQ's interrupt thread advances it.
    consumer: AtomicU32,
    /// Only the EQ's interrupt thread uses it (the lock is never contended).
    backlog: Pin<KBox<Mutex<Backlog>>>,
}

impl EventQueue {
    pub(crate) fn new(dev: &Device<Bound>, eqn: u32) -> Result<Self> {
        Ok(Self {
            eqn,
            ring: DmaArray::zeroed(dev, 1 << EQ_LOG_DEPTH)?,
            consumer: AtomicU32::new(0),
            backlog: KBox::pin_init(
                new_mutex!(Backlog {
                    items: KVec::new(),
                    head: 0,
                }),
                GFP_KERNEL,
            )?,
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

    /// Takes every new event off the ring and tells the device (without arming), so that the
    /// ring never fills while events are being handled: handling a page fault issues admin
    /// commands, and each admin completion posts an event to EQ 0. `EQE_TYPE_ADMIN` events are
    /// dropped here (the driver polls the admin completion ring); the others wait in the
    /// backlog for [`EventQueue::service`]. Called from the EQ's interrupt thread only (also
    /// from inside its handler, between the admin commands of a long job).
    pub(crate) fn skim(&self, regs: &Regs<'_>) {
        let depth = 1u32 << EQ_LOG_DEPTH;
        let mut consumer = self.consumer.load(Ordering::Relaxed);
        let start = consumer;
        let mut backlog = self.backlog.lock();
        loop {
            let slot = (consumer & (depth - 1)) as usize;
            match self.ring.read_owner(slot) {
                Ok(owner) if owner == owner_for(consumer, depth) => {}
                _ => break,
            }
            if let Ok(eqe) = self.ring.read(slot) {
                if eqe.event_type != EQE_TYPE_ADMIN && backlog.items.push(eqe, GFP_KERNEL).is_err()
                {
                    // No memory to keep it: leave it (and what follows) on the ring.
                    break;
                }
            }
            consumer = consumer.wrapping_add(1);
        }
        drop(backlog);
        if consumer != start {
            self.consumer.store(consumer, Ordering::Relaxed);
            let _ = regs.write_eq(self.eqn, regs::EQ_DB, consumer & regs::EQ_DB_CI_MASK);
        }
    }

    /// The oldest event of the backlog.
    fn next(&self) -> Option<Eqe> {
        let mut backlog = self.backlog.lock();
        let head = backlog.head;
        let eqe = backlog.items.get(head).copied();
        match eqe {
            Some(_) => backlog.head += 1,
            None => {
                backlog.items.clear();
                backlog.head = 0;
            }
        }
        eqe
    }

    /// Hands every new event to `handle` (taking events off the ring before each, see
    /// [`EventQueue::skim`]), then re-arms the interrupt. Called from the EQ's interrupt thread
    /// only.
    pub(crate) fn service(&self, regs: &Regs<'_>, mut handle: impl FnMut(&Eqe)) -> u32 {
        let mut handled = 0;
        loop {
            self.skim(regs);
            let Some(eqe) = self.next() else {
                break;
            };
            handle(&eqe);
            handled += 1;
        }
        let consumer = self.consumer.load(Ordering::Relaxed);
        let _ = regs.write_eq(
            self.eqn,
            regs::EQ_DB,
            (consumer & regs::EQ_DB_CI_MASK) | regs::EQ_DB_ARM,
        );
        handled
    }
}
