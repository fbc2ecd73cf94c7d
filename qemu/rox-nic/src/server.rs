//! vfio-user glue: the regions and IRQs rox-nic declares, the `ServerBackend` rox-nic's
//! (single-threaded, control-only) server loop calls, and a bounded trace of those calls for
//! diagnosing a guest that hangs while talking to the device. The loop itself is
//! [`protocol`], over the whole-message reads and writes of [`framing`].

pub mod framing;
pub mod ivshmem;
pub mod protocol;

pub use protocol::{Refusal, Refused, ServeError, Server};

use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rox_uapi::regs::{self, BAR_CTRL, BAR_DB};
use vfio_bindings::bindings::vfio::*;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion, SparseArea};

use crate::device::RoxNic;
use crate::pci::CONFIG_SPACE_SIZE;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("socket {0} is in use by a running server")]
    SocketInUse(String),
    #[error("binding vfio-user socket {0}: {1}")]
    Bind(String, std::io::Error),
    #[error("removing stale socket {0}: {1}")]
    Stale(String, std::io::Error),
    #[error("{0} exists and is not a socket: give a free path (a stale socket there is removed)")]
    NotASocket(String),
}

/// The region table: BAR0 trapped, BAR2 mmappable as one sparse area backed by the doorbell
/// memfd, config space; everything else absent.
pub fn regions(nic: &RoxNic) -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let mut info = vfio_region_info {
                argsz: size_of::<vfio_region_info>() as u32,
                index,
                ..Default::default()
            };
            let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            let mut sparse_areas = Vec::new();
            let mut mmap_fd = None;
            if index == BAR_CTRL {
                info.size = regs::BAR_CTRL_SIZE;
                info.flags = rw;
            } else if index == BAR_DB {
                info.size = regs::BAR_DB_SIZE;
                info.flags = rw | VFIO_REGION_INFO_FLAG_MMAP;
                info.offset = 0;
                sparse_areas.push(SparseArea {
                    area: vfio_region_sparse_mmap_area {
                        offset: 0,
                        size: regs::BAR_DB_SIZE,
                    },
                });
                mmap_fd = Some(nic.doorbell_fd());
            } else if index == VFIO_PCI_CONFIG_REGION_INDEX {
                info.size = CONFIG_SPACE_SIZE as u64;
                info.flags = rw;
            }
            ServerRegion {
                region_info: info,
                sparse_areas,
                mmap_fd,
            }
        })
        .collect()
}

/// The IRQ table: MSI-X only, one eventfd per vector.
pub fn irqs() -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| IrqInfo {
            index,
            count: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                regs::MSIX_VECTORS
            } else {
                0
            },
            flags: if index == VFIO_PCI_MSIX_IRQ_INDEX {
                VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE
            } else {
                0
            },
        })
        .collect()
}

/// Bind the vfio-user socket. A socket file nobody listens on is stale and removed; a live one,
/// or a path that is not a socket, is an error.
pub fn bind(path: &Path, nic: &RoxNic) -> Result<Server, ServerError> {
    claim_socket_path(path)?;
    Server::bind(path, irqs(), regions(nic))
        .map_err(|e| ServerError::Bind(path.display().to_string(), e))
}

/// Makes `path` free for a new socket: refused if a server answers there or if it is not a
/// socket (a file given by mistake is never removed), a stale socket (nobody listening) is
/// removed.
fn claim_socket_path(path: &Path) -> Result<(), ServerError> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let shown = || path.display().to_string();
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket(shown()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ServerError::SocketInUse(shown()));
    }
    log::warn!("removing stale socket {}", path.display());
    std::fs::remove_file(path).map_err(|e| ServerError::Stale(shown(), e))
}

impl ServerBackend for RoxNic {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self.config_read(offset, data),
            // A dead function's BARs read all-ones (device::death), a hung one's answer.
            BAR_CTRL | BAR_DB if self.shared().is_dead() && !self.shared().is_hung() => {
                data.fill(0xff)
            }
            BAR_CTRL => self.bar0_read(offset, data),
            BAR_DB => {
                let v = self.shared().doorbells.read_word(offset);
                let n = data.len().min(4);
                data[..n].copy_from_slice(&v.to_le_bytes()[..n]);
            }
            _ => data.fill(crate::pci::NO_DEVICE_BYTE),
        }
        Ok(())
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self.config_write(offset, data),
            BAR_CTRL | BAR_DB if self.shared().is_dead() && !self.shared().is_hung() => {}
            BAR_CTRL => self.bar0_write(offset, data),
            BAR_DB if data.len() == 4 => {
                let v = u32::from_le_bytes(data.try_into().expect("4 bytes"));
                self.shared().doorbells.write_word(offset, v);
                // A trapped doorbell write is rare (no mmap); make sure it is noticed.
                self.shared().wake.signal();
            }
            // A news byte of the summary doorbell (uapi regs.rs `DbPage::news`): dropped, a
            // page that says news_on would have its doorbells never looked at.
            BAR_DB if data.len() == 1 => {
                self.shared().doorbells.write_byte(offset, data[0]);
                self.shared().wake.signal();
            }
            _ => {}
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        RoxNic::dma_map_with(
            self,
            fd,
            offset,
            address,
            size,
            flags.contains(DmaMapFlags::WRITE),
        )
    }

    fn dma_unmap(
        &mut self,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        // QEMU sets VFIO_DMA_UNMAP_FLAG_ALL (address and size 0) when it drops a whole address
        // space. The crate names that bit GET_DIRTY_PAGE_INFO, so test the kernel's constant.
        if flags.bits() & VFIO_DMA_UNMAP_FLAG_ALL != 0 {
            RoxNic::dma_unmap(self, 0, u64::MAX);
        } else {
            RoxNic::dma_unmap(self, address, size);
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        self.reset_device();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return if count == 0 {
                Ok(())
            } else {
                Err(std::io::Error::from_raw_os_error(libc::EINVAL))
            };
        }
        if flags & VFIO_IRQ_SET_ACTION_TRIGGER == 0 {
            // Mask/unmask of MSI-X vectors is done by QEMU in the emulated table.
            return Ok(());
        }
        if flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            self.set_msix(start, count, fds);
        } else if flags & VFIO_IRQ_SET_DATA_NONE != 0 && count == 0 {
            self.set_msix(0, regs::MSIX_VECTORS, Vec::new());
        }
        Ok(())
    }
}

/// What a traced vfio-user request asked of the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceOp {
    Read,
    Write,
    DmaMap,
    DmaUnmap,
    Reset,
    SetIrqs,
    /// A request the server loop refused (whether or not the device saw it first).
    Refused,
}

/// What a [`TraceOp::Refused`] entry records of the refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRefusal {
    /// The request's message id and command.
    pub id: u16,
    pub command: u16,
    pub errno: i32,
    pub why: String,
    /// Whether an error reply was sent (false: the request asked for no reply).
    pub replied: bool,
}

/// One request the crate handed to the backend: when, what, and (once answered) the result.
#[derive(Clone, Debug)]
pub struct TraceEntry {
    /// Sequence number among all traced requests (1-based).
    pub seq: u64,
    /// Milliseconds since the trace began.
    pub at_ms: u64,
    pub op: TraceOp,
    /// Region index (reads, writes), IRQ index (SET_IRQS), else 0.
    pub region: u32,
    /// Offset (reads, writes), IOVA (DMA), first vector (SET_IRQS).
    pub offset: u64,
    /// Bytes (reads, writes, DMA), vectors (SET_IRQS).
    pub len: u64,
    /// Written value, or the value read once answered (the first 8 bytes, little-endian).
    pub value: Option<u64>,
    /// Whether the backend has returned (a reply, if the request wanted one, follows).
    pub answered: bool,
    /// The refusal, for [`TraceOp::Refused`] entries.
    pub refusal: Option<TraceRefusal>,
}

/// The last requests of the vfio-user conversation, bounded in memory: printed to rox-nic's
/// log on SIGUSR1 (rox-lab asks when a guest misses its boot deadline), so a hang during
/// firmware's PCI probing shows the last thing QEMU asked and whether it was answered.
pub struct Trace {
    start: Instant,
    capacity: usize,
    inner: Mutex<TraceRing>,
}

#[derive(Default)]
struct TraceRing {
    seq: u64,
    entries: VecDeque<TraceEntry>,
}

impl Trace {
    /// Entries kept by rox-nic: enough for the firmware's probe of the device and its BARs.
    pub const DEFAULT_CAPACITY: usize = 128;

    pub fn new(capacity: usize) -> Arc<Trace> {
        Arc::new(Trace {
            start: Instant::now(),
            capacity: capacity.max(1),
            inner: Mutex::new(TraceRing::default()),
        })
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, TraceRing> {
        // A panic elsewhere while holding the lock leaves the ring consistent (plain pushes).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self, op: TraceOp, region: u32, offset: u64, len: u64, value: Option<u64>) -> u64 {
        self.push(TraceEntry {
            seq: 0,
            at_ms: 0,
            op,
            region,
            offset,
            len,
            value,
            answered: false,
            refusal: None,
        })
    }

    /// Appends `entry` with the next sequence number and the time now; returns the number.
    fn push(&self, mut entry: TraceEntry) -> u64 {
        entry.at_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut ring = self.ring();
        ring.seq += 1;
        entry.seq = ring.seq;
        if ring.entries.len() == self.capacity {
            ring.entries.pop_front();
        }
        ring.entries.push_back(entry);
        ring.seq
    }

    /// Records a request the server loop refused: a refused query never reaches the device,
    /// and one the device refused is otherwise traced as answered.
    pub fn refused(&self, r: &Refused) {
        self.push(TraceEntry {
            seq: 0,
            at_ms: 0,
            op: TraceOp::Refused,
            region: 0,
            offset: 0,
            len: u64::from(r.size),
            value: None,
            answered: true,
            refusal: Some(TraceRefusal {
                id: r.id,
                command: r.command,
                errno: r.refusal.errno,
                why: r.refusal.why.clone(),
                replied: r.replied,
            }),
        });
    }

    fn finish(&self, seq: u64, value: Option<u64>) {
        let mut ring = self.ring();
        if let Some(e) = ring.entries.iter_mut().rev().find(|e| e.seq == seq) {
            e.answered = true;
            if value.is_some() {
                e.value = value;
            }
        }
    }

    /// The entries kept, oldest first.
    pub fn entries(&self) -> Vec<TraceEntry> {
        self.ring().entries.iter().cloned().collect()
    }

    /// The trace as text, one request a line, oldest first.
    pub fn render(&self) -> String {
        let now = self.start.elapsed().as_millis();
        let (total, entries) = {
            let ring = self.ring();
            (ring.seq, ring.entries.iter().cloned().collect::<Vec<_>>())
        };
        let mut out = format!(
            "vfio-user trace: {total} entries (requests that reached the device, and refusals), \
             the last {} below, now +{now} ms (VERSION and the GET_INFO queries are answered by \
             the server loop and traced only when refused)\n",
            entries.len()
        );
        for e in &entries {
            let _ = writeln!(out, "  {e}");
        }
        out
    }
}

fn region_name(region: u32) -> String {
    match region {
        VFIO_PCI_CONFIG_REGION_INDEX => "config".to_string(),
        r if r <= VFIO_PCI_BAR5_REGION_INDEX => format!("BAR{r}"),
        r => format!("region {r}"),
    }
}

impl fmt::Display for TraceEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{} ms #{} ", self.at_ms, self.seq)?;
        match self.op {
            TraceOp::Read | TraceOp::Write => {
                let dir = if self.op == TraceOp::Read {
                    "read "
                } else {
                    "write"
                };
                write!(
                    f,
                    "{dir} {} {:#x} len {}",
                    region_name(self.region),
                    self.offset,
                    self.len
                )?;
                if let Some(v) = self.value {
                    let arrow = if self.op == TraceOp::Read { "->" } else { "=" };
                    write!(f, " {arrow} {v:#x}")?;
                }
            }
            TraceOp::DmaMap | TraceOp::DmaUnmap => {
                let name = if self.op == TraceOp::DmaMap {
                    "DMA_MAP"
                } else {
                    "DMA_UNMAP"
                };
                write!(f, "{name} {:#x} +{:#x}", self.offset, self.len)?;
                if let Some(flags) = self.value {
                    write!(f, " flags {flags:#x}")?;
                }
            }
            TraceOp::Reset => write!(f, "DEVICE_RESET")?,
            TraceOp::SetIrqs => write!(
                f,
                "SET_IRQS index {} start {} count {}",
                self.region, self.offset, self.len
            )?,
            TraceOp::Refused => {
                if let Some(r) = &self.refusal {
                    write!(
                        f,
                        "REFUSED request id {} {} (command {}, {} bytes): {}: {}; {}",
                        r.id,
                        protocol::command::name(r.command),
                        r.command,
                        self.len,
                        errno_name(r.errno),
                        r.why,
                        if r.replied {
                            "error reply sent"
                        } else {
                            "NO_REPLY: not answered"
                        }
                    )?;
                }
            }
        }
        f.write_str(if self.answered {
            ""
        } else {
            " (not answered yet)"
        })
    }
}

/// An errno as its symbol, for the errnos the server loop and the device refuse with.
fn errno_name(errno: i32) -> String {
    match errno {
        libc::EINVAL => "EINVAL".to_string(),
        libc::E2BIG => "E2BIG".to_string(),
        libc::EOPNOTSUPP => "EOPNOTSUPP".to_string(),
        libc::EIO => "EIO".to_string(),
        libc::ENOMEM => "ENOMEM".to_string(),
        libc::EFAULT => "EFAULT".to_string(),
        libc::EBUSY => "EBUSY".to_string(),
        n => format!("errno {n}"),
    }
}

/// The first (up to) 8 bytes as a little-endian number.
fn le_value(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

/// A backend that records every request in a [`Trace`] before handing it on.
pub struct Traced<'a, B: ServerBackend> {
    pub backend: &'a mut B,
    pub trace: Arc<Trace>,
    /// Debugging the lab's failure handling: panic when request number N arrives.
    pub panic_at: Option<u64>,
}

impl<B: ServerBackend> Traced<'_, B> {
    /// Records the request (as [`Trace::begin`] takes it), runs it on the backend and marks
    /// it answered; `run` returns the value to record once answered (reads), if any.
    fn traced(
        &mut self,
        op: TraceOp,
        (region, offset, len): (u32, u64, u64),
        value: Option<u64>,
        run: impl FnOnce(&mut B) -> Result<Option<u64>, std::io::Error>,
    ) -> Result<(), std::io::Error> {
        let seq = self.trace.begin(op, region, offset, len, value);
        if self.panic_at == Some(seq) {
            panic!("vfio-user request #{seq}: panicking as --debug-panic-at asked");
        }
        let r = run(self.backend);
        self.trace.finish(seq, r.as_ref().ok().copied().flatten());
        r.map(|_| ())
    }
}

impl<B: ServerBackend> ServerBackend for Traced<'_, B> {
    fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), std::io::Error> {
        let len = data.len() as u64;
        self.traced(TraceOp::Read, (region, offset, len), None, |b| {
            b.region_read(region, offset, data)
                .map(|()| Some(le_value(data)))
        })
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), std::io::Error> {
        let (len, value) = (data.len() as u64, Some(le_value(data)));
        self.traced(TraceOp::Write, (region, offset, len), value, |b| {
            b.region_write(region, offset, data).map(|()| None)
        })
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), std::io::Error> {
        let value = Some(u64::from(flags.bits()));
        self.traced(TraceOp::DmaMap, (0, address, size), value, |b| {
            b.dma_map(flags, offset, address, size, fd).map(|()| None)
        })
    }

    fn dma_unmap(
        &mut self,
        flags: DmaUnmapFlags,
        address: u64,
        size: u64,
    ) -> Result<(), std::io::Error> {
        let value = Some(u64::from(flags.bits()));
        self.traced(TraceOp::DmaUnmap, (0, address, size), value, |b| {
            b.dma_unmap(flags, address, size).map(|()| None)
        })
    }

    fn reset(&mut self) -> Result<(), std::io::Error> {
        self.traced(TraceOp::Reset, (0, 0, 0), None, |b| {
            b.reset().map(|()| None)
        })
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), std::io::Error> {
        let (offset, len) = (u64::from(start), u64::from(count));
        let value = Some(u64::from(flags));
        self.traced(TraceOp::SetIrqs, (index, offset, len), value, |b| {
            b.set_irqs(index, flags, start, count, fds).map(|()| None)
        })
    }
}

/// Serves one vfio-user client (QEMU) until it disconnects, every request recorded in `trace`
/// (what rox-nic's binary runs; tests drive the same path).
pub fn serve(
    server: &Server,
    nic: &mut RoxNic,
    trace: Arc<Trace>,
    panic_at: Option<u64>,
) -> Result<(), ServeError> {
    let mut traced = Traced {
        backend: nic,
        trace: trace.clone(),
        panic_at,
    };
    server.run_observed(&mut traced, &|r| trace.refused(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rendered trace `text` holds `part`, or the test fails showing all of it.
    #[track_caller]
    fn assert_has(text: &str, part: &str) {
        assert!(text.contains(part), "{part:?} is not in:\n{text}");
    }

    /// A file that is not a socket is never removed, whatever answers a connect there.
    /// Before, a regular file given by mistake as a socket path was deleted.
    #[test]
    fn only_a_stale_socket_is_removed_from_a_socket_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "keep me").unwrap();
        let err = claim_socket_path(&file).unwrap_err();
        assert!(matches!(err, ServerError::NotASocket(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let err = claim_socket_path(&dir.path().join("d")).unwrap_err();
        assert!(matches!(err, ServerError::NotASocket(_)), "{err}");

        let live = dir.path().join("live.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let err = claim_socket_path(&live).unwrap_err();
        assert!(matches!(err, ServerError::SocketInUse(_)), "{err}");
        assert!(live.exists());

        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        claim_socket_path(&stale).unwrap();
        assert!(!stale.exists());
        claim_socket_path(&stale).unwrap();
    }

    #[test]
    fn trace_keeps_the_last_requests_and_marks_answers() {
        let t = Trace::new(3);
        for i in 0..5u64 {
            let seq = t.begin(TraceOp::Read, VFIO_PCI_CONFIG_REGION_INDEX, i * 4, 4, None);
            if i < 4 {
                t.finish(seq, Some(0x1234_0000 + i));
            }
        }
        let e = t.entries();
        assert_eq!(e.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        assert!(e[0].answered && e[1].answered && !e[2].answered);
        assert_eq!(e[1].value, Some(0x1234_0003));
        let text = t.render();
        assert!(text.starts_with("vfio-user trace: 5 entries"), "{text}");
        assert_has(&text, "#4 read  config 0xc len 4 -> 0x12340003\n");
        assert_has(&text, "#5 read  config 0x10 len 4 (not answered yet)");
    }

    #[test]
    fn trace_lines_name_each_request() {
        let t = Trace::new(8);
        let s = t.begin(TraceOp::Write, BAR_CTRL, 0x40, 4, Some(1));
        t.finish(s, None);
        let s = t.begin(TraceOp::DmaMap, 0, 0x10_0000, 0x8000_0000, None);
        t.finish(s, None);
        t.begin(TraceOp::SetIrqs, VFIO_PCI_MSIX_IRQ_INDEX, 0, 4, Some(0x24));
        let text = t.render();
        assert_has(&text, "write BAR0 0x40 len 4 = 0x1\n");
        assert_has(&text, "DMA_MAP 0x100000 +0x80000000\n");
        assert_has(&text, "SET_IRQS index 2 start 0 count 4 (not answered yet)");
    }

    #[test]
    fn a_refusal_is_a_trace_line_with_its_command_id_errno_and_why() {
        let t = Trace::new(2);
        let s = t.begin(TraceOp::Read, BAR_CTRL, 0, 4, None);
        t.finish(s, Some(7));
        let why = Refusal {
            errno: libc::EINVAL,
            why: "no region 20".to_string(),
        };
        for (id, replied) in [(41, true), (42, false)] {
            t.refused(&Refused {
                id,
                command: protocol::command::REGION_READ,
                size: 32,
                refusal: &why,
                replied,
            });
        }
        let e = t.entries();
        assert_eq!((e.len(), e[0].op, e[0].seq), (2, TraceOp::Refused, 2));
        let text = t.render();
        assert_has(
            &text,
            "#2 REFUSED request id 41 REGION_READ (command 9, 32 bytes): EINVAL: \
                 no region 20; error reply sent\n",
        );
        assert_has(
            &text,
            "#3 REFUSED request id 42 REGION_READ (command 9, 32 bytes): EINVAL: \
                 no region 20; NO_REPLY: not answered\n",
        );
    }

    #[test]
    fn le_value_takes_at_most_eight_bytes() {
        assert_eq!(le_value(&[0x34, 0x12]), 0x1234);
        assert_eq!(le_value(&[1, 0, 0, 0, 0, 0, 0, 0, 9]), 1);
        assert_eq!(le_value(&[]), 0);
    }
}
