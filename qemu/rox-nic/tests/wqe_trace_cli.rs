//! The WQE trace from the command line: `rox-nic --trace-wqe N` writes its trace on SIGUSR2,
//! `rox-trace` reads it; bad trace arguments and files are refused with a clear message.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rox_nic::testkit::process;
use rox_nic::trace::{Dump, Kind};

const NIC: &str = env!("CARGO_BIN_EXE_rox-nic");
const TOOL: &str = env!("CARGO_BIN_EXE_rox-trace");

fn wait_for(path: &Path, what: &str) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigusr2_writes_the_trace_and_rox_trace_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rox0.sock");
    let file = dir.path().join("rox0.wqe-trace");
    let mut child = Command::new(NIC)
        .args([
            "--socket",
            socket.to_str().unwrap(),
            "--mac",
            "52:54:00:00:00:07",
        ])
        .args([
            "--trace-wqe",
            "64",
            "--trace-wqe-file",
            file.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    process::wait_listening(&socket, Duration::from_secs(10), "rox-nic");
    let kill = Command::new("kill")
        .args(["-USR2", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    wait_for(&file, "trace file after SIGUSR2");
    // Written beside and renamed: once it exists it is whole.
    let dump = Dump::read_from(&mut std::fs::File::open(&file).unwrap()).unwrap();
    // No guest, no WQE: at most the data path's naps on its way to idle.
    assert!(
        dump.records.iter().all(|r| r.kind() == Some(Kind::Wait)),
        "{dump:?}"
    );
    assert_eq!(dump.overwritten, 0);
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGUSR2 does not end rox-nic"
    );
    // The client leaving ends it (the connection is what QEMU would hold).
    let c = vfio_user::Client::new(&socket).unwrap();
    c.shutdown().unwrap();
    drop(c);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("rox-nic did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success());

    let out = Command::new(TOOL).arg(&file).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 WQEs"));
    let json = dir.path().join("t.json");
    let out = Command::new(TOOL)
        .args([file.to_str().unwrap(), "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(doc["traceEvents"].is_array());
}

#[test]
fn bad_trace_arguments_and_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rox0.sock");
    let base = [
        "--socket",
        socket.to_str().unwrap(),
        "--mac",
        "52:54:00:00:00:08",
    ];
    let out = Command::new(NIC)
        .args(base)
        .args(["--trace-wqe", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least one record"));
    let out = Command::new(NIC)
        .args(base)
        .env("ROX_NIC_TRACE", "lots")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ROX_NIC_TRACE=\"lots\""));

    let not_a_trace = dir.path().join("x");
    std::fs::write(&not_a_trace, b"hello, this is no trace at all").unwrap();
    let out = Command::new(TOOL).arg(&not_a_trace).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a rox-nic WQE trace"));
    let out = Command::new(TOOL)
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert!(!out.status.success());
}
