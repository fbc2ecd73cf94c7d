// SPDX-License-Identifier: GPL-2.0
//! The work queues of kernel consumers (a QP's send and receive queues, an SRQ): a ring in
//! coherent DMA memory the driver writes WQEs into, its free-running producer index and the
//! doorbell that tells the device ([`KernelWq`]); their depth, and the receive WQE QPs and
//! SRQs share.

use crate::{
    dev::RoxDev,
    hw::{
        regs,
        uapi::{admin, queue, verbs},
    },
    ib::{RecvWr, Sge},
    ring::KernelRing,
};
use kernel::{
    device::{Bound, Device},
    new_spinlock_irq,
    prelude::*,
    sync::SpinLockIrq,
    transmute::{AsBytes, FromBytes},
};

/// The word of a doorbell slot (`regs::DbSlot`) that carries a queue's producer index: `A`
/// for send queues and SRQs, `B` for a QP's receive queue.
#[derive(Clone, Copy)]
pub(crate) enum DbWord {
    A,
    B,
}

/// What the driver remembers of a posted work request, to complete it in software when the
/// device dies (`dead.rs`): the device's CQEs name no ring index, so the driver retires
/// entries itself as their CQEs are polled.
#[derive(Clone, Copy, Default)]
pub(crate) struct Posted {
    pub(crate) wr_id: u64,
    /// The device writes a CQE for it on success (unsignaled WRs complete only with an error).
    pub(crate) signaled: bool,
    /// `verbs::WC_OPC_*` its completion carries.
    pub(crate) wc_opcode: u8,
}

impl Posted {
    /// A receive work request (every one gets a CQE).
    pub(crate) fn recv(wr_id: u64) -> Self {
        Self {
            wr_id,
            signaled: true,
            wc_opcode: verbs::WC_OPC_RECV,
        }
    }
}

/// The indices of a kernel work queue (free-running): the next entry to post, the value
/// last rung, and the oldest entry whose completion has not been polled yet.
struct WqIndices {
    producer: u32,
    rung: u32,
    retired: u32,
    /// `Posted` of every ring slot, by slot.
    posted: KVec<Posted>,
}

/// A kernel consumer's work queue of `1 << log_depth` WQEs of type `T`. The consumer keeps
/// at most its depth posted, as the verbs require; the device consumes them in order.
pub(crate) struct KernelWq<T: AsBytes + FromBytes + Copy> {
    ring: KernelRing<T>,
    log_depth: u32,
    indices: Pin<KBox<SpinLockIrq<WqIndices>>>,
}

/// How [`KernelWq::retire`] finds the entry a CQE completes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retire {
    /// A successful completion: the oldest signaled entry with the CQE's wr_id (unsignaled
    /// ones before it retired silently, in order).
    Signaled,
    /// An error completion: the oldest entry with the CQE's wr_id, signaled or not.
    Any,
}

impl<T: AsBytes + FromBytes + Copy> KernelWq<T> {
    pub(crate) fn new(dev: &Device<Bound>, log_depth: u32) -> Result<Self> {
        let ring = KernelRing::<T>::new(dev, 1 << log_depth)?;
        let posted = KVec::from_elem(Posted::default(), 1 << log_depth, GFP_KERNEL)?;
        let indices = KBox::pin_init(
            new_spinlock_irq!(WqIndices {
                producer: 0,
                rung: 0,
                retired: 0,
                posted,
            }),
            GFP_KERNEL,
        )?;
        Ok(Self {
            ring,
            log_depth,
            indices,
        })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.ring.desc()
    }

    /// Writes `wqe` at the producer index and advances it; the device learns of it at the
    /// next [`Self::ring`].
    pub(crate) fn post(&self, wqe: T, posted: Posted) -> Result {
        let depth = 1u32 << self.log_depth;
        let mut indices = self.indices.lock();
        let slot = (indices.producer & (depth - 1)) as usize;
        self.ring.ring.write(slot, wqe)?;
        if let Some(entry) = indices.posted.get_mut(slot) {
            *entry = posted;
        }
        indices.producer = indices.producer.wrapping_add(1);
        Ok(())
    }

    /// A CQE with `wr_id` was polled: the device consumes the queue in order, so it completes
    /// the oldest outstanding entry that matches (see [`Retire`]) and retires every entry up
    /// to it. A CQE matching nothing outstanding retires nothing.
    pub(crate) fn retire(&self, wr_id: u64, how: Retire) {
        let depth = 1u32 << self.log_depth;
        let mut indices = self.indices.lock();
        let outstanding = indices.producer.wrapping_sub(indices.retired).min(depth);
        for n in 0..outstanding {
            let index = indices.retired.wrapping_add(n);
            let Some(entry) = indices.posted.get((index & (depth - 1)) as usize) else {
                return;
            };
            if entry.wr_id == wr_id && (entry.signaled || how == Retire::Any) {
                indices.retired = index.wrapping_add(1);
                return;
            }
        }
    }

    /// The oldest entry posted and not retired, retired now (it completes in software); None
    /// when the device has nothing outstanding of this queue.
    pub(crate) fn retire_oldest(&self) -> Option<Posted> {
        let depth = 1u32 << self.log_depth;
        let mut indices = self.indices.lock();
        if indices.producer.wrapping_sub(indices.retired) == 0 {
            return None;
        }
        // A consumer that posted more than the depth overwrote older entries: only the last
        // `depth` are known.
        if indices.producer.wrapping_sub(indices.retired) > depth {
            indices.retired = indices.producer.wrapping_sub(depth);
        }
        let entry = indices
            .posted
            .get((indices.retired & (depth - 1)) as usize)
            .copied();
        indices.retired = indices.retired.wrapping_add(1);
        entry
    }

    /// The queue was reset (QP to RESET): its work requests are gone without completions and
    /// its indices start again at 0, as the device's consumer index and doorbell word do (a
    /// producer index carried over would make the device run stale slots, or fail the QP).
    pub(crate) fn reset(&self) {
        let mut indices = self.indices.lock();
        indices.producer = 0;
        indices.rung = 0;
        indices.retired = 0;
    }

    /// Whether entries are posted and not retired.
    pub(crate) fn has_outstanding(&self) -> bool {
        let indices = self.indices.lock();
        indices.producer != indices.retired
    }

    /// Tells the device about the WQEs posted since the last call: the producer index goes to
    /// word `word` of the driver's doorbell slot `slot`.
    pub(crate) fn ring(&self, dev: &RoxDev<'_>, slot: u32, word: DbWord) {
        let mut indices = self.indices.lock();
        if indices.rung != indices.producer {
            indices.rung = indices.producer;
            let producer = Some(indices.producer);
            match word {
                DbWord::A => dev.kernel_doorbell(slot, producer, None),
                DbWord::B => dev.kernel_doorbell(slot, None, producer),
            }
        }
    }
}

/// log2 of the depth of a kernel queue of `T` entries holding `wrs` work requests (at least
/// the device's smallest depth: a queue asked for 0 still gets a ring), EINVAL beyond the
/// device's deepest queue or what one level of ring page list describes.
pub(crate) fn kernel_log_depth<T>(wrs: u32) -> Result<u32> {
    let log = wrs
        .max(1)
        .checked_next_power_of_two()
        .ok_or(EINVAL)?
        .trailing_zeros()
        .max(admin::DEV_MIN_LOG_DEPTH.into());
    let ring_bytes = (queue::PBL_ENTRIES_PER_PAGE as usize) * regs::ROX_PAGE_SIZE;
    let ring_max = (ring_bytes / core::mem::size_of::<T>()).trailing_zeros();
    if log > u32::from(admin::DEV_MAX_LOG_WQ_DEPTH).min(ring_max) {
        return Err(EINVAL);
    }
    Ok(log)
}

/// The device's form of a kernel work request's SGE.
pub(crate) fn device_sge(sge: &Sge) -> queue::Sge {
    queue::Sge {
        addr: sge.addr(),
        length: sge.length(),
        lkey: sge.lkey(),
    }
}

/// The receive WQE of a kernel work request with at most `max_sge` SGEs.
pub(crate) fn rq_wqe(wr: &RecvWr<'_>, max_sge: u32) -> Result<queue::RqWqe> {
    let sges = wr.sges();
    if sges.len() > max_sge as usize {
        return Err(EINVAL);
    }
    let mut wqe = queue::RqWqe {
        wr_id: wr.wr_id(),
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    for (dst, src) in wqe.sge.iter_mut().zip(sges) {
        *dst = device_sge(src);
    }
    Ok(wqe)
}
