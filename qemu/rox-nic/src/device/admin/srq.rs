//! SRQ commands: create, modify (limit, resize), query and destroy.

use rox_uapi::admin::*;

use super::{claim_doorbell, next_id, AdminResult, DbObject};
use crate::device::ring::{load_ring, RingKind};
use crate::device::state::{Hw, Srq};

pub(super) fn create_srq(hw: &mut Hw, c: &CreateSrqCmd) -> AdminResult<u32> {
    if hw.srqs.len() >= DEV_MAX_SRQ as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let ring = load_ring(&hw.mem, &c.ring, c.log_depth, RingKind::Rq)?;
    if c.limit > ring.depth {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    if c.xrcd != XRCD_NONE && !hw.cqs.contains_key(&c.cq) {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    // The number is taken only with the doorbell slot.
    let mut next_srq = hw.next_srq;
    let srqs = &hw.srqs;
    let id = next_id(&mut next_srq, 1, |id| srqs.contains_key(&id));
    claim_doorbell(hw, c.db_page, c.db_slot, DbObject::Srq(id))?;
    hw.next_srq = next_srq;
    if let Some(cq) = hw.cqs.get_mut(&c.cq).filter(|_| c.xrcd != XRCD_NONE) {
        cq.users += 1;
    }
    hw.srqs.insert(
        id,
        Srq {
            pd: c.pd,
            ring,
            db_page: c.db_page,
            db_slot: c.db_slot,
            ci: 0,
            limit: c.limit,
            users: 0,
            error: false,
            xrcd: c.xrcd,
            cq: c.cq,
        },
    );
    Ok(id)
}

pub(super) fn modify_srq(hw: &mut Hw, c: &ModifySrqCmd) -> AdminResult {
    let srq = hw.srqs.get(&c.srq).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if c.attr_mask & !(SRQ_ATTR_LIMIT | SRQ_ATTR_MAX_WR) != 0 {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    // Resize: the new ring must hold every WQE posted and not yet taken; software copied
    // them to the same indices, so reading goes on at `ci` in the new ring.
    let new_ring = if c.attr_mask & SRQ_ATTR_MAX_WR != 0 {
        let ring = load_ring(&hw.mem, &c.ring, c.log_depth, RingKind::Rq)?;
        let pi = hw.shared.doorbells.slot(srq.db_page, srq.db_slot).a;
        let posted = pi.wrapping_sub(srq.ci);
        if srq.error || posted > srq.ring.depth || posted > ring.depth {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        Some(ring)
    } else {
        None
    };
    let depth = new_ring.as_ref().map_or(srq.ring.depth, |r| r.depth);
    let limit = if c.attr_mask & SRQ_ATTR_LIMIT != 0 {
        c.limit
    } else {
        srq.limit
    };
    if limit > depth {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let srq = hw.srqs.get_mut(&c.srq).expect("looked up above");
    if let Some(ring) = new_ring {
        srq.ring = ring;
    }
    srq.limit = limit;
    Ok(())
}

pub(super) fn query_srq(hw: &mut Hw, id: u32) -> AdminResult<SrqCounts> {
    let srq = hw.srqs.get(&id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let pi = hw.shared.doorbells.slot(srq.db_page, srq.db_slot).a;
    Ok(SrqCounts {
        limit: srq.limit,
        posted: pi.wrapping_sub(srq.ci).min(srq.ring.depth),
    })
}

pub(super) fn destroy_srq(hw: &mut Hw, id: u32) -> AdminResult {
    let srq = hw.srqs.get(&id).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if srq.users != 0 {
        return Err(ADMIN_STATUS_BUSY);
    }
    let srq = hw.srqs.remove(&id).expect("present");
    hw.doorbells_used.release(srq.db_page, srq.db_slot);
    if let Some(cq) = hw.cqs.get_mut(&srq.cq).filter(|_| srq.xrcd != XRCD_NONE) {
        cq.users -= 1;
    }
    Ok(())
}
