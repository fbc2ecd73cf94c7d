//! The fabric between rox-nic processes: RoCEv2 IP packets inside host UDP datagrams on
//! 127.0.0.0/8, peers found by GID through a shared directory, optional fault injection and
//! pcap capture.
//!
//! Directory: every device writes, for each of its GIDs, a file named by the GID in 32 hex
//! digits whose content is the `127.a.b.c:port` of its fabric socket. To reach a GID a device
//! reads that file (cached for [`PEER_CACHE_TTL`]). Packets to the device's own GIDs go through
//! its own socket (loopback), so there is one receive path and one pollable fd.
//!
//! System calls, not bytes, bound a host fabric: a data path [`Fabric::queue`]s the packets of
//! one pass and [`Fabric::flush`]es them with one `sendmmsg`, and takes up to [`BATCH`]
//! datagrams per `recvmmsg` with [`Fabric::recv_batch`]. The socket is non-blocking for good
//! (no `fcntl` per call); waiting is `poll`.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::wire::{PcapWriter, IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};
use super::Gid;

/// How long a peer address read from the directory is trusted before it is read again.
pub const PEER_CACHE_TTL: Duration = Duration::from_secs(1);
/// Largest datagram the fabric carries (an IP packet with a 4096-byte MTU payload fits easily).
pub const MAX_DATAGRAM: usize = 65535;
/// Socket buffer size requested so bursts of a full send window are not dropped by the host.
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;
/// Datagrams moved per `sendmmsg` / `recvmmsg` call.
pub const BATCH: usize = 64;
/// Receive slot of a [`RxBatch`]: the largest packet the transport builds (a 4096-byte MTU
/// payload behind IPv6, UDP, BTH and extension headers, plus ICRC) with room to spare. A
/// longer datagram is not a packet of ours; it arrives truncated and is dropped.
pub const RX_SLOT_BYTES: usize = 8192;

/// Fault injection probabilities (each in [0, 1]) and the seed that makes a run repeat.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Drop the packet.
    pub loss: f64,
    /// Deliver the packet twice.
    pub duplicate: f64,
    /// Hold the packet back and deliver it after the next one.
    pub reorder: f64,
    /// Flip one bit of the transport part (BTH..ICRC): the receiver's ICRC check must drop it.
    pub corrupt: f64,
    pub seed: u64,
}

impl FaultConfig {
    /// Parses `loss=0.01,dup=0.01,reorder=0.01,corrupt=0.01,seed=42` (any subset).
    pub fn parse(spec: &str) -> Result<FaultConfig, FabricError> {
        let mut cfg = FaultConfig::default();
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| FabricError::BadFaultSpec(item.to_string()))?;
            let bad = || FabricError::BadFaultSpec(item.to_string());
            let prob = || -> Result<f64, FabricError> {
                let p: f64 = value.parse().map_err(|_| bad())?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(bad())
                }
            };
            match key {
                "loss" => cfg.loss = prob()?,
                "dup" | "duplicate" => cfg.duplicate = prob()?,
                "reorder" => cfg.reorder = prob()?,
                "corrupt" => cfg.corrupt = prob()?,
                "seed" => cfg.seed = value.parse().map_err(|_| bad())?,
                _ => return Err(bad()),
            }
        }
        Ok(cfg)
    }
}

/// What the fault injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub passed: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

/// SplitMix64: a tiny, fast, seedable generator. Fault injection runs per packet on the data
/// path (and in debug-built tests), where a cryptographic RNG costs more than the packet.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        const MIX1: u64 = 0xbf58_476d_1ce4_e5b9;
        const MIX2: u64 = 0x94d0_49bb_1331_11eb;
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(MIX1);
        z = (z ^ (z >> 27)).wrapping_mul(MIX2);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        // 53 random bits give a uniform f64 in [0, 1).
        const MANTISSA_BITS: u32 = 53;
        let unit =
            (self.next() >> (u64::BITS - MANTISSA_BITS)) as f64 / (1u64 << MANTISSA_BITS) as f64;
        unit < p
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant for fault injection).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Applies [`FaultConfig`] to a stream of packets, deterministically for a given seed. Each
/// packet travels with a tag `T` (its destination), which stays with it when it is reordered.
#[derive(Debug)]
pub struct FaultInjector<T = ()> {
    cfg: FaultConfig,
    rng: SplitMix64,
    held: Option<(T, Vec<u8>)>,
    stats: FaultStats,
}

impl<T: Clone> FaultInjector<T> {
    pub fn new(cfg: FaultConfig) -> FaultInjector<T> {
        FaultInjector {
            cfg,
            rng: SplitMix64(cfg.seed),
            held: None,
            stats: FaultStats::default(),
        }
    }

    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Feeds one packet; appends to `out` the packets to deliver now, in order.
    pub fn apply(&mut self, tag: T, mut packet: Vec<u8>, out: &mut Vec<(T, Vec<u8>)>) {
        self.stats.passed += 1;
        if self.rng.chance(self.cfg.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance(self.cfg.corrupt) {
            let ip_len = if super::wire::is_ipv6(&packet) {
                IPV6_HEADER_LEN
            } else {
                IPV4_HEADER_LEN
            };
            let start = ip_len + UDP_HEADER_LEN;
            if packet.len() > start {
                let at = start + self.rng.below(packet.len() - start);
                packet[at] ^= 1 << self.rng.below(u8::BITS as usize);
                self.stats.corrupted += 1;
            }
        }
        let dup = self.rng.chance(self.cfg.duplicate);
        if dup {
            self.stats.duplicated += 1;
            out.push((tag.clone(), packet.clone()));
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            self.held = Some((tag, packet));
            return;
        }
        out.push((tag, packet));
        if let Some(held) = self.held.take() {
            out.push(held);
        }
    }

    /// Releases a held-back packet (call when the sender goes idle so nothing waits forever).
    pub fn flush(&mut self, out: &mut Vec<(T, Vec<u8>)>) {
        if let Some(held) = self.held.take() {
            out.push(held);
        }
    }
}

/// Errors of the fabric.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("fabric address {0} is not on the loopback network 127.0.0.0/8")]
    NotLoopback(Ipv4Addr),
    #[error("cannot bind the fabric socket on {addr}: {source}")]
    Bind {
        addr: SocketAddrV4,
        source: std::io::Error,
    },
    #[error("fabric directory {path}: {source}")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no fabric peer owns GID {0} (no entry in the fabric directory)")]
    UnknownPeer(String),
    #[error("fabric directory entry {path} is not an address: {content:?}")]
    BadEntry { path: PathBuf, content: String },
    #[error("bad fault injection item {0:?} (want loss=P,dup=P,reorder=P,corrupt=P,seed=N)")]
    BadFaultSpec(String),
    #[error("fabric send: {0}")]
    Send(std::io::Error),
    #[error("pcap capture: {0}")]
    Capture(std::io::Error),
}

/// How a device joins the fabric.
#[derive(Clone, Debug)]
pub struct FabricConfig {
    /// Directory shared by all devices of the fabric.
    pub directory: PathBuf,
    /// Loopback address to bind (port chosen by the kernel).
    pub bind: Ipv4Addr,
    pub faults: Option<FaultConfig>,
    /// Write every transmitted packet (before fault injection) to this pcap file.
    pub pcap: Option<PathBuf>,
}

/// Fabric traffic counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    pub sent: u64,
    pub received: u64,
    pub unknown_peer: u64,
    pub send_errors: u64,
    /// Datagrams longer than [`RX_SLOT_BYTES`] (dropped).
    pub truncated: u64,
    /// `sendmmsg` / `recvmmsg` calls that moved at least one datagram.
    pub send_calls: u64,
    pub recv_calls: u64,
}

/// Receive buffers for one `recvmmsg`: [`BATCH`] slots of [`RX_SLOT_BYTES`].
pub struct RxBatch {
    slots: Vec<u8>,
    lens: [usize; BATCH],
    count: usize,
}

impl Default for RxBatch {
    fn default() -> RxBatch {
        RxBatch {
            slots: vec![0; BATCH * RX_SLOT_BYTES],
            lens: [0; BATCH],
            count: 0,
        }
    }
}

impl RxBatch {
    pub fn new() -> RxBatch {
        RxBatch::default()
    }

    /// The datagrams of the last [`Fabric::recv_batch`], in arrival order.
    pub fn packets(&self) -> impl Iterator<Item = &[u8]> {
        self.slots
            .chunks_exact(RX_SLOT_BYTES)
            .zip(&self.lens)
            .take(self.count)
            .map(|(slot, &len)| &slot[..len])
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A socket address in the C form `sendmmsg` takes.
fn sockaddr_of(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid (unspecified) address.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Formats a GID as the 32 hex digits used for directory entries.
pub fn gid_hex(gid: &Gid) -> String {
    gid.iter().map(|b| format!("{b:02x}")).collect()
}

/// One device's attachment to the fabric.
pub struct Fabric {
    socket: UdpSocket,
    local: SocketAddr,
    directory: PathBuf,
    local_gids: HashSet<Gid>,
    peers: HashMap<Gid, (SocketAddr, Instant)>,
    faults: Option<FaultInjector<SocketAddr>>,
    pcap: Option<PcapWriter<BufWriter<File>>>,
    epoch: Instant,
    stats: FabricStats,
    /// Packets queued for the next [`Fabric::flush`], with their destination.
    tx_queue: Vec<(SocketAddr, Vec<u8>)>,
}

/// Asks for a large socket buffer: first past the sysctl cap (net.core.[rw]mem_max; allowed
/// with CAP_NET_ADMIN), else up to the cap. A small buffer is not an error, only more losses
/// for RC to recover when a full send window arrives at once.
fn set_buffer(fd: RawFd, force: libc::c_int, capped: libc::c_int) {
    let size = SOCKET_BUFFER_BYTES;
    let set = |option| {
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(force) != 0 {
        set(capped);
    }
}

impl Fabric {
    /// Binds the fabric socket and prepares the directory.
    pub fn open(cfg: &FabricConfig) -> Result<Fabric, FabricError> {
        if !cfg.bind.is_loopback() {
            return Err(FabricError::NotLoopback(cfg.bind));
        }
        std::fs::create_dir_all(&cfg.directory).map_err(|source| FabricError::Directory {
            path: cfg.directory.clone(),
            source,
        })?;
        let addr = SocketAddrV4::new(cfg.bind, 0);
        let socket = UdpSocket::bind(addr).map_err(|source| FabricError::Bind { addr, source })?;
        socket
            .set_nonblocking(true)
            .map_err(|source| FabricError::Bind { addr, source })?;
        set_buffer(socket.as_raw_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
        set_buffer(socket.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
        let local = socket
            .local_addr()
            .map_err(|source| FabricError::Bind { addr, source })?;
        let pcap = match &cfg.pcap {
            Some(path) => Some(
                File::create(path)
                    .and_then(|f| PcapWriter::new(BufWriter::new(f)))
                    .map_err(FabricError::Capture)?,
            ),
            None => None,
        };
        Ok(Fabric {
            socket,
            local,
            directory: cfg.directory.clone(),
            local_gids: HashSet::new(),
            peers: HashMap::new(),
            faults: cfg.faults.map(FaultInjector::new),
            pcap,
            epoch: Instant::now(),
            stats: FabricStats::default(),
            tx_queue: Vec::new(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn stats(&self) -> FabricStats {
        self.stats
    }

    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.faults.as_ref().map(FaultInjector::stats)
    }

    fn entry_path(&self, gid: &Gid) -> PathBuf {
        self.directory.join(gid_hex(gid))
    }

    /// Announces that this device owns `gid` (atomically replaces a stale entry).
    pub fn add_gid(&mut self, gid: Gid) -> Result<(), FabricError> {
        let path = self.entry_path(&gid);
        let tmp = self
            .directory
            .join(format!(".{}.{}", gid_hex(&gid), std::process::id()));
        std::fs::write(&tmp, format!("{}\n", self.local))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| FabricError::Directory { path, source })?;
        self.local_gids.insert(gid);
        Ok(())
    }

    /// Withdraws `gid` (only if the entry is still ours).
    pub fn remove_gid(&mut self, gid: &Gid) {
        if self.local_gids.remove(gid) {
            let path = self.entry_path(gid);
            if std::fs::read_to_string(&path).is_ok_and(|c| c.trim() == self.local.to_string()) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    fn resolve(&mut self, gid: &Gid) -> Result<SocketAddr, FabricError> {
        if self.local_gids.contains(gid) {
            return Ok(self.local);
        }
        if let Some((addr, at)) = self.peers.get(gid) {
            if at.elapsed() < PEER_CACHE_TTL {
                return Ok(*addr);
            }
        }
        let path = self.entry_path(gid);
        let content =
            std::fs::read_to_string(&path).map_err(|_| FabricError::UnknownPeer(gid_hex(gid)))?;
        let addr: SocketAddr = content.trim().parse().map_err(|_| FabricError::BadEntry {
            path: path.clone(),
            content: content.clone(),
        })?;
        self.peers.insert(*gid, (addr, Instant::now()));
        Ok(addr)
    }

    /// Queues one RoCEv2 IP packet for the device owning `dgid` (through the fault injector);
    /// [`Fabric::flush`] sends the queue. An unknown peer is an error (the packet is lost; RC
    /// recovers or reports retry exceeded).
    pub fn queue(&mut self, dgid: &Gid, packet: Vec<u8>) -> Result<(), FabricError> {
        let addr = match self.resolve(dgid) {
            Ok(addr) => addr,
            Err(e) => {
                self.stats.unknown_peer += 1;
                return Err(e);
            }
        };
        if let Some(pcap) = &mut self.pcap {
            let t = self.epoch.elapsed().as_nanos() as u64;
            pcap.write_packet(t, &packet)
                .map_err(FabricError::Capture)?;
        }
        match &mut self.faults {
            Some(f) => f.apply(addr, packet, &mut self.tx_queue),
            None => self.tx_queue.push((addr, packet)),
        }
        Ok(())
    }

    /// Sends every queued packet, [`BATCH`] per `sendmmsg`. A packet the host refuses (e.g. a
    /// full socket buffer) is lost like on a wire; the first such error is returned after the
    /// rest of the queue went out.
    pub fn flush(&mut self) -> Result<(), FabricError> {
        let mut queue = std::mem::take(&mut self.tx_queue);
        let mut result = Ok(());
        let mut next = 0;
        while next < queue.len() {
            let chunk = &queue[next..(next + BATCH).min(queue.len())];
            match self.send_chunk(chunk) {
                Ok(sent) => {
                    self.stats.sent += sent as u64;
                    next += sent;
                }
                Err(e) => {
                    // The datagram at `next` failed: drop it and forget its peer's address
                    // (the directory may have a newer one).
                    self.stats.send_errors += 1;
                    let failed = queue[next].0;
                    self.peers.retain(|_, (addr, _)| *addr != failed);
                    if result.is_ok() {
                        result = Err(FabricError::Send(e));
                    }
                    next += 1;
                }
            }
        }
        queue.clear();
        self.tx_queue = queue;
        result
    }

    /// One `sendmmsg` of up to [`BATCH`] datagrams; returns how many left (at least one), or
    /// the error of the first one.
    fn send_chunk(&mut self, chunk: &[(SocketAddr, Vec<u8>)]) -> std::io::Result<usize> {
        debug_assert!(chunk.len() <= BATCH);
        // On the stack: this runs once per data-path pass with traffic, and a heap allocation
        // per call showed in profiles.
        // SAFETY (zeroed): sockaddr_storage, iovec and mmsghdr are plain C data for which all
        // zeroes (null pointers, zero lengths) is valid.
        let mut addrs: [(libc::sockaddr_storage, libc::socklen_t); BATCH] =
            unsafe { std::mem::zeroed() };
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, (addr, packet)) in chunk.iter().enumerate() {
            addrs[i] = sockaddr_of(addr);
            iovs[i] = libc::iovec {
                iov_base: packet.as_ptr() as *mut libc::c_void,
                iov_len: packet.len(),
            };
            let hdr = &mut msgs[i].msg_hdr;
            hdr.msg_name = (&mut addrs[i].0 as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = addrs[i].1;
            hdr.msg_iov = &mut iovs[i];
            hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `chunk.len()` messages point into `addrs`, `iovs` and `chunk`,
        // which live across the call; the kernel only reads them (and writes msg_len).
        let n = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                chunk.len() as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.stats.send_calls += 1;
        Ok(n as usize)
    }

    /// Sends one packet at once ([`Fabric::queue`] then [`Fabric::flush`]).
    pub fn send(&mut self, dgid: &Gid, packet: Vec<u8>) -> Result<(), FabricError> {
        self.queue(dgid, packet)?;
        self.flush()
    }

    /// Releases a packet held back by reordering injection (call when idle).
    pub fn flush_faults(&mut self) -> Result<(), FabricError> {
        if let Some(f) = &mut self.faults {
            f.flush(&mut self.tx_queue);
        }
        self.flush()
    }

    /// Takes up to [`BATCH`] waiting datagrams with one `recvmmsg` (never waits). Returns how
    /// many; with none waiting, a packet held back by reorder injection is released.
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.count = 0;
        // SAFETY (zeroed): iovec and mmsghdr are plain C data; all zeroes is valid.
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for ((m, iov), slot) in msgs
            .iter_mut()
            .zip(iovs.iter_mut())
            .zip(batch.slots.chunks_exact_mut(RX_SLOT_BYTES))
        {
            *iov = libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: each message's single iovec points into `batch.slots`, alive and exclusively
        // borrowed across the call; no timeout pointer.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                self.release_held_back();
                return Ok(0);
            }
            return Err(e);
        }
        self.stats.recv_calls += 1;
        for (len, m) in batch.lens.iter_mut().zip(&msgs[..n as usize]) {
            *len = if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                // Not one of our packets; an empty one is dropped by the transport's parser.
                self.stats.truncated += 1;
                0
            } else {
                m.msg_len as usize
            };
        }
        batch.count = n as usize;
        self.stats.received += n as u64;
        Ok(n as usize)
    }

    /// Nothing to receive: a packet held back by reorder injection must not wait for the next
    /// send, which may never come.
    fn release_held_back(&mut self) {
        if self.faults.is_some() {
            self.flush_faults()
                .unwrap_or_else(|e| log::debug!("held-back packet lost: {e}"));
        }
    }

    /// Receives one datagram into `buf` (size it [`MAX_DATAGRAM`]); waits up to `timeout`
    /// (`None`: do not wait). Returns the packet length, or `None` if nothing arrived (then a
    /// packet held back by reorder injection is released).
    pub fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> std::io::Result<Option<usize>> {
        if let Some(t) = timeout {
            self.wait_readable(t)?;
        }
        match self.socket.recv_from(buf) {
            Ok((n, _)) => {
                self.stats.received += 1;
                Ok(Some(n))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                self.release_held_back();
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until a datagram is waiting or `timeout` passed.
    fn wait_readable(&self, timeout: Duration) -> std::io::Result<()> {
        let mut fd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().clamp(1, libc::c_int::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut fd, 1, ms) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Flushes the pcap capture to disk.
    pub fn flush_capture(&mut self) -> Result<(), FabricError> {
        match &mut self.pcap {
            Some(p) => p.flush().map_err(FabricError::Capture),
            None => Ok(()),
        }
    }

    pub fn directory(&self) -> &Path {
        &self.directory
    }
}

impl AsRawFd for Fabric {
    /// The fabric socket: readable when a packet is waiting (for the device's poll loop).
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = self.flush_capture();
        for gid in self.local_gids.clone() {
            self.remove_gid(&gid);
        }
    }
}

/// Writes raw bytes to a capture (used by tests and tools that capture without sockets).
pub fn write_capture(path: &Path, packets: &[(u64, Vec<u8>)]) -> std::io::Result<()> {
    let mut w = PcapWriter::new(BufWriter::new(File::create(path)?))?;
    for (t, p) in packets {
        w.write_packet(*t, p)?;
    }
    w.flush()
}
