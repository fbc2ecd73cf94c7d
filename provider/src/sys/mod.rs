//! Everything unsafe of librox: the rdma-core ABI (bindgen), the provider's `extern "C"` entry
//! points, the `ibv_cmd_*` calls, the memory shared with the device (rings, doorbell and wake
//! pages) and the locks that may stay held across calls. The logic modules above it (crate::cq,
//! crate::qp, ...) are `#![deny(unsafe_code)]` and use the safe types offered here.

pub mod device;
pub mod doorbell;
pub mod errno;
pub mod ffi;
pub mod lock;
pub mod memory;
