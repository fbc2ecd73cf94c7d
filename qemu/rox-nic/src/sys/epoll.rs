//! An epoll set that folds several fds into one pollable fd (the cable's connections).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An epoll set: one fd that polls readable when any fd in it is (level-triggered).
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> std::io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for input (and hang-up).
    pub fn add(&self, fd: RawFd) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: fd as u64,
        };
        // SAFETY: epoll_ctl reads one epoll_event that lives across the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The fds in the set that are ready now (at most `out.len()`), without waiting.
    pub fn ready(&self, out: &mut [RawFd]) -> usize {
        const MAX: usize = 8;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let max = out.len().min(MAX) as libc::c_int;
        // SAFETY: epoll_wait writes at most `max` (<= MAX) events into `events`; no waiting.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, 0) };
        for (o, e) in out.iter_mut().zip(&events[..n.max(0) as usize]) {
            *o = e.u64 as RawFd;
        }
        n.max(0) as usize
    }

    /// Stops watching `fd` (closing it also does).
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: EPOLL_CTL_DEL ignores the event argument (null allowed since Linux 2.6.9).
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
