//! rox hardware and software interface: the one definition shared by rox-nic (the device),
//! rox.ko (the kernel driver, which includes these files with `#[path]`, without external crates)
//! and librox (the provider).
//!
//! Rules for every file in this crate: no dependencies, no std, no alloc; plain `#[repr(C)]`
//! structs of fixed-width integers, `pub const`s, and compile-time layout checks. All multi-byte
//! fields are little-endian between driver and device, except fields documented as "network
//! order" (imm_data, GIDs): every side reads and writes these types in native order (rox-nic's
//! byte views, rox.ko's `FromBytes`, librox's stores), so the crate builds only for a
//! little-endian target (asserted below), where native order is little-endian.
//!
//! Modules: [`regs`] PCI identity, BAR0 registers, doorbell BAR, arm/wake; [`admin`] admin queue
//! commands, completions, payloads; [`queue`] SQ/RQ/SRQ WQEs, SGEs, CQEs, EQEs; [`verbs`] IB
//! enums with the numbering of libibverbs / ib_verbs.h; [`udata`] kernel <-> provider structs;
//! [`ids`] QP numbers, sequence numbers and memory keys; [`pma`] the PerfMgt MAD answers the
//! driver's performance management agent gives; [`wake`] the posted-wake companion device.
#![no_std]

#[macro_use]
mod c_decl;
pub mod admin;
pub mod ids;
pub mod pma;
pub mod queue;
pub mod regs;
pub mod udata;
pub mod verbs;
pub mod wake;

/// Interface version reported by the device in BAR0 (`regs::REG_VERSION`) and checked by the
/// driver. Bump on any incompatible layout change in this crate. 2: queries carry their
/// buffer's length (`admin::QueryCmd::resp_len`) and a length of 0 is refused, so a driver of
/// version 1 (which left that word 0) refuses the device at probe instead of failing there.
pub const ROX_VERSION: u32 = 2;

// This crate's layouts are little-endian by definition and used in native order by every side: a
// big-endian build would swap every field unseen, so it does not build.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "rox's interface is little-endian and its users read it in native order"
);

// rox.ko includes this file as `#[path = "../uapi/src/lib.rs"] mod uapi;` (its children resolve
// next to it), so the modules refer to each other only through `super::`, never `crate::`.
