//! Receive WQEs: an `ibv_recv_wr` formatted for a receive ring (a QP's RQ or an SRQ), and
//! ibv_post_recv.

#![deny(unsafe_code)]

use super::post::{post_list, PostError};
use super::RoxQp;
use crate::context::ContextHw;
use crate::sys::errno::{Result, EINVAL};
use crate::sys::ffi;
use crate::sys::wr::{RecvWr, WrList};
use crate::wq::Ring;
use rox_uapi::queue::{RqWqe, RQ_MAX_SGE};

/// Format a receive WQE (RQ or SRQ) for slot `index`.
pub fn recv_wqe(wr: &RecvWr<'_>, index: u32, max_sge: u32) -> Result<RqWqe> {
    let sges = wr.sges(max_sge.min(RQ_MAX_SGE))?;
    let mut wqe = RqWqe {
        wr_id: u64::from(index),
        num_sge: sges.len() as u8,
        ..Default::default()
    };
    for (dst, sge) in wqe.sge.iter_mut().zip(sges) {
        *dst = sge;
    }
    Ok(wqe)
}

/// Post receive WRs to a ring whose doorbell word is given.
pub fn post_recv_list(
    ring: &Ring,
    ring_doorbell: impl FnOnce(u32),
    wrs: WrList<'_, ffi::ibv_recv_wr>,
    max_sge: u32,
) -> core::result::Result<(), PostError<ffi::ibv_recv_wr>> {
    post_list(&mut ring.lock(), ring_doorbell, wrs, |w, index, wq| {
        let wqe = recv_wqe(w, index, max_sge)?;
        wq.write(index, wqe);
        Ok(w.wr_id())
    })
}

/// `ibv_post_recv` of the application's list `wrs`.
pub fn post_recv(
    qp: &RoxQp,
    hw: &ContextHw,
    wrs: WrList<'_, ffi::ibv_recv_wr>,
) -> core::result::Result<(), PostError<ffi::ibv_recv_wr>> {
    // Receives of an SRQ QP go to the SRQ; none are accepted in RESET.
    let Some(rq) = qp.rq.as_ref().filter(|_| qp.can_receive()) else {
        return Err((wrs.head(), EINVAL));
    };
    post_recv_list(rq, |pi| hw.ring_rq(qp.db_slot, pi), wrs, qp.max_recv_sge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::tests::list;
    use crate::sys::ffi::Zeroable;
    use rox_uapi::ids::Key;
    use rox_uapi::queue::Sge;

    #[test]
    fn receive_wqe() {
        let mut sges = [ffi::ibv_sge {
            addr: 0x2000,
            length: 128,
            lkey: 3,
        }; 2];
        let mut wr = ffi::ibv_recv_wr::zeroed();
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = 2;
        let (_, w) = list(&raw mut wr).next().expect("one WR");
        let wqe = recv_wqe(&w, 9, 2).expect("valid");
        assert_eq!((wqe.wr_id, wqe.num_sge), (9, 2));
        assert_eq!(
            wqe.sge[1],
            Sge {
                addr: 0x2000,
                length: 128,
                lkey: Key::from_raw(3)
            }
        );
        assert_eq!(recv_wqe(&w, 9, 1).err(), Some(EINVAL));
    }
}
