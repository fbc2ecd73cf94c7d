//! Send WQEs: an `ibv_send_wr` formatted for the send ring, ibv_post_send, and the single
//! posts of work requests that come some other way (ibv_bind_mw).

#![deny(unsafe_code)]

use super::post::{post_list, PostError};
use super::RoxQp;
use crate::context::ContextHw;
use crate::sys::doorbell::SlotWord;
use crate::sys::errno::{Result, EINVAL, ENOMEM};
use crate::sys::ffi;
use crate::sys::wr::{SendWr, WrList};
use crate::wqe::{self, SqAttrs};
use core::sync::atomic::{AtomicU32, Ordering};
use rox_uapi::queue::{SqSeg, SqWqe};
use rox_uapi::verbs;

/// Format the send WQE of `wr` (to be written at slot `index`) for a queue of `sq` whose QP's
/// Q_Key is `qkey`.
pub(super) fn send_wqe(
    sq: &SqAttrs,
    qkey: &AtomicU32,
    wr: &SendWr<'_>,
    index: u32,
) -> Result<SqWqe> {
    let opcode = wqe::wr_opcode(wr.opcode()).ok_or(EINVAL)?;
    // `ibv_send_wr` has no fields for FLUSH / ATOMIC WRITE: only the extended post API
    // (ibv_wr_flush / ibv_wr_atomic_write) can express them.
    if matches!(opcode, verbs::WR_FLUSH | verbs::WR_ATOMIC_WRITE) {
        return Err(EINVAL);
    }
    let mut wqe = wqe::new_wqe(sq, opcode, wr.send_flags(), index)?;
    if sq.qp_type == ffi::IBV_QPT_XRC_SEND {
        wqe.xrc_srqn = wr.xrc_remote_srqn();
    }
    if matches!(
        opcode,
        verbs::WR_SEND_WITH_IMM | verbs::WR_RDMA_WRITE_WITH_IMM
    ) {
        // The value is in network order already.
        wqe.imm_data = wr.imm_data();
    }
    wqe.seg = match opcode {
        _ if sq.qp_type == ffi::IBV_QPT_UD => {
            let (ah, remote_qpn, remote_qkey) = wr.ud();
            let ah = ah.ok_or(EINVAL)?;
            SqSeg {
                ud: wqe::ud_seg(
                    &ah.addr,
                    remote_qpn,
                    remote_qkey,
                    qkey.load(Ordering::Relaxed),
                ),
            }
        }
        verbs::WR_ATOMIC_CMP_AND_SWP | verbs::WR_ATOMIC_FETCH_AND_ADD => {
            let (remote_addr, rkey, compare_add, swap) = wr.atomic();
            SqSeg::atomic(remote_addr, rkey, compare_add, swap)
        }
        verbs::WR_SEND | verbs::WR_SEND_WITH_IMM => SqSeg::default(),
        verbs::WR_SEND_WITH_INV | verbs::WR_LOCAL_INV => SqSeg::invalidate(wr.invalidate_rkey()),
        verbs::WR_BIND_MW => {
            // Type 1 windows are bound with ibv_bind_mw only (crate::mw).
            let (mw, new_rkey, info) = wr.bind_mw().ok_or(EINVAL)?;
            if mw.mw_type != ffi::IBV_MW_TYPE_2 {
                return Err(EINVAL);
            }
            wqe::bind_seg(mw.rkey, new_rkey, &info)?
        }
        _ => {
            let (remote_addr, rkey) = wr.rdma();
            SqSeg::remote(remote_addr, rkey)
        }
    };
    if matches!(opcode, verbs::WR_BIND_MW | verbs::WR_LOCAL_INV) {
        // No data: the SGE list is ignored.
        return Ok(wqe);
    }
    if wr.send_flags() & ffi::IBV_SEND_INLINE != 0 {
        wqe::set_inline(sq, &mut wqe, wr.inline_bufs()?)?;
    } else {
        wqe::set_sges(sq, &mut wqe, wr.sges(sq.max_sge)?)?;
    }
    Ok(wqe)
}

/// Post one WQE that `make` formats for a slot index, and ring the doorbell: for work
/// requests that do not come as an `ibv_send_wr` list (ibv_bind_mw).
pub(crate) fn post_one(
    qp: &RoxQp,
    hw: &ContextHw,
    wr_id: u64,
    make: impl FnOnce(&SqAttrs, u32) -> Result<SqWqe>,
) -> Result<()> {
    if !qp.can_send() {
        return Err(EINVAL);
    }
    let mut sq = qp.sq.lock();
    let index = sq.next_index().ok_or(ENOMEM)?;
    let wqe = make(&qp.sq_attrs, index)?;
    sq.write(index, wqe);
    sq.commit(wr_id);
    hw.ring(qp.db_slot, SlotWord::A, sq.pi());
    Ok(())
}

/// `ibv_post_send` of the application's list `wrs`.
pub fn post_send(
    qp: &RoxQp,
    hw: &ContextHw,
    wrs: WrList<'_, ffi::ibv_send_wr>,
) -> core::result::Result<(), PostError<ffi::ibv_send_wr>> {
    if !qp.can_send() {
        return Err((wrs.head(), EINVAL));
    }
    post_sends(qp, wrs, |pi, packets_only| {
        hw.ring_sq(qp.db_slot, &qp.sq_attrs, packets_only, pi)
    })
}

/// Format and store the send WRs `wrs` in `qp`'s send ring; `ring_doorbell` announces the new
/// producer index and whether every WQE stored sends packets (none is a local operation:
/// `ContextHw::ring_sq`); post_send rings the QP's doorbell slot, the tests record it.
pub(super) fn post_sends(
    qp: &RoxQp,
    wrs: WrList<'_, ffi::ibv_send_wr>,
    ring_doorbell: impl FnOnce(u32, bool),
) -> core::result::Result<(), PostError<ffi::ibv_send_wr>> {
    let mut packets_only = true;
    let mut sq = qp.sq.lock();
    let mut stored = None;
    let result = post_list(
        &mut sq,
        |pi| stored = Some(pi),
        wrs,
        |w, index, wq| {
            let wqe = send_wqe(&qp.sq_attrs, &qp.qkey, w, index)?;
            packets_only &= !verbs::wr_opcode_is_local(wqe.opcode);
            wq.write(index, wqe);
            Ok(w.wr_id())
        },
    );
    if let Some(pi) = stored {
        ring_doorbell(pi, packets_only);
    }
    result
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::qp::tests::{list, test_ah, test_qp};
    use crate::sys::ffi::Zeroable;
    use crate::sys::wr::seg;
    use crate::wqe::{sge_at, QKEY_USE_QP};
    use core::ffi::c_int;
    use rox_uapi::ids::{Key, Qpn};
    use rox_uapi::queue::{Cqe, Sge, UdSeg, WQE_FLAG_FENCE, WQE_FLAG_INLINE, WQE_FLAG_SIGNALED};

    /// `send_wqe` of one application WR.
    fn format(qp: &RoxQp, wr: &ffi::ibv_send_wr, index: u32) -> Result<SqWqe> {
        let (_, w) = list((wr as *const ffi::ibv_send_wr).cast_mut())
            .next()
            .expect("one WR");
        send_wqe(&qp.sq_attrs, &qp.qkey, &w, index)
    }

    pub(in crate::qp) fn send_wr(
        opcode: ffi::ibv_wr_opcode,
        sges: &mut [ffi::ibv_sge],
        flags: u32,
    ) -> ffi::ibv_send_wr {
        let mut wr = ffi::ibv_send_wr::zeroed();
        wr.wr_id = 0xabcd;
        wr.opcode = opcode;
        wr.send_flags = flags;
        wr.sg_list = sges.as_mut_ptr();
        wr.num_sge = sges.len() as c_int;
        wr
    }

    #[test]
    fn rdma_write_wqe() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }];
        let mut wr = send_wr(
            ffi::IBV_WR_RDMA_WRITE_WITH_IMM,
            &mut sges,
            ffi::IBV_SEND_SIGNALED | ffi::IBV_SEND_FENCE,
        );
        wr.__bindgen_anon_1.imm_data = 0x0102_0304;
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: 0xdead_0000,
            rkey: 9,
        };
        let wqe = format(&qp, &wr, 5).expect("valid WR");
        assert_eq!(
            wqe.wr_id, 5,
            "the WQE carries its slot index, not the caller's wr_id"
        );
        assert_eq!(wqe.opcode, verbs::WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(wqe.flags, WQE_FLAG_SIGNALED | WQE_FLAG_FENCE);
        assert_eq!(wqe.imm_data, 0x0102_0304);
        assert_eq!(wqe.num_sge, 1);
        let rdma = seg::rdma(&wqe.seg);
        assert_eq!(
            (rdma.remote_addr, rdma.rkey),
            (0xdead_0000, Key::from_raw(9))
        );
        assert_eq!(
            sge_at(&wqe.data, 0),
            Sge {
                addr: 0x1000,
                length: 64,
                lkey: Key::from_raw(7)
            }
        );
    }

    #[test]
    fn inline_send_copies_the_payload() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let a = *b"hello ";
        let b = *b"rox";
        let mut sges = [
            ffi::ibv_sge {
                addr: a.as_ptr() as u64,
                length: a.len() as u32,
                lkey: 0,
            },
            ffi::ibv_sge {
                addr: b.as_ptr() as u64,
                length: b.len() as u32,
                lkey: 0,
            },
        ];
        let wr = send_wr(ffi::IBV_WR_SEND, &mut sges, ffi::IBV_SEND_INLINE);
        let wqe = format(&qp, &wr, 0).expect("valid WR");
        assert_eq!(wqe.flags, WQE_FLAG_INLINE);
        assert_eq!(&wqe.data[..wqe.inline_len as usize], b"hello rox");
    }

    #[test]
    fn invalid_send_wrs() {
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut three = [ffi::ibv_sge {
            addr: 0,
            length: 1,
            lkey: 0,
        }; 3];
        assert_eq!(
            format(&qp, &send_wr(ffi::IBV_WR_SEND, &mut three, 0), 0).err(),
            Some(EINVAL)
        );
        let big = [0u8; 65];
        let mut one = [ffi::ibv_sge {
            addr: big.as_ptr() as u64,
            length: 65,
            lkey: 0,
        }];
        let inline_too_big = send_wr(ffi::IBV_WR_SEND, &mut one, ffi::IBV_SEND_INLINE);
        assert_eq!(format(&qp, &inline_too_big, 0).err(), Some(EINVAL));
        assert_eq!(
            format(&qp, &send_wr(ffi::IBV_WR_TSO, &mut [], 0), 0).err(),
            Some(EINVAL)
        );
        // FLUSH / ATOMIC WRITE only through ibv_wr_*; BIND_MW needs a type 2 window.
        for op in [
            ffi::IBV_WR_FLUSH,
            ffi::IBV_WR_ATOMIC_WRITE,
            ffi::IBV_WR_BIND_MW,
        ] {
            assert_eq!(format(&qp, &send_wr(op, &mut [], 0), 0).err(), Some(EINVAL));
        }
        // LOCAL_INV and SEND_WITH_INV carry the rkey to invalidate.
        let mut inv = send_wr(ffi::IBV_WR_LOCAL_INV, &mut [], 0);
        inv.__bindgen_anon_1.invalidate_rkey = 0x8000_0123;
        let wqe = format(&qp, &inv, 0).expect("valid");
        assert_eq!(
            (wqe.opcode, seg::rdma(&wqe.seg).rkey),
            (verbs::WR_LOCAL_INV, Key::from_raw(0x8000_0123))
        );
        let uc = test_qp(ffi::IBV_QPT_UC);
        assert_eq!(
            format(&uc, &send_wr(ffi::IBV_WR_RDMA_READ, &mut [], 0), 0).err(),
            Some(EINVAL)
        );
        let ud = test_qp(ffi::IBV_QPT_UD);
        assert_eq!(
            format(&ud, &send_wr(ffi::IBV_WR_SEND, &mut [], 0), 0).err(),
            Some(EINVAL),
            "no AH"
        );
    }

    #[test]
    fn ud_send_carries_the_ahs_address_and_mac() {
        let qp = test_qp(ffi::IBV_QPT_UD);
        let mut ah = test_ah();
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }];
        let mut wr = send_wr(ffi::IBV_WR_SEND, &mut sges, 0);
        wr.wr.ud = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: &raw mut ah.ibv_ah,
            remote_qpn: 0x42,
            remote_qkey: QKEY_USE_QP,
        };
        let wqe = format(&qp, &wr, 0).expect("valid WR");
        let ud = seg::ud(&wqe.seg);
        assert_eq!(
            ud,
            UdSeg {
                dgid: ah.addr.dgid,
                dest_qpn: Qpn::new(0x42).expect("a QPN"),
                qkey: 0x1111_1111,
                flow_label: 0x12345,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0x20,
                dmac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
                ..Default::default()
            },
            "the QP's Q_Key for a Q_Key with the high bit set, the AH's MAC"
        );
    }

    /// Host micro-benchmark of librox's own data-path work per message (no device, no
    /// syscall): post one signaled SEND with one SGE (lock, format, write the WQE, commit),
    /// then — after the test writes its CQE as the device would — poll it (owner check, read,
    /// retire the slot, build the `ibv_wc`). Run with
    /// `cargo test --release -- --ignored --nocapture post_poll_benchmark` (in the root).
    #[test]
    #[ignore = "micro-benchmark"]
    fn post_poll_benchmark() {
        use crate::cq::work_completion;
        use crate::sys::memory::CqeRing;
        const ROUNDS: u32 = 2_000_000;
        let qp = test_qp(ffi::IBV_QPT_RC);
        let mut cq = CqeRing::new(4).expect("ring");
        let mut sges = [ffi::ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }];
        let mut wr = send_wr(ffi::IBV_WR_SEND, &mut sges, ffi::IBV_SEND_SIGNALED);
        let mut ci = 0u32;
        let mut sum = 0u64;
        let start = std::time::Instant::now();
        for round in 0..ROUNDS {
            wr.wr_id = u64::from(round);
            let mut rung = 0;
            let r = post_sends(&qp, list(&raw mut wr), |pi, _| rung = pi);
            assert!(r.is_ok() && rung == round.wrapping_add(1));
            cq.device_writes(
                ci,
                Cqe {
                    wr_id: u64::from(round),
                    opcode: verbs::WC_OPC_SEND,
                    ..Default::default()
                },
            );
            let cqe = cq.take(ci).expect("a CQE");
            ci = ci.wrapping_add(1);
            let wc = work_completion(&cqe, qp.retire(&cqe).expect("outstanding"));
            sum = sum.wrapping_add(wc.wr_id);
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
        assert_eq!(sum, (0..u64::from(ROUNDS)).sum::<u64>());
        println!("post_poll_benchmark: {ns:.1} ns per post_send + poll_cq ({ROUNDS} rounds)");
    }
}
