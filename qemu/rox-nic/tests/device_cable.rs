//! Two rox-nic devices joined by a rox-to-rox cable (`cable:listen=` / `cable:connect=`,
//! shared-memory rings): RDMA WRITEs and READs arrive intact, with and without faults injected
//! on both ends' ports, and the frames really crossed the cable.

use std::path::Path;

use rox_nic::device::{FaultConfig, LinkSpec, PortConfig};
use rox_nic::port::pcap;
use rox_nic::roce::wire;
use rox_nic::testkit::frames::faults;
use rox_nic::testkit::pair::deep_rc_pair;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
/// The devices of these tests own GIDs 127.0.3.x.
const SUBNET: u8 = 3;

/// Device 1 listens on the cable's socket in `dir`, device 2 connects to it.
fn cabled_pair(dir: &Path, faults: Option<FaultConfig>) -> (TestDriver, TestDriver) {
    let path = dir.join("cable.sock");
    let a = port_device(LinkSpec::CableListen(path.clone()), SUBNET, 1, faults);
    let b = port_device(LinkSpec::CableConnect(path), SUBNET, 2, faults);
    (a, b)
}

/// WRITEs `count` messages of `len` bytes from device a to b, READs each back into a second
/// buffer of a, and checks both copies byte for byte.
fn write_then_read_back(a: &mut TestDriver, b: &mut TestDriver, count: u64, len: u64) {
    let (mut a_cq, mut qa, _b_cq) = deep_rc_pair(a, b, SUBNET, PD);
    let (src, src_key) = a.buffer(PD, count * len, ALL_ACCESS);
    let (back, back_key) = a.buffer(PD, count * len, ALL_ACCESS);
    let (dst, dst_key) = b.buffer(PD, count * len, ALL_ACCESS);
    let patterns: Vec<Vec<u8>> = (0..count).map(|i| pattern(7 + i, len as usize)).collect();
    for (i, p) in patterns.iter().enumerate() {
        a.ram.write(src + i as u64 * len, p);
    }
    let rdma = |op, wr_id, local, lkey, remote| {
        with_rdma(
            send_wqe(
                wr_id,
                op,
                WQE_FLAG_SIGNALED,
                &[sge(local, len as u32, lkey)],
            ),
            remote,
            dst_key,
        )
    };
    for i in 0..count {
        let w = rdma(WR_RDMA_WRITE, i, src + i * len, src_key, dst + i * len);
        a.write_send(&mut qa, &w);
    }
    a.ring_sq(&qa);
    for i in 0..count {
        let c = a.wait_cqe(&mut a_cq);
        assert_eq!((c.wr_id, c.status), (i, WC_SUCCESS), "WRITE {i}");
    }
    for i in 0..count {
        let w = rdma(
            WR_RDMA_READ,
            count + i,
            back + i * len,
            back_key,
            dst + i * len,
        );
        a.write_send(&mut qa, &w);
    }
    a.ring_sq(&qa);
    for i in 0..count {
        let c = a.wait_cqe(&mut a_cq);
        assert_eq!((c.wr_id, c.status), (count + i, WC_SUCCESS), "READ {i}");
    }
    for (i, p) in patterns.iter().enumerate() {
        let at = i as u64 * len;
        assert!(
            b.ram.read(dst + at, len as usize) == *p,
            "WRITE {i} arrived intact"
        );
        assert!(
            a.ram.read(back + at, len as usize) == *p,
            "READ {i} came back intact"
        );
    }
    assert_eq!(a.query_qp(qa.qpn).qp_state, QPS_RTS);
}

#[test]
fn writes_and_reads_of_1_mib_cross_the_cable_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = cabled_pair(dir.path(), None);
    write_then_read_back(&mut a, &mut b, 16, 1 << 20);
    let (sa, sb) = (a.query_stats(), b.query_stats());
    // 16 MiB each way in 4 KiB frames: the cable carried them.
    assert!(
        sa[STAT_PORT_TX_FRAMES] >= 4096,
        "{}",
        sa[STAT_PORT_TX_FRAMES]
    );
    assert!(
        sb[STAT_PORT_TX_FRAMES] >= 4096,
        "{}",
        sb[STAT_PORT_TX_FRAMES]
    );
}

#[test]
fn writes_and_reads_cross_the_cable_intact_with_faults_on_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let faults = faults(0.01, 0.005, 99);
    let (mut a, mut b) = cabled_pair(dir.path(), Some(faults));
    write_then_read_back(&mut a, &mut b, 16, 256 << 10);
    assert!(
        a.query_stats()[STAT_RETRANSMITS] + b.query_stats()[STAT_RETRANSMITS] > 0,
        "faults must have caused retransmissions"
    );
}

/// A capture on a cable port holds every frame the port sent and received, whole and with a
/// valid ICRC: frames built in the cable's slots and frames read where they lie are captured
/// as the copying path captured them.
#[test]
fn a_capture_on_a_cable_port_holds_every_frame_with_a_valid_icrc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cable.sock");
    let pcap = dir.path().join("a.pcap");
    let mut port = PortConfig::new(LinkSpec::CableListen(path.clone()));
    port.pcap = Some(pcap.clone());
    let mut a = port_device_with(port, SUBNET, 1);
    let mut b = port_device(LinkSpec::CableConnect(path), SUBNET, 2, None);
    write_then_read_back(&mut a, &mut b, 4, 256 << 10);
    let (sent, received) = {
        let s = a.query_stats();
        (s[STAT_PORT_TX_FRAMES], s[STAT_PORT_RX_FRAMES])
    };
    drop(a);
    let frames = pcap::read_frames(&std::fs::read(&pcap).unwrap()).unwrap();
    assert_eq!(frames.len() as u64, sent + received, "every frame, once");
    let mut data = 0;
    for (_, f) in &frames {
        let parsed = wire::parse_packet(&f[14..]).expect("a whole RoCEv2 frame, ICRC valid");
        data += u64::from(parsed.payload.len() == 4096);
    }
    // 1 MiB written and 1 MiB read back: 256 full frames each way.
    assert!(data >= 512, "{data} full data frames");
}
