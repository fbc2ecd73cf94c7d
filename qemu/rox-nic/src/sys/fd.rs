//! File descriptors the device makes itself: eventfds (wake-ups, interrupts) and memfds (the
//! doorbell BAR, the tests' guest RAM).

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// A new non-blocking, close-on-exec eventfd.
pub fn eventfd() -> std::io::Result<File> {
    // SAFETY: plain syscall without memory arguments; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A new close-on-exec memfd named `name`, empty (size it with `File::set_len`).
pub fn memfd(name: &CStr) -> std::io::Result<File> {
    // SAFETY: plain syscall with a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A non-blocking eventfd: wakes the data-path thread, or stands for an interrupt vector.
pub struct EventFd(File);

impl EventFd {
    pub fn new() -> std::io::Result<EventFd> {
        eventfd().map(EventFd)
    }

    pub fn signal(&self) {
        // A full counter (EAGAIN) still leaves the fd readable, which is all we need.
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }

    /// Consume pending signals; true if there were any.
    pub fn drain(&self) -> bool {
        let mut buf = [0u8; 8];
        (&self.0).read(&mut buf).is_ok()
    }

    pub fn try_clone_file(&self) -> std::io::Result<File> {
        self.0.try_clone()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Signal an interrupt eventfd as vfio does: write 1u64.
pub fn signal_irq(file: &File) {
    let _ = (&*file).write(&1u64.to_ne_bytes());
}
