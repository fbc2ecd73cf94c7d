//! Doorbells and send queues: scanning the doorbell pages and CQ arm words, fetching and
//! decoding SQ WQEs for the engine, telling it about new receive WQEs, failing broken QPs.

use super::super::doorbell::{DoorbellBar, PageSet};
use super::super::state::QpQueues;
use super::*;
use crate::dma::read_as;

impl DataPath {
    pub(super) fn scan_doorbells(&mut self) -> bool {
        self.hw.stats[STAT_DOORBELL_SCANS] += 1;
        let mut work = false;
        // Reuse one buffer: this runs every few microseconds while busy.
        let mut qpns = std::mem::take(&mut self.scan_buf);
        qps_with_doorbell_news(self.hw.qps.values(), &self.shared.doorbells, &mut qpns);
        for &qpn in &qpns {
            work |= self.process_sq(qpn);
            work |= self.process_rq(qpn);
        }
        self.scan_buf = qpns;
        work | self.scan_cq_arms()
    }

    /// A CQ armed while it still holds unconsumed CQEs gets its event at once, so software
    /// that arms after a poll never sleeps on a completion that already arrived.
    pub(super) fn scan_cq_arms(&mut self) -> bool {
        let mut fire = Vec::new();
        for (&id, cq) in self.hw.cqs.iter_mut() {
            let slot = self.shared.doorbells.slot(cq.db_page, cq.db_slot);
            if CqArm::from_bits(slot.b).seq == cq.arm_seq {
                continue;
            }
            Hw::update_arm(cq, slot.b);
            if cq.armed != 0 && cq.pi != slot.a && !cq.error {
                cq.armed = 0;
                fire.push((id, cq.eqn));
            }
        }
        for (id, eqn) in &fire {
            self.hw.post_event(*eqn, EQE_TYPE_COMPLETION, *id, 0);
        }
        !fire.is_empty()
    }

    /// A QP whose queues cannot be trusted any more: async event, error state (which reports
    /// LAST_WQE for a QP with an SRQ).
    pub(super) fn qp_fatal(&mut self, qpn: Qpn, why: u8) {
        if let Some(qp) = self.hw.qps.get_mut(&qpn) {
            qp.broken = true;
        }
        self.hw
            .async_event(EQE_TYPE_QP_FATAL, qpn.get(), why as u32);
        let _ = self.engine.set_error(&mut self.hw, qpn);
    }

    pub(super) fn process_sq(&mut self, qpn: Qpn) -> bool {
        let Some(qp) = self.hw.qps.get(&qpn) else {
            return false;
        };
        if qp.broken {
            return false;
        }
        // WQEs posted before RTS wait; in SQD new WQEs wait for the return to RTS.
        let state = self.engine.qp_state(qpn);
        if !matches!(state, Some(QpState::Rts | QpState::Sqe | QpState::Err)) {
            return false;
        }
        let pi = self.shared.doorbells.slot(qp.db_page, qp.db_slot).a;
        let pending = match posted_entries(pi, qp.sq_ci, qp.sq.depth) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(WildIndex) => {
                self.qp_fatal(qpn, VENDOR_ERR_WILD_INDEX);
                return true;
            }
        };
        self.shared.wqe_trace.doorbell(qpn.get(), pi, pending);
        // The batch is queued WQE by WQE and sent in one burst.
        self.queue_sq_batch(qpn, pending.min(SQ_BATCH));
        let _ = self.engine.send_queued(&mut self.hw, qpn);
        true
    }

    /// Fetches, decodes and queues up to `count` WQEs of QP `qpn`'s SQ in the engine; a WQE
    /// it cannot read makes the QP fatal (after what was queued before it is sent).
    fn queue_sq_batch(&mut self, qpn: Qpn, count: u32) {
        // One WQE buffer for the batch, each fetch overwrites all of it.
        let mut wqe: SqWqe = crate::dma::from_bytes(&[]);
        for _ in 0..count {
            let Some(qp) = self.hw.qps.get_mut(&qpn) else {
                return;
            };
            let index = qp.sq_ci;
            let addr = qp.sq.entry_addr(index);
            qp.sq_ci = qp.sq_ci.wrapping_add(1);
            let sig_all = qp.sq_sig_all;
            let qp_type = qp.qp_type;
            if self.hw.mem.read_into(addr, &mut wqe).is_err() {
                let _ = self.engine.send_queued(&mut self.hw, qpn);
                self.qp_fatal(qpn, VENDOR_ERR_BAD_DMA);
                return;
            }
            self.hw.stats[STAT_SEND_WQES] += 1;
            self.shared.wqe_trace.wqe_fetch(qpn.get(), index, &wqe);
            // Its CQE names it by index: kernel consumers retire their queues by it.
            let wqe_index = index as u16;
            // Only an SGE list keeps the spare list it is decoded into (an inline WQE's would
            // be dropped with it, and the pool would allocate anew).
            let sges = if wqe.flags & WqeFlags::INLINE.bits() != 0 {
                Vec::new()
            } else {
                self.hw.spare_sges.pop().unwrap_or_default()
            };
            // Decoded into its place in the engine's send queue (where it stays).
            let Ok(slot) = self.engine.send_slot(qpn) else {
                return;
            };
            let decoded = match decode_send(&self.hw, qp_type, sig_all, &wqe, sges, slot) {
                Ok(()) => {
                    slot.wqe_index = wqe_index;
                    Ok(())
                }
                Err((status, vendor_err)) => {
                    // Completes behind the WRs already in the engine, then the QP leaves RTS.
                    self.hw.stats[STAT_WQE_ERRORS] += 1;
                    Err(FailedWr {
                        wr_id: wqe.wr_id,
                        // An unknown opcode completes as a SEND (what ibv reports for it).
                        opcode: WrOpcode::from_u8(wqe.opcode).unwrap_or(WrOpcode::Send),
                        status,
                        vendor_err,
                        wqe_index,
                    })
                }
            };
            let _ = self.engine.queue_decoded(&mut self.hw, qpn, decoded);
        }
    }

    /// Receive WQEs are consumed on demand by the engine; the doorbell only matters to flush
    /// new ones in the error state.
    pub(super) fn process_rq(&mut self, qpn: Qpn) -> bool {
        let Some(qp) = self.hw.qps.get(&qpn) else {
            return false;
        };
        if qp.rq.is_none() || qp.broken {
            return false;
        }
        let pi = self.shared.doorbells.slot(qp.db_page, qp.db_slot).b;
        if pi == qp.rq_pi_seen {
            return false;
        }
        if let Some(qp) = self.hw.qps.get_mut(&qpn) {
            qp.rq_pi_seen = pi;
        }
        if self.engine.qp_state(qpn) == Some(QpState::Err) {
            let _ = self.engine.recv_posted(&mut self.hw, qpn);
            return true;
        }
        false
    }

    /// The doorbell pages whose RQ doorbells must wake the idle device: those of QPs with a
    /// receive queue of their own in the error state, whose new receive WQEs
    /// [`Self::process_rq`] flushes. Elsewhere the engine reads an RQ's producer index when a
    /// message needs a receive WQE, so an RQ doorbell needs no wake.
    pub(super) fn rq_wake_pages(&self) -> PageSet {
        let mut pages = PageSet::default();
        for qp in self.hw.qps.values() {
            if qp.rq.is_some() && !qp.broken && self.engine.qp_state(qp.qpn) == Some(QpState::Err) {
                pages.insert(qp.db_page);
            }
        }
        pages
    }
}

/// The QPs whose doorbell slot says something the device has not taken yet (an SQ producer
/// index past the WQEs fetched, an RQ producer index not seen), into `out`. One load of the
/// slot per QP and nothing else: a pass of a device with 256 QPs looked each one up twice
/// and asked the engine its state, idle or not, and that per-QP cost made 256 QPs move half
/// what 16 do (docs/benchmarks.md).
pub(super) fn qps_with_doorbell_news<'a>(
    qps: impl Iterator<Item = &'a QpQueues>,
    doorbells: &DoorbellBar,
    out: &mut Vec<Qpn>,
) {
    out.clear();
    out.extend(
        qps.filter(|qp| {
            let slot = doorbells.slot(qp.db_page, qp.db_slot);
            // A broken QP's queues are not looked at any more.
            !qp.broken && (slot.a != qp.sq_ci || (qp.rq.is_some() && slot.b != qp.rq_pi_seen))
        })
        .map(|qp| qp.qpn),
    );
}

/// Decodes a send WQE into `wr`, a blank WR ([`SendWr::new`]: the fields an opcode does not
/// use keep its values); its SGEs go into `sges` (an empty list whose allocation is reused).
/// Errors are (WC status, vendor_err) for the error CQE.
pub fn decode_send(
    hw: &Hw,
    qp_type: u8,
    sig_all: bool,
    w: &SqWqe,
    mut sges: Vec<roce::Sge>,
    wr: &mut SendWr,
) -> Result<(), (WcStatus, u8)> {
    let opcode =
        WrOpcode::from_u8(w.opcode).ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    let flags =
        WqeFlags::from_bits(w.flags).ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    let data = if flags.contains(WqeFlags::INLINE) {
        if w.inline_len > SQ_MAX_INLINE {
            return Err((WcStatus::LocLenErr, VENDOR_ERR_BAD_INLINE));
        }
        SendData::Inline(w.data[..w.inline_len as usize].to_vec())
    } else {
        if w.num_sge as u32 > SQ_MAX_SGE {
            return Err((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_SGE_COUNT));
        }
        sges.extend(
            w.data[..w.num_sge as usize * size_of::<Sge>()]
                .chunks_exact(size_of::<Sge>())
                .map(|b| {
                    let s: Sge = crate::dma::from_bytes(b);
                    roce::Sge {
                        addr: s.addr,
                        length: s.length,
                        lkey: s.lkey,
                    }
                }),
        );
        SendData::Sges(sges)
    };
    // Field by field: the WR is not built apart and moved in.
    wr.wr_id = w.wr_id;
    wr.opcode = opcode;
    wr.signaled = sig_all || flags.contains(WqeFlags::SIGNALED);
    wr.solicited = flags.contains(WqeFlags::SOLICITED);
    wr.fence = flags.contains(WqeFlags::FENCE);
    wr.data = data;
    wr.imm = u32::from_be(w.imm_data);
    if qp_type == QPT_XRC_INI {
        wr.xrc_srqn = w.xrc_srqn;
    }
    if qp_type == QPT_UD || qp_type == QPT_GSI {
        let ud: UdSeg = read_as(&w.seg);
        let sgid = hw
            .gids
            .get(ud.sgid_index as usize)
            .ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
        wr.ud = Some(UdDest {
            av: AddressVector {
                dgid: ud.dgid,
                sgid,
                traffic_class: ud.traffic_class,
                hop_limit: ud.hop_limit,
                flow_label: ud.flow_label,
                dmac: ud.dmac,
            },
            remote_qpn: ud.dest_qpn,
            remote_qkey: ud.qkey,
        });
    } else {
        let r: RdmaSeg = read_as(&w.seg);
        wr.remote_addr = r.remote_addr;
        wr.rkey = r.rkey;
        wr.compare_add = r.compare_add;
        wr.swap = r.swap;
        match opcode {
            // The 8 bytes to write travel in compare_add; they become the WR's payload.
            WrOpcode::AtomicWrite => {
                wr.data = SendData::Inline(r.compare_add.to_ne_bytes().to_vec());
            }
            WrOpcode::BindMw => {
                let b: BindSeg = read_as(&w.seg);
                wr.bind = Some(Box::new(MwBind {
                    addr: b.addr,
                    length: b.length,
                    new_rkey: b.new_rkey,
                    lkey: b.lkey,
                    access: b.access,
                }));
                wr.data = SendData::Sges(Vec::new());
            }
            WrOpcode::RegMr => {
                let f: FastRegSeg = read_as(&w.seg);
                wr.fast_reg = Some(Box::new(FastReg {
                    iova: f.iova,
                    length: f.length,
                    page_list: f.page_list,
                    key: f.key,
                    access: f.access,
                    npages: f.npages,
                    page_shift: f.page_shift,
                }));
                wr.data = SendData::Sges(Vec::new());
            }
            WrOpcode::Flush => {
                wr.flush = FlushSpec {
                    length: r.length,
                    placement_type: r.flush_type,
                    level: r.flush_level,
                };
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::ring::Ring;

    /// QP `n`'s queues: doorbell slot `n` of a page, nothing fetched or seen yet.
    fn queues(n: u32, with_rq: bool) -> QpQueues {
        let ring = Ring {
            pages: vec![0],
            page_shift: 12,
            depth: 64,
            entry_shift: 6,
        };
        QpQueues {
            qpn: Qpn::new(n + 2).unwrap(),
            qp_type: QPT_RC,
            pd: 1,
            send_cq: 1,
            recv_cq: 1,
            srq: 0,
            sq: ring.clone(),
            rq: with_rq.then_some(ring),
            db_page: 1 + n / DB_SLOTS_PER_PAGE as u32,
            db_slot: n % DB_SLOTS_PER_PAGE as u32,
            sq_sig_all: false,
            sq_ci: 0,
            rq_ci: 0,
            rq_pi_seen: 0,
            broken: false,
        }
    }

    #[test]
    fn a_scan_picks_only_the_qps_whose_doorbell_moved_however_many_are_idle() {
        let doorbells = DoorbellBar::new().unwrap();
        let mut qps: Vec<QpQueues> = (0..1024).map(|n| queues(n, n % 2 == 0)).collect();
        let mut out = Vec::new();
        qps_with_doorbell_news(qps.iter(), &doorbells, &mut out);
        assert!(out.is_empty(), "1024 idle QPs: nothing to visit");

        // An SQ producer index past what was fetched, an RQ index not seen yet.
        doorbells.store_a(qps[7].db_page, qps[7].db_slot, 3);
        doorbells.store_b(qps[600].db_page, qps[600].db_slot, 1);
        // An RQ doorbell of a QP without an RQ (its SRQ's) and a broken QP's SQ: not news.
        doorbells.store_b(qps[601].db_page, qps[601].db_slot, 1);
        doorbells.store_a(qps[900].db_page, qps[900].db_slot, 1);
        qps[900].broken = true;
        qps_with_doorbell_news(qps.iter(), &doorbells, &mut out);
        assert_eq!(out, vec![qps[7].qpn, qps[600].qpn]);

        // Taken: the indices caught up, so the next scan visits nobody again.
        qps[7].sq_ci = 3;
        qps[600].rq_pi_seen = 1;
        qps_with_doorbell_news(qps.iter(), &doorbells, &mut out);
        assert!(out.is_empty());
    }
}
