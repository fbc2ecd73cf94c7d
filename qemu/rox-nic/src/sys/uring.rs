//! io_uring for a port's frames: a burst of frame writes submitted with one `io_uring_enter`,
//! and one multishot read kept armed on the fd, so a burst of arriving frames lands in a ring
//! of provided buffers with one enter, and a look while nothing arrived costs no system call.
//!
//! The ring is single-issuer with deferred task work: the kernel reads arriving frames only
//! inside this ring's own `io_uring_enter(GETEVENTS)`, on the thread that made the ring (a
//! `FrameRing` refuses to be driven from another thread), and raises `IORING_SQ_TASKRUN` in
//! the shared ring when it has such work, which is what [`FrameRing::recv`] looks at.
//!
//! Memory safety rests on two rules. The iovecs and frames of a write are borrowed for the
//! length of [`FrameRing::send`], which returns only once the kernel completed every write it
//! submitted. The receive buffers are an anonymous mapping the ring owns: a buffer is read only
//! after a completion handed it back to us, and only until it is given back to the kernel; on
//! drop the read is cancelled and its last completion awaited before the mapping goes (failing
//! that within [`DISARM_WAIT`], the mapping is leaked rather than freed under the kernel).

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring, Probe};

use super::shm::SharedMapping;
use crate::port::FrameRef;

/// Writes submitted per `io_uring_enter` (a longer list goes in chunks of this many).
pub const SQ_ENTRIES: u32 = 256;
/// Room for the writes' completions and every receive buffer's.
const CQ_ENTRIES: u32 = 1024;
/// Receive buffers (a power of two): frames the armed read may take in between two looks.
pub const RX_BUFFERS: u16 = 256;
/// Fewer, for buffers longer than [`LARGE_BUFFER`] (a tap's 64 KiB segmentation-offload
/// frames): the same few MiB hold as many wire frames.
const RX_LARGE_BUFFERS: u16 = 64;
const LARGE_BUFFER: usize = 16 << 10;
/// `user_data` of the armed read and of its cancellation; a write's is its index in the list.
const RX_TAG: u64 = u64::MAX;
const CANCEL_TAG: u64 = u64::MAX - 1;
const RX_CANCEL_TAG: u64 = u64::MAX - 2;
const BUF_GROUP: u16 = 0;
/// Bytes of one `io_uring_buf` entry of a provided-buffer ring; the ring's tail is the u16 at
/// byte 14 (entry 0's reserved field).
const BUF_ENTRY_BYTES: usize = 16;
const BUF_RING_TAIL: usize = 14;
/// `IORING_ENTER_GETEVENTS` (linux/io_uring.h): wait for completions, run deferred work.
const ENTER_GETEVENTS: u32 = 1;
/// `IORING_ENTER_EXT_ARG`: the argument is an `io_uring_getevents_arg` (carries a timeout).
const ENTER_EXT_ARG: u32 = 8;
/// How long a drop waits for the cancelled read's last completion before leaking its buffers.
const DISARM_WAIT: Duration = Duration::from_secs(2);

/// The receive side's provided buffers: a ring of `entries` buffer descriptors the kernel
/// takes from, and the buffers, `slot_len` bytes each.
struct RxBuffers {
    ring: SharedMapping,
    bufs: SharedMapping,
    entries: u16,
    slot_len: usize,
    /// Our copy of the ring's tail (the kernel keeps the head).
    tail: u16,
}

impl RxBuffers {
    fn new(entries: u16, slot_len: usize) -> io::Result<RxBuffers> {
        let mut rx = RxBuffers {
            ring: SharedMapping::anonymous(entries as usize * BUF_ENTRY_BYTES)?,
            bufs: SharedMapping::anonymous(entries as usize * slot_len)?,
            entries,
            slot_len,
            tail: 0,
        };
        for bid in 0..entries {
            rx.give_back(bid);
        }
        rx.publish();
        Ok(rx)
    }

    /// Puts buffer `bid` at the ring's tail (seen by the kernel after [`RxBuffers::publish`]).
    fn give_back(&mut self, bid: u16) {
        let at = (self.tail & (self.entries - 1)) as usize * BUF_ENTRY_BYTES;
        let addr = self.bufs.as_ptr() as u64 + bid as u64 * self.slot_len as u64;
        // SAFETY: `at` is an entry inside the ring mapping; the kernel reads entries only
        // between its head and the published tail, and this one is beyond the tail. Entry 0's
        // reserved field (the tail) is not written here.
        unsafe {
            let entry = self.ring.as_ptr().add(at);
            entry.cast::<u64>().write_unaligned(addr);
            entry
                .add(8)
                .cast::<u32>()
                .write_unaligned(self.slot_len as u32);
            entry.add(12).cast::<u16>().write_unaligned(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Hands the entries written since the last call to the kernel.
    fn publish(&self) {
        // SAFETY: the tail is a naturally aligned u16 inside the ring mapping, shared with the
        // kernel only through atomic accesses.
        let tail = unsafe { &*self.ring.as_ptr().add(BUF_RING_TAIL).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }

    /// The first `len` bytes of buffer `bid`, which a completion handed back to us.
    fn frame(&self, bid: u16, len: usize) -> &[u8] {
        let bid = bid.min(self.entries - 1) as usize;
        // SAFETY: buffer `bid` lies inside the mapping; the kernel took it from the ring and
        // returned it with this completion, so it writes it no more until `give_back`.
        unsafe {
            std::slice::from_raw_parts(
                self.bufs.as_ptr().add(bid * self.slot_len),
                len.min(self.slot_len),
            )
        }
    }
}

/// An io_uring driving one port fd (see the module documentation).
pub struct FrameRing {
    // Dropped first: the ring's fd closes before the buffers it may still name are unmapped.
    ring: IoUring,
    fd: RawFd,
    owner: ThreadId,
    rx: Option<RxBuffers>,
    rx_armed: bool,
    /// Completions of the armed read taken while waiting for writes: (result, flags).
    rx_early: VecDeque<(i32, u32)>,
    /// Writes' completions reaped aside (a full queue made `enter` refuse): (index, result).
    writes_early: Vec<(u64, i32)>,
    /// A receive error seen after frames were handed out, reported by the next receive.
    rx_error: Option<io::Error>,
    iovecs: Vec<libc::iovec>,
    writes: Vec<Range<usize>>,
}

// SAFETY: the raw pointers are the ring's own mappings; a FrameRing moved to another thread
// refuses every operation there (single issuer), and drop handles that case (leaks).
unsafe impl Send for FrameRing {}

/// Why io_uring cannot carry a port here (old kernel, seccomp, io_uring_disabled), or Ok.
pub fn available() -> io::Result<()> {
    build_ring().map(drop)
}

fn build_ring() -> io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_submit_all()
        .setup_cqsize(CQ_ENTRIES)
        .build(SQ_ENTRIES)?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    for (code, name) in [
        (opcode::Writev::CODE, "IORING_OP_WRITEV"),
        (opcode::ReadMulti::CODE, "IORING_OP_READ_MULTISHOT"),
        (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
    ] {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the kernel's io_uring lacks {name}"),
            ));
        }
    }
    Ok(ring)
}

impl FrameRing {
    /// A ring for `fd` (which must stay open as long as the ring), driven from this thread.
    pub fn new(fd: RawFd) -> io::Result<FrameRing> {
        // A write to a blocking fd would wait in io_uring for room, and `send` would wait with it.
        // SAFETY: F_GETFL only reads the fd's status flags.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl < 0 {
            return Err(io::Error::last_os_error());
        }
        if fl & libc::O_NONBLOCK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an io_uring port needs an O_NONBLOCK fd (a blocking write would stall send)",
            ));
        }
        // The fd is not registered with the ring: a registered file stays referenced until
        // the ring's asynchronous teardown ends, and a tap would stay attached (busy) until then.
        Ok(FrameRing {
            ring: build_ring()?,
            fd,
            owner: std::thread::current().id(),
            rx: None,
            rx_armed: false,
            rx_early: VecDeque::new(),
            writes_early: Vec::new(),
            rx_error: None,
            iovecs: Vec::new(),
            writes: Vec::new(),
        })
    }

    fn check_owner(&self) -> io::Result<()> {
        if std::thread::current().id() == self.owner {
            return Ok(());
        }
        Err(io::Error::other(
            "an io_uring port is driven only from the thread that made its ring",
        ))
    }

    /// `io_uring_enter`; any failure means the ring itself is broken while it may hold
    /// borrowed memory: stop.
    fn enter(&mut self, to_submit: u32, min_complete: u32, getevents: bool) -> usize {
        match self.try_enter(to_submit, min_complete, getevents, None) {
            Ok(n) => n,
            Err(e) => {
                log::error!("rox-nic: io_uring_enter failed with writes in flight: {e}");
                std::process::abort();
            }
        }
    }

    /// `io_uring_enter`, waiting at most `timeout` (ETIME then), retried when interrupted or
    /// short of resources; on EBUSY (completions overflowed) the queue is reaped aside first,
    /// which makes the room the kernel waits for.
    fn try_enter(
        &mut self,
        to_submit: u32,
        min_complete: u32,
        getevents: bool,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let ts = timeout.map(types::Timespec::from);
        let mut args = types::SubmitArgs::new();
        if let Some(ts) = &ts {
            args = args.timespec(ts);
        }
        let flags = ENTER_EXT_ARG | if getevents { ENTER_GETEVENTS } else { 0 };
        loop {
            // SAFETY: `args` is an io_uring_getevents_arg (SubmitArgs is transparent over it)
            // alive for the call; what the submitted entries point to is alive until their
            // completions are reaped (the callers' rule, module documentation).
            let r = unsafe {
                self.ring
                    .submitter()
                    .enter(to_submit, min_complete, flags, Some(&args))
            };
            match r {
                Err(e) => match e.raw_os_error() {
                    Some(libc::EBUSY) => self.reap_aside(),
                    Some(libc::EAGAIN) => std::thread::sleep(Duration::from_micros(100)),
                    Some(libc::EINTR) => {}
                    _ => return Err(e),
                },
                Ok(n) => return Ok(n),
            }
        }
    }

    /// Writes each of `frames` (header and body: one frame) with one writev: see
    /// [`FrameRing::send_writes`].
    pub fn send(&mut self, frames: &[FrameRef], results: &mut Vec<i32>) -> io::Result<u64> {
        let mut writes = std::mem::take(&mut self.writes);
        writes.clear();
        writes.extend((0..frames.len()).map(|i| 2 * i..2 * i + 2));
        let pieces: Vec<&[u8]> = frames.iter().flat_map(|f| [f.head, f.body]).collect();
        let r = self.send_writes(&pieces, &writes, results);
        self.writes = writes;
        r
    }

    /// Submits one writev per entry of `writes` (a range of `pieces`, which it writes in
    /// order: one frame), all with one `io_uring_enter` per [`SQ_ENTRIES`], and waits for
    /// every completion: `results[i]` is write i's byte count or -errno, for the writes
    /// submitted. Stops after a chunk whose last write the fd refused with EAGAIN (the wire
    /// pushes back). Returns the system calls made.
    pub fn send_writes(
        &mut self,
        pieces: &[&[u8]],
        writes: &[Range<usize>],
        results: &mut Vec<i32>,
    ) -> io::Result<u64> {
        if let Some(bad) = writes
            .iter()
            .find(|w| w.start > w.end || w.end > pieces.len())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("write of pieces {bad:?}, {} pieces", pieces.len()),
            ));
        }
        self.iovecs.clear();
        self.iovecs.extend(pieces.iter().map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        }));
        self.check_owner()?;
        results.clear();
        let mut calls = 0;
        for chunk in writes.chunks(SQ_ENTRIES as usize) {
            let base = results.len();
            {
                let mut sq = self.ring.submission();
                for (i, range) in chunk.iter().enumerate() {
                    let iov = &self.iovecs[range.clone()];
                    let write =
                        opcode::Writev::new(types::Fd(self.fd), iov.as_ptr(), iov.len() as u32)
                            .build()
                            .user_data((base + i) as u64);
                    // SAFETY: the iovecs (in bounds, checked above) and the pieces they name
                    // stay borrowed until this call reaped every write's completion
                    // (complete_writes below).
                    if unsafe { sq.push(&write) }.is_err() {
                        unreachable!("the submission queue is empty between calls");
                    }
                }
            }
            results.resize(base + chunk.len(), i32::MIN);
            calls += self.complete_writes(base, chunk.len(), results);
            if results.last() == Some(&-libc::EAGAIN) {
                break;
            }
        }
        Ok(calls)
    }

    /// Submits the `count` writes queued (results from `base`) and reaps until all completed.
    /// A write the fd cannot take at once (io_uring would wait for room) is cancelled and
    /// reported as EAGAIN: the wire pushes back, and this call never waits for a peer.
    fn complete_writes(&mut self, base: usize, count: usize, results: &mut [i32]) -> u64 {
        let mut calls = 0;
        let mut unsubmitted = count;
        // A tap's writes complete inside the submitting enter: no GETEVENTS, so frames that
        // arrived meanwhile stay in the tap (its fd stays readable for the data path's poll).
        while unsubmitted > 0 {
            calls += 1;
            unsubmitted -= self.enter(unsubmitted as u32, 0, false).min(unsubmitted);
        }
        let mut pending = count - self.reap_writes(base, count, results);
        if pending == 0 {
            return calls;
        }
        let mut to_submit = 0;
        {
            let mut sq = self.ring.submission();
            for i in (base..base + count).filter(|&i| results[i] == i32::MIN) {
                let cancel = opcode::AsyncCancel::new(i as u64)
                    .build()
                    .user_data(CANCEL_TAG);
                // SAFETY: a cancellation names no memory; the queue is empty (all submitted)
                // and at most a chunk of writes is pending.
                if unsafe { sq.push(&cancel) }.is_ok() {
                    to_submit += 1;
                }
            }
        }
        // Until every write completed and every cancellation was submitted (a stale one
        // would cancel a later write with the same index).
        while pending > 0 || to_submit > 0 {
            calls += 1;
            let n = self.enter(to_submit, 1, true);
            to_submit -= (n as u32).min(to_submit);
            pending -= self.reap_writes(base, count, results);
        }
        for r in &mut results[base..base + count] {
            if *r == -libc::ECANCELED {
                *r = -libc::EAGAIN;
            }
        }
        calls
    }

    /// Reaps the completions there are: writes' results into `results`, the read's aside.
    /// Returns the writes completed.
    fn reap_writes(&mut self, base: usize, count: usize, results: &mut [i32]) -> usize {
        self.reap_aside();
        let mut done = 0;
        for (i, res) in self.writes_early.drain(..) {
            let at = i as usize;
            if (base..base + count).contains(&at) && results[at] == i32::MIN {
                results[at] = res;
                done += 1;
            }
        }
        done
    }

    /// Empties the completion queue: the read's completions into `rx_early` (a last one
    /// means the read is over), the writes' into `writes_early`.
    fn reap_aside(&mut self) {
        for e in self.ring.completion() {
            match e.user_data() {
                RX_TAG => {
                    self.rx_armed &= cqueue::more(e.flags());
                    self.rx_early.push_back((e.result(), e.flags()));
                }
                CANCEL_TAG | RX_CANCEL_TAG => {}
                i => self.writes_early.push((i, e.result())),
            }
        }
    }

    /// Hands up to `max` received frames to `take` (each at most `slot_len` bytes; a longer
    /// one shows as `slot_len` bytes), in arrival order, and stops early once `take` says it
    /// has no room for another. Arms the read on first use and after
    /// it stopped; with it armed and nothing arrived, makes no system call. Returns (frames,
    /// system calls).
    pub fn recv(
        &mut self,
        slot_len: usize,
        max: usize,
        mut take: impl FnMut(&[u8]) -> bool,
    ) -> io::Result<(usize, u64)> {
        self.check_owner()?;
        if let Some(e) = self.rx_error.take() {
            return Err(e);
        }
        if self.rx.is_none() {
            let count = if slot_len > LARGE_BUFFER {
                RX_LARGE_BUFFERS
            } else {
                RX_BUFFERS
            };
            let rx = RxBuffers::new(count, slot_len)?;
            // SAFETY: the ring mapping is page aligned, `count` entries long, and lives
            // until the ring is closed (field order; drop leaks it if the read is not over).
            unsafe {
                self.ring.submitter().register_buf_ring_with_flags(
                    rx.ring.as_ptr() as u64,
                    rx.entries,
                    BUF_GROUP,
                    0,
                )?;
            }
            self.rx = Some(rx);
        }
        let mut calls = 0;
        if !self.rx_armed {
            // Length 0: each read takes one whole buffer (one frame).
            let read = opcode::ReadMulti::new(types::Fd(self.fd), 0, BUF_GROUP)
                .build()
                .user_data(RX_TAG);
            // SAFETY: the read names only the ring's own provided buffers.
            if unsafe { self.ring.submission().push(&read) }.is_err() {
                unreachable!("the submission queue is empty between calls");
            }
            self.rx_armed = true;
            self.enter(1, 0, true);
            calls += 1;
        } else if self.rx_early.is_empty() && self.ring.completion().is_empty() {
            if !self.ring.submission().taskrun() {
                return Ok((0, 0));
            }
            self.enter(0, 0, true);
            calls += 1;
        }
        let n = self.take_frames(max, &mut take);
        Ok((n, calls))
    }

    /// Takes up to `max` frames from the read's completions (those reaped early first).
    fn take_frames(&mut self, max: usize, take: &mut impl FnMut(&[u8]) -> bool) -> usize {
        let mut n = 0;
        let mut room = true;
        let mut cq = self.ring.completion();
        while n < max && room {
            // Completions set aside earlier come first; whether one ended the read was noted
            // when it was set aside.
            let (res, flags) = match self.rx_early.pop_front() {
                Some(early) => early,
                None => {
                    let Some(e) = cq.next() else { break };
                    if e.user_data() != RX_TAG {
                        continue;
                    }
                    self.rx_armed &= cqueue::more(e.flags());
                    (e.result(), e.flags())
                }
            };
            n += handle_read(
                &mut self.rx,
                &mut self.rx_error,
                res,
                flags,
                take,
                &mut room,
            );
        }
        drop(cq);
        if let Some(rx) = &self.rx {
            rx.publish();
        }
        n
    }

    /// Whether received frames wait in the ring (completions not yet taken).
    pub fn has_frames(&self) -> bool {
        // SAFETY: reading the completion queue's indices only; nothing is consumed.
        !self.rx_early.is_empty() || unsafe { !self.ring.completion_shared().is_empty() }
    }

    /// Cancels the armed read and waits (bounded) for its last completion; false if the read
    /// may still be running.
    fn disarm(&mut self) -> bool {
        // A last completion set aside already ended the read (reap_aside noted it).
        if !self.rx_armed {
            return true;
        }
        if self.check_owner().is_err() {
            return false;
        }
        let cancel = opcode::AsyncCancel::new(RX_TAG)
            .build()
            .user_data(RX_CANCEL_TAG);
        // SAFETY: the cancellation names no memory.
        if unsafe { self.ring.submission().push(&cancel) }.is_err() {
            return false;
        }
        let deadline = Instant::now() + DISARM_WAIT;
        let mut to_submit = 1;
        while self.rx_armed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.try_enter(to_submit, 1, true, Some(left)) {
                Ok(n) => to_submit -= (n as u32).min(to_submit),
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
                Err(_) => return false,
            }
            for e in self.ring.completion() {
                // ENOENT: no read to cancel, it ended with a completion taken earlier.
                let ended = match e.user_data() {
                    RX_TAG => !cqueue::more(e.flags()),
                    RX_CANCEL_TAG => e.result() == -libc::ENOENT,
                    _ => false,
                };
                self.rx_armed &= !ended;
            }
        }
        true
    }
}

/// One completion of the armed read: the frame to `take` (its buffer then given back; `room`
/// becomes what `take` answered), or a stop. Returns the frames taken (0 or 1).
fn handle_read(
    rx: &mut Option<RxBuffers>,
    rx_error: &mut Option<io::Error>,
    res: i32,
    flags: u32,
    take: &mut impl FnMut(&[u8]) -> bool,
    room: &mut bool,
) -> usize {
    let Some(rx) = rx else { return 0 };
    let bid = cqueue::buffer_select(flags);
    let mut taken = 0;
    if res >= 0 {
        if let Some(bid) = bid {
            *room = take(rx.frame(bid, res as usize));
            taken = 1;
        }
    } else if res != -libc::ENOBUFS && res != -libc::ECANCELED {
        // Out of buffers only stops the read until the next look re-arms it; frames wait in
        // the fd meanwhile.
        *rx_error = Some(io::Error::from_raw_os_error(-res));
    }
    if let Some(bid) = bid {
        rx.give_back(bid);
    }
    taken
}

impl Drop for FrameRing {
    fn drop(&mut self) {
        if !self.disarm() {
            // The kernel may still write into the buffers: never unmap them.
            if let Some(rx) = self.rx.take() {
                std::mem::forget(rx);
            }
        }
    }
}

#[cfg(test)]
mod tests;
