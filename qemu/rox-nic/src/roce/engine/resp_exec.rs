//! The responder's execution of a request with the expected PSN: one handler per opcode
//! class (SEND, WRITE, READ, atomics, FLUSH, ATOMIC WRITE) and the responses they send.

use super::qp::Qp;
use super::resp::{op_sequence_ok, InMessage, RdAtomic};
use super::sg::{scatter, SgError};
use super::wqe::{ATOMIC_BYTES, MAX_MESSAGE_BYTES};
use super::EngineStats;
use crate::roce::wire::{
    opcode as op, Aeth, Bth, Headers, NakCode, OpcodeClass, Parsed, Reth, Syndrome,
};
use crate::roce::*;

/// Counts an in-sequence request message by kind (`rx_*_requests`) at its first packet.
fn count_request(stats: &mut EngineStats, p: &Parsed<'_>) {
    if !p.info.first {
        return;
    }
    match p.info.class {
        OpcodeClass::Write => stats.rx_write_requests += 1,
        OpcodeClass::ReadRequest => stats.rx_read_requests += 1,
        OpcodeClass::Atomic | OpcodeClass::AtomicWrite => stats.rx_atomic_requests += 1,
        _ => {}
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

impl Qp {
    /// Sends READ response packets for `reth` starting at `psn` (paced at the QP's rate:
    /// congestion.rs). Returns false on an access error.
    pub(super) fn send_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
        reth: &Reth,
    ) -> bool {
        let len = reth.dma_len;
        let npkts = len.div_ceil(self.mtu.bytes()).max(1);
        // Check the whole range before the first response leaves, without reading it (the
        // device walks an on-demand region's page entries; other regions are contiguous
        // behind their key, so their bounds suffice).
        if len > 0 {
            match env.check_remote_read(self.remote_target(reth.rkey, reth.va), u64::from(len)) {
                Ok(()) => {}
                Err(AccessError::PageFault { .. }) => {
                    self.page_fault_rnr(env, stats, psn);
                    return false;
                }
                Err(_) => {
                    self.remote_access_error(env, stats, psn);
                    return false;
                }
            }
        }
        let stream = ReadStream {
            psn,
            reth: *reth,
            npkts,
            next: 0,
            end: npkts,
            msn: self.resp.msn,
        };
        self.read_responses(env, stats, stream)
    }

    /// Sends from `s` until it ends or the QP's rate holds the next response (then `s` waits
    /// at the head of the queue and the QP's pacing timer is set).
    pub(super) fn stream_read_responses(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        mut s: ReadStream,
    ) -> bool {
        let mtu = self.mtu.bytes();
        let mut buf = vec![0u8; mtu.min(s.reth.dma_len) as usize];
        while s.next < s.end {
            if self.read_response_held(env.now_ns(), s) {
                return true;
            }
            let bytes_before = stats.tx_bytes;
            if !self.send_read_response(env, stats, &s, &mut buf) {
                return false;
            }
            self.read_response_sent(stats.tx_bytes - bytes_before, env.now_ns());
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
        self.send_answer(env, stats, &hdr, data);
        true
    }

    pub(super) fn send_atomic_ack(
        &mut self,
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
        self.send_response(env, stats, hdr);
    }

    /// The response to a FLUSH or ATOMIC WRITE: a READ RESPONSE ONLY without data (IBA A19).
    pub(super) fn send_empty_read_response(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        psn: Psn,
    ) {
        let mut hdr = Headers::new(self.bth(op::RC_READ_RESPONSE_ONLY, psn));
        hdr.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: self.resp.msn,
        });
        self.send_response(env, stats, hdr);
    }

    /// Executes the request with the expected PSN (RC and UC).
    pub(super) fn execute(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        if !op_sequence_ok(self.resp.cur.as_ref(), p.info.class, p.info.first) {
            self.invalid_request(env, stats, p.hdr.bth.psn);
            return;
        }
        count_request(stats, p);
        match p.info.class {
            OpcodeClass::Send => self.exec_send(env, stats, p),
            OpcodeClass::Write => self.exec_write(env, stats, p),
            OpcodeClass::ReadRequest => self.exec_read(env, stats, p),
            OpcodeClass::Atomic => self.exec_atomic(env, stats, p),
            OpcodeClass::Flush => self.exec_flush(env, stats, p),
            OpcodeClass::AtomicWrite => self.exec_atomic_write(env, stats, p),
            // Responses go to the completer, CNPs to congestion control (recv.rs); a
            // responder never sees one.
            OpcodeClass::ReadResponse
            | OpcodeClass::Ack
            | OpcodeClass::AtomicAck
            | OpcodeClass::Cnp => {}
        }
    }

    /// A SEND or WRITE packet was placed: expect the next PSN, and ACK it at the next poll if
    /// it asked for an ACK.
    fn packet_placed(&mut self, bth: &Bth) {
        self.resp.epsn = bth.psn.next();
        self.resp.nak_sent = false;
        if self.cfg.qp_type == QpType::Rc && bth.ack_req {
            self.resp.ack_pending = true;
        }
    }

    /// A SEND packet: the first takes a receive WR, each is scattered into it, the last
    /// completes it (after invalidating the R_Key a SEND with invalidate names).
    fn exec_send(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let psn = p.hdr.bth.psn;
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
        if p.info.first {
            let Some(wr) = self.take_recv(env) else {
                self.no_recv_wr(env, stats, psn, true);
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
            let wr = wr.name();
            self.resp.cur = None;
            let recv = Some((wr, WcStatus::LocQpOpErr));
            self.responder_fatal(env, stats, psn, NakCode::InvalidRequest, recv);
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
                let wr = wr.name();
                self.resp.cur = None;
                let (code, status) = match e {
                    SgError::Length => (NakCode::InvalidRequest, WcStatus::LocLenErr),
                    SgError::Access | SgError::Fault => {
                        (NakCode::RemoteOperationalError, WcStatus::LocProtErr)
                    }
                };
                self.responder_fatal(env, stats, psn, code, Some((wr, status)));
                return;
            }
        }
        if p.info.last {
            self.complete_send(env, p);
        }
        self.packet_placed(&p.hdr.bth);
    }

    /// The last packet of a SEND was placed: invalidate, complete the receive WR, count the
    /// message.
    fn complete_send(&mut self, env: &mut dyn DeviceEnv, p: &Parsed<'_>) {
        let Some(InMessage::Send { wr, offset }) = self.resp.cur.take() else {
            unreachable!("checked")
        };
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
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
            solicited: p.hdr.bth.solicited,
            ..Completion::recv(
                qpn,
                wr.name(),
                WcStatus::Success,
                WcOpcode::Recv,
                offset as u32,
            )
        });
        env.recycle_sges(wr.sges);
        self.resp.msn = self.resp.msn.next();
    }

    /// A WRITE packet: checked (access, range, length), written, and on the last packet of a
    /// WRITE with immediate the receive WR it consumes completes.
    fn exec_write(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let psn = p.hdr.bth.psn;
        if !self.write_accepted(env, stats, p) {
            return;
        }
        // WRITE with immediate consumes a receive WR; get it before touching memory so an
        // RNR NAK leaves nothing half-done.
        let recv = match p.hdr.imm {
            None => None,
            Some(_) => match self.take_recv(env) {
                Some(wr) => Some(wr),
                None => {
                    self.no_recv_wr(env, stats, psn, p.info.first);
                    return;
                }
            },
        };
        let (pd, qpn) = (self.cfg.pd, self.cfg.qpn);
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
            if let Err(e) = env.write_remote(
                RemoteTarget {
                    pd,
                    qpn,
                    key: *rkey,
                    va: *va,
                },
                p.payload,
            ) {
                // Not written: the retry of this packet starts over from here with the
                // same receive WR.
                if let Some(wr) = recv {
                    self.resp.spare_recv = Some(wr);
                }
                let fault = matches!(e, AccessError::PageFault { .. });
                if p.info.first || !fault {
                    self.resp.cur = None;
                }
                self.remote_refused(env, stats, psn, e);
                return;
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
                    solicited: p.hdr.bth.solicited,
                    ..Completion::recv(
                        qpn,
                        wr.name(),
                        WcStatus::Success,
                        WcOpcode::RecvRdmaWithImm,
                        total,
                    )
                });
            }
            self.resp.msn = self.resp.msn.next();
        }
        self.packet_placed(&p.hdr.bth);
    }

    /// The checks of a WRITE packet before any byte lands: the QP's access and (first packet)
    /// the whole RETH range, and the packet's length against what the message has left.
    /// False: the packet was answered (NAK) or dropped.
    fn write_accepted(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) -> bool {
        let psn = p.hdr.bth.psn;
        if p.info.first {
            let reth = p.hdr.reth.expect("parsed RETH");
            if self.access & ACCESS_REMOTE_WRITE == 0 {
                self.remote_access_error(env, stats, psn);
                return false;
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
            self.invalid_request(env, stats, psn);
            return false;
        }
        // The first packet checks the whole RETH range before any byte lands (as the IBA
        // responder, rxe's check_rkey and the READ path do): a WRITE that overruns its
        // target writes nothing. Later packets stay inside it (`remaining`). A WRITE of one
        // packet without immediate skips it: its write covers exactly that range (the
        // lengths above) and refuses it whole, with the same error, before storing anything;
        // the check looked the key up a second time per small message.
        let only = p.info.first && p.info.last && p.hdr.imm.is_none();
        let reth = p
            .hdr
            .reth
            .filter(|reth| p.info.first && !only && reth.dma_len > 0);
        if let Some(reth) = reth {
            let len = u64::from(reth.dma_len);
            if let Err(e) = env.check_remote_write(self.remote_target(reth.rkey, reth.va), len) {
                self.resp.cur = None;
                self.remote_refused(env, stats, psn, e);
                return false;
            }
        }
        true
    }

    /// A READ request: answered with READ responses, remembered for duplicates.
    fn exec_read(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let psn = p.hdr.bth.psn;
        let reth = p.hdr.reth.expect("parsed RETH");
        if self.max_dest_rd_atomic == 0 || u64::from(reth.dma_len) > MAX_MESSAGE_BYTES {
            self.invalid_request(env, stats, psn);
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
    }

    /// A FLUSH: the device makes the range (or region) visible at the placement type asked.
    fn exec_flush(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let psn = p.hdr.bth.psn;
        let feth = p.hdr.feth.expect("parsed FETH");
        let reth = p.hdr.reth.expect("parsed RETH");
        let flush = FlushSpec {
            length: reth.dma_len,
            placement_type: feth.placement_type,
            level: feth.selectivity_level,
        };
        if self.max_dest_rd_atomic == 0 || !flush.is_valid() {
            self.invalid_request(env, stats, psn);
            return;
        }
        let need = flush.required_access();
        if self.access & need != need
            || env
                .flush_remote(self.remote_target(reth.rkey, reth.va), flush)
                .is_err()
        {
            self.remote_access_error(env, stats, psn);
            return;
        }
        self.finish_executed(env, stats, psn);
    }

    /// An ATOMIC WRITE: 8 aligned bytes stored at once.
    fn exec_atomic_write(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) {
        let psn = p.hdr.bth.psn;
        let reth = p.hdr.reth.expect("parsed RETH");
        let value: Option<[u8; ATOMIC_BYTES]> = p.payload.try_into().ok();
        let Some(value) = value.filter(|_| {
            self.max_dest_rd_atomic != 0
                && reth.dma_len == ATOMIC_BYTES as u32
                && reth.va % (ATOMIC_BYTES as u64) == 0
        }) else {
            self.invalid_request(env, stats, psn);
            return;
        };
        let write = AtomicOp::Write {
            value: u64::from_ne_bytes(value),
        };
        if self.access & ACCESS_REMOTE_WRITE == 0 {
            self.remote_access_error(env, stats, psn);
            return;
        }
        if let Err(e) = env.atomic_remote(self.remote_target(reth.rkey, reth.va), write) {
            self.remote_refused(env, stats, psn, e);
            return;
        }
        self.finish_executed(env, stats, psn);
    }

    /// A COMPARE SWAP or FETCH ADD: executed once, its original value saved for duplicates
    /// and sent back in an atomic ACK.
    fn exec_atomic(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, p: &Parsed<'_>) {
        let psn = p.hdr.bth.psn;
        let a = p.hdr.atomic_eth.expect("parsed AtomicETH");
        if self.max_dest_rd_atomic == 0 || a.va % (ATOMIC_BYTES as u64) != 0 {
            self.invalid_request(env, stats, psn);
            return;
        }
        if self.access & ACCESS_REMOTE_ATOMIC == 0 {
            self.remote_access_error(env, stats, psn);
            return;
        }
        let atomic = if p.hdr.bth.opcode & op::OP_MASK == op::RC_COMPARE_SWAP {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let original = match env.atomic_remote(self.remote_target(a.rkey, a.va), atomic) {
            Ok(v) => v,
            Err(e) => {
                self.remote_refused(env, stats, psn, e);
                return;
            }
        };
        self.resp.msn = self.resp.msn.next();
        self.remember(RdAtomic::Atomic { psn, original });
        self.send_atomic_ack(env, stats, psn, original);
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
    }

    /// A FLUSH / ATOMIC WRITE was executed: count the message, remember it for duplicates,
    /// answer it and expect the next PSN.
    fn finish_executed(&mut self, env: &mut dyn DeviceEnv, stats: &mut EngineStats, psn: Psn) {
        self.resp.msn = self.resp.msn.next();
        self.remember(RdAtomic::Executed { psn });
        self.send_empty_read_response(env, stats, psn);
        self.resp.epsn = psn.next();
        self.resp.nak_sent = false;
    }
}

#[cfg(test)]
mod tests;
