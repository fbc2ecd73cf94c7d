// SPDX-License-Identifier: GPL-2.0
//! Trampolines of queue pairs: create, modify, query, destroy, multicast attach/detach.

use super::{errno, ucontext_of, xrcd::xrcd_num};
use crate::hw::uapi::ids::Qpn;
use crate::ib::{
    attr::{IbQpRef, QpAttr, QpCap},
    bindings as b,
    ibdev::ib_of,
    obj::{dev_of, Obj},
    QpInit, Udata, Verbs,
};
use kernel::{ffi::c_int, prelude::*};

/// The QP number of a QP this driver created (`create_qp` set `qp_num` from the device's
/// [`Qpn`]).
///
/// # Safety
///
/// `qp` is a live QP of this driver.
unsafe fn qpn_of(qp: *const b::ib_qp) -> Qpn {
    // SAFETY: per the function's requirements.
    let word = unsafe { (*qp).qp_num };
    Qpn::from_raw(word)
}

/// ib_core's `create_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a QP ib_core allocated
/// with the size of an `Obj` of `V`'s type, its driver data not initialised; `init` is valid
/// for reading and writing for the duration of the call; `udata` is null (kernel caller) or the
/// user call's udata, valid for the call.
pub(super) unsafe extern "C" fn create_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    init: *mut b::ib_qp_init_attr,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: ib_core passes a QP it allocated with our size and valid attributes whose PD,
    // CQs, SRQ and XRC domain belong to the same device and are alive for the QP's lifetime;
    // the PD is null only for an XRC target, the CQs only for XRC QPs (an initiator has no
    // receive CQ, a target none), the SRQ if the QP has none.
    let (dev, ibdev, init) = unsafe { (dev_of::<V>((*qp).device), (*qp).device, &mut *init) };
    let xrc_tgt = init.qp_type == b::ib_qp_type_IB_QPT_XRC_TGT;
    let xrc = xrc_tgt || init.qp_type == b::ib_qp_type_IB_QPT_XRC_INI;
    // SAFETY: as above.
    let (pd, xrcd) = unsafe { ((*qp).pd, init.xrcd) };
    let (send_cq, recv_cq, srq) = (init.send_cq, init.recv_cq, init.srq);
    let complete = if xrc_tgt {
        !xrcd.is_null()
    } else {
        !pd.is_null() && !send_cq.is_null() && (xrc || !recv_cq.is_null())
    };
    if !complete {
        return EINVAL.to_errno();
    }
    // SAFETY: non-null objects of this device, alive (see above).
    let (pd, send_cq, recv_cq, srq, xrcd) = unsafe {
        (
            (!pd.is_null()).then(|| Obj::<b::ib_pd, V::Pd>::data_of(pd)),
            (!send_cq.is_null()).then(|| Obj::<b::ib_cq, V::Cq>::data_of(send_cq)),
            (!recv_cq.is_null()).then(|| Obj::<b::ib_cq, V::Cq>::data_of(recv_cq)),
            (!srq.is_null()).then(|| Obj::<b::ib_srq, V::Srq>::data_of(srq)),
            if xrc_tgt {
                xrcd_num(xrcd)
            } else {
                crate::hw::uapi::admin::XRCD_NONE
            },
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let (mut udata_w, uctx) = unsafe { (Udata::from_raw(udata), ucontext_of::<V>(udata)) };
    let mut cap = QpCap::from_raw(&init.cap);
    let Some(ib_qp) = IbQpRef::new(qp) else {
        return EINVAL.to_errno();
    };
    let qp_init = QpInit {
        qp_type: init.qp_type,
        sq_sig_all: init.sq_sig_type == b::ib_sig_type_IB_SIGNAL_ALL_WR,
        port: init.port_num,
        cap: &mut cap,
        pd,
        send_cq,
        recv_cq,
        srq,
        xrcd,
        ib_qp,
    };
    let rc = errno((|| {
        let created = V::create_qp(dev, ib_of(ibdev), uctx, qp_init, &mut udata_w)?;
        let id = created.id;
        // SAFETY: fresh object; `qp_num` is ours to set; data not initialised.
        unsafe {
            (*qp).qp_num = id.get();
            Obj::<b::ib_qp, V::Qp>::init(qp, created.data);
        }
        if let Err(err) = V::registry(dev).insert_qp(id, qp, || V::admits(dev, uctx)) {
            // SAFETY: initialised just above; ib_core frees the memory on error.
            unsafe { Obj::<b::ib_qp, V::Qp>::destroy(qp, |data| V::destroy_qp(dev, data)) };
            return Err(err);
        }
        Ok(())
    })());
    cap.write_to(&mut init.cap);
    rc
}

/// ib_core's `modify_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call; `udata` is null (kernel caller) or the user call's udata, valid for the call.
pub(super) unsafe extern "C" fn modify_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    mask: c_int,
    udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: one of our live QPs and valid attributes.
    let (dev, data, attr) = unsafe {
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
            &*attr,
        )
    };
    // SAFETY: `udata` is null or valid for this call.
    let mut udata = unsafe { Udata::from_raw(udata) };
    errno(V::modify_qp(
        dev,
        data,
        &QpAttr::from_raw(attr),
        mask as u32,
        &mut udata,
    ))
}

/// ib_core's `query_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `attr` is valid for reading and writing for the duration of
/// the call; `init` is valid for reading and writing for the duration of the call.
pub(super) unsafe extern "C" fn query_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    attr: *mut b::ib_qp_attr,
    _mask: c_int,
    init: *mut b::ib_qp_init_attr,
) -> c_int {
    // SAFETY: one of our live QPs and valid output buffers.
    let (dev, data, attr, init) = unsafe {
        (
            dev_of::<V>((*qp).device),
            Obj::<b::ib_qp, V::Qp>::data_of(qp),
            &mut *attr,
            &mut *init,
        )
    };
    errno(V::query_qp(dev, data).map(|(a, i)| {
        a.write_to(attr);
        i.write_to(init);
    }))
}

/// ib_core's `destroy_qp` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP this driver
/// created, passed here once, with no other callback on it running or following.
pub(super) unsafe extern "C" fn destroy_qp<V: Verbs>(
    qp: *mut b::ib_qp,
    _udata: *mut b::ib_udata,
) -> c_int {
    // SAFETY: a QP created by `create_qp`, destroyed once.
    unsafe {
        let dev = dev_of::<V>((*qp).device);
        V::registry(dev).remove_qp(qpn_of(qp));
        Obj::<b::ib_qp, V::Qp>::destroy(qp, |data| V::destroy_qp(dev, data));
    }
    0
}

/// ib_core's `attach_mcast` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `gid` is valid for reading.
pub(super) unsafe extern "C" fn attach_mcast<V: Verbs>(
    qp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: one of our live QPs and a GID ib_core owns for the call; every bit pattern of
    // the union is a valid `raw` array.
    let (dev, qpn, gid) = unsafe { (dev_of::<V>((*qp).device), qpn_of(qp), (*gid).raw) };
    errno(V::attach_mcast(dev, qpn, &gid))
}

/// ib_core's `detach_mcast` callback (`ib_device_ops`), in the ops table of a `V` device.
///
/// # Safety
///
/// Called only by ib_core, with its contract for this callback: `qp` is a live QP of a `V`
/// device, created by this driver; `gid` is valid for reading.
pub(super) unsafe extern "C" fn detach_mcast<V: Verbs>(
    qp: *mut b::ib_qp,
    gid: *mut b::ib_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: as in `attach_mcast`.
    let (dev, qpn, gid) = unsafe { (dev_of::<V>((*qp).device), qpn_of(qp), (*gid).raw) };
    errno(V::detach_mcast(dev, qpn, &gid))
}
