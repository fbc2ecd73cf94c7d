//! Engine-level tests of the RoCE transport, what goes wrong: every error status, protection
//! errors that leave memory untouched, RNR, retry exhaustion, lost responses, duplicates,
//! flushing, random packets and packets from strangers, on in-memory devices.

mod roce_common;
use roce_common::engine_pair::*;
use roce_common::*;

#[test]
fn local_protection_error_then_flush() {
    let mut t = pair(&QpParams::rc());
    let c = t.with_send_behind(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 16, key_plus(t.key_a, 99))]),
    ));
    assert_eq!(
        id_status(&c),
        [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    // Outside the MR is a protection error too.
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF + BUF_LEN - 8, 16, t.key_a)]),
    ));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocProtErr);
}

#[test]
fn local_protection_error_on_read_destination() {
    let mut t = pair(&QpParams::rc());
    // The READ lands past the end of the local MR: nothing may be written outside it.
    let wr = rdma_wr(
        1,
        WrOpcode::RdmaRead,
        sge(BUF + BUF_LEN - 100, 300, t.key_a),
        RECV_AREA,
        t.key_b,
    );
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocProtErr);
    t.assert_guards();
}

#[test]
fn remote_access_errors_leave_memory_untouched() {
    let cases: [(&str, WrOpcode, u64, u32, u32); 5] = [
        ("bad rkey", WrOpcode::RdmaWrite, RECV_AREA, 1, 64),
        (
            "write past MR end",
            WrOpcode::RdmaWrite,
            BUF + BUF_LEN - 32,
            0,
            64,
        ),
        ("write before MR", WrOpcode::RdmaWrite, BUF - 16, 0, 64),
        (
            "read past MR end",
            WrOpcode::RdmaRead,
            BUF + BUF_LEN - 32,
            0,
            64,
        ),
        (
            "atomic past MR end",
            WrOpcode::AtomicFetchAndAdd,
            BUF + BUF_LEN,
            0,
            8,
        ),
    ];
    for (what, opcode, remote_addr, rkey_delta, len) in cases {
        let mut t = pair(&QpParams::rc());
        let mut wr = send_wr(1, opcode, SendData::Sges(vec![sge(BUF, len, t.key_a)]));
        wr.remote_addr = remote_addr;
        wr.rkey = key_plus(t.key_b, rkey_delta);
        let c = t.with_send_behind(wr);
        assert_eq!(
            id_status(&c),
            [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        t.assert_guards();
        // The responder's QP is in ERR too, and its owner was told (QP_ACCESS_ERR).
        t.assert_responder(
            QpState::Err,
            &[(QPN_B, QpAsyncError::AccessViolation)],
            what,
        );
    }
}

/// A WRITE that overruns its target region (from its start or from inside it, one packet or
/// many, with or without immediate data, RC and UC) fails without writing a single byte: the
/// responder checks the whole RETH range on the first packet, not packet by packet.
#[test]
fn write_overrunning_its_region_writes_nothing() {
    // (what, region length, offset of the write in it, write length, with immediate)
    let cases: [(&str, u64, u64, u32, bool); 5] = [
        ("8001 into 8000", 8000, 0, 8001, false),
        ("65537 into 65536", 65536, 0, 65537, false),
        ("inside and overrunning", 8000, 4000, 5000, false),
        ("one packet overrunning", 8000, 7990, 20, false),
        ("with immediate", 8000, 0, 8001, true),
    ];
    for qp_type in [QpType::Rc, QpType::Uc] {
        for (what, region_len, offset, len, imm) in cases {
            let what = format!("{qp_type:?} {what}");
            let params = QpParams {
                mtu: Mtu::Mtu1024,
                ..QpParams::of(qp_type)
            };
            let mut t = pair(&params);
            t.fill_pattern(0, 7, len as usize);
            // The target region sits in a known pattern, which the whole memory of the
            // responder keeps.
            let target = RECV_AREA + 0x1000;
            let env = &mut t.net.devs[1].env;
            let fill = pattern(9, env.mem.len());
            env.mem.copy_from_slice(&fill);
            let rkey = env.reg_mr(PD, target, region_len, ALL_ACCESS);
            let before = env.mem.clone();
            t.recv_b(50, vec![sge(RECV_AREA, 64, t.key_b)]);
            let opcode = if imm {
                WrOpcode::RdmaWriteWithImm
            } else {
                WrOpcode::RdmaWrite
            };
            let mut wr = send_wr(1, opcode, SendData::Sges(vec![sge(BUF, len, t.key_a)]));
            wr.remote_addr = target + offset;
            wr.rkey = rkey;
            t.post(wr);
            t.run();
            let c = t.cqes(0);
            let expect = if qp_type == QpType::Rc {
                WcStatus::RemAccessErr
            } else {
                // UC has no NAK: the requester completes, the responder drops the message.
                WcStatus::Success
            };
            assert_eq!(id_status(&c), [(1, expect)], "{what}");
            let env = &t.net.devs[1].env;
            if let Some(at) = env.mem.iter().zip(&before).position(|(a, b)| a != b) {
                panic!(
                    "{what}: responder memory changed at {:#x} (region {target:#x}..{:#x})",
                    MEM_BASE + at as u64,
                    target + region_len
                );
            }
            // RC: the responder's QP went to ERR (class C), so the receive WR the WRITE did
            // not consume is flushed; UC dropped the message and keeps its receive WR.
            let (recv, state, events) = if qp_type == QpType::Rc {
                (
                    vec![(50, WcStatus::WrFlushErr)],
                    QpState::Err,
                    vec![(QPN_B, QpAsyncError::AccessViolation)],
                )
            } else {
                (vec![], QpState::Rts, vec![])
            };
            let got: Vec<_> = t.cqes(1).iter().map(|c| (c.wr_id, c.status)).collect();
            assert_eq!(got, recv, "{what}: the failed WRITE consumed no receive WR");
            t.assert_responder(state, &events, &what);
        }
    }
}

#[test]
fn remote_access_error_when_qp_forbids_the_operation() {
    let params = QpParams {
        access: ACCESS_REMOTE_WRITE,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    assert_eq!(
        t.rdma_once(WrOpcode::RdmaRead, 8, RECV_AREA),
        WcStatus::RemAccessErr
    );
    t.assert_responder_failed(QpAsyncError::AccessViolation);
}

#[test]
fn misaligned_atomic_is_remote_invalid_request() {
    let mut t = pair(&QpParams::rc());
    assert_eq!(
        t.rdma_once(WrOpcode::AtomicFetchAndAdd, 8, RECV_AREA + 4),
        WcStatus::RemInvReqErr
    );
    t.assert_responder_failed(QpAsyncError::InvalidRequest);
}

#[test]
fn send_larger_than_recv_buffer_is_remote_invalid_request() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 100, kb)]);
    t.recv_b(2, vec![sge(RECV_AREA, 100, kb)]);
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 300, t.key_a)]),
    ));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    let r = t.cqes(1);
    assert_eq!(
        id_status(&r),
        [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    t.assert_guards();
    // The error is the receive WR's (its completion says so): no asynchronous error.
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    assert!(t.net.devs[1].env.async_errors.is_empty());
}

#[test]
fn bad_recv_lkey_is_remote_operational_error() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 100, key_plus(kb, 5))]);
    t.post(send_wr(1, WrOpcode::Send, SendData::Inline(vec![9; 10])));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemOpErr);
    assert_eq!(one(&t.cqes(1)).status, WcStatus::LocProtErr);
}

#[test]
fn retry_exceeded_then_flush() {
    let params = QpParams {
        retry_cnt: 3,
        ..QpParams::rc()
    };
    // Device 1 owns another GID: nobody answers QP A.
    let mut t = pair_with(&params, gid_v4(2));
    t.net.devs[1].gid = gid_v4(99);
    for i in 0..3 {
        t.post(send_wr(
            i,
            WrOpcode::Send,
            SendData::Inline(vec![i as u8; 4]),
        ));
    }
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        id_status(&c),
        [
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(t.net.devs[0].engine.stats().retransmit_timeouts, 3);
    assert_eq!(t.net.devs[0].engine.qp_state(QPN_A), Some(QpState::Err));
    // Timeout 12: 4.096 µs × 2^12 ≈ 16.8 ms per try, 4 tries.
    assert!(t.net.now >= 1_000_000 + 4 * (4096 << 12));
}

#[test]
fn rnr_retry_exceeded() {
    let params = QpParams {
        rnr_retry: 2,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    t.post(send_wr(1, WrOpcode::Send, SendData::Inline(vec![1])));
    t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![2])));
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        id_status(&c),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(t.net.devs[1].engine.stats().rnr_naks_sent, 3);
}

#[test]
fn rnr_then_success() {
    let params = QpParams {
        rnr_retry: 7,
        min_rnr_timer: 14,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let mut wr = send_wr(1, WrOpcode::Send, SendData::Inline(b"late".to_vec()));
    wr.imm = 5;
    t.post(wr);
    // A few RNR rounds with no receive WR posted.
    t.step_for(20, 1_000_000);
    assert!(t.net.devs[1].engine.stats().rnr_naks_sent >= 2);
    assert!(t.cqes(0).is_empty());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 16, kb)]);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(one(&t.cqes(1)).byte_len, 4);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 4), b"late");
}

#[test]
fn rnr_on_write_with_imm_then_success() {
    let params = QpParams {
        min_rnr_timer: 1,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let data = t.fill_pattern(0, 11, 600);
    let wr = t.wr_to_b(1, WrOpcode::RdmaWriteWithImm, 600, RECV_AREA);
    t.post(wr);
    t.step_for(5, 100_000);
    t.recv_b(3, vec![]);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(one(&t.cqes(1)).opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 600), &data[..]);
}

#[test]
fn modify_to_error_flushes_everything() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 16, kb)]);
    t.recv_b(2, vec![sge(RECV_AREA, 16, kb)]);
    let (engine, env) = t.net.dev(1);
    engine
        .modify_qp(
            env,
            QPN_B,
            &QpModify {
                state: Some(QpState::Err),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        id_status_recv(&t.cqes(1)),
        [
            (1, WcStatus::WrFlushErr, true),
            (2, WcStatus::WrFlushErr, true)
        ]
    );
    // Work posted after the error is flushed at once.
    t.recv_b(3, vec![]);
    let (engine, env) = t.net.dev(1);
    engine.recv_posted(env, QPN_B).unwrap();
    engine
        .post_send(
            env,
            QPN_B,
            send_wr(4, WrOpcode::Send, SendData::Inline(vec![1])),
        )
        .unwrap();
    assert_eq!(
        id_status_recv(&t.cqes(1)),
        [
            (3, WcStatus::WrFlushErr, true),
            (4, WcStatus::WrFlushErr, false)
        ]
    );
}

#[test]
fn max_rd_atomic_limits_outstanding_reads_and_fence_waits() {
    let params = QpParams {
        max_rd_atomic: 1,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let data = t.fill_pattern(1, 12, 64);
    for i in 0..3u64 {
        let wr = rdma_wr(
            i,
            WrOpcode::RdmaRead,
            sge(BUF + i * 64, 64, t.key_a),
            RECV_AREA,
            t.key_b,
        );
        t.post(wr);
    }
    let mut fenced = send_wr(
        3,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(BUF, 64, t.key_a)]),
    );
    fenced.fence = true;
    fenced.remote_addr = RECV_AREA + 0x1000;
    fenced.rkey = t.key_b;
    t.post(fenced);
    assert_eq!(
        t.net.devs[0].env.outbox.len(),
        1,
        "only one READ may be outstanding"
    );
    t.run();
    let c = t.cqes(0);
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    // The fenced WRITE sent the data the READs brought in.
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 0x1000, 64), &data[..]);
}

#[test]
fn duplicate_atomic_is_replayed_not_reexecuted() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA;
    t.net.devs[1].env.fill(target, &1u64.to_le_bytes());
    let mut wr = t.wr_to_b(1, WrOpcode::AtomicFetchAndAdd, 8, target);
    wr.compare_add = 10;
    t.post(wr);
    // Deliver the request twice and lose the first response: the requester times out and
    // retransmits; the responder must answer from its saved result.
    let request = t.net.devs[0].env.outbox[0].1.clone();
    t.net.devs[0].env.outbox.push((gid_v4(2), request));
    t.net.step();
    t.net.devs[1].env.outbox.clear();
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(
        u64::from_le_bytes(t.net.devs[0].env.bytes(BUF, 8).try_into().unwrap()),
        1
    );
    assert_eq!(
        u64::from_le_bytes(t.net.devs[1].env.bytes(target, 8).try_into().unwrap()),
        11,
        "added once"
    );
    assert!(t.net.devs[1].engine.stats().rx_duplicates >= 1);
}

/// Posts a 4-packet READ, drops response number `lost` and returns (timeouts, re-requests).
fn read_with_lost_response(lost: usize) -> (u64, u64) {
    let mut t = pair(&QpParams::rc());
    let data = t.fill_pattern(1, 13, 1000);
    let wr = t.wr_to_b(1, WrOpcode::RdmaRead, 1000, RECV_AREA);
    t.post(wr);
    t.net.step();
    assert_eq!(
        t.net.devs[1].env.outbox.len(),
        4,
        "1000 B at MTU 256: 4 responses"
    );
    t.net.devs[1].env.outbox.remove(lost);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[0].env.bytes(BUF, 1000), &data[..]);
    let stats = t.net.devs[0].engine.stats();
    (stats.retransmit_timeouts, stats.nak_rewinds)
}

#[test]
fn lost_read_response_is_re_requested_at_the_gap() {
    // A later response shows the gap: the READ is re-requested from it at once.
    assert_eq!(read_with_lost_response(2), (0, 1));
}

#[test]
fn lost_last_read_response_is_recovered_by_the_tail_probe() {
    // Nothing follows the lost response: the timer's tail probe (engine/rto.rs) asks for the
    // missing response two round trips later, before any timeout.
    assert_eq!(read_with_lost_response(3), (0, 0));
}

#[test]
fn srq_receive_wrs_are_not_flushed_with_the_qp() {
    let mut net = Net::new(&[gid_v4(1)]);
    let (engine, env) = net.dev(0);
    let qpn = Qpn::new(5).unwrap();
    engine
        .create_qp(QpConfig {
            qpn,
            qp_type: QpType::Rc,
            pd: PD,
            uses_srq: true,
        })
        .unwrap();
    env.post_recv(qpn, recv_wr(1, vec![]));
    engine
        .modify_qp(
            env,
            qpn,
            &QpModify {
                state: Some(QpState::Err),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(
        env.take_completions().is_empty(),
        "SRQ WRs belong to the SRQ, not the QP"
    );
    assert_eq!(env.recv_queues[&qpn].len(), 1);
}

/// Headers of a random packet of `opcode` to QP b of a `qp_type` pair whose b side has MR
/// `kb`: every header the opcode has, with fields mostly near what the QP expects (its QPN,
/// PSN window, P_Key, Q_Key, key, buffer), else random.
fn random_headers(
    rng: &mut rand::rngs::StdRng,
    opcode: u8,
    qp_type: QpType,
    kb: Key,
) -> roce_common::roce::wire::Headers {
    use rand::rngs::StdRng;
    use rand::Rng;
    use roce_common::roce::wire::{
        self, Aeth, AtomicEth, Bth, Deth, Feth, Headers, NakCode, Reth, Syndrome,
    };
    let info = wire::opcode_info(opcode).unwrap();
    let near = |rng: &mut StdRng, base: Psn| base.add(rng.gen_range(0..8));
    let mut h = Headers::new(Bth {
        opcode,
        solicited: rng.gen(),
        pkey: if rng.gen_bool(0.95) {
            0xffff
        } else {
            rng.gen()
        },
        dest_qpn: if rng.gen_bool(0.9) {
            QPN_B
        } else {
            Qpn::from_wire(rng.gen_range(0..0x100))
        },
        ack_req: rng.gen(),
        psn: if rng.gen_bool(0.8) {
            near(rng, SQ_PSN_A.sub(4))
        } else {
            Psn::from_wire(rng.gen_range(0..0x100_0000))
        },
    });
    let va = || BUF + BUF_LEN / 2;
    let va = if rng.gen_bool(0.5) { va() } else { rng.gen() };
    if info.xrceth {
        h.xrceth = Some(rng.gen());
    }
    let rkey = if rng.gen_bool(0.7) {
        kb
    } else {
        Key::from_raw(rng.gen())
    };
    if info.reth {
        h.reth = Some(Reth {
            va,
            rkey,
            dma_len: if rng.gen_bool(0.8) {
                rng.gen_range(0..5000)
            } else {
                rng.gen()
            },
        });
    }
    if info.ieth {
        h.ieth = Some(if rng.gen_bool(0.5) {
            kb
        } else {
            Key::from_raw(rng.gen())
        });
    }
    if info.feth {
        h.feth = Some(Feth {
            placement_type: rng.gen_range(0..16),
            selectivity_level: rng.gen_range(0..4),
        });
    }
    if info.atomic_eth {
        h.atomic_eth = Some(AtomicEth {
            va,
            rkey,
            swap_add: rng.gen(),
            compare: rng.gen(),
        });
    }
    if info.aeth {
        let syndrome = match rng.gen_range(0..3) {
            0 => Syndrome::Ack,
            1 => Syndrome::RnrNak(rng.gen_range(0..32)),
            _ => Syndrome::Nak(NakCode::PsnSequenceError),
        };
        h.aeth = Some(Aeth {
            syndrome,
            msn: Msn::from_wire(rng.gen_range(0..0x100_0000)),
        });
    }
    if info.atomic_ack_eth {
        h.atomic_ack = Some(rng.gen());
    }
    if info.immdt {
        h.imm = Some(rng.gen());
    }
    if info.deth {
        h.deth = Some(Deth {
            qkey: if rng.gen_bool(0.8) {
                QpParams::of(qp_type).qkey
            } else {
                rng.gen()
            },
            src_qpn: Qpn::from_wire(rng.gen_range(0..0x100_0000)),
        });
    }
    h
}

/// Well-formed packets (valid ICRC) with random opcodes, PSNs, keys, addresses and lengths,
/// plus raw garbage: the engine must neither panic nor touch memory outside registered regions.
#[test]
fn random_packets_never_panic_or_escape_regions() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use roce_common::roce::wire;
    const PACKETS: usize = 8_000;
    let mut rng = StdRng::seed_from_u64(0xf022);
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let mut t = pair(&QpParams::of(qp_type));
        let kb = t.key_b;
        let ip = peer_ip(gid_v4(1), gid_v4(2));
        let opcodes: Vec<u8> = (0..=u8::MAX)
            .filter(|&o| wire::opcode_info(o).is_some())
            .collect();
        for i in 0..PACKETS {
            if i % 64 == 0 {
                t.recv_b(
                    i as u64,
                    vec![sge(
                        RECV_AREA + rng.gen_range(0..0x1000),
                        rng.gen_range(0..3000),
                        kb,
                    )],
                );
            }
            let opcode = opcodes[rng.gen_range(0..opcodes.len())];
            let h = random_headers(&mut rng, opcode, qp_type, kb);
            let mut payload = vec![0u8; rng.gen_range(0..600)];
            rng.fill(&mut payload[..]);
            let mut packet = wire::build_packet(&ip, &h, &payload);
            if rng.gen_bool(0.05) {
                let at = rng.gen_range(0..packet.len());
                packet[at] = rng.gen();
            }
            if rng.gen_bool(0.02) {
                packet = vec![0u8; rng.gen_range(0..100)];
                rng.fill(&mut packet[..]);
            }
            let (engine, env) = t.net.dev(1);
            let _ = engine.receive(env, &packet);
            if i % 16 == 0 {
                engine.poll(env);
                env.outbox.clear();
                t.net.advance(1_000_000);
            }
        }
        t.assert_guards();
    }
}

#[test]
fn connected_qps_ignore_packets_from_other_peers() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 64, kb)]);
    // A third party (another GID) sends a perfectly valid request to QP B.
    let mut h = roce_common::roce::wire::Headers::new(roce_common::roce::wire::Bth {
        opcode: roce_common::roce::wire::opcode::RC_SEND_ONLY,
        solicited: false,
        pkey: roce_common::roce::wire::DEFAULT_PKEY,
        dest_qpn: QPN_B,
        ack_req: true,
        psn: SQ_PSN_A,
    });
    h.imm = None;
    let ip = peer_ip(gid_v4(66), gid_v4(2));
    let packet = roce_common::roce::wire::build_packet(&ip, &h, b"intruder");
    let (engine, env) = t.net.dev(1);
    assert_eq!(
        engine.receive(env, &packet),
        Err(RxDrop::WrongSource(QPN_B))
    );
    assert!(t.cqes(1).is_empty());
    // The real peer still gets through.
    t.post(send_wr(
        2,
        WrOpcode::Send,
        SendData::Inline(b"peer".to_vec()),
    ));
    t.run();
    assert_eq!(one(&t.cqes(1)).byte_len, 4);
}

#[test]
fn uc_without_receive_wr_or_with_bad_rkey_drops_silently() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let kb = t.key_b;
    // No receive WR: the message is dropped (UC has no RNR NAK).
    t.post(send_wr(1, WrOpcode::Send, SendData::Inline(vec![1; 32])));
    // Bad rkey: the WRITE is dropped, no NAK, the requester still completes.
    let mut wr = send_wr(2, WrOpcode::RdmaWrite, SendData::Inline(vec![2; 32]));
    wr.remote_addr = RECV_AREA;
    wr.rkey = key_plus(kb, 7);
    t.post(wr);
    // The connection keeps working afterwards.
    t.run();
    t.recv_b(3, vec![sge(RECV_AREA + 0x100, 64, kb)]);
    t.post(send_wr(
        3,
        WrOpcode::Send,
        SendData::Inline(b"after".to_vec()),
    ));
    t.run();
    let s = t.cqes(0);
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(one(&t.cqes(1)).wr_id, 3);
    assert_eq!(
        t.net.devs[1].env.bytes(RECV_AREA, 32),
        &[0u8; 32][..],
        "dropped WRITE wrote nothing"
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 0x100, 5), b"after");
    assert_eq!(t.net.devs[1].engine.stats().rx_no_recv_wr, 1);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Rts));
}
