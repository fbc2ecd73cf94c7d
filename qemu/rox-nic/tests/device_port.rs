//! Two whole devices on their ports, back to back over a datagram wire (testkit::pair): RC,
//! UC and UD between them, a missing peer, injected faults, and many large WRITEs at once.

use rox_nic::device::FaultConfig;
use rox_nic::port::frame::{self, ETH_HEADER_LEN};
use rox_nic::roce::wire;
use rox_nic::testkit::frames::faults;
use rox_nic::testkit::pair::*;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;
use std::path::Path;
use std::time::Duration;

/// The devices of these tests own GIDs 127.0.1.x.
const SUBNET: u8 = 1;

/// Device `last` of the back-to-back pair in `dir`: device 1 and device 2 send to each
/// other's socket.
fn device(dir: &Path, last: u8, faults: Option<FaultConfig>) -> TestDriver {
    let (one, two) = dgram_wire(dir, "1.sock", "2.sock");
    let link = if last == 1 { one } else { two };
    port_device(link, SUBNET, last, faults)
}

const PD: u32 = 1;

const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

const BUF: u64 = 1 << 20;

/// Each side of a pair: a CQ of 1024, one QP of `qp_type`, a 1 MiB buffer.
fn spec(qp_type: u8, faults: Option<FaultConfig>) -> SideSpec {
    SideSpec {
        subnet: SUBNET,
        qp_type,
        pd: PD,
        cq_log_depth: 10,
        buf_len: BUF,
        access: ALL_ACCESS,
        faults,
    }
}

fn side(dir: &Path, last: u8, qp_type: u8, faults: Option<FaultConfig>) -> Side {
    Side::new(dir, last, &spec(qp_type, faults))
}

fn connected(dir: &Path, qp_type: u8, faults: Option<FaultConfig>) -> (Side, Side) {
    // With injected loss, tail losses wait for the ACK timeout: 67 ms is short enough, and long
    // enough that a loaded 2-core host descheduling a data path does not exhaust the retries.
    const LOSSY_TIMEOUT: u8 = 14;
    let p = ConnectParams {
        timeout: if faults.is_some() {
            LOSSY_TIMEOUT
        } else {
            ConnectParams::default().timeout
        },
        ..Default::default()
    };
    connected_pair(dir, &spec(qp_type, faults), &p)
}

#[test]
fn rc_between_two_devices_send_write_read_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = connected(dir.path(), QPT_RC, None);
    // SEND 100 KiB (many MTU packets).
    let msg = pattern(11, 100_000);
    a.d.ram.write(a.buf, &msg);
    b.d.post_recv(&mut b.qp, 1, &[sge(b.buf, 200_000, b.key)]);
    a.d.post_send(
        &mut a.qp,
        &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(a.buf, 100_000, a.key)]),
    );
    assert_eq!(a.d.wait_cqe(&mut a.cq).status, WC_SUCCESS);
    let r = b.d.wait_cqe(&mut b.cq);
    assert_eq!((r.status, r.byte_len), (WC_SUCCESS, 100_000));
    assert_eq!(b.d.ram.read(b.buf, 100_000), msg);
    // WRITE then READ back.
    let w = rdma_wqe(
        2,
        WR_RDMA_WRITE,
        sge(a.buf, 50_000, a.key),
        b.buf + 300_000,
        b.key,
    );
    a.d.post_send(&mut a.qp, &w);
    assert_eq!(a.d.wait_cqe(&mut a.cq).status, WC_SUCCESS);
    assert_eq!(b.d.ram.read(b.buf + 300_000, 50_000), msg[..50_000]);
    let w = rdma_wqe(
        3,
        WR_RDMA_READ,
        sge(a.buf + 500_000, 50_000, a.key),
        b.buf + 300_000,
        b.key,
    );
    a.d.post_send(&mut a.qp, &w);
    assert_eq!(a.d.wait_cqe(&mut a.cq).status, WC_SUCCESS);
    assert_eq!(a.d.ram.read(a.buf + 500_000, 50_000), msg[..50_000]);
    // FETCH_AND_ADD on the remote device.
    b.d.ram.write(b.buf + 800_000, &1u64.to_le_bytes());
    let w = with_atomic(
        send_wqe(
            4,
            WR_ATOMIC_FETCH_AND_ADD,
            WQE_FLAG_SIGNALED,
            &[sge(a.buf + 900_000, 8, a.key)],
        ),
        b.buf + 800_000,
        b.key,
        41,
        0,
    );
    a.d.post_send(&mut a.qp, &w);
    assert_eq!(a.d.wait_cqe(&mut a.cq).status, WC_SUCCESS);
    assert_eq!(b.d.ram.read(b.buf + 800_000, 8), 42u64.to_le_bytes());
    assert_eq!(a.d.ram.read(a.buf + 900_000, 8), 1u64.to_le_bytes());
    let stats = a.d.query_stats();
    assert!(stats[STAT_TX_PACKETS] > 100 && stats[STAT_RX_PACKETS] > 0 && stats[STAT_CQES] >= 4);
    let peer = b.d.query_stats();
    assert!(peer[STAT_ACKS_SENT] > 0 && peer[STAT_RX_BYTES] > 100_000);
}

#[test]
fn missing_peer_ends_in_retry_exceeded_then_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = side(dir.path(), 1, QPT_RC, None);
    let qa = a.qp;
    // Nobody owns 127.0.1.9, and its MAC is unresolved (all zeroes).
    let gid = gid_v4(127, 0, 1, 9);
    let p = ConnectParams {
        timeout: 1, // 8 us * ... shortest real timeout
        retry_cnt: 2,
        rnr_retry: 0,
        dmac: Some([0; 6]),
        ..Default::default()
    };
    a.d.connect_with(&qa, gid, Qpn::new(5).unwrap(), ALL_ACCESS, &p);
    let sge = [sge(a.buf, 8, a.key)];
    a.d.post_send(&mut a.qp, &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &sge));
    a.d.post_send(&mut a.qp, &send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &sge));
    let c = a.d.wait_cqe(&mut a.cq);
    assert_eq!((c.wr_id, c.status), (1, WC_RETRY_EXC_ERR));
    let c = a.d.wait_cqe(&mut a.cq);
    assert_eq!((c.wr_id, c.status), (2, WC_WR_FLUSH_ERR));
    assert_eq!(a.d.query_qp(qa.qpn).qp_state, QPS_ERR);
    assert_eq!(
        a.d.query_stats()[STAT_PORT_TX_FRAMES],
        0,
        "no destination MAC resolved: nothing goes out to 00:00:00:00:00:00"
    );
}

#[test]
fn ud_between_two_devices() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = side(dir.path(), 1, QPT_UD, None);
    let mut b = side(dir.path(), 2, QPT_UD, None);
    let (qa, qb) = (a.qp, b.qp);
    a.d.activate_ud(&qa, 0x42);
    b.d.activate_ud(&qb, 0x42);
    b.d.post_recv(&mut b.qp, 7, &[sge(b.buf, 2048, b.key)]);
    a.d.ram.write(a.buf, b"hello over udp");
    let w = ud_wqe(
        1,
        WR_SEND_WITH_IMM,
        sge(a.buf, 14, a.key),
        gid_v4(127, 0, 1, 2),
        qb.qpn,
        0x42,
    );
    a.d.post_send(&mut a.qp, &w);
    assert_eq!(a.d.wait_cqe(&mut a.cq).status, WC_SUCCESS);
    let r = b.d.wait_cqe(&mut b.cq);
    assert_eq!((r.wr_id, r.src_qp, r.byte_len), (7, qa.qpn, 14 + GRH_SIZE));
    assert_eq!(b.d.ram.read(b.buf + GRH_SIZE as u64, 14), b"hello over udp");
}

/// Header of every message: sequence number and CRC-32 of the body.
const HEADER: usize = 12;
/// The receive buffer slot of one message.
const SLOT: u64 = 512;

/// Posts receive WR `n` on `b`, into slot `n` of its buffer's `slots` slots of `SLOT` bytes.
fn post_recv_slot(b: &mut Side, n: u64, slots: u64) {
    let slot = sge(b.buf + (n % slots) * SLOT, SLOT as u32, b.key);
    b.d.post_recv(&mut b.qp, n, &[slot]);
}

#[test]
fn rc_in_order_exactly_once_through_devices_with_faults() {
    const MESSAGES: u64 = 3000;
    const WINDOW: u32 = 32;
    let dir = tempfile::tempdir().unwrap();
    let faults = faults(0.02, 0.01, 1234);
    let (mut a, mut b) = connected(dir.path(), QPT_RC, Some(faults));
    let recv_slots = (BUF / SLOT) as u32;
    let mut posted_recv = 0u64;
    while posted_recv < (recv_slots as u64).min(200) {
        post_recv_slot(&mut b, posted_recv, recv_slots as u64);
        posted_recv += 1;
    }
    let (mut sent, mut acked, mut received) = (0u64, 0u64, 0u64);
    let start = std::time::Instant::now();
    while received < MESSAGES || acked < MESSAGES {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "stalled at sent {sent} acked {acked} received {received}"
        );
        while sent < MESSAGES && sent - acked < WINDOW as u64 {
            let len = 16 + (sent % 400) as usize;
            let body = pattern(sent, len - HEADER);
            let mut m = sent.to_le_bytes().to_vec();
            m.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            m.extend_from_slice(&body);
            let addr = a.buf + (sent % WINDOW as u64) * SLOT;
            a.d.ram.write(addr, &m);
            a.d.write_send(
                &mut a.qp,
                &send_wqe(
                    sent,
                    WR_SEND,
                    WQE_FLAG_SIGNALED,
                    &[Sge {
                        addr,
                        length: len as u32,
                        lkey: a.key,
                    }],
                ),
            );
            sent += 1;
        }
        let qp = a.qp;
        a.d.ring_sq(&qp);
        while let Some(c) = a.d.poll_cq(&mut a.cq) {
            assert_eq!((c.status, c.wr_id), (WC_SUCCESS, acked));
            acked += 1;
        }
        while let Some(c) = b.d.poll_cq(&mut b.cq) {
            assert_eq!(c.status, WC_SUCCESS);
            assert_eq!(c.wr_id, received, "receive WRs complete in order");
            let m = b.d.ram.read(
                b.buf + (c.wr_id % recv_slots as u64) * SLOT,
                c.byte_len as usize,
            );
            assert_eq!(
                u64::from_le_bytes(m[..8].try_into().unwrap()),
                received,
                "in order, exactly once"
            );
            assert_eq!(
                u32::from_le_bytes(m[8..12].try_into().unwrap()),
                crc32fast::hash(&m[HEADER..])
            );
            received += 1;
            post_recv_slot(&mut b, posted_recv, recv_slots as u64);
            posted_recv += 1;
        }
        std::thread::yield_now();
    }
    assert!(
        a.d.query_stats()[STAT_RETRANSMITS] > 0,
        "faults must have caused retransmissions"
    );
}

/// 64 RDMA WRITEs of 1 MiB posted at once (64 MiB outstanding as far as the application is
/// concerned) between two devices over a real dgram wire: the requester's send window
/// (`MAX_INFLIGHT_PSNS` packets) keeps the bytes on the wire within what the socket buffers
/// hold, so no WRITE ends in RETRY_EXC_ERR and every byte arrives.
#[test]
fn rc_64_writes_of_1_mib_posted_at_once_all_arrive() {
    const WRITES: u64 = 64;
    const MSG: u64 = 1 << 20;
    /// Distinct source buffers (each with its own pattern); WRITE i sends source i % SOURCES.
    const SOURCES: u64 = 4;
    let dir = tempfile::tempdir().unwrap();
    let mut a = device(dir.path(), 1, None);
    let mut b = device(dir.path(), 2, None);
    // An SQ deep enough for every WRITE at once.
    let (mut a_cq, mut qa, _b_cq) = deep_rc_pair(&mut a, &mut b, 1, PD);
    let (src, src_key) = a.buffer(PD, SOURCES * MSG, ALL_ACCESS);
    let patterns: Vec<Vec<u8>> = (0..SOURCES)
        .map(|i| pattern(100 + i, MSG as usize))
        .collect();
    for (i, p) in patterns.iter().enumerate() {
        a.ram.write(src + i as u64 * MSG, p);
    }
    let (dst, dst_key) = b.buffer(PD, WRITES * MSG, ALL_ACCESS);
    for i in 0..WRITES {
        let w = rdma_wqe(
            i,
            WR_RDMA_WRITE,
            sge(src + (i % SOURCES) * MSG, MSG as u32, src_key),
            dst + i * MSG,
            dst_key,
        );
        a.write_send(&mut qa, &w);
    }
    a.ring_sq(&qa);
    for i in 0..WRITES {
        let c = a.wait_cqe(&mut a_cq);
        assert_eq!((c.wr_id, c.status, c.byte_len), (i, WC_SUCCESS, MSG as u32));
    }
    for i in 0..WRITES {
        assert!(
            b.ram.read(dst + i * MSG, MSG as usize) == patterns[(i % SOURCES) as usize],
            "WRITE {i} arrived intact"
        );
    }
    // ACK timeouts may still happen when a loaded host deschedules a data-path thread for
    // longer than the timeout; they resend at most one window and must not end the QP.
    assert_eq!(a.query_qp(qa.qpn).qp_state, QPS_RTS);
}

/// A pcap of a real exchange between two devices: every frame is Ethernet between the two
/// devices' MACs, and every RoCE frame's ICRC recomputes from the capture.
#[test]
fn device_pcap_of_a_real_exchange_is_ethernet_with_good_icrcs() {
    use rox_nic::port::pcap::read_frames;
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("a.pcap");
    let (one, two) = dgram_wire(dir.path(), "1.sock", "2.sock");
    let mut port = PortConfig::new(one);
    port.pcap = Some(pcap.clone());
    let (ga, gb) = (gid_v4(127, 0, SUBNET, 1), gid_v4(127, 0, SUBNET, 2));
    {
        let mut a = port_device_with(port, SUBNET, 1);
        let mut b = port_device(two, SUBNET, 2, None);
        let mut cqa = a.create_cq(6);
        let cqb = b.create_cq(6);
        let qa = a.create_qp(QPT_RC, PD, cqa.id, cqa.id, SRQ_NONE);
        let qb = b.create_qp(QPT_RC, PD, cqb.id, cqb.id, SRQ_NONE);
        a.connect(&qa, gb, qb.qpn, ALL_ACCESS);
        b.connect(&qb, ga, qa.qpn, ALL_ACCESS);
        let (abuf, bbuf) = (a.ram.alloc(BUF, 4096), b.ram.alloc(BUF, 4096));
        let ka = a.reg_mr(PD, abuf, BUF, ALL_ACCESS).unwrap();
        let kb = b.reg_mr(PD, bbuf, BUF, ALL_ACCESS).unwrap();
        let mut qa = qa;
        for (i, op) in [WR_RDMA_WRITE, WR_RDMA_READ].into_iter().enumerate() {
            let w = rdma_wqe(i as u64, op, sge(abuf, 5000, ka), bbuf, kb);
            a.post_send(&mut qa, &w);
            assert_eq!(a.wait_cqe(&mut cqa).status, WC_SUCCESS);
        }
    } // dropping the devices flushes the capture
    let frames = read_frames(&std::fs::read(&pcap).unwrap()).unwrap();
    let (ma, mb) = (test_mac(&ga), test_mac(&gb));
    assert!(frames.len() >= 8, "{} frames", frames.len());
    for (_, f) in &frames {
        let (dst, src) = (&f[..6], &f[6..12]);
        assert!((src, dst) == (&ma[..], &mb[..]) || (src, dst) == (&mb[..], &ma[..]));
        assert_eq!(
            frame::ethertype(f[..ETH_HEADER_LEN].try_into().unwrap()),
            frame::ETHERTYPE_IPV4
        );
        let ip = &f[ETH_HEADER_LEN..];
        let at = ip.len() - wire::ICRC_LEN;
        assert_eq!(
            wire::compute_icrc(&ip[..at], wire::IPV4_HEADER_LEN),
            u32::from_le_bytes(ip[at..].try_into().unwrap())
        );
    }
}
