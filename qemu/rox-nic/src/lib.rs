//! rox-nic: an emulated PCIe RoCEv2 NIC served to QEMU over vfio-user.
//!
//! - [`device`]: the device model (BAR0 registers, admin queue, event queues, doorbell polling,
//!   queue processing, protection checks) — the "chassis";
//! - [`roce`]: RoCEv2 wire format and transport engine;
//! - [`port`]: the Ethernet port (tap or QEMU socket framings) shared with the paired netdev;
//! - [`server`]: the vfio-user glue (regions, IRQs, DMA mapping);
//! - [`sys`]: every `unsafe` of rox-nic (system calls, plain-old-data views); the rest of the
//!   crate denies unsafe code;
//! - [`trace`]: the WQE trace (each send WQE's life, timestamped; `rox-trace` exports it);
//! - `testkit` (feature `testkit`, tests and benchmarks only): a userspace "driver" and the
//!   engine's in-memory test double;
//! - `benchkit` (the same feature): the memcpy reference and result table of the host
//!   benchmarks;
//! - `fuzzing` (feature `fuzzing`, which needs the test kit): the bodies of the fuzz targets
//!   (fuzz/, docs/fuzzing.md).

#![deny(unsafe_code)]

#[cfg(any(test, feature = "testkit"))]
pub mod benchkit;
pub mod device;
pub mod dma;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod pci;
pub mod port;
pub mod roce;
pub mod server;
pub mod sys;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod trace;

pub use device::{DeviceConfig, RoxNic};
