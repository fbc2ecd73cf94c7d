//! The posted-wake companion (`server::ivshmem`, `rox_uapi::wake`): this test plays QEMU's
//! `ivshmem-doorbell` against rox-nic's ivshmem server, checks what it is handed (the record
//! naming the device by its BAR0 token, the eventfd of the device's peer), wakes the sleeping
//! device through that eventfd alone, and checks BAR0's wake registers, counters and idle
//! policy. A client that sends garbage or closes early does not hurt the device or the server.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rox_nic::server::ivshmem::{self, DEVICE_PEER, DEVICE_VECTOR, SHM_SIZE};
use rox_nic::sys::fdpass::recv_with_fds;
use rox_nic::testkit::loopback::{ALL_ACCESS, PD};
use rox_nic::testkit::*;
use rox_nic::DeviceConfig;
use rox_uapi::admin::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;
use rox_uapi::wake::{WakeCompanion, COMPANION_MAGIC};

fn socket_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("wake.sock")
}

/// A device with a companion, its idle grace long unless wakes are posted.
fn device(posted_idle_after: Duration) -> TestDriver {
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, 0x21]);
    cfg.posted_wake = true;
    cfg.idle_after = Duration::from_secs(60);
    cfg.posted_idle_after = posted_idle_after;
    TestDriver::new(cfg)
}

/// One ivshmem message as QEMU reads it: the number and the descriptor that came with it.
fn recv_msg(s: &UnixStream) -> (i64, Option<OwnedFd>) {
    let mut buf = [0u8; 8];
    let (n, mut fds) = recv_with_fds(s, &mut buf).expect("recv");
    assert_eq!(n, 8, "one whole message per read");
    assert!(fds.len() <= 1);
    (i64::from_le_bytes(buf), fds.pop())
}

/// What QEMU's ivshmem-doorbell gets on connecting: the shared memory and the device peer's
/// eventfd, checked against the protocol.
fn connect_as_qemu(path: &Path) -> (UnixStream, File, File) {
    let s = UnixStream::connect(path).expect("connect");
    assert!(matches!(recv_msg(&s), (0, None)), "protocol version 0");
    assert!(matches!(recv_msg(&s), (0, None)), "client id 0");
    let (peer, eventfd) = recv_msg(&s);
    assert_eq!(peer, i64::from(DEVICE_PEER), "connect of the device peer");
    let (shm_msg, shm) = recv_msg(&s);
    assert_eq!(shm_msg, -1, "the shared memory");
    (
        s,
        File::from(shm.expect("memfd")),
        File::from(eventfd.expect("eventfd")),
    )
}

fn token(d: &TestDriver) -> u64 {
    d.read_reg(REG_WAKE_TOKEN_LO) as u64 | (d.read_reg(REG_WAKE_TOKEN_HI) as u64) << 32
}

/// Waits until the device sleeps: idle announced, and its loop no longer running (it announces
/// idleness before it re-scans the doorbells, which a store now would still be seen by).
fn wait_asleep(d: &TestDriver) {
    let passes = || {
        d.shared()
            .loop_passes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never went to sleep"
        );
        if wait_idle(d, Duration::from_secs(5)) {
            let p = passes();
            std::thread::sleep(Duration::from_millis(5));
            if p == passes() && d.read_reg(REG_IDLE) == DB_DEVICE_IDLE {
                return;
            }
        }
    }
}

fn wait_idle(d: &TestDriver, within: Duration) -> bool {
    let start = Instant::now();
    while d.read_reg(REG_IDLE) != DB_DEVICE_IDLE {
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[test]
fn the_companion_names_its_device_and_its_eventfd_wakes_the_sleeping_device() {
    let mut d = device(Duration::from_micros(500));
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(&dir);
    ivshmem::bind(&path, d.shared()).unwrap().spawn().unwrap();
    // Clients that misbehave first: one closes at once, one sends garbage and closes
    // after the first message.
    drop(UnixStream::connect(&path).unwrap());
    let mut g = UnixStream::connect(&path).unwrap();
    let _ = g.write_all(&[0xa5; 4096]);
    let mut first = [0u8; 8];
    g.read_exact(&mut first).unwrap();
    drop(g);

    let (_qemu, shm, eventfd) = connect_as_qemu(&path);
    assert_eq!(shm.metadata().unwrap().len(), SHM_SIZE);
    let mut rec = [0u8; size_of::<WakeCompanion>()];
    shm.read_exact_at(&mut rec, 0).unwrap();
    let word = |at: usize, n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&rec[at..at + n]);
        u64::from_le_bytes(b)
    };
    assert_eq!(word(0, 8), COMPANION_MAGIC);
    let t = token(&d);
    assert_ne!(t, 0, "a device with a companion has a token");
    assert_eq!(
        word(8, 8),
        t,
        "the record names the device by its BAR0 token"
    );
    assert_eq!(word(16, 4), u64::from(DEVICE_PEER));
    assert_eq!(word(20, 4), u64::from(DEVICE_VECTOR));
    assert_ne!(d.read_reg(REG_CAPS) & CAP_POSTED_WAKE, 0);

    // Posted wakes: the device sleeps soon after its last work.
    let (mut cq, mut qp) = d.self_connected_rc(PD, 6, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    d.write_reg(REG_WAKE_MODE, WAKE_MODE_POSTED);
    assert_eq!(d.read_reg(REG_WAKE_MODE), WAKE_MODE_POSTED);
    // (A stats query is an admin command: it wakes the device, which then sleeps again.)
    let stats = d.query_stats();
    let (trapped, posted) = (stats[STAT_WAKES_TRAPPED], stats[STAT_WAKES_POSTED]);
    wait_asleep(&d);
    // A doorbell store alone sits unseen while the device sleeps...
    let w = rdma_wqe(1, WR_RDMA_WRITE, sge(buf, 16, key), buf + 4096, key);
    d.write_send(&mut qp, &w);
    d.doorbell_a(qp.db_slot, qp.sq_pi);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        d.poll_cq(&mut cq).is_none(),
        "a sleeping device must not poll"
    );
    // ...the companion's doorbell (QEMU writes 1 to the peer's eventfd) wakes it.
    (&eventfd).write_all(&1u64.to_ne_bytes()).unwrap();
    assert_eq!(d.wait_cqe(&mut cq).status, WC_SUCCESS);
    let stats = d.query_stats();
    assert!(
        stats[STAT_WAKES_POSTED] > posted,
        "the posted wake is counted"
    );
    assert_eq!(
        stats[STAT_WAKES_TRAPPED], trapped,
        "no trapped wake was needed"
    );

    // A reconnecting client gets the same record; the device still works.
    let (_qemu2, shm2, _) = connect_as_qemu(&path);
    let mut rec2 = [0u8; size_of::<WakeCompanion>()];
    shm2.read_exact_at(&mut rec2, 0).unwrap();
    assert_eq!(rec, rec2);
    d.post_send(
        &mut qp,
        &rdma_wqe(2, WR_RDMA_WRITE, sge(buf, 16, key), buf + 4096, key),
    );
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 2);
}

#[test]
fn trapped_wakes_keep_the_long_grace_and_posted_ones_shorten_it() {
    let mut d = device(Duration::from_millis(2));
    assert_eq!(
        d.read_reg(REG_WAKE_MODE),
        WAKE_MODE_TRAPPED,
        "reset: trapped"
    );
    assert!(
        !wait_idle(&d, Duration::from_millis(300)),
        "trapped wakes: idle only after idle_after (60 s)"
    );
    d.write_reg(REG_WAKE_MODE, WAKE_MODE_POSTED);
    assert!(
        wait_idle(&d, Duration::from_secs(5)),
        "posted wakes: idle after posted_idle_after"
    );
    // Unknown modes are ignored; a reset goes back to trapped.
    d.write_reg(REG_WAKE_MODE, 7);
    assert_eq!(d.read_reg(REG_WAKE_MODE), WAKE_MODE_POSTED);
    d.reset();
    assert_eq!(d.read_reg(REG_WAKE_MODE), WAKE_MODE_TRAPPED);
}

#[test]
fn without_a_companion_there_is_no_token_no_capability_and_no_posted_mode() {
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, 0x22]);
    cfg.idle_after = Duration::from_secs(60);
    cfg.posted_idle_after = Duration::from_millis(1);
    let mut d = TestDriver::new(cfg);
    assert_eq!(token(&d), 0);
    assert_eq!(d.read_reg(REG_CAPS) & CAP_POSTED_WAKE, 0);
    d.write_reg(REG_WAKE_MODE, WAKE_MODE_POSTED);
    assert_eq!(
        d.read_reg(REG_WAKE_MODE),
        WAKE_MODE_TRAPPED,
        "nothing could post a wake"
    );
    assert!(!wait_idle(&d, Duration::from_millis(200)));
    let dir = tempfile::tempdir().unwrap();
    assert!(ivshmem::bind(&socket_path(&dir), d.shared()).is_err());
    // Each trapped wake is counted.
    let before = d.query_stats()[STAT_WAKES_TRAPPED];
    d.write_reg(WAKE_REG, TEST_DB_PAGE);
    d.write_reg(WAKE_REG, TEST_DB_PAGE);
    assert_eq!(d.query_stats()[STAT_WAKES_TRAPPED], before + 2);
}

#[test]
fn with_posted_wakes_the_device_sleeps_again_without_spinning() {
    // Posted wakes, the default grace (none) and a posted spin of 0 (`--posted-spin-us 0`):
    // a device woken with nothing to do goes back to sleep on its first pass without work,
    // instead of polling for a spin period first (datapath/spin.rs).
    let mut cfg = DeviceConfig::new([2, 0, 0, 0, 0, 0x23]);
    cfg.posted_wake = true;
    cfg.idle_after = Duration::from_secs(60);
    cfg.posted_idle_after = rox_nic::device::DEFAULT_POSTED_IDLE_AFTER;
    cfg.posted_spin = Duration::ZERO;
    let mut d = TestDriver::new(cfg);
    d.wake_through_companion();
    wait_asleep(&d);
    let passes = || {
        d.shared()
            .loop_passes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    const WAKES: u64 = 40;
    let before = passes();
    for _ in 0..WAKES {
        d.shared().posted_wake.signal();
        wait_asleep(&d);
    }
    let per_wake = (passes() - before) as f64 / WAKES as f64;
    // A 10 µs spin is tens of passes; sleeping at once is one or two (the wake's own pass,
    // and one that finds the doorbells the wait left unscanned).
    assert!(
        per_wake <= 4.0,
        "{per_wake:.1} passes per wake: the device polled before it slept again"
    );
}

#[test]
fn the_sleeping_device_says_so_on_the_pages_with_objects_and_no_others() {
    // Announcing on all 256 pages cost ~5,000 instructions per sleep
    // (docs/benchmarks/session-16.md, "Session 16: instructions per message");
    // software only rings the doorbells of its objects.
    let mut d = device(Duration::from_micros(500));
    d.write_reg(REG_WAKE_MODE, WAKE_MODE_POSTED);
    let (mut cq, mut qp) = d.self_connected_rc(PD, 6, ALL_ACCESS);
    let (buf, key) = d.buffer(PD, 8192, ALL_ACCESS);
    wait_asleep(&d);
    let unused = [2, 100, DB_PAGE_COUNT - 1];
    assert_eq!(d.db.idle(TEST_DB_PAGE), DB_DEVICE_IDLE);
    assert_eq!(
        d.db.idle(DB_PAGE_KERNEL),
        DB_DEVICE_IDLE,
        "the kernel's page"
    );
    for page in unused {
        assert_eq!(
            d.db.idle(page),
            DB_DEVICE_RUNNING,
            "page {page} has no object"
        );
    }
    // The doorbell of an object on an announced page wakes it, and it says so there.
    let w = rdma_wqe(1, WR_RDMA_WRITE, sge(buf, 16, key), buf + 4096, key);
    d.post_send(&mut qp, &w);
    assert_eq!(d.wait_cqe(&mut cq).status, WC_SUCCESS);
    wait_asleep(&d);
    assert_eq!(d.db.idle(TEST_DB_PAGE), DB_DEVICE_IDLE);
    for page in unused {
        assert_eq!(
            d.db.idle(page),
            DB_DEVICE_RUNNING,
            "page {page} has no object"
        );
    }
}
