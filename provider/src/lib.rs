//! librox: the rdma-core provider (libibverbs driver) of the rox RoCEv2 NIC.
//!
//! libibverbs 56.1 dlopens `librox-rdmav34.so` (named in /etc/libibverbs.d/rox.driver); the
//! `.init_array` constructor of [`sys::device`] registers its `DEVICE_OPS` with
//! `verbs_register_driver_34`, and libibverbs binds it to every uverbs device whose PCI id is
//! rox's (or whose name starts with `rox_`). Everything of the provider ABI comes from
//! rdma-core's own headers through bindgen ([`sys::ffi`]); everything shared with rox.ko and the
//! device comes from `rox_uapi`.
//!
//! Control path: context (ucontext, doorbell and wake pages), device and port queries, PD, MR,
//! CQ, QP, SRQ and AH through `ibv_cmd_*` with rox's udata; librox allocates the rings rox.ko
//! pins. Data path: post_send/post_recv/post_srq_recv format WQEs straight into those rings and
//! ring the doorbell page; poll_cq/req_notify_cq work on the CQ ring and its doorbell slot; the
//! extended CQ (`ibv_start_poll`...) and post (`ibv_wr_*`) APIs likewise. See docs/provider.md.
//!
//! Every `unsafe` of the crate is in [`sys`] (FFI, entry points, shared memory, locks), each
//! with its `// SAFETY:` reason; the logic modules are `#![deny(unsafe_code)]`.

mod ah;
mod context;
mod cq;
mod mw;
mod pd;
mod qp;
mod qp_ex;
mod srq;
mod sys;
mod wq;
mod wqe;
mod xrc;
