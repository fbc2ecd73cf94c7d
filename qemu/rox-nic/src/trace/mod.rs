//! The WQE trace: every send WQE's life as the device sees it (doorbell noticed, WQE fetched,
//! PSNs assigned, each packet out, each ACK/NAK/response in, retransmissions, CQE written,
//! EQE and interrupt raised; every well-formed packet in, at the device; the data path's naps
//! and wake-register writes, which say how long a doorbell waited), timestamped on
//! CLOCK_MONOTONIC into a bounded per-device ring.
//!
//! Off by default and then free but for one relaxed atomic load per hook: the hooks take
//! plain integers, and nothing is allocated or formatted until the trace is on. Started with a
//! capacity (the ring's memory is taken then), stopped, dumped to a file ([`record::Dump`]);
//! `rox-trace` turns a dump into Chrome trace-event JSON (Perfetto), a text timeline and
//! per-stage latency histograms ([`lives`], [`chrome`], [`report`]). docs/debugging.md.

pub mod chrome;
#[cfg(test)]
mod cost;
pub mod lives;
pub mod record;
pub mod report;
mod ring;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rox_uapi::queue::{Sge, SqWqe, WqeFlags};

use crate::roce::wire::{ParseError, Parsed};
use crate::sys::clock::monotonic_ns;
pub use record::{Dump, Kind, Record, Retransmit, CQE_RECV, NO_SYNDROME, WAIT_IDLE};
use ring::Ring;

/// Records kept when the trace is turned on without a capacity.
pub const DEFAULT_CAPACITY: usize = 1 << 16;

/// One device's trace: an on/off switch the hooks read, and the ring behind a lock that only
/// a running trace takes (the data path writes; a dump request reads).
#[derive(Debug)]
pub struct WqeTrace {
    on: AtomicBool,
    /// Capacity of the next start without one (the command line's `--trace-wqe N`).
    capacity: AtomicUsize,
    ring: Mutex<Ring>,
}

/// The trace of an environment that has none (the engine's test doubles): always off.
pub static OFF: WqeTrace = WqeTrace::new();

impl Default for WqeTrace {
    fn default() -> WqeTrace {
        WqeTrace::new()
    }
}

impl WqeTrace {
    pub const fn new() -> WqeTrace {
        WqeTrace {
            on: AtomicBool::new(false),
            capacity: AtomicUsize::new(DEFAULT_CAPACITY),
            ring: Mutex::new(Ring::empty()),
        }
    }

    /// The hooks' one check.
    #[inline(always)]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Starts recording into an empty ring of `capacity` records (None: the last capacity
    /// asked for, else [`DEFAULT_CAPACITY`]).
    pub fn start(&self, capacity: Option<usize>) {
        let capacity = match capacity {
            Some(c) => {
                self.capacity.store(c, Ordering::Relaxed);
                c
            }
            None => self.capacity.load(Ordering::Relaxed),
        };
        let mut ring = self.lock();
        if ring.capacity() == capacity {
            ring.clear();
        } else {
            *ring = Ring::with_capacity(capacity);
        }
        self.on.store(true, Ordering::Release);
    }

    /// Stops recording; what was recorded stays until the next start.
    pub fn stop(&self) {
        self.on.store(false, Ordering::Release);
    }

    /// Starts a stopped trace or stops a running one; returns whether it now runs.
    pub fn toggle(&self) -> bool {
        if self.is_on() {
            self.stop();
            false
        } else {
            self.start(None);
            true
        }
    }

    /// The records so far, oldest first.
    pub fn dump(&self) -> Dump {
        self.lock().dump()
    }

    /// Writes [`WqeTrace::dump`] to `path`, replacing it whole (written beside it, then
    /// renamed: a reader never sees half a dump); returns the records written.
    pub fn write_dump(&self, path: &Path) -> std::io::Result<usize> {
        // Each write gets its own scratch file: a SIGUSR2 stop and the exit may write at once,
        // and each must rename a whole dump.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dump = self.dump();
        let mut part = path.as_os_str().to_owned();
        part.push(format!(".part{n}"));
        let part = std::path::PathBuf::from(part);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&part)?);
        dump.write_to(&mut f)?;
        drop(f);
        std::fs::rename(&part, path)?;
        Ok(dump.records.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        // A panic while holding it cannot leave the ring inconsistent: keep using it.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn push(&self, kind: Kind, qpn: u32, a: u32, b: u32, op: u8, flags: u16, wr_id: u64) {
        let r = Record {
            ts_ns: monotonic_ns(),
            wr_id,
            qpn,
            a,
            b,
            kind: kind as u8,
            op,
            flags,
        };
        self.lock().push(r);
    }

    // ---- hooks: each is one call at the place the event happens ------------------------------

    #[inline]
    pub fn doorbell(&self, qpn: u32, pi: u32, new_wqes: u32) {
        if self.is_on() {
            self.push(Kind::Doorbell, qpn, pi, new_wqes, 0, 0, 0);
        }
    }

    #[inline]
    pub fn wqe_fetch(&self, qpn: u32, index: u32, wqe: &SqWqe) {
        if self.is_on() {
            self.push(
                Kind::WqeFetch,
                qpn,
                index,
                wqe_bytes(wqe),
                wqe.opcode,
                0,
                wqe.wr_id,
            );
        }
    }

    #[inline]
    pub fn wqe_start(&self, qpn: u32, first_psn: u32, npsn: u32, wr_id: u64) {
        if self.is_on() {
            self.push(Kind::WqeStart, qpn, first_psn, npsn, 0, 0, wr_id);
        }
    }

    #[inline]
    pub fn frame_out(&self, qpn: u32, psn: u32, opcode: u8, payload_len: usize) {
        if self.is_on() {
            self.push(Kind::FrameOut, qpn, psn, payload_len as u32, opcode, 0, 0);
        }
    }

    #[inline]
    pub fn response_in(&self, qpn: u32, psn: u32, opcode: u8, syndrome: Option<u8>) {
        if self.is_on() {
            let b = syndrome.map_or(NO_SYNDROME, u32::from);
            self.push(Kind::ResponseIn, qpn, psn, b, opcode, 0, 0);
        }
    }

    #[inline]
    pub fn retransmit(&self, qpn: u32, psn: u32, why: Retransmit) {
        if self.is_on() {
            self.push(Kind::Retransmit, qpn, psn, why as u32, 0, 0, 0);
        }
    }

    #[inline]
    pub fn cqe(&self, qpn: u32, cq: u32, wr_id: u64, status: u8, wc_opcode: u8) {
        if self.is_on() {
            let flags = if wc_opcode & rox_uapi::verbs::WC_OPC_RECV != 0 {
                CQE_RECV
            } else {
                0
            };
            self.push(Kind::Cqe, qpn, status.into(), cq, wc_opcode, flags, wr_id);
        }
    }

    #[inline]
    pub fn eqe(&self, eqn: u32, event_type: u8, handle: u32) {
        if self.is_on() {
            self.push(Kind::Eqe, handle, eqn, 0, event_type, 0, 0);
        }
    }

    #[inline]
    pub fn frame_in(&self, packet: &Result<Parsed<'_>, ParseError>) {
        if let (true, Ok(p)) = (self.is_on(), packet) {
            let (bth, len) = (&p.hdr.bth, p.payload.len() as u32);
            self.push(
                Kind::FrameIn,
                bth.dest_qpn.get(),
                bth.psn.get(),
                len,
                bth.opcode,
                0,
                0,
            );
        }
    }

    #[inline]
    pub fn interrupt(&self, vector: u32) {
        if self.is_on() {
            self.push(Kind::Interrupt, 0, vector, 0, 0, 0, 0);
        }
    }

    /// The data path's wait ended after `waited` (it asked for at most `timeout`); `idle`: it
    /// was the idle sleep. Says how much of a doorbell's delay was the device napping.
    #[inline]
    pub fn wait(&self, waited: Duration, timeout: Option<Duration>, idle: bool) {
        if self.is_on() {
            let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
            let asked = timeout.map_or(u32::MAX, us);
            let flags = if idle { WAIT_IDLE } else { 0 };
            self.push(Kind::Wait, 0, us(waited), asked, 0, flags, 0);
        }
    }

    /// A vCPU wrote the wake register.
    #[inline]
    pub fn wake(&self) {
        if self.is_on() {
            self.push(Kind::Wake, 0, 0, 0, 0, 0, 0);
        }
    }
}

/// The bytes a send WQE moves: its inline data, or the sum of its gather list.
fn wqe_bytes(w: &SqWqe) -> u32 {
    if WqeFlags::from_bits(w.flags).is_some_and(|f| f.contains(WqeFlags::INLINE)) {
        return w.inline_len;
    }
    let sges = (w.num_sge as usize).min(w.data.len() / size_of::<Sge>());
    w.data[..sges * size_of::<Sge>()]
        .chunks_exact(size_of::<Sge>())
        .map(|b| crate::dma::from_bytes::<Sge>(b).length)
        .fold(0u32, u32::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_says_how_long_and_whether_it_was_the_idle_sleep_and_a_wake_is_recorded() {
        let t = WqeTrace::new();
        t.wait(
            Duration::from_micros(7),
            Some(Duration::from_micros(9)),
            false,
        );
        assert!(t.dump().records.is_empty(), "off: nothing");
        t.start(Some(8));
        t.wait(
            Duration::from_micros(7),
            Some(Duration::from_micros(9)),
            false,
        );
        t.wake();
        t.wait(Duration::from_secs(5000), None, true);
        let d = t.dump();
        let got: Vec<_> = d
            .records
            .iter()
            .map(|r| (r.kind(), r.qpn, r.a, r.b, r.flags))
            .collect();
        assert_eq!(
            got,
            [
                (Some(Kind::Wait), 0, 7, 9, 0),
                (Some(Kind::Wake), 0, 0, 0, 0),
                (Some(Kind::Wait), 0, u32::MAX, u32::MAX, WAIT_IDLE),
            ]
        );
    }

    #[test]
    fn an_off_trace_records_nothing_and_a_started_one_everything() {
        let t = WqeTrace::new();
        t.doorbell(2, 1, 1);
        t.frame_out(2, 0, 0x0a, 64);
        assert!(t.dump().records.is_empty());
        t.start(Some(8));
        t.doorbell(2, 1, 1);
        t.frame_out(2, 5, 0x0a, 64);
        t.stop();
        t.interrupt(1);
        let d = t.dump();
        assert_eq!(d.records.len(), 2);
        assert_eq!(d.records[0].kind(), Some(Kind::Doorbell));
        assert_eq!(d.records[1].kind(), Some(Kind::FrameOut));
        assert_eq!(
            (d.records[1].qpn, d.records[1].a, d.records[1].b),
            (2, 5, 64)
        );
        assert!(d.records[0].ts_ns <= d.records[1].ts_ns);
    }

    #[test]
    fn toggling_restarts_with_the_last_capacity_and_an_empty_ring() {
        let t = WqeTrace::new();
        t.start(Some(2));
        for i in 0..5 {
            t.interrupt(i);
        }
        assert_eq!(t.dump().records.len(), 2);
        assert_eq!(t.dump().overwritten, 3);
        assert!(!t.toggle());
        assert!(t.toggle());
        assert!(t.dump().records.is_empty());
        for i in 0..3 {
            t.interrupt(i);
        }
        assert_eq!(t.dump().records.len(), 2, "capacity kept");
    }

    #[test]
    fn a_dump_file_holds_what_was_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.wqe-trace");
        let t = WqeTrace::new();
        t.start(Some(4));
        t.retransmit(7, 3, Retransmit::AckTimeout);
        assert_eq!(t.write_dump(&path).unwrap(), 1);
        let back = Dump::read_from(&mut std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(back, t.dump());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no part file left"
        );
    }

    #[test]
    fn a_cqe_says_whether_it_completes_a_receive() {
        let t = WqeTrace::new();
        t.start(None);
        t.cqe(3, 1, 9, 0, rox_uapi::verbs::WC_OPC_RECV);
        t.cqe(3, 1, 10, 0, rox_uapi::verbs::WC_OPC_RDMA_WRITE);
        let d = t.dump();
        assert_eq!(d.records[0].flags, CQE_RECV);
        assert_eq!(d.records[1].flags, 0);
        assert_eq!(d.records[1].wr_id, 10);
    }

    #[test]
    fn a_wqe_moves_its_inline_bytes_or_its_gather_list() {
        let mut w: SqWqe = crate::sys::pod::from_bytes(&[]);
        w.flags = WqeFlags::INLINE.bits();
        w.inline_len = 12;
        assert_eq!(wqe_bytes(&w), 12);
        w.flags = 0;
        w.num_sge = 2;
        for (i, len) in [(0usize, 100u32), (1, 28)] {
            let s = Sge {
                addr: 0,
                length: len,
                lkey: rox_uapi::ids::Key::from_raw(1),
            };
            let at = i * size_of::<Sge>();
            w.data[at..at + size_of::<Sge>()].copy_from_slice(crate::sys::pod::as_bytes(&s));
        }
        assert_eq!(wqe_bytes(&w), 128);
        w.num_sge = 255;
        assert!(
            wqe_bytes(&w) >= 128,
            "a wild count reads no further than the WQE"
        );
    }
}
