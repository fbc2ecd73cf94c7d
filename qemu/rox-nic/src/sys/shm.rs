//! Shared memory between two processes (the rox-to-rox cable, `crate::port::cable`): a sealed
//! memfd, its shared mapping with bounds-checked atomics and copies, descriptor passing over a
//! unix stream (SCM_RIGHTS) and an epoll set that folds several fds into one pollable fd; and
//! [`store_once`], the copy into guest memory (which QEMU's vCPUs share) that stores each byte
//! exactly once, as a DMA engine does.

use std::ffi::CStr;
use std::fs::File;
use std::io::ErrorKind;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use vm_memory::volatile_memory::VolatileSlice;

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
    /// single bytes at the ends): each byte read exactly once, never assumed unchanged by the
    /// compiler.
    pub fn copy_to(&self, dst: &mut [u8]) -> bool {
        const WORD: usize = size_of::<u64>();
        let n = dst.len();
        if n > self.0.len {
            return false;
        }
        let first = self.0.ptr.as_ptr().cast_const();
        let mut at = 0;
        // SAFETY: `n` bytes from `first` lie in the mapping `self.0.map` keeps alive (checked
        // above); each load below is inside [0, n) and aligned to its size (the checks before
        // each loop); the 32-byte ones only with AVX, checked by `wide::available()`. The peer may write these bytes concurrently: a volatile load of plain
        // shared memory (as vm-memory reads guest memory) then reads old or new bytes, which
        // the caller checks as data. `dst` is this process's own memory, borrowed mutably.
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
                if wide::available() {
                    // One 16-byte vector to 32-align, then 32-byte ones; the rest below.
                    if n - at >= 2 * WORD && (first as usize + at) % wide::VEC != 0 {
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
            while at < n {
                dst[at] = std::ptr::read_volatile(first.add(at));
                at += 1;
            }
        }
        true
    }
}

/// Copies `src` into `dst` (of the same length; false, nothing written, if not) as a DMA
/// engine writes: every byte stored exactly once, in ascending address order (aligned 32-byte
/// stores on x86-64 with AVX, else 16-byte ones, aligned smaller ones around them and 8-byte
/// ones elsewhere, single bytes at the ends).
/// `memcpy` may store bytes twice (glibc copies 16..31 bytes as two overlapping 16-byte
/// stores, larger sizes with overlapping head and tail vectors): software that updates memory
/// as soon as it sees the device's bytes there — rsockets rewrites the target SGE a credit
/// WRITE placed, without waiting for the completion — would have its update undone by the
/// second store (the rsockets verification failure between two rox guests). Relaxed atomic
/// and volatile stores are stores the compiler may neither split, merge, repeat nor turn into
/// a `memcpy` call. One bounds check for the whole copy, none per word.
pub fn store_once(dst: &VolatileSlice<'_, ()>, src: &[u8]) -> bool {
    const WORD: usize = size_of::<u64>();
    if dst.len() != src.len() {
        return false;
    }
    let guard = dst.ptr_guard_mut();
    let first = guard.as_ptr();
    let n = src.len();
    let mut at = 0;
    // SAFETY: `dst` is `n` bytes of a live mapping (its guard keeps the pointer valid for this
    // call), so every byte at `first + i`, i < n, may be written; each store below is inside
    // [0, n) and aligned to its size (the checks before each loop); the 32-byte ones only
    // with AVX, checked by `wide::available()`. Other parties (the guest)
    // touch this memory only concurrently as they do any DMA target, which atomic and
    // volatile stores tolerate (as vm-memory's own accessors).
    unsafe {
        let store_byte =
            |i: usize| AtomicU8::from_ptr(first.add(i)).store(src[i], Ordering::Relaxed);
        let store_word = |i: usize| {
            let value = u64::from_ne_bytes(src[i..i + WORD].try_into().expect("a word"));
            AtomicU64::from_ptr(first.add(i).cast::<u64>()).store(value, Ordering::Relaxed);
        };
        while at < n && (first as usize + at) % WORD != 0 {
            store_byte(at);
            at += 1;
        }
        #[cfg(target_arch = "x86_64")]
        {
            // 8-aligned here: one word makes it 16-aligned (or leaves fewer than 16 bytes).
            use std::arch::x86_64::{__m128i, _mm_loadu_si128};
            const VEC: usize = size_of::<__m128i>();
            if n - at >= WORD && (first as usize + at) % VEC != 0 {
                store_word(at);
                at += WORD;
            }
            if wide::available() {
                // One 16-byte vector to 32-align, then 32-byte ones; the rest below.
                if n - at >= VEC && (first as usize + at) % wide::VEC != 0 {
                    let v = _mm_loadu_si128(src[at..at + VEC].as_ptr().cast());
                    std::ptr::write_volatile(first.add(at).cast::<__m128i>(), v);
                    at += VEC;
                }
                // 32-aligned here if a whole vector is left (the step above).
                if n - at >= wide::VEC {
                    at += wide::store_vectors(first.add(at), &src[at..]);
                }
            }
            // SSE2 is part of x86-64: no feature check needed. Four vectors a round, then
            // single ones (a tight loop: the bounds are the chunks').
            let mut to = first.add(at).cast::<__m128i>();
            let mut rounds = src[at..].chunks_exact(4 * VEC);
            for round in &mut rounds {
                for v in round.chunks_exact(VEC) {
                    std::ptr::write_volatile(to, _mm_loadu_si128(v.as_ptr().cast()));
                    to = to.add(1);
                }
            }
            let mut singles = rounds.remainder().chunks_exact(VEC);
            for v in &mut singles {
                std::ptr::write_volatile(to, _mm_loadu_si128(v.as_ptr().cast()));
                to = to.add(1);
            }
            at = n - singles.remainder().len();
        }
        while n - at >= WORD {
            store_word(at);
            at += WORD;
        }
        while at < n {
            store_byte(at);
            at += 1;
        }
    }
    true
}

/// 32-byte (AVX) volatile loads and stores for [`PeerBytes::copy_to`] and [`store_once`], on
/// CPUs that have them: half the instructions of 16-byte ones per byte moved.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};

    /// Bytes per vector (and the alignment the volatile accesses need).
    pub(super) const VEC: usize = size_of::<__m256i>();

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx")
    }

    /// Copies the whole vectors of `dst.len()` bytes from `from` into `dst`, each read with
    /// one volatile load; returns the bytes copied.
    ///
    /// # Safety
    /// The CPU has AVX ([`available`]); `from` is 32-aligned and `dst.len()` bytes from it
    /// may be read.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn load_vectors(from: *const u8, dst: &mut [u8]) -> usize {
        let mut from = from.cast::<__m256i>();
        let len = dst.len();
        let mut chunks = dst.chunks_exact_mut(VEC);
        for chunk in &mut chunks {
            // SAFETY: `from` stays 32-aligned and within the bytes the caller vouches for
            // (one vector per whole chunk of `dst`); `chunk` is 32 bytes of `dst`.
            unsafe {
                _mm256_storeu_si256(chunk.as_mut_ptr().cast(), std::ptr::read_volatile(from));
                from = from.add(1);
            }
        }
        len - chunks.into_remainder().len()
    }

    /// Stores the whole vectors of `src` at `to`, each with one volatile store, in ascending
    /// order; returns the bytes stored.
    ///
    /// # Safety
    /// The CPU has AVX ([`available`]); `to` is 32-aligned and `src.len()` bytes from it may
    /// be written.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn store_vectors(to: *mut u8, src: &[u8]) -> usize {
        let mut to = to.cast::<__m256i>();
        let mut chunks = src.chunks_exact(VEC);
        for chunk in &mut chunks {
            // SAFETY: `to` stays 32-aligned and within the bytes the caller vouches for (one
            // vector per whole chunk of `src`); `chunk` is 32 bytes of `src`.
            unsafe {
                std::ptr::write_volatile(to, _mm256_loadu_si256(chunk.as_ptr().cast()));
                to = to.add(1);
            }
        }
        src.len() - chunks.remainder().len()
    }
}

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Sends `data` with `fds` attached (SCM_RIGHTS) as one message on `stream`.
pub fn send_with_fds(stream: &UnixStream, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    assert!(fds.len() <= MAX_FDS && !data.is_empty());
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain C data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at a control buffer of CMSG_SPACE(fd_bytes) bytes, enough for one
    // header and the descriptors copied into its data.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr().cast::<u8>(),
            libc::CMSG_DATA(cmsg),
            fd_bytes as usize,
        );
    }
    let sent = loop {
        // SAFETY: `msg`, its iovec (into `data`) and its control buffer live across the call.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // A stream may take part of the message (a signal, a full buffer): the descriptors went
    // with that part, the rest follows as plain bytes.
    let mut rest = stream;
    std::io::Write::write_all(&mut rest, &data[sent..])
}

/// Receives one message of at most `data.len()` bytes and the descriptors attached to it.
/// Returns the bytes received (0: the peer closed) and the descriptors, now owned here.
pub fn recv_with_fds(
    stream: &UnixStream,
    data: &mut [u8],
) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    recv_with_fds_max(stream, data, MAX_FDS)
}

/// The most descriptors Linux passes in one message (SCM_MAX_FD): with room for this many,
/// a receive is never cut short for lack of room.
pub const SCM_MAX_FD: usize = 253;

/// [`recv_with_fds`] with room for `max_fds` descriptors (more attached is an error, and the
/// kernel closes the extra ones).
pub fn recv_with_fds_max(
    stream: &UnixStream,
    data: &mut [u8],
    max_fds: usize,
) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let fd_bytes = (max_fds * std::mem::size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain C data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg`, its iovec (into `data`) and its control buffer live across the call;
    // MSG_CMSG_CLOEXEC makes received descriptors close-on-exec.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg.msg_control` with well-formed headers inside the buffer;
    // the CMSG_* macros walk them without leaving it. Each SCM_RIGHTS descriptor is new in
    // this process and owned by nobody else.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = data.cast::<RawFd>().add(i).read_unaligned();
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "too many descriptors attached",
        ));
    }
    Ok((n as usize, fds))
}

/// What waits on a connected stream, looked at without consuming it: Some(true) bytes,
/// Some(false) nothing yet, None the peer closed it (or it broke).
pub fn peek(stream: &UnixStream) -> Option<bool> {
    let mut byte = 0u8;
    // SAFETY: reads at most one byte into a local; MSG_PEEK leaves it queued.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted).then_some(false);
    }
    // A stream reads 0 bytes only at its end.
    (n > 0).then_some(true)
}

/// Whether the peer of a connected stream closed it (or it broke); nothing is consumed.
pub fn peer_closed(stream: &UnixStream) -> bool {
    peek(stream).is_none()
}

/// An epoll set: one fd that polls readable when any fd in it is (level-triggered).
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> std::io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for input (and hang-up).
    pub fn add(&self, fd: RawFd) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: fd as u64,
        };
        // SAFETY: epoll_ctl reads one epoll_event that lives across the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The fds in the set that are ready now (at most `out.len()`), without waiting.
    pub fn ready(&self, out: &mut [RawFd]) -> usize {
        const MAX: usize = 8;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let max = out.len().min(MAX) as libc::c_int;
        // SAFETY: epoll_wait writes at most `max` (<= MAX) events into `events`; no waiting.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, 0) };
        for (o, e) in out.iter_mut().zip(&events[..n.max(0) as usize]) {
            *o = e.u64 as RawFd;
        }
        n.max(0) as usize
    }

    /// Stops watching `fd` (closing it also does).
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: EPOLL_CTL_DEL ignores the event argument (null allowed since Linux 2.6.9).
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
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
    fn store_once_copies_exactly_its_slice_or_nothing_when_lengths_differ() {
        let src: Vec<u8> = (1..=200).collect();
        // Every alignment of the first byte (the 8-, 16- and 32-byte steps), short and long.
        let cases = (0..32)
            .map(|at| (at, 200 - at))
            .chain([(3, 61), (7, 1), (5, 0)]);
        for (at, len) in cases {
            let mut mem = [0u8; 256];
            assert!(store_once(
                &VolatileSlice::from(&mut mem[at..at + len]),
                &src[..len]
            ));
            assert_eq!(&mem[at..at + len], &src[..len], "{at}+{len}");
            assert!(mem[..at].iter().chain(&mem[at + len..]).all(|&b| b == 0));
        }
        let mut mem = [0u8; 16];
        assert!(!store_once(&VolatileSlice::from(&mut mem[..8]), &src[..9]));
        assert_eq!(mem, [0; 16], "a length mismatch writes nothing");
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

    #[test]
    fn descriptors_cross_a_unix_stream_with_their_message() {
        let (x, y) = UnixStream::pair().unwrap();
        let f = sealed_memfd(c"rox-shm-pass", 4096).unwrap();
        send_with_fds(&x, b"hello", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(&y, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 2);
        let got = File::from(fds.into_iter().next().unwrap());
        assert_eq!(got.metadata().unwrap().len(), 4096);
        y.set_nonblocking(true).unwrap();
        assert_eq!(peek(&y), Some(false));
        send_with_fds(&x, b"!", &[]).unwrap();
        assert_eq!(peek(&y), Some(true));
        assert!(!peer_closed(&y));
        assert_eq!(recv_with_fds(&y, &mut buf).unwrap().0, 1);
        drop(x);
        assert!(peer_closed(&y));
    }
}
