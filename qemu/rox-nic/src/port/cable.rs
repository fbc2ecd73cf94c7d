//! The rox-to-rox cable: two rox-nic processes on one host joined point to point through shared
//! memory, at memory speed instead of a system call per frame.
//!
//! The listening end (`cable:listen=PATH`) serves a unix stream socket; when the other end
//! (`cable:connect=PATH`) connects, the listener makes a sealed memfd holding two rings of
//! frame slots (one per direction) and two eventfd doorbells (one per end), and passes all
//! three with SCM_RIGHTS in one hello message. Both map the memfd. A frame is a complete
//! Ethernet frame (RoCEv2 with ICRC, or a netdev frame), as on every other wire, so capture,
//! fault injection and the engine do not know which wire they are on.
//!
//! Each ring is a control block, 1024 descriptors (a buffer's number and a frame's length) and
//! 1024 buffers of 16 KiB. On the plain path a frame is copied once, on receipt: the engine
//! builds a packet straight in a free transmit buffer the cable lends it (`roce::wire::pool`,
//! behind room for the Ethernet header the port writes when it routes the packet), and the
//! cable publishes that buffer where it lies. The receiving end copies each frame out of its
//! buffer once (volatile loads, `sys::shm::PeerBytes`) into memory of its own, from which the
//! port checks the ICRC and places the payload: the peer can still write a buffer it
//! published, and what is checked must be what is placed. Where the CPU folds wide, a long
//! RoCEv2 frame's ICRC is folded as it is copied, from the registers the copy stored
//! ([`copy_received`]), and the transport does not hash that frame again. It frees the slots when the port is
//! done with the batch. Frames the port copies (netdev frames, a fault injector's, a packet
//! built while no buffer was to spare) take a free buffer at send time. A buffer goes back on the
//! free list when the peer's tail passes its descriptor; the buffers a ring position holds are
//! this end's own record, so a descriptor the peer rewrites cannot free a buffer twice.
//!
//! Each ring has a producer count (`head`), a consumer count (`tail`) and two wake flags. A
//! consumer that finds its ring empty raises `consumer_waiting` and looks once more; a producer
//! that publishes frames takes the flag down and rings the consumer's doorbell only if it was
//! up. A producer that finds the ring full does the same with `producer_waiting`, which the
//! consumer answers once it frees slots. So a busy cable makes no system call per frame, and an
//! idle one sleeps in poll on its doorbell. The doorbell, the connection (the peer going away)
//! and the listening socket are folded into one epoll fd, the port's poll fd.
//!
//! Everything in the shared memory may be written by the peer at any time: counts, buffer
//! numbers and lengths are checked, and a ring whose counts make no sense cuts the cable (as a
//! peer that went away does); nothing the peer writes can make this end read or write outside
//! the mapping, and the memfd's size is sealed so the mapping cannot shrink under it. A peer
//! that writes a buffer it has published can only make that frame's bytes wrong, as a wire
//! corrupts a frame (the ICRC check of the copy catches it or not, as on any wire).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::frame::{received_icrc_front, EthHeader, ETH_HEADER_LEN};
use super::socket::{remove_stale_socket, RECONNECT_INTERVAL};
use super::{FrameRef, RxBatch, Sent, BATCH};
use crate::roce::wire::pool::{self, Lease, Lender, Packet};
use crate::roce::wire::IcrcFold;
use crate::sys;
use crate::sys::epoll::Epoll;
use crate::sys::shm::{Copied, PeerBytes, Region, SharedMapping};
use hello::{serve_hello, take_hello};
use ring::{region_len, Ring};

/// The hello message's and the memfd header's first word ("RXCB").
const MAGIC: u32 = 0x5258_4342;
/// 2: descriptors (buffer, length) in front of the buffers, so a frame is built in any free
/// buffer and published in place.
const VERSION: u32 = 2;
/// Frame buffers (and descriptors) per ring (a power of two) and bytes per buffer. More
/// buffers than the transmit scheduler lets the port queue beside a full ring (its 256 and
/// 1024 - [`COPY_RESERVE`] lendable ones), so the engine rarely finds none to build in (with
/// 512, a quarter of a 1 MiB WRITE's frames were built on the heap and copied in). The
/// memfd's pages are allocated when first touched, and the free list hands out the buffer
/// freed last.
pub const RING_SLOTS: u32 = 1024;
const _: () = assert!(RING_SLOTS.is_power_of_two());
pub const SLOT_LEN: u32 = 16 << 10;
/// The longest frame a cable carries.
pub const CABLE_MAX_FRAME: usize = SLOT_LEN as usize;
/// A descriptor: the buffer's index and the frame's length (u32 each, native endian).
const DESC_LEN: usize = 8;
/// Bytes of the memfd's header and of each ring's control block (its words on separate cache
/// lines, so the two ends do not write one line).
const PAGE: usize = 4096;
const HEAD: usize = 0;
const TAIL: usize = 64;
const CONSUMER_WAITING: usize = 128;
const PRODUCER_WAITING: usize = 192;
/// The hello: magic, version, slots, slot length.
const HELLO_LEN: usize = 16;
/// How often an empty ring's end asks its epoll set what else happened (peer gone, a new peer
/// knocking); between times, an empty ring costs no system call.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_millis(1);
/// Transmit buffers never lent to the engine: frames the port copies in (netdev frames, a
/// fault injector's, packets built while no buffer was to spare) queue in front of lent
/// ones, and must find a buffer that the peer's reading frees, never one a lent packet
/// behind them holds.
const COPY_RESERVE: usize = 64;

/// This end's transmit buffers, lent to the engine to build packets in ([`pool`]).
struct TxSlots {
    /// Buffers neither lent, nor published and not yet read.
    free: Mutex<Vec<Region>>,
}

impl TxSlots {
    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Region>> {
        // A panic elsewhere cannot leave a list of numbers half changed.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Lender for TxSlots {
    fn lend(self: Arc<Self>) -> Option<Lease> {
        let buffer = {
            let mut free = self.free();
            if free.len() <= COPY_RESERVE {
                return None;
            }
            free.pop()?
        };
        Some(Lease::new(buffer, self))
    }

    fn give_back(&self, buffer: Region) {
        self.free().push(buffer);
    }
}

/// A frame for [`Wire::produce`]: bytes to copy into a buffer, or a packet that may have
/// been built in one.
enum Out<'a> {
    Bytes(FrameRef<'a>),
    Packet(&'a EthHeader, &'a mut Packet),
}

/// What [`Wire::produce`] did with a frame.
enum Produced {
    Published,
    /// Longer than a buffer: lost, as a wire loses a frame over its MTU.
    TooLong,
    /// No free buffer now.
    NoRoom,
}

/// A live connection: the mapping, this end's rings and the doorbells.
struct Wire {
    conn: UnixStream,
    map: Arc<SharedMapping>,
    rx: Ring,
    tx: Ring,
    /// This end's doorbell (in the epoll set) and the peer's.
    doorbell: File,
    peer_doorbell: File,
    slots: Arc<TxSlots>,
    /// `slots`, as the engine's packets name their lender.
    lender: Arc<dyn Lender>,
    /// The transmit ring's count as this end knows it (the shared word is only its copy for
    /// the peer, who could scribble over it), and the count up to which the buffers the peer
    /// read went back to the free list.
    tx_head: u32,
    tx_reclaimed: u32,
    /// The buffer published at each transmit ring position, until the peer has read it
    /// (this end's record: the peer may scribble over the descriptors).
    published: Vec<Option<Region>>,
    /// The receive ring's count, likewise.
    rx_tail: u32,
    /// The receive ring's buffers, copied from where the peer's descriptors point.
    rx_buffers: Vec<PeerBytes>,
    /// The copies of the received frames, [`BATCH`] slots of a buffer's length (this
    /// process's own memory, which the peer cannot change).
    rx_copies: Vec<u8>,
    /// Received frames lent to the port (their lengths, in `rx_copies`' slots, and the ICRC
    /// runs of RoCEv2 ones folded as they were copied); their ring slots are freed at the next
    /// receive or [`Wire::release_lent`].
    lent: Vec<(usize, Option<IcrcFold>)>,
}

impl Wire {
    fn new(
        conn: UnixStream,
        map: SharedMapping,
        bells: (File, File),
        listener: bool,
    ) -> std::io::Result<Wire> {
        let (slots, slot_len) = (RING_SLOTS, SLOT_LEN);
        let (tx, rx) = if listener { (0, 1) } else { (1, 0) };
        let map = Arc::new(map);
        let (tx, rx) = (
            Ring::new(tx, slots, slot_len),
            Ring::new(rx, slots, slot_len),
        );
        let outside = || std::io::Error::other("cable buffers outside the mapping");
        let mut free = map
            .carve(tx.buffer(0), slot_len as usize, slots)
            .ok_or_else(outside)?;
        free.reverse();
        let rx_buffers =
            PeerBytes::carve(&map, rx.buffer(0), slot_len as usize, slots).ok_or_else(outside)?;
        let tx_slots = Arc::new(TxSlots {
            free: Mutex::new(free),
        });
        Ok(Wire {
            conn,
            map,
            rx,
            tx,
            doorbell: bells.0,
            peer_doorbell: bells.1,
            lender: tx_slots.clone(),
            slots: tx_slots,
            tx_head: 0,
            tx_reclaimed: 0,
            published: (0..slots).map(|_| None).collect(),
            rx_tail: 0,
            rx_buffers,
            rx_copies: vec![0; BATCH * slot_len as usize],
            lent: Vec::with_capacity(BATCH),
        })
    }

    fn ring_peer(&self) {
        // A full counter (EAGAIN) still leaves the peer's fd readable, which is all it needs.
        let _ = (&self.peer_doorbell).write(&1u64.to_ne_bytes());
    }

    fn drain_doorbell(&self) {
        let mut buf = [0u8; 8];
        let _ = (&self.doorbell).read(&mut buf);
    }

    /// Takes `flag` of `ring` down and rings the peer if it was up (after a fence, so either
    /// the peer sees what this end published or this end sees its flag).
    fn wake_if_waiting(&self, ring: &Ring, flag: usize) -> bool {
        fence(Ordering::SeqCst);
        let was = self
            .map
            .atomic_u32(ring.base + flag)
            .swap(0, Ordering::SeqCst);
        if was != 0 {
            self.ring_peer();
        }
        was != 0
    }

    /// The peer's count of `ring` (the transmit ring's tail, the receive ring's head), if it
    /// is no further from this end's own count than `ring` has slots.
    fn peer_count(&self, ring: &Ring, word: usize, own: u32, ahead: bool) -> Option<u32> {
        let peer = self
            .map
            .atomic_u32(ring.base + word)
            .load(Ordering::Acquire);
        let gap = if ahead {
            peer.wrapping_sub(own)
        } else {
            own.wrapping_sub(peer)
        };
        (gap <= ring.slots).then_some(peer)
    }

    /// Puts the buffers of the frames the peer has read back on the free list `free` (the
    /// locked list of `slots`). None if the peer's tail makes no sense.
    fn reclaim(&mut self, free: &mut Vec<Region>) -> Option<()> {
        let tail = self.peer_count(&self.tx, TAIL, self.tx_head, false)?;
        if tail.wrapping_sub(self.tx_reclaimed) > self.tx_head.wrapping_sub(self.tx_reclaimed) {
            return None;
        }
        while self.tx_reclaimed != tail {
            free.extend(self.published[self.tx.slot(self.tx_reclaimed)].take());
            self.tx_reclaimed = self.tx_reclaimed.wrapping_add(1);
        }
        Some(())
    }

    /// Whether every transmit ring position holds a frame the peer has not read yet.
    fn ring_full(&self) -> bool {
        self.tx_head.wrapping_sub(self.tx_reclaimed) >= self.tx.slots
    }

    /// Queues `buffer`, holding a frame of `len` bytes, at the next ring position (the peer
    /// sees it at [`Wire::publish`]). A full ring gives it back: with as many buffers as
    /// positions that cannot happen, but a position still holding a buffer must never lose it.
    fn push(&mut self, buffer: Region, len: usize) -> Result<(), Region> {
        if self.ring_full() {
            return Err(buffer);
        }
        let at = self.tx.descriptor(self.tx_head);
        let mut desc = [0u8; DESC_LEN];
        desc[..4].copy_from_slice(&buffer.index().to_ne_bytes());
        desc[4..].copy_from_slice(&(len as u32).to_ne_bytes());
        self.map.write(at, &desc);
        self.published[self.tx.slot(self.tx_head)] = Some(buffer);
        self.tx_head = self.tx_head.wrapping_add(1);
        Ok(())
    }

    /// [`Wire::push`], a refused buffer going back to the free list `free`.
    fn push_or_free(&mut self, buffer: Region, len: usize, free: &mut Vec<Region>) -> Produced {
        match self.push(buffer, len) {
            Ok(()) => Produced::Published,
            Err(buffer) => {
                free.push(buffer);
                Produced::NoRoom
            }
        }
    }

    /// Puts one frame in the ring: a packet built in one of this wire's buffers as it is,
    /// anything else copied into a buffer from `free` (the locked free list of `slots`, taken
    /// once per batch of frames, not per frame: nothing here may lock it again, e.g. drop a
    /// lease of this wire's).
    fn produce(&mut self, frame: &mut Out, free: &mut Vec<Region>) -> Produced {
        let len = match frame {
            Out::Bytes(f) => f.head.len() + f.body.len(),
            Out::Packet(_, p) => ETH_HEADER_LEN + p.len(),
        };
        if len > CABLE_MAX_FRAME {
            return Produced::TooLong;
        }
        if self.ring_full() {
            // Checked before a packet is taken apart, so a full ring keeps it for later.
            return Produced::NoRoom;
        }
        if let Out::Packet(_, p) = frame {
            if p.lease().is_some_and(|l| l.is_from(&self.lender)) {
                let packet = std::mem::replace(*p, Packet::from(Vec::new()));
                if let Ok((lease, frame_len)) = packet.into_lease() {
                    return self.push_or_free(lease.publish(), frame_len, free);
                }
            }
        }
        let Some(mut buffer) = free.pop() else {
            return Produced::NoRoom;
        };
        let bytes = &mut buffer.as_mut_slice()[..len];
        match frame {
            Out::Bytes(f) => {
                let (head, body) = bytes.split_at_mut(f.head.len());
                head.copy_from_slice(f.head);
                body.copy_from_slice(f.body);
            }
            Out::Packet(h, p) => {
                // The header's length is known here: stores, not a call to memcpy.
                let (head, body) = bytes.split_at_mut(ETH_HEADER_LEN);
                head.copy_from_slice(&h[..]);
                body.copy_from_slice(p);
            }
        }
        self.push_or_free(buffer, len, free)
    }

    /// Shows the peer the frames pushed since the last time, and wakes it if it sleeps.
    fn publish(&self) {
        let head = self.map.atomic_u32(self.tx.base + HEAD);
        if head.load(Ordering::Relaxed) != self.tx_head {
            head.store(self.tx_head, Ordering::Release);
            self.wake_if_waiting(&self.tx, CONSUMER_WAITING);
        }
    }

    /// Frees the slots of the frames lent to the port, and wakes the peer if it waits for
    /// room.
    fn release_lent(&mut self) {
        if self.lent.is_empty() {
            return;
        }
        self.rx_tail = self.rx_tail.wrapping_add(self.lent.len() as u32);
        self.lent.clear();
        self.map
            .atomic_u32(self.rx.base + TAIL)
            .store(self.rx_tail, Ordering::Release);
        self.wake_if_waiting(&self.rx, PRODUCER_WAITING);
    }

    /// Lends up to [`BATCH`] waiting frames ([`Wire::lent_slots`]), after freeing those lent
    /// before. None if the ring is broken.
    fn consume(&mut self) -> Option<usize> {
        self.release_lent();
        let head = self.peer_count(&self.rx, HEAD, self.rx_tail, true)?;
        let n = (head.wrapping_sub(self.rx_tail) as usize).min(BATCH);
        for i in 0..n {
            let mut desc = [0u8; DESC_LEN];
            self.map.read(
                self.rx.descriptor(self.rx_tail.wrapping_add(i as u32)),
                &mut desc,
            );
            let id = u32::from_ne_bytes(desc[..4].try_into().expect("4 bytes"));
            let len = u32::from_ne_bytes(desc[4..].try_into().expect("4 bytes")) as usize;
            if id >= self.rx.slots || len > self.rx.slot_len as usize {
                self.lent.clear();
                return None;
            }
            let copy = &mut self.rx_copies[i * self.rx.slot_len as usize..][..len];
            let Some(fold) = copy_received(&self.rx_buffers[id as usize], copy) else {
                self.lent.clear();
                return None;
            };
            self.lent.push((len, fold));
        }
        Some(n)
    }

    /// The frames [`Wire::consume`] lent, in arrival order: their copies' slots beside their
    /// lengths and folds ([`lent_frame`]).
    fn lent_slots(&self) -> LentSlots<'_> {
        self.rx_copies
            .chunks_exact(self.rx.slot_len as usize)
            .zip(&self.lent)
    }

    /// Raises this end's `flag` on `ring` and looks again whether `ready` holds (a peer that
    /// published before seeing the flag is caught here). True if `ready` now holds.
    fn arm(&self, ring: &Ring, flag: usize, ready: impl Fn(&Wire) -> bool) -> bool {
        self.map
            .atomic_u32(ring.base + flag)
            .store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        ready(self)
    }

    /// Whether the peer's receive ring shows frames (or makes no sense, which the next look
    /// finds).
    fn rx_ready(&self) -> bool {
        self.peer_count(&self.rx, HEAD, self.rx_tail, true)
            .is_none_or(|head| head != self.rx_tail)
    }

    /// Whether the peer read frames since this end last reclaimed buffers.
    fn tx_ready(&self) -> bool {
        self.peer_count(&self.tx, TAIL, self.tx_head, false)
            .is_none_or(|tail| tail != self.tx_reclaimed)
    }
}

/// Lent frames' copies' slots beside their lengths and folds ([`Cable::lent_slots`]).
pub type LentSlots<'a> = std::iter::Zip<
    std::slice::ChunksExact<'a, u8>,
    std::slice::Iter<'a, (usize, Option<IcrcFold>)>,
>;

/// A lent frame (its copy, cut to its length) and its fold, from its [`LentSlots`] item.
pub fn lent_frame<'a>(
    (copy, &(len, fold)): (&'a [u8], &(usize, Option<IcrcFold>)),
) -> (&'a [u8], Option<IcrcFold>) {
    (&copy[..len], fold)
}

/// Copies a received frame out of its buffer into `copy` (as long as the frame), folding
/// the ICRC run of a RoCEv2 frame as it goes ([`PeerBytes::copy_folding`]): the fold, if
/// the frame's headers asked for one. None if the frame is longer than the buffer.
pub(crate) fn copy_received(buffer: &PeerBytes, copy: &mut [u8]) -> Option<Option<IcrcFold>> {
    let mut ip_len = 0;
    let copied = buffer.copy_folding(copy, |first| {
        let (len, front) = received_icrc_front(first)?;
        ip_len = len;
        Some(front)
    });
    match copied {
        Copied::Refused => None,
        Copied::Plain => Some(None),
        Copied::Folded(state) => Some(Some(IcrcFold { ip_len, state })),
    }
}

enum Role {
    Listen(UnixListener),
    Connect(PathBuf),
}

/// One end of a cable (`cable:listen=PATH` or `cable:connect=PATH`).
pub struct Cable {
    role: Role,
    wire: Option<Wire>,
    epoll: Epoll,
    next_connect: Instant,
    next_housekeeping: Instant,
    /// This end raised `producer_waiting` (a full ring) and the peer may ring for room.
    tx_armed: bool,
    /// A connection (connecting end) whose hello has not arrived yet; in the epoll set.
    pending: Option<UnixStream>,
}

impl Cable {
    pub fn listen(path: &Path) -> std::io::Result<Cable> {
        remove_stale_socket(path);
        let listener = UnixListener::bind(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("bind {}: {e}", path.display())))?;
        listener.set_nonblocking(true)?;
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd())?;
        Ok(Cable::new(Role::Listen(listener), epoll))
    }

    pub fn connect(path: &Path) -> std::io::Result<Cable> {
        let mut c = Cable::new(Role::Connect(path.to_path_buf()), Epoll::new()?);
        c.try_connect();
        Ok(c)
    }

    fn new(role: Role, epoll: Epoll) -> Cable {
        Cable {
            role,
            wire: None,
            epoll,
            next_connect: Instant::now(),
            next_housekeeping: Instant::now(),
            tx_armed: false,
            pending: None,
        }
    }

    pub fn is_connected(&self) -> bool {
        self.wire.is_some()
    }

    /// The fd to poll: readable when the doorbell rings, the peer goes away or (listening,
    /// unconnected) a peer knocks.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    pub fn retry_in(&self) -> Option<Duration> {
        match self.role {
            Role::Connect(_) if self.wire.is_none() && self.pending.is_none() => {
                Some(self.next_connect.saturating_duration_since(Instant::now()))
            }
            _ => None,
        }
    }

    fn try_connect(&mut self) -> bool {
        if self.wire.is_some() {
            return true;
        }
        let result = match &self.role {
            Role::Listen(l) => match l.accept() {
                Ok((conn, _)) => serve_hello(conn).map(Some),
                Err(_) => Ok(None),
            },
            Role::Connect(path) => match self.pending.take() {
                // Connected earlier: the hello is read once it is there, never waited for (the
                // listener answers when its data path next runs).
                Some(conn) => match sys::fdpass::peek(&conn) {
                    Some(true) => {
                        self.epoll.remove(conn.as_raw_fd());
                        take_hello(conn).map(Some)
                    }
                    Some(false) => {
                        self.pending = Some(conn);
                        Ok(None)
                    }
                    None => {
                        self.epoll.remove(conn.as_raw_fd());
                        Ok(None)
                    }
                },
                None if Instant::now() < self.next_connect => Ok(None),
                None => {
                    self.next_connect = Instant::now() + RECONNECT_INTERVAL;
                    if let Ok(conn) = UnixStream::connect(path) {
                        if conn.set_nonblocking(true).is_ok()
                            && self.epoll.add(conn.as_raw_fd()).is_ok()
                        {
                            self.pending = Some(conn);
                        }
                    }
                    Ok(None)
                }
            },
        };
        match result {
            Ok(Some(wire)) => self.attach(wire),
            Ok(None) => {}
            Err(e) => log::warn!("rox-nic: cable handshake failed: {e}"),
        }
        self.wire.is_some()
    }

    fn attach(&mut self, wire: Wire) {
        let watched = [wire.doorbell.as_raw_fd(), wire.conn.as_raw_fd()];
        if let Err(e) = watched.iter().try_for_each(|&fd| self.epoll.add(fd)) {
            log::warn!("rox-nic: cable: epoll: {e}");
            return;
        }
        if let Role::Listen(l) = &self.role {
            // One peer at a time: the next one waits in the backlog until this one goes.
            self.epoll.remove(l.as_raw_fd());
        }
        log::info!("rox-nic: cable peer connected");
        // Packets this thread builds from now on may be built in this wire's buffers.
        pool::lend_from(Some(wire.lender.clone()));
        self.wire = Some(wire);
    }

    fn disconnect(&mut self, why: &str) {
        if let Some(w) = self.wire.take() {
            log::info!("rox-nic: cable cut: {why}");
            pool::stop_lending(&w.lender);
            self.epoll.remove(w.doorbell.as_raw_fd());
            self.epoll.remove(w.conn.as_raw_fd());
            if let Role::Listen(l) = &self.role {
                if let Err(e) = self.epoll.add(l.as_raw_fd()) {
                    log::warn!("rox-nic: cable: epoll: {e}");
                }
            }
        }
    }

    /// What woke the poll fd besides frames: the peer gone, a new peer, the doorbell (drained:
    /// it rang for what this end is about to look at). At most every [`HOUSEKEEPING_INTERVAL`]
    /// unless `now`.
    fn housekeeping(&mut self, now: bool) {
        let t = Instant::now();
        if !now && t < self.next_housekeeping {
            return;
        }
        self.next_housekeeping = t + HOUSEKEEPING_INTERVAL;
        let mut ready = [0 as RawFd; 4];
        let n = self.epoll.ready(&mut ready);
        let Some(w) = &self.wire else {
            if n > 0 || matches!(self.role, Role::Connect(_)) {
                self.try_connect();
            }
            return;
        };
        let (doorbell, conn) = (w.doorbell.as_raw_fd(), w.conn.as_raw_fd());
        if ready[..n].contains(&doorbell) {
            w.drain_doorbell();
        }
        if ready[..n].contains(&conn) && sys::fdpass::peer_closed(&w.conn) {
            self.disconnect("the peer went away");
        }
    }

    /// Up to [`BATCH`] frames copied into `batch`; never waits. An empty ring is armed for
    /// the doorbell. (The port, shaped or not, takes [`Cable::recv_lent`]'s copies instead:
    /// this second copy is for callers of [`super::Link::recv`] that want a batch.)
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        let n = self.recv_lent()?;
        for (f, _) in self.lent_frames() {
            batch.push_frame(f, false);
        }
        self.release_lent();
        Ok(n)
    }

    /// Up to [`BATCH`] frames lent to the port as copies of its own ([`Cable::lent_frames`]),
    /// after freeing those lent before; never waits. An empty ring is armed for the doorbell.
    pub fn recv_lent(&mut self) -> std::io::Result<usize> {
        if self.wire.is_none() {
            self.housekeeping(true);
        }
        let Some(w) = &mut self.wire else {
            return Ok(0);
        };
        match w.consume() {
            None => self.disconnect("the peer broke the receive ring"),
            Some(0) => {
                // A wake flag of this end's that the peer took down means the doorbell rang:
                // drain it now, before arming again, or poll would keep returning at once.
                let flag = |ring: &Ring, f| w.map.atomic_u32(ring.base + f).load(Ordering::SeqCst);
                let rung = flag(&w.rx, CONSUMER_WAITING) == 0
                    || (self.tx_armed && flag(&w.tx, PRODUCER_WAITING) == 0);
                if rung {
                    self.tx_armed = false;
                }
                self.housekeeping(rung);
                if let Some(w) = &mut self.wire {
                    if w.arm(&w.rx, CONSUMER_WAITING, Wire::rx_ready) {
                        return match w.consume() {
                            Some(n) => Ok(n),
                            None => {
                                self.disconnect("the peer broke the receive ring");
                                Ok(0)
                            }
                        };
                    }
                }
            }
            Some(n) => return Ok(n),
        }
        Ok(0)
    }

    /// The frames the last [`Cable::recv_lent`] lent, in arrival order, each with the ICRC
    /// run folded as it was copied (RoCEv2 frames).
    pub fn lent_frames(&self) -> impl Iterator<Item = (&[u8], Option<IcrcFold>)> {
        self.lent_slots().map(lent_frame)
    }

    /// [`Cable::lent_frames`] before each is cut to its length: a plain walk of the lent list
    /// (a `flat_map` over the wire cost ~50 instructions a frame, not inlined).
    pub fn lent_slots(&self) -> LentSlots<'_> {
        match &self.wire {
            Some(w) => w.lent_slots(),
            None => [].chunks_exact(1).zip(&[]),
        }
    }

    /// Frees the slots of the frames lent (the peer may fill them again).
    pub fn release_lent(&mut self) {
        if let Some(w) = &mut self.wire {
            w.release_lent();
        }
    }

    /// Copies frames into the ring until it is full; the rest stays with the caller (the
    /// peer rings this end's doorbell once it frees slots).
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        self.send_each(frames.iter().map(|f| Out::Bytes(*f)), frames.len())
    }

    /// [`Cable::send`] for the port's queue: a packet built in one of this cable's buffers
    /// is published where it lies (its Ethernet header already in front), the rest copied.
    pub fn send_packets(&mut self, frames: &mut [(EthHeader, Packet)]) -> Sent {
        let n = frames.len();
        self.send_each(frames.iter_mut().map(|(h, p)| Out::Packet(h, p)), n)
    }

    fn send_each<'a>(&mut self, mut frames: impl Iterator<Item = Out<'a>>, total: usize) -> Sent {
        if !self.try_connect() {
            return Sent::all_lost(total);
        }
        let mut sent = Sent::default();
        let mut next = frames.next();
        let broken = loop {
            let Some(w) = &mut self.wire else { break false };
            // The free list is locked once for the whole batch.
            let slots = w.slots.clone();
            let mut free = slots.free();
            if w.reclaim(&mut free).is_none() {
                break true;
            }
            while let Some(frame) = &mut next {
                match w.produce(frame, &mut free) {
                    Produced::Published => sent.taken += 1,
                    Produced::TooLong => {
                        sent.taken += 1;
                        sent.dropped += 1;
                    }
                    Produced::NoRoom => break,
                }
                next = frames.next();
            }
            drop(free);
            w.publish();
            if next.is_none() {
                break false;
            }
            let room = w.arm(&w.tx, PRODUCER_WAITING, Wire::tx_ready);
            self.tx_armed = true;
            if !room {
                break false;
            }
        };
        if broken {
            self.disconnect("the peer broke the send ring");
            let rest = total - sent.taken;
            sent.taken += rest;
            sent.dropped += rest;
        }
        sent
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        if let Some(w) = &self.wire {
            pool::stop_lending(&w.lender);
        }
    }
}

mod hello;
mod ring;

#[cfg(test)]
pub(super) mod tests;
