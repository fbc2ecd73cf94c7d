//! QEMU's side of a vfio-user conversation, as the socket-level tests play it: requests
//! written whole (or cut, by the tests that want that), replies read by a thread of their own
//! as QEMU's I/O thread reads them, and rox-nic's server started as its binary starts it.
#![allow(dead_code)] // each test file uses part of it

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rox_nic::device::Shared;
use rox_nic::server::Trace;
use rox_nic::testkit::GuestRam;
use rox_nic::{DeviceConfig, RoxNic};
use rox_uapi::regs::*;
use vfio_bindings::bindings::vfio::*;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

pub const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
pub const RAM_SIZE: u64 = 16 << 20;
/// QEMU's default x-msg-timeout: a reply later than this is an error in the guest.
pub const QEMU_WAIT: Duration = Duration::from_secs(5);

// vfio-user commands and header flags (the protocol specification).
pub const CMD_VERSION: u16 = 1;
pub const CMD_DMA_MAP: u16 = 2;
pub const CMD_DMA_UNMAP: u16 = 3;
pub const CMD_REGION_READ: u16 = 9;
pub const CMD_REGION_WRITE: u16 = 10;
pub const CMD_DEVICE_RESET: u16 = 13;
pub const TYPE_REPLY: u32 = 1;
pub const FLAG_NO_REPLY: u32 = 1 << 4;
pub const FLAG_ERROR: u32 = 1 << 5;
pub const HEADER: usize = 16;

#[derive(Debug)]
pub struct Reply {
    pub id: u16,
    pub command: u16,
    pub flags: u32,
    pub error: u32,
    pub body: Vec<u8>,
}

/// The sending side of a client: requests written as QEMU's vCPU threads write them.
pub struct Requests {
    pub sock: UnixStream,
    pub next_id: u16,
}

/// A client: requests from the test, replies read by a thread of their own (as QEMU's
/// vfio-user I/O thread reads them).
pub struct Client {
    pub tx: Requests,
    pub replies: Receiver<Reply>,
    pub reader: Option<JoinHandle<()>>,
}

pub fn header(id: u16, command: u16, size: usize, flags: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(size);
    h.extend_from_slice(&id.to_le_bytes());
    h.extend_from_slice(&command.to_le_bytes());
    h.extend_from_slice(&(size as u32).to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h
}

/// One whole message from the socket, or None at its end.
pub fn read_reply(sock: &mut UnixStream) -> Option<Reply> {
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
        error: u32::from_le_bytes(h[12..16].try_into().unwrap()),
        body,
    })
}

impl Requests {
    pub fn send(&mut self, command: u16, flags: u32, payload: &[u8], fd: Option<RawFd>) -> u16 {
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

    pub fn dma_map_nowait(&mut self, ram: &GuestRam, iova: u64, size: u64, offset: u64) -> u16 {
        let mut p = Vec::new();
        p.extend_from_slice(&(32u32).to_le_bytes()); // argsz: vfio_iommu_type1_dma_map
        p.extend_from_slice(&(VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE).to_le_bytes());
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.send(CMD_DMA_MAP, 0, &p, Some(ram.file.as_raw_fd()))
    }

    pub fn dma_unmap_nowait(&mut self, iova: u64, size: u64, flags: u32) -> u16 {
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
    pub fn connect(path: &std::path::Path, start_after: Duration) -> Client {
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
    pub fn expect_reply(&self, id: u16, command: u16) -> Reply {
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

    /// The next reply, which must be an error reply to request `id`; returns its errno
    /// (which should not be 0: QEMU hands `-errno` to its caller, and 0 reads as success).
    pub fn expect_error(&self, id: u16, command: u16) -> u32 {
        let r = match self.replies.recv_timeout(QEMU_WAIT) {
            Ok(r) => r,
            Err(e) => panic!("no reply to request {id} (command {command}): {e:?}"),
        };
        assert_eq!(
            (r.id, r.command),
            (id, command),
            "error reply out of order or to the wrong request: {r:?}"
        );
        assert_eq!(
            r.flags & (0xf | FLAG_ERROR),
            TYPE_REPLY | FLAG_ERROR,
            "{r:?}"
        );
        assert!(r.body.is_empty(), "{r:?}");
        r.error
    }

    /// Checks that the device still answers in step: a write and a read of the scratch
    /// register, each answered with its own id and the value written.
    pub fn in_step(&mut self, v: u32) {
        self.write32(BAR_CTRL, REG_SCRATCH, v, false);
        assert_eq!(self.read32(BAR_CTRL, REG_SCRATCH), v);
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> Vec<u8> {
        let id = self
            .tx
            .send(CMD_REGION_READ, 0, &access(region, offset, count), None);
        let r = self.expect_reply(id, CMD_REGION_READ);
        assert_eq!(r.body.len(), 16 + count as usize, "{r:?}");
        r.body[16..].to_vec()
    }

    pub fn read32(&mut self, region: u32, offset: u64) -> u32 {
        u32::from_le_bytes(self.region_read(region, offset, 4).try_into().unwrap())
    }

    /// A write; posted (NO_REPLY) writes get no reply, others are waited for.
    pub fn write32(&mut self, region: u32, offset: u64, v: u32, posted: bool) {
        let mut payload = access(region, offset, 4);
        payload.extend_from_slice(&v.to_le_bytes());
        let flags = if posted { FLAG_NO_REPLY } else { 0 };
        let id = self.tx.send(CMD_REGION_WRITE, flags, &payload, None);
        if !posted {
            self.expect_reply(id, CMD_REGION_WRITE);
        }
    }

    /// Hangs up and checks that nothing more was sent: no reply left over.
    pub fn close(mut self) {
        self.tx.sock.shutdown(std::net::Shutdown::Write).unwrap();
        self.reader.take().unwrap().join().unwrap();
        let extra: Vec<Reply> = self.replies.try_iter().collect();
        assert!(extra.is_empty(), "replies nobody asked for: {extra:?}");
    }
}

pub fn access(region: u32, offset: u64, count: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&offset.to_le_bytes());
    p.extend_from_slice(&region.to_le_bytes());
    p.extend_from_slice(&count.to_le_bytes());
    p
}

/// rox-nic as its binary runs it, on a socket in a fresh directory.
pub struct Device {
    pub _dir: tempfile::TempDir,
    pub path: std::path::PathBuf,
    pub shared: Arc<Shared>,
    pub trace: Arc<Trace>,
    /// The server loop's result, as text (Err: it gave up on the connection).
    pub thread: JoinHandle<Result<(), String>>,
}

pub fn start_device(trace_capacity: usize) -> Device {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rox.sock");
    let mut nic = RoxNic::new(DeviceConfig::new(MAC)).unwrap();
    let server = rox_nic::server::bind(&path, &nic).unwrap();
    let shared = nic.shared().clone();
    let trace = Trace::new(trace_capacity);
    let t = trace.clone();
    let thread = thread::spawn(move || {
        rox_nic::server::serve(&server, &mut nic, t, None).map_err(|e| e.to_string())
    });
    Device {
        _dir: dir,
        path,
        shared,
        trace,
        thread,
    }
}
