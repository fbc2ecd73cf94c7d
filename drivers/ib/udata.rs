// SPDX-License-Identifier: GPL-2.0
//! The driver-specific input and output buffers of a uverbs call (`struct ib_udata`).

use super::bindings as b;
use core::ptr;
use kernel::{
    error::to_result,
    prelude::*,
    transmute::{AsBytes, FromBytes},
};

/// The udata of one call: `None` for calls from kernel consumers.
pub(crate) struct Udata<'a> {
    raw: Option<&'a mut b::ib_udata>,
}

impl Udata<'_> {
    /// # Safety
    ///
    /// `raw` is null or a udata ib_core passed to the current callback.
    pub(crate) unsafe fn from_raw(raw: *mut b::ib_udata) -> Self {
        // SAFETY: per the function's requirements.
        let raw = unsafe { raw.as_mut() };
        Self { raw }
    }

    /// Whether the call comes from user space (a uverbs command) rather than a kernel consumer.
    pub(crate) fn is_user(&self) -> bool {
        self.raw.is_some()
    }

    /// Copies in the request `T`. Input shorter than `T` is `EINVAL`; input longer than `T` must
    /// be zero beyond it (else `EOPNOTSUPP`), ib_core's forward-compatibility rule.
    pub(crate) fn read<T: FromBytes + AsBytes + Default>(&mut self) -> Result<T> {
        let raw = self.raw.as_deref_mut().ok_or(EINVAL)?;
        let mut req = T::default();
        // SAFETY: `req` is a writable `T` of `size_of::<T>()` bytes, any bytes are a valid `T`.
        to_result(unsafe {
            b::_ib_copy_validate_udata_in(
                raw,
                ptr::from_mut(&mut req).cast(),
                size_of::<T>(),
                size_of::<T>(),
            )
        })?;
        Ok(req)
    }

    /// Checks that a call without driver input has none (or only zeroes).
    pub(crate) fn expect_no_input(&mut self) -> Result {
        match self.raw.as_deref_mut() {
            Some(raw) if raw.inlen > 0 => {
                // SAFETY: a null request of size 0: ib_core only checks the input is zero.
                to_result(unsafe { b::_ib_copy_validate_udata_in(raw, ptr::null_mut(), 0, 0) })
            }
            _ => Ok(()),
        }
    }

    /// Copies out the response `T`; the caller's buffer must hold all of it, and is
    /// zero-filled beyond it.
    pub(crate) fn respond<T: AsBytes>(&mut self, resp: &T) -> Result {
        let raw = self.raw.as_deref_mut().ok_or(EINVAL)?;
        if raw.outlen < size_of::<T>() {
            return Err(EINVAL);
        }
        // SAFETY: `resp` is `size_of::<T>()` initialised bytes (`AsBytes`).
        to_result(unsafe { b::_ib_respond_udata(raw, ptr::from_ref(resp).cast(), size_of::<T>()) })
    }

    /// Zero-fills the response buffer of a call without driver output.
    pub(crate) fn respond_empty(&mut self) -> Result {
        match self.raw.as_deref_mut() {
            // SAFETY: a response of length 0: ib_core only clears the user's buffer.
            Some(raw) => to_result(unsafe { b::_ib_respond_udata(raw, ptr::null(), 0) }),
            None => Ok(()),
        }
    }
}
