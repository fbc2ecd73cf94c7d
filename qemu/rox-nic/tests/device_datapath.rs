//! Data path through the chassis, the verbs themselves: SEND, WRITE, READ, atomics, inline and
//! immediate data, FLUSH and ATOMIC WRITE over RC, UC and UD, RNR, with the transport engine
//! doing QP-to-QP loopback on one device (testkit::loopback).

use rox_nic::testkit::loopback::{pair, ALL_ACCESS, BUF, PD};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;
use std::time::Duration;

#[test]
fn rc_send_recv_with_imm_loopback() {
    let mut p = pair(QPT_RC);
    let msg = pattern(1, 3000);
    p.d.ram.write(p.buf_a, &msg);
    p.d.post_recv(&mut p.b, 77, &[sge(p.buf_b, 4096, p.key_b)]);
    let mut w = send_wqe(
        5,
        WR_SEND_WITH_IMM,
        WQE_FLAG_SIGNALED,
        &[sge(p.buf_a, 3000, p.key_a)],
    );
    w.imm_data = 0x1234_5678u32.to_be();
    p.d.post_send(&mut p.a, &w);
    let s = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((s.wr_id, s.status, s.opcode), (5, WC_SUCCESS, WC_OPC_SEND));
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (77, WC_SUCCESS, WC_OPC_RECV, 3000)
    );
    assert_eq!(r.wc_flags & WC_FLAG_WITH_IMM, WC_FLAG_WITH_IMM);
    assert_eq!(u32::from_be(r.imm_data), 0x1234_5678);
    assert_eq!(r.qp_num, p.b.qpn);
    assert_eq!(p.d.ram.read(p.buf_b, 3000), msg);
}

#[test]
fn rc_write_read_atomics_and_inline() {
    let mut p = pair(QPT_RC);
    let data = pattern(2, 10_000);
    p.d.ram.write(p.buf_a, &data);
    // WRITE a -> b.
    let c = p.complete_on_a(&rdma_wqe(
        1,
        WR_RDMA_WRITE,
        sge(p.buf_a, 10_000, p.key_a),
        p.buf_b + 100,
        p.key_b,
    ));
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_RDMA_WRITE));
    assert_eq!(p.d.ram.read(p.buf_b + 100, 10_000), data);
    // READ it back into another place of a.
    let c = p.complete_on_a(&rdma_wqe(
        2,
        WR_RDMA_READ,
        sge(p.buf_a + 20_000, 10_000, p.key_a),
        p.buf_b + 100,
        p.key_b,
    ));
    assert_eq!(
        (c.status, c.opcode, c.byte_len),
        (WC_SUCCESS, WC_OPC_RDMA_READ, 10_000)
    );
    assert_eq!(p.d.ram.read(p.buf_a + 20_000, 10_000), data);
    // Atomics on b's memory.
    let target = p.buf_b + 40_000;
    p.d.ram.write(target, &100u64.to_le_bytes());
    let res = sge(p.buf_a + 40_000, 8, p.key_a);
    p.d.post_send(
        &mut p.a,
        &with_atomic(
            send_wqe(3, WR_ATOMIC_FETCH_AND_ADD, WQE_FLAG_SIGNALED, &[res]),
            target,
            p.key_b,
            5,
            0,
        ),
    );
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_FETCH_ADD));
    assert_eq!(
        u64::from_le_bytes(p.d.ram.read(res.addr, 8).try_into().unwrap()),
        100
    );
    assert_eq!(
        u64::from_le_bytes(p.d.ram.read(target, 8).try_into().unwrap()),
        105
    );
    p.d.post_send(
        &mut p.a,
        &with_atomic(
            send_wqe(4, WR_ATOMIC_CMP_AND_SWP, WQE_FLAG_SIGNALED, &[res]),
            target,
            p.key_b,
            105,
            7,
        ),
    );
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_COMP_SWAP));
    assert_eq!(
        u64::from_le_bytes(p.d.ram.read(target, 8).try_into().unwrap()),
        7
    );
    // Inline WRITE_WITH_IMM consumes a receive WR.
    p.d.post_recv(&mut p.b, 9, &[]);
    let mut w = with_rdma(
        inline_wqe(
            5,
            WR_RDMA_WRITE_WITH_IMM,
            WQE_FLAG_SIGNALED,
            b"inline payload",
        ),
        p.buf_b + 50_000,
        p.key_b,
    );
    w.imm_data = 42u32.to_be();
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (r.wr_id, r.opcode, u32::from_be(r.imm_data)),
        (9, WC_OPC_RECV_RDMA_WITH_IMM, 42)
    );
    assert_eq!(p.d.ram.read(p.buf_b + 50_000, 14), b"inline payload");
}

#[test]
fn ud_send_between_two_qps_with_grh() {
    let mut p = pair(QPT_UD);
    let gid = gid_v4(127, 0, 0, 1);
    p.d.post_recv(&mut p.b, 1, &[sge(p.buf_b, 4096, p.key_b)]);
    p.d.ram.write(p.buf_a, b"datagram");
    let w = ud_wqe(
        1,
        WR_SEND,
        sge(p.buf_a, 8, p.key_a),
        gid,
        p.b.qpn,
        PAIR_QKEY,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (r.status, r.src_qp, r.byte_len),
        (WC_SUCCESS, p.a.qpn, 8 + GRH_SIZE)
    );
    assert_eq!(r.wc_flags & WC_FLAG_GRH, WC_FLAG_GRH);
    assert_eq!(
        r.network_hdr, CQE_NETWORK_HDR_IPV4,
        "an IPv4 GID: RoCEv2 over IPv4"
    );
    assert_eq!(p.d.ram.read(p.buf_b + GRH_SIZE as u64, 8), b"datagram");
    // A wrong Q_Key is dropped silently (no receive completion).
    p.d.post_recv(&mut p.b, 2, &[sge(p.buf_b, 4096, p.key_b)]);
    let w = ud_wqe(2, WR_SEND, sge(p.buf_a, 8, p.key_a), gid, p.b.qpn, 0x2222);
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    p.d.expect_no_cqe(&mut p.cq_b, Duration::from_millis(50));
}

#[test]
fn uc_write_and_send() {
    let mut p = pair(QPT_UC);
    p.d.ram.write(p.buf_a, &pattern(9, 5000));
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(p.buf_a, 5000, p.key_a),
            p.buf_b,
            p.key_b,
        ))
        .status,
        WC_SUCCESS
    );
    let start = std::time::Instant::now();
    while p.d.ram.read(p.buf_b, 5000) != pattern(9, 5000) {
        assert!(start.elapsed() < TIMEOUT);
        std::thread::yield_now();
    }
    p.d.post_recv(&mut p.b, 3, &[sge(p.buf_b + 8192, 4096, p.key_b)]);
    p.d.post_send(
        &mut p.a,
        &send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 100, p.key_a)]),
    );
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).byte_len, 100);
    // READ is not a UC operation.
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            3,
            WR_RDMA_READ,
            sge(p.buf_a, 8, p.key_a),
            p.buf_b,
            p.key_b
        ))
        .status,
        WC_LOC_QP_OP_ERR
    );
}

#[test]
fn rnr_then_success_when_receive_is_posted_late() {
    let mut p = pair(QPT_RC);
    p.d.post_send(
        &mut p.a,
        &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 32, p.key_a)]),
    );
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        p.d.poll_cq(&mut p.cq_a).is_none(),
        "the send waits for a receive WR (RNR)"
    );
    p.d.post_recv(&mut p.b, 5, &[sge(p.buf_b, 64, p.key_b)]);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).wr_id, 5);
}

#[test]
fn gsi_qp_is_qp1_and_unique() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 5]));
    let cq = d.create_cq(4);
    let gsi = d.create_qp(QPT_GSI, PD, cq.id, cq.id, SRQ_NONE);
    assert_eq!(gsi.qpn, Qpn::GSI);
    let (c, _) = d.create_qp_cmd(QPT_GSI, PD, cq.id, cq.id, SRQ_NONE, 4, 4);
    assert_eq!(
        d.admin(ADMIN_OP_CREATE_QP, payload(&c)).status,
        ADMIN_STATUS_NO_RESOURCES
    );
}

#[test]
fn receive_buffer_too_small_is_length_error_on_both_sides() {
    let mut p = pair(QPT_RC);
    p.d.post_recv(&mut p.b, 1, &[sge(p.buf_b, 64, p.key_b)]);
    p.d.post_send(
        &mut p.a,
        &send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 100, p.key_a)]),
    );
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((r.wr_id, r.status), (1, WC_LOC_LEN_ERR));
    let s = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((s.wr_id, s.status), (2, WC_REM_INV_REQ_ERR));
}

#[test]
fn uc_and_ud_immediate_data() {
    let mut p = pair(QPT_UC);
    p.d.post_recv(&mut p.b, 1, &[]);
    let mut w = rdma_wqe(
        1,
        WR_RDMA_WRITE_WITH_IMM,
        sge(p.buf_a, 16, p.key_a),
        p.buf_b,
        p.key_b,
    );
    w.imm_data = 0xabcdu32.to_be();
    p.d.post_send(&mut p.a, &w);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (r.opcode, u32::from_be(r.imm_data), r.byte_len),
        (WC_OPC_RECV_RDMA_WITH_IMM, 0xabcd, 16)
    );
    p.d.post_recv(&mut p.b, 2, &[sge(p.buf_b, 64, p.key_b)]);
    let mut w = send_wqe(
        2,
        WR_SEND_WITH_IMM,
        WQE_FLAG_SIGNALED,
        &[sge(p.buf_a, 16, p.key_a)],
    );
    w.imm_data = 7u32.to_be();
    p.d.post_send(&mut p.a, &w);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (
            r.opcode,
            r.wc_flags & WC_FLAG_WITH_IMM,
            u32::from_be(r.imm_data)
        ),
        (WC_OPC_RECV, WC_FLAG_WITH_IMM, 7)
    );

    let mut u = pair(QPT_UD);
    u.d.post_recv(&mut u.b, 3, &[sge(u.buf_b, 256, u.key_b)]);
    let mut w = with_ud(
        inline_wqe(3, WR_SEND_WITH_IMM, WQE_FLAG_SIGNALED, b"ud inline"),
        gid_v4(127, 0, 0, 1),
        u.b.qpn,
        PAIR_QKEY,
    );
    w.imm_data = 99u32.to_be();
    u.d.post_send(&mut u.a, &w);
    let r = u.d.wait_cqe(&mut u.cq_b);
    assert_eq!((u32::from_be(r.imm_data), r.byte_len), (99, 9 + GRH_SIZE));
    assert_eq!(u.d.ram.read(u.buf_b + GRH_SIZE as u64, 9), b"ud inline");
    assert_eq!(u.d.wait_cqe(&mut u.cq_a).wr_id, 3);
    // RDMA WRITE is not a UD operation.
    let w = ud_wqe(
        4,
        WR_RDMA_WRITE,
        sge(u.buf_a, 8, u.key_a),
        gid_v4(127, 0, 0, 1),
        u.b.qpn,
        PAIR_QKEY,
    );
    u.d.post_send(&mut u.a, &w);
    let c = u.d.wait_cqe(&mut u.cq_a);
    assert_eq!((c.wr_id, c.status), (4, WC_LOC_QP_OP_ERR));
}

/// FLUSH and ATOMIC WRITE WQEs through the device: the segment fields decode, the MR's FLUSH
/// access is checked, an MR cannot claim persistence, and bad WQEs complete in error.
#[test]
fn flush_and_atomic_write_wqes() {
    let mut p = pair(QPT_RC);
    assert_eq!(
        p.d.reg_mr(PD, p.buf_b, 4096, ALL_ACCESS | ACCESS_FLUSH_PERSISTENT),
        Err(ADMIN_STATUS_BAD_PARAM),
        "no persistent memory"
    );
    let flush_key =
        p.d.reg_mr(
            PD,
            p.buf_b,
            BUF,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_FLUSH_GLOBAL,
        )
        .unwrap();
    // ATOMIC WRITE: the 8 bytes travel in compare_add.
    let target = p.buf_b + 64;
    let value = u64::from_ne_bytes(*b"8 bytes!");
    let c = p.complete_on_a(&with_atomic(
        send_wqe(1, WR_ATOMIC_WRITE, WQE_FLAG_SIGNALED, &[]),
        target,
        p.key_b,
        value,
        0,
    ));
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_ATOMIC_WRITE));
    assert_eq!(p.d.ram.read(target, 8), b"8 bytes!");
    let flush = |wr_id, rkey, length, flush_type, flush_level| {
        let mut w = send_wqe(wr_id, WR_FLUSH, WQE_FLAG_SIGNALED, &[]);
        w.seg = SqSeg {
            rdma: RdmaSeg {
                remote_addr: target,
                rkey,
                length,
                flush_type,
                flush_level,
                ..Default::default()
            },
        };
        w
    };
    for (wr_id, level) in [(2, FLUSH_LEVEL_RANGE), (3, FLUSH_LEVEL_MR)] {
        p.d.post_send(
            &mut p.a,
            &flush(wr_id, flush_key, 8, FLUSH_TYPE_GLOBAL, level),
        );
        let c = p.d.wait_cqe(&mut p.cq_a);
        assert_eq!(
            (c.wr_id, c.status, c.opcode),
            (wr_id, WC_SUCCESS, WC_OPC_FLUSH)
        );
    }
    // The pair's MR has no FLUSH access: remote access error (the QP goes to ERR).
    p.d.post_send(
        &mut p.a,
        &flush(4, p.key_b, 8, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE),
    );
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.status, c.opcode), (WC_REM_ACCESS_ERR, WC_OPC_FLUSH));

    // A FLUSH with an unknown placement type is a local QP operation error.
    let mut p = pair(QPT_RC);
    p.d.post_send(&mut p.a, &flush(5, p.key_b, 8, 0x4, FLUSH_LEVEL_RANGE));
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.status, c.opcode), (WC_LOC_QP_OP_ERR, WC_OPC_FLUSH));
}

/// A FLUSH of a range as large as the region is checked by bounds alone, and one a byte past
/// the region is a remote access error.
#[test]
fn flush_of_a_whole_region_range() {
    let mut p = pair(QPT_RC);
    let key =
        p.d.reg_mr(PD, p.buf_b, BUF, ACCESS_LOCAL_WRITE | ACCESS_FLUSH_GLOBAL)
            .unwrap();
    let flush = |wr_id, length: u32| {
        let mut w = send_wqe(wr_id, WR_FLUSH, WQE_FLAG_SIGNALED, &[]);
        w.seg = SqSeg {
            rdma: RdmaSeg {
                remote_addr: p.buf_b,
                rkey: key,
                length,
                flush_type: FLUSH_TYPE_GLOBAL,
                flush_level: FLUSH_LEVEL_RANGE,
                ..Default::default()
            },
        };
        w
    };
    let (whole, past) = (flush(1, BUF as u32), flush(2, BUF as u32 + 1));
    p.d.post_send(&mut p.a, &whole);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    p.d.post_send(&mut p.a, &past);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
}
