//! XRC through the device: XRC SRQs with their own CQ, XRC initiator and target QPs, the
//! remote SRQ number a send WQE carries, delivery into the named SRQ on one device's
//! loopback, and the XRC domain as the protection boundary.

use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::ids::Qpn;
use rox_uapi::queue::*;
use rox_uapi::regs::ROX_PAGE_SIZE;
use rox_uapi::verbs::*;
use std::time::Duration;

const PD: u32 = 3;
const SRQ_PD: u32 = 4;
const XRCD: u32 = 5;
const OTHER_XRCD: u32 = 6;
const BUF: u64 = 16 * 1024;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

fn xrc_srq_cmd(d: &mut TestDriver, pd: u32, xrcd: u32, cq: u32) -> (CreateSrqCmd, TestSrq) {
    let log_depth = 5u8;
    let bytes = (1u64 << log_depth) * RQ_WQE_SIZE as u64;
    let ring = d.ram.alloc(bytes, ROX_PAGE_SIZE as u64);
    let db_slot = d.alloc_slot();
    let c = CreateSrqCmd {
        pd,
        log_depth,
        db_page: TEST_DB_PAGE,
        db_slot,
        ring: d.page_list(ring, bytes),
        xrcd,
        cq,
        ..Default::default()
    };
    let srq = TestSrq {
        id: 0,
        ring,
        depth: 1 << log_depth,
        pi: 0,
        db_slot,
    };
    (c, srq)
}

fn create_xrc_srq(d: &mut TestDriver, pd: u32, xrcd: u32, cq: u32) -> TestSrq {
    let (c, mut srq) = xrc_srq_cmd(d, pd, xrcd, cq);
    srq.id = d.admin_ok(ADMIN_OP_CREATE_SRQ, payload(&c)).result0;
    srq
}

/// An XRC QP of `qp_type`; a target in `xrcd`.
fn create_xrc_qp(d: &mut TestDriver, qp_type: u8, cq: u32, xrcd: u32) -> TestQp {
    let (mut c, mut qp) = d.create_qp_cmd(qp_type, PD, cq, cq, SRQ_NONE, 4, 0);
    c.log_rq_depth = 0;
    c.xrcd = xrcd;
    qp.qpn = Qpn::from_raw(d.admin_ok(ADMIN_OP_CREATE_QP, payload(&c)).result0);
    qp
}

/// Moves an XRC QP to RTS talking to `dest_qpn` at `gid`, with the attributes ib_core
/// requires of its role (an initiator no responder's, a target no requester's beyond the
/// timeout).
fn xrc_connect(d: &mut TestDriver, qp: &TestQp, gid: [u8; 16], dest_qpn: Qpn) {
    let target = qp.qp_type == QPT_XRC_TGT;
    let (responder, requester) = if target {
        (QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER, 0)
    } else {
        (0, QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC)
    };
    let steps = [
        (QPS_INIT, QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS),
        (
            QPS_RTR,
            QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | responder,
        ),
        (QPS_RTS, QP_TIMEOUT | QP_SQ_PSN | requester),
    ];
    let mut a = QpAttr {
        port_num: admin_port(),
        qp_access_flags: ACCESS,
        path_mtu: MTU_1024,
        dest_qp_num: dest_qpn,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..Default::default()
    };
    a.ah.dgid = gid;
    a.ah.dmac = test_mac(&gid);
    a.ah.hop_limit = 64;
    for (state, mask) in steps {
        a.qp_state = state;
        let status = d.modify_qp(qp.qpn, QP_STATE | mask, a).status;
        assert_eq!(
            status, ADMIN_STATUS_SUCCESS,
            "QP {:?} to state {state}",
            qp.qpn
        );
    }
}

struct Xrc {
    d: TestDriver,
    ini_cq: TestCq,
    srq_cq: TestCq,
    ini: TestQp,
    tgt: TestQp,
    src: u64,
    src_key: rox_uapi::ids::Key,
    dst: u64,
    dst_key: rox_uapi::ids::Key,
}

/// An initiator and a target of domain `XRCD` connected to each other on one device.
fn xrc_pair() -> Xrc {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 7]));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let ini_cq = d.create_cq(6);
    let srq_cq = d.create_cq(6);
    let ini = create_xrc_qp(&mut d, QPT_XRC_INI, ini_cq.id, 0);
    let tgt = create_xrc_qp(&mut d, QPT_XRC_TGT, 0, XRCD);
    xrc_connect(&mut d, &ini, gid, tgt.qpn);
    xrc_connect(&mut d, &tgt, gid, ini.qpn);
    let (src, src_key) = d.buffer(PD, BUF, ACCESS);
    let (dst, dst_key) = d.buffer(SRQ_PD, BUF, ACCESS);
    Xrc {
        d,
        ini_cq,
        srq_cq,
        ini,
        tgt,
        src,
        src_key,
        dst,
        dst_key,
    }
}

fn xrc_send(x: &mut Xrc, wr_id: u64, srqn: u32, msg: &[u8]) {
    x.d.ram.write(x.src, msg);
    let mut w = send_wqe(
        wr_id,
        WR_SEND,
        WQE_FLAG_SIGNALED,
        &[sge(x.src, msg.len() as u32, x.src_key)],
    );
    w.xrc_srqn = srqn;
    let mut ini = x.ini;
    x.d.post_send(&mut ini, &w);
    x.ini = ini;
}

#[test]
fn xrc_objects_are_checked_when_created() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 8]));
    let cq = d.create_cq(6);
    let (bad_cq, _) = xrc_srq_cmd(&mut d, SRQ_PD, XRCD, 999);
    assert_eq!(
        d.admin(ADMIN_OP_CREATE_SRQ, payload(&bad_cq)).status,
        ADMIN_STATUS_BAD_HANDLE
    );
    let srq = create_xrc_srq(&mut d, SRQ_PD, XRCD, cq.id);
    let destroy_cq = HandleCmd {
        handle: cq.id,
        ..Default::default()
    };
    assert_eq!(
        d.admin(ADMIN_OP_DESTROY_CQ, payload(&destroy_cq)).status,
        ADMIN_STATUS_BUSY,
        "an XRC SRQ completes on it"
    );
    // A target needs its domain; neither role has a receive queue or an SRQ of its own.
    let (tgt, _) = d.create_qp_cmd(QPT_XRC_TGT, PD, cq.id, cq.id, SRQ_NONE, 4, 0);
    let refused = [
        CreateQpCmd {
            xrcd: XRCD_NONE,
            ..tgt
        },
        CreateQpCmd {
            xrcd: XRCD,
            srq: srq.id,
            ..tgt
        },
        CreateQpCmd {
            qp_type: QPT_XRC_INI,
            log_rq_depth: 4,
            ..tgt
        },
    ];
    for c in refused {
        assert_eq!(
            d.admin(ADMIN_OP_CREATE_QP, payload(&c)).status,
            ADMIN_STATUS_BAD_PARAM,
            "{c:?}"
        );
    }
    // A target's CQ fields are ignored: it holds no CQ.
    let c = CreateQpCmd {
        xrcd: XRCD,
        send_cq: 4242,
        recv_cq: 4242,
        ..tgt
    };
    let qpn = d.admin_ok(ADMIN_OP_CREATE_QP, payload(&c)).result0;
    let destroy_srq = HandleCmd {
        handle: srq.id,
        ..Default::default()
    };
    d.admin_ok(ADMIN_OP_DESTROY_SRQ, payload(&destroy_srq));
    let destroy_qp = HandleCmd {
        handle: qpn,
        ..Default::default()
    };
    d.admin_ok(ADMIN_OP_DESTROY_QP, payload(&destroy_qp));
    d.admin_ok(ADMIN_OP_DESTROY_CQ, payload(&destroy_cq));
}

#[test]
fn a_send_lands_in_the_named_srq_and_completes_on_its_cq() {
    let mut x = xrc_pair();
    let mut other = create_xrc_srq(&mut x.d, SRQ_PD, XRCD, x.srq_cq.id);
    let mut named = create_xrc_srq(&mut x.d, SRQ_PD, XRCD, x.srq_cq.id);
    x.d.post_srq(&mut other, 1, &[sge(x.dst, 64, x.dst_key)]);
    x.d.post_srq(&mut named, 2, &[sge(x.dst + 4096, 64, x.dst_key)]);
    xrc_send(&mut x, 10, named.id, b"hello xrc");
    let recv = x.d.wait_cqe(&mut x.srq_cq);
    assert_eq!(
        (recv.wr_id, recv.status, recv.byte_len, recv.qp_num),
        (2, WC_SUCCESS, 9, x.tgt.qpn)
    );
    // The CQE names the SRQ whose WQE it consumed.
    assert_eq!(
        (recv.src_qp, recv.wc_flags),
        (Qpn::from_raw(named.id), CQE_FLAG_XRC_SRQ)
    );
    assert_eq!(x.d.ram.read(x.dst + 4096, 9), b"hello xrc");
    assert_eq!(x.d.ram.read(x.dst, 9), vec![0; 9], "the other SRQ's buffer");
    let sent = x.d.wait_cqe(&mut x.ini_cq);
    assert_eq!((sent.wr_id, sent.status), (10, WC_SUCCESS));
    // The next send takes the other SRQ's WQE: each SRQ keeps its own.
    xrc_send(&mut x, 11, other.id, b"second");
    assert_eq!(x.d.wait_cqe(&mut x.srq_cq).wr_id, 1);
    assert_eq!(x.d.ram.read(x.dst, 6), b"second");
    assert_eq!(x.d.wait_cqe(&mut x.ini_cq).status, WC_SUCCESS);
}

#[test]
fn an_srq_of_another_domain_is_refused_and_untouched() {
    let mut x = xrc_pair();
    let mut foreign_cq = x.d.create_cq(6);
    let mut foreign = create_xrc_srq(&mut x.d, SRQ_PD, OTHER_XRCD, foreign_cq.id);
    x.d.post_srq(&mut foreign, 3, &[sge(x.dst, 64, x.dst_key)]);
    xrc_send(&mut x, 20, foreign.id, b"not yours");
    let sent = x.d.wait_cqe(&mut x.ini_cq);
    assert_eq!((sent.wr_id, sent.status), (20, WC_REM_INV_REQ_ERR));
    x.d.expect_no_cqe(&mut foreign_cq, Duration::from_millis(200));
    x.d.expect_no_cqe(&mut x.srq_cq, Duration::from_millis(10));
    assert_eq!(x.d.ram.read(x.dst, 9), vec![0; 9]);
    assert_eq!(x.d.query_qp(x.tgt.qpn).qp_state, QPS_ERR);
}

#[test]
fn xrc_qps_take_the_attributes_ib_core_requires_of_them() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 9]));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let cq = d.create_cq(6);
    let ini = create_xrc_qp(&mut d, QPT_XRC_INI, cq.id, 0);
    let tgt = create_xrc_qp(&mut d, QPT_XRC_TGT, 0, XRCD);
    let mut a = QpAttr {
        qp_state: QPS_INIT,
        port_num: 1,
        qp_access_flags: ACCESS,
        ..Default::default()
    };
    let to_init = QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
    for qp in [&ini, &tgt] {
        assert_eq!(d.modify_qp(qp.qpn, to_init, a).status, ADMIN_STATUS_SUCCESS);
    }
    a.qp_state = QPS_RTR;
    a.path_mtu = MTU_1024;
    a.ah.dgid = gid;
    a.ah.dmac = test_mac(&gid);
    a.ah.hop_limit = 64;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    let path = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
    let responder = QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    // As ibv_xsrq_pingpong does: an initiator's RTR without responder attributes, a target's
    // RTS with the timeout and send PSN only.
    a.dest_qp_num = tgt.qpn;
    assert_eq!(d.modify_qp(ini.qpn, path, a).status, ADMIN_STATUS_SUCCESS);
    a.dest_qp_num = ini.qpn;
    assert_eq!(
        d.modify_qp(tgt.qpn, path, a).status,
        ADMIN_STATUS_BAD_STATE,
        "a target's RTR needs its responder attributes"
    );
    assert_eq!(
        d.modify_qp(tgt.qpn, path | responder, a).status,
        ADMIN_STATUS_SUCCESS
    );
    a.qp_state = QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    let rts = QP_STATE | QP_TIMEOUT | QP_SQ_PSN;
    assert_eq!(d.modify_qp(tgt.qpn, rts, a).status, ADMIN_STATUS_SUCCESS);
    assert_eq!(
        d.modify_qp(ini.qpn, rts, a).status,
        ADMIN_STATUS_BAD_STATE,
        "an initiator's RTS needs its requester attributes"
    );
    let requester = QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    assert_eq!(
        d.modify_qp(ini.qpn, rts | requester, a).status,
        ADMIN_STATUS_SUCCESS
    );
    assert_eq!(d.query_qp(tgt.qpn).qp_state, QPS_RTS);
    assert_eq!(d.query_qp(ini.qpn).qp_state, QPS_RTS);
}
