// SPDX-License-Identifier: GPL-2.0
//! The work queues of kernel consumers (a QP's send and receive queues, an SRQ): a ring in
//! coherent DMA memory the driver writes WQEs into, the record of what is posted
//! (`wq_record.rs`) and the doorbell that tells the device ([`KernelWq`]); their depth, and the
//! receive WQE QPs and SRQs share.

use crate::{
    dev::RoxDev,
    hw::{
        regs,
        uapi::{admin, queue},
    },
    ib::{RecvWr, Sge},
    ring::KernelRing,
    slot_store::SlotStore,
    wq_record::{Unrung, WqRecord},
};

pub(crate) use crate::wq_record::Posted;
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

/// A kernel consumer's work queue of `1 << log_depth` WQEs of type `T`. The consumer keeps
/// at most its depth posted, as the verbs require; the device consumes them in order.
pub(crate) struct KernelWq<T: AsBytes + FromBytes + Copy> {
    ring: KernelRing<T>,
    record: Pin<KBox<SpinLockIrq<WqRecord<KVec<Posted>>>>>,
}

impl<T: AsBytes + FromBytes + Copy> KernelWq<T> {
    pub(crate) fn new(dev: &Device<Bound>, log_depth: u32) -> Result<Self> {
        let ring = KernelRing::<T>::new(dev, 1 << log_depth)?;
        let posted = KVec::from_elem(Posted::default(), 1 << log_depth, GFP_KERNEL)?;
        let record = KBox::pin_init(new_spinlock_irq!(WqRecord::new(posted)), GFP_KERNEL)?;
        Ok(Self { ring, record })
    }

    pub(crate) fn desc(&self) -> queue::PageList {
        self.ring.desc()
    }

    /// Writes `wqe` at the producer index and advances it; the device learns of it at the
    /// next [`Self::ring`].
    pub(crate) fn post(&self, wqe: T, posted: Posted) -> Result {
        let mut record = self.record.lock();
        self.ring.ring.write(record.next_slot(), wqe)?;
        record.commit(posted);
        Ok(())
    }

    /// A CQE of the entry at `wqe_index` was polled (see [`WqRecord::retire`]).
    pub(crate) fn retire(&self, wqe_index: u16) {
        self.record.lock().retire(wqe_index);
    }

    /// The oldest entry posted and not retired, retired now (it completes in software); None
    /// when the device has nothing outstanding of this queue.
    pub(crate) fn retire_oldest(&self) -> Option<Posted> {
        self.record.lock().retire_oldest()
    }

    /// The queue was reset (QP to RESET), see [`WqRecord::reset`].
    pub(crate) fn reset(&self) {
        self.record.lock().reset();
    }

    /// Whether entries are posted and not retired.
    pub(crate) fn has_outstanding(&self) -> bool {
        self.record.lock().has_outstanding()
    }

    /// Tells the device about the WQEs posted since the last call: the producer index goes to
    /// word `word` of the driver's doorbell slot `slot`.
    pub(crate) fn ring(&self, dev: &RoxDev<'_>, slot: u32, word: DbWord) {
        let mut record = self.record.lock();
        if let Some(Unrung { producer, .. }) = record.take_unrung() {
            match word {
                DbWord::A => dev.kernel_doorbell(slot, Some(producer), None),
                DbWord::B => dev.kernel_doorbell(slot, None, Some(producer)),
            }
        }
    }

    /// A QP's send queue: as [`Self::ring`] with word A, but when the QP `counts_in_flight`
    /// (`verbs::qp_type_counts_in_flight`) and none of the new WQEs is a local operation, an
    /// idle device whose port's flight is full is not woken (`SlotStore::sq`).
    pub(crate) fn ring_sq(&self, dev: &RoxDev<'_>, slot: u32, counts_in_flight: bool) {
        let mut record = self.record.lock();
        if let Some(Unrung {
            producer,
            packets_only,
        }) = record.take_unrung()
        {
            let store = SlotStore::sq(counts_in_flight, packets_only);
            dev.kernel_sq_doorbell(slot, producer, store);
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
