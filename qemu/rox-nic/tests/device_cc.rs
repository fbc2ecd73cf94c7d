//! Congestion control through the device path: two devices whose ports meet in the test,
//! which plays the congested router between them (it marks packets CE as RED would). A CE
//! mark on the way gets one CNP back and cuts the sender's rate (its packets paced); with
//! congestion control off nothing is ECN-capable and CNPs are ignored; CNPs no QP can take are
//! dropped and counted; CE on a frame that is not RoCE goes to the netdev untouched.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use rox_nic::port::frame::{roce_header, ETH_HEADER_LEN};
use rox_nic::roce::cc::{dcqcn, CcConfig, ECN_CE, ECN_ECT0, ECN_MASK, ECN_NOT_ECT};
use rox_nic::roce::wire::{self, opcode as op};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::verbs::*;

const SUBNET: u8 = 3;
const PD: u32 = 1;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
const BUF: u64 = 64 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Where the IP header starts in a frame, and the BTH behind IPv4 and UDP.
const IP_AT: usize = ETH_HEADER_LEN;
const BTH_AT: usize = IP_AT + wire::IPV4_HEADER_LEN + wire::UDP_HEADER_LEN;

/// One device of the pair: its driver, GID, an RC QP with its CQ, and a registered buffer.
struct End {
    d: TestDriver,
    gid: [u8; 16],
    cq: TestCq,
    qp: TestQp,
    buf: u64,
    key: Key,
}

/// Devices A and B, each port a unix datagram socket whose far end the test holds
/// (`to_a`, `to_b`): every frame passes through the test. A has a paired netdev whose guest
/// end is `guest`.
struct Pair {
    a: End,
    b: End,
    to_a: UnixDatagram,
    to_b: UnixDatagram,
    guest: UnixDatagram,
}

fn device(dir: &Path, name: &str, host: u8, cc: CcConfig, netdev: bool) -> (TestDriver, [u8; 16]) {
    let gid = gid_v4(127, 0, SUBNET, host);
    let mut cfg = DeviceConfig::new(test_mac(&gid));
    cfg.port = Some(PortConfig::new(LinkSpec::Dgram {
        local: dir.join(format!("{name}.sock")),
        remote: dir.join(format!("router-{name}.sock")),
    }));
    if netdev {
        cfg.netdev = Some(LinkSpec::Dgram {
            local: dir.join("netdev.sock"),
            remote: dir.join("guest.sock"),
        });
    }
    cfg.cc = cc;
    let mut d = TestDriver::new(cfg);
    d.set_gid(0, gid);
    (d, gid)
}

fn router_end(dir: &Path, name: &str) -> UnixDatagram {
    let s = UnixDatagram::bind(dir.join(format!("router-{name}.sock"))).unwrap();
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s
}

fn pair(dir: &Path, cc_a: CcConfig, cc_b: CcConfig) -> Pair {
    let (to_a, to_b) = (router_end(dir, "a"), router_end(dir, "b"));
    let guest = UnixDatagram::bind(dir.join("guest.sock")).unwrap();
    guest.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let (da, gid_a) = device(dir, "a", 1, cc_a, true);
    let (db, gid_b) = device(dir, "b", 2, cc_b, false);
    to_a.connect(dir.join("a.sock")).unwrap();
    to_b.connect(dir.join("b.sock")).unwrap();
    let mut ends = [(da, gid_a), (db, gid_b)].map(|(mut d, gid)| {
        let cq = d.create_cq(8);
        let qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
        let (buf, key) = d.buffer(PD, BUF, ALL_ACCESS);
        End {
            d,
            gid,
            cq,
            qp,
            buf,
            key,
        }
    });
    // A 1 s ACK timeout: no retransmission among the frames a test reads.
    let params = ConnectParams {
        mtu: MTU_1024,
        timeout: 18,
        ..ConnectParams::default()
    };
    let (qpn_a, qpn_b) = (ends[0].qp.qpn, ends[1].qp.qpn);
    let [a, b] = &mut ends;
    a.d.connect_with(&a.qp, b.gid, qpn_b, ALL_ACCESS, &params);
    b.d.connect_with(&b.qp, a.gid, qpn_a, ALL_ACCESS, &params);
    let [a, b] = ends;
    Pair {
        a,
        b,
        to_a,
        to_b,
        guest,
    }
}

/// A's line rate in these tests (Mb/s) and parameters that hold a cut rate for the length of
/// a test: the timer's increase events 131 ms apart, the byte counter's never.
const LINE_MBPS: u32 = 10;

fn slow_line() -> CcConfig {
    let mut cc = CcConfig::default();
    cc.params
        .apply_list(&format!(
            "line_rate={LINE_MBPS},rpg_time_reset=131071,rpg_byte_reset=4294967295"
        ))
        .unwrap();
    cc
}

fn cc_off() -> CcConfig {
    CcConfig {
        enabled: false,
        ..CcConfig::default()
    }
}

fn recv(sock: &UnixDatagram) -> Vec<u8> {
    let mut buf = vec![0u8; 65536];
    let n = sock.recv(&mut buf).expect("a frame arrives");
    buf.truncate(n);
    buf
}

/// Frames that arrive within `quiet` of each other, until none does.
fn drain(sock: &UnixDatagram, quiet: Duration) -> Vec<Vec<u8>> {
    drain_timed(sock, quiet)
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

/// The frames until `sock` is quiet for `quiet`, each with when it was read.
fn drain_timed(sock: &UnixDatagram, quiet: Duration) -> Vec<(Instant, Vec<u8>)> {
    sock.set_read_timeout(Some(quiet)).unwrap();
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = sock.recv(&mut buf) {
        frames.push((Instant::now(), buf[..n].to_vec()));
    }
    sock.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    frames
}

fn ecn(frame: &[u8]) -> u8 {
    frame[IP_AT + 1] & ECN_MASK
}

fn opcode(frame: &[u8]) -> u8 {
    frame[BTH_AT]
}

fn psn(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[BTH_AT + 8..BTH_AT + 12].try_into().unwrap()) & 0xff_ffff
}

/// The frame as a congested router forwards it: ECN set to CE and the IPv4 header checksum
/// recomputed (the ICRC does not cover the ECN bits).
fn mark_ce(frame: &mut [u8]) {
    frame[IP_AT + 1] |= ECN_CE;
    frame[IP_AT + 10..IP_AT + 12].fill(0);
    let sum = wire::ipv4_header_checksum(&frame[IP_AT..IP_AT + wire::IPV4_HEADER_LEN]);
    frame[IP_AT + 10..IP_AT + 12].copy_from_slice(&sum.to_be_bytes());
}

/// The congestion counters: (np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled,
/// rp_cnp_ignored).
fn cc_counters(d: &mut TestDriver) -> (u64, u64, u64, u64) {
    let c = d.port_counters();
    (
        c.np_ecn_marked_roce_packets,
        c.np_cnp_sent,
        c.rp_cnp_handled,
        c.rp_cnp_ignored,
    )
}

/// A posts a signaled RDMA WRITE of `len` bytes into B's buffer.
fn write(p: &mut Pair, wr_id: u64, len: u32) {
    let w = rdma_wqe(
        wr_id,
        WR_RDMA_WRITE,
        sge(p.a.buf, len, p.a.key),
        p.b.buf,
        p.b.key,
    );
    p.a.d.post_send(&mut p.a.qp, &w);
}

/// A CNP frame from `from`'s GID to QP `dest` of the device `to` (MAC from its GID).
fn cnp_frame(from: [u8; 16], to: [u8; 16], dest: Qpn) -> Vec<u8> {
    let hdr = wire::Headers::new(wire::Bth {
        opcode: op::CNP,
        solicited: false,
        pkey: wire::DEFAULT_PKEY,
        dest_qpn: dest,
        ack_req: false,
        psn: Psn::default(),
    });
    frames::roce_frame(
        &test_mac(&to),
        &test_mac(&from),
        (from, to),
        &hdr,
        &[0; op::CNP_RESERVED_LEN],
    )
}

#[test]
fn a_ce_mark_on_the_way_gets_one_cnp_back_and_cuts_the_senders_rate() {
    let dir = tempfile::tempdir().unwrap();
    let mut cc_b = CcConfig::default();
    cc_b.params.min_time_between_cnps = 4095;
    let mut p = pair(dir.path(), slow_line(), cc_b);
    write(&mut p, 1, 1024);
    let mut data = recv(&p.to_a);
    assert_eq!(opcode(&data), op::RC_WRITE_ONLY);
    assert_eq!(ecn(&data), ECN_ECT0, "congestion control on: ECN-capable");
    mark_ce(&mut data);
    p.to_b.send(&data).unwrap();
    // B answers with a CNP (at once) and the WRITE's ACK (at its next poll).
    let back = [recv(&p.to_b), recv(&p.to_b)];
    let cnp = back.iter().find(|f| opcode(f) == op::CNP).expect("a CNP");
    assert!(back.iter().any(|f| opcode(f) == op::RC_ACKNOWLEDGE));
    let parsed = wire::parse_packet(&cnp[IP_AT..]).expect("a valid RoCEv2 packet");
    assert_eq!(parsed.hdr.bth.dest_qpn, p.a.qp.qpn, "to the sender's QP");
    assert_eq!((parsed.sgid, parsed.dgid), (p.b.gid, p.a.gid));
    assert_eq!(parsed.hdr.bth.psn.get(), 0);
    assert_eq!(parsed.payload, &[0; op::CNP_RESERVED_LEN]);
    assert_eq!(cnp[BTH_AT + 4], 0x40, "BECN set");
    for f in &back {
        p.to_a.send(f).unwrap();
    }
    assert_eq!(p.a.d.wait_cqe(&mut p.a.cq).status, WC_SUCCESS);
    assert_eq!(cc_counters(&mut p.b.d), (1, 1, 0, 0));
    assert_eq!(cc_counters(&mut p.a.d), (0, 0, 1, 0));

    // Every packet of the next WRITE is marked: B answers a burst of them with one CNP.
    const PACKETS: usize = 16;
    write(&mut p, 2, PACKETS as u32 * 1024);
    let mut firsts: Vec<(Instant, Vec<u8>)> = Vec::new();
    while firsts.len() < PACKETS {
        let f = recv(&p.to_a);
        if firsts.iter().all(|(_, g)| psn(g) != psn(&f)) {
            firsts.push((Instant::now(), f));
        }
    }
    // The cut rate: the first CNP's α (initial_alpha_value 1023) halves the line rate.
    let line_kbps = u64::from(LINE_MBPS) * 1000;
    let cut_kbps = line_kbps - ((line_kbps * 1023) >> 11);
    let gap = dcqcn::wire_time_ns(firsts[1].1.len() as u64 - ETH_HEADER_LEN as u64, cut_kbps);
    let span = firsts[PACKETS - 1].0 - firsts[0].0;
    let least = Duration::from_nanos(gap * (PACKETS as u64 - 1) * 8 / 10);
    assert!(
        span >= least,
        "{PACKETS} packets in {span:?}: paced at the cut rate they take at least {least:?}"
    );
    // The burst comes ≥ 15 paced gaps (> 4.095 ms) after the first CNP: its first CE packet
    // gets one. B's CNPs are 4.095 ms apart on its clock; by the real clock B handled the
    // burst within the time from its first frame to the last CNP read: that bounds how many
    // can be (exactly 1 unless the machine stalled B for over 4 ms).
    let burst_start = Instant::now();
    for (_, mut f) in firsts {
        mark_ce(&mut f);
        p.to_b.send(&f).unwrap();
    }
    let back = drain_timed(&p.to_b, Duration::from_millis(300));
    let cnp_times: Vec<Instant> = back
        .iter()
        .filter(|(_, f)| opcode(f) == op::CNP)
        .map(|&(at, _)| at)
        .collect();
    let cnps = cnp_times.len();
    let (marked, sent, _, _) = cc_counters(&mut p.b.d);
    assert_eq!(marked, 1 + PACKETS as u64);
    assert_eq!(sent, 1 + cnps as u64, "every CNP counted, and only those");
    let handled_within = cnp_times
        .last()
        .map_or(Duration::ZERO, |&t| t - burst_start);
    let most = 1 + (handled_within.as_micros() / 4095) as usize;
    assert!(
        cnps >= 1 && cnps <= most,
        "{cnps} CNPs for {PACKETS} CE packets handled within {handled_within:?}: \
         min_time_between_cnps allows 1..={most}"
    );
}

#[test]
fn with_no_least_time_between_cnps_every_ce_packet_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut cc_b = CcConfig::default();
    cc_b.params.min_time_between_cnps = 0;
    let mut p = pair(dir.path(), slow_line(), cc_b);
    const PACKETS: usize = 8;
    write(&mut p, 1, PACKETS as u32 * 1024);
    let mut firsts: Vec<Vec<u8>> = Vec::new();
    while firsts.len() < PACKETS {
        let f = recv(&p.to_a);
        if firsts.iter().all(|g| psn(g) != psn(&f)) {
            firsts.push(f);
        }
    }
    for mut f in firsts {
        mark_ce(&mut f);
        p.to_b.send(&f).unwrap();
    }
    let back = drain(&p.to_b, Duration::from_millis(300));
    let cnps = back.iter().filter(|f| opcode(f) == op::CNP).count();
    assert_eq!(cnps, PACKETS, "one CNP per CE packet");
    let (marked, sent, _, _) = cc_counters(&mut p.b.d);
    assert_eq!((marked, sent), (PACKETS as u64, PACKETS as u64));
}

#[test]
fn with_cc_off_nothing_is_ecn_capable_and_cnps_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = pair(dir.path(), cc_off(), cc_off());
    write(&mut p, 1, 1024);
    let mut data = recv(&p.to_a);
    assert_eq!(ecn(&data), ECN_NOT_ECT);
    // A router would not mark a Not-ECT packet; the receiver counts a mark anyway, sends no CNP.
    mark_ce(&mut data);
    p.to_b.send(&data).unwrap();
    let back = drain(&p.to_b, Duration::from_millis(300));
    let opcodes: Vec<u8> = back.iter().map(|f| opcode(f)).collect();
    assert_eq!(opcodes, [op::RC_ACKNOWLEDGE], "the ACK and no CNP");
    assert_eq!(ecn(&back[0]), ECN_NOT_ECT);
    p.to_a.send(&back[0]).unwrap();
    p.to_a
        .send(&cnp_frame(p.b.gid, p.a.gid, p.a.qp.qpn))
        .unwrap();
    assert_eq!(p.a.d.wait_cqe(&mut p.a.cq).status, WC_SUCCESS);
    let give_up = Instant::now() + READ_TIMEOUT;
    while cc_counters(&mut p.a.d).3 == 0 {
        assert!(Instant::now() < give_up, "the CNP was never counted");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(cc_counters(&mut p.a.d), (0, 0, 0, 1));
    assert_eq!(cc_counters(&mut p.b.d), (1, 0, 0, 0));
}

#[test]
fn cnps_no_qp_can_take_are_dropped_counted_and_affect_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = pair(dir.path(), CcConfig::default(), CcConfig::default());
    let before = p.a.d.query_stats();
    let no_such = Qpn::from_raw(0x7777);
    let stranger = gid_v4(127, 0, SUBNET, 9);
    for f in [
        cnp_frame(p.b.gid, p.a.gid, no_such),
        cnp_frame(stranger, p.a.gid, p.a.qp.qpn),
    ] {
        p.to_a.send(&f).unwrap();
    }
    let give_up = Instant::now() + READ_TIMEOUT;
    let after = loop {
        let s = p.a.d.query_stats();
        if s[STAT_RX_CNP_DROPPED] >= 2 {
            break s;
        }
        assert!(Instant::now() < give_up, "the CNPs were never counted");
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(after[STAT_RX_CNP_DROPPED], 2);
    assert_eq!(after[STAT_RX_UNKNOWN_QP], before[STAT_RX_UNKNOWN_QP]);
    assert_eq!(cc_counters(&mut p.a.d), (0, 0, 0, 0));
    // The QP goes on unpaced: a WRITE's packets leave and it completes.
    write(&mut p, 1, 4096);
    for _ in 0..4 {
        let f = recv(&p.to_a);
        p.to_b.send(&f).unwrap();
    }
    let ack = recv(&p.to_b);
    p.to_a.send(&ack).unwrap();
    assert_eq!(p.a.d.wait_cqe(&mut p.a.cq).status, WC_SUCCESS);
}

/// An IPv4 UDP frame (not to the RoCEv2 port) to `dmac`, marked CE.
fn ce_udp_frame(dmac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let payload = b"not roce";
    let udp_len = 8 + payload.len();
    let mut ip = vec![0x45, ECN_CE];
    ip.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = wire::ipv4_header_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip.extend_from_slice(&40000u16.to_be_bytes());
    ip.extend_from_slice(&9999u16.to_be_bytes());
    ip.extend_from_slice(&(udp_len as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(payload);
    [&roce_header(&dmac, &[2, 0, 0, 0, 9, 9], &ip)[..], &ip].concat()
}

#[test]
fn ce_on_a_frame_that_is_not_roce_goes_to_the_netdev_untouched_and_uncounted() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = pair(dir.path(), CcConfig::default(), CcConfig::default());
    let a_ip: [u8; 4] = p.a.gid[12..].try_into().unwrap();
    let frame = ce_udp_frame(test_mac(&p.a.gid), [127, 0, SUBNET, 2], a_ip);
    p.to_a.send(&frame).unwrap();
    assert_eq!(recv(&p.guest), frame, "forwarded as it came");
    assert_eq!(cc_counters(&mut p.a.d), (0, 0, 0, 0));
}
