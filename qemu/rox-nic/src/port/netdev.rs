//! The guest's paired virtio-net ("netdev") as the device sees it: a link (QEMU's dgram or
//! stream framing) that takes the port's frames that are not RoCE for this device, and whose
//! frames go out on the port.
//!
//! QEMU's end of a dgram netdev is not connected back to rox-nic's socket, so the kernel
//! limits it to net.unix.max_dgram_qlen waiting datagrams (10 by default): a burst from the
//! port would overflow it. Frames it cannot take now wait in a bounded backlog and leave when
//! poll says it has room again; only a full backlog or a missing guest loses frames.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{FrameRef, Link, LinkSpec, RxBatch};

/// Frames held for a guest that is slow to take them.
pub const NETDEV_BACKLOG_LIMIT: usize = 1024;

/// What happened to frames handed to the netdev.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// Taken by the guest's socket.
    pub delivered: u64,
    /// Lost: no guest attached, or the backlog full.
    pub dropped: u64,
}

impl std::ops::AddAssign for Forwarded {
    fn add_assign(&mut self, o: Forwarded) {
        self.delivered += o.delivered;
        self.dropped += o.dropped;
    }
}

pub struct Netdev {
    link: Link,
    backlog: VecDeque<Vec<u8>>,
    rx: RxBatch,
}

impl Netdev {
    /// Opens the netdev's link; frames up to `max_frame` bytes are received whole.
    pub fn open(spec: &LinkSpec, max_frame: usize) -> std::io::Result<Netdev> {
        Ok(Netdev {
            link: Link::open(spec)?,
            backlog: VecDeque::new(),
            rx: RxBatch::new(max_frame),
        })
    }

    /// Hands `frames` to the guest, in order behind any backlog.
    pub fn forward(&mut self, frames: &[FrameRef]) -> Forwarded {
        let mut out = self.flush();
        let mut rest = frames;
        if self.backlog.is_empty() {
            let sent = self.link.send(frames);
            out.delivered += (sent.taken - sent.dropped) as u64;
            out.dropped += sent.dropped as u64;
            rest = &frames[sent.taken..];
        }
        for f in rest {
            if self.backlog.len() < NETDEV_BACKLOG_LIMIT {
                self.backlog.push_back([f.head, f.body].concat());
            } else {
                out.dropped += 1;
            }
        }
        out
    }

    /// Sends backlogged frames until the guest's socket pushes back.
    pub fn flush(&mut self) -> Forwarded {
        self.link.flush_writes();
        if self.backlog.is_empty() {
            return Forwarded::default();
        }
        let (a, b) = self.backlog.as_slices();
        let refs: Vec<FrameRef> = a.iter().chain(b).map(|f| FrameRef::whole(f)).collect();
        let sent = self.link.send(&refs);
        drop(refs);
        self.backlog.drain(..sent.taken);
        Forwarded {
            delivered: (sent.taken - sent.dropped) as u64,
            dropped: sent.dropped as u64,
        }
    }

    /// Receives up to a batch of the guest's frames (see [`Netdev::frames`]); never waits.
    pub fn recv(&mut self) -> std::io::Result<usize> {
        self.link.recv(&mut self.rx)
    }

    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.rx.frames()
    }

    /// The fd to poll, and whether to wait for room to write.
    pub fn poll_fd(&self) -> Option<(RawFd, bool)> {
        self.link
            .poll_fd()
            .map(|(fd, out)| (fd, out || !self.backlog.is_empty()))
    }

    pub fn retry_in(&self) -> Option<Duration> {
        self.link.retry_in()
    }

    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }
}
