//! XRC (eXtended Reliable Connected, IBA 14.3 / A14): RC's transport, with the receive side
//! split off the connection. An initiator QP is a requester with no receive queue; each of its
//! requests names, in its XRCETH, the XRC SRQ at the far end that a SEND goes into. A target QP
//! is a responder with no receive queue and no PD: it takes each request into the SRQ the
//! packet names, which must be an XRC SRQ of the target's own XRC domain (else the request is
//! NAKed as invalid), checks the request's R_Keys in that SRQ's PD, and completes receives on
//! that SRQ's CQ. The XRC domain is the protection boundary: a peer can reach only the SRQs
//! (and through their PDs the memory) of the domain the target QP was opened in.
//!
//! Both roles run the RC engine unchanged: [`Qp::bth`] turns its RC opcodes into XRC ones,
//! the requester adds the XRCETH ([`Qp::xrceth_of`]) and [`Qp::xrc_receive`] dispatches what
//! arrives, lending the responder an environment whose receive queue is the named SRQ.

use super::resp::InMessage;
use super::wqe::{Wqe, WqeKind};
use super::{Engine, EngineStats, RxDrop};
use crate::roce::wire::{NakCode, Parsed};
use crate::roce::*;

use super::qp::Qp;

/// What an XRC QP is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XrcRole {
    /// XRC_INI (IBV_QPT_XRC_SEND): sends requests, takes their responses; receives nothing.
    Initiator,
    /// XRC_TGT (IBV_QPT_XRC_RECV) of XRC domain `xrcd`: answers requests; sends nothing of
    /// its own.
    Target { xrcd: u32 },
}

impl XrcRole {
    /// Whether a QP of this role may post a send WR of `kind`: a target has no send queue,
    /// an initiator has RC's operations but the memory placement extensions (no XRC opcode).
    pub(super) fn may_post(self, kind: WqeKind) -> bool {
        match self {
            XrcRole::Target { .. } => false,
            XrcRole::Initiator => !matches!(kind, WqeKind::Flush | WqeKind::AtomicWrite),
        }
    }
}

impl Engine {
    /// Creates the transport context of a new XRC QP (state RESET). `cfg.qp_type` is RC (XRC
    /// is RC's transport); a target's `cfg.pd` is unused (each request brings its SRQ's).
    pub fn create_xrc_qp(&mut self, cfg: QpConfig, role: XrcRole) -> Result<(), EngineError> {
        let cfg = QpConfig {
            qp_type: QpType::Rc,
            // Neither role has a receive queue of its own to flush.
            uses_srq: true,
            ..cfg
        };
        self.create_qp(cfg)?;
        if let Some(mut qp) = self.qps.get_mut(&cfg.qpn) {
            qp.xrc = Some(role);
        }
        Ok(())
    }
}

impl Qp {
    /// The XRCETH of a request of `wqe`: an initiator's names the WR's remote SRQ.
    pub(super) fn xrceth_of(&self, wqe: &Wqe) -> Option<u32> {
        (self.xrc == Some(XrcRole::Initiator)).then_some(wqe.wr.xrc_srqn)
    }

    /// A packet of XRC transport for this XRC QP: responses to an initiator's completer,
    /// requests to a target's responder through the SRQ they name.
    pub(super) fn xrc_receive(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
        p: &Parsed<'_>,
    ) -> Result<(), RxDrop> {
        let is_response = p.info.class.is_response();
        let xrcd = match self.xrc {
            Some(XrcRole::Initiator) if is_response => {
                self.completer_receive(env, stats, p);
                return Ok(());
            }
            Some(XrcRole::Target { xrcd }) if !is_response && self.can_receive() => xrcd,
            // A request for an initiator, a response for a target: no such receiver here.
            _ => {
                stats.rx_no_qp += 1;
                return Err(RxDrop::NoQp(self.cfg.qpn));
            }
        };
        let srqn = p
            .hdr
            .xrceth
            .expect("XRC requests are parsed with their XRCETH");
        let holds =
            matches!(self.resp.cur, Some(InMessage::Send { .. })) || self.resp.spare_recv.is_some();
        // A message's packets and its retries name one SRQ: the one its receive WR came from.
        let other_srq = holds && self.xrc_held_srq != Some(srqn);
        match env
            .xrc_srq(srqn)
            .filter(|srq| srq.xrcd == xrcd && !other_srq)
        {
            Some(srq) => {
                // The responder checks R_Keys and scatters receives in the SRQ's PD.
                self.cfg.pd = srq.pd;
                let mut srq_env = SrqEnv::new(env, srqn);
                self.responder_receive(&mut srq_env, stats, p);
                let popped = srq_env.popped;
                let holds = matches!(self.resp.cur, Some(InMessage::Send { .. }))
                    || self.resp.spare_recv.is_some();
                if !holds {
                    self.xrc_held_srq = None;
                } else if popped {
                    self.xrc_held_srq = Some(srqn);
                }
            }
            None => {
                stats.rx_xrc_domain_errors += 1;
                // Only the expected request is answered (and ends the QP, as any invalid
                // request); a duplicate or one beyond a gap is dropped.
                if p.hdr.bth.psn == self.resp.epsn {
                    self.responder_fatal(env, stats, p.hdr.bth.psn, NakCode::InvalidRequest, None);
                }
            }
        }
        Ok(())
    }
}

/// The device's environment as an XRC target's responder sees it for one request: its receive
/// queue is XRC SRQ `srqn`, and its receive completions go to that SRQ's CQ. Every other
/// method is the device's.
pub(super) struct SrqEnv<'a> {
    inner: &'a mut dyn DeviceEnv,
    srqn: u32,
    /// Whether the responder took a receive WR from the SRQ.
    popped: bool,
}

impl<'a> SrqEnv<'a> {
    pub(super) fn new(inner: &'a mut dyn DeviceEnv, srqn: u32) -> SrqEnv<'a> {
        SrqEnv {
            inner,
            srqn,
            popped: false,
        }
    }
}

impl DeviceEnv for SrqEnv<'_> {
    fn pop_recv(&mut self, _qpn: Qpn) -> Option<RecvWr> {
        let wr = self.inner.pop_xrc_srq(self.srqn);
        self.popped |= wr.is_some();
        wr
    }
    fn complete(&mut self, completion: Completion) {
        let xrc_srq = completion.is_recv.then_some(self.srqn);
        self.inner.complete(Completion {
            xrc_srq,
            ..completion
        });
    }

    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn read_local(&mut self, pd: u32, lkey: Key, addr: u64, buf: &mut [u8]) -> AccessResult {
        self.inner.read_local(pd, lkey, addr, buf)
    }
    fn write_local(&mut self, pd: u32, lkey: Key, addr: u64, data: &[u8]) -> AccessResult {
        self.inner.write_local(pd, lkey, addr, data)
    }
    fn read_remote(&mut self, at: RemoteTarget, buf: &mut [u8]) -> AccessResult {
        self.inner.read_remote(at, buf)
    }
    fn check_remote_read(&mut self, at: RemoteTarget, len: u64) -> AccessResult {
        self.inner.check_remote_read(at, len)
    }
    fn check_remote_write(&mut self, at: RemoteTarget, len: u64) -> AccessResult {
        self.inner.check_remote_write(at, len)
    }
    fn write_remote(&mut self, at: RemoteTarget, data: &[u8]) -> AccessResult {
        self.inner.write_remote(at, data)
    }
    fn atomic_remote(&mut self, at: RemoteTarget, op: AtomicOp) -> Result<u64, AccessError> {
        self.inner.atomic_remote(at, op)
    }
    fn flush_remote(&mut self, at: RemoteTarget, flush: FlushSpec) -> AccessResult {
        self.inner.flush_remote(at, flush)
    }
    fn bind_mw(&mut self, pd: u32, qpn: Qpn, bind: &MwBind) -> AccessResult {
        self.inner.bind_mw(pd, qpn, bind)
    }
    fn fast_register(&mut self, pd: u32, qpn: Qpn, reg: &FastReg) -> AccessResult {
        self.inner.fast_register(pd, qpn, reg)
    }
    fn invalidate(&mut self, pd: u32, qpn: Qpn, rkey: Key, remote: bool) -> AccessResult {
        self.inner.invalidate(pd, qpn, rkey, remote)
    }
    fn check_invalidate(&mut self, pd: u32, qpn: Qpn, rkey: Key, remote: bool) -> AccessResult {
        self.inner.check_invalidate(pd, qpn, rkey, remote)
    }
    fn transmit(&mut self, av: &AddressVector, packet: crate::roce::wire::Packet) {
        self.inner.transmit(av, packet)
    }
    fn wqe_trace(&self) -> &crate::trace::WqeTrace {
        self.inner.wqe_trace()
    }
    fn sq_drained(&mut self, qpn: Qpn) {
        self.inner.sq_drained(qpn)
    }
    fn qp_entered_error(&mut self, qpn: Qpn) {
        self.inner.qp_entered_error(qpn)
    }
    fn qp_async_error(&mut self, qpn: Qpn, error: QpAsyncError) {
        self.inner.qp_async_error(qpn, error)
    }
    fn multicast_members(&self, group: &Gid) -> Vec<Qpn> {
        self.inner.multicast_members(group)
    }
    fn multicast_copy(&mut self) {
        self.inner.multicast_copy()
    }
    fn xrc_srq(&self, srqn: u32) -> Option<XrcSrq> {
        self.inner.xrc_srq(srqn)
    }
    fn pop_xrc_srq(&mut self, srqn: u32) -> Option<RecvWr> {
        self.inner.pop_xrc_srq(srqn)
    }
}

type AccessResult = Result<(), AccessError>;

#[cfg(test)]
mod tests;
