//! READ responses on a lossy path: each response packet is placed where it belongs even when
//! one before it was lost, and only the missing ones are asked for again.
//!
//! A READ's responses leave the responder in PSN order, so a response whose predecessor has
//! not arrived proves that predecessor lost. IBA 9.7.5 has the requester retry a READ from the
//! first missing response PSN; a requester that dropped everything after a loss and asked for
//! the whole rest again (rdma_rxe, and rox before) moves a long READ many times over at a few
//! percent loss, as every retry's responses race the rest of the previous ones. Here the
//! packets after a missing one are kept (the buffer is the WR's own until it completes, and it
//! completes only once every packet is there), and the first run of missing responses — from
//! the first missing PSN up to the next response that arrived — is asked for at once by a READ
//! request for exactly those PSNs (a duplicate READ for the responder, answered from its
//! history). A later run is asked for once the runs before it are filled, so every retry of a
//! READ starts at or after the one before: rdma_rxe's responder narrows a READ's replayable
//! range to each retry and would ignore one that starts earlier. A retry whose own response is
//! lost is seen the same way; a run at the very end of the last READ in flight is found by the
//! tail probe or the retransmission timer, which ask for each READ's first missing run.

use super::qp::Qp;
use super::wqe::{Wqe, WqeKind};
use super::EngineStats;
use crate::roce::wire::Parsed;
use crate::roce::*;
use crate::trace::Retransmit;

impl Qp {
    /// Whether response packet `pkt` of the READ `wqe` arrived.
    fn read_packet_present(&self, wqe: &Wqe, pkt: u32) -> bool {
        pkt < wqe.read_pkts_done
            || self
                .req
                .read_early
                .get(&wqe.first_psn.get())
                .is_some_and(|got| got.contains(&pkt))
    }

    /// The end (exclusive) of the run of missing response packets of `wqe` from `start`:
    /// the next packet that already arrived, or the READ's end.
    pub(super) fn read_hole_end(&self, wqe: &Wqe, start: u32) -> u32 {
        self.req
            .read_early
            .get(&wqe.first_psn.get())
            .and_then(|got| got.range(start..).next().copied())
            .unwrap_or(wqe.npsn)
    }

    /// A READ RESPONSE for the READ at `index`: placed at its offset wherever it lies in the
    /// READ; a hole before it is asked for again. Returns false if the requester has nothing
    /// more to do.
    pub(super) fn on_read_data(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
        index: usize,
        now: u64,
    ) -> bool {
        let psn = p.hdr.bth.psn;
        let wqe = &self.req.sq[index];
        let pkt = psn.distance_from(wqe.first_psn);
        if self.read_packet_present(wqe, pkt) {
            stats.rx_stale_responses += 1;
            self.stale_response_postpones_timer(now);
            return false;
        }
        // A response past a gap: an implied NAK (an earlier response was lost).
        stats.rx_read_gaps += u64::from(pkt != wqe.read_pkts_done);
        // The responder executes in PSN order: every request before the READ arrived.
        self.ack_through(wqe.first_psn.prev(), now);
        let mtu = u64::from(self.mtu.bytes());
        let wqe = &self.req.sq[index];
        let offset = u64::from(pkt) * mtu;
        let expected = wqe.len.saturating_sub(offset).min(mtu) as usize;
        if p.payload.len() != expected {
            self.req.sq[index].error = Some(WcStatus::BadRespErr);
            self.retire(env);
            return false;
        }
        // An absent destination page: the READ is asked again from its first missing packet
        // once the page-fault wait is over.
        let Some(placed) = self.place_response(env, stats, index, offset, p.payload, now) else {
            return false;
        };
        if placed {
            let before = self.una();
            self.read_packet_arrived(index, pkt);
            // Responses count as packets acknowledged, as ACKed request packets do: a READ
            // answered in full grows the window as much as a WRITE of as many packets.
            self.count_acked_since(before);
            if self.req.read_resp_high.is_none_or(|high| psn.after(high)) {
                self.req.read_resp_high = Some(psn);
            }
            self.ask_for_lost_responses(env, stats, index, psn);
        }
        self.rtt_acked_through(psn, now);
        self.responded(now);
        true
    }

    /// Records response packet `pkt` of the READ at `index` as placed.
    fn read_packet_arrived(&mut self, index: usize, pkt: u32) {
        let req = &mut self.req;
        req.una_may_move();
        let wqe = &mut req.sq[index];
        let key = wqe.first_psn.get();
        if pkt != wqe.read_pkts_done {
            req.read_early.entry(key).or_default().insert(pkt);
            return;
        }
        wqe.read_pkts_done += 1;
        if let Some(got) = req.read_early.get_mut(&key) {
            while got.remove(&wqe.read_pkts_done) {
                wqe.read_pkts_done += 1;
            }
            if got.is_empty() {
                req.read_early.remove(&key);
            }
        }
        if wqe.read_pkts_done == wqe.npsn {
            req.read_asked.remove(&key);
        }
    }

    /// The response `psn` of the READ at `index` was placed: asks again for the first run of
    /// missing responses of this READ, and of the READ before when `psn` is the first of its
    /// own, if it is known lost.
    fn ask_for_lost_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
        psn: Psn,
    ) {
        let prev = psn.prev();
        let before = self
            .req
            .sq
            .iter()
            .position(|w| w.contains(prev))
            .filter(|&i| i != index);
        for i in [before, Some(index)].into_iter().flatten() {
            self.ask_first_run_if_lost(env, stats, i, prev);
        }
    }

    /// Asks for the first run of missing responses of the READ at `index` — from its first
    /// missing packet up to the next that arrived — if a later response arrived (so the run was
    /// lost) and either `prev`, the PSN just before the response that arrived now, lies in it
    /// (lost now, maybe again) or the run was not asked for from this start yet.
    fn ask_first_run_if_lost(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
        prev: Psn,
    ) {
        let wqe = &self.req.sq[index];
        if wqe.kind != WqeKind::Read || wqe.error.is_some() || wqe.done() {
            return;
        }
        let start = wqe.read_pkts_done;
        let end = self.read_hole_end(wqe, start);
        let (first, last) = (wqe.first_psn.add(start), wqe.first_psn.add(end - 1));
        let lost = self.req.read_resp_high.is_some_and(|high| high.after(last));
        let key = wqe.first_psn.get();
        let lost_now = prev.within(first, last);
        if lost && (lost_now || self.req.read_asked.get(&key) != Some(&start)) {
            self.req.read_asked.insert(key, start);
            self.request_read_range(env, stats, index, start, end);
        }
    }

    /// Sends a READ request for response packets `[start, end)` of the READ at `index`,
    /// outside the go-back-N cursor (a duplicate request: it takes no new PSN).
    fn request_read_range(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
        start: u32,
        end: u32,
    ) {
        let wqe = &self.req.sq[index];
        let psn = wqe.first_psn.add(start);
        let hdr = self.read_range_request(wqe, psn, start, end);
        let last = wqe.last_psn();
        stats.nak_rewinds += 1;
        env.wqe_trace()
            .retransmit(self.cfg.qpn.get(), psn.get(), Retransmit::ReadGap);
        self.rtt_forget_probe_through(last);
        self.send_connected(env, stats, &hdr, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::*;
    use crate::roce::wire::{self, opcode as op, Syndrome};

    const READ_LEN: u32 = 4096;

    /// An RC QP with a 4-packet READ (PSNs 100..=103) of `READ_LEN` bytes in flight.
    fn read_sent() -> (TestEnv, EngineStats, Qp) {
        let (mut env, mut stats, mut qp) = rc_fixture();
        qp.req.retry_left = 7;
        qp.req.rtt.sample(100_000);
        let wqe = qp.make_wqe(send_wr(1, WrOpcode::RdmaRead, READ_LEN));
        qp.enqueue(&mut env, &mut stats, wqe);
        env.sent.clear();
        (env, stats, qp)
    }

    /// The response packet `n` (0..4) of the READ at PSN 100, its bytes all `n + 1`.
    fn respond(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, n: u32) {
        respond_at(qp, env, stats, 100, n);
    }

    /// The response packet `n` (0..4) of the READ at PSN `first`.
    fn respond_at(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, first: u32, n: u32) {
        let opcode = match n {
            0 => op::RC_READ_RESPONSE_FIRST,
            3 => op::RC_READ_RESPONSE_LAST,
            _ => op::RC_READ_RESPONSE_MIDDLE,
        };
        let payload = [n as u8 + 1; 1024];
        let bytes = packet_from_peer(opcode, first + n, &payload, |h| {
            if n == 0 || n == 3 {
                h.aeth = peer_aeth(Syndrome::Ack);
            }
        });
        qp.completer_receive(env, stats, &wire::parse_packet(&bytes).unwrap());
    }

    /// The one response (bytes all 9) of a second READ of 1024 bytes, at PSN 104.
    fn respond_to_second_read(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats) {
        let bytes = packet_from_peer(op::RC_READ_RESPONSE_ONLY, 104, &[9; 1024], |h| {
            h.aeth = peer_aeth(Syndrome::Ack)
        });
        qp.completer_receive(env, stats, &wire::parse_packet(&bytes).unwrap());
    }

    /// The READ requests sent: (PSN, remote address, length).
    fn requests(env: &TestEnv) -> Vec<(u32, u64, u32)> {
        env.sent_parsed()
            .iter()
            .map(|p| {
                assert_eq!(p.hdr.bth.opcode, op::RC_READ_REQUEST);
                let reth = p.hdr.reth.unwrap();
                (p.hdr.bth.psn.get(), reth.va, reth.dma_len)
            })
            .collect()
    }

    fn placed(env: &TestEnv) -> Vec<u8> {
        env.mem[..READ_LEN as usize]
            .chunks(1024)
            .map(|c| {
                assert!(c.iter().all(|&b| b == c[0]));
                c[0]
            })
            .collect()
    }

    /// The READ's one request packet asked for PSNs 100..=103: while a response is missing
    /// something is in flight and the retransmission timer runs; with the last, it stops.
    #[test]
    fn the_timer_runs_until_the_last_response_of_a_read_arrives() {
        let (mut env, mut stats, mut qp) = read_sent();
        assert_eq!(qp.flight_end(), Psn::from_wire(104));
        for n in 0..3 {
            respond(&mut qp, &mut env, &mut stats, n);
            assert!(qp.in_flight(), "response {n} of 4");
            assert!(qp.req.timer_deadline.is_some(), "response {n} of 4");
        }
        respond(&mut qp, &mut env, &mut stats, 3);
        assert!(!qp.in_flight());
        assert_eq!(qp.req.timer_deadline, None);
    }

    #[test]
    fn responses_after_a_lost_one_are_kept_and_only_the_hole_is_asked_again() {
        let (mut env, mut stats, mut qp) = read_sent();
        respond(&mut qp, &mut env, &mut stats, 0);
        respond(&mut qp, &mut env, &mut stats, 2);
        assert_eq!(
            requests(&env),
            [(101, 0x1000 + 1024, 1024)],
            "a READ for the one missing response"
        );
        respond(&mut qp, &mut env, &mut stats, 3);
        assert_eq!(requests(&env).len(), 1, "no new hole");
        assert_eq!(placed(&env), [1, 0, 3, 4]);
        assert!(env.completions.is_empty());
        respond(&mut qp, &mut env, &mut stats, 2);
        assert_eq!(stats.rx_stale_responses, 1, "a copy of a placed response");
        respond(&mut qp, &mut env, &mut stats, 1);
        assert_eq!(placed(&env), [1, 2, 3, 4]);
        assert_eq!(env.completions.len(), 1);
        assert_eq!(env.completions[0].status, WcStatus::Success);
        assert!(qp.req.read_early.is_empty());
        assert_eq!(qp.req.timer_deadline, None);
    }

    #[test]
    fn a_later_run_is_asked_for_once_the_runs_before_it_are_filled() {
        let (mut env, mut stats, mut qp) = read_sent();
        respond(&mut qp, &mut env, &mut stats, 1);
        respond(&mut qp, &mut env, &mut stats, 3);
        assert_eq!(requests(&env), [(100, 0x1000, 1024)], "2 waits for 0");
        respond(&mut qp, &mut env, &mut stats, 0);
        assert_eq!(
            requests(&env),
            [(100, 0x1000, 1024), (102, 0x1000 + 2048, 1024)],
            "each retry starts after the one before"
        );
        respond(&mut qp, &mut env, &mut stats, 2);
        assert_eq!(placed(&env), [1, 2, 3, 4]);
        assert_eq!(env.completions.len(), 1);
        assert!(qp.req.read_asked.is_empty() && qp.req.read_early.is_empty());
    }

    #[test]
    fn a_lost_read_request_is_asked_again_when_the_next_reads_responses_come() {
        let (mut env, mut stats, mut qp) = read_sent();
        qp.max_rd_atomic = 2;
        let wqe = qp.make_wqe(send_wr(2, WrOpcode::RdmaRead, 1024));
        qp.enqueue(&mut env, &mut stats, wqe);
        env.sent.clear();
        // The second READ (PSN 104) is answered; the first one's request never arrived.
        respond_to_second_read(&mut qp, &mut env, &mut stats);
        assert_eq!(requests(&env), [(100, 0x1000, READ_LEN)]);
    }

    #[test]
    fn a_hole_of_several_responses_is_asked_for_in_one_request() {
        let (mut env, mut stats, mut qp) = read_sent();
        respond(&mut qp, &mut env, &mut stats, 3);
        assert_eq!(requests(&env), [(100, 0x1000, 3072)]);
        // The retry's own first response is lost: the hole shrinks to it.
        respond(&mut qp, &mut env, &mut stats, 1);
        assert_eq!(requests(&env)[1], (100, 0x1000, 1024));
        assert_eq!(stats.nak_rewinds, 2);
    }

    #[test]
    fn a_lost_tail_is_asked_for_by_the_tail_probe_from_the_first_missing_response() {
        let (mut env, mut stats, mut qp) = read_sent();
        for n in [0, 1, 2] {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        assert!(env.sent.is_empty());
        env.now = qp.req.timer_deadline.unwrap();
        qp.on_timers(&mut env, &mut stats);
        assert_eq!(requests(&env), [(103, 0x1000 + 3072, 1024)]);
        assert_eq!(stats.tail_probes, 1);
    }

    #[test]
    fn the_highest_response_is_forgotten_once_no_read_is_outstanding() {
        let (mut env, mut stats, mut qp) = read_sent();
        for n in [0, 2, 1, 3] {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        assert_eq!(env.completions.len(), 1);
        assert_eq!(qp.req.read_resp_high, None);
    }

    #[test]
    fn a_local_operation_retiring_ahead_keeps_the_reads_early_responses() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        // A WRITE (PSN 100) still unacknowledged holds the LOCAL_INV behind it; the LOCAL_INV
        // takes no PSN: its first PSN is the READ's (101).
        let mut inv = send_wr(1, WrOpcode::LocalInv, 0);
        inv.rkey = INV_KEY;
        let mut read = send_wr(2, WrOpcode::RdmaRead, READ_LEN);
        read.data = SendData::Sges(vec![Sge {
            addr: 0x2000,
            length: READ_LEN,
            lkey: LKEY,
        }]);
        for wr in [send_wr(0, WrOpcode::RdmaWrite, 8), inv, read] {
            let wqe = qp.make_wqe(wr);
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        // The first READ response acknowledges the WRITE: the LOCAL_INV retires with it.
        for n in [2, 0, 1, 3] {
            respond_at(&mut qp, &mut env, &mut stats, 101, n);
        }
        let done: Vec<_> = env
            .completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        let ok = WcStatus::Success;
        assert_eq!(done, [(0, ok), (1, ok), (2, ok)]);
        let read: Vec<u8> = env.mem[0x2000..0x2000 + READ_LEN as usize]
            .chunks(1024)
            .map(|c| c[0])
            .collect();
        assert_eq!(read, [1, 2, 3, 4]);
    }

    #[test]
    fn a_go_back_n_retry_asks_for_the_first_hole_only() {
        let (mut env, mut stats, mut qp) = read_sent();
        respond(&mut qp, &mut env, &mut stats, 0);
        respond(&mut qp, &mut env, &mut stats, 2);
        env.sent.clear();
        qp.rewind_to(Psn::from_wire(100));
        qp.transmit(&mut env, &mut stats);
        assert_eq!(
            requests(&env),
            [(101, 0x1000 + 1024, 1024)],
            "from the first missing response up to the next that arrived"
        );
    }

    /// At most this many copies before a request: a regression that let copies postpone
    /// the timer for ever fails the test instead of hanging it.
    const MAX_COPIES: usize = 10_000;

    /// Copies of the responses 0..3 of the READ at PSN 100, one every `step` ns from now
    /// until the requester sends something; returns when it did.
    fn copies_until_a_request(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, step: u64) {
        for n in (0..3).cycle().take(MAX_COPIES) {
            env.now += step;
            respond(qp, env, stats, n);
            qp.on_timers(env, stats);
            if !env.sent.is_empty() {
                return;
            }
        }
        panic!("no request after {MAX_COPIES} copies, one every {step} ns");
    }

    /// A peer that answers every request with nothing but copies of responses already
    /// placed (one every 50 µs) is not making progress: the READ still fails with
    /// RETRY_EXC_ERR once retry_cnt periods of the local ACK timeout are spent (plus the
    /// first, and slack for the backoff's last wait), never later.
    #[test]
    fn only_copies_of_read_responses_still_exhaust_the_retries() {
        let (mut env, mut stats, mut qp) = read_sent();
        for n in [0, 1, 2] {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        let progress_at = env.now;
        let attr = qp.ack_timeout_ns().unwrap();
        let limit = (u64::from(qp.retry_cnt) + 2) * attr;
        let step = 50_000;
        for n in (0..3).cycle().take((limit / step) as usize + 1) {
            env.now += step;
            respond(&mut qp, &mut env, &mut stats, n);
            qp.on_timers(&mut env, &mut stats);
            if !env.completions.is_empty() {
                break;
            }
        }
        let failed_after = env.now - progress_at;
        assert_eq!(
            env.completions.iter().map(|c| c.status).collect::<Vec<_>>(),
            [WcStatus::RetryExcErr],
            "after {failed_after} ns of copies ({} local ACK timeouts of {attr} ns)",
            failed_after as f64 / attr as f64
        );
        assert!(failed_after <= limit, "failed after {failed_after} ns");
    }

    /// rdma_rxe answers a duplicate READ only after the requests queued before it, so the
    /// replays a tail probe or timeout asked for come long after the originals, as copies of
    /// placed responses (docs/interop.md, "READ from rdma_rxe"). While they flow the
    /// responder is alive and busy with older requests: asking again would only queue
    /// another replay behind them. The timer waits, but a peer that sends nothing but copies
    /// still gets the next request once the local ACK timeout has passed since the last
    /// progress. Before, every wait ran out under the copies and each asked for another replay.
    #[test]
    fn copies_of_placed_responses_postpone_the_timer_up_to_the_local_ack_timeout() {
        let (mut env, mut stats, mut qp) = read_sent();
        for n in [0, 1, 2] {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        let progress_at = env.now;
        env.now = qp.req.timer_deadline.unwrap();
        qp.on_timers(&mut env, &mut stats);
        let probe = (103, 0x1000 + 3072, 1024);
        assert_eq!(requests(&env), [probe], "the tail probe");
        env.sent.clear();
        // Copies every half round trip, far sooner than the next probe (two round trips).
        copies_until_a_request(&mut qp, &mut env, &mut stats, 50_000);
        let attr = qp.ack_timeout_ns().unwrap();
        assert!(
            env.now >= progress_at + attr,
            "asked again at {} ns, {} ns after the last progress, while copies came",
            env.now,
            env.now - progress_at
        );
        assert!(
            env.now < progress_at + attr + 50_000,
            "and no later than the local ACK timeout"
        );
        assert_eq!(
            requests(&env),
            [probe],
            "the second probe, at the period's end"
        );
    }

    /// The same for copies of a READ already complete (retired): they postpone the timer of
    /// the READ after it.
    #[test]
    fn copies_of_a_completed_read_postpone_the_next_reads_timer() {
        let (mut env, mut stats, mut qp) = read_sent();
        qp.max_rd_atomic = 2;
        let wqe = qp.make_wqe(send_wr(2, WrOpcode::RdmaRead, 1024));
        qp.enqueue(&mut env, &mut stats, wqe);
        for n in 0..4 {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        assert_eq!(env.completions.len(), 1, "the first READ is complete");
        env.sent.clear();
        let deadline = qp.req.timer_deadline.expect("the second READ's timer");
        copies_until_a_request(&mut qp, &mut env, &mut stats, 50_000);
        assert!(
            env.now > deadline + 10 * 50_000,
            "asked again at {} ns, the timer was due at {deadline} ns",
            env.now
        );
        assert_eq!(
            requests(&env),
            [(104, 0x1000, 1024)],
            "the second READ's tail probe"
        );
    }

    /// Copies of a READ already complete say nothing about a WRITE sent after it: the
    /// WRITE's loss is found when its own timer is due, not an ACK timeout later.
    #[test]
    fn copies_of_a_completed_read_do_not_delay_a_lost_write_after_it() {
        let (mut env, mut stats, mut qp) = read_sent();
        let wqe = qp.make_wqe(send_wr(2, WrOpcode::RdmaWrite, 8));
        qp.enqueue(&mut env, &mut stats, wqe);
        for n in 0..4 {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        assert_eq!(env.completions.len(), 1, "the READ is complete");
        env.sent.clear();
        let deadline = qp.req.timer_deadline.expect("the WRITE's timer");
        copies_until_a_request(&mut qp, &mut env, &mut stats, 50_000);
        assert!(
            env.now < deadline + 50_000,
            "the WRITE went again at {} ns, its timer was due at {deadline} ns",
            env.now
        );
        let sent: Vec<_> = env
            .sent_parsed()
            .iter()
            .map(|p| (p.hdr.bth.opcode, p.hdr.bth.psn.get()))
            .collect();
        assert_eq!(sent, [(op::RC_WRITE_ONLY, 104)], "the lost WRITE");
    }

    /// Karn's rule forbids a round-trip sample from a packet sent again, not from a packet a
    /// READ retry did not repeat. A tail probe of the first READ asks only for that READ's
    /// responses; the second READ's request, sent once, is still timed when its first response
    /// comes after the responder's stall. Before, every READ retry forgot the timed packet:
    /// against rdma_rxe, whose responder stalls for milliseconds, the estimate stayed at its
    /// first sample (0.8 ms, from an idle responder), every stall brought a probe and every
    /// probe forgot the sample that would have shown the longer round trip.
    #[test]
    fn a_read_retry_keeps_timing_a_later_reads_request() {
        let (mut env, mut stats, mut qp) = read_sent();
        qp.max_rd_atomic = 2;
        // Response 0 arrives after 100 µs: the READ's request gives a sample, nothing is timed.
        env.now = 100_000;
        respond(&mut qp, &mut env, &mut stats, 0);
        assert_eq!(qp.req.rtt.probe, None);
        let mut second = send_wr(2, WrOpcode::RdmaRead, 1024);
        second.remote_addr = 0x8000;
        let wqe = qp.make_wqe(second);
        qp.enqueue(&mut env, &mut stats, wqe);
        assert_eq!(
            qp.req.rtt.probe,
            Some((Psn::from_wire(104), 100_000)),
            "the second request is timed"
        );
        env.sent.clear();
        // The responder stalls: the probe asks for the first READ's responses 1..3.
        env.now = qp.req.timer_deadline.unwrap();
        qp.on_timers(&mut env, &mut stats);
        assert_eq!(requests(&env), [(101, 0x1000 + 1024, 3072)]);
        // 10 ms later the originals come, then the second READ's response.
        env.now = 10_100_000;
        for n in 1..4 {
            respond(&mut qp, &mut env, &mut stats, n);
        }
        respond_to_second_read(&mut qp, &mut env, &mut stats);
        assert_eq!(env.completions.len(), 2);
        assert!(
            qp.req.rtt.srtt_ns > 1_000_000,
            "the 10 ms round trip of the second request was taken: srtt {} ns",
            qp.req.rtt.srtt_ns
        );
    }
}
