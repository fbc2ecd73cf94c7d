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

/// Whether `file` is a non-blocking eventfd (as [`eventfd`] makes them), read from procfs: a
/// doorbell another process passed that cannot stall the writer (a pipe nobody reads would).
pub fn is_nonblocking_eventfd(file: &File) -> bool {
    let fd = file.as_raw_fd();
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
    let is_eventfd = link.is_ok_and(|l| l.as_os_str() == "anon_inode:[eventfd]");
    let flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()
        .and_then(|info| {
            let octal = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
            u32::from_str_radix(octal.trim(), 8).ok()
        });
    is_eventfd && flags.is_some_and(|f| f & libc::O_NONBLOCK as u32 != 0)
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

    /// Consume pending signals only if `polled`, this eventfd's entry of a finished ppoll,
    /// saw it readable; true if there were any. Never a read otherwise: the file description
    /// may be shared with another process (the posted wake's, over SCM_RIGHTS), which can
    /// clear its O_NONBLOCK, and a read of an empty blocking eventfd would stall the caller.
    pub fn drain_if_ready(&self, polled: &libc::pollfd) -> bool {
        polled.revents & libc::POLLIN != 0 && self.drain()
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
    let mut file = file;
    let _ = file.write(&1u64.to_ne_bytes());
}

#[cfg(test)]
mod doorbell_tests {
    use super::*;

    #[test]
    fn only_a_non_blocking_eventfd_is_a_doorbell() {
        assert!(is_nonblocking_eventfd(&eventfd().unwrap()));
        let file = tempfile::tempfile().unwrap();
        assert!(!is_nonblocking_eventfd(&file));
    }
}

#[cfg(test)]
mod eventfd_tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Clears O_NONBLOCK on `file`'s file description, as a process sharing it may.
    fn make_blocking(file: &File) {
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor `file` owns, without memory arguments.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            assert!(flags >= 0);
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK), 0);
        }
    }

    fn polled(wake: &EventFd, revents: libc::c_short) -> libc::pollfd {
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents,
        }
    }

    /// Another process made the shared eventfd blocking: one ppoll did not see readable is
    /// not read, so the caller does not block on it. Before, the data path read it after
    /// every ppoll. (If the read blocks, the test signals the eventfd to end it and fails.)
    #[test]
    fn an_eventfd_not_seen_readable_is_not_read_even_if_made_blocking() {
        let wake = EventFd::new().unwrap();
        let shared = wake.try_clone_file().unwrap();
        make_blocking(&shared);
        let (done, returned) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let drained = wake.drain_if_ready(&polled(&wake, 0));
            done.send(()).unwrap();
            (wake, drained)
        });
        let in_time = returned.recv_timeout(Duration::from_secs(2)).is_ok();
        if !in_time {
            signal_irq(&shared);
        }
        let (wake, drained) = reader.join().unwrap();
        assert!(in_time, "read an empty eventfd ppoll did not see readable");
        assert!(!drained);
        wake.signal();
        assert!(wake.drain_if_ready(&polled(&wake, libc::POLLIN)));
        assert!(!wake.drain_if_ready(&polled(&wake, 0)));
    }
}
