//! The device's Ethernet port, as on a converged RoCE NIC: one wire carries the RoCE engine's
//! frames and the frames of the guest's paired virtio-net ("netdev").
//!
//! - [`frame`]: the Ethernet header of RoCEv2 frames and the classification of received ones;
//! - [`tap`], [`socket`], [`cable`]: the kinds of wire ([`LinkSpec`]): a tap interface, QEMU's
//!   `dgram` / `stream` socket netdev framings over unix sockets, or a rox-to-rox cable
//!   (rings of frames in shared memory between two rox-nic processes);
//! - [`faults`], [`pcap`]: seeded fault injection on, and capture of, the port's frames;
//! - [`bottleneck`]: a congested switch queue (rate, tail drop, RED/ECN marking) in front of
//!   the port's receive side;
//! - [`limit`], [`netns`]: the raw limit of a wire and the taps of a private network namespace,
//!   for the port benchmark and the host tests on taps.
//!
//! A [`Port`] queues frames and sends them in batches ([`Port::flush`]), receives in batches
//! ([`Port::recv`]), and applies faults and capture to every frame it sends. The netdev side
//! ([`netdev::Netdev`]) is a [`Link`] of the same kinds (dgram or stream) with a backlog for a
//! guest that is slow to take frames.

pub mod bottleneck;
pub mod cable;
pub mod faults;
pub mod frame;
pub mod limit;
pub mod netdev;
pub mod netns;
pub mod pcap;
pub mod socket;
pub mod tap;

use std::fs::File;
use std::io::BufWriter;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use bottleneck::{BadBottleneckSpec, BottleneckConfig, BottleneckStats};
pub use faults::{BadFaultSpec, FaultConfig, FaultInjector, FaultStats};
use frame::{EthHeader, Mac, ETH_HEADER_LEN};
use pcap::PcapWriter;

use crate::roce::wire::{IcrcFold, Packet};

/// Frames moved per `recvmmsg` / `sendmmsg` (and per receive pass of a tap).
pub const BATCH: usize = 64;
/// IP MTU of a socket port unless `--mtu` says otherwise (a jumbo-frame wire: a 4096-byte
/// RoCE path MTU fits with its headers).
pub const DEFAULT_SOCKET_MTU: usize = 9000;
/// Frames a port holds for a wire that pushes back; beyond that new ones are lost.
pub const TX_QUEUE_LIMIT: usize = 4096;

/// A wire: how frames leave and arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkSpec {
    /// `tap:IFNAME`: an existing tap interface in this network namespace.
    Tap(String),
    /// `dgram:local=PATH,remote=PATH`: one frame per unix datagram (QEMU `-netdev dgram`).
    Dgram { local: PathBuf, remote: PathBuf },
    /// `stream:connect=PATH`: length-prefixed frames over a unix stream (QEMU `-netdev
    /// stream`), connecting (and reconnecting) to PATH.
    StreamConnect(PathBuf),
    /// `stream:listen=PATH`: the same, serving one peer at a time on PATH.
    StreamListen(PathBuf),
    /// `cable:listen=PATH`: a rox-to-rox cable ([`cable`]) served on the unix socket PATH.
    CableListen(PathBuf),
    /// `cable:connect=PATH`: the other end of that cable (connecting, and reconnecting).
    CableConnect(PathBuf),
}

impl std::str::FromStr for LinkSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<LinkSpec, String> {
        const USAGE: &str = "want tap:IFNAME, dgram:local=PATH,remote=PATH, \
                             stream:connect=PATH, stream:listen=PATH, \
                             cable:listen=PATH or cable:connect=PATH";
        let bad = || format!("{s:?}: {USAGE}");
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        let options = || -> Result<Vec<(&str, &str)>, String> {
            rest.split(',')
                .map(|kv| kv.split_once('=').ok_or_else(bad))
                .collect()
        };
        match kind {
            "tap" if !rest.is_empty() && !rest.contains([',', '=']) => {
                Ok(LinkSpec::Tap(rest.to_string()))
            }
            "dgram" => {
                let (mut local, mut remote) = (None, None);
                for (k, v) in options()? {
                    match k {
                        "local" if local.is_none() && !v.is_empty() => local = Some(v),
                        "remote" if remote.is_none() && !v.is_empty() => remote = Some(v),
                        _ => return Err(bad()),
                    }
                }
                match (local, remote) {
                    (Some(l), Some(r)) => Ok(LinkSpec::Dgram {
                        local: l.into(),
                        remote: r.into(),
                    }),
                    _ => Err(bad()),
                }
            }
            "stream" => match options()?.as_slice() {
                [("connect", p)] if !p.is_empty() => Ok(LinkSpec::StreamConnect(p.into())),
                [("listen", p)] if !p.is_empty() => Ok(LinkSpec::StreamListen(p.into())),
                _ => Err(bad()),
            },
            "cable" => match options()?.as_slice() {
                [("connect", p)] if !p.is_empty() => Ok(LinkSpec::CableConnect(p.into())),
                [("listen", p)] if !p.is_empty() => Ok(LinkSpec::CableListen(p.into())),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// A frame to send, as its Ethernet header and the rest (sent as one frame).
#[derive(Clone, Copy, Debug)]
pub struct FrameRef<'a> {
    pub head: &'a [u8],
    pub body: &'a [u8],
}

impl<'a> FrameRef<'a> {
    /// A whole frame (at least an Ethernet header long).
    pub fn whole(frame: &'a [u8]) -> FrameRef<'a> {
        let (head, body) = frame.split_at(ETH_HEADER_LEN.min(frame.len()));
        FrameRef { head, body }
    }
}

/// What a link's send did with a list of frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Frames taken from the front of the list (sent or lost); the rest could not go now.
    pub taken: usize,
    /// Of those, frames lost (no peer, or refused).
    pub dropped: usize,
    /// System calls made.
    pub calls: u64,
}

impl Sent {
    /// Every one of `frames` frames lost at once (no peer to send to).
    pub fn all_lost(frames: usize) -> Sent {
        Sent {
            taken: frames,
            dropped: frames,
            calls: 0,
        }
    }
}

/// Receive buffers for one batch: [`BATCH`] slots of `slot_len` bytes, one frame each.
pub struct RxBatch {
    slots: Vec<u8>,
    slot_len: usize,
    lens: [usize; BATCH],
    count: usize,
}

impl RxBatch {
    /// Slots one byte longer than `max_frame`, so a longer frame shows as longer.
    pub fn new(max_frame: usize) -> RxBatch {
        let slot_len = max_frame + 1;
        RxBatch {
            slots: vec![0; BATCH * slot_len],
            slot_len,
            lens: [0; BATCH],
            count: 0,
        }
    }

    pub fn clear(&mut self) {
        self.count = 0;
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The frames received, in arrival order.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.filled().map(|(slot, &len)| &slot[..len])
    }

    /// The filled slots beside their frames' lengths, in arrival order.
    fn filled(&self) -> RxSlots<'_> {
        self.slots
            .chunks_exact(self.slot_len)
            .zip(&self.lens[..self.count])
    }

    fn next_slot(&mut self) -> &mut [u8] {
        let at = self.count * self.slot_len;
        &mut self.slots[at..at + self.slot_len]
    }

    /// The next slot was filled with `len` bytes (capped to the slot).
    fn push_len(&mut self, len: usize) {
        self.lens[self.count] = len.min(self.slot_len);
        self.count += 1;
    }

    /// Copies a frame into the next slot; `oversize` marks a stand-in for a longer frame.
    fn push_frame(&mut self, bytes: &[u8], oversize: bool) {
        let len = if oversize { self.slot_len } else { bytes.len() };
        let n = bytes.len().min(self.slot_len);
        self.next_slot()[..n].copy_from_slice(&bytes[..n]);
        self.push_len(len);
    }
}

/// One end of a wire.
pub enum Link {
    Tap(tap::Tap),
    Dgram(socket::Dgram),
    Stream(socket::Stream),
    Cable(cable::Cable),
}

impl Link {
    pub fn open(spec: &LinkSpec) -> std::io::Result<Link> {
        Ok(match spec {
            LinkSpec::Tap(name) => Link::Tap(tap::Tap::open(name)?),
            LinkSpec::Dgram { local, remote } => Link::Dgram(socket::Dgram::open(local, remote)?),
            LinkSpec::StreamConnect(path) => Link::Stream(socket::Stream::connect(path)),
            LinkSpec::StreamListen(path) => Link::Stream(socket::Stream::listen(path)?),
            LinkSpec::CableListen(path) => Link::Cable(cable::Cable::listen(path)?),
            LinkSpec::CableConnect(path) => Link::Cable(cable::Cable::connect(path)?),
        })
    }

    /// Receives up to [`BATCH`] frames into `batch`; never waits.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        match self {
            Link::Tap(t) => t.recv(batch),
            Link::Dgram(d) => d.recv(batch),
            Link::Stream(s) => s.recv(batch),
            Link::Cable(c) => c.recv(batch),
        }
    }

    /// Sends frames from the front of `frames` until the wire pushes back.
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        if frames.is_empty() {
            return Sent::default();
        }
        match self {
            Link::Tap(t) => t.send(frames),
            Link::Dgram(d) => d.send(frames),
            Link::Stream(s) => s.send(frames),
            Link::Cable(c) => c.send(frames),
        }
    }

    /// The fd to poll for arriving frames, and whether to wait for room to write (bytes a
    /// stream buffered).
    pub fn poll_fd(&self) -> Option<(RawFd, bool)> {
        match self {
            Link::Tap(t) => Some((t.fd(), false)),
            Link::Dgram(d) => Some((d.fd(), false)),
            Link::Stream(s) => s.fd().map(|fd| (fd, s.has_pending_writes())),
            // The peer rings the cable's doorbell when it frees room: never wait for POLLOUT.
            Link::Cable(c) => Some((c.fd(), false)),
        }
    }

    /// Writes bytes a stream buffered earlier.
    pub fn flush_writes(&mut self) {
        if let Link::Stream(s) = self {
            s.flush_writes();
        }
    }

    /// How long until the link tries again to reach a missing peer, or zero while it holds
    /// received frames its fd does not show (None: nothing to retry).
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            Link::Tap(t) => t.retry_in(),
            Link::Dgram(_) => None,
            Link::Stream(s) => s.retry_in(),
            Link::Cable(c) => c.retry_in(),
        }
    }

    /// A peer is there to take frames (a tap always is).
    pub fn is_connected(&self) -> bool {
        match self {
            Link::Tap(_) => true,
            Link::Dgram(d) => d.is_connected(),
            Link::Stream(s) => s.is_connected(),
            Link::Cable(c) => c.is_connected(),
        }
    }
}

/// Errors opening a port.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("port {spec:?}: {source}")]
    Open {
        spec: LinkSpec,
        source: std::io::Error,
    },
    #[error("port MTU of tap {name}: {source}")]
    Mtu {
        name: String,
        source: std::io::Error,
    },
    #[error("port MTU {0} out of range ({min}..={max})", min = MIN_MTU, max = MAX_MTU)]
    BadMtu(usize),
    #[error("port MTU {0} too large for a cable (its frames are at most {max} bytes)", max = cable::CABLE_MAX_FRAME)]
    CableMtu(usize),
    #[error("pcap capture {path}: {source}")]
    Capture {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Smallest IP MTU a port accepts (IPv6's minimum) and the largest (a 64 KiB frame).
pub const MIN_MTU: usize = 1280;
pub const MAX_MTU: usize = 65535 - ETH_HEADER_LEN;

/// How a device's port is wired.
#[derive(Clone, Debug)]
pub struct PortConfig {
    pub link: LinkSpec,
    /// IP MTU; default: the tap's, [`DEFAULT_SOCKET_MTU`] for socket ports.
    pub mtu: Option<usize>,
    pub faults: Option<FaultConfig>,
    /// Write every frame sent (before fault injection) and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// A congested switch queue in front of the port's receive side.
    pub bottleneck: Option<BottleneckConfig>,
}

impl PortConfig {
    pub fn new(link: LinkSpec) -> PortConfig {
        PortConfig {
            link,
            mtu: None,
            faults: None,
            pcap: None,
            bottleneck: None,
        }
    }
}

/// Port traffic counters (the device mirrors them into its `STAT_PORT_*` counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to the wire (after fault injection).
    pub tx_frames: u64,
    pub rx_frames: u64,
    /// Frames lost because the wire had no peer or refused them.
    pub tx_lost: u64,
    /// Frames lost because [`TX_QUEUE_LIMIT`] frames were already waiting.
    pub tx_queue_full: u64,
    /// System calls that sent / received frames.
    pub send_calls: u64,
    pub recv_calls: u64,
    /// Segmentation requests a tap with offloads received and refused, each dropped whole:
    /// segments shorter than a RoCEv2 packet's BTH and ICRC, or more than the kernel's
    /// UDP_MAX_SEGMENTS of them (`tap::gso::RX_MIN_SEGMENT`, `RX_MAX_SEGMENTS`). The device's
    /// `STAT_PORT_RX_GSO_REFUSED`.
    pub rx_gso_refused: u64,
}

/// A device's Ethernet port.
pub struct Port {
    link: Link,
    mac: Mac,
    mtu: usize,
    faults: Option<FaultInjector<EthHeader>>,
    pcap: Option<PcapWriter<BufWriter<File>>>,
    epoch: Instant,
    /// Frames waiting for the wire, in order.
    tx: Vec<(EthHeader, Packet)>,
    rx: RxBatch,
    /// The last receive's frames are lent by the cable ([`Port::frames`]): the copies it made
    /// out of the shared ring into its own memory, not further copies in `rx`.
    rx_lent: bool,
    stats: PortStats,
    bottleneck: Option<bottleneck::Shaper>,
}

impl Port {
    /// Opens the wire `cfg` names for a device with MAC `mac`.
    pub fn open(cfg: &PortConfig, mac: Mac) -> Result<Port, PortError> {
        let link = Link::open(&cfg.link).map_err(|source| PortError::Open {
            spec: cfg.link.clone(),
            source,
        })?;
        let mtu = match (&cfg.link, cfg.mtu) {
            (_, Some(m)) => m,
            (LinkSpec::Tap(name), None) => {
                tap::Tap::mtu(name).map_err(|source| PortError::Mtu {
                    name: name.clone(),
                    source,
                })?
            }
            (_, None) => DEFAULT_SOCKET_MTU,
        };
        if matches!(
            cfg.link,
            LinkSpec::CableListen(_) | LinkSpec::CableConnect(_)
        ) && mtu + ETH_HEADER_LEN > cable::CABLE_MAX_FRAME
        {
            return Err(PortError::CableMtu(mtu));
        }
        let mut port = Port::with_link(link, mac, mtu, cfg.faults, cfg.pcap.as_deref())?;
        port.bottleneck = cfg
            .bottleneck
            .map(|b| bottleneck::Shaper::new(b, port.max_frame()));
        Ok(port)
    }

    /// A port on an already open link.
    pub fn with_link(
        link: Link,
        mac: Mac,
        mtu: usize,
        faults: Option<FaultConfig>,
        pcap: Option<&Path>,
    ) -> Result<Port, PortError> {
        if !(MIN_MTU..=MAX_MTU).contains(&mtu) {
            return Err(PortError::BadMtu(mtu));
        }
        let pcap = match pcap {
            Some(path) => Some(
                File::create(path)
                    .and_then(|f| PcapWriter::new(BufWriter::new(f)))
                    .map_err(|source| PortError::Capture {
                        path: path.to_path_buf(),
                        source,
                    })?,
            ),
            None => None,
        };
        Ok(Port {
            link,
            mac,
            mtu,
            faults: faults.map(FaultInjector::new),
            pcap,
            epoch: Instant::now(),
            tx: Vec::new(),
            rx: RxBatch::new(mtu + ETH_HEADER_LEN),
            rx_lent: false,
            stats: PortStats::default(),
            bottleneck: None,
        })
    }

    pub fn mtu(&self) -> usize {
        self.mtu
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// The longest valid frame: IP MTU plus the Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.mtu + ETH_HEADER_LEN
    }

    pub fn stats(&self) -> PortStats {
        let rx_gso_refused = match &self.link {
            Link::Tap(t) => t.gso_refused(),
            _ => 0,
        };
        PortStats {
            rx_gso_refused,
            ..self.stats
        }
    }

    pub fn bottleneck_stats(&self) -> Option<BottleneckStats> {
        self.bottleneck.as_ref().map(bottleneck::Shaper::stats)
    }

    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.faults.as_ref().map(FaultInjector::stats)
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    fn capture(&mut self, parts: &[&[u8]]) {
        if let Some(pcap) = &mut self.pcap {
            let t = self.epoch.elapsed().as_nanos() as u64;
            if let Err(e) = pcap.write_frame(t, parts) {
                log::error!("rox-nic: pcap capture stopped: {e}");
                self.pcap = None;
            }
        }
    }

    /// Queues a RoCEv2 IP packet in a frame to `dmac` (a packet built in a buffer the cable
    /// lent gets its Ethernet header in front of it there).
    pub fn queue_ip(&mut self, dmac: &Mac, packet: impl Into<Packet>) {
        let mut packet = packet.into();
        let head = frame::roce_header(dmac, &self.mac, &packet);
        if let Some(room) = packet.header_room() {
            room.copy_from_slice(&head);
        }
        self.queue(head, packet);
    }

    /// Queues a whole frame (e.g. from the netdev); it must be at least a header long.
    pub fn queue_frame(&mut self, whole: &[u8]) {
        let Some(head) = whole.first_chunk::<ETH_HEADER_LEN>() else {
            return;
        };
        self.queue(*head, Packet::from(whole[ETH_HEADER_LEN..].to_vec()));
    }

    /// Queues a frame (captured now, then through the fault injector) for [`Port::flush`].
    /// Only the plain path keeps a packet where it was built; the fault injector works on
    /// a copy of its own.
    pub fn queue(&mut self, head: EthHeader, body: impl Into<Packet>) {
        let body = body.into();
        // Checked here: the slice of parts is built on every frame's path otherwise.
        if self.pcap.is_some() {
            self.capture(&[&head, &body]);
        }
        if self.tx.len() >= TX_QUEUE_LIMIT {
            self.stats.tx_queue_full += 1;
            return;
        }
        match &mut self.faults {
            Some(f) => {
                let from = frame::corruptible_from(frame::ethertype(&head), &body);
                f.apply(head, body.into_vec(), from, &mut OnHeap(&mut self.tx));
            }
            None => self.tx.push((head, body)),
        }
    }

    /// Sends what is queued until the wire pushes back; returns the frames sent.
    pub fn flush(&mut self) -> usize {
        self.link.flush_writes();
        if self.tx.is_empty() {
            return 0;
        }
        let sent = match &mut self.link {
            Link::Cable(c) => c.send_packets(&mut self.tx),
            link => {
                let refs: Vec<FrameRef> = self
                    .tx
                    .iter()
                    .map(|(h, b)| FrameRef { head: h, body: b })
                    .collect();
                link.send(&refs)
            }
        };
        // The sent frames' heap buffers carry the next packets the engine builds (no
        // allocation); lent ones the cable published are its own again.
        crate::roce::wire::pool::recycle_all(self.tx.drain(..sent.taken).map(|(_, body)| body));
        let delivered = sent.taken - sent.dropped;
        self.stats.tx_frames += delivered as u64;
        self.stats.tx_lost += sent.dropped as u64;
        self.stats.send_calls += sent.calls;
        delivered
    }

    /// Frames waiting for room on the wire (the transmit scheduler's back pressure).
    pub fn backlog(&self) -> usize {
        self.tx.len()
    }

    /// Frames wait for room on the wire.
    pub fn has_backlog(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Releases a frame held back by reorder injection and sends (call when idle).
    pub fn flush_faults(&mut self) -> usize {
        if let Some(f) = &mut self.faults {
            f.flush(&mut OnHeap(&mut self.tx));
        }
        self.flush()
    }

    /// Receives up to [`BATCH`] frames (see [`Port::frames`]); never waits. With nothing
    /// waiting, a frame held back by reorder injection is released. A cable without a
    /// bottleneck in front lends the copies it made of its frames (in its own memory, out of
    /// the peer's reach): they stay the port's until the next receive or
    /// [`Port::release_frames`].
    pub fn recv(&mut self) -> std::io::Result<usize> {
        self.rx_lent = false;
        // Only a bottleneck reads the clock here: the data path calls this on every look at
        // the wire, and a clock read costs more than an empty ring does.
        let n = match (&mut self.bottleneck, &mut self.link) {
            (Some(b), link) => b.recv(link, &mut self.rx, self.epoch.elapsed())?,
            (None, Link::Cable(c)) => {
                self.rx_lent = true;
                c.recv_lent()?
            }
            (None, link) => link.recv(&mut self.rx)?,
        };
        if n == 0 {
            if self.faults.is_some() {
                self.flush_faults();
            }
            return Ok(0);
        }
        self.stats.recv_calls += 1;
        self.stats.rx_frames += n as u64;
        if let Some(pcap) = &mut self.pcap {
            let t = self.epoch.elapsed().as_nanos() as u64;
            for (f, _) in received(&self.link, &self.rx, self.rx_lent) {
                if pcap.write_frame(t, &[f]).is_err() {
                    break;
                }
            }
        }
        Ok(n)
    }

    /// The frames of the last [`Port::recv`].
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.frames_folded().map(|(f, _)| f)
    }

    /// [`Port::frames`], each with its ICRC run where the wire folded it as it copied the
    /// frame (a cable's RoCEv2 frames), for [`frame::sort_received`].
    pub fn frames_folded(&self) -> impl Iterator<Item = (&[u8], Option<IcrcFold>)> {
        received(&self.link, &self.rx, self.rx_lent)
    }

    /// Done with the frames of the last [`Port::recv`]: a cable may fill their slots again.
    pub fn release_frames(&mut self) {
        if let Link::Cable(c) = &mut self.link {
            c.release_lent();
        }
    }

    /// The fd to poll for arriving frames, and whether to wait for room to write.
    pub fn poll_fd(&self) -> Option<(RawFd, bool)> {
        self.link
            .poll_fd()
            .map(|(fd, out)| (fd, out || self.has_backlog()))
    }

    /// How long until the link tries again to reach a missing peer, or the bottleneck has
    /// frames for the device (None: neither).
    pub fn retry_in(&self) -> Option<Duration> {
        let due = self
            .bottleneck
            .as_ref()
            .and_then(|b| b.due_in(self.epoch.elapsed()));
        match (self.link.retry_in(), due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Flushes the pcap capture to disk.
    pub fn flush_capture(&mut self) -> std::io::Result<()> {
        match &mut self.pcap {
            Some(p) => p.flush(),
            None => Ok(()),
        }
    }
}

/// [`RxBatch`]'s filled slots beside their frames' lengths.
type RxSlots<'a> = std::iter::Zip<std::slice::ChunksExact<'a, u8>, std::slice::Iter<'a, usize>>;

/// The frames of a port's last receive (and their ICRC folds): the cable's own copies,
/// lent, or those in `rx`.
fn received<'a>(link: &'a Link, rx: &'a RxBatch, lent: bool) -> Received<'a> {
    match link {
        Link::Cable(c) if lent => Received::Lent(c.lent_slots()),
        _ => Received::Copied(rx.filled()),
    }
}

/// [`received`]'s frames: one of two plain walks, chosen once per receive (a chain of
/// flattened options cost ~50 instructions a frame, not inlined).
enum Received<'a> {
    Copied(RxSlots<'a>),
    Lent(cable::LentSlots<'a>),
}

impl<'a> Iterator for Received<'a> {
    type Item = (&'a [u8], Option<IcrcFold>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Received::Copied(slots) => slots.next().map(|(slot, &len)| (&slot[..len], None)),
            Received::Lent(slots) => slots.next().map(cable::lent_frame),
        }
    }
}

/// The port's transmit queue as the fault injector fills it (with heap packets).
struct OnHeap<'a>(&'a mut Vec<(EthHeader, Packet)>);

impl Extend<(EthHeader, Vec<u8>)> for OnHeap<'_> {
    fn extend<I: IntoIterator<Item = (EthHeader, Vec<u8>)>>(&mut self, frames: I) {
        self.0
            .extend(frames.into_iter().map(|(h, b)| (h, Packet::from(b))));
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        if let Some(b) = &mut self.bottleneck {
            b.log_stats();
        }
        let refused = self.stats().rx_gso_refused;
        if refused > 0 {
            log::info!("rox-nic: port: {refused} received segmentation requests refused");
        }
        let _ = self.flush_capture();
    }
}

#[cfg(test)]
mod tests;
