//! The responder (as rxe_resp.c): PSN and op-sequence checks, duplicates, NAKs, and UD
//! receives; the requests themselves are executed in resp_exec.rs.

use std::collections::VecDeque;

use super::qp::Qp;
use super::sg::{scatter, SgError};
use super::EngineStats;
use crate::roce::wire::{NakCode, OpcodeClass, Parsed, Syndrome, GRH_LEN, IPV4_HEADER_LEN};
use crate::roce::*;
use rox_uapi::queue::{CQE_NETWORK_HDR_IPV4, CQE_NETWORK_HDR_IPV6};

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
    /// A PSN-sequence NAK was sent for the current epsn (one per gap).
    pub(super) nak_sent: bool,
    /// UC: drop packets until the next first/only packet.
    pub(super) uc_dropping: bool,
    pub(super) history: VecDeque<RdAtomic>,
}

impl Qp {
    pub(super) fn nak(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        code: NakCode,
    ) {
        // One NAK per expected PSN: the rest of the requester's window is dropped silently.
        self.resp.nak_sent = true;
        self.send_ack(env, stats, psn, Syndrome::Nak(code));
    }

    /// A responder-side error of class "QP goes to error" (invalid request, remote operational
    /// error, local length/protection error on a receive WR).
    pub(super) fn responder_fatal(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        code: NakCode,
        recv: Option<(u64, WcStatus)>,
    ) {
        if let Some((wr_id, status)) = recv {
            self.complete_recv(env, wr_id, status, WcOpcode::Recv, 0);
        }
        if self.cfg.qp_type == QpType::Rc {
            self.nak(env, stats, psn, code);
        }
        self.enter_error(env);
    }

    pub(super) fn take_recv(&mut self, env: &mut dyn DeviceEnv) -> Option<RecvWr> {
        self.resp
            .spare_recv
            .take()
            .or_else(|| env.pop_recv(self.cfg.qpn))
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
            let timer = self.min_rnr_timer;
            self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
            // Later packets of the window are dropped silently until the retry.
            self.resp.nak_sent = true;
        } else {
            self.uc_drop_message();
            self.resp.epsn = psn.next();
        }
    }

    pub(super) fn remember(&mut self, entry: RdAtomic) {
        self.resp.history.push_back(entry);
        while self.resp.history.len() > usize::from(self.max_dest_rd_atomic.max(1)) {
            self.resp.history.pop_front();
        }
    }

    /// An RC duplicate request: re-acknowledge, replay a READ, or replay a saved atomic result.
    pub(super) fn duplicate(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        stats.rx_duplicates += 1;
        let psn = p.hdr.bth.psn;
        match p.info.class {
            OpcodeClass::ReadRequest => {
                let known = self.resp.history.iter().any(|h| match *h {
                    RdAtomic::Read {
                        first_psn,
                        last_psn,
                    } => psn.within(first_psn, last_psn),
                    RdAtomic::Atomic { .. } | RdAtomic::Executed { .. } => false,
                });
                if known && self.access & ACCESS_REMOTE_READ != 0 {
                    let reth = p.hdr.reth.expect("parsed RETH");
                    self.send_read_responses(env, stats, psn, &reth);
                }
            }
            OpcodeClass::Atomic => {
                let saved = self.resp.history.iter().find_map(|h| match *h {
                    RdAtomic::Atomic {
                        psn: saved_psn,
                        original,
                    } if saved_psn == psn => Some(original),
                    _ => None,
                });
                if let Some(original) = saved {
                    self.send_atomic_ack(env, stats, psn, original);
                }
            }
            OpcodeClass::Flush | OpcodeClass::AtomicWrite => {
                // Executed once; a duplicate (its response was lost) is answered again.
                let known = self
                    .resp
                    .history
                    .iter()
                    .any(|h| matches!(*h, RdAtomic::Executed { psn: saved } if saved == psn));
                if known {
                    self.send_empty_read_response(env, stats, psn);
                }
            }
            _ => self.resp.ack_pending = true,
        }
    }

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
            QpType::Rc => {
                let diff = p.hdr.bth.psn.diff(self.resp.epsn);
                if diff > 0 {
                    stats.rx_out_of_sequence += 1;
                    if !self.resp.nak_sent {
                        self.resp.nak_sent = true;
                        let epsn = self.resp.epsn;
                        self.nak(env, stats, epsn, NakCode::PsnSequenceError);
                    }
                } else if diff < 0 {
                    self.duplicate(env, stats, p);
                } else {
                    self.execute(env, stats, p);
                }
            }
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

    pub(super) fn uc_drop_message(&mut self) {
        if let Some(InMessage::Send { wr, .. }) = self.resp.cur.take() {
            self.resp.spare_recv = Some(wr);
        }
        self.resp.uc_dropping = true;
    }

    /// R_Key/access/bounds violation of a remote request: RC NAKs (the requester's WR fails
    /// with REM_ACCESS_ERR); UC drops the message.
    pub(super) fn remote_access_error(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        if self.cfg.qp_type == QpType::Rc {
            self.nak(env, stats, psn, NakCode::RemoteAccessError);
        } else {
            self.uc_drop_message();
            self.resp.epsn = psn.next();
        }
    }

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
            ..Completion::recv(self.cfg.qpn, wr.wr_id, status, WcOpcode::Recv, byte_len)
        });
        if status == WcStatus::LocProtErr {
            self.enter_error(env);
        }
    }
}
