//! A whole device on a tap with segmentation offload, in a network namespace of the test's own
//! thread: a UDP socket of the namespace sends a segmentation request (UDP_SEGMENT) out through
//! the tap. A request for segments shorter than a BTH and ICRC is refused whole by the port and
//! reaches `QUERY_STATS` as `STAT_PORT_RX_GSO_REFUSED` (rox.ko's `port_rx_gso_refused`), once
//! per request; a request the port takes is cut into frames and not counted. The tap has IPv6
//! off, so the kernel sends nothing of its own on it (router solicitations, MLD reports) that
//! the frame counts could mistake for the test's. Needs what
//! tests/port_tap.rs needs, io_uring and a kernel with the tap's USO offload (6.2 on);
//! ROX_ALLOW_SKIP_TAP=1 lets it skip where that is missing. Its own test binary: it sets
//! ROX_TAP_GSO.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use rox_nic::device::LinkSpec;
use rox_nic::port::netns::ip;
use rox_nic::port::tap::{Tap, TapIo, TAP_GSO_ENV, TAP_IO_ENV};
use rox_nic::testkit::*;
use rox_uapi::admin::*;

const TAP: &str = "roxgso0";
const HOST_IP: &str = "10.77.0.1";
const DEVICE_IP: &str = "10.77.0.2";
/// The devices of this test own GIDs 127.0.15.x.
const SUBNET: u8 = 15;
const ALLOW_SKIP_ENV: &str = "ROX_ALLOW_SKIP_TAP";

/// The tap, up, with the host's address and a neighbour entry for the device's (no ARP: the
/// device has no netdev to answer it), and IPv6 off before it is up: the only frames on it are
/// the test's.
fn tap() -> std::io::Result<()> {
    rox_nic::sys::net::unshare_network_namespace()?;
    ip(&["tuntap", "add", TAP, "mode", "tap"])?;
    // /proc/sys/net is the opening thread's namespace's. No such file: a kernel without IPv6,
    // which sends no IPv6 frames either.
    match std::fs::write(format!("/proc/sys/net/ipv6/conf/{TAP}/disable_ipv6"), "1") {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    ip(&["link", "set", TAP, "up"])?;
    ip(&["addr", "add", &format!("{HOST_IP}/24"), "dev", TAP])?;
    ip(&[
        "neigh",
        "add",
        DEVICE_IP,
        "lladdr",
        "52:54:00:77:00:02",
        "dev",
        TAP,
    ])
}

/// Waits until the kernel sends on the tap: after the device attached, the link watch (a
/// deferred work item, up to a second later, more on a loaded host) turns the carrier into
/// operational state UP and swaps the "noop" qdisc, which drops every packet silently, for a
/// real one; a request sent before that never reaches the device.
fn wait_link_up() {
    let give_up = Instant::now() + TIMEOUT;
    loop {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "dev", TAP])
            .output()
            .expect("ip link show");
        let link = String::from_utf8_lossy(&out.stdout);
        if link.contains(" state UP ") && !link.contains(" qdisc noop ") {
            return;
        }
        assert!(Instant::now() < give_up, "tap {TAP} not up: {link}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `len` bytes to the device's address as one request for segments of `segment` bytes.
fn send_request(len: usize, segment: u16) {
    let sock = UdpSocket::bind((HOST_IP, 0)).expect("a UDP socket on the tap's address");
    rox_nic::sys::net::set_int_option(
        sock.as_raw_fd(),
        libc::SOL_UDP,
        libc::UDP_SEGMENT,
        libc::c_int::from(segment),
    )
    .unwrap_or_else(|e| panic!("UDP_SEGMENT {segment}: {e}"));
    let sent = sock
        .send_to(&vec![0x5a; len], (DEVICE_IP, 4791))
        .unwrap_or_else(|e| panic!("{len} B in segments of {segment}: {e}"));
    assert_eq!(sent, len);
}

fn refused_requests_are_counted_once_each() -> Result<(), String> {
    tap().map_err(|e| format!("no network namespace with a tap here ({e})"))?;
    rox_nic::sys::uring::available().map_err(|e| format!("io_uring unavailable ({e})"))?;
    if !Tap::open_with_gso(TAP, TapIo::Uring, true)
        .map_err(|e| format!("tap {TAP}: {e}"))?
        .is_gso()
    {
        return Err("this kernel's tap takes no USO offload".into());
    }
    std::env::set_var(TAP_IO_ENV, "uring");
    std::env::set_var(TAP_GSO_ENV, "on");
    let mut d = port_device(LinkSpec::Tap(TAP.into()), SUBNET, 1, None);
    wait_link_up();
    assert_eq!(d.query_stats()[STAT_PORT_RX_GSO_REFUSED], 0);

    // 200 bytes in segments of 8: shorter than a BTH and ICRC, refused whole.
    send_request(200, 8);
    let s = d.wait_stat(STAT_PORT_RX_GSO_REFUSED, 1);
    assert_eq!(s[STAT_PORT_RX_GSO_REFUSED], 1, "one request, counted once");
    send_request(300, 15);
    d.wait_stat(STAT_PORT_RX_GSO_REFUSED, 2);

    // 2000 bytes in segments of 500: taken, cut into four frames, not counted. Behind it a
    // request that is refused (a marker: once it counts, the 2000 bytes were looked at), then
    // 1000 bytes in segments of 500 (two frames: once they arrive, the port has seen all three
    // and the counters are final, so a wrongly counted request shows whatever the timing).
    let frames = d.query_stats()[STAT_PORT_RX_FRAMES];
    send_request(2000, 500);
    send_request(200, 8);
    send_request(1000, 500);
    d.wait_stat(STAT_PORT_RX_GSO_REFUSED, 3);
    let s = d.wait_stat(STAT_PORT_RX_FRAMES, frames + 6);
    assert_eq!(
        s[STAT_PORT_RX_GSO_REFUSED], 3,
        "only the marker counted among the last three requests"
    );
    assert_eq!(
        s[STAT_PORT_RX_FRAMES],
        frames + 6,
        "the taken requests' frames and nothing else"
    );
    Ok(())
}

#[test]
fn a_refused_segmentation_request_reaches_query_stats() {
    let outcome = std::thread::spawn(refused_requests_are_counted_once_each)
        .join()
        .unwrap();
    if let Err(e) = outcome {
        assert!(
            std::env::var(ALLOW_SKIP_ENV).as_deref() == Ok("1"),
            "{e}; run as root on Linux 6.2 or later, or set {ALLOW_SKIP_ENV}=1 to skip this test"
        );
        println!("SKIPPED ({ALLOW_SKIP_ENV}=1): {e}");
    }
}
