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

#[test]
fn random_admin_commands_get_completions() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 7, 1]));
    let mut rng = StdRng::seed_from_u64(0xad);
    let cq = d.create_cq(4);
    let _qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
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
        if i % 512 == 0 {
            d.drain_eq(EQ_ADMIN_ASYNC);
        }
    }
    d.drain_eq(EQ_ADMIN_ASYNC);
    alive(&mut d);
}

#[test]
fn random_wqes_complete_or_fail_cleanly() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 7, 2]));
    let gid = gid_v4(127, 0, 0, 1);
    d.set_gid(0, gid);
    let mut rng = StdRng::seed_from_u64(0x5e);
    let buf = d.ram.alloc(1 << 16, 4096);
    let key = d
        .reg_mr(
            PD,
            buf,
            1 << 16,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
        )
        .unwrap();
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
        for _ in 0..4 {
            d.post_recv(
                &mut qp,
                0,
                &[Sge {
                    addr: buf,
                    length: 4096,
                    lkey: key,
                }],
            );
        }
        for _ in 0..32 {
            let mut bytes = [0u8; SQ_WQE_SIZE];
            rng.fill(&mut bytes[..]);
            let mut w: SqWqe = rox_nic::dma::from_bytes(&bytes);
            if rng.gen_bool(0.5) {
                w.opcode = rng.gen_range(0..=WR_ATOMIC_FETCH_AND_ADD);
                w.flags &= WQE_FLAGS_ALL;
                w.num_sge = rng.gen_range(0..3);
            }
            d.write_send(&mut qp, &w);
        }
        d.ring_sq(&qp);
        // Everything the device consumed is accounted for: it does not hang either.
        std::thread::sleep(std::time::Duration::from_millis(5));
        while d.poll_cq(&mut cq).is_some() {}
        d.modify_qp(
            qp.qpn,
            rox_uapi::verbs::QP_STATE,
            QpAttr {
                qp_state: QPS_ERR,
                ..Default::default()
            },
        );
        d.drain_eq(EQ_ADMIN_ASYNC);
        alive(&mut d);
    }
}

#[test]
fn random_register_writes_then_reset() {
    let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 7, 3]));
    let mut rng = StdRng::seed_from_u64(0x4e6);
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
    d.reset();
    alive(&mut d);
}
