//! Network system calls with C structures: tap interfaces (`ifreq` ioctls), socket options,
//! batched datagram I/O (`recvmmsg`/`sendmmsg`) and network namespaces.

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::port::FrameRef;

/// An `ifreq` naming `name` (at most IFNAMSIZ - 1 bytes, no NUL).
fn ifreq(name: &str) -> std::io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    // SAFETY: ifreq is plain C data; all zeroes is a valid empty request.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

/// Whether interface `name` exists in this network namespace.
pub fn interface_exists(name: &str) -> std::io::Result<bool> {
    let req = ifreq(name)?;
    // SAFETY: `ifr_name` is a NUL-terminated name (ifreq leaves at least one NUL).
    Ok(unsafe { libc::if_nametoindex(req.ifr_name.as_ptr()) } != 0)
}

/// Attaches the open /dev/net/tun `file` to the tap interface `name` (TUNSETIFF, IFF_TAP |
/// IFF_NO_PI: whole Ethernet frames).
pub fn tap_attach(file: &File, name: &str) -> std::io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which lives across the call.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The IP MTU of interface `name`.
pub fn interface_mtu(name: &str) -> std::io::Result<usize> {
    // SAFETY: socket() has no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket this function owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFMTU reads the name and writes the MTU of one ifreq that lives across the
    // call.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFMTU as _, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled the ifru_mtu member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as usize)
}

/// Sets the integer socket option `option` (level SOL_SOCKET) of `fd`; false if refused.
pub fn set_socket_int(fd: RawFd, option: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Receives up to `N` datagrams with one non-blocking `recvmmsg`, datagram `i` into
/// `slots[i]`; its length goes to `lens[i]`. Returns how many arrived (an empty socket: 0).
pub fn recv_datagrams<const N: usize>(
    fd: RawFd,
    slots: &mut [u8],
    slot_len: usize,
    lens: &mut [usize; N],
) -> std::io::Result<usize> {
    // SAFETY: iovec is plain C data; all zeroes is a valid value.
    let mut iovs: [libc::iovec; N] = unsafe { std::mem::zeroed() };
    // SAFETY: mmsghdr is plain C data; all zeroes is a valid value.
    let mut msgs: [libc::mmsghdr; N] = unsafe { std::mem::zeroed() };
    let mut count = 0;
    for ((m, iov), slot) in msgs
        .iter_mut()
        .zip(iovs.iter_mut())
        .zip(slots.chunks_exact_mut(slot_len))
    {
        *iov = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
        count += 1;
    }
    // SAFETY: the first `count` messages' single iovecs point into `slots`, alive and
    // exclusively borrowed across the call; no timeout pointer.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    for (len, m) in lens.iter_mut().zip(&msgs[..n as usize]) {
        *len = m.msg_len as usize;
    }
    Ok(n as usize)
}

/// Sends the first up to `N` of `frames` (each a header and a body, one datagram) with one
/// non-blocking `sendmmsg`. Returns how many went; an error only if none did.
pub fn send_datagrams<const N: usize>(fd: RawFd, frames: &[FrameRef]) -> std::io::Result<usize> {
    let count = frames.len().min(N);
    // SAFETY: iovec is plain C data; all zeroes is a valid value.
    let mut iovs: [[libc::iovec; 2]; N] = unsafe { std::mem::zeroed() };
    // SAFETY: mmsghdr is plain C data; all zeroes is a valid value.
    let mut msgs: [libc::mmsghdr; N] = unsafe { std::mem::zeroed() };
    for (i, f) in frames[..count].iter().enumerate() {
        iovs[i] = [
            libc::iovec {
                iov_base: f.head.as_ptr() as *mut libc::c_void,
                iov_len: f.head.len(),
            },
            libc::iovec {
                iov_base: f.body.as_ptr() as *mut libc::c_void,
                iov_len: f.body.len(),
            },
        ];
        msgs[i].msg_hdr.msg_iov = iovs[i].as_mut_ptr();
        msgs[i].msg_hdr.msg_iovlen = 2;
    }
    // SAFETY: the first `count` messages point into `iovs` and `frames`, alive across the
    // call; the kernel only reads them (and writes msg_len).
    let n = unsafe {
        libc::sendmmsg(
            fd,
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Moves this process (still single-threaded) into a new network namespace of its own.
pub fn unshare_network_namespace() -> std::io::Result<()> {
    // SAFETY: unshare only changes this process's namespaces; no memory arguments.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
