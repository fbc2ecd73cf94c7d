//! Nothing a guest writes crashes the device: random admin commands, random WQEs, random
//! register writes. Fixed seeds, so every run is the same run.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const PD: u32 = 1;
const OPCODES: [u8; 18] = [
    ADMIN_OP_QUERY_DEVICE,
    ADMIN_OP_QUERY_PORT,
    ADMIN_OP_SET_GID,
    ADMIN_OP_READ_MAC,
    ADMIN_OP_REG_MR,
    ADMIN_OP_DEREG_MR,
    ADMIN_OP_CREATE_CQ,
    ADMIN_OP_DESTROY_CQ,
    ADMIN_OP_CREATE_QP,
    ADMIN_OP_MODIFY_QP,
    ADMIN_OP_QUERY_QP,
    ADMIN_OP_DESTROY_QP,
    ADMIN_OP_CREATE_SRQ,
    ADMIN_OP_MODIFY_SRQ,
    ADMIN_OP_QUERY_SRQ,
    ADMIN_OP_DESTROY_SRQ,
    ADMIN_OP_QUERY_STATS,
    0xab,
];

fn alive(d: &mut TestDriver) {
    assert_eq!(
        d.read_reg(REG_STATUS) & STATUS_FATAL,
        0,
        "device went fatal"
    );
    d.admin_ok(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()));
}

/// What QUERY_DEVICE answers (the device's fixed attributes): the same before and after.
fn device_attrs(d: &mut TestDriver) -> Vec<u8> {
    let resp = d.ram.alloc(ROX_PAGE_SIZE as u64, ROX_PAGE_SIZE as u64);
    d.admin_ok(ADMIN_OP_QUERY_DEVICE, page_query(0, resp));
    d.ram.read(resp, ROX_PAGE_SIZE)
}

/// The objects random commands created, by the id their completion gave.
#[derive(Default)]
struct Created {
    cqs: Vec<u32>,
    qps: Vec<u32>,
    srqs: Vec<u32>,
}

impl Created {
    fn note(&mut self, op: u8, cpl: &AdminCpl) {
        if cpl.status != ADMIN_STATUS_SUCCESS {
            return;
        }
        match op {
            ADMIN_OP_CREATE_CQ => self.cqs.push(cpl.result0),
            ADMIN_OP_CREATE_QP => self.qps.push(cpl.result0),
            ADMIN_OP_CREATE_SRQ => self.srqs.push(cpl.result0),
            _ => {}
        }
    }

    /// Destroys every object left, QPs first: each destroy succeeds or finds the object
    /// already gone (a random destroy took it), none is refused as busy (nothing refers to
    /// a CQ or SRQ once the QPs are gone: a busy one is a dangling reference), and a second
    /// destroy finds nothing.
    fn destroy_all(&self, d: &mut TestDriver) {
        let handle = |h: u32| {
            payload(&HandleCmd {
                handle: h,
                reserved: 0,
            })
        };
        let qps = self
            .qps
            .iter()
            .map(|&q| (ADMIN_OP_DESTROY_QP, handle(q), q));
        let srqs = self
            .srqs
            .iter()
            .map(|&s| (ADMIN_OP_DESTROY_SRQ, handle(s), s));
        let cqs = self
            .cqs
            .iter()
            .map(|&c| (ADMIN_OP_DESTROY_CQ, handle(c), c));
        let all: Vec<_> = qps.chain(srqs).chain(cqs).collect();
        for (op, cmd, id) in all {
            let first = d.admin(op, cmd).status;
            assert!(
                first == ADMIN_STATUS_SUCCESS || first == ADMIN_STATUS_BAD_HANDLE,
                "destroy {op:#x} of {id}: status {first}"
            );
            let again = d.admin(op, cmd).status;
            assert_eq!(
                again, ADMIN_STATUS_BAD_HANDLE,
                "destroy {op:#x} of {id} twice"
            );
        }
    }
}

/// A fresh RC pair moves a SEND whose bytes arrive intact.
fn send_works(d: &mut TestDriver) {
    let (mut cq_a, mut cq_b, mut a, mut b) = d.qp_pair(QPT_RC, PD, 6, ACCESS_REMOTE_WRITE);
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
    let (src, src_key) = d.buffer(PD, 4096, access);
    let (dst, dst_key) = d.buffer(PD, 4096, access);
    let msg: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
    d.ram.write(src, &msg);
    d.post_recv(&mut b, 7, &[sge(dst, 4096, dst_key)]);
    let w = send_wqe(8, WR_SEND, WQE_FLAG_SIGNALED, &[sge(src, 200, src_key)]);
    d.post_send(&mut a, &w);
    let c = d.wait_cqe(&mut cq_a);
    assert_eq!((c.wr_id, c.status), (8, WC_SUCCESS));
    let r = d.wait_cqe(&mut cq_b);
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WC_SUCCESS, 200));
    assert_eq!(d.ram.read(dst, 200), msg);
}

/// Random commands get a defined status, never take the device down, leave its fixed
/// attributes alone and its object tables consistent (every created object is destroyed
/// exactly once, none is held by a dangling reference), and a fresh QP pair still works.
#[test]
fn random_admin_commands_get_completions() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 7, 1]));
    let mut rng = StdRng::seed_from_u64(0xad);
    let attrs = device_attrs(&mut d);
    let cq = d.create_cq(4);
    let qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    let mut created = Created {
        cqs: vec![cq.id],
        qps: vec![qp.qpn.get()],
        ..Default::default()
    };
    let mut statuses = [0usize; ADMIN_STATUS_BAD_DOORBELL as usize + 1];
    for i in 0..3000 {
        let mut raw = [0u8; ADMIN_PAYLOAD_SIZE];
        rng.fill(&mut raw[..]);
        // Small handles and in-RAM addresses make some commands reach deep into the code.
        if rng.gen_bool(0.5) {
            raw[..4].copy_from_slice(&rng.gen_range(0u32..8).to_le_bytes());
        }
        if rng.gen_bool(0.3) {
            let addr = (RAM_BASE + rng.gen_range(0..RAM_SIZE / 2)) & !7;
            raw[8..16].copy_from_slice(&addr.to_le_bytes());
        }
        let op = OPCODES[rng.gen_range(0..OPCODES.len())];
        let cpl = d.admin(op, AdminPayload { raw });
        assert!(
            cpl.status <= ADMIN_STATUS_BAD_DOORBELL,
            "command {i}: unknown status {}",
            cpl.status
        );
        if !OPCODES[..OPCODES.len() - 1].contains(&op) {
            assert_eq!(cpl.status, ADMIN_STATUS_BAD_OPCODE, "command {i}");
        }
        statuses[cpl.status as usize] += 1;
        created.note(op, &cpl);
        if i % 512 == 0 {
            d.drain_eq(EQ_ADMIN_ASYNC);
            assert_eq!(
                device_attrs(&mut d),
                attrs,
                "command {i}: QUERY_DEVICE changed"
            );
        }
    }
    // The storm reached past the argument checks: objects were made, and refused too.
    assert!(
        statuses[ADMIN_STATUS_SUCCESS as usize] > 100,
        "{statuses:?}"
    );
    assert!(
        statuses[ADMIN_STATUS_BAD_HANDLE as usize] > 100,
        "{statuses:?}"
    );
    assert!(
        statuses[ADMIN_STATUS_BAD_PARAM as usize] > 100,
        "{statuses:?}"
    );
    d.drain_eq(EQ_ADMIN_ASYNC);
    alive(&mut d);
    assert_eq!(device_attrs(&mut d), attrs);
    created.destroy_all(&mut d);
    send_works(&mut d);
}

#[test]
fn random_wqes_complete_or_fail_cleanly() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 7, 2]));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let mut rng = StdRng::seed_from_u64(0x5e);
    const SEND_ID: u64 = 0x5e00;
    const RECV_ID: u64 = 0x7e00;
    let buf = d.ram.alloc(1 << 16, 4096);
    let key = d
        .reg_mr(
            PD,
            buf,
            1 << 16,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
        )
        .unwrap();
    const SENDS: u64 = 32;
    const RECVS: u64 = 4;
    for round in 0..20 {
        let mut cq = d.create_cq(10);
        let mut qp = d.create_qp(
            if round % 2 == 0 { QPT_RC } else { QPT_UD },
            PD,
            cq.id,
            cq.id,
            SRQ_NONE,
        );
        if qp.qp_type == QPT_UD {
            d.activate_ud(&qp, 1);
        } else {
            d.connect(&qp, gid, qp.qpn, ACCESS_REMOTE_WRITE);
        }
        for r in 0..RECVS {
            d.post_recv(&mut qp, RECV_ID + r, &[sge(buf, 4096, key)]);
        }
        for n in 0..SENDS {
            let mut bytes = [0u8; SQ_WQE_SIZE];
            rng.fill(&mut bytes[..]);
            let mut w: SqWqe = rox_nic::dma::from_bytes(&bytes);
            if rng.gen_bool(0.5) {
                w.opcode = rng.gen_range(0..=WR_ATOMIC_FETCH_AND_ADD);
                w.flags &= WQE_FLAGS_ALL;
                w.num_sge = rng.gen_range(0..3);
            }
            // Signaled, with a known wr_id: every WQE must come back exactly once.
            w.flags |= WQE_FLAG_SIGNALED;
            w.wr_id = SEND_ID + n;
            d.write_send(&mut qp, &w);
        }
        d.ring_sq(&qp);
        // Then ERR: whatever did not complete is flushed, so every send and receive WR the
        // device was given completes exactly once, sends in SQ order.
        std::thread::sleep(std::time::Duration::from_millis(5));
        d.modify_qp(
            qp.qpn,
            rox_uapi::verbs::QP_STATE,
            QpAttr {
                qp_state: QPS_ERR,
                ..Default::default()
            },
        );
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        while (sends.len() as u64) < SENDS || (recvs.len() as u64) < RECVS {
            let c = d.wait_cqe(&mut cq);
            assert_eq!(c.qp_num, qp.qpn, "round {round}");
            if (SEND_ID..SEND_ID + SENDS).contains(&c.wr_id) {
                sends.push(c.wr_id);
            } else {
                assert!(
                    (RECV_ID..RECV_ID + RECVS).contains(&c.wr_id),
                    "round {round}: completion of wr_id {:#x}, never posted",
                    c.wr_id
                );
                recvs.push(c.wr_id);
            }
        }
        let posted: Vec<u64> = (SEND_ID..SEND_ID + SENDS).collect();
        assert_eq!(sends, posted, "round {round}: send completions");
        recvs.sort_unstable();
        assert_eq!(
            recvs,
            (RECV_ID..RECV_ID + RECVS).collect::<Vec<_>>(),
            "round {round}"
        );
        d.expect_no_cqe(&mut cq, std::time::Duration::from_millis(20));
        d.drain_eq(EQ_ADMIN_ASYNC);
        alive(&mut d);
    }
}

/// Random register writes leave the read-only registers, the status and the scratch
/// register consistent (checked before the reset, which would hide a bad state), and the
/// device ready again after a reset.
#[test]
fn random_register_writes_then_reset() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 7, 3]));
    let mut rng = StdRng::seed_from_u64(0x4e6);
    let read_only = [
        REG_VERSION,
        REG_CAPS,
        REG_DB_PAGE_COUNT,
        REG_MSIX_VECTORS,
        REG_MAX_EQS,
    ];
    let fixed: Vec<u32> = read_only.iter().map(|&r| d.read_reg(r)).collect();
    assert_eq!(fixed[2], DB_PAGE_COUNT);
    assert_eq!(fixed[3], MSIX_VECTORS);
    for _ in 0..5000 {
        let off = rng.gen_range(0..BAR_CTRL_SIZE / 4) * 4;
        if off == REG_RESET {
            continue;
        }
        d.write_reg(off, rng.gen());
        let _ = d.read_reg(rng.gen_range(0..BAR_CTRL_SIZE / 4) * 4);
    }
    // Odd sizes and offsets beyond the BAR are ignored.
    d.bar0_write_raw(3, &[1, 2]);
    d.bar0_write_raw(BAR_CTRL_SIZE + 64, &[0; 4]);
    // Before the reset: the read-only registers kept their values, the scratch register
    // holds what is written, the status is one the device defines, and a fatal state says
    // why (a wild admin ring may make the device fatal; a silent fatal state may not).
    let now: Vec<u32> = read_only.iter().map(|&r| d.read_reg(r)).collect();
    assert_eq!(now, fixed, "read-only registers changed");
    d.write_reg(REG_SCRATCH, 0x5c2a_7c11);
    assert_eq!(d.read_reg(REG_SCRATCH), 0x5c2a_7c11);
    let status = d.read_reg(REG_STATUS);
    let known = STATUS_READY | STATUS_ADMIN_ENABLED | STATUS_FATAL;
    assert_eq!(status & !known, 0, "status {status:#x}");
    assert_ne!(status & STATUS_READY, 0, "status {status:#x}: not ready");
    let fatal_code = d.read_reg(REG_FATAL_CODE);
    assert_eq!(
        status & STATUS_FATAL != 0,
        fatal_code != 0,
        "status {status:#x}, fatal code {fatal_code}"
    );
    assert!(d.read_reg(REG_IDLE) <= 1);
    d.reset();
    alive(&mut d);
    let now: Vec<u32> = read_only.iter().map(|&r| d.read_reg(r)).collect();
    assert_eq!(now, fixed);
}
