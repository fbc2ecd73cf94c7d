//! Engine-level tests of the RoCE transport, the extensions and local operations: ATOMIC
//! WRITE, FLUSH, memory windows (BIND_MW, LOCAL_INV), fast registration and SEND with
//! invalidate, against the device's protection table (roce_common::engine_pair).

mod roce_common;
use roce_common::engine_pair::*;
use roce_common::*;

// ---- memory placement extensions: FLUSH and ATOMIC WRITE ----------------------------------

fn atomic_write_wr(id: u64, remote_addr: u64, rkey: Key, value: [u8; 8]) -> SendWr {
    let data = SendData::Inline(value.to_vec());
    remote_wr(id, WrOpcode::AtomicWrite, data, remote_addr, rkey)
}

fn flush_wr(id: u64, remote_addr: u64, rkey: Key, length: u32, ptype: u8, level: u8) -> SendWr {
    let mut wr = remote_wr(
        id,
        WrOpcode::Flush,
        SendData::Sges(Vec::new()),
        remote_addr,
        rkey,
    );
    wr.flush = FlushSpec {
        length,
        placement_type: ptype,
        level,
    };
    wr
}

fn statuses(cqes: &[Completion]) -> Vec<(u64, WcStatus, WcOpcode)> {
    cqes.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect()
}

#[test]
fn rc_atomic_write_stores_eight_bytes_once() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA + 64;
    let kb = t.key_b;
    t.post(atomic_write_wr(1, target, kb, *b"ABCDEFGH"));
    t.post(atomic_write_wr(2, target + 8, kb, 7u64.to_le_bytes()));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::AtomicWrite)
        ]
    );
    let env = &t.net.devs[1].env;
    assert_eq!(env.bytes(target, 8), b"ABCDEFGH");
    assert_eq!(env.bytes(target + 8, 8), 7u64.to_le_bytes());
    assert_eq!(
        env.bytes(target + 16, 8),
        [0; 8],
        "nothing beyond the 8 bytes"
    );
    t.assert_guards();
}

#[test]
fn rc_atomic_write_errors() {
    // Misaligned target: invalid request (the responder's QP goes to ERR).
    let mut t = pair(&QpParams::rc());
    t.post(atomic_write_wr(1, RECV_AREA + 4, t.key_b, [1; 8]));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    // Past the end of the region, a bad rkey, a region without remote write: remote access.
    for (what, addr, rkey_delta, mr_access) in [
        ("past MR end", BUF + BUF_LEN, 0, ALL_ACCESS),
        ("bad rkey", RECV_AREA, 7, ALL_ACCESS),
        (
            "no remote write",
            RECV_AREA,
            0,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
        ),
    ] {
        let mut t = pair(&QpParams::rc());
        t.net.devs[1].env.mrs[0].access = mr_access;
        t.post(atomic_write_wr(
            1,
            addr,
            key_plus(t.key_b, rkey_delta),
            [2; 8],
        ));
        t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
        t.run();
        assert_eq!(
            statuses(&t.cqes(0)),
            [
                (1, WcStatus::RemAccessErr, WcOpcode::AtomicWrite),
                (2, WcStatus::WrFlushErr, WcOpcode::Send)
            ],
            "{what}"
        );
        t.assert_guards();
    }
    // QP without remote write access.
    let params = QpParams {
        access: ACCESS_REMOTE_READ,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    t.post(atomic_write_wr(1, RECV_AREA, t.key_b, [3; 8]));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemAccessErr);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 8), [0; 8]);
    // Not 8 bytes: local length error, nothing sent.
    let mut t = pair(&QpParams::rc());
    let mut wr = atomic_write_wr(1, RECV_AREA, t.key_b, [4; 8]);
    wr.data = SendData::Sges(vec![sge(BUF, 4, t.key_a)]);
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocLenErr);
    assert_eq!(t.net.devs[0].engine.stats().tx_packets, 0);
    // UC has no ATOMIC WRITE or FLUSH.
    for wr in [
        atomic_write_wr(1, RECV_AREA, Key::from_raw(1), [5; 8]),
        flush_wr(
            1,
            RECV_AREA,
            Key::from_raw(1),
            8,
            FLUSH_TYPE_GLOBAL,
            FLUSH_LEVEL_RANGE,
        ),
    ] {
        let mut t = pair(&QpParams::of(QpType::Uc));
        t.post(wr);
        t.run();
        assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
    }
}

#[test]
fn duplicate_atomic_write_is_answered_not_reexecuted() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA;
    t.post(atomic_write_wr(1, target, t.key_b, 0x1111u64.to_le_bytes()));
    // The responder executes it, its response is lost; software then changes the word; the
    // requester's retransmission must be answered without writing again.
    t.net.step();
    t.net.devs[1].env.outbox.clear();
    t.net.devs[1].env.fill(target, &0x2222u64.to_le_bytes());
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[1].env.bytes(target, 8), 0x2222u64.to_le_bytes());
    assert!(t.net.devs[1].engine.stats().rx_duplicates >= 1);
}

#[test]
fn rc_flush_range_and_whole_region() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    let mut write = send_wr(1, WrOpcode::RdmaWrite, SendData::Inline(vec![9; 16]));
    write.remote_addr = RECV_AREA;
    write.rkey = kb;
    write.signaled = false;
    t.post(write);
    t.post(flush_wr(
        2,
        RECV_AREA,
        kb,
        16,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_RANGE,
    ));
    t.post(flush_wr(
        3,
        RECV_AREA,
        kb,
        0,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_RANGE,
    ));
    // Level MR ignores address and length.
    t.post(flush_wr(
        4,
        0,
        kb,
        u32::MAX,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_MR,
    ));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush),
            (4, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 16), [9; 16]);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Rts));
}

/// (what, type, level, addr, len, rkey delta, MR access, QP access, status)
type FlushCase = (&'static str, u8, u8, u64, u32, u32, u32, u32, WcStatus);

#[test]
fn rc_flush_errors() {
    let global = FLUSH_TYPE_GLOBAL;
    let cases: [FlushCase; 6] = [
        (
            "persistent on a region without FLUSH_PERSISTENT",
            FLUSH_TYPE_PERSISTENT,
            FLUSH_LEVEL_RANGE,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "region without FLUSH_GLOBAL",
            global,
            FLUSH_LEVEL_MR,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS & !ACCESS_FLUSH_GLOBAL,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "QP without FLUSH_GLOBAL",
            global,
            FLUSH_LEVEL_RANGE,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS & !ACCESS_FLUSH_GLOBAL,
            WcStatus::RemAccessErr,
        ),
        (
            "range past the region",
            global,
            FLUSH_LEVEL_RANGE,
            BUF + BUF_LEN - 4,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "bad rkey",
            global,
            FLUSH_LEVEL_MR,
            RECV_AREA,
            8,
            5,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "no placement type",
            0,
            FLUSH_LEVEL_RANGE,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::LocQpOpErr,
        ),
    ];
    for (what, ptype, level, addr, len, delta, mr_access, qp_access, status) in cases {
        let params = QpParams {
            access: qp_access,
            ..QpParams::rc()
        };
        let mut t = pair(&params);
        t.net.devs[1].env.mrs[0].access = mr_access;
        let c = t.with_send_behind(flush_wr(
            1,
            addr,
            key_plus(t.key_b, delta),
            len,
            ptype,
            level,
        ));
        assert_eq!(
            statuses(&c),
            [
                (1, status, WcOpcode::Flush),
                (2, WcStatus::WrFlushErr, WcOpcode::Send)
            ],
            "{what}"
        );
        // A remote access error is a class C error of the responder too (IBA C9-222.1.1): its
        // QP goes to ERR and its owner gets QP_ACCESS_ERR. A malformed FLUSH never leaves
        // the requester (LOC_QP_OP_ERR) and the responder keeps working.
        let (state, events) = if status == WcStatus::RemAccessErr {
            (QpState::Err, vec![(QPN_B, QpAsyncError::AccessViolation)])
        } else {
            (QpState::Rts, vec![])
        };
        t.assert_responder(state, &events, what);
    }
}

#[test]
fn flush_and_atomic_write_count_against_max_rd_atomic() {
    let params = QpParams {
        max_rd_atomic: 1,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let kb = t.key_b;
    t.post(flush_wr(
        1,
        RECV_AREA,
        kb,
        8,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_RANGE,
    ));
    t.post(atomic_write_wr(2, RECV_AREA, kb, [6; 8]));
    // Only the first request may be on the wire until its response is back.
    assert_eq!(t.net.devs[0].env.outbox.len(), 1);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::Flush),
            (2, WcStatus::Success, WcOpcode::AtomicWrite)
        ]
    );
}

// ---- memory windows: BIND_MW, LOCAL_INV, SEND with invalidate ------------------------------

fn bind_wr(id: u64, new_rkey: Key, lkey: Key) -> SendWr {
    let mut wr = send_wr(id, WrOpcode::BindMw, SendData::Sges(Vec::new()));
    wr.bind = Some(Box::new(MwBind {
        addr: BUF,
        length: 4096,
        new_rkey,
        lkey,
        access: ACCESS_REMOTE_WRITE,
        ..Default::default()
    }));
    wr
}

/// A region of device `dev` windows can be bound into: pinned pages over the buffer.
fn bindable_region(t: &mut Pair, dev: usize) -> Key {
    let access = ALL_ACCESS | rox_uapi::verbs::ACCESS_MW_BIND;
    t.net.devs[dev]
        .env
        .reg(PD, BUF, BUF_LEN, access, RegionKind::Paged)
}

#[test]
fn local_operations_complete_in_sq_order_without_packets() {
    let mut t = pair(&QpParams::rc());
    let bindable = bindable_region(&mut t, 0);
    let window = t.net.devs[0].env.alloc_mw(PD).with_variant(1);
    t.post(bind_wr(1, window, bindable));
    let mut inv = send_wr(2, WrOpcode::LocalInv, SendData::Sges(Vec::new()));
    inv.rkey = window;
    t.post(inv);
    // One page at BUF, its address in the page list at BUF + 4096.
    let page_list = BUF + 4096;
    t.net.devs[0].env.fill(page_list, &BUF.to_le_bytes());
    let fast = t.net.devs[0].env.alloc_fast_reg(PD, 1).with_variant(7);
    let fast_reg = FastReg {
        iova: 0xabcd_0000_1000,
        length: 4096,
        page_list,
        key: fast,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        npages: 1,
        page_shift: 12,
        ..Default::default()
    };
    let mut reg = send_wr(4, WrOpcode::RegMr, SendData::Sges(Vec::new()));
    reg.fast_reg = Some(Box::new(fast_reg));
    t.post(reg);
    t.post(send_wr(3, WrOpcode::Send, SendData::Inline(vec![1, 2])));
    t.recv_b(9, vec![sge(RECV_AREA, 64, t.key_b)]);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::BindMw),
            (2, WcStatus::Success, WcOpcode::LocalInv),
            (4, WcStatus::Success, WcOpcode::RegMr),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
    // The device's table says what each did: the window bound with its new rkey, then
    // unbound; the region valid under its new key, over the page of the list.
    let table = &t.net.devs[0].env.mrs.table;
    let mw = &table.mws[&window.index()];
    assert_eq!((mw.rkey, mw.binding.is_none()), (window, true));
    let mr = table.mr(fast).expect("registered");
    assert_eq!(
        (mr.iova, mr.length, &mr.pages[..]),
        (0xabcd_0000_1000, 4096, &[BUF][..])
    );
    // The SEND took the first PSN: the local operations took none.
    assert_eq!(t.net.devs[0].engine.stats().tx_packets, 1);
}

#[test]
fn failed_bind_and_invalidate_complete_in_error_and_flush() {
    let mut t = pair(&QpParams::rc());
    let c = t.with_send_behind(bind_wr(1, BAD_RKEY, t.key_a));
    assert_eq!(
        statuses(&c),
        [
            (1, WcStatus::MwBindErr, WcOpcode::BindMw),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!(t.net.devs[0].engine.qp_state(QPN_A), Some(QpState::Err));
    let mut t = pair(&QpParams::rc());
    let mut inv = send_wr(1, WrOpcode::LocalInv, SendData::Sges(Vec::new()));
    inv.rkey = Key::window(2, 0);
    t.post(inv);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [(1, WcStatus::MwBindErr, WcOpcode::LocalInv)]
    );
    // A fast registration the device refuses: MW_BIND_ERR with the REG_MR opcode, then flush.
    let mut t = pair(&QpParams::rc());
    let mut reg = send_wr(1, WrOpcode::RegMr, SendData::Sges(Vec::new()));
    reg.fast_reg = Some(Box::new(FastReg {
        key: BAD_RKEY,
        ..Default::default()
    }));
    let c = t.with_send_behind(reg);
    assert_eq!(
        statuses(&c),
        [
            (1, WcStatus::MwBindErr, WcOpcode::RegMr),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    // A REG_MR without its segment is malformed; UD has no memory registration WRs.
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(1, WrOpcode::RegMr, SendData::Sges(Vec::new())));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
    // UD has no memory windows; a BIND_MW without its segment is malformed.
    let (mut net, _, _) = ud_pair(gid_v4(1), gid_v4(2));
    let (engine, env) = net.dev(0);
    engine
        .post_send(env, QPN_A, bind_wr(1, Key::window(3, 0), Key::from_raw(1)))
        .unwrap();
    assert_eq!(one(&env.take_completions()).status, WcStatus::LocQpOpErr);
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(1, WrOpcode::BindMw, SendData::Sges(Vec::new())));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
}

#[test]
fn failed_bind_behind_an_unacked_write_stops_the_send_queue() {
    // The WRITE is on the wire (not yet ACKed) when the BIND fails: the SEND behind the BIND
    // must never reach the responder, which would otherwise complete a receive for a message
    // the requester reports as flushed.
    let mut t = pair(&QpParams::rc());
    t.net.devs[0].env.fill(BUF, &pattern(5, 64));
    let write = t.wr_to_b(1, WrOpcode::RdmaWrite, 64, RECV_AREA);
    t.recv_b(9, vec![sge(RECV_AREA + 1024, 64, t.key_b)]);
    t.post(write);
    t.post(bind_wr(2, BAD_RKEY, t.key_a));
    t.post(send_wr(3, WrOpcode::Send, SendData::Inline(vec![1])));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::MwBindErr, WcOpcode::BindMw),
            (3, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert!(
        t.cqes(1).is_empty(),
        "the SEND after the failed BIND reached the responder"
    );
}

#[test]
fn send_with_invalidate_invalidates_at_the_responder() {
    let mut t = pair(&QpParams::rc());
    // A type 2 window of the responder, bound to its QP (as its own BIND_MW would).
    let bindable = bindable_region(&mut t, 1);
    let rkey = t.net.devs[1].env.alloc_mw(PD).with_variant(5);
    let bind = MwBind {
        addr: BUF,
        length: 4096,
        new_rkey: rkey,
        lkey: bindable,
        access: ACCESS_REMOTE_WRITE,
        ..Default::default()
    };
    let (_, env) = t.net.dev(1);
    env.bind_mw(PD, QPN_B, &bind).unwrap();
    // Multi-packet (MTU 256): the IETH rides on the last packet only.
    let payload = pattern(4, 600);
    let mut wr = send_wr(1, WrOpcode::SendWithInv, SendData::Inline(payload.clone()));
    wr.rkey = rkey;
    t.recv_b(7, vec![sge(RECV_AREA, 1024, t.key_b)]);
    t.post(wr);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    let r = one(&t.cqes(1));
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.wc_flags, r.imm),
        (
            7,
            WcStatus::Success,
            WcOpcode::Recv,
            600,
            WC_FLAG_WITH_INV,
            rkey.get()
        )
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 600), &payload[..]);
    let mw = &t.net.devs[1].env.mrs.table.mws[&rkey.index()];
    assert!(mw.binding.is_none(), "the window was invalidated");
    // An rkey the responder cannot invalidate (the window is unbound now): invalid request, both QPs end in ERR.
    t.recv_b(8, vec![sge(RECV_AREA, 1024, t.key_b)]);
    let mut wr = send_wr(2, WrOpcode::SendWithInv, SendData::Inline(vec![1; 8]));
    wr.rkey = rkey;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    let r = one(&t.cqes(1));
    assert_eq!((r.wr_id, r.status), (8, WcStatus::LocQpOpErr));
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    // Only RC can carry it.
    let mut t = pair(&QpParams::of(QpType::Uc));
    let mut wr = send_wr(1, WrOpcode::SendWithInv, SendData::Inline(vec![1]));
    wr.rkey = rkey;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
}
