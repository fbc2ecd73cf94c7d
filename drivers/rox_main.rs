// SPDX-License-Identifier: GPL-2.0
//! rox.ko: the Rust-for-Linux kernel driver for the rox-nic emulated RoCEv2 NIC.
//!
//! Control path only (PCI probe, admin queue, ib_device verbs); the data path lives in the
//! librox provider and the device.

use kernel::prelude::*;

module! {
    type: RoxModule,
    name: "rox",
    authors: ["rox developers"],
    description: "rox: RDMA driver for the rox-nic emulated RoCEv2 NIC",
    license: "GPL",
}

/// Driver version, logged at load time.
const VERSION: &str = "0.1.0";

struct RoxModule;

impl kernel::Module for RoxModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("rox {} loaded\n", VERSION);
        Ok(RoxModule)
    }
}

impl Drop for RoxModule {
    fn drop(&mut self) {
        pr_info!("rox {} unloaded\n", VERSION);
    }
}
