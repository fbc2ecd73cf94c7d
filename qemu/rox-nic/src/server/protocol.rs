//! rox-nic's vfio-user server loop: one client (QEMU), one request at a time, each read whole
//! by [`framing`](super::framing) and answered by exactly one reply — or by none when the
//! client set NO_REPLY. A request the device refuses is still consumed whole and gets an error
//! reply with its own id and a real errno. The device behind it is a
//! [`vfio_user::ServerBackend`] (the trait and the region and IRQ tables are the `vfio_user`
//! crate's; its own `Server::run` is not used, docs/debugging.md says why).

use std::fs::File;
use std::os::fd::RawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use vfio_bindings::bindings::vfio::*;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion};

use super::framing::{self, FramingError, Message, MAX_DATA_XFER};

/// vfio-user commands (the protocol specification's numbering).
pub mod command {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    pub const DEVICE_SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DEVICE_RESET: u16 = 13;

    /// The command's name in the specification, for logs and the trace.
    pub fn name(command: u16) -> &'static str {
        match command {
            VERSION => "VERSION",
            DMA_MAP => "DMA_MAP",
            DMA_UNMAP => "DMA_UNMAP",
            DEVICE_GET_INFO => "DEVICE_GET_INFO",
            DEVICE_GET_REGION_INFO => "DEVICE_GET_REGION_INFO",
            6 => "DEVICE_GET_REGION_IO_FDS",
            DEVICE_GET_IRQ_INFO => "DEVICE_GET_IRQ_INFO",
            DEVICE_SET_IRQS => "DEVICE_SET_IRQS",
            REGION_READ => "REGION_READ",
            REGION_WRITE => "REGION_WRITE",
            11 => "DMA_READ",
            12 => "DMA_WRITE",
            DEVICE_RESET => "DEVICE_RESET",
            14 => "DIRTY_PAGES",
            _ => "unknown",
        }
    }
}
use command::*;

/// Why the server stopped before its client hung up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("accepting the vfio-user client: {0}")]
    Accept(std::io::Error),
    #[error(transparent)]
    Framing(#[from] FramingError),
    #[error("replying to vfio-user request {id} (command {command}): {source}")]
    Reply {
        id: u16,
        command: u16,
        source: std::io::Error,
    },
}

/// A listening vfio-user socket and the device description it answers queries from. The
/// socket file is removed when the server is dropped.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    regions: Vec<ServerRegion>,
    irqs: Vec<IrqInfo>,
}

/// A successful answer: its payload and the descriptor, if any, that goes with it.
struct Answer {
    payload: Vec<u8>,
    fd: Option<RawFd>,
}

impl Answer {
    fn empty() -> Answer {
        Answer::data(Vec::new())
    }

    fn data(payload: Vec<u8>) -> Answer {
        Answer { payload, fd: None }
    }
}

/// A refusal: the errno the error reply carries (never 0) and why, for the log and the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub errno: i32,
    pub why: String,
}

impl Refusal {
    fn new(errno: i32, why: impl Into<String>) -> Refusal {
        Refusal {
            errno,
            why: why.into(),
        }
    }

    fn invalid(why: impl Into<String>) -> Refusal {
        Refusal::new(libc::EINVAL, why)
    }
}

/// A request the server refused, as its observer (rox-nic's vfio-user trace) is told of it.
#[derive(Debug)]
pub struct Refused<'a> {
    pub id: u16,
    pub command: u16,
    /// Bytes of the whole message, header included.
    pub size: u32,
    pub refusal: &'a Refusal,
    /// Whether an error reply is sent (false: the request asked for none).
    pub replied: bool,
}

/// The fixed fields of a request's payload, read in order; too few bytes is EINVAL.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Refusal> {
        let (head, rest) = self
            .0
            .split_at_checked(N)
            .ok_or_else(|| Refusal::invalid("payload too short for the command's fixed fields"))?;
        self.0 = rest;
        Ok(head.try_into().expect("N bytes"))
    }
    fn u16(&mut self) -> Result<u16, Refusal> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, Refusal> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, Refusal> {
        self.take().map(u64::from_le_bytes)
    }
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A backend's failure as the errno QEMU is given (never 0) and its text.
fn errno_of(e: std::io::Error) -> Refusal {
    let errno = e.raw_os_error().filter(|&n| n > 0).unwrap_or(libc::EIO);
    Refusal::new(errno, format!("the device refused it: {e}"))
}

/// The capabilities rox-nic announces in its VERSION reply: one descriptor per message,
/// 1 MiB per region access, x86-64's 4 KiB page.
const CAPABILITIES: &str = r#"{"capabilities":{"max_msg_fds":1,"max_data_xfer_size":1048576,"migration":{"pgsize":4096}}}"#;
const _: () = assert!(MAX_DATA_XFER == 1048576);

impl Server {
    /// Listens on `path` (which must not exist) for one client.
    pub fn bind(
        path: &Path,
        irqs: Vec<IrqInfo>,
        regions: Vec<ServerRegion>,
    ) -> std::io::Result<Server> {
        Ok(Server {
            listener: UnixListener::bind(path)?,
            path: path.to_path_buf(),
            regions,
            irqs,
        })
    }

    /// Waits for one client and serves it until it hangs up.
    pub fn run(&self, backend: &mut dyn ServerBackend) -> Result<(), ServeError> {
        self.run_observed(backend, &|_| {})
    }

    /// [`Server::run`], telling `on_refused` of every request refused (after the log line,
    /// before the error reply is sent).
    pub fn run_observed(
        &self,
        backend: &mut dyn ServerBackend,
        on_refused: &dyn Fn(&Refused),
    ) -> Result<(), ServeError> {
        let stream = loop {
            match self.listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ServeError::Accept(e)),
            }
        };
        self.serve_connection(&stream, backend, on_refused)
    }

    /// Serves a connected client until it hangs up between two messages (Ok) or the stream
    /// can no longer be followed or written (Err; the caller drops the connection).
    /// `on_refused` hears of every refused request.
    pub fn serve_connection(
        &self,
        stream: &UnixStream,
        backend: &mut dyn ServerBackend,
        on_refused: &dyn Fn(&Refused),
    ) -> Result<(), ServeError> {
        while let Some(message) = framing::read_message(&mut &*stream)? {
            let h = message.header;
            if !h.is_request() {
                // rox-nic sends no requests, so no reply can be due to it: dropped whole.
                log::warn!(
                    "vfio-user: message {} (command {}, flags {:#x}) is not a request; ignored",
                    h.id,
                    h.command,
                    h.flags
                );
                continue;
            }
            let outcome = self.answer(backend, message);
            if let Err(refusal) = &outcome {
                log::warn!(
                    "vfio-user: request {} ({} {}, {} bytes) refused: {}: {}{}",
                    h.id,
                    command::name(h.command),
                    h.command,
                    h.size,
                    std::io::Error::from_raw_os_error(refusal.errno),
                    refusal.why,
                    if h.wants_reply() {
                        ""
                    } else {
                        " (NO_REPLY: not answered)"
                    }
                );
                on_refused(&Refused {
                    id: h.id,
                    command: h.command,
                    size: h.size,
                    refusal,
                    replied: h.wants_reply(),
                });
            }
            if !h.wants_reply() {
                continue;
            }
            let sent = match &outcome {
                Ok(a) => framing::write_reply(stream, &h, &a.payload, a.fd),
                Err(refusal) => framing::write_error(stream, &h, refusal.errno),
            };
            sent.map_err(|source| ServeError::Reply {
                id: h.id,
                command: h.command,
                source,
            })?;
        }
        log::info!("vfio-user: client closed the connection");
        Ok(())
    }

    /// The answer to one whole request.
    fn answer(&self, backend: &mut dyn ServerBackend, message: Message) -> Result<Answer, Refusal> {
        if message.oversized {
            return Err(Refusal::new(
                libc::E2BIG,
                format!(
                    "message of {} bytes is over the {} bytes a request may carry (read and dropped)",
                    message.header.size,
                    framing::HEADER_SIZE + framing::MAX_PAYLOAD
                ),
            ));
        }
        let Message {
            header,
            payload,
            fds,
            ..
        } = message;
        let p = Fields(&payload);
        match header.command {
            VERSION => version(p),
            DMA_MAP => dma_map(backend, p, fds),
            DMA_UNMAP => dma_unmap(backend, p),
            DEVICE_GET_INFO => Ok(self.device_info()),
            DEVICE_GET_REGION_INFO => self.region_info(p),
            DEVICE_GET_IRQ_INFO => self.irq_info(p),
            DEVICE_SET_IRQS => self.set_irqs(backend, p, fds),
            REGION_READ => self.region_read(backend, p),
            REGION_WRITE => self.region_write(backend, p),
            DEVICE_RESET => backend.reset().map(|()| Answer::empty()).map_err(errno_of),
            // GET_REGION_IO_FDS, DMA_READ/DMA_WRITE (the server's to send), DIRTY_PAGES,
            // REGION_WRITE_MULTI (not announced) and anything unknown.
            c => Err(Refusal::new(
                libc::EOPNOTSUPP,
                format!("command {c} ({}) is not served", command::name(c)),
            )),
        }
    }

    fn device_info(&self) -> Answer {
        let mut out = Vec::with_capacity(16);
        put32(&mut out, 16); // argsz: the four fields
        put32(&mut out, VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET);
        put32(&mut out, self.regions.len() as u32);
        put32(&mut out, self.irqs.len() as u32);
        Answer::data(out)
    }

    /// A region's `vfio_region_info`; a region with sparse mmap areas also has a capability
    /// list, sent (with the region's fd) only to a request whose argsz has room for it, as the
    /// kernel's VFIO_DEVICE_GET_REGION_INFO does: the client asks again with a larger argsz.
    fn region_info(&self, mut p: Fields) -> Result<Answer, Refusal> {
        let argsz = p.u32()?;
        let _flags = p.u32()?;
        let index = p.u32()?;
        let region = (self.regions.get(index as usize))
            .ok_or_else(|| Refusal::invalid(format!("no region {index}")))?;
        let mut info = region.region_info;
        let mut caps = Vec::new();
        if !region.sparse_areas.is_empty() {
            caps.extend_from_slice(&(VFIO_REGION_INFO_CAP_SPARSE_MMAP as u16).to_le_bytes());
            caps.extend_from_slice(&1u16.to_le_bytes()); // version
            put32(&mut caps, 0); // next: the last capability
            put32(&mut caps, region.sparse_areas.len() as u32);
            put32(&mut caps, 0); // reserved
            for a in &region.sparse_areas {
                put64(&mut caps, a.area.offset);
                put64(&mut caps, a.area.size);
            }
            let base = size_of::<vfio_region_info>() as u32;
            info.flags |= VFIO_REGION_INFO_FLAG_CAPS;
            info.cap_offset = base;
            info.argsz = base + caps.len() as u32;
        }
        let with_caps = !caps.is_empty() && argsz >= info.argsz;
        let mut out = Vec::with_capacity(32 + caps.len());
        for v in [info.argsz, info.flags, info.index, info.cap_offset] {
            put32(&mut out, v);
        }
        put64(&mut out, info.size);
        put64(&mut out, info.offset);
        let mut fd = None;
        if with_caps {
            out.extend_from_slice(&caps);
            fd = region.mmap_fd;
        }
        Ok(Answer { payload: out, fd })
    }

    fn irq_info(&self, mut p: Fields) -> Result<Answer, Refusal> {
        let _argsz = p.u32()?;
        let _flags = p.u32()?;
        let index = p.u32()?;
        let irq = (self.irqs.get(index as usize))
            .ok_or_else(|| Refusal::invalid(format!("no IRQ index {index}")))?;
        let mut out = Vec::with_capacity(16);
        for v in [16, irq.flags, irq.index, irq.count] {
            put32(&mut out, v);
        }
        Ok(Answer::data(out))
    }

    fn set_irqs(
        &self,
        backend: &mut dyn ServerBackend,
        mut p: Fields,
        fds: Vec<File>,
    ) -> Result<Answer, Refusal> {
        let (_argsz, flags, index) = (p.u32()?, p.u32()?, p.u32()?);
        let (start, count) = (p.u32()?, p.u32()?);
        if index as usize >= self.irqs.len() {
            return Err(Refusal::invalid(format!("no IRQ index {index}")));
        }
        if flags & VFIO_IRQ_SET_DATA_BOOL != 0 {
            return Err(Refusal::new(
                libc::EOPNOTSUPP,
                "SET_IRQS with DATA_BOOL is not served",
            ));
        }
        backend
            .set_irqs(index, flags, start, count, fds)
            .map(|()| Answer::empty())
            .map_err(errno_of)
    }

    /// The region an access names, if `count` bytes at `offset` lie inside it.
    fn access(&self, region: u32, offset: u64, count: u32) -> Result<(), Refusal> {
        let r = (self.regions.get(region as usize))
            .ok_or_else(|| Refusal::invalid(format!("no region {region}")))?;
        let end = offset.checked_add(u64::from(count));
        if count as usize > MAX_DATA_XFER || end.is_none_or(|end| end > r.region_info.size) {
            return Err(Refusal::invalid(format!(
                "{count} bytes at {offset:#x} are not inside region {region} ({} bytes; at most {MAX_DATA_XFER} per access)",
                r.region_info.size
            )));
        }
        Ok(())
    }

    fn region_read(
        &self,
        backend: &mut dyn ServerBackend,
        mut p: Fields,
    ) -> Result<Answer, Refusal> {
        let (offset, region, count) = (p.u64()?, p.u32()?, p.u32()?);
        self.access(region, offset, count)?;
        let mut data = vec![0u8; count as usize];
        backend
            .region_read(region, offset, &mut data)
            .map_err(errno_of)?;
        let mut out = Vec::with_capacity(16 + data.len());
        put64(&mut out, offset);
        put32(&mut out, region);
        put32(&mut out, count);
        out.extend_from_slice(&data);
        Ok(Answer::data(out))
    }

    fn region_write(
        &self,
        backend: &mut dyn ServerBackend,
        mut p: Fields,
    ) -> Result<Answer, Refusal> {
        let (offset, region, count) = (p.u64()?, p.u32()?, p.u32()?);
        if p.0.len() != count as usize {
            return Err(Refusal::invalid(format!(
                "REGION_WRITE of count {count} carries {} bytes of data",
                p.0.len()
            )));
        }
        self.access(region, offset, count)?;
        backend
            .region_write(region, offset, p.0)
            .map_err(errno_of)?;
        let mut out = Vec::with_capacity(16);
        put64(&mut out, offset);
        put32(&mut out, region);
        put32(&mut out, count);
        Ok(Answer::data(out))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// VERSION: the client's major and minor, then (optionally) its capabilities as a
/// NUL-terminated JSON string, which rox-nic only logs. The reply: version 0.0 with
/// [`CAPABILITIES`].
fn version(mut p: Fields) -> Result<Answer, Refusal> {
    let (major, minor) = (p.u16()?, p.u16()?);
    let json = p.0.split(|&b| b == 0).next().unwrap_or_default();
    log::info!(
        "vfio-user: client version {major}.{minor}, {}",
        String::from_utf8_lossy(json)
    );
    let mut out = Vec::with_capacity(4 + CAPABILITIES.len() + 1);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(CAPABILITIES.as_bytes());
    out.push(0);
    Ok(Answer::data(out))
}

fn dma_map(
    backend: &mut dyn ServerBackend,
    mut p: Fields,
    mut fds: Vec<File>,
) -> Result<Answer, Refusal> {
    let (_argsz, flags) = (p.u32()?, p.u32()?);
    let (offset, address, size) = (p.u64()?, p.u64()?, p.u64()?);
    if fds.len() > 1 {
        return Err(Refusal::invalid(format!(
            "DMA_MAP with {} descriptors",
            fds.len()
        )));
    }
    if size == 0 || address.checked_add(size).is_none() {
        return Err(Refusal::invalid(format!(
            "DMA_MAP of {size:#x} bytes at {address:#x} is empty or wraps"
        )));
    }
    backend
        .dma_map(
            DmaMapFlags::from_bits_retain(flags),
            offset,
            address,
            size,
            fds.pop(),
        )
        .map(|()| Answer::empty())
        .map_err(errno_of)
}

/// DMA_UNMAP: the reply echoes the request (argsz, flags, address, size). A dirty bitmap is
/// not offered (no migration).
fn dma_unmap(backend: &mut dyn ServerBackend, mut p: Fields) -> Result<Answer, Refusal> {
    let (argsz, flags, address, size) = (p.u32()?, p.u32()?, p.u64()?, p.u64()?);
    if flags & VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP != 0 {
        return Err(Refusal::new(
            libc::EOPNOTSUPP,
            "DMA_UNMAP with a dirty bitmap (no migration)",
        ));
    }
    if flags & VFIO_DMA_UNMAP_FLAG_ALL == 0 && address.checked_add(size).is_none() {
        return Err(Refusal::invalid(format!(
            "DMA_UNMAP of {size:#x} bytes at {address:#x} wraps"
        )));
    }
    backend
        .dma_unmap(DmaUnmapFlags::from_bits_retain(flags), address, size)
        .map_err(errno_of)?;
    let mut out = Vec::with_capacity(24);
    put32(&mut out, argsz);
    put32(&mut out, flags);
    put64(&mut out, address);
    put64(&mut out, size);
    Ok(Answer::data(out))
}
