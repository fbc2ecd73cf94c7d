//! Every CQE names the WQE it completes by its queue index (`Cqe::wqe_index`): the driver
//! retires its kernel queues by it, since consumers may keep several work requests with one
//! wr_id outstanding.

use std::time::Duration;

use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

const PD: u32 = 3;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const BUF: u64 = 64 * 1024;

/// The next `n` CQEs of `cq`: (wr_id, status, wqe_index) each.
fn next_cqes(d: &mut TestDriver, cq: &mut TestCq, n: usize) -> Vec<(u64, u8, u16)> {
    (0..n)
        .map(|_| {
            let c = d.wait_cqe(cq);
            (c.wr_id, c.status, c.wqe_index)
        })
        .collect()
}

#[test]
fn sends_and_receives_sharing_one_wr_id_complete_with_their_own_indices() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 1]));
    let (mut cq_a, mut cq_b, mut a, mut b) = d.qp_pair(QPT_RC, PD, 8, ACCESS);
    let (buf, key) = d.buffer(PD, BUF, ACCESS);
    for n in 0..3 {
        d.post_recv(&mut b, 42, &[sge(buf + 4096 * (n + 1), 64, key)]);
    }
    // Sends 0 and 2 signaled, 1 not; all carry wr_id 7.
    let s = [sge(buf, 32, key)];
    for flags in [WQE_FLAG_SIGNALED, 0, WQE_FLAG_SIGNALED] {
        d.write_send(&mut a, &send_wqe(7, WR_SEND, flags, &s));
    }
    let qa = a;
    d.ring_sq(&qa);
    assert_eq!(
        next_cqes(&mut d, &mut cq_a, 2),
        [(7, WC_SUCCESS, 0), (7, WC_SUCCESS, 2)]
    );
    assert_eq!(
        next_cqes(&mut d, &mut cq_b, 3),
        [
            (42, WC_SUCCESS, 0),
            (42, WC_SUCCESS, 1),
            (42, WC_SUCCESS, 2)
        ]
    );
    d.expect_no_cqe(&mut cq_a, Duration::from_millis(20));
}

#[test]
fn an_undecodable_wqe_and_the_flush_behind_it_name_their_indices() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, 1]));
    let (mut cq_a, _cq_b, mut a, _b) = d.qp_pair(QPT_RC, PD, 8, ACCESS);
    let (buf, key) = d.buffer(PD, BUF, ACCESS);
    let s = [sge(buf, 32, key)];
    let mut bad = send_wqe(9, WR_SEND, WQE_FLAG_SIGNALED, &s);
    bad.opcode = 0x7f;
    d.write_send(&mut a, &bad);
    // Unsignaled, still flushed with its index.
    d.write_send(&mut a, &send_wqe(9, WR_SEND, 0, &s));
    let qa = a;
    d.ring_sq(&qa);
    let c = d.wait_cqe(&mut cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.vendor_err, c.wqe_index),
        (9, WC_LOC_QP_OP_ERR, VENDOR_ERR_BAD_OPCODE, 0)
    );
    let c = d.wait_cqe(&mut cq_a);
    assert_eq!((c.wr_id, c.status, c.wqe_index), (9, WC_WR_FLUSH_ERR, 1));
}
