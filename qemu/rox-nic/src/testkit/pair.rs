//! Two devices back to back: each on a port over one datagram wire (device 1 and device 2 send
//! to each other's socket), each with a CQ, one QP and a registered buffer — the set-up of
//! every test (and the benchmark) that runs traffic between two whole devices; or with many
//! RC QPs of one connected to as many of the other ([`rc_qps_over_dgram`]).

use std::path::Path;

use rox_uapi::admin::SRQ_NONE;

use super::loopback::ALL_ACCESS;
use super::{
    gid_v4, port_device, port_device_config, ConnectParams, Key, PortConfig, TestCq, TestDriver,
    TestQp,
};
use crate::device::FaultConfig;
use crate::port::limit::dgram_wire;

/// One of the two devices, with what a test drives on it.
pub struct Side {
    pub d: TestDriver,
    pub cq: TestCq,
    pub qp: TestQp,
    /// The registered buffer and its key.
    pub buf: u64,
    pub key: Key,
}

/// What each side has.
#[derive(Clone, Copy, Debug)]
pub struct SideSpec {
    /// The devices own GIDs 127.0.`subnet`.1 and .2.
    pub subnet: u8,
    pub qp_type: u8,
    pub pd: u32,
    pub cq_log_depth: u8,
    pub buf_len: u64,
    /// The buffer's access, and what each QP allows its peer.
    pub access: u32,
    /// Faults injected on what each device sends.
    pub faults: Option<FaultConfig>,
}

impl Side {
    /// Device `last` (1 or 2) of the pair on the wire in `dir`, with its CQ, QP and buffer.
    pub fn new(dir: &Path, last: u8, spec: &SideSpec) -> Side {
        let (one, two) = dgram_wire(dir, "1.sock", "2.sock");
        let link = if last == 1 { one } else { two };
        let mut d = port_device(link, spec.subnet, last, spec.faults);
        let cq = d.create_cq(spec.cq_log_depth);
        let qp = d.create_qp(spec.qp_type, spec.pd, cq.id, cq.id, SRQ_NONE);
        let (buf, key) = d.buffer(spec.pd, spec.buf_len, spec.access);
        Side {
            d,
            cq,
            qp,
            buf,
            key,
        }
    }

    /// The GID of device `last` of a pair on `subnet`.
    pub fn gid(subnet: u8, last: u8) -> [u8; 16] {
        gid_v4(127, 0, subnet, last)
    }
}

/// Both sides, their QPs connected to each other (RTS) with `params`.
pub fn connected_pair(dir: &Path, spec: &SideSpec, params: &ConnectParams) -> (Side, Side) {
    let (mut a, mut b) = (Side::new(dir, 1, spec), Side::new(dir, 2, spec));
    let (qa, qb) = (a.qp, b.qp);
    let access = spec.access;
    a.d.connect_with(&qa, Side::gid(spec.subnet, 2), qb.qpn, access, params);
    b.d.connect_with(&qb, Side::gid(spec.subnet, 1), qa.qpn, access, params);
    (a, b)
}

/// Deep RC QPs between devices `a` and `b` (GIDs 127.0.`subnet`.1 and .2) in PD `pd`, for
/// whole windows of big WRITEs and READs: a's send queue holds 2^7 WQEs, the path MTU is 4 KiB
/// and the ACK timeout 268 ms. Tests that use it are about the bytes, not the timer: at the
/// default 67 ms, a data-path thread descheduled on a loaded 2-core host ran past seven
/// timeouts (RETRY_EXC_ERR). Returns a's CQ and QP, and b's CQ.
pub fn deep_rc_pair(
    a: &mut TestDriver,
    b: &mut TestDriver,
    subnet: u8,
    pd: u32,
) -> (TestCq, TestQp, TestCq) {
    use rox_uapi::{admin::CreateQp, verbs::QPT_RC};
    let a_cq = a.create_cq(8);
    let b_cq = b.create_cq(8);
    let (c, mut qa) = a.create_qp_cmd(QPT_RC, pd, a_cq.id, a_cq.id, SRQ_NONE, 7, 1);
    qa.qpn = a.run::<CreateQp>(c);
    let qb = b.create_qp(QPT_RC, pd, b_cq.id, b_cq.id, SRQ_NONE);
    let p = ConnectParams {
        mtu: rox_uapi::verbs::MTU_4096,
        timeout: 16,
        ..Default::default()
    };
    a.connect_with(&qa, gid_v4(127, 0, subnet, 2), qb.qpn, ALL_ACCESS, &p);
    b.connect_with(&qb, gid_v4(127, 0, subnet, 1), qa.qpn, ALL_ACCESS, &p);
    (a_cq, qa, b_cq)
}

/// What [`rc_qps_between`] makes.
#[derive(Clone, Copy, Debug)]
pub struct RcQps {
    /// The devices own GIDs 127.0.`subnet`.1 (a) and .2 (b).
    pub subnet: u8,
    pub count: u64,
    pub pd: u32,
    /// What each QP allows its peer.
    pub access: u32,
    /// a's send queues hold 2^`log_sq` WQEs (b's QPs only answer).
    pub log_sq: u8,
    /// The drivers wake the devices through their posted-wake companions, as rox.ko does in
    /// a guest (an idle device then sleeps as soon as its spin ends); else trapped.
    pub posted_wakes: bool,
}

impl RcQps {
    /// `count` QPs on `subnet` in PD `pd`, each allowing its peer `access`, a's with 256
    /// send WQEs.
    pub fn new(subnet: u8, count: u64, (pd, access): (u32, u32)) -> RcQps {
        RcQps {
            subnet,
            count,
            pd,
            access,
            log_sq: 8,
            posted_wakes: false,
        }
    }
}

/// `spec.count` RC QPs of device `a`, each connected with `params` to one of device `b`, a's
/// completing on CQ `cqs[0]` and b's on `cqs[1]`: the set-up of the tests (and the benchmark)
/// of many QPs sharing one port. Returns a's QPs.
pub fn rc_qps_between(
    a: &mut TestDriver,
    b: &mut TestDriver,
    cqs: [u32; 2],
    spec: &RcQps,
    params: &ConnectParams,
) -> Vec<TestQp> {
    use rox_uapi::{admin::CreateQp, verbs::QPT_RC};
    let RcQps {
        subnet, pd, access, ..
    } = *spec;
    let mut qps = Vec::new();
    for _ in 0..spec.count {
        let (c, mut qa) = a.create_qp_cmd(QPT_RC, pd, cqs[0], cqs[0], SRQ_NONE, spec.log_sq, 1);
        qa.qpn = a.run::<CreateQp>(c);
        let (c, mut qb) = b.create_qp_cmd(QPT_RC, pd, cqs[1], cqs[1], SRQ_NONE, 1, 1);
        qb.qpn = b.run::<CreateQp>(c);
        a.connect_with(&qa, Side::gid(subnet, 2), qb.qpn, access, params);
        b.connect_with(&qb, Side::gid(subnet, 1), qa.qpn, access, params);
        qps.push(qa);
        if qps.len() % 64 == 0 {
            // Each admin command's completion event: nothing here waits for them.
            a.drain_eq(0);
            b.drain_eq(0);
        }
    }
    qps
}

/// Two devices on the datagram wire in `dir` (127.0.`subnet`.1 and .2, sockets named by the
/// subnet) with the RC QPs of `spec` ([`rc_qps_between`]) at a 4 KiB path MTU and ACK timeout
/// `ack_timeout`. Returns both devices, the first's CQ (every QP's; 2^`a_cq_log` entries) and
/// its QPs in the order made.
pub fn rc_qps_over_dgram(
    dir: &Path,
    spec: &RcQps,
    a_cq_log: u8,
    ack_timeout: u8,
) -> (TestDriver, TestDriver, TestCq, Vec<TestQp>) {
    use rox_uapi::verbs::MTU_4096;
    let subnet = spec.subnet;
    let (one, two) = dgram_wire(dir, &format!("{subnet}a.sock"), &format!("{subnet}b.sock"));
    let posted = |cfg: &mut crate::device::DeviceConfig| cfg.posted_wake = spec.posted_wakes;
    let mut a = port_device_config(PortConfig::new(one), subnet, 1, posted);
    let mut b = port_device_config(PortConfig::new(two), subnet, 2, posted);
    if spec.posted_wakes {
        a.wake_through_companion();
        b.wake_through_companion();
    }
    let a_cq = a.create_cq(a_cq_log);
    let b_cq = b.create_cq(4);
    let params = ConnectParams {
        mtu: MTU_4096,
        timeout: ack_timeout,
        ..Default::default()
    };
    let made = rc_qps_between(&mut a, &mut b, [a_cq.id, b_cq.id], spec, &params);
    (a, b, a_cq, made)
}
