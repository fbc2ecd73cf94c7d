//! The congested switch queue in front of a device's port (`rox-nic --bottleneck`) counts as a
//! switch counts its egress queue, and those counts are device counters: QUERY_COUNTERS'
//! `bottleneck_*` (rox.ko's `rdma statistic` names), which agree with what the device itself
//! saw arrive through the queue.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use rox_nic::port::frame::ETH_HEADER_LEN;
use rox_nic::port::BottleneckConfig;
use rox_nic::roce::cc::{ECN_ECT0, ECN_MASK};
use rox_nic::roce::wire::{self, opcode as op};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;

const IP_AT: usize = ETH_HEADER_LEN;
/// Frames the test offers the queue: more than it holds, half of them ECN-capable.
const OFFERED: u64 = 60;

/// A CNP from a stranger to a QP the device does not have (counted, dropped): a RoCEv2 frame
/// the device parses, whose ECN field is `ecn`.
fn frame_to(dev: [u8; 16], ecn: u8) -> Vec<u8> {
    let from = gid_v4(127, 0, 4, 9);
    let hdr = wire::Headers::new(wire::Bth {
        opcode: op::CNP,
        solicited: false,
        pkey: wire::DEFAULT_PKEY,
        dest_qpn: Qpn::from_raw(0x7777),
        ack_req: false,
        psn: Psn::default(),
    });
    let mut f = frames::roce_frame(
        &test_mac(&dev),
        &test_mac(&from),
        (from, dev),
        &hdr,
        &[0; op::CNP_RESERVED_LEN],
    );
    f[IP_AT + 1] = (f[IP_AT + 1] & !ECN_MASK) | ecn;
    f[IP_AT + 10..IP_AT + 12].fill(0);
    let sum = wire::ipv4_header_checksum(&f[IP_AT..IP_AT + wire::IPV4_HEADER_LEN]);
    f[IP_AT + 10..IP_AT + 12].copy_from_slice(&sum.to_be_bytes());
    f
}

#[test]
fn the_bottleneck_counts_as_a_switch_queue_and_agrees_with_what_the_device_received() {
    let dir = tempfile::tempdir().unwrap();
    let gid = gid_v4(127, 0, 4, 2);
    let mut cfg = DeviceConfig::new(test_mac(&gid));
    let mut port = PortConfig::new(LinkSpec::Dgram {
        local: dir.path().join("dev.sock"),
        remote: dir.path().join("switch.sock"),
    });
    // 10 kb/s: a 74-byte frame takes 59 ms, so the burst fills the queue; about 27 frames
    // fit in 2 KiB, RED marks or drops from 128 bytes on.
    port.bottleneck =
        Some(BottleneckConfig::parse("rate=10k,limit=2K,kmin=128,kmax=1K,pmax=1,seed=3").unwrap());
    cfg.port = Some(port);
    let switch = UnixDatagram::bind(dir.path().join("switch.sock")).unwrap();
    let mut d = TestDriver::new(cfg);
    d.set_gid(0, gid);
    assert_eq!(d.port_counters().bottleneck_packets, 0);
    switch.connect(dir.path().join("dev.sock")).unwrap();
    let ect = frame_to(gid, ECN_ECT0);
    let not_ect = frame_to(gid, 0);
    for i in 0..OFFERED {
        switch
            .send(if i % 2 == 0 { &ect } else { &not_ect })
            .unwrap();
    }
    // Every frame is counted once: passed on, or dropped.
    let give_up = Instant::now() + Duration::from_secs(30);
    let c = loop {
        let c = d.port_counters();
        if c.bottleneck_packets + c.bottleneck_dropped_packets == OFFERED
            && c.rcv_packets == c.bottleneck_packets
        {
            break c;
        }
        assert!(Instant::now() < give_up, "the queue never settled: {c:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let len = ect.len() as u64;
    assert!(
        c.bottleneck_dropped_packets > 0,
        "the burst overflowed: {c:?}"
    );
    assert!(
        c.bottleneck_wred_dropped_packets > 0,
        "RED dropped Not-ECT frames: {c:?}"
    );
    assert!(
        c.bottleneck_wred_ecn_marked_packets > 0,
        "RED marked ECT frames: {c:?}"
    );
    assert!(c.bottleneck_wred_dropped_packets <= c.bottleneck_dropped_packets);
    assert_eq!(c.bottleneck_bytes, c.bottleneck_packets * len);
    assert!(
        (len..=2048).contains(&c.bottleneck_watermark_bytes),
        "{c:?}"
    );
    // What the queue passed is what the device received, marks included.
    assert_eq!(
        c.rcv_octets,
        c.bottleneck_packets * (len - ETH_HEADER_LEN as u64)
    );
    assert_eq!(
        c.np_ecn_marked_roce_packets,
        c.bottleneck_wred_ecn_marked_packets
    );
    assert_eq!(d.query_stats()[STAT_RX_CNP_DROPPED], c.bottleneck_packets);
}

#[test]
fn without_a_bottleneck_its_counters_stay_zero() {
    let dir = tempfile::tempdir().unwrap();
    let gid = gid_v4(127, 0, 4, 3);
    let mut cfg = DeviceConfig::new(test_mac(&gid));
    cfg.port = Some(PortConfig::new(LinkSpec::Dgram {
        local: dir.path().join("dev.sock"),
        remote: dir.path().join("peer.sock"),
    }));
    let peer = UnixDatagram::bind(dir.path().join("peer.sock")).unwrap();
    let mut d = TestDriver::new(cfg);
    d.set_gid(0, gid);
    peer.connect(dir.path().join("dev.sock")).unwrap();
    for _ in 0..5 {
        peer.send(&frame_to(gid, ECN_ECT0)).unwrap();
    }
    let give_up = Instant::now() + Duration::from_secs(10);
    while d.port_counters().rcv_packets < 5 {
        assert!(Instant::now() < give_up, "the frames never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = d.port_counters();
    let queue = [
        c.bottleneck_packets,
        c.bottleneck_bytes,
        c.bottleneck_dropped_packets,
        c.bottleneck_wred_dropped_packets,
        c.bottleneck_wred_ecn_marked_packets,
        c.bottleneck_watermark_bytes,
    ];
    assert_eq!(queue, [0; 6]);
}
