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
    key_a: u32,
    /// An ordinary buffer and MR of b's (receives that do not go into a fast region).
    buf_b: u64,
    key_b: u32,
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
    let (cq_a, cq_b, a, b) = d.qp_pair(QPT_RC, pd, 8, ALL_ACCESS);
    Pair { cq_a, cq_b, a, b }
}

/// `ib_alloc_mr(IB_MR_TYPE_MEM_REG)`: a fast-registration region of `capacity` pages.
fn alloc_fast_mr(d: &mut TestDriver, pd: u32, capacity: u32) -> Result<u32, u8> {
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
        assert_eq!(cpl.result0, cpl.result1, "lkey = rkey");
        Ok(cpl.result0)
    } else {
        Err(cpl.status)
    }
}

fn dereg(d: &mut TestDriver, handle: u32) -> u8 {
    d.admin(
        ADMIN_OP_DEREG_MR,
        payload(&HandleCmd {
            handle,
            reserved: 0,
        }),
    )
    .status
}

/// `ib_inc_rkey`: the next variant of a key (the index part stays).
fn inc_key(key: u32) -> u32 {
    (key & !KEY_VARIANT_MASK) | (key.wrapping_add(1) & KEY_VARIANT_MASK)
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
    key: u32,
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

fn inv_wqe(wr_id: u64, rkey: u32) -> SqWqe {
    with_rdma(
        send_wqe(wr_id, WR_LOCAL_INV, WQE_FLAG_SIGNALED, &[]),
        0,
        rkey,
    )
}

/// An RDMA WRITE or READ from `p.a` of `local` to/from `(remote, rkey)`; its completion.
fn rdma(d: &mut TestDriver, p: &mut Pair, op: u8, local: Sge, remote: u64, rkey: u32) -> Cqe {
    let w = with_rdma(send_wqe(1, op, WQE_FLAG_SIGNALED, &[local]), remote, rkey);
    post_wait(d, &mut p.a, &mut p.cq_a, &w)
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
fn scattered_reg(d: &mut TestDriver, key: u32) -> (Reg, u64, Vec<u8>) {
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

fn area_is(d: &TestDriver, area: u64, expected: &[u8], what: &str) {
    let got = d.ram.read(area, expected.len());
    if let Some(i) = got.iter().zip(expected).position(|(g, e)| g != e) {
        panic!(
            "{what}: byte {i:#x} of the area is {:#x}, expected {:#x}",
            got[i], expected[i]
        );
    }
}

/// REG_MR binds scattered pages; remote WRITE, READ and atomics through the rkey and local
/// gathers and scatters through the lkey reach exactly those bytes.
#[test]
fn registration_maps_scattered_pages_for_remote_and_local_access() {
    let mut f = fx();
    let d = &mut f.d;
    let mr = alloc_fast_mr(d, PD, 8).unwrap();
    let key = inc_key(mr);
    let (reg, area, mut expected) = scattered_reg(d, key);
    register(d, &mut f.p, &reg);

    // WRITE the whole registration from a.
    let data = pattern(1, reg.length as usize);
    d.ram.write(f.buf_a, &data);
    let c = rdma(
        d,
        &mut f.p,
        WR_RDMA_WRITE,
        sge(f.buf_a, reg.length as u32, f.key_a),
        reg.iova,
        key,
    );
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_RDMA_WRITE));
    expect_placed(&mut expected, area, &reg, reg.iova, &data);
    area_is(d, area, &expected, "after WRITE");

    // READ it back (from an offset, across two page boundaries).
    let (from, len) = (reg.iova + 10, reg.length - 10);
    let c = rdma(
        d,
        &mut f.p,
        WR_RDMA_READ,
        sge(f.buf_a + BUF / 2, len as u32, f.key_a),
        from,
        key,
    );
    assert_eq!(
        (c.status, c.opcode, c.byte_len),
        (WC_SUCCESS, WC_OPC_RDMA_READ, len as u32)
    );
    assert_eq!(d.ram.read(f.buf_a + BUF / 2, len as usize), data[10..]);

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

    // The ends of the registration are its ends: one byte beyond is a remote access error,
    // and nothing is written.
    let c = rdma(
        d,
        &mut f.p,
        WR_RDMA_WRITE,
        sge(f.buf_a, 16, f.key_a),
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
        let c = rdma(
            d,
            &mut f.p,
            WR_RDMA_WRITE,
            sge(f.buf_a, len as u32, f.key_a),
            at,
            key,
        );
        assert_eq!(c.status, WC_SUCCESS, "shift {shift}");
        expect_placed(&mut expected, area, &reg, at, &data);
        assert_eq!(reg.place(at), area + 3 * size - 1000, "shift {shift}");
        assert_eq!(reg.place(at + 1000), area, "shift {shift}");
        area_is(d, area, &expected, &format!("shift {shift} after WRITE"));
        let c = rdma(
            d,
            &mut f.p,
            WR_RDMA_READ,
            sge(f.buf_a + BUF / 2, len as u32, f.key_a),
            at,
            key,
        );
        assert_eq!(c.status, WC_SUCCESS, "shift {shift}");
        assert_eq!(d.ram.read(f.buf_a + BUF / 2, len as usize), data);
        // The same low bits under other high bits: outside the registration.
        let c = rdma(
            d,
            &mut f.p,
            WR_RDMA_WRITE,
            sge(f.buf_a, 8, f.key_a),
            at & 0xffff_ffff,
            key,
        );
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
    let mr = alloc_fast_mr(d, PD, 8).unwrap();
    let key1 = inc_key(mr);
    let (reg, area, mut expected) = scattered_reg(d, key1);
    register(d, &mut f.p, &reg);
    let c = post_wait(d, &mut f.p.b, &mut f.p.cq_b, &inv_wqe(2, key1));
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (2, WC_SUCCESS, WC_OPC_LOCAL_INV)
    );
    d.ram.write(f.buf_a, &pattern(3, 64));
    let c = rdma(
        d,
        &mut f.p,
        WR_RDMA_WRITE,
        sge(f.buf_a, 64, f.key_a),
        reg.iova,
        key1,
    );
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "invalidated rkey");
    area_is(d, area, &expected, "after the refused WRITE");

    // b's QP is fine (the error was a's): register the next variant on it.
    let key2 = inc_key(key1);
    let reg2 = Reg {
        key: key2,
        ..reg.clone()
    };
    register(d, &mut f.p, &reg2);
    let mut q = pair_on(d, PD);
    let c = rdma(
        d,
        &mut q,
        WR_RDMA_WRITE,
        sge(f.buf_a, 64, f.key_a),
        reg.iova,
        key2,
    );
    assert_eq!(c.status, WC_SUCCESS, "new variant");
    expect_placed(&mut expected, area, &reg2, reg.iova, &pattern(3, 64));
    area_is(
        d,
        area,
        &expected,
        "after the WRITE through the new variant",
    );
    let c = rdma(
        d,
        &mut q,
        WR_RDMA_WRITE,
        sge(f.buf_a, 8, f.key_a),
        reg.iova,
        key1,
    );
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "old variant");
    // The lkey went with it: a local access through the old variant is a protection error.
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
    let mr = alloc_fast_mr(d, PD, 8).unwrap();
    let key = inc_key(mr);
    let (reg, area, expected) = scattered_reg(d, key);
    register(d, &mut f.p, &reg);
    // Several packets (the rkey rides on the last one).
    let msg = pattern(4, 5000);
    d.ram.write(f.buf_a, &msg);
    f.d.post_recv(&mut f.p.b, 9, &[sge(f.buf_b, 8192, f.key_b)]);
    let d = &mut f.d;
    let w = with_rdma(
        send_wqe(
            1,
            WR_SEND_WITH_INV,
            WQE_FLAG_SIGNALED,
            &[sge(f.buf_a, 5000, f.key_a)],
        ),
        0,
        key,
    );
    let c = post_wait(d, &mut f.p.a, &mut f.p.cq_a, &w);
    assert_eq!((c.status, c.opcode), (WC_SUCCESS, WC_OPC_SEND));
    let r = d.wait_cqe(&mut f.p.cq_b);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.wc_flags, r.imm_data),
        (9, WC_SUCCESS, WC_OPC_RECV, 5000, WC_FLAG_WITH_INV, key)
    );
    assert_eq!(d.ram.read(f.buf_b, 5000), msg);
    let c = rdma(
        d,
        &mut f.p,
        WR_RDMA_WRITE,
        sge(f.buf_a, 64, f.key_a),
        reg.iova,
        key,
    );
    assert_eq!(c.status, WC_REM_ACCESS_ERR, "invalidated by the SEND");
    area_is(d, area, &expected, "after the refused WRITE");
    // Invalid, it can be registered again (same variant even).
    register(d, &mut f.p, &reg);
}
