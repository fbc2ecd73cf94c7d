//! The tap port, in a network namespace of the test's own thread (network namespaces are per
//! thread; the namespace goes away with the thread): the port attaches to a tap made with
//! `ip tuntap`, reads its MTU, and moves frames both ways between itself and a packet socket
//! on the interface. Needs CAP_SYS_ADMIN, /dev/net/tun and `ip`; without them the test fails,
//! unless ROX_ALLOW_SKIP_TAP=1 lets it skip (printing SKIPPED). Each back end of the tap
//! (io_uring with and without the segmentation offload's `virtio_net_hdr`, plain read/writev)
//! also moves bursts both ways, every frame once and in order; each case names its offload
//! setting, so `ROX_TAP_GSO` in the environment changes none of them. The io_uring cases fail
//! where io_uring is unavailable unless ROX_ALLOW_SKIP_URING=1 lets them skip.

use std::fs::File;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rox_nic::port::netns;
use rox_nic::port::tap::{Tap, TapIo};
use rox_nic::port::{Link, LinkSpec, Port, PortConfig};

const TAP: &str = "roxt0";
/// Set to 1 to let the test skip where no network namespace with a tap can be made.
const ALLOW_SKIP_ENV: &str = "ROX_ALLOW_SKIP_TAP";
/// Lets the io_uring cases skip where io_uring is unavailable (as `sys::uring`'s tests).
const ALLOW_SKIP_URING_ENV: &str = "ROX_ALLOW_SKIP_URING";
/// IEEE 802 local experimental ethertype: nothing else on the interface uses it.
const ETHERTYPE_TEST: [u8; 2] = [0x88, 0xb5];
const PORT_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xaa];

/// Sets the interface up.
fn set_up(name: &str) {
    netns::ip(&["link", "set", name, "up"]).expect("the tap up");
}

/// A packet socket bound to interface `name`, seeing every frame on it (room for a whole burst,
/// a receive waits at most a second).
fn packet_socket(name: &str) -> File {
    File::from(
        rox_nic::sys::net::packet_socket(name, 4 << 20, Duration::from_secs(1))
            .unwrap_or_else(|e| panic!("a packet socket on {name}: {e}")),
    )
}

/// Sends `frame` out of the interface `wire` is bound to, whole.
fn send(mut wire: &File, frame: &[u8]) {
    let n = wire.write(frame).expect("send on the tap");
    assert_eq!(n, frame.len(), "sent whole");
}

/// The next frame on `wire`.
fn recv(mut wire: &File) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let n = wire.read(&mut buf).expect("a frame from the port");
    buf[..n].to_vec()
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
fn next_test_frame(wire: &File) -> Vec<u8> {
    loop {
        let f = recv(wire);
        if f[12..14] == ETHERTYPE_TEST {
            return f;
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
        send(&wire, &inbound);
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
        assert_eq!(next_test_frame(&wire), outbound);
        Ok(())
    });
}

/// A burst each way through a port on back end `io`, the offload on if `gso`: 300 numbered
/// frames written to the tap arrive at the port, and 300 the port queues leave with one flush,
/// each once and in order.
fn bursts_both_ways(io: TapIo, gso: bool) -> std::io::Result<()> {
    make_tap()?;
    let tap = Tap::open_with_gso(TAP, io, gso)?;
    assert_eq!(tap.is_uring(), io == TapIo::Uring);
    assert_eq!(
        tap.is_gso(),
        gso && io == TapIo::Uring,
        "{io:?}: offload as asked"
    );
    let mut port = Port::with_link(Link::Tap(tap), PORT_MAC, 1500, None, None).unwrap();
    set_up(TAP);
    let wire = packet_socket(TAP);
    const BURST: u32 = 300;
    for i in 0..BURST {
        let f = test_frame(PORT_MAC, PEER_MAC, &i.to_be_bytes());
        send(&wire, &f);
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
    match (io, gso) {
        // Two enters: 256 writes, then 44.
        (TapIo::Uring, false) => assert_eq!(calls, 2, "one enter per {} frames", 256),
        // Frames that are no RoCEv2 run go one by one, each behind its header, in bursts too.
        (TapIo::Uring, true) => assert!(calls <= 2, "{calls} enters for {BURST} frames"),
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

/// [`bursts_both_ways`] on the io_uring back end, with the offload or without. Where io_uring
/// is unavailable the tap's auto choice falls back to plain (which the plain case covers): this
/// fails there unless ROX_ALLOW_SKIP_URING=1 lets it skip, as `sys::uring`'s own tests do.
fn uring_bursts(gso: bool) {
    if let Err(e) = rox_nic::sys::uring::available() {
        assert!(
            std::env::var(ALLOW_SKIP_URING_ENV).as_deref() == Ok("1"),
            "io_uring unavailable on this host ({e}); {ALLOW_SKIP_URING_ENV}=1 skips"
        );
        println!("SKIPPED ({ALLOW_SKIP_URING_ENV}=1): io_uring unavailable on this host ({e})");
        return;
    }
    in_own_namespace(move || bursts_both_ways(TapIo::Uring, gso));
}

#[test]
fn io_uring_tap_moves_bursts_in_order() {
    uring_bursts(false);
}

#[test]
fn io_uring_tap_with_the_offload_moves_bursts_in_order() {
    uring_bursts(true);
}

#[test]
fn plain_tap_moves_bursts_in_order() {
    in_own_namespace(|| bursts_both_ways(TapIo::Plain, false));
}
