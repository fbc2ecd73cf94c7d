//! A tap interface of rox-nic's network namespace as the port: whole Ethernet frames through
//! /dev/net/tun (IFF_TAP | IFF_NO_PI), non-blocking.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::{FrameRef, RxBatch, Sent, BATCH};

const TUN_DEVICE: &str = "/dev/net/tun";

pub struct Tap {
    file: File,
}

/// An `ifreq` naming `name` (at most IFNAMSIZ - 1 bytes).
fn ifreq(name: &str) -> std::io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    // SAFETY: ifreq is plain C data; all zeroes is a valid empty request.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

impl Tap {
    /// Attaches to the existing tap interface `name`.
    pub fn open(name: &str) -> std::io::Result<Tap> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(TUN_DEVICE)?;
        let mut req = ifreq(name)?;
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one ifreq, which lives across the call.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut req) } < 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(
                e.kind(),
                format!("attach to tap {name}: {e}"),
            ));
        }
        Ok(Tap { file })
    }

    /// The IP MTU of interface `name`.
    pub fn mtu(name: &str) -> std::io::Result<usize> {
        // SAFETY: socket() has no memory arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new socket this function owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = ifreq(name)?;
        // SAFETY: SIOCGIFMTU reads the name and writes the MTU of one ifreq that lives
        // across the call.
        if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFMTU as _, &mut req) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: SIOCGIFMTU filled the ifru_mtu member of the union.
        Ok(unsafe { req.ifr_ifru.ifru_mtu } as usize)
    }

    /// Up to [`BATCH`] frames, one `read` each; never waits.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        while batch.len() < BATCH {
            let slot = batch.next_slot();
            // SAFETY: `slot` is a writable buffer of `slot.len()` bytes.
            let n =
                unsafe { libc::read(self.file.as_raw_fd(), slot.as_mut_ptr().cast(), slot.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    ErrorKind::WouldBlock => break,
                    ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            batch.push_len(n as usize);
        }
        Ok(batch.len())
    }

    /// One `writev` per frame; stops where the interface pushes back.
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        let mut sent = Sent::default();
        for f in frames {
            let iov = [
                libc::iovec {
                    iov_base: f.head.as_ptr() as *mut libc::c_void,
                    iov_len: f.head.len(),
                },
                libc::iovec {
                    iov_base: f.body.as_ptr() as *mut libc::c_void,
                    iov_len: f.body.len(),
                },
            ];
            // SAFETY: both iovecs point into `f`, alive across the call; writev only reads.
            let n = unsafe { libc::writev(self.file.as_raw_fd(), iov.as_ptr(), 2) };
            sent.calls += 1;
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == ErrorKind::WouldBlock {
                    break;
                }
                // E.g. EIO while the interface is down: the frame is lost, like on a wire.
                sent.dropped += 1;
            }
            sent.taken += 1;
        }
        sent
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
