// SPDX-License-Identifier: GPL-2.0
//! A handle on a registered ib_device ([`IbDev`]), given to the verbs and to the umem helpers.

use super::{bindings as b, netdev::NetDevice};
use core::{marker::PhantomData, ptr::NonNull};

/// A handle on the registered ib_device, given to every [`super::Verbs`] call.
#[derive(Clone, Copy)]
pub(crate) struct IbDev<'a> {
    raw: NonNull<b::ib_device>,
    _life: PhantomData<&'a b::ib_device>,
}

impl IbDev<'_> {
    pub(crate) fn as_raw(&self) -> *mut b::ib_device {
        self.raw.as_ptr()
    }

    /// The network device port `port` is bound to, if any (held while the value lives).
    pub(crate) fn netdev(&self, port: u32) -> Option<NetDevice> {
        // SAFETY: a registered device; `ib_device_get_netdev` returns a held netdev or null,
        // whose reference `from_held` takes over.
        unsafe { NetDevice::from_held(b::ib_device_get_netdev(self.raw.as_ptr(), port)) }
    }
}

/// The handle on `ibdev`, an ib_device of this driver (a dangling one for null, which no
/// caller passes).
pub(super) fn ib_of<'a>(ibdev: *mut b::ib_device) -> IbDev<'a> {
    IbDev {
        raw: NonNull::new(ibdev).unwrap_or(NonNull::dangling()),
        _life: PhantomData,
    }
}
