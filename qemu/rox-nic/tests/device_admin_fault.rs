//! An injected admin refusal (`--admin-fault`, `--admin-fault-file`, device::admin_fault)
//! through the real vfio-user path: the chosen command answers the chosen status with zero
//! result words and writes nothing, other commands run, a count runs out (across resets), the
//! file's faults follow the file at each admin queue enable, and a query told `written=B`
//! runs and claims B bytes.

use rox_nic::device::admin_fault::{parse_list, AdminFaultConfig};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;

/// A device over a vfio-user socket with these faults.
fn device(mac_last: u8, faults: AdminFaultConfig) -> TestDriver {
    let mut config = DeviceConfig::new([2, 0, 0, 0, 0xaf, mac_last]);
    config.admin_faults = faults;
    TestDriver::over_socket(config)
}

/// A device over a vfio-user socket with these `--admin-fault` specs.
fn device_with_fixed(mac_last: u8, specs: &str) -> TestDriver {
    let fixed = parse_list(specs).unwrap();
    device(mac_last, AdminFaultConfig { fixed, file: None })
}

/// Asserts query `opcode` is refused with `status`: zero result words, the response page
/// untouched (the test RAM's pages start zeroed).
fn assert_query_refused(d: &mut TestDriver, opcode: u8, index: u32, status: u8) {
    let (cpl, resp) = d.query(opcode, index);
    assert_eq!(cpl.status, status, "query {opcode:#x}");
    assert_eq!((cpl.opcode, cpl.result0, cpl.result1), (opcode, 0, 0));
    assert!(
        d.ram.read(resp, 4096).iter().all(|b| *b == 0),
        "a refused query wrote its response"
    );
}

fn read_mac_status(d: &mut TestDriver) -> u8 {
    let cpl = d.admin(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()));
    cpl.status
}

#[test]
fn the_command_answers_the_status_others_run_and_the_count_runs_out() {
    let mut d = device_with_fixed(1, "QUERY_PORT:NO_RESOURCES,count=2 READ_MAC:200");
    assert_query_refused(&mut d, ADMIN_OP_QUERY_PORT, 1, ADMIN_STATUS_NO_RESOURCES);
    // Unaffected: another query, and an object's creation and use.
    let (cpl, _) = d.query(ADMIN_OP_QUERY_DEVICE, 0);
    assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS);
    let cq = d.create_cq(4);
    d.admin_ok(
        ADMIN_OP_DESTROY_CQ,
        payload(&HandleCmd {
            handle: cq.id,
            ..Default::default()
        }),
    );
    assert_eq!(
        read_mac_status(&mut d),
        200,
        "a status uapi does not define"
    );
    // The count runs across a reset (a driver's reload).
    d.reset();
    assert_query_refused(&mut d, ADMIN_OP_QUERY_PORT, 1, ADMIN_STATUS_NO_RESOURCES);
    assert_eq!(d.query_port().state, rox_uapi::verbs::PORT_ACTIVE);
    assert_eq!(d.query_port().mac, [2, 0, 0, 0, 0xaf, 1]);
    // Without a count: every time.
    assert_eq!(read_mac_status(&mut d), 200);
    assert_eq!(read_mac_status(&mut d), 200);
}

#[test]
fn the_file_is_read_at_each_admin_enable() {
    let dir = std::env::temp_dir().join(format!("rox-admin-fault-dev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rox0.admin-fault");
    std::fs::write(&path, "QUERY_DEVICE:BUSY\n").unwrap();
    let mut d = device(
        2,
        AdminFaultConfig {
            fixed: Vec::new(),
            file: Some(path.clone()),
        },
    );
    assert_query_refused(&mut d, ADMIN_OP_QUERY_DEVICE, 0, ADMIN_STATUS_BUSY);
    assert_query_refused(&mut d, ADMIN_OP_QUERY_DEVICE, 0, ADMIN_STATUS_BUSY);
    // Changed while the queue runs: nothing changes until the driver enables it again.
    std::fs::write(&path, "READ_MAC:BAD_STATE,count=1").unwrap();
    assert_query_refused(&mut d, ADMIN_OP_QUERY_DEVICE, 0, ADMIN_STATUS_BUSY);
    assert_eq!(read_mac_status(&mut d), ADMIN_STATUS_SUCCESS);
    d.reset();
    let (cpl, _) = d.query(ADMIN_OP_QUERY_DEVICE, 0);
    assert_eq!(cpl.status, ADMIN_STATUS_SUCCESS);
    assert_eq!(read_mac_status(&mut d), ADMIN_STATUS_BAD_STATE);
    assert_eq!(read_mac_status(&mut d), ADMIN_STATUS_SUCCESS, "count=1");
    // The same content at the next enable: the count stays spent.
    d.reset();
    assert_eq!(read_mac_status(&mut d), ADMIN_STATUS_SUCCESS);
    // Another command, the default status.
    std::fs::write(&path, "QUERY_PORT").unwrap();
    d.reset();
    assert_query_refused(&mut d, ADMIN_OP_QUERY_PORT, 1, ADMIN_STATUS_BAD_PARAM);
    // No file: no fault.
    std::fs::remove_file(&path).unwrap();
    d.reset();
    assert_eq!(d.query_port().state, rox_uapi::verbs::PORT_ACTIVE);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_query_answers_short_or_long_but_runs() {
    let mut d = device_with_fixed(3, "QUERY_PORT:written=8,count=1 QUERY_DEVICE:written=5000");
    let (cpl, resp) = d.query(ADMIN_OP_QUERY_PORT, 1);
    assert_eq!((cpl.status, cpl.result1), (ADMIN_STATUS_SUCCESS, 8));
    let port: PortAttr = d.ram.read_obj(resp);
    assert_eq!(port.mac, [2, 0, 0, 0, 0xaf, 3], "the query ran");
    // count=1: the next one answers its true length.
    assert_eq!(d.query_port().mac, [2, 0, 0, 0, 0xaf, 3]);
    let (cpl, _) = d.query(ADMIN_OP_QUERY_DEVICE, 0);
    assert_eq!((cpl.status, cpl.result1), (ADMIN_STATUS_SUCCESS, 5000));
    // A query that fails keeps its status and zero result words: the claim is a success's.
    let mut d = device_with_fixed(4, "QUERY_PORT:written=8");
    let (cpl, _) = d.query(ADMIN_OP_QUERY_PORT, 2);
    assert_eq!((cpl.status, cpl.result1), (ADMIN_STATUS_BAD_PARAM, 0));
}
