//! The WQE trace through the real path: two rox-nic devices wired back to back through
//! `dgram` ports, one RDMA WRITE and one SEND with the trace on, exported as Chrome
//! trace-event JSON: one slice per WQE on its QP's track, its stages in order; with the
//! trace off, nothing is recorded.

use std::path::Path;
use std::time::{Duration, Instant};

use rox_nic::testkit::pair::*;
use rox_nic::testkit::*;
use rox_nic::trace::lives::{lives, Life};
use rox_nic::trace::{chrome, report, Dump, Kind, CQE_RECV};
use rox_uapi::queue::*;
use rox_uapi::regs::CQ_ARM_NEXT;
use rox_uapi::verbs::*;
use serde_json::Value;

const PD: u32 = 1;
const ALL_ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const BUF: u64 = 1 << 16;
const WRITE_BYTES: u32 = 10_000;
const SEND_BYTES: u32 = 3_000;
const WRITE_ID: u64 = 0x77;
const SEND_ID: u64 = 0x78;

fn connected(dir: &Path) -> (Side, Side) {
    let spec = SideSpec {
        subnet: 2,
        qp_type: QPT_RC,
        pd: PD,
        cq_log_depth: 8,
        buf_len: BUF,
        access: ALL_ACCESS,
        faults: None,
    };
    connected_pair(dir, &spec, &ConnectParams::default())
}

/// Posts `wqe` on `a` with its CQ armed; waits for its CQE and its completion interrupt.
fn post_and_complete(a: &mut Side, wqe: &SqWqe) {
    a.d.arm_cq(&mut a.cq, CQ_ARM_NEXT);
    a.d.post_send(&mut a.qp, wqe);
    let cqe = a.d.wait_cqe(&mut a.cq);
    assert_eq!((cqe.status, cqe.wr_id), (WC_SUCCESS, wqe.wr_id));
    assert!(a.d.wait_vector(COMP_EQ, TIMEOUT), "completion interrupt");
    a.d.drain_eq(COMP_EQ);
    a.d.ack_eq(COMP_EQ, true);
}

/// One RDMA WRITE, then one SEND (received by `b`), from `a`.
fn write_then_send(a: &mut Side, b: &mut Side) {
    let w = rdma_wqe(
        WRITE_ID,
        WR_RDMA_WRITE,
        sge(a.buf, WRITE_BYTES, a.key),
        b.buf,
        b.key,
    );
    post_and_complete(a, &w);
    b.d.post_recv(&mut b.qp, 5, &[sge(b.buf, SEND_BYTES, b.key)]);
    let s = send_wqe(
        SEND_ID,
        WR_SEND,
        WQE_FLAG_SIGNALED,
        &[sge(a.buf, SEND_BYTES, a.key)],
    );
    post_and_complete(a, &s);
    let r = b.d.wait_cqe(&mut b.cq);
    assert_eq!((r.status, r.byte_len), (WC_SUCCESS, SEND_BYTES));
}

/// `d`'s trace once it holds a record `until` accepts (the data path writes a record just
/// after the guest-visible effect the test waited for).
fn dump_once(d: &TestDriver, until: impl Fn(&Dump) -> bool) -> Dump {
    let start = Instant::now();
    loop {
        let dump = d.shared().wqe_trace.dump();
        if until(&dump) {
            return dump;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "trace never got the record: {dump:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn stages_in_order(l: &Life) {
    let ts = [
        Some(l.doorbell),
        Some(l.fetch),
        l.first_frame,
        l.last_frame,
        l.response,
        l.cqe,
        l.eqe,
        l.interrupt,
    ];
    assert!(ts.iter().all(Option::is_some), "every stage seen: {l:?}");
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "stages in order: {l:?}"
    );
}

#[test]
fn a_write_and_a_send_each_leave_one_slice_with_their_stages_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = connected(dir.path());
    a.d.shared().wqe_trace.start(Some(4096));
    b.d.shared().wqe_trace.start(Some(4096));
    write_then_send(&mut a, &mut b);
    let da = a.d.shared().wqe_trace.dump();
    let is_recv_cqe = |r: &rox_nic::trace::Record| {
        r.kind() == Some(Kind::Cqe) && r.flags & CQE_RECV != 0 && r.wr_id == 5
    };
    let db = dump_once(&b.d, |d| d.records.iter().any(is_recv_cqe));
    let dumps = [da, db];
    // For docs/debugging.md: the dumps as rox-nic writes them, for rox-trace.
    if let Some(dir) = std::env::var_os("ROX_TEST_TRACE_DIR") {
        let dir = Path::new(&dir);
        a.d.shared()
            .wqe_trace
            .write_dump(&dir.join("a.wqe-trace"))
            .unwrap();
        b.d.shared()
            .wqe_trace
            .write_dump(&dir.join("b.wqe-trace"))
            .unwrap();
    }

    let l = lives(&dumps);
    assert_eq!(l.len(), 2, "one life per WQE of a, none on b: {l:?}");
    let (write, send) = (&l[0], &l[1]);
    assert_eq!(
        (write.wr_id, write.bytes, write.wr_opcode),
        (WRITE_ID, WRITE_BYTES, WR_RDMA_WRITE)
    );
    assert_eq!(
        (send.wr_id, send.bytes, send.wr_opcode),
        (SEND_ID, SEND_BYTES, WR_SEND)
    );
    for life in [write, send] {
        assert_eq!((life.device, life.qpn), (0, a.qp.qpn.get()));
        assert_eq!(life.status, Some(WC_SUCCESS));
        stages_in_order(life);
    }
    // Nothing is lost back to back, but a loaded host can starve the peer's thread past the
    // ACK timeout: whatever the device rewound (ACK timeouts and NAKs, its counter) is what
    // the lives show, one record each.
    let rewinds = a.d.query_stats()[rox_uapi::admin::STAT_RETRANSMITS];
    assert_eq!(
        u64::from(write.retransmits) + u64::from(send.retransmits),
        rewinds,
        "the trace's resends against the device's rewinds: {l:?}"
    );
    // Packets carry at most 4096 bytes of payload.
    assert!(write.frames >= WRITE_BYTES.div_ceil(4096), "{write:?}");
    assert!(send.frames >= 1, "{send:?}");

    let names = ["a".to_string(), "b".to_string()];
    let doc = chrome::export(&dumps, &names);
    // What a viewer loads: the document as text, parsed back.
    let doc: Value = serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), 2, "{slices:?}");
    for (s, (name, wr_id)) in slices.iter().zip([
        (format!("RDMA_WRITE {WRITE_BYTES} B"), WRITE_ID),
        (format!("SEND {SEND_BYTES} B"), SEND_ID),
    ]) {
        assert_eq!(s["pid"], 1, "device a");
        assert_eq!(s["tid"], a.qp.qpn.get(), "a's QP track");
        assert_eq!(s["name"], name.as_str());
        assert_eq!(s["args"]["wr_id"], wr_id);
        assert!(s["dur"].as_f64().unwrap() > 0.0);
        for stage in [
            "doorbell->fetch_us",
            "last frame->ACK_us",
            "CQE->interrupt_us",
        ] {
            assert!(
                s["args"]["stages"][stage].as_f64().unwrap() >= 0.0,
                "{stage}: {s}"
            );
        }
    }
    assert!(slices[0]["ts"].as_f64() < slices[1]["ts"].as_f64());
    let track_names: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(track_names.contains(&format!("QP {:#x}", a.qp.qpn.get()).as_str()));
    // b answered: its frames out are ACKs on its QP's track, and its receive CQE is there.
    let b_acks = events
        .iter()
        .filter(|e| e["pid"] == 2 && e["name"] == "frame out" && e["args"]["opcode"] == "ACK")
        .count();
    assert!(b_acks >= 2, "b acknowledged the WRITE and the SEND");
    // Every packet a sent reached b: b saw them arrive, on its QP's track.
    let a_requests = events
        .iter()
        .filter(|e| e["pid"] == 1 && e["name"] == "frame out")
        .count();
    let b_arrivals = events
        .iter()
        .filter(|e| e["pid"] == 2 && e["name"] == "frame in" && e["tid"] == b.qp.qpn.get())
        .count();
    assert_eq!(b_arrivals, a_requests);

    let timeline = report::timeline(&dumps, &names);
    assert!(
        timeline.contains("=> RDMA_WRITE 10000 B wr_id=0x77:"),
        "{timeline}"
    );
    let hist = report::histograms(&dumps);
    assert!(hist.starts_with("2 WQEs"), "{hist}");
    assert!(hist.contains("last frame->ACK: n=2"), "{hist}");
}

#[test]
fn with_the_trace_off_nothing_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = connected(dir.path());
    write_then_send(&mut a, &mut b);
    assert!(!a.d.shared().wqe_trace.is_on());
    assert_eq!(a.d.shared().wqe_trace.dump(), Dump::default());
    assert_eq!(b.d.shared().wqe_trace.dump(), Dump::default());
}
