//! rox-nic's unsafe code, all of it: the thin layer between the device and the OS (system
//! calls with C structures) and the plain-old-data views of the uapi structures the device
//! reads from and writes to guest memory. Everything above it is safe Rust
//! (`#![deny(unsafe_code)]` in lib.rs and main.rs); guest memory itself is mapped and accessed
//! through rust-vmm's `vm-memory` (`crate::dma`), which owns the pointers.
//!
//! - [`clock`]: the monotonic clock (trace timestamps);
//! - [`pod`]: `Pod`, byte views of plain-old-data values;
//! - [`fd`]: eventfds and memfds;
//! - [`net`]: tap interfaces, socket options, batched datagram I/O, network namespaces;
//! - [`shm`]: sealed memfds and shared mappings (the cable);
//! - [`fdpass`]: descriptor passing over unix streams (SCM_RIGHTS);
//! - [`epoll`]: epoll sets (the cable's connections);
//! - [`store_once`]: the copy into guest memory that stores each byte once, as DMA does;
//! - `wide`: 32-byte AVX volatile loads and stores (x86-64);
//! - [`store_trace`] (test kit, x86-64 Linux): each store instruction into a page, traced.
//! - [`poll`]: sleeping on file descriptors (`ppoll`), the thread's timer slack;
//! - [`uring`]: io_uring for a port's frames (bursts of writes, an armed multishot read);
//! - [`crc32`]: the ICRC's CRC-32 over long runs, folded with carry-less multiplication.
#![allow(unsafe_code)]

pub mod clock;
pub mod crc32;
pub mod epoll;
pub mod fd;
pub mod fdpass;
pub mod net;
pub mod pod;
pub mod poll;
pub mod shm;
pub mod store_once;
#[cfg(all(
    any(test, feature = "testkit"),
    target_arch = "x86_64",
    target_os = "linux"
))]
pub mod store_trace;
pub mod uring;
#[cfg(target_arch = "x86_64")]
mod wide;
