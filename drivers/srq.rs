// SPDX-License-Identifier: GPL-2.0
//! Shared receive queues: ring in user memory, producer index in a doorbell slot, the limit
//! event (`IB_EVENT_SRQ_LIMIT_REACHED`) from the device.

use crate::{
    admin::payload,
    dev::RoxDev,
    hw::uapi::{admin, queue, udata as ud, verbs},
    ib::{bindings as b, Created, DeviceId, IbDev, Udata},
    ids::DbSlot,
    mr::UserRing,
    verbs::Ucontext,
};
use kernel::prelude::*;

pub(crate) struct Srq {
    id: u32,
    max_wr: u32,
    max_sge: u32,
    _ring: UserRing,
    _db: DbSlot,
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
    attr: &mut b::ib_srq_attr,
    udata: &mut Udata<'_>,
) -> Result<Created<Srq>> {
    let uctx = uctx.ok_or(EOPNOTSUPP)?;
    let req: ud::CreateSrqReq = udata.read()?;
    let log_depth = req.log_depth;
    if !(u32::from(admin::DEV_MIN_LOG_DEPTH)..=u32::from(admin::DEV_MAX_LOG_WQ_DEPTH))
        .contains(&log_depth)
    {
        return Err(EINVAL);
    }
    let depth = 1u32 << log_depth;
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
    let db = uctx.alloc_db_slot()?;
    let cmd = admin::CreateSrqCmd {
        pd: pdn,
        log_depth: log_depth as u8,
        limit: attr.srq_limit,
        db_page: uctx.db_page(),
        db_slot: db.slot(),
        ring: ring.desc(),
        ..Default::default()
    };
    let id = dev
        .exec(admin::ADMIN_OP_CREATE_SRQ, payload!(create_srq: cmd))?
        .result0;
    let srq = Srq {
        id,
        max_wr: depth,
        max_sge: queue::RQ_MAX_SGE.min(dev.attr.max_srq_sge),
        _ring: ring,
        _db: db,
    };
    let resp = ud::CreateSrqResp {
        srq_id: id,
        db_slot: srq._db.slot(),
    };
    if let Err(err) = udata.respond(&resp) {
        destroy(dev, &srq);
        return Err(err);
    }
    attr.max_wr = srq.max_wr;
    attr.max_sge = srq.max_sge;
    Ok(Created {
        data: srq,
        id,
        size: depth,
    })
}

pub(crate) fn modify(
    dev: &RoxDev<'_>,
    srq: &Srq,
    attr: &b::ib_srq_attr,
    mask: u32,
    udata: &mut Udata<'_>,
) -> Result {
    udata.expect_no_input()?;
    if mask & b::ib_srq_attr_mask_IB_SRQ_MAX_WR != 0 {
        // The ring is fixed: resizing is not supported (and not advertised).
        return Err(EINVAL);
    }
    if mask & b::ib_srq_attr_mask_IB_SRQ_LIMIT != 0 {
        if attr.srq_limit > srq.max_wr {
            return Err(EINVAL);
        }
        let cmd = admin::ModifySrqCmd {
            srq: srq.id,
            attr_mask: admin::SRQ_ATTR_LIMIT,
            limit: attr.srq_limit,
            reserved: 0,
        };
        dev.exec(admin::ADMIN_OP_MODIFY_SRQ, payload!(modify_srq: cmd))?;
    }
    udata.respond_empty()
}

pub(crate) fn query(dev: &RoxDev<'_>, srq: &Srq, attr: &mut b::ib_srq_attr) -> Result {
    let cmd = admin::HandleCmd {
        handle: srq.id,
        reserved: 0,
    };
    let cpl = dev.exec(admin::ADMIN_OP_QUERY_SRQ, payload!(handle: cmd))?;
    attr.max_wr = srq.max_wr;
    attr.max_sge = srq.max_sge;
    attr.srq_limit = cpl.result0;
    Ok(())
}

pub(crate) fn destroy(dev: &RoxDev<'_>, srq: &Srq) {
    let cmd = admin::HandleCmd {
        handle: srq.id,
        reserved: 0,
    };
    if let Err(err) = dev.exec(admin::ADMIN_OP_DESTROY_SRQ, payload!(handle: cmd)) {
        dev_warn!(
            dev.pdev.as_ref(),
            "DESTROY_SRQ {} failed: {:?}\n",
            srq.id,
            err
        );
    }
}
