//! Engine-level tests of the RoCE transport, the operations: every RC opcode, UC and UD,
//! inline and immediate data, IPv6, work posted before RTS, ACK coalescing and the send
//! window, on in-memory devices (roce_common::engine_pair).

mod roce_common;
use roce_common::engine_pair::*;
use roce_common::*;

#[test]
fn rc_send_multi_packet_with_imm_and_solicited() {
    let mut t = pair(&QpParams::rc());
    let data = t.fill_pattern(0, 1, 1000);
    let kb = t.key_b;
    t.recv_b(
        7,
        vec![sge(RECV_AREA, 600, kb), sge(RECV_AREA + 0x1000, 600, kb)],
    );
    let mut wr = send_wr(
        1,
        WrOpcode::SendWithImm,
        SendData::Sges(vec![sge(BUF, 1000, t.key_a)]),
    );
    wr.imm = 0xdead_beef;
    wr.solicited = true;
    t.post(wr);
    t.run();
    let s = one(&t.cqes(0));
    assert_eq!(
        (s.wr_id, s.status, s.opcode, s.byte_len, s.is_recv),
        (1, WcStatus::Success, WcOpcode::Send, 1000, false)
    );
    let r = one(&t.cqes(1));
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 1000)
    );
    assert_eq!(
        (r.imm, r.wc_flags, r.solicited, r.qp_num),
        (0xdead_beef, WC_FLAG_WITH_IMM, true, QPN_B)
    );
    let env = &t.net.devs[1].env;
    assert_eq!(env.bytes(RECV_AREA, 600), &data[..600]);
    assert_eq!(env.bytes(RECV_AREA + 0x1000, 400), &data[600..]);
    assert_eq!(
        t.net.devs[0].engine.stats().tx_packets,
        4,
        "1000 B at MTU 256 is 4 packets"
    );
    t.assert_guards();
}

#[test]
fn rc_send_zero_length_and_inline() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![]);
    t.recv_b(2, vec![sge(RECV_AREA, 64, kb)]);
    t.post(send_wr(10, WrOpcode::Send, SendData::Sges(vec![])));
    t.post(send_wr(
        11,
        WrOpcode::Send,
        SendData::Inline(b"inline payload!".to_vec()),
    ));
    t.run();
    let s = t.cqes(0);
    assert_eq!(
        id_status(&s),
        [(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    let r = t.cqes(1);
    assert_eq!(
        r.iter().map(|c| (c.wr_id, c.byte_len)).collect::<Vec<_>>(),
        [(1, 0), (2, 15)]
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 15), b"inline payload!");
}

#[test]
fn rc_unsignaled_wrs_retire_silently() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    for i in 0..3 {
        t.recv_b(i, vec![sge(RECV_AREA, 64, kb)]);
    }
    for i in 0..3 {
        let mut wr = send_wr(100 + i, WrOpcode::Send, SendData::Inline(vec![i as u8; 8]));
        wr.signaled = i == 2;
        t.post(wr);
    }
    t.run();
    assert_eq!(one(&t.cqes(0)).wr_id, 102);
    assert_eq!(t.cqes(1).len(), 3);
}

#[test]
fn rc_write_multi_packet() {
    let mut t = pair(&QpParams::rc());
    let data = t.fill_pattern(0, 2, 3000);
    let pieces = [(0, 1000), (1000, 2000)];
    let s = t.rdma_pieces(3, WrOpcode::RdmaWrite, &pieces, RECV_AREA + 5);
    assert_eq!(
        (s.status, s.opcode, s.byte_len),
        (WcStatus::Success, WcOpcode::RdmaWrite, 3000)
    );
    assert!(t.cqes(1).is_empty(), "RDMA WRITE consumes no receive WR");
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 5, 3000), &data[..]);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 3005, 1), &[0]);
    t.assert_guards();
}

#[test]
fn rc_write_with_imm_consumes_recv() {
    let mut t = pair(&QpParams::rc());
    let data = t.fill_pattern(0, 3, 700);
    t.recv_b(9, vec![]);
    let mut wr = t.wr_to_b(4, WrOpcode::RdmaWriteWithImm, 700, RECV_AREA);
    wr.imm = 0x1234_5678;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    let r = one(&t.cqes(1));
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm, r.wc_flags),
        (
            9,
            WcOpcode::RecvRdmaWithImm,
            700,
            0x1234_5678,
            WC_FLAG_WITH_IMM
        )
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 700), &data[..]);
}

#[test]
fn rc_read_multi_packet() {
    let mut t = pair(&QpParams::rc());
    let data = t.fill_pattern(1, 4, 1500);
    let pieces = [(0, 100), (0x1000, 1400)];
    let s = t.rdma_pieces(5, WrOpcode::RdmaRead, &pieces, RECV_AREA);
    assert_eq!(
        (s.status, s.opcode, s.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 1500)
    );
    let env = &t.net.devs[0].env;
    assert_eq!(env.bytes(BUF, 100), &data[..100]);
    assert_eq!(env.bytes(BUF + 0x1000, 1400), &data[100..]);
    t.assert_guards();
}

/// The responder checks a READ's range before the first response without copying it: the
/// data is read once, for the responses (the check probes a byte at each end).
#[test]
fn rc_read_reads_its_range_once() {
    let mut t = pair(&QpParams::rc());
    let len = 3 * 4096 + 100;
    let data = t.fill_pattern(1, 9, len);
    let wr = t.wr_to_b(6, WrOpcode::RdmaRead, len as u32, RECV_AREA);
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[0].env.bytes(BUF, len), &data[..]);
    assert!(
        t.net.devs[1].env.remote_bytes_read <= len as u64 + 2,
        "{} bytes read for a {len}-byte READ",
        t.net.devs[1].env.remote_bytes_read
    );
}

/// A requester whose source page stays missing backs off (doubling its wait up to
/// PAGE_FAULT_RETRY_MAX_NS) instead of retrying every PAGE_FAULT_RETRY_NS, and sends once the
/// page is there; the driver is told of the fault once.
#[test]
fn page_fault_stalls_back_off() {
    let mut t = pair(&QpParams::rc());
    let data = t.fill_pattern(0, 5, 300);
    let odp = t.net.devs[0]
        .env
        .reg(PD, BUF, 300, ALL_ACCESS, RegionKind::OnDemand);
    t.net.devs[0].env.driver_maps.push((odp, 50_000_000));
    let wr = rdma_wr(
        7,
        WrOpcode::RdmaWrite,
        sge(BUF, 300, odp),
        RECV_AREA,
        t.key_b,
    );
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 300), &data[..]);
    let faults = t.net.devs[0].env.page_faults;
    // 50 ms: 100 µs doubling to 10 ms is a dozen tries; 100 µs flat would be 500.
    assert!((5..=20).contains(&faults), "{faults} tries");
    assert_eq!(
        t.net.devs[0].env.faults_posted, 1,
        "one fault event per page"
    );
}

#[test]
fn rc_atomics() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA + 64;
    t.net.devs[1].env.fill(target, &100u64.to_le_bytes());
    let (ka, kb) = (t.key_a, t.key_b);
    let atomic = |id: u64, opcode, compare_add, swap, result: u64| {
        let mut wr = send_wr(id, opcode, SendData::Sges(vec![sge(result, 8, ka)]));
        wr.remote_addr = target;
        wr.rkey = kb;
        wr.compare_add = compare_add;
        wr.swap = swap;
        wr
    };
    t.post(atomic(1, WrOpcode::AtomicCmpAndSwp, 100, 200, BUF)); // matches: 100 -> 200
    t.post(atomic(2, WrOpcode::AtomicCmpAndSwp, 100, 300, BUF + 8)); // no match: stays 200
    t.post(atomic(3, WrOpcode::AtomicFetchAndAdd, 5, 0, BUF + 16)); // 200 -> 205
    t.run();
    let s = t.cqes(0);
    assert_eq!(
        s.iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::CompSwap),
            (2, WcStatus::Success, WcOpcode::CompSwap),
            (3, WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    let env = &t.net.devs[0].env;
    let val = |a| u64::from_le_bytes(env.bytes(a, 8).try_into().unwrap());
    assert_eq!((val(BUF), val(BUF + 8), val(BUF + 16)), (100, 200, 200));
    assert_eq!(
        u64::from_le_bytes(t.net.devs[1].env.bytes(target, 8).try_into().unwrap()),
        205
    );
}

#[test]
fn rc_loopback_on_one_device() {
    let mut net = Net::new(&[gid_v4(1)]);
    let key = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 0, QPN_B, &QpParams::rc());
    let data = pattern(5, 500);
    net.devs[0].env.fill(BUF, &data);
    net.devs[0]
        .env
        .post_recv(QPN_B, recv_wr(1, vec![sge(RECV_AREA, 512, key)]));
    let (engine, env) = net.dev(0);
    engine
        .post_send(
            env,
            QPN_A,
            send_wr(2, WrOpcode::Send, SendData::Sges(vec![sge(BUF, 500, key)])),
        )
        .unwrap();
    net.run(1000);
    let c = net.devs[0].env.take_completions();
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(net.devs[0].env.bytes(RECV_AREA, 500), &data[..]);
}

#[test]
fn ipv6_gids_carry_rc_traffic() {
    let mut net = Net::new(&[gid_v6(1), gid_v6(2)]);
    let ka = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 1, QPN_B, &QpParams::rc());
    let data = pattern(6, 300);
    net.devs[0].env.fill(BUF, &data);
    let (engine, env) = net.dev(0);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, sge(BUF, 300, ka), RECV_AREA, kb);
    engine.post_send(env, QPN_A, wr).unwrap();
    net.run(1000);
    assert_eq!(
        one(&net.devs[0].env.take_completions()).status,
        WcStatus::Success
    );
    assert_eq!(net.devs[1].env.bytes(RECV_AREA, 300), &data[..]);
}

#[test]
fn uc_send_and_write() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let data = t.fill_pattern(0, 7, 900);
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 1024, kb)]);
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 900, t.key_a)]),
    ));
    let mut wr = rdma_wr(
        2,
        WrOpcode::RdmaWriteWithImm,
        sge(BUF, 900, t.key_a),
        RECV_AREA + 0x2000,
        kb,
    );
    wr.imm = 77;
    t.recv_b(2, vec![]);
    t.post(wr);
    t.run();
    assert_eq!(
        t.cqes(0)
            .iter()
            .filter(|c| c.status == WcStatus::Success)
            .count(),
        2
    );
    let r = t.cqes(1);
    assert_eq!(
        r.iter()
            .map(|c| (c.wr_id, c.opcode, c.byte_len))
            .collect::<Vec<_>>(),
        [
            (1, WcOpcode::Recv, 900),
            (2, WcOpcode::RecvRdmaWithImm, 900)
        ]
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 900), &data[..]);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 0x2000, 900), &data[..]);
    assert_eq!(
        t.net.devs[0].engine.stats().rx_packets,
        0,
        "UC sends no ACKs"
    );
}

#[test]
fn uc_drops_a_message_with_a_lost_packet() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let first = pattern(8, 700);
    let second = pattern(9, 300);
    t.net.devs[0].env.fill(BUF, &first);
    t.net.devs[0].env.fill(BUF + 0x1000, &second);
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 1024, kb)]);
    t.recv_b(2, vec![sge(RECV_AREA + 0x1000, 1024, kb)]);
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 700, t.key_a)]),
    ));
    t.post(send_wr(
        2,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF + 0x1000, 300, t.key_a)]),
    ));
    // Lose the middle packet of the first (3-packet) message.
    let lost = t.net.devs[0].env.outbox.remove(1);
    assert!(lost.1.len() > 256);
    t.run();
    assert_eq!(t.cqes(0).len(), 2, "UC requester completes on send");
    let r = one(&t.cqes(1));
    // The receive WR taken for the dropped message is reused for the next one.
    assert_eq!((r.wr_id, r.byte_len), (1, 300));
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 300), &second[..]);
    assert!(t.net.devs[1].engine.stats().rx_out_of_sequence >= 1);
}

#[test]
fn uc_rejects_read_and_atomic_as_local_qp_operation_error_and_enters_sqe() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(BUF, 8, t.key_a)]),
    );
    wr.rkey = t.key_b;
    let c = t.with_send_behind(wr);
    assert_eq!(
        id_status(&c),
        [(1, WcStatus::LocQpOpErr), (2, WcStatus::WrFlushErr)]
    );
    // A UC send error stops only the send queue (IBA 10.3.1: Send Queue Error state).
    assert_eq!(t.net.devs[0].engine.qp_state(QPN_A), Some(QpState::Sqe));
}

fn ud_wr(net: &Net, wr_id: u64, data: SendData, qkey: u32) -> SendWr {
    let mut wr = send_wr(wr_id, WrOpcode::SendWithImm, data);
    wr.imm = 0xabcd;
    let av = av_between(net.devs[0].gid, net.devs[1].gid);
    wr.ud = Some(UdDest {
        av,
        remote_qpn: QPN_B,
        remote_qkey: qkey,
    });
    wr
}

#[test]
fn ud_send_delivers_grh_src_qp_and_checks_qkey() {
    for (gid_a, gid_b) in [(gid_v4(1), gid_v4(2)), (gid_v6(1), gid_v6(2))] {
        let (mut net, ka, kb) = ud_pair(gid_a, gid_b);
        let qkey = QpParams::of(QpType::Ud).qkey;
        let data = pattern(10, 200);
        net.devs[0].env.fill(BUF, &data);
        for i in 0..2 {
            net.devs[1].env.post_recv(
                QPN_B,
                recv_wr(i, vec![sge(RECV_AREA + i * 0x1000, 256, kb)]),
            );
        }
        let wrs = [
            ud_wr(&net, 1, SendData::Sges(vec![sge(BUF, 200, ka)]), qkey),
            ud_wr(&net, 2, SendData::Inline(vec![1, 2, 3]), qkey ^ 1), // wrong Q_Key: dropped
            ud_wr(&net, 3, SendData::Inline(vec![4, 5]), 0x8000_0000), // MSB: the QP's own Q_Key
        ];
        for wr in wrs {
            let (engine, env) = net.dev(0);
            engine.post_send(env, QPN_A, wr).unwrap();
        }
        net.run(1000);
        assert_eq!(
            net.devs[0].env.take_completions().len(),
            3,
            "UD sends complete when sent"
        );
        let r = net.devs[1].env.take_completions();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].wr_id, r[0].byte_len, r[0].src_qp),
            (0, 40 + 200, QPN_A)
        );
        assert_eq!(
            (r[0].wc_flags, r[0].imm),
            (WC_FLAG_GRH | WC_FLAG_WITH_IMM, 0xabcd)
        );
        assert_eq!((r[1].wr_id, r[1].byte_len), (1, 42));
        assert_eq!(net.devs[1].engine.stats().rx_qkey_violations, 1);
        let env = &net.devs[1].env;
        let grh = env.bytes(RECV_AREA, 40);
        // The completion says which header the GRH area holds (as mlx5's CQE does).
        let network_hdr = if gid_a == gid_v4(1) {
            rox_uapi::queue::CQE_NETWORK_HDR_IPV4
        } else {
            rox_uapi::queue::CQE_NETWORK_HDR_IPV6
        };
        assert_eq!(
            (r[0].network_hdr, r[1].network_hdr),
            (network_hdr, network_hdr)
        );
        if gid_a == gid_v4(1) {
            assert!(
                grh[..20].iter().all(|&b| b == 0),
                "IPv4: first 20 bytes of the GRH are zero"
            );
            assert_eq!(grh[20] >> 4, 4);
            assert_eq!(&grh[32..36], &gid_a[12..], "source address in the GRH");
        } else {
            assert_eq!(grh[0] >> 4, 6);
            assert_eq!(&grh[8..24], &gid_a, "source GID in the GRH");
        }
        assert_eq!(env.bytes(RECV_AREA + 40, 200), &data[..]);
    }
}

#[test]
fn ud_errors_local_length_and_recv_too_small() {
    let [sender, receiver] = ud_send_of(300);
    assert_eq!(sender, Some(WcStatus::LocLenErr), "UD message > MTU");
    assert_eq!(receiver, None);
    // A message that does not fit the receive buffer after the GRH.
    let [sender, receiver] = ud_send_of(20);
    assert_eq!(sender, Some(WcStatus::Success));
    assert_eq!(receiver, Some(WcStatus::LocLenErr));
}

/// A fresh UD pair sends one message of `len` bytes to a 50-byte receive buffer: the status
/// of each side's completion (if any).
fn ud_send_of(len: u32) -> [Option<WcStatus>; 2] {
    let (mut net, ka, kb) = ud_pair(gid_v4(1), gid_v4(2));
    let qkey = QpParams::of(QpType::Ud).qkey;
    let wr = recv_wr(1, vec![sge(RECV_AREA, 50, kb)]);
    net.devs[1].env.post_recv(QPN_B, wr);
    let (engine, env) = net.dev(0);
    engine
        .post_send(env, QPN_A, ud_wr_len(&net_gids(), ka, len, qkey))
        .unwrap();
    net.run(100);
    [0, 1].map(|dev| {
        let cqes = net.devs[dev].env.take_completions();
        (!cqes.is_empty()).then(|| one(&cqes).status)
    })
}

fn net_gids() -> [Gid; 2] {
    [gid_v4(1), gid_v4(2)]
}

fn ud_wr_len(gids: &[Gid; 2], key: Key, len: u32, qkey: u32) -> SendWr {
    let mut wr = send_wr(1, WrOpcode::Send, SendData::Sges(vec![sge(BUF, len, key)]));
    let av = av_between(gids[0], gids[1]);
    wr.ud = Some(UdDest {
        av,
        remote_qpn: QPN_B,
        remote_qkey: qkey,
    });
    wr
}

#[test]
fn work_posted_before_rts_is_sent_on_rts() {
    let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 1, QPN_B, &QpParams::rc());
    // Take QP A back through RESET and post while it is only INIT.
    let (engine, env) = net.dev(0);
    engine
        .modify_qp(
            env,
            QPN_A,
            &QpModify {
                state: Some(QpState::Reset),
                ..Default::default()
            },
        )
        .unwrap();
    engine
        .modify_qp(
            env,
            QPN_A,
            &QpModify {
                state: Some(QpState::Init),
                ..Default::default()
            },
        )
        .unwrap();
    engine
        .post_send(
            env,
            QPN_A,
            send_wr(1, WrOpcode::Send, SendData::Inline(b"early".to_vec())),
        )
        .unwrap();
    assert!(env.outbox.is_empty(), "nothing leaves before RTS");
    let av = av_between(gid_v4(1), gid_v4(2));
    let rtr = QpModify {
        state: Some(QpState::Rtr),
        dest_qpn: Some(QPN_B),
        rq_psn: Some(SQ_PSN_B),
        av: Some(av),
        ..Default::default()
    };
    engine.modify_qp(env, QPN_A, &rtr).unwrap();
    let rts = QpModify {
        state: Some(QpState::Rts),
        sq_psn: Some(SQ_PSN_A),
        timeout: Some(12),
        ..Default::default()
    };
    engine.modify_qp(env, QPN_A, &rts).unwrap();
    net.devs[1]
        .env
        .post_recv(QPN_B, recv_wr(9, vec![sge(RECV_AREA, 16, kb)]));
    net.run(1000);
    assert_eq!(
        one(&net.devs[0].env.take_completions()).status,
        WcStatus::Success
    );
    assert_eq!(net.devs[1].env.bytes(RECV_AREA, 5), b"early");
}

#[test]
fn acks_are_coalesced_per_poll() {
    const MESSAGES: u64 = 50;
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    for i in 0..MESSAGES {
        t.recv_b(i, vec![sge(RECV_AREA, 64, kb)]);
        t.post(send_wr(
            i,
            WrOpcode::Send,
            SendData::Inline(vec![i as u8; 16]),
        ));
    }
    t.run();
    assert_eq!(t.cqes(0).len() as u64, MESSAGES);
    assert_eq!(t.cqes(1).len() as u64, MESSAGES);
    let acks = t.net.devs[1].engine.stats().acks_sent;
    // All 50 requests asked for an ACK and arrived in one batch: one ACK answers them all.
    assert_eq!(acks, 1, "ACKs sent for {MESSAGES} messages");
}

/// Flow control: a receiver that takes only 32 packets per burst (a small socket buffer) drops
/// the tail of every larger burst. The requester halves its send window on each loss, so the
/// WRITEs complete with a bounded number of extra packets instead of resending full
/// `MAX_INFLIGHT_PSNS` windows into the same overflow.
#[test]
fn send_window_shrinks_to_what_a_small_receive_buffer_holds() {
    const RX_CAPACITY: usize = 32;
    const WRITES: u64 = 8;
    const LEN: u64 = 64 << 10;
    const MTU_BYTES: u64 = 1024;
    const DST: u64 = BUF + WRITES * LEN;
    let mut t = pair(&QpParams {
        mtu: Mtu::Mtu1024,
        ..QpParams::rc()
    });
    t.net.rx_capacity = Some(RX_CAPACITY);
    let data: Vec<u8> = (0..WRITES * LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    t.net.devs[0].env.fill(BUF, &data);
    for i in 0..WRITES {
        let wr = rdma_wr(
            i,
            WrOpcode::RdmaWrite,
            sge(BUF + i * LEN, LEN as u32, t.key_a),
            DST + i * LEN,
            t.key_b,
        );
        t.post(wr);
    }
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        id_status(&c),
        (0..WRITES)
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>()
    );
    assert_eq!(t.net.devs[1].env.bytes(DST, data.len()), &data[..]);
    let needed = WRITES * LEN / MTU_BYTES;
    let sent = t.net.devs[0].engine.stats().tx_packets;
    assert!(t.net.overflow_drops > 0, "the receiver did overflow");
    // A fixed 256-packet window resends ~8 packets for every one that fits (> 4000 here).
    assert!(
        sent < 3 * needed,
        "{sent} packets sent for {needed} ({} dropped)",
        t.net.overflow_drops
    );
}
