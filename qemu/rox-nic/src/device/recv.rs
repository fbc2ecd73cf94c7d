//! Receive queues as the engine takes from them: the next WQE of a QP's RQ or of its SRQ
//! (SRQ limit events, wild producer indices and bad WQEs stop the queue).

use rox_uapi::admin::*;
use rox_uapi::ids::Qpn;
use rox_uapi::queue::*;

use super::deferred::Deferred;
use super::ring::{posted_entries, WildIndex};
use super::state::Hw;
use crate::roce::{self, RecvWr};

impl Hw {
    /// The next receive WQE of QP `qpn`: from its SRQ if it has one, else from its RQ.
    pub(crate) fn pop_recv(&mut self, qpn: Qpn) -> Option<RecvWr> {
        let srq = self.qps.get(&qpn)?.srq;
        if srq != SRQ_NONE {
            self.pop_srq(srq)
        } else {
            self.pop_rq(qpn)
        }
    }

    /// The receive WR of WQE `w`, fetched at ring index `index` (its CQE names that).
    fn decode_recv(&mut self, w: &RqWqe, index: u32) -> Option<RecvWr> {
        if w.num_sge as u32 > RQ_MAX_SGE {
            return None;
        }
        let mut sges = self.spare_sges.take();
        sges.extend(w.sge[..w.num_sge as usize].iter().map(|s| roce::Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }));
        Some(RecvWr {
            wr_id: w.wr_id,
            sges,
            wqe_index: index as u16,
        })
    }

    pub(crate) fn pop_srq(&mut self, srq_id: u32) -> Option<RecvWr> {
        let srq = self.srqs.get_mut(&srq_id)?;
        if srq.error {
            return None;
        }
        let pi = self.shared.doorbells.slot(srq.db_page, srq.db_slot).a;
        let avail = match posted_entries(pi, srq.ci, srq.ring.depth) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(WildIndex) => {
                srq.error = true;
                self.async_event(EQE_TYPE_SRQ_ERROR, srq_id, VENDOR_ERR_WILD_INDEX as u32);
                return None;
            }
        };
        let index = srq.ci;
        let w: Result<RqWqe, _> = self.mem.read_obj(srq.ring.entry_addr(index));
        srq.ci = index.wrapping_add(1);
        let left = avail - 1;
        let fire_limit = srq.limit != 0 && left < srq.limit;
        if fire_limit {
            srq.limit = 0;
        }
        let wr = match w {
            Ok(w) => self.decode_recv(&w, index),
            Err(_) => None,
        };
        if wr.is_none() {
            if let Some(srq) = self.srqs.get_mut(&srq_id) {
                srq.error = true;
            }
            self.async_event(EQE_TYPE_SRQ_ERROR, srq_id, VENDOR_ERR_BAD_SGE_COUNT as u32);
        }
        if fire_limit {
            self.async_event(EQE_TYPE_SRQ_LIMIT, srq_id, 0);
        }
        self.stats[STAT_RECV_WQES] += wr.is_some() as u64;
        wr
    }

    pub(crate) fn pop_rq(&mut self, qpn: Qpn) -> Option<RecvWr> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.broken {
            return None;
        }
        let rq = qp.rq.as_ref()?;
        let pi = self.shared.doorbells.slot(qp.db_page, qp.db_slot).b;
        match posted_entries(pi, qp.rq_ci, rq.depth) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(WildIndex) => {
                qp.broken = true;
                self.deferred.push_back(Deferred::FatalQp {
                    qpn,
                    why: VENDOR_ERR_WILD_INDEX,
                });
                return None;
            }
        }
        let index = qp.rq_ci;
        let w: Result<RqWqe, _> = self.mem.read_obj(rq.entry_addr(index));
        qp.rq_ci = index.wrapping_add(1);
        let wr = w.ok().and_then(|w| self.decode_recv(&w, index));
        if wr.is_none() {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.broken = true;
            }
            self.deferred.push_back(Deferred::FatalQp {
                qpn,
                why: VENDOR_ERR_BAD_SGE_COUNT,
            });
        } else {
            self.stats[STAT_RECV_WQES] += 1;
        }
        wr
    }
}
