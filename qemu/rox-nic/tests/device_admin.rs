//! Admin queue, registers and object lifecycle, through BAR0 and the admin queue like a driver.

use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const PD: u32 = 7;

fn driver() -> TestDriver {
    TestDriver::new(DeviceConfig::new(MAC))
}

#[test]
fn registers_identify_the_device() {
    let mut d = driver();
    assert_eq!(d.read_reg(REG_VERSION), rox_uapi::ROX_VERSION);
    assert_eq!(d.read_reg(REG_DB_PAGE_COUNT), DB_PAGE_COUNT);
    assert_eq!(d.read_reg(REG_MSIX_VECTORS), MSIX_VECTORS);
    assert_eq!(d.read_reg(REG_MAX_EQS), MAX_EQS);
    let caps = d.read_reg(REG_CAPS);
    assert_eq!(
        caps & (CAP_RC | CAP_UC | CAP_UD | CAP_SRQ),
        CAP_RC | CAP_UC | CAP_UD | CAP_SRQ
    );
    let st = d.read_reg(REG_STATUS);
    assert!(st & STATUS_READY != 0 && st & STATUS_ADMIN_ENABLED != 0 && st & STATUS_FATAL == 0);
    d.write_reg(REG_SCRATCH, 0xdead_beef);
    assert_eq!(d.read_reg(REG_SCRATCH), 0xdead_beef);
}

#[test]
fn query_device_port_and_mac() {
    let mut d = driver();
    let resp = d.ram.alloc(4096, 4096);
    d.admin_ok(ADMIN_OP_QUERY_DEVICE, page_query(0, resp));
    let attr: DeviceAttr = d.ram.read_obj(resp);
    assert_eq!(attr.vendor_id, PCI_VENDOR_ID as u32);
    assert_eq!(attr.max_send_sge, SQ_MAX_SGE);
    assert_eq!(attr.max_inline_data, SQ_MAX_INLINE);
    assert_eq!(attr.num_comp_eqs, MAX_EQS - 1);
    let port = d.query_port();
    assert_eq!(port.mac, MAC);
    assert_eq!(port.state, PORT_ACTIVE);
    let cpl = d.admin_ok(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()));
    assert_eq!(cpl.result0.to_le_bytes(), [MAC[0], MAC[1], MAC[2], MAC[3]]);
    assert_eq!(
        cpl.result1 & 0xffff,
        u16::from_le_bytes([MAC[4], MAC[5]]) as u32
    );
    // Port 2 does not exist.
    let cpl = d.admin(ADMIN_OP_QUERY_PORT, page_query(2, resp));
    assert_eq!(cpl.status, ADMIN_STATUS_BAD_PARAM);
    // Every admin command posted an event on EQ 0 and fired vector 0 while EQ 0 was armed.
    let events = d.drain_eq(EQ_ADMIN_ASYNC);
    assert!(events.len() >= 4 && events.iter().all(|e| e.event_type == EQE_TYPE_ADMIN));
    assert!(d.wait_vector(EQ_ADMIN_ASYNC, std::time::Duration::from_secs(1)));
}

/// An unknown opcode, a handle of no object, a response buffer outside guest memory: each an
/// error status, and the device stays healthy.
#[test]
fn bad_admin_input_gets_error_status() {
    let mut d = driver();
    const UNKNOWN_OPCODE: u8 = 0xee;
    assert_eq!(
        d.admin(UNKNOWN_OPCODE, payload(&HandleCmd::default()))
            .status,
        ADMIN_STATUS_BAD_OPCODE
    );
    const NO_SUCH_OBJECT: u32 = 999;
    let handle = HandleCmd {
        handle: NO_SUCH_OBJECT,
        reserved: 0,
    };
    let no_such_objects = [
        (
            ADMIN_OP_DESTROY_QP,
            payload(&QpnCmd {
                qpn: Qpn::new(NO_SUCH_OBJECT).unwrap(),
                reserved: 0,
            }),
        ),
        (ADMIN_OP_DESTROY_CQ, payload(&handle)),
        (
            ADMIN_OP_DEREG_MR,
            payload(&KeyCmd {
                key: Key::from_raw(NO_SUCH_OBJECT),
                reserved: 0,
            }),
        ),
        (ADMIN_OP_DESTROY_SRQ, payload(&handle)),
    ];
    for (opcode, cmd) in no_such_objects {
        assert_eq!(
            d.admin(opcode, cmd).status,
            ADMIN_STATUS_BAD_HANDLE,
            "opcode {opcode:#x}"
        );
    }

    assert_eq!(
        d.admin(
            ADMIN_OP_MODIFY_QP,
            payload(&ModifyQpCmd {
                qpn: Qpn::new(NO_SUCH_OBJECT).unwrap(),
                ..Default::default()
            })
        )
        .status,
        ADMIN_STATUS_BAD_HANDLE
    );
    // Response buffer not in guest memory.
    let cpl = d.admin(ADMIN_OP_QUERY_DEVICE, page_query(0, 0x10));
    assert_eq!(cpl.status, ADMIN_STATUS_BAD_DMA);
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

/// CQ: bad EQ, bad depth, unmapped page list, doorbell slot out of range or reused.
#[test]
fn bad_cq_input_gets_error_status() {
    let mut d = driver();
    let base = d.ram.alloc(4096, 4096);
    let ring = d.page_list(base, 4096);
    let good = CreateCqCmd {
        ring,
        log_depth: 7,
        eqn: COMP_EQ,
        db_page: TEST_DB_PAGE,
        db_slot: 100,
        ..Default::default()
    };
    let wild = PageList {
        addr: 0xdead_0000,
        ..ring
    };
    let bad_cqs = [
        (
            "EQ 0",
            CreateCqCmd { eqn: 0, ..good },
            ADMIN_STATUS_BAD_PARAM,
        ),
        (
            "no such EQ",
            CreateCqCmd {
                eqn: MAX_EQS,
                ..good
            },
            ADMIN_STATUS_BAD_PARAM,
        ),
        (
            "ring too small",
            CreateCqCmd {
                log_depth: 8,
                ..good
            },
            ADMIN_STATUS_BAD_PARAM,
        ),
        (
            "depth too large",
            CreateCqCmd {
                log_depth: 40,
                ..good
            },
            ADMIN_STATUS_BAD_PARAM,
        ),
        (
            "unmapped page list",
            CreateCqCmd { ring: wild, ..good },
            ADMIN_STATUS_BAD_DMA,
        ),
        (
            "doorbell slot out of range",
            CreateCqCmd {
                db_slot: DB_SLOTS_PER_PAGE as u32,
                ..good
            },
            ADMIN_STATUS_BAD_DOORBELL,
        ),
        (
            "doorbell page out of range",
            CreateCqCmd {
                db_page: DB_PAGE_COUNT,
                ..good
            },
            ADMIN_STATUS_BAD_DOORBELL,
        ),
    ];
    for (what, cmd, status) in bad_cqs {
        let got = d.admin(ADMIN_OP_CREATE_CQ, payload(&cmd)).status;
        assert_eq!(got, status, "{what}");
    }
    d.admin_ok(ADMIN_OP_CREATE_CQ, payload(&good));
    assert_eq!(
        d.admin(ADMIN_OP_CREATE_CQ, payload(&good)).status,
        ADMIN_STATUS_BAD_DOORBELL,
        "slot reused"
    );
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

/// QP: unknown type, unknown CQ, SRQ of another PD; a CQ a QP uses is busy until the QP is
/// gone.
#[test]
fn bad_qp_input_gets_error_status_and_a_cq_in_use_stays() {
    let mut d = driver();
    let cq = d.create_cq(7).id;
    let (c, _) = d.create_qp_cmd(QPT_RC, PD, cq, cq, SRQ_NONE, 4, 4);
    let srq = d.create_srq(PD + 1, 4, 0);
    let bad_qps = [
        (
            "unknown type",
            CreateQpCmd { qp_type: 9, ..c },
            ADMIN_STATUS_BAD_PARAM,
        ),
        (
            "unknown CQ",
            CreateQpCmd { send_cq: 77, ..c },
            ADMIN_STATUS_BAD_HANDLE,
        ),
        (
            "another PD's SRQ",
            CreateQpCmd { srq: srq.id, ..c },
            ADMIN_STATUS_BAD_HANDLE,
        ),
    ];
    for (what, cmd, status) in bad_qps {
        let got = d.admin(ADMIN_OP_CREATE_QP, payload(&cmd)).status;
        assert_eq!(got, status, "{what}");
    }
    let qpn = d.run::<CreateQp>(c);
    assert!(qpn > Qpn::GSI);
    // A CQ in use cannot be destroyed; after the QP is gone it can.
    assert_eq!(
        d.admin(
            ADMIN_OP_DESTROY_CQ,
            payload(&HandleCmd {
                handle: cq,
                reserved: 0
            })
        )
        .status,
        ADMIN_STATUS_BUSY
    );
    d.admin_ok(ADMIN_OP_DESTROY_QP, payload(&QpnCmd { qpn, reserved: 0 }));
    d.admin_ok(
        ADMIN_OP_DESTROY_CQ,
        payload(&HandleCmd {
            handle: cq,
            reserved: 0,
        }),
    );
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

/// MR: unknown access bits, remote write without local write; a GID index out of range.
#[test]
fn bad_mr_and_gid_input_gets_error_status() {
    let mut d = driver();
    let buf = d.ram.alloc(8192, 4096);
    assert_eq!(
        d.reg_mr(PD, buf, 8192, 1 << 20),
        Err(ADMIN_STATUS_BAD_PARAM)
    );
    assert_eq!(
        d.reg_mr(PD, buf, 8192, ACCESS_REMOTE_WRITE),
        Err(ADMIN_STATUS_BAD_PARAM)
    );
    // GID index out of range.
    let c = SetGidCmd {
        index: GID_TABLE_LEN,
        gid_type: GID_TYPE_ROCE_UDP_ENCAP,
        valid: 1,
        ..Default::default()
    };
    assert_eq!(
        d.admin(ADMIN_OP_SET_GID, payload(&c)).status,
        ADMIN_STATUS_BAD_PARAM
    );
    // The device is still healthy.
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
}

#[test]
fn qp_state_machine_through_admin_queue() {
    let mut d = driver();
    d.set_gid(0, gid_v4(127, 0, 0, 1));
    let cq = d.create_cq(6);
    let qp = d.create_qp(QPT_RC, PD, cq.id, cq.id, SRQ_NONE);
    let init = QpAttr {
        qp_state: QPS_INIT,
        port_num: PORT_NUM,
        qp_access_flags: ACCESS_REMOTE_WRITE,
        ..Default::default()
    };
    // RESET -> RTR is not a transition.
    assert_eq!(
        d.modify_qp(
            qp.qpn,
            QP_STATE,
            QpAttr {
                qp_state: QPS_RTR,
                ..init
            }
        )
        .status,
        ADMIN_STATUS_BAD_STATE
    );
    // RESET -> INIT without ACCESS_FLAGS (required for RC).
    assert_eq!(
        d.modify_qp(qp.qpn, QP_STATE | QP_PKEY_INDEX | QP_PORT, init)
            .status,
        ADMIN_STATUS_BAD_STATE
    );
    // With a forbidden attribute (SQ_PSN is not allowed in RESET -> INIT).
    assert_eq!(
        d.modify_qp(
            qp.qpn,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS | QP_SQ_PSN,
            init
        )
        .status,
        ADMIN_STATUS_BAD_STATE
    );
    // Bad port number.
    assert_eq!(
        d.modify_qp(
            qp.qpn,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
            QpAttr {
                port_num: 2,
                ..init
            }
        )
        .status,
        ADMIN_STATUS_BAD_PARAM
    );
    assert_eq!(d.query_qp(qp.qpn).qp_state, QPS_RESET);
    d.connect(&qp, gid_v4(127, 0, 0, 1), qp.qpn, ACCESS_REMOTE_WRITE);
    let q = d.query_qp(qp.qpn);
    assert_eq!(q.qp_state, QPS_RTS);
    assert_eq!(q.dest_qp_num, qp.qpn);
    assert_eq!(q.path_mtu, MTU_1024);
    assert_eq!(q.qp_access_flags, ACCESS_REMOTE_WRITE);
    // RTS -> SQD -> RTS, then ERR, then RESET.
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_SQD), ADMIN_STATUS_SUCCESS);
    assert_eq!(d.query_qp(qp.qpn).qp_state, QPS_SQD);
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_RTS), ADMIN_STATUS_SUCCESS);
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_ERR), ADMIN_STATUS_SUCCESS);
    assert_eq!(d.query_qp(qp.qpn).qp_state, QPS_ERR);
    // ERR -> RTS is not allowed.
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_RTS), ADMIN_STATUS_BAD_STATE);
    assert_eq!(d.modify_qp_state(qp.qpn, QPS_RESET), ADMIN_STATUS_SUCCESS);
    assert_eq!(d.query_qp(qp.qpn).qp_state, QPS_RESET);
}

#[test]
fn srq_limit_modify_and_query() {
    let mut d = driver();
    let srq = d.create_srq(PD, 5, 4);
    let cpl = d.admin_ok(
        ADMIN_OP_QUERY_SRQ,
        payload(&HandleCmd {
            handle: srq.id,
            reserved: 0,
        }),
    );
    assert_eq!((cpl.result0, cpl.result1), (4, 0));
    d.arm_srq_limit(srq.id, 9);
    let m = ModifySrqCmd {
        srq: srq.id,
        attr_mask: SRQ_ATTR_LIMIT,
        limit: 9,
        ..Default::default()
    };
    assert_eq!(
        d.admin_ok(
            ADMIN_OP_QUERY_SRQ,
            payload(&HandleCmd {
                handle: srq.id,
                reserved: 0
            })
        )
        .result0,
        9
    );
    // Resizing is not supported; a limit above the depth is invalid.
    let m2 = ModifySrqCmd {
        attr_mask: SRQ_ATTR_MAX_WR,
        ..m
    };
    assert_eq!(
        d.admin(ADMIN_OP_MODIFY_SRQ, payload(&m2)).status,
        ADMIN_STATUS_BAD_PARAM
    );
    let m3 = ModifySrqCmd { limit: 1000, ..m };
    assert_eq!(
        d.admin(ADMIN_OP_MODIFY_SRQ, payload(&m3)).status,
        ADMIN_STATUS_BAD_PARAM
    );
    d.admin_ok(
        ADMIN_OP_DESTROY_SRQ,
        payload(&HandleCmd {
            handle: srq.id,
            reserved: 0,
        }),
    );
}

#[test]
fn fatal_state_is_visible_and_reset_recovers() {
    let mut d = driver();
    // Announce more commands than the ring holds: the device cannot trust the admin queue.
    d.write_reg(REG_ADMIN_DB, 1 << 20);
    let start = std::time::Instant::now();
    while d.read_reg(REG_STATUS) & STATUS_FATAL == 0 {
        assert!(start.elapsed() < TIMEOUT, "device did not go fatal");
        std::thread::yield_now();
    }
    assert_eq!(d.read_reg(REG_FATAL_CODE), FATAL_ADMIN_DOORBELL);
    assert!(d.wait_vector(EQ_ADMIN_ASYNC, std::time::Duration::from_secs(2)));
    d.reset();
    assert_eq!(d.read_reg(REG_STATUS) & STATUS_FATAL, 0);
    assert_eq!(d.read_reg(REG_FATAL_CODE), FATAL_NONE);
    d.admin_ok(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()));
}

#[test]
fn admin_ring_outside_guest_memory_is_fatal() {
    let mut d = driver();
    d.write_reg(REG_ADMIN_CTRL, 0);
    d.write_reg(REG_ADMIN_CMD_BASE_LO, 0x1000);
    d.write_reg(REG_ADMIN_CMD_BASE_HI, 0);
    d.write_reg(REG_ADMIN_CTRL, ADMIN_CTRL_ENABLE);
    let start = std::time::Instant::now();
    while d.read_reg(REG_STATUS) & STATUS_FATAL == 0 {
        assert!(start.elapsed() < TIMEOUT);
        std::thread::yield_now();
    }
    assert_eq!(d.read_reg(REG_FATAL_CODE), FATAL_ADMIN_DMA);
    d.reset();
    d.admin_ok(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()));
}
