//! rox-nic devices with Ethernet ports, programmed like drivers: two devices wired back to
//! back through `dgram` ports; bad frames on the port (each dropped and counted, nothing else
//! disturbed); the paired netdev's frames forwarded both ways; loopback with and without a
//! port; a pcap of a real exchange.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use rox_nic::device::FaultConfig;
use rox_nic::port::frame::{self, ETH_HEADER_LEN};
use rox_nic::roce::wire;
use rox_nic::testkit::pair::*;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
const BUF: u64 = 1 << 20;

/// The devices of these tests own GIDs 127.0.1.x.
const SUBNET: u8 = 1;

/// Device `last` of the back-to-back pair in `dir`: device 1 and device 2 send to each
/// other's socket.
fn device(dir: &Path, last: u8, faults: Option<FaultConfig>) -> TestDriver {
    let (one, two) = dgram_wire(dir, "1.sock", "2.sock");
    let link = if last == 1 { one } else { two };
    port_device(link, SUBNET, last, faults)
}

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
    let w = with_rdma(
        send_wqe(
            2,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(a.buf, 50_000, a.key)],
        ),
        b.buf + 300_000,
        b.key,
    );
    a.d.post_send(&mut a.qp, &w);
    assert_eq!(a.d.wait_cqe(&mut a.cq).status, WC_SUCCESS);
    assert_eq!(b.d.ram.read(b.buf + 300_000, 50_000), msg[..50_000]);
    let w = with_rdma(
        send_wqe(
            3,
            WR_RDMA_READ,
            WQE_FLAG_SIGNALED,
            &[sge(a.buf + 500_000, 50_000, a.key)],
        ),
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
    let mut at = QpAttr {
        qp_state: QPS_INIT,
        port_num: PORT_NUM,
        qp_access_flags: ALL_ACCESS,
        ..Default::default()
    };
    assert_eq!(
        a.d.modify_qp(
            qa.qpn,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
            at
        )
        .status,
        0
    );
    at.qp_state = QPS_RTR;
    at.path_mtu = MTU_1024;
    at.dest_qp_num = Qpn::new(5).unwrap();
    at.ah.dgid = gid;
    let m = QP_STATE
        | QP_AV
        | QP_PATH_MTU
        | QP_DEST_QPN
        | QP_RQ_PSN
        | QP_MAX_DEST_RD_ATOMIC
        | QP_MIN_RNR_TIMER;
    assert_eq!(a.d.modify_qp(qa.qpn, m, at).status, 0);
    at.qp_state = QPS_RTS;
    at.timeout = 1; // 8 us * ... shortest real timeout
    at.retry_cnt = 2;
    at.rnr_retry = 0;
    let m = QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    assert_eq!(a.d.modify_qp(qa.qpn, m, at).status, 0);
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
    let w = with_ud(
        send_wqe(
            1,
            WR_SEND_WITH_IMM,
            WQE_FLAG_SIGNALED,
            &[sge(a.buf, 14, a.key)],
        ),
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

#[test]
fn rc_in_order_exactly_once_through_devices_with_faults() {
    const MESSAGES: u64 = 3000;
    const SLOT: u64 = 512;
    const WINDOW: u32 = 32;
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultConfig {
        loss: 0.02,
        duplicate: 0.02,
        reorder: 0.02,
        corrupt: 0.01,
        seed: 1234,
    };
    let (mut a, mut b) = connected(dir.path(), QPT_RC, Some(faults));
    let recv_slots = (BUF / SLOT) as u32;
    let mut posted_recv = 0u64;
    while posted_recv < (recv_slots as u64).min(200) {
        b.d.post_recv(
            &mut b.qp,
            posted_recv,
            &[sge(
                b.buf + (posted_recv % recv_slots as u64) * SLOT,
                SLOT as u32,
                b.key,
            )],
        );
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
            b.d.post_recv(
                &mut b.qp,
                posted_recv,
                &[sge(
                    b.buf + (posted_recv % recv_slots as u64) * SLOT,
                    SLOT as u32,
                    b.key,
                )],
            );
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
    let mut a_cq = a.create_cq(8);
    let b_cq = b.create_cq(8);
    // An SQ deep enough for every WRITE at once.
    let (c, mut qa) = a.create_qp_cmd(QPT_RC, PD, a_cq.id, a_cq.id, SRQ_NONE, 7, 1);
    qa.qpn = a.run::<CreateQp>(c);
    let qb = b.create_qp(QPT_RC, PD, b_cq.id, b_cq.id, SRQ_NONE);
    let p = ConnectParams {
        mtu: MTU_4096,
        ..Default::default()
    };
    a.connect_with(&qa, gid_v4(127, 0, 1, 2), qb.qpn, ALL_ACCESS, &p);
    b.connect_with(&qb, gid_v4(127, 0, 1, 1), qa.qpn, ALL_ACCESS, &p);
    let (src, src_key) = a.buffer(PD, SOURCES * MSG, ALL_ACCESS);
    let patterns: Vec<Vec<u8>> = (0..SOURCES)
        .map(|i| pattern(100 + i, MSG as usize))
        .collect();
    for (i, p) in patterns.iter().enumerate() {
        a.ram.write(src + i as u64 * MSG, p);
    }
    let (dst, dst_key) = b.buffer(PD, WRITES * MSG, ALL_ACCESS);
    for i in 0..WRITES {
        let w = with_rdma(
            send_wqe(
                i,
                WR_RDMA_WRITE,
                WQE_FLAG_SIGNALED,
                &[sge(src + (i % SOURCES) * MSG, MSG as u32, src_key)],
            ),
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

/// A device whose port's far end is a socket the test holds (`wire`), with a paired netdev
/// whose guest end is another (`guest`; None: no guest attached). Like QEMU's dgram netdev, the
/// guest socket is not connected: it sends to `netdev` by address.
struct Rig {
    d: TestDriver,
    wire: UnixDatagram,
    guest: Option<UnixDatagram>,
    netdev: std::path::PathBuf,
    mac: [u8; 6],
    gid: [u8; 16],
}

const RIG_HOST: u8 = 1;
/// The MAC and GID of the test's side of the wire.
const PEER_MAC: [u8; 6] = [2, 0, 127, 0, 9, 9];
const PEER_GID_LAST: u8 = 99;
const READ_TIMEOUT: Duration = Duration::from_secs(10);

fn rig(dir: &Path, guest_attached: bool, pcap: Option<&Path>) -> Rig {
    let (wire_path, dev_path) = (dir.join("wire.sock"), dir.join("dev.sock"));
    let (guest_path, nd_path) = (dir.join("guest.sock"), dir.join("nd.sock"));
    let wire = UnixDatagram::bind(&wire_path).unwrap();
    let guest = guest_attached.then(|| UnixDatagram::bind(&guest_path).unwrap());
    let gid = gid_v4(127, 0, SUBNET, RIG_HOST);
    let mac = test_mac(&gid);
    let mut cfg = rox_nic::DeviceConfig::new(mac);
    cfg.port = Some(PortConfig {
        pcap: pcap.map(Path::to_path_buf),
        ..PortConfig::new(LinkSpec::Dgram {
            local: dev_path.clone(),
            remote: wire_path,
        })
    });
    cfg.netdev = Some(LinkSpec::Dgram {
        local: nd_path.clone(),
        remote: guest_path,
    });
    let mut d = TestDriver::new(cfg);
    d.set_gid(0, gid);
    wire.connect(&dev_path).unwrap();
    wire.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    if let Some(g) = &guest {
        g.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    }
    Rig {
        d,
        wire,
        guest,
        netdev: nd_path,
        mac,
        gid,
    }
}

fn peer_gid() -> [u8; 16] {
    gid_v4(127, 0, SUBNET, PEER_GID_LAST)
}

/// A RoCEv2 frame from the test's side to the rig's device.
fn roce_frame(
    rig: &Rig,
    opcode: u8,
    dest_qpn: Qpn,
    pkey: u16,
    deth: Option<wire::Deth>,
    payload: &[u8],
) -> Vec<u8> {
    roce_frame_to(
        peer_gid(),
        rig.gid,
        rig.mac,
        opcode,
        dest_qpn,
        pkey,
        deth,
        payload,
    )
}

/// A RoCEv2 frame from `sgid` to `dgid` in an Ethernet frame to `dmac`.
#[allow(clippy::too_many_arguments)]
fn roce_frame_to(
    sgid: [u8; 16],
    dgid: [u8; 16],
    dmac: [u8; 6],
    opcode: u8,
    dest_qpn: Qpn,
    pkey: u16,
    deth: Option<wire::Deth>,
    payload: &[u8],
) -> Vec<u8> {
    let mut hdr = wire::Headers::new(wire::Bth {
        opcode,
        solicited: false,
        pkey,
        dest_qpn,
        ack_req: false,
        psn: Psn::default(),
    });
    hdr.deth = deth;
    frames::roce_frame(&dmac, &PEER_MAC, (sgid, dgid), &hdr, payload)
}

/// An ARP-like broadcast frame carrying `marker` (for the netdev).
fn netdev_frame(dst: [u8; 6], marker: u32) -> Vec<u8> {
    const ETHERTYPE_ARP: [u8; 2] = [0x08, 0x06];
    let mut f = [&dst[..], &PEER_MAC, &ETHERTYPE_ARP].concat();
    f.extend_from_slice(&marker.to_be_bytes());
    f.resize(60, 0);
    f
}

fn recv(sock: &UnixDatagram) -> Vec<u8> {
    let mut buf = vec![0u8; 65536];
    let n = sock.recv(&mut buf).expect("a frame arrives");
    buf.truncate(n);
    buf
}

fn wait_stat(d: &mut TestDriver, counter: usize, at_least: u64) -> Vec<u64> {
    let give_up = Instant::now() + READ_TIMEOUT;
    loop {
        let s = d.query_stats();
        if s[counter] >= at_least {
            return s;
        }
        assert!(
            Instant::now() < give_up,
            "counter {counter} stayed at {}",
            s[counter]
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

const UD_QKEY: u32 = 0x42;
/// A QPN no test creates.
const NO_SUCH_QPN: Qpn = Qpn::new(0x7777).unwrap();
const UD_SEND_ONLY: u8 = 0x64;

/// One bad frame of each kind: dropped, the right counter rises, the device keeps working
/// and the netdev frame sent behind it still reaches the guest.
#[test]
fn bad_frames_on_the_port_are_dropped_and_counted_and_netdev_traffic_goes_on() {
    use rox_uapi::admin::*;
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), true, None);
    let mut cq = r.d.create_cq(6);
    let mut ud = r.d.create_qp(QPT_UD, PD, cq.id, cq.id, SRQ_NONE);
    r.d.activate_ud(&ud, UD_QKEY);
    let (buf, key) = r.d.buffer(PD, 4096, ALL_ACCESS);
    r.d.post_recv(&mut ud, 1, &[sge(buf, 4096, key)]);
    let deth = |qkey| {
        Some(wire::Deth {
            qkey,
            src_qpn: Qpn::new(0x77).unwrap(),
        })
    };
    let good = roce_frame(&r, UD_SEND_ONLY, ud.qpn, 0xffff, deth(UD_QKEY), b"fine");
    let mut bad_icrc = good.clone();
    *bad_icrc.last_mut().unwrap() ^= 0x10;
    let mut options = good.clone();
    {
        // Insert 4 bytes of IPv4 options (NOPs): IHL 6, total length + 4, checksum redone.
        const NOP: u8 = 1;
        let ip = ETH_HEADER_LEN;
        options.splice(ip + 20..ip + 20, [NOP; 4]);
        options[ip] = 0x46;
        let total = u16::from_be_bytes([options[ip + 2], options[ip + 3]]) + 4;
        options[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
        options[ip + 10..ip + 12].fill(0);
        let sum = wire::ipv4_header_checksum(&options[ip..ip + 24]);
        options[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    }
    let mut vlan = good.clone();
    vlan[12..14].copy_from_slice(&frame::ETHERTYPE_VLAN.to_be_bytes());
    let mut other_mac = good.clone();
    other_mac[..6].copy_from_slice(&[2, 0, 0, 0, 0x55, 0x55]);
    let mut bad_ip_len = good.clone();
    bad_ip_len[ETH_HEADER_LEN + 2..ETH_HEADER_LEN + 4].copy_from_slice(&9999u16.to_be_bytes());
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        (
            "shorter than a header",
            good[..10].to_vec(),
            STAT_PORT_DROP_MALFORMED,
        ),
        (
            "truncated IP packet",
            good[..ETH_HEADER_LEN + 30].to_vec(),
            STAT_PORT_DROP_MALFORMED,
        ),
        (
            "IP length beyond the frame",
            bad_ip_len,
            STAT_PORT_DROP_MALFORMED,
        ),
        ("IPv4 options on RoCE", options, STAT_PORT_DROP_MALFORMED),
        ("wrong ICRC", bad_icrc, STAT_RX_ICRC_ERRORS),
        (
            "unknown QP",
            roce_frame(&r, UD_SEND_ONLY, NO_SUCH_QPN, 0xffff, deth(UD_QKEY), b"x"),
            STAT_RX_UNKNOWN_QP,
        ),
        (
            "bad P_Key",
            roce_frame(&r, UD_SEND_ONLY, ud.qpn, 0x1234, deth(UD_QKEY), b"x"),
            STAT_RX_BAD_KEY,
        ),
        (
            "bad UD Q_Key",
            roce_frame(&r, UD_SEND_ONLY, ud.qpn, 0xffff, deth(UD_QKEY + 1), b"x"),
            STAT_RX_BAD_KEY,
        ),
        ("VLAN-tagged", vlan, STAT_PORT_DROP_VLAN),
        (
            "longer than MTU + header",
            vec![0xff; 9000 + ETH_HEADER_LEN + 1],
            STAT_PORT_DROP_OVERSIZE,
        ),
        (
            "unicast to another MAC",
            other_mac,
            STAT_PORT_DROP_OTHER_MAC,
        ),
    ];
    let guest = r.guest.take().unwrap();
    for (marker, (what, bad, counter)) in cases.into_iter().enumerate() {
        let before = r.d.query_stats();
        r.wire.send(&bad).unwrap();
        let normal = netdev_frame([0xff; 6], marker as u32);
        r.wire.send(&normal).unwrap();
        assert_eq!(
            recv(&guest),
            normal,
            "{what}: the netdev frame behind it arrived"
        );
        let after = wait_stat(&mut r.d, counter, before[counter] + 1);
        assert_eq!(after[counter], before[counter] + 1, "{what}");
        assert_eq!(
            after[STAT_CQES], before[STAT_CQES],
            "{what}: nothing delivered"
        );
    }
    // The device still works: the good frame arrives at the UD QP.
    r.wire.send(&good).unwrap();
    let c = r.d.wait_cqe(&mut cq);
    assert_eq!((c.status, c.byte_len), (WC_SUCCESS, 4 + GRH_SIZE));
    assert_eq!(r.d.ram.read(buf + GRH_SIZE as u64, 4), b"fine");
}

#[test]
fn netdev_frames_are_forwarded_both_ways_unchanged() {
    use rox_uapi::admin::*;
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), true, None);
    let guest = r.guest.take().unwrap();
    // Guest -> wire, unchanged (the device's own MAC as source, any destination).
    for i in 0..20u32 {
        let mut f = netdev_frame(PEER_MAC, i);
        f[6..12].copy_from_slice(&r.mac);
        f.resize(60 + i as usize * 50, i as u8);
        guest.send_to(&f, &r.netdev).unwrap();
        assert_eq!(recv(&r.wire), f);
    }
    // Wire -> guest: unicast to the device's MAC, broadcast, multicast, and UDP 4791 to a
    // multicast group no QP of the device is attached to.
    let mut to_guest = vec![
        netdev_frame(r.mac, 1),
        netdev_frame([0xff; 6], 2),
        netdev_frame([0x01, 0x00, 0x5e, 0, 0, 0xfb], 3),
    ];
    let mut mcast = roce_frame(
        &r,
        UD_SEND_ONLY,
        Qpn::GSI,
        0xffff,
        Some(wire::Deth {
            qkey: 1,
            src_qpn: Qpn::new(2).unwrap(),
        }),
        b"m",
    );
    mcast[..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
    let ip = ETH_HEADER_LEN;
    mcast[ip + 16..ip + 20].copy_from_slice(&[239, 1, 2, 3]);
    mcast[ip + 10..ip + 12].fill(0);
    let sum = wire::ipv4_header_checksum(&mcast[ip..ip + 20]);
    mcast[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
    to_guest.push(mcast);
    for f in &to_guest {
        r.wire.send(f).unwrap();
        assert_eq!(&recv(&guest), f);
    }
    let s = wait_stat(&mut r.d, STAT_PORT_TO_NETDEV, to_guest.len() as u64);
    assert_eq!(s[STAT_PORT_TO_NETDEV], to_guest.len() as u64);
    assert_eq!(s[STAT_PORT_FROM_NETDEV], 20);
    assert_eq!(s[STAT_PORT_TX_FRAMES], 20);
    assert_eq!(s[STAT_PORT_RX_FRAMES], to_guest.len() as u64);
    assert_eq!(s[STAT_PORT_DROP_NETDEV], 0);
}

#[test]
fn frames_for_an_unattached_netdev_are_dropped_and_counted() {
    use rox_uapi::admin::*;
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), false, None);
    for i in 0..5 {
        r.wire.send(&netdev_frame([0xff; 6], i)).unwrap();
    }
    let s = wait_stat(&mut r.d, STAT_PORT_DROP_NETDEV, 5);
    assert_eq!((s[STAT_PORT_DROP_NETDEV], s[STAT_PORT_TO_NETDEV]), (5, 0));
}

/// RC between two QPs of one device: looped back inside it, with or without a port; with
/// one, nothing reaches the wire.
#[test]
fn same_device_loopback_without_a_port_and_never_on_the_wire_with_one() {
    use rox_uapi::admin::*;
    let dir = tempfile::tempdir().unwrap();
    let gid = gid_v4(127, 0, SUBNET, 5);
    let mut bare = TestDriver::new(rox_nic::DeviceConfig::new(test_mac(&gid)));
    bare.set_gid(0, gid);
    let r = rig(dir.path(), true, None);
    for (mut d, gid, wire) in [(bare, gid, None), (r.d, r.gid, Some(r.wire))] {
        let mut cq = d.create_cq(6);
        let mut q1 = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
        let mut q2 = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
        d.connect(&q1, gid, q2.qpn, ALL_ACCESS);
        d.connect(&q2, gid, q1.qpn, ALL_ACCESS);
        let (buf, key) = d.buffer(PD, 65536, ALL_ACCESS);
        let msg = pattern(5, 10_000);
        d.ram.write(buf, &msg);
        d.post_recv(&mut q2, 1, &[sge(buf + 32768, 16384, key)]);
        d.post_send(
            &mut q1,
            &send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &[sge(buf, 10_000, key)]),
        );
        let mut done = [d.wait_cqe(&mut cq), d.wait_cqe(&mut cq)];
        done.sort_by_key(|c| c.wr_id);
        assert_eq!((done[0].status, done[0].byte_len), (WC_SUCCESS, 10_000));
        assert_eq!(done[1].status, WC_SUCCESS);
        assert_eq!(d.ram.read(buf + 32768, 10_000), msg);
        let s = d.query_stats();
        assert_eq!(s[STAT_PORT_TX_FRAMES], 0, "loopback never reaches the wire");
        if let Some(w) = wire {
            w.set_nonblocking(true).unwrap();
            assert!(w.recv(&mut [0u8; 64]).is_err(), "nothing on the wire");
        }
        let _ = &mut q1;
    }
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
            let w = with_rdma(
                send_wqe(i as u64, op, WQE_FLAG_SIGNALED, &[sge(abuf, 5000, ka)]),
                bbuf,
                kb,
            );
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

/// A burst from the port larger than the kernel lets wait on the guest's unconnected socket
/// (net.unix.max_dgram_qlen): the device holds what the guest cannot take yet, so a guest that
/// reads late still gets every frame, in order.
#[test]
fn a_burst_for_a_slow_guest_waits_in_the_backlog_and_arrives_in_order() {
    use rox_uapi::admin::*;
    const BURST: u32 = 300;
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), true, None);
    let guest = r.guest.take().unwrap();
    for i in 0..BURST {
        r.wire.send(&netdev_frame(r.mac, i)).unwrap();
    }
    wait_stat(&mut r.d, STAT_PORT_RX_FRAMES, BURST as u64);
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..BURST {
        assert_eq!(recv(&guest), netdev_frame(r.mac, i), "frame {i}");
    }
    let s = wait_stat(&mut r.d, STAT_PORT_TO_NETDEV, BURST as u64);
    assert_eq!(s[STAT_PORT_DROP_NETDEV], 0);
}

/// An IPv4 multicast group as a GID, its MAC (RFC 1112), an IPv6 one and its MAC (RFC 2464).
const GROUP_V4: [u8; 4] = [239, 1, 2, 3];
const GROUP_V4_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];
const GROUP_V6: [u8; 16] = [
    0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x02, 0x03,
];
const GROUP_V6_MAC: [u8; 6] = [0x33, 0x33, 0x00, 0x01, 0x02, 0x03];
/// The test side's IPv6 address (a GID of the peer).
const PEER_GID_V6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99];

fn mcast(qpn: Qpn, gid: [u8; 16]) -> AdminPayload {
    payload(&McastCmd {
        qpn,
        reserved: 0,
        gid,
    })
}

/// A UD QP with the Q_Key `qkey` and one receive buffer posted.
fn ud_receiver(r: &mut Rig, cq: &TestCq, qkey: u32, wr_id: u64) -> (TestQp, u64) {
    let mut qp = r.d.create_qp(QPT_UD, PD, cq.id, cq.id, SRQ_NONE);
    r.d.activate_ud(&qp, qkey);
    let (buf, key) = r.d.buffer(PD, 4096, ALL_ACCESS);
    r.d.post_recv(&mut qp, wr_id, &[sge(buf, 4096, key)]);
    (qp, buf)
}

/// Frames to a group reach every attached QP that has the packet's Q_Key (IPv4 and IPv6
/// groups); a detached group's frames go to the netdev again; bad attach/detach commands get
/// their status and change nothing.
#[test]
fn multicast_frames_reach_every_attached_qp_with_its_own_qkey() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), true, None);
    let guest = r.guest.take().unwrap();
    let mut cq = r.d.create_cq(6);
    let (q1, buf1) = ud_receiver(&mut r, &cq, UD_QKEY, 1);
    let (q2, buf2) = ud_receiver(&mut r, &cq, UD_QKEY, 2);
    let (q3, _) = ud_receiver(&mut r, &cq, UD_QKEY + 1, 3);
    let group = gid_v4(GROUP_V4[0], GROUP_V4[1], GROUP_V4[2], GROUP_V4[3]);
    for q in [&q1, &q2, &q3] {
        r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(q.qpn, group));
    }
    // Attaching twice is no change (one copy per QP below).
    r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(q1.qpn, group));
    let before = r.d.query_stats();
    let deth = Some(wire::Deth {
        qkey: UD_QKEY,
        src_qpn: Qpn::new(0x77).unwrap(),
    });
    let f = roce_frame_to(
        peer_gid(),
        group,
        GROUP_V4_MAC,
        UD_SEND_ONLY,
        Qpn::MULTICAST,
        0xffff,
        deth,
        b"group",
    );
    r.wire.send(&f).unwrap();
    let mut got = [r.d.wait_cqe(&mut cq), r.d.wait_cqe(&mut cq)];
    got.sort_by_key(|c| c.wr_id);
    for (c, (wr_id, qpn)) in got.iter().zip([(1, q1.qpn), (2, q2.qpn)]) {
        assert_eq!(
            (c.status, c.wr_id, c.qp_num, c.src_qp, c.byte_len),
            (
                WC_SUCCESS,
                wr_id,
                qpn,
                Qpn::new(0x77).unwrap(),
                5 + GRH_SIZE
            )
        );
    }
    for buf in [buf1, buf2] {
        assert_eq!(r.d.ram.read(buf + GRH_SIZE as u64, 5), b"group");
        // The GRH area holds the IPv4 header: its destination is the group.
        assert_eq!(r.d.ram.read(buf + GRH_SIZE as u64 - 4, 4), GROUP_V4);
    }
    r.d.expect_no_cqe(&mut cq, Duration::from_millis(50));
    let after = r.d.query_stats();
    assert_eq!(
        after[STAT_RX_MCAST_COPIES],
        before[STAT_RX_MCAST_COPIES] + 3
    );
    assert_eq!(
        after[STAT_RX_BAD_KEY],
        before[STAT_RX_BAD_KEY] + 1,
        "q3's Q_Key differs"
    );
    assert_eq!(after[STAT_PORT_TO_NETDEV], before[STAT_PORT_TO_NETDEV]);

    // An IPv6 group with q3 only.
    r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(q3.qpn, GROUP_V6));
    let deth3 = Some(wire::Deth {
        qkey: UD_QKEY + 1,
        src_qpn: Qpn::new(0x78).unwrap(),
    });
    let f6 = roce_frame_to(
        PEER_GID_V6,
        GROUP_V6,
        GROUP_V6_MAC,
        UD_SEND_ONLY,
        Qpn::MULTICAST,
        0xffff,
        deth3,
        b"six",
    );
    r.wire.send(&f6).unwrap();
    let c = r.d.wait_cqe(&mut cq);
    assert_eq!(
        (c.status, c.qp_num, c.src_qp, c.byte_len),
        (WC_SUCCESS, q3.qpn, Qpn::new(0x78).unwrap(), 3 + GRH_SIZE)
    );

    // Bad commands.
    let mut rc_cq = r.d.create_cq(2);
    let rc = r.d.create_qp(QPT_RC, PD, rc_cq.id, rc_cq.id, SRQ_NONE);
    let status = |r: &mut Rig, op, qpn, gid| r.d.admin(op, mcast(qpn, gid)).status;
    assert_eq!(
        status(&mut r, ADMIN_OP_ATTACH_MCAST, rc.qpn, group),
        ADMIN_STATUS_BAD_PARAM,
        "RC QP"
    );
    let own_gid = r.gid;
    assert_eq!(
        status(&mut r, ADMIN_OP_ATTACH_MCAST, q1.qpn, own_gid),
        ADMIN_STATUS_BAD_PARAM,
        "unicast GID"
    );
    assert_eq!(
        status(&mut r, ADMIN_OP_ATTACH_MCAST, NO_SUCH_QPN, group),
        ADMIN_STATUS_BAD_HANDLE,
        "no QP"
    );
    assert_eq!(
        status(&mut r, ADMIN_OP_DETACH_MCAST, rc.qpn, group),
        ADMIN_STATUS_BAD_HANDLE,
        "not attached"
    );
    assert_eq!(
        status(&mut r, ADMIN_OP_DETACH_MCAST, q1.qpn, GROUP_V6),
        ADMIN_STATUS_BAD_HANDLE,
        "not in that group"
    );
    r.d.expect_no_cqe(&mut rc_cq, Duration::from_millis(1));

    // Leaving: q1 and q2 detach, q3 is destroyed (which detaches it): the group is gone and
    // its frames are the netdev's again.
    r.d.admin_ok(ADMIN_OP_DETACH_MCAST, mcast(q1.qpn, group));
    assert_eq!(
        status(&mut r, ADMIN_OP_DETACH_MCAST, q1.qpn, group),
        ADMIN_STATUS_BAD_HANDLE,
        "detached twice"
    );
    r.d.admin_ok(ADMIN_OP_DETACH_MCAST, mcast(q2.qpn, group));
    r.d.admin_ok(
        ADMIN_OP_DESTROY_QP,
        payload(&QpnCmd {
            qpn: q3.qpn,
            reserved: 0,
        }),
    );
    assert_eq!(
        status(&mut r, ADMIN_OP_DETACH_MCAST, q3.qpn, GROUP_V6),
        ADMIN_STATUS_BAD_HANDLE,
        "destroyed QP"
    );
    for frame in [&f, &f6] {
        r.wire.send(frame).unwrap();
        assert_eq!(
            &recv(&guest),
            frame,
            "an unattached group's frame goes to the netdev"
        );
    }
    r.d.expect_no_cqe(&mut cq, Duration::from_millis(50));
}

/// The group table's limits answer NO_RESOURCES, and QUERY_DEVICE reports them.
#[test]
fn multicast_table_limits() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), false, None);
    let resp = r.d.ram.alloc(4096, 4096);
    r.d.admin_ok(
        ADMIN_OP_QUERY_DEVICE,
        payload(&QueryCmd {
            index: 0,
            reserved: 0,
            resp_addr: resp,
        }),
    );
    let attr: DeviceAttr = r.d.ram.read_obj(resp);
    assert_eq!(
        (
            attr.max_mcast_grp,
            attr.max_mcast_qp_attach,
            attr.max_total_mcast_qp_attach
        ),
        (
            DEV_MAX_MCAST_GRP,
            DEV_MAX_MCAST_QP_ATTACH,
            DEV_MAX_TOTAL_MCAST_QP_ATTACH
        )
    );
    let cq = r.d.create_cq(2);
    let qps: Vec<TestQp> = (0..DEV_MAX_MCAST_QP_ATTACH + 1)
        .map(|_| r.d.create_qp(QPT_UD, PD, cq.id, cq.id, SRQ_NONE))
        .collect();
    let group = |i: u32| gid_v4(239, 2, (i >> 8) as u8, i as u8);
    for i in 0..DEV_MAX_MCAST_GRP {
        r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(qps[0].qpn, group(i)));
    }
    let full = r.d.admin(
        ADMIN_OP_ATTACH_MCAST,
        mcast(qps[0].qpn, group(DEV_MAX_MCAST_GRP)),
    );
    assert_eq!(full.status, ADMIN_STATUS_NO_RESOURCES, "group table full");
    for q in &qps[1..DEV_MAX_MCAST_QP_ATTACH as usize] {
        r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(q.qpn, group(0)));
    }
    let last = qps[DEV_MAX_MCAST_QP_ATTACH as usize].qpn;
    assert_eq!(
        r.d.admin(ADMIN_OP_ATTACH_MCAST, mcast(last, group(0)))
            .status,
        ADMIN_STATUS_NO_RESOURCES,
        "group full"
    );
    // A free place in the group lets the QP in.
    r.d.admin_ok(ADMIN_OP_DETACH_MCAST, mcast(qps[1].qpn, group(0)));
    r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(last, group(0)));
}

/// A UD send to a group leaves on the port in a frame to the group's MAC, and reaches this
/// device's own attached QPs (the sender's too); a send to another device's GID without a
/// destination MAC is dropped and counted.
#[test]
fn multicast_send_goes_on_the_wire_and_loops_back_to_attached_qps() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), false, None);
    let mut cq = r.d.create_cq(6);
    let (mut sender, sbuf) = ud_receiver(&mut r, &cq, UD_QKEY, 1);
    let (member, mbuf) = ud_receiver(&mut r, &cq, UD_QKEY, 2);
    let group = gid_v4(GROUP_V4[0], GROUP_V4[1], GROUP_V4[2], GROUP_V4[3]);
    for q in [&sender, &member] {
        r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(q.qpn, group));
    }
    let (data, key) = r.d.buffer(PD, 4096, ALL_ACCESS);
    r.d.ram.write(data, b"to all");
    let mut w = with_ud(
        send_wqe(9, WR_SEND, WQE_FLAG_SIGNALED, &[sge(data, 6, key)]),
        group,
        Qpn::MULTICAST,
        UD_QKEY,
    );
    w.seg = SqSeg {
        ud: UdSeg {
            dgid: group,
            dest_qpn: Qpn::MULTICAST,
            qkey: UD_QKEY,
            hop_limit: 1,
            dmac: GROUP_V4_MAC,
            ..Default::default()
        },
    };
    r.d.post_send(&mut sender, &w);
    let f = recv(&r.wire);
    assert_eq!(&f[..6], &GROUP_V4_MAC, "destination MAC");
    assert_eq!(&f[6..12], &r.mac, "source MAC");
    let ip = ETH_HEADER_LEN;
    assert_eq!(&f[ip + 16..ip + 20], &GROUP_V4, "destination IP");
    let mut cqes: Vec<Cqe> = (0..3).map(|_| r.d.wait_cqe(&mut cq)).collect();
    cqes.sort_by_key(|c| (c.qp_num, c.wr_id));
    let send = cqes.iter().find(|c| c.wr_id == 9).expect("send completion");
    assert_eq!(send.status, WC_SUCCESS);
    for (qpn, buf) in [(sender.qpn, sbuf), (member.qpn, mbuf)] {
        let c = cqes
            .iter()
            .find(|c| c.qp_num == qpn && c.wr_id != 9)
            .expect("a copy per QP");
        assert_eq!(
            (c.status, c.src_qp, c.byte_len),
            (WC_SUCCESS, sender.qpn, 6 + GRH_SIZE)
        );
        assert_eq!(r.d.ram.read(buf + GRH_SIZE as u64, 6), b"to all");
    }
    // No destination MAC for a unicast peer: dropped before the port, counted.
    let before = r.d.query_stats();
    let mut w = with_ud(
        send_wqe(10, WR_SEND, WQE_FLAG_SIGNALED, &[sge(data, 6, key)]),
        peer_gid(),
        Qpn::new(5).unwrap(),
        UD_QKEY,
    );
    w.seg = SqSeg {
        ud: UdSeg {
            dgid: peer_gid(),
            dest_qpn: Qpn::new(5).unwrap(),
            qkey: UD_QKEY,
            hop_limit: 64,
            ..Default::default()
        },
    };
    r.d.post_send(&mut sender, &w);
    assert_eq!(
        r.d.wait_cqe(&mut cq).status,
        WC_SUCCESS,
        "UD completes once sent"
    );
    let after = wait_stat(
        &mut r.d,
        STAT_PORT_DROP_NO_DMAC,
        before[STAT_PORT_DROP_NO_DMAC] + 1,
    );
    assert_eq!(
        after[STAT_PORT_DROP_NO_DMAC],
        before[STAT_PORT_DROP_NO_DMAC] + 1
    );
    assert_eq!(after[STAT_PORT_TX_FRAMES], before[STAT_PORT_TX_FRAMES]);
}
