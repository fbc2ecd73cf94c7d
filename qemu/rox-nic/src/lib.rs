//! rox-nic: an emulated PCIe RoCEv2 NIC served to QEMU over vfio-user.
//!
//! - [`device`]: the device model (BAR0 registers, admin queue, event queues, doorbell polling,
//!   queue processing, protection checks) — the "chassis";
//! - [`roce`]: RoCEv2 wire format and transport engine;
//! - [`port`]: the Ethernet port (tap or QEMU socket framings) shared with the paired netdev;
//! - [`server`]: the vfio-user glue (regions, IRQs, DMA mapping);
//! - [`testkit`]: a userspace "driver" for tests and benchmarks;
//! - `fuzzing` (feature `fuzzing`): the bodies of the fuzz targets (fuzz/, docs/fuzzing.md);
//! - [`benchkit`]: the memcpy reference and result table of the host benchmarks.

pub mod benchkit;
pub mod device;
pub mod dma;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod pci;
pub mod port;
pub mod roce;
pub mod server;
pub mod testkit;

pub use device::{DeviceConfig, RoxNic};
