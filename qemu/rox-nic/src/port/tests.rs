//! The port's unit tests: what a receive shows of the frames that crossed each kind of wire.

use super::cable::tests::{heap_frame, write_packet};
use super::*;
use crate::port::cable::Cable;

const MTU: usize = 4200;

/// RoCEv2 frames (IPv4 and IPv6, long and short) and frames of other kinds between them.
fn frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for (i, (v6, len)) in [(false, 4096), (true, 999), (false, 8), (true, 4000)]
        .into_iter()
        .enumerate()
    {
        frames.push(heap_frame(&write_packet(v6, len).1).1);
        frames.push((0..60 + i * 7).map(|b| (b * 3 + i) as u8).collect());
    }
    frames
}

/// Queues `frames` on `from`, flushes, and receives on `to` until they are all there (a few
/// seconds at most): each with whether the wire folded its ICRC run and the fold proves it,
/// and whether it is a RoCEv2 packet.
fn cross(from: &mut Port, to: &mut Port, frames: &[Vec<u8>]) -> Vec<(Vec<u8>, bool, bool)> {
    frames.iter().for_each(|f| from.queue_frame(f));
    assert_eq!(from.flush(), frames.len());
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < frames.len() && start.elapsed() < Duration::from_secs(5) {
        to.recv().unwrap();
        got.extend(to.frames_folded().map(|(f, fold)| {
            let parsed = crate::roce::wire::parse_packet(&f[ETH_HEADER_LEN..]);
            let ip_len = parsed.as_ref().map_or(0, |p| p.ip_header.len());
            let folded = fold.is_some_and(|fold| fold.proves(ip_len));
            (f.to_vec(), folded, parsed.is_ok())
        }));
        to.release_frames();
    }
    got
}

/// A receive shows every frame that crossed, in order, byte for byte, through either walk
/// of [`received`]: a cable's lent copies, each long RoCEv2 frame with the fold its copy made
/// where the copy fuses one, and a socket's batch, without folds.
#[test]
fn a_receive_shows_every_frame_in_order_with_the_folds_its_wire_made() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cable.sock");
    let port = |link| Port::with_link(link, [2, 0, 0, 0, 0, 9], MTU, None, None).unwrap();
    let mut a = port(Link::Cable(Cable::listen(&path).unwrap()));
    let mut b = port(Link::Cable(Cable::connect(&path).unwrap()));
    let start = Instant::now();
    while !(a.link().is_connected() && b.link().is_connected()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the ends did not meet"
        );
        a.recv().unwrap();
        b.recv().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let frames = frames();
    let got = cross(&mut a, &mut b, &frames);
    let bytes: Vec<Vec<u8>> = got.iter().map(|(f, ..)| f.clone()).collect();
    assert_eq!(bytes, frames, "the cable: every frame, in order");
    assert_eq!(got.iter().filter(|(.., roce)| *roce).count(), 4);
    for (f, folded, roce) in &got {
        let want = *roce && crate::sys::crc32::copy_folds(f.len());
        assert_eq!(*folded, want, "a {} B frame's fold", f.len());
    }

    let (x, y) = (dir.path().join("x.sock"), dir.path().join("y.sock"));
    let mut c = port(Link::Dgram(socket::Dgram::open(&x, &y).unwrap()));
    let mut d = port(Link::Dgram(socket::Dgram::open(&y, &x).unwrap()));
    let got = cross(&mut c, &mut d, &frames);
    let bytes: Vec<Vec<u8>> = got.iter().map(|(f, ..)| f.clone()).collect();
    assert_eq!(bytes, frames, "the socket: every frame, in order");
    assert!(
        got.iter().all(|(_, folded, _)| !folded),
        "a socket folds nothing"
    );
}
