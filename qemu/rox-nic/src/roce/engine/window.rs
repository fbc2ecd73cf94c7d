//! The requester's send window (flow control): how many PSNs past the oldest unacknowledged
//! one an RC requester may send, between [`MIN_INFLIGHT_PSNS`] and [`MAX_INFLIGHT_PSNS`].
//!
//! A receiver whose socket buffer holds less than a full window loses the tail of every
//! burst; go-back-N would resend into the same overflow forever, so every loss (ACK timeout,
//! sequence NAK, an answered tail probe) halves the window and the bursts come to fit. It
//! grows with what is acknowledged, counted in packets: the PSNs the oldest outstanding PSN
//! moves past, whether an ACK moved it (SEND/WRITE packets) or a READ's responses did. So a
//! READ answered in full grows it as much as a WRITE as long; counting ACKs instead grew it
//! once per READ at most, and a READ flow stayed near the floor for hundreds of READs after a
//! run of timeouts (docs/interop.md).
//!
//! The growth is TCP's (RFC 5681): below the window the first loss of the last run of losses
//! left, one more per packet acknowledged (it doubles per round trip back to it); at or above,
//! one more per window of packets (congestion avoidance). Only the first loss of a run with
//! nothing acknowledged in between sets that point: timeouts in a row while the peer stalls
//! halve the window each time but say no more about what the path holds (RFC 5681 keeps
//! ssthresh for a segment timed out again). A single loss leaves the window at that point, so
//! it grows back by one per window — into a small receive buffer it does not double back
//! into the overflow it just left.

use super::qp::Qp;
use super::req::Requester;
use super::{MAX_INFLIGHT_PSNS, MIN_INFLIGHT_PSNS};
use crate::roce::*;

impl Requester {
    /// A loss: halve the window; the first loss of a run sets the window to recover to.
    pub(super) fn on_loss(&mut self) {
        self.window = (self.window / 2).max(MIN_INFLIGHT_PSNS);
        if std::mem::take(&mut self.acked_since_loss) {
            self.recovery_window = self.window;
        }
        self.acked_credit = 0;
    }

    /// `pkts` more packets are known to have arrived: one more per packet up to the
    /// recovery window, then one more per window of packets, up to [`MAX_INFLIGHT_PSNS`].
    pub(super) fn on_acked(&mut self, pkts: u32) {
        if pkts == 0 {
            return;
        }
        self.acked_since_loss = true;
        let mut left = pkts;
        if self.window < self.recovery_window {
            let step = left.min(self.recovery_window - self.window);
            self.window += step;
            left -= step;
        }
        self.acked_credit = self.acked_credit.saturating_add(left);
        while self.window < MAX_INFLIGHT_PSNS && self.acked_credit >= self.window {
            self.acked_credit -= self.window;
            self.window += 1;
        }
        if self.window >= MAX_INFLIGHT_PSNS {
            self.window = MAX_INFLIGHT_PSNS;
            self.acked_credit = 0;
        }
    }
}

impl Qp {
    /// PSN `psn` is inside the send window, which starts at [`Qp::una`]. The first PSN of
    /// the SQ's head (or, if it has not started, the next PSN) is at or before `una`: started
    /// WQEs are a prefix of the SQ, their PSNs ascend, and `una` lies in one of them or is
    /// the next PSN. A PSN inside the window from there is inside `una`'s without the walk
    /// that finds it, which the requester paid once per packet sent (~65 instructions).
    pub(super) fn within_window(&self, psn: Psn) -> bool {
        let floor = match self.req.sq.front() {
            Some(head) if head.started => head.first_psn,
            _ => self.req.next_psn,
        };
        // Unsigned from the floor: a signed difference wraps once `psn` is 2^23 past it (a
        // head READ of ~2^23 packets), and would call a PSN past the window inside it.
        psn.distance_from(floor) < self.req.window || psn.diff(self.una().add(self.req.window)) < 0
    }

    /// The oldest outstanding PSN moved on from `before` (an ACK, a READ response placed, an
    /// atomic's result): the packets in between grow the send window.
    pub(super) fn count_acked_since(&mut self, before: Psn) {
        let acked = self.una().diff(before);
        if acked > 0 {
            self.req.on_acked(acked as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::super::ACK_REQ_INTERVAL;
    use super::*;
    use crate::roce::wire::{self, opcode as op, Aeth, Syndrome};

    #[test]
    fn losses_halve_the_window_down_to_the_floor() {
        let mut req = Requester::new();
        assert_eq!(req.window, MAX_INFLIGHT_PSNS);
        assert_eq!(req.ack_req_interval(), ACK_REQ_INTERVAL);
        req.on_loss();
        assert_eq!(req.window, MAX_INFLIGHT_PSNS / 2);
        for _ in 0..10 {
            req.on_loss();
        }
        assert_eq!(req.window, MIN_INFLIGHT_PSNS);
        assert_eq!(
            req.ack_req_interval(),
            MIN_INFLIGHT_PSNS / 2,
            "twice per window"
        );
    }

    /// Four timeouts in a row (256 → 16): one per packet back to 128, where the first left
    /// it, then one per window of packets, up to the maximum.
    #[test]
    fn after_a_run_of_losses_the_window_doubles_back_then_grows_by_one_per_window() {
        let mut req = Requester::new();
        for _ in 0..4 {
            req.on_loss();
        }
        assert_eq!(req.window, 16);
        req.on_acked(16);
        assert_eq!(req.window, 32, "one per packet: doubled in a window");
        req.on_acked(96);
        assert_eq!(req.window, 128, "back where the first loss left it");
        req.on_acked(127);
        assert_eq!(req.window, 128, "a window less one packet");
        req.on_acked(1);
        assert_eq!(req.window, 129, "one more per window");
        req.on_acked(129 + 130);
        assert_eq!(req.window, 131);
        req.on_acked(1_000_000);
        assert_eq!(req.window, MAX_INFLIGHT_PSNS);
        assert_eq!(req.acked_credit, 0);
    }

    /// A loss after progress is a new one: it does not grow back at once into the window
    /// that just overflowed.
    #[test]
    fn a_loss_after_progress_grows_back_by_one_per_window() {
        let mut req = Requester::new();
        req.on_loss();
        req.on_acked(10);
        assert_eq!(req.window, 128, "at the recovery window: one per window");
        req.on_loss();
        assert_eq!((req.window, req.recovery_window), (64, 64));
        req.on_acked(63);
        assert_eq!(req.window, 64);
        req.on_acked(1);
        assert_eq!(req.window, 65);
        req.on_acked(0);
        assert_eq!(req.window, 65, "nothing acknowledged");
    }

    const PKTS: u32 = 64;
    const LEN: u32 = PKTS * 1024;

    /// An RC QP whose window four losses in a row took to the floor, with room for one READ.
    fn after_four_losses() -> (TestEnv, EngineStats, Qp) {
        let (env, stats, mut qp) = rc_fixture();
        for _ in 0..4 {
            qp.req.on_loss();
        }
        assert_eq!(qp.req.window, MIN_INFLIGHT_PSNS);
        (env, stats, qp)
    }

    /// All response packets of the READ of `PKTS` packets at PSN `first`, in order.
    fn answer_read(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, first: u32) {
        for n in 0..PKTS {
            let opcode = match n {
                0 => op::RC_READ_RESPONSE_FIRST,
                n if n == PKTS - 1 => op::RC_READ_RESPONSE_LAST,
                _ => op::RC_READ_RESPONSE_MIDDLE,
            };
            let bytes = packet_from_peer(opcode, first + n, &[n as u8; 1024], |h| {
                if n == 0 || n == PKTS - 1 {
                    h.aeth = Some(Aeth {
                        syndrome: Syndrome::Ack,
                        msn: Msn::default(),
                    });
                }
            });
            qp.completer_receive(env, stats, &wire::parse_packet(&bytes).unwrap());
        }
    }

    /// ACKs the newest request packet sent until the WRITE of `PKTS` packets at PSN `first`
    /// is acknowledged (the window lets it out a window at a time).
    fn ack_write(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, first: u32) {
        while let Some(last) = env.sent_parsed().last().map(|p| p.hdr.bth.psn.get()) {
            env.sent.clear();
            ack_from_peer(qp, env, stats, last, Syndrome::Ack);
            if last == first + PKTS - 1 {
                break;
            }
        }
    }

    /// The window after each of four READs of `PKTS` packets answered in full, posted one at
    /// a time after four losses in a row; with `write`, WRITEs as long, ACKed as they go.
    fn windows_after(write: bool) -> Vec<u32> {
        let (mut env, mut stats, mut qp) = after_four_losses();
        let opcode = if write {
            WrOpcode::RdmaWrite
        } else {
            WrOpcode::RdmaRead
        };
        let mut windows = Vec::new();
        for id in 0..4 {
            let first = qp.req.next_psn.get();
            let wqe = qp.make_wqe(send_wr(id, opcode, LEN));
            qp.enqueue(&mut env, &mut stats, wqe);
            if write {
                ack_write(&mut qp, &mut env, &mut stats, first);
            } else {
                answer_read(&mut qp, &mut env, &mut stats, first);
            }
            assert!(qp.req.sq.is_empty(), "WR {id} complete");
            windows.push(qp.req.window);
        }
        windows
    }

    /// A READ's responses count as many packets as a WRITE's ACKs do: after four timeouts in
    /// a row, 64-packet READs answered in full take the window 16 → 80 → 128 (where the first
    /// timeout left it), then one per window — as WRITEs of 64 packets do. (Counting ACKs
    /// that moved the oldest PSN, a READ flow stayed at 16 and the WRITEs grew by one per ACK.)
    #[test]
    fn reads_answered_in_full_grow_the_window_as_writes_as_long_do() {
        let reads = windows_after(false);
        assert_eq!(reads, [80, 128, 128, 129]);
        assert_eq!(windows_after(true), reads);
    }

    #[test]
    fn the_window_check_without_the_walk_answers_as_the_walk() {
        // A 3-packet SEND (100..=102), a 2-packet READ (103..=104), a 1-packet SEND (105).
        let wrs = [
            (WrOpcode::Send, 3000),
            (WrOpcode::RdmaRead, 2000),
            (WrOpcode::Send, 8),
        ];
        let (mut env, mut stats, mut qp) = rc_fixture();
        for (id, &(opcode, len)) in wrs.iter().enumerate() {
            let wqe = qp.make_wqe(send_wr(id as u64, opcode, len));
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        let psn = Psn::from_wire;
        let exact = |qp: &Qp, p: Psn| p.diff(qp.una().add(qp.req.window)) < 0;
        let check = |qp: &Qp| {
            for offset in 0..600 {
                let p = psn(100).add(offset);
                assert_eq!(qp.within_window(p), exact(qp, p), "PSN {}", p.get());
            }
        };
        for window in [1, 2, 4, 64, 256] {
            qp.req.window = window;
            check(&qp);
        }
        qp.req.window = 2;
        qp.ack_through(psn(101), 0);
        check(&qp);
        qp.ack_through(psn(102), 0);
        qp.req.sq[1].read_pkts_done = 1;
        check(&qp);
        qp.req.sq[1].read_pkts_done = 2;
        qp.ack_through(psn(105), 0);
        check(&qp);
    }

    /// The head READ is 2^23 packets long with one response left: the PSNs just past the
    /// window are 2^23 past the head's first, where a signed difference from it wraps.
    #[test]
    fn the_window_check_without_the_walk_holds_half_the_psn_space_from_the_head() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        for (id, (opcode, len)) in [(WrOpcode::RdmaRead, 2000), (WrOpcode::Send, 8)]
            .into_iter()
            .enumerate()
        {
            let wqe = qp.make_wqe(send_wr(id as u64, opcode, len));
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        const HALF: u32 = 1 << 23;
        qp.req.sq[0].npsn = HALF;
        qp.req.sq[0].read_pkts_done = HALF - 1;
        let head = qp.req.sq[0].first_psn;
        assert_eq!(qp.una(), head.add(HALF - 1));
        for window in [1, 64, 256] {
            qp.req.window = window;
            for offset in 0..600 {
                let p = qp.una().add(offset);
                let exact = p.diff(qp.una().add(window)) < 0;
                assert_eq!(
                    qp.within_window(p),
                    exact,
                    "window {window}, una + {offset}"
                );
            }
        }
    }
}
