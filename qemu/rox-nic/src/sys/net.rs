//! Network system calls with C structures: tap interfaces (`ifreq` ioctls), socket options,
//! batched datagram I/O (`recvmmsg`/`sendmmsg`), network namespaces, and (test kit) a packet
//! socket on an interface.

use std::fs::File;
use std::io::ErrorKind;
use std::mem::MaybeUninit;
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
/// IFF_NO_PI: whole Ethernet frames; with `vnet_hdr`, IFF_VNET_HDR: each frame read or written
/// behind a 10-byte `virtio_net_hdr`).
pub fn tap_attach(file: &File, name: &str, vnet_hdr: bool) -> std::io::Result<()> {
    let mut req = ifreq(name)?;
    let vnet = if vnet_hdr { libc::IFF_VNET_HDR } else { 0 };
    req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI | vnet) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which lives across the call.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Tells the kernel which offloads the reader of tap `file` (attached with IFF_VNET_HDR)
/// handles (TUNSETOFFLOAD: `libc::TUN_F_*`); 0: none, every frame arrives whole and checksummed.
pub fn tap_set_offload(file: &File, offloads: libc::c_uint) -> std::io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
    if unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::TUNSETOFFLOAD as _,
            offloads as libc::c_ulong,
        )
    } < 0
    {
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
    set_int_option(fd, libc::SOL_SOCKET, option, value).is_ok()
}

/// Sets the integer option `option` of protocol level `level` (SOL_SOCKET, SOL_UDP, ...) of
/// `fd`: e.g. SOL_UDP / UDP_SEGMENT, the segment size of a sender's segmentation requests.
pub fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid c_int.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The `recvmmsg` headers of one receive buffer, built once and reused by every call: a
/// device polls its port every few microseconds, and setting up a batch's 64 headers per
/// look cost more than the empty look itself. The kernel only writes their lengths and
/// flags, never the iovecs they point to.
#[derive(Default)]
pub struct DatagramReceiver {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    /// The buffer they point into: its address, length and slot length, and the headers' count.
    built_for: (usize, usize, usize, usize),
}

// SAFETY: the raw pointers inside are addresses of the caller's buffer, only dereferenced
// (by the kernel) within `recv`, while that buffer is exclusively borrowed; nothing is
// shared between threads.
unsafe impl Send for DatagramReceiver {}

impl DatagramReceiver {
    /// Points one header at each `slot_len` slot of `slots` (at most `max` of them).
    fn build(&mut self, slots: &mut [u8], slot_len: usize, max: usize) {
        self.iovs = slots
            .chunks_exact_mut(slot_len)
            .take(max)
            .map(|slot| libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            })
            .collect();
        self.msgs = self
            .iovs
            .iter_mut()
            .map(|iov| {
                // SAFETY: mmsghdr is plain C data; all zeroes is a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        self.built_for = (slots.as_ptr() as usize, slots.len(), slot_len, max);
    }

    /// Receives up to `N` datagrams with one non-blocking `recvmmsg`, datagram `i` into
    /// slot `i` of `slots` (slots of `slot_len` bytes); its length goes to `lens[i]`.
    /// Returns how many arrived (an empty socket: 0).
    pub fn recv<const N: usize>(
        &mut self,
        fd: RawFd,
        slots: &mut [u8],
        slot_len: usize,
        lens: &mut [usize; N],
    ) -> std::io::Result<usize> {
        if self.built_for != (slots.as_ptr() as usize, slots.len(), slot_len, N) {
            self.build(slots, slot_len, N);
        }
        // SAFETY: every header's single iovec lies in `self.iovs` and points into `slots`
        // (checked just above: the headers were built for this very buffer), which is
        // exclusively borrowed across the call; no timeout pointer.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
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
        for (len, m) in lens.iter_mut().zip(&self.msgs[..n as usize]) {
            *len = m.msg_len as usize;
        }
        Ok(n as usize)
    }
}

/// A frame's two pieces (header, body) as the iovecs one write or datagram sends. The kernel
/// only reads through them: the `*mut` is the C type's, not a licence to write.
pub fn frame_iovecs(f: &FrameRef) -> [libc::iovec; 2] {
    [
        libc::iovec {
            iov_base: f.head.as_ptr() as *mut libc::c_void,
            iov_len: f.head.len(),
        },
        libc::iovec {
            iov_base: f.body.as_ptr() as *mut libc::c_void,
            iov_len: f.body.len(),
        },
    ]
}

/// Sends the first up to `N` of `frames` (each a header and a body, one datagram) with one
/// non-blocking `sendmmsg`. Returns how many went; an error only if none did.
pub fn send_datagrams<const N: usize>(fd: RawFd, frames: &[FrameRef]) -> std::io::Result<usize> {
    let count = frames.len().min(N);
    // Only the `count` headers used are written (most calls send a few frames of a batch
    // of N); the rest stay uninitialised and the kernel is told of `count` only.
    let mut iovs = [const { MaybeUninit::<[libc::iovec; 2]>::uninit() }; N];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; N];
    for ((m, iov), f) in msgs.iter_mut().zip(iovs.iter_mut()).zip(&frames[..count]) {
        let iov = iov.write(frame_iovecs(f));
        // SAFETY: mmsghdr is plain C data; all zeroes is a valid value.
        let mut hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        hdr.msg_hdr.msg_iov = iov.as_mut_ptr();
        hdr.msg_hdr.msg_iovlen = 2;
        m.write(hdr);
    }
    // SAFETY: the first `count` messages were written just above and point into `iovs` and
    // `frames`, alive across the call; the kernel reads only those (and writes msg_len).
    let n = unsafe {
        libc::sendmmsg(
            fd,
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Moves the calling thread into a new network namespace of its own (network namespaces are
/// per thread: threads and children it starts afterwards inherit it, the process's other
/// threads stay where they were). A single-threaded process moves whole.
pub fn unshare_network_namespace() -> std::io::Result<()> {
    // SAFETY: unshare only changes the calling thread's namespaces; no memory arguments.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A raw packet socket (AF_PACKET, every ethertype) bound to interface `name`, so it sees every
/// frame on it and sends whole Ethernet frames out of it: the host tests' far side of a tap
/// (test kit only: the device never opens one). `rcvbuf` bytes of receive buffer
/// (SO_RCVBUFFORCE: CAP_NET_ADMIN, beyond net.core.rmem_max); a receive waits at most
/// `timeout` (SO_RCVTIMEO), then fails with WouldBlock. Read and write it as a `File`.
#[cfg(any(test, feature = "testkit"))]
pub fn packet_socket(
    name: &str,
    rcvbuf: libc::c_int,
    timeout: std::time::Duration,
) -> std::io::Result<OwnedFd> {
    let all = (libc::ETH_P_ALL as u16).to_be();
    let index = {
        let cname = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        // SAFETY: a NUL-terminated name that lives across the call.
        unsafe { libc::if_nametoindex(cname.as_ptr()) }
    };
    if index == 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socket() has no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, libc::c_int::from(all)) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket, owned from here on.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain C data; all zeroes is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = all;
    addr.sll_ifindex = index as i32;
    // SAFETY: bind reads one sockaddr_ll of the size given.
    let bound = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if bound != 0 {
        return Err(std::io::Error::last_os_error());
    }
    set_int_option(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        rcvbuf,
    )?;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt reads one timeval that lives across the call.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn a_receiver_fills_the_buffer_it_is_given_even_when_the_buffer_changes() {
        let (a, b) = UnixDatagram::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut receiver = DatagramReceiver::default();
        let mut lens = [0usize; 4];
        for round in 0..3u8 {
            // A new buffer each round (another address, then another slot length): the
            // headers must follow it, not point at the one before.
            let slot_len = 8 + usize::from(round / 2) * 4;
            let mut slots = vec![0u8; 4 * slot_len];
            assert_eq!(
                receiver
                    .recv(b.as_raw_fd(), &mut slots, slot_len, &mut lens)
                    .unwrap(),
                0
            );
            a.send(&[round; 3]).unwrap();
            a.send(&[round + 10; 20]).unwrap();
            let n = receiver
                .recv(b.as_raw_fd(), &mut slots, slot_len, &mut lens)
                .unwrap();
            assert_eq!(n, 2);
            assert_eq!(&slots[..3], &[round; 3]);
            // A datagram longer than its slot is cut to the slot.
            assert_eq!(lens[..2], [3, slot_len]);
            assert!(slots[slot_len..2 * slot_len]
                .iter()
                .all(|&x| x == round + 10));
        }
    }

    #[test]
    fn a_receiver_takes_no_more_datagrams_than_the_call_has_lengths_for() {
        let (a, b) = UnixDatagram::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut receiver = DatagramReceiver::default();
        let mut slots = vec![0u8; 8 * 16];
        let fd = b.as_raw_fd();
        assert_eq!(receiver.recv(fd, &mut slots, 16, &mut [0; 8]).unwrap(), 0);
        for i in 0..4u8 {
            a.send(&[i; 5]).unwrap();
        }
        // The same buffer with fewer lengths: two datagrams now, the others left waiting.
        let mut lens = [0usize; 2];
        assert_eq!(receiver.recv(fd, &mut slots, 16, &mut lens).unwrap(), 2);
        assert_eq!((lens, slots[0], slots[16]), ([5, 5], 0, 1));
        assert_eq!(receiver.recv(fd, &mut slots, 16, &mut lens).unwrap(), 2);
        assert_eq!((slots[0], slots[16]), (2, 3));
    }
}
