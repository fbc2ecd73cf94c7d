//! Data path through the chassis, completion and shared receive queues: CQEs, completion
//! events and MSI-X, arming, overflow and resizing, SRQs (limit events, LAST_WQE_REACHED,
//! resizing), and the idle data path woken by a doorbell; its naps' timer slack (read from
//! /proc/TID/timerslack_ns, which for another thread needs CAP_SYS_NICE: run as root).

use rox_nic::testkit::loopback::{async_events, pair, ALL_ACCESS, BUF, PD};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;
use std::time::Duration;

#[test]
fn armed_cq_posts_completion_event_and_fires_msix() {
    let mut p = pair(QPT_RC);
    p.d.drain_eq(COMP_EQ);
    p.d.ack_eq(COMP_EQ, true);
    p.d.wait_vector(COMP_EQ, Duration::from_millis(1));
    // Not armed: a completion writes a CQE but no event.
    let w = rdma_wqe(1, WR_RDMA_WRITE, sge(p.buf_a, 8, p.key_a), p.buf_b, p.key_b);
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
    let (mut cq, mut qp) = d.self_connected_rc(PD, 6, ALL_ACCESS);
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
    let w = rdma_wqe(1, WR_RDMA_WRITE, sge(buf, 16, key), buf + 4096, key);
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
    d.doorbell_a(qp.db_slot, qp.sq_pi);
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
fn rq_doorbells_need_no_wake_unless_a_qp_of_the_page_is_in_the_error_state() {
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, 3]);
    cfg.idle_after = Duration::from_millis(5);
    let mut d = TestDriver::new(cfg);
    let (mut cq, mut qp) = d.self_connected_rc(PD, 6, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    d.wait_announced_idle();
    assert_eq!(
        d.db.rq_no_wake(TEST_DB_PAGE),
        DB_RQ_NO_WAKE,
        "an RTS QP's RQ doorbell needs no wake"
    );
    // Posted without a wake, the receive is taken when a SEND needs it.
    let wakes = d.wakes;
    assert!(!d.post_recv_as_librox(&mut qp, 7, &[sge(buf + 4096, 64, key)]));
    let w = send_wqe(1, WR_SEND, WQE_FLAG_SIGNALED, &[sge(buf, 16, key)]);
    d.post_send(&mut qp, &w);
    assert_eq!(d.wakes, wakes + 1, "only the SQ doorbell woke the device");
    let mut got: Vec<(u64, u8)> = (0..2)
        .map(|_| d.wait_cqe(&mut cq))
        .map(|c| (c.wr_id, c.status))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(1, WC_SUCCESS), (7, WC_SUCCESS)]);
    // In the error state the device flushes new receive WQEs when it sees their doorbell: the
    // page says RQ doorbells need a wake again, and the wake gets the flush.
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_ERR), ADMIN_STATUS_SUCCESS);
    d.wait_announced_idle();
    assert_eq!(d.db.rq_no_wake(TEST_DB_PAGE), 0);
    assert!(d.post_recv_as_librox(&mut qp, 8, &[sge(buf + 4096, 64, key)]));
    let c = d.wait_cqe(&mut cq);
    assert_eq!((c.wr_id, c.status), (8, WC_WR_FLUSH_ERR));
}

/// How many data-path threads (named `rox-datapath`) of this process have timer slack `slack`,
/// as the kernel shows it in /proc/TID/timerslack_ns (another thread's slack: CAP_SYS_NICE).
fn data_path_threads_with_slack(slack: Duration) -> usize {
    let mut count = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let tid = task.expect("a task of this process").file_name();
        let tid = tid.to_str().expect("a numeric TID");
        // A thread may end between the listing and the reads: then it is no data path of ours.
        let Ok(comm) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) else {
            continue;
        };
        if comm.trim_end() != "rox-datapath" {
            continue;
        }
        // A thread's own timerslack_ns is under /proc/TID, not /proc/self/task/TID.
        let ns = match std::fs::read_to_string(format!("/proc/{tid}/timerslack_ns")) {
            Ok(ns) => ns,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!(
                "cannot read data-path thread {tid}'s timer slack ({e}): reading another \
                 thread's /proc/TID/timerslack_ns needs CAP_SYS_NICE; run as root"
            ),
        };
        let ns: u64 = ns.trim().parse().expect("timerslack_ns is a number");
        count += usize::from(Duration::from_nanos(ns) == slack);
    }
    count
}

#[test]
fn the_data_path_naps_with_the_timer_slack_configured() {
    // A nap ends up to the thread's timer slack late, and a doorbell stored during a nap waits
    // for its end: `nap_slack` sets the data-path thread's own slack, and only its own. Other
    // tests' devices run beside these, their data paths with their creators' slack (the
    // default): this test's devices are told apart by slacks only they have, and the devices
    // are made on a thread of its own slack.
    const CONFIGURED: Duration = Duration::from_micros(1);
    const CREATORS: Duration = Duration::from_nanos(123_457);
    let default = rox_nic::sys::poll::timer_slack().unwrap();
    assert!(
        ![CONFIGURED, CREATORS].contains(&default),
        "a test thread of another slack"
    );
    std::thread::spawn(|| {
        rox_nic::sys::poll::set_timer_slack(CREATORS).unwrap();
        let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, 3]);
        cfg.nap_slack = Some(CONFIGURED);
        let d = TestDriver::new(cfg);
        assert_eq!(data_path_threads_with_slack(CONFIGURED), 1);
        assert_eq!(rox_nic::sys::poll::timer_slack().unwrap(), CREATORS);
        drop(d);
        assert_eq!(
            data_path_threads_with_slack(CONFIGURED),
            0,
            "the slack was the ended device's data path's"
        );
        // By default the thread keeps the slack it was born with (its creator's).
        let d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 4]));
        assert_eq!(data_path_threads_with_slack(CREATORS), 1);
        drop(d);
    })
    .join()
    .unwrap();
}

#[test]
fn srq_shared_by_two_qps_and_limit_event() {
    let SrqPair {
        mut d,
        mut cq,
        srq,
        mut a,
        b,
        buf,
        key,
    } = SrqPair::with_slots(3, PD, ALL_ACCESS, (8, 6), BUF, (4, 4096));
    // Arm the limit: fires when fewer than 3 WQEs remain.
    d.arm_srq_limit(srq.id, 3);
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
fn cq_overflow_is_a_cq_error_event() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 4]));
    let (cq, mut qp) = d.self_connected_rc(PD, 1, ALL_ACCESS); // two CQEs
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    for i in 0..3 {
        let w = rdma_wqe(i, WR_RDMA_WRITE, sge(buf, 8, key), buf + 4096, key);
        d.post_send(&mut qp, &w);
    }
    let e = d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_CQ_ERROR);
    assert_eq!(e.handle, cq.id);
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
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
fn arming_a_cq_with_unconsumed_cqes_fires_at_once() {
    let mut p = pair(QPT_RC);
    let w = rdma_wqe(1, WR_RDMA_WRITE, sge(p.buf_a, 8, p.key_a), p.buf_b, p.key_b);
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
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_ERR), ADMIN_STATUS_SUCCESS);
    assert_eq!(async_events(&mut d), vec![]);
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
    } = SrqPair::with_slots(4, PD, ALL_ACCESS, (5, 2), BUF, (4, 64));
    // Index 0 is consumed before the resize; 1..=3 are posted and waiting.
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

/// CQ resize (RESIZE_CQ): unconsumed CQEs move to the new ring with the owner bit of its depth,
/// the rest of it reads empty, later CQEs land there; too small a ring is refused and the old
/// one keeps working.
#[test]
fn cq_resize_keeps_unconsumed_cqes() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 6]));
    let (mut cq, mut qp) = d.self_connected_rc(PD, 2, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, BUF, ALL_ACCESS);
    let write = |d: &mut TestDriver, qp: &mut TestQp, id| {
        let w = rdma_wqe(id, WR_RDMA_WRITE, sge(buf, 8, key), buf + 64, key);
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
