//! The engine's congestion control hooks (the algorithm is `crate::roce::cc`): the
//! notification point answering CE-marked packets with CNPs, the reaction point taking CNPs,
//! and the pacing at its QP's DCQCN rate of what a QP sends as data: its requests (the
//! requester asks [`crate::roce::cc::QpCc::paced_until`] itself) and its READ responses
//! (here: [`PacedReads`]).

use std::collections::VecDeque;

use super::qp::Qp;
use super::{Engine, EngineStats, RxDrop};
use crate::roce::cc::{ECN_CE, ECN_MASK};
use crate::roce::wire::DEFAULT_PKEY;
use crate::roce::wire::{self, opcode as op, Aeth, Bth, Headers, Parsed, Reth, Syndrome};
use crate::roce::*;

/// A CNP's reserved bytes, sent as zeros.
const CNP_RESERVED: [u8; op::CNP_RESERVED_LEN] = [0; op::CNP_RESERVED_LEN];
/// The DSCP is the traffic class's upper 6 bits, above the 2 ECN bits.
const DSCP_SHIFT: u8 = 2;
const DSCP_MAX: u8 = 0x3f;

impl Engine {
    /// Counts a received RoCE packet marked Congestion Experienced (whatever then becomes
    /// of it). Returns whether it was.
    pub(super) fn note_ce(&mut self, p: &Parsed<'_>) -> bool {
        let ce = wire::ecn_of(p.ip_header) & ECN_MASK == ECN_CE;
        if ce {
            self.stats.np_ecn_marked_roce_packets += 1;
        }
        ce
    }

    /// A CNP for one of this device's QPs: the reaction point of an RC/UC QP connected to
    /// the CNP's sender cuts its rate (congestion control on) or counts it ignored (off).
    /// Any other CNP is dropped and counted, and affects nothing else.
    pub(super) fn receive_cnp(
        &mut self,
        env: &mut dyn DeviceEnv,
        p: &Parsed<'_>,
    ) -> Result<(), RxDrop> {
        let qpn = p.hdr.bth.dest_qpn;
        let qp = self.qps.get_mut(&qpn).filter(|qp| {
            matches!(qp.cfg.qp_type, QpType::Rc | QpType::Uc)
                && qp.av.is_some_and(|av| av.dgid == p.sgid)
        });
        let Some(qp) = qp else {
            self.stats.rx_cnp_dropped += 1;
            return Err(RxDrop::UnwantedCnp(qpn));
        };
        if qp.cc.enabled {
            self.stats.rp_cnp_handled += 1;
            qp.cc.on_cnp(env.now_ns());
        } else {
            self.stats.rp_cnp_ignored += 1;
        }
        Ok(())
    }
}

impl Qp {
    /// The notification point: a CE-marked packet arrived for this QP. An RC/UC QP with
    /// congestion control on tells its peer's QP with a CNP, at most one per
    /// min_time_between_cnps.
    pub(super) fn congestion_experienced(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
    ) {
        // A QP before RTR has no peer to tell; one in ERR tells nobody.
        let connected = matches!(self.cfg.qp_type, QpType::Rc | QpType::Uc) && self.can_receive();
        let Some(mut av) = self.av.filter(|_| connected && self.cc.enabled) else {
            return;
        };
        if !self.cc.cnp_due(env.now_ns()) {
            return;
        }
        // The CNP's DSCP is the notification point's, not the QP's (its ECN: Not-ECT).
        let dscp = self.cc.params.cnp_dscp as u8 & DSCP_MAX;
        av.traffic_class = dscp << DSCP_SHIFT;
        // Not `self.bth`: an XRC QP's CNP is a CNP too, and it names no PSN (A17.9.3).
        let hdr = Headers::new(Bth {
            opcode: op::CNP,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: self.dest_qpn,
            ack_req: false,
            psn: Psn::default(),
        });
        stats.np_cnp_sent += 1;
        self.transmit_packet(env, stats, &av, &hdr, &CNP_RESERVED);
    }
}

/// The responses of one READ (or of a replayed part of one) still to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReadStream {
    /// The PSN of response 0, and the range it reads.
    pub(super) psn: Psn,
    pub(super) reth: Reth,
    /// Response packets of the READ as asked (their opcodes follow from it), the next one to
    /// send, and where to stop (before `npkts` when a retry asked for the rest again).
    pub(super) npkts: u32,
    pub(super) next: u32,
    pub(super) end: u32,
    /// The MSN its AETHs carry: the READ's own, whatever the responder executed since.
    pub(super) msn: Msn,
}

/// One response a QP owes behind paced READ responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owed {
    /// READ responses, sent at the QP's rate.
    Read(ReadStream),
    /// A response without data (ACK, NAK, RNR NAK, atomic ACK, empty READ response).
    Response(Headers),
}

/// The responses a cut QP owes, oldest first. DCQCN limits what a QP sends, and a READ's
/// responses are data its responder sends, so they take the QP's rate as its requests do (on
/// mlx5 the requester of a READ answers CE-marked responses with CNPs to this QP). Responses
/// leave in PSN order: while READ responses wait, every other response of the QP waits behind
/// them (a response past a READ's PSNs would tell the requester its responses were lost, and
/// it would ask for the READ again), and the QP's coalesced ACK waits for them all.
#[derive(Debug, Default)]
pub(super) struct PacedReads {
    queue: VecDeque<Owed>,
    /// When the first waiting response may go: an engine timer.
    pub(super) wake_at: Option<u64>,
}

impl PacedReads {
    pub(super) fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Forgets every waiting response at `psn` or later: a duplicate READ from `psn` asks
    /// for them again (the requester resends from its first missing response on), and a
    /// READ that failed at `psn` ends its responder's answers there (a NAK).
    pub(super) fn forget_from(&mut self, psn: Psn) {
        self.queue.retain_mut(|owed| match owed {
            Owed::Read(s) => {
                let keep = psn.diff(s.psn).max(0) as u32;
                s.end = s.end.min(keep);
                s.next < s.end
            }
            Owed::Response(hdr) => hdr.bth.psn.before(psn),
        });
        if self.queue.is_empty() {
            self.wake_at = None;
        }
    }
}

impl Qp {
    /// Sends the responses of `stream` (its range checked): all at once while the QP is not
    /// cut, else as its rate allows, the rest waiting for [`Qp::resume_read_responses`].
    /// Returns false if reading the memory failed (a NAK was sent).
    pub(super) fn read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        stream: ReadStream,
    ) -> bool {
        self.paced_reads.forget_from(stream.psn.add(stream.next));
        if self.paced_reads.pending() {
            self.paced_reads.queue.push_back(Owed::Read(stream));
            return true;
        }
        self.stream_read_responses(env, stats, stream)
    }

    /// Sends a response without data now, or behind the READ responses still waiting.
    pub(super) fn send_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        hdr: Headers,
    ) {
        if self.paced_reads.pending() {
            self.paced_reads.queue.push_back(Owed::Response(hdr));
        } else {
            self.send_connected(env, stats, &hdr, &[]);
        }
    }

    /// Sends from `s` until it ends or the QP's rate holds the next response (then `s` waits
    /// at the head of the queue and the QP's pacing timer is set).
    fn stream_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        mut s: ReadStream,
    ) -> bool {
        let mtu = self.mtu.bytes();
        let mut buf = vec![0u8; mtu.min(s.reth.dma_len) as usize];
        while s.next < s.end {
            if self.cc.rp.is_some() {
                if let Some(until) = self.cc.paced_until(env.now_ns()) {
                    self.paced_reads.queue.push_front(Owed::Read(s));
                    self.paced_reads.wake_at = Some(until);
                    return true;
                }
            }
            let bytes_before = stats.tx_bytes;
            if !self.send_read_response(env, stats, &s, &mut buf) {
                return false;
            }
            if self.cc.rp.is_some() {
                self.cc.sent(stats.tx_bytes - bytes_before, env.now_ns());
            }
            s.next += 1;
        }
        true
    }

    /// Response `s.next` of a READ: its data read from memory now.
    fn send_read_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        s: &ReadStream,
        buf: &mut [u8],
    ) -> bool {
        let mtu = self.mtu.bytes();
        let (i, psn) = (s.next, s.psn.add(s.next));
        let offset = i * mtu;
        let chunk = (s.reth.dma_len - offset).min(mtu) as usize;
        let data = &mut buf[..chunk];
        let target = self.remote_target(s.reth.rkey, s.reth.va);
        if chunk > 0
            && env
                .read_remote(target.offset(u64::from(offset)), data)
                .is_err()
        {
            // The responses waiting behind are answered by the NAK.
            self.paced_reads.forget_from(psn);
            self.remote_access_error(env, stats, psn);
            return false;
        }
        let base = match (i == 0, i + 1 == s.npkts) {
            (true, true) => op::RC_READ_RESPONSE_ONLY,
            (true, false) => op::RC_READ_RESPONSE_FIRST,
            (false, false) => op::RC_READ_RESPONSE_MIDDLE,
            (false, true) => op::RC_READ_RESPONSE_LAST,
        };
        let mut hdr = Headers::new(self.bth(base, psn));
        if wire::opcode_info(base).is_some_and(|info| info.aeth) {
            hdr.aeth = Some(Aeth {
                syndrome: Syndrome::Ack,
                msn: s.msn,
            });
        }
        self.send_connected(env, stats, &hdr, data);
        true
    }

    /// The pacing timer of waiting READ responses (`Engine::poll`): sends them in order as
    /// the rate allows. A QP that can no longer respond drops them.
    pub(super) fn resume_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
    ) {
        if self.paced_reads.wake_at.is_none_or(|t| env.now_ns() < t) {
            return;
        }
        self.paced_reads.wake_at = None;
        while let Some(owed) = self.paced_reads.queue.pop_front() {
            if !self.can_receive() {
                self.paced_reads = PacedReads::default();
                return;
            }
            match owed {
                Owed::Response(hdr) => self.send_connected(env, stats, &hdr, &[]),
                Owed::Read(s) => {
                    let sent_all = self.stream_read_responses(env, stats, s);
                    if self.paced_reads.wake_at.is_some() || !sent_all {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
