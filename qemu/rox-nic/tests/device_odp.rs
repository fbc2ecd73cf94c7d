//! On-demand paging: regions registered with `MR_FLAG_ON_DEMAND` start with no page present;
//! an access to a missing page posts `EQE_TYPE_PAGE_FAULT` and waits (requester: the SQ
//! stalls; responder: RNR NAK) until the driver maps the page with `ADMIN_OP_ODP_UPDATE`; an
//! unmapped page is never touched again; a failed page makes accesses fail.

use std::time::Duration;

use rox_nic::testkit::loopback::{Loopback, LoopbackSpec};
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const PD: u32 = 3;
const ALL_ACCESS: u32 =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
const QUIET: Duration = Duration::from_millis(50);

/// A device with two QPs of `qp_type` (their own buffers unused here: each test registers
/// the on-demand regions it needs), event queue 0 drained.
fn pair(qp_type: u8) -> Loopback {
    let mut p = Loopback::new(&LoopbackSpec {
        mac_last: 2,
        qp_type,
        pd: PD,
        qp_access: ALL_ACCESS | ACCESS_FLUSH_GLOBAL,
        buf_len: 4096,
        mr_access: ALL_ACCESS,
    });
    p.d.drain_eq(0);
    p
}

/// An on-demand source region of a page at `iova` (no page present) and an ordinary page of
/// b's to write to: (source key, target, target key).
fn odp_source(p: &mut Loopback, iova: u64) -> (Key, u64, Key) {
    let key_a = reg_odp(&mut p.d, iova, 4096, ACCESS_LOCAL_WRITE);
    let (buf_b, key_b) = p.d.buffer(PD, 4096, ALL_ACCESS);
    (key_a, buf_b, key_b)
}

/// The pair, with b's on-demand page at 0x4000_0000 failed (`ODP_OP_FAIL`), and a WRITE of
/// 16 bytes of a's into it by `wr_id`: (the pair, the on-demand region's key, the WRITE).
fn write_to_a_failed_page() -> (Loopback, Key, impl Fn(u64) -> SqWqe) {
    let mut p = pair(QPT_RC);
    let (buf_a, key_a) = p.d.buffer(PD, 4096, ALL_ACCESS);
    let iova = 0x4000_0000u64;
    let key_b = reg_odp(&mut p.d, iova, 4096, ALL_ACCESS);
    update_page0(&mut p.d, key_b, ODP_OP_FAIL);
    let write = move |wr_id| rdma_wqe(wr_id, WR_RDMA_WRITE, sge(buf_a, 16, key_a), iova, key_b);
    (p, key_b, write)
}

/// A WRITE (`wr_id`) of 64 bytes from a new on-demand region at `iova` (no page present) to
/// an ordinary page of b's: (the on-demand region's key, the WRITE).
fn odp_write(p: &mut Loopback, iova: u64, wr_id: u64) -> (Key, SqWqe) {
    let (key_a, buf_b, key_b) = odp_source(p, iova);
    let write = rdma_wqe(wr_id, WR_RDMA_WRITE, sge(iova, 64, key_a), buf_b, key_b);
    (key_a, write)
}

/// Registers an on-demand region of `len` bytes at iova `iova` (no page present).
fn reg_odp(d: &mut TestDriver, iova: u64, len: u64, access: u32) -> Key {
    let npages = (iova % 4096 + len).div_ceil(4096) as u32;
    let c = RegMrCmd {
        pd: PD,
        access,
        iova,
        length: len,
        pbl: PageList {
            addr: 0,
            npages,
            page_shift: ROX_PAGE_SHIFT as u8,
            level: PBL_LEVEL_1,
            reserved: 0,
        },
        offset_in_first_page: (iova % 4096) as u32,
        flags: MR_FLAG_ON_DEMAND,
    };
    d.run::<RegMr>(c).lkey
}

fn odp_cmd(d: &mut TestDriver, key: Key, first: u32, npages: u32, op: u32, pages: u64) -> u8 {
    let c = OdpUpdateCmd {
        key,
        first_page: first,
        npages,
        op,
        pages,
    };
    d.admin(ADMIN_OP_ODP_UPDATE, payload(&c)).status
}

/// Maps pages `first..` of region `key` to the guest pages `pages` (writable if `write`).
fn map(d: &mut TestDriver, key: Key, first: u32, pages: &[u64], write: bool) {
    let list = d.ram.alloc(pages.len() as u64 * 8, 4096);
    for (i, p) in pages.iter().enumerate() {
        let e = p | ODP_PTE_PRESENT | if write { ODP_PTE_WRITE } else { 0 };
        d.ram.write(list + i as u64 * 8, &e.to_le_bytes());
    }
    let st = odp_cmd(d, key, first, pages.len() as u32, ODP_OP_MAP, list);
    assert_eq!(st, ADMIN_STATUS_SUCCESS);
}

/// `op` (`ODP_OP_UNMAP`, `ODP_OP_FAIL`) on page 0 of region `key`, which the device accepts.
fn update_page0(d: &mut TestDriver, key: Key, op: u32) {
    assert_eq!(odp_cmd(d, key, 0, 1, op, 0), ADMIN_STATUS_SUCCESS);
}

/// Maps page 0 of region `key` to a new guest page (writable if `write`).
fn map_new_page(d: &mut TestDriver, key: Key, write: bool) {
    let page = d.ram.alloc(4096, 4096);
    map(d, key, 0, &[page], write);
}

fn page_fault(d: &mut TestDriver) -> Eqe {
    d.wait_event(0, EQE_TYPE_PAGE_FAULT)
}

/// Waits for a page fault of region `key` with `aux` (`EQE_PAGE_FAULT_*`).
fn expect_page_fault(d: &mut TestDriver, key: Key, aux: u32) {
    let e = page_fault(d);
    assert_eq!((Key::from_raw(e.handle), e.aux), (key, aux));
}

fn no_page_fault(d: &mut TestDriver) {
    std::thread::sleep(QUIET);
    let faults: Vec<Eqe> = d
        .drain_eq(0)
        .into_iter()
        .filter(|e| e.event_type == EQE_TYPE_PAGE_FAULT)
        .collect();
    assert!(faults.is_empty(), "unexpected page faults {faults:?}");
}

#[test]
fn requester_stalls_on_missing_source_page_until_the_driver_maps_it() {
    let mut p = pair(QPT_RC);
    // The region's backing page lives somewhere the driver chooses; iova is user-like.
    let backing = p.d.ram.alloc(4096, 4096);
    let msg = pattern(7, 1000);
    p.d.ram.write(backing + 100, &msg);
    let iova = 0x7f00_0000_0000u64;
    let (key_a, buf_b, key_b) = odp_source(&mut p, iova);
    p.d.post_recv(&mut p.b, 1, &[sge(buf_b, 4096, key_b)]);
    p.post_on_a(&send_wqe(
        2,
        WR_SEND,
        WQE_FLAG_SIGNALED,
        &[sge(iova + 100, 1000, key_a)],
    ));

    expect_page_fault(&mut p.d, key_a, 0); // page 0, read
    p.d.expect_no_cqe(&mut p.cq_a, QUIET);
    // One event per page while the fault is outstanding, though the SQ keeps retrying.
    no_page_fault(&mut p.d);

    map(&mut p.d, key_a, 0, &[backing], false);
    p.d.expect_cqe(&mut p.cq_a, 2, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (1, WC_SUCCESS, 1000));
    assert_eq!(p.d.ram.read(buf_b, 1000), msg);
}

#[test]
fn responder_nak_rnr_until_the_page_is_writable_then_the_write_lands() {
    let mut p = pair(QPT_RC);
    let (buf_a, key_a) = p.d.buffer(PD, 4096, ALL_ACCESS);
    let msg = pattern(9, 2000);
    p.d.ram.write(buf_a, &msg);
    let iova = 0x5555_0000_0000u64;
    let key_b = reg_odp(&mut p.d, iova, 3 * 4096, ALL_ACCESS);
    let pages = [
        p.d.ram.alloc(4096, 4096),
        p.d.ram.alloc(4096, 4096),
        p.d.ram.alloc(4096, 4096),
    ];
    // Read-only mapping: a write still faults (and asks for write access).
    map(&mut p.d, key_b, 0, &pages, false);
    let target = iova + 4096 + 3000; // crosses from page 1 into page 2
    p.post_on_a(&rdma_wqe(
        3,
        WR_RDMA_WRITE,
        sge(buf_a, 2000, key_a),
        target,
        key_b,
    ));
    let e = page_fault(&mut p.d);
    assert_eq!(
        (Key::from_raw(e.handle), e.aux),
        (key_b, 1 | EQE_PAGE_FAULT_WRITE)
    );
    p.d.expect_no_cqe(&mut p.cq_a, QUIET);
    assert!(
        p.d.ram.read(pages[1], 4096).iter().all(|&b| b == 0),
        "nothing written"
    );

    map(&mut p.d, key_b, 1, &pages[1..2], true);
    let e = page_fault(&mut p.d);
    assert_eq!(
        (Key::from_raw(e.handle), e.aux),
        (key_b, 2 | EQE_PAGE_FAULT_WRITE)
    );
    map(&mut p.d, key_b, 2, &pages[2..3], true);
    p.d.expect_cqe(&mut p.cq_a, 3, WC_SUCCESS);
    let mut got = p.d.ram.read(pages[1] + 3000, 1096);
    got.extend(p.d.ram.read(pages[2], 904));
    assert_eq!(got, msg);
    let stats = p.d.query_stats();
    assert_eq!(stats[STAT_PAGE_FAULTS], 2);
}

#[test]
fn unmapped_page_is_never_read_again_and_remapping_serves_the_new_page() {
    let mut p = pair(QPT_RC);
    let (buf_a, key_a) = p.d.buffer(PD, 4096, ALL_ACCESS);
    let iova = 0x1000_0000u64;
    let key_b = reg_odp(&mut p.d, iova, 4096, ALL_ACCESS);
    let old = p.d.ram.alloc(4096, 4096);
    let new = p.d.ram.alloc(4096, 4096);
    p.d.ram.fill(old, 4096, 0x0d);
    p.d.ram.fill(new, 4096, 0x4e);
    map(&mut p.d, key_b, 0, &[old], true);
    let read = |d: &mut TestDriver, qp: &mut TestQp, id: u64| {
        let w = rdma_wqe(id, WR_RDMA_READ, sge(buf_a, 64, key_a), iova + 8, key_b);
        d.post_send(qp, &w);
    };
    read(&mut p.d, &mut p.a, 10);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.ram.read(buf_a, 64), vec![0x0d; 64]);

    // The mmu notifier's invalidation: once the command completes the old page is not used.
    update_page0(&mut p.d, key_b, ODP_OP_UNMAP);
    read(&mut p.d, &mut p.a, 11);
    expect_page_fault(&mut p.d, key_b, 0);
    p.d.expect_no_cqe(&mut p.cq_a, QUIET);
    map(&mut p.d, key_b, 0, &[new], true);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.ram.read(buf_a, 64), vec![0x4e; 64]);

    // Atomics fault too and execute once the page is back.
    update_page0(&mut p.d, key_b, ODP_OP_UNMAP);
    p.d.ram.write(new, &5u64.to_le_bytes());
    p.post_on_a(&with_atomic(
        send_wqe(
            12,
            WR_ATOMIC_FETCH_AND_ADD,
            WQE_FLAG_SIGNALED,
            &[sge(buf_a, 8, key_a)],
        ),
        iova,
        key_b,
        3,
        0,
    ));
    expect_page_fault(&mut p.d, key_b, EQE_PAGE_FAULT_WRITE);
    map(&mut p.d, key_b, 0, &[new], true);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.ram.read(buf_a, 8), 5u64.to_le_bytes());
    assert_eq!(p.d.ram.read(new, 8), 8u64.to_le_bytes());
}

#[test]
fn read_response_into_a_missing_local_page_waits_for_it() {
    let mut p = pair(QPT_RC);
    let (buf_b, key_b) = p.d.buffer(PD, 4096, ALL_ACCESS);
    let msg = pattern(3, 3000);
    p.d.ram.write(buf_b, &msg);
    let iova = 0x2000_0000u64;
    let key_a = reg_odp(&mut p.d, iova, 4096, ALL_ACCESS);
    p.post_on_a(&rdma_wqe(
        20,
        WR_RDMA_READ,
        sge(iova, 3000, key_a),
        buf_b,
        key_b,
    ));
    expect_page_fault(&mut p.d, key_a, EQE_PAGE_FAULT_WRITE);
    p.d.expect_no_cqe(&mut p.cq_a, QUIET);
    let page = p.d.ram.alloc(4096, 4096);
    map(&mut p.d, key_a, 0, &[page], true);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    assert_eq!(p.d.ram.read(page, 3000), msg);
}

#[test]
fn ud_send_from_a_missing_page_waits_for_it() {
    let mut p = pair(QPT_UD);
    let gid = gid_v4(127, 0, 0, 1);
    let iova = 0x3000_0000u64;
    let (key_a, buf_b, key_b) = odp_source(&mut p, iova);
    p.d.post_recv(&mut p.b, 1, &[sge(buf_b, 4096, key_b)]);
    let w = ud_wqe(4, WR_SEND, sge(iova, 256, key_a), gid, p.b.qpn, PAIR_QKEY);
    p.d.post_send(&mut p.a, &w);
    expect_page_fault(&mut p.d, key_a, 0);
    p.d.expect_no_cqe(&mut p.cq_b, QUIET);
    let page = p.d.ram.alloc(4096, 4096);
    p.d.ram.fill(page, 4096, 0x77);
    map(&mut p.d, key_a, 0, &[page], false);
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_SUCCESS);
    let r = p.d.wait_cqe(&mut p.cq_b);
    assert_eq!((r.status, r.byte_len), (WC_SUCCESS, 256 + 40));
    assert_eq!(p.d.ram.read(buf_b + 40, 256), vec![0x77; 256]);
}

#[test]
fn failed_pages_fail_the_access_with_protection_errors() {
    let (mut p, _, write) = write_to_a_failed_page();
    p.post_on_a(&write(30));
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
    no_page_fault(&mut p.d);
}

#[test]
fn odp_update_is_validated() {
    let mut p = pair(QPT_RC);
    let (buf, plain) = p.d.buffer(PD, 4096, ALL_ACCESS);
    let key = reg_odp(&mut p.d, 0x9000_0000, 2 * 4096, ALL_ACCESS);
    let list = p.d.ram.alloc(4096, 4096);
    p.d.ram.write(list, &(buf | ODP_PTE_PRESENT).to_le_bytes());
    let d = &mut p.d;
    assert_eq!(
        odp_cmd(d, plain, 0, 1, ODP_OP_UNMAP, 0),
        ADMIN_STATUS_BAD_HANDLE
    );
    assert_eq!(
        odp_cmd(d, Key::from_raw(0xdead00), 0, 1, ODP_OP_UNMAP, 0),
        ADMIN_STATUS_BAD_HANDLE
    );
    assert_eq!(
        odp_cmd(d, key, 1, 2, ODP_OP_UNMAP, 0),
        ADMIN_STATUS_BAD_PARAM
    );
    assert_eq!(
        odp_cmd(d, key, 0, 0, ODP_OP_UNMAP, 0),
        ADMIN_STATUS_BAD_PARAM
    );
    assert_eq!(
        odp_cmd(d, key, u32::MAX, 2, ODP_OP_UNMAP, 0),
        ADMIN_STATUS_BAD_PARAM
    );
    assert_eq!(odp_cmd(d, key, 0, 1, 99, 0), ADMIN_STATUS_BAD_PARAM);
    // Unaligned or unmapped page addresses.
    d.ram
        .write(list, &((buf + 8) | ODP_PTE_PRESENT).to_le_bytes());
    assert_eq!(
        odp_cmd(d, key, 0, 1, ODP_OP_MAP, list),
        ADMIN_STATUS_BAD_PARAM
    );
    d.ram
        .write(list, &(0xffff_f000_0000u64 | ODP_PTE_PRESENT).to_le_bytes());
    assert_eq!(
        odp_cmd(d, key, 0, 1, ODP_OP_MAP, list),
        ADMIN_STATUS_BAD_DMA
    );
    assert_eq!(
        odp_cmd(d, key, 0, 1, ODP_OP_MAP, 0xffff_f000_0000),
        ADMIN_STATUS_BAD_DMA
    );
    // ON_DEMAND with PHYSICAL is refused.
    let mut c = d.reg_mr_cmd(PD, buf, 4096, ALL_ACCESS);
    c.flags = MR_FLAG_ON_DEMAND | MR_FLAG_PHYSICAL;
    assert_eq!(
        d.admin(ADMIN_OP_REG_MR, payload(&c)).status,
        ADMIN_STATUS_BAD_PARAM
    );
    // A deregistered region's key is gone.
    let h = KeyCmd { key, reserved: 0 };

    d.admin_ok(ADMIN_OP_DEREG_MR, payload(&h));
    assert_eq!(
        odp_cmd(d, key, 0, 1, ODP_OP_UNMAP, 0),
        ADMIN_STATUS_BAD_HANDLE
    );
}

#[test]
fn flush_of_an_on_demand_region_needs_no_present_page() {
    let mut p = pair(QPT_RC);
    let iova = 0x6000_0000u64;
    let key_b = reg_odp(&mut p.d, iova, 4096, ALL_ACCESS | ACCESS_FLUSH_GLOBAL);
    let mut w = send_wqe(40, WR_FLUSH, WQE_FLAG_SIGNALED, &[]);
    w.seg = SqSeg {
        rdma: RdmaSeg {
            remote_addr: iova,
            rkey: key_b,
            length: 64,
            flush_type: FLUSH_TYPE_GLOBAL,
            flush_level: FLUSH_LEVEL_RANGE,
            ..Default::default()
        },
    };
    p.d.post_send(&mut p.a, &w);
    let c = p.d.wait_cqe(&mut p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (40, WC_SUCCESS, WC_OPC_FLUSH)
    );
    no_page_fault(&mut p.d);
}

#[test]
fn a_failed_page_fails_one_access_then_faults_again() {
    let (mut p, key_b, write) = write_to_a_failed_page();
    p.post_on_a(&write(30));
    assert_eq!(p.d.wait_cqe(&mut p.cq_a).status, WC_REM_ACCESS_ERR);
    // The failure was for that access: a new one (on a fresh QP pair) faults the page again.
    let (mut cq_c, _cq_d, mut c, _d) = p.d.qp_pair(QPT_RC, PD, 8, ALL_ACCESS);
    p.d.drain_eq(0);
    p.d.post_send(&mut c, &write(31));
    expect_page_fault(&mut p.d, key_b, EQE_PAGE_FAULT_WRITE);
    map_new_page(&mut p.d, key_b, true);
    p.d.expect_cqe(&mut cq_c, 31, WC_SUCCESS);
}

#[test]
fn read_of_an_untouched_region_faults_once_for_the_whole_range() {
    let mut p = pair(QPT_RC);
    let len = 8 * 4096u64;
    let (buf_a, key_a) = p.d.buffer(PD, len, ALL_ACCESS);
    let iova = 0x6000_0000u64;
    let key_b = reg_odp(&mut p.d, iova, len, ALL_ACCESS);
    p.post_on_a(&rdma_wqe(
        40,
        WR_RDMA_READ,
        sge(buf_a, len as u32, key_a),
        iova,
        key_b,
    ));
    let e = page_fault(&mut p.d);
    assert_eq!(
        (Key::from_raw(e.handle), e.aux, e.fault_count()),
        (key_b, 0, 8)
    );
    let pages: Vec<u64> = (0..8).map(|_| p.d.ram.alloc(4096, 4096)).collect();
    let data = pattern(11, len as usize);
    for (i, pg) in pages.iter().enumerate() {
        p.d.ram.write(*pg, &data[i * 4096..(i + 1) * 4096]);
    }
    // The fault stands for all 8 pages: with only the first mapped, the retries post none.
    map(&mut p.d, key_b, 0, &pages[..1], false);
    no_page_fault(&mut p.d);
    map(&mut p.d, key_b, 1, &pages[1..], false);
    p.d.expect_cqe(&mut p.cq_a, 40, WC_SUCCESS);
    assert_eq!(p.d.ram.read(buf_a, len as usize), data);
    assert_eq!(p.d.query_stats()[STAT_PAGE_FAULTS], 1);
}

/// Page faults never fill EQ 0: while it is half full (here with unconsumed admin completion
/// events) an access to a missing page waits without posting its fault, and posts it once the
/// driver has made room.
#[test]
fn no_page_fault_is_posted_while_eq0_is_half_full() {
    let mut p = pair(QPT_RC);
    let (key_a, write) = odp_write(&mut p, 0x7000_0000u64, 50);
    p.d.drain_eq(0);
    let half = (1u32 << TEST_EQ_LOG_DEPTH) / 2;
    for _ in 0..half {
        p.d.admin_ok(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()));
    }
    p.post_on_a(&write);
    std::thread::sleep(QUIET);
    assert_eq!(p.d.query_stats()[STAT_PAGE_FAULTS], 0, "EQ 0 is half full");
    // The driver consumes EQ 0: the retried access posts its fault.
    expect_page_fault(&mut p.d, key_a, 0);
    map_new_page(&mut p.d, key_a, false);
    p.d.expect_cqe(&mut p.cq_a, 50, WC_SUCCESS);
    assert_eq!(p.d.query_stats()[STAT_PAGE_FAULTS], 1);
}

/// The driver's answer for a fault it cannot serve yet (a key it does not know yet, a
/// transient error) is `ODP_OP_UNMAP` of the page: that ends the outstanding fault, so the
/// waiting access posts a new one rather than waiting forever.
#[test]
fn unmap_of_a_faulting_page_lets_the_access_fault_again() {
    let mut p = pair(QPT_RC);
    let (key_a, write) = odp_write(&mut p, 0x7100_0000u64, 60);
    p.post_on_a(&write);
    let e = page_fault(&mut p.d);
    assert_eq!(
        (Key::from_raw(e.handle), e.aux, e.fault_count()),
        (key_a, 0, 1)
    );
    no_page_fault(&mut p.d);
    update_page0(&mut p.d, key_a, ODP_OP_UNMAP);
    expect_page_fault(&mut p.d, key_a, 0);
    map_new_page(&mut p.d, key_a, false);
    p.d.expect_cqe(&mut p.cq_a, 60, WC_SUCCESS);
}

/// A WRITE past the end of an on-demand region fails with REM_ACCESS_ERR before any byte
/// lands: with every page mapped nothing changes, with none mapped no page fault is posted
/// (the range is refused before a page is looked at).
#[test]
fn write_overrunning_an_on_demand_region_writes_nothing_and_faults_nothing() {
    const LEN: u64 = 8000;
    for mapped in [true, false] {
        let mut p = pair(QPT_RC);
        let src = p.d.ram.alloc(LEN + 1, 4096);
        p.d.ram.write(src, &pattern(4, LEN as usize + 1));
        let src_key = p.d.reg_mr(PD, src, LEN + 1, ALL_ACCESS).unwrap();
        let iova = 0x6666_0000_0000u64;
        let key = reg_odp(&mut p.d, iova, LEN, ALL_ACCESS);
        let pages = [p.d.ram.alloc(4096, 4096), p.d.ram.alloc(4096, 4096)];
        let before: Vec<Vec<u8>> = pages
            .iter()
            .map(|&page| {
                p.d.ram.write(page, &pattern(page, 4096));
                p.d.ram.read(page, 4096)
            })
            .collect();
        if mapped {
            map(&mut p.d, key, 0, &pages, true);
        }
        p.post_on_a(&rdma_wqe(
            1,
            WR_RDMA_WRITE,
            sge(src, LEN as u32 + 1, src_key),
            iova,
            key,
        ));
        let c = p.d.wait_cqe(&mut p.cq_a);
        assert_eq!(
            (c.wr_id, c.status),
            (1, WC_REM_ACCESS_ERR),
            "mapped {mapped}"
        );
        for (i, (page, before)) in pages.iter().zip(&before).enumerate() {
            let after = p.d.ram.read(*page, 4096);
            let changed = after.iter().zip(before).position(|(a, b)| a != b);
            assert_eq!(
                changed, None,
                "mapped {mapped}: page {i} changed at this offset"
            );
        }
        no_page_fault(&mut p.d);
    }
}
