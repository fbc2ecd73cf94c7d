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
//! Each ring has a producer count (`head`), a consumer count (`tail`) and two wake flags. A
//! consumer that finds its ring empty raises `consumer_waiting` and looks once more; a producer
//! that publishes frames takes the flag down and rings the consumer's doorbell only if it was
//! up. A producer that finds the ring full does the same with `producer_waiting`, which the
//! consumer answers once it frees slots. So a busy cable makes no system call per frame, and an
//! idle one sleeps in poll on its doorbell. The doorbell, the connection (the peer going away)
//! and the listening socket are folded into one epoll fd, the port's poll fd.
//!
//! Everything in the shared memory may be written by the peer at any time: counts and lengths
//! are checked, and a ring whose counts make no sense cuts the cable (as a peer that went away
//! does); nothing the peer writes can make this end read or write outside the mapping, and the
//! memfd's size is sealed so the mapping cannot shrink under it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use super::socket::{remove_stale_socket, RECONNECT_INTERVAL};
use super::{FrameRef, RxBatch, Sent, BATCH};
use crate::sys;
use crate::sys::shm::{Epoll, SharedMapping};

/// The hello message's and the memfd header's first word ("RXCB").
const MAGIC: u32 = 0x5258_4342;
const VERSION: u32 = 1;
/// Frame slots per ring (a power of two) and bytes per slot (a length word and the frame).
pub const RING_SLOTS: u32 = 512;
pub const SLOT_LEN: u32 = 16 << 10;
/// The longest frame a cable carries.
pub const CABLE_MAX_FRAME: usize = SLOT_LEN as usize - LEN_WORD;
const LEN_WORD: usize = 4;
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

/// Where ring `r` (0: listener to connector, 1: back) starts in the memfd.
fn ring_base(r: usize, slots: u32, slot_len: u32) -> usize {
    PAGE + r * (PAGE + slots as usize * slot_len as usize)
}

/// The memfd's size for `slots` slots of `slot_len` bytes per ring.
fn region_len(slots: u32, slot_len: u32) -> usize {
    ring_base(2, slots, slot_len)
}

/// One direction of the cable, as one end sees it.
struct Ring {
    base: usize,
    slots: u32,
    slot_len: u32,
}

impl Ring {
    fn slot(&self, count: u32) -> usize {
        self.base + PAGE + (count % self.slots) as usize * self.slot_len as usize
    }

    /// Frames waiting, or None if the counts make no sense (a broken or hostile peer).
    fn used(&self, map: &SharedMapping) -> Option<u32> {
        let head = map.atomic_u32(self.base + HEAD).load(Ordering::Acquire);
        let tail = map.atomic_u32(self.base + TAIL).load(Ordering::Acquire);
        let used = head.wrapping_sub(tail);
        (used <= self.slots).then_some(used)
    }
}

/// A live connection: the mapping, this end's rings and the doorbells.
struct Wire {
    conn: UnixStream,
    map: SharedMapping,
    rx: Ring,
    tx: Ring,
    /// This end's doorbell (in the epoll set) and the peer's.
    doorbell: File,
    peer_doorbell: File,
}

impl Wire {
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

    /// Copies frames from the front of `frames` into free slots and publishes them.
    /// Returns (frames taken, of those dropped as too long), or None if the ring is broken.
    fn produce(&self, frames: &[FrameRef]) -> Option<(usize, usize)> {
        let free = self.tx.slots - self.tx.used(&self.map)?;
        let head_word = self.map.atomic_u32(self.tx.base + HEAD);
        let mut head = head_word.load(Ordering::Relaxed);
        let (mut taken, mut dropped) = (0, 0);
        let mut filled = 0;
        for f in frames {
            let len = f.head.len() + f.body.len();
            if len > CABLE_MAX_FRAME {
                // Longer than a slot: lost, as a wire loses a frame over its MTU.
                taken += 1;
                dropped += 1;
                continue;
            }
            if filled == free {
                break;
            }
            let at = self.tx.slot(head);
            self.map.write(at, &(len as u32).to_ne_bytes());
            self.map.write(at + LEN_WORD, f.head);
            self.map.write(at + LEN_WORD + f.head.len(), f.body);
            head = head.wrapping_add(1);
            filled += 1;
            taken += 1;
        }
        if filled > 0 {
            head_word.store(head, Ordering::Release);
            self.wake_if_waiting(&self.tx, CONSUMER_WAITING);
        }
        Some((taken, dropped))
    }

    /// Copies up to [`BATCH`] waiting frames into `batch` and frees their slots.
    /// None if the ring is broken.
    fn consume(&self, batch: &mut RxBatch) -> Option<usize> {
        let used = self.rx.used(&self.map)?;
        let tail_word = self.map.atomic_u32(self.rx.base + TAIL);
        let mut tail = tail_word.load(Ordering::Relaxed);
        let n = (used as usize).min(BATCH);
        for _ in 0..n {
            let at = self.rx.slot(tail);
            let mut len = [0u8; LEN_WORD];
            self.map.read(at, &mut len);
            let len = u32::from_ne_bytes(len) as usize;
            if len > CABLE_MAX_FRAME {
                return None;
            }
            let slot = batch.next_slot();
            let copy = len.min(slot.len());
            self.map.read(at + LEN_WORD, &mut slot[..copy]);
            // A frame longer than a batch slot shows as longer than any valid frame, and the
            // classifier drops it as oversize.
            batch.push_len(len);
            tail = tail.wrapping_add(1);
        }
        if n > 0 {
            tail_word.store(tail, Ordering::Release);
            self.wake_if_waiting(&self.rx, PRODUCER_WAITING);
        }
        Some(n)
    }

    /// Raises this end's `flag` on `ring` and looks again whether `ready` holds (a peer that
    /// published before seeing the flag is caught here). True if `ready` now holds.
    fn arm(&self, ring: &Ring, flag: usize, ready: impl Fn(u32) -> bool) -> bool {
        self.map
            .atomic_u32(ring.base + flag)
            .store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        ring.used(&self.map).is_none_or(ready)
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
                Some(conn) => match sys::shm::peek(&conn) {
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
        self.wire = Some(wire);
    }

    fn disconnect(&mut self, why: &str) {
        if let Some(w) = self.wire.take() {
            log::info!("rox-nic: cable cut: {why}");
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
        if ready[..n].contains(&conn) && sys::shm::peer_closed(&w.conn) {
            self.disconnect("the peer went away");
        }
    }

    /// Up to [`BATCH`] frames; never waits. An empty ring is armed for the doorbell.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        if self.wire.is_none() {
            self.housekeeping(true);
        }
        let Some(w) = &self.wire else { return Ok(0) };
        match w.consume(batch) {
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
                if let Some(w) = &self.wire {
                    if w.arm(&w.rx, CONSUMER_WAITING, |used| used > 0) {
                        return Ok(w.consume(batch).unwrap_or(0));
                    }
                }
            }
            Some(n) => return Ok(n),
        }
        Ok(0)
    }

    /// Copies frames into the ring until it is full; the rest stays with the caller (the
    /// peer rings this end's doorbell once it frees slots).
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        if !self.try_connect() {
            return Sent::all_lost(frames.len());
        }
        let mut sent = Sent::default();
        while let Some(w) = &self.wire {
            let Some((taken, dropped)) = w.produce(&frames[sent.taken..]) else {
                self.disconnect("the peer broke the send ring");
                let rest = frames.len() - sent.taken;
                sent.taken += rest;
                sent.dropped += rest;
                break;
            };
            sent.taken += taken;
            sent.dropped += dropped;
            if sent.taken == frames.len() {
                break;
            }
            self.tx_armed = true;
            if !w.arm(&w.tx, PRODUCER_WAITING, |used| used < w.tx.slots) {
                break;
            }
        }
        sent
    }
}

/// The listener's side of the handshake: the memfd, the doorbells, the hello.
fn serve_hello(conn: UnixStream) -> std::io::Result<Wire> {
    let (slots, slot_len) = (RING_SLOTS, SLOT_LEN);
    let len = region_len(slots, slot_len);
    let memfd = sys::shm::sealed_memfd(c"rox-cable", len as u64)?;
    let map = SharedMapping::map(&memfd, len)?;
    let hello = hello_bytes(slots, slot_len);
    map.write(0, &hello);
    let (listener_bell, connector_bell) = (sys::fd::eventfd()?, sys::fd::eventfd()?);
    sys::shm::send_with_fds(
        &conn,
        &hello,
        &[
            memfd.as_raw_fd(),
            listener_bell.as_raw_fd(),
            connector_bell.as_raw_fd(),
        ],
    )?;
    conn.set_nonblocking(true)?;
    Ok(Wire {
        conn,
        map,
        tx: Ring {
            base: ring_base(0, slots, slot_len),
            slots,
            slot_len,
        },
        rx: Ring {
            base: ring_base(1, slots, slot_len),
            slots,
            slot_len,
        },
        doorbell: listener_bell,
        peer_doorbell: connector_bell,
    })
}

fn hello_bytes(slots: u32, slot_len: u32) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    for (i, word) in [MAGIC, VERSION, slots, slot_len].into_iter().enumerate() {
        h[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    h
}

/// The connector's side: checks the hello and the memfd, maps it.
fn take_hello(conn: UnixStream) -> std::io::Result<Wire> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    // Called once bytes are waiting; the timeout only bounds a hello cut short.
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut hello = [0u8; HELLO_LEN];
    let (n, fds) = sys::shm::recv_with_fds(&conn, &mut hello)?;
    let word = |i: usize| u32::from_ne_bytes(hello[i * 4..i * 4 + 4].try_into().unwrap());
    if n != HELLO_LEN || word(0) != MAGIC || word(1) != VERSION {
        return Err(bad("not a rox cable hello (magic or version)"));
    }
    let (slots, slot_len) = (word(2), word(3));
    if slots != RING_SLOTS || slot_len != SLOT_LEN {
        return Err(bad("ring geometry differs from this end's"));
    }
    let [memfd, listener_bell, connector_bell]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| bad("the hello does not carry three descriptors"))?;
    let memfd = File::from(memfd);
    let len = region_len(slots, slot_len);
    if !sys::shm::has_size_seals(&memfd) || memfd.metadata()?.len() != len as u64 {
        return Err(bad(
            "the ring memory is not a sealed memfd of the ring size",
        ));
    }
    let (doorbell, peer_doorbell) = (File::from(connector_bell), File::from(listener_bell));
    if ![&doorbell, &peer_doorbell]
        .into_iter()
        .all(sys::fd::is_nonblocking_eventfd)
    {
        return Err(bad("the doorbells are not non-blocking eventfds"));
    }
    let map = SharedMapping::map(&memfd, len)?;
    conn.set_nonblocking(true)?;
    Ok(Wire {
        conn,
        map,
        rx: Ring {
            base: ring_base(0, slots, slot_len),
            slots,
            slot_len,
        },
        tx: Ring {
            base: ring_base(1, slots, slot_len),
            slots,
            slot_len,
        },
        doorbell,
        peer_doorbell,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `c` until `want` frames arrived (or a few seconds passed).
    fn receive(c: &mut Cable, want: usize) -> Vec<Vec<u8>> {
        let mut batch = RxBatch::new(CABLE_MAX_FRAME);
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < want && start.elapsed() < Duration::from_secs(5) {
            c.recv(&mut batch).unwrap();
            got.extend(batch.frames().map(<[u8]>::to_vec));
        }
        got
    }

    /// Drives both ends until they are connected (a few seconds at most).
    fn handshake(a: &mut Cable, b: &mut Cable) {
        let start = Instant::now();
        while !(a.is_connected() && b.is_connected()) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the ends did not meet"
            );
            a.recv(&mut RxBatch::new(64)).unwrap();
            b.recv(&mut RxBatch::new(64)).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A listening and a connected end in `dir`.
    fn pair(dir: &Path) -> (Cable, Cable) {
        let path = dir.join("cable.sock");
        let mut listener = Cable::listen(&path).unwrap();
        let mut connector = Cable::connect(&path).unwrap();
        assert!(
            !connector.is_connected(),
            "the hello comes when the listener runs"
        );
        handshake(&mut listener, &mut connector);
        (listener, connector)
    }

    fn frame(i: usize) -> Vec<u8> {
        (0..14 + i % 4000).map(|b| (b + i) as u8).collect()
    }

    #[test]
    fn frames_cross_both_ways_intact_and_a_full_ring_pushes_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut l, mut c) = pair(dir.path());
        let frames: Vec<Vec<u8>> = (0..RING_SLOTS as usize + 100).map(frame).collect();
        let refs: Vec<FrameRef> = frames.iter().map(|f| FrameRef::whole(f)).collect();
        let sent = l.send(&refs);
        assert_eq!(sent.taken, RING_SLOTS as usize, "a full ring takes no more");
        assert_eq!(sent.dropped, 0);
        let mut got = receive(&mut c, RING_SLOTS as usize);
        let rest = l.send(&refs[sent.taken..]);
        assert_eq!((rest.taken, rest.dropped), (100, 0));
        got.extend(receive(&mut c, 100));
        assert_eq!(got, frames, "every frame, in order, byte for byte");
        let back = c.send(&refs[..3]);
        assert_eq!(back.taken, 3);
        assert_eq!(receive(&mut l, 3), frames[..3].to_vec());
    }

    #[test]
    fn an_idle_end_sleeps_on_its_fd_and_the_doorbell_wakes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut l, mut c) = pair(dir.path());
        // Arm: an empty receive raises the wake flag; the fd is quiet.
        assert_eq!(c.recv(&mut RxBatch::new(64)).unwrap(), 0);
        let mut fds = [libc::pollfd {
            fd: c.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        sys::poll::ppoll(&mut fds, Some(Duration::from_millis(20)));
        assert_eq!(fds[0].revents, 0, "an idle cable must not wake its end");
        let f = frame(7);
        assert_eq!(l.send(&[FrameRef::whole(&f)]).taken, 1);
        sys::poll::ppoll(&mut fds, Some(Duration::from_secs(2)));
        assert_ne!(
            fds[0].revents & libc::POLLIN,
            0,
            "the frame rings the doorbell"
        );
        assert_eq!(receive(&mut c, 1), vec![f]);
        // Drained and armed again: quiet once more.
        assert_eq!(c.recv(&mut RxBatch::new(64)).unwrap(), 0);
        fds[0].revents = 0;
        sys::poll::ppoll(&mut fds, Some(Duration::from_millis(20)));
        assert_eq!(fds[0].revents, 0, "the doorbell was drained");
    }

    #[test]
    fn a_frame_longer_than_a_slot_is_lost_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut l, mut c) = pair(dir.path());
        let long = vec![0u8; CABLE_MAX_FRAME + 1];
        let ok = frame(3);
        let sent = l.send(&[FrameRef::whole(&long), FrameRef::whole(&ok)]);
        assert_eq!((sent.taken, sent.dropped), (2, 1));
        assert_eq!(receive(&mut c, 1), vec![ok]);
    }

    #[test]
    fn a_peer_that_goes_away_cuts_the_cable_and_a_new_one_is_served() {
        let dir = tempfile::tempdir().unwrap();
        let (mut l, c) = pair(dir.path());
        drop(c);
        let start = Instant::now();
        while l.is_connected() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the cut was not noticed"
            );
            l.recv(&mut RxBatch::new(64)).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let f = frame(1);
        assert_eq!(l.send(&[FrameRef::whole(&f)]), Sent::all_lost(1));
        let mut again = Cable::connect(&dir.path().join("cable.sock")).unwrap();
        handshake(&mut l, &mut again);
        assert_eq!(l.send(&[FrameRef::whole(&f)]).taken, 1);
        assert_eq!(receive(&mut again, 1), vec![f]);
    }

    #[test]
    fn a_peer_that_breaks_the_ring_counts_cuts_the_cable_without_harm() {
        let dir = tempfile::tempdir().unwrap();
        let (l, mut c) = pair(dir.path());
        let w = l.wire.as_ref().unwrap();
        // The listener's transmit ring claims more frames than it has slots.
        w.map
            .atomic_u32(w.tx.base + HEAD)
            .store(RING_SLOTS + 7, Ordering::Release);
        assert_eq!(c.recv(&mut RxBatch::new(64)).unwrap(), 0);
        assert!(!c.is_connected(), "nonsense counts cut the cable");
        // A wild length word in a slot does too.
        let (mut l2, mut c2) = {
            let d = tempfile::tempdir().unwrap();
            let p = pair(d.path());
            drop(l);
            p
        };
        let f = frame(2);
        l2.send(&[FrameRef::whole(&f)]);
        let w = l2.wire.as_ref().unwrap();
        w.map.write(w.tx.slot(0), &u32::MAX.to_ne_bytes());
        assert_eq!(c2.recv(&mut RxBatch::new(64)).unwrap(), 0);
        assert!(!c2.is_connected());
    }

    #[test]
    fn a_connector_refuses_a_hello_that_is_not_a_cable() {
        let (x, y) = UnixStream::pair().unwrap();
        let plain = sys::fd::memfd(c"not-sealed").unwrap();
        plain
            .set_len(region_len(RING_SLOTS, SLOT_LEN) as u64)
            .unwrap();
        let fd = plain.as_raw_fd();
        sys::shm::send_with_fds(&x, &hello_bytes(RING_SLOTS, SLOT_LEN), &[fd, fd, fd]).unwrap();
        let e = take_hello(y).err().expect("an unsealed memfd is refused");
        assert!(e.to_string().contains("sealed"), "{e}");
        let (x, y) = UnixStream::pair().unwrap();
        x.set_nonblocking(false).unwrap();
        sys::shm::send_with_fds(&x, b"GET / HTTP/1.0\r\n", &[]).unwrap();
        assert!(take_hello(y).is_err());
    }
}
