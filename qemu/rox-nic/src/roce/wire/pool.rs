//! Packet buffers: recycled heap buffers, or buffers a port lends (a cable's transmit slot in
//! shared memory), so the engine builds each packet once, where the wire takes it from.
//!
//! Recycled: the port hands the buffers of the frames it sent back ([`recycle`]), and the
//! next packet this thread builds is written over one of them. Their bytes are initialized
//! already, so a data packet's payload is gathered from guest memory straight over the old
//! bytes: no allocation and no zeroing pass per packet (at 4 KiB frames, zeroing was a fifth
//! of a cable WRITE's instructions).
//!
//! Lent: a port that can take a frame from a buffer of its own ([`Lender`]; the cable, whose
//! slots the peer reads) is installed as this thread's lender ([`lend_from`]) while it is
//! connected. A packet is then built in such a buffer behind [`HEADROOM`] bytes the port
//! fills with the Ethernet header, and the port publishes the buffer as it is: the copy into
//! the wire is gone. A lent packet that goes elsewhere (the device's own loopback, a fault
//! injector, another wire) is read like any other and gives its buffer back when dropped.
//!
//! One pool and one lender per thread: a device's data path builds, sends and recycles its
//! packets on its own thread, so it meets only its own buffers and never waits for a lock.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::sys::shm::Region;

/// Buffers kept per thread: a burst's worth of 4 KiB frames (about 1 MiB).
const POOL_BUFFERS: usize = 256;
/// Shorter packets (ACKs, small messages) are built in this thread's own buffers, not in a
/// port's lent ones: they are cheap to copy and the port's buffers are kept for long frames.
const LEND_MIN_LEN: usize = 1024;
/// Buffers of more than a cable slot (a frame of a port with a very large MTU) are not kept: the
/// pool stays within POOL_BUFFERS x 16 KiB per thread.
const POOL_MAX_CAPACITY: usize = 16 << 10;
/// Bytes a lent buffer keeps in front of the packet: an Ethernet header.
pub const HEADROOM: usize = 14;

thread_local! {
    static SPENT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static LENDER: RefCell<Option<Arc<dyn Lender>>> = const { RefCell::new(None) };
}

/// A port's buffers that packets may be built in.
pub trait Lender: Send + Sync {
    /// A free buffer (None: none to spare now; the packet goes into a heap buffer).
    fn lend(self: Arc<Self>) -> Option<Lease>;
    /// Takes back the buffer of a lease dropped unpublished.
    fn give_back(&self, buffer: Region);
}

/// A buffer lent by a [`Lender`], this lease's alone until it is published or dropped
/// (then the buffer goes back to its lender).
pub struct Lease {
    buffer: Option<Region>,
    owner: Arc<dyn Lender>,
}

impl Lease {
    pub fn new(buffer: Region, owner: Arc<dyn Lender>) -> Lease {
        Lease {
            buffer: Some(buffer),
            owner,
        }
    }

    /// Whether `lender` lent this buffer.
    pub fn is_from(&self, lender: &Arc<dyn Lender>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.owner), Arc::as_ptr(lender))
    }

    /// Ends the lease without giving the buffer back: its owner takes it over (publishes it).
    pub fn publish(mut self) -> Region {
        self.buffer
            .take()
            .expect("a lease holds its buffer until it ends")
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref().map_or(&[], Region::as_slice)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut().map_or(&mut [], Region::as_mut_slice)
    }

    fn cap(&self) -> usize {
        self.buffer.as_ref().map_or(0, Region::len)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.owner.give_back(buffer);
        }
    }
}

/// A RoCEv2 IP packet the engine built: in a heap buffer, or in a buffer a port lent
/// (behind [`HEADROOM`] bytes for its Ethernet header). Reads as the packet's bytes.
pub struct Packet {
    buf: Buf,
    len: usize,
}

enum Buf {
    Heap(Vec<u8>),
    Lent(Lease),
}

impl Packet {
    /// The room for the Ethernet header in front of a packet built in a lent buffer.
    pub fn header_room(&mut self) -> Option<&mut [u8]> {
        match &mut self.buf {
            Buf::Heap(_) => None,
            Buf::Lent(l) => Some(&mut l.bytes_mut()[..HEADROOM]),
        }
    }

    /// The lease of a packet built in a lent buffer.
    pub fn lease(&self) -> Option<&Lease> {
        match &self.buf {
            Buf::Heap(_) => None,
            Buf::Lent(l) => Some(l),
        }
    }

    /// The lease (and the frame's length behind it: header room + packet), taking the packet
    /// apart; the packet back if it is on the heap.
    pub fn into_lease(self) -> Result<(Lease, usize), Packet> {
        match self.buf {
            Buf::Lent(l) => Ok((l, HEADROOM + self.len)),
            buf @ Buf::Heap(_) => Err(Packet { buf, len: self.len }),
        }
    }

    /// The packet in a heap buffer (copied out of a lent one, which is given back).
    pub fn into_vec(self) -> Vec<u8> {
        match self.buf {
            Buf::Heap(v) => v,
            Buf::Lent(_) => self.to_vec(),
        }
    }

    /// Gives the buffer back: a heap one to this thread's pool, a lent one to its port (as it
    /// drops). [`recycle_all`] of this one packet; the free [`recycle`] takes a bare heap
    /// buffer, not a packet.
    pub fn recycle(self) {
        recycle_all(std::iter::once(self));
    }

    pub fn is_lent(&self) -> bool {
        matches!(self.buf, Buf::Lent(_))
    }
}

impl From<Vec<u8>> for Packet {
    fn from(v: Vec<u8>) -> Packet {
        Packet {
            len: v.len(),
            buf: Buf::Heap(v),
        }
    }
}

impl Deref for Packet {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.buf {
            Buf::Heap(v) => v,
            Buf::Lent(l) => &l.bytes()[HEADROOM..HEADROOM + self.len],
        }
    }
}

impl DerefMut for Packet {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Buf::Heap(v) => v,
            Buf::Lent(l) => &mut l.bytes_mut()[HEADROOM..HEADROOM + self.len],
        }
    }
}

impl Clone for Packet {
    /// A copy on the heap (a lent buffer is one frame's).
    fn clone(&self) -> Packet {
        Packet::from(self.to_vec())
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Packet({} bytes{})",
            self.len,
            if self.is_lent() { ", lent" } else { "" }
        )
    }
}

impl PartialEq for Packet {
    fn eq(&self, other: &Packet) -> bool {
        **self == **other
    }
}

/// Makes `lender` this thread's lender (None: none); returns the one it replaces.
pub fn lend_from(lender: Option<Arc<dyn Lender>>) -> Option<Arc<dyn Lender>> {
    LENDER.with_borrow_mut(|l| std::mem::replace(l, lender))
}

/// Clears this thread's lender if it is `lender`.
pub fn stop_lending(lender: &Arc<dyn Lender>) {
    LENDER.with_borrow_mut(|l| {
        if l.as_ref()
            .is_some_and(|x| std::ptr::addr_eq(Arc::as_ptr(x), Arc::as_ptr(lender)))
        {
            *l = None;
        }
    });
}

/// Gives back the buffer of a packet that was sent (or dropped) for a later packet. Short
/// ones too: allocating, zeroing and freeing each request's buffer cost about 450 of the
/// host benchmark's 7,400 instructions per 8 B WRITE.
pub fn recycle(buf: Vec<u8>) {
    SPENT.with_borrow_mut(|pool| keep(pool, buf));
}

/// Gives back the buffers of `packets` (a port's sent batch, or one packet), with one look at
/// this thread's pool for all of them: heap buffers to the pool, lent ones to their lender.
pub fn recycle_all(packets: impl Iterator<Item = Packet>) {
    SPENT.with_borrow_mut(|pool| {
        for p in packets {
            // A lent buffer goes back to its lender as the packet drops, inside this borrow
            // of the pool: a lender's `give_back` must not touch this pool (it would panic).
            if let Buf::Heap(v) = p.buf {
                keep(pool, v);
            }
        }
    });
}

/// Whether a buffer is worth a place in the pool: not huge, and not empty (a packet
/// published from a lent buffer leaves an empty one behind, which would only be grown,
/// that is allocated, by the next packet).
fn worth_keeping(buf: &Vec<u8>) -> bool {
    (1..=POOL_MAX_CAPACITY).contains(&buf.capacity())
}

/// Puts `buf` in `pool` if it is worth keeping and the pool has room (else it is freed).
fn keep(pool: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    if worth_keeping(&buf) && pool.len() < POOL_BUFFERS {
        pool.push(buf);
    }
}

/// A packet buffer of `len` initialized bytes (their values are whatever was there: the
/// builder writes every one of them): lent by this thread's lender if the packet is long
/// and it has a buffer that big to spare, else recycled (short ones too) or new.
pub(super) fn buffer(len: usize) -> Packet {
    if len >= LEND_MIN_LEN {
        let lent = LENDER.with_borrow(|l| l.clone().and_then(Lender::lend));
        if let Some(lease) = lent.filter(|l| HEADROOM + len <= l.cap()) {
            return Packet {
                buf: Buf::Lent(lease),
                len,
            };
        }
    }
    if let Some(mut buf) = SPENT.with_borrow_mut(Vec::pop) {
        // Shrinking writes nothing; growing zeroes only the new bytes (a short packet's
        // buffer grows once, then carries long ones).
        buf.resize(len, 0);
        return Packet::from(buf);
    }
    Packet::from(vec![0; len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_recycled_buffer_comes_back_with_the_length_asked_and_huge_ones_are_not_kept() {
        // The test thread's own pool: nothing else runs on it.
        while SPENT.with_borrow_mut(Vec::pop).is_some() {}
        let big = vec![7u8; 4096];
        let at = big.as_ptr();
        recycle(big);
        let again = buffer(2000);
        assert_eq!(
            (again.as_ptr(), again.len()),
            (at, 2000),
            "the same allocation"
        );
        recycle(vec![1u8; POOL_MAX_CAPACITY + 1]);
        let fresh = buffer(3000);
        assert_eq!(
            *fresh,
            vec![0u8; 3000][..],
            "a fresh buffer when the pool is empty"
        );
        again.recycle();
        let grown = buffer(4096);
        assert!(grown[2000..].iter().all(|&b| b == 0), "growth is zeroed");
        let short = vec![3u8; 60];
        let at = short.as_ptr();
        recycle(short);
        let reused = buffer(40);
        assert_eq!(reused.as_ptr(), at, "a short packet's buffer is kept too");
        for _ in 0..POOL_BUFFERS + 10 {
            recycle(vec![0u8; 60]);
        }
        assert_eq!(
            SPENT.with_borrow(Vec::len),
            POOL_BUFFERS,
            "the pool is bounded"
        );
    }

    /// A sent batch goes back in one call: heap buffers to this thread's pool (not the empty
    /// one a published lent packet leaves behind, which the next packet would only have to
    /// grow), lent ones to their lender.
    #[test]
    fn a_sent_batch_is_recycled_at_once_and_empty_buffers_are_not_kept() {
        while SPENT.with_borrow_mut(Vec::pop).is_some() {}
        let memfd = crate::sys::shm::sealed_memfd(c"rox-pool-batch", 4096).unwrap();
        let map = Arc::new(crate::sys::shm::SharedMapping::map(&memfd, 4096).unwrap());
        let lender = Arc::new(TestLender {
            free: Mutex::new(map.carve(0, 4096, 1).unwrap()),
        });
        let lent = Packet {
            len: 100,
            buf: Buf::Lent(lender.clone().lend().unwrap()),
        };
        assert!(free_ids(&lender).is_empty());
        let (a, b) = (vec![1u8; 60], vec![2u8; 3000]);
        let at = [a.as_ptr(), b.as_ptr()];
        recycle_all(
            [
                Packet::from(a),
                lent,
                Packet::from(Vec::new()),
                Packet::from(b),
            ]
            .into_iter(),
        );
        assert_eq!(
            free_ids(&lender),
            vec![0],
            "the lent buffer went back to its lender"
        );
        let kept: Vec<*const u8> = SPENT.with_borrow(|p| p.iter().map(|v| v.as_ptr()).collect());
        assert_eq!(kept, at, "both heap buffers, in order; not the empty one");
        recycle(Vec::new());
        assert_eq!(SPENT.with_borrow(Vec::len), 2, "nor one recycled alone");
    }

    /// A lender of the buffers of a memfd that records what comes back.
    struct TestLender {
        free: Mutex<Vec<Region>>,
    }

    impl Lender for TestLender {
        fn lend(self: Arc<Self>) -> Option<Lease> {
            let buffer = self.free.lock().unwrap().pop()?;
            Some(Lease::new(buffer, self))
        }
        fn give_back(&self, buffer: Region) {
            self.free.lock().unwrap().push(buffer);
        }
    }

    fn free_ids(l: &TestLender) -> Vec<u32> {
        l.free.lock().unwrap().iter().map(Region::index).collect()
    }

    #[test]
    fn a_lent_buffer_holds_the_packet_behind_its_header_room_and_goes_back_when_dropped() {
        let memfd = crate::sys::shm::sealed_memfd(c"rox-pool-test", 8192).unwrap();
        let map = Arc::new(crate::sys::shm::SharedMapping::map(&memfd, 8192).unwrap());
        let lender = Arc::new(TestLender {
            free: Mutex::new(map.carve(0, 4096, 2).unwrap()),
        });
        let as_dyn: Arc<dyn Lender> = lender.clone();
        lend_from(Some(as_dyn.clone()));
        let mut p = buffer(2000);
        assert!(p.is_lent());
        p.fill(9);
        assert_eq!(p.len(), 2000);
        p.header_room().unwrap().fill(1);
        assert!(p.lease().unwrap().is_from(&as_dyn));
        // Too long for the lender's buffers: a heap buffer (and the lease went back).
        assert!(!buffer(4096 - HEADROOM + 1).is_lent());
        assert_eq!(free_ids(&lender), vec![0]);
        let copy = p.clone();
        assert!(!copy.is_lent() && copy == p);
        let (lease, frame_len) = p.into_lease().unwrap();
        assert_eq!(frame_len, HEADROOM + 2000);
        assert_eq!(lease.bytes()[..HEADROOM], [1; HEADROOM]);
        assert_eq!(lease.publish().index(), 1, "published: not given back");
        assert_eq!(free_ids(&lender), vec![0]);
        let dropped = buffer(1500);
        assert!(dropped.is_lent() && free_ids(&lender).is_empty());
        drop(dropped.into_vec());
        assert_eq!(free_ids(&lender), vec![0], "dropped: given back");
        stop_lending(&as_dyn);
        assert!(!buffer(2000).is_lent(), "no lender: heap");
    }
}
