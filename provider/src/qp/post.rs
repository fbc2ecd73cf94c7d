//! The posting loop both work queues share: format WRs into free slots, stop at the first
//! failure, ring the doorbell once for what was stored.

#![deny(unsafe_code)]

use crate::sys::errno::{Errno, Result, ENOMEM};
use crate::sys::wr::AppWr;
use crate::wq::WorkQueue;

/// A failed post: the WR that failed (for `*bad_wr`) and the errno.
pub type PostError<W> = (*mut W, Errno);

/// Post a list of WRs to one work queue: `write` formats and stores one WR at a slot index;
/// the doorbell announces every WR stored before the first failure. Returns the failing WR.
pub(super) fn post_list<'a, W: 'a>(
    wq: &mut WorkQueue,
    ring_doorbell: impl FnOnce(u32),
    wrs: impl Iterator<Item = (*mut W, AppWr<'a, W>)>,
    mut write: impl FnMut(&AppWr<'a, W>, u32, &mut WorkQueue) -> Result<u64>,
) -> core::result::Result<(), PostError<W>> {
    let start = wq.pi();
    let mut failure = None;
    for (at, wr) in wrs {
        let Some(index) = wq.next_index() else {
            failure = Some((at, ENOMEM));
            break;
        };
        match write(&wr, index, wq) {
            Ok(wr_id) => wq.commit(wr_id),
            Err(e) => {
                failure = Some((at, e));
                break;
            }
        }
    }
    if wq.pi() != start {
        ring_doorbell(wq.pi());
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::super::send::post_sends;
    use super::super::send::tests::send_wr;
    use super::super::tests::{list, test_qp};
    use crate::sys::errno::{EINVAL, ENOMEM};
    use crate::sys::ffi;
    use rox_uapi::queue::{Cqe, SqWqe};
    use rox_uapi::verbs;

    /// One 8-byte SGE.
    fn one_sge() -> [ffi::ibv_sge; 1] {
        [ffi::ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }]
    }

    #[test]
    fn post_list_stops_at_the_first_bad_wr_and_rings_for_the_good_ones() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut sges = one_sge();
        let mut wrs: Vec<ffi::ibv_send_wr> = (0..6)
            .map(|_| send_wr(ffi::IBV_WR_SEND, &mut sges, 0))
            .collect();
        wrs[2].opcode = ffi::IBV_WR_BIND_MW;
        for i in 0..5 {
            let next: *mut ffi::ibv_send_wr = &mut wrs[i + 1];
            wrs[i].wr_id = 100 + i as u64;
            wrs[i].next = next;
        }
        let mut rung = None;
        let r = post_sends(&qp, list(wrs.as_mut_ptr()), |pi, packets_only| {
            rung = Some((pi, packets_only))
        });
        assert_eq!(
            r.map_err(|(wr, e)| (wr as *const _, e)),
            Err((&wrs[2] as *const _, EINVAL))
        );
        assert_eq!(rung, Some((2, true)), "two SENDs: packets only");
        // Ring full after 4 posts: ENOMEM on the fifth.
        wrs[2].opcode = ffi::IBV_WR_SEND;
        let mut rung = None;
        let r = post_sends(&qp, list(&raw mut wrs[2]), |pi, _| rung = Some(pi));
        assert_eq!(
            r.map_err(|(wr, e)| (wr as *const _, e)),
            Err((&wrs[4] as *const _, ENOMEM))
        );
        assert_eq!(rung, Some(4));
        let written = qp.sq.lock().read::<SqWqe>(3);
        assert_eq!(written.wr_id, 3);
        // A completion of slot 1 (signaled) frees slots 0 and 1 and names wr 101.
        let cqe = Cqe {
            wr_id: 1,
            opcode: verbs::WC_OPC_SEND,
            ..Default::default()
        };
        assert_eq!(qp.retire(&cqe), Some(101));
    }

    /// A list with a local operation rings as one that needs the device awake (the device
    /// does it without waiting for its flight: `ContextHw::ring_sq`).
    #[test]
    fn a_list_with_a_local_operation_is_not_packets_only() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut sges = one_sge();
        let mut wrs = [
            send_wr(ffi::IBV_WR_SEND, &mut sges, 0),
            send_wr(ffi::IBV_WR_LOCAL_INV, &mut [], 0),
        ];
        let next: *mut ffi::ibv_send_wr = &mut wrs[1];
        wrs[0].next = next;
        let mut rung = None;
        let r = post_sends(&qp, list(wrs.as_mut_ptr()), |pi, packets_only| {
            rung = Some((pi, packets_only))
        });
        assert!(r.is_ok());
        assert_eq!(rung, Some((2, false)));
    }
}
