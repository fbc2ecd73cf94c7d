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
//!
//! With io_uring, the tap also takes and makes UDP segmentation-offload frames (IFF_VNET_HDR,
//! TUNSETOFFLOAD USO4/USO6, Linux 6.2 on; [`gso`]): a run of a QP's frames crosses a bridge as
//! one packet of up to 64 KiB. On by default (guest to guest it was 1.34-3.05x the bandwidth of
//! frames one by one in every measured pair, docs/benchmarks/session-10.md, "Session 10: the tap's
//! offload, settled"); `ROX_TAP_GSO=off` sends frames one by one, for whatever reads the bridge's
//! frames raw (tcpdump, rox-peer's
//! AF_PACKET socket), which would see such packets uncut.

#[cfg(feature = "fuzzing")]
pub mod gso;
#[cfg(not(feature = "fuzzing"))]
mod gso;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use super::{FrameRef, RxBatch, Sent, BATCH};
use crate::sys;
use crate::sys::uring::FrameRing;
use gso::{
    complete_checksum, GsoWriter, Segments, Unsplittable, VnetHdr, NO_OFFLOAD, VNET_HDR_LEN,
};

const TUN_DEVICE: &str = "/dev/net/tun";
/// Environment variable choosing a tap's back end: `auto` (default), `uring` or `plain`.
pub const TAP_IO_ENV: &str = "ROX_TAP_IO";
/// Environment variable turning UDP segmentation offload on a tap `on` (default) or `off`.
pub const TAP_GSO_ENV: &str = "ROX_TAP_GSO";
/// The offloads a tap with segmentation offload takes (USO needs the checksum offload).
const TAP_OFFLOADS: libc::c_uint = libc::TUN_F_CSUM | libc::TUN_F_USO4 | libc::TUN_F_USO6;
/// The longest frame a tap with segmentation offload hands over, behind its header.
const GSO_READ_LEN: usize = VNET_HDR_LEN + super::frame::ETH_HEADER_LEN + 65535;

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
    write_results: Vec<i32>,
    /// Every frame read or written carries a `virtio_net_hdr` (IFF_VNET_HDR).
    vnet: bool,
    /// Segmentation offload on: runs of frames leave as one request, and such arrive.
    gso: bool,
    writer: GsoWriter,
    /// A request read whose frames did not all fit the last batch, and the next frame's index.
    pending: Option<(Vec<u8>, usize)>,
    /// Segmentation requests received and refused ([`gso::Unsplittable::Refused`]).
    gso_refused: u64,
}

impl Tap {
    /// Attaches to the existing tap interface `name` (TUNSETIFF would create a missing one:
    /// a tap nobody wired up is refused instead), with the back end [`TAP_IO_ENV`] chooses.
    pub fn open(name: &str) -> std::io::Result<Tap> {
        Tap::open_with(name, TapIo::from_env()?)
    }

    /// Attaches to tap `name` with back end `io` (segmentation offload as [`TAP_GSO_ENV`]
    /// says, on when unset); says in the log which one moves frames.
    pub fn open_with(name: &str, io: TapIo) -> std::io::Result<Tap> {
        let gso = gso_wanted(std::env::var(TAP_GSO_ENV).ok().as_deref())?;
        Tap::open_with_gso(name, io, gso)
    }

    /// [`Tap::open_with`], segmentation offload on (where io_uring moves the frames and the
    /// kernel has it) if `gso`.
    pub fn open_with_gso(name: &str, io: TapIo, gso: bool) -> std::io::Result<Tap> {
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
        let uring = sys::uring::available();
        let vnet = gso && io != TapIo::Plain && uring.is_ok();
        attach(&file, name, vnet)?;
        // Offloads belong to the interface and outlive the fd: a tap an earlier user had them
        // on would hand this one requests it cannot read without a virtio_net_hdr.
        let gso = offload(&file, name, if vnet { TAP_OFFLOADS } else { 0 }) && vnet;
        let io = match (io, uring) {
            (TapIo::Plain, _) => {
                log::info!("rox-nic: port tap {name}: plain read/writev, one system call per frame ({TAP_IO_ENV}=plain)");
                Io::Plain
            }
            (_, Ok(())) => {
                log::info!(
                    "rox-nic: port tap {name}: io_uring (bursts of up to {} writes per enter, \
                     a multishot read kept armed), UDP segmentation offload {}",
                    sys::uring::SQ_ENTRIES,
                    if gso { "on" } else { "off" }
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
            write_results: Vec::new(),
            vnet,
            gso,
            writer: GsoWriter::default(),
            pending: None,
            gso_refused: 0,
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

    /// Whether runs of frames leave (and arrive) as segmentation-offload requests.
    pub fn is_gso(&self) -> bool {
        self.gso
    }

    /// Segmentation requests received and refused so far (tiny or too many segments).
    pub fn gso_refused(&self) -> u64 {
        self.gso_refused
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
                    // Frames keep their virtio_net_hdr (it is the tap's for good), but ask
                    // for nothing and arrive whole.
                    if self.gso {
                        self.gso = !offload(&self.file, &self.name, 0);
                    }
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
        let mut pending = self.pending.take();
        if let Some((raw, from)) = pending.take() {
            pending = deliver(&raw, from, batch, &mut self.gso_refused).map(|next| (raw, next));
        }
        if pending.is_some() || batch.len() == BATCH {
            self.pending = pending;
            return Ok(batch.len());
        }
        let slot_len = batch.slot_len;
        let read_len = match (self.vnet, self.gso) {
            (false, _) => slot_len,
            (true, false) => VNET_HDR_LEN + slot_len,
            (true, true) => GSO_READ_LEN,
        };
        let vnet = self.vnet;
        let mut refused = 0;
        if let Some(ring) = self.ring() {
            let read = ring.recv(read_len, BATCH, |raw| {
                if !vnet {
                    batch.push_frame(raw, raw.len() >= slot_len);
                } else if let Some(next) = deliver(raw, 0, batch, &mut refused) {
                    pending = Some((raw.to_vec(), next));
                }
                pending.is_none() && batch.len() < BATCH
            });
            self.gso_refused += refused;
            read?;
            self.pending = pending;
            return Ok(batch.len());
        }
        while batch.len() < BATCH {
            match self.read_plain(batch) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(batch.len())
    }

    /// One `read` into the batch's next slot (behind a `virtio_net_hdr` if the tap has them;
    /// no segmentation request arrives then, offloads being off).
    fn read_plain(&mut self, batch: &mut RxBatch) -> std::io::Result<()> {
        let slot_len = batch.slot_len;
        if !self.vnet {
            let n = (&self.file).read(batch.next_slot())?;
            batch.push_len(n);
            return Ok(());
        }
        let mut hdr = [0u8; VNET_HDR_LEN];
        let slot = batch.next_slot();
        let n =
            (&self.file).read_vectored(&mut [IoSliceMut::new(&mut hdr), IoSliceMut::new(slot)])?;
        let len = n.saturating_sub(VNET_HDR_LEN);
        let vnet = VnetHdr::parse(&hdr);
        if len < slot_len {
            complete_checksum(&vnet, &mut slot[..len]);
        }
        if n >= VNET_HDR_LEN {
            batch.push_len(len);
        }
        Ok(())
    }

    /// Sends from the front of `frames`; stops where the interface pushes back.
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        let mut results = std::mem::take(&mut self.results);
        let sent = if self.ring().is_none() {
            self.send_plain(frames)
        } else if self.vnet {
            self.send_requests(frames, &mut results)
        } else {
            let Io::Uring(Some(ring)) = &mut self.io else {
                unreachable!("the ring was made just above")
            };
            match ring.send(frames, &mut results) {
                Ok(calls) => Sent {
                    calls,
                    ..settle(&results)
                },
                Err(e) => {
                    log::warn!("rox-nic: port tap {}: {e}", self.name);
                    Sent::all_lost(frames.len())
                }
            }
        };
        self.results = results;
        sent
    }

    /// Sends `frames` through the ring, each behind a `virtio_net_hdr`, runs of them as one
    /// segmentation request each (if on); `results` gets each frame's write result.
    fn send_requests(&mut self, frames: &[FrameRef], results: &mut Vec<i32>) -> Sent {
        let Io::Uring(Some(ring)) = &mut self.io else {
            unreachable!("called with a ring")
        };
        let (mut pieces, mut requests) = (Vec::new(), Vec::new());
        let groups = self
            .writer
            .build(frames, self.gso, &mut pieces, &mut requests);
        let writes = &mut self.write_results;
        let calls = match ring.send_writes(&pieces, &requests, writes) {
            Ok(calls) => calls,
            Err(e) => {
                log::warn!("rox-nic: port tap {}: {e}", self.name);
                return Sent::all_lost(frames.len());
            }
        };
        results.clear();
        for (group, &r) in groups.iter().zip(writes.iter()) {
            if r == -libc::EINVAL && group.len() > 1 && self.gso {
                // The kernel refuses the requests themselves: frames go one by one from now.
                log::warn!(
                    "rox-nic: port tap {}: a segmentation-offload write failed (EINVAL); \
                     frames go one by one from now on",
                    self.name
                );
                self.gso = false;
            }
            results.extend(std::iter::repeat_n(r, group.len()));
        }
        Sent {
            calls,
            ..settle(results)
        }
    }

    /// One `writev` per frame (behind an empty `virtio_net_hdr` if the tap has them).
    fn send_plain(&mut self, frames: &[FrameRef]) -> Sent {
        let mut sent = Sent::default();
        let vnet: &[u8] = if self.vnet { &NO_OFFLOAD } else { &[] };
        for f in frames {
            // One writev: a tap takes a frame per write.
            let r = (&self.file).write_vectored(&[
                IoSlice::new(vnet),
                IoSlice::new(f.head),
                IoSlice::new(f.body),
            ]);
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
            _ if self.pending.is_some() => Some(Duration::ZERO),
            Io::Uring(Some(r)) if r.has_frames() => Some(Duration::ZERO),
            _ => None,
        }
    }
}

/// Whether [`TAP_GSO_ENV`]'s value (None: unset) asks for segmentation offload: on unless
/// it says `off`; anything but on, off or empty is an error.
fn gso_wanted(value: Option<&str>) -> std::io::Result<bool> {
    match value {
        None | Some("on") | Some("") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("{TAP_GSO_ENV}={other:?}: want on or off"),
        )),
    }
}

/// How long a tap another process just let go of may still be busy (milliseconds usually,
/// longer on a loaded host).
const ATTACH_BUSY_WAIT: Duration = Duration::from_secs(10);

/// Attaches `file` to tap `name`. A rox-nic that used io_uring and just exited leaves the tap
/// attached (EBUSY) until the kernel's asynchronous teardown of its ring dropped the armed
/// read, a few milliseconds: wait that out, up to [`ATTACH_BUSY_WAIT`].
fn attach(file: &File, name: &str, vnet_hdr: bool) -> std::io::Result<()> {
    let start = std::time::Instant::now();
    let mut logged = false;
    loop {
        match sys::net::tap_attach(file, name, vnet_hdr) {
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

/// Sets the offloads tap `name`'s reader takes; false (and said in the log) if the kernel
/// refuses them (before Linux 6.2 it has no USO).
fn offload(file: &File, name: &str, offloads: libc::c_uint) -> bool {
    match sys::net::tap_set_offload(file, offloads) {
        Ok(()) => true,
        Err(e) => {
            log::info!(
                "rox-nic: port tap {name}: offloads {offloads:#x} refused ({e}): frames one by one"
            );
            false
        }
    }
}

/// Puts `raw` (a frame as read, behind its `virtio_net_hdr`) into `batch`: the frames a
/// segmentation request stands for from frame `from` on, or the frame itself with its partial
/// checksum completed. Returns the next frame's index if the batch filled up first; a frame
/// this port cannot take (no header, a request not for UDP) is dropped, and one it will not
/// (tiny or too many segments) also counted in `refused`.
fn deliver(raw: &[u8], from: usize, batch: &mut RxBatch, refused: &mut u64) -> Option<usize> {
    let (hdr, frame) = raw.split_first_chunk::<VNET_HDR_LEN>()?;
    let vnet = VnetHdr::parse(hdr);
    let segments = match Segments::of(&vnet, frame) {
        Ok(s) => s,
        Err(why) => {
            *refused += u64::from(why == Unsplittable::Refused);
            log::debug!(
                "rox-nic: tap: dropped a segmentation request of type {} ({why:?})",
                vnet.gso_type
            );
            return None;
        }
    };
    let slot_len = batch.slot_len;
    for i in from..segments.count() {
        if batch.len() == BATCH {
            return Some(i);
        }
        let slot = batch.next_slot();
        let payload = segments.payload(i);
        let head = segments.header(i, slot);
        let len = head + payload.len();
        if len >= slot_len {
            // Longer than the port takes: a slot's length stands for it (dropped as oversize).
            batch.push_len(slot_len);
            continue;
        }
        slot[head..len].copy_from_slice(payload);
        if !segments.is_request() {
            complete_checksum(&vnet, &mut slot[..len]);
        }
        batch.push_len(len);
    }
    None
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
    fn segmentation_offload_is_on_unless_asked_off() {
        assert!(gso_wanted(None).unwrap(), "unset: on");
        assert!(gso_wanted(Some("")).unwrap());
        assert!(gso_wanted(Some("on")).unwrap());
        assert!(!gso_wanted(Some("off")).unwrap());
        let e = gso_wanted(Some("yes")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("want on or off"), "{e}");
    }

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
