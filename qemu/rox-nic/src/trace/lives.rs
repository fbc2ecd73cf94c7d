//! WQE lives rebuilt from trace records: for every send WQE the trace saw fetched, when its
//! doorbell was noticed, when it was fetched, which PSNs it took, its first and last packet,
//! the response that covered its last PSN, its CQE (or the later CQE that completed it when
//! it was unsignaled), and the completion event and interrupt that CQE caused.

use std::collections::{HashMap, VecDeque};

use super::record::{Dump, Kind, Record, CQE_RECV, NO_SYNDROME};
use crate::roce::wire::opcode::{OP_MASK, RC_ATOMIC_ACKNOWLEDGE, RC_READ_RESPONSE_FIRST};
use rox_uapi::queue::EQE_TYPE_COMPLETION;

const PSN_MASK: u32 = 0xff_ffff;
/// AETH syndrome bits that make a response a NAK (RNR or other).
const SYNDROME_NAK_BITS: u32 = 0x60;

/// `a - b` in 24-bit sequence space.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) & PSN_MASK) << 8) as i32 >> 8
}

/// A packet of the responder side (READ response, ACK, atomic ACK), not a request.
pub fn is_response_opcode(op: u8) -> bool {
    (RC_READ_RESPONSE_FIRST..=RC_ATOMIC_ACKNOWLEDGE).contains(&(op & OP_MASK))
}

/// One send WQE's life on one device (timestamps in CLOCK_MONOTONIC ns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Life {
    /// Index of the dump (device) it comes from.
    pub device: usize,
    pub qpn: u32,
    pub wr_id: u64,
    /// SQ index.
    pub index: u32,
    /// `WR_*` opcode.
    pub wr_opcode: u8,
    pub bytes: u32,
    pub doorbell: u64,
    pub fetch: u64,
    /// First PSN and PSN count.
    pub psns: Option<(u32, u32)>,
    pub first_frame: Option<u64>,
    pub last_frame: Option<u64>,
    /// Packets sent, retransmissions included.
    pub frames: u32,
    /// The first response that acknowledged its last PSN.
    pub response: Option<u64>,
    pub retransmits: u32,
    pub cqe: Option<u64>,
    /// Its own CQE's status (None for an unsignaled WQE another CQE completed).
    pub status: Option<u8>,
    cq: Option<u32>,
    pub eqe: Option<u64>,
    pub interrupt: Option<u64>,
}

/// The stages of a life the histograms measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    DoorbellToFetch,
    FetchToFirstFrame,
    LastFrameToResponse,
    ResponseToCqe,
    CqeToInterrupt,
    DoorbellToCqe,
}

impl Stage {
    pub const ALL: [Stage; 6] = [
        Stage::DoorbellToFetch,
        Stage::FetchToFirstFrame,
        Stage::LastFrameToResponse,
        Stage::ResponseToCqe,
        Stage::CqeToInterrupt,
        Stage::DoorbellToCqe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::DoorbellToFetch => "doorbell->fetch",
            Stage::FetchToFirstFrame => "fetch->first frame",
            Stage::LastFrameToResponse => "last frame->ACK",
            Stage::ResponseToCqe => "ACK->CQE",
            Stage::CqeToInterrupt => "CQE->interrupt",
            Stage::DoorbellToCqe => "doorbell->CQE (total)",
        }
    }
}

impl Life {
    /// How long `stage` took, if the life went through both of its ends.
    pub fn stage_ns(&self, stage: Stage) -> Option<u64> {
        let (from, to) = match stage {
            Stage::DoorbellToFetch => (Some(self.doorbell), Some(self.fetch)),
            Stage::FetchToFirstFrame => (Some(self.fetch), self.first_frame),
            Stage::LastFrameToResponse => (self.last_frame, self.response),
            Stage::ResponseToCqe => (self.response, self.cqe),
            Stage::CqeToInterrupt => (self.cqe, self.interrupt),
            Stage::DoorbellToCqe => (Some(self.doorbell), self.cqe),
        };
        Some(to?.saturating_sub(from?))
    }

    /// The last thing the trace saw of it.
    pub fn end(&self) -> u64 {
        [self.cqe, self.response, self.last_frame, Some(self.fetch)]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(self.fetch)
    }
}

/// The lives of every WQE fetched in `dumps` (one per device), in fetch order per device.
pub fn lives(dumps: &[Dump]) -> Vec<Life> {
    let mut all = Vec::new();
    for (device, dump) in dumps.iter().enumerate() {
        let mut b = Builder {
            device,
            ..Builder::default()
        };
        for r in &dump.records {
            b.take(r);
        }
        all.extend(b.lives);
    }
    all
}

#[derive(Default)]
struct Builder {
    device: usize,
    lives: Vec<Life>,
    last_doorbell: HashMap<u32, u64>,
    /// Per QP: fetched, not completed, in post order.
    open: HashMap<u32, Vec<usize>>,
    /// Per QP: fetched, PSNs not yet assigned.
    unstarted: HashMap<u32, VecDeque<usize>>,
    /// Per CQ: signaled CQEs waiting for their completion event.
    await_eqe: HashMap<u32, Vec<usize>>,
    /// Per EQ (= vector): completion events waiting for their interrupt.
    await_irq: HashMap<u32, Vec<usize>>,
}

impl Builder {
    fn take(&mut self, r: &Record) {
        match r.kind() {
            Some(Kind::Doorbell) => {
                self.last_doorbell.insert(r.qpn, r.ts_ns);
            }
            Some(Kind::WqeFetch) => self.fetch(r),
            Some(Kind::WqeStart) => self.start(r),
            Some(Kind::FrameOut) if !is_response_opcode(r.op) => {
                self.each_open(r.qpn, |l| {
                    if l.psns.is_some_and(|(f, n)| contains(f, n, r.a)) {
                        l.first_frame.get_or_insert(r.ts_ns);
                        l.last_frame = Some(r.ts_ns);
                        l.frames += 1;
                    }
                });
            }
            Some(Kind::ResponseIn) => {
                let acked = if r.b != NO_SYNDROME && r.b & SYNDROME_NAK_BITS != 0 {
                    r.a.wrapping_sub(1) & PSN_MASK
                } else {
                    r.a
                };
                self.each_open(r.qpn, |l| {
                    let covered = l
                        .psns
                        .is_some_and(|(f, n)| psn_diff(acked, f.wrapping_add(n - 1)) >= 0);
                    if covered && l.last_frame.is_some() && l.response.is_none() {
                        l.response = Some(r.ts_ns);
                    }
                });
            }
            Some(Kind::Retransmit) => {
                self.each_open(r.qpn, |l| {
                    if l.psns
                        .is_some_and(|(f, n)| psn_diff(f.wrapping_add(n - 1), r.a) >= 0)
                    {
                        l.retransmits += 1;
                    }
                });
            }
            Some(Kind::Cqe) if r.flags & CQE_RECV == 0 => self.cqe(r),
            Some(Kind::Eqe) if r.op == EQE_TYPE_COMPLETION => {
                let waiting = self.await_eqe.remove(&r.qpn).unwrap_or_default();
                for &i in &waiting {
                    self.lives[i].eqe = Some(r.ts_ns);
                }
                self.await_irq.entry(r.a).or_default().extend(waiting);
            }
            Some(Kind::Interrupt) => {
                for i in self.await_irq.remove(&r.a).unwrap_or_default() {
                    self.lives[i].interrupt = Some(r.ts_ns);
                }
            }
            _ => {}
        }
    }

    /// Calls `f` on every open life of `qpn`, oldest first.
    fn each_open(&mut self, qpn: u32, mut f: impl FnMut(&mut Life)) {
        if let Some(open) = self.open.get(&qpn) {
            for &i in open {
                f(&mut self.lives[i]);
            }
        }
    }

    fn fetch(&mut self, r: &Record) {
        let i = self.lives.len();
        self.lives.push(Life {
            device: self.device,
            qpn: r.qpn,
            wr_id: r.wr_id,
            index: r.a,
            wr_opcode: r.op,
            bytes: r.b,
            doorbell: self.last_doorbell.get(&r.qpn).copied().unwrap_or(r.ts_ns),
            fetch: r.ts_ns,
            ..Life::default()
        });
        self.open.entry(r.qpn).or_default().push(i);
        self.unstarted.entry(r.qpn).or_default().push_back(i);
    }

    fn start(&mut self, r: &Record) {
        let Some(q) = self.unstarted.get_mut(&r.qpn) else {
            return;
        };
        // The engine starts WQEs in SQ order; one fetched before the trace began has no life.
        let Some(pos) = q.iter().position(|&i| self.lives[i].wr_id == r.wr_id) else {
            return;
        };
        let i = q.remove(pos).expect("position is in the queue");
        self.lives[i].psns = Some((r.a, r.b.max(1)));
    }

    /// A send CQE completes its WQE and every unsignaled one posted before it.
    fn cqe(&mut self, r: &Record) {
        let Some(open) = self.open.get_mut(&r.qpn) else {
            return;
        };
        let Some(pos) = open.iter().position(|&i| self.lives[i].wr_id == r.wr_id) else {
            return;
        };
        let done: Vec<usize> = open.drain(..=pos).collect();
        if let Some(q) = self.unstarted.get_mut(&r.qpn) {
            q.retain(|i| !done.contains(i));
        }
        for &i in &done {
            self.lives[i].cqe = Some(r.ts_ns);
        }
        let own = *done.last().expect("drained at least one");
        let l = &mut self.lives[own];
        l.status = Some(r.a as u8);
        l.cq = Some(r.b);
        self.await_eqe.entry(r.b).or_default().push(own);
    }
}

/// `psn` is one of the `n` PSNs from `first`.
fn contains(first: u32, n: u32, psn: u32) -> bool {
    let d = psn_diff(psn, first);
    d >= 0 && (d as u32) < n
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::record::Record;
    use rox_uapi::verbs::{WC_OPC_RDMA_WRITE, WR_RDMA_WRITE};

    pub(crate) fn rec(
        ts_ns: u64,
        kind: Kind,
        qpn: u32,
        a: u32,
        b: u32,
        op: u8,
        wr_id: u64,
    ) -> Record {
        Record {
            ts_ns,
            wr_id,
            qpn,
            a,
            b,
            kind: kind as u8,
            op,
            flags: 0,
        }
    }

    /// Two WRITEs on QP 5, the first unsignaled, of 2 packets each, the first packet of
    /// the second lost and sent again after a sequence NAK; CQE, EQE and interrupt at the end.
    pub(crate) fn two_writes() -> Dump {
        use Kind::*;
        // A WRITE's two 4 KiB packets on QP 5 (WRITE_FIRST, WRITE_LAST) from `psn`, at `ts`
        // and 100 ns later.
        let two_frames = |ts: u64, psn: u32| {
            [(0, 0x06), (1, 0x08)]
                .map(|(i, op)| rec(ts + 100 * i as u64, FrameOut, 5, psn + i, 4096, op, 0))
        };
        let mut records = vec![
            rec(1000, Doorbell, 5, 2, 2, 0, 0),
            rec(1100, WqeFetch, 5, 0, 8192, WR_RDMA_WRITE, 10),
            rec(1200, WqeFetch, 5, 1, 8192, WR_RDMA_WRITE, 11),
            rec(1300, WqeStart, 5, 0xff_fffe, 2, 0, 10),
        ];
        records.extend(two_frames(1400, 0xff_fffe));
        records.push(rec(1600, WqeStart, 5, 0, 2, 0, 11));
        records.extend(two_frames(1700, 0));
        records.extend([
            rec(2000, ResponseIn, 5, 0xff_ffff, 0x1f, 0x11, 0),
            rec(2100, ResponseIn, 5, 0, 0x60, 0x11, 0),
            rec(2150, Retransmit, 5, 0, 1, 0, 0),
        ]);
        records.extend(two_frames(2200, 0));
        records.extend([
            rec(2500, ResponseIn, 5, 1, 0x1f, 0x11, 0),
            rec(2600, Cqe, 5, 0, 7, WC_OPC_RDMA_WRITE, 11),
            rec(2700, Eqe, 7, 1, 0, EQE_TYPE_COMPLETION, 0),
            rec(2800, Interrupt, 0, 1, 0, 0, 0),
        ]);
        Dump {
            records,
            overwritten: 0,
        }
    }

    #[test]
    fn psns_compare_across_the_wrap() {
        assert_eq!(psn_diff(0, 0xff_ffff), 1);
        assert_eq!(psn_diff(0xff_ffff, 0), -1);
        assert!(contains(0xff_fffe, 2, 0xff_ffff));
        assert!(!contains(0xff_fffe, 2, 0));
    }

    #[test]
    fn each_wqe_gets_its_stages_across_psn_wrap_nak_and_an_unsignaled_predecessor() {
        let l = lives(&[two_writes()]);
        assert_eq!(l.len(), 2);
        let (a, b) = (&l[0], &l[1]);
        assert_eq!((a.wr_id, a.index, a.bytes), (10, 0, 8192));
        assert_eq!((a.doorbell, a.fetch), (1000, 1100));
        assert_eq!(
            (a.first_frame, a.last_frame, a.frames),
            (Some(1400), Some(1500), 2)
        );
        assert_eq!(a.response, Some(2000));
        assert_eq!(a.retransmits, 0);
        assert_eq!(
            (a.cqe, a.status),
            (Some(2600), None),
            "completed by the next CQE"
        );
        assert_eq!(a.interrupt, None);
        assert_eq!(
            (b.first_frame, b.last_frame, b.frames),
            (Some(1700), Some(2300), 4)
        );
        assert_eq!(
            b.response,
            Some(2500),
            "the NAK acknowledged only what came before"
        );
        assert_eq!(b.retransmits, 1);
        assert_eq!((b.cqe, b.status), (Some(2600), Some(0)));
        assert_eq!((b.eqe, b.interrupt), (Some(2700), Some(2800)));
        assert_eq!(b.stage_ns(Stage::DoorbellToFetch), Some(200));
        assert_eq!(b.stage_ns(Stage::LastFrameToResponse), Some(200));
        assert_eq!(b.stage_ns(Stage::CqeToInterrupt), Some(200));
        assert_eq!(b.stage_ns(Stage::DoorbellToCqe), Some(1600));
        assert_eq!(a.stage_ns(Stage::CqeToInterrupt), None);
    }

    #[test]
    fn records_of_wqes_fetched_before_the_trace_began_are_ignored() {
        use Kind::*;
        let d = Dump {
            records: vec![
                rec(1, WqeStart, 5, 0, 1, 0, 99),
                rec(2, FrameOut, 5, 0, 8, 0x0a, 0),
                rec(3, ResponseIn, 5, 0, 0x1f, 0x11, 0),
                rec(4, Cqe, 5, 0, 7, WC_OPC_RDMA_WRITE, 99),
            ],
            overwritten: 3,
        };
        assert!(lives(&[d]).is_empty());
    }
}
