use super::test_env::*;
use super::*;
use crate::roce::wire::{self, opcode as op};

#[test]
fn the_qps_of_an_engine_share_the_lateness_tail_probes_learn() {
    let mut e = Engine::new();
    for n in [0x11, 0x12] {
        e.create_qp(qp_config(Qpn::from_wire(n), QpType::Rc))
            .unwrap();
    }
    let [a, b] = [0x11, 0x12].map(|n| &e.qps[&Qpn::from_wire(n)].req.pto_lateness);
    assert!(std::sync::Arc::ptr_eq(a, b));
}

#[test]
fn rtr_without_address_vector_is_refused_for_connected_qps() {
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    let qpn = Qpn::new(5).unwrap();
    engine.create_qp(qp_config(qpn, QpType::Rc)).unwrap();
    let rtr = QpModify {
        state: Some(QpState::Rtr),
        ..Default::default()
    };
    let e = engine.modify_qp(&mut env, qpn, &rtr).unwrap_err();
    assert_eq!(e, EngineError::MissingAttribute(qpn, "av"));
    assert_eq!(engine.qp_state(qpn), Some(QpState::Reset));
    assert_eq!(
        engine.create_qp(qp_config(qpn, QpType::Rc)),
        Err(EngineError::QpExists(qpn))
    );
}

#[test]
fn one_context_records_what_the_mask_names_and_reports_the_current_state() {
    use rox_uapi::verbs::{
        QPS_ERR, QPS_RTS, QPS_SQD, QP_EN_SQD_ASYNC_NOTIFY, QP_QKEY, QP_STATE, QP_TIMEOUT,
    };
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    create_rts_qp(&mut engine, &mut env, QpType::Rc);
    let before = engine.query_qp(LOCAL_QPN).unwrap();
    assert_eq!((before.qp_state, before.dest_qp_num), (QPS_RTS, PEER_QPN));
    assert_eq!(before.rq_psn.get(), 100);
    // Only the named attributes change: the timeout and the Q_Key given outside the mask
    // are not taken.
    let attr = QpAttr {
        qp_state: QPS_SQD,
        qkey: 0x1234,
        timeout: 9,
        en_sqd_async_notify: 1,
        ..QpAttr::default()
    };
    let mask = QP_STATE | QP_QKEY | QP_EN_SQD_ASYNC_NOTIFY;
    engine
        .modify_qp_attr(&mut env, LOCAL_QPN, mask, &attr, None)
        .unwrap();
    let after = engine.query_qp(LOCAL_QPN).unwrap();
    assert_eq!((after.qp_state, after.cur_qp_state), (QPS_SQD, QPS_SQD));
    assert_eq!((after.qkey, after.timeout), (0x1234, before.timeout));
    assert_eq!(after.en_sqd_async_notify, 1);
    assert_eq!(after.ah, before.ah);
    // Nothing was in flight: the drain ended at once and was reported, as asked.
    assert_eq!(after.sq_draining, 0);
    assert_eq!(env.drained, [LOCAL_QPN]);
    // A state the engine enters by itself shows in the query too.
    engine
        .modify_qp_attr(
            &mut env,
            LOCAL_QPN,
            mask & !QP_STATE | QP_TIMEOUT,
            &attr,
            None,
        )
        .unwrap();
    assert_eq!(engine.query_qp(LOCAL_QPN).unwrap().timeout, 9);
    engine.set_error(&mut env, LOCAL_QPN).unwrap();
    assert_eq!(engine.query_qp(LOCAL_QPN).unwrap().qp_state, QPS_ERR);
    let bad = QpAttr {
        qp_state: 9,
        ..attr
    };
    assert_eq!(
        engine.modify_qp_attr(&mut env, LOCAL_QPN, QP_STATE, &bad, None),
        Err(EngineError::BadState(LOCAL_QPN, 9))
    );
}

#[test]
fn a_failed_wr_completes_in_order_and_stops_the_queue() {
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    create_rts_qp(&mut engine, &mut env, QpType::Rc);
    engine
        .post_send(&mut env, LOCAL_QPN, send_wr(1, WrOpcode::Send, 8))
        .unwrap();
    let failed = FailedWr {
        wr_id: 2,
        opcode: WrOpcode::Send,
        status: WcStatus::LocQpOpErr,
        vendor_err: 7,
        wqe_index: 1,
    };
    engine.post_failed(&mut env, LOCAL_QPN, failed).unwrap();
    engine
        .post_send(&mut env, LOCAL_QPN, send_wr(3, WrOpcode::Send, 8))
        .unwrap();
    assert!(env.completions.is_empty(), "WR 1 is not acknowledged yet");
    assert_eq!(engine.sq_outstanding(LOCAL_QPN), 3);
    let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
        h.aeth = peer_aeth(wire::Syndrome::Ack)
    });
    engine.receive(&mut env, &ack).unwrap();
    // Each completion names its WQE's index (the test's WRs 1 and 3 were posted at 0).
    let done: Vec<(u64, WcStatus, u8, u16)> = env
        .completions
        .iter()
        .map(|c| (c.wr_id, c.status, c.vendor_err, c.wqe_index))
        .collect();
    assert_eq!(
        done,
        [
            (1, WcStatus::Success, 0, 0),
            (2, WcStatus::LocQpOpErr, 7, 1),
            (3, WcStatus::WrFlushErr, 0, 0)
        ]
    );
    assert_eq!(engine.qp_state(LOCAL_QPN), Some(QpState::Err));
}

#[test]
fn a_doorbells_wrs_are_queued_then_sent_in_one_burst_in_post_order() {
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    create_rts_qp(&mut engine, &mut env, QpType::Rc);
    for wr_id in 1..=2 {
        let wr = send_wr(wr_id, WrOpcode::Send, 8);
        engine.queue_send(&mut env, LOCAL_QPN, Ok(wr)).unwrap();
    }
    let failed = FailedWr {
        wr_id: 3,
        opcode: WrOpcode::Send,
        status: WcStatus::LocQpOpErr,
        vendor_err: 0,
        wqe_index: 2,
    };
    engine.queue_send(&mut env, LOCAL_QPN, Err(failed)).unwrap();
    let after = send_wr(4, WrOpcode::Send, 8);
    engine.queue_send(&mut env, LOCAL_QPN, Ok(after)).unwrap();
    assert!(env.sent.is_empty(), "queued, not sent");
    assert_eq!(engine.sq_outstanding(LOCAL_QPN), 4);
    engine.send_queued(&mut env, LOCAL_QPN).unwrap();
    let psns: Vec<u32> = env
        .sent_parsed()
        .iter()
        .map(|p| p.hdr.bth.psn.get())
        .collect();
    assert_eq!(psns, [100, 101], "in order, up to the failed WR");
    assert_eq!(
        engine.queue_send(&mut env, Qpn::new(0x999).unwrap(), Err(failed)),
        Err(EngineError::NoSuchQp(Qpn::new(0x999).unwrap()))
    );
}

#[test]
fn a_wr_decoded_in_its_slot_is_queued_as_one_moved_in_and_an_unfinished_slot_fails() {
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    create_rts_qp(&mut engine, &mut env, QpType::Rc);
    // Decoded in place, field by field, into the blank slot.
    let slot = engine.send_slot(LOCAL_QPN).unwrap();
    let wr = send_wr(1, WrOpcode::Send, 8);
    (slot.wr_id, slot.opcode, slot.data) = (wr.wr_id, wr.opcode, wr.data);
    engine.queue_decoded(&mut env, LOCAL_QPN, Ok(())).unwrap();
    // A slot left blank (never decoded into) fails in SQ order rather than being sent.
    engine.send_slot(LOCAL_QPN).unwrap();
    engine.send_queued(&mut env, LOCAL_QPN).unwrap();
    assert_eq!(
        env.sent.len(),
        1,
        "the decoded WR went out, the blank did not"
    );
    // One the device could not decode completes with its status and its own name.
    let slot = engine.send_slot(LOCAL_QPN).unwrap();
    slot.wr_id = 77;
    let failed = FailedWr {
        wr_id: 3,
        opcode: WrOpcode::RdmaWrite,
        status: WcStatus::LocLenErr,
        vendor_err: 9,
        wqe_index: 2,
    };
    engine
        .queue_decoded(&mut env, LOCAL_QPN, Err(failed))
        .unwrap();
    assert_eq!(engine.sq_outstanding(LOCAL_QPN), 3);
    assert_eq!(
        engine.send_slot(Qpn::new(0x999).unwrap()).err(),
        Some(EngineError::NoSuchQp(Qpn::new(0x999).unwrap()))
    );
}

#[test]
fn a_failed_decode_gives_the_sge_list_it_filled_back_to_the_device() {
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    create_rts_qp(&mut engine, &mut env, QpType::Rc);
    // The device decoded the SGEs into a spare list of its own, then found the WQE bad.
    let slot = engine.send_slot(LOCAL_QPN).unwrap();
    let mut sges = Vec::with_capacity(4);
    sges.push(Sge {
        addr: 0,
        length: 8,
        lkey: LKEY,
    });
    slot.data = SendData::Sges(sges);
    let failed = FailedWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        status: WcStatus::LocLenErr,
        vendor_err: 0,
        wqe_index: 0,
    };
    engine
        .queue_decoded(&mut env, LOCAL_QPN, Err(failed))
        .unwrap();
    engine.send_queued(&mut env, LOCAL_QPN).unwrap();
    assert_eq!(env.recycled, [4], "the list's allocation, given back once");
    let done: Vec<(u64, WcStatus)> = env
        .completions
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        done,
        [(1, WcStatus::LocLenErr)],
        "the WR still fails as decoded"
    );
}

#[test]
fn poll_reads_the_clock_only_while_a_qp_has_something_to_poll() {
    let mut env = TestEnv::new();
    let (mut engine, _) = engine_with_timed_qps(&mut env, 1);
    let reads = env.clock_reads.get();
    engine.poll(&mut env);
    assert_eq!(env.clock_reads.get(), reads, "an idle QP: no clock read");
    let wr = send_wr(1, WrOpcode::Send, 8);
    engine.queue_send(&mut env, LOCAL_QPN, Ok(wr)).unwrap();
    engine.send_queued(&mut env, LOCAL_QPN).unwrap();
    assert_eq!(env.sent.len(), 1, "the SEND went out and waits for its ACK");
    let reads = env.clock_reads.get();
    engine.poll(&mut env);
    assert_eq!(env.clock_reads.get(), reads + 1, "one read for its timers");
}

#[test]
fn poll_asks_the_port_for_a_held_qp_only_when_one_of_its_timers_is_due() {
    let mut env = TestEnv::new();
    let (mut engine, _) = engine_with_timed_qps(&mut env, 1);
    // One packet may go, then the port's scheduler holds the QP (it waits for a turn).
    env.send_allowance = Some(1);
    for wr_id in [1, 2] {
        let wr = send_wr(wr_id, WrOpcode::Send, 8);
        engine.queue_send(&mut env, LOCAL_QPN, Ok(wr)).unwrap();
    }
    engine.send_queued(&mut env, LOCAL_QPN).unwrap();
    assert_eq!(env.sent.len(), 1);
    let asked = env.asked.len();
    for _ in 0..10 {
        engine.poll(&mut env);
    }
    assert_eq!(
        env.asked.len(),
        asked,
        "no timer due: the QP waits for its turn"
    );
    // The ACK timer comes due: the QP may have to resend, so it asks.
    env.now = engine.next_deadline().expect("the SEND's timer");
    engine.poll(&mut env);
    assert!(env.asked.len() > asked, "a due timer asks the port");
}

#[test]
fn poll_sends_one_coalesced_ack_and_reset_forgets_the_qp() {
    let (mut engine, mut env) = (Engine::new(), TestEnv::new());
    create_rts_qp(&mut engine, &mut env, QpType::Rc);
    for (n, wr_id) in [(100, 1), (101, 2)] {
        env.recv.push_back(RecvWr {
            wqe_index: 0,
            wr_id,
            sges: Vec::new(),
        });
        let send = packet_from_peer(op::RC_SEND_ONLY, n, &[], |_| {});
        engine.receive(&mut env, &send).unwrap();
    }
    assert!(env.sent.is_empty(), "ACKs wait for the poll");
    engine.poll(&mut env);
    let acks = env.sent_parsed();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].hdr.bth.psn.get(), 101);
    assert_eq!(acks[0].hdr.aeth.unwrap().msn.get(), 2);
    let reset = QpModify {
        state: Some(QpState::Reset),
        ..Default::default()
    };
    engine.modify_qp(&mut env, LOCAL_QPN, &reset).unwrap();
    assert_eq!(engine.qp_state(LOCAL_QPN), Some(QpState::Reset));
    assert_eq!(engine.next_deadline(), None);
    assert_eq!(engine.destroy_qp(LOCAL_QPN), Ok(()));
    assert_eq!(
        engine.destroy_qp(LOCAL_QPN),
        Err(EngineError::NoSuchQp(LOCAL_QPN))
    );
}
