//! The posted-wake companion's ivshmem server (`--wake-socket`): rox-nic serves the stock QEMU
//! `ivshmem-doorbell` device next to its NIC (`rox_uapi::wake`), so a guest wakes the sleeping
//! data path with a posted doorbell write instead of a trapped vfio-user register write.
//!
//! The protocol is QEMU's (docs/specs/ivshmem-spec.rst): one-way, server to client, each
//! message an 8-byte little-endian signed number, some with one descriptor (SCM_RIGHTS). On
//! each connection rox-nic sends: the protocol version (0); the client's id ([`CLIENT_ID`]);
//! a connect notification for peer [`DEVICE_PEER`] with the eventfd the data path sleeps on
//! (`Shared::posted_wake`) as its vector [`DEVICE_VECTOR`]; the shared memory (-1 with a
//! memfd of [`SHM_SIZE`] bytes holding the `WakeCompanion` record). QEMU reads up to the
//! shared memory synchronously while it realizes the device, so the peer is known before the
//! guest runs. QEMU gets no eventfd of its own: nothing interrupts the guest through it.
//!
//! The connection stays open (QEMU sees a close as nothing it acts on, but the spec's server
//! keeps it); a new connection replaces the old one. rox-nic never reads from a client, so
//! whatever a client sends or however early it closes, the server only logs and accepts the
//! next one.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use rox_uapi::wake::{WakeCompanion, COMPANION_MAGIC};

use super::ServerError;
use crate::device::Shared;
use crate::sys::fdpass::send_with_fds;
use crate::sys::pod::as_bytes;
use crate::sys::shm::sealed_memfd;

/// The ivshmem protocol version QEMU speaks (since 2.5).
pub const PROTOCOL_VERSION: i64 = 0;
/// The id rox-nic gives its client, QEMU's `ivshmem-doorbell` (its `IVPosition`).
pub const CLIENT_ID: i64 = 0;
/// The peer id that stands for the device: a doorbell to it signals `Shared::posted_wake`.
pub const DEVICE_PEER: u32 = 1;
/// The device peer's one vector.
pub const DEVICE_VECTOR: u32 = 0;
/// Size of the shared memory (the companion's BAR2): one page, a power of two as a PCI BAR
/// must be; the record takes its first bytes.
pub const SHM_SIZE: u64 = 4096;
/// The message that carries the shared memory.
const SHM_MESSAGE: i64 = -1;

/// A bound companion socket with what it hands each client.
pub struct Companion {
    listener: UnixListener,
    shm: File,
    eventfd: File,
}

/// Binds the companion socket at `path` (a stale socket there is removed) and prepares the
/// shared memory naming `shared`'s device. Fails if the device has no companion token.
pub fn bind(path: &Path, shared: &Shared) -> Result<Companion, ServerError> {
    let bind_err = |e| ServerError::Bind(path.display().to_string(), e);
    if shared.wake_token == 0 {
        return Err(bind_err(std::io::Error::other(
            "the device was built without a posted-wake companion",
        )));
    }
    super::claim_socket_path(path)?;
    let record = WakeCompanion {
        magic: COMPANION_MAGIC,
        token: shared.wake_token,
        peer: DEVICE_PEER,
        vector: DEVICE_VECTOR,
    };
    let shm = sealed_memfd(c"rox-wake-companion", SHM_SIZE).map_err(bind_err)?;
    shm.write_all_at(as_bytes(&record), 0).map_err(bind_err)?;
    let eventfd = shared.posted_wake.try_clone_file().map_err(bind_err)?;
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    Ok(Companion {
        listener,
        shm,
        eventfd,
    })
}

impl Companion {
    /// Serves clients on a thread of its own for as long as the process lives.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("rox-wake-companion".into())
            .spawn(move || self.serve())
    }

    fn serve(self) {
        // The client served now; replaced (and so closed) when another connects.
        let mut _current: Option<UnixStream> = None;
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors or the like: try again later, never spin.
                    log::warn!("rox-nic: wake companion: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            match self.greet(&stream) {
                Ok(()) => {
                    log::info!("rox-nic: wake companion: client connected");
                    _current = Some(stream);
                }
                Err(e) => log::warn!("rox-nic: wake companion: client dropped: {e}"),
            }
        }
    }

    /// The messages a new client gets, in the order the module comment gives.
    fn greet(&self, stream: &UnixStream) -> std::io::Result<()> {
        send(stream, PROTOCOL_VERSION, None)?;
        send(stream, CLIENT_ID, None)?;
        send(stream, DEVICE_PEER.into(), Some(self.eventfd.as_raw_fd()))?;
        send(stream, SHM_MESSAGE, Some(self.shm.as_raw_fd()))
    }
}

/// One protocol message: `value` as 8 little-endian bytes, with `fd` attached if any.
fn send(stream: &UnixStream, value: i64, fd: Option<RawFd>) -> std::io::Result<()> {
    let bytes = value.to_le_bytes();
    match fd {
        Some(fd) => send_with_fds(stream, &bytes, &[fd]),
        None => (&*stream).write_all(&bytes),
    }
}
