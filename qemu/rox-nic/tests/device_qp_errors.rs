//! Data path through the chassis, what goes wrong on a QP and how it recovers: undecodable and
//! oversized WQEs, wild ring indices, send errors (SQE), SQD draining, reset and reuse, and
//! the port going down.

use rox_nic::testkit::loopback::{async_events, pair, ALL_ACCESS};
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::DbSlot;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;
use std::time::Duration;

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
fn qp_reset_restarts_indices_at_zero_and_qp_is_reusable() {
    let mut p = pair(QPT_RC);
    let gid = gid_v4(127, 0, 0, 1);
    for i in 0..5 {
        let w = rdma_wqe(i, WR_RDMA_WRITE, sge(p.buf_a, 8, p.key_a), p.buf_b, p.key_b);
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
    let send_to_b = |wr_id| ud_wqe(wr_id, WR_SEND, sge(buf_a, 16, key_a), gid, b_qpn, QKEY);
    p.d.post_send(&mut p.a, &send_to_b(2));
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (2, WC_WR_FLUSH_ERR));
    // The receive queue of the QP in SQE still works.
    p.d.post_recv(&mut p.a, 20, &[sge(p.buf_a + 1024, 1024, p.key_a)]);
    let to_a = ud_wqe(30, WR_SEND, sge(p.buf_b, 16, p.key_b), gid, p.a.qpn, QKEY);
    p.d.post_send(&mut p.b, &to_a);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (20, WC_SUCCESS, 16 + GRH_SIZE)
    );
    // SQE -> RTS, and sending works again.
    assert_eq!(p.d.modify_qp_state(p.a.qpn, QPS_RTS), ADMIN_STATUS_SUCCESS);
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
    assert_eq!(p.d.modify_qp_state(p.a.qpn, QPS_RTS), ADMIN_STATUS_SUCCESS);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!((c.wr_id, c.status), (2, WC_SUCCESS));
    // An idle QP drains at once; without en_sqd_async_notify there is no event.
    assert_eq!(p.d.modify_qp_state(p.a.qpn, QPS_SQD), ADMIN_STATUS_SUCCESS);
    assert_eq!(p.d.query_qp(p.a.qpn).sq_draining, 0);
    assert_eq!(p.d.modify_qp_state(p.a.qpn, QPS_RTS), ADMIN_STATUS_SUCCESS);
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

/// The driver reports its netdev's link: a change is a PORT_CHANGE event (handle = port, aux =
/// new state), QUERY_PORT follows it, a down port moves no packets (RC retransmits once it is
/// up again), and a repeated state is no event.
#[test]
fn port_state_changes_are_events_and_a_down_port_moves_no_packets() {
    let mut p = pair(QPT_RC);
    assert_eq!(p.d.query_port().state, PORT_ACTIVE);
    async_events(&mut p.d);
    let port = PORT_NUM as u32;
    assert_eq!(
        set_port_state(&mut p.d, port, PORT_DOWN as u32).status,
        ADMIN_STATUS_SUCCESS
    );
    let e = p.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_PORT_CHANGE);
    assert_eq!((e.handle, e.aux), (port, PORT_DOWN as u32));
    let attr = p.d.query_port();
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
    assert_eq!(p.d.query_port().phys_state, PHYS_STATE_LINK_UP);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WC_SUCCESS, 14));
    assert_eq!(p.d.ram.read(p.buf_b, 14), b"after the link");
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert!(p.d.query_stats()[STAT_RETRANSMITS] > 0);
}

/// A wild receive-queue producer index, found when a SEND arrives and the device takes a
/// receive WQE, makes the QP fatal like a wild SQ index: QP_FATAL event and the ERR state (the
/// engine's too, it used to stay RTS); the device keeps working.
#[test]
fn wild_receive_index_found_by_an_arriving_send_makes_the_qp_fatal() {
    let mut p = pair(QPT_RC);
    const WILD_INDEX: u32 = 0x7fff_0000;
    p.d.doorbell_b(p.a.db_slot, WILD_INDEX);
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
    assert_eq!(
        p.d.modify_qp_state(p.a.qpn, QPS_RESET),
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(p.d.query_qp(p.a.qpn).qp_state, QPS_RESET);
}
