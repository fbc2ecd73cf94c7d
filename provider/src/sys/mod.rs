//! Everything unsafe of librox: the rdma-core ABI (bindgen, [`ffi`]), the provider's
//! registration ([`device`]) and every `extern "C"` entry point with the `ibv_cmd_*` calls it
//! makes ([`context`] with the ops table, [`pd`], [`cq`], [`qp`], [`qp_ex`], [`srq`]), the
//! objects behind libibverbs' pointers ([`objects`]), the application's work requests and
//! buffers ([`wr`]), the memory shared with the device (rings: [`memory`]; doorbell and wake
//! pages: [`doorbell`]), errno ([`errno`]) and the locks that may stay held across calls
//! ([`lock`]). Each `unsafe` block says why it is sound (`// SAFETY:`).
//!
//! The logic modules above it (crate::cq, crate::qp, crate::qp_ex, crate::srq, crate::wq,
//! crate::wqe, crate::mw, crate::pd, crate::ah, crate::context) are `#![deny(unsafe_code)]`:
//! they work on the safe types offered here (a ring of WQE slots, a CQE reader, a doorbell,
//! views of the application's work requests) and never follow a raw pointer.

pub mod context;
pub mod cq;
pub mod device;
pub mod doorbell;
pub mod errno;
pub mod ffi;
pub mod lock;
pub mod memory;
pub mod objects;
pub mod pd;
pub mod qp;
pub mod qp_ex;
pub mod srq;
pub mod wr;
pub mod xrc;
