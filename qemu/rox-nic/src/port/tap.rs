//! A tap interface of rox-nic's network namespace as the port: whole Ethernet frames through
//! /dev/net/tun (IFF_TAP | IFF_NO_PI), non-blocking.
//!
//! Two back ends move the frames ([`TapIo`]):
//! - io_uring (the default where the kernel offers it): the frames a data-path pass queued
//!   leave as one burst of writes submitted with one `io_uring_enter`, and one multishot read
//!   stays armed, so a burst of arriving frames costs one enter and a look while nothing
//!   arrived costs none (`crate::sys::uring`);
//! - plain `read`/`writev`, one system call per frame: where io_uring is missing (an old
//!   kernel, a seccomp filter, `kernel.io_uring_disabled`), or when `ROX_TAP_IO=plain` asks.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use super::{FrameRef, RxBatch, Sent, BATCH};
use crate::sys;
use crate::sys::uring::FrameRing;

const TUN_DEVICE: &str = "/dev/net/tun";
/// Environment variable choosing a tap's back end: `auto` (default), `uring` or `plain`.
pub const TAP_IO_ENV: &str = "ROX_TAP_IO";

/// Which back end moves a tap's frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapIo {
    /// io_uring where available, else plain.
    Auto,
    /// io_uring or fail.
    Uring,
    /// One `read` / `writev` per frame.
    Plain,
}

impl std::str::FromStr for TapIo {
    type Err = String;

    fn from_str(s: &str) -> Result<TapIo, String> {
        match s {
            "auto" | "" => Ok(TapIo::Auto),
            "uring" => Ok(TapIo::Uring),
            "plain" => Ok(TapIo::Plain),
            _ => Err(format!("{s:?}: want auto, uring or plain")),
        }
    }
}

impl TapIo {
    /// The choice [`TAP_IO_ENV`] makes (unset: auto).
    pub fn from_env() -> std::io::Result<TapIo> {
        std::env::var(TAP_IO_ENV)
            .unwrap_or_default()
            .parse()
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, format!("{TAP_IO_ENV}: {e}")))
    }
}

enum Io {
    Plain,
    /// The ring is made by the thread that first moves frames (it must drive it alone).
    Uring(Option<Box<FrameRing>>),
}

pub struct Tap {
    // Dropped first: the ring cancels its read before the tap's fd closes.
    io: Io,
    file: File,
    name: String,
    results: Vec<i32>,
}

impl Tap {
    /// Attaches to the existing tap interface `name` (TUNSETIFF would create a missing one:
    /// a tap nobody wired up is refused instead), with the back end [`TAP_IO_ENV`] chooses.
    pub fn open(name: &str) -> std::io::Result<Tap> {
        Tap::open_with(name, TapIo::from_env()?)
    }

    /// Attaches to tap `name` with back end `io`; says in the log which one moves frames.
    pub fn open_with(name: &str, io: TapIo) -> std::io::Result<Tap> {
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
        attach(&file, name)?;
        let io = match (io, sys::uring::available()) {
            (TapIo::Plain, _) => {
                log::info!("rox-nic: port tap {name}: plain read/writev, one system call per frame ({TAP_IO_ENV}=plain)");
                Io::Plain
            }
            (_, Ok(())) => {
                log::info!(
                    "rox-nic: port tap {name}: io_uring (bursts of up to {} writes per enter, \
                     a multishot read kept armed)",
                    sys::uring::SQ_ENTRIES
                );
                Io::Uring(None)
            }
            (TapIo::Auto, Err(e)) => {
                log::info!(
                    "rox-nic: port tap {name}: plain read/writev, one system call per frame \
                     (io_uring unavailable: {e})"
                );
                Io::Plain
            }
            (TapIo::Uring, Err(e)) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("tap {name}: io_uring unavailable: {e}"),
                ))
            }
        };
        Ok(Tap {
            io,
            file,
            name: name.to_string(),
            results: Vec::new(),
        })
    }

    /// The IP MTU of interface `name`.
    pub fn mtu(name: &str) -> std::io::Result<usize> {
        sys::net::interface_mtu(name)
    }

    /// Whether io_uring moves this tap's frames.
    pub fn is_uring(&self) -> bool {
        matches!(self.io, Io::Uring(_))
    }

    /// The ring, made on first use by this thread; None (and plain from now on) if that fails.
    fn ring(&mut self) -> Option<&mut FrameRing> {
        if let Io::Uring(slot @ None) = &mut self.io {
            match FrameRing::new(self.file.as_raw_fd()) {
                Ok(r) => *slot = Some(Box::new(r)),
                Err(e) => {
                    log::warn!(
                        "rox-nic: port tap {}: io_uring ring: {e}; plain read/writev from now on",
                        self.name
                    );
                    self.io = Io::Plain;
                }
            }
        }
        match &mut self.io {
            Io::Uring(r) => r.as_deref_mut(),
            Io::Plain => None,
        }
    }

    /// Up to [`BATCH`] frames; never waits.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        let slot_len = batch.slot_len;
        if let Some(ring) = self.ring() {
            let (n, _calls) = ring.recv(slot_len, BATCH, |f| {
                batch.push_frame(f, f.len() >= slot_len);
            })?;
            return Ok(n);
        }
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

    /// Sends from the front of `frames`; stops where the interface pushes back.
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        let mut results = std::mem::take(&mut self.results);
        let sent = match self.ring().map(|r| r.send(frames, &mut results)) {
            Some(Ok(calls)) => Sent {
                calls,
                ..settle(&results)
            },
            Some(Err(e)) => {
                log::warn!("rox-nic: port tap {}: {e}", self.name);
                Sent::all_lost(frames.len())
            }
            None => self.send_plain(frames),
        };
        self.results = results;
        sent
    }

    /// One `writev` per frame.
    fn send_plain(&mut self, frames: &[FrameRef]) -> Sent {
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

    /// Zero while the ring holds received frames the tap's fd no longer shows (a poll on
    /// the fd would not wake for them).
    pub fn retry_in(&self) -> Option<Duration> {
        match &self.io {
            Io::Uring(Some(r)) if r.has_frames() => Some(Duration::ZERO),
            _ => None,
        }
    }
}

/// How long a tap another process just let go of may still be busy (milliseconds usually,
/// longer on a loaded host).
const ATTACH_BUSY_WAIT: Duration = Duration::from_secs(10);

/// Attaches `file` to tap `name`. A rox-nic that used io_uring and just exited leaves the tap
/// attached (EBUSY) until the kernel's asynchronous teardown of its ring dropped the armed
/// read, a few milliseconds: wait that out, up to [`ATTACH_BUSY_WAIT`].
fn attach(file: &File, name: &str) -> std::io::Result<()> {
    let start = std::time::Instant::now();
    let mut logged = false;
    loop {
        match sys::net::tap_attach(file, name) {
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < ATTACH_BUSY_WAIT =>
            {
                if !logged {
                    log::info!("rox-nic: tap {name} busy (a previous user still lets go), waiting up to {ATTACH_BUSY_WAIT:?}");
                    logged = true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            r => {
                return r.map_err(|e| {
                    std::io::Error::new(e.kind(), format!("attach to tap {name}: {e}"))
                })
            }
        }
    }
}

/// What one burst's write results (bytes or -errno per frame, in order) mean for the port's
/// queue. The writes were all submitted at once, so a frame the wire refused (EAGAIN) may
/// have later frames that went out: taking it back would send it after them (reordered), so
/// every frame up to the last one that went out or failed is taken, the refused ones among
/// them counted lost (as a congested wire loses them; RC resends). Refused frames at the end
/// stay queued, in order, for the next burst. Nothing is sent twice, reordered, or lost
/// uncounted.
pub(crate) fn settle(results: &[i32]) -> Sent {
    let taken = results
        .iter()
        .rposition(|&r| r != -libc::EAGAIN)
        .map_or(0, |i| i + 1);
    Sent {
        taken,
        dropped: results[..taken].iter().filter(|&&r| r < 0).count(),
        calls: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn settle_takes_up_to_the_last_frame_that_left() {
        let eagain = -libc::EAGAIN;
        let cases: &[(&[i32], usize, usize)] = &[
            (&[], 0, 0),
            (&[60, 60, 60], 3, 0),
            (&[eagain, eagain], 0, 0),
            (&[60, eagain, eagain], 1, 0),
            (&[60, eagain, 60, eagain], 3, 1),
            (&[-libc::EIO, 60], 2, 1),
            (&[60, -libc::EIO, eagain], 2, 1),
        ];
        for &(results, taken, dropped) in cases {
            let s = settle(results);
            assert_eq!((s.taken, s.dropped), (taken, dropped), "{results:?}");
        }
    }

    /// A queue drained burst by burst through a wire that refuses (EAGAIN) or fails (EIO)
    /// frames at random, as the port drains its queue: each frame reaches the wire at most
    /// once, in queue order, and each is either on the wire or counted lost; none is left.
    #[test]
    fn bursts_through_a_refusing_wire_lose_duplicate_or_reorder_nothing_uncounted() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(18);
        for round in 0..200 {
            let total = rng.gen_range(1..600u32);
            let mut queue: std::collections::VecDeque<u32> = (0..total).collect();
            let (mut wire, mut lost) = (Vec::new(), 0usize);
            let mut bursts = 0;
            while !queue.is_empty() {
                bursts += 1;
                assert!(bursts < 100_000, "round {round}: the queue never drains");
                let burst = queue.len().min(rng.gen_range(1..300));
                // The wire's answer per frame; a refusing wire may take later ones again.
                let results: Vec<i32> = (0..burst)
                    .map(|_| match rng.gen_range(0..10) {
                        0..=2 => -libc::EAGAIN,
                        3 => -libc::EIO,
                        _ => 60,
                    })
                    .collect();
                for (i, &r) in results.iter().enumerate() {
                    if r >= 0 {
                        wire.push(queue[i]);
                    }
                }
                let s = settle(&results);
                let failed = results[..s.taken].iter().filter(|&&r| r < 0).count();
                assert_eq!(
                    s.dropped, failed,
                    "round {round}: every failed frame counted"
                );
                lost += s.dropped;
                queue.drain(..s.taken);
            }
            assert!(
                wire.windows(2).all(|w| w[0] < w[1]),
                "round {round}: frames on the wire once each, in order: {wire:?}"
            );
            assert_eq!(
                wire.len() + lost,
                total as usize,
                "round {round}: all accounted"
            );
        }
    }
}
