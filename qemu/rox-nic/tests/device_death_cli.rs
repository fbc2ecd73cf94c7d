//! rox-nic's `--die-on`: the binary's device dies on the signal given, keeps serving its
//! vfio-user client (BAR0 then reads all-ones, config space still answers) and exits as
//! always when the client leaves; bad specs are refused.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rox_nic::testkit::process;
use rox_uapi::regs::*;
use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;

fn rd(c: &mut vfio_user::Client, region: u32, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(region, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn signal_kills_the_device_not_the_process() {
    let exe = env!("CARGO_BIN_EXE_rox-nic");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rox0.sock");
    let mut child = Command::new(exe)
        .args([
            "--socket",
            path.to_str().unwrap(),
            "--mac",
            "52:54:00:00:00:07",
        ])
        .args(["--die-on", "rtmin+1", "--die-on", "rtmin+2,fatal=report"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    process::wait_listening(&path, Duration::from_secs(10), "rox-nic");
    let mut c = vfio_user::Client::new(&path).unwrap();
    assert_eq!(rd(&mut c, BAR_CTRL, REG_VERSION), rox_uapi::ROX_VERSION);
    let vendor = rd(&mut c, VFIO_PCI_CONFIG_REGION_INDEX, 0);
    let kill = Command::new("kill")
        .args(["-s", "RTMIN+1", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success(), "kill: {kill}");
    wait_until("BAR0 did not go all-ones", || {
        rd(&mut c, BAR_CTRL, REG_VERSION) == u32::MAX
    });
    // The process lives on and still answers QEMU: config space, a reset.
    assert!(child.try_wait().unwrap().is_none(), "rox-nic exited");
    assert_eq!(rd(&mut c, VFIO_PCI_CONFIG_REGION_INDEX, 0), vendor);
    c.reset().unwrap();
    assert_eq!(rd(&mut c, BAR_CTRL, REG_STATUS), u32::MAX);
    // The client leaves: rox-nic exits as always.
    drop(c);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "rox-nic did not exit"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn bad_die_on_specs_are_refused() {
    let exe = env!("CARGO_BIN_EXE_rox-nic");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rox0.sock");
    for bad in ["usr2", "rtmin+1,fatal=loud", "rtmin+500"] {
        let out = Command::new(exe)
            .args([
                "--socket",
                path.to_str().unwrap(),
                "--mac",
                "52:54:00:00:00:08",
            ])
            .args(["--die-on", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "--die-on {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--die-on"), "--die-on {bad}: {err}");
        assert!(!path.exists());
    }
}
