//! The retransmission timer counts what the peer takes, not the device's own thread losing its
//! core: 255 RC QPs of one device WRITE to a second device over one port while the sending
//! device's data-path thread is held (`hold_before_timers`, longer than the QPs' whole ACK
//! timeout) in the pass that queued their packets or read the wire before their ACKs came
//! (roce/engine/rto/clock.rs). Nothing is lost and the peer answers at once: any probe,
//! timeout or resend is the device's own doing.

use std::time::{Duration, Instant};

use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
/// One 4 KiB packet a WRITE.
const MSG: u64 = 4096;
/// With the trigger's packet, the port's whole budget of one pass (`SCHED_QUEUE_TARGET` and
/// `PORT_INFLIGHT_LIMIT`, 256): every packet may go in the pass that finds its doorbell.
const QPS: u64 = 255;
/// 268 ms: before a first round trip the RTO is the whole attribute, and no tail probe.
const ACK_TIMEOUT: u8 = 16;
/// Longer than the ACK timeout (and than any RTO within it).
const STALL: Duration = Duration::from_millis(400);

#[test]
fn a_stall_of_the_senders_own_thread_times_out_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let subnet = 31;
    let (mut a, mut b, mut a_cq, mut qps) = pair::rc_qps_over_dgram(
        dir.path(),
        &pair::RcQps::new(subnet, QPS, (PD, ACCESS)),
        10,
        ACK_TIMEOUT,
    );
    // The trigger: a QP of the sending device connected to itself. Its packet comes back
    // through the device's loopback, which the pass's receive takes: the stall starts there,
    // after the doorbells' packets were built and the wire read, before the timers and the
    // port's flush.
    let mut trigger = a.create_qp(QPT_RC, PD, a_cq.id, a_cq.id, SRQ_NONE);
    let own = gid_v4(127, 0, subnet, 1);
    let params = ConnectParams {
        mtu: MTU_4096,
        timeout: ACK_TIMEOUT,
        ..Default::default()
    };
    a.connect_with(&trigger, own, trigger.qpn, ACCESS, &params);
    let total = (QPS + 2) * MSG;
    let (src, src_key) = a.buffer(PD, total, ACCESS);
    let (dst, dst_key) = b.buffer(PD, total, ACCESS);
    let data = pattern(7, total as usize);
    a.ram.write(src, &data);

    let write = |at: u64, to: u64, key: Key| {
        let w = send_wqe(
            at,
            WR_RDMA_WRITE,
            WQE_FLAG_SIGNALED,
            &[sge(src + at, MSG as u32, src_key)],
        );
        with_rdma(w, to, key)
    };
    // A first hold keeps the thread while every doorbell is rung, so that the next pass
    // finds them all and builds every packet (the trigger's last), then is held again.
    let shared = a.shared().clone();
    let hold = &shared.hold_before_timers;
    let _release = hold.release_on_drop();
    let held = || hold.is_held();
    hold.arm();
    let at = QPS * MSG;
    a.post_send(&mut trigger, &write(at, src + at, src_key));
    wait_until(held, "the data path never took the trigger's packet");
    for (q, qa) in qps.iter_mut().enumerate() {
        let at = q as u64 * MSG;
        a.post_send(qa, &write(at, dst + at, dst_key));
    }
    let at = (QPS + 1) * MSG;
    a.post_send(&mut trigger, &write(at, src + at, src_key));
    // Armed again: this pass goes on, the next that receives (the trigger's second packet,
    // behind every QP's) is held.
    hold.arm();
    wait_until(held, "the pass that built the QPs' packets was never held");
    std::thread::sleep(STALL);
    hold.release();
    for n in 0..QPS + 2 {
        let c = a.wait_cqe(&mut a_cq);
        assert_eq!(c.status, WC_SUCCESS, "completion {n} (wr_id {})", c.wr_id);
    }
    assert!(
        b.ram.read(dst, (QPS * MSG) as usize) == data[..(QPS * MSG) as usize],
        "the received bytes differ from the sent ones"
    );
    let c = settled(&mut a, &mut b);
    let sender = a.query_stats();
    assert_eq!(
        (
            sender[STAT_TIMEOUTS],
            sender[STAT_RETRANSMITS],
            c.roce_adp_retrans
        ),
        (0, 0, 0),
        "ACK timeouts, retransmissions and tail probes of the sending device"
    );
    assert_eq!(
        b.query_counters(1).unwrap().duplicate_request,
        0,
        "the peer got no request twice"
    );
}

/// The sending device's counters once the peer took every frame it sent and every tail probe
/// was answered (a probe's answer may be on its way at the last completion); at most 5 s.
fn settled(a: &mut TestDriver, b: &mut TestDriver) -> PortCounters {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for (d, name) in [(&*a, "sender"), (&*b, "peer")] {
            let code = d.read_reg(REG_FATAL_CODE);
            assert_eq!(code, FATAL_NONE, "the {name} device is fatal");
        }
        let c = a.query_counters(1).unwrap();
        let peer = b.query_counters(1).unwrap();
        // Each command's completion event: drained, or a long wait overflows the EQ.
        a.drain_eq(0);
        b.drain_eq(0);
        let loopback = 4; // the trigger's WRITEs and their ACKs, sent and taken by a alone
        let settled = c.xmit_packets == peer.rcv_packets + loopback
            && peer.duplicate_request == c.roce_adp_retrans;
        if settled || Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
