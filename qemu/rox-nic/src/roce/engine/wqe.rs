//! Send work queue entries as the requester owns them: their kinds, validation of a posted
//! WR against the QP (length, opcode per QP type) and the completion opcode of each.

use super::qp::Qp;
use crate::roce::*;

/// Largest message (IBA: 2^31 bytes).
pub(super) const MAX_MESSAGE_BYTES: u64 = rox_uapi::verbs::MAX_MSG_SIZE as u64;
/// Size of an atomic operand.
pub(super) const ATOMIC_BYTES: usize = rox_uapi::verbs::ATOMIC_SIZE as usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WqeKind {
    Send,
    Write,
    Read,
    Atomic,
    /// FLUSH: one request packet, answered by a zero-length READ RESPONSE ONLY.
    Flush,
    /// ATOMIC WRITE: one request packet with 8 bytes, answered like FLUSH.
    AtomicWrite,
    /// BIND_MW / LOCAL_INV / REG_MR: executed by the device when its turn comes; no packet,
    /// no PSN.
    Local,
}

impl WqeKind {
    /// Uses a responder resource (counts against max_rd_atomic, waits for a response).
    pub(super) fn rd_atomic(self) -> bool {
        matches!(
            self,
            WqeKind::Read | WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite
        )
    }

    /// Completes on a response without data (an ACK beyond it also proves it was executed).
    pub(super) fn ack_only_response(self) -> bool {
        matches!(self, WqeKind::Flush | WqeKind::AtomicWrite)
    }
}

/// A send WR the requester owns until it retires.
#[derive(Debug)]
pub(super) struct Wqe {
    pub(super) wr: SendWr,
    pub(super) kind: WqeKind,
    pub(super) len: u64,
    /// PSNs were assigned (the first packet was sent).
    pub(super) started: bool,
    pub(super) first_psn: Psn,
    /// PSNs the message consumes (packets of a SEND/WRITE, response packets of a READ, 1 for atomics).
    pub(super) npsn: u32,
    /// SEND/WRITE: every packet acknowledged (UC/UD: every packet sent).
    pub(super) acked: bool,
    /// READ: response packets received, in order.
    pub(super) read_pkts_done: u32,
    /// Atomic: the original value came back; FLUSH / ATOMIC WRITE: the response came.
    pub(super) responded: bool,
    /// The WR failed; it completes with this status when it reaches the head of the SQ.
    pub(super) error: Option<WcStatus>,
    /// `VENDOR_ERR_*` detail reported with `error`.
    pub(super) vendor_err: u8,
}

impl Wqe {
    pub(super) fn new(wr: SendWr, kind: WqeKind, len: u64, npsn: u32) -> Wqe {
        Wqe {
            wr,
            kind,
            len,
            started: false,
            first_psn: Psn::default(),
            npsn,
            acked: false,
            read_pkts_done: 0,
            responded: false,
            error: None,
            vendor_err: 0,
        }
    }

    /// A WR that failed before it started: it only waits for its turn to complete.
    pub(super) fn failed(wr: SendWr, kind: WqeKind, status: WcStatus, vendor_err: u8) -> Wqe {
        Wqe {
            error: Some(status),
            vendor_err,
            ..Wqe::new(wr, kind, 0, 1)
        }
    }

    pub(super) fn done(&self) -> bool {
        match self.kind {
            WqeKind::Send | WqeKind::Write | WqeKind::Local => self.acked,
            WqeKind::Read => self.started && self.read_pkts_done == self.npsn,
            WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite => self.responded,
        }
    }

    /// The last PSN of the WQE (a local operation has none: the PSN before its first).
    pub(super) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn).prev()
    }

    pub(super) fn contains(&self, psn: Psn) -> bool {
        self.started && psn.within(self.first_psn, self.last_psn())
    }

    /// The oldest PSN of this WQE not yet known to have arrived.
    pub(super) fn resume_psn(&self, acked_psn: Psn) -> Psn {
        match self.kind {
            WqeKind::Read => self.first_psn.add(self.read_pkts_done),
            WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite => self.first_psn,
            WqeKind::Send | WqeKind::Write | WqeKind::Local => {
                if self.contains(acked_psn) {
                    acked_psn.next()
                } else {
                    self.first_psn
                }
            }
        }
    }
}

pub(super) fn wc_opcode(kind: WqeKind, opcode: WrOpcode) -> WcOpcode {
    match kind {
        WqeKind::Send => WcOpcode::Send,
        WqeKind::Write => WcOpcode::RdmaWrite,
        WqeKind::Read => WcOpcode::RdmaRead,
        WqeKind::Atomic if opcode == WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        WqeKind::Atomic => WcOpcode::FetchAdd,
        WqeKind::Flush => WcOpcode::Flush,
        WqeKind::AtomicWrite => WcOpcode::AtomicWrite,
        WqeKind::Local if opcode == WrOpcode::BindMw => WcOpcode::BindMw,
        WqeKind::Local if opcode == WrOpcode::RegMr => WcOpcode::RegMr,
        WqeKind::Local => WcOpcode::LocalInv,
    }
}

pub(super) fn wqe_kind(opcode: WrOpcode) -> WqeKind {
    match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WqeKind::Send,
        WrOpcode::BindMw | WrOpcode::LocalInv | WrOpcode::RegMr => WqeKind::Local,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WqeKind::Write,
        WrOpcode::RdmaRead => WqeKind::Read,
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => WqeKind::Atomic,
        WrOpcode::Flush => WqeKind::Flush,
        WrOpcode::AtomicWrite => WqeKind::AtomicWrite,
    }
}

impl Qp {
    /// Validates a WR and makes it a WQE; an invalid one becomes a failed WQE that completes
    /// with its error status in SQ order.
    #[cfg(test)]
    pub(super) fn make_wqe(&self, wr: SendWr) -> Wqe {
        let kind = wqe_kind(wr.opcode);
        match self.check_wr(&wr, kind) {
            Ok((len, npsn)) => Wqe::new(wr, kind, len, npsn),
            Err(status) => Wqe::failed(wr, kind, status, 0),
        }
    }

    /// Appends a failed WQE with a blank WR ([`SendWr::new`]) to the SQ, for a WR to be
    /// decoded into; [`Qp::finish_tail_wr`] makes it what was decoded.
    pub(super) fn push_blank_wr(&mut self) -> &mut SendWr {
        let blank = SendWr::new(0, WrOpcode::Send);
        self.req
            .sq
            .push_back(Wqe::failed(blank, WqeKind::Send, WcStatus::LocQpOpErr, 0));
        &mut self.req.sq.back_mut().expect("just pushed").wr
    }

    /// Validates the WR decoded into the SQ's tail ([`Qp::push_blank_wr`]) as
    /// [`Qp::make_wqe`] does, or makes the tail the WR the device could not decode.
    pub(super) fn finish_tail_wr(&mut self, decoded: Result<(), FailedWr>) {
        let Some(tail) = self.req.sq.back() else {
            return;
        };
        let (kind, checked) = match decoded {
            Ok(()) => {
                let kind = wqe_kind(tail.wr.opcode);
                (kind, self.check_wr(&tail.wr, kind).map_err(|s| (s, 0)))
            }
            Err(ref failed) => (
                wqe_kind(failed.opcode),
                Err((failed.status, failed.vendor_err)),
            ),
        };
        let Some(tail) = self.req.sq.back_mut() else {
            return;
        };
        if let Err(failed) = decoded {
            tail.wr = SendWr {
                wqe_index: failed.wqe_index,
                ..SendWr::new(failed.wr_id, failed.opcode)
            };
        }
        tail.kind = kind;
        match checked {
            Ok((len, npsn)) => {
                tail.len = len;
                tail.npsn = npsn;
                tail.error = None;
            }
            Err((status, vendor_err)) => {
                tail.error = Some(status);
                tail.vendor_err = vendor_err;
            }
        }
    }

    /// The payload length and PSN count of a valid WR, or its error status.
    pub(super) fn check_wr(&self, wr: &SendWr, kind: WqeKind) -> Result<(u64, u32), WcStatus> {
        let len = wr.data.len();
        let mtu = u64::from(self.mtu.bytes());
        let invalidates = wr.opcode == WrOpcode::SendWithInv;
        let allowed = match self.cfg.qp_type {
            QpType::Rc => self.xrc.is_none_or(|role| role.may_post(kind)),
            QpType::Uc => {
                matches!(kind, WqeKind::Send | WqeKind::Write | WqeKind::Local) && !invalidates
            }
            QpType::Ud => kind == WqeKind::Send && wr.ud.is_some() && !invalidates,
        };
        let segment_missing = (wr.opcode == WrOpcode::BindMw && wr.bind.is_none())
            || (wr.opcode == WrOpcode::RegMr && wr.fast_reg.is_none());
        if !allowed || segment_missing {
            return Err(WcStatus::LocQpOpErr);
        }
        if kind == WqeKind::Local {
            return Ok((0, 0));
        }
        let inline = matches!(wr.data, SendData::Inline(_));
        if inline && matches!(kind, WqeKind::Read | WqeKind::Atomic | WqeKind::Flush) {
            return Err(WcStatus::LocQpOpErr);
        }
        if kind == WqeKind::Flush && !wr.flush.is_valid() {
            return Err(WcStatus::LocQpOpErr);
        }
        let bad_len = len > MAX_MESSAGE_BYTES
            || (matches!(kind, WqeKind::Atomic | WqeKind::AtomicWrite)
                && len != ATOMIC_BYTES as u64)
            || (kind == WqeKind::Flush && len != 0)
            || (self.cfg.qp_type == QpType::Ud && len > mtu);
        if bad_len {
            return Err(WcStatus::LocLenErr);
        }
        let npsn = match kind {
            WqeKind::Atomic | WqeKind::Flush | WqeKind::AtomicWrite => 1,
            _ => len.div_ceil(mtu).max(1) as u32,
        };
        Ok((len, npsn))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::*;

    fn checked(qp_type: QpType, wr: SendWr) -> Result<(u64, u32), WcStatus> {
        let qp = rts_qp(qp_type);
        qp.check_wr(&wr, wqe_kind(wr.opcode))
    }

    /// The engine's local operations are uapi's (`WrOpcode::is_local`), the rule librox's
    /// wake and the device's parking read: a WQE one of them took for a packet sender while
    /// the engine ran it locally (or the reverse) would park a QP or skip a wake wrongly.
    #[test]
    fn the_local_operations_are_uapis() {
        for op in 0..=u8::MAX {
            if let Some(op) = WrOpcode::from_u8(op) {
                assert_eq!(wqe_kind(op) == WqeKind::Local, op.is_local(), "{op:?}");
            }
        }
    }

    #[test]
    fn check_wr_counts_packets_of_the_path_mtu() {
        assert_eq!(
            checked(QpType::Rc, send_wr(0, WrOpcode::Send, 0)),
            Ok((0, 1))
        );
        assert_eq!(
            checked(QpType::Rc, send_wr(0, WrOpcode::Send, 1024)),
            Ok((1024, 1))
        );
        assert_eq!(
            checked(QpType::Rc, send_wr(0, WrOpcode::RdmaRead, 1025)),
            Ok((1025, 2))
        );
        assert_eq!(
            checked(QpType::Rc, send_wr(0, WrOpcode::AtomicFetchAndAdd, 8)),
            Ok((8, 1))
        );
        assert_eq!(
            checked(QpType::Uc, send_wr(0, WrOpcode::LocalInv, 0)),
            Ok((0, 0))
        );
    }

    #[test]
    fn check_wr_refuses_what_the_qp_type_or_length_forbids() {
        use WcStatus::{LocLenErr, LocQpOpErr};
        let wr = |opcode, len| send_wr(0, opcode, len);
        assert_eq!(
            checked(QpType::Uc, wr(WrOpcode::RdmaRead, 8)),
            Err(LocQpOpErr)
        );
        assert_eq!(
            checked(QpType::Uc, wr(WrOpcode::SendWithInv, 8)),
            Err(LocQpOpErr)
        );
        assert_eq!(
            checked(QpType::Ud, wr(WrOpcode::Send, 8)),
            Err(LocQpOpErr),
            "no UD address"
        );
        assert_eq!(
            checked(QpType::Rc, wr(WrOpcode::BindMw, 0)),
            Err(LocQpOpErr),
            "no segment"
        );
        assert_eq!(
            checked(QpType::Rc, wr(WrOpcode::AtomicCmpAndSwp, 4)),
            Err(LocLenErr)
        );
        assert_eq!(
            checked(QpType::Rc, wr(WrOpcode::Flush, 0)),
            Err(LocQpOpErr),
            "invalid spec"
        );
        let inline_read = SendWr {
            data: SendData::Inline(vec![0; 8]),
            ..wr(WrOpcode::RdmaRead, 8)
        };
        assert_eq!(checked(QpType::Rc, inline_read), Err(LocQpOpErr));
        let failed = rts_qp(QpType::Uc).make_wqe(wr(WrOpcode::RdmaRead, 8));
        assert_eq!(failed.error, Some(LocQpOpErr));
    }

    #[test]
    fn resume_psn_is_the_first_packet_not_known_to_have_arrived() {
        let started = |opcode, len, npsn| Wqe {
            started: true,
            first_psn: Psn::from_wire(10),
            ..Wqe::new(
                send_wr(0, opcode, len),
                wqe_kind(opcode),
                u64::from(len),
                npsn,
            )
        };
        let send = started(WrOpcode::Send, 3000, 3);
        assert_eq!(send.last_psn().get(), 12);
        assert_eq!(
            send.resume_psn(Psn::from_wire(11)).get(),
            12,
            "after the ACKed packet"
        );
        assert_eq!(
            send.resume_psn(Psn::from_wire(9)).get(),
            10,
            "ACK before it: from its start"
        );
        let mut read = started(WrOpcode::RdmaRead, 3000, 3);
        read.read_pkts_done = 2;
        assert_eq!(
            read.resume_psn(Psn::from_wire(50)).get(),
            12,
            "responses, not ACKs, count"
        );
        assert!(!read.done());
        read.read_pkts_done = 3;
        assert!(read.done());
        let atomic = started(WrOpcode::AtomicFetchAndAdd, 8, 1);
        assert_eq!(
            atomic.resume_psn(Psn::from_wire(10)).get(),
            10,
            "until its value came back"
        );
        assert!(atomic.contains(Psn::from_wire(10)) && !atomic.contains(Psn::from_wire(11)));
    }

    #[test]
    fn completion_opcodes_follow_the_wr() {
        let wc = |opcode| wc_opcode(wqe_kind(opcode), opcode);
        assert_eq!(wc(WrOpcode::SendWithImm), WcOpcode::Send);
        assert_eq!(wc(WrOpcode::RdmaWriteWithImm), WcOpcode::RdmaWrite);
        assert_eq!(wc(WrOpcode::AtomicCmpAndSwp), WcOpcode::CompSwap);
        assert_eq!(wc(WrOpcode::AtomicFetchAndAdd), WcOpcode::FetchAdd);
        assert_eq!(wc(WrOpcode::BindMw), WcOpcode::BindMw);
        assert_eq!(wc(WrOpcode::RegMr), WcOpcode::RegMr);
        assert_eq!(wc(WrOpcode::LocalInv), WcOpcode::LocalInv);
        assert_eq!(wc(WrOpcode::Flush), WcOpcode::Flush);
        assert_eq!(wc(WrOpcode::AtomicWrite), WcOpcode::AtomicWrite);
    }
}
