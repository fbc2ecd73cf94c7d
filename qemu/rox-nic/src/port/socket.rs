//! QEMU's socket netdev framings over unix sockets: `dgram` (one frame per datagram) and
//! `stream` (each frame behind its length as a 4-byte big-endian integer, as QEMU's
//! net/stream.c writes it).

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{FrameRef, RxBatch, Sent, BATCH};
use crate::sys;

/// How often a socket whose peer is missing tries to reach it again.
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);
/// Socket buffer size asked for, so a send window's burst fits.
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;
/// The stream framing's length prefix.
pub const STREAM_LENGTH_LEN: usize = 4;
/// Bytes a stream link buffers for a slow peer before it pushes back.
const STREAM_WRITE_LIMIT: usize = 4 << 20;
/// Bytes one receive pass reads from a stream at most.
const STREAM_READ_CHUNK: usize = 256 << 10;

/// Removes a leftover socket file at `path` (a previous run's), so `bind` can take it; any
/// other kind of file is left alone (`bind` then fails with a clear error).
pub(super) fn remove_stale_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Asks for a large socket buffer: past the sysctl cap if allowed (CAP_NET_ADMIN), else up to
/// it. A small buffer only means more back-pressure.
fn set_buffer(fd: RawFd, force: libc::c_int, capped: libc::c_int) {
    let size = SOCKET_BUFFER_BYTES;
    let set = |option| sys::net::set_socket_int(fd, option, size);
    if !set(force) {
        set(capped);
    }
}

/// `-netdev dgram` framing: this end binds `local` and sends to `remote`.
pub struct Dgram {
    socket: UnixDatagram,
    remote: PathBuf,
    /// Connected to `remote`: a peer connected back to us lifts the kernel's per-socket queue
    /// limit (net.unix.max_dgram_qlen) and poll reports when the peer can take more. While
    /// the peer is missing, each send tries again (a send only happens with frames to send).
    connected: bool,
    /// The `recvmmsg` headers of the receive batch, kept between calls.
    receiver: sys::net::DatagramReceiver,
}

impl Dgram {
    pub fn open(local: &Path, remote: &Path) -> std::io::Result<Dgram> {
        remove_stale_socket(local);
        let socket = UnixDatagram::bind(local)
            .map_err(|e| std::io::Error::new(e.kind(), format!("bind {}: {e}", local.display())))?;
        socket.set_nonblocking(true)?;
        set_buffer(socket.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
        set_buffer(socket.as_raw_fd(), libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
        let mut d = Dgram {
            socket,
            remote: remote.to_path_buf(),
            connected: false,
            receiver: sys::net::DatagramReceiver::default(),
        };
        d.try_connect();
        Ok(d)
    }

    fn try_connect(&mut self) -> bool {
        if !self.connected {
            self.connected = self.socket.connect(&self.remote).is_ok();
        }
        self.connected
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Up to [`BATCH`] datagrams with one `recvmmsg`; never waits.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        let slot_len = batch.slot_len;
        let mut lens = [0usize; BATCH];
        let n = self.receiver.recv(
            self.socket.as_raw_fd(),
            &mut batch.slots,
            slot_len,
            &mut lens,
        )?;
        for &len in &lens[..n] {
            // A datagram longer than a slot arrives cut to the slot: longer than any valid
            // frame, so the classifier drops it as oversize.
            batch.push_len(len);
        }
        Ok(n)
    }

    /// Sends `frames` with `sendmmsg`, [`BATCH`] at a time; stops where the peer cannot take
    /// more (the rest stays with the caller).
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        if !self.try_connect() {
            return Sent::all_lost(frames.len());
        }
        let mut sent = Sent::default();
        while sent.taken < frames.len() {
            let chunk = &frames[sent.taken..];
            let e = match sys::net::send_datagrams::<BATCH>(self.socket.as_raw_fd(), chunk) {
                Ok(0) => break,
                Ok(n) => {
                    sent.taken += n;
                    sent.calls += 1;
                    continue;
                }
                Err(e) => e,
            };
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                Some(libc::EINTR) => continue,
                Some(libc::ECONNREFUSED)
                | Some(libc::ENOTCONN)
                | Some(libc::ENOENT)
                | Some(libc::ECONNRESET) => {
                    // The peer went away: everything queued is lost, like on a cut cable.
                    self.connected = false;
                    let rest = frames.len() - sent.taken;
                    sent.taken += rest;
                    sent.dropped += rest;
                }
                _ => {
                    // This frame cannot go (e.g. too long for the socket): lose it only.
                    log::debug!("rox-nic: dgram send: {e}");
                    sent.taken += 1;
                    sent.dropped += 1;
                }
            }
        }
        sent
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

enum Role {
    Connect(PathBuf),
    Listen(UnixListener),
}

/// `-netdev stream` framing over a unix stream socket: connects (retrying) or listens
/// (serving one peer at a time, accepting the next when it goes away).
pub struct Stream {
    role: Role,
    conn: Option<UnixStream>,
    /// Bytes read and not yet framed.
    rbuf: Vec<u8>,
    /// Bytes of an oversized frame still to be discarded.
    skip: usize,
    /// Framed bytes not yet written.
    wbuf: Vec<u8>,
    next_connect: Instant,
}

impl Stream {
    pub fn connect(path: &Path) -> Stream {
        let mut s = Stream::new(Role::Connect(path.to_path_buf()));
        s.try_connect();
        s
    }

    pub fn listen(path: &Path) -> std::io::Result<Stream> {
        remove_stale_socket(path);
        let listener = UnixListener::bind(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("bind {}: {e}", path.display())))?;
        listener.set_nonblocking(true)?;
        Ok(Stream::new(Role::Listen(listener)))
    }

    fn new(role: Role) -> Stream {
        Stream {
            role,
            conn: None,
            rbuf: Vec::new(),
            skip: 0,
            wbuf: Vec::new(),
            next_connect: Instant::now(),
        }
    }

    fn try_connect(&mut self) -> bool {
        if self.conn.is_some() {
            return true;
        }
        let conn = match &self.role {
            Role::Listen(l) => l.accept().ok().map(|(c, _)| c),
            Role::Connect(path) => {
                if Instant::now() < self.next_connect {
                    return false;
                }
                self.next_connect = Instant::now() + RECONNECT_INTERVAL;
                UnixStream::connect(path).ok()
            }
        };
        if let Some(c) = conn {
            if c.set_nonblocking(true).is_ok() {
                set_buffer(c.as_raw_fd(), libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
                self.conn = Some(c);
                log::info!("rox-nic: stream peer connected");
            }
        }
        self.conn.is_some()
    }

    fn disconnect(&mut self) {
        if self.conn.take().is_some() {
            log::info!("rox-nic: stream peer went away");
        }
        self.rbuf.clear();
        self.wbuf.clear();
        self.skip = 0;
    }

    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    pub fn retry_in(&self) -> Option<Duration> {
        match self.role {
            Role::Connect(_) if self.conn.is_none() => {
                Some(self.next_connect.saturating_duration_since(Instant::now()))
            }
            _ => None,
        }
    }

    /// Reads what is waiting and frames up to [`BATCH`] frames; never waits.
    pub fn recv(&mut self, batch: &mut RxBatch) -> std::io::Result<usize> {
        batch.clear();
        if !self.try_connect() {
            return Ok(0);
        }
        let mut eof = false;
        if let Some(conn) = &mut self.conn {
            let mut chunk = [0u8; 16 << 10];
            let mut read = 0;
            while read < STREAM_READ_CHUNK {
                match conn.read(&mut chunk) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        read += n;
                        // The rest of an oversized frame is discarded as it comes.
                        let discard = self.skip.min(n);
                        self.skip -= discard;
                        self.rbuf.extend_from_slice(&chunk[discard..n]);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
        }
        let n = self.frame_into(batch);
        if eof {
            self.disconnect();
        }
        Ok(n)
    }

    /// Moves whole frames from `rbuf` into `batch`.
    fn frame_into(&mut self, batch: &mut RxBatch) -> usize {
        let mut at = 0;
        while batch.len() < BATCH && self.rbuf.len() - at >= STREAM_LENGTH_LEN {
            let len = u32::from_be_bytes(self.rbuf[at..at + STREAM_LENGTH_LEN].try_into().unwrap())
                as usize;
            let start = at + STREAM_LENGTH_LEN;
            if len > batch.slot_len {
                // Longer than any valid frame: hand on a stand-in the classifier drops as
                // oversize, and discard the frame's bytes as they come.
                let have = (self.rbuf.len() - start).min(len);
                batch.push_frame(&self.rbuf[start..start + have.min(batch.slot_len)], true);
                self.skip = len - have;
                at = start + have;
                continue;
            }
            if self.rbuf.len() - start < len {
                break;
            }
            batch.push_frame(&self.rbuf[start..start + len], false);
            at = start + len;
        }
        self.rbuf.drain(..at);
        batch.len()
    }

    /// Frames and writes `frames`; what the socket cannot take now stays buffered (up to a
    /// limit, beyond which the rest stays with the caller).
    pub fn send(&mut self, frames: &[FrameRef]) -> Sent {
        if !self.try_connect() {
            return Sent::all_lost(frames.len());
        }
        let mut sent = Sent::default();
        for f in frames {
            let len = f.head.len() + f.body.len();
            if self.wbuf.len() + STREAM_LENGTH_LEN + len > STREAM_WRITE_LIMIT {
                break;
            }
            self.wbuf.extend_from_slice(&(len as u32).to_be_bytes());
            self.wbuf.extend_from_slice(f.head);
            self.wbuf.extend_from_slice(f.body);
            sent.taken += 1;
        }
        self.flush_writes();
        if self.conn.is_none() {
            sent.dropped = sent.taken;
        }
        sent.calls += 1;
        sent
    }

    /// Writes buffered bytes until the socket pushes back.
    pub fn flush_writes(&mut self) {
        let Some(conn) = &mut self.conn else { return };
        let mut written = 0;
        let mut broken = false;
        while written < self.wbuf.len() {
            match conn.write(&self.wbuf[written..]) {
                Ok(0) => {
                    broken = true;
                    break;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        self.wbuf.drain(..written);
        if broken {
            self.disconnect();
        }
    }

    pub fn has_pending_writes(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// The fd to poll: the connection, or the listener while nobody is connected.
    pub fn fd(&self) -> Option<RawFd> {
        match (&self.conn, &self.role) {
            (Some(c), _) => Some(c.as_raw_fd()),
            (None, Role::Listen(l)) => Some(l.as_raw_fd()),
            (None, Role::Connect(_)) => None,
        }
    }
}
