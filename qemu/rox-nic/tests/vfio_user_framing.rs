//! vfio-user framing through the real socket: whatever a request's outcome, rox-nic consumes
//! it whole (header and payload), answers it once with its own id (or not at all if it asked
//! for no reply), and the conversation stays in step. Each case sends something the server
//! could lose its place on and then checks a normal write and read of the scratch register
//! (`Client::in_step`). Cases: refused requests carrying payloads, a header and a payload cut
//! across writes with pauses, signals delivered to the rox-nic binary while it waits in
//! recv, and the requests QEMU's vfio-user client makes while SeaBIOS probes the device.

mod vfio_user_client;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rox_nic::server::Trace;
use rox_nic::testkit::{process, GuestRam, RAM_BASE};
use rox_uapi::regs::*;
use vfio_bindings::bindings::vfio::*;
use vfio_user_client::*;

const CMD_GET_REGION_INFO: u16 = 5;
const CMD_GET_REGION_IO_FDS: u16 = 6;
const CMD_GET_IRQ_INFO: u16 = 7;
const CMD_SET_IRQS: u16 = 8;
const CMD_DMA_READ: u16 = 11;
const CMD_DMA_WRITE: u16 = 12;
const CMD_DIRTY_PAGES: u16 = 14;
const EINVAL: u32 = libc::EINVAL as u32;

fn set_irqs_payload(flags: u32, index: u32, start: u32, count: u32) -> Vec<u8> {
    let mut p = Vec::new();
    for v in [20, flags, index, start, count] {
        p.extend_from_slice(&u32::to_le_bytes(v));
    }
    p
}

#[test]
fn refused_requests_with_payloads_are_consumed_whole_and_answered_with_their_own_id() {
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    let mut write_past_the_table = access(VFIO_PCI_NUM_REGIONS + 11, 0, 8);
    write_past_the_table.extend_from_slice(&[0xee; 8]);
    let mut bool_irqs = set_irqs_payload(
        VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_UNMASK,
        VFIO_PCI_MSIX_IRQ_INDEX,
        0,
        4,
    );
    bool_irqs.extend_from_slice(&[1, 1, 1, 1]);
    let cases: [(&str, u16, Vec<u8>); 7] = [
        ("an unknown command", 99, vec![0x5a; 24]),
        (
            "DMA_READ (the server's to send)",
            CMD_DMA_READ,
            vec![0x11; 24],
        ),
        ("DMA_WRITE", CMD_DMA_WRITE, vec![0x22; 40]),
        ("GET_REGION_IO_FDS", CMD_GET_REGION_IO_FDS, vec![0x33; 16]),
        ("DIRTY_PAGES", CMD_DIRTY_PAGES, vec![0x44; 24]),
        (
            "REGION_WRITE past the region table",
            CMD_REGION_WRITE,
            write_past_the_table,
        ),
        ("SET_IRQS with DATA_BOOL", CMD_SET_IRQS, bool_irqs),
    ];
    let mut errnos = Vec::new();
    for (round, (what, command, payload)) in cases.into_iter().enumerate() {
        let id = c.tx.send(command, 0, &payload, None);
        errnos.push((what, c.expect_error(id, command)));
        c.in_step(0x600d_0000 + round as u32);
    }
    assert!(
        errnos.iter().all(|&(_, e)| e != 0),
        "an error reply carries an errno: {errnos:?}"
    );
    c.close();
    dev.thread.join().unwrap().unwrap();
}

#[test]
fn a_refused_request_that_asked_for_no_reply_gets_none() {
    // QEMU forgets a posted write once sent: a reply to it is an "unexpected reply".
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    let mut payload = access(VFIO_PCI_NUM_REGIONS + 3, 0, 4);
    payload.extend_from_slice(&[1, 2, 3, 4]);
    c.tx.send(CMD_REGION_WRITE, FLAG_NO_REPLY, &payload, None);
    // A request carrying a reply's type is not a request: nothing to answer either.
    c.tx.send(CMD_REGION_READ, TYPE_REPLY, &access(0, 0, 4), None);
    c.in_step(0x0b5e);
    c.close(); // fails on any reply nobody asked for
    dev.thread.join().unwrap().unwrap();
}

/// Writes `bytes` in pieces cut at `cuts`, pausing between them long enough for the server
/// to have read what came so far.
fn send_cut(c: &mut Client, bytes: &[u8], cuts: &[usize]) {
    let mut from = 0;
    for &to in cuts.iter().chain([bytes.len()].iter()) {
        c.tx.sock.write_all(&bytes[from..to]).unwrap();
        thread::sleep(Duration::from_millis(150));
        from = to;
    }
}

#[test]
fn a_header_or_payload_cut_across_writes_with_pauses_is_one_message() {
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    let mut next = c.tx.next_id;
    let mut message = |command: u16, payload: &[u8]| {
        let mut m = header(next, command, 16 + payload.len(), 0);
        m.extend_from_slice(payload);
        next += 1;
        (next - 1, m)
    };
    // A write cut inside its header (3 bytes), and another inside its data.
    let mut w = access(BAR_CTRL, REG_SCRATCH, 4);
    w.extend_from_slice(&0x1234_5678u32.to_le_bytes());
    let (id, m) = message(CMD_REGION_WRITE, &w);
    send_cut(&mut c, &m, &[3, 9]);
    c.expect_reply(id, CMD_REGION_WRITE);
    let (id, m) = message(CMD_REGION_READ, &access(BAR_CTRL, REG_SCRATCH, 4));
    send_cut(&mut c, &m, &[15]);
    assert_eq!(
        c.expect_reply(id, CMD_REGION_READ).body[16..],
        0x1234_5678u32.to_le_bytes()
    );
    w[16..].copy_from_slice(&0x9abc_def0u32.to_le_bytes());
    let (id, m) = message(CMD_REGION_WRITE, &w);
    send_cut(&mut c, &m, &[16, 30]);
    c.expect_reply(id, CMD_REGION_WRITE);
    c.tx.next_id = next;
    assert_eq!(c.read32(BAR_CTRL, REG_SCRATCH), 0x9abc_def0);
    c.close();
    dev.thread.join().unwrap().unwrap();
}

/// The rox-nic binary on a socket in `dir`, its log in `dir/rox-nic.log`.
fn start_binary(dir: &std::path::Path) -> (Child, std::path::PathBuf) {
    let path = dir.join("rox.sock");
    let log = std::fs::File::create(dir.join("rox-nic.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rox-nic"))
        .args([
            "--socket",
            path.to_str().unwrap(),
            "--mac",
            "52:54:00:00:00:31",
        ])
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    // Waits for the listening socket without connecting: rox-nic serves one client only.
    process::wait_listening(&path, Duration::from_secs(10), "rox-nic");
    (child, path)
}

/// Waits (10 s at most) until rox-nic's log holds `count` vfio-user trace dumps.
fn wait_for_dumps(log: &std::path::Path, count: usize) {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches("vfio-user trace:").count() >= count {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "rox-nic printed no trace for SIGUSR1 #{count} within 10 s:\n{text}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn sigusr1(child: &Child) {
    let ok = Command::new("kill")
        .args(["-USR1", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -USR1 failed");
}

#[test]
fn signals_to_the_binary_while_it_waits_in_recv_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (child, path) = start_binary(dir.path());
    let mut c = Client::connect(&path, Duration::ZERO);
    let log_path = dir.path().join("rox-nic.log");
    let mut dumps = 0;
    // Each signal is sent only once the last one's dump is in the log: two SIGUSR1s pending at
    // once are one signal (on a loaded host a fixed pause between them was not enough).
    let mut signal = |child: &Child| {
        sigusr1(child);
        dumps += 1;
        wait_for_dumps(&log_path, dumps);
    };
    const SIGNALS: usize = 20;
    for round in 0..SIGNALS as u32 {
        // Idle in recv between messages, then inside a payload. (A cut inside a header is
        // the test above's; here only the signals differ from an ordinary conversation.)
        signal(&child);
        let mut w = access(BAR_CTRL, REG_SCRATCH, 4);
        w.extend_from_slice(&round.to_le_bytes());
        let id = c.tx.next_id;
        c.tx.next_id += 1;
        let mut m = header(id, CMD_REGION_WRITE, 16 + w.len(), 0);
        m.extend_from_slice(&w);
        c.tx.sock.write_all(&m[..21]).unwrap();
        thread::sleep(Duration::from_millis(20));
        signal(&child);
        c.tx.sock.write_all(&m[21..]).unwrap();
        c.expect_reply(id, CMD_REGION_WRITE);
        assert_eq!(c.read32(BAR_CTRL, REG_SCRATCH), round);
    }
    c.close();
    let log = wait_exit(child, dir.path());
    // Every signal was taken (the trace printed), none disturbed the conversation.
    assert_eq!(
        log.matches("vfio-user trace:").count(),
        2 * SIGNALS,
        "{log}"
    );
}

/// Waits (10 s at most) for the rox-nic binary to exit after its client left; its log.
fn wait_exit(mut child: Child, dir: &std::path::Path) -> String {
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("rox-nic did not exit after its client left");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let log = std::fs::read_to_string(dir.join("rox-nic.log")).unwrap();
    assert!(status.success(), "rox-nic: {status}\n{log}");
    log
}

#[test]
fn refused_requests_show_in_the_trace_the_binary_dumps_on_sigusr1() {
    let dir = tempfile::tempdir().unwrap();
    let (child, path) = start_binary(dir.path());
    let mut c = Client::connect(&path, Duration::ZERO);
    // Refused by the server loop before the device sees it: a read of the ROM region
    // (size 0), and an unknown command that asked for no reply. Refused by the device: an
    // INTx trigger with vectors (rox-nic has MSI-X only).
    let rom = c.tx.send(
        CMD_REGION_READ,
        0,
        &access(VFIO_PCI_ROM_REGION_INDEX, 0, 4),
        None,
    );
    assert_eq!(c.expect_error(rom, CMD_REGION_READ), EINVAL);
    let unknown = c.tx.send(77, FLAG_NO_REPLY, &[0x5a; 8], None);
    let intx = c.tx.send(
        CMD_SET_IRQS,
        0,
        &set_irqs_payload(
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_INTX_IRQ_INDEX,
            0,
            1,
        ),
        None,
    );
    assert_eq!(c.expect_error(intx, CMD_SET_IRQS), EINVAL);
    c.in_step(0xd0d0);
    sigusr1(&child);
    // The dump is written by a thread of its own: wait for its last line (the in-step read).
    let t0 = Instant::now();
    let dump = loop {
        let log = std::fs::read_to_string(dir.path().join("rox-nic.log")).unwrap();
        if let Some(at) = log.find("vfio-user trace:") {
            if log[at..].contains("read  BAR0") {
                break log[at..].to_string();
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no trace dump after SIGUSR1:\n{log}"
        );
        thread::sleep(Duration::from_millis(20));
    };
    let expected = [
        format!(
            "REFUSED request id {rom} REGION_READ (command 9, 32 bytes): EINVAL: 4 bytes at 0x0 \
             are not inside region {VFIO_PCI_ROM_REGION_INDEX} (0 bytes"
        ),
        format!(
            "REFUSED request id {unknown} unknown (command 77, 24 bytes): EOPNOTSUPP: command 77 \
             (unknown) is not served; NO_REPLY: not answered"
        ),
        format!("SET_IRQS index {VFIO_PCI_INTX_IRQ_INDEX} start 0 count 1\n"),
        format!(
            "REFUSED request id {intx} DEVICE_SET_IRQS (command 8, 36 bytes): EINVAL: the device \
             refused it: "
        ),
    ];
    let mut from = 0;
    for line in &expected {
        let at = dump[from..]
            .find(line.as_str())
            .unwrap_or_else(|| panic!("{line:?} not in the dump (in order):\n{dump}"));
        from += at + line.len();
    }
    c.close();
    wait_exit(child, dir.path());
}

#[test]
fn a_header_whose_size_cannot_be_a_message_ends_the_connection_instead_of_waiting() {
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let c = Client::connect(&dev.path, Duration::ZERO);
    // 8 bytes: less than the header itself. No later byte can be known to start a message.
    let mut sock = c.tx.sock.try_clone().unwrap();
    sock.write_all(&header(77, CMD_REGION_READ, 8, 0)).unwrap();
    let t0 = Instant::now();
    let result = loop {
        if dev.thread.is_finished() {
            break dev.thread.join().unwrap();
        }
        assert!(
            t0.elapsed() < QEMU_WAIT,
            "the server is still waiting on a message that cannot be framed"
        );
        thread::sleep(Duration::from_millis(10));
    };
    let err = result.expect_err("the server must give up on the stream");
    assert!(err.contains("less than the header"), "{err}");
}

#[test]
fn a_message_past_the_size_limit_is_read_whole_and_refused() {
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    let count = 2u32 << 20;
    let mut payload = access(BAR_CTRL, 0, count);
    payload.resize(16 + count as usize, 0xab);
    let id = c.tx.send(CMD_REGION_WRITE, 0, &payload, None);
    assert_eq!(c.expect_error(id, CMD_REGION_WRITE), libc::E2BIG as u32);
    // The same for a VERSION without a NUL-terminated string and one too short to hold a
    // version: refused or answered, never a crash.
    let id = c.tx.send(CMD_VERSION, 0, &[0, 0, 2, 0, b'{', b'x'], None);
    c.expect_reply(id, CMD_VERSION);
    let id = c.tx.send(CMD_VERSION, 0, &[0], None);
    assert_eq!(c.expect_error(id, CMD_VERSION), EINVAL);
    c.in_step(0xb16);
    c.close();
    dev.thread.join().unwrap().unwrap();
}

#[test]
fn the_requests_of_a_firmware_boot_get_the_answers_a_kernel_vfio_device_gives() {
    let dev = start_device(4096);
    let ram = GuestRam::new(RAM_BASE, RAM_SIZE);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    // QEMU's realize: every region's info (index == num_regions too: QEMU's bound check is
    // `index > num_initial_regions`) and every IRQ index's.
    for index in 0..=VFIO_PCI_NUM_REGIONS {
        let mut p = Vec::new();
        for v in [32, 0, index, 0, 0, 0, 0, 0] {
            p.extend_from_slice(&u32::to_le_bytes(v));
        }
        let id = c.tx.send(CMD_GET_REGION_INFO, 0, &p, None);
        if index == VFIO_PCI_NUM_REGIONS {
            assert_eq!(c.expect_error(id, CMD_GET_REGION_INFO), EINVAL);
        } else {
            let r = c.expect_reply(id, CMD_GET_REGION_INFO);
            assert_eq!(u32::from_le_bytes(r.body[8..12].try_into().unwrap()), index);
        }
    }
    for index in 0..=VFIO_PCI_NUM_IRQS {
        let mut p = Vec::new();
        for v in [16, 0, index, 0] {
            p.extend_from_slice(&u32::to_le_bytes(v));
        }
        let id = c.tx.send(CMD_GET_IRQ_INFO, 0, &p, None);
        if index == VFIO_PCI_NUM_IRQS {
            assert_eq!(c.expect_error(id, CMD_GET_IRQ_INFO), EINVAL);
        } else {
            c.expect_reply(id, CMD_GET_IRQ_INFO);
        }
    }
    // Reads the kernel refuses: the ROM region (size 0: rox-nic has no option ROM), a region
    // index past the table, config space past its end, a count past max_data_xfer_size.
    let refused = [
        (VFIO_PCI_ROM_REGION_INDEX, 0, 4),
        (VFIO_PCI_NUM_REGIONS + 1, 0, 4),
        (VFIO_PCI_CONFIG_REGION_INDEX, 4094, 4),
        (VFIO_PCI_CONFIG_REGION_INDEX, 0, (1 << 20) + 1),
        (BAR_CTRL, u64::MAX - 1, 4),
    ];
    for (region, offset, count) in refused {
        let id =
            c.tx.send(CMD_REGION_READ, 0, &access(region, offset, count), None);
        assert_eq!(
            c.expect_error(id, CMD_REGION_READ),
            EINVAL,
            "{region} {offset:#x}"
        );
    }
    // Config space read whole, as QEMU reads it at realize.
    assert_eq!(
        c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, 4096).len(),
        4096
    );

    // DMA churn: an unmap of a range never mapped, overlapping maps (the later one replaces
    // what it overlaps, as QEMU's listener only sends after unmapping), a reset between.
    let never = c.tx.dma_unmap_nowait(RAM_BASE + (1 << 30), 1 << 20, 0);
    let unmap_reply = c.expect_reply(never, CMD_DMA_UNMAP);
    assert_eq!(
        unmap_reply.body.len(),
        24,
        "DMA_UNMAP's reply echoes the request"
    );
    let a = c.tx.dma_map_nowait(&ram, RAM_BASE, RAM_SIZE / 2, 0);
    let b =
        c.tx.dma_map_nowait(&ram, RAM_BASE + RAM_SIZE / 4, RAM_SIZE / 2, RAM_SIZE / 4);
    c.expect_reply(a, CMD_DMA_MAP);
    c.expect_reply(b, CMD_DMA_MAP);
    let reset = c.tx.send(CMD_DEVICE_RESET, 0, &[], None);
    c.expect_reply(reset, CMD_DEVICE_RESET);
    let mapped = RAM_BASE + RAM_SIZE / 4;
    assert!(
        dev.shared.mem().check(mapped, RAM_SIZE / 2).is_ok(),
        "the later map is in place after a reset"
    );
    assert!(
        dev.shared.mem().check(RAM_BASE, RAM_SIZE / 4).is_err(),
        "the overlapped map was replaced"
    );
    // A map that wraps the address space is refused; it was never the kernel's to accept.
    let wrap = c.tx.dma_map_nowait(&ram, u64::MAX - 4095, 8192, 0);
    assert_eq!(c.expect_error(wrap, CMD_DMA_MAP), EINVAL);

    // MSI-X as QEMU sets it: a chunk of vectors with no eventfds (all -1: sent without fds),
    // then disabling them all.
    let id = c.tx.send(
        CMD_SET_IRQS,
        0,
        &set_irqs_payload(
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX,
            0,
            MSIX_VECTORS,
        ),
        None,
    );
    c.expect_reply(id, CMD_SET_IRQS);
    let id = c.tx.send(
        CMD_SET_IRQS,
        0,
        &set_irqs_payload(
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            VFIO_PCI_MSIX_IRQ_INDEX,
            0,
            0,
        ),
        None,
    );
    c.expect_reply(id, CMD_SET_IRQS);
    c.in_step(0xf1e1d);
    c.close();
    dev.thread.join().unwrap().unwrap();
}
