//! The cable's handshake: the listener makes the memfd and the doorbells and sends them with
//! a hello; the connector checks all of it before mapping anything.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::{region_len, Wire, HELLO_LEN, MAGIC, RING_SLOTS, SLOT_LEN, VERSION};
use crate::sys;
use crate::sys::shm::SharedMapping;

/// The listener's side of the handshake: the memfd, the doorbells, the hello.
pub(super) fn serve_hello(conn: UnixStream) -> std::io::Result<Wire> {
    let (slots, slot_len) = (RING_SLOTS, SLOT_LEN);
    let len = region_len(slots, slot_len);
    let memfd = sys::shm::sealed_memfd(c"rox-cable", len as u64)?;
    let map = SharedMapping::map(&memfd, len)?;
    let hello = hello_bytes(slots, slot_len);
    map.write(0, &hello);
    let (listener_bell, connector_bell) = (sys::fd::eventfd()?, sys::fd::eventfd()?);
    sys::fdpass::send_with_fds(
        &conn,
        &hello,
        &[
            memfd.as_raw_fd(),
            listener_bell.as_raw_fd(),
            connector_bell.as_raw_fd(),
        ],
    )?;
    conn.set_nonblocking(true)?;
    Wire::new(conn, map, (listener_bell, connector_bell), true)
}

pub(super) fn hello_bytes(slots: u32, slot_len: u32) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    for (i, word) in [MAGIC, VERSION, slots, slot_len].into_iter().enumerate() {
        h[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    h
}

/// The connector's side: checks the hello and the memfd, maps it.
pub(super) fn take_hello(conn: UnixStream) -> std::io::Result<Wire> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    // Called once bytes are waiting; the timeout only bounds a hello cut short.
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut hello = [0u8; HELLO_LEN];
    let (n, fds) = sys::fdpass::recv_with_fds(&conn, &mut hello)?;
    let word = |i: usize| u32::from_ne_bytes(hello[i * 4..i * 4 + 4].try_into().unwrap());
    if n != HELLO_LEN || word(0) != MAGIC || word(1) != VERSION {
        return Err(bad("not a rox cable hello (magic or version)"));
    }
    let (slots, slot_len) = (word(2), word(3));
    if slots != RING_SLOTS || slot_len != SLOT_LEN {
        return Err(bad("ring geometry differs from this end's"));
    }
    let [memfd, listener_bell, connector_bell]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| bad("the hello does not carry three descriptors"))?;
    let memfd = File::from(memfd);
    let len = region_len(slots, slot_len);
    if !sys::shm::has_size_seals(&memfd) || memfd.metadata()?.len() != len as u64 {
        return Err(bad(
            "the ring memory is not a sealed memfd of the ring size",
        ));
    }
    let (doorbell, peer_doorbell) = (File::from(connector_bell), File::from(listener_bell));
    if ![&doorbell, &peer_doorbell]
        .into_iter()
        .all(sys::fd::is_nonblocking_eventfd)
    {
        return Err(bad("the doorbells are not non-blocking eventfds"));
    }
    let map = SharedMapping::map(&memfd, len)?;
    conn.set_nonblocking(true)?;
    Wire::new(conn, map, (doorbell, peer_doorbell), false)
}
