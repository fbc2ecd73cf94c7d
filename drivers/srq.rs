// SPDX-License-Identifier: GPL-2.0
//! Shared receive queues: ring in user memory, producer index in a doorbell slot, the limit
//! event (`IB_EVENT_SRQ_LIMIT_REACHED`) from the device, and resizing: librox hands a new
//! ring that already holds every posted WQE at its free-running index; the device switches
//! to it (MODIFY_SRQ with `SRQ_ATTR_MAX_WR`) and the old ring's pin is dropped.
//!
//! Kernel SRQs (nvmet-rdma, svcrdma): the ring is coherent DMA memory, the producer index a
//! slot of the driver's own doorbell page; `post_recv` writes WQEs, `ring` tells the device.
//! The limit event works as for user SRQs; kernel SRQs are not resized.

use crate::{
    dead::gone_if_dead,
    dev::RoxDev,
    hw::regs,
    hw::uapi::{admin, queue, udata as ud, verbs},
    ib::{Created, DeviceId, IbDev, RecvWr, SrqAttr, SrqAttrMask, Udata},
    ids::DbSlot,
    ring::UserRing,
    ucontext::Ucontext,
    wq::{kernel_log_depth, rq_wqe, DbWord, KernelWq, Posted},
};
use kernel::{new_mutex, prelude::*, sync::Mutex};

/// The ring the device reads and its depth; replaced by a resize.
struct SrqRing {
    max_wr: u32,
    /// None for kernel SRQs (their ring is `Srq::kernel`'s).
    _ring: Option<UserRing>,
}

pub(crate) struct Srq {
    id: u32,
    max_sge: u32,
    /// Taken by modify (resize, limit) and query: ib_core runs them concurrently.
    ring: Pin<KBox<Mutex<SrqRing>>>,
    db: DbSlot,
    /// Kernel SRQs: the ring the driver writes.
    kernel: Option<KernelWq<queue::RqWqe>>,
}

/// Checks a ring depth of udata and returns it (`1 << log_depth`).
fn ring_depth(log_depth: u32) -> Result<u32> {
    if !(u32::from(admin::DEV_MIN_LOG_DEPTH)..=u32::from(admin::DEV_MAX_LOG_WQ_DEPTH))
        .contains(&log_depth)
    {
        return Err(EINVAL);
    }
    Ok(1 << log_depth)
}

impl DeviceId for Srq {
    fn device_id(&self) -> u32 {
        self.id
    }
}

pub(crate) fn create(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    uctx: Option<&Ucontext>,
    pdn: u32,
    attr: &mut SrqAttr,
    udata: &mut Udata<'_>,
) -> Result<Created<Srq>> {
    let Some(uctx) = uctx else {
        return create_kernel(dev, pdn, attr);
    };
    let req: ud::CreateSrqReq = udata.read()?;
    let log_depth = req.log_depth;
    let depth = ring_depth(log_depth)?;
    if attr.max_wr == 0
        || attr.max_wr > depth
        || attr.max_wr > dev.attr.max_srq_wr
        || attr.max_sge > queue::RQ_MAX_SGE.min(dev.attr.max_srq_sge)
        || attr.srq_limit > attr.max_wr
    {
        return Err(EINVAL);
    }
    let ring = UserRing::new(
        dev,
        ib,
        req.buf_addr,
        queue::RQ_WQE_SIZE << log_depth,
        verbs::ACCESS_LOCAL_WRITE,
    )?;
    let db = uctx.alloc_db_slot(dev)?;
    let cmd = admin::CreateSrqCmd {
        pd: pdn,
        log_depth: log_depth as u8,
        limit: attr.srq_limit,
        db_page: uctx.db_page(),
        db_slot: db.slot(),
        ring: ring.desc(),
        xrcd: attr.xrc.map_or(admin::XRCD_NONE, |x| x.xrcd),
        cq: attr.xrc.map_or(0, |x| x.cq),
        ..Default::default()
    };
    // The ring's home is allocated first: once the device has the SRQ, nothing may fail and
    // unpin the ring before the SRQ is destroyed.
    let ring = KBox::pin_init(
        new_mutex!(SrqRing {
            max_wr: depth,
            _ring: Some(ring),
        }),
        GFP_KERNEL,
    )?;
    let id = dev.run::<admin::CreateSrq>(cmd)?;
    let srq = Srq {
        id,
        max_sge: queue::RQ_MAX_SGE.min(dev.attr.max_srq_sge),
        ring,
        db,
        kernel: None,
    };
    let resp = ud::CreateSrqResp {
        srq_id: id,
        db_slot: srq.db.slot(),
    };
    if let Err(err) = udata.respond(&resp) {
        destroy(dev, &srq);
        return Err(err);
    }
    attr.max_wr = depth;
    attr.max_sge = srq.max_sge;
    Ok(Created {
        data: srq,
        id,
        size: depth,
    })
}

/// A kernel consumer's SRQ: ring in coherent DMA memory, a slot of the driver's doorbell page.
fn create_kernel(dev: &RoxDev<'_>, pdn: u32, attr: &mut SrqAttr) -> Result<Created<Srq>> {
    // XRC is for user processes (ibv_open_xrcd); no kernel consumer creates XRC SRQs.
    if attr.xrc.is_some() {
        return Err(EOPNOTSUPP);
    }
    let max_sge = queue::RQ_MAX_SGE.min(dev.attr.max_srq_sge);
    if attr.max_wr == 0
        || attr.max_wr > dev.attr.max_srq_wr
        || attr.max_sge > max_sge
        || attr.srq_limit > attr.max_wr
    {
        return Err(EINVAL);
    }
    let log_depth = kernel_log_depth::<queue::RqWqe>(attr.max_wr)?;
    let depth = 1u32 << log_depth;
    let wq = KernelWq::<queue::RqWqe>::new(dev.pdev.as_ref(), log_depth)?;
    let db = DbSlot::alloc(&dev.kernel_slots)?;
    let ring_state = KBox::pin_init(
        new_mutex!(SrqRing {
            max_wr: depth,
            _ring: None,
        }),
        GFP_KERNEL,
    )?;
    let cmd = admin::CreateSrqCmd {
        pd: pdn,
        log_depth: log_depth as u8,
        limit: attr.srq_limit,
        db_page: regs::DB_PAGE_KERNEL,
        db_slot: db.slot(),
        ring: wq.desc(),
        ..Default::default()
    };
    let id = dev.run::<admin::CreateSrq>(cmd)?;
    attr.max_wr = depth;
    attr.max_sge = max_sge;
    Ok(Created {
        data: Srq {
            id,
            max_sge,
            ring: ring_state,
            db,
            kernel: Some(wq),
        },
        id,
        size: depth,
    })
}

/// Kernel SRQs: writes one receive WQE (the consumer keeps at most `max_wr` posted, as the
/// verbs require).
pub(crate) fn post_recv(_dev: &RoxDev<'_>, srq: &Srq, wr: &RecvWr<'_>) -> Result {
    let k = srq.kernel.as_ref().ok_or(EOPNOTSUPP)?;
    // A dead device's SRQ entries are not completed in software (`dead.rs`).
    k.post(rq_wqe(wr, srq.max_sge)?, Posted::recv(wr.wr_id()))
}

/// Kernel SRQs: tells the device about new receive WQEs.
pub(crate) fn ring(dev: &RoxDev<'_>, srq: &Srq) {
    let Some(k) = srq.kernel.as_ref() else {
        return;
    };
    k.ring(dev, srq.db.slot(), DbWord::A);
}

/// Resize (`IB_SRQ_MAX_WR`, with the new ring in udata) and/or arm the limit
/// (`IB_SRQ_LIMIT`). A resize never loses a posted WQE: librox copied them into the new ring,
/// and the device refuses a ring too small for the WQEs still posted (EINVAL), in which case
/// the old ring stays in use.
pub(crate) fn modify(
    dev: &RoxDev<'_>,
    ib: IbDev<'_>,
    srq: &Srq,
    attr: &SrqAttr,
    mask: SrqAttrMask,
    udata: &mut Udata<'_>,
) -> Result {
    if !mask
        .difference(SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT)
        .is_empty()
    {
        return Err(EINVAL);
    }
    let resize = mask.contains(SrqAttrMask::MAX_WR);
    if resize && srq.kernel.is_some() {
        return Err(EOPNOTSUPP);
    }
    let mut state = srq.ring.lock();
    let mut cmd = admin::ModifySrqCmd {
        srq: srq.id,
        ..Default::default()
    };
    let mut new_ring = None;
    if resize {
        let req: ud::ModifySrqReq = udata.read()?;
        let depth = ring_depth(req.log_depth)?;
        if attr.max_wr == 0 || attr.max_wr > depth || attr.max_wr > dev.attr.max_srq_wr {
            return Err(EINVAL);
        }
        let ring = UserRing::new(
            dev,
            ib,
            req.buf_addr,
            queue::RQ_WQE_SIZE << req.log_depth,
            verbs::ACCESS_LOCAL_WRITE,
        )?;
        cmd.attr_mask |= admin::SRQ_ATTR_MAX_WR;
        cmd.log_depth = req.log_depth as u8;
        cmd.ring = ring.desc();
        new_ring = Some((depth, ring));
    } else {
        udata.expect_no_input()?;
    }
    let depth = new_ring.as_ref().map_or(state.max_wr, |(d, _)| *d);
    if mask.contains(SrqAttrMask::LIMIT) {
        if attr.srq_limit > depth {
            return Err(EINVAL);
        }
        cmd.attr_mask |= admin::SRQ_ATTR_LIMIT;
        cmd.limit = attr.srq_limit;
    }
    if cmd.attr_mask != 0 {
        dev.run::<admin::ModifySrq>(cmd)?;
    }
    if let Some((max_wr, ring)) = new_ring {
        // The device reads the new ring now; the old one's pin goes with the old value.
        *state = SrqRing {
            max_wr,
            _ring: Some(ring),
        };
    }
    drop(state);
    udata.respond_empty()
}

pub(crate) fn query(dev: &RoxDev<'_>, srq: &Srq) -> Result<SrqAttr> {
    let cmd = admin::HandleCmd {
        handle: srq.id,
        reserved: 0,
    };
    let state = srq.ring.lock();
    let counts = dev.run::<admin::QuerySrq>(cmd)?;
    Ok(SrqAttr {
        max_wr: state.max_wr,
        max_sge: srq.max_sge,
        srq_limit: counts.limit,
        xrc: None,
    })
}

pub(crate) fn destroy(dev: &RoxDev<'_>, srq: &Srq) {
    destroy_id(dev, srq.id)
}

fn destroy_id(dev: &RoxDev<'_>, id: u32) {
    let cmd = admin::HandleCmd {
        handle: id,
        reserved: 0,
    };
    // A dead device fails it at once, and has forgotten the SRQ.
    if let Err(err) = dev
        .run::<admin::DestroySrq>(cmd)
        .or_else(|e| gone_if_dead(dev, e))
    {
        dev_warn!(dev.pdev.as_ref(), "DESTROY_SRQ {} failed: {:?}\n", id, err);
    }
}
