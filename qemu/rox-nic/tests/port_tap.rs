//! The tap port, in a network namespace of the test's own thread (network namespaces are per
//! thread; the namespace goes away with the thread): the port attaches to a tap made with
//! `ip tuntap`, reads its MTU, and moves frames both ways between itself and a packet socket
//! on the interface. Needs CAP_SYS_ADMIN, /dev/net/tun and `ip`; without them the test fails,
//! unless ROX_ALLOW_SKIP_TAP=1 lets it skip (printing SKIPPED). Each back end of the tap
//! (io_uring, plain read/writev) also moves bursts both ways, every frame once and in order.

// The host side of the test (making the tap up, a raw packet socket) is system calls rox-nic
// itself never makes.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use rox_nic::port::tap::{Tap, TapIo};
use rox_nic::port::{Link, LinkSpec, Port, PortConfig};

const TAP: &str = "roxt0";
/// Set to 1 to let the test skip where no network namespace with a tap can be made.
const ALLOW_SKIP_ENV: &str = "ROX_ALLOW_SKIP_TAP";
/// IEEE 802 local experimental ethertype: nothing else on the interface uses it.
const ETHERTYPE_TEST: [u8; 2] = [0x88, 0xb5];
const PORT_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xaa];

fn check(ret: libc::c_int, what: &str) {
    assert!(ret >= 0, "{what}: {}", std::io::Error::last_os_error());
}

fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain C data; all zeroes is a valid empty request.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    req
}

/// Sets the interface up (SIOCGIFFLAGS / SIOCSIFFLAGS on an AF_INET socket).
fn set_up(name: &str) {
    // SAFETY: socket() has no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    check(fd, "socket");
    // SAFETY: `fd` is a new socket owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = ifreq(name);
    // SAFETY: the ioctls read and write one ifreq that lives across the calls.
    unsafe {
        check(
            libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req),
            "SIOCGIFFLAGS",
        );
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(
            libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &mut req),
            "SIOCSIFFLAGS",
        );
    }
}

/// A packet socket bound to interface `name`, seeing every frame on it.
fn packet_socket(name: &str) -> OwnedFd {
    let all = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket() has no memory arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, all as libc::c_int) };
    check(fd, "packet socket");
    // SAFETY: `fd` is a new socket owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let cname = std::ffi::CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    assert!(index > 0, "no interface {name}");
    // SAFETY: sockaddr_ll is plain C data; all zeroes is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = all;
    addr.sll_ifindex = index as i32;
    // SAFETY: bind reads one sockaddr_ll of the given size.
    check(
        unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        },
        "bind packet socket",
    );
    // Room for a whole burst of frames (as root, beyond net.core.rmem_max).
    let rcvbuf: libc::c_int = 4 << 20;
    // SAFETY: setsockopt reads one c_int.
    check(
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&rcvbuf as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        },
        "SO_RCVBUFFORCE",
    );
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: setsockopt reads one timeval.
    check(
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        },
        "SO_RCVTIMEO",
    );
    sock
}

fn test_frame(dst: [u8; 6], src: [u8; 6], tag: &[u8]) -> Vec<u8> {
    let mut f = [&dst[..], &src, &ETHERTYPE_TEST, tag].concat();
    f.resize(60, 0);
    f
}

/// Runs `body` on a thread in a network namespace of its own (the namespace goes with the
/// thread); fails where that cannot be made, unless ROX_ALLOW_SKIP_TAP=1 lets it skip.
fn in_own_namespace(body: impl FnOnce() -> std::io::Result<()> + Send + 'static) {
    let outcome = std::thread::spawn(|| {
        rox_nic::sys::net::unshare_network_namespace()?;
        if !std::path::Path::new("/dev/net/tun").exists() {
            return Err(std::io::Error::other("no /dev/net/tun"));
        }
        body()
    })
    .join()
    .unwrap();
    if let Err(e) = outcome {
        // A test that checks nothing must not pass unseen: only an explicit opt-out skips.
        assert!(
            std::env::var(ALLOW_SKIP_ENV).as_deref() == Ok("1"),
            "cannot make a network namespace with a tap here ({e}); run as root (CAP_SYS_ADMIN, \
             /dev/net/tun, ip), or set {ALLOW_SKIP_ENV}=1 to skip this test"
        );
        println!(
            "SKIPPED ({ALLOW_SKIP_ENV}=1): cannot make a network namespace with a tap here ({e})"
        );
    }
}

/// Makes tap TAP in this thread's namespace (`ip` runs in it: a forked child inherits it).
fn make_tap() -> std::io::Result<()> {
    rox_nic::port::netns::ip(&["tuntap", "add", "dev", TAP, "mode", "tap"])
}

/// The next frame with the test ethertype on `wire` (the kernel sends its own frames too).
fn next_test_frame(wire: &OwnedFd) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: recv writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::recv(wire.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        check(n as libc::c_int, "a frame from the port");
        if buf[12..14] == ETHERTYPE_TEST {
            return buf[..n as usize].to_vec();
        }
    }
}

#[test]
fn tap_port_reads_the_mtu_and_moves_frames_both_ways() {
    in_own_namespace(|| {
        let missing = Port::open(&PortConfig::new(LinkSpec::Tap("roxt9".into())), PORT_MAC)
            .err()
            .expect("a missing tap is refused, not created");
        assert!(
            missing.to_string().contains("no interface roxt9"),
            "{missing}"
        );
        make_tap()?;
        let mut port = Port::open(&PortConfig::new(LinkSpec::Tap(TAP.into())), PORT_MAC)
            .expect("a tap port in our own namespace");
        const DEFAULT_ETHERNET_MTU: usize = 1500;
        assert_eq!(
            port.mtu(),
            DEFAULT_ETHERNET_MTU,
            "MTU read from the interface"
        );
        set_up(TAP);
        let wire = packet_socket(TAP);
        // Interface -> port.
        let inbound = test_frame(PORT_MAC, PEER_MAC, b"to the port");
        // SAFETY: send reads `inbound`.
        let n = unsafe { libc::send(wire.as_raw_fd(), inbound.as_ptr().cast(), inbound.len(), 0) };
        check(n as libc::c_int, "send on the tap");
        let give_up = Instant::now() + Duration::from_secs(5);
        'found: loop {
            assert!(Instant::now() < give_up, "the port never saw the frame");
            if port.recv().unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            // The kernel sends its own frames (IPv6 ND...) too: look for ours.
            for f in port.frames() {
                if f[12..14] == ETHERTYPE_TEST {
                    assert_eq!(f, &inbound[..]);
                    break 'found;
                }
            }
        }
        // Port -> interface.
        let outbound = test_frame(PEER_MAC, PORT_MAC, b"from the port");
        port.queue_frame(&outbound);
        assert_eq!(port.flush(), 1);
        let mut buf = [0u8; 2048];
        loop {
            // SAFETY: recv writes at most `buf.len()` bytes into `buf`.
            let n = unsafe { libc::recv(wire.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            check(n as libc::c_int, "the frame from the port");
            if buf[12..14] == ETHERTYPE_TEST {
                assert_eq!(&buf[..n as usize], &outbound[..]);
                break;
            }
        }
        Ok(())
    });
}

/// A burst each way through a port on back end `io`: 300 numbered frames written to the tap
/// arrive at the port, and 300 the port queues leave with one flush, each once and in order.
fn bursts_both_ways(io: TapIo) -> std::io::Result<()> {
    make_tap()?;
    let tap = Tap::open_with(TAP, io)?;
    assert_eq!(tap.is_uring(), io == TapIo::Uring);
    let mut port = Port::with_link(Link::Tap(tap), PORT_MAC, 1500, None, None).unwrap();
    set_up(TAP);
    let wire = packet_socket(TAP);
    const BURST: u32 = 300;
    for i in 0..BURST {
        let f = test_frame(PORT_MAC, PEER_MAC, &i.to_be_bytes());
        // SAFETY: send reads `f`.
        let n = unsafe { libc::send(wire.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
        check(n as libc::c_int, "send on the tap");
    }
    let mut seen = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(10);
    while seen.len() < BURST as usize {
        assert!(
            Instant::now() < give_up,
            "{io:?}: the port saw {} frames",
            seen.len()
        );
        if port.recv().unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for f in port.frames().filter(|f| f[12..14] == ETHERTYPE_TEST) {
            assert_eq!(f.len(), 60, "{io:?}: a whole frame");
            seen.push(u32::from_be_bytes(f[14..18].try_into().unwrap()));
        }
    }
    assert_eq!(
        seen,
        (0..BURST).collect::<Vec<_>>(),
        "{io:?}: inbound once each, in order"
    );
    for i in 0..BURST {
        port.queue_frame(&test_frame(PEER_MAC, PORT_MAC, &i.to_be_bytes()));
    }
    assert_eq!(
        port.flush(),
        BURST as usize,
        "{io:?}: the whole burst leaves"
    );
    let calls = port.stats().send_calls;
    match io {
        // Two enters: 256 writes, then 44.
        TapIo::Uring => assert_eq!(calls, 2, "one enter per {} frames", 256),
        _ => assert_eq!(calls, BURST as u64, "one writev per frame"),
    }
    for i in 0..BURST {
        let f = next_test_frame(&wire);
        assert_eq!(
            f[14..18],
            i.to_be_bytes(),
            "{io:?}: outbound frame {i} in its place"
        );
    }
    Ok(())
}

#[test]
fn io_uring_tap_moves_bursts_in_order() {
    if let Err(e) = rox_nic::sys::uring::available() {
        // The auto choice falls back to plain here, which the other tests cover.
        println!("SKIPPED: io_uring unavailable on this host ({e})");
        return;
    }
    in_own_namespace(|| bursts_both_ways(TapIo::Uring));
}

#[test]
fn plain_tap_moves_bursts_in_order() {
    in_own_namespace(|| bursts_both_ways(TapIo::Plain));
}
