//! Why an idle sleep ended (`STAT_WAKEUPS_WIRE`, `_TIMER`, `_DRIVER`): a doorbell rung while
//! the device is up for any of these needs no wake, so the guest tests that count wakes
//! (tests/guest/wake_after_idle.py) learn from them which rings could find the device awake.
//! A wake (`WAKE_REG`) is none of the three: it is `STAT_WAKES_TRAPPED`.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rox_nic::port::socket::RECONNECT_INTERVAL;
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::regs::*;

const TIMEOUT: Duration = Duration::from_secs(20);

/// The wake-up counters, and the wakes, in this order.
const CAUSES: [usize; 5] = [
    STAT_WAKEUPS,
    STAT_WAKEUPS_WIRE,
    STAT_WAKEUPS_TIMER,
    STAT_WAKEUPS_DRIVER,
    STAT_WAKES_TRAPPED,
];

fn causes(d: &mut TestDriver) -> [u64; 5] {
    let s = d.query_stats();
    CAUSES.map(|i| s[i])
}

fn since(now: [u64; 5], before: [u64; 5]) -> [u64; 5] {
    std::array::from_fn(|i| now[i] - before[i])
}

/// Waits until the device says it sleeps (a register read does not wake it).
fn sleeping(d: &TestDriver) {
    let start = Instant::now();
    while d.read_reg(REG_IDLE) != DB_DEVICE_IDLE {
        assert!(start.elapsed() < TIMEOUT, "the device never went to sleep");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until the device's loop has run since `passes` (it woke up).
fn woke_since(d: &TestDriver, passes: u64) {
    let start = Instant::now();
    while d.shared().loop_passes.load(Ordering::Relaxed) == passes {
        assert!(start.elapsed() < TIMEOUT, "the device did not wake up");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn config(last: u8) -> DeviceConfig {
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, last]);
    cfg.idle_after = Duration::from_millis(2);
    cfg
}

#[test]
fn a_frame_is_a_wire_wakeup_a_wake_is_none_and_a_command_is_the_drivers() {
    let dir = tempfile::tempdir().unwrap();
    let (wire_path, dev_path) = (dir.path().join("wire.sock"), dir.path().join("dev.sock"));
    let (guest_path, nd_path) = (dir.path().join("guest.sock"), dir.path().join("nd.sock"));
    let wire = UnixDatagram::bind(&wire_path).unwrap();
    let guest = UnixDatagram::bind(&guest_path).unwrap();
    guest.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut cfg = config(0x31);
    cfg.port = Some(PortConfig::new(LinkSpec::Dgram {
        local: dev_path.clone(),
        remote: wire_path,
    }));
    cfg.netdev = Some(LinkSpec::Dgram {
        local: nd_path,
        remote: guest_path,
    });
    let mut d = TestDriver::new(cfg);
    sleeping(&d);
    // This query wakes the device too, before it counts: it is in `before`.
    let before = causes(&mut d);

    // A broadcast frame on the port (for the netdev, which gets it: the device woke).
    sleeping(&d);
    let frame = [&[0xff; 6][..], &[2, 0, 0, 0, 9, 9], &[0x08, 0x06], &[0; 46]].concat();
    wire.send_to(&frame, &dev_path).unwrap();
    let mut got = [0u8; 128];
    assert_eq!(guest.recv(&mut got).unwrap(), frame.len());

    // A trapped wake.
    sleeping(&d);
    let passes = d.shared().loop_passes.load(Ordering::Relaxed);
    d.write_reg(WAKE_REG, TEST_DB_PAGE);
    woke_since(&d, passes);

    // And the query below, an admin doorbell, wakes it once more.
    sleeping(&d);
    let [sleeps, wire, timer, driver, trapped] = since(causes(&mut d), before);
    assert_eq!((wire, timer, driver, trapped), (1, 0, 1, 1));
    assert_eq!(
        sleeps, 3,
        "the frame, the wake and the query each ended one sleep"
    );
}

#[test]
fn a_link_retry_is_a_timer_wakeup() {
    // A netdev whose peer is not there: the device tries again every RECONNECT_INTERVAL,
    // which ends its sleeps with nothing to read.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(0x32);
    cfg.netdev = Some(LinkSpec::StreamConnect(dir.path().join("nobody.sock")));
    let mut d = TestDriver::new(cfg);
    sleeping(&d);
    let before = causes(&mut d);
    let start = Instant::now();
    let mut queries = 0;
    let after = loop {
        std::thread::sleep(RECONNECT_INTERVAL * 2);
        sleeping(&d);
        queries += 1;
        let now = causes(&mut d);
        if now[2] > before[2] {
            break now;
        }
        assert!(start.elapsed() < TIMEOUT, "no sleep ended for the retry");
    };
    let [sleeps, wire, timer, driver, trapped] = since(after, before);
    assert_eq!((wire, trapped), (0, 0));
    // A query that came while a retry had it up woke nothing; a sleep may end for both.
    assert!(
        driver <= queries,
        "{driver} driver wake-ups from {queries} queries"
    );
    assert!(
        timer >= 1 && sleeps <= timer + driver,
        "{sleeps} sleeps, {timer} timers"
    );
}
