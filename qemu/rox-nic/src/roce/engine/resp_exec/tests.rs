//! The responder's execution of in-sequence requests and the responses they send.

use super::super::test_env::*;
use super::*;
use crate::roce::wire::Headers;

fn receive(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, bytes: &[u8]) {
    let p = wire::parse_packet(bytes).expect("well-formed");
    qp.responder_receive(env, stats, &p);
}

fn recv_wr(wr_id: u64, addr: u64, length: u32) -> RecvWr {
    RecvWr {
        wqe_index: 0,
        wr_id,
        sges: vec![Sge {
            addr,
            length,
            lkey: LKEY,
        }],
    }
}

fn reth(va: u64, rkey: Key, dma_len: u32) -> impl FnOnce(&mut Headers) {
    move |h: &mut Headers| h.reth = Some(Reth { va, rkey, dma_len })
}

#[test]
fn multi_packet_send_lands_in_one_receive_wr_and_completes_on_the_last() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    env.recv.push_back(recv_wr(7, 0x100, 64));
    receive(
        &mut qp,
        &mut env,
        &mut stats,
        &packet_from_peer(op::RC_SEND_FIRST, 100, b"abcd", |_| {}),
    );
    assert!(env.completions.is_empty());
    let last = packet_from_peer(op::RC_SEND_LAST_IMM, 101, b"efgh", |h| h.imm = Some(9));
    receive(&mut qp, &mut env, &mut stats, &last);
    assert_eq!(&env.mem[0x100..0x108], b"abcdefgh");
    let c = env.completions[0];
    assert_eq!(
        (c.wr_id, c.status, c.byte_len, c.imm),
        (7, WcStatus::Success, 8, 9)
    );
    assert_eq!(c.wc_flags, WC_FLAG_WITH_IMM);
    assert_eq!((qp.resp.epsn.get(), qp.resp.msn.get()), (102, 1));
    assert!(qp.resp.ack_pending);
}

#[test]
fn uc_send_without_receive_wr_drops_the_whole_message() {
    let (mut env, mut stats, mut qp) = (TestEnv::new(), EngineStats::default(), rts_qp(QpType::Uc));
    let uc = |base| op::CLASS_UC | base;
    receive(
        &mut qp,
        &mut env,
        &mut stats,
        &packet_from_peer(uc(op::RC_SEND_FIRST), 100, b"ab", |_| {}),
    );
    env.recv.push_back(recv_wr(1, 0x100, 64));
    receive(
        &mut qp,
        &mut env,
        &mut stats,
        &packet_from_peer(uc(op::RC_SEND_LAST), 101, b"cd", |_| {}),
    );
    assert!(
        env.completions.is_empty(),
        "the rest of a dropped message is dropped"
    );
    receive(
        &mut qp,
        &mut env,
        &mut stats,
        &packet_from_peer(uc(op::RC_SEND_ONLY), 102, b"xy", |_| {}),
    );
    assert_eq!(env.completions.len(), 1, "the next message is delivered");
    assert_eq!(&env.mem[0x100..0x102], b"xy");
    assert_eq!(stats.rx_no_recv_wr, 1);
    assert!(env.sent.is_empty(), "UC never answers");
}

#[test]
fn write_checks_the_whole_range_before_writing() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    let rkey = RKEY;
    // Announces more than memory holds: nothing of the first packet lands.
    let first = packet_from_peer(
        op::RC_WRITE_FIRST,
        100,
        &[1; 1024],
        reth(0, rkey, MEM_LEN as u32 + 1),
    );
    env.recv.push_back(recv_wr(7, 0x800, 64));
    receive(&mut qp, &mut env, &mut stats, &first);
    assert!(env.mem[..1024].iter().all(|&b| b == 0));
    let nak = env.sent_parsed()[0].hdr.aeth.unwrap().syndrome;
    assert_eq!(nak, Syndrome::Nak(NakCode::RemoteAccessError));
    assert!(qp.resp.cur.is_none());
    // Class C: the QP is in error, its receive queue flushed, its owner told.
    assert_eq!(qp.state, QpState::Err);
    let flushed: Vec<_> = env
        .completions
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(flushed, [(7, WcStatus::WrFlushErr)]);
    assert_eq!(env.async_errors, [QpAsyncError::AccessViolation]);
    // A region whose page is absent: RNR NAK, nothing executed, the PSN expected again;
    // the QP stays in RTS and nothing is reported.
    let (mut env, mut stats, mut qp) = rc_fixture();
    let fault = packet_from_peer(op::RC_WRITE_ONLY, 100, &[1; 8], reth(0, FAULT_KEY, 8));
    receive(&mut qp, &mut env, &mut stats, &fault);
    assert_eq!(
        env.sent_parsed()[0].hdr.aeth.unwrap().syndrome,
        Syndrome::RnrNak(0)
    );
    assert_eq!((stats.page_fault_naks, qp.resp.epsn.get()), (1, 100));
    assert_eq!(qp.state, QpState::Rts);
    assert!(env.async_errors.is_empty());
}

#[test]
fn read_beyond_its_region_is_a_remote_access_error_that_fails_the_qp() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, BAD_KEY, 64));
    receive(&mut qp, &mut env, &mut stats, &read);
    let sent = env.sent_parsed();
    assert_eq!(sent.len(), 1, "one NAK, no READ response");
    let nak = sent[0].hdr.aeth.unwrap().syndrome;
    assert_eq!(nak, Syndrome::Nak(NakCode::RemoteAccessError));
    assert_eq!(qp.state, QpState::Err);
    assert_eq!(env.async_errors, [QpAsyncError::AccessViolation]);
    // A QP in error answers nothing more.
    let again = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 8));
    receive(&mut qp, &mut env, &mut stats, &again);
    assert_eq!(env.sent_parsed().len(), 1);
}

#[test]
fn write_longer_than_its_reth_is_an_invalid_request() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    let bytes = packet_from_peer(op::RC_WRITE_ONLY, 100, &[1; 16], reth(0, RKEY, 8));
    receive(&mut qp, &mut env, &mut stats, &bytes);
    let nak = env.sent_parsed()[0].hdr.aeth.unwrap().syndrome;
    assert_eq!(nak, Syndrome::Nak(NakCode::InvalidRequest));
    assert_eq!(qp.state, QpState::Err);
    assert_eq!(env.async_errors, [QpAsyncError::InvalidRequest]);
    assert!(env.mem[..16].iter().all(|&b| b == 0));
}

#[test]
fn write_with_immediate_waits_for_a_receive_wr_before_writing() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    let bytes = packet_from_peer(op::RC_WRITE_ONLY_IMM, 100, &[5; 8], |h| {
        reth(0x200, RKEY, 8)(h);
        h.imm = Some(3);
    });
    receive(&mut qp, &mut env, &mut stats, &bytes);
    assert!(
        env.mem[0x200..0x208].iter().all(|&b| b == 0),
        "RNR: nothing written"
    );
    assert_eq!(
        env.sent_parsed()[0].hdr.aeth.unwrap().syndrome,
        Syndrome::RnrNak(0)
    );
    env.recv.push_back(recv_wr(4, 0, 0));
    receive(&mut qp, &mut env, &mut stats, &bytes);
    assert_eq!(&env.mem[0x200..0x208], &[5; 8]);
    let c = env.completions[0];
    assert_eq!(
        (c.wr_id, c.opcode, c.byte_len, c.imm),
        (4, WcOpcode::RecvRdmaWithImm, 8, 3)
    );
}

#[test]
fn atomic_executes_once_and_a_duplicate_gets_the_saved_value() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    env.mem[0x300..0x308].copy_from_slice(&40u64.to_le_bytes());
    let bytes = atomic_from_peer(op::RC_FETCH_ADD, 100, 0x300, 2);
    receive(&mut qp, &mut env, &mut stats, &bytes);
    receive(&mut qp, &mut env, &mut stats, &bytes);
    assert_eq!(env.mem[0x300..0x308], 42u64.to_le_bytes(), "added once");
    let sent = env.sent_parsed();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|p| p.hdr.atomic_ack == Some(40)));
    assert_eq!((stats.rx_duplicates, qp.resp.epsn.get()), (1, 101));
}

#[test]
fn misaligned_atomic_and_read_without_resources_are_invalid_requests() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    let bytes = atomic_from_peer(op::RC_COMPARE_SWAP, 100, 0x301, 1);
    receive(&mut qp, &mut env, &mut stats, &bytes);
    assert_eq!(qp.state, QpState::Err);
    let (mut env, mut qp) = (TestEnv::new(), rts_qp(QpType::Rc));
    qp.max_dest_rd_atomic = 0;
    let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 8));
    receive(&mut qp, &mut env, &mut stats, &read);
    let nak = env.sent_parsed()[0].hdr.aeth.unwrap().syndrome;
    assert_eq!(nak, Syndrome::Nak(NakCode::InvalidRequest));
}

#[test]
fn read_answers_in_mtu_packets_and_advances_by_their_count() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    fill_pattern(&mut env, 2500);
    let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 2500));
    receive(&mut qp, &mut env, &mut stats, &read);
    let sent = env.sent_parsed();
    let ops: Vec<u8> = sent.iter().map(|p| p.hdr.bth.opcode).collect();
    assert_eq!(
        ops,
        [
            op::RC_READ_RESPONSE_FIRST,
            op::RC_READ_RESPONSE_MIDDLE,
            op::RC_READ_RESPONSE_LAST
        ]
    );
    let data: Vec<u8> = sent.iter().flat_map(|p| p.payload.to_vec()).collect();
    assert_eq!(data, env.mem[..2500]);
    assert_eq!((qp.resp.epsn.get(), qp.resp.msn.get()), (103, 1));
}

/// A WRITE of one packet has no range check apart from its write (one key lookup per small
/// message): a bad key, or a range past its region, still gets a remote access error NAK,
/// fails the QP and writes nothing.
#[test]
fn a_one_packet_write_refused_by_its_write_naks_and_writes_nothing() {
    for (key, va) in [(BAD_KEY, 0), (RKEY, MEM_LEN as u64 - 4)] {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let only = packet_from_peer(op::RC_WRITE_ONLY, 100, &[1; 8], reth(va, key, 8));
        receive(&mut qp, &mut env, &mut stats, &only);
        let sent = env.sent_parsed();
        assert_eq!(sent.len(), 1, "{key:?} at {va:#x}: one NAK");
        let nak = sent[0].hdr.aeth.unwrap().syndrome;
        assert_eq!(nak, Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(qp.state, QpState::Err);
        assert_eq!(env.async_errors, [QpAsyncError::AccessViolation]);
        assert!(env.mem.iter().all(|&b| b == 0), "{key:?} at {va:#x}");
    }
}

/// `tx_responses` (what the data path's flush after a receive batch watches) counts every
/// answer the responder sends, each kind where it is made (READ responses, an atomic ACK, a
/// coalesced ACK, a NAK), and no request of the QP's requester.
#[test]
fn every_answer_sent_and_only_answers_count_as_responses() {
    let (mut env, mut stats, mut qp) = rc_fixture();
    fill_pattern(&mut env, 2500);
    let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 2500));
    receive(&mut qp, &mut env, &mut stats, &read);
    let fetch_add = atomic_from_peer(op::RC_FETCH_ADD, 103, 0x300, 2);
    receive(&mut qp, &mut env, &mut stats, &fetch_add);
    let write = packet_from_peer(op::RC_WRITE_ONLY, 104, &[1; 8], reth(0x400, RKEY, 8));
    receive(&mut qp, &mut env, &mut stats, &write);
    qp.send_answers(&mut env, &mut stats);
    let gap = packet_from_peer(op::RC_WRITE_ONLY, 107, &[1; 8], reth(0x400, RKEY, 8));
    receive(&mut qp, &mut env, &mut stats, &gap);
    let kinds: Vec<u8> = env.sent_parsed().iter().map(|p| p.hdr.bth.opcode).collect();
    assert_eq!(
        kinds,
        [
            op::RC_READ_RESPONSE_FIRST,
            op::RC_READ_RESPONSE_MIDDLE,
            op::RC_READ_RESPONSE_LAST,
            op::RC_ATOMIC_ACKNOWLEDGE,
            op::RC_ACKNOWLEDGE,
            op::RC_ACKNOWLEDGE,
        ],
        "three READ responses, the atomic ACK, the WRITE's ACK, the gap's NAK"
    );
    assert_eq!((stats.tx_packets, stats.tx_responses), (6, 6));

    env.sent.clear();
    for id in 1..=3 {
        let wqe = qp.make_wqe(send_wr(id, WrOpcode::RdmaWrite, 8));
        qp.enqueue(&mut env, &mut stats, wqe);
    }
    assert_eq!(env.sent.len(), 3, "the requester's WRITEs");
    assert_eq!((stats.tx_packets, stats.tx_responses), (9, 6));
}
