//! QUERY_COUNTERS through the chassis: the port's traffic and the transport's events, counted
//! exactly for known traffic on an RC pair looped back on one device (every packet is sent and
//! received by it), and the command's bad input.

use rox_nic::testkit::loopback::{Loopback, LoopbackSpec};
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 3;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
const BUF: u64 = 64 * 1024;
/// RoCEv2 over IPv4 (the pair's GID is 127.0.0.1): IP 20, UDP 8, BTH 12, ICRC 4.
const BASE_OCTETS: u64 = 20 + 8 + 12 + 4;
const RETH: u64 = 16;
const AETH: u64 = 4;

/// An RC pair looped back on one device, a 64 KiB buffer of each.
fn rc_pair() -> Loopback {
    Loopback::new(&LoopbackSpec {
        mac_last: 1,
        qp_type: QPT_RC,
        pd: PD,
        qp_access: ALL_ACCESS,
        buf_len: BUF,
        mr_access: ALL_ACCESS,
    })
}

/// The counters once every frame sent has been received and every tail probe answered (a
/// probe's answer may still be on its way when the last completion is seen); at most 5 s.
fn settled_counters(p: &mut Loopback) -> PortCounters {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let c = p.d.query_counters(1).unwrap();
        let settled = c.xmit_packets == c.rcv_packets && c.duplicate_request == c.roce_adp_retrans;
        if settled || std::time::Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn write(p: &mut Loopback, wr_id: u64, len: u32, rkey: Key) -> u8 {
    let w = rdma_wqe(
        wr_id,
        WR_RDMA_WRITE,
        sge(p.buf_a, len, p.key_a),
        p.buf_b,
        rkey,
    );
    p.complete_on_a(&w).status
}

#[test]
fn good_writes_and_reads_count_packets_octets_and_requests_only() {
    let mut p = rc_pair();
    let before = p.d.query_counters(1).unwrap();
    assert_eq!(
        before,
        PortCounters::default(),
        "a new device counts nothing"
    );
    const N: u64 = 5;
    const LEN: u64 = 256;
    let key_b = p.key_b;
    for i in 0..N {
        assert_eq!(write(&mut p, i, LEN as u32, key_b), WC_SUCCESS);
    }
    for i in 0..N {
        let local = sge(p.buf_a, LEN as u32, p.key_a);
        let r = rdma_wqe(100 + i, WR_RDMA_READ, local, p.buf_b, p.key_b);
        assert_eq!(p.complete_on_a(&r).status, WC_SUCCESS);
    }
    let c = settled_counters(&mut p);
    // Per operation: the request and its ACK or READ response; the same octets either way.
    let op_octets = BASE_OCTETS + RETH + LEN + BASE_OCTETS + AETH;
    // A data-path thread that loses its core for longer than the probe timeout (a loaded
    // host) sends a tail probe: the last request again, answered again as a duplicate. Each
    // costs exactly one operation's packets and octets here (every request is one packet),
    // so the counts stay exact with the probes the device itself reports.
    let probes = c.roce_adp_retrans;
    let ops = 2 * N + probes;
    let expected = PortCounters {
        xmit_packets: 2 * ops,
        xmit_octets: ops * op_octets,
        rcv_packets: 2 * ops,
        rcv_octets: ops * op_octets,
        rx_write_requests: N,
        rx_read_requests: N,
        duplicate_request: probes,
        roce_adp_retrans: probes,
        ..Default::default()
    };
    assert_eq!(c, expected);
}

#[test]
fn bad_rkey_is_one_access_error_on_each_side() {
    let mut p = rc_pair();
    let bad = Key::from_raw(p.key_b.get() ^ 1);
    assert_eq!(write(&mut p, 1, 64, bad), WC_REM_ACCESS_ERR);
    let c = settled_counters(&mut p);
    assert_eq!(c.resp_remote_access_errors, 1);
    assert_eq!(c.req_remote_access_errors, 1);
    assert_eq!(c.req_cqe_error, 1);
    assert_eq!(c.resp_cqe_error, 0, "a WRITE takes no receive WR");
    assert_eq!(c.rx_write_requests, 1, "counted before its checks");
    // The WRITE and its NAK; a tail probe sent before the NAK came back (a loaded host)
    // adds the WRITE again and, at most, its answer.
    let probes = c.roce_adp_retrans;
    assert_eq!(
        c.xmit_packets, c.rcv_packets,
        "one device: every frame sent is received"
    );
    assert!(
        (2..=2 + 2 * probes).contains(&c.xmit_packets),
        "the WRITE and its NAK, plus at most {probes} probe(s) and answers: {c:?}"
    );
    assert_eq!(c.req_remote_invalid_request, 0);
}

#[test]
fn too_long_send_is_a_length_error_and_an_invalid_request_nak() {
    let mut p = rc_pair();
    p.d.post_recv(&mut p.b, 1, &[sge(p.buf_b, 64, p.key_b)]);
    p.d.post_send(
        &mut p.a,
        &send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 100, p.key_a)]),
    );
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_LOC_LEN_ERR);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_INV_REQ_ERR);
    let c = p.d.query_counters(1).unwrap();
    assert_eq!(c.resp_local_length_error, 1);
    assert_eq!(c.resp_cqe_error, 1);
    assert_eq!(c.req_remote_invalid_request, 1);
    assert_eq!(c.req_cqe_error, 1);
    assert_eq!(c.resp_remote_access_errors, 0);
}

#[test]
fn another_port_is_a_bad_param() {
    let mut p = rc_pair();
    for port in [0, 2, u32::MAX] {
        assert_eq!(p.d.query_counters(port), Err(ADMIN_STATUS_BAD_PARAM));
    }
}

/// A data-path thread that loses its core right after taking a request (a loaded host) must
/// not probe or time out that request: on one device the ACK it owes is sent and taken before
/// the engine's timers run (device/datapath.rs `receive`). Each stall (20 ms, past any probe
/// timeout: the learnt lateness stops at 3 ms) comes after the pass took the WRITE.
#[test]
fn a_pass_stalled_after_taking_a_request_does_not_probe_it() {
    let mut p = rc_pair();
    let key_b = p.key_b;
    for i in 0..8 {
        assert_eq!(write(&mut p, i, 64, key_b), WC_SUCCESS);
    }
    let shared = p.d.shared().clone();
    let hold = &shared.hold_before_timers;
    let _release = hold.release_on_drop();
    for i in 0..4 {
        hold.arm();
        let w = rdma_wqe(
            100 + i,
            WR_RDMA_WRITE,
            sge(p.buf_a, 64, p.key_a),
            p.buf_b,
            key_b,
        );
        p.post_on_a(&w);
        wait_until(|| hold.is_held(), "the pass never took the WRITE");
        std::thread::sleep(std::time::Duration::from_millis(20));
        hold.release();
        assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    }
    let c = settled_counters(&mut p);
    assert_eq!(c.roce_adp_retrans, 0, "a stalled pass probed: {c:?}");
    assert_eq!(c.duplicate_request, 0, "{c:?}");
    assert_eq!(c.local_ack_timeout_err, 0, "{c:?}");
    assert_eq!(c.xmit_packets, 2 * 12, "each WRITE and its ACK once: {c:?}");
}
