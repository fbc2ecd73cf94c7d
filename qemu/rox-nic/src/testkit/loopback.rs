//! One device with two QPs talking to each other (QP-to-QP loopback, no port), each with its
//! own CQ and a registered buffer: the set-up of the data-path tests that need no wire.

use super::{Key, TestCq, TestDriver, TestQp};
use crate::device::DeviceConfig;
use rox_uapi::queue::{Cqe, SqWqe};

/// What the device and its pair have.
#[derive(Clone, Copy, Debug)]
pub struct LoopbackSpec {
    /// The device's MAC is 02:00:00:00:00:`mac_last`.
    pub mac_last: u8,
    pub qp_type: u8,
    pub pd: u32,
    /// What each QP allows its peer.
    pub qp_access: u32,
    /// Each buffer's length and its region's access.
    pub buf_len: u64,
    pub mr_access: u32,
}

/// The device, its two QPs (`a` and `b`, each with its CQ) and a buffer of each.
pub struct Loopback {
    pub d: TestDriver,
    pub cq_a: TestCq,
    pub cq_b: TestCq,
    pub a: TestQp,
    pub b: TestQp,
    pub buf_a: u64,
    pub buf_b: u64,
    pub key_a: Key,
    pub key_b: Key,
}

impl Loopback {
    pub fn new(spec: &LoopbackSpec) -> Loopback {
        let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, spec.mac_last]));
        let (cq_a, cq_b, a, b) = d.qp_pair(spec.qp_type, spec.pd, 8, spec.qp_access);
        let buf_a = d.ram.alloc(spec.buf_len, 4096);
        let buf_b = d.ram.alloc(spec.buf_len, 4096);
        let key_a = d
            .reg_mr(spec.pd, buf_a, spec.buf_len, spec.mr_access)
            .unwrap();
        let key_b = d
            .reg_mr(spec.pd, buf_b, spec.buf_len, spec.mr_access)
            .unwrap();
        Loopback {
            d,
            cq_a,
            cq_b,
            a,
            b,
            buf_a,
            buf_b,
            key_a,
            key_b,
        }
    }
}

impl Loopback {
    /// Posts `wqe` on QP a.
    pub fn post_on_a(&mut self, wqe: &SqWqe) {
        self.d.post_send(&mut self.a, wqe);
    }

    /// Posts `wqe` on QP a and waits for its completion.
    pub fn complete_on_a(&mut self, wqe: &SqWqe) -> Cqe {
        self.post_on_a(wqe);
        self.d.wait_cqe(&mut self.cq_a)
    }
}

/// The protection domain of [`pair`]'s QPs and buffers.
pub const PD: u32 = 3;
/// The access of [`pair`]'s buffers.
pub const ALL_ACCESS: u32 = rox_uapi::verbs::ACCESS_LOCAL_WRITE
    | rox_uapi::verbs::ACCESS_REMOTE_WRITE
    | rox_uapi::verbs::ACCESS_REMOTE_READ
    | rox_uapi::verbs::ACCESS_REMOTE_ATOMIC;
/// [`pair`]'s QPs also accept FLUSH requests of both types (their regions decide).
pub const QP_ACCESS: u32 =
    ALL_ACCESS | rox_uapi::verbs::ACCESS_FLUSH_GLOBAL | rox_uapi::verbs::ACCESS_FLUSH_PERSISTENT;
/// The length of each of [`pair`]'s buffers.
pub const BUF: u64 = 64 * 1024;

/// A device (MAC 02:00:00:00:00:01) with two QPs of `qp_type` in [`PD`] and a 64 KiB buffer
/// of each: the data-path tests' pair.
pub fn pair(qp_type: u8) -> Loopback {
    Loopback::new(&LoopbackSpec {
        mac_last: 1,
        qp_type,
        pd: PD,
        qp_access: QP_ACCESS,
        buf_len: BUF,
        mr_access: ALL_ACCESS,
    })
}

/// The affiliated and device events on the admin/async EQ (type, handle), the admin
/// completions left out.
pub fn async_events(d: &mut TestDriver) -> Vec<(u8, u32)> {
    use rox_uapi::queue::EQE_TYPE_ADMIN;
    use rox_uapi::regs::EQ_ADMIN_ASYNC;
    d.drain_eq(EQ_ADMIN_ASYNC)
        .into_iter()
        .filter(|e| e.event_type != EQE_TYPE_ADMIN)
        .map(|e| (e.event_type, e.handle))
        .collect()
}
