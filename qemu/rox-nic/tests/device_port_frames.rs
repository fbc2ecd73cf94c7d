//! One device on its port with a test peer sending it raw frames: bad frames dropped and
//! counted, netdev traffic forwarded both ways, loopback that never reaches the wire, the
//! receive backlog of a slow guest, and multicast.

use rox_nic::port::frame::{self, ETH_HEADER_LEN};
use rox_nic::roce::wire;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

/// The devices of these tests own GIDs 127.0.1.x.
const SUBNET: u8 = 1;

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

const READ_TIMEOUT: Duration = Duration::from_secs(10);

fn rig(dir: &Path, guest_attached: bool, pcap: Option<&Path>) -> Rig {
    rig_with(dir, guest_attached, pcap, |_| {})
}

/// [`rig`] with `tweak` applied to the device's configuration.
fn rig_with(
    dir: &Path,
    guest_attached: bool,
    pcap: Option<&Path>,
    tweak: impl FnOnce(&mut rox_nic::DeviceConfig),
) -> Rig {
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
    tweak(&mut cfg);
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

const PEER_GID_LAST: u8 = 99;

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
    let route = (peer_gid(), rig.gid, rig.mac);
    roce_frame_to(route, &headers(opcode, dest_qpn, pkey, deth), payload)
}

/// The MAC and GID of the test's side of the wire.
const PEER_MAC: [u8; 6] = [2, 0, 127, 0, 9, 9];

/// The BTH (and DETH) of a packet from the test's side: no ACK request, PSN 0.
fn headers(opcode: u8, dest_qpn: Qpn, pkey: u16, deth: Option<wire::Deth>) -> wire::Headers {
    let mut hdr = wire::Headers::new(wire::Bth {
        opcode,
        solicited: false,
        pkey,
        dest_qpn,
        ack_req: false,
        psn: Psn::default(),
    });
    hdr.deth = deth;
    hdr
}

/// A RoCEv2 frame with `hdr` from `sgid` to `dgid` in an Ethernet frame to `dmac`.
fn roce_frame_to(
    (sgid, dgid, dmac): ([u8; 16], [u8; 16], [u8; 6]),
    hdr: &wire::Headers,
    payload: &[u8],
) -> Vec<u8> {
    frames::roce_frame(&dmac, &PEER_MAC, (sgid, dgid), hdr, payload)
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

const PD: u32 = 1;

const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

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
        let after = r.d.wait_stat(counter, before[counter] + 1);
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
    let s = r.d.wait_stat(STAT_PORT_TO_NETDEV, to_guest.len() as u64);
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
    let s = r.d.wait_stat(STAT_PORT_DROP_NETDEV, 5);
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
    r.d.wait_stat(STAT_PORT_RX_FRAMES, BURST as u64);
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..BURST {
        assert_eq!(recv(&guest), netdev_frame(r.mac, i), "frame {i}");
    }
    let s = r.d.wait_stat(STAT_PORT_TO_NETDEV, BURST as u64);
    assert_eq!(s[STAT_PORT_DROP_NETDEV], 0);
}

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

/// An IPv4 multicast group as a GID, its MAC (RFC 1112), an IPv6 one and its MAC (RFC 2464).
const GROUP_V4: [u8; 4] = [239, 1, 2, 3];

const GROUP_V4_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];

const GROUP_V6: [u8; 16] = [
    0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x02, 0x03,
];

const GROUP_V6_MAC: [u8; 6] = [0x33, 0x33, 0x00, 0x01, 0x02, 0x03];

/// The test side's IPv6 address (a GID of the peer).
const PEER_GID_V6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99];

/// A UD SEND of `payload` from QP `src_qpn` of the test's side (GID `sgid`) to multicast group
/// `group` (MAC `group_mac`) with Q_Key `qkey`.
fn group_send(
    (sgid, group, group_mac): ([u8; 16], [u8; 16], [u8; 6]),
    src_qpn: u32,
    qkey: u32,
    payload: &[u8],
) -> Vec<u8> {
    let deth = Some(wire::Deth {
        qkey,
        src_qpn: Qpn::new(src_qpn).unwrap(),
    });
    let hdr = headers(UD_SEND_ONLY, Qpn::MULTICAST, 0xffff, deth);
    roce_frame_to((sgid, group, group_mac), &hdr, payload)
}

/// Frames to a group reach every attached QP that has the packet's Q_Key (IPv4 and IPv6
/// groups); a detached group's frames go to the netdev again.
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
    let f = group_send((peer_gid(), group, GROUP_V4_MAC), 0x77, UD_QKEY, b"group");
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
    let f6 = group_send(
        (PEER_GID_V6, GROUP_V6, GROUP_V6_MAC),
        0x78,
        UD_QKEY + 1,
        b"six",
    );
    r.wire.send(&f6).unwrap();
    let c = r.d.wait_cqe(&mut cq);
    assert_eq!(
        (c.status, c.qp_num, c.src_qp, c.byte_len),
        (WC_SUCCESS, q3.qpn, Qpn::new(0x78).unwrap(), 3 + GRH_SIZE)
    );

    let status = |r: &mut Rig, op, qpn, gid| r.d.admin(op, mcast(qpn, gid)).status;
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

/// Bad attach/detach commands (an RC QP, a unicast GID, no QP, a QP not attached or not in
/// that group) get their status and change nothing: the group's frame still reaches its one
/// attached QP, once.
#[test]
fn bad_multicast_commands_get_their_status_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), true, None);
    let mut cq = r.d.create_cq(6);
    let (q1, buf1) = ud_receiver(&mut r, &cq, UD_QKEY, 1);
    let group = gid_v4(GROUP_V4[0], GROUP_V4[1], GROUP_V4[2], GROUP_V4[3]);
    r.d.admin_ok(ADMIN_OP_ATTACH_MCAST, mcast(q1.qpn, group));
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

    let f = group_send((peer_gid(), group, GROUP_V4_MAC), 0x77, UD_QKEY, b"still");
    r.wire.send(&f).unwrap();
    let c = r.d.wait_cqe(&mut cq);
    assert_eq!((c.status, c.wr_id, c.qp_num), (WC_SUCCESS, 1, q1.qpn));
    assert_eq!(r.d.ram.read(buf1 + GRH_SIZE as u64, 5), b"still");
    r.d.expect_no_cqe(&mut cq, Duration::from_millis(50));
}

/// The group table's limits answer NO_RESOURCES, and QUERY_DEVICE reports them.
#[test]
fn multicast_table_limits() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig(dir.path(), false, None);
    let resp = r.d.ram.alloc(4096, 4096);
    r.d.admin_ok(ADMIN_OP_QUERY_DEVICE, page_query(0, resp));
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
    let after =
        r.d.wait_stat(STAT_PORT_DROP_NO_DMAC, before[STAT_PORT_DROP_NO_DMAC] + 1);
    assert_eq!(
        after[STAT_PORT_DROP_NO_DMAC],
        before[STAT_PORT_DROP_NO_DMAC] + 1
    );
    assert_eq!(after[STAT_PORT_TX_FRAMES], before[STAT_PORT_TX_FRAMES]);
}

/// A device told to send FLUSH with rdma_rxe's ICRC (`--flush-icrc rxe`, as interop runs it)
/// still does after the driver resets it: the reset drops the device's state, not its
/// configuration (it once rebuilt both, and rox's FLUSHes to rxe were dropped until
/// RETRY_EXC_ERR).
#[test]
fn the_flush_icrc_configuration_outlives_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = rig_with(dir.path(), false, None, |c| {
        c.flush_icrc = wire::FlushIcrc::Rxe
    });
    r.d.reset();
    r.d.set_gid(0, r.gid);
    let cq = r.d.create_cq(6);
    let mut qp = r.d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    r.d.connect(&qp, peer_gid(), Qpn::from_raw(0x99), ALL_ACCESS);
    let mut w = send_wqe(1, WR_FLUSH, WQE_FLAG_SIGNALED, &[]);
    w.seg = SqSeg {
        rdma: RdmaSeg {
            remote_addr: 0x1000,
            rkey: Key::from_raw(0x1234),
            length: 64,
            flush_type: FLUSH_TYPE_GLOBAL,
            flush_level: FLUSH_LEVEL_RANGE,
            ..Default::default()
        },
    };
    r.d.post_send(&mut qp, &w);
    let frame = recv(&r.wire);
    let packet = &frame[ETH_HEADER_LEN..];
    let (body, icrc) = packet.split_at(packet.len() - 4);
    let icrc = u32::from_le_bytes(icrc.try_into().unwrap());
    assert_eq!(packet[20 + 8], wire::opcode::RC_FLUSH, "a FLUSH");
    let ip_len = wire::IPV4_HEADER_LEN;
    assert_eq!(icrc, wire::rxe_flush_icrc(body, ip_len), "rdma_rxe's ICRC");
    assert_ne!(icrc, wire::compute_icrc(body, ip_len));
}
