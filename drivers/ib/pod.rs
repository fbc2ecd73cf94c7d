// SPDX-License-Identifier: GPL-2.0
//! Plain-old-data markers for the `uapi/` structures the driver exchanges with the device (DMA
//! memory) and with user space (udata): the kernel crate's `FromBytes`/`AsBytes`.

use crate::hw::uapi::{admin, queue, udata};
use kernel::transmute::{AsBytes, FromBytes};

macro_rules! plain_old_data {
    ($($ty:ty),* $(,)?) => {$(
        // SAFETY: `uapi/` types are `#[repr(C)]` structs (or unions) of fixed-width integers,
        // integer arrays and `uapi::ids` numbers (`#[repr(transparent)]` over u32, any bit
        // pattern a value) with explicit reserved fields: every bit pattern is a valid value,
        // there is no interior mutability, and the uapi crate's compile-time size assertions
        // pin the layouts to padding-free sizes, so no byte is uninitialised.
        unsafe impl FromBytes for $ty {}
        // SAFETY: see above.
        unsafe impl AsBytes for $ty {}
    )*};
}

plain_old_data!(
    admin::AdminCmd,
    admin::AdminCpl,
    admin::DeviceAttr,
    admin::PortAttr,
    admin::PortCounters,
    admin::QpAttr,
    queue::Cqe,
    queue::Eqe,
    queue::RqWqe,
    queue::Sge,
    queue::SqWqe,
    udata::AllocUcontextResp,
    udata::CreateAhResp,
    udata::CreateCqReq,
    udata::CreateCqResp,
    udata::CreateQpReq,
    udata::CreateQpResp,
    udata::CreateSrqReq,
    udata::CreateSrqResp,
    udata::ModifySrqReq,
    udata::ResizeCqReq,
);
