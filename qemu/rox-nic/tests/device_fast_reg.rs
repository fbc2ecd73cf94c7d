//! Fast registration through the device (what kernel ULPs — nvme-rdma, xprtrdma, svcrdma —
//! do with `ib_alloc_mr`, `ib_map_mr_sg`, `IB_WR_REG_MR`, `IB_WR_LOCAL_INV` and SEND with
//! invalidate): a `MR_FLAG_FAST_REG` region gets its pages from a `WR_REG_MR` executed in SQ
//! order, remote and local accesses go through exactly those pages, invalidation ends them, and
//! every refused request changes nothing and writes no byte outside a registration.

use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 3;
const OTHER_PD: u32 = PD + 1;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
const BUF: u64 = 64 * 1024;
/// What the bytes around (and inside, before any write) a registration hold.
const GUARD: u8 = 0xa5;
const SMALL: u64 = 1 << PAGE_SHIFT_MIN;

/// One connected RC pair on a device: `a` is the initiator, `b` owns the fast-registration
/// regions (and posts the REG_MR / LOCAL_INV WQEs).
struct Pair {
    cq_a: TestCq,
    cq_b: TestCq,
    a: TestQp,
    b: TestQp,
}

struct Fx {
    d: TestDriver,
    p: Pair,
    /// An ordinary buffer and MR (the initiator's sources and destinations).
    buf_a: u64,
    key_a: Key,
    /// An ordinary buffer and MR of b's (receives that do not go into a fast region).
    buf_b: u64,
    key_b: Key,
}

fn fx() -> Fx {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 7]));
    let p = pair_on(&mut d, PD);
    let buf_a = d.ram.alloc(BUF, SMALL);
    let buf_b = d.ram.alloc(BUF, SMALL);
    let key_a = d.reg_mr(PD, buf_a, BUF, ALL_ACCESS).unwrap();
    let key_b = d.reg_mr(PD, buf_b, BUF, ALL_ACCESS).unwrap();
    Fx {
        d,
        p,
        buf_a,
        key_a,
        buf_b,
        key_b,
    }
}

/// Another connected pair on the same device (after an error put a QP of the first in ERR).
fn pair_on(d: &mut TestDriver, pd: u32) -> Pair {
    let (cq_a, cq_b, a, b) = d.qp_pair(QPT_RC, pd, 8, ALL_ACCESS | ACCESS_FLUSH_GLOBAL);
    Pair { cq_a, cq_b, a, b }
}

/// `ib_alloc_mr(IB_MR_TYPE_MEM_REG)`: a fast-registration region of `capacity` pages.
fn alloc_fast_mr(d: &mut TestDriver, pd: u32, capacity: u32) -> Result<Key, u8> {
    let c = RegMrCmd {
        pd,
        pbl: PageList {
            npages: capacity,
            ..Default::default()
        },
        flags: MR_FLAG_FAST_REG,
        ..Default::default()
    };
    let cpl = d.admin(ADMIN_OP_REG_MR, payload(&c));
    if cpl.status == ADMIN_STATUS_SUCCESS {
        let keys = MrKeys::from_words(cpl.result0, cpl.result1);
        assert_eq!(keys.lkey, keys.rkey, "lkey = rkey");
        Ok(keys.lkey)
    } else {
        Err(cpl.status)
    }
}

fn dereg(d: &mut TestDriver, key: Key) -> u8 {
    d.admin(ADMIN_OP_DEREG_MR, payload(&KeyCmd { key, reserved: 0 }))
        .status
}

/// `ib_inc_rkey`: the next variant of a key (the index part stays).
fn inc_key(key: Key) -> Key {
    key.with_variant(key.variant().wrapping_add(1))
}

/// A page list in guest memory (what the driver's `map_mr_sg` fills).
fn write_page_list(d: &mut TestDriver, pages: &[u64]) -> u64 {
    let list = d.ram.alloc(pages.len() as u64 * 8, 8);
    for (i, p) in pages.iter().enumerate() {
        d.ram.write(list + i as u64 * 8, &p.to_le_bytes());
    }
    list
}

/// A registration: `pages` (DMA addresses of pages of `1 << page_shift` bytes) mapped at
/// `iova` (which sits `iova & (page size - 1)` into the first page) for `length` bytes.
#[derive(Clone, Debug)]
struct Reg {
    key: Key,
    iova: u64,
    length: u64,
    pages: Vec<u64>,
    page_shift: u8,
    access: u32,
}

impl Reg {
    /// Where `va` of the registration lives in guest memory.
    fn place(&self, va: u64) -> u64 {
        let mask = (1u64 << self.page_shift) - 1;
        let off = va - self.iova + (self.iova & mask);
        self.pages[(off >> self.page_shift) as usize] + (off & mask)
    }

    /// The WQE; `npages` / `page_list` as given (bad-input cases change them).
    fn wqe_with(&self, wr_id: u64, page_list: u64, npages: u32) -> SqWqe {
        let mut w = send_wqe(wr_id, WR_REG_MR, WQE_FLAG_SIGNALED, &[]);
        w.seg = SqSeg {
            fast_reg: FastRegSeg {
                iova: self.iova,
                length: self.length,
                page_list,
                key: self.key,
                access: self.access,
                npages,
                page_shift: self.page_shift,
                ..Default::default()
            },
        };
        w
    }

    fn wqe(&self, d: &mut TestDriver, wr_id: u64) -> SqWqe {
        let list = write_page_list(d, &self.pages);
        self.wqe_with(wr_id, list, self.pages.len() as u32)
    }
}

fn post_wait(d: &mut TestDriver, qp: &mut TestQp, cq: &mut TestCq, w: &SqWqe) -> Cqe {
    d.post_send(qp, w);
    d.wait_cqe(cq)
}

/// Posts the registration on `p.b` and expects it to succeed.
fn register(d: &mut TestDriver, p: &mut Pair, reg: &Reg) {
    let w = reg.wqe(d, 100);
    let c = post_wait(d, &mut p.b, &mut p.cq_b, &w);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (100, WC_SUCCESS, WC_OPC_REG_MR),
        "REG_MR {reg:x?}"
    );
}

fn inv_wqe(wr_id: u64, rkey: Key) -> SqWqe {
    with_rdma(
        send_wqe(wr_id, WR_LOCAL_INV, WQE_FLAG_SIGNALED, &[]),
        0,
        rkey,
    )
}

/// An RDMA WRITE or READ from `p.a` of `local` to/from `(remote, rkey)`; its completion.
fn rdma(d: &mut TestDriver, p: &mut Pair, op: u8, local: Sge, remote: u64, rkey: Key) -> Cqe {
    let w = rdma_wqe(1, op, local, remote, rkey);
    post_wait(d, &mut p.a, &mut p.cq_a, &w)
}

/// A signaled RDMA WRITE of `len` bytes from `src` (buffer and key) on QP a of `p` to `iova`
/// through `rkey`: its completion.
fn write_from(
    d: &mut TestDriver,
    p: &mut Pair,
    src: (u64, Key),
    len: u32,
    iova: u64,
    rkey: Key,
) -> Cqe {
    rdma(d, p, WR_RDMA_WRITE, sge(src.0, len, src.1), iova, rkey)
}

/// A signaled RDMA READ of `len` bytes from `iova` through `rkey` into the upper half of a's
/// buffer `buf_a` (buffer and key) on QP a of `p`: its completion and the bytes read.
fn read_back(
    d: &mut TestDriver,
    p: &mut Pair,
    buf_a: (u64, Key),
    len: u32,
    iova: u64,
    rkey: Key,
) -> (Cqe, Vec<u8>) {
    let dst = buf_a.0 + BUF / 2;
    let c = rdma(d, p, WR_RDMA_READ, sge(dst, len, buf_a.1), iova, rkey);
    (c, d.ram.read(dst, len as usize))
}

/// A guarded area of `npages` pages of `1 << shift` bytes (aligned to that size), every byte
/// `GUARD`.
fn guarded_area(d: &mut TestDriver, shift: u8, npages: u64) -> (u64, Vec<u8>) {
    let size = 1u64 << shift;
    let area = d.ram.alloc(npages * size, size);
    d.ram.fill(area, (npages * size) as usize, GUARD);
    (area, vec![GUARD; (npages * size) as usize])
}

/// What `area` must hold after `data` was placed at `va` of `reg`.
fn expect_placed(expected: &mut [u8], area: u64, reg: &Reg, va: u64, data: &[u8]) {
    for (i, &b) in data.iter().enumerate() {
        expected[(reg.place(va + i as u64) - area) as usize] = b;
    }
}

/// The registration the tests share: three scattered, out-of-order 4 KiB pages of a guarded
/// area of eight, an iova whose high 32 bits have nothing to do with the DMA addresses (as
/// NFS/RDMA rewrites them) sitting 0x100 bytes into the first page.
fn scattered_reg(d: &mut TestDriver, key: Key) -> (Reg, u64, Vec<u8>) {
    let (area, expected) = guarded_area(d, PAGE_SHIFT_MIN, 8);
    let reg = Reg {
        key,
        iova: 0x0000_0042_7f00_0100,
        length: 3 * SMALL - 0x100 - 0x80,
        pages: vec![area + 5 * SMALL, area + SMALL, area + 3 * SMALL],
        page_shift: PAGE_SHIFT_MIN,
        access: ALL_ACCESS,
    };
    (reg, area, expected)
}

/// Allocates a fast-registration region of 8 pages in `PD` and registers [`scattered_reg`]
/// (with `extra_access` besides `ALL_ACCESS`) under the next variant of its key on `p.b`:
/// (the key as allocated, the registration, its area, what the area holds).
fn register_scattered(
    d: &mut TestDriver,
    p: &mut Pair,
    extra_access: u32,
) -> (Key, Reg, u64, Vec<u8>) {
    let mr = alloc_fast_mr(d, PD, 8).unwrap();
    let (mut reg, area, expected) = scattered_reg(d, inc_key(mr));
    reg.access |= extra_access;
    register(d, p, &reg);
    (mr, reg, area, expected)
}

fn area_is(d: &TestDriver, area: u64, expected: &[u8], what: &str) {
    let got = d.ram.read(area, expected.len());
    if let Some(i) = got.iter().zip(expected).position(|(g, e)| g != e) {
        panic!(
            "{what}: byte {i:#x} of the area is {:#x}, expected {:#x}",
            got[i], expected[i]
        );
    }
}

/// REG_MR binds scattered pages; remote WRITE, READ, atomics, ATOMIC WRITE and FLUSH through
/// the rkey and local gathers and scatters through the lkey reach exactly those bytes.
#[test]
fn registration_maps_scattered_pages_for_remote_and_local_access() {
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

    // ATOMIC WRITE on the third page, then a FLUSH of the whole registration.
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

/// Posts `w` (a REG_MR or LOCAL_INV expected to fail) and a SEND behind it on `p.b`: the first
/// completes with MW_BIND_ERR and `opcode`, the QP goes to ERR and the SEND is flushed.
fn expect_refused(d: &mut TestDriver, p: &mut Pair, w: &SqWqe, opcode: u8, what: &str) {
    d.write_send(&mut p.b, w);
    d.write_send(
        &mut p.b,
        &inline_wqe(2, WR_SEND, WQE_FLAG_SIGNALED, b"after"),
    );
    d.ring_sq(&p.b);
    let c = d.wait_cqe(&mut p.cq_b);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (w.wr_id, WC_MW_BIND_ERR, opcode),
        "{what}"
    );
    let c = d.wait_cqe(&mut p.cq_b);
    assert_eq!((c.wr_id, c.status), (2, WC_WR_FLUSH_ERR), "{what}");
}

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
