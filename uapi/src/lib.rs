//! rox hardware and software interface: the one definition shared by rox-nic (the device),
//! rox.ko (the kernel driver, which includes this file without external crates) and librox.
#![no_std]

/// Interface version reported by the device in BAR0 and checked by the driver.
pub const ROX_VERSION: u32 = 1;
