//! The responder (as rxe_resp.c): PSN and op-sequence checks, duplicates, NAKs, and UD
//! receives; the requests themselves are executed in resp_exec.rs.

use std::collections::VecDeque;

use super::qp::Qp;
use super::sg::{scatter, SgError};
use super::EngineStats;
use crate::roce::wire::{NakCode, OpcodeClass, Parsed, Syndrome, GRH_LEN, IPV4_HEADER_LEN};
use crate::roce::*;
use rox_uapi::queue::{CQE_NETWORK_HDR_IPV4, CQE_NETWORK_HDR_IPV6};

/// A gap still open this long after its last sequence NAK while out-of-sequence packets keep
/// coming is NAKed again (the NAK was lost). Longer than a round trip between guests on one
/// host (a few hundred µs), short against the requester's retransmission timeout floor.
pub(super) const RENAK_INTERVAL_NS: u64 = 1_000_000;
/// ... and at least this many out-of-sequence packets arrived since that NAK: a lost NAK leaves
/// the requester sending the rest of its window (16 packets or more); two packets a slow host
/// delivers more than the interval apart do not make one.
pub(super) const RENAK_MIN_PACKETS: u32 = 8;

/// A multi-packet message the responder is in the middle of.
#[derive(Debug)]
pub(super) enum InMessage {
    Send {
        wr: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: Key,
        remaining: u64,
        total: u32,
    },
}

/// Saved READ/atomic request, for duplicates.
#[derive(Clone, Copy, Debug)]
pub(super) enum RdAtomic {
    Read {
        first_psn: Psn,
        last_psn: Psn,
    },
    Atomic {
        psn: Psn,
        original: u64,
    },
    /// FLUSH / ATOMIC WRITE: executed; a duplicate is only answered again.
    Executed {
        psn: Psn,
    },
}

#[derive(Debug, Default)]
pub(super) struct Responder {
    /// Expected PSN.
    pub(super) epsn: Psn,
    /// Message sequence number: messages completed.
    pub(super) msn: Msn,
    pub(super) cur: Option<InMessage>,
    /// UC: a receive WR taken for a message that was then dropped; used for the next one.
    pub(super) spare_recv: Option<RecvWr>,
    /// A packet asked for an ACK; send one (for epsn - 1) at the next poll.
    pub(super) ack_pending: bool,
    /// A NAK (PSN sequence or RNR) was sent for the current epsn.
    pub(super) nak_sent: bool,
    /// When the last PSN-sequence NAK for the current epsn was sent (None: the NAK
    /// outstanding is an RNR NAK, or none is), and the highest out-of-sequence PSN seen since:
    /// what decides a repeated NAK ([`Qp::gap_needs_nak`]).
    pub(super) seq_nak_at: Option<u64>,
    pub(super) ooo_high: Psn,
    /// Out-of-sequence packets since the last sequence NAK.
    pub(super) ooo_since_nak: u32,
    /// UC: drop packets until the next first/only packet.
    pub(super) uc_dropping: bool,
    pub(super) history: VecDeque<RdAtomic>,
}

/// Where a request's PSN lies against the expected one (RC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PsnCheck {
    Expected,
    /// Before the expected PSN: already executed.
    Duplicate,
    /// Beyond the expected PSN: packets in between were lost or reordered.
    Gap,
}

pub(super) fn check_psn(psn: Psn, epsn: Psn) -> PsnCheck {
    match psn.diff(epsn) {
        d if d > 0 => PsnCheck::Gap,
        d if d < 0 => PsnCheck::Duplicate,
        _ => PsnCheck::Expected,
    }
}

/// The op-sequence check: a first (or only) packet may come only between messages, a middle
/// or last one only inside a message of its own class (SEND or WRITE).
pub(super) fn op_sequence_ok(cur: Option<&InMessage>, class: OpcodeClass, first: bool) -> bool {
    match cur {
        None => first,
        Some(InMessage::Send { .. }) => !first && class == OpcodeClass::Send,
        Some(InMessage::Write { .. }) => !first && class == OpcodeClass::Write,
    }
}

/// How a responder answers an RC duplicate request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DuplicateAnswer {
    /// SEND/WRITE: acknowledge again (at the next poll).
    Ack,
    /// A READ still in the history: send its responses again (from memory as it is now).
    ReplayRead,
    /// An atomic still in the history: send its saved original value, never execute again.
    ReplayAtomic(u64),
    /// A FLUSH / ATOMIC WRITE still in the history: answer it again.
    ReplayExecuted,
    /// A READ/atomic/FLUSH older than the history: nothing to answer with.
    Ignore,
}

pub(super) fn classify_duplicate(
    history: &VecDeque<RdAtomic>,
    class: OpcodeClass,
    psn: Psn,
) -> DuplicateAnswer {
    let found = |answer: Option<DuplicateAnswer>| answer.unwrap_or(DuplicateAnswer::Ignore);
    match class {
        OpcodeClass::ReadRequest => found(history.iter().find_map(|h| match *h {
            RdAtomic::Read {
                first_psn,
                last_psn,
            } if psn.within(first_psn, last_psn) => Some(DuplicateAnswer::ReplayRead),
            _ => None,
        })),
        OpcodeClass::Atomic => found(history.iter().find_map(|h| match *h {
            RdAtomic::Atomic {
                psn: saved,
                original,
            } if saved == psn => Some(DuplicateAnswer::ReplayAtomic(original)),
            _ => None,
        })),
        OpcodeClass::Flush | OpcodeClass::AtomicWrite => found(history.iter().find_map(|h| {
            matches!(*h, RdAtomic::Executed { psn: saved } if saved == psn)
                .then_some(DuplicateAnswer::ReplayExecuted)
        })),
        _ => DuplicateAnswer::Ack,
    }
}

impl Qp {
    /// A request packet arrived for this responder.
    pub(super) fn responder_receive(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        if !self.can_receive() {
            stats.rx_no_qp += 1;
            return;
        }
        match self.cfg.qp_type {
            QpType::Ud => self.ud_receive(env, stats, p),
            QpType::Rc => match check_psn(p.hdr.bth.psn, self.resp.epsn) {
                PsnCheck::Gap => {
                    stats.rx_out_of_sequence += 1;
                    let now = env.now_ns();
                    if self.gap_needs_nak(p.hdr.bth.psn, now) {
                        let epsn = self.resp.epsn;
                        self.nak(env, stats, epsn, NakCode::PsnSequenceError);
                        self.resp.seq_nak_at = Some(now);
                    }
                }
                PsnCheck::Duplicate => self.duplicate(env, stats, p),
                PsnCheck::Expected => self.execute(env, stats, p),
            },
            QpType::Uc => {
                if p.hdr.bth.psn != self.resp.epsn {
                    // A gap: the message in progress is lost; resynchronise on this packet.
                    stats.rx_out_of_sequence += 1;
                    self.uc_drop_message();
                    self.resp.epsn = p.hdr.bth.psn;
                }
                if self.resp.uc_dropping && !p.info.first {
                    self.resp.epsn = p.hdr.bth.psn.next();
                    return;
                }
                self.resp.uc_dropping = false;
                self.execute(env, stats, p);
            }
        }
    }

    /// An out-of-sequence request `psn` arrived at `now`: whether to NAK the expected PSN
    /// (again). The first packet of a gap is NAKed (IBA 9.7.5). The gap stays NAKed until
    /// it is filled, as a requester cannot recover alone from a lost NAK or a lost resend
    /// before its timeout: the NAK is repeated when
    /// - a packet at or before the highest out-of-sequence PSN seen since the last NAK
    ///   arrives: the requester went back and its resend of the expected PSN was lost, or
    /// - out-of-sequence packets still arrive [`RENAK_INTERVAL_NS`] after the last NAK, at
    ///   least [`RENAK_MIN_PACKETS`] of them: the requester keeps sending new packets, so it
    ///   never got the NAK.
    ///
    /// Packets the requester sent before it went back only ever raise the highest PSN seen,
    /// so they cause no repeat within the interval; the requester also ignores a repeat that
    /// comes too soon after its rewind to be about the resend (comp.rs, `repeated_nak`).
    /// rdma_rxe NAKs once per gap and leaves the rest to the ACK timeout. After an RNR NAK the
    /// requester waits its RNR timer: no sequence NAK meanwhile.
    pub(super) fn gap_needs_nak(&mut self, psn: Psn, now: u64) -> bool {
        let resp = &mut self.resp;
        resp.ooo_since_nak = resp.ooo_since_nak.saturating_add(1);
        let again = match (resp.nak_sent, resp.seq_nak_at) {
            (false, _) => true,
            (true, None) => false,
            (true, Some(at)) => {
                !psn.after(resp.ooo_high)
                    || (now.saturating_sub(at) >= RENAK_INTERVAL_NS
                        && resp.ooo_since_nak >= RENAK_MIN_PACKETS)
            }
        };
        if again {
            resp.ooo_since_nak = 0;
        }
        if again || psn.after(resp.ooo_high) {
            resp.ooo_high = psn;
        }
        again
    }

    /// An RC duplicate request: re-acknowledge, replay a READ, or replay a saved atomic result.
    fn duplicate(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        stats.rx_duplicates += 1;
        let psn = p.hdr.bth.psn;
        match classify_duplicate(&self.resp.history, p.info.class, psn) {
            DuplicateAnswer::Ack => self.resp.ack_pending = true,
            DuplicateAnswer::ReplayRead => {
                if self.access & ACCESS_REMOTE_READ != 0 {
                    let reth = p.hdr.reth.expect("parsed RETH");
                    self.send_read_responses(env, stats, psn, &reth);
                }
            }
            DuplicateAnswer::ReplayAtomic(original) => {
                self.send_atomic_ack(env, stats, psn, original)
            }
            DuplicateAnswer::ReplayExecuted => self.send_empty_read_response(env, stats, psn),
            DuplicateAnswer::Ignore => {}
        }
    }

    /// Remembers an executed READ/atomic/FLUSH/ATOMIC WRITE for duplicates: the last
    /// max_dest_rd_atomic of them.
    pub(super) fn remember(&mut self, entry: RdAtomic) {
        self.resp.history.push_back(entry);
        while self.resp.history.len() > usize::from(self.max_dest_rd_atomic.max(1)) {
            self.resp.history.pop_front();
        }
    }

    pub(super) fn take_recv(&mut self, env: &mut dyn DeviceEnv) -> Option<RecvWr> {
        self.resp
            .spare_recv
            .take()
            .or_else(|| env.pop_recv(self.cfg.qpn))
    }

    pub(super) fn nak(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        code: NakCode,
    ) {
        // The rest of the requester's window is dropped (see gap_needs_nak for repeats).
        self.resp.nak_sent = true;
        self.resp.seq_nak_at = None;
        self.send_ack(env, stats, psn, Syndrome::Nak(code));
    }

    /// RC: RNR NAK for `psn`; the requester retries after its RNR timer.
    fn rnr_nak(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn) {
        let timer = self.min_rnr_timer;
        self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
        // Later packets of the window are dropped silently until the retry.
        self.resp.nak_sent = true;
        self.resp.seq_nak_at = None;
    }

    /// UC: the message of the packet `psn` is lost; drop packets until the next first one.
    fn uc_drop(&mut self, psn: Psn) {
        self.uc_drop_message();
        self.resp.epsn = psn.next();
    }

    pub(super) fn uc_drop_message(&mut self) {
        if let Some(InMessage::Send { wr, .. }) = self.resp.cur.take() {
            self.resp.spare_recv = Some(wr);
        }
        self.resp.uc_dropping = true;
    }

    /// A responder-side error after which the QP is in the error state (IBA 9.9.3, error
    /// classes A and C: invalid request, remote access error, remote operational error, and a
    /// local length/protection error on a receive WR). The receive WR the request used
    /// completes with `recv`'s status; without one, the owner learns of it from an affiliated
    /// asynchronous error (IBA 11.6.3.2: QP_REQ_ERR or QP_ACCESS_ERR; rdma_rxe 7.3 raises
    /// only the latter, docs/peer.md).
    pub(super) fn responder_fatal(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        code: NakCode,
        recv: Option<((u64, u16), WcStatus)>,
    ) {
        if let Some((wr, status)) = recv {
            self.complete_recv(env, wr, status, WcOpcode::Recv, 0);
        }
        let rc = self.cfg.qp_type == QpType::Rc;
        if rc {
            self.nak(env, stats, psn, code);
        }
        self.enter_error(env);
        let event = match code {
            NakCode::InvalidRequest => Some(QpAsyncError::InvalidRequest),
            NakCode::RemoteAccessError => Some(QpAsyncError::AccessViolation),
            _ => None,
        };
        if let Some(event) = event.filter(|_| rc && recv.is_none()) {
            env.qp_async_error(self.cfg.qpn, event);
        }
    }

    /// A malformed request (out of op sequence, bad length, bad alignment): RC NAKs it and
    /// the QP goes to ERR; UC drops the message.
    pub(super) fn invalid_request(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        if self.cfg.qp_type == QpType::Rc {
            self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
        } else {
            self.uc_drop(psn);
        }
    }

    /// A message that needs a receive WR found none: RC answers RNR NAK (a first packet
    /// starts its message again on the retry), UC drops the message.
    pub(super) fn no_recv_wr(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        first: bool,
    ) {
        if self.cfg.qp_type == QpType::Rc {
            if first {
                self.resp.cur = None;
            }
            self.rnr_nak(env, stats, psn);
        } else {
            stats.rx_no_recv_wr += 1;
            self.uc_drop(psn);
        }
    }

    /// A request hit a page of an on-demand region that is not present: the device asked the
    /// driver for it; RC answers RNR NAK (the requester retries after its RNR timer, the
    /// request is not executed), UC drops the message.
    pub(super) fn page_fault_rnr(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        stats.page_fault_naks += 1;
        if self.cfg.qp_type == QpType::Rc {
            self.rnr_nak(env, stats, psn);
        } else {
            self.uc_drop(psn);
        }
    }

    /// R_Key/access/bounds violation of a remote request: RC NAKs (the requester's WR fails
    /// with REM_ACCESS_ERR) and the QP goes to the error state (IBA C9-222.1.1, class C);
    /// UC drops the message (class E).
    pub(super) fn remote_access_error(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        stats.rx_remote_access_errors += 1;
        if self.cfg.qp_type == QpType::Rc {
            self.responder_fatal(env, stats, psn, NakCode::RemoteAccessError, None);
        } else {
            self.uc_drop(psn);
        }
    }

    /// The device refused a remote access: an absent on-demand page is waited for (RNR),
    /// anything else is a remote access error.
    pub(super) fn remote_refused(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        e: AccessError,
    ) {
        if let AccessError::PageFault { .. } = e {
            self.page_fault_rnr(env, stats, psn);
        } else {
            self.remote_access_error(env, stats, psn);
        }
    }

    /// A UD SEND: Q_Key check, then GRH and payload into the next receive WR.
    pub(super) fn ud_receive(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        let deth = p.hdr.deth.expect("parsed DETH");
        if deth.qkey != self.qkey {
            stats.rx_qkey_violations += 1;
            return;
        }
        let Some(wr) = env.pop_recv(self.cfg.qpn) else {
            stats.rx_no_recv_wr += 1;
            return;
        };
        // The GRH area: for IPv4 the IP header sits in its last 20 bytes (as rdma_rxe and
        // RoCEv2 HCAs do), for IPv6 the 40-byte IP header is the GRH.
        let mut grh = [0u8; GRH_LEN];
        let network_hdr = if p.ip_header.len() == IPV4_HEADER_LEN {
            grh[GRH_LEN - IPV4_HEADER_LEN..].copy_from_slice(p.ip_header);
            CQE_NETWORK_HDR_IPV4
        } else {
            grh.copy_from_slice(p.ip_header);
            CQE_NETWORK_HDR_IPV6
        };
        let pd = self.cfg.pd;
        let total = GRH_LEN + p.payload.len();
        let result = scatter(env, pd, &wr.sges, 0, &grh)
            .and_then(|()| scatter(env, pd, &wr.sges, GRH_LEN as u64, p.payload));
        let status = match result {
            Ok(()) => WcStatus::Success,
            Err(SgError::Length) => WcStatus::LocLenErr,
            // UD has no RNR: a receive buffer of an on-demand region must be present.
            Err(SgError::Access | SgError::Fault) => WcStatus::LocProtErr,
        };
        let with_imm = p.hdr.imm.is_some();
        let byte_len = if status == WcStatus::Success {
            total as u32
        } else {
            0
        };
        env.complete(Completion {
            imm: p.hdr.imm.unwrap_or(0),
            src_qp: deth.src_qpn,
            wc_flags: WC_FLAG_GRH | if with_imm { WC_FLAG_WITH_IMM } else { 0 },
            solicited: p.hdr.bth.solicited,
            network_hdr,
            ..Completion::recv(self.cfg.qpn, wr.name(), status, WcOpcode::Recv, byte_len)
        });
        if status == WcStatus::LocProtErr {
            self.enter_error(env);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::*;
    use crate::roce::wire::{self, opcode as op, Reth};

    fn psn(n: u32) -> Psn {
        Psn::from_wire(n)
    }

    #[test]
    fn psn_window_check_classifies_expected_duplicate_and_gap() {
        assert_eq!(check_psn(psn(100), psn(100)), PsnCheck::Expected);
        assert_eq!(check_psn(psn(99), psn(100)), PsnCheck::Duplicate);
        assert_eq!(check_psn(psn(101), psn(100)), PsnCheck::Gap);
        // PSNs are 24 bits and wrap: 0 follows 0xffffff.
        assert_eq!(check_psn(psn(0), psn(0xff_ffff)), PsnCheck::Gap);
        assert_eq!(check_psn(psn(0xff_ffff), psn(0)), PsnCheck::Duplicate);
        assert_eq!(check_psn(psn(5), psn(0xff_fffe)), PsnCheck::Gap);
    }

    #[test]
    fn op_sequence_check_follows_the_message_in_progress() {
        use OpcodeClass::*;
        let send = InMessage::Send {
            wr: RecvWr {
                wqe_index: 0,
                wr_id: 1,
                sges: Vec::new(),
            },
            offset: 0,
        };
        let write = InMessage::Write {
            va: 0,
            rkey: RKEY,
            remaining: 10,
            total: 10,
        };
        // Between messages: only first (or only) packets.
        for class in [Send, Write, ReadRequest, Atomic, Flush, AtomicWrite] {
            assert!(op_sequence_ok(None, class, true), "{class:?}");
        }
        assert!(!op_sequence_ok(None, Send, false));
        assert!(!op_sequence_ok(None, Write, false));
        // Inside a SEND: only its middle/last packets.
        assert!(op_sequence_ok(Some(&send), Send, false));
        assert!(!op_sequence_ok(Some(&send), Write, false));
        assert!(!op_sequence_ok(Some(&send), Send, true));
        assert!(!op_sequence_ok(Some(&send), ReadRequest, true));
        // Inside a WRITE: only its middle/last packets.
        assert!(op_sequence_ok(Some(&write), Write, false));
        assert!(!op_sequence_ok(Some(&write), Send, false));
        assert!(!op_sequence_ok(Some(&write), Atomic, true));
    }

    #[test]
    fn duplicates_are_answered_from_the_history_only() {
        use DuplicateAnswer::*;
        let history: VecDeque<RdAtomic> = [
            RdAtomic::Read {
                first_psn: psn(100),
                last_psn: psn(103),
            },
            RdAtomic::Atomic {
                psn: psn(104),
                original: 7,
            },
            RdAtomic::Executed { psn: psn(105) },
        ]
        .into();
        let class = |c, n| classify_duplicate(&history, c, psn(n));
        assert_eq!(class(OpcodeClass::ReadRequest, 100), ReplayRead);
        assert_eq!(class(OpcodeClass::ReadRequest, 103), ReplayRead);
        assert_eq!(class(OpcodeClass::ReadRequest, 99), Ignore);
        assert_eq!(class(OpcodeClass::Atomic, 104), ReplayAtomic(7));
        assert_eq!(class(OpcodeClass::Atomic, 103), Ignore);
        assert_eq!(class(OpcodeClass::Flush, 105), ReplayExecuted);
        assert_eq!(class(OpcodeClass::AtomicWrite, 105), ReplayExecuted);
        assert_eq!(class(OpcodeClass::AtomicWrite, 104), Ignore);
        assert_eq!(class(OpcodeClass::Send, 1), Ack);
        assert_eq!(class(OpcodeClass::Write, 104), Ack);
    }

    #[test]
    fn history_keeps_the_last_max_dest_rd_atomic_entries() {
        let mut qp = rts_qp(QpType::Rc);
        qp.max_dest_rd_atomic = 2;
        for n in 0..5 {
            qp.remember(RdAtomic::Executed { psn: psn(n) });
        }
        let kept: Vec<u32> = qp
            .resp
            .history
            .iter()
            .map(|h| match *h {
                RdAtomic::Executed { psn } => psn.get(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(kept, [3, 4]);
    }

    #[test]
    fn no_receive_wr_is_rnr_nak_on_rc_and_a_dropped_message_on_uc() {
        let mut env = TestEnv::new();
        let mut stats = EngineStats::default();
        let mut rc = rts_qp(QpType::Rc);
        rc.min_rnr_timer = 12;
        rc.no_recv_wr(&mut env, &mut stats, psn(100), true);
        let sent = env.sent_parsed();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].hdr.aeth.unwrap().syndrome, Syndrome::RnrNak(12));
        assert_eq!(sent[0].hdr.bth.psn, psn(100));
        assert!(rc.resp.nak_sent);
        assert_eq!(rc.resp.epsn, psn(100), "the retry brings the same PSN");
        assert_eq!((stats.rnr_naks_sent, stats.rx_no_recv_wr), (1, 0));

        let mut env = TestEnv::new();
        let mut uc = rts_qp(QpType::Uc);
        uc.no_recv_wr(&mut env, &mut stats, psn(100), true);
        assert!(env.sent.is_empty(), "UC answers nothing");
        assert!(uc.resp.uc_dropping);
        assert_eq!(uc.resp.epsn, psn(101));
        assert_eq!(stats.rx_no_recv_wr, 1);
    }

    #[test]
    fn rc_gap_is_nakked_once_and_duplicates_reacknowledged() {
        let mut env = TestEnv::new();
        let mut stats = EngineStats::default();
        let mut qp = rts_qp(QpType::Rc);
        for n in [102, 103] {
            let bytes = packet_from_peer(op::RC_SEND_ONLY, n, &[], |_| {});
            let p = wire::parse_packet(&bytes).unwrap();
            qp.responder_receive(&mut env, &mut stats, &p);
        }
        let sent = env.sent_parsed();
        assert_eq!(sent.len(), 1, "one NAK per gap");
        let aeth = sent[0].hdr.aeth.unwrap();
        assert_eq!(aeth.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(sent[0].hdr.bth.psn, psn(100), "NAK names the expected PSN");
        assert_eq!(stats.rx_out_of_sequence, 2);

        let bytes = packet_from_peer(op::RC_SEND_ONLY, 99, &[], |_| {});
        qp.responder_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
        assert_eq!(stats.rx_duplicates, 1);
        assert!(
            qp.resp.ack_pending,
            "a duplicate SEND is acknowledged again"
        );
        assert_eq!(qp.resp.epsn, psn(100));
    }

    #[test]
    fn a_gap_is_nakked_again_until_filled_when_a_resend_misses_or_the_nak_was_lost() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let mut naks = |qp: &mut Qp, env: &mut TestEnv, n: u32| {
            let bytes = packet_from_peer(op::RC_SEND_ONLY, n, &[], |_| {});
            let before = env.sent.len();
            qp.responder_receive(env, &mut stats, &wire::parse_packet(&bytes).unwrap());
            let sent = env.sent_parsed();
            assert!(sent[before..].iter().all(|p| p.hdr.aeth.unwrap().syndrome
                == Syndrome::Nak(NakCode::PsnSequenceError)
                && p.hdr.bth.psn == psn(100)));
            sent.len() - before
        };
        // 100 lost: the first packet after it is NAKed, the rest of the window is not.
        assert_eq!(naks(&mut qp, &mut env, 101), 1);
        assert_eq!(naks(&mut qp, &mut env, 102), 0);
        assert_eq!(naks(&mut qp, &mut env, 103), 0);
        // The requester went back, but its resend of 100 was lost too: 101 comes again.
        assert_eq!(
            naks(&mut qp, &mut env, 101),
            1,
            "a resend that misses the gap"
        );
        assert_eq!(naks(&mut qp, &mut env, 102), 0, "the same resend round");
        // New packets still coming long after the last NAK: the NAK was lost.
        env.now += RENAK_INTERVAL_NS;
        assert_eq!(
            naks(&mut qp, &mut env, 104),
            0,
            "one packet late is no evidence"
        );
        for n in 105..105 + RENAK_MIN_PACKETS - 3 {
            assert_eq!(naks(&mut qp, &mut env, n), 0);
        }
        let n = 105 + RENAK_MIN_PACKETS - 3;
        assert_eq!(
            naks(&mut qp, &mut env, n),
            1,
            "the NAK again: interval and packets"
        );
        // Filled: a later gap gets its own NAK.
        let bytes = packet_from_peer(op::RC_SEND_ONLY, 100, &[], |_| {});
        env.recv.push_back(RecvWr {
            wqe_index: 0,
            wr_id: 1,
            sges: Vec::new(),
        });
        qp.responder_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
        assert_eq!(qp.resp.epsn, psn(101));
        assert!(!qp.resp.nak_sent);
    }

    #[test]
    fn after_an_rnr_nak_the_gap_waits_for_the_retry() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        for n in [100, 101, 102, 101] {
            let bytes = packet_from_peer(op::RC_SEND_ONLY, n, &[], |_| {});
            qp.responder_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
        }
        let sent = env.sent_parsed();
        assert_eq!(sent.len(), 1, "one RNR NAK, no sequence NAKs behind it");
        assert!(matches!(
            sent[0].hdr.aeth.unwrap().syndrome,
            Syndrome::RnrNak(_)
        ));
    }

    #[test]
    fn duplicate_read_is_replayed_only_with_remote_read_access() {
        let mut env = TestEnv::new();
        let mut stats = EngineStats::default();
        let mut qp = rts_qp(QpType::Rc);
        qp.resp.epsn = psn(110);
        qp.remember(RdAtomic::Read {
            first_psn: psn(100),
            last_psn: psn(100),
        });
        let bytes = packet_from_peer(op::RC_READ_REQUEST, 100, &[], |h| {
            h.reth = Some(Reth {
                va: 0,
                rkey: RKEY,
                dma_len: 8,
            })
        });
        qp.responder_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
        assert_eq!(env.sent.len(), 1, "READ RESPONSE ONLY again");
        qp.access = 0;
        qp.responder_receive(&mut env, &mut stats, &wire::parse_packet(&bytes).unwrap());
        assert_eq!(env.sent.len(), 1, "access revoked since: no replay");
        assert_eq!(stats.rx_duplicates, 2);
    }
}
