// SPDX-License-Identifier: GPL-2.0
//! The C trampolines of `struct ib_device_ops`, by object family, and the ops table
//! ([`table`]) that points at them. Each trampoline turns ib_core's pointers back into the
//! driver's objects ([`super::obj`]) and calls the safe [`Verbs`] method of the same name.

mod ah;
mod cq;
mod datapath;
mod device;
mod mad;
mod mr;
mod qp;
mod srq;
mod xrcd;

use super::{bindings as b, mmap, obj::Obj, Verbs};
use kernel::{error::from_result, ffi::c_int, prelude::*};

/// The driver's ucontext of a user call, if any.
///
/// # Safety
///
/// `udata` is null or the udata ib_core passed to a callback of a `V` device.
unsafe fn ucontext_of<'a, V: Verbs>(udata: *mut b::ib_udata) -> Option<&'a V::Ucontext> {
    // SAFETY: a non-null udata is embedded in the call's attribute bundle.
    let uctx = unsafe { b::rox_shim_udata_ucontext(udata) };
    if uctx.is_null() {
        None
    } else {
        // SAFETY: ib_core allocated the ucontext with our size and it is alive (initialised)
        // for the duration of any call made through it.
        Some(unsafe { Obj::<b::ib_ucontext, V::Ucontext>::data_of(uctx) })
    }
}

fn errno(result: Result) -> c_int {
    from_result(|| result.map(|()| 0))
}

/// The ops table of a `V` device (ib_set_device_ops copies it).
pub(super) fn table<V: Verbs>() -> b::ib_device_ops {
    let mut ops = b::ib_device_ops {
        // SAFETY: the shim returns this module's `THIS_MODULE`.
        owner: unsafe { b::rox_shim_this_module() },
        driver_id: b::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
        // The ABI of rox's udata, which the provider checks.
        uverbs_abi_ver: crate::hw::uapi::udata::UVERBS_ABI_VERSION,
        ..Default::default()
    };
    // The provider matches by PCI id (no rdma_driver_id exists for rox).
    ops.set_uverbs_no_driver_id_binding(1);
    // Every udata is checked for size and answered through the udata helpers.
    ops.set_uverbs_robust_udata(1);

    ops.query_device = Some(device::query_device::<V>);
    ops.query_port = Some(device::query_port::<V>);
    ops.get_port_immutable = Some(device::get_port_immutable::<V>);
    ops.get_link_layer = Some(device::get_link_layer);
    ops.query_pkey = Some(device::query_pkey);
    ops.add_gid = Some(device::add_gid::<V>);
    ops.del_gid = Some(device::del_gid::<V>);
    ops.alloc_ucontext = Some(device::alloc_ucontext::<V>);
    ops.dealloc_ucontext = Some(device::dealloc_ucontext::<V>);
    ops.disassociate_ucontext = Some(device::disassociate_ucontext);
    ops.mmap = Some(mmap::mmap::<V>);
    ops.mmap_free = Some(mmap::mmap_free);
    ops.alloc_pd = Some(device::alloc_pd::<V>);
    ops.dealloc_pd = Some(device::dealloc_pd::<V>);
    ops.alloc_mw = Some(mr::alloc_mw::<V>);
    ops.dealloc_mw = Some(mr::dealloc_mw::<V>);
    ops.reg_user_mr = Some(mr::reg_user_mr::<V>);
    ops.get_dma_mr = Some(mr::get_dma_mr::<V>);
    ops.dereg_mr = Some(mr::dereg_mr::<V>);
    ops.alloc_mr = Some(mr::alloc_mr::<V>);
    ops.map_mr_sg = Some(mr::map_mr_sg::<V>);
    ops.advise_mr = Some(mr::advise_mr::<V>);
    ops.create_cq = Some(cq::create_cq::<V>);
    ops.destroy_cq = Some(cq::destroy_cq::<V>);
    ops.resize_user_cq = Some(cq::resize_user_cq::<V>);
    ops.create_qp = Some(qp::create_qp::<V>);
    ops.modify_qp = Some(qp::modify_qp::<V>);
    ops.query_qp = Some(qp::query_qp::<V>);
    ops.destroy_qp = Some(qp::destroy_qp::<V>);
    ops.create_srq = Some(srq::create_srq::<V>);
    ops.modify_srq = Some(srq::modify_srq::<V>);
    ops.query_srq = Some(srq::query_srq::<V>);
    ops.destroy_srq = Some(srq::destroy_srq::<V>);
    ops.alloc_xrcd = Some(xrcd::alloc_xrcd);
    ops.dealloc_xrcd = Some(xrcd::dealloc_xrcd);
    ops.create_ah = Some(ah::create_ah::<V>);
    ops.create_user_ah = Some(ah::create_ah::<V>);
    ops.query_ah = Some(ah::query_ah::<V>);
    ops.destroy_ah = Some(ah::destroy_ah::<V>);
    ops.attach_mcast = Some(qp::attach_mcast::<V>);
    ops.detach_mcast = Some(qp::detach_mcast::<V>);
    ops.alloc_hw_port_stats = Some(device::alloc_hw_port_stats);
    ops.get_hw_stats = Some(device::get_hw_stats::<V>);
    ops.process_mad = Some(mad::process_mad::<V>);
    ops.post_send = Some(datapath::post_send::<V>);
    ops.post_recv = Some(datapath::post_recv::<V>);
    ops.post_srq_recv = Some(datapath::post_srq_recv::<V>);
    ops.poll_cq = Some(datapath::poll_cq::<V>);
    ops.req_notify_cq = Some(datapath::req_notify_cq::<V>);

    ops.size_ib_ucontext = Obj::<b::ib_ucontext, V::Ucontext>::SIZE;
    ops.size_ib_pd = Obj::<b::ib_pd, V::Pd>::SIZE;
    ops.size_ib_mw = Obj::<b::ib_mw, V::Mw>::SIZE;
    ops.size_ib_cq = Obj::<b::ib_cq, V::Cq>::SIZE;
    ops.size_ib_qp = Obj::<b::ib_qp, V::Qp>::SIZE;
    ops.size_ib_srq = Obj::<b::ib_srq, V::Srq>::SIZE;
    ops.size_ib_ah = Obj::<b::ib_ah, V::Ah>::SIZE;
    ops.size_ib_xrcd = Obj::<b::ib_xrcd, super::xrcd::XrcdNum>::SIZE;
    ops
}
