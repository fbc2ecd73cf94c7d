//! Two devices back to back: each on a port over one datagram wire (device 1 and device 2 send
//! to each other's socket), each with a CQ, one QP and a registered buffer — the set-up of
//! every test (and the benchmark) that runs traffic between two whole devices.

use std::path::Path;

use rox_uapi::admin::SRQ_NONE;

use super::{gid_v4, port_device, ConnectParams, Key, TestCq, TestDriver, TestQp};
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
