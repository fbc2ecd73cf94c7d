//! Descriptor passing over a unix stream (SCM_RIGHTS: the cable's memfd, the vfio-user
//! socket's regions and eventfds) and looking at a stream without consuming it.

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Sends `data` with `fds` attached (SCM_RIGHTS) as one message on `stream`.
pub fn send_with_fds(stream: &UnixStream, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    assert!(fds.len() <= MAX_FDS && !data.is_empty());
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // sendmsg only reads through the iovec.
    let base = data.as_ptr() as *mut libc::c_void;
    let sent = with_msghdr(base, data.len(), fd_bytes, |msg| {
        // SAFETY: `msg` points at a control buffer of CMSG_SPACE(fd_bytes) bytes, enough for
        // one header and the descriptors copied into its data.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes as usize,
            );
        }
        loop {
            // SAFETY: `msg`, its iovec (into `data`) and its control buffer live across the
            // call.
            let n = unsafe { libc::sendmsg(stream.as_raw_fd(), msg, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                break Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                break Err(e);
            }
        }
    })?;
    // A stream may take part of the message (a signal, a full buffer): the descriptors went
    // with that part, the rest follows as plain bytes.
    let mut rest = stream;
    std::io::Write::write_all(&mut rest, &data[sent..])
}

/// Receives one message of at most `data.len()` bytes and the descriptors attached to it.
/// Returns the bytes received (0: the peer closed) and the descriptors, now owned here.
pub fn recv_with_fds(
    stream: &UnixStream,
    data: &mut [u8],
) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    recv_with_fds_max(stream, data, MAX_FDS)
}

/// The most descriptors Linux passes in one message (SCM_MAX_FD): with room for this many,
/// a receive is never cut short for lack of room.
pub const SCM_MAX_FD: usize = 253;

/// [`recv_with_fds`] with room for `max_fds` descriptors (more attached is an error, and the
/// kernel closes the extra ones).
pub fn recv_with_fds_max(
    stream: &UnixStream,
    data: &mut [u8],
    max_fds: usize,
) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let fd_bytes = (max_fds * std::mem::size_of::<RawFd>()) as u32;
    with_msghdr(data.as_mut_ptr().cast(), data.len(), fd_bytes, |msg| {
        // SAFETY: `msg`, its iovec (into `data`) and its control buffer live across the call;
        // MSG_CMSG_CLOEXEC makes received descriptors close-on-exec.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut *msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: recvmsg just filled the control buffer `msg` points at.
        let fds = unsafe { received_fds(msg) };
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                "too many descriptors attached",
            ));
        }
        Ok((n as usize, fds))
    })
}

/// The descriptors SCM_RIGHTS headers in `msg`'s control buffer carry, now owned here.
///
/// # Safety
/// `msg` is as recvmsg left it: its control buffer holds well-formed headers (the CMSG_*
/// macros walk them without leaving it), and each SCM_RIGHTS descriptor is new in this process
/// and owned by nobody else.
unsafe fn received_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: as the caller promises.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = data.cast::<RawFd>().add(i).read_unaligned();
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}

/// Runs `f` on the header of one message: one iovec over the `len` bytes at `base`, and a
/// zeroed control buffer of CMSG_SPACE(`fd_bytes`) bytes (room for that many bytes of
/// descriptors); both live across `f`.
fn with_msghdr<T>(
    base: *mut libc::c_void,
    len: usize,
    fd_bytes: u32,
    f: impl FnOnce(&mut libc::msghdr) -> T,
) -> T {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: base,
        iov_len: len,
    };
    // SAFETY: msghdr is plain C data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    f(&mut msg)
}

/// What waits on a connected stream, looked at without consuming it: Some(true) bytes,
/// Some(false) nothing yet, None the peer closed it (or it broke).
pub fn peek(stream: &UnixStream) -> Option<bool> {
    let mut byte = 0u8;
    // SAFETY: reads at most one byte into a local; MSG_PEEK leaves it queued.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted).then_some(false);
    }
    // A stream reads 0 bytes only at its end.
    (n > 0).then_some(true)
}

/// Whether the peer of a connected stream closed it (or it broke); nothing is consumed.
pub fn peer_closed(stream: &UnixStream) -> bool {
    peek(stream).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::shm::sealed_memfd;
    use std::fs::File;

    #[test]
    fn descriptors_cross_a_unix_stream_with_their_message() {
        let (x, y) = UnixStream::pair().unwrap();
        let f = sealed_memfd(c"rox-shm-pass", 4096).unwrap();
        send_with_fds(&x, b"hello", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(&y, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 2);
        let got = File::from(fds.into_iter().next().unwrap());
        assert_eq!(got.metadata().unwrap().len(), 4096);
        y.set_nonblocking(true).unwrap();
        assert_eq!(peek(&y), Some(false));
        send_with_fds(&x, b"!", &[]).unwrap();
        assert_eq!(peek(&y), Some(true));
        assert!(!peer_closed(&y));
        assert_eq!(recv_with_fds(&y, &mut buf).unwrap().0, 1);
        drop(x);
        assert!(peer_closed(&y));
    }

    #[test]
    fn more_descriptors_than_room_is_an_error() {
        let (x, y) = UnixStream::pair().unwrap();
        let f = sealed_memfd(c"rox-shm-pass", 4096).unwrap();
        let fd = f.as_raw_fd();
        // Room for one descriptor is 8 bytes of cmsg data (aligned): three do not fit.
        send_with_fds(&x, b"three", &[fd, fd, fd]).unwrap();
        let mut buf = [0u8; 16];
        let err = recv_with_fds_max(&y, &mut buf, 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
        send_with_fds(&x, b"two", &[fd, fd]).unwrap();
        let (n, fds) = recv_with_fds_max(&y, &mut buf, 2).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"two"[..], 2));
    }
}
