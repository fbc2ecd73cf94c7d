//! Shared memory between two processes (the rox-to-rox cable, `crate::port::cable`): a sealed
//! memfd, its shared mapping with bounds-checked atomics and copies, and the regions carved
//! from it ([`Region`], and [`PeerBytes`], read with volatile loads while a peer may write).

use std::ffi::CStr;
use std::fs::File;
use std::io::ErrorKind;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8};
use std::sync::{Arc, Mutex};

use super::crc32;
#[cfg(target_arch = "x86_64")]
use super::wide;

/// The seals a cable's memfd carries: its size is fixed for good, so neither process can make
/// the other's mapping fault (SIGBUS) by shrinking it.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new close-on-exec memfd of `size` zero bytes whose size is sealed.
pub fn sealed_memfd(name: &CStr, size: u64) -> std::io::Result<File> {
    // SAFETY: plain syscall with a valid C string; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)?;
    // SAFETY: fcntl on a descriptor this function owns; no memory arguments.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, SIZE_SEALS) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Whether `file` is a memfd whose size nobody can change any more.
pub fn has_size_seals(file: &File) -> bool {
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & SIZE_SEALS == SIZE_SEALS
}

/// A shared, read-write mapping of a whole file (or of anonymous memory, [`SharedMapping::
/// anonymous`]). Another process may write it at any time: everything read from it is data to
/// check, never a length or index to trust.
pub struct SharedMapping {
    base: *mut u8,
    len: usize,
    /// Byte ranges handed out as [`Region`]s: none is handed out twice.
    carved: Mutex<Vec<Range<usize>>>,
}

// SAFETY: the mapping is plain shared memory; all access goes through atomics or copies that
// tolerate concurrent writers, so it may move to and be used from any thread.
unsafe impl Send for SharedMapping {}

// SAFETY: likewise, shared references only reach the memory through those atomics and copies,
// or through the [`Region`]s carved out once each.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps all `len` bytes of `file` (which must be at least that long and sealed against
    /// shrinking, see [`sealed_memfd`]).
    pub fn map(file: &File, len: usize) -> std::io::Result<SharedMapping> {
        Self::mmap_shared(len, 0, file.as_raw_fd())
    }

    /// A shared anonymous mapping of `len` zero bytes: memory this process shares with the
    /// kernel only (io_uring's provided buffers, `crate::sys::uring`).
    pub fn anonymous(len: usize) -> std::io::Result<SharedMapping> {
        Self::mmap_shared(len, libc::MAP_ANONYMOUS, -1)
    }

    /// A new read-write `MAP_SHARED | flags` mapping of `len` bytes of `fd` (-1: anonymous).
    fn mmap_shared(len: usize, flags: libc::c_int, fd: RawFd) -> std::io::Result<SharedMapping> {
        if len == 0 {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                "empty mapping",
            ));
        }
        // SAFETY: a new shared mapping (of an open file, or anonymous); the kernel picks the
        // address; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedMapping {
            base: p.cast(),
            len,
            carved: Mutex::new(Vec::new()),
        })
    }

    /// The mapping's first byte, for memory handed to the kernel.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The byte at `offset` (inside the mapping) as an atomic: e.g. a ring entry's owner byte,
    /// loaded with acquire as a consumer of the ring does.
    pub fn atomic_u8(&self, offset: usize) -> &AtomicU8 {
        assert!(offset < self.len, "atomic at {offset} out of the mapping");
        // SAFETY: in bounds (checked above); AtomicU8 has u8's size and alignment; the mapping
        // lives as long as `self`, and an AtomicU8 tolerates concurrent access.
        unsafe { &*self.base.add(offset).cast::<AtomicU8>() }
    }

    /// The 32-bit atomic at byte `offset` (4-aligned, inside the mapping).
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset % 4 == 0 && offset + 4 <= self.len,
            "atomic at {offset} out of the mapping"
        );
        // SAFETY: in bounds and aligned (checked above; mmap returns page-aligned memory); the
        // mapping lives as long as `self`, and an AtomicU32 tolerates concurrent access.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    /// `count` regions of `len` bytes each from byte `offset` on, numbered 0.., each this
    /// process's only handle to its bytes (a cable's frame buffers: whoever holds one reads
    /// and writes it as ordinary memory). None if they leave the mapping or overlap regions
    /// carved before.
    pub fn carve(self: &Arc<Self>, offset: usize, len: usize, count: u32) -> Option<Vec<Region>> {
        let end = len.checked_mul(count as usize)?.checked_add(offset)?;
        if len == 0 || end > self.len {
            return None;
        }
        let mut carved = self.carved.lock().unwrap_or_else(|e| e.into_inner());
        if carved.iter().any(|r| r.start < end && offset < r.end) {
            return None;
        }
        carved.push(offset..end);
        Some(
            (0..count)
                .map(|index| Region {
                    map: self.clone(),
                    // SAFETY: inside the mapping (checked above); mmap never returns null.
                    ptr: unsafe {
                        NonNull::new_unchecked(self.base.add(offset + index as usize * len))
                    },
                    len,
                    index,
                })
                .collect(),
        )
    }

    /// Copies `src` to byte `offset`; false (nothing written) if it does not fit.
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        if offset
            .checked_add(src.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range is inside the mapping (checked above) and `src` is ordinary memory
        // that cannot overlap a mapping made by this type.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(offset), src.len()) };
        true
    }

    /// Copies `dst.len()` bytes from byte `offset`; false (nothing read) if out of range.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if offset
            .checked_add(dst.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range is inside the mapping (checked above); `dst` is exclusively
        // borrowed ordinary memory. A concurrent writer can only make the bytes wrong, which
        // the reader checks.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset), dst.as_mut_ptr(), dst.len())
        };
        true
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value made; no reference into it outlives
        // `self` (atomics borrow `self`).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Bytes of a [`SharedMapping`] this process holds alone ([`SharedMapping::carve`]); it
/// keeps the mapping alive. Only for bytes this process writes and the peer only reads once
/// handed over (a cable's transmit buffers, the writer's until published): bytes the peer may
/// write while this process reads them are [`PeerBytes`], which lend no slice.
pub struct Region {
    map: Arc<SharedMapping>,
    ptr: NonNull<u8>,
    len: usize,
    index: u32,
}

// SAFETY: a region is the only handle in this process to its bytes (carve hands each range
// out once), so moving it to another thread moves that access, and `&Region` only reads.
unsafe impl Send for Region {}
// SAFETY: as above: shared references only read.
unsafe impl Sync for Region {}

impl Region {
    /// Its number among the regions carved with it.
    pub fn index(&self) -> u32 {
        self.index
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it lies in `map`.
    pub fn is_in(&self, map: &Arc<SharedMapping>) -> bool {
        Arc::ptr_eq(&self.map, map)
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes in the mapping `self.map` keeps alive; this region is the only
        // handle to them in this process, and `&self` lets nothing in it write them meanwhile.
        // The peer reads them only once they are handed over (a transmit buffer is this end's
        // until published, and taken back only after the peer moved past it); a peer that
        // breaks that protocol can only corrupt this end's own outgoing frame.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Bytes of a [`SharedMapping`] that the peer process may write at any time, even while
/// this one reads them (a cable's receive buffers: a peer that breaks the ring protocol, or a
/// hostile one, rewrites a frame after this end checked it). They are never lent out as a
/// `&[u8]`, whose bytes Rust (and the optimiser) may assume stay put: the only way to read
/// them is [`PeerBytes::copy_to`], a copy into this process's own memory that reads each
/// byte once, so what is checked afterwards is what is used.
pub struct PeerBytes(Region);

impl PeerBytes {
    /// `count` buffers of `len` bytes each from byte `offset` on, as [`SharedMapping::carve`].
    pub fn carve(
        map: &Arc<SharedMapping>,
        offset: usize,
        len: usize,
        count: u32,
    ) -> Option<Vec<PeerBytes>> {
        Some(
            map.carve(offset, len, count)?
                .into_iter()
                .map(PeerBytes)
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.0.len
    }

    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Copies the first `dst.len()` bytes into `dst`; false (nothing copied) if longer than
    /// these bytes. Volatile loads (32 bytes each on x86-64 with AVX, else 16; 8 elsewhere,
    /// single bytes to align the front, 8, 4, 2 and 1 at the end): each byte read exactly
    /// once, never assumed unchanged by the compiler.
    pub fn copy_to(&self, dst: &mut [u8]) -> bool {
        if dst.len() > self.0.len {
            return false;
        }
        self.copy_from(0, dst);
        true
    }

    /// [`PeerBytes::copy_to`], and where the CPU fuses a fold with a copy this long
    /// (`crc32::copy`: the wide fold, two blocks or more) the CRC-32 of the copy that
    /// `choose` asks for once it has seen its first bytes ([`PEEK_LEN`]; a frame's headers):
    /// the CRC state [`crc32::Front::update`] gives over the whole copy, each 64 bytes past
    /// those folded from the register they were copied with. It is the CRC of the copy,
    /// whatever the peer writes meanwhile: the peer's bytes are read once.
    pub fn copy_folding<'f>(
        &self,
        dst: &mut [u8],
        choose: impl FnOnce(&[u8]) -> Option<&'f crc32::Front>,
    ) -> Copied {
        let n = dst.len();
        if n > self.0.len {
            return Copied::Refused;
        }
        let first = self.0.ptr.as_ptr().cast_const();
        #[cfg(target_arch = "x86_64")]
        if crc32::copy::fuses(first, n) {
            self.copy_from(0, &mut dst[..PEEK_LEN]);
            let Some(front) = choose(&dst[..PEEK_LEN]) else {
                self.copy_from(PEEK_LEN, dst);
                return Copied::Plain;
            };
            // SAFETY: `fuses` holds; `n` bytes from `first` lie in the mapping (checked
            // above), and the first `PEEK_LEN` of them are in `dst`.
            return Copied::Folded(unsafe { crc32::copy::copy_fold(first, dst, PEEK_LEN, front) });
        }
        let _ = (first, choose);
        self.copy_from(0, dst);
        Copied::Plain
    }

    /// Copies bytes `from..dst.len()` (within these bytes) into the same range of `dst`.
    fn copy_from(&self, from: usize, dst: &mut [u8]) {
        const WORD: usize = size_of::<u64>();
        let n = dst.len();
        assert!(n <= self.0.len && from <= n);
        let first = self.0.ptr.as_ptr().cast_const();
        let mut at = from;
        // SAFETY: `n` bytes from `first` lie in the mapping `self.0.map` keeps alive (asserted
        // above); each load below is inside [from, n) and aligned to its size (the checks
        // before each loop); the 32-byte ones only with AVX, checked by `wide::available()`.
        // The peer may write these bytes concurrently: a volatile load of plain shared memory
        // (as vm-memory reads guest memory) then reads old or new bytes, which the caller
        // checks as data. `dst` is this process's own memory, borrowed mutably.
        unsafe {
            while at < n && (first as usize + at) % (2 * WORD) != 0 {
                dst[at] = std::ptr::read_volatile(first.add(at));
                at += 1;
            }
            #[cfg(target_arch = "x86_64")]
            {
                // 16-aligned here (or at the end). SSE2 is part of x86-64. (Four vectors a
                // loop step measured no fewer instructions under callgrind.)
                use std::arch::x86_64::{__m128i, _mm_storeu_si128};
                // 32-byte vectors pay for their feature check and call on long copies only
                // (a small message's frame is a few 16-byte ones).
                if n - at >= WIDE_MIN && wide::available() {
                    // One 16-byte vector to 32-align, then 32-byte ones; the rest below.
                    if (first as usize + at) % wide::VEC != 0 {
                        let v = std::ptr::read_volatile(first.add(at).cast::<__m128i>());
                        _mm_storeu_si128(dst[at..at + 2 * WORD].as_mut_ptr().cast(), v);
                        at += 2 * WORD;
                    }
                    // 32-aligned here if a whole vector is left (the step above).
                    if n - at >= wide::VEC {
                        at += wide::load_vectors(first.add(at), &mut dst[at..]);
                    }
                }
                let mut from = first.add(at).cast::<__m128i>();
                let mut chunks = dst[at..].chunks_exact_mut(2 * WORD);
                for chunk in &mut chunks {
                    _mm_storeu_si128(chunk.as_mut_ptr().cast(), std::ptr::read_volatile(from));
                    from = from.add(1);
                }
                at = n - chunks.into_remainder().len();
            }
            while n - at >= WORD {
                let word = std::ptr::read_volatile(first.add(at).cast::<u64>());
                dst[at..at + WORD].copy_from_slice(&word.to_ne_bytes());
                at += WORD;
            }
            // 8-aligned here, or at the end.
            copy_short(first.add(at), &mut dst[at..]);
        }
    }
}

/// Bytes of a copy [`PeerBytes::copy_folding`] shows its `choose` (at most): a RoCEv2 frame's
/// Ethernet, IP and UDP headers.
pub const PEEK_LEN: usize = 64;

/// The shortest copy [`PeerBytes::copy_to`] makes with 32-byte vectors where it can.
#[cfg(target_arch = "x86_64")]
const WIDE_MIN: usize = 256;

/// What [`PeerBytes::copy_folding`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copied {
    /// Longer than the peer's bytes: nothing copied.
    Refused,
    /// Copied, without a CRC (`choose` asked for none, or the copy is not fused).
    Plain,
    /// Copied, and the CRC state of the copy.
    Folded(u32),
}

/// Copies `dst.len()` (under 16) bytes from `from` with volatile loads of 8, 4, 2 and 1 bytes,
/// in that order, each read once (not a byte at a time: a frame's tail is up to 15 bytes).
///
/// # Safety
/// `dst.len()` bytes from `from` may be read (another process may write them), and `from` is
/// 8-aligned unless `dst` is empty (each load is then aligned to its size).
pub(super) unsafe fn copy_short(from: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    assert!(n < 16);
    let mut at = 0;
    // SAFETY: each load is within the `n` bytes and aligned (the caller's promise: the offsets
    // 0, 8, 8 + 4 ... step down by the sizes); the stores are within `dst`.
    unsafe {
        if n & 8 != 0 {
            let v = std::ptr::read_volatile(from.cast::<u64>());
            dst[at..at + 8].copy_from_slice(&v.to_ne_bytes());
            at += 8;
        }
        if n & 4 != 0 {
            let v = std::ptr::read_volatile(from.add(at).cast::<u32>());
            dst[at..at + 4].copy_from_slice(&v.to_ne_bytes());
            at += 4;
        }
        if n & 2 != 0 {
            let v = std::ptr::read_volatile(from.add(at).cast::<u16>());
            dst[at..at + 2].copy_from_slice(&v.to_ne_bytes());
            at += 2;
        }
        if n & 1 != 0 {
            dst[at] = std::ptr::read_volatile(from.add(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_sealed_memfd_mapped_twice_shares_its_bytes_and_cannot_shrink() {
        let f = sealed_memfd(c"rox-shm-test", 8192).unwrap();
        assert!(has_size_seals(&f));
        assert!(f.set_len(4096).is_err(), "a sealed memfd must not shrink");
        let a = SharedMapping::map(&f, 8192).unwrap();
        let b = SharedMapping::map(&f, 8192).unwrap();
        a.atomic_u32(64).store(7, Ordering::Release);
        assert_eq!(b.atomic_u32(64).load(Ordering::Acquire), 7);
        assert!(a.write(100, b"frame"));
        let mut got = [0u8; 5];
        assert!(b.read(100, &mut got));
        assert_eq!(&got, b"frame");
        assert!(!a.write(8190, b"abc"), "a write past the end is refused");
        assert!(
            !b.read(usize::MAX, &mut got),
            "an overflowing offset is refused"
        );
        assert!(!has_size_seals(&crate::sys::fd::memfd(c"plain").unwrap()));
    }

    #[test]
    fn peer_bytes_copy_exactly_what_was_asked_at_any_alignment_or_refuse() {
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        // Buffers starting 8-, 1- and 16-aligned, copies of odd and vector lengths.
        for (offset, len) in [(8, 1000), (1, 515), (16, 999), (2048, 2048)] {
            let map = Arc::new(SharedMapping::anonymous(4096).unwrap());
            assert!(map.write(0, &pattern));
            let peer = PeerBytes::carve(&map, offset, len, 1)
                .unwrap()
                .pop()
                .unwrap();
            assert_eq!(peer.len(), len);
            for want in [0, 1, 7, 17, 33, 95, len] {
                let mut got = vec![0u8; want + 1];
                assert!(peer.copy_to(&mut got[..want]), "{offset}+{want}");
                assert_eq!(
                    got[..want],
                    pattern[offset..offset + want],
                    "{offset}+{want}"
                );
                assert_eq!(got[want], 0, "nothing past the copy");
            }
            let mut long = vec![0u8; len + 1];
            assert!(!peer.copy_to(&mut long), "longer than the buffer");
            assert!(
                long.iter().all(|&b| b == 0),
                "a refused copy writes nothing"
            );
        }
    }
}
