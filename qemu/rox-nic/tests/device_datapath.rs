//! Data path through the chassis: doorbells, WQE fetch, CQEs, events, MSI-X, idle/wake and
//! protection, with the transport engine doing QP-to-QP loopback on one device.

use std::time::Duration;

use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::DbSlot;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const PD: u32 = 3;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
/// The pair's QPs also accept FLUSH requests of both types (their MRs decide).
const QP_ACCESS: u32 = ALL_ACCESS | ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT;

struct Pair {
    d: TestDriver,
    cq_a: TestCq,
    cq_b: TestCq,
    a: TestQp,
    b: TestQp,
    buf_a: u64,
    buf_b: u64,
    key_a: Key,
    key_b: Key,
}

const BUF: u64 = 64 * 1024;

fn pair(qp_type: u8) -> Pair {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 1]));
    let (cq_a, cq_b, a, b) = d.qp_pair(qp_type, PD, 8, QP_ACCESS);
    let buf_a = d.ram.alloc(BUF, 4096);
    let buf_b = d.ram.alloc(BUF, 4096);
    let key_a = d.reg_mr(PD, buf_a, BUF, ALL_ACCESS).unwrap();
    let key_b = d.reg_mr(PD, buf_b, BUF, ALL_ACCESS).unwrap();
    Pair {
        d,
        cq_a,
        cq_b,
        a,
        b,
        buf_a,
        buf_b,
        key_a,
        key_b,
    }
}

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
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 10_000, p.key_a)],
        ),
        p.buf_b + 100,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_RDMA_WRITE));
    assert_eq!(p.d.ram.read(p.buf_b + 100, 10_000), data);
    // READ it back into another place of a.
    let w = with_rdma(
        send_wqe(
            2,
            WR_RDMA_READ,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a + 20_000, 10_000, p.key_a)],
        ),
        p.buf_b + 100,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
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
fn protection_violations_leave_guard_patterns_intact() {
    let mut p = pair(QPT_RC);
    const GUARD: u8 = 0xa5;
    // A small MR inside guard bytes on b, remote-read only.
    let region = p.d.ram.alloc(3 * 4096, 4096);
    p.d.ram.fill(region, 3 * 4096, GUARD);
    let ro =
        p.d.reg_mr(PD, region + 4096, 4096, ACCESS_REMOTE_READ)
            .unwrap();
    p.d.ram.write(p.buf_a, &pattern(3, 8192));
    // WRITE through a read-only rkey: remote access error, nothing written.
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, p.key_a)],
        ),
        region + 4096,
        ro,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
    assert!(p.d.ram.read(region, 3 * 4096).iter().all(|&b| b == GUARD));
    // Fresh pair for each error: the QP is now in the error state.
    let mut p = pair(QPT_RC);
    let region = p.d.ram.alloc(3 * 4096, 4096);
    p.d.ram.fill(region, 3 * 4096, GUARD);
    let rw =
        p.d.reg_mr(
            PD,
            region + 4096,
            4096,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        )
        .unwrap();
    // WRITE crossing the end of the MR: remote access error, the in-bounds part untouched too.
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 200, p.key_a)],
        ),
        region + 2 * 4096 - 100,
        rw,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
    assert!(p.d.ram.read(region, 3 * 4096).iter().all(|&b| b == GUARD));
    // Local side: an lkey from another PD is a local protection error.
    let mut p = pair(QPT_RC);
    let other_pd_key = p.d.reg_mr(PD + 1, p.buf_a, 4096, ALL_ACCESS).unwrap();
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, other_pd_key)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_LOC_PROT_ERR);
}

#[test]
fn garbage_wqe_gives_error_completion_and_flushes() {
    let mut p = pair(QPT_RC);
    let mut w = send_wqe(11, WR_SEND, WQE_FLAG_SIGNALED, &[]);
    w.opcode = 0x7f;
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (11, WC_LOC_QP_OP_ERR));
    // Another WQE to the QP in error (its SGE count beyond the limit too) is flushed.
    let mut w = send_wqe(12, WR_SEND, WQE_FLAG_SIGNALED, &[]);
    w.num_sge = 200;
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(c.wr_id, 12);
    assert_ne!(c.status, WC_SUCCESS);
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_ERR);
    assert_eq!(p.d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

#[test]
fn too_many_sges_on_a_live_qp_is_a_local_error_completion() {
    let mut p = pair(QPT_RC);
    let mut w = send_wqe(13, WR_SEND, WQE_FLAG_SIGNALED, &[]);
    w.num_sge = (SQ_MAX_SGE + 1) as u8;
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.vendor_err),
        (13, WC_LOC_QP_OP_ERR, VENDOR_ERR_BAD_SGE_COUNT)
    );
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_ERR);
    assert_eq!(p.d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

#[test]
fn wild_producer_index_is_a_qp_fatal_event_not_a_crash() {
    let mut p = pair(QPT_RC);
    p.d.ring_sq_raw(&p.a, 0x7fff_0000);
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_QP_FATAL);
    assert_eq!(e.handle, p.a.qpn.get());
    assert_eq!(e.aux, VENDOR_ERR_WILD_INDEX as u32);
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_ERR);
    // The other QP and the device keep working.
    p.d.post_recv(&mut p.a, 1, &[sge(p.buf_a, 64, p.key_a)]);
    assert_eq!(p.d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

#[test]
fn armed_cq_posts_completion_event_and_fires_msix() {
    let mut p = pair(QPT_RC);
    p.d.drain_eq(COMP_EQ);
    p.d.ack_eq(COMP_EQ, true);
    p.d.wait_vector(COMP_EQ, Duration::from_millis(1));
    // Not armed: a completion writes a CQE but no event.
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 8, p.key_a)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    p.d.wait_cqe(&mut p.cq_a);
    assert!(p.d.poll_eq(COMP_EQ).is_none());
    // Armed: one event naming the CQ, and the vector fires.
    p.d.arm_cq(&mut p.cq_a, CQ_ARM_NEXT);
    let mut w2 = w;
    w2.wr_id = 2;
    p.d.post_send(&mut p.a, &w2);
    p.d.wait_cqe(&mut p.cq_a);
    let e = p.d.wait_event(COMP_EQ, EQE_TYPE_COMPLETION);
    assert_eq!(e.handle, p.cq_a.id);
    assert!(
        p.d.wait_vector(COMP_EQ, Duration::from_secs(2)),
        "MSI-X vector did not fire"
    );
    // The arm was consumed: the next completion is silent.
    let mut w3 = w;
    w3.wr_id = 3;
    p.d.post_send(&mut p.a, &w3);
    p.d.wait_cqe(&mut p.cq_a);
    std::thread::sleep(Duration::from_millis(20));
    assert!(p.d.poll_eq(COMP_EQ).is_none());
    // Solicited-only arm: an unsolicited receive does not trigger, a solicited one does.
    p.d.arm_cq(&mut p.cq_b, CQ_ARM_SOLICITED);
    p.d.post_recv(&mut p.b, 10, &[sge(p.buf_b, 64, p.key_b)]);
    p.d.post_recv(&mut p.b, 11, &[sge(p.buf_b, 64, p.key_b)]);
    p.d.post_send(
        &mut p.a,
        &send_wqe(4, WR_SEND, 0, &[sge(p.buf_a, 8, p.key_a)]),
    );
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).wr_id, 10);
    std::thread::sleep(Duration::from_millis(20));
    assert!(p.d.poll_eq(COMP_EQ).is_none());
    p.d.post_send(
        &mut p.a,
        &send_wqe(5, WR_SEND, WQE_FLAG_SOLICITED, &[sge(p.buf_a, 8, p.key_a)]),
    );
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).wr_id, 11);
    assert_eq!(
        p.d.wait_event(COMP_EQ, EQE_TYPE_COMPLETION).handle,
        p.cq_b.id
    );
}

#[test]
fn idle_device_sleeps_and_doorbell_wakes_it() {
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, 2]);
    cfg.idle_after = Duration::from_millis(5);
    let mut d = TestDriver::new(cfg);
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let mut cq = d.create_cq(6);
    let mut qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    d.connect(&qp, gid, qp.qpn, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    // Wait for the device to announce idleness in the doorbell page and in REG_IDLE.
    let start = std::time::Instant::now();
    while d.db.idle(TEST_DB_PAGE) != DB_DEVICE_IDLE {
        assert!(start.elapsed() < TIMEOUT, "device never went idle");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(d.read_reg(REG_IDLE), DB_DEVICE_IDLE);
    // An idle device costs ~no CPU: its loop does not run while it sleeps.
    let passes0 = d
        .shared()
        .loop_passes
        .load(std::sync::atomic::Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    let passes = d
        .shared()
        .loop_passes
        .load(std::sync::atomic::Ordering::Relaxed)
        - passes0;
    assert!(
        passes <= 2,
        "idle device ran {passes} loop passes in 200 ms"
    );
    // A doorbell store alone is not enough while it sleeps: the wake register is rung because
    // the idle flag is set, and the work completes.
    let wakes = d.wakes;
    let w = with_rdma(
        send_wqe(1, WR_RDMA_WRITE, WQE_FLAG_SIGNALED, &[sge(buf, 16, key)]),
        buf + 4096,
        key,
    );
    d.post_send(&mut qp, &w);
    assert_eq!(d.wakes, wakes + 1);
    assert_eq!(d.wait_cqe(&mut cq).status, WC_SUCCESS);
    // Without the wake register the store sits unseen while the device sleeps.
    while d.db.idle(TEST_DB_PAGE) != DB_DEVICE_IDLE {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut w2 = w;
    w2.wr_id = 2;
    d.write_send(&mut qp, &w2);
    d.db.store_a(TEST_DB_PAGE, qp.db_slot, qp.sq_pi);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        d.poll_cq(&mut cq).is_none(),
        "a sleeping device must not poll"
    );
    d.write_reg(WAKE_REG, TEST_DB_PAGE);
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 2);
    let stats = d.query_stats();
    assert!(stats[STAT_WAKEUPS] >= 2);
}

#[test]
fn srq_shared_by_two_qps_and_limit_event() {
    let SrqPair {
        mut d,
        mut cq,
        mut srq,
        mut a,
        b,
        buf,
        key,
    } = SrqPair::new(3, PD, ALL_ACCESS, 8, 6, BUF);
    for i in 0..4u64 {
        d.post_srq(&mut srq, 100 + i, &[sge(buf + 4096 * (i + 1), 4096, key)]);
    }
    // Arm the limit: fires when fewer than 3 WQEs remain.
    let m = ModifySrqCmd {
        srq: srq.id,
        attr_mask: SRQ_ATTR_LIMIT,
        limit: 3,
        ..Default::default()
    };
    d.admin_ok(ADMIN_OP_MODIFY_SRQ, payload(&m));
    d.ram.write(buf, b"via srq");
    d.post_send(&mut a, &send_wqe(1, WR_SEND, 0, &[sge(buf, 7, key)]));
    let r = d.wait_cqe(&mut cq);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len, r.qp_num),
        (100, WC_SUCCESS, 7, b.qpn)
    );
    assert_eq!(d.ram.read(buf + 4096, 7), b"via srq");
    d.post_send(&mut a, &send_wqe(2, WR_SEND, 0, &[sge(buf, 7, key)]));
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 101);
    let e = d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_SRQ_LIMIT);
    assert_eq!(e.handle, srq.id);
    // The limit disarmed itself.
    let q = d.admin_ok(
        ADMIN_OP_QUERY_SRQ,
        payload(&rox_uapi::admin::HandleCmd {
            handle: srq.id,
            reserved: 0,
        }),
    );
    assert_eq!((q.result0, q.result1), (0, 2));
}

#[test]
fn ud_send_between_two_qps_with_grh() {
    let mut p = pair(QPT_UD);
    let gid = gid_v4(127, 0, 0, 1);
    p.d.post_recv(&mut p.b, 1, &[sge(p.buf_b, 4096, p.key_b)]);
    p.d.ram.write(p.buf_a, b"datagram");
    let w = with_ud(
        send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 8, p.key_a)]),
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
    let w = with_ud(
        send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 8, p.key_a)]),
        gid,
        p.b.qpn,
        0x2222,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    p.d.expect_no_cqe(&mut p.cq_b, Duration::from_millis(50));
}

#[test]
fn uc_write_and_send() {
    let mut p = pair(QPT_UC);
    p.d.ram.write(p.buf_a, &pattern(9, 5000));
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 5000, p.key_a)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
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
    let w = with_rdma(
        send_wqe(
            3,
            WR_RDMA_READ,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 8, p.key_a)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_LOC_QP_OP_ERR);
}

#[test]
fn cq_overflow_is_a_cq_error_event() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 4]));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let cq = d.create_cq(1); // two CQEs
    let mut qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    d.connect(&qp, gid, qp.qpn, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    for i in 0..3 {
        let w = with_rdma(
            send_wqe(i, WR_RDMA_WRITE, WQE_FLAG_SIGNALED, &[sge(buf, 8, key)]),
            buf + 4096,
            key,
        );
        d.post_send(&mut qp, &w);
    }
    let e = d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_CQ_ERROR);
    assert_eq!(e.handle, cq.id);
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

#[test]
fn mr_translation_through_scattered_pages_level2_list_and_offset() {
    let mut p = pair(QPT_RC);
    // Four target pages in reverse physical order, described by a level-2 page list.
    let pages: Vec<u64> = (0..4).map(|_| p.d.ram.alloc(4096, 4096)).rev().collect();
    for &pg in &pages {
        p.d.ram.fill(pg, 4096, 0xee);
    }
    let l2 = p.d.ram.alloc(4096, 4096);
    for (i, pg) in pages.iter().enumerate() {
        p.d.ram.write(l2 + 8 * i as u64, &pg.to_le_bytes());
    }
    let l1 = p.d.ram.alloc(4096, 4096);
    p.d.ram.write(l1, &l2.to_le_bytes());
    const IOVA: u64 = 0x7000_0000_0100;
    const OFFSET: u32 = 0x100;
    let len = 4 * 4096 - OFFSET as u64;
    let c = RegMrCmd {
        pd: PD,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        iova: IOVA,
        length: len,
        pbl: PageList {
            addr: l1,
            npages: 4,
            page_shift: 12,
            level: PBL_LEVEL_2,
            reserved: 0,
        },
        offset_in_first_page: OFFSET,
        flags: 0,
    };
    let rkey = p.d.run::<RegMr>(c).rkey;
    let data = pattern(21, len as usize);
    p.d.ram.write(p.buf_a, &data);
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, len as u32, p.key_a)],
        ),
        IOVA,
        rkey,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    // Byte k of the MR is at page (k + OFFSET) / 4096, offset (k + OFFSET) % 4096.
    assert_eq!(
        p.d.ram.read(pages[0], OFFSET as usize),
        vec![0xee; OFFSET as usize],
        "bytes before the MR untouched"
    );
    let mut got =
        p.d.ram
            .read(pages[0] + OFFSET as u64, 4096 - OFFSET as usize);
    for pg in &pages[1..] {
        got.extend(p.d.ram.read(*pg, 4096));
    }
    assert_eq!(got, data);
    // A physical MR: iova is the guest address itself.
    let target = p.d.ram.alloc(4096, 4096);
    let phys = RegMrCmd {
        pd: PD,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        iova: target,
        length: 4096,
        flags: MR_FLAG_PHYSICAL,
        ..Default::default()
    };
    let pkey = p.d.run::<RegMr>(phys).rkey;
    let w = with_rdma(
        send_wqe(
            2,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, p.key_a)],
        ),
        target,
        pkey,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.ram.read(target, 64), data[..64]);
}

#[test]
fn deregistered_key_is_refused() {
    let mut p = pair(QPT_RC);
    p.d.admin_ok(
        ADMIN_OP_DEREG_MR,
        payload(&KeyCmd {
            key: p.key_b,
            reserved: 0,
        }),
    );
    p.d.ram.fill(p.buf_b, 64, 0x5a);
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, p.key_a)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
    assert_eq!(p.d.ram.read(p.buf_b, 64), vec![0x5a; 64]);
}

#[test]
fn read_into_read_only_local_mr_is_local_protection_error() {
    let mut p = pair(QPT_RC);
    let ro_local = p.d.reg_mr(PD, p.buf_a, 4096, ACCESS_REMOTE_READ).unwrap();
    p.d.ram.fill(p.buf_a, 4096, 0x33);
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_READ,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, ro_local)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_LOC_PROT_ERR);
    assert_eq!(p.d.ram.read(p.buf_a, 4096), vec![0x33; 4096]);
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
fn guest_memory_unmapped_under_the_device_is_fatal_not_a_crash() {
    let mut p = pair(QPT_RC);
    // QEMU takes guest RAM away (e.g. a buggy hot-unplug); the device's rings are gone.
    p.d.dma_unmap_ram();
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, p.key_a)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    let start = std::time::Instant::now();
    while p.d.read_reg(REG_STATUS) & STATUS_FATAL == 0 {
        assert!(start.elapsed() < TIMEOUT, "device did not notice");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        p.d.read_reg(REG_FATAL_CODE),
        FATAL_EQ_DMA,
        "the QP-fatal event could not be delivered"
    );
    // Map it back, reset, and the device works again.
    p.d.dma_map_ram();
    p.d.reset();
    assert_eq!(p.d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
    let gid = gid_v4(127, 0, 0, 1);
    p.d.set_gid(0, gid);
    let mut cq = p.d.create_cq(4);
    let mut qp = p.d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    p.d.connect(&qp, gid, qp.qpn, ALL_ACCESS);
    let key = p.d.reg_mr(PD, p.buf_a, BUF, ALL_ACCESS).unwrap();
    let w = with_rdma(
        send_wqe(
            9,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 64, key)],
        ),
        p.buf_a + 4096,
        key,
    );
    p.d.post_send(&mut qp, &w);
    assert_eq!(p.d.wait_cqe(&mut cq).wr_id, 9);
}

#[test]
fn qp_reset_restarts_indices_at_zero_and_qp_is_reusable() {
    let mut p = pair(QPT_RC);
    let gid = gid_v4(127, 0, 0, 1);
    for i in 0..5 {
        let w = with_rdma(
            send_wqe(
                i,
                WR_RDMA_WRITE,
                WQE_FLAG_SIGNALED,
                &[sge(p.buf_a, 8, p.key_a)],
            ),
            p.buf_b,
            p.key_b,
        );
        p.d.post_send(&mut p.a, &w);
        p.d.wait_cqe(&mut p.cq_a);
    }
    for qp in [p.a, p.b] {
        assert_eq!(
            p.d.modify_qp(
                qp.qpn,
                QP_STATE,
                QpAttr {
                    qp_state: QPS_RESET,
                    ..Default::default()
                }
            )
            .status,
            0
        );
    }
    assert_eq!(
        p.d.db.slot(TEST_DB_PAGE, p.a.db_slot),
        DbSlot { a: 0, b: 0 }
    );
    p.a.sq_pi = 0;
    p.a.rq_pi = 0;
    p.b.sq_pi = 0;
    p.b.rq_pi = 0;
    p.d.connect(&p.a, gid, p.b.qpn, ALL_ACCESS);
    p.d.connect(&p.b, gid, p.a.qpn, ALL_ACCESS);
    p.d.ram.write(p.buf_a, b"again");
    p.d.post_recv(&mut p.b, 1, &[sge(p.buf_b + 100, 64, p.key_b)]);
    p.d.post_send(
        &mut p.a,
        &send_wqe(9, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 5, p.key_a)]),
    );
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).wr_id, 9);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).wr_id, 1);
    assert_eq!(p.d.ram.read(p.buf_b + 100, 5), b"again");
}

#[test]
fn srq_qp_entering_error_reports_last_wqe_reached() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 6]));
    let cq = d.create_cq(4);
    let srq = d.create_srq(PD, 4, 0);
    let qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, srq.id);
    assert_eq!(
        d.modify_qp(
            qp.qpn,
            QP_STATE,
            QpAttr {
                qp_state: QPS_ERR,
                ..Default::default()
            }
        )
        .status,
        0
    );
    assert_eq!(
        d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_QP_LAST_WQE).handle,
        qp.qpn.get()
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
    let mut w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE_WITH_IMM,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 16, p.key_a)],
        ),
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
    let w = with_ud(
        send_wqe(
            4,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(u.buf_a, 8, u.key_a)],
        ),
        gid_v4(127, 0, 0, 1),
        u.b.qpn,
        PAIR_QKEY,
    );
    u.d.post_send(&mut u.a, &w);
    let c = u.d.wait_cqe(&mut u.cq_a);
    assert_eq!((c.wr_id, c.status), (4, WC_LOC_QP_OP_ERR));
}

#[test]
fn arming_a_cq_with_unconsumed_cqes_fires_at_once() {
    let mut p = pair(QPT_RC);
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 8, p.key_a)],
        ),
        p.buf_b,
        p.key_b,
    );
    p.d.post_send(&mut p.a, &w);
    // Wait until the CQE is there, but do not consume it.
    let start = std::time::Instant::now();
    while p.d.ram.owner(p.cq_a.ring.base + CQE_SIZE as u64 - 1) != owner_for(0, p.cq_a.ring.depth) {
        assert!(start.elapsed() < TIMEOUT);
        std::thread::yield_now();
    }
    p.d.drain_eq(COMP_EQ);
    p.d.arm_cq(&mut p.cq_a, CQ_ARM_NEXT);
    assert_eq!(
        p.d.wait_event(COMP_EQ, EQE_TYPE_COMPLETION).handle,
        p.cq_a.id
    );
    // Once consumed, arming again stays quiet.
    p.d.wait_cqe(&mut p.cq_a);
    p.d.arm_cq(&mut p.cq_a, CQ_ARM_NEXT);
    std::thread::sleep(Duration::from_millis(20));
    assert!(p.d.poll_eq(COMP_EQ).is_none());
}

#[test]
fn read_only_dma_mapping_is_never_written() {
    let mut p = pair(QPT_RC);
    // A second "ROM" region, mapped read-only like QEMU maps ROMs.
    const ROM_BASE: u64 = 0x10_0000_0000;
    const ROM_SIZE: u64 = 1 << 20;
    let rom = GuestRam::new(ROM_BASE, ROM_SIZE);
    rom.fill(ROM_BASE, 4096, 0x77);
    match &p.d.link {
        Link::InProcess(nic) => nic
            .dma_map_with(
                Some(rom.file.try_clone().unwrap()),
                0,
                ROM_BASE,
                ROM_SIZE,
                false,
            )
            .unwrap(),
        Link::Socket { .. } => return, // the crate's client always maps read-write
    }
    let c = RegMrCmd {
        pd: PD,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
        iova: ROM_BASE,
        length: 4096,
        flags: MR_FLAG_PHYSICAL,
        ..Default::default()
    };
    let key = p.d.run::<RegMr>(c).rkey;
    // Reading it works.
    let w = with_rdma(
        send_wqe(
            1,
            WR_RDMA_READ,
            WQE_FLAG_SIGNALED,
            &[Sge {
                addr: p.buf_a,
                length: 64,
                lkey: p.key_a,
            }],
        ),
        ROM_BASE,
        key,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.ram.read(p.buf_a, 64), vec![0x77; 64]);
    // Writing it is refused and nothing changes.
    let w = with_rdma(
        send_wqe(
            2,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[Sge {
                addr: p.buf_a + 4096,
                length: 64,
                lkey: p.key_a,
            }],
        ),
        ROM_BASE,
        key,
    );
    p.d.post_send(&mut p.a, &w);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
    assert_eq!(rom.read(ROM_BASE, 4096), vec![0x77; 4096]);
}

/// Event types on EQ 0 other than admin completions, in order.
fn async_events(d: &mut TestDriver) -> Vec<(u8, u32)> {
    d.drain_eq(EQ_ADMIN_ASYNC)
        .into_iter()
        .filter(|e| e.event_type != EQE_TYPE_ADMIN)
        .map(|e| (e.event_type, e.handle))
        .collect()
}

/// A WQE the device cannot decode completes in SQ order: after the SEND posted before it
/// (held up here by RNR NAKs until a receive is posted), then the WR behind it is flushed.
#[test]
fn undecodable_wqe_completes_after_earlier_wrs_then_flushes() {
    let mut p = pair(QPT_RC);
    let s = [sge(p.buf_a, 32, p.key_a)];
    p.d.write_send(&mut p.a, &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &s));
    let mut bad = send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &s);
    bad.opcode = 0x7f;
    p.d.write_send(&mut p.a, &bad);
    p.d.write_send(&mut p.a, &send_wqe(3, WR_SEND, WQE_FLAG_SIGNALED, &s));
    let qa = p.a;
    p.d.ring_sq(&qa);
    p.d.expect_no_cqe(&mut p.cq_a, Duration::from_millis(30));
    assert_eq!(
        p.d.query_qp(p.a.qpn).qp_state,
        QPS_RTS,
        "still RTS behind the RNR wait"
    );
    p.d.post_recv(&mut p.b, 9, &[sge(p.buf_b, 64, p.key_b)]);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WC_SUCCESS));
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.vendor_err, c.opcode),
        (2, WC_LOC_QP_OP_ERR, VENDOR_ERR_BAD_OPCODE, WC_OPC_SEND)
    );
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (3, WC_WR_FLUSH_ERR));
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_ERR);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).wr_id, 9);
    assert_eq!(p.d.query_stats()[STAT_WQE_ERRORS], 1);
}

/// UD: a send WR completing in error moves the QP to SQE (IBA 10.3.1), not ERR: later sends
/// are flushed, receives keep working, and SQE -> RTS resumes sending.
#[test]
fn ud_send_error_enters_sqe_receives_continue_and_rts_resumes() {
    let mut p = pair(QPT_UD);
    let gid = gid_v4(127, 0, 0, 1);
    const QKEY: u32 = PAIR_QKEY;
    let mut bad = send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[]);
    bad.num_sge = 200;
    p.d.post_send(&mut p.a, &with_ud(bad, gid, p.b.qpn, QKEY));
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.vendor_err),
        (1, WC_LOC_QP_OP_ERR, VENDOR_ERR_BAD_SGE_COUNT)
    );
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_SQE);
    let (b_qpn, buf_a, key_a) = (p.b.qpn, p.buf_a, p.key_a);
    let send_to_b = |wr_id| {
        with_ud(
            send_wqe(wr_id, WR_SEND, WQE_FLAG_SIGNALED, &[sge(buf_a, 16, key_a)]),
            gid,
            b_qpn,
            QKEY,
        )
    };
    p.d.post_send(&mut p.a, &send_to_b(2));
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (2, WC_WR_FLUSH_ERR));
    // The receive queue of the QP in SQE still works.
    p.d.post_recv(&mut p.a, 20, &[sge(p.buf_a + 1024, 1024, p.key_a)]);
    let to_a = with_ud(
        send_wqe(30, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_b, 16, p.key_b)]),
        gid,
        p.a.qpn,
        QKEY,
    );
    p.d.post_send(&mut p.b, &to_a);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (20, WC_SUCCESS, 16 + GRH_SIZE)
    );
    // SQE -> RTS, and sending works again.
    let attr = QpAttr {
        qp_state: QPS_RTS,
        ..Default::default()
    };
    assert_eq!(
        p.d.modify_qp(p.a.qpn, QP_STATE, attr).status,
        ADMIN_STATUS_SUCCESS
    );
    p.d.post_recv(&mut p.b, 40, &[sge(p.buf_b + 1024, 1024, p.key_b)]);
    p.d.post_send(&mut p.a, &send_to_b(3));
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (3, WC_SUCCESS));
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).wr_id, 40);
}

/// RTS -> SQD: a WR already started (here waiting out RNR NAKs) still completes, new WRs wait
/// in the SQ, QUERY_QP says `sq_draining` until the drain ends, then SQ_DRAINED arrives on
/// EQ 0; SQD -> RTS sends the waiting WR.
#[test]
fn sqd_finishes_started_wrs_then_reports_sq_drained() {
    let mut p = pair(QPT_RC);
    let s = [sge(p.buf_a, 32, p.key_a)];
    p.d.post_send(&mut p.a, &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &s));
    p.d.expect_no_cqe(&mut p.cq_a, Duration::from_millis(20));
    let sqd = QpAttr {
        qp_state: QPS_SQD,
        en_sqd_async_notify: 1,
        ..Default::default()
    };
    async_events(&mut p.d);
    let cpl =
        p.d.modify_qp(p.a.qpn, QP_STATE | QP_EN_SQD_ASYNC_NOTIFY, sqd);
    assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS);
    let attr = p.d.query_qp(p.a.qpn);
    assert_eq!((attr.qp_state, attr.sq_draining), (QPS_SQD, 1));
    p.d.post_send(&mut p.a, &send_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, &s));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        async_events(&mut p.d),
        vec![],
        "not drained while WR 1 is in flight"
    );
    // A receive ends the RNR wait: WR 1 completes, and the drain with it.
    p.d.post_recv(&mut p.b, 10, &[sge(p.buf_b, 64, p.key_b)]);
    p.d.post_recv(&mut p.b, 11, &[sge(p.buf_b, 64, p.key_b)]);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WC_SUCCESS));
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_SQ_DRAINED);
    assert_eq!(e.handle, p.a.qpn.get());
    assert_eq!(p.d.query_qp(p.a.qpn).sq_draining, 0);
    p.d.expect_no_cqe(&mut p.cq_a, Duration::from_millis(20));
    // Back to RTS: the WR posted in SQD goes out.
    let rts = QpAttr {
        qp_state: QPS_RTS,
        ..Default::default()
    };
    assert_eq!(
        p.d.modify_qp(p.a.qpn, QP_STATE, rts).status,
        ADMIN_STATUS_SUCCESS
    );
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (2, WC_SUCCESS));
    // An idle QP drains at once; without en_sqd_async_notify there is no event.
    let quiet = QpAttr {
        qp_state: QPS_SQD,
        ..Default::default()
    };
    assert_eq!(
        p.d.modify_qp(p.a.qpn, QP_STATE, quiet).status,
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(p.d.query_qp(p.a.qpn).sq_draining, 0);
    assert_eq!(
        p.d.modify_qp(p.a.qpn, QP_STATE, rts).status,
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(
        p.d.modify_qp(p.a.qpn, QP_STATE | QP_EN_SQD_ASYNC_NOTIFY, sqd)
            .status,
        0
    );
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_SQ_DRAINED);
    assert_eq!(e.handle, p.a.qpn.get());
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(async_events(&mut p.d), vec![], "one event per drain");
}

fn set_port_state(d: &mut TestDriver, port: u32, state: u32) -> AdminCpl {
    d.admin(
        ADMIN_OP_SET_PORT_STATE,
        payload(&SetPortStateCmd { port, state }),
    )
}

fn query_port(d: &mut TestDriver) -> PortAttr {
    let resp = d.ram.alloc(ROX_PAGE_SIZE as u64, ROX_PAGE_SIZE as u64);
    d.admin_ok(
        ADMIN_OP_QUERY_PORT,
        payload(&QueryCmd {
            index: PORT_NUM as u32,
            resp_addr: resp,
            ..Default::default()
        }),
    );
    d.ram.read_obj(resp)
}

/// The driver reports its netdev's link: a change is a PORT_CHANGE event (handle = port, aux =
/// new state), QUERY_PORT follows it, a down port moves no packets (RC retransmits once it is
/// up again), and a repeated state is no event.
#[test]
fn port_state_changes_are_events_and_a_down_port_moves_no_packets() {
    let mut p = pair(QPT_RC);
    assert_eq!(query_port(&mut p.d).state, PORT_ACTIVE);
    async_events(&mut p.d);
    let port = PORT_NUM as u32;
    assert_eq!(
        set_port_state(&mut p.d, port, PORT_DOWN as u32).status,
        ADMIN_STATUS_SUCCESS
    );
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_PORT_CHANGE);
    assert_eq!((e.handle, e.aux), (port, PORT_DOWN as u32));
    let attr = query_port(&mut p.d);
    assert_eq!(
        (attr.state, attr.phys_state),
        (PORT_DOWN, PHYS_STATE_DISABLED)
    );
    assert_eq!(
        set_port_state(&mut p.d, port, PORT_DOWN as u32).status,
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(async_events(&mut p.d), vec![], "no change, no event");
    // Bad port number or a state the driver cannot report.
    assert_eq!(
        set_port_state(&mut p.d, 2, PORT_ACTIVE as u32).status,
        ADMIN_STATUS_BAD_PARAM
    );
    assert_eq!(
        set_port_state(&mut p.d, port, PORT_ARMED as u32).status,
        ADMIN_STATUS_BAD_PARAM
    );
    // No link: the SEND does not arrive.
    p.d.post_recv(&mut p.b, 7, &[sge(p.buf_b, 64, p.key_b)]);
    p.d.ram.write(p.buf_a, b"after the link");
    p.d.post_send(
        &mut p.a,
        &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_a, 14, p.key_a)]),
    );
    p.d.expect_no_cqe(&mut p.cq_b, Duration::from_millis(30));
    // Link back: event, and the retransmission delivers it.
    assert_eq!(
        set_port_state(&mut p.d, port, PORT_ACTIVE as u32).status,
        ADMIN_STATUS_SUCCESS
    );
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_PORT_CHANGE);
    assert_eq!((e.handle, e.aux), (port, PORT_ACTIVE as u32));
    assert_eq!(query_port(&mut p.d).phys_state, PHYS_STATE_LINK_UP);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WC_SUCCESS, 14));
    assert_eq!(p.d.ram.read(p.buf_b, 14), b"after the link");
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert!(p.d.query_stats()[STAT_RETRANSMITS] > 0);
}

/// LAST_WQE_REACHED follows every entry into ERR of a QP with an SRQ, also one the transport
/// causes by itself (here retry exhaustion towards a QP that does not exist).
#[test]
fn srq_qp_failing_by_retry_exhaustion_reports_last_wqe_reached() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 7]));
    let gid = gid_v4(127, 0, 0, 7);
    d.set_gid(0, gid);
    let mut cq = d.create_cq(4);
    let srq = d.create_srq(PD, 4, 0);
    let mut qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, srq.id);
    const NO_SUCH_QPN: Qpn = Qpn::new(0xabcd).unwrap();
    let p = ConnectParams {
        timeout: 1,
        retry_cnt: 1,
        ..Default::default()
    };
    d.connect_with(&qp, gid, NO_SUCH_QPN, ALL_ACCESS, &p);
    let (buf, key) = d.buffer(PD, 4096, ALL_ACCESS);
    async_events(&mut d);
    d.post_send(
        &mut qp,
        &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(buf, 8, key)]),
    );
    let c = d.wait_cqe(&mut cq);
    assert_eq!((c.wr_id, c.status), (1, WC_RETRY_EXC_ERR));
    let e = d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_QP_LAST_WQE);
    assert_eq!(e.handle, qp.qpn.get());
    assert_eq!(d.query_qp(qp.qpn).qp_state, QPS_ERR);
    // A modify to ERR of a QP already in ERR is no second event.
    let err = QpAttr {
        qp_state: QPS_ERR,
        ..Default::default()
    };
    assert_eq!(
        d.modify_qp(qp.qpn, QP_STATE, err).status,
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(async_events(&mut d), vec![]);
}

/// A wild receive-queue producer index, found when a SEND arrives and the device takes a
/// receive WQE, makes the QP fatal like a wild SQ index: QP_FATAL event and the ERR state (the
/// engine's too, it used to stay RTS); the device keeps working.
#[test]
fn wild_receive_index_found_by_an_arriving_send_makes_the_qp_fatal() {
    let mut p = pair(QPT_RC);
    const WILD_INDEX: u32 = 0x7fff_0000;
    p.d.db.store_b(TEST_DB_PAGE, p.a.db_slot, WILD_INDEX);
    async_events(&mut p.d);
    p.d.post_send(
        &mut p.b,
        &send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(p.buf_b, 16, p.key_b)]),
    );
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_QP_FATAL);
    assert_eq!(
        (e.handle, e.aux),
        (p.a.qpn.get(), VENDOR_ERR_WILD_INDEX as u32)
    );
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_ERR);
    assert_eq!(p.d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
    // The device stops consuming the fatal QP's queues; RESET makes the QP usable again.
    let reset = QpAttr {
        qp_state: QPS_RESET,
        ..Default::default()
    };
    assert_eq!(
        p.d.modify_qp(p.a.qpn, QP_STATE, reset).status,
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_RESET);
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
    let w = with_atomic(
        send_wqe(1, WR_ATOMIC_WRITE, WQE_FLAG_SIGNALED, &[]),
        target,
        p.key_b,
        value,
        0,
    );
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
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

/// A type 2 window is never bound to an empty range, and its binding ends with the QP that
/// bound it: another QP of the PD may then bind it without an invalidation.
#[test]
fn type2_window_empty_bind_and_bound_qp_destroyed() {
    let (mut p, mw_mr) = mw_pair();
    let window = p.buf_b + 4096;
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
    let rkey = inc_rkey(mw);
    p.d.post_send(
        &mut p.b,
        &bind_wqe(1, rkey, mw_mr, window, 0, ACCESS_REMOTE_WRITE),
    );
    let c = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((c.status, c.opcode), (WC_MW_BIND_ERR, WC_OPC_BIND_MW));

    let (mut p, mw_mr, rkey) = bound_type2_window(2, window);
    p.d.admin_ok(
        ADMIN_OP_DESTROY_QP,
        payload(&QpnCmd {
            qpn: p.b.qpn,
            reserved: 0,
        }),
    );
    let rebind = bind_wqe(3, inc_rkey(rkey), mw_mr, window, 64, ACCESS_REMOTE_WRITE);
    p.d.post_send(&mut p.a, &rebind);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_BIND_MW));
}

/// SRQ resize (MODIFY_SRQ with SRQ_ATTR_MAX_WR): WQEs posted before it stay, in order, and the
/// new ring takes more; a ring smaller than what is posted, or than the limit, is refused.
#[test]
fn srq_resize_keeps_posted_wqes() {
    let SrqPair {
        mut d,
        mut cq,
        mut srq,
        mut a,
        b,
        buf,
        key,
    } = SrqPair::new(4, PD, ALL_ACCESS, 5, 2, BUF);
    // Index 0 is consumed before the resize; 1..=3 are posted and waiting.
    for i in 0..4u64 {
        d.post_srq(&mut srq, 100 + i, &[sge(buf + 64 * (i + 1), 64, key)]);
    }
    d.ram.write(buf, b"msg");
    d.post_send(&mut a, &send_wqe(1, WR_SEND, 0, &[sge(buf, 3, key)]));
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 100);
    let resize = |d: &mut TestDriver, srq: &TestSrq, log_depth: u8, limit_mask, limit| {
        let depth = 1u32 << log_depth;
        let bytes = depth as u64 * RQ_WQE_SIZE as u64;
        let base = d.ram.alloc(bytes, ROX_PAGE_SIZE as u64);
        // Copy the posted WQEs to the same free-running indices of the new ring.
        for i in 1..srq.pi {
            let old = srq.ring + (i & (srq.depth - 1)) as u64 * RQ_WQE_SIZE as u64;
            let new = base + (i & (depth - 1)) as u64 * RQ_WQE_SIZE as u64;
            let w = d.ram.read(old, RQ_WQE_SIZE);
            d.ram.write(new, &w);
        }
        let m = ModifySrqCmd {
            srq: srq.id,
            attr_mask: SRQ_ATTR_MAX_WR | limit_mask,
            limit,
            log_depth,
            ring: d.page_list(base, bytes),
            ..Default::default()
        };
        (
            d.admin(ADMIN_OP_MODIFY_SRQ, payload(&m)).status,
            base,
            depth,
        )
    };
    // Three WQEs wait: a ring of 2 cannot hold them; a limit of 8 exceeds a ring of 4.
    assert_eq!(resize(&mut d, &srq, 1, 0, 0).0, ADMIN_STATUS_BAD_PARAM);
    assert_eq!(
        resize(&mut d, &srq, 2, SRQ_ATTR_LIMIT, 8).0,
        ADMIN_STATUS_BAD_PARAM
    );
    let (status, base, depth) = resize(&mut d, &srq, 3, 0, 0);
    assert_eq!(status, ADMIN_STATUS_SUCCESS);
    srq.ring = base;
    srq.depth = depth;
    for i in 4..8u64 {
        d.post_srq(&mut srq, 100 + i, &[sge(buf + 64 * (i + 1), 64, key)]);
    }
    for i in 1..8u64 {
        d.post_send(&mut a, &send_wqe(1 + i, WR_SEND, 0, &[sge(buf, 3, key)]));
        let r = d.wait_cqe(&mut cq);
        assert_eq!((r.wr_id, r.status, r.qp_num), (100 + i, WC_SUCCESS, b.qpn));
        assert_eq!(d.ram.read(buf + 64 * (i + 1), 3), b"msg");
    }
    let bad = ModifySrqCmd {
        srq: 0xdead,
        attr_mask: SRQ_ATTR_MAX_WR,
        ..Default::default()
    };
    assert_eq!(
        d.admin(ADMIN_OP_MODIFY_SRQ, payload(&bad)).status,
        ADMIN_STATUS_BAD_HANDLE
    );
}

fn alloc_mw(d: &mut TestDriver, pd: u32, mw_type: u8) -> Key {
    d.run::<AllocMw>(AllocMwCmd {
        pd,
        mw_type,
        ..Default::default()
    })
}

fn bind_wqe(wr_id: u64, new_rkey: Key, lkey: Key, addr: u64, length: u64, access: u32) -> SqWqe {
    let mut w = send_wqe(wr_id, WR_BIND_MW, WQE_FLAG_SIGNALED, &[]);
    w.seg = SqSeg {
        bind: BindSeg {
            addr,
            length,
            new_rkey,
            lkey,
            access,
            ..Default::default()
        },
    };
    w
}

fn inc_rkey(rkey: Key) -> Key {
    rkey.with_variant(rkey.variant().wrapping_add(1))
}

/// A pair whose b side has an MR windows may be bound to; returns (pair, its lkey).
fn mw_pair() -> (Pair, Key) {
    let mut p = pair(QPT_RC);
    let mr =
        p.d.reg_mr(PD, p.buf_b, BUF, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND)
            .unwrap();
    (p, mr)
}

/// A fresh [`mw_pair`] with a type 2 window bound on b's QP (WR `wr_id`) to 64 bytes at
/// `addr` with remote write; returns the pair, the MR's lkey and the window's rkey.
fn bound_type2_window(wr_id: u64, addr: u64) -> (Pair, Key, Key) {
    let (mut p, mw_mr) = mw_pair();
    let rkey = inc_rkey(alloc_mw(&mut p.d, PD, MW_TYPE_2));
    let bind = bind_wqe(wr_id, rkey, mw_mr, addr, 64, ACCESS_REMOTE_WRITE);
    p.d.post_send(&mut p.b, &bind);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS);
    (p, mw_mr, rkey)
}

/// An 8-byte RDMA WRITE from a to `addr` through `rkey`; its completion status.
fn mw_write(p: &mut Pair, id: u64, addr: u64, rkey: Key) -> u8 {
    let w = with_rdma(
        send_wqe(
            id,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 8, p.key_a)],
        ),
        addr,
        rkey,
    );
    p.d.post_send(&mut p.a, &w);
    p.d.wait_cqe(&mut p.cq_a).status
}

/// Memory windows through the device: a type 2 window bound by b's QP lets a's QP write
/// inside it only; LOCAL_INV and SEND with invalidate end it; a type 1 window is rebound
/// (new rkey) and unbound with length 0; binds that break the rules fail with MW_BIND_ERR;
/// deregistering the MR or deallocating the window leaves its rkey reaching nothing.
#[test]
fn memory_windows() {
    // Unbound, a window's rkey reaches nothing. The failed write leaves both QPs in ERR (the
    // responder's with a QP_ACCESS_ERR event, IBA class C): fresh pairs follow.
    let (mut p, _) = mw_pair();
    let window = p.buf_b + 4096;
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
    assert!(mw.is_window());
    assert_eq!(
        mw_write(&mut p, 1, window, mw),
        WC_REM_ACCESS_ERR,
        "unbound"
    );
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_QP_ACCESS_ERR);
    assert_eq!(e.handle, p.b.qpn.get());

    // Type 2, bound on b's QP (the responder of a's writes): writes inside it only.
    let (mut p, mw_mr) = mw_pair();
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
    let rkey = inc_rkey(mw);
    p.d.post_send(
        &mut p.b,
        &bind_wqe(2, rkey, mw_mr, window, 64, ACCESS_REMOTE_WRITE),
    );
    let c = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_BIND_MW));
    p.d.ram.write(p.buf_a, b"windowed");
    assert_eq!(mw_write(&mut p, 3, window + 8, rkey), WC_SUCCESS);
    assert_eq!(p.d.ram.read(window + 8, 8), b"windowed");
    assert_eq!(mw_write(&mut p, 4, window + 60, rkey), WC_REM_ACCESS_ERR);

    // Bound on a's QP: b's QP (which a's writes reach) may not use it (type 2B).
    let (mut p, mw_mr) = mw_pair();
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
    let rkey = inc_rkey(mw);
    p.d.post_send(
        &mut p.a,
        &bind_wqe(5, rkey, mw_mr, window, 64, ACCESS_REMOTE_WRITE),
    );
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(mw_write(&mut p, 6, window, rkey), WC_REM_ACCESS_ERR);

    // A bound type 2 window cannot be bound again before it is invalidated.
    let (mut p, mw_mr) = mw_pair();
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
    let bind = bind_wqe(7, inc_rkey(mw), mw_mr, window, 64, ACCESS_REMOTE_WRITE);
    p.d.post_send(&mut p.b, &bind);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS);
    p.d.post_send(&mut p.b, &bind);
    let c = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((c.status, c.opcode), (WC_MW_BIND_ERR, WC_OPC_BIND_MW));

    // LOCAL_INV on b ends the window (a's write then fails, and b's QP goes to ERR);
    // invalidating it again fails (on a fresh pair, whose b QP still works).
    for again in [false, true] {
        let (mut p, _, rkey) = bound_type2_window(8, window);
        let mut inv = with_rdma(send_wqe(9, WR_LOCAL_INV, WQE_FLAG_SIGNALED, &[]), 0, rkey);
        p.d.post_send(&mut p.b, &inv);
        let c = p.d.wait_cqe(&mut p.cq_b);
        assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_LOCAL_INV));
        if !again {
            assert_eq!(mw_write(&mut p, 10, window, rkey), WC_REM_ACCESS_ERR);
            continue;
        }
        inv.wr_id = 11;
        p.d.post_send(&mut p.b, &inv);
        let c = p.d.wait_cqe(&mut p.cq_b);
        assert_eq!((c.status, c.opcode), (WC_MW_BIND_ERR, WC_OPC_LOCAL_INV));
    }

    // SEND with invalidate from a: b's window bound on b's QP ends with the message.
    let (mut p, _, rkey) = bound_type2_window(12, window);
    p.d.post_recv(&mut p.b, 13, &[sge(p.buf_b + 8192, 64, p.key_b)]);
    let send = with_rdma(
        send_wqe(
            14,
            WR_SEND_WITH_INV,
            WQE_FLAG_SIGNALED,
            &[sge(p.buf_a, 8, p.key_a)],
        ),
        0,
        rkey,
    );
    p.d.post_send(&mut p.a, &send);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.wc_flags, r.imm_data),
        (13, WC_SUCCESS, WC_FLAG_WITH_INV, rkey.get())
    );
    assert_eq!(mw_write(&mut p, 15, window, rkey), WC_REM_ACCESS_ERR);

    // Type 1: rebinding changes the rkey; any QP of the PD may use it; length 0 unbinds.
    let (mut p, mw_mr) = mw_pair();
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_1);
    let k1 = inc_rkey(mw);
    let k2 = inc_rkey(k1);
    for (id, key) in [(16, k1), (17, k2)] {
        p.d.post_send(
            &mut p.a,
            &bind_wqe(id, key, mw_mr, window, 64, ACCESS_REMOTE_WRITE),
        );
        assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    }
    assert_eq!(mw_write(&mut p, 18, window, k2), WC_SUCCESS);
    let k3 = inc_rkey(k2);
    p.d.post_send(&mut p.a, &bind_wqe(19, k3, mw_mr, window, 0, 0));
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(mw_write(&mut p, 20, window, k3), WC_REM_ACCESS_ERR);

    // Rule breakers: an MR without MW_BIND, remote write over an MR without local write, a
    // window beyond the MR, another PD's window, an rkey naming no window.
    let cases: [(&str, u32, u32, u64); 5] = [
        ("MR without MW_BIND", PD, 0, window),
        ("remote write, MR without local write", PD, 1, window),
        ("beyond the MR", PD, 2, p.buf_b + BUF - 32),
        ("window of another PD", PD + 1, 2, window),
        ("no such window", PD, 3, window),
    ];
    for (what, mw_pd, mr_kind, addr) in cases {
        let mut p = pair(QPT_RC);
        let lkey = match mr_kind {
            0 => p.key_b,
            1 => {
                p.d.reg_mr(PD, p.buf_b, BUF, ACCESS_MW_BIND | ACCESS_REMOTE_READ)
                    .unwrap()
            }
            _ => {
                p.d.reg_mr(PD, p.buf_b, BUF, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND)
                    .unwrap()
            }
        };
        let mw = alloc_mw(&mut p.d, mw_pd, MW_TYPE_2);
        let key = if mr_kind == 3 {
            // The next window's index.
            Key::window(mw.index() + 1, inc_rkey(mw).variant())
        } else {
            inc_rkey(mw)
        };
        p.d.post_send(
            &mut p.b,
            &bind_wqe(21, key, lkey, addr, 64, ACCESS_REMOTE_WRITE),
        );
        let c = p.d.wait_cqe(&mut p.cq_b);
        assert_eq!(
            (c.status, c.opcode),
            (WC_MW_BIND_ERR, WC_OPC_BIND_MW),
            "{what}"
        );
    }

    // Deregistering the MR (or deallocating the window) leaves the rkey reaching nothing.
    for dealloc in [false, true] {
        let (mut p, mw_mr) = mw_pair();
        let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
        let rkey = inc_rkey(mw);
        p.d.post_send(
            &mut p.b,
            &bind_wqe(22, rkey, mw_mr, window, 64, ACCESS_REMOTE_WRITE),
        );
        assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS);
        let (op, key) = if dealloc {
            (ADMIN_OP_DEALLOC_MW, rkey)
        } else {
            (ADMIN_OP_DEREG_MR, mw_mr)
        };
        p.d.admin_ok(op, payload(&KeyCmd { key, reserved: 0 }));

        assert_eq!(
            mw_write(&mut p, 23, window, rkey),
            WC_REM_ACCESS_ERR,
            "dealloc {dealloc}"
        );
    }
    // Bad admin input.
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 5]));
    let bad_type = AllocMwCmd {
        pd: PD,
        mw_type: 3,
        ..Default::default()
    };
    assert_eq!(
        d.admin(ADMIN_OP_ALLOC_MW, payload(&bad_type)).status,
        ADMIN_STATUS_BAD_PARAM
    );
    for key in [Key::from_raw(0x1234), Key::window(0x77, 0)] {
        let c = d.admin(ADMIN_OP_DEALLOC_MW, payload(&KeyCmd { key, reserved: 0 }));

        assert_eq!(c.status, ADMIN_STATUS_BAD_HANDLE);
    }
}

/// CQ resize (RESIZE_CQ): unconsumed CQEs move to the new ring with the owner bit of its depth,
/// the rest of it reads empty, later CQEs land there; too small a ring is refused and the old
/// one keeps working.
#[test]
fn cq_resize_keeps_unconsumed_cqes() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 6]));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let mut cq = d.create_cq(2);
    let mut qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    d.connect(&qp, gid, qp.qpn, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, BUF, ALL_ACCESS);
    let write = |d: &mut TestDriver, qp: &mut TestQp, id| {
        let w = with_rdma(
            send_wqe(id, WR_RDMA_WRITE, WQE_FLAG_SIGNALED, &[sge(buf, 8, key)]),
            buf + 64,
            key,
        );
        d.post_send(qp, &w);
    };
    // One CQE consumed (ci = 1), then three unconsumed (indices 1..=3, a full ring of 4).
    write(&mut d, &mut qp, 1);
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 1);
    for id in 2..5 {
        write(&mut d, &mut qp, id);
    }
    std::thread::sleep(Duration::from_millis(50));
    let resize = |d: &mut TestDriver, cq: &TestCq, log_depth: u8| {
        let depth = 1u32 << log_depth;
        let bytes = depth as u64 * CQE_SIZE as u64;
        // A ring full of junk: the device must set every owner byte itself.
        let base = d.ram.alloc(bytes, ROX_PAGE_SIZE as u64);
        d.ram.write(base, &vec![0xff; bytes as usize]);
        let c = ResizeCqCmd {
            cq: cq.id,
            log_depth,
            ring: d.page_list(base, bytes),
            ..Default::default()
        };
        (d.admin(ADMIN_OP_RESIZE_CQ, payload(&c)), base, depth)
    };
    let (cpl, _, _) = resize(&mut d, &cq, 1);
    assert_eq!(cpl.status, ADMIN_STATUS_BAD_PARAM, "3 CQEs do not fit in 2");
    let (cpl, base, depth) = resize(&mut d, &cq, 4);
    assert_eq!((cpl.status, cpl.result0), (ADMIN_STATUS_SUCCESS, 16));
    cq.ring.base = base;
    cq.ring.depth = depth;
    for id in 2..5 {
        assert_eq!(d.wait_cqe(&mut cq).wr_id, id);
    }
    assert!(
        d.poll_cq(&mut cq).is_none(),
        "the rest of the new ring is empty"
    );
    // Past the end of the first pass over the new ring: owner bits keep working.
    for id in 5..25 {
        write(&mut d, &mut qp, id);
        assert_eq!(d.wait_cqe(&mut cq).wr_id, id);
    }
    // Send WRs posted but not completed are owed to the CQ: a QP still in INIT holds them (they
    // wait for RTS), so a ring with room for the unconsumed CQEs alone is refused.
    let mut waiting = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    for id in 100..103 {
        write(&mut d, &mut waiting, id);
    }
    std::thread::sleep(Duration::from_millis(50));
    let (cpl, _, _) = resize(&mut d, &cq, 1);
    assert_eq!(
        cpl.status, ADMIN_STATUS_BAD_PARAM,
        "3 posted send WRs do not fit in 2"
    );
    let (cpl, _, _) = resize(&mut d, &cq, 2);
    assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS, "they fit in 4");
    let bad = ResizeCqCmd {
        cq: 0xdead,
        log_depth: 4,
        ..Default::default()
    };
    assert_eq!(
        d.admin(ADMIN_OP_RESIZE_CQ, payload(&bad)).status,
        ADMIN_STATUS_BAD_HANDLE
    );
}

/// A WRITE that overruns its target (8001 bytes into an 8000-byte region, 65537 into 65536,
/// one starting inside and running past the end, one through a memory window one byte too
/// short) completes with REM_ACCESS_ERR and writes not one byte: the responder checks the
/// whole RETH range on the first packet.
#[test]
fn write_overrunning_a_region_or_window_writes_nothing() {
    const GUARD_LEN: u64 = 4096;
    // (what, region length, offset of the write in it, write length, through a window)
    let cases: [(&str, u64, u64, u32, bool); 5] = [
        ("8001 into 8000", 8000, 0, 8001, false),
        ("65537 into 65536", 65536, 0, 65537, false),
        ("inside and overrunning", 8000, 4000, 5000, false),
        ("8001 with immediate", 8000, 0, 8001, false),
        ("8001 into an 8000-byte window", 8000, 0, 8001, true),
    ];
    for (what, region_len, offset, len, window) in cases {
        let mut p = pair(QPT_RC);
        let src = p.d.ram.alloc(u64::from(len), 4096);
        p.d.ram.write(src, &pattern(5, len as usize));
        let src_key = p.d.reg_mr(PD, src, u64::from(len), ALL_ACCESS).unwrap();
        // The region inside a known pattern; the write must change none of it.
        let area_len = region_len + 2 * GUARD_LEN;
        let area = p.d.ram.alloc(area_len, 4096);
        p.d.ram.write(area, &pattern(6, area_len as usize));
        let region = area + GUARD_LEN;
        let rkey = if window {
            let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_MW_BIND;
            let mr = p.d.reg_mr(PD, area, area_len, access).unwrap();
            let rkey = inc_rkey(alloc_mw(&mut p.d, PD, MW_TYPE_2));
            let bind = bind_wqe(9, rkey, mr, region, region_len, ACCESS_REMOTE_WRITE);
            p.d.post_send(&mut p.b, &bind);
            assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS, "{what}: bind");
            rkey
        } else {
            p.d.reg_mr(PD, region, region_len, ALL_ACCESS).unwrap()
        };
        let before = p.d.ram.read(area, area_len as usize);
        p.d.post_recv(&mut p.b, 50, &[sge(p.buf_b, 64, p.key_b)]);
        let opcode = if what.contains("immediate") {
            WR_RDMA_WRITE_WITH_IMM
        } else {
            WR_RDMA_WRITE
        };
        let w = with_rdma(
            send_wqe(1, opcode, WQE_FLAG_SIGNALED, &[sge(src, len, src_key)]),
            region + offset,
            rkey,
        );
        p.d.post_send(&mut p.a, &w);
        let c = p.d.wait_cqe(&mut p.cq_a);
        assert_eq!((c.wr_id, c.status), (1, WC_REM_ACCESS_ERR), "{what}");
        let after = p.d.ram.read(area, area_len as usize);
        if let Some(at) = after.iter().zip(&before).position(|(a, b)| a != b) {
            panic!(
                "{what}: byte {} of the region changed ({:#x} -> {:#x})",
                at as i64 - GUARD_LEN as i64,
                before[at],
                after[at]
            );
        }
        // The receive WR was not consumed by the failed WRITE with immediate: it is flushed
        // when the responder's QP fails.
        let r = p.d.poll_cq(&mut p.cq_b);
        assert!(
            r.is_none_or(|r| r.wr_id == 50 && r.status != WC_SUCCESS),
            "{what}: {r:?}"
        );
    }
}
