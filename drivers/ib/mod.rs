// SPDX-License-Identifier: GPL-2.0
//! The thin safe layer over ib_core and the few kernel facilities the kernel crate does not
//! wrap (or wraps with `unsafe` constructors): every `unsafe` of rox.ko lives in this
//! directory, each with a `// SAFETY:` comment. The driver logic above it (`drivers/*.rs`) is
//! safe Rust.

mod attr;
pub(crate) mod bindings;
pub(crate) mod dma;
mod ibdev;
pub(crate) mod irq;
pub(crate) mod mmap;
pub(crate) mod netdev;
mod obj;
mod ops;
pub(crate) mod pci_peer;
mod pod;
mod registration;
mod registry;
mod udata;
pub(crate) mod umem;
pub(crate) mod umem_odp;
mod verbs;
mod wr;
pub(crate) mod xrcd;

pub(crate) use attr::{
    AhAttr, DeviceAttr, DeviceCapFlags, IbQpRef, MrAdvice, NetworkHdr, OdpCaps, OdpTransportCaps,
    PortAttr, PortImmutable, QpAttr, QpCap, QpInitAttr, SrqAttr, SrqAttrMask, Wc, WcFlags,
    WcOpcode, WcOut, QP_RATE_LIMIT,
};
pub(crate) use ibdev::IbDev;
pub(crate) use registration::{DeviceParams, IbRegistration};
pub(crate) use registry::{AsyncEvent, Registry};
pub(crate) use udata::Udata;
pub(crate) use verbs::{
    CqInit, Created, DeviceId, MadAnswer, QpInit, RegisteredMr, UserRange, Verbs, MAD_SIZE,
};
pub(crate) use wr::{RecvWr, SendFlags, SendWr, Sge, WrOpcode};

/// Whether ib_core's table of QP state transitions allows `cur -> next` for a QP of type
/// `qp_type` with attribute mask `mask` (IB spec 11.2.4.2 / `ib_modify_qp_is_ok`).
pub(crate) fn modify_qp_is_ok(cur: u32, next: u32, qp_type: u32, mask: u32) -> bool {
    // SAFETY: `ib_modify_qp_is_ok` is a pure table lookup that range-checks its arguments.
    unsafe { bindings::ib_modify_qp_is_ok(cur, next, qp_type, mask) }
}

/// The 16 bytes of a GID (network order).
pub(super) fn gid_bytes(gid: &bindings::ib_gid) -> [u8; 16] {
    // SAFETY: both members of the `ib_gid` union are plain bytes; any bit pattern is valid.
    unsafe { gid.raw }
}

/// The destination MAC of a RoCE address (ib_core resolves it before calling the driver).
pub(super) fn roce_dmac(ah: &bindings::rdma_ah_attr) -> [u8; 6] {
    // SAFETY: the union's members are plain bytes; for RoCE (`RDMA_AH_ATTR_TYPE_ROCE`) `roce` is
    // the live member, and any bit pattern is valid for the others.
    unsafe { ah.__bindgen_anon_1.roce.dmac }
}

/// A PCI id table entry for `vendor:device` (any subsystem). The kernel crate builds entries
/// only from its list of known vendors, which does not hold rox-nic's.
pub(crate) const fn pci_device_id(vendor: u16, device: u16) -> kernel::pci::DeviceId {
    const PCI_ANY_ID: u32 = !0;
    let raw = kernel::bindings::pci_device_id {
        vendor: vendor as u32,
        device: device as u32,
        subvendor: PCI_ANY_ID,
        subdevice: PCI_ANY_ID,
        class: 0,
        class_mask: 0,
        driver_data: 0,
        override_only: 0,
    };
    // SAFETY: `pci::DeviceId` is `#[repr(transparent)]` over `bindings::pci_device_id`, and any
    // id/any-subsystem entry is a valid one (the kernel crate's `from_id` builds the same).
    unsafe { core::mem::transmute::<kernel::bindings::pci_device_id, kernel::pci::DeviceId>(raw) }
}
