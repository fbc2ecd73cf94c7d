//! An injected device death (`--die-on`, device::death) through the real vfio-user path: the
//! device stops for good, its BARs read all-ones, and nothing it is asked afterwards (admin
//! commands, doorbells, EQ acks, a reset) writes a byte of guest memory or fires a vector,
//! while the socket keeps being served. `report` raises the fatal event first.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use rox_nic::device::DeathMode;
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

const PD: u32 = 2;
const ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
/// Long enough for a live device to have answered anything asked of it many times over.
const SETTLE: Duration = Duration::from_millis(300);

/// A device over a vfio-user socket with a connected RC pair that has carried one SEND.
struct Rig {
    d: TestDriver,
    cq_a: TestCq,
    cq_b: TestCq,
    a: TestQp,
    b: TestQp,
    buf: u64,
    key: Key,
}

fn live_rig(mac_last: u8) -> Rig {
    let mut d = TestDriver::over_socket(DeviceConfig::new([2, 0, 0, 0, 0, mac_last]));
    let (cq_a, cq_b, a, b) = d.qp_pair(QPT_RC, PD, 6, ACCESS);
    let buf = d.ram.alloc(8192, 4096);
    let key = d.reg_mr(PD, buf, 8192, ACCESS).unwrap();
    let mut r = Rig {
        d,
        cq_a,
        cq_b,
        a,
        b,
        buf,
        key,
    };
    send_one(&mut r, 1);
    assert_eq!(r.d.wait_cqe(&mut r.cq_a).status, WC_SUCCESS);
    assert_eq!(r.d.wait_cqe(&mut r.cq_b).status, WC_SUCCESS);
    // Admin completion events pile up on EQ 0: start the death with it empty.
    r.d.drain_eq(EQ_ADMIN_ASYNC);
    r.d.vectors[EQ_ADMIN_ASYNC as usize].drain();
    r
}

/// Post a receive on b and a SEND on a (WQEs written, doorbells rung).
fn send_one(r: &mut Rig, wr_id: u64) {
    let sges = [sge(r.buf + 4096, 512, r.key)];
    r.d.post_recv(&mut r.b, wr_id, &sges);
    let w = send_wqe(wr_id, WR_SEND, WQE_FLAG_SIGNALED, &[sge(r.buf, 512, r.key)]);
    r.d.post_send(&mut r.a, &w);
}

fn die(r: &Rig, mode: DeathMode) {
    r.d.shared().die(mode);
    let start = Instant::now();
    while !r.d.shared().is_dead() {
        assert!(start.elapsed() < TIMEOUT, "the device did not die");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn all_ram(d: &TestDriver) -> Vec<u8> {
    d.ram.read(RAM_BASE, RAM_SIZE as usize)
}

/// A SEND posted after the death is never looked at (no CQE on either side), and the device
/// stays dead ([`assert_stays_dead`]).
fn assert_ignores_new_work(r: &mut Rig) {
    send_one(r, 2);
    assert_stays_dead(r);
    assert!(r.d.poll_cq(&mut r.cq_a).is_none() && r.d.poll_cq(&mut r.cq_b).is_none());
}

/// Everything a driver may still do to a dead device: none of it reaches guest memory or
/// fires a vector, and the BARs keep reading all-ones.
fn assert_stays_dead(r: &mut Rig) {
    // An admin command: the driver's wait sees STATUS read all-ones (FATAL set) and gives up.
    let admin = catch_unwind(AssertUnwindSafe(|| {
        r.d.admin(ADMIN_OP_READ_MAC, payload(&HandleCmd::default()))
    }));
    assert!(admin.is_err(), "a dead device completed an admin command");
    std::thread::sleep(SETTLE);
    for v in 0..MSIX_VECTORS {
        r.d.vectors[v as usize].drain();
    }
    let before = all_ram(&r.d);
    // Doorbells of every kind, an EQ ack with arm, a BAR0 reset and a vfio-user reset.
    r.d.write_reg(REG_ADMIN_DB, 0x40);
    r.d.ring_sq_raw(&r.a, r.a.sq_pi.wrapping_add(8));
    r.d.arm_cq(&mut r.cq_a, CQ_ARM_NEXT);
    r.d.write_reg(reg_eq(COMP_EQ, EQ_DB), EQ_DB_ARM);
    r.d.write_reg(REG_RESET, RESET_VALUE);
    if let Link::Socket { client, .. } = &mut r.d.link {
        client
            .get_mut()
            .reset()
            .expect("DEVICE_RESET is still answered");
    }
    std::thread::sleep(SETTLE);
    assert!(before == all_ram(&r.d), "a dead device wrote guest memory");
    for v in 0..MSIX_VECTORS {
        assert!(
            !r.d.wait_vector(v, Duration::ZERO),
            "a dead device fired vector {v}"
        );
    }
    for reg in [REG_VERSION, REG_STATUS, REG_FATAL_CODE, REG_SCRATCH] {
        assert_eq!(
            r.d.read_reg(reg),
            u32::MAX,
            "BAR0 {reg:#x} of a dead device"
        );
    }
    assert_eq!(
        r.d.db.read_word(0),
        u32::MAX,
        "doorbell BAR of a dead device"
    );
}

#[test]
fn silent_death_stops_everything_and_reads_all_ones() {
    let mut r = live_rig(0x41);
    die(&r, DeathMode::Silent);
    // No word to the driver: no event, no vector.
    assert!(r.d.poll_eq(EQ_ADMIN_ASYNC).is_none());
    assert_ignores_new_work(&mut r);
}

#[test]
fn reported_death_raises_the_fatal_event_first() {
    let mut r = live_rig(0x42);
    die(&r, DeathMode::Report);
    let e = r.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_DEVICE_FATAL);
    assert_eq!(e.aux, FATAL_INTERNAL);
    assert!(
        r.d.wait_vector(EQ_ADMIN_ASYNC, TIMEOUT),
        "no MSI-X for the fatal event"
    );
    assert_ignores_new_work(&mut r);
}

#[test]
fn a_second_death_changes_nothing() {
    let mut r = live_rig(0x43);
    die(&r, DeathMode::Silent);
    r.d.shared().die(DeathMode::Report);
    std::thread::sleep(SETTLE);
    // The report comes only as the first act of a living device.
    assert!(r.d.poll_eq(EQ_ADMIN_ASYNC).is_none());
    assert_stays_dead(&mut r);
}

#[test]
fn a_hung_device_answers_registers_but_never_completes_a_reset() {
    let mut r = live_rig(0x44);
    let version = r.d.read_reg(REG_VERSION);
    die(&r, DeathMode::Hang);
    // Reported as `Report` does.
    let e = r.d.wait_event(EQ_ADMIN_ASYNC, EQE_TYPE_DEVICE_FATAL);
    assert_eq!(e.aux, FATAL_INTERNAL);
    assert!(r.d.shared().is_hung());
    send_one(&mut r, 2);
    std::thread::sleep(SETTLE);
    for v in 0..MSIX_VECTORS {
        r.d.vectors[v as usize].drain();
    }
    let before = all_ram(&r.d);
    // The driver's reset is taken (STATUS_READY clears) and never finishes.
    r.d.write_reg(REG_RESET, RESET_VALUE);
    std::thread::sleep(SETTLE);
    assert_eq!(r.d.read_reg(REG_VERSION), version, "BAR0 stops answering");
    assert_eq!(r.d.read_reg(REG_FATAL_CODE), FATAL_INTERNAL);
    let status = r.d.read_reg(REG_STATUS);
    assert_ne!(status, u32::MAX, "a hung device's BAR0 reads all-ones");
    assert_eq!(status & STATUS_READY, 0, "a hung device finished its reset");
    assert_ne!(status & STATUS_FATAL, 0);
    assert_ne!(
        r.d.db.read_word(0),
        u32::MAX,
        "the doorbell BAR reads all-ones"
    );
    assert!(before == all_ram(&r.d), "a hung device wrote guest memory");
    for v in 0..MSIX_VECTORS {
        assert!(
            !r.d.wait_vector(v, Duration::ZERO),
            "a hung device fired vector {v}"
        );
    }
    assert!(r.d.poll_cq(&mut r.cq_a).is_none() && r.d.poll_cq(&mut r.cq_b).is_none());
}
