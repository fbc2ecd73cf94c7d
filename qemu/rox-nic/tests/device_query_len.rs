//! Every query (QUERY_DEVICE, _PORT, _QP, _STATS, _COUNTERS) writes at most the driver's buffer
//! (`QueryCmd::resp_len`), the prefix of its response, answers how many bytes it wrote, and
//! refuses a length of 0 (the word older drivers left 0 as reserved) without writing anything.

use core::mem::size_of;
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x57];
const PD: u32 = 3;
/// What the test RAM holds where a query must not write.
const UNTOUCHED: u8 = 0xa5;
const PAGE: usize = ROX_PAGE_SIZE;

/// A device with one QP, and every query it answers: (opcode, index, response size).
fn device_and_queries() -> (TestDriver, [(u8, u32, usize); 5]) {
    let mut d = TestDriver::new(DeviceConfig::new(MAC));
    let cq = d.create_cq(6);
    let qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    let port = u32::from(PORT_NUM);
    let queries = [
        (ADMIN_OP_QUERY_DEVICE, 0, size_of::<DeviceAttr>()),
        (ADMIN_OP_QUERY_PORT, port, size_of::<PortAttr>()),
        (ADMIN_OP_QUERY_QP, qp.qpn.get(), size_of::<QpAttr>()),
        (ADMIN_OP_QUERY_STATS, 0, size_of::<Stats>()),
        (ADMIN_OP_QUERY_COUNTERS, port, size_of::<PortCounters>()),
    ];
    (d, queries)
}

/// Runs a query into a page filled with [`UNTOUCHED`], telling the device it is `resp_len`
/// bytes long: the completion and the whole page after it.
fn query_into(d: &mut TestDriver, opcode: u8, index: u32, resp_len: u32) -> (AdminCpl, Vec<u8>) {
    let resp = d.ram.alloc(PAGE as u64, PAGE as u64);
    d.ram.fill(resp, PAGE, UNTOUCHED);
    let cmd = QueryCmd {
        index,
        resp_len,
        resp_addr: resp,
    };
    let cpl = d.admin(opcode, payload(&cmd));
    (cpl, d.ram.read(resp, PAGE))
}

fn untouched(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == UNTOUCHED)
}

#[test]
fn a_shorter_stats_buffer_gets_its_counters_and_nothing_after_them() {
    // A resp_len-aware (version-2) driver built against fewer counters than the device has,
    // as when a later device appends some: its buffer holds 37. Not session 18's 37-counter
    // rox.ko: that one is version 1 and stops at probe.
    const SHORTER_COUNT: usize = 37;
    const _: () = assert!(SHORTER_COUNT < STATS_COUNT);
    let (mut d, _) = device_and_queries();
    let len = SHORTER_COUNT * size_of::<u64>();
    let (cpl, page) = query_into(&mut d, ADMIN_OP_QUERY_STATS, 0, len as u32);
    assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS);
    assert_eq!(cpl.result0 as usize, STATS_COUNT, "the device's own count");
    assert_eq!(cpl.result1 as usize, len, "bytes written");
    assert!(untouched(&page[len..]), "written past the shorter buffer");
    // The prefix is the counters: the admin commands so far posted events on EQ 0.
    let eqes = u64::from_le_bytes(page[STAT_EQES * 8..][..8].try_into().unwrap());
    assert!((1..1000).contains(&eqes), "STAT_EQES = {eqes:#x}");
}

#[test]
fn every_query_writes_the_prefix_that_fits_and_says_how_much() {
    let (mut d, queries) = device_and_queries();
    for (opcode, index, size) in queries {
        let (cpl, whole) = query_into(&mut d, opcode, index, PAGE as u32);
        assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS, "query {opcode:#x}");
        assert_eq!(
            cpl.result1 as usize, size,
            "query {opcode:#x}: bytes written"
        );
        assert!(
            untouched(&whole[size..]),
            "query {opcode:#x} wrote past its response"
        );
        // An odd length cuts the response inside a field: exactly those bytes still.
        const SHORT: usize = 10;
        let (cpl, page) = query_into(&mut d, opcode, index, SHORT as u32);
        assert_eq!(
            cpl.status, ADMIN_STATUS_SUCCESS,
            "query {opcode:#x}, {SHORT} bytes"
        );
        assert_eq!(
            cpl.result1 as usize, SHORT,
            "query {opcode:#x}: bytes written"
        );
        // (The first 10 bytes of each response do not move on an idle device.)
        assert_eq!(
            page[..SHORT],
            whole[..SHORT],
            "query {opcode:#x}: its prefix"
        );
        assert!(
            untouched(&page[SHORT..]),
            "query {opcode:#x} wrote past {SHORT} bytes"
        );
    }
}

#[test]
fn a_query_without_a_buffer_length_is_refused_and_writes_nothing() {
    let (mut d, queries) = device_and_queries();
    for (opcode, index, _) in queries {
        let (cpl, page) = query_into(&mut d, opcode, index, 0);
        assert_eq!(cpl.status, ADMIN_STATUS_BAD_PARAM, "query {opcode:#x}");
        assert_eq!((cpl.result0, cpl.result1), (0, 0), "query {opcode:#x}");
        assert!(
            untouched(&page),
            "query {opcode:#x} wrote into a buffer of no length"
        );
    }
    // The device still answers.
    assert_eq!(d.query_port().state, PORT_ACTIVE);
}
