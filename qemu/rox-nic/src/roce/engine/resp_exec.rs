//! The responder's execution of a request with the expected PSN: one handler per opcode
//! class (SEND, WRITE, READ, atomics, FLUSH, ATOMIC WRITE) and the responses they send.

use super::congestion::ReadStream;
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
        // target writes nothing. Later packets stay inside it (`remaining`).
        let reth = p.hdr.reth.filter(|reth| p.info.first && reth.dma_len > 0);
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
mod tests {
    use super::super::test_env::*;
    use super::*;
    use crate::roce::wire::{AtomicEth, Headers};

    fn receive(qp: &mut Qp, env: &mut TestEnv, stats: &mut EngineStats, bytes: &[u8]) {
        let p = wire::parse_packet(bytes).expect("well-formed");
        qp.responder_receive(env, stats, &p);
    }

    fn recv_wr(wr_id: u64, addr: u64, length: u32) -> RecvWr {
        RecvWr {
            wqe_index: 0,
            wr_id,
            sges: vec![Sge {
                addr,
                length,
                lkey: LKEY,
            }],
        }
    }

    fn reth(va: u64, rkey: Key, dma_len: u32) -> impl FnOnce(&mut Headers) {
        move |h: &mut Headers| h.reth = Some(Reth { va, rkey, dma_len })
    }

    #[test]
    fn multi_packet_send_lands_in_one_receive_wr_and_completes_on_the_last() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        env.recv.push_back(recv_wr(7, 0x100, 64));
        receive(
            &mut qp,
            &mut env,
            &mut stats,
            &packet_from_peer(op::RC_SEND_FIRST, 100, b"abcd", |_| {}),
        );
        assert!(env.completions.is_empty());
        let last = packet_from_peer(op::RC_SEND_LAST_IMM, 101, b"efgh", |h| h.imm = Some(9));
        receive(&mut qp, &mut env, &mut stats, &last);
        assert_eq!(&env.mem[0x100..0x108], b"abcdefgh");
        let c = env.completions[0];
        assert_eq!(
            (c.wr_id, c.status, c.byte_len, c.imm),
            (7, WcStatus::Success, 8, 9)
        );
        assert_eq!(c.wc_flags, WC_FLAG_WITH_IMM);
        assert_eq!((qp.resp.epsn.get(), qp.resp.msn.get()), (102, 1));
        assert!(qp.resp.ack_pending);
    }

    #[test]
    fn uc_send_without_receive_wr_drops_the_whole_message() {
        let (mut env, mut stats, mut qp) =
            (TestEnv::new(), EngineStats::default(), rts_qp(QpType::Uc));
        let uc = |base| op::CLASS_UC | base;
        receive(
            &mut qp,
            &mut env,
            &mut stats,
            &packet_from_peer(uc(op::RC_SEND_FIRST), 100, b"ab", |_| {}),
        );
        env.recv.push_back(recv_wr(1, 0x100, 64));
        receive(
            &mut qp,
            &mut env,
            &mut stats,
            &packet_from_peer(uc(op::RC_SEND_LAST), 101, b"cd", |_| {}),
        );
        assert!(
            env.completions.is_empty(),
            "the rest of a dropped message is dropped"
        );
        receive(
            &mut qp,
            &mut env,
            &mut stats,
            &packet_from_peer(uc(op::RC_SEND_ONLY), 102, b"xy", |_| {}),
        );
        assert_eq!(env.completions.len(), 1, "the next message is delivered");
        assert_eq!(&env.mem[0x100..0x102], b"xy");
        assert_eq!(stats.rx_no_recv_wr, 1);
        assert!(env.sent.is_empty(), "UC never answers");
    }

    #[test]
    fn write_checks_the_whole_range_before_writing() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let rkey = RKEY;
        // Announces more than memory holds: nothing of the first packet lands.
        let first = packet_from_peer(
            op::RC_WRITE_FIRST,
            100,
            &[1; 1024],
            reth(0, rkey, MEM_LEN as u32 + 1),
        );
        env.recv.push_back(recv_wr(7, 0x800, 64));
        receive(&mut qp, &mut env, &mut stats, &first);
        assert!(env.mem[..1024].iter().all(|&b| b == 0));
        let nak = env.sent_parsed()[0].hdr.aeth.unwrap().syndrome;
        assert_eq!(nak, Syndrome::Nak(NakCode::RemoteAccessError));
        assert!(qp.resp.cur.is_none());
        // Class C: the QP is in error, its receive queue flushed, its owner told.
        assert_eq!(qp.state, QpState::Err);
        let flushed: Vec<_> = env
            .completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        assert_eq!(flushed, [(7, WcStatus::WrFlushErr)]);
        assert_eq!(env.async_errors, [QpAsyncError::AccessViolation]);
        // A region whose page is absent: RNR NAK, nothing executed, the PSN expected again;
        // the QP stays in RTS and nothing is reported.
        let (mut env, mut stats, mut qp) = rc_fixture();
        let fault = packet_from_peer(op::RC_WRITE_ONLY, 100, &[1; 8], reth(0, FAULT_KEY, 8));
        receive(&mut qp, &mut env, &mut stats, &fault);
        assert_eq!(
            env.sent_parsed()[0].hdr.aeth.unwrap().syndrome,
            Syndrome::RnrNak(0)
        );
        assert_eq!((stats.page_fault_naks, qp.resp.epsn.get()), (1, 100));
        assert_eq!(qp.state, QpState::Rts);
        assert!(env.async_errors.is_empty());
    }

    #[test]
    fn read_beyond_its_region_is_a_remote_access_error_that_fails_the_qp() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, BAD_KEY, 64));
        receive(&mut qp, &mut env, &mut stats, &read);
        let sent = env.sent_parsed();
        assert_eq!(sent.len(), 1, "one NAK, no READ response");
        let nak = sent[0].hdr.aeth.unwrap().syndrome;
        assert_eq!(nak, Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(qp.state, QpState::Err);
        assert_eq!(env.async_errors, [QpAsyncError::AccessViolation]);
        // A QP in error answers nothing more.
        let again = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 8));
        receive(&mut qp, &mut env, &mut stats, &again);
        assert_eq!(env.sent_parsed().len(), 1);
    }

    #[test]
    fn write_longer_than_its_reth_is_an_invalid_request() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let bytes = packet_from_peer(op::RC_WRITE_ONLY, 100, &[1; 16], reth(0, RKEY, 8));
        receive(&mut qp, &mut env, &mut stats, &bytes);
        let nak = env.sent_parsed()[0].hdr.aeth.unwrap().syndrome;
        assert_eq!(nak, Syndrome::Nak(NakCode::InvalidRequest));
        assert_eq!(qp.state, QpState::Err);
        assert_eq!(env.async_errors, [QpAsyncError::InvalidRequest]);
        assert!(env.mem[..16].iter().all(|&b| b == 0));
    }

    #[test]
    fn write_with_immediate_waits_for_a_receive_wr_before_writing() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let bytes = packet_from_peer(op::RC_WRITE_ONLY_IMM, 100, &[5; 8], |h| {
            reth(0x200, RKEY, 8)(h);
            h.imm = Some(3);
        });
        receive(&mut qp, &mut env, &mut stats, &bytes);
        assert!(
            env.mem[0x200..0x208].iter().all(|&b| b == 0),
            "RNR: nothing written"
        );
        assert_eq!(
            env.sent_parsed()[0].hdr.aeth.unwrap().syndrome,
            Syndrome::RnrNak(0)
        );
        env.recv.push_back(recv_wr(4, 0, 0));
        receive(&mut qp, &mut env, &mut stats, &bytes);
        assert_eq!(&env.mem[0x200..0x208], &[5; 8]);
        let c = env.completions[0];
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len, c.imm),
            (4, WcOpcode::RecvRdmaWithImm, 8, 3)
        );
    }

    #[test]
    fn atomic_executes_once_and_a_duplicate_gets_the_saved_value() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        env.mem[0x300..0x308].copy_from_slice(&40u64.to_le_bytes());
        let bytes = packet_from_peer(op::RC_FETCH_ADD, 100, &[], |h| {
            h.atomic_eth = Some(AtomicEth {
                va: 0x300,
                rkey: RKEY,
                swap_add: 2,
                compare: 0,
            })
        });
        receive(&mut qp, &mut env, &mut stats, &bytes);
        receive(&mut qp, &mut env, &mut stats, &bytes);
        assert_eq!(env.mem[0x300..0x308], 42u64.to_le_bytes(), "added once");
        let sent = env.sent_parsed();
        assert_eq!(sent.len(), 2);
        assert!(sent.iter().all(|p| p.hdr.atomic_ack == Some(40)));
        assert_eq!((stats.rx_duplicates, qp.resp.epsn.get()), (1, 101));
    }

    #[test]
    fn misaligned_atomic_and_read_without_resources_are_invalid_requests() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        let bytes = packet_from_peer(op::RC_COMPARE_SWAP, 100, &[], |h| {
            h.atomic_eth = Some(AtomicEth {
                va: 0x301,
                rkey: RKEY,
                swap_add: 1,
                compare: 0,
            })
        });
        receive(&mut qp, &mut env, &mut stats, &bytes);
        assert_eq!(qp.state, QpState::Err);
        let (mut env, mut qp) = (TestEnv::new(), rts_qp(QpType::Rc));
        qp.max_dest_rd_atomic = 0;
        let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 8));
        receive(&mut qp, &mut env, &mut stats, &read);
        let nak = env.sent_parsed()[0].hdr.aeth.unwrap().syndrome;
        assert_eq!(nak, Syndrome::Nak(NakCode::InvalidRequest));
    }

    #[test]
    fn read_answers_in_mtu_packets_and_advances_by_their_count() {
        let (mut env, mut stats, mut qp) = rc_fixture();
        fill_pattern(&mut env, 2500);
        let read = packet_from_peer(op::RC_READ_REQUEST, 100, &[], reth(0, RKEY, 2500));
        receive(&mut qp, &mut env, &mut stats, &read);
        let sent = env.sent_parsed();
        let ops: Vec<u8> = sent.iter().map(|p| p.hdr.bth.opcode).collect();
        assert_eq!(
            ops,
            [
                op::RC_READ_RESPONSE_FIRST,
                op::RC_READ_RESPONSE_MIDDLE,
                op::RC_READ_RESPONSE_LAST
            ]
        );
        let data: Vec<u8> = sent.iter().flat_map(|p| p.payload.to_vec()).collect();
        assert_eq!(data, env.mem[..2500]);
        assert_eq!((qp.resp.epsn.get(), qp.resp.msn.get()), (103, 1));
    }
}
