//! The device over a real vfio-user socket, driven by the `vfio_user` crate's client the way
//! QEMU drives it: config space, DMA_MAP of a memfd, SET_IRQS with eventfds, trapped BAR0
//! accesses and the mmapped doorbell BAR.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use rox_nic::device::doorbell::DoorbellBar;
use rox_nic::device::EventFd;
use rox_nic::testkit::process::{self, StopOnDrop};
use rox_nic::testkit::{GuestRam, RAM_BASE};
use rox_nic::{DeviceConfig, RoxNic};
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use vfio_bindings::bindings::vfio::*;

const RAM_SIZE: u64 = 16 << 20;
const MAC: [u8; 6] = [0x52, 0x54, 0, 0xaa, 0xbb, 0xcc];

fn rd(c: &mut vfio_user::Client, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(BAR_CTRL, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn wr(c: &mut vfio_user::Client, off: u64, v: u32) {
    c.region_write(BAR_CTRL, off, &v.to_le_bytes()).unwrap();
}

/// Waits up to 5 s for `done`, looking again after `nap` (zero: at once); fails saying `what`.
fn wait_for(what: &str, nap: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(5), "{what}");
        if nap.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
        }
    }
}

/// Sets up EQ 0 and the admin queue through BAR0 and runs READ_MAC through them: its
/// completion, the MAC, and EQ 0's event with its interrupt on `vectors[0]`.
fn read_mac_through_the_admin_queue(
    c: &mut vfio_user::Client,
    ram: &mut GuestRam,
    vectors: &[EventFd],
) {
    assert_eq!(rd(c, REG_VERSION), rox_uapi::ROX_VERSION);
    assert!(rd(c, REG_STATUS) & STATUS_READY != 0);
    let log_depth = 2;
    let cmd_ring = ram.alloc(4096, 4096);
    let cpl_ring = ram.alloc(4096, 4096);
    let eq = ram.alloc(4096, 4096);
    wr(c, reg_eq(0, EQ_ADDR_LO), eq as u32);
    wr(c, reg_eq(0, EQ_ADDR_HI), (eq >> 32) as u32);
    wr(c, reg_eq(0, EQ_LOG_DEPTH), 4);
    wr(c, reg_eq(0, EQ_CTRL), EQ_CTRL_ENABLE);
    wr(c, REG_ADMIN_CMD_BASE_LO, cmd_ring as u32);
    wr(c, REG_ADMIN_CMD_BASE_HI, (cmd_ring >> 32) as u32);
    wr(c, REG_ADMIN_CPL_BASE_LO, cpl_ring as u32);
    wr(c, REG_ADMIN_CPL_BASE_HI, (cpl_ring >> 32) as u32);
    wr(c, REG_ADMIN_LOG_DEPTH, log_depth);
    wr(c, REG_ADMIN_CTRL, ADMIN_CTRL_ENABLE);
    let cmd = AdminCmd {
        hdr: AdminCmdHdr {
            opcode: ADMIN_OP_READ_MAC,
            cmd_id: 0x77,
            ..Default::default()
        },
        payload: AdminPayload {
            raw: [0; ADMIN_PAYLOAD_SIZE],
        },
    };
    ram.write_obj(cmd_ring, &cmd);
    wr(c, REG_ADMIN_DB, 1);
    wait_for("no admin completion", Duration::ZERO, || {
        ram.owner(cpl_ring + ADMIN_CPL_SIZE as u64 - 1) == owner_for(0, 1 << log_depth)
    });
    let cpl: AdminCpl = ram.read_obj(cpl_ring);
    assert_eq!((cpl.cmd_id, cpl.status), (0x77, ADMIN_STATUS_SUCCESS));
    assert_eq!(cpl.result0.to_le_bytes(), MAC[..4]);
    wait_for(
        "MSI-X vector 0 did not fire",
        Duration::from_millis(1),
        || vectors[0].drain(),
    );
    let eqe: Eqe = ram.read_obj(eq);
    assert_eq!(eqe.event_type, EQE_TYPE_ADMIN);
}

#[test]
fn vfio_user_client_programs_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rox.sock");
    let nic = RoxNic::new(DeviceConfig::new(MAC)).unwrap();
    let server = rox_nic::server::bind(&path, &nic).unwrap();
    let thread = std::thread::spawn(move || {
        let mut nic = nic;
        server.run(&mut nic).unwrap();
    });
    let mut c = vfio_user::Client::new(&path).unwrap();

    // A second server on the same path is refused with a clear error.
    let other = RoxNic::new(DeviceConfig::new(MAC)).unwrap();
    match rox_nic::server::bind(&path, &other) {
        Err(rox_nic::server::ServerError::SocketInUse(_)) => {}
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("second server bound a live socket"),
    }
    drop(other);

    // Identity from config space.
    let mut id = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut id)
        .unwrap();
    assert_eq!(u16::from_le_bytes([id[0], id[1]]), PCI_VENDOR_ID);
    assert_eq!(u16::from_le_bytes([id[2], id[3]]), PCI_DEVICE_ID);
    assert_eq!(c.region(BAR_CTRL).unwrap().size, BAR_CTRL_SIZE);
    let db = c.region(BAR_DB).unwrap();
    assert_eq!(db.size, BAR_DB_SIZE);
    assert_eq!(db.sparse_areas.len(), 1);
    assert!(db.flags & VFIO_REGION_INFO_FLAG_MMAP != 0);
    let db_file = db
        .file_offset
        .as_ref()
        .expect("doorbell BAR comes with an mmap fd")
        .file()
        .try_clone()
        .unwrap();
    // Mapped from the fd the server sent for BAR2, as QEMU does.
    let db_map = DoorbellBar::map(db_file).unwrap();
    // A trapped byte store (QEMU without the mmap) lands as that byte: a news byte of the
    // summary doorbell, which a device dropping it would never look behind.
    let news = 3 * ROX_PAGE_SIZE as u64 + DB_NEWS_OFFSET as u64 + 2;
    c.region_write(BAR_DB, news, &[DB_NEWS_SET]).unwrap();
    assert_eq!(db_map.read_word(news - 2), u32::from(DB_NEWS_SET) << 16);
    c.region_write(BAR_DB, news, &[0]).unwrap();
    assert_eq!(db_map.read_word(news - 2), 0);

    // Guest RAM and interrupts.
    let mut ram = GuestRam::new(RAM_BASE, RAM_SIZE);
    c.dma_map(0, RAM_BASE, RAM_SIZE, ram.file.as_raw_fd())
        .unwrap();
    let irq = c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX).unwrap();
    assert_eq!(irq.count, MSIX_VECTORS);
    let vectors: Vec<EventFd> = (0..MSIX_VECTORS).map(|_| EventFd::new().unwrap()).collect();
    let fds: Vec<i32> = vectors.iter().map(|e| e.as_raw_fd()).collect();
    c.set_irqs(
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        MSIX_VECTORS,
        &fds,
    )
    .unwrap();

    // Registers and one admin command through the rings, with its EQ 0 interrupt.
    read_mac_through_the_admin_queue(&mut c, &mut ram, &vectors);

    // The device announces idleness in the doorbell page the client mapped (the kernel's
    // page always; others only while an object's doorbell is on them).
    wait_for("device never went idle", Duration::from_millis(1), || {
        db_map.idle(DB_PAGE_KERNEL) == DB_DEVICE_IDLE
    });
    assert_eq!(db_map.idle(3), DB_DEVICE_RUNNING, "no object on page 3");
    wr(&mut c, WAKE_REG, DB_PAGE_KERNEL);

    // Device reset over the protocol clears the admin queue state.
    c.reset().unwrap();
    wait_for("not ready after a reset", Duration::ZERO, || {
        rd(&mut c, REG_STATUS) & STATUS_READY != 0
    });
    assert_eq!(rd(&mut c, REG_ADMIN_CTRL), 0);

    drop(db_map);
    c.shutdown().unwrap();
    drop(c);
    thread.join().unwrap();
}

#[test]
fn binary_serves_one_client_and_reports_bad_configuration() {
    let exe = env!("CARGO_BIN_EXE_rox-nic");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rox0.sock");
    let d = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let port = format!("dgram:local={},remote={}", d("port.sock"), d("wire.sock"));
    let netdev = format!("dgram:local={},remote={}", d("nd.sock"), d("guest.sock"));
    let mut child = StopOnDrop(
        std::process::Command::new(exe)
            .args([
                "--socket",
                path.to_str().unwrap(),
                "--mac",
                "52:54:00:00:00:01",
                "--port",
                &port,
                "--netdev",
                &netdev,
                "--mtu",
                "1500",
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    process::wait_listening(&path, Duration::from_secs(10), "rox-nic");
    let mut c = vfio_user::Client::new(&path).unwrap();
    assert_eq!(rd(&mut c, REG_VERSION), rox_uapi::ROX_VERSION);

    // A second instance on the same socket fails with a clear message.
    let out = std::process::Command::new(exe)
        .args([
            "--socket",
            path.to_str().unwrap(),
            "--mac",
            "52:54:00:00:00:02",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use"), "stderr: {err}");

    // The server exits when its client goes away.
    c.shutdown().unwrap();
    drop(c);
    let start = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success());
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            panic!("rox-nic did not exit after the client left");
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    // Bad arguments: a malformed MAC, faults without a port, bad faults, a bad port, a tap
    // that does not exist, an MTU out of range.
    for (args, says) in [
        (vec!["--mac", "52:54:00"], "not a MAC address"),
        (
            vec!["--mac", "52:54:00:00:00:03", "--faults", "loss=0.1"],
            "need --port",
        ),
        (
            vec![
                "--mac",
                "52:54:00:00:00:03",
                "--port",
                &port,
                "--faults",
                "loss=7",
            ],
            "loss=7",
        ),
        (
            vec!["--mac", "52:54:00:00:00:03", "--port", "udp:x"],
            "want tap:IFNAME",
        ),
        (
            vec!["--mac", "52:54:00:00:00:03", "--port", "tap:rox-no-such"],
            "rox-no-such",
        ),
        (
            vec![
                "--mac",
                "52:54:00:00:00:03",
                "--port",
                &port,
                "--mtu",
                "100",
            ],
            "MTU 100",
        ),
    ] {
        let out = std::process::Command::new(exe)
            .args(["--socket", &d("unused.sock")])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn testkit_over_socket_runs_traffic_events_and_wake() {
    use rox_nic::testkit::*;
    use rox_uapi::verbs::*;
    const PD: u32 = 1;
    let all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let mut cfg = DeviceConfig::new(MAC);
    cfg.idle_after = Duration::from_millis(5);
    let mut d = TestDriver::over_socket(cfg);
    let (mut cq, mut qp) = d.self_connected_rc(PD, 6, all);
    let (buf, key) = d.buffer(PD, 1 << 16, all);
    d.ram.write(buf, &pattern(5, 9000));
    // SEND to itself with an armed CQ: CQEs, a completion event, MSI-X through SET_IRQS eventfds.
    d.post_recv(
        &mut qp,
        1,
        &[Sge {
            addr: buf + 20_000,
            length: 10_000,
            lkey: key,
        }],
    );
    d.arm_cq(&mut cq, CQ_ARM_NEXT);
    d.post_send(
        &mut qp,
        &send_wqe(
            2,
            WR_SEND,
            WQE_FLAG_SIGNALED,
            &[Sge {
                addr: buf,
                length: 9000,
                lkey: key,
            }],
        ),
    );
    let mut got = [d.wait_cqe(&mut cq), d.wait_cqe(&mut cq)];
    got.sort_by_key(|c| c.wr_id);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (1, WC_SUCCESS, 9000)
    );
    assert_eq!((got[1].wr_id, got[1].status), (2, WC_SUCCESS));
    assert_eq!(d.ram.read(buf + 20_000, 9000), pattern(5, 9000));
    assert_eq!(d.wait_event(COMP_EQ, EQE_TYPE_COMPLETION).handle, cq.id);
    assert!(d.wait_vector(COMP_EQ, Duration::from_secs(2)));
    // Let it fall asleep; the doorbell + wake register (a real trapped write) wakes it.
    let start = Instant::now();
    while d.db.idle(TEST_DB_PAGE) != DB_DEVICE_IDLE {
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(1));
    }
    let wakes = d.wakes;
    let w = rdma_wqe(
        3,
        WR_RDMA_WRITE,
        Sge {
            addr: buf,
            length: 64,
            lkey: key,
        },
        buf + 40_000,
        key,
    );
    d.post_send(&mut qp, &w);
    assert_eq!(d.wakes, wakes + 1);
    assert_eq!(d.wait_cqe(&mut cq).wr_id, 3);
}
