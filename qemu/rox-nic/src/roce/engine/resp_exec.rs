//! The responder's execution of a request with the expected PSN: one handler per opcode
//! class (SEND, WRITE, READ, atomics, FLUSH, ATOMIC WRITE) and the responses they send.

use super::qp::Qp;
use super::resp::{InMessage, RdAtomic};
use super::sg::{scatter, SgError};
use super::wqe::{ATOMIC_BYTES, MAX_MESSAGE_BYTES};
use super::EngineStats;
use crate::roce::wire::{
    self, opcode as op, Aeth, Headers, NakCode, OpcodeClass, Parsed, Reth, Syndrome,
};
use crate::roce::*;

impl Qp {
    /// Sends READ response packets for `reth` starting at `psn`. Returns false on an access error.
    pub(super) fn send_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        reth: &Reth,
    ) -> bool {
        let mtu = self.mtu.bytes();
        let len = reth.dma_len;
        let npkts = len.div_ceil(mtu).max(1);
        // Check the whole range before the first response leaves, without reading it (the
        // device walks an on-demand region's page entries; other regions are contiguous
        // behind their key, so their bounds suffice).
        if len > 0 {
            match env.check_remote_read(
                self.cfg.pd,
                self.cfg.qpn,
                reth.rkey,
                reth.va,
                u64::from(len),
            ) {
                Ok(()) => {}
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return false;
                }
                Err(_) => {
                    self.nak(env, stats, psn, NakCode::RemoteAccessError);
                    return false;
                }
            }
        }
        let mut buf = vec![0u8; mtu.min(len) as usize];
        for i in 0..npkts {
            let offset = i * mtu;
            let chunk = (len - offset).min(mtu) as usize;
            let data = &mut buf[..chunk];
            if chunk > 0
                && env
                    .read_remote(
                        self.cfg.pd,
                        self.cfg.qpn,
                        reth.rkey,
                        reth.va.wrapping_add(u64::from(offset)),
                        data,
                    )
                    .is_err()
            {
                self.nak(env, stats, psn.add(i), NakCode::RemoteAccessError);
                return false;
            }
            let base = match (i == 0, i + 1 == npkts) {
                (true, true) => op::RC_READ_RESPONSE_ONLY,
                (true, false) => op::RC_READ_RESPONSE_FIRST,
                (false, false) => op::RC_READ_RESPONSE_MIDDLE,
                (false, true) => op::RC_READ_RESPONSE_LAST,
            };
            let mut hdr = Headers::new(self.bth(base, psn.add(i)));
            if wire::opcode_info(base).is_some_and(|info| info.aeth) {
                hdr.aeth = Some(Aeth {
                    syndrome: Syndrome::Ack,
                    msn: self.resp.msn,
                });
            }
            self.send_connected(env, stats, &hdr, data);
        }
        true
    }

    pub(super) fn send_atomic_ack(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        original: u64,
    ) {
        let mut hdr = Headers::new(self.bth(op::RC_ATOMIC_ACKNOWLEDGE, psn));
        hdr.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: self.resp.msn,
        });
        hdr.atomic_ack = Some(original);
        self.send_connected(env, stats, &hdr, &[]);
    }

    /// The response to a FLUSH or ATOMIC WRITE: a READ RESPONSE ONLY without data (IBA A19).
    pub(super) fn send_empty_read_response(
        &self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        let mut hdr = Headers::new(self.bth(op::RC_READ_RESPONSE_ONLY, psn));
        hdr.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: self.resp.msn,
        });
        self.send_connected(env, stats, &hdr, &[]);
    }

    /// Executes the request with the expected PSN (RC and UC).
    pub(super) fn execute(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        let rc = self.cfg.qp_type == QpType::Rc;
        let bth = p.hdr.bth;
        let psn = bth.psn;
        let base = bth.opcode & op::OP_MASK;
        let in_send = matches!(self.resp.cur, Some(InMessage::Send { .. }));
        let in_write = matches!(self.resp.cur, Some(InMessage::Write { .. }));
        let is_send = p.info.class == OpcodeClass::Send;
        let is_write = p.info.class == OpcodeClass::Write;
        let continues = !p.info.first;
        let sequence_ok = if continues {
            (is_send && in_send) || (is_write && in_write)
        } else {
            !in_send && !in_write
        };
        if !sequence_ok {
            if rc {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
            } else {
                self.uc_drop_message();
                self.resp.epsn = psn.next();
            }
            return;
        }
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        if is_send {
            if p.info.first {
                let Some(wr) = self.take_recv(env) else {
                    if rc {
                        let timer = self.min_rnr_timer;
                        self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
                        // Later packets of the window are dropped silently until the retry.
                        self.resp.nak_sent = true;
                    } else {
                        stats.rx_no_recv_wr += 1;
                        self.resp.uc_dropping = true;
                        self.resp.epsn = psn.next();
                    }
                    return;
                };
                self.resp.cur = Some(InMessage::Send { wr, offset: 0 });
            }
            let Some(InMessage::Send { wr, offset }) = &mut self.resp.cur else {
                unreachable!("checked")
            };
            // The key a SEND with invalidate names is checked before its last packet is
            // placed; it is invalidated only once the whole message has been.
            let bad_invalidation = p.info.last
                && p.hdr
                    .ieth
                    .is_some_and(|rkey| env.check_invalidate(pd, qpn, rkey, true).is_err());
            if bad_invalidation {
                let wr_id = wr.wr_id;
                self.resp.cur = None;
                self.responder_fatal(
                    env,
                    stats,
                    psn,
                    NakCode::InvalidRequest,
                    Some((wr_id, WcStatus::LocQpOpErr)),
                );
                return;
            }
            match scatter(env, pd, &wr.sges, *offset, p.payload) {
                Ok(()) => *offset += p.payload.len() as u64,
                Err(SgError::Fault) => {
                    // Nothing of this packet was written; the first packet gives its receive
                    // WR back for the retry.
                    if p.info.first {
                        if let Some(InMessage::Send { wr, .. }) = self.resp.cur.take() {
                            self.resp.spare_recv = Some(wr);
                        }
                    }
                    self.page_fault_rnr(env, stats, psn);
                    return;
                }
                Err(e) => {
                    let wr_id = wr.wr_id;
                    self.resp.cur = None;
                    let (code, status) = match e {
                        SgError::Length => (NakCode::InvalidRequest, WcStatus::LocLenErr),
                        SgError::Access | SgError::Fault => {
                            (NakCode::RemoteOperationalError, WcStatus::LocProtErr)
                        }
                    };
                    self.responder_fatal(env, stats, psn, code, Some((wr_id, status)));
                    return;
                }
            }
            if p.info.last {
                let Some(InMessage::Send { wr, offset }) = self.resp.cur.take() else {
                    unreachable!("checked")
                };
                if let Some(rkey) = p.hdr.ieth {
                    // Checked before the packet was placed; nothing ran in between.
                    let done = env.invalidate(pd, qpn, rkey, true);
                    debug_assert!(done.is_ok(), "invalidation checked: {done:?}");
                }
                let (imm, wc_flags) = match (p.hdr.imm, p.hdr.ieth) {
                    (Some(imm), _) => (imm, WC_FLAG_WITH_IMM),
                    (None, Some(rkey)) => (rkey.get(), WC_FLAG_WITH_INV),
                    (None, None) => (0, 0),
                };
                env.complete(Completion {
                    imm,
                    wc_flags,
                    solicited: bth.solicited,
                    ..Completion::recv(
                        self.cfg.qpn,
                        wr.wr_id,
                        WcStatus::Success,
                        WcOpcode::Recv,
                        offset as u32,
                    )
                });
                self.resp.msn = self.resp.msn.next();
            }
        } else if is_write {
            if p.info.first {
                let reth = p.hdr.reth.expect("parsed RETH");
                if self.access & ACCESS_REMOTE_WRITE == 0 {
                    self.remote_access_error(env, stats, psn);
                    return;
                }
                self.resp.cur = Some(InMessage::Write {
                    va: reth.va,
                    rkey: reth.rkey,
                    remaining: u64::from(reth.dma_len),
                    total: reth.dma_len,
                });
            }
            let Some(InMessage::Write { remaining, .. }) = &self.resp.cur else {
                unreachable!("checked")
            };
            let too_long = p.payload.len() as u64 > *remaining;
            let short_last = p.info.last && (p.payload.len() as u64) < *remaining;
            if too_long || short_last {
                self.resp.cur = None;
                if rc {
                    self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                } else {
                    self.uc_drop_message();
                    self.resp.epsn = psn.next();
                }
                return;
            }
            // The first packet checks the whole RETH range before any byte lands (as the IBA
            // responder, rxe's check_rkey and the READ path do): a WRITE that overruns its
            // target writes nothing. Later packets stay inside it (`remaining`).
            let reth = p.hdr.reth.filter(|reth| p.info.first && reth.dma_len > 0);
            if let Some(reth) = reth {
                let len = u64::from(reth.dma_len);
                if let Err(e) = env.check_remote_write(pd, qpn, reth.rkey, reth.va, len) {
                    self.resp.cur = None;
                    if let AccessError::PageFault { .. } = e {
                        self.page_fault_rnr(env, stats, psn);
                    } else {
                        self.remote_access_error(env, stats, psn);
                    }
                    return;
                }
            }
            // WRITE with immediate consumes a receive WR; get it before touching memory so an
            // RNR NAK leaves nothing half-done.
            let recv = if p.hdr.imm.is_some() {
                match self.take_recv(env) {
                    Some(wr) => Some(wr),
                    None => {
                        if rc {
                            if p.info.first {
                                // The retransmitted first packet starts the message again.
                                self.resp.cur = None;
                            }
                            let timer = self.min_rnr_timer;
                            self.send_ack(env, stats, psn, Syndrome::RnrNak(timer));
                            // Later packets of the window are dropped silently until the retry.
                            self.resp.nak_sent = true;
                        } else {
                            stats.rx_no_recv_wr += 1;
                            self.uc_drop_message();
                            self.resp.epsn = psn.next();
                        }
                        return;
                    }
                }
            } else {
                None
            };
            let Some(InMessage::Write {
                va,
                rkey,
                remaining,
                total,
            }) = &mut self.resp.cur
            else {
                unreachable!("checked")
            };
            if !p.payload.is_empty() {
                match env.write_remote(pd, qpn, *rkey, *va, p.payload) {
                    Ok(()) => {}
                    Err(AccessError::PageFault { .. }) => {
                        // Not written: the retry of this packet starts over from here.
                        if let Some(wr) = recv {
                            self.resp.spare_recv = Some(wr);
                        }
                        if p.info.first {
                            self.resp.cur = None;
                        }
                        self.page_fault_rnr(env, stats, psn);
                        return;
                    }
                    Err(_) => {
                        if let Some(wr) = recv {
                            self.resp.spare_recv = Some(wr);
                        }
                        self.resp.cur = None;
                        self.remote_access_error(env, stats, psn);
                        return;
                    }
                }
                *va = va.wrapping_add(p.payload.len() as u64);
                *remaining -= p.payload.len() as u64;
            }
            let total = *total;
            if p.info.last {
                self.resp.cur = None;
                if let Some(wr) = recv {
                    env.complete(Completion {
                        imm: p.hdr.imm.unwrap_or(0),
                        wc_flags: WC_FLAG_WITH_IMM,
                        solicited: bth.solicited,
                        ..Completion::recv(
                            self.cfg.qpn,
                            wr.wr_id,
                            WcStatus::Success,
                            WcOpcode::RecvRdmaWithImm,
                            total,
                        )
                    });
                }
                self.resp.msn = self.resp.msn.next();
            }
        } else if p.info.class == OpcodeClass::ReadRequest {
            let reth = p.hdr.reth.expect("parsed RETH");
            if self.max_dest_rd_atomic == 0 || u64::from(reth.dma_len) > MAX_MESSAGE_BYTES {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            }
            if self.access & ACCESS_REMOTE_READ == 0 {
                self.remote_access_error(env, stats, psn);
                return;
            }
            let npkts = reth.dma_len.div_ceil(self.mtu.bytes()).max(1);
            self.resp.msn = self.resp.msn.next();
            if !self.send_read_responses(env, stats, psn, &reth) {
                self.resp.msn = self.resp.msn.prev();
                return;
            }
            self.remember(RdAtomic::Read {
                first_psn: psn,
                last_psn: psn.add(npkts - 1),
            });
            self.resp.epsn = psn.add(npkts);
            self.resp.nak_sent = false;
            return;
        } else if p.info.class == OpcodeClass::Flush {
            let feth = p.hdr.feth.expect("parsed FETH");
            let reth = p.hdr.reth.expect("parsed RETH");
            let flush = FlushSpec {
                length: reth.dma_len,
                placement_type: feth.placement_type,
                level: feth.selectivity_level,
            };
            if self.max_dest_rd_atomic == 0 || !flush.is_valid() {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            }
            let need = flush.required_access();
            if self.access & need != need
                || env
                    .flush_remote(pd, qpn, reth.rkey, reth.va, flush)
                    .is_err()
            {
                self.remote_access_error(env, stats, psn);
                return;
            }
            self.finish_executed(env, stats, psn);
            return;
        } else if p.info.class == OpcodeClass::AtomicWrite {
            let reth = p.hdr.reth.expect("parsed RETH");
            let value: Option<[u8; ATOMIC_BYTES]> = p.payload.try_into().ok();
            let Some(value) = value.filter(|_| {
                self.max_dest_rd_atomic != 0
                    && reth.dma_len == ATOMIC_BYTES as u32
                    && reth.va.is_multiple_of(ATOMIC_BYTES as u64)
            }) else {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            };
            let write = AtomicOp::Write {
                value: u64::from_ne_bytes(value),
            };
            if self.access & ACCESS_REMOTE_WRITE == 0 {
                self.remote_access_error(env, stats, psn);
                return;
            }
            match env.atomic_remote(pd, qpn, reth.rkey, reth.va, write) {
                Ok(_) => {}
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return;
                }
                Err(_) => {
                    self.remote_access_error(env, stats, psn);
                    return;
                }
            }
            self.finish_executed(env, stats, psn);
            return;
        } else {
            // Atomics.
            let a = p.hdr.atomic_eth.expect("parsed AtomicETH");
            if self.max_dest_rd_atomic == 0 || !a.va.is_multiple_of(ATOMIC_BYTES as u64) {
                self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, None);
                return;
            }
            if self.access & ACCESS_REMOTE_ATOMIC == 0 {
                self.remote_access_error(env, stats, psn);
                return;
            }
            let atomic = if base == op::RC_COMPARE_SWAP {
                AtomicOp::CompareSwap {
                    compare: a.compare,
                    swap: a.swap_add,
                }
            } else {
                AtomicOp::FetchAdd { add: a.swap_add }
            };
            let original = match env.atomic_remote(pd, qpn, a.rkey, a.va, atomic) {
                Ok(v) => v,
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return;
                }
                Err(_) => {
                    self.remote_access_error(env, stats, psn);
                    return;
                }
            };
            self.resp.msn = self.resp.msn.next();
            self.remember(RdAtomic::Atomic { psn, original });
            self.send_atomic_ack(env, stats, psn, original);
            self.resp.epsn = psn.next();
            self.resp.nak_sent = false;
            return;
        }
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
        if rc && bth.ack_req {
            self.resp.ack_pending = true;
        }
    }

    /// A FLUSH / ATOMIC WRITE was executed: count the message, remember it for duplicates,
    /// answer it and expect the next PSN.
    pub(super) fn finish_executed(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        self.resp.msn = self.resp.msn.next();
        self.remember(RdAtomic::Executed { psn });
        self.send_empty_read_response(env, stats, psn);
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
    }
}
