//! QP commands: create, modify and query (through the engine's transport context, the one
//! copy of a QP's attributes and state), destroy, and multicast attach/detach.

use rox_uapi::admin::*;
use rox_uapi::ids::Qpn;
use rox_uapi::verbs::*;

use super::{claim_doorbell, next_id, AdminResult, DbObject};
use crate::device::qp_state::check_modify;
use crate::device::ring::{load_ring, RingKind};
use crate::device::state::{Hw, QpQueues, FIRST_QPN};
use crate::roce::engine::XrcRole;
use crate::roce::{Engine, QpConfig, QpType};

/// The XRC role a create command asks for (None: not XRC). Neither role has a receive queue
/// (an initiator receives nothing, a target takes the SRQ each request names); a target needs
/// its XRC domain.
fn xrc_role(c: &CreateQpCmd) -> AdminResult<Option<XrcRole>> {
    let role = match c.qp_type {
        QPT_XRC_INI => XrcRole::Initiator,
        QPT_XRC_TGT if c.xrcd != XRCD_NONE => XrcRole::Target { xrcd: c.xrcd },
        QPT_XRC_TGT => return Err(ADMIN_STATUS_BAD_PARAM),
        _ => return Ok(None),
    };
    if c.srq != SRQ_NONE || c.log_rq_depth != 0 {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    Ok(Some(role))
}

fn qp_type_of(t: u8) -> Option<QpType> {
    match t {
        QPT_RC | QPT_XRC_INI | QPT_XRC_TGT => Some(QpType::Rc),
        QPT_UC => Some(QpType::Uc),
        QPT_UD | QPT_GSI => Some(QpType::Ud),
        _ => None,
    }
}

pub(super) fn create_qp(hw: &mut Hw, engine: &mut Engine, c: &CreateQpCmd) -> AdminResult<Qpn> {
    let qp_type = qp_type_of(c.qp_type).ok_or(ADMIN_STATUS_BAD_PARAM)?;
    if hw.qps.len() >= DEV_MAX_QP as usize {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    if c.qp_type == QPT_GSI && hw.qps.contains_key(&Qpn::GSI) {
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    let xrc = xrc_role(c)?;
    let target = matches!(xrc, Some(XrcRole::Target { .. }));
    let (send_cq, recv_cq) = if target {
        (CQ_NONE, CQ_NONE)
    } else {
        (c.send_cq, c.recv_cq)
    };
    if !target && (!hw.cqs.contains_key(&send_cq) || !hw.cqs.contains_key(&recv_cq)) {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    if c.srq != SRQ_NONE {
        let srq = hw.srqs.get(&c.srq).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
        if srq.pd != c.pd {
            return Err(ADMIN_STATUS_BAD_HANDLE);
        }
    }
    let sq = load_ring(&hw.mem, &c.sq, c.log_sq_depth, RingKind::Sq)?;
    let rq = if c.srq == SRQ_NONE && xrc.is_none() {
        Some(load_ring(&hw.mem, &c.rq, c.log_rq_depth, RingKind::Rq)?)
    } else {
        None
    };
    // The number is taken only with the doorbell slot.
    let mut next_qpn = hw.next_qpn;
    let qpn = if c.qp_type == QPT_GSI {
        Qpn::GSI
    } else {
        let qps = &hw.qps;
        let first = FIRST_QPN.get();
        Qpn::from_raw(next_id(&mut next_qpn, first, |n| {
            qps.contains_key(&Qpn::from_raw(n))
        }))
    };
    claim_doorbell(hw, c.db_page, c.db_slot, DbObject::Qp(qpn))?;
    hw.next_qpn = next_qpn;
    let cfg = QpConfig {
        qpn,
        qp_type,
        pd: c.pd,
        uses_srq: c.srq != SRQ_NONE,
    };
    let created = match xrc {
        Some(role) => engine.create_xrc_qp(cfg, role),
        None => engine.create_qp(cfg),
    };
    if created.is_err() {
        hw.doorbells_used.release(c.db_page, c.db_slot);
        return Err(ADMIN_STATUS_NO_RESOURCES);
    }
    for cq in [send_cq, recv_cq].into_iter().filter(|&cq| cq != CQ_NONE) {
        hw.cqs.get_mut(&cq).expect("checked").users += 1;
    }
    if let Some(srq) = hw.srqs.get_mut(&c.srq) {
        srq.users += 1;
    }
    hw.qps.insert(
        qpn,
        QpQueues {
            qpn,
            qp_type: c.qp_type,
            pd: c.pd,
            send_cq,
            recv_cq,
            srq: c.srq,
            sq,
            rq,
            db_page: c.db_page,
            db_slot: c.db_slot,
            sq_sig_all: c.sq_sig_all != 0,
            sq_ci: 0,
            rq_ci: 0,
            rq_pi_seen: 0,
            broken: false,
        },
    );
    Ok(qpn)
}

/// Validates a modify against the IB state table and the value ranges, then hands it to the
/// QP's one transport context, which applies the mask. The state it starts from is the
/// context's (the engine may have moved the QP to ERR or SQE by itself).
pub(super) fn modify_qp(hw: &mut Hw, engine: &mut Engine, c: &ModifyQpCmd) -> AdminResult<u32> {
    let qp = hw.qps.get(&c.qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let cur = engine.qp_state(c.qpn).map_or(QPS_ERR, |s| s as u8);
    let mask = c.attr_mask;
    let next = check_modify(
        qp.qp_type,
        cur,
        mask,
        &c.attr,
        DEV_MAX_RD_ATOMIC,
        &hw.gid_valid(),
    )
    .map_err(|e| e.status())?;
    let sgid = if mask & QP_AV != 0 {
        hw.gids.get(c.attr.ah.sgid_index as usize)
    } else {
        None
    };
    // A modify without QP_STATE keeps the state: the engine still runs the state's entry
    // (RTS restarts the requester's retry counts and sends), as for an explicit one.
    let attr = QpAttr {
        qp_state: next,
        ..c.attr
    };
    engine
        .modify_qp_attr(hw, c.qpn, mask | QP_STATE, &attr, sgid)
        .map_err(|_| ADMIN_STATUS_BAD_STATE)?;
    if next == QPS_RESET {
        // RESET empties the work queues: the slot and all indices start again at 0 (software
        // resets its producer indices to 0 too, as after create).
        let qp = hw.qps.get_mut(&c.qpn).expect("checked");
        hw.shared.doorbells.store_a(qp.db_page, qp.db_slot, 0);
        hw.shared.doorbells.store_b(qp.db_page, qp.db_slot, 0);
        qp.sq_ci = 0;
        qp.rq_ci = 0;
        qp.rq_pi_seen = 0;
        qp.broken = false;
    }
    Ok(next as u32)
}

pub(super) fn query_qp(
    hw: &mut Hw,
    engine: &mut Engine,
    q: &QueryCmd,
) -> AdminResult<(u32, QpAttr)> {
    // index = QPN: a word wider than 24 bits names no QP.
    let qpn = Qpn::from_raw(q.index);
    if !hw.qps.contains_key(&qpn) {
        return Err(ADMIN_STATUS_BAD_HANDLE);
    }
    let attr = engine.query_qp(qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    Ok((attr.qp_state as u32, attr))
}

pub(super) fn destroy_qp(hw: &mut Hw, engine: &mut Engine, qpn: Qpn) -> AdminResult {
    let qp = hw.qps.remove(&qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let _ = engine.destroy_qp(qpn);
    // A parked QP's turn finds no QP; a later QP of the number must not start parked.
    hw.tx_sched.unpark(qpn);
    hw.doorbells_used.release(qp.db_page, qp.db_slot);
    for cq in [qp.send_cq, qp.recv_cq] {
        if let Some(cq) = hw.cqs.get_mut(&cq) {
            cq.users -= 1;
        }
    }
    if let Some(srq) = hw.srqs.get_mut(&qp.srq) {
        srq.users -= 1;
    }
    // A type 2 window bound to the QP dies with it: a later QP that reuses the number must
    // not inherit the binding.
    for mw in hw.mem_table.mws.values_mut() {
        if mw.binding.is_some_and(|b| b.qpn == Some(qpn)) {
            mw.binding = None;
        }
    }
    // So do its multicast attachments (ib_core detaches first; this covers any other driver).
    hw.mcast.retain(|_, members| {
        members.retain(|&m| m != qpn);
        !members.is_empty()
    });
    Ok(())
}

pub(super) fn attach_mcast(hw: &mut Hw, c: &McastCmd) -> AdminResult {
    let qp = hw.qps.get(&c.qpn).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    if qp.qp_type != QPT_UD || !is_multicast_gid(&c.gid) {
        return Err(ADMIN_STATUS_BAD_PARAM);
    }
    let total = hw.mcast_attachments();
    let groups = hw.mcast.len();
    match hw.mcast.get_mut(&c.gid) {
        Some(members) if members.contains(&c.qpn) => {}
        Some(members) => {
            if members.len() >= DEV_MAX_MCAST_QP_ATTACH as usize
                || total >= DEV_MAX_TOTAL_MCAST_QP_ATTACH as usize
            {
                return Err(ADMIN_STATUS_NO_RESOURCES);
            }
            members.push(c.qpn);
        }
        None => {
            if groups >= DEV_MAX_MCAST_GRP as usize
                || total >= DEV_MAX_TOTAL_MCAST_QP_ATTACH as usize
            {
                return Err(ADMIN_STATUS_NO_RESOURCES);
            }
            hw.mcast.insert(c.gid, vec![c.qpn]);
        }
    }
    Ok(())
}

pub(super) fn detach_mcast(hw: &mut Hw, c: &McastCmd) -> AdminResult {
    let members = hw.mcast.get_mut(&c.gid).ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    let at = members
        .iter()
        .position(|&m| m == c.qpn)
        .ok_or(ADMIN_STATUS_BAD_HANDLE)?;
    members.remove(at);
    if members.is_empty() {
        hw.mcast.remove(&c.gid);
    }
    Ok(())
}
