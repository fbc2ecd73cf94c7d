//! Fast registration through the device, what it refuses: every rule a `WR_REG_MR`, a
//! `LOCAL_INV` or a SEND with invalidate can break ends in the error the verbs name, the QP in
//! ERR, and nothing changed: no registration made or ended, no byte written outside one.
//! (What it does with valid requests: `device_fast_reg.rs`.)

mod fast_reg;

use fast_reg::*;

/// Every rule a REG_MR can break: MW_BIND_ERR in SQ order, the QP in ERR, and nothing changed
/// — the region stays invalid (or keeps its earlier registration) and no byte is written.
#[test]
fn refused_registrations_change_nothing() {
    type Breaker = fn(&mut TestDriver, &mut Reg, Key, &mut u64, &mut u32);
    let cases: [(&str, u32, Breaker); 14] = [
        ("unknown index", 8, |_, r, _, _, _| {
            r.key = Key::region(r.key.index() + 1000, r.key.variant());
        }),
        ("a window key", 8, |_, r, _, _, _| {
            r.key = Key::window(r.key.index(), r.key.variant());
        }),
        ("another PD's region", 8, |d, r, _, _, _| {
            r.key = inc_key(alloc_fast_mr(d, OTHER_PD, 8).unwrap());
        }),
        ("an ordinary MR", 8, |_, r, key_b, _, _| r.key = key_b),
        ("npages 0", 8, |_, _, _, _, n| *n = 0),
        ("npages over the capacity", 2, |_, _, _, _, _| {}),
        ("pages not covering the length", 8, |_, r, _, _, _| {
            r.length = 3 * SMALL - 0x100 + 1;
        }),
        ("page_shift below 12", 8, |_, r, _, _, _| {
            r.page_shift = PAGE_SHIFT_MIN - 1;
        }),
        ("page_shift above 30", 8, |_, r, _, _, _| {
            r.page_shift = PAGE_SHIFT_MAX + 1;
        }),
        ("a misaligned page", 8, |d, r, _, list, _| {
            r.pages[1] += 8;
            *list = write_page_list(d, &r.pages);
        }),
        ("a page outside guest RAM", 8, |d, r, _, list, _| {
            r.pages[2] = RAM_BASE + RAM_SIZE;
            *list = write_page_list(d, &r.pages);
        }),
        ("an unreadable page list", 8, |_, _, _, list, _| {
            *list = RAM_BASE + RAM_SIZE;
        }),
        ("remote write without local write", 8, |_, r, _, _, _| {
            r.access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        }),
        ("an access bit the device lacks", 8, |_, r, _, _, _| {
            r.access |= ACCESS_FLUSH_PERSISTENT;
        }),
    ];
    for (what, capacity, breaker) in cases {
        let mut f = fx();
        let d = &mut f.d;
        let mr = alloc_fast_mr(d, PD, capacity).unwrap();
        let (mut reg, area, expected) = scattered_reg(d, inc_key(mr));
        let mut list = write_page_list(d, &reg.pages);
        let mut npages = reg.pages.len() as u32;
        breaker(d, &mut reg, f.key_b, &mut list, &mut npages);
        let w = reg.wqe_with(1, list, npages);
        expect_refused(d, &mut f.p, &w, WC_OPC_REG_MR, what);
        // Still invalid: the key (the one asked for, and the region's own next variant)
        // reaches nothing.
        let mut q = pair_on(d, PD);
        d.ram.write(f.buf_a, &pattern(5, 64));
        let c = write_from(d, &mut q, (f.buf_a, f.key_a), 64, reg.iova, reg.key);
        assert_eq!(c.status, WC_REM_ACCESS_ERR, "{what}: asked-for key");
        let mut q = pair_on(d, PD);
        let c = write_from(d, &mut q, (f.buf_a, f.key_a), 64, reg.iova, inc_key(mr));
        assert_eq!(c.status, WC_REM_ACCESS_ERR, "{what}: the region's key");
        area_is(d, area, &expected, what);
    }

    // A region that is still valid keeps its registration.
    let mut f = fx();
    let d = &mut f.d;
    let (_, reg, area, mut expected) = register_scattered(d, &mut f.p, 0);
    let key1 = reg.key;
    let (other_area, other_expected) = guarded_area(d, PAGE_SHIFT_MIN, 2);
    let again = Reg {
        key: inc_key(key1),
        pages: vec![other_area, other_area + SMALL],
        length: 2 * SMALL - 0x100,
        ..reg.clone()
    };
    let w = again.wqe(d, 1);
    expect_refused(d, &mut f.p, &w, WC_OPC_REG_MR, "still valid");
    let mut q = pair_on(d, PD);
    d.ram.write(f.buf_a, &pattern(6, 64));
    let c = write_from(d, &mut q, (f.buf_a, f.key_a), 64, reg.iova, key1);
    assert_eq!(c.status, WC_SUCCESS, "the first registration");
    expect_placed(&mut expected, area, &reg, reg.iova, &pattern(6, 64));
    let c = write_from(d, &mut q, (f.buf_a, f.key_a), 64, reg.iova, again.key);
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "the refused variant");
    area_is(d, area, &expected, "still valid: its pages");
    area_is(
        d,
        other_area,
        &other_expected,
        "still valid: the refused pages",
    );
}

/// What a refused invalidation names, relative to a valid region `key1` of b's PD.
#[derive(Clone, Copy, Debug)]
enum BadInvalidation {
    WrongVariant,
    OtherPdRegion,
    OrdinaryMr,
    InvalidRegion,
    UnknownIndex,
}

const BAD_INVALIDATIONS: [BadInvalidation; 5] = [
    BadInvalidation::WrongVariant,
    BadInvalidation::OtherPdRegion,
    BadInvalidation::OrdinaryMr,
    BadInvalidation::InvalidRegion,
    BadInvalidation::UnknownIndex,
];

/// A fixture with b's valid region `key1` (its `Reg`, area and contents) and, for
/// `OtherPdRegion`, a valid region of another PD (the pair that registered it, its key and
/// iova); returns the key the bad invalidation names.
struct InvFx {
    f: Fx,
    key1: Key,
    reg: Reg,
    area: u64,
    expected: Vec<u8>,
    other: Option<(Pair, Key, u64)>,
    bad_key: Key,
}

fn inv_fx(bad: BadInvalidation) -> InvFx {
    let mut f = fx();
    let d = &mut f.d;
    let (_, reg, area, expected) = register_scattered(d, &mut f.p, 0);
    let key1 = reg.key;
    let mut other = None;
    let bad_key = match bad {
        BadInvalidation::WrongVariant => inc_key(key1),
        BadInvalidation::OtherPdRegion => {
            let mut o = pair_on(d, OTHER_PD);
            let okey = inc_key(alloc_fast_mr(d, OTHER_PD, 8).unwrap());
            let buf = d.ram.alloc(SMALL, SMALL);
            let oreg = Reg {
                key: okey,
                iova: 0x77_0000_0000,
                length: SMALL,
                pages: vec![buf],
                page_shift: PAGE_SHIFT_MIN,
                access: ALL_ACCESS,
            };
            register(d, &mut o, &oreg);
            other = Some((o, okey, oreg.iova));
            okey
        }
        BadInvalidation::OrdinaryMr => f.key_b,
        BadInvalidation::InvalidRegion => inc_key(alloc_fast_mr(d, PD, 8).unwrap()),
        BadInvalidation::UnknownIndex => Key::region(key1.index() + 1000, key1.variant()),
    };
    InvFx {
        f,
        key1,
        reg,
        area,
        expected,
        other,
        bad_key,
    }
}

impl InvFx {
    /// Nothing was invalidated: `key1` (and the other PD's region) still take a WRITE, and the
    /// ordinary MR still works.
    fn still_valid(&mut self, what: &str) {
        let d = &mut self.f.d;
        let (buf_a, key_a) = (self.f.buf_a, self.f.key_a);
        let data = pattern(7, 64);
        d.ram.write(buf_a, &data);
        let mut q = pair_on(d, PD);
        let c = rdma(
            d,
            &mut q,
            WR_RDMA_WRITE,
            sge(buf_a, 64, key_a),
            self.reg.iova,
            self.key1,
        );
        assert_eq!(c.status, WC_SUCCESS, "{what}: the region");
        expect_placed(
            &mut self.expected,
            self.area,
            &self.reg,
            self.reg.iova,
            &data,
        );
        area_is(d, self.area, &self.expected, what);
        let c = rdma(
            d,
            &mut q,
            WR_RDMA_WRITE,
            sge(buf_a, 8, key_a),
            self.f.buf_b,
            self.f.key_b,
        );
        assert_eq!(c.status, WC_SUCCESS, "{what}: the ordinary MR");
        if let Some((o, okey, iova)) = &mut self.other {
            let src = d.ram.alloc(64, 64);
            let skey = d.reg_mr(OTHER_PD, src, 64, ALL_ACCESS).unwrap();
            let c = rdma(d, o, WR_RDMA_WRITE, sge(src, 8, skey), *iova, *okey);
            assert_eq!(c.status, WC_SUCCESS, "{what}: the other PD's region");
        }
    }
}

/// LOCAL_INV of anything but a valid region (or bound type 2 window) of the QP's PD, with the
/// exact key: MW_BIND_ERR, the QP in ERR, nothing invalidated.
#[test]
fn refused_local_invalidations_change_nothing() {
    for bad in BAD_INVALIDATIONS {
        let what = format!("{bad:?}");
        let mut t = inv_fx(bad);
        let w = inv_wqe(1, t.bad_key);
        expect_refused(&mut t.f.d, &mut t.f.p, &w, WC_OPC_LOCAL_INV, &what);
        t.still_valid(&what);
    }
}

/// A SEND with invalidate naming a key the responder may not invalidate: the requester gets
/// REM_INV_REQ_ERR, the receive LOC_QP_OP_ERR, the responder QP goes to ERR, nothing is
/// invalidated and the message writes no byte.
#[test]
fn refused_send_with_invalidate_writes_nothing() {
    for bad in BAD_INVALIDATIONS {
        let what = format!("{bad:?}");
        let mut t = inv_fx(bad);
        let f = &mut t.f;
        f.d.ram.fill(f.buf_b, 8192, GUARD);
        f.d.post_recv(&mut f.p.b, 9, &[sge(f.buf_b, 8192, f.key_b)]);
        f.d.ram.write(f.buf_a, &pattern(8, 100));
        let w = rdma_wqe(
            1,
            WR_SEND_WITH_INV,
            sge(f.buf_a, 100, f.key_a),
            0,
            t.bad_key,
        );
        let c = post_wait(&mut f.d, &mut f.p.a, &mut f.p.cq_a, &w);
        assert_eq!(
            (c.status, c.opcode),
            (WC_REM_INV_REQ_ERR, WC_OPC_SEND),
            "{what}"
        );
        let r = f.d.wait_cqe(&mut f.p.cq_b);
        assert_eq!((r.wr_id, r.status), (9, WC_LOC_QP_OP_ERR), "{what}");
        assert_eq!(f.d.ram.read(f.buf_b, 8192), vec![GUARD; 8192], "{what}");
        assert_eq!(f.d.query_qp(f.p.b.qpn).qp_state, QPS_ERR, "{what}");
        t.still_valid(&what);
    }
}
