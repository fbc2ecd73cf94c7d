//! What the trace costs, measured by instruction counts rather than time (a 2-core shared
//! host's timings cannot see a few instructions per WQE): a fixed workload, one RDMA WRITE at
//! a time between two devices on `dgram` ports, with the trace off or on. Run by hand under
//! callgrind, counting only the data path's work (docs/debugging.md, "What the trace costs"):
//!
//! ```text
//! ROX_TRACE_COST=off|on valgrind --tool=callgrind --toggle-collect='*process_sq*' \
//!     --toggle-collect='*receive_port*' <rox-nic lib test binary> \
//!     trace::cost::writes_for_callgrind --ignored --exact --test-threads=1
//! ```

use crate::testkit::pair::{connected_pair, SideSpec};
use crate::testkit::{rdma_wqe, sge, ConnectParams};
use rox_uapi::verbs::*;

/// WRITEs in the workload, and their size.
const WRITES: u64 = 2000;
const BYTES: u32 = 8;

#[test]
#[ignore = "a workload for callgrind, run by hand (see the module's documentation)"]
fn writes_for_callgrind() {
    let on = match std::env::var("ROX_TRACE_COST").as_deref() {
        Ok("on") => true,
        Ok("off") | Err(_) => false,
        Ok(other) => panic!("ROX_TRACE_COST={other}: 'on' or 'off'"),
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = SideSpec {
        subnet: 31,
        qp_type: QPT_RC,
        pd: 1,
        cq_log_depth: 8,
        buf_len: 1 << 16,
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        faults: None,
    };
    // Under callgrind everything runs ~50 times slower: a 4.4 s ACK timeout (exponent 20)
    // keeps timeouts out of the workload.
    let params = ConnectParams {
        timeout: 20,
        ..ConnectParams::default()
    };
    let (mut a, b) = connected_pair(dir.path(), &spec, &params);
    for d in [&a.d, &b.d] {
        if on {
            d.shared().wqe_trace.start(Some(1 << 12));
        }
    }
    for i in 0..WRITES {
        let w = rdma_wqe(i, WR_RDMA_WRITE, sge(a.buf, BYTES, a.key), b.buf, b.key);
        a.d.post_send(&mut a.qp, &w);
        let cqe = a.d.wait_cqe(&mut a.cq);
        assert_eq!((cqe.status, cqe.wr_id), (WC_SUCCESS, i));
    }
    assert_eq!(a.d.shared().wqe_trace.is_on(), on);
    // Under callgrind the adaptive RTO's tail probes may fire: they add work to the counts,
    // so a run says how many there were (compare runs with the same number).
    let stats = a.d.query_stats();
    let retransmits = stats[rox_uapi::admin::STAT_RETRANSMITS];
    eprintln!(
        "trace {}: {WRITES} WRITEs of {BYTES} B, {retransmits} retransmissions",
        if on { "on" } else { "off" }
    );
}
