// SPDX-License-Identifier: GPL-2.0
//! The network device a RoCEv2 port is bound to (found by the MAC the device reports).

use super::bindings as b;
use core::ptr::NonNull;
use kernel::prelude::*;

/// A held reference to a `struct net_device`.
///
/// # Invariants
///
/// `raw` is a net_device we hold a reference on (`dev_hold`), released on drop.
pub(crate) struct NetDevice {
    raw: NonNull<b::net_device>,
}

// SAFETY: a held net_device may be used and released from any thread.
unsafe impl Send for NetDevice {}
// SAFETY: the accessors below only read through ib_core/netdev helpers that are thread safe.
unsafe impl Sync for NetDevice {}

impl NetDevice {
    /// The Ethernet device of the initial network namespace whose hardware address is `mac`.
    pub(crate) fn by_mac(mac: &[u8; 6]) -> Option<Self> {
        // SAFETY: `dev_getbyhwaddr` requires RTNL, held around it; the device found is held
        // before RTNL is released; `init_net` lives forever; `mac` is a 6-byte address.
        let raw = unsafe {
            b::rtnl_lock();
            let ndev = b::dev_getbyhwaddr(
                core::ptr::addr_of_mut!(b::init_net),
                b::ARPHRD_ETHER,
                mac.as_ptr().cast(),
            );
            if !ndev.is_null() {
                b::rox_shim_dev_hold(ndev);
            }
            b::rtnl_unlock();
            ndev
        };
        // INVARIANT: held above.
        NonNull::new(raw).map(|raw| Self { raw })
    }

    /// Takes over a reference the caller holds (e.g. from `ib_device_get_netdev`).
    ///
    /// # Safety
    ///
    /// `raw` is null or a net_device on which the caller owns one reference.
    pub(super) unsafe fn from_held(raw: *mut b::net_device) -> Option<Self> {
        // INVARIANT: per the function's requirements.
        NonNull::new(raw).map(|raw| Self { raw })
    }

    pub(crate) fn as_raw(&self) -> *mut b::net_device {
        self.raw.as_ptr()
    }

    /// Administratively up with carrier.
    pub(crate) fn is_up(&self) -> bool {
        // SAFETY: held (type invariant).
        unsafe { b::rox_shim_netdev_is_up(self.raw.as_ptr()) }
    }

    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: held (type invariant).
        unsafe { b::rox_shim_netdev_mtu(self.raw.as_ptr()) }
    }

    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: held (type invariant); the name is a NUL-terminated array inside it.
        unsafe { CStr::from_char_ptr(b::rox_shim_netdev_name(self.raw.as_ptr())) }
    }
}

impl Drop for NetDevice {
    fn drop(&mut self) {
        // SAFETY: held (type invariant).
        unsafe { b::rox_shim_dev_put(self.raw.as_ptr()) };
    }
}
