//! XRC on the receive side: the XRC SRQs of a context by number. A receive of an XRC target
//! QP completes on its SRQ's CQ with a CQE that names the SRQ (`CQE_FLAG_XRC_SRQ`, the number in
//! `src_qp`): the consumer's wr_id is that SRQ's WQE, whichever QP took it.

#![deny(unsafe_code)]

use crate::sys::objects::SrqRef;
use rox_uapi::ids::Qpn;
use rox_uapi::queue::{Cqe, CQE_FLAG_XRC_SRQ};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// XRC SRQs of a context by SRQ number (the number peers put in their XRCETH). Only
/// crate::sys::xrc adds and removes them: an SRQ is added once created, removed before it is
/// freed.
#[derive(Default)]
pub struct XrcSrqTable(Mutex<HashMap<u32, SrqRef>>);

impl XrcSrqTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<u32, SrqRef>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn insert(&self, srq_num: u32, srq: SrqRef) {
        self.lock().insert(srq_num, srq);
    }

    pub fn remove(&self, srq_num: u32) {
        self.lock().remove(&srq_num);
    }

    /// For a CQE of an XRC receive: the consumer's wr_id (retiring the SRQ's WQE; `None` if
    /// the SRQ is not this context's or has no such WQE outstanding), and the CQE as the
    /// consumer sees it (no rox flag, no source QP). Other CQEs pass unchanged with `None`.
    pub fn take(&self, cqe: &mut Cqe) -> Option<Option<u64>> {
        if cqe.wc_flags & CQE_FLAG_XRC_SRQ == 0 {
            return None;
        }
        let srq_num = cqe.src_qp.get();
        cqe.wc_flags &= !CQE_FLAG_XRC_SRQ;
        cqe.src_qp = Qpn::default();
        let table = self.lock();
        Some(
            table
                .get(&srq_num)
                .and_then(|srq| srq.get().retire(cqe.wr_id as u32)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_flagged_cqes_are_xrc_receives_and_leave_clean() {
        let table = XrcSrqTable::default();
        let mut plain = Cqe {
            src_qp: Qpn::from_raw(9),
            wc_flags: 1,
            ..Default::default()
        };
        assert_eq!(table.take(&mut plain), None);
        assert_eq!((plain.src_qp, plain.wc_flags), (Qpn::from_raw(9), 1));
        let mut xrc = Cqe {
            src_qp: Qpn::from_raw(7),
            wc_flags: CQE_FLAG_XRC_SRQ | 2,
            ..Default::default()
        };
        // No SRQ 7 here: no wr_id to give, and still a clean CQE.
        assert_eq!(table.take(&mut xrc), Some(None));
        assert_eq!((xrc.src_qp, xrc.wc_flags), (Qpn::default(), 2));
    }
}
