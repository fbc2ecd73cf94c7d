//! The [`DeviceEnv`] the transport engine works through: thin delegations to the protection
//! table (memory access), the ODP fault path, the receive queues and the completion queues;
//! packets and events go on the deferred-work queue the data path drains.

use rox_uapi::admin::*;
use rox_uapi::ids::{Key, Qpn};
use rox_uapi::queue::*;
use rox_uapi::verbs::*;

use super::deferred::Deferred;
use super::state::Hw;
use crate::roce::{
    AccessError, AddressVector, AtomicOp, Completion, DeviceEnv, FastReg, FlushSpec, Gid, MwBind,
    QpAsyncError, RecvWr, RemoteTarget, XrcSrq,
};

impl DeviceEnv for Hw {
    fn wqe_trace(&self) -> &crate::trace::WqeTrace {
        &self.shared.wqe_trace
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn multicast_members(&self, group: &Gid) -> Vec<Qpn> {
        self.mcast.get(group).cloned().unwrap_or_default()
    }

    fn flush_icrc(&self) -> crate::roce::wire::FlushIcrc {
        self.flush_icrc
    }

    fn may_send_request(&mut self, qpn: Qpn, adds_to_flight: bool) -> bool {
        self.tx_sched.may_send(qpn, adds_to_flight)
    }

    fn request_budget_spent(&self, qpn: Qpn) -> bool {
        self.tx_sched.budget_spent(qpn)
    }

    fn multicast_copy(&mut self) {
        self.stats[STAT_RX_MCAST_COPIES] += 1;
    }

    fn read_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), AccessError> {
        let r = self.mem_table.read_local(&*self.mem, pd, lkey, addr, buf);
        self.page_fault(r)
    }

    fn write_local(
        &mut self,
        pd: u32,
        lkey: Key,
        addr: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let r = self.mem_table.write_local(&*self.mem, pd, lkey, addr, data);
        self.page_fault(r)
    }

    fn read_remote(&mut self, at: RemoteTarget, buf: &mut [u8]) -> Result<(), AccessError> {
        let r = self.mem_table.read_remote(&*self.mem, at, buf);
        self.page_fault(r)
    }

    fn write_remote(&mut self, at: RemoteTarget, data: &[u8]) -> Result<(), AccessError> {
        let r = self.mem_table.write_remote(&*self.mem, at, data);
        self.page_fault(r)
    }

    fn check_remote_read(&mut self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        let r = self.mem_table.check_remote_read(at, len);
        self.page_fault(r)
    }

    fn check_remote_write(&mut self, at: RemoteTarget, len: u64) -> Result<(), AccessError> {
        self.mem_table.check_remote_write(at, len)
    }

    fn bind_mw(&mut self, pd: u32, qpn: Qpn, bind: &MwBind) -> Result<(), AccessError> {
        self.mem_table.bind_mw(pd, qpn, bind)
    }

    fn fast_register(&mut self, pd: u32, _qpn: Qpn, reg: &FastReg) -> Result<(), AccessError> {
        self.mem_table.fast_register(&*self.mem, pd, reg)
    }

    fn invalidate(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        self.mem_table.invalidate(pd, qpn, rkey, remote)
    }

    fn check_invalidate(
        &mut self,
        pd: u32,
        qpn: Qpn,
        rkey: Key,
        remote: bool,
    ) -> Result<(), AccessError> {
        self.mem_table.check_invalidate(pd, qpn, rkey, remote)
    }

    fn atomic_remote(&mut self, at: RemoteTarget, op: AtomicOp) -> Result<u64, AccessError> {
        let r = self.mem_table.atomic_remote(&*self.mem, at, op);
        self.page_fault(r)
    }

    fn flush_remote(&mut self, at: RemoteTarget, flush: FlushSpec) -> Result<(), AccessError> {
        self.mem_table.flush_remote(at, flush)
    }

    fn pop_recv(&mut self, qpn: Qpn) -> Option<RecvWr> {
        Hw::pop_recv(self, qpn)
    }

    fn recycle_sges(&mut self, sges: Vec<crate::roce::Sge>) {
        self.spare_sges.give_back(sges)
    }

    fn xrc_srq(&self, srqn: u32) -> Option<XrcSrq> {
        let srq = self.srqs.get(&srqn).filter(|srq| srq.xrcd != XRCD_NONE)?;
        Some(XrcSrq {
            xrcd: srq.xrcd,
            pd: srq.pd,
        })
    }

    fn pop_xrc_srq(&mut self, srqn: u32) -> Option<RecvWr> {
        self.xrc_srq(srqn)?;
        self.pop_srq(srqn)
    }

    fn complete(&mut self, c: Completion) {
        // An XRC target's receives complete on the CQ of the XRC SRQ they went into.
        let xrc_cq = c.xrc_srq.map(|srqn| self.srqs.get(&srqn).map(|srq| srq.cq));
        let cq = match (xrc_cq, self.qps.get(&c.qp_num)) {
            (Some(Some(cq)), _) => cq,
            (None, Some(qp)) if c.is_recv => qp.recv_cq,
            (None, Some(qp)) => qp.send_cq,
            _ => return,
        };
        self.counters.completion(c.is_recv, c.status);
        let cqe = Cqe {
            wr_id: c.wr_id,
            byte_len: c.byte_len,
            // Immediate data travels in network order, an invalidated rkey in host order.
            imm_data: if c.wc_flags & WC_FLAG_WITH_INV != 0 {
                c.imm
            } else {
                c.imm.to_be()
            },
            qp_num: c.qp_num,
            // An XRC receive names its SRQ, whose WQE the consumer retires.
            src_qp: c.xrc_srq.map_or(c.src_qp, Qpn::from_raw),
            status: c.status as u8,
            opcode: c.opcode as u8,
            wc_flags: c.wc_flags | c.xrc_srq.map_or(0, |_| CQE_FLAG_XRC_SRQ),
            vendor_err: c.vendor_err,
            wqe_index: c.wqe_index,
            network_hdr: c.network_hdr,
            ..Default::default()
        };
        self.write_cqe(cq, cqe, c.solicited);
    }

    fn sq_drained(&mut self, qpn: Qpn) {
        // A modify to SQD with nothing in flight drains at once: deferred so the driver sees
        // its modify complete before the event.
        self.deferred.push_back(Deferred::Event {
            event_type: EQE_TYPE_SQ_DRAINED,
            qpn,
        });
    }

    fn qp_entered_error(&mut self, qpn: Qpn) {
        // A parked QP's WQEs are still in its SQ: the next pass takes them and flushes them
        // at once, not at a turn that waits for the flight (datapath/sched.rs, "Parked QPs").
        if self.tx_sched.unpark(qpn) {
            if let Some(qp) = self.qps.get(&qpn) {
                self.shared.doorbells.store_news(qp.db_page, qp.db_slot);
            }
        }
        // No more receive WQEs of this QP will be taken from its SRQ (IBA 11.6.3.2).
        if self.qps.get(&qpn).is_some_and(|qp| qp.srq != SRQ_NONE) {
            self.deferred.push_back(Deferred::Event {
                event_type: EQE_TYPE_QP_LAST_WQE,
                qpn,
            });
        }
    }

    fn qp_async_error(&mut self, qpn: Qpn, error: QpAsyncError) {
        let event_type = match error {
            QpAsyncError::InvalidRequest => EQE_TYPE_QP_REQ_ERR,
            QpAsyncError::AccessViolation => EQE_TYPE_QP_ACCESS_ERR,
        };
        self.deferred.push_back(Deferred::Event { event_type, qpn });
    }

    /// Queued for the data path, which routes it (loopback, port, or lost with the link).
    fn transmit(&mut self, av: &AddressVector, packet: crate::roce::wire::Packet) {
        self.deferred.push_back(Deferred::Transmit {
            dgid: av.dgid,
            dmac: av.dmac,
            packet,
        });
    }
}
