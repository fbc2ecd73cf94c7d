//! A tap interface of rox-nic's network namespace as the port: whole Ethernet frames through
//! /dev/net/tun (IFF_TAP | IFF_NO_PI), non-blocking.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::{FrameRef, RxBatch, Sent, BATCH};
use crate::sys;

const TUN_DEVICE: &str = "/dev/net/tun";

pub struct Tap {
    file: File,
}

impl Tap {
    /// Attaches to the existing tap interface `name` (TUNSETIFF would create a missing one:
    /// a tap nobody wired up is refused instead).
    pub fn open(name: &str) -> std::io::Result<Tap> {
        if !sys::net::interface_exists(name)? {
            return Err(std::io::Error::new(
                ErrorKind::NotFound,
                format!("no interface {name} in this network namespace"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(TUN_DEVICE)?;
        sys::net::tap_attach(&file, name)
            .map_err(|e| std::io::Error::new(e.kind(), format!("attach to tap {name}: {e}")))?;
        Ok(Tap { file })
    }

    /// The IP MTU of interface `name`.
    pub fn mtu(name: &str) -> std::io::Result<usize> {
        sys::net::interface_mtu(name)
    }

    /// Up to [`BATCH`] frames, one `read` each; never waits.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        while batch.len() < BATCH {
            let slot = batch.next_slot();
            match (&self.file).read(slot) {
                Ok(n) => batch.push_len(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(batch.len())
    }

    /// One `writev` per frame; stops where the interface pushes back.
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        let mut sent = Sent::default();
        for f in frames {
            // One writev: a tap takes a frame per write.
            let r = (&self.file).write_vectored(&[IoSlice::new(f.head), IoSlice::new(f.body)]);
            sent.calls += 1;
            match r {
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // E.g. EIO while the interface is down: the frame is lost, like on a wire.
                Err(_) => sent.dropped += 1,
                Ok(_) => {}
            }
            sent.taken += 1;
        }
        sent
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
