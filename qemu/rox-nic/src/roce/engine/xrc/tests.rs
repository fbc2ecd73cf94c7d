//! XRC in the engine: the initiator's requests carry XRCETH, the target delivers into the SRQ
//! a request names, and the XRC domain keeps a peer out of every other SRQ.

use super::super::test_env::*;
use super::*;
use crate::roce::wire::{self, opcode as op, Aeth, Reth, Syndrome};
use std::collections::VecDeque;

const XRCD: u32 = 7;
const OTHER_XRCD: u32 = 8;
const SRQ_A: u32 = 0x30;
const SRQ_B: u32 = 0x31;
const FOREIGN_SRQ: u32 = 0x32;
const SRQ_PD: u32 = 9;
/// Keys of regions in the SRQs' PD: the receive WRs' and a remote writer's.
const SRQ_LKEY: Key = Key::region(5, 0);
const SRQ_RKEY: Key = Key::region(6, 0);

fn rts(engine: &mut Engine, env: &mut TestEnv) {
    let modify = QpModify {
        access_flags: Some(ACCESS_REMOTE_WRITE),
        ..rts_modify()
    };
    engine.modify_qp(env, LOCAL_QPN, &modify).unwrap();
}

fn xrc_engine(env: &mut TestEnv, role: XrcRole) -> Engine {
    let mut engine = Engine::new();
    engine
        .create_xrc_qp(qp_config(LOCAL_QPN, QpType::Rc), role)
        .unwrap();
    rts(&mut engine, env);
    engine
}

/// A target's environment: SRQs A and B in its domain (PD 9), one in another domain; each
/// with one receive WR of 64 bytes at its own address.
fn target_env() -> TestEnv {
    let mut env = TestEnv::new();
    env.add_region(SRQ_LKEY, SRQ_PD);
    for (srqn, xrcd, addr) in [
        (SRQ_A, XRCD, 0x100),
        (SRQ_B, XRCD, 0x200),
        (FOREIGN_SRQ, OTHER_XRCD, 0x300),
    ] {
        let wr = RecvWr {
            wqe_index: 0,
            wr_id: u64::from(srqn),
            sges: vec![Sge {
                addr,
                length: 64,
                lkey: SRQ_LKEY,
            }],
        };
        let srq = XrcSrq { xrcd, pd: SRQ_PD };
        env.xrc_srqs.insert(srqn, (srq, VecDeque::from([wr])));
    }
    env
}

fn xrc_send(psn: u32, srqn: u32, payload: &[u8]) -> Vec<u8> {
    packet_from_peer(op::CLASS_XRC | op::RC_SEND_ONLY, psn, payload, |h| {
        h.xrceth = Some(srqn)
    })
}

/// An XRC RDMA WRITE ONLY (PSN 100) of 4 bytes to 0x400 through `rkey`, naming SRQ A.
fn xrc_write_to_srq_a(rkey: Key) -> Vec<u8> {
    packet_from_peer(op::CLASS_XRC | op::RC_WRITE_ONLY, 100, b"data", |h| {
        h.xrceth = Some(SRQ_A);
        h.reth = Some(Reth {
            va: 0x400,
            rkey,
            dma_len: 4,
        });
    })
}

fn last_ack(env: &TestEnv) -> (u8, Syndrome, Option<u32>) {
    let sent = env.sent_parsed();
    let ack = sent.last().expect("an answer");
    let aeth = ack.hdr.aeth.expect("an ACK");
    (ack.hdr.bth.opcode, aeth.syndrome, ack.hdr.xrceth)
}

#[test]
fn initiator_requests_are_xrc_opcodes_naming_the_remote_srq() {
    let mut env = TestEnv::new();
    let mut engine = xrc_engine(&mut env, XrcRole::Initiator);
    let mut send = send_wr(1, WrOpcode::Send, 8);
    send.xrc_srqn = SRQ_B;
    engine.post_send(&mut env, LOCAL_QPN, send).unwrap();
    let mut read = send_wr(2, WrOpcode::RdmaRead, 8);
    read.xrc_srqn = SRQ_A;
    engine.post_send(&mut env, LOCAL_QPN, read).unwrap();
    let sent = env.sent_parsed();
    let ops: Vec<(u8, Option<u32>)> = sent
        .iter()
        .map(|p| (p.hdr.bth.opcode, p.hdr.xrceth))
        .collect();
    assert_eq!(
        ops,
        [
            (op::CLASS_XRC | op::RC_SEND_ONLY, Some(SRQ_B)),
            (op::CLASS_XRC | op::RC_READ_REQUEST, Some(SRQ_A)),
        ]
    );
    // The XRC ACK of the SEND completes it.
    let ack = packet_from_peer(op::CLASS_XRC | op::RC_ACKNOWLEDGE, 100, &[], |h| {
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: Msn::from_wire(1),
        })
    });
    engine.receive(&mut env, &ack).unwrap();
    assert_eq!(env.completions.len(), 1);
    assert_eq!(
        (env.completions[0].wr_id, env.completions[0].status),
        (1, WcStatus::Success)
    );
    // An initiator receives no requests; an RC packet is not its transport.
    assert_eq!(
        engine.receive(&mut env, &xrc_send(100, SRQ_A, b"x")),
        Err(RxDrop::NoQp(LOCAL_QPN))
    );
    let rc_ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: Msn::from_wire(1),
        })
    });
    assert_eq!(
        engine.receive(&mut env, &rc_ack),
        Err(RxDrop::NoQp(LOCAL_QPN))
    );
}

#[test]
fn initiator_refuses_what_xrc_cannot_carry_and_target_has_no_send_queue() {
    let mut env = TestEnv::new();
    let mut engine = xrc_engine(&mut env, XrcRole::Initiator);
    engine
        .post_send(&mut env, LOCAL_QPN, send_wr(3, WrOpcode::Flush, 0))
        .unwrap();
    assert!(env.sent.is_empty(), "no XRC FLUSH on the wire");
    assert_eq!(env.completions[0].status, WcStatus::LocQpOpErr);

    let mut env = target_env();
    let mut engine = xrc_engine(&mut env, XrcRole::Target { xrcd: XRCD });
    engine
        .post_send(&mut env, LOCAL_QPN, send_wr(4, WrOpcode::Send, 8))
        .unwrap();
    assert!(env.sent.is_empty());
    assert_eq!(env.completions[0].status, WcStatus::LocQpOpErr);
}

#[test]
fn target_delivers_into_the_srq_the_request_names() {
    let mut env = target_env();
    let mut engine = xrc_engine(&mut env, XrcRole::Target { xrcd: XRCD });
    engine
        .receive(&mut env, &xrc_send(100, SRQ_B, b"to srq b"))
        .unwrap();
    engine.poll(&mut env);
    assert_eq!(&env.mem[0x200..0x208], b"to srq b");
    assert_eq!(env.mem[0x100], 0, "SRQ A's buffer untouched");
    assert_eq!(env.xrc_srqs[&SRQ_A].1.len(), 1);
    assert!(env.xrc_srqs[&SRQ_B].1.is_empty());
    let c = env.completions[0];
    assert_eq!(
        (c.wr_id, c.status, c.is_recv, c.xrc_srq, c.qp_num, c.byte_len),
        (
            u64::from(SRQ_B),
            WcStatus::Success,
            true,
            Some(SRQ_B),
            LOCAL_QPN,
            8
        )
    );
    assert_eq!(
        last_ack(&env),
        (op::CLASS_XRC | op::RC_ACKNOWLEDGE, Syndrome::Ack, None)
    );
    // A request with no receive WR left in its SRQ is RNR NAKed, the other SRQ not touched.
    engine
        .receive(&mut env, &xrc_send(101, SRQ_B, b"again"))
        .unwrap();
    assert!(matches!(last_ack(&env).1, Syndrome::RnrNak(_)));
    assert_eq!(env.xrc_srqs[&SRQ_A].1.len(), 1);
}

#[test]
fn target_checks_rkeys_in_the_pd_of_the_named_srq() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    qp.xrc = Some(XrcRole::Target { xrcd: XRCD });
    env.add_region(SRQ_RKEY, SRQ_PD);
    env.xrc_srqs.insert(
        SRQ_A,
        (
            XrcSrq {
                xrcd: XRCD,
                pd: SRQ_PD,
            },
            VecDeque::new(),
        ),
    );
    let write = xrc_write_to_srq_a(SRQ_RKEY);
    let parsed = wire::parse_packet(&write).unwrap();
    qp.xrc_receive(&mut env, &mut stats, &parsed).unwrap();
    assert_eq!(qp.cfg.pd, SRQ_PD);
    assert_eq!(&env.mem[0x400..0x404], b"data");
    assert_eq!(qp.resp.epsn, Psn::from_wire(101));
}

#[test]
fn another_domains_srq_is_nakked_invalid_and_counted() {
    for srqn in [FOREIGN_SRQ, 0x999] {
        let mut env = target_env();
        let mut engine = xrc_engine(&mut env, XrcRole::Target { xrcd: XRCD });
        // A duplicate naming a foreign SRQ is dropped, counted, unanswered.
        engine
            .receive(&mut env, &xrc_send(99, srqn, b"dup"))
            .unwrap();
        assert!(env.sent.is_empty());
        assert_eq!(engine.qp_state(LOCAL_QPN), Some(QpState::Rts));
        engine
            .receive(&mut env, &xrc_send(100, srqn, b"steal"))
            .unwrap();
        assert_eq!(engine.stats().rx_xrc_domain_errors, 2, "srq {srqn:#x}");
        assert_eq!(
            last_ack(&env),
            (
                op::CLASS_XRC | op::RC_ACKNOWLEDGE,
                Syndrome::Nak(wire::NakCode::InvalidRequest),
                None
            )
        );
        assert_eq!(engine.qp_state(LOCAL_QPN), Some(QpState::Err));
        assert_eq!(env.async_errors, [QpAsyncError::InvalidRequest]);
        // Nothing was taken from or written for any SRQ.
        assert!(env.xrc_srqs.values().all(|(_, wrs)| wrs.len() == 1));
        assert!(env.mem[0x100..0x400].iter().all(|&b| b == 0));
        assert!(env.completions.iter().all(|c| !c.is_recv));
    }
}

#[test]
fn a_target_takes_no_responses_and_rc_requests_are_not_its_transport() {
    let mut env = target_env();
    let mut engine = xrc_engine(&mut env, XrcRole::Target { xrcd: XRCD });
    let ack = packet_from_peer(op::CLASS_XRC | op::RC_ACKNOWLEDGE, 100, &[], |h| {
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: Msn::from_wire(1),
        })
    });
    assert_eq!(engine.receive(&mut env, &ack), Err(RxDrop::NoQp(LOCAL_QPN)));
    let rc_send = packet_from_peer(op::RC_SEND_ONLY, 100, b"rc", |_| {});
    assert_eq!(
        engine.receive(&mut env, &rc_send),
        Err(RxDrop::NoQp(LOCAL_QPN))
    );
    assert_eq!(engine.stats().rx_no_qp, 2);
    assert!(env.sent.is_empty() && env.completions.is_empty());
}

#[test]
fn a_held_receive_completes_on_its_own_srq_and_a_message_cannot_change_srq() {
    let mut env = target_env();
    env.xrc_srqs.get_mut(&SRQ_A).unwrap().1[0].sges[0].length = 4096;
    let mut engine = xrc_engine(&mut env, XrcRole::Target { xrcd: XRCD });
    let first = packet_from_peer(op::CLASS_XRC | op::RC_SEND_FIRST, 100, &[7; 1024], |h| {
        h.xrceth = Some(SRQ_A)
    });
    engine.receive(&mut env, &first).unwrap();
    engine.poll(&mut env);
    assert!(env.completions.is_empty());
    assert!(env.xrc_srqs[&SRQ_A].1.is_empty(), "SRQ A's WR taken");
    // The next packet of that message names SRQ B of the same domain: refused, the QP fails,
    // and the receive WR it holds from SRQ A is flushed on SRQ A's CQ (not lost).
    let middle = packet_from_peer(op::CLASS_XRC | op::RC_SEND_MIDDLE, 101, &[8; 1024], |h| {
        h.xrceth = Some(SRQ_B)
    });
    engine.receive(&mut env, &middle).unwrap();
    engine.poll(&mut env);
    let c = env.completions[0];
    assert_eq!(
        (c.wr_id, c.status, c.is_recv, c.xrc_srq),
        (u64::from(SRQ_A), WcStatus::WrFlushErr, true, Some(SRQ_A))
    );
    assert_eq!(env.xrc_srqs[&SRQ_B].1.len(), 1, "SRQ B untouched");
    assert!(
        !env.mem.contains(&8),
        "the refused packet's payload placed nowhere"
    );
    assert!(matches!(
        last_ack(&env).1,
        Syndrome::Nak(wire::NakCode::InvalidRequest)
    ));
}

#[test]
fn a_target_refuses_an_rkey_outside_the_named_srqs_pd() {
    // RKEY reaches all memory, but in PD 1 (the test QPs'); the SRQ the request names is in
    // PD 9, so the target must refuse it and write nothing.
    let mut env = target_env();
    let mut engine = xrc_engine(&mut env, XrcRole::Target { xrcd: XRCD });
    let write = xrc_write_to_srq_a(RKEY);
    engine.receive(&mut env, &write).unwrap();
    engine.poll(&mut env);
    assert_eq!(&env.mem[0x400..0x404], &[0; 4], "nothing written");
    assert!(matches!(
        last_ack(&env).1,
        Syndrome::Nak(wire::NakCode::RemoteAccessError)
    ));
}
