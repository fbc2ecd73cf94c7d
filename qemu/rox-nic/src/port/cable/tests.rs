//! The cable's unit tests: frames across both ways, wake-ups, cuts and hostile peers.

use super::hello::hello_bytes;
use super::*;

/// Polls `c` until `want` frames arrived (or a few seconds passed).
fn receive(c: &mut Cable, want: usize) -> Vec<Vec<u8>> {
    let mut batch = RxBatch::new(CABLE_MAX_FRAME);
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < want && start.elapsed() < Duration::from_secs(5) {
        c.recv(&mut batch).unwrap();
        got.extend(batch.frames().map(<[u8]>::to_vec));
    }
    got
}

/// Drives both ends until they are connected (a few seconds at most).
fn handshake(a: &mut Cable, b: &mut Cable) {
    let start = Instant::now();
    while !(a.is_connected() && b.is_connected()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the ends did not meet"
        );
        a.recv(&mut RxBatch::new(64)).unwrap();
        b.recv(&mut RxBatch::new(64)).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A listening and a connected end in `dir`.
fn pair(dir: &Path) -> (Cable, Cable) {
    let path = dir.join("cable.sock");
    let mut listener = Cable::listen(&path).unwrap();
    let mut connector = Cable::connect(&path).unwrap();
    assert!(
        !connector.is_connected(),
        "the hello comes when the listener runs"
    );
    handshake(&mut listener, &mut connector);
    (listener, connector)
}

/// The transmit buffers on `l`'s free list.
fn free(l: &Cable) -> usize {
    l.wire.as_ref().unwrap().slots.free().len()
}

fn frame(i: usize) -> Vec<u8> {
    (0..14 + i % 4000).map(|b| (b + i) as u8).collect()
}

#[test]
fn frames_cross_both_ways_intact_and_a_full_ring_pushes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    let frames: Vec<Vec<u8>> = (0..RING_SLOTS as usize + 100).map(frame).collect();
    let refs: Vec<FrameRef> = frames.iter().map(|f| FrameRef::whole(f)).collect();
    let sent = l.send(&refs);
    assert_eq!(sent.taken, RING_SLOTS as usize, "a full ring takes no more");
    assert_eq!(sent.dropped, 0);
    let mut got = receive(&mut c, RING_SLOTS as usize);
    let rest = l.send(&refs[sent.taken..]);
    assert_eq!((rest.taken, rest.dropped), (100, 0));
    got.extend(receive(&mut c, 100));
    assert_eq!(got, frames, "every frame, in order, byte for byte");
    let back = c.send(&refs[..3]);
    assert_eq!(back.taken, 3);
    assert_eq!(receive(&mut l, 3), frames[..3].to_vec());
}

#[test]
fn an_idle_end_sleeps_on_its_fd_and_the_doorbell_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    // Arm: an empty receive raises the wake flag; the fd is quiet.
    assert_eq!(c.recv(&mut RxBatch::new(64)).unwrap(), 0);
    let mut fds = [libc::pollfd {
        fd: c.fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    sys::poll::ppoll(&mut fds, Some(Duration::from_millis(20)));
    assert_eq!(fds[0].revents, 0, "an idle cable must not wake its end");
    let f = frame(7);
    assert_eq!(l.send(&[FrameRef::whole(&f)]).taken, 1);
    sys::poll::ppoll(&mut fds, Some(Duration::from_secs(2)));
    assert_ne!(
        fds[0].revents & libc::POLLIN,
        0,
        "the frame rings the doorbell"
    );
    assert_eq!(receive(&mut c, 1), vec![f]);
    // Drained and armed again: quiet once more.
    assert_eq!(c.recv(&mut RxBatch::new(64)).unwrap(), 0);
    fds[0].revents = 0;
    sys::poll::ppoll(&mut fds, Some(Duration::from_millis(20)));
    assert_eq!(fds[0].revents, 0, "the doorbell was drained");
}

#[test]
fn a_frame_longer_than_a_slot_is_lost_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    let long = vec![0u8; CABLE_MAX_FRAME + 1];
    let ok = frame(3);
    let sent = l.send(&[FrameRef::whole(&long), FrameRef::whole(&ok)]);
    assert_eq!((sent.taken, sent.dropped), (2, 1));
    assert_eq!(receive(&mut c, 1), vec![ok]);
}

#[test]
fn a_peer_that_goes_away_cuts_the_cable_and_a_new_one_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, c) = pair(dir.path());
    drop(c);
    let start = Instant::now();
    while l.is_connected() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the cut was not noticed"
        );
        l.recv(&mut RxBatch::new(64)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let f = frame(1);
    assert_eq!(l.send(&[FrameRef::whole(&f)]), Sent::all_lost(1));
    let mut again = Cable::connect(&dir.path().join("cable.sock")).unwrap();
    handshake(&mut l, &mut again);
    assert_eq!(l.send(&[FrameRef::whole(&f)]).taken, 1);
    assert_eq!(receive(&mut again, 1), vec![f]);
}

#[test]
fn a_peer_that_breaks_the_ring_counts_cuts_the_cable_without_harm() {
    let dir = tempfile::tempdir().unwrap();
    let (l, mut c) = pair(dir.path());
    let w = l.wire.as_ref().unwrap();
    // The listener's transmit ring claims more frames than it has slots.
    w.map
        .atomic_u32(w.tx.base + HEAD)
        .store(RING_SLOTS + 7, Ordering::Release);
    assert_eq!(c.recv(&mut RxBatch::new(64)).unwrap(), 0);
    assert!(!c.is_connected(), "nonsense counts cut the cable");
    // A wild length word in a slot does too.
    let (mut l2, mut c2) = {
        let d = tempfile::tempdir().unwrap();
        let p = pair(d.path());
        drop(l);
        p
    };
    let f = frame(2);
    l2.send(&[FrameRef::whole(&f)]);
    let w = l2.wire.as_ref().unwrap();
    // A descriptor naming a buffer past the ring's does too.
    w.map.write(w.tx.descriptor(0), &u32::MAX.to_ne_bytes());
    assert_eq!(c2.recv(&mut RxBatch::new(64)).unwrap(), 0);
    assert!(!c2.is_connected());
}

#[test]
fn a_connector_refuses_a_hello_that_is_not_a_cable() {
    let (x, y) = UnixStream::pair().unwrap();
    let plain = sys::fd::memfd(c"not-sealed").unwrap();
    plain
        .set_len(region_len(RING_SLOTS, SLOT_LEN) as u64)
        .unwrap();
    let fd = plain.as_raw_fd();
    sys::fdpass::send_with_fds(&x, &hello_bytes(RING_SLOTS, SLOT_LEN), &[fd, fd, fd]).unwrap();
    let e = take_hello(y).err().expect("an unsealed memfd is refused");
    assert!(e.to_string().contains("sealed"), "{e}");
    let (x, y) = UnixStream::pair().unwrap();
    x.set_nonblocking(false).unwrap();
    sys::fdpass::send_with_fds(&x, b"GET / HTTP/1.0\r\n", &[]).unwrap();
    assert!(take_hello(y).is_err());
}

/// A WRITE packet of `len` payload bytes from 10.9.0.1 to .2, IPv4 or IPv6, built in this
/// thread's lender's buffer if it has one; and the same packet built on the heap.
pub(in crate::port) fn write_packet(v6: bool, len: usize) -> (Packet, Vec<u8>) {
    use crate::roce::wire::{self, opcode, Bth, FlushIcrc, Headers, IpInfo, Reth};
    use crate::roce::{Key, Psn, Qpn};
    let gid = |last: u8| {
        if v6 {
            let mut g = [0xfdu8; 16];
            g[15] = last;
            g
        } else {
            wire::ipv4_gid([10, 9, 0, last])
        }
    };
    let ip = IpInfo {
        sgid: gid(1),
        dgid: gid(2),
        traffic_class: 2,
        hop_limit: 64,
        flow_label: 7,
        src_port: 0xc0de,
    };
    let mut hdr = Headers::new(Bth {
        opcode: opcode::RC_WRITE_FIRST,
        solicited: false,
        pkey: wire::DEFAULT_PKEY,
        dest_qpn: Qpn::new(0x12).unwrap(),
        ack_req: false,
        psn: Psn::new(77).unwrap(),
    });
    hdr.reth = Some(Reth {
        va: 0x1000,
        rkey: Key::from_raw(0x55),
        dma_len: 1 << 20,
    });
    let payload: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
    let built = wire::build_packet_filled(&ip, &hdr, len, FlushIcrc::Iba, |out| {
        out.copy_from_slice(&payload);
        Ok::<(), ()>(())
    })
    .unwrap();
    (built, wire::build_packet(&ip, &hdr, &payload))
}

/// The frame the port's copying path makes of `packet`: its header and its bytes.
pub(in crate::port) fn heap_frame(packet: &[u8]) -> (EthHeader, Vec<u8>) {
    let head = super::super::frame::roce_header(&[2, 0, 0, 0, 0, 2], &[2, 0, 0, 0, 0, 1], packet);
    (head, [&head[..], packet].concat())
}

/// A packet built straight in a transmit slot (the engine's path while the cable is this
/// thread's lender) crosses byte for byte as the packet built on the heap and copied in, for
/// IPv4 and IPv6 and odd lengths; it is published where it lies, and a slot it never went
/// out in goes back to the free list.
#[test]
fn a_frame_built_in_a_slot_is_the_frame_the_copying_path_sends() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    let lender = l.wire.as_ref().unwrap().lender.clone();
    let all = free(&l);
    for (v6, len) in [(false, 4096), (true, 4096), (false, 1021), (true, 3001)] {
        let before = free(&l);
        pool::lend_from(Some(lender.clone()));
        let (mut lent, heap) = write_packet(v6, len);
        pool::stop_lending(&lender);
        assert!(lent.is_lent(), "built in a slot");
        assert_eq!(&lent[..], &heap[..], "v6 {v6}, {len} B: the same packet");
        assert_eq!(free(&l), before - 1);
        let (head, whole) = heap_frame(&heap);
        lent.header_room().unwrap().copy_from_slice(&head);
        let mut queue = vec![(head, lent), (head, Packet::from(heap.clone()))];
        assert_eq!(l.send_packets(&mut queue).taken, 2);
        assert!(queue[0].1.is_empty(), "published in place, not copied");
        assert_eq!(receive(&mut c, 2), vec![whole.clone(), whole]);
    }
    // Read and freed by the peer: every buffer is free again once the sender looks.
    l.send_packets(&mut []);
    let w = l.wire.as_mut().unwrap();
    let slots = w.slots.clone();
    w.reclaim(&mut slots.free()).unwrap();
    assert_eq!(free(&l), all);
    pool::lend_from(Some(lender.clone()));
    let (unsent, _) = write_packet(false, 4096);
    pool::stop_lending(&lender);
    assert_eq!(free(&l), all - 1);
    drop(unsent);
    assert_eq!(free(&l), all, "a slot never sent goes back");
}

/// Frames lent (copied out of their slots) are the bytes a copying receive gets, and
/// parse to the payload sent; their slots stay the receiver's until it releases them.
#[test]
fn a_frame_read_from_its_slot_is_the_frame_a_copying_receive_gets() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    let packets: Vec<Vec<u8>> = [(false, 4096), (true, 999)]
        .into_iter()
        .map(|(v6, len)| write_packet(v6, len).1)
        .collect();
    let frames: Vec<Vec<u8>> = packets.iter().map(|p| heap_frame(p).1).collect();
    let refs: Vec<FrameRef> = frames.iter().map(|f| FrameRef::whole(f)).collect();
    assert_eq!(l.send(&refs).taken, 2);
    let start = Instant::now();
    while c.recv_lent().unwrap() == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "nothing arrived");
    }
    let lent: Vec<Vec<u8>> = c.lent_frames().map(|(f, _)| f.to_vec()).collect();
    assert_eq!(lent, frames);
    for ((f, fold), p) in c.lent_frames().zip(&packets) {
        let parsed = crate::roce::wire::parse_packet(&f[ETH_HEADER_LEN..]).expect("parses");
        let sent = crate::roce::wire::parse_packet(p).unwrap();
        assert_eq!(parsed.payload, sent.payload);
        // Folded as it was copied (where the copy fuses): the ICRC proved over the copy.
        let ip_len = parsed.ip_header.len();
        let folds = crate::sys::crc32::copy_folds(f.len());
        assert_eq!(fold.is_some_and(|f| f.proves(ip_len)), folds, "{fold:?}");
    }
    let tail = |c: &Cable| {
        let w = c.wire.as_ref().unwrap();
        w.map.atomic_u32(w.rx.base + TAIL).load(Ordering::Acquire)
    };
    assert_eq!(tail(&c), 0, "lent slots are not freed yet");
    c.release_lent();
    assert_eq!(tail(&c), 2);
    assert_eq!(l.send(&refs).taken, 2);
    assert_eq!(
        receive(&mut c, 2),
        frames,
        "the copying receive: the same bytes"
    );
}

/// A peer that rewrites a frame's buffer after publishing it cannot change the frame the
/// receiver already took: the port checks and places a copy, never the shared bytes.
#[test]
fn a_frame_rewritten_by_the_peer_after_the_receive_stays_as_received() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    let sent = frame(3999);
    assert_eq!(l.send(&[FrameRef::whole(&sent)]).taken, 1);
    let start = Instant::now();
    while c.recv_lent().unwrap() == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "nothing arrived");
    }
    let w = l.wire.as_ref().unwrap();
    let mut desc = [0u8; DESC_LEN];
    assert!(w.map.read(w.tx.descriptor(0), &mut desc));
    let id = u32::from_ne_bytes(desc[..4].try_into().unwrap());
    assert!(w.map.write(w.tx.buffer(id), &vec![0xee; sent.len()]));
    let got: Vec<Vec<u8>> = c.lent_frames().map(|(f, _)| f.to_vec()).collect();
    assert_eq!(got, vec![sent], "the frame as it was when received");
}

/// A ring position still holding a buffer never takes another: with as many buffers as
/// positions no free buffer exists then, and one that did (a bug) is given back, not lost.
#[test]
fn a_full_ring_refuses_a_buffer_and_keeps_the_ones_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, _c) = pair(dir.path());
    let frames: Vec<Vec<u8>> = (0..RING_SLOTS as usize).map(frame).collect();
    let refs: Vec<FrameRef> = frames.iter().map(|f| FrameRef::whole(f)).collect();
    assert_eq!(l.send(&refs).taken, RING_SLOTS as usize);
    let w = l.wire.as_mut().unwrap();
    assert!(w.slots.free().is_empty(), "every buffer is in the ring");
    let spare = Arc::new(SharedMapping::anonymous(4096).unwrap());
    let extra = spare.carve(0, 4096, 1).unwrap().pop().unwrap();
    let head = w.tx_head;
    let back = w.push(extra, 64).expect_err("a full ring refuses");
    assert!(back.is_in(&spare), "the refused buffer comes back");
    assert_eq!(w.tx_head, head, "nothing was queued");
    assert!(
        w.published.iter().all(Option::is_some),
        "no buffer was lost"
    );
    assert!(matches!(
        w.produce(
            &mut Out::Bytes(FrameRef::whole(&frames[0])),
            &mut Vec::new()
        ),
        Produced::NoRoom
    ));
}

/// Behind a bottleneck (the congestion lab's shaping) the cable's frames reach the queue
/// from the cable's own copies: RoCEv2 frames through the queue, the rest straight, each in
/// order and byte for byte; and the ring's slots are freed, so a second ringful goes too.
#[test]
fn a_bottleneck_takes_the_cable_s_frames_and_frees_their_slots() {
    use super::super::bottleneck::{BottleneckConfig, Shaper};
    use super::super::Link;
    let roce = |i: usize| {
        let mut f = vec![(i % 251) as u8; 100 + i % 900];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..24].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17]);
        f[36..38].copy_from_slice(&crate::roce::wire::ROCE_V2_UDP_PORT.to_be_bytes());
        f
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut l, c) = pair(dir.path());
    let mut link = Link::Cable(c);
    let cfg = BottleneckConfig::parse("rate=8G").unwrap();
    let mut shaper = Shaper::new(cfg, CABLE_MAX_FRAME);
    let mut out = RxBatch::new(CABLE_MAX_FRAME);
    let mut now = Duration::ZERO;
    for round in 0..2 {
        let frames: Vec<Vec<u8>> = (0..RING_SLOTS as usize)
            .map(|i| if i % 3 == 0 { frame(i) } else { roce(i) })
            .collect();
        let refs: Vec<FrameRef> = frames.iter().map(|f| FrameRef::whole(f)).collect();
        let sent = l.send(&refs);
        assert_eq!(
            (sent.taken, sent.dropped),
            (frames.len(), 0),
            "round {round}: the ring has room for a ringful"
        );
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < frames.len() && start.elapsed() < Duration::from_secs(5) {
            now += Duration::from_secs(1);
            shaper.recv(&mut link, &mut out, now).unwrap();
            got.extend(out.frames().map(<[u8]>::to_vec));
        }
        let is_roce = |f: &Vec<u8>| f.get(36..38) == Some(&[0x12, 0xb7][..]);
        let (want_roce, want_other): (Vec<_>, Vec<_>) = frames.into_iter().partition(is_roce);
        let (got_roce, got_other): (Vec<_>, Vec<_>) = got.into_iter().partition(is_roce);
        assert_eq!(
            got_roce, want_roce,
            "round {round}: RoCEv2 through the queue"
        );
        assert_eq!(got_other, want_other, "round {round}: the rest straight");
    }
    assert_eq!(shaper.stats().tail_drops + shaper.stats().red_drops, 0);
}

/// The send takes its copies' buffers from the free list it locked once for the batch: a
/// batch longer than the free buffers (the rest lent out) stops where they run out, keeps
/// its other frames for later, in order, and every buffer comes back once the peer read.
#[test]
fn a_batch_that_runs_out_of_free_buffers_stops_there_and_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let (mut l, mut c) = pair(dir.path());
    let all = free(&l);
    let lender = l.wire.as_ref().unwrap().lender.clone();
    let leases: Vec<Lease> = std::iter::from_fn(|| lender.clone().lend()).collect();
    assert_eq!(free(&l), COPY_RESERVE, "the reserve is never lent");
    let frames: Vec<Vec<u8>> = (0..COPY_RESERVE + 36).map(frame).collect();
    let mut queue: Vec<(EthHeader, Packet)> = frames
        .iter()
        .map(|f| {
            let head: EthHeader = f[..ETH_HEADER_LEN].try_into().unwrap();
            (head, Packet::from(f[ETH_HEADER_LEN..].to_vec()))
        })
        .collect();
    let sent = l.send_packets(&mut queue);
    assert_eq!((sent.taken, sent.dropped), (COPY_RESERVE, 0));
    assert_eq!(free(&l), 0);
    let mut got = receive(&mut c, COPY_RESERVE);
    drop(leases);
    let rest = l.send_packets(&mut queue[COPY_RESERVE..]);
    assert_eq!((rest.taken, rest.dropped), (36, 0));
    got.extend(receive(&mut c, 36));
    assert_eq!(got, frames, "every frame, in order, byte for byte");
    l.send_packets(&mut []);
    assert_eq!(free(&l), all, "every buffer is free again");
}
