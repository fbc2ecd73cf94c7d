// SPDX-License-Identifier: GPL-2.0
//! rox.ko: the Rust-for-Linux kernel driver for the rox-nic emulated RoCEv2 NIC.
//!
//! Control path only (PCI probe, admin queue, event queues, ib_device verbs); the data path
//! lives in the librox provider and the device.
//!
//! Layout: `ib/` is the thin safe layer over ib_core (all `unsafe` lives there); `hw.rs` the
//! hardware interface from `uapi/`; `dev.rs` bring-up and events; `admin.rs`, `eq.rs` the
//! admin and event queues; `verbs.rs`, `mr.rs`, `cq.rs`, `qp.rs`, `srq.rs` the verbs.

use kernel::{device::Core, pci, prelude::*};

mod admin;
mod counters;
mod cq;
mod cq_clean;
mod cut_off;
mod dead;
mod dev;
mod eq;
mod hw;
mod ib;
mod ids;
mod mcast;
mod mr;
mod mw;
mod odp;
mod qp;
mod query_len;
mod ring;
mod slot_store;
mod srq;
mod ucontext;
mod verbs;
mod wake;
mod wq;
mod wq_record;
// The tests of the pure logic above (the host runs them too), here as KUnit suites the kernel
// runs at load on a kernel with KUnit (the debug kernel).
#[cfg(CONFIG_KUNIT = "y")]
mod logic_tests;

/// The hardware/software interface (`uapi/`), included by path: the crate is `no_std` with no
/// dependencies so that the very same definitions build here.
#[path = "../uapi/src/lib.rs"]
#[allow(dead_code, unreachable_pub, missing_docs, unused_attributes)]
mod uapi;

use hw::regs;

/// Driver version, logged at load time.
const VERSION: &str = "0.1.0";

struct RoxDriver;

kernel::pci_device_table!(
    PCI_TABLE,
    <RoxDriver as pci::Driver>::IdInfo,
    [(
        ib::pci_device_id(regs::PCI_VENDOR_ID, regs::PCI_DEVICE_ID),
        ()
    )]
);

impl pci::Driver for RoxDriver {
    type IdInfo = ();
    type Data<'bound> = dev::RoxPci<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        dev::RoxPci::probe(pdev)
    }
}

struct RoxModule {
    _driver: Pin<KBox<kernel::driver::Registration<pci::Adapter<RoxDriver>>>>,
}

impl kernel::Module for RoxModule {
    fn init(module: &'static ThisModule) -> Result<Self> {
        pr_info!("rox {} loaded\n", VERSION);
        let driver = KBox::pin_init(
            kernel::driver::Registration::new(c"rox", module),
            GFP_KERNEL,
        )?;
        Ok(RoxModule { _driver: driver })
    }
}

impl Drop for RoxModule {
    fn drop(&mut self) {
        pr_info!("rox {} unloaded\n", VERSION);
    }
}

module! {
    type: RoxModule,
    name: "rox",
    authors: ["rox developers"],
    description: "rox: RDMA driver for the rox-nic emulated RoCEv2 NIC",
    license: "GPL",
}
