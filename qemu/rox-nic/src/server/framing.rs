//! vfio-user framing: whole messages in and out of the socket, never part of one.
//!
//! A message is a 16-byte header (id, command, size of the whole message, flags, error)
//! followed by `size - 16` bytes of payload, with any descriptors attached (SCM_RIGHTS) to its
//! first bytes. A stream socket keeps no message boundaries, so the only thing that keeps the
//! two ends in step is that each reads exactly `size` bytes per message, whatever it then does
//! with them: a short read is continued, a signal's EINTR retried, a payload the server
//! refuses is read and dropped. A header whose size cannot be a message (below 16 bytes) leaves
//! nothing to find the next one by; the connection then ends rather than guessing.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::sys::fdpass;

/// Bytes of a message header.
pub const HEADER_SIZE: usize = 16;
/// The largest payload a message may carry: the data limit the server announces
/// (`max_data_xfer_size`) plus room for the largest fixed part of a request (REGION_WRITE's
/// 16 bytes, a region info with capabilities). A longer message is read and dropped.
pub const MAX_PAYLOAD: usize = MAX_DATA_XFER + 4096;
/// `max_data_xfer_size`: the most data one REGION_READ or REGION_WRITE moves.
pub const MAX_DATA_XFER: usize = 1 << 20;

/// Header flags (the protocol specification's `flags` word).
pub const TYPE_MASK: u32 = 0xf;
pub const TYPE_REQUEST: u32 = 0;
pub const TYPE_REPLY: u32 = 1;
pub const FLAG_NO_REPLY: u32 = 1 << 4;
pub const FLAG_ERROR: u32 = 1 << 5;

/// A message header as it travels (little-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub id: u16,
    pub command: u16,
    /// Bytes of the whole message, header included.
    pub size: u32,
    pub flags: u32,
    pub error: u32,
}

impl Header {
    pub fn parse(b: &[u8; HEADER_SIZE]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Header {
            id: u16::from_le_bytes([b[0], b[1]]),
            command: u16::from_le_bytes([b[2], b[3]]),
            size: u32_at(4),
            flags: u32_at(8),
            error: u32_at(12),
        }
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..2].copy_from_slice(&self.id.to_le_bytes());
        b[2..4].copy_from_slice(&self.command.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.error.to_le_bytes());
        b
    }

    pub fn is_request(&self) -> bool {
        self.flags & TYPE_MASK == TYPE_REQUEST
    }

    pub fn wants_reply(&self) -> bool {
        self.flags & FLAG_NO_REPLY == 0
    }
}

/// One whole message read from the socket.
#[derive(Debug)]
pub struct Message {
    pub header: Header,
    /// The payload, or empty if it was longer than [`MAX_PAYLOAD`] (then `oversized`).
    pub payload: Vec<u8>,
    /// Set when the payload was too long to keep: it was read and dropped.
    pub oversized: bool,
    /// Descriptors that came with the message, owned here (closed when dropped).
    pub fds: Vec<File>,
}

/// Why a connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    #[error("reading the vfio-user socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("the client closed the socket inside a message ({got} of {want} bytes)")]
    Truncated { got: usize, want: usize },
    #[error(
        "message header says {0} bytes, less than the header itself: the stream cannot be followed"
    )]
    BadSize(u32),
}

/// Where messages come from: a receive that may return fewer bytes than asked, descriptors
/// with them, or EINTR. The socket in rox-nic, a script in tests.
pub trait Source {
    /// Up to `buf.len()` bytes (0: the peer closed) and any descriptors attached to them.
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)>;
}

impl Source for &UnixStream {
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
        // Room for all a message can carry: too little would fail the read and lose the
        // message's place in the stream.
        fdpass::recv_with_fds_max(self, buf, fdpass::SCM_MAX_FD)
    }
}

/// Fills `buf` completely: short reads continue, EINTR retries. Returns how much was read
/// before the peer closed (buf.len() when all of it arrived).
fn fill(src: &mut impl Source, buf: &mut [u8], fds: &mut Vec<File>) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.recv(&mut buf[got..]) {
            Ok((0, _)) => break,
            Ok((n, new_fds)) => {
                got += n;
                fds.extend(new_fds.into_iter().map(File::from));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The next whole message, or None if the client closed the socket between messages.
pub fn read_message(src: &mut impl Source) -> Result<Option<Message>, FramingError> {
    let mut fds = Vec::new();
    let mut raw = [0u8; HEADER_SIZE];
    match fill(src, &mut raw, &mut fds)? {
        0 => return Ok(None),
        HEADER_SIZE => {}
        got => {
            return Err(FramingError::Truncated {
                got,
                want: HEADER_SIZE,
            })
        }
    }
    let header = Header::parse(&raw);
    let Some(len) = (header.size as usize).checked_sub(HEADER_SIZE) else {
        return Err(FramingError::BadSize(header.size));
    };
    let oversized = len > MAX_PAYLOAD;
    let mut payload = vec![0u8; len.min(MAX_PAYLOAD)];
    let mut left = len;
    // An oversized payload is read in bounded pieces into the same buffer and dropped.
    while left > 0 {
        let piece = left.min(payload.len());
        let got = fill(src, &mut payload[..piece], &mut fds)?;
        if got < piece {
            return Err(FramingError::Truncated {
                got: HEADER_SIZE + (len - left) + got,
                want: header.size as usize,
            });
        }
        left -= piece;
    }
    if oversized {
        payload = Vec::new();
    }
    Ok(Some(Message {
        header,
        payload,
        oversized,
        fds,
    }))
}

/// A reply to `request` carrying `payload` and, attached to its first byte, `fd`.
pub fn write_reply(
    stream: &UnixStream,
    request: &Header,
    payload: &[u8],
    fd: Option<RawFd>,
) -> std::io::Result<()> {
    let header = Header {
        id: request.id,
        command: request.command,
        size: (HEADER_SIZE + payload.len()) as u32,
        flags: TYPE_REPLY,
        error: 0,
    };
    let mut msg = Vec::with_capacity(HEADER_SIZE + payload.len());
    msg.extend_from_slice(&header.encode());
    msg.extend_from_slice(payload);
    match fd {
        Some(fd) => fdpass::send_with_fds(stream, &msg, &[fd]),
        None => (&mut &*stream).write_all(&msg),
    }
}

/// An error reply to `request`: the header alone, `errno` (never 0: QEMU returns
/// `-error_reply` to its caller, and 0 would read as success).
pub fn write_error(stream: &UnixStream, request: &Header, errno: i32) -> std::io::Result<()> {
    let header = Header {
        id: request.id,
        command: request.command,
        size: HEADER_SIZE as u32,
        flags: TYPE_REPLY | FLAG_ERROR,
        error: errno.max(1) as u32,
    };
    (&mut &*stream).write_all(&header.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::io::Read;

    /// A source that hands out its bytes in the given pieces, with EINTRs between them.
    struct Script(VecDeque<std::io::Result<Vec<u8>>>);

    impl Source for Script {
        fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
            match self.0.pop_front() {
                None => Ok((0, Vec::new())),
                Some(Err(e)) => Err(e),
                Some(Ok(mut piece)) => {
                    let n = piece.len().min(buf.len());
                    buf[..n].copy_from_slice(&piece[..n]);
                    if n < piece.len() {
                        self.0.push_front(Ok(piece.split_off(n)));
                    }
                    Ok((n, Vec::new()))
                }
            }
        }
    }

    fn message(id: u16, command: u16, payload: &[u8]) -> Vec<u8> {
        let h = Header {
            id,
            command,
            size: (HEADER_SIZE + payload.len()) as u32,
            flags: 0,
            error: 0,
        };
        let mut m = h.encode().to_vec();
        m.extend_from_slice(payload);
        m
    }

    fn eintr() -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::from_raw_os_error(libc::EINTR))
    }

    #[test]
    fn pieces_and_signals_make_one_message_each() {
        let mut bytes = message(7, 10, &[1, 2, 3, 4, 5, 6, 7, 8]);
        bytes.extend(message(8, 9, &[9; 16]));
        // Cut everywhere: 1-byte pieces with an EINTR before each.
        let mut script = VecDeque::new();
        for b in bytes {
            script.push_back(eintr());
            script.push_back(Ok(vec![b]));
        }
        let mut src = Script(script);
        let a = read_message(&mut src).unwrap().unwrap();
        assert_eq!((a.header.id, a.header.command), (7, 10));
        assert_eq!(a.payload, [1, 2, 3, 4, 5, 6, 7, 8]);
        let b = read_message(&mut src).unwrap().unwrap();
        assert_eq!((b.header.id, b.header.command, b.payload.len()), (8, 9, 16));
        assert!(read_message(&mut src).unwrap().is_none());
    }

    #[test]
    fn an_oversized_payload_is_read_and_dropped_and_the_next_message_follows() {
        let big = vec![0xaa; MAX_PAYLOAD + 3];
        let mut bytes = message(1, 10, &big);
        bytes.extend(message(2, 9, &[0; 16]));
        let mut src = Script(VecDeque::from([Ok(bytes)]));
        let a = read_message(&mut src).unwrap().unwrap();
        assert!(a.oversized && a.payload.is_empty());
        assert_eq!(a.header.size as usize, HEADER_SIZE + MAX_PAYLOAD + 3);
        let b = read_message(&mut src).unwrap().unwrap();
        assert_eq!((b.header.id, b.payload.len()), (2, 16));
    }

    #[test]
    fn a_size_below_the_header_and_an_end_inside_a_message_are_errors() {
        let mut bad = message(1, 9, &[]);
        bad[4..8].copy_from_slice(&8u32.to_le_bytes());
        let mut src = Script(VecDeque::from([Ok(bad)]));
        assert!(matches!(
            read_message(&mut src),
            Err(FramingError::BadSize(8))
        ));

        let cut = message(1, 9, &[0; 16])[..20].to_vec();
        let mut src = Script(VecDeque::from([Ok(cut)]));
        assert!(matches!(
            read_message(&mut src),
            Err(FramingError::Truncated { got: 20, want: 32 })
        ));
        let mut src = Script(VecDeque::from([Ok(vec![1, 2, 3])]));
        assert!(matches!(
            read_message(&mut src),
            Err(FramingError::Truncated { got: 3, want: 16 })
        ));
    }

    #[test]
    fn other_errors_end_the_read() {
        let mut src = Script(VecDeque::from([Err(std::io::Error::from_raw_os_error(
            libc::ECONNRESET,
        ))]));
        assert!(matches!(read_message(&mut src), Err(FramingError::Io(_))));
    }

    #[test]
    fn replies_carry_the_request_id_and_a_nonzero_error() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let req = Header {
            id: 0x1234,
            command: 9,
            size: 32,
            flags: 0,
            error: 0,
        };
        write_reply(&a, &req, &[5; 4], None).unwrap();
        write_error(&a, &req, 0).unwrap();
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        let r = Header::parse(got[..16].try_into().unwrap());
        assert_eq!(
            (r.id, r.command, r.size, r.flags),
            (0x1234, 9, 20, TYPE_REPLY)
        );
        assert_eq!(&got[16..20], &[5; 4]);
        let e = Header::parse(got[20..36].try_into().unwrap());
        assert_eq!(
            (e.id, e.flags, e.error),
            (0x1234, TYPE_REPLY | FLAG_ERROR, 1)
        );
        assert_eq!(got.len(), 36, "nothing else sent");
    }
}
