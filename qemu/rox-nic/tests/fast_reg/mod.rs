//! What the fast-registration tests share (`device_fast_reg.rs`, `device_fast_reg_refused.rs`):
//! a device with one connected RC pair and ordinary buffers, fast-registration regions and their
//! `WR_REG_MR` / `LOCAL_INV` work requests, and guarded areas to check every byte against.
#![allow(dead_code)] // each test file uses part of it

pub use rox_nic::testkit::*;
pub use rox_nic::DeviceConfig;
pub use rox_uapi::admin::*;
pub use rox_uapi::queue::*;
pub use rox_uapi::verbs::*;

pub const PD: u32 = 3;
pub const OTHER_PD: u32 = PD + 1;
pub const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
pub const BUF: u64 = 64 * 1024;
/// What the bytes around (and inside, before any write) a registration hold.
pub const GUARD: u8 = 0xa5;
pub const SMALL: u64 = 1 << PAGE_SHIFT_MIN;

/// One connected RC pair on a device: `a` is the initiator, `b` owns the fast-registration
/// regions (and posts the REG_MR / LOCAL_INV WQEs).
pub struct Pair {
    pub cq_a: TestCq,
    pub cq_b: TestCq,
    pub a: TestQp,
    pub b: TestQp,
}

pub struct Fx {
    pub d: TestDriver,
    pub p: Pair,
    /// An ordinary buffer and MR (the initiator's sources and destinations).
    pub buf_a: u64,
    pub key_a: Key,
    /// An ordinary buffer and MR of b's (receives that do not go into a fast region).
    pub buf_b: u64,
    pub key_b: Key,
}

pub fn fx() -> Fx {
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
pub fn pair_on(d: &mut TestDriver, pd: u32) -> Pair {
    let (cq_a, cq_b, a, b) = d.qp_pair(QPT_RC, pd, 8, ALL_ACCESS | ACCESS_FLUSH_GLOBAL);
    Pair { cq_a, cq_b, a, b }
}

/// `ib_alloc_mr(IB_MR_TYPE_MEM_REG)`: a fast-registration region of `capacity` pages.
pub fn alloc_fast_mr(d: &mut TestDriver, pd: u32, capacity: u32) -> Result<Key, u8> {
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

pub fn dereg(d: &mut TestDriver, key: Key) -> u8 {
    d.admin(ADMIN_OP_DEREG_MR, payload(&KeyCmd { key, reserved: 0 }))
        .status
}

/// `ib_inc_rkey`: the next variant of a key (the index part stays).
pub fn inc_key(key: Key) -> Key {
    key.with_variant(key.variant().wrapping_add(1))
}

/// A page list in guest memory (what the driver's `map_mr_sg` fills).
pub fn write_page_list(d: &mut TestDriver, pages: &[u64]) -> u64 {
    let list = d.ram.alloc(pages.len() as u64 * 8, 8);
    for (i, p) in pages.iter().enumerate() {
        d.ram.write(list + i as u64 * 8, &p.to_le_bytes());
    }
    list
}

/// A registration: `pages` (DMA addresses of pages of `1 << page_shift` bytes) mapped at
/// `iova` (which sits `iova & (page size - 1)` into the first page) for `length` bytes.
#[derive(Clone, Debug)]
pub struct Reg {
    pub key: Key,
    pub iova: u64,
    pub length: u64,
    pub pages: Vec<u64>,
    pub page_shift: u8,
    pub access: u32,
}

impl Reg {
    /// Where `va` of the registration lives in guest memory.
    pub fn place(&self, va: u64) -> u64 {
        let mask = (1u64 << self.page_shift) - 1;
        let off = va - self.iova + (self.iova & mask);
        self.pages[(off >> self.page_shift) as usize] + (off & mask)
    }

    /// The WQE; `npages` / `page_list` as given (bad-input cases change them).
    pub fn wqe_with(&self, wr_id: u64, page_list: u64, npages: u32) -> SqWqe {
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

    pub fn wqe(&self, d: &mut TestDriver, wr_id: u64) -> SqWqe {
        let list = write_page_list(d, &self.pages);
        self.wqe_with(wr_id, list, self.pages.len() as u32)
    }
}

pub fn post_wait(d: &mut TestDriver, qp: &mut TestQp, cq: &mut TestCq, w: &SqWqe) -> Cqe {
    d.post_send(qp, w);
    d.wait_cqe(cq)
}

/// Posts the registration on `p.b` and expects it to succeed.
pub fn register(d: &mut TestDriver, p: &mut Pair, reg: &Reg) {
    let w = reg.wqe(d, 100);
    let c = post_wait(d, &mut p.b, &mut p.cq_b, &w);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (100, WC_SUCCESS, WC_OPC_REG_MR),
        "REG_MR {reg:x?}"
    );
}

pub fn inv_wqe(wr_id: u64, rkey: Key) -> SqWqe {
    with_rdma(
        send_wqe(wr_id, WR_LOCAL_INV, WQE_FLAG_SIGNALED, &[]),
        0,
        rkey,
    )
}

/// An RDMA WRITE or READ from `p.a` of `local` to/from `(remote, rkey)`; its completion.
pub fn rdma(d: &mut TestDriver, p: &mut Pair, op: u8, local: Sge, remote: u64, rkey: Key) -> Cqe {
    let w = rdma_wqe(1, op, local, remote, rkey);
    post_wait(d, &mut p.a, &mut p.cq_a, &w)
}

/// A signaled RDMA WRITE of `len` bytes from `src` (buffer and key) on QP a of `p` to `iova`
/// through `rkey`: its completion.
pub fn write_from(
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
pub fn read_back(
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
pub fn guarded_area(d: &mut TestDriver, shift: u8, npages: u64) -> (u64, Vec<u8>) {
    let size = 1u64 << shift;
    let area = d.ram.alloc(npages * size, size);
    d.ram.fill(area, (npages * size) as usize, GUARD);
    (area, vec![GUARD; (npages * size) as usize])
}

/// What `area` must hold after `data` was placed at `va` of `reg`.
pub fn expect_placed(expected: &mut [u8], area: u64, reg: &Reg, va: u64, data: &[u8]) {
    for (i, &b) in data.iter().enumerate() {
        expected[(reg.place(va + i as u64) - area) as usize] = b;
    }
}

/// The registration the tests share: three scattered, out-of-order 4 KiB pages of a guarded
/// area of eight, an iova whose high 32 bits have nothing to do with the DMA addresses (as
/// NFS/RDMA rewrites them) sitting 0x100 bytes into the first page.
pub fn scattered_reg(d: &mut TestDriver, key: Key) -> (Reg, u64, Vec<u8>) {
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
pub fn register_scattered(
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

pub fn area_is(d: &TestDriver, area: u64, expected: &[u8], what: &str) {
    let got = d.ram.read(area, expected.len());
    if let Some(i) = got.iter().zip(expected).position(|(g, e)| g != e) {
        panic!(
            "{what}: byte {i:#x} of the area is {:#x}, expected {:#x}",
            got[i], expected[i]
        );
    }
}

/// Posts `w` (a REG_MR or LOCAL_INV expected to fail) and a SEND behind it on `p.b`: the first
/// completes with MW_BIND_ERR and `opcode`, the QP goes to ERR and the SEND is flushed.
pub fn expect_refused(d: &mut TestDriver, p: &mut Pair, w: &SqWqe, opcode: u8, what: &str) {
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
