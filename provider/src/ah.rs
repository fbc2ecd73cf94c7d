//! Address handles (UD): created through rox.ko (which validates the GID and SGID index); librox
//! keeps the address vector UD send WQEs (`queue::UdSeg`) are built from, with the destination
//! MAC ib_core resolved for it (rox.ko's `udata::CreateAhResp`): rox-nic puts it on the frame.

use crate::sys::errno::{int_errno, ptr_or_errno, Errno, Result};
use crate::sys::ffi::{self, DrvResp, Zeroable};
use core::ffi::c_int;
use core::mem::{offset_of, size_of_val};
use rox_uapi::udata::CreateAhResp;

#[repr(C)]
pub struct RoxAh {
    pub ibv_ah: ffi::ibv_ah,
    /// The attributes the AH was created with (destination GID, SGID index, hop limit,
    /// traffic class, flow label).
    pub attr: ffi::ibv_ah_attr,
    /// Destination MAC resolved by the kernel (`udata::CreateAhResp::dmac`); `attr`'s hop limit
    /// is the kernel's too.
    pub dmac: [u8; 6],
}
const _: () = assert!(offset_of!(RoxAh, ibv_ah) == 0);

impl RoxAh {
    /// # Safety
    /// `ah` must be an `ibv_ah` made by [`create_ah`] and still alive.
    pub unsafe fn from_ibv<'a>(ah: *mut ffi::ibv_ah) -> &'a RoxAh {
        // SAFETY: the ibv_ah is the first member of RoxAh.
        unsafe { &*ah.cast::<RoxAh>() }
    }
}

fn create(pd: *mut ffi::ibv_pd, attr: &mut ffi::ibv_ah_attr) -> Result<*mut ffi::ibv_ah> {
    let ah = Box::into_raw(Box::new(RoxAh {
        ibv_ah: Zeroable::zeroed(),
        attr: *attr,
        dmac: [0; 6],
    }));
    let mut resp = DrvResp::<ffi::ib_uverbs_create_ah_resp, CreateAhResp>::new();
    // SAFETY: arguments from libibverbs; our own ibv_ah (stable heap address) and a response
    // buffer of the size given (core response followed by rox's).
    let ret = unsafe {
        ffi::ibv_cmd_create_ah(
            pd,
            &mut (*ah).ibv_ah,
            attr,
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    if let Err(e) = Errno::check(ret) {
        // SAFETY: the kernel has no AH; reclaim the box made above.
        drop(unsafe { Box::from_raw(ah) });
        return Err(e);
    }
    // SAFETY: `ah` is live and not yet shared.
    unsafe {
        (*ah).dmac = resp.drv.dmac;
        // The hop limit of the route ib_core resolved (a routed GID needs more than the 1 an
        // application may have asked for).
        (*ah).attr.grh.hop_limit = resp.drv.hop_limit;
    }
    // SAFETY: `ah` is live.
    Ok(unsafe { &raw mut (*ah).ibv_ah })
}

pub unsafe extern "C" fn create_ah(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_ah_attr,
) -> *mut ffi::ibv_ah {
    // SAFETY: libibverbs passes a valid attribute struct.
    ptr_or_errno(create(pd, unsafe { &mut *attr }))
}

pub unsafe extern "C" fn destroy_ah(ah: *mut ffi::ibv_ah) -> c_int {
    // SAFETY: libibverbs passes an AH made by create_ah.
    let ret = unsafe { ffi::ibv_cmd_destroy_ah(ah) };
    if ret == 0 {
        // SAFETY: destroyed in the kernel; the RoxAh box is ours to free.
        drop(unsafe { Box::from_raw(ah.cast::<RoxAh>()) });
    }
    int_errno(Errno::check(ret))
}
