//! The requester (as rxe_req.c): the send queue, the send window and cursor, and turning
//! WQEs into request packets in order, within the window, the RD/atomic limit and fences.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::qp::Qp;
use super::rto::{ProbeLateness, RttEstimator};
use super::sg::{gather, SgError};
use super::wqe::{Wqe, WqeKind, ATOMIC_BYTES};
use super::{
    EngineStats, ACK_REQ_INTERVAL, MAX_INFLIGHT_PSNS, PAGE_FAULT_RETRY_MAX_NS, PAGE_FAULT_RETRY_NS,
};
use crate::roce::wire::{opcode as op, AtomicEth, Bth, Deth, Feth, Headers, Reth};
use crate::roce::*;

/// A send WR Q_Key with this bit set means "use the QP's own Q_Key" (IBA 10.2.5).
pub(super) const QKEY_USE_QP_QKEY: u32 = 0x8000_0000;

#[derive(Debug, Default)]
pub(super) struct Requester {
    pub(super) sq: VecDeque<Wqe>,
    /// PSN of the next never-sent packet.
    pub(super) next_psn: Psn,
    /// Highest PSN acknowledged by an ACK (or implied by a response).
    pub(super) acked_psn: Psn,
    /// Index in `sq` of the WQE to (re)transmit next, and its next packet.
    pub(super) cursor: usize,
    pub(super) cursor_pkt: u32,
    pub(super) retry_left: u8,
    pub(super) rnr_left: u8,
    /// Retransmission timer (its length: [`Qp::rto_ns`]).
    pub(super) timer_deadline: Option<u64>,
    /// The timer was armed then for packets not yet out of the device (rto/clock.rs).
    pub(super) timer_queued_at: Option<u64>,
    /// Waiting out an RNR NAK until then.
    pub(super) rnr_until: Option<u64>,
    /// The timer's deadline is the tail probe's, not the RTO's (rto.rs).
    pub(super) timer_probe: bool,
    /// Round-trip estimate and the RTO's backoff.
    pub(super) rtt: RttEstimator,
    /// The lateness spurious tail probes taught, the engine's (rto.rs).
    pub(super) pto_lateness: ProbeLateness,
    /// When the last progress was made or retry spent: a timeout spends a retry only once
    /// the QP's whole local ACK timeout has passed since (see rto.rs).
    pub(super) retry_period_start: u64,
    /// One past the highest PSN ever sent: a packet before it is a retransmission.
    pub(super) sent_end: Psn,
    /// The PSN a sequence NAK or a timeout made the requester go back to, and when: the same NAK
    /// soon after answers packets sent before the rewind and is not acted on (fast
    /// retransmit once per loss).
    pub(super) nak_rewind: Option<(Psn, u64)>,
    /// READ responses that arrived beyond a missing one, per READ (by its first PSN): the
    /// packet indices after `read_pkts_done` already placed (see read_retry.rs).
    pub(super) read_early: HashMap<u32, BTreeSet<u32>>,
    /// Per READ (by its first PSN) the first missing packet its last retry asked from
    /// (read_retry.rs: retries of a READ ask from ever later packets).
    pub(super) read_asked: HashMap<u32, u32>,
    /// The newest READ response PSN that arrived: a missing response before it was lost.
    pub(super) read_resp_high: Option<Psn>,
    /// The wait of the last page-fault stall (0: the last attempt made progress).
    pub(super) fault_wait_ns: u64,
    pub(super) pkts_since_ack_req: u32,
    /// In SQD and the drain has not been reported yet ([`DeviceEnv::sq_drained`]).
    pub(super) drain_pending: bool,
    /// Send window in packets (flow control, window.rs): halved on every loss, grown by the
    /// packets acknowledged, between [`MIN_INFLIGHT_PSNS`](super::MIN_INFLIGHT_PSNS) and
    /// [`MAX_INFLIGHT_PSNS`].
    pub(super) window: u32,
    /// The window the first loss of the current run of losses left (TCP's ssthresh): below
    /// it the window grows by one per acknowledged packet, at or above it by one per window
    /// of them.
    pub(super) recovery_window: u32,
    /// Packets acknowledged towards the window's next step above `recovery_window`.
    pub(super) acked_credit: u32,
    /// Something was acknowledged since the last loss: the next loss starts a new run.
    pub(super) acked_since_loss: bool,
    /// [`Qp::una`] as last found, None once a change may have moved it: the QP table reads
    /// it after every change of the QP ([`Qp::una_noted`]), most of which do not move it.
    pub(super) una_known: Option<Psn>,
    /// Tests: `una_known` was set wrong on purpose ([`Qp::corrupt_una_cache`]); debug builds
    /// do not check it until it is forgotten.
    #[cfg(test)]
    pub(super) una_known_corrupt: bool,
}

impl Requester {
    pub(super) fn new() -> Requester {
        Requester {
            window: MAX_INFLIGHT_PSNS,
            recovery_window: MAX_INFLIGHT_PSNS,
            acked_since_loss: true,
            ..Default::default()
        }
    }

    /// A page-fault stall at `now`: wait [`PAGE_FAULT_RETRY_NS`], doubled on every stall
    /// in a row up to [`PAGE_FAULT_RETRY_MAX_NS`].
    pub(super) fn fault_stall(&mut self, now: u64) {
        self.fault_wait_ns = match self.fault_wait_ns {
            0 => PAGE_FAULT_RETRY_NS,
            w => (w * 2).min(PAGE_FAULT_RETRY_MAX_NS),
        };
        self.rnr_until = Some(now + self.fault_wait_ns);
    }

    pub(super) fn ack_req_interval(&self) -> u32 {
        ACK_REQ_INTERVAL.min(self.window / 2)
    }

    /// What [`Qp::una`] depends on changed (the next PSN, the acknowledged PSN, a started
    /// WQE finished or left the SQ): [`Qp::una_noted`] finds it again.
    pub(super) fn una_may_move(&mut self) {
        self.una_known = None;
        #[cfg(test)]
        {
            self.una_known_corrupt = false;
        }
    }
}

/// Why the requester could not send a packet.
pub(super) enum SendStop {
    /// The WR fails with this status.
    Error(WcStatus),
    /// A page of an on-demand region is not present: the SQ waits and tries again.
    Fault,
}

impl From<SgError> for SendStop {
    fn from(e: SgError) -> SendStop {
        match e {
            SgError::Length => SendStop::Error(WcStatus::LocLenErr),
            SgError::Access => SendStop::Error(WcStatus::LocProtErr),
            SgError::Fault => SendStop::Fault,
        }
    }
}

impl Qp {
    /// Queues a WQE on the SQ and sends what it may (the tests' post).
    #[cfg(test)]
    pub(super) fn enqueue(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, wqe: Wqe) {
        self.queue(env, wqe);
        self.send_queued(env, stats);
    }

    /// Queues a WQE on the SQ without sending (a doorbell's batch is sent once, by
    /// [`Qp::send_queued`]); in ERR or SQE it is flushed at once.
    #[cfg(test)]
    pub(super) fn queue(&mut self, env: &mut dyn DeviceEnv, wqe: Wqe) {
        self.req.sq.push_back(wqe);
        self.queued(env);
    }

    /// The SQ's tail WQE was queued: in ERR or SQE it is flushed at once.
    pub(super) fn queued(&mut self, env: &mut dyn DeviceEnv) {
        match self.state {
            QpState::Err => {
                self.flush_sq(env);
                // Receive WRs posted since the QP entered ERR are flushed too.
                self.flush_rq(env);
            }
            QpState::Sqe => self.flush_sq(env),
            _ => {}
        }
    }

    /// Sends what the queued WQEs may (ERR and SQE flushed them when they were queued).
    pub(super) fn send_queued(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats) {
        if !matches!(self.state, QpState::Err | QpState::Sqe) {
            self.transmit(env, stats);
        }
    }

    /// READ/atomic WRs started and not yet retired. A finished one behind an unfinished one
    /// still counts: a go-back-N retransmission resends it, and the responder only keeps the
    /// last max_dest_rd_atomic of them for replay.
    pub(super) fn outstanding_rd_atomic(&self) -> usize {
        self.req
            .sq
            .iter()
            .take_while(|w| w.started)
            .filter(|w| w.kind.rd_atomic())
            .count()
    }

    /// Sends what the window, the RD/atomic limit, fences and RNR waits allow.
    pub(super) fn transmit(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats) {
        self.cc.wake_at = None;
        // One clock read per burst for the RC bookkeeping (a read is ~60 ns in a VM; the
        // frames leave together at the end of the data path's pass anyway).
        let mut sent_at = None;
        while self.can_send() && self.req.rnr_until.is_none() && self.req.cursor < self.req.sq.len()
        {
            let cursor = self.req.cursor;
            let wqe = &self.req.sq[cursor];
            if wqe.error.is_some() {
                break;
            }
            if wqe.started && wqe.done() {
                // Go-back-N resends from the oldest gap; a WR after it whose response or ACK
                // already arrived was executed by the responder and needs no resending.
                self.req.cursor += 1;
                self.req.cursor_pkt = 0;
                continue;
            }
            if !wqe.started {
                if self.state == QpState::Sqd {
                    // SQD: no new WR starts until the QP returns to RTS.
                    break;
                }
                // Counting the outstanding READs and atomics walks the started WQEs: only a
                // WR that the count can hold back pays for it.
                let rd_atomic = wqe.kind.rd_atomic();
                if rd_atomic || wqe.wr.fence {
                    let outstanding = self.outstanding_rd_atomic();
                    if (rd_atomic && outstanding >= usize::from(self.max_rd_atomic.max(1)))
                        || (wqe.wr.fence && outstanding > 0)
                    {
                        break;
                    }
                }
                if wqe.kind == WqeKind::Local {
                    self.execute_local(env, cursor);
                    continue;
                }
            }
            let psn = if wqe.started {
                wqe.first_psn.add(self.req.cursor_pkt)
            } else {
                self.req.next_psn
            };
            let rc = self.cfg.qp_type == QpType::Rc;
            if rc && !self.within_window(psn) {
                break;
            }
            if self.cc.paced() {
                if let Some(until) = self.cc.paced_until(env.now_ns()) {
                    // Above its DCQCN rate: the packet waits for the engine's timer.
                    self.cc.wake_at = Some(until);
                    break;
                }
            }
            // The port's scheduler decides when (device/datapath/sched.rs).
            let adds_to_flight = rc && psn.diff(self.req.sent_end) >= 0;
            if !env.may_send_request(self.cfg.qpn, adds_to_flight) {
                break;
            }
            let wqe = &mut self.req.sq[cursor];
            let fresh = !wqe.started;
            // A WQE starting does not move `una`: it is not done yet, and its first PSN is
            // the next PSN `una` was at if no started WQE was outstanding.
            if fresh {
                wqe.started = true;
                wqe.first_psn = self.req.next_psn;
                self.req.next_psn = self.req.next_psn.add(wqe.npsn);
                let (qpn, first) = (self.cfg.qpn.get(), wqe.first_psn.get());
                env.wqe_trace()
                    .wqe_start(qpn, first, wqe.npsn, wqe.wr.wr_id);
            }
            let bytes_before = stats.tx_bytes;
            match self.send_packet(env, stats, cursor) {
                Ok(()) => {
                    self.req.fault_wait_ns = 0;
                    if self.cc.paced() {
                        self.cc.sent(stats.tx_bytes - bytes_before, env.now_ns());
                    }
                    if self.cfg.qp_type == QpType::Rc {
                        let now = *sent_at.get_or_insert_with(|| env.now_ns());
                        // Every packet asking for an ACK starts the count over.
                        let ack_req = self.req.pkts_since_ack_req == 0;
                        self.sent_rc_packet(psn, ack_req, now);
                    }
                }
                Err(SendStop::Fault) => {
                    // Nothing was sent: a WR that had not started gives its PSNs back; the SQ
                    // waits like after an RNR NAK and tries again.
                    if fresh {
                        let wqe = &mut self.req.sq[cursor];
                        wqe.started = false;
                        self.req.next_psn = wqe.first_psn;
                        self.req.una_may_move();
                    }
                    stats.page_fault_stalls += 1;
                    let now = env.now_ns();
                    self.req.fault_stall(now);
                    break;
                }
                Err(SendStop::Error(status)) => {
                    self.req.sq[cursor].error = Some(status);
                    break;
                }
            }
        }
        self.retire(env);
        self.check_drained(env);
    }

    /// Bookkeeping after the RC packet `psn` left at `now`: a first transmission is timed
    /// for the round trip (`ack_req`: it asked for an ACK), and the retransmission timer runs.
    fn sent_rc_packet(&mut self, psn: Psn, ack_req: bool, now: u64) {
        if psn.diff(self.req.sent_end) >= 0 {
            self.req.sent_end = psn.next();
            self.time_packet(psn, ack_req, now);
        }
        if self.req.timer_deadline.is_none() && self.in_flight() {
            if self.req.rtt.backoff == 0 {
                // Busy again after idling: the retry period starts now.
                self.req.retry_period_start = now;
            }
            self.arm_timer_on_departure(now);
        }
    }

    /// Executes the local operation (BIND_MW, LOCAL_INV, REG_MR) at the cursor: it takes no
    /// PSN and completes at once, in SQ order. Any failure is MW_BIND_ERR (a memory
    /// management operation failed) and changes nothing.
    pub(super) fn execute_local(&mut self, env: &mut dyn DeviceEnv, index: usize) {
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        let next_psn = self.req.next_psn;
        self.req.una_may_move();
        let wqe = &mut self.req.sq[index];
        wqe.started = true;
        wqe.first_psn = next_psn;
        let (bind, reg) = (wqe.wr.bind.as_deref(), wqe.wr.fast_reg.as_deref());
        let result = match (wqe.wr.opcode, bind, reg) {
            (WrOpcode::BindMw, Some(bind), _) => env.bind_mw(pd, qpn, bind),
            (WrOpcode::RegMr, _, Some(reg)) => env.fast_register(pd, qpn, reg),
            _ => env.invalidate(pd, qpn, wqe.wr.rkey, false),
        }
        .map_err(|_| WcStatus::MwBindErr);
        match result {
            Ok(()) => {
                wqe.acked = true;
                self.req.cursor += 1;
                self.req.cursor_pkt = 0;
            }
            // Like a send error, the cursor stays on the failed WR: nothing after it may be
            // sent (it completes in error once the WRs before it have, the rest flush).
            Err(status) => wqe.error = Some(status),
        }
    }

    /// Sends the packet at the cursor and advances the cursor.
    pub(super) fn send_packet(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
    ) -> Result<(), SendStop> {
        let wqe = &self.req.sq[index];
        if wqe.kind == WqeKind::Read {
            // A READ asked again starts at its first missing response, not before it.
            self.req.cursor_pkt = self.req.cursor_pkt.max(wqe.read_pkts_done);
        }
        let psn = wqe.first_psn.add(self.req.cursor_pkt);
        let (mut hdr, payload) = match wqe.kind {
            WqeKind::Read => (self.read_request(wqe, psn), None),
            WqeKind::Atomic => (self.atomic_request(wqe, psn), None),
            WqeKind::Flush => (self.flush_request(wqe, psn), None),
            WqeKind::AtomicWrite => {
                let mut value = [0u8; ATOMIC_BYTES];
                gather(env, self.cfg.pd, &wqe.wr.data, 0, &mut value).map_err(SendStop::from)?;
                (self.atomic_write_request(wqe, psn), Some(value))
            }
            // A local operation never gets here: transmit executes it.
            WqeKind::Send | WqeKind::Write | WqeKind::Local => {
                return self.send_data_packet(env, stats, index)
            }
        };
        hdr.xrceth = self.xrceth_of(&self.req.sq[index]);
        // A single-packet request: it asks for its response and ends the WQE's packets.
        self.send_connected(env, stats, &hdr, payload.as_ref().map_or(&[], |v| &v[..]));
        self.req.cursor += 1;
        self.req.cursor_pkt = 0;
        self.req.pkts_since_ack_req = 0;
        Ok(())
    }

    /// The BTH of a request that asks for its response.
    fn request_bth(&self, opcode: u8, psn: Psn) -> Bth {
        Bth {
            ack_req: true,
            ..self.bth(opcode, psn)
        }
    }

    /// A READ request from the cursor's packet: the whole READ, or on a retransmission the
    /// missing responses up to the next one that already arrived (IBA 9.7.5 lets a
    /// retried READ start at the first missing response PSN).
    fn read_request(&self, wqe: &Wqe, psn: Psn) -> Headers {
        let start = self.req.cursor_pkt;
        let end = self.read_hole_end(wqe, start);
        self.read_range_request(wqe, psn, start, end)
    }

    /// The READ request for response packets `[start, end)` of `wqe` (its PSN `psn` is the
    /// first of them).
    pub(super) fn read_range_request(&self, wqe: &Wqe, psn: Psn, start: u32, end: u32) -> Headers {
        let mtu = u64::from(self.mtu.bytes());
        let offset = (u64::from(start) * mtu).min(wqe.len);
        let end_offset = (u64::from(end) * mtu).min(wqe.len).max(offset);
        let mut hdr = Headers::new(self.request_bth(op::RC_READ_REQUEST, psn));
        hdr.reth = Some(Reth {
            va: wqe.wr.remote_addr.wrapping_add(offset),
            rkey: wqe.wr.rkey,
            dma_len: (end_offset - offset) as u32,
        });
        hdr
    }

    fn atomic_request(&self, wqe: &Wqe, psn: Psn) -> Headers {
        let compare_swap = wqe.wr.opcode == WrOpcode::AtomicCmpAndSwp;
        let opcode = if compare_swap {
            op::RC_COMPARE_SWAP
        } else {
            op::RC_FETCH_ADD
        };
        let mut hdr = Headers::new(self.request_bth(opcode, psn));
        hdr.atomic_eth = Some(AtomicEth {
            va: wqe.wr.remote_addr,
            rkey: wqe.wr.rkey,
            swap_add: if compare_swap {
                wqe.wr.swap
            } else {
                wqe.wr.compare_add
            },
            compare: wqe.wr.compare_add,
        });
        hdr
    }

    fn flush_request(&self, wqe: &Wqe, psn: Psn) -> Headers {
        let mut hdr = Headers::new(self.request_bth(op::RC_FLUSH, psn));
        hdr.feth = Some(Feth {
            placement_type: wqe.wr.flush.placement_type,
            selectivity_level: wqe.wr.flush.level,
        });
        hdr.reth = Some(Reth {
            va: wqe.wr.remote_addr,
            rkey: wqe.wr.rkey,
            dma_len: wqe.wr.flush.length,
        });
        hdr
    }

    /// The headers of an ATOMIC WRITE; its 8 bytes are the payload.
    fn atomic_write_request(&self, wqe: &Wqe, psn: Psn) -> Headers {
        let mut hdr = Headers::new(self.request_bth(op::RC_ATOMIC_WRITE, psn));
        hdr.reth = Some(Reth {
            va: wqe.wr.remote_addr,
            rkey: wqe.wr.rkey,
            dma_len: ATOMIC_BYTES as u32,
        });
        hdr
    }

    /// Sends the SEND or WRITE packet at the cursor (RC, UC or UD) and advances the cursor.
    fn send_data_packet(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        index: usize,
    ) -> Result<(), SendStop> {
        let mtu = u64::from(self.mtu.bytes());
        let pkt = self.req.cursor_pkt;
        let wqe = &self.req.sq[index];
        let offset = u64::from(pkt) * mtu;
        let chunk = (wqe.len - offset).min(mtu) as usize;
        let last = pkt + 1 == wqe.npsn;
        let pkts_since_ack_req = self.req.pkts_since_ack_req + 1;
        // Also the last packet the port's scheduler lets go before the QP's next turn: the
        // responder ACKs only packets that ask, so one that did not would wait unacknowledged
        // for that turn (at 256 QPs, dozens of round trips) and get tail-probed.
        let ack_req = self.cfg.qp_type == QpType::Rc
            && (last
                || pkts_since_ack_req >= self.req.ack_req_interval()
                || env.request_budget_spent(self.cfg.qpn));
        let hdr = self.data_headers(wqe, pkt, ack_req);
        // The payload is gathered from guest memory straight into the packet; a refused
        // access sends nothing and leaves the QP's state as it was.
        let pd = self.cfg.pd;
        let fill = |env: &mut dyn DeviceEnv, out: &mut [u8]| {
            gather(env, pd, &wqe.wr.data, offset, out).map_err(SendStop::from)
        };
        match (wqe.wr.ud, self.av) {
            (Some(ud), _) => self.transmit_filled(env, stats, &ud.av, &hdr, chunk, fill)?,
            (None, Some(av)) => self.transmit_filled(env, stats, &av, &hdr, chunk, fill)?,
            (None, None) => {
                log::warn!("QP {:#x}: no address vector; packet dropped", self.cfg.qpn)
            }
        }
        self.req.pkts_since_ack_req = if ack_req { 0 } else { pkts_since_ack_req };
        let wqe = &mut self.req.sq[index];
        if last {
            if self.cfg.qp_type != QpType::Rc {
                wqe.acked = true; // UC/UD complete once sent
                self.req.una_may_move();
            }
            self.req.cursor += 1;
            self.req.cursor_pkt = 0;
        } else {
            self.req.cursor_pkt += 1;
        }
        Ok(())
    }

    /// The headers of packet `pkt` of a SEND or WRITE.
    fn data_headers(&self, wqe: &Wqe, pkt: u32, ack_req: bool) -> Headers {
        let first = pkt == 0;
        let last = pkt + 1 == wqe.npsn;
        let imm = matches!(
            wqe.wr.opcode,
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
        );
        let inv = wqe.wr.opcode == WrOpcode::SendWithInv;
        let mut hdr = Headers::new(Bth {
            solicited: last && wqe.wr.solicited,
            ack_req,
            ..self.bth(
                self.transport_bits() | data_opcode(wqe.kind, first, last, imm, inv),
                wqe.first_psn.add(pkt),
            )
        });
        if last && imm {
            hdr.imm = Some(wqe.wr.imm);
        }
        if last && inv {
            hdr.ieth = Some(wqe.wr.rkey);
        }
        if first && wqe.kind == WqeKind::Write {
            hdr.reth = Some(Reth {
                va: wqe.wr.remote_addr,
                rkey: wqe.wr.rkey,
                dma_len: wqe.len as u32,
            });
        }
        hdr.xrceth = self.xrceth_of(wqe);
        if let Some(ud) = wqe.wr.ud {
            hdr.bth.dest_qpn = ud.remote_qpn;
            let qkey = if ud.remote_qkey & QKEY_USE_QP_QKEY != 0 {
                self.qkey
            } else {
                ud.remote_qkey
            };
            hdr.deth = Some(Deth {
                qkey,
                src_qpn: self.cfg.qpn,
            });
        }
        hdr
    }
}

/// The operation (low 5 bits) of a SEND or WRITE packet: where it lies in its message and
/// what its last packet carries (immediate data or an R_Key to invalidate).
fn data_opcode(kind: WqeKind, first: bool, last: bool, imm: bool, inv: bool) -> u8 {
    match (kind, first, last) {
        (WqeKind::Send, true, true) if inv => op::RC_SEND_ONLY_INV,
        (WqeKind::Send, false, true) if inv => op::RC_SEND_LAST_INV,
        (WqeKind::Send, true, true) if imm => op::RC_SEND_ONLY_IMM,
        (WqeKind::Send, true, true) => op::RC_SEND_ONLY,
        (WqeKind::Send, true, false) => op::RC_SEND_FIRST,
        (WqeKind::Send, false, false) => op::RC_SEND_MIDDLE,
        (WqeKind::Send, false, true) if imm => op::RC_SEND_LAST_IMM,
        (WqeKind::Send, false, true) => op::RC_SEND_LAST,
        (_, true, true) if imm => op::RC_WRITE_ONLY_IMM,
        (_, true, true) => op::RC_WRITE_ONLY,
        (_, true, false) => op::RC_WRITE_FIRST,
        (_, false, false) => op::RC_WRITE_MIDDLE,
        (_, false, true) if imm => op::RC_WRITE_LAST_IMM,
        (_, false, true) => op::RC_WRITE_LAST,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::super::MIN_INFLIGHT_PSNS;
    use super::*;

    #[test]
    fn page_fault_stalls_double_their_wait_up_to_the_cap() {
        let mut req = Requester::new();
        let mut waits = Vec::new();
        for _ in 0..10 {
            req.fault_stall(1_000);
            waits.push(req.rnr_until.unwrap() - 1_000);
        }
        assert_eq!(waits[0], PAGE_FAULT_RETRY_NS);
        assert_eq!(waits[1], 2 * PAGE_FAULT_RETRY_NS);
        assert_eq!(*waits.last().unwrap(), PAGE_FAULT_RETRY_MAX_NS);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
    }

    #[test]
    fn data_opcodes_mark_position_immediate_and_invalidate() {
        use WqeKind::{Send, Write};
        assert_eq!(
            data_opcode(Send, true, true, false, false),
            op::RC_SEND_ONLY
        );
        assert_eq!(
            data_opcode(Send, true, false, true, false),
            op::RC_SEND_FIRST
        );
        assert_eq!(
            data_opcode(Send, false, false, true, false),
            op::RC_SEND_MIDDLE
        );
        assert_eq!(
            data_opcode(Send, false, true, true, false),
            op::RC_SEND_LAST_IMM
        );
        assert_eq!(
            data_opcode(Send, true, true, false, true),
            op::RC_SEND_ONLY_INV
        );
        assert_eq!(
            data_opcode(Send, false, true, false, true),
            op::RC_SEND_LAST_INV
        );
        assert_eq!(
            data_opcode(Write, true, true, true, false),
            op::RC_WRITE_ONLY_IMM
        );
        assert_eq!(
            data_opcode(Write, true, false, false, false),
            op::RC_WRITE_FIRST
        );
        assert_eq!(
            data_opcode(Write, false, true, false, false),
            op::RC_WRITE_LAST
        );
    }

    #[test]
    fn a_send_leaves_in_mtu_packets_asking_for_an_ack_at_its_end() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        fill_pattern(&mut env, 2500);
        let wqe = qp.make_wqe(send_wr(1, WrOpcode::SendWithImm, 2500));
        qp.enqueue(&mut env, &mut stats, wqe);
        let sent = env.sent_parsed();
        let shape: Vec<(u8, u32, bool, usize)> = sent
            .iter()
            .map(|p| {
                (
                    p.hdr.bth.opcode,
                    p.hdr.bth.psn.get(),
                    p.hdr.bth.ack_req,
                    p.payload.len(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (op::RC_SEND_FIRST, 100, false, 1024),
                (op::RC_SEND_MIDDLE, 101, false, 1024),
                (op::RC_SEND_LAST_IMM, 102, true, 452),
            ]
        );
        let data: Vec<u8> = sent.iter().flat_map(|p| p.payload.to_vec()).collect();
        assert_eq!(data, env.mem[..2500]);
        assert_eq!(qp.req.next_psn.get(), 103);
        assert!(qp.req.timer_deadline.is_some(), "the ACK timer runs");
    }

    #[test]
    fn the_window_bounds_unacknowledged_packets() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        qp.req.window = MIN_INFLIGHT_PSNS;
        for id in 0..20 {
            let wqe = qp.make_wqe(send_wr(id, WrOpcode::Send, 0));
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        assert_eq!(env.sent.len(), MIN_INFLIGHT_PSNS as usize);
        // UC has no window: everything leaves at once.
        let (mut env, mut qp) = (TestEnv::new(), rts_qp(QpType::Uc));
        qp.req.window = MIN_INFLIGHT_PSNS;
        for id in 0..20 {
            let wqe = qp.make_wqe(send_wr(id, WrOpcode::Send, 0));
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        assert_eq!(env.sent.len(), 20);
        assert_eq!(env.completions.len(), 20, "UC completes once sent");
    }

    #[test]
    fn the_port_scheduler_holds_packets_and_a_retransmission_adds_nothing_to_the_flight() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        env.send_allowance = Some(2);
        for id in 0..4 {
            let wqe = qp.make_wqe(send_wr(id, WrOpcode::Send, 0));
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        assert_eq!(env.sent.len(), 2, "the scheduler let two packets go");
        assert_eq!(qp.req.next_psn.get(), 102, "the held WRs took no PSN");
        assert!(
            env.asked.iter().all(|&adds| adds),
            "first transmissions add to the flight"
        );
        // A turn (Engine::resume_send): the rest leaves, in order.
        env.send_allowance = None;
        qp.transmit(&mut env, &mut stats);
        assert_eq!(env.sent.len(), 4);
        assert_eq!(qp.req.next_psn.get(), 104);
        // Go back to the oldest packet (as after a timeout): resending adds nothing.
        env.asked.clear();
        qp.req.cursor = 0;
        qp.req.cursor_pkt = 0;
        qp.transmit(&mut env, &mut stats);
        assert_eq!(env.sent.len(), 8);
        assert_eq!(
            env.asked, [false; 4],
            "retransmissions are already in flight"
        );
        // UC has no flight.
        let (mut env, mut qp) = (TestEnv::new(), rts_qp(QpType::Uc));
        let wqe = qp.make_wqe(send_wr(9, WrOpcode::Send, 0));
        qp.enqueue(&mut env, &mut stats, wqe);
        assert_eq!(env.asked, [false]);
    }

    /// The packet the port's scheduler lets go last before the QP's next turn asks for an
    /// ACK, mid-message too: the responder ACKs only packets that ask, so one that did not
    /// waited unacknowledged for that turn and was tail-probed (at 256 QPs in two guests,
    /// 12-65 duplicates per run). Fails without the scheduler check in `send_data_packet`.
    #[test]
    fn the_last_packet_before_the_scheduler_holds_the_qp_asks_for_an_ack() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        env.send_allowance = Some(1);
        let wqe = qp.make_wqe(send_wr(1, WrOpcode::Send, 3000));
        qp.enqueue(&mut env, &mut stats, wqe);
        let ack_reqs = |env: &TestEnv| {
            env.sent_parsed()
                .iter()
                .map(|p| p.hdr.bth.ack_req)
                .collect::<Vec<_>>()
        };
        assert_eq!(ack_reqs(&env), [true], "the budget's last packet asks");
        // Its turn: the rest goes, asking only at the message's end.
        env.send_allowance = None;
        qp.transmit(&mut env, &mut stats);
        assert_eq!(ack_reqs(&env), [true, false, true]);
    }

    #[test]
    fn rd_atomic_limit_and_fence_hold_the_queue() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        qp.max_rd_atomic = 1;
        for id in 0..2 {
            let wqe = qp.make_wqe(send_wr(id, WrOpcode::RdmaRead, 8));
            qp.enqueue(&mut env, &mut stats, wqe);
        }
        assert_eq!(env.sent.len(), 1, "one READ outstanding at most");
        let (mut env, mut qp) = (TestEnv::new(), rts_qp(QpType::Rc));
        qp.max_rd_atomic = 4;
        let read = qp.make_wqe(send_wr(0, WrOpcode::RdmaRead, 8));
        qp.enqueue(&mut env, &mut stats, read);
        let fenced = qp.make_wqe(SendWr {
            fence: true,
            ..send_wr(1, WrOpcode::Send, 8)
        });
        qp.enqueue(&mut env, &mut stats, fenced);
        assert_eq!(env.sent.len(), 1, "the fenced SEND waits for the READ");
    }

    #[test]
    fn a_page_fault_gives_the_psns_back_and_waits() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let mut wr = send_wr(1, WrOpcode::Send, 8);
        wr.data = SendData::Sges(vec![Sge {
            addr: 0,
            length: 8,
            lkey: FAULT_KEY,
        }]);
        let wqe = qp.make_wqe(wr);
        qp.enqueue(&mut env, &mut stats, wqe);
        assert!(env.sent.is_empty());
        assert_eq!(qp.req.next_psn.get(), 100);
        assert!(!qp.req.sq[0].started);
        assert_eq!(qp.req.rnr_until, Some(PAGE_FAULT_RETRY_NS));
        assert_eq!(stats.page_fault_stalls, 1);
    }
}
