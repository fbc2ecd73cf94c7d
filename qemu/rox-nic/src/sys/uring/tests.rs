use super::*;
use std::os::fd::{AsRawFd, OwnedFd};

fn socketpair(kind: libc::c_int) -> (OwnedFd, OwnedFd) {
    use std::os::unix::net::{UnixDatagram, UnixStream};
    if kind == libc::SOCK_STREAM {
        let (a, b) = UnixStream::pair().unwrap();
        return (a.into(), b.into());
    }
    let (a, b) = UnixDatagram::pair().unwrap();
    (a.into(), b.into())
}

/// A pipe through libc: `std::io::pipe` needs Rust 1.87, the root's cargo is 1.85.
fn pipe() -> (OwnedFd, OwnedFd) {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the array it is given.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just created by pipe2 and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: fcntl on an fd owned by the caller.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

fn read_some(fd: &OwnedFd, buf: &mut [u8]) -> isize {
    // SAFETY: read writes at most `buf.len()` bytes into `buf`.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
}

fn write_all(fd: &OwnedFd, bytes: &[u8]) {
    // SAFETY: write reads `bytes`.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(n, bytes.len() as isize, "{}", io::Error::last_os_error());
}

/// Frame `i`: a 4-byte header with its number and a body whose length and bytes vary.
fn numbered(i: u32, body_len: usize) -> (Vec<u8>, Vec<u8>) {
    let body = (0..body_len).map(|k| (i as usize + k) as u8).collect();
    (i.to_be_bytes().to_vec(), body)
}

fn frame_refs(frames: &[(Vec<u8>, Vec<u8>)]) -> Vec<FrameRef<'_>> {
    Vec::from_iter(frames.iter().map(|(head, body)| FrameRef { head, body }))
}

/// Whether io_uring works here; where it does not, fails unless ROX_ALLOW_SKIP_URING=1
/// lets the test skip (the plain back end covers such hosts).
fn available_or_skip() -> bool {
    let Err(e) = available() else { return true };
    let env = "ROX_ALLOW_SKIP_URING";
    let allowed = std::env::var(env).as_deref() == Ok("1");
    assert!(allowed, "io_uring: {e}; {env}=1 skips");
    println!("SKIPPED ({env}=1): io_uring unavailable here ({e})");
    false
}

#[test]
fn a_long_burst_leaves_in_order_one_enter_per_chunk() {
    if !available_or_skip() {
        return;
    }
    let (r, w) = pipe();
    let e = FrameRing::new(w.as_raw_fd()).err().unwrap();
    assert!(e.to_string().contains("O_NONBLOCK"), "{e}");
    set_nonblocking(&w);
    let mut ring = FrameRing::new(w.as_raw_fd()).unwrap();
    let frames: Vec<_> = (0..300).map(|i| numbered(i, 40)).collect();
    let refs = frame_refs(&frames);
    let mut results = Vec::new();
    let calls = ring.send(&refs, &mut results).unwrap();
    assert_eq!(calls, 2, "300 writes in chunks of {SQ_ENTRIES}: two enters");
    assert_eq!(results, vec![44; 300]);
    // A pipe keeps the bytes in write order: every frame once, in order, whole.
    let mut got = vec![0u8; 300 * 44];
    let mut at = 0;
    while at < got.len() {
        let n = read_some(&r, &mut got[at..]);
        assert!(n > 0);
        at += n as usize;
    }
    for (i, (h, b)) in frames.iter().enumerate() {
        assert_eq!(&got[i * 44..i * 44 + 4], &h[..], "frame {i} in its place");
        assert_eq!(&got[i * 44 + 4..(i + 1) * 44], &b[..]);
    }
}

#[test]
fn a_full_wire_stops_the_burst_at_a_clean_prefix() {
    if !available_or_skip() {
        return;
    }
    let (ours, peer) = socketpair(libc::SOCK_DGRAM);
    set_nonblocking(&ours);
    let fd = ours.as_raw_fd();
    assert!(crate::sys::net::set_socket_int(fd, libc::SO_SNDBUF, 4096));
    let mut ring = FrameRing::new(ours.as_raw_fd()).unwrap();
    let frames: Vec<_> = (0..200).map(|i| numbered(i, 200)).collect();
    let refs = frame_refs(&frames);
    let mut results = Vec::new();
    ring.send(&refs, &mut results).unwrap();
    let sent = results.iter().take_while(|&&r| r == 204).count();
    assert!(sent > 0 && sent < 200, "a small buffer takes some: {sent}");
    assert!(
        results[sent..].iter().all(|&r| r == -libc::EAGAIN),
        "after the first refusal only refusals (nobody read): {results:?}"
    );
    set_nonblocking(&peer);
    let mut buf = [0u8; 512];
    for i in 0..sent as u32 {
        let n = read_some(&peer, &mut buf);
        assert_eq!(n, 204);
        assert_eq!(buf[..4], i.to_be_bytes(), "datagram {i} in order");
    }
    let beyond = read_some(&peer, &mut buf);
    assert!(beyond < 0, "no datagram beyond those reported sent");
}

#[test]
fn the_armed_read_delivers_every_frame_once_in_order_across_re_arms() {
    if !available_or_skip() {
        return;
    }
    let (ours, peer) = socketpair(libc::SOCK_DGRAM);
    set_nonblocking(&ours);
    let mut ring = FrameRing::new(ours.as_raw_fd()).unwrap();
    const SLOT: usize = 301;
    // Nothing there: the first look arms the read (one enter); later empty looks are free.
    let look = |ring: &mut FrameRing| ring.recv(SLOT, 64, |_| panic!("none")).unwrap();
    assert_eq!(look(&mut ring), (0, 1));
    assert_eq!(look(&mut ring), (0, 0));
    // More frames than receive buffers, so the read runs out and is armed again.
    let total = 3 * RX_BUFFERS as u32 + 17;
    let writer = std::thread::spawn(move || {
        for i in 0..total {
            let (h, b) = numbered(i, (i as usize * 7) % 290);
            write_all(&peer, &[h, b].concat());
        }
        // One longer than a slot: shows as a slot's length.
        write_all(&peer, &vec![0xee; SLOT + 50]);
        peer
    });
    let mut got: Vec<Vec<u8>> = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(20);
    while got.len() < total as usize + 1 {
        let late = Instant::now() > give_up;
        assert!(!late, "only {} frames", got.len());
        let (n, _) = ring
            .recv(SLOT, 64, |f| {
                got.push(f.to_vec());
                true
            })
            .unwrap();
        assert!(n <= 64);
        if n == 0 {
            std::thread::yield_now();
        }
    }
    let _peer = writer.join().unwrap();
    for (i, f) in got[..total as usize].iter().enumerate() {
        let (h, b) = numbered(i as u32, (i * 7) % 290);
        assert_eq!(f, &[h, b].concat(), "frame {i}: once, in order, whole");
    }
    let oversized = got[total as usize].len();
    assert_eq!(oversized, SLOT, "an oversized frame shows as a slot");
    assert_eq!(look(&mut ring).0, 0, "nothing more");
}

#[test]
fn another_thread_is_refused_and_drop_there_is_safe() {
    if !available_or_skip() {
        return;
    }
    let (ours, _peer) = socketpair(libc::SOCK_DGRAM);
    set_nonblocking(&ours);
    let mut ring = FrameRing::new(ours.as_raw_fd()).unwrap();
    ring.recv(100, 8, |_| true).unwrap();
    std::thread::spawn(move || {
        let e = ring.recv(100, 8, |_| true).unwrap_err();
        assert!(e.to_string().contains("thread"), "{e}");
        let mut results = Vec::new();
        assert!(ring.send(&[], &mut results).is_err());
        // Dropped here, armed, on a thread that cannot cancel: the buffers are leaked.
    })
    .join()
    .unwrap();
}

#[test]
fn drop_after_the_read_ran_out_and_a_send_reaped_its_end_does_not_hang() {
    if !available_or_skip() {
        return;
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (ours, peer) = socketpair(libc::SOCK_STREAM);
        set_nonblocking(&ours);
        const SLOT: usize = 64;
        let mut ring = FrameRing::new(ours.as_raw_fd()).unwrap();
        let armed = ring.recv(SLOT, 64, |_| true).unwrap();
        assert_eq!(armed, (0, 1), "armed, nothing yet");
        // More than the buffers: the read takes RX_BUFFERS reads, then ends with ENOBUFS.
        write_all(&peer, &vec![7u8; SLOT * (RX_BUFFERS as usize + 40)]);
        while ring.ring.completion().len() <= RX_BUFFERS as usize {
            ring.enter(0, 0, true);
        }
        assert_eq!(ring.recv(SLOT, 64, |_| true).unwrap().0, 64);
        // The writer's reap sets the read's remaining completions, its end too, aside.
        let mut results = Vec::new();
        let one = [(b"x".to_vec(), vec![])];
        ring.send(&frame_refs(&one), &mut results).unwrap();
        assert_eq!(results, [1]);
        drop(ring);
        done_tx.send(()).unwrap();
    });
    let waited = done_rx.recv_timeout(Duration::from_secs(20));
    assert!(waited.is_ok(), "the drop hung (or the scenario failed)");
}
