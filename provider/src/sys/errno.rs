//! errno values as a Rust error type, and the two ways provider ops report them: pointer-
//! returning ops set `errno` and return NULL, int-returning ops return the errno value.

use core::fmt;
use core::ptr;

/// A positive errno value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

pub const EINVAL: Errno = Errno(libc::EINVAL);
pub const ENOENT: Errno = Errno(libc::ENOENT);
pub const ENOMEM: Errno = Errno(libc::ENOMEM);
pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
pub const EPROTO: Errno = Errno(libc::EPROTO);

impl Errno {
    /// The calling thread's current `errno` (for libc calls that failed).
    pub fn last() -> Self {
        // SAFETY: __errno_location returns this thread's errno slot.
        Errno(unsafe { *libc::__errno_location() })
    }

    /// An `ibv_cmd_*` return value: 0 on success, else an errno value.
    pub fn check(ret: i32) -> Result<()> {
        match ret {
            0 => Ok(()),
            e if e > 0 => Err(Errno(e)),
            // Some paths return -1 with errno set.
            _ => Err(Errno::last()),
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "errno {}", self.0)
    }
}

pub type Result<T> = core::result::Result<T, Errno>;

fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e.0 };
}

/// For ops that return an object pointer: NULL with `errno` set on failure.
pub fn ptr_or_errno<T>(r: Result<*mut T>) -> *mut T {
    r.unwrap_or_else(|e| {
        set_errno(e);
        ptr::null_mut()
    })
}

/// For ops that return an int: 0, or the errno value.
pub fn int_errno(r: Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.0,
    }
}
