//! CQ commands: create, resize (moving the unconsumed CQEs) and destroy.

use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;

use super::{claim_doorbell, next_id, AdminResult, DbObject};
use crate::device::ring::{load_ring, posted_entries, RingKind};
use crate::device::state::{Cq, Hw};
use crate::roce::Engine;

pub(super) fn create_cq(hw: &mut Hw, c: &CreateCqCmd) -> AdminResult<u32> {
    if c.eqn == EQ_ADMIN_ASYNC || c.eqn >= MAX_EQS {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if hw.cqs.len() >= DEV_MAX_CQ as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let ring = load_ring(&hw.mem, &c.ring, c.log_depth, RingKind::Cq)?;
    // The number is taken only with the doorbell slot.
    let mut next_cq = hw.next_cq;
    let cqs = &hw.cqs;
    let id = next_id(&mut next_cq, 1, |id| cqs.contains_key(&id));
    claim_doorbell(hw, c.db_page, c.db_slot, DbObject::Cq(id))?;
    hw.next_cq = next_cq;
    hw.cqs.insert(
        id,
        Cq {
            ring,
            eqn: c.eqn,
            db_page: c.db_page,
            db_slot: c.db_slot,
            pi: 0,
            arm_seq: 0,
            armed: 0,
            error: false,
            users: 0,
        },
    );
    Ok(id)
}

/// Moves a CQ to a new ring. It is refused if the new ring cannot hold the completions the
/// CQ already owes: its unconsumed CQEs plus every send WR posted to a QP that completes into
/// it (taken by the engine or still in the SQ) — those complete whatever happens next, and a
/// smaller ring would overrun.
pub(super) fn resize_cq(hw: &mut Hw, engine: &Engine, c: &ResizeCqCmd) -> AdminResult<u32> {
    let cq = hw.cqs.get(&c.cq).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let ring = load_ring(&hw.mem, &c.ring, c.log_depth, RingKind::Cq)?;
    let ci = hw.shared.doorbells.slot(cq.db_page, cq.db_slot).a;
    let pending = cq.pi.wrapping_sub(ci);
    let owed: u64 = hw
        .qps
        .values()
        .filter(|qp| qp.send_cq == c.cq)
        .map(|qp| {
            let pi = hw.shared.doorbells.slot(qp.db_page, qp.db_slot).a;
            let unfetched = posted_entries(pi, qp.sq_ci, qp.sq.depth).unwrap_or(0);
            u64::from(unfetched) + engine.sq_outstanding(qp.qpn) as u64
        })
        .sum();
    if cq.error || pending > cq.ring.depth || u64::from(pending) + owed > u64::from(ring.depth) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    // Unconsumed CQEs move to the same indices; every other slot is made not valid for the
    // next index that will land on it, so the new ring reads empty beyond the producer index.
    for k in 0..ring.depth {
        let index = ci.wrapping_add(k);
        let mut cqe = if k < pending {
            hw.mem
                .read_obj::<Cqe>(cq.ring.entry_addr(index))
                .map_err(|_| ADMIN_STATUS_BAD_DMA)?
        } else {
            Cqe::default()
        };
        let valid = owner_for(index, ring.depth);
        cqe.owner = if k < pending { valid } else { valid ^ 1 };
        hw.mem
            .write_entry_owner_last(ring.entry_addr(index), &cqe)
            .map_err(|_| ADMIN_STATUS_BAD_DMA)?;
    }
    let depth = ring.depth;
    hw.cqs.get_mut(&c.cq).expect("looked up above").ring = ring;
    Ok(depth)
}

pub(super) fn destroy_cq(hw: &mut Hw, id: u32) -> AdminResult {
    let cq = hw.cqs.get(&id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if cq.users != 0 {
        return Err(ADMIN_STATUS_BUSY);
    }
    let cq = hw.cqs.remove(&id).expect("present");
    hw.doorbells_used.release(cq.db_page, cq.db_slot);
    Ok(())
}
