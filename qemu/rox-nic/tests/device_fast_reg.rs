//! Fast registration through the device (what kernel ULPs — nvme-rdma, xprtrdma, svcrdma —
//! do with `ib_alloc_mr`, `ib_map_mr_sg`, `IB_WR_REG_MR`, `IB_WR_LOCAL_INV` and SEND with
//! invalidate): a `MR_FLAG_FAST_REG` region gets its pages from a `WR_REG_MR` executed in SQ
//! order, remote and local accesses go through exactly those pages, and invalidation ends them.
//! What it refuses, and that a refused request changes nothing: `device_fast_reg_refused.rs`.

mod fast_reg;

use fast_reg::*;

/// REG_MR binds scattered pages; remote WRITE, READ, atomics, ATOMIC WRITE and FLUSH through
/// the rkey reach exactly those bytes, and one byte past the registration none.
#[test]
fn registration_maps_scattered_pages_for_remote_access() {
    let mut f = fx();
    let d = &mut f.d;
    let (_, reg, area, mut expected) = register_scattered(d, &mut f.p, ACCESS_FLUSH_GLOBAL);
    let key = reg.key;

    // WRITE the whole registration from a.
    let data = pattern(1, reg.length as usize);
    d.ram.write(f.buf_a, &data);
    let c = write_from(
        d,
        &mut f.p,
        (f.buf_a, f.key_a),
        reg.length as u32,
        reg.iova,
        key,
    );
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_RDMA_WRITE));
    expect_placed(&mut expected, area, &reg, reg.iova, &data);
    area_is(d, area, &expected, "after WRITE");

    // READ it back (from an offset, across two page boundaries).
    let (from, len) = (reg.iova + 10, reg.length - 10);
    let (c, got) = read_back(d, &mut f.p, (f.buf_a, f.key_a), len as u32, from, key);
    assert_eq!(
        (c.status, c.opcode, c.byte_len),
        (WC_SUCCESS, WC_OPC_RDMA_READ, len as u32)
    );
    assert_eq!(got, data[10..]);

    // FETCH_ADD on the second page.
    let target = reg.iova + SMALL;
    let before = u64::from_le_bytes(d.ram.read(reg.place(target), 8).try_into().unwrap());
    let res = sge(f.buf_a + 100, 8, f.key_a);
    let w = with_atomic(
        send_wqe(2, WR_ATOMIC_FETCH_AND_ADD, WQE_FLAG_SIGNALED, &[res]),
        target,
        key,
        5,
        0,
    );
    let c = post_wait(d, &mut f.p.a, &mut f.p.cq_a, &w);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_FETCH_ADD));
    assert_eq!(d.ram.read(res.addr, 8), before.to_le_bytes());
    expect_placed(
        &mut expected,
        area,
        &reg,
        target,
        &before.wrapping_add(5).to_le_bytes(),
    );
    area_is(d, area, &expected, "after FETCH_ADD");

    // ATOMIC WRITE on the third page, then a FLUSH of the whole registration.
    let d = &mut f.d;
    let target = reg.iova + 2 * SMALL;
    let value = *b"8 bytes!";
    let w = with_atomic(
        send_wqe(5, WR_ATOMIC_WRITE, WQE_FLAG_SIGNALED, &[]),
        target,
        key,
        u64::from_ne_bytes(value),
        0,
    );
    let c = post_wait(d, &mut f.p.a, &mut f.p.cq_a, &w);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_ATOMIC_WRITE));
    expect_placed(&mut expected, area, &reg, target, &value);
    let mut w = send_wqe(6, WR_FLUSH, WQE_FLAG_SIGNALED, &[]);
    w.seg = SqSeg {
        rdma: RdmaSeg {
            remote_addr: reg.iova,
            rkey: key,
            length: reg.length as u32,
            flush_type: FLUSH_TYPE_GLOBAL,
            flush_level: FLUSH_LEVEL_RANGE,
            ..Default::default()
        },
    };
    let c = post_wait(d, &mut f.p.a, &mut f.p.cq_a, &w);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_FLUSH));
    area_is(d, area, &expected, "after ATOMIC WRITE and FLUSH");

    // The ends of the registration are its ends: one byte beyond is a remote access error,
    // and nothing is written.
    let c = write_from(
        d,
        &mut f.p,
        (f.buf_a, f.key_a),
        16,
        reg.iova + reg.length - 8,
        key,
    );
    assert_eq!(c.status, WC_REM_ACCESS_ERR);
    area_is(d, area, &expected, "after the overrunning WRITE");
}

/// Local gathers (a SEND's) and scatters (a receive's) through the registration's lkey reach
/// exactly its scattered pages.
#[test]
fn local_gathers_and_scatters_go_through_the_registered_pages() {
    let mut f = fx();
    let d = &mut f.d;
    let (_, reg, area, mut expected) = register_scattered(d, &mut f.p, 0);
    let key = reg.key;
    // The registration holds a pattern, placed through its pages.
    expect_placed(
        &mut expected,
        area,
        &reg,
        reg.iova,
        &pattern(1, reg.length as usize),
    );
    d.ram.write(area, &expected);

    // b SENDs out of the registration (gather through the lkey) into a's receive.
    let (src, len) = (reg.iova + 100, 5000u64);
    f.d.post_recv(&mut f.p.a, 7, &[sge(f.buf_a + 200, 8192, f.key_a)]);
    let d = &mut f.d;
    let w = send_wqe(3, WR_SEND, WQE_FLAG_SIGNALED, &[sge(src, len as u32, key)]);
    let c = post_wait(d, &mut f.p.b, &mut f.p.cq_b, &w);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_SEND));
    let r = d.wait_cqe(&mut f.p.cq_a);
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WC_SUCCESS, len as u32));
    let sent: Vec<u8> = (0..len)
        .map(|i| expected[(reg.place(src + i) - area) as usize])
        .collect();
    assert_eq!(d.ram.read(f.buf_a + 200, len as usize), sent);

    // a SENDs into a receive that scatters through the lkey.
    let (dst, msg) = (reg.iova + 6000, pattern(2, 3000));
    f.d.post_recv(&mut f.p.b, 8, &[sge(dst, msg.len() as u32, key)]);
    let d = &mut f.d;
    d.ram.write(f.buf_a, &msg);
    let w = send_wqe(
        4,
        WR_SEND,
        WQE_FLAG_SIGNALED,
        &[sge(f.buf_a, 3000, f.key_a)],
    );
    assert_eq!(
        post_wait(d, &mut f.p.a, &mut f.p.cq_a, &w).status,
        WC_SUCCESS
    );
    let r = d.wait_cqe(&mut f.p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (8, WC_SUCCESS, 3000));
    expect_placed(&mut expected, area, &reg, dst, &msg);
    area_is(d, area, &expected, "after the receive");
}

/// Larger pages (64 KiB and 2 MiB): the offset of the iova in the first page and the page
/// boundaries follow `page_shift`; the iova's high 32 bits are the consumer's, and the buffer's
/// own address (or the iova with other high bits) reaches nothing.
#[test]
fn larger_pages_and_rewritten_iova_high_bits() {
    for shift in [16u8, 21] {
        let mut f = fx();
        let d = &mut f.d;
        let size = 1u64 << shift;
        let (area, mut expected) = guarded_area(d, shift, 4);
        let mr = alloc_fast_mr(d, PD, 4).unwrap();
        let key = inc_key(inc_key(mr));
        let offset = 0x3000;
        let reg = Reg {
            key,
            iova: 0xabcd_0001_0000_0000 | (size * 5 + offset),
            length: 2 * size - offset - 0x10,
            pages: vec![area + 2 * size, area],
            page_shift: shift,
            access: ALL_ACCESS,
        };
        register(d, &mut f.p, &reg);
        // A WRITE across the page boundary.
        let (at, len) = (reg.iova + size - offset - 1000, 3000u64);
        let data = pattern(u64::from(shift), len as usize);
        d.ram.write(f.buf_a, &data);
        let c = write_from(d, &mut f.p, (f.buf_a, f.key_a), len as u32, at, key);
        assert_eq!(c.status, WC_SUCCESS, "shift {shift}");
        expect_placed(&mut expected, area, &reg, at, &data);
        assert_eq!(reg.place(at), area + 3 * size - 1000, "shift {shift}");
        assert_eq!(reg.place(at + 1000), area, "shift {shift}");
        area_is(d, area, &expected, &format!("shift {shift} after WRITE"));
        let (c, got) = read_back(d, &mut f.p, (f.buf_a, f.key_a), len as u32, at, key);
        assert_eq!(c.status, WC_SUCCESS, "shift {shift}");
        assert_eq!(got, data);
        // The same low bits under other high bits: outside the registration.
        let c = write_from(d, &mut f.p, (f.buf_a, f.key_a), 8, at & 0xffff_ffff, key);
        assert_eq!(c.status, WC_REM_ACCESS_ERR, "shift {shift}");
        area_is(
            d,
            area,
            &expected,
            &format!("shift {shift} after refused WRITE"),
        );
    }
}

/// LOCAL_INV ends the registration (the old rkey is a remote access error and writes
/// nothing); a REG_MR with the next variant (`ib_inc_rkey`) maps the region again and the old
/// variant stays refused.
#[test]
fn local_invalidate_then_register_the_next_variant() {
    let mut f = fx();
    let d = &mut f.d;
    let (_, reg, area, mut expected) = register_scattered(d, &mut f.p, 0);
    let key1 = reg.key;
    let c = post_wait(d, &mut f.p.b, &mut f.p.cq_b, &inv_wqe(2, key1));
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (2, WC_SUCCESS, WC_OPC_LOCAL_INV)
    );
    d.ram.write(f.buf_a, &pattern(3, 64));
    let c = write_from(d, &mut f.p, (f.buf_a, f.key_a), 64, reg.iova, key1);
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "invalidated rkey");
    area_is(d, area, &expected, "after the refused WRITE");

    // The refused WRITE left both QPs in ERR (b's as the responder of a remote access
    // error, IBA class C): register the next variant on a fresh pair.
    let key2 = inc_key(key1);
    let reg2 = Reg {
        key: key2,
        ..reg.clone()
    };
    let mut q = pair_on(d, PD);
    register(d, &mut q, &reg2);
    let c = write_from(d, &mut q, (f.buf_a, f.key_a), 64, reg.iova, key2);
    assert_eq!(c.status, WC_SUCCESS, "new variant");
    expect_placed(&mut expected, area, &reg2, reg.iova, &pattern(3, 64));
    area_is(
        d,
        area,
        &expected,
        "after the WRITE through the new variant",
    );
    let c = write_from(d, &mut q, (f.buf_a, f.key_a), 8, reg.iova, key1);
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "old variant");
    // The lkey went with it: a local access through the old variant is a protection error
    // (on a fresh pair: the refused WRITE left q's in ERR).
    let mut q = pair_on(d, PD);
    let w = send_wqe(3, WR_SEND, WQE_FLAG_SIGNALED, &[sge(reg.iova, 8, key1)]);
    let c = post_wait(d, &mut q.b, &mut q.cq_b, &w);
    assert_eq!(c.status, WC_LOC_PROT_ERR, "old variant as lkey");
    area_is(d, area, &expected, "at the end");
}

/// A SEND with invalidate naming the region's rkey ends it; the receive completion says so
/// and carries the rkey.
#[test]
fn send_with_invalidate_ends_the_registration() {
    let mut f = fx();
    let d = &mut f.d;
    let (_, reg, area, expected) = register_scattered(d, &mut f.p, 0);
    let key = reg.key;
    // Several packets (the rkey rides on the last one).
    let msg = pattern(4, 5000);
    d.ram.write(f.buf_a, &msg);
    f.d.post_recv(&mut f.p.b, 9, &[sge(f.buf_b, 8192, f.key_b)]);
    let d = &mut f.d;
    let w = rdma_wqe(1, WR_SEND_WITH_INV, sge(f.buf_a, 5000, f.key_a), 0, key);
    let c = post_wait(d, &mut f.p.a, &mut f.p.cq_a, &w);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_SEND));
    let r = d.wait_cqe(&mut f.p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.wc_flags, r.imm_data),
        (
            9,
            WC_SUCCESS,
            WC_OPC_RECV,
            5000,
            WC_FLAG_WITH_INV,
            key.get()
        )
    );
    assert_eq!(d.ram.read(f.buf_b, 5000), msg);
    let c = write_from(d, &mut f.p, (f.buf_a, f.key_a), 64, reg.iova, key);
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "invalidated by the SEND");
    area_is(d, area, &expected, "after the refused WRITE");
    // Invalid, it can be registered again (same variant even), on a fresh pair (the refused
    // WRITE left both QPs of this one in ERR).
    let mut q = pair_on(d, PD);
    register(d, &mut q, &reg);
}

/// Allocation limits, deregistration in either state and by any variant of the region's key,
/// and windows bound into a region losing their binding when it is invalidated.
#[test]
fn region_lifecycle_and_bad_admin_input() {
    let mut f = fx();
    let d = &mut f.d;
    for (what, capacity, flags) in [
        ("capacity 0", 0, MR_FLAG_FAST_REG),
        (
            "capacity over the limit",
            DEV_MAX_FAST_REG_PAGES + 1,
            MR_FLAG_FAST_REG,
        ),
        ("and physical", 8, MR_FLAG_FAST_REG | MR_FLAG_PHYSICAL),
        ("and on demand", 8, MR_FLAG_FAST_REG | MR_FLAG_ON_DEMAND),
    ] {
        let c = RegMrCmd {
            pd: PD,
            pbl: PageList {
                npages: capacity,
                ..Default::default()
            },
            flags,
            ..Default::default()
        };
        assert_eq!(
            d.admin(ADMIN_OP_REG_MR, payload(&c)).status,
            ADMIN_STATUS_BAD_PARAM,
            "{what}"
        );
    }
    let largest = alloc_fast_mr(d, PD, DEV_MAX_FAST_REG_PAGES).unwrap();
    assert_eq!(dereg(d, largest), ADMIN_STATUS_SUCCESS, "invalid region");
    assert_eq!(dereg(d, largest), ADMIN_STATUS_BAD_HANDLE, "twice");
    // An ordinary MR is named by its exact key.
    assert_eq!(dereg(d, inc_key(f.key_b)), ADMIN_STATUS_BAD_HANDLE);

    // A window bound into a valid region loses its binding when the region is invalidated;
    // registering the region again (same variant) does not bring it back.
    let (mr, reg, area, mut expected) = register_scattered(d, &mut f.p, ACCESS_MW_BIND);
    let key = reg.key;
    let mw = d.run::<AllocMw>(AllocMwCmd {
        pd: PD,
        mw_type: MW_TYPE_2,
        ..Default::default()
    });

    let rkey = inc_key(mw);
    let mut bind = send_wqe(3, WR_BIND_MW, WQE_FLAG_SIGNALED, &[]);
    bind.seg = SqSeg {
        bind: BindSeg {
            addr: reg.iova,
            length: 64,
            new_rkey: rkey,
            lkey: key,
            access: ACCESS_REMOTE_WRITE,
            ..Default::default()
        },
    };
    let c = post_wait(d, &mut f.p.b, &mut f.p.cq_b, &bind);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_BIND_MW));
    let data = pattern(9, 64);
    d.ram.write(f.buf_a, &data);
    let c = write_from(d, &mut f.p, (f.buf_a, f.key_a), 64, reg.iova, rkey);
    assert_eq!(c.status, WC_SUCCESS, "through the window");
    expect_placed(&mut expected, area, &reg, reg.iova, &data);
    let c = post_wait(d, &mut f.p.b, &mut f.p.cq_b, &inv_wqe(4, key));
    assert_eq!(c.status, WC_SUCCESS);
    register(d, &mut f.p, &reg);
    let c = write_from(d, &mut f.p, (f.buf_a, f.key_a), 8, reg.iova, rkey);
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "window after the invalidation");
    area_is(d, area, &expected, "window");

    // A valid region is deregistered by the key it was allocated with (the consumer changed
    // the variant since); its keys then reach nothing and REG_MR no longer finds it.
    assert_eq!(dereg(d, mr), ADMIN_STATUS_SUCCESS, "valid region");
    assert_eq!(dereg(d, key), ADMIN_STATUS_BAD_HANDLE, "twice");
    let mut q = pair_on(d, PD);
    let c = write_from(d, &mut q, (f.buf_a, f.key_a), 8, reg.iova, key);
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "deregistered");
    area_is(d, area, &expected, "deregistered");
    let w = Reg {
        key: inc_key(key),
        ..reg
    }
    .wqe(d, 5);
    // On a fresh pair: the refused WRITEs left f.p's and q's QPs in ERR.
    let mut r = pair_on(d, PD);
    expect_refused(d, &mut r, &w, WC_OPC_REG_MR, "deregistered region");
}
