//! Data path through the chassis, protection: keys, PDs, access, bounds, page translation,
//! memory windows, read-only and vanishing guest memory — every refused access leaves memory
//! untouched (QP-to-QP loopback on one device, testkit::loopback).

use rox_nic::testkit::loopback::{pair, Loopback as Pair, ALL_ACCESS, BUF, PD};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;
use std::time::Duration;

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
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(p.buf_a, 64, p.key_a),
            region + 4096,
            ro,
        ))
        .status,
        WC_REM_ACCESS_ERR
    );
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
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(p.buf_a, 200, p.key_a),
            region + 2 * 4096 - 100,
            rw,
        ))
        .status,
        WC_REM_ACCESS_ERR
    );
    assert!(p.d.ram.read(region, 3 * 4096).iter().all(|&b| b == GUARD));
    // Local side: an lkey from another PD is a local protection error.
    let mut p = pair(QPT_RC);
    let other_pd_key = p.d.reg_mr(PD + 1, p.buf_a, 4096, ALL_ACCESS).unwrap();
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(p.buf_a, 64, other_pd_key),
            p.buf_b,
            p.key_b,
        ))
        .status,
        WC_LOC_PROT_ERR
    );
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
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(p.buf_a, len as u32, p.key_a),
            IOVA,
            rkey,
        ))
        .status,
        WC_SUCCESS
    );
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
    let pkey =
        p.d.reg_physical(PD, target, 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            2,
            WR_RDMA_WRITE,
            sge(p.buf_a, 64, p.key_a),
            target,
            pkey
        ))
        .status,
        WC_SUCCESS
    );
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
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(p.buf_a, 64, p.key_a),
            p.buf_b,
            p.key_b,
        ))
        .status,
        WC_REM_ACCESS_ERR
    );
    assert_eq!(p.d.ram.read(p.buf_b, 64), vec![0x5a; 64]);
}

#[test]
fn read_into_read_only_local_mr_is_local_protection_error() {
    let mut p = pair(QPT_RC);
    let ro_local = p.d.reg_mr(PD, p.buf_a, 4096, ACCESS_REMOTE_READ).unwrap();
    p.d.ram.fill(p.buf_a, 4096, 0x33);
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_READ,
            sge(p.buf_a, 64, ro_local),
            p.buf_b,
            p.key_b,
        ))
        .status,
        WC_LOC_PROT_ERR
    );
    assert_eq!(p.d.ram.read(p.buf_a, 4096), vec![0x33; 4096]);
}

#[test]
fn guest_memory_unmapped_under_the_device_is_fatal_not_a_crash() {
    let mut p = pair(QPT_RC);
    // QEMU takes guest RAM away (e.g. a buggy hot-unplug); the device's rings are gone.
    p.d.dma_unmap_ram();
    let w = rdma_wqe(
        1,
        WR_RDMA_WRITE,
        sge(p.buf_a, 64, p.key_a),
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
    let (mut cq, mut qp) = p.d.self_connected_rc(PD, 4, ALL_ACCESS);
    let key = p.d.reg_mr(PD, p.buf_a, BUF, ALL_ACCESS).unwrap();
    let w = rdma_wqe(9, WR_RDMA_WRITE, sge(p.buf_a, 64, key), p.buf_a + 4096, key);
    p.d.post_send(&mut qp, &w);
    assert_eq!(p.d.wait_cqe(&mut cq).wr_id, 9);
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
    let key = p.d.reg_physical(
        PD,
        ROM_BASE,
        4096,
        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
    );
    // Reading it works.
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            1,
            WR_RDMA_READ,
            sge(p.buf_a, 64, p.key_a),
            ROM_BASE,
            key,
        ))
        .status,
        WC_SUCCESS
    );
    assert_eq!(p.d.ram.read(p.buf_a, 64), vec![0x77; 64]);
    // Writing it is refused and nothing changes.
    assert_eq!(
        p.complete_on_a(&rdma_wqe(
            2,
            WR_RDMA_WRITE,
            Sge {
                addr: p.buf_a + 4096,
                length: 64,
                lkey: p.key_a,
            },
            ROM_BASE,
            key,
        ))
        .status,
        WC_REM_ACCESS_ERR
    );
    assert_eq!(rom.read(ROM_BASE, 4096), vec![0x77; 4096]);
}

/// A type 2 window is never bound to an empty range, and its binding ends with the QP that
/// bound it: another QP of the PD may then bind it without an invalidation.
#[test]
fn type2_window_empty_bind_and_bound_qp_destroyed() {
    let (mut p, mw_mr) = mw_pair();
    let window = window_of(&p);
    let mw = alloc_mw(&mut p.d, PD, MW_TYPE_2);
    let rkey = inc_rkey(mw);
    p.d.post_send(
        &mut p.b,
        &bind_wqe(1, rkey, mw_mr, window, 0, ACCESS_REMOTE_WRITE),
    );
    let c = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((c.status, c.opcode), (WC_MW_BIND_ERR, WC_OPC_BIND_MW));

    let (mut p, mw_mr, rkey) = bound_type2_window(2);
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

/// Where the tests bind their windows: 4 KiB into b's buffer (the same on every fresh pair).
fn window_of(p: &Pair) -> u64 {
    p.buf_b + 4096
}

/// A fresh [`mw_pair`] with a type 2 window bound on b's QP (WR `wr_id`) to 64 bytes at
/// [`window_of`] with remote write; returns the pair, the MR's lkey and the window's rkey.
fn bound_type2_window(wr_id: u64) -> (Pair, Key, Key) {
    let (mut p, mw_mr) = mw_pair();
    let rkey = inc_rkey(alloc_mw(&mut p.d, PD, MW_TYPE_2));
    let bind = bind_wqe(wr_id, rkey, mw_mr, window_of(&p), 64, ACCESS_REMOTE_WRITE);
    p.d.post_send(&mut p.b, &bind);
    assert_eq!(p.d.wait_cqe(&mut p.cq_b).status, WC_SUCCESS);
    (p, mw_mr, rkey)
}

/// An 8-byte RDMA WRITE from a to `addr` through `rkey`; its completion status.
fn mw_write(p: &mut Pair, id: u64, addr: u64, rkey: Key) -> u8 {
    let w = rdma_wqe(id, WR_RDMA_WRITE, sge(p.buf_a, 8, p.key_a), addr, rkey);
    p.d.post_send(&mut p.a, &w);
    p.d.wait_cqe(&mut p.cq_a).status
}

/// A type 2 window through the device: unbound its rkey reaches nothing; bound by b's QP it
/// lets a's QP write inside it only; bound on a's QP, b's QP may not use it (type 2B); bound,
/// it cannot be bound again before it is invalidated.
#[test]
fn a_type2_window_reaches_its_range_through_the_qp_it_is_bound_to() {
    // Unbound, a window's rkey reaches nothing. The failed write leaves both QPs in ERR (the
    // responder's with a QP_ACCESS_ERR event, IBA class C): fresh pairs follow.
    let (mut p, _) = mw_pair();
    let window = window_of(&p);
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
}

/// LOCAL_INV and SEND with invalidate end a type 2 window.
#[test]
fn invalidation_ends_a_type2_window() {
    // LOCAL_INV on b ends the window (a's write then fails, and b's QP goes to ERR);
    // invalidating it again fails (on a fresh pair, whose b QP still works).
    for again in [false, true] {
        let (mut p, _, rkey) = bound_type2_window(8);
        let window = window_of(&p);
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
    let (mut p, _, rkey) = bound_type2_window(12);
    let window = window_of(&p);
    p.d.post_recv(&mut p.b, 13, &[sge(p.buf_b + 8192, 64, p.key_b)]);
    let send = rdma_wqe(14, WR_SEND_WITH_INV, sge(p.buf_a, 8, p.key_a), 0, rkey);
    p.d.post_send(&mut p.a, &send);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.wc_flags, r.imm_data),
        (13, WC_SUCCESS, WC_FLAG_WITH_INV, rkey.get())
    );
    assert_eq!(mw_write(&mut p, 15, window, rkey), WC_REM_ACCESS_ERR);
}

/// Type 1: rebinding changes the rkey; any QP of the PD may use it; length 0 unbinds.
#[test]
fn a_type1_window_rebinds_with_a_new_rkey_and_unbinds_with_length_0() {
    let (mut p, mw_mr) = mw_pair();
    let window = window_of(&p);
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
}

/// Binds that break the rules fail with MW_BIND_ERR: an MR without MW_BIND, remote write over
/// an MR without local write, a window beyond the MR, another PD's window, an rkey naming no
/// window.
#[test]
fn binds_that_break_the_rules_fail() {
    let p = pair(QPT_RC);
    let window = window_of(&p);
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
}

/// Deregistering the MR or deallocating the window leaves its rkey reaching nothing; bad
/// window admin input gets an error status.
#[test]
fn a_window_reaches_nothing_after_its_mr_or_itself_is_gone() {
    for dealloc in [false, true] {
        let (mut p, mw_mr) = mw_pair();
        let window = window_of(&p);
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
        let c = p.complete_on_a(&rdma_wqe(
            1,
            opcode,
            sge(src, len, src_key),
            region + offset,
            rkey,
        ));
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
