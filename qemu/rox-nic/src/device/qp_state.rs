//! The IB modify-QP state machine: which transitions exist and which attributes each requires
//! or allows, per QP type (IBA 1.4 section 11.2.5 / the kernel's `qp_state_table`), plus the
//! range checks of attribute values.

use rox_uapi::admin::{self, QpAttr};
use rox_uapi::verbs::*;

/// Why a modify is refused, as an admin status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModifyError {
    /// Not a valid transition, or required/forbidden attribute mask bits.
    BadState,
    /// An attribute value out of range.
    BadParam,
}

impl ModifyError {
    pub fn status(self) -> u8 {
        match self {
            ModifyError::BadState => admin::ADMIN_STATUS_BAD_STATE,
            ModifyError::BadParam => admin::ADMIN_STATUS_BAD_PARAM,
        }
    }
}

/// (required, optional) attribute masks of a transition for a QP type, or None if invalid.
pub fn transition_masks(qp_type: u8, cur: u8, next: u8) -> Option<(u32, u32)> {
    let (req, opt) = connected_or_datagram_masks(qp_type, cur, next)?;
    // XRC QPs take RC's table but where IBA (and ib_core's qp_state_table) lighten it: an
    // initiator has no responder (RTR needs no MAX_DEST_RD_ATOMIC or MIN_RNR_TIMER), a target
    // no requester (RTS needs only TIMEOUT and SQ_PSN).
    let responder_attrs = QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    let requester_attrs = QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    Some(match (qp_type, cur, next) {
        (QPT_XRC_INI, QPS_INIT, QPS_RTR) => (req & !responder_attrs, opt),
        (QPT_XRC_INI, QPS_RTR, QPS_RTS) => (req, opt & !QP_MIN_RNR_TIMER),
        (QPT_XRC_TGT, QPS_RTR, QPS_RTS) => (req & !requester_attrs, opt),
        _ => (req, opt),
    })
}

/// [`transition_masks`] of RC (and XRC), UC, UD and GSI.
fn connected_or_datagram_masks(qp_type: u8, cur: u8, next: u8) -> Option<(u32, u32)> {
    let ud_like = qp_type == QPT_UD || qp_type == QPT_GSI;
    let gsi = qp_type == QPT_GSI;
    // XRC is RC's transport: its QPs move through RC's states with RC's attributes.
    let rc = matches!(qp_type, QPT_RC | QPT_XRC_INI | QPT_XRC_TGT);
    let uc = qp_type == QPT_UC;
    let pick = |ud: u32, uc_m: u32, rc_m: u32, gsi_m: u32| -> u32 {
        if gsi {
            gsi_m
        } else if ud_like {
            ud
        } else if uc {
            uc_m
        } else {
            rc_m
        }
    };
    let none = Some((0, 0));
    match (cur, next) {
        (_, QPS_RESET) | (_, QPS_ERR) if cur <= QPS_ERR => none,
        (QPS_RESET, QPS_INIT) => Some((
            pick(
                QP_PKEY_INDEX | QP_PORT | QP_QKEY,
                QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QP_PKEY_INDEX | QP_QKEY,
            ),
            0,
        )),
        (QPS_INIT, QPS_INIT) => Some((
            0,
            pick(
                QP_PKEY_INDEX | QP_PORT | QP_QKEY,
                QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                QP_PKEY_INDEX | QP_QKEY,
            ),
        )),
        (QPS_INIT, QPS_RTR) => Some((
            pick(
                0,
                QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN,
                QP_AV
                    | QP_PATH_MTU
                    | QP_DEST_QPN
                    | QP_RQ_PSN
                    | QP_MAX_DEST_RD_ATOMIC
                    | QP_MIN_RNR_TIMER,
                0,
            ),
            pick(
                QP_PKEY_INDEX | QP_QKEY,
                QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX,
                QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX,
                QP_PKEY_INDEX | QP_QKEY,
            ),
        )),
        (QPS_RTR, QPS_RTS) => Some((
            pick(
                QP_SQ_PSN,
                QP_SQ_PSN,
                QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC,
                QP_SQ_PSN,
            ),
            pick(
                QP_CUR_STATE | QP_QKEY,
                QP_CUR_STATE | QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PATH_MIG_STATE,
                QP_CUR_STATE | QP_ALT_PATH | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER | QP_PATH_MIG_STATE,
                QP_CUR_STATE | QP_QKEY,
            ),
        )),
        (QPS_RTS, QPS_RTS) | (QPS_SQD, QPS_RTS) => Some((
            0,
            pick(
                QP_CUR_STATE | QP_QKEY,
                QP_CUR_STATE | QP_ACCESS_FLAGS | QP_ALT_PATH | QP_PATH_MIG_STATE,
                QP_CUR_STATE | QP_ACCESS_FLAGS | QP_ALT_PATH | QP_PATH_MIG_STATE | QP_MIN_RNR_TIMER,
                QP_CUR_STATE | QP_QKEY,
            ),
        )),
        (QPS_RTS, QPS_SQD) => Some((0, QP_EN_SQD_ASYNC_NOTIFY)),
        (QPS_SQD, QPS_SQD) => Some((
            0,
            pick(
                QP_PKEY_INDEX | QP_QKEY,
                QP_AV | QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX | QP_PATH_MIG_STATE,
                QP_PORT
                    | QP_AV
                    | QP_TIMEOUT
                    | QP_RETRY_CNT
                    | QP_RNR_RETRY
                    | QP_MAX_QP_RD_ATOMIC
                    | QP_MAX_DEST_RD_ATOMIC
                    | QP_ALT_PATH
                    | QP_ACCESS_FLAGS
                    | QP_PKEY_INDEX
                    | QP_MIN_RNR_TIMER
                    | QP_PATH_MIG_STATE,
                QP_PKEY_INDEX | QP_QKEY,
            ),
        )),
        (QPS_SQE, QPS_RTS) if !rc => Some((
            0,
            pick(
                QP_CUR_STATE | QP_QKEY,
                QP_CUR_STATE | QP_ACCESS_FLAGS,
                0,
                QP_CUR_STATE | QP_QKEY,
            ),
        )),
        _ => None,
    }
}

/// Check a modify request against the state machine and value ranges. Returns the new state.
/// `gid_valid[i]` says whether GID table entry i is set.
pub fn check_modify(
    qp_type: u8,
    cur: u8,
    mask: u32,
    attr: &QpAttr,
    max_rd_atomic: u8,
    gid_valid: &[bool],
) -> Result<u8, ModifyError> {
    if mask & QP_CUR_STATE != 0
        && (!matches!(cur, QPS_RTR | QPS_RTS | QPS_SQD | QPS_SQE) || attr.cur_qp_state != cur)
    {
        return Err(ModifyError::BadState);
    }
    let next = if mask & QP_STATE != 0 {
        attr.qp_state
    } else {
        cur
    };
    if next > QPS_ERR {
        return Err(ModifyError::BadParam);
    }
    let (req, opt) = transition_masks(qp_type, cur, next).ok_or(ModifyError::BadState)?;
    if mask & req != req || mask & !(req | opt | QP_STATE) != 0 {
        return Err(ModifyError::BadState);
    }
    const MAX_TIMER_CODE: u8 = 31;
    const MAX_RETRY: u8 = 7;
    if mask & QP_PATH_MTU != 0 && mtu_bytes(attr.path_mtu) == 0 {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_TIMEOUT != 0 && attr.timeout > MAX_TIMER_CODE {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_MIN_RNR_TIMER != 0 && attr.min_rnr_timer > MAX_TIMER_CODE {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_RETRY_CNT != 0 && attr.retry_cnt > MAX_RETRY {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_RNR_RETRY != 0 && attr.rnr_retry > MAX_RETRY {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_SQ_PSN != 0 && !attr.sq_psn.is_valid() {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_RQ_PSN != 0 && !attr.rq_psn.is_valid() {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_DEST_QPN != 0 && !attr.dest_qp_num.is_valid() {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_ACCESS_FLAGS != 0 && attr.qp_access_flags & !ACCESS_QP_SUPPORTED != 0 {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_PKEY_INDEX != 0 && attr.pkey_index != 0 {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_PORT != 0 && attr.port_num != admin::PORT_NUM {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_MAX_QP_RD_ATOMIC != 0 && attr.max_rd_atomic > max_rd_atomic {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_MAX_DEST_RD_ATOMIC != 0 && attr.max_dest_rd_atomic > max_rd_atomic {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_AV != 0
        && !gid_valid
            .get(attr.ah.sgid_index as usize)
            .copied()
            .unwrap_or(false)
    {
        return Err(ModifyError::BadParam);
    }
    if mask & QP_ALT_PATH != 0 || mask & QP_PATH_MIG_STATE != 0 {
        // No alternate paths on a one-port Ethernet device.
        return Err(ModifyError::BadParam);
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rox_uapi::admin::DEV_MAX_RD_ATOMIC;

    fn attr(state: u8) -> QpAttr {
        QpAttr {
            qp_state: state,
            port_num: admin::PORT_NUM,
            path_mtu: MTU_1024,
            ..Default::default()
        }
    }

    /// `check_modify` of a move to `next` with a valid GID 0 and the device's RD/atomic limit.
    fn check(qp_type: u8, cur: u8, mask: u32, next: u8) -> Result<u8, ModifyError> {
        check_modify(qp_type, cur, mask, &attr(next), DEV_MAX_RD_ATOMIC, &[true])
    }

    #[test]
    fn rc_happy_path_and_missing_attributes() {
        use ModifyError::BadState;
        let init = QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
        assert_eq!(check(QPT_RC, QPS_RESET, init, QPS_INIT), Ok(QPS_INIT));
        // RC needs ACCESS_FLAGS, UD needs QKEY instead.
        let no_access = QP_STATE | QP_PKEY_INDEX | QP_PORT;
        assert_eq!(check(QPT_RC, QPS_RESET, no_access, QPS_INIT), Err(BadState));
        assert_eq!(check(QPT_UD, QPS_RESET, init, QPS_INIT), Err(BadState));
        let rtr = QP_STATE
            | QP_AV
            | QP_PATH_MTU
            | QP_DEST_QPN
            | QP_RQ_PSN
            | QP_MAX_DEST_RD_ATOMIC
            | QP_MIN_RNR_TIMER;
        assert_eq!(check(QPT_RC, QPS_INIT, rtr, QPS_RTR), Ok(QPS_RTR));
        assert_eq!(check(QPT_UC, QPS_INIT, rtr, QPS_RTR), Err(BadState));
        // RESET -> RTS skips states.
        assert_eq!(check(QPT_RC, QPS_RESET, QP_STATE, QPS_RTS), Err(BadState));
        // SQE -> RTS is not an RC transition.
        assert_eq!(check(QPT_RC, QPS_SQE, QP_STATE, QPS_RTS), Err(BadState));
        assert_eq!(check(QPT_UC, QPS_SQE, QP_STATE, QPS_RTS), Ok(QPS_RTS));
        // Anything -> ERR / RESET.
        for s in QPS_RESET..=QPS_ERR {
            assert_eq!(check(QPT_RC, s, QP_STATE, QPS_ERR), Ok(QPS_ERR));
        }
    }

    #[test]
    fn value_ranges() {
        use rox_uapi::ids::Psn;

        let gids = [true, false];
        let mut a = attr(QPS_RTR);
        let rtr = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
        a.path_mtu = 6;
        assert_eq!(
            check_modify(QPT_UC, QPS_INIT, rtr, &a, DEV_MAX_RD_ATOMIC, &gids),
            Err(ModifyError::BadParam)
        );
        a.path_mtu = MTU_4096;
        a.rq_psn = Psn::from_raw(1 << 24);
        assert_eq!(
            check_modify(QPT_UC, QPS_INIT, rtr, &a, DEV_MAX_RD_ATOMIC, &gids),
            Err(ModifyError::BadParam)
        );
        a.rq_psn = Psn::default();
        a.ah.sgid_index = 1;
        assert_eq!(
            check_modify(QPT_UC, QPS_INIT, rtr, &a, DEV_MAX_RD_ATOMIC, &gids),
            Err(ModifyError::BadParam)
        );
        a.ah.sgid_index = 0;
        assert_eq!(
            check_modify(QPT_UC, QPS_INIT, rtr, &a, DEV_MAX_RD_ATOMIC, &gids),
            Ok(QPS_RTR)
        );
    }
}
