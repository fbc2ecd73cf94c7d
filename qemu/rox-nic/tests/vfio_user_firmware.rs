//! QEMU's vfio-user client as a firmware boot drives it, played byte for byte against rox-nic's
//! real server path (`server::serve`: the vfio_user crate's loop, the trace, the device).
//!
//! What QEMU 11.1 does (hw/vfio-user/container.c, proxy.c): inside a memory transaction
//! (SeaBIOS toggling PAM or SMRAM, BARs being enabled) DMA_MAP and DMA_UNMAP go out "nowait",
//! several in a row before any reply is read, and only the last is waited for when the
//! transaction commits; other requests (config space, BAR0) wait for their reply, 5 s at most;
//! a posted write (NO_REPLY) gets no reply at all; replies are read by an I/O thread while
//! vCPU threads send. A reply lost, duplicated, sent to a NO_REPLY message or sent out of order
//! is what would leave a vCPU waiting. These tests check, for such conversations, that every
//! request wanting a reply gets exactly one, in order, within QEMU's timeout, and none else.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rox_nic::device::Shared;
use rox_nic::server::Trace;
use rox_nic::testkit::{GuestRam, RAM_BASE};
use rox_nic::{DeviceConfig, RoxNic};
use rox_uapi::regs::*;
use vfio_bindings::bindings::vfio::*;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const RAM_SIZE: u64 = 16 << 20;
/// QEMU's default x-msg-timeout: a reply later than this is an error in the guest.
const QEMU_WAIT: Duration = Duration::from_secs(5);

// vfio-user commands and header flags (the protocol specification).
const CMD_VERSION: u16 = 1;
const CMD_DMA_MAP: u16 = 2;
const CMD_DMA_UNMAP: u16 = 3;
const CMD_REGION_READ: u16 = 9;
const CMD_REGION_WRITE: u16 = 10;
const CMD_DEVICE_RESET: u16 = 13;
const TYPE_REPLY: u32 = 1;
const FLAG_NO_REPLY: u32 = 1 << 4;
const FLAG_ERROR: u32 = 1 << 5;
const HEADER: usize = 16;

#[derive(Debug)]
struct Reply {
    id: u16,
    command: u16,
    flags: u32,
    body: Vec<u8>,
}

/// The sending side of a client: requests written as QEMU's vCPU threads write them.
struct Requests {
    sock: UnixStream,
    next_id: u16,
}

/// A client: requests from the test, replies read by a thread of their own (as QEMU's
/// vfio-user I/O thread reads them).
struct Client {
    tx: Requests,
    replies: Receiver<Reply>,
    reader: Option<JoinHandle<()>>,
}

fn header(id: u16, command: u16, size: usize, flags: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(size);
    h.extend_from_slice(&id.to_le_bytes());
    h.extend_from_slice(&command.to_le_bytes());
    h.extend_from_slice(&(size as u32).to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h
}

/// One whole message from the socket, or None at its end.
fn read_reply(sock: &mut UnixStream) -> Option<Reply> {
    let mut h = [0u8; HEADER];
    sock.read_exact(&mut h).ok()?;
    let size = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    assert!(
        size >= HEADER,
        "reply of {size} bytes is shorter than its header"
    );
    let mut body = vec![0u8; size - HEADER];
    sock.read_exact(&mut body).expect("reply body");
    Some(Reply {
        id: u16::from_le_bytes([h[0], h[1]]),
        command: u16::from_le_bytes([h[2], h[3]]),
        flags: u32::from_le_bytes(h[8..12].try_into().unwrap()),
        body,
    })
}

impl Requests {
    fn send(&mut self, command: u16, flags: u32, payload: &[u8], fd: Option<RawFd>) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut msg = header(id, command, HEADER + payload.len(), flags);
        msg.extend_from_slice(payload);
        match fd {
            Some(fd) => {
                let sent = self
                    .sock
                    .send_with_fds(&[&msg[..]], &[fd])
                    .expect("sendmsg");
                assert_eq!(sent, msg.len(), "short sendmsg");
            }
            None => self.sock.write_all(&msg).expect("write request"),
        }
        id
    }

    fn dma_map_nowait(&mut self, ram: &GuestRam, iova: u64, size: u64, offset: u64) -> u16 {
        let mut p = Vec::new();
        p.extend_from_slice(&(32u32).to_le_bytes()); // argsz: vfio_iommu_type1_dma_map
        p.extend_from_slice(&(VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE).to_le_bytes());
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.send(CMD_DMA_MAP, 0, &p, Some(ram.file.as_raw_fd()))
    }

    fn dma_unmap_nowait(&mut self, iova: u64, size: u64, flags: u32) -> u16 {
        let mut p = Vec::new();
        p.extend_from_slice(&(24u32).to_le_bytes()); // argsz: vfio_iommu_type1_dma_unmap
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.send(CMD_DMA_UNMAP, 0, &p, None)
    }
}

impl Client {
    /// Connects and negotiates the version; the reply reader starts `start_after` later (so
    /// that replies can pile up in the socket meanwhile).
    fn connect(path: &std::path::Path, start_after: Duration) -> Client {
        let sock = UnixStream::connect(path).expect("connect to rox-nic");
        let mut tx = Requests { sock, next_id: 0 };
        let caps = b"{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576}}\0";
        let mut payload = vec![0, 0, 2, 0]; // major 0, minor 2
        payload.extend_from_slice(caps);
        let id = tx.send(CMD_VERSION, 0, &payload, None);
        let r = read_reply(&mut tx.sock).expect("VERSION reply");
        assert_eq!(
            (r.id, r.command, r.flags & FLAG_ERROR),
            (id, CMD_VERSION, 0),
            "{r:?}"
        );
        let (replies_tx, replies) = mpsc::channel();
        let mut rsock = tx.sock.try_clone().unwrap();
        let reader = thread::spawn(move || {
            thread::sleep(start_after);
            while let Some(r) = read_reply(&mut rsock) {
                if replies_tx.send(r).is_err() {
                    return;
                }
            }
        });
        Client {
            tx,
            replies,
            reader: Some(reader),
        }
    }

    /// The next reply, which must answer request `id` (the server answers in order).
    fn expect_reply(&self, id: u16, command: u16) -> Reply {
        let r = match self.replies.recv_timeout(QEMU_WAIT) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no reply to request {id} (command {command}) within QEMU's 5 s")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("server closed before replying to {id}"),
        };
        assert_eq!(
            (r.id, r.command),
            (id, command),
            "reply out of order or to the wrong request: {r:?}"
        );
        assert_eq!(r.flags & 0xf, TYPE_REPLY, "{r:?}");
        assert_eq!(r.flags & FLAG_ERROR, 0, "error reply {r:?}");
        r
    }

    fn region_read(&mut self, region: u32, offset: u64, count: u32) -> Vec<u8> {
        let id = self
            .tx
            .send(CMD_REGION_READ, 0, &access(region, offset, count), None);
        let r = self.expect_reply(id, CMD_REGION_READ);
        assert_eq!(r.body.len(), 16 + count as usize, "{r:?}");
        r.body[16..].to_vec()
    }

    fn read32(&mut self, region: u32, offset: u64) -> u32 {
        u32::from_le_bytes(self.region_read(region, offset, 4).try_into().unwrap())
    }

    /// A write; posted (NO_REPLY) writes get no reply, others are waited for.
    fn write32(&mut self, region: u32, offset: u64, v: u32, posted: bool) {
        let mut payload = access(region, offset, 4);
        payload.extend_from_slice(&v.to_le_bytes());
        let flags = if posted { FLAG_NO_REPLY } else { 0 };
        let id = self.tx.send(CMD_REGION_WRITE, flags, &payload, None);
        if !posted {
            self.expect_reply(id, CMD_REGION_WRITE);
        }
    }

    /// Hangs up and checks that nothing more was sent: no reply left over.
    fn close(mut self) {
        self.tx.sock.shutdown(std::net::Shutdown::Write).unwrap();
        self.reader.take().unwrap().join().unwrap();
        let extra: Vec<Reply> = self.replies.try_iter().collect();
        assert!(extra.is_empty(), "replies nobody asked for: {extra:?}");
    }
}

fn access(region: u32, offset: u64, count: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&offset.to_le_bytes());
    p.extend_from_slice(&region.to_le_bytes());
    p.extend_from_slice(&count.to_le_bytes());
    p
}

/// rox-nic as its binary runs it, on a socket in a fresh directory.
struct Device {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    shared: Arc<Shared>,
    trace: Arc<Trace>,
    thread: JoinHandle<()>,
}

fn start_device(trace_capacity: usize) -> Device {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rox.sock");
    let mut nic = RoxNic::new(DeviceConfig::new(MAC)).unwrap();
    let server = rox_nic::server::bind(&path, &nic).unwrap();
    let shared = nic.shared().clone();
    let trace = Trace::new(trace_capacity);
    let t = trace.clone();
    let thread = thread::spawn(move || {
        rox_nic::server::serve(&server, &mut nic, t, None).expect("server loop");
    });
    Device {
        _dir: dir,
        path,
        shared,
        trace,
        thread,
    }
}

/// One memory transaction as QEMU's listener sends it: region_del then region_add of guest
/// RAM, nowait, then (at commit) the replies read in order.
fn transaction(c: &mut Client, ram: &GuestRam) {
    let unmap = c.tx.dma_unmap_nowait(RAM_BASE, RAM_SIZE, 0);
    let low = c.tx.dma_map_nowait(ram, RAM_BASE, RAM_SIZE / 2, 0);
    let high =
        c.tx.dma_map_nowait(ram, RAM_BASE + RAM_SIZE / 2, RAM_SIZE / 2, RAM_SIZE / 2);
    c.expect_reply(unmap, CMD_DMA_UNMAP);
    c.expect_reply(low, CMD_DMA_MAP);
    c.expect_reply(high, CMD_DMA_MAP);
}

#[test]
fn firmware_probe_between_memory_transactions_gets_every_reply_in_order() {
    let dev = start_device(4096);
    let ram = GuestRam::new(RAM_BASE, RAM_SIZE);
    let mut c = Client::connect(&dev.path, Duration::ZERO);
    let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
    let mut requests = 0u64;
    for round in 0..40u32 {
        // SeaBIOS's probe: identity, class, then each BAR sized and restored.
        let id = c.read32(cfg, 0);
        assert_eq!(id & 0xffff, u32::from(PCI_VENDOR_ID));
        c.read32(cfg, 8);
        for bar in 0..6u64 {
            let off = 0x10 + 4 * bar;
            let was = c.read32(cfg, off);
            c.write32(cfg, off, 0xffff_ffff, false);
            c.read32(cfg, off);
            c.write32(cfg, off, was, false);
        }
        requests += 2 + 6 * 4;
        transaction(&mut c, &ram);
        requests += 3;
        // A posted write is ordered before the read that follows it, and is not answered.
        c.write32(BAR_CTRL, REG_SCRATCH, 0x5ca1_0000 + round, true);
        assert_eq!(c.read32(BAR_CTRL, REG_SCRATCH), 0x5ca1_0000 + round);
        requests += 2;
    }
    assert!(
        dev.shared.mem().check(RAM_BASE, RAM_SIZE).is_ok(),
        "guest RAM mapped"
    );

    // QEMU dropping the whole address space: VFIO_DMA_UNMAP_FLAG_ALL, address and size 0.
    let all = c.tx.dma_unmap_nowait(0, 0, VFIO_DMA_UNMAP_FLAG_ALL);
    c.expect_reply(all, CMD_DMA_UNMAP);
    assert!(
        dev.shared.mem().is_empty(),
        "unmap-all left mappings behind"
    );
    let reset = c.tx.send(CMD_DEVICE_RESET, 0, &[], None);
    c.expect_reply(reset, CMD_DEVICE_RESET);
    requests += 2;

    c.close();
    dev.thread.join().unwrap();
    let entries = dev.trace.entries();
    assert_eq!(
        entries.len() as u64,
        requests,
        "every request reached the device once"
    );
    let unanswered: Vec<String> = entries
        .iter()
        .filter(|e| !e.answered)
        .map(|e| e.to_string())
        .collect();
    assert!(unanswered.is_empty(), "{unanswered:?}");
}

#[test]
fn a_burst_past_the_socket_buffers_neither_deadlocks_nor_loses_a_reply() {
    // QEMU keeps sending nowait maps while its I/O thread is slow to read: the server blocks
    // writing replies, the client blocks writing requests, and both go on once replies are
    // read. Enough requests to fill both directions' socket buffers several times.
    const PAIRS: usize = 3000;
    let dev = start_device(Trace::DEFAULT_CAPACITY);
    let mut c = Client::connect(&dev.path, Duration::from_millis(500));
    let t0 = Instant::now();
    let (ids_tx, ids) = mpsc::channel();
    let mut sender = Requests {
        sock: c.tx.sock.try_clone().unwrap(),
        next_id: c.tx.next_id,
    };
    let send = thread::spawn(move || {
        let ram = GuestRam::new(RAM_BASE, RAM_SIZE);
        for _ in 0..PAIRS {
            let u = sender.dma_unmap_nowait(RAM_BASE, RAM_SIZE, 0);
            let m = sender.dma_map_nowait(&ram, RAM_BASE, RAM_SIZE, 0);
            ids_tx.send([(u, CMD_DMA_UNMAP), (m, CMD_DMA_MAP)]).unwrap();
        }
        sender.next_id
    });
    for pair in ids.iter() {
        for (id, cmd) in pair {
            c.expect_reply(id, cmd);
        }
    }
    c.tx.next_id = send.join().unwrap();
    // Still in step: a write and a read of the scratch register, each answered.
    c.write32(BAR_CTRL, REG_SCRATCH, 0x600d, false);
    assert_eq!(c.read32(BAR_CTRL, REG_SCRATCH), 0x600d);
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "{PAIRS} map/unmap pairs took {took:?}"
    );
    assert!(dev.shared.mem().check(RAM_BASE, RAM_SIZE).is_ok());
    assert!(dev.trace.entries().iter().all(|e| e.answered));
    c.close();
    dev.thread.join().unwrap();
}
