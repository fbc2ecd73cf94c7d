//! The Ethernet port over real unix sockets: link syntax, batched I/O, the stream framing,
//! classification, fault injection and pcap capture, and the transport engine running across
//! a wire of two ports (including 10^5 messages through a port that loses, duplicates,
//! reorders and corrupts frames).

mod roce_common;
use roce_common::roce::wire::{self, compute_icrc, parse_packet};
use roce_common::*;
use rox_nic::port::frame::{self, sort_frame, Arrival, ETH_HEADER_LEN};
use rox_nic::port::pcap::read_frames;
use rox_nic::port::{FaultConfig, FrameRef, Link, LinkSpec, Port, RxBatch, BATCH};
use rox_nic::testkit::frames;
use rox_uapi::admin::*;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::{Duration, Instant};

const QPN_A: Qpn = Qpn::new(0x31).unwrap();
const QPN_B: Qpn = Qpn::new(0x42).unwrap();
const BUF: u64 = MEM_BASE + 0x1000;
const BUF_LEN: u64 = 0x10_0000;
const REMOTE: u64 = BUF + 0x8_0000;
const MTU: usize = 9000;

fn wire_specs(dir: &Path) -> (LinkSpec, LinkSpec) {
    let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
    (
        LinkSpec::Dgram {
            local: a.clone(),
            remote: b.clone(),
        },
        LinkSpec::Dgram {
            local: b,
            remote: a,
        },
    )
}

fn open_port(
    spec: &LinkSpec,
    mac: [u8; 6],
    faults: Option<FaultConfig>,
    pcap: Option<&Path>,
) -> Port {
    Port::with_link(Link::open(spec).unwrap(), mac, MTU, faults, pcap).unwrap()
}

/// A mock device whose frames really travel through a port.
struct PortDevice {
    engine: Engine,
    env: MockEnv,
    port: Port,
    gid: Gid,
    /// Frames the classifier did not hand to the engine, by `STAT_*` counter (or netdev).
    dropped: std::collections::HashMap<usize, u64>,
    to_netdev: u64,
}

impl PortDevice {
    fn new(
        spec: &LinkSpec,
        gid: Gid,
        faults: Option<FaultConfig>,
        pcap: Option<&Path>,
    ) -> PortDevice {
        PortDevice {
            engine: Engine::new(),
            env: MockEnv::new(),
            port: open_port(spec, mac_of(&gid), faults, pcap),
            gid,
            dropped: Default::default(),
            to_netdev: 0,
        }
    }

    /// Transmit what the engine queued, receive what arrived, poll. Returns frames handled.
    fn service(&mut self, epoch: Instant) -> usize {
        self.env.now = epoch.elapsed().as_nanos() as u64;
        let mut n = self.env.outbox.len();
        for ((_, p), dmac) in self.env.outbox.drain(..).zip(self.env.tx_dmacs.drain(..)) {
            self.port.queue_ip(&dmac, p);
        }
        self.port.flush();
        let (mac, max) = (self.port.mac(), self.port.max_frame());
        while self.port.recv().unwrap() > 0 {
            for f in self.port.frames() {
                n += 1;
                match sort_frame(f, &mac, max, |g| *g == self.gid) {
                    Arrival::Roce(ip, _) => {
                        let _ = self.engine.receive(&mut self.env, &f[ip]);
                    }
                    Arrival::Netdev => self.to_netdev += 1,
                    Arrival::Drop(counter) => *self.dropped.entry(counter).or_default() += 1,
                }
            }
        }
        self.engine.poll(&mut self.env);
        n
    }
}

fn drive(devs: &mut [&mut PortDevice], until: impl Fn(&[&mut PortDevice]) -> bool) {
    let epoch = Instant::now();
    let give_up = Instant::now() + Duration::from_secs(20);
    while !until(devs) {
        assert!(
            Instant::now() < give_up,
            "exchange over the port did not finish"
        );
        let moved: usize = devs.iter_mut().map(|d| d.service(epoch)).sum();
        if moved == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn connect_pair(a: &mut PortDevice, b: &mut PortDevice, p: &QpParams) {
    let (ga, gb) = (a.gid, b.gid);
    let (one, two) = (Psn::new(1).unwrap(), Psn::new(2).unwrap());
    for (dev, qpns, gids, psns) in [
        (&mut *a, (QPN_A, QPN_B), (ga, gb), (one, two)),
        (&mut *b, (QPN_B, QPN_A), (gb, ga), (two, one)),
    ] {
        connect_qp(&mut dev.engine, &mut dev.env, qpns, gids, psns, p);
    }
}

#[test]
fn link_specs_and_fault_specs_parse_or_give_clear_errors() {
    assert_eq!("tap:rox0".parse(), Ok(LinkSpec::Tap("rox0".into())));
    assert_eq!(
        "dgram:local=/a,remote=/b".parse(),
        Ok(LinkSpec::Dgram {
            local: "/a".into(),
            remote: "/b".into()
        })
    );
    assert_eq!(
        "dgram:remote=/b,local=/a".parse::<LinkSpec>().unwrap(),
        "dgram:local=/a,remote=/b".parse().unwrap()
    );
    assert_eq!(
        "stream:connect=/s".parse(),
        Ok(LinkSpec::StreamConnect("/s".into()))
    );
    assert_eq!(
        "stream:listen=/s".parse(),
        Ok(LinkSpec::StreamListen("/s".into()))
    );
    for bad in [
        "",
        "tap",
        "tap:",
        "udp:x",
        "dgram:local=/a",
        "dgram:local=/a,remote=/b,x=1",
        "dgram:local=/a,local=/b",
        "stream:",
        "stream:connect=",
        "stream:serve=/s",
        "tap:a,b",
    ] {
        let e = bad.parse::<LinkSpec>().unwrap_err();
        assert!(e.contains("want tap:IFNAME"), "{bad}: {e}");
    }
    for spec in ["loss=2", "drop=0.1", "loss", "seed=x"] {
        assert!(FaultConfig::parse(spec).is_err(), "{spec}");
    }
    let f = FaultConfig::parse("loss=0.1,dup=0.2,reorder=0.3,corrupt=0.4,seed=9").unwrap();
    assert_eq!(
        f,
        FaultConfig {
            loss: 0.1,
            duplicate: 0.2,
            reorder: 0.3,
            corrupt: 0.4,
            seed: 9
        }
    );
    let e = Port::open(
        &rox_nic::port::PortConfig::new(LinkSpec::Tap("rox-no-such-tap".into())),
        [2, 0, 0, 0, 0, 1],
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("rox-no-such-tap"), "{e}");
}

/// RC SEND, WRITE and READ between two ports; the capture of A holds every frame A sent and
/// received, each an Ethernet frame between the two MACs whose RoCE ICRC recomputes.
#[test]
fn rc_over_a_dgram_wire_every_captured_frame_is_ethernet_with_a_good_icrc() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("a.pcap");
    let (sa, sb) = wire_specs(dir.path());
    let (ga, gb) = (gid_v4(1), gid_v4(2));
    let mut a = PortDevice::new(&sa, ga, None, Some(&pcap));
    let mut b = PortDevice::new(&sb, gb, None, None);
    let ka = a.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = b.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let params = QpParams {
        mtu: Mtu::Mtu1024,
        ..QpParams::rc()
    };
    connect_pair(&mut a, &mut b, &params);
    a.env.fill(BUF, &pattern(3, 5000));
    b.env.fill(REMOTE + 0x1000, &pattern(4, 3000));
    b.env
        .post_recv(QPN_B, recv_wr(9, vec![sge(REMOTE, 0x1000, kb)]));
    let write = rdma_wr(
        2,
        WrOpcode::RdmaWrite,
        sge(BUF, 5000, ka),
        REMOTE + 0x4000,
        kb,
    );
    let read = rdma_wr(
        3,
        WrOpcode::RdmaRead,
        sge(BUF + 0x8000, 3000, ka),
        REMOTE + 0x1000,
        kb,
    );
    for wr in [
        send_wr(1, WrOpcode::Send, SendData::Sges(vec![sge(BUF, 2500, ka)])),
        write,
        read,
    ] {
        a.engine.post_send(&mut a.env, QPN_A, wr).unwrap();
    }
    drive(&mut [&mut a, &mut b], |d| d[0].env.completions.len() == 3);
    assert!(a
        .env
        .completions
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert_eq!(b.env.bytes(REMOTE, 2500), &pattern(3, 5000)[..2500]);
    assert_eq!(b.env.bytes(REMOTE + 0x4000, 5000), &pattern(3, 5000)[..]);
    assert_eq!(a.env.bytes(BUF + 0x8000, 3000), &pattern(4, 3000)[..]);
    assert!(
        a.dropped.is_empty() && b.dropped.is_empty(),
        "{:?}",
        a.dropped
    );
    drop(a); // flushes the capture
    let frames = read_frames(&std::fs::read(&pcap).unwrap()).unwrap();
    let (mac_a, mac_b) = (mac_of(&ga), mac_of(&gb));
    let (mut sent, mut received) = (0, 0);
    for (_, f) in &frames {
        assert_eq!(
            frame::ethertype(f[..ETH_HEADER_LEN].try_into().unwrap()),
            frame::ETHERTYPE_IPV4
        );
        let (dst, src) = (&f[..6], &f[6..12]);
        if src == mac_a {
            assert_eq!(dst, mac_b);
            sent += 1;
        } else {
            assert_eq!((src, dst), (&mac_b[..], &mac_a[..]));
            received += 1;
        }
        let ip = &f[ETH_HEADER_LEN..];
        let icrc_at = ip.len() - wire::ICRC_LEN;
        assert_eq!(
            compute_icrc(&ip[..icrc_at], wire::IPV4_HEADER_LEN),
            u32::from_le_bytes(ip[icrc_at..].try_into().unwrap()),
            "ICRC of a captured frame"
        );
        let p = parse_packet(ip).expect("a valid RoCEv2 packet");
        // rxe's acceptance rules: UDP checksum 0 over IPv4, first and middle packets exactly
        // the path MTU, AckReq on the last packet of every SEND/WRITE.
        const UDP_CHECKSUM_AT: usize = wire::IPV4_HEADER_LEN + 6;
        assert_eq!(&ip[UDP_CHECKSUM_AT..UDP_CHECKSUM_AT + 2], &[0, 0]);
        let opcode = p.hdr.bth.opcode;
        const FIRST_OR_MIDDLE: [u8; 4] = [0x00, 0x01, 0x06, 0x07];
        const LAST_OR_ONLY: [u8; 8] = [0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0a, 0x0b];
        if FIRST_OR_MIDDLE.contains(&opcode) {
            assert_eq!(
                p.payload.len(),
                1024,
                "opcode {opcode:#x}: exactly the path MTU"
            );
        }
        if LAST_OR_ONLY.contains(&opcode) {
            assert!(p.hdr.bth.ack_req, "opcode {opcode:#x} asks for an ACK");
        }
    }
    // SEND 2500 (3 packets at 1024), WRITE 5000 (5), READ request (1) at least; the ACKs and
    // 3 READ responses come back.
    assert!(
        sent >= 9 && received >= 4,
        "sent {sent}, received {received}"
    );
}

#[test]
fn fault_injection_on_the_port_is_seeded_and_counted() {
    let faults = faults(0.1, 0.1, 3);
    let run = || {
        let dir = tempfile::tempdir().unwrap();
        let (sa, sb) = wire_specs(dir.path());
        let mut a = open_port(&sa, [2, 0, 0, 0, 0, 1], Some(faults), None);
        let mut b = open_port(&sb, [2, 0, 0, 0, 0, 2], None, None);
        let mut corrupted_seen = 0;
        let clean = vec![0x5a; 200];
        for _ in 0..1000 {
            a.queue_ip(&[2, 0, 0, 0, 0, 2], clean.clone());
            a.flush();
            while b.recv().unwrap() > 0 {
                corrupted_seen += b
                    .frames()
                    .filter(|f| f[ETH_HEADER_LEN..] != clean[..])
                    .count();
            }
        }
        (a.fault_stats().unwrap(), corrupted_seen)
    };
    let (first, second) = (run(), run());
    assert_eq!(first, second, "same seed, same faults");
    let (f, corrupted_seen) = first;
    for (what, n) in [
        ("lost", f.lost),
        ("duplicated", f.duplicated),
        ("reordered", f.reordered),
        ("corrupted", f.corrupted),
    ] {
        assert!((50..=150).contains(&n), "{what}: {n} of 1000 at p = 0.1");
    }
    assert!(corrupted_seen > 0, "corrupted frames arrive corrupted");
}

/// Header of every stress message: sequence number (8 bytes) and CRC-32 of the body (4 bytes).
const HEADER: usize = 12;

/// 10^5 checksummed RC messages through two ports that lose, duplicate, reorder and corrupt
/// frames (fixed seeds): every message arrives once, in order, intact.
#[test]
fn rc_1e5_messages_exactly_once_in_order_through_faulty_ports() {
    const MESSAGES: u64 = 100_000;
    const WINDOW: u64 = 32;
    const SLOT: u64 = 1024;
    const RECV_DEPTH: u64 = 256;
    const MULTI_PACKET_EVERY: u64 = 16;
    let dir = tempfile::tempdir().unwrap();
    let (sa, sb) = wire_specs(dir.path());
    let faulty = |seed| faults(0.02, 0.01, seed);
    let mut a = PortDevice::new(&sa, gid_v4(1), Some(faulty(1)), None);
    let mut b = PortDevice::new(&sb, gid_v4(2), Some(faulty(2)), None);
    let ka = a.env.reg_mr(PD, BUF, WINDOW * SLOT, ALL_ACCESS);
    let kb = b.env.reg_mr(PD, REMOTE, RECV_DEPTH * SLOT, ALL_ACCESS);
    let params = QpParams {
        timeout: 8,
        ..QpParams::rc()
    };
    connect_pair(&mut a, &mut b, &params);
    for slot in 0..RECV_DEPTH {
        b.env.post_recv(
            QPN_B,
            recv_wr(slot, vec![sge(REMOTE + slot * SLOT, SLOT as u32, kb)]),
        );
    }
    let mut rng = StdRng::seed_from_u64(7);
    let epoch = Instant::now();
    let give_up = Instant::now() + Duration::from_secs(600);
    let (mut posted, mut sent, mut received) = (0u64, 0u64, 0u64);
    while received < MESSAGES || sent < MESSAGES {
        assert!(
            Instant::now() < give_up,
            "stuck at {sent} sent, {received} received"
        );
        while posted < MESSAGES && posted - sent < WINDOW {
            let len = if posted % MULTI_PACKET_EVERY == 0 {
                rng.gen_range(300..=700)
            } else {
                rng.gen_range(16..=64)
            };
            let body = pattern(posted as u32, len - HEADER);
            let mut m = posted.to_le_bytes().to_vec();
            m.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            m.extend_from_slice(&body);
            let addr = BUF + (posted % WINDOW) * SLOT;
            a.env.fill(addr, &m);
            let wr = send_wr(
                posted,
                WrOpcode::Send,
                SendData::Sges(vec![sge(addr, len as u32, ka)]),
            );
            a.engine.post_send(&mut a.env, QPN_A, wr).unwrap();
            posted += 1;
        }
        let moved = a.service(epoch) + b.service(epoch);
        for c in a.env.take_completions() {
            assert_eq!(
                (c.status, c.wr_id),
                (WcStatus::Success, sent),
                "send completions in order"
            );
            sent += 1;
        }
        for c in b.env.take_completions() {
            assert_eq!(c.status, WcStatus::Success);
            let addr = REMOTE + c.wr_id * SLOT;
            let m = b.env.bytes(addr, c.byte_len as usize);
            let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
            let crc = u32::from_le_bytes(m[8..12].try_into().unwrap());
            assert_eq!(seq, received, "delivered in order, exactly once");
            assert_eq!(crc32fast::hash(&m[HEADER..]), crc, "message {seq} intact");
            received += 1;
            b.env
                .post_recv(QPN_B, recv_wr(c.wr_id, vec![sge(addr, SLOT as u32, kb)]));
        }
        if moved == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let (fa, fb) = (a.port.fault_stats().unwrap(), b.port.fault_stats().unwrap());
    println!("faults A {fa:?}\nfaults B {fb:?}");
    println!(
        "requester {:?}\nresponder {:?}",
        a.engine.stats(),
        b.engine.stats()
    );
    assert!(fa.lost > 0 && fa.duplicated > 0 && fa.reordered > 0 && fa.corrupted > 0);
    assert!(
        a.engine.stats().rx_icrc_errors + b.engine.stats().rx_icrc_errors > 0,
        "corrupted frames are caught by the ICRC"
    );
    assert!(b.engine.stats().rx_duplicates > 0 && b.engine.stats().rx_out_of_sequence > 0);
    assert_eq!(a.engine.qp_state(QPN_A), Some(QpState::Rts));
}

/// Frames queued in one pass leave in order with few `sendmmsg` calls and arrive in order
/// through `recvmmsg` batches; a datagram longer than MTU + header is dropped as oversize.
#[test]
fn batched_send_and_receive_keep_order_and_oversize_is_dropped() {
    const FRAMES: usize = 3 * BATCH + 5;
    let dir = tempfile::tempdir().unwrap();
    let (sa, sb) = wire_specs(dir.path());
    let mac_b = [2, 0, 0, 0, 0, 2];
    let mut a = open_port(&sa, [2, 0, 0, 0, 0, 1], None, None);
    let mut b = open_port(&sb, mac_b, None, None);
    for i in 0..FRAMES {
        let mut p = vec![0x45u8; 100 + i];
        p[1..9].copy_from_slice(&(i as u64).to_le_bytes());
        a.queue_ip(&mac_b, p);
    }
    assert_eq!(a.flush(), FRAMES);
    assert!(
        a.stats().send_calls <= FRAMES.div_ceil(BATCH) as u64,
        "{} sendmmsg calls for {FRAMES} frames",
        a.stats().send_calls
    );
    let mut seen = 0usize;
    let give_up = Instant::now() + Duration::from_secs(5);
    while seen < FRAMES {
        assert!(Instant::now() < give_up, "received {seen} of {FRAMES}");
        let n = b.recv().unwrap();
        assert!(n <= BATCH);
        for f in b.frames() {
            assert_eq!(f.len(), ETH_HEADER_LEN + 100 + seen);
            assert_eq!(&f[..6], &mac_b);
            assert_eq!(
                u64::from_le_bytes(
                    f[ETH_HEADER_LEN + 1..ETH_HEADER_LEN + 9]
                        .try_into()
                        .unwrap()
                ),
                seen as u64
            );
            seen += 1;
        }
    }
    assert!(
        b.stats().recv_calls < FRAMES as u64,
        "several frames per recvmmsg"
    );
    // A frame one byte longer than MTU + header.
    let big = vec![0xabu8; MTU + 1];
    a.queue(frame::roce_header(&mac_b, &[2, 0, 0, 0, 0, 1], &big), big);
    assert_eq!(a.flush(), 1);
    let give_up = Instant::now() + Duration::from_secs(5);
    while b.recv().unwrap() == 0 {
        assert!(Instant::now() < give_up, "oversized frame never arrived");
    }
    let f: Vec<&[u8]> = b.frames().collect();
    assert_eq!(f.len(), 1);
    assert_eq!(
        sort_frame(f[0], &mac_b, b.max_frame(), |_| true),
        Arrival::Drop(STAT_PORT_DROP_OVERSIZE)
    );
}

/// The stream framing: length-prefixed frames both ways, an oversized frame skipped without
/// losing the frame behind it, and a listener that takes a new peer when the old one left.
#[test]
fn stream_links_frame_both_ways_skip_oversize_and_accept_a_new_peer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let mut server = Link::open(&LinkSpec::StreamListen(path.clone())).unwrap();
    let mut batch = RxBatch::new(1514);
    let recv_all = |link: &mut Link, batch: &mut RxBatch, want: usize| -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let give_up = Instant::now() + Duration::from_secs(5);
        while got.len() < want {
            assert!(
                Instant::now() < give_up,
                "got {} of {want} frames",
                got.len()
            );
            link.recv(batch).unwrap();
            got.extend(batch.frames().map(<[u8]>::to_vec));
        }
        got
    };
    for round in 0..2u8 {
        let mut client = Link::open(&LinkSpec::StreamConnect(path.clone())).unwrap();
        let frames: Vec<Vec<u8>> = (0..10u8)
            .map(|i| vec![round * 16 + i; 60 + i as usize])
            .collect();
        let refs: Vec<FrameRef> = frames.iter().map(|f| FrameRef::whole(f)).collect();
        let give_up = Instant::now() + Duration::from_secs(5);
        // The listener accepts on its next look.
        while !server.is_connected() {
            assert!(Instant::now() < give_up, "no connection");
            server.recv(&mut batch).unwrap();
        }
        assert_eq!(client.send(&refs).dropped, 0);
        assert_eq!(recv_all(&mut server, &mut batch, 10), frames);
        assert_eq!(server.send(&refs[..3]).dropped, 0);
        assert_eq!(recv_all(&mut client, &mut batch, 3), frames[..3].to_vec());
        // Oversized, then a normal one.
        let big = vec![7u8; 5000];
        client.send(&[FrameRef::whole(&big), refs[4]]);
        let got = recv_all(&mut server, &mut batch, 2);
        assert_eq!(got[0].len(), 1515, "a stand-in longer than any valid frame");
        assert_eq!(got[1], frames[4]);
        drop(client);
        let give_up = Instant::now() + Duration::from_secs(5);
        while server.is_connected() {
            assert!(
                Instant::now() < give_up,
                "server did not notice the peer leaving"
            );
            server.recv(&mut batch).unwrap();
        }
    }
}

/// Classification of frames on the port.
#[test]
fn frames_are_classified_by_mac_vlan_ip_and_udp_port() {
    let own = [2, 0, 0, 0, 0, 1];
    let peer = [2, 0, 0, 0, 0, 2];
    let (g_own, g_peer) = (gid_v4(1), gid_v4(2));
    let gsi_send = wire::Headers::new(wire::Bth {
        opcode: 0x04,
        solicited: false,
        pkey: 0xffff,
        dest_qpn: Qpn::GSI,
        ack_req: false,
        psn: Psn::default(),
    });
    let roce = frames::roce_frame(&own, &peer, (g_peer, g_own), &gsi_send, &[0u8; 8]);
    let class = |f: &[u8]| sort_frame(f, &own, 1514, |g| *g == g_own);
    assert_eq!(roce_range(class(&roce)), Some(ETH_HEADER_LEN..roce.len()));
    // Ethernet padding behind the IP packet is not part of it.
    let padded = [&roce[..], &[0u8; 20]].concat();
    assert_eq!(roce_range(class(&padded)), Some(ETH_HEADER_LEN..roce.len()));
    // Another device's GID, a multicast MAC, broadcast: not ours or not RoCE -> netdev.
    assert_eq!(sort_frame(&roce, &own, 1514, |_| false), Arrival::Netdev);
    let mut bcast = roce.clone();
    bcast[..6].copy_from_slice(&[0xff; 6]);
    assert_eq!(roce_range(class(&bcast)), Some(ETH_HEADER_LEN..roce.len()));
    let mut other = roce.clone();
    other[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    assert_eq!(class(&other), Arrival::Drop(STAT_PORT_DROP_OTHER_MAC));
    let mut vlan = roce.clone();
    vlan[12..14].copy_from_slice(&frame::ETHERTYPE_VLAN.to_be_bytes());
    assert_eq!(class(&vlan), Arrival::Drop(STAT_PORT_DROP_VLAN));
    assert_eq!(class(&roce[..10]), Arrival::Drop(STAT_PORT_DROP_MALFORMED));
    assert_eq!(
        class(&roce[..ETH_HEADER_LEN + 30]),
        Arrival::Drop(STAT_PORT_DROP_MALFORMED)
    );
    let mut bad_sum = roce.clone();
    bad_sum[ETH_HEADER_LEN + 10] ^= 1;
    assert_eq!(class(&bad_sum), Arrival::Drop(STAT_PORT_DROP_MALFORMED));
    let arp = [&own[..], &peer, &[0x08, 0x06], &[0u8; 28]].concat();
    assert_eq!(class(&arp), Arrival::Netdev);
    assert_eq!(
        class(&vec![0u8; 1515]),
        Arrival::Drop(STAT_PORT_DROP_OVERSIZE)
    );

    // IPv6: the UDP checksum (mandatory, filled by the sender) is verified.
    let (v6_own, v6_peer) = (gid_v6(1), gid_v6(2));
    let ip6 = wire::IpInfo {
        flow_label: 7,
        ..frames::peer_ip(v6_peer, v6_own)
    };
    let packet6 = wire::build_packet(&ip6, &gsi_send, &[1u8; 13]);
    let roce6 = [&frame::roce_header(&own, &peer, &packet6)[..], &packet6].concat();
    assert_eq!(
        frame::ethertype(roce6[..ETH_HEADER_LEN].try_into().unwrap()),
        frame::ETHERTYPE_IPV6
    );
    let class6 = |f: &[u8]| sort_frame(f, &own, 1514, |g| *g == v6_own);
    assert_eq!(
        roce_range(class6(&roce6)),
        Some(ETH_HEADER_LEN..roce6.len())
    );
    let mut bad_udp_sum = roce6.clone();
    bad_udp_sum[ETH_HEADER_LEN + wire::IPV6_HEADER_LEN + 6] ^= 0x40;
    assert_eq!(
        class6(&bad_udp_sum),
        Arrival::Drop(STAT_PORT_DROP_MALFORMED)
    );
    let mut short_payload_len = roce6.clone();
    short_payload_len[ETH_HEADER_LEN + 4..ETH_HEADER_LEN + 6].copy_from_slice(&4u16.to_be_bytes());
    assert_eq!(
        class6(&short_payload_len),
        Arrival::Drop(STAT_PORT_DROP_MALFORMED)
    );
    // To a multicast group (UDP checksum 0, which RoCEv2 allows): the engine's when the device
    // joined the group, else the netdev's.
    let mut mcast6 = roce6.clone();
    mcast6[ETH_HEADER_LEN + 24] = 0xff;
    let udp_sum = ETH_HEADER_LEN + wire::IPV6_HEADER_LEN + 6;
    mcast6[udp_sum..udp_sum + 2].fill(0);
    assert_eq!(class6(&mcast6), Arrival::Netdev);
    assert_eq!(
        roce_range(sort_frame(&mcast6, &own, 1514, |_| true)),
        Some(ETH_HEADER_LEN..mcast6.len())
    );
}

/// The IP packet's bytes in a frame sorted for the transport, if it was.
fn roce_range(arrival: Arrival) -> Option<std::ops::Range<usize>> {
    match arrival {
        Arrival::Roce(range, _) => Some(range),
        _ => None,
    }
}
