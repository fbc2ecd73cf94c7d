//! Doorbells and send queues: scanning the doorbell pages and CQ arm words, fetching and
//! decoding SQ WQEs for the engine, telling it about new receive WQEs, failing broken QPs.

use super::super::doorbell::{DbObject, DoorbellBar, DoorbellsUsed, PageSet};
use super::super::spare_sges::SpareSges;
use super::super::state::{Cq, GidTable, QpQueues};
use super::*;
use crate::dma::read_as;
use crate::roce::id_map::IdMap;

impl DataPath {
    /// Looks at the doorbells with news (docs/summary-doorbell.md): on a page whose owner
    /// stores news bytes, the objects of the groups with news; on any other page, every object.
    pub(super) fn scan_doorbells(&mut self) -> bool {
        self.hw.stats[STAT_DOORBELL_SCANS] += 1;
        let mut work = false;
        // Reuse the lists: this runs every few microseconds while busy.
        let mut news = std::mem::take(&mut self.scan_news);
        let slot_by_slot = doorbell_news(
            &self.hw.doorbells_used,
            &self.hw.qps,
            &self.hw.cqs,
            &self.shared.doorbells,
            &mut news,
        );
        for &qpn in &news.qps {
            let sq_work = self.process_sq(qpn);
            let rq_work = self.process_rq(qpn);
            if self.work_side.is_none() {
                self.work_side = if sq_work {
                    Some(Side::sq_doorbell(qpn))
                } else if rq_work {
                    Some(Side::rq_doorbell(qpn))
                } else {
                    None
                };
            }
            work |= sq_work | rq_work;
            self.keep_news(qpn, &slot_by_slot);
        }
        work |= self.check_cq_arms(&news.cqs);
        self.scan_news = news;
        work
    }

    /// A QP whose doorbell still says more than the device took (WQEs past a batch, or posted
    /// before RTS, which wait) gets its news byte back, so that the next pass looks at it
    /// again as a slot-by-slot scan would; nothing for a QP on a page scanned slot by slot.
    fn keep_news(&self, qpn: Qpn, slot_by_slot: &PageSet) {
        let Some(qp) = self.hw.qps.get(&qpn) else {
            return;
        };
        let doorbells = &self.shared.doorbells;
        // A parked QP's WQEs are taken at its turn (`fetch_parked`), not looked for again.
        if !slot_by_slot.contains(qp.db_page)
            && !self.hw.tx_sched.is_parked(qpn)
            && has_doorbell_news(qp, doorbells)
        {
            doorbells.store_news(qp.db_page, qp.db_slot);
        }
    }

    /// Takes the new arm words of CQs `ids`. A CQ armed while it still holds unconsumed CQEs
    /// gets its event at once, so software that arms after a poll never sleeps on a
    /// completion that already arrived.
    fn check_cq_arms(&mut self, ids: &[u32]) -> bool {
        let mut fire = Vec::new();
        for &id in ids {
            let Some(cq) = self.hw.cqs.get_mut(&id) else {
                continue;
            };
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
        // A parked QP's WQEs wait for its turn (`fetch_parked`); its group's news (another
        // QP's doorbell) brings it here again.
        if qp.broken || self.hw.tx_sched.is_parked(qpn) {
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
        // While the port's flight is full an RC QP's new WQEs could only queue behind a
        // refused packet: the QP waits for its turn with them in its SQ (sched.rs, "Parked
        // QPs"). Not work: the pass may sleep. A local operation (or a WQE it cannot read)
        // at the head is taken now: it needs no flight.
        let parks = state == Some(QpState::Rts)
            && qp_type_counts_in_flight(qp.qp_type)
            && head_needs_the_wire(&self.hw.mem, qp);
        if parks && self.park_if_flight_full(qpn) {
            self.shared.parked_doorbells.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.shared.sq_fetches.fetch_add(1, Ordering::Relaxed);
        self.shared.wqe_trace.doorbell(qpn.get(), pi, pending);
        // The batch is queued WQE by WQE and sent in one burst.
        self.queue_sq_batch(qpn, pending.min(SQ_BATCH));
        let _ = self.engine.send_queued(&mut self.hw, qpn);
        true
    }

    /// Parks RC QP `qpn` if the port's flight is full by a fresh count. The budget's count
    /// may be old: an ACK that emptied the flight refills nothing when no QP waits, and a QP
    /// parked on that count by the idle re-scan (which runs no turns) waited with nothing in
    /// flight to wake the device (review of s20-qps, tests/device_parked.rs).
    fn park_if_flight_full(&mut self, qpn: Qpn) -> bool {
        if self.hw.tx_sched.would_park() {
            self.refill_tx_budget_now();
        }
        self.hw.tx_sched.park(qpn)
    }

    /// The turn of QP `qpn`, parked until now (sched.rs, "Parked QPs"): its WQEs are fetched
    /// as its doorbell would have had them (parked again if the flight filled meanwhile);
    /// what is left past the batch gets its news back, as `keep_news` does, for the next pass.
    pub(super) fn fetch_parked(&mut self, qpn: Qpn) {
        self.process_sq(qpn);
        let Some(qp) = self.hw.qps.get(&qpn) else {
            return;
        };
        if !self.hw.tx_sched.is_parked(qpn) && has_doorbell_news(qp, &self.shared.doorbells) {
            self.shared.doorbells.store_news(qp.db_page, qp.db_slot);
        }
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
            // Decoded into its place in the engine's send queue (where it stays).
            let Ok(slot) = self.engine.send_slot(qpn) else {
                return;
            };
            let hw = &mut self.hw;
            let decoded =
                match decode_send(&hw.gids, &mut hw.spare_sges, qp_type, sig_all, &wqe, slot) {
                    Ok(()) => {
                        slot.wqe_index = wqe_index;
                        Ok(())
                    }
                    Err((status, vendor_err)) => {
                        // Completes behind the WRs already in the engine, then the QP leaves RTS.
                        hw.stats[STAT_WQE_ERRORS] += 1;
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

    /// What the idle device's doorbell pages say (`DbPage::rq_no_wake`, `rc_sq_no_wake`):
    /// the pages whose RQ doorbells must wake it, and those whose RC SQ doorbells need not.
    ///
    /// RQ: those of QPs with a receive queue of their own in the error state, whose new
    /// receive WQEs [`Self::process_rq`] flushes. Elsewhere the engine reads an RQ's producer
    /// index when a message needs a receive WQE, so an RQ doorbell needs no wake.
    ///
    /// RC SQ: while the port's flight is full, an RC QP's new WQEs that send packets are
    /// parked (sched.rs, "Parked QPs") until an ACK or a retransmission timer, both of which
    /// wake the device: every page but those of an RC QP in the error state (whose WQEs are
    /// flushed at once). Counted afresh: the scheduler's budget may be older than the last ACK.
    pub(super) fn idle_wake_pages(&mut self) -> (PageSet, PageSet) {
        let flight_full = self.port.is_some()
            && self.engine.flight_for_budget(sched::PORT_INFLIGHT_LIMIT)
                >= sched::PORT_INFLIGHT_LIMIT;
        let mut rq_wake = PageSet::default();
        let mut rc_sq_wake = PageSet::default();
        for qp in self.hw.qps.values() {
            if qp.broken || self.engine.qp_state(qp.qpn) != Some(QpState::Err) {
                continue;
            }
            if qp.rq.is_some() {
                rq_wake.insert(qp.db_page);
            }
            if qp_type_counts_in_flight(qp.qp_type) {
                rc_sq_wake.insert(qp.db_page);
            }
        }
        let mut rc_sq_quiet = PageSet::default();
        if flight_full {
            for page in self.hw.doorbells_used.pages().iter() {
                if !rc_sq_wake.contains(page) {
                    rc_sq_quiet.insert(page);
                }
            }
        }
        (rq_wake, rc_sq_quiet)
    }
}

/// The objects a scan looks at: QPs whose doorbell slot says something the device has not
/// taken yet, and CQs whose arm word may have changed.
#[derive(Debug, Default)]
pub(super) struct DoorbellNews {
    pub qps: Vec<Qpn>,
    pub cqs: Vec<u32>,
}

/// Fills `out` with the objects to look at; returns the pages scanned slot by slot. A page
/// whose owner stores news bytes (`DbPage::news_on`, trusted while the driver's page has it
/// too) costs its news words and the objects of the groups with news, however many objects it
/// holds: loading every QP's slot on every pass was the per-QP cost left at 256 QPs
/// (docs/benchmarks/session-16.md, "Session 16: 256 QPs against 16"). Any other page's objects are
/// all looked at, as before the summary doorbell. SRQs are not: the engine reads an SRQ's
/// producer index when a message needs a receive WQE.
pub(super) fn doorbell_news(
    used: &DoorbellsUsed,
    qps: &IdMap<Qpn, QpQueues>,
    cqs: &IdMap<u32, Cq>,
    doorbells: &DoorbellBar,
    out: &mut DoorbellNews,
) -> PageSet {
    out.qps.clear();
    out.cqs.clear();
    let trusted = doorbells.news_on(DB_PAGE_KERNEL);
    let mut slot_by_slot = PageSet::default();
    for (page, objects) in used.iter() {
        if !(trusted && doorbells.news_on(page)) {
            slot_by_slot.insert(page);
            continue;
        }
        let mut groups = doorbells.take_news(page);
        while groups != 0 {
            let group = groups.trailing_zeros() as usize;
            groups &= groups - 1;
            for (_, object) in objects.group(group) {
                match object {
                    DbObject::Qp(qpn) => {
                        if qps
                            .get(&qpn)
                            .is_some_and(|qp| has_doorbell_news(qp, doorbells))
                        {
                            out.qps.push(qpn);
                        }
                    }
                    DbObject::Cq(id) => out.cqs.push(id),
                    DbObject::Srq(_) => {}
                }
            }
        }
    }
    if !slot_by_slot.is_empty() {
        out.qps.extend(
            qps.values()
                .filter(|qp| slot_by_slot.contains(qp.db_page) && has_doorbell_news(qp, doorbells))
                .map(|qp| qp.qpn),
        );
        out.cqs.extend(
            cqs.iter()
                .filter(|(_, cq)| slot_by_slot.contains(cq.db_page))
                .map(|(&id, _)| id),
        );
    }
    slot_by_slot
}

/// Whether the first WQE the device has not taken from QP `qp`'s SQ sends packets (one byte
/// read: its opcode). A local operation (BIND_MW, LOCAL_INV, REG_MR), an unknown opcode or a
/// WQE the device cannot read completes without the wire, so its QP is not parked.
fn head_needs_the_wire(mem: &crate::dma::GuestMemory, qp: &QpQueues) -> bool {
    let mut opcode = [0u8; 1];
    let at = qp.sq.entry_addr(qp.sq_ci) + std::mem::offset_of!(SqWqe, opcode) as u64;
    mem.read(at, &mut opcode).is_ok()
        && WrOpcode::from_u8(opcode[0]).is_some_and(|op| !op.is_local())
}

/// Whether QP `qp`'s doorbell slot says something the device has not taken yet (an SQ
/// producer index past the WQEs fetched, an RQ producer index not seen). One load of the slot
/// and nothing else: a pass of a device with 256 QPs looked each one up twice and asked the
/// engine its state, idle or not (docs/benchmarks/session-07.md, "Session 7: why 256 QPs moved half
/// of what 16 do").
fn has_doorbell_news(qp: &QpQueues, doorbells: &DoorbellBar) -> bool {
    let slot = doorbells.slot(qp.db_page, qp.db_slot);
    // A broken QP's queues are not looked at any more.
    !qp.broken && (slot.a != qp.sq_ci || (qp.rq.is_some() && slot.b != qp.rq_pi_seen))
}

/// Decodes a send WQE into `wr`, a blank WR ([`SendWr::new`]: the fields an opcode does not
/// use keep its values). Its SGEs go into a list from `spares`, which stays in `wr` (a
/// failed WR's goes back with it, [`crate::roce::engine::Engine::queue_decoded`]); a WR
/// that ends up without SGEs gives its list back at once. Errors are (WC status,
/// vendor_err) for the error CQE.
pub fn decode_send(
    gids: &GidTable,
    spares: &mut SpareSges,
    qp_type: u8,
    sig_all: bool,
    w: &SqWqe,
    wr: &mut SendWr,
) -> Result<(), (WcStatus, u8)> {
    let opcode =
        WrOpcode::from_u8(w.opcode).ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    let flags =
        WqeFlags::from_bits(w.flags).ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    let data = decode_data(spares, flags, w)?;
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
        wr.ud = Some(decode_ud_dest(gids, w)?);
    } else {
        decode_rdma_seg(spares, w, wr);
    }
    Ok(())
}

/// What a send WQE sends: its inline bytes, or its SGE list (in a list from `spares`).
fn decode_data(
    spares: &mut SpareSges,
    flags: WqeFlags,
    w: &SqWqe,
) -> Result<SendData, (WcStatus, u8)> {
    if flags.contains(WqeFlags::INLINE) {
        if w.inline_len > SQ_MAX_INLINE {
            return Err((WcStatus::LocLenErr, VENDOR_ERR_BAD_INLINE));
        }
        return Ok(SendData::Inline(w.data[..w.inline_len as usize].to_vec()));
    }
    if w.num_sge as u32 > SQ_MAX_SGE {
        return Err((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_SGE_COUNT));
    }
    let mut sges = spares.take();
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
    Ok(SendData::Sges(sges))
}

/// The destination of a UD (or GSI) send WQE: its address vector from the UD segment, the
/// source GID from the port's table.
fn decode_ud_dest(gids: &GidTable, w: &SqWqe) -> Result<UdDest, (WcStatus, u8)> {
    let ud: UdSeg = read_as(&w.seg);
    let sgid = gids
        .get(ud.sgid_index as usize)
        .ok_or((WcStatus::LocQpOpErr, VENDOR_ERR_BAD_OPCODE))?;
    Ok(UdDest {
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
    })
}

/// The segment of a connected QP's send WQE: the RDMA and atomic fields, or what the
/// operations that carry their own segment (ATOMIC WRITE, BIND_MW, REG_MR, FLUSH) need. An
/// operation whose segment replaces its data gives the SGE list back to `spares`.
fn decode_rdma_seg(spares: &mut SpareSges, w: &SqWqe, wr: &mut SendWr) {
    let r: RdmaSeg = read_as(&w.seg);
    wr.remote_addr = r.remote_addr;
    wr.rkey = r.rkey;
    wr.compare_add = r.compare_add;
    wr.swap = r.swap;
    match wr.opcode {
        // The 8 bytes to write travel in compare_add; they become the WR's payload.
        WrOpcode::AtomicWrite => {
            let bytes = SendData::Inline(r.compare_add.to_ne_bytes().to_vec());
            spares.give_back_data(std::mem::replace(&mut wr.data, bytes));
        }
        WrOpcode::BindMw => {
            wr.bind = Some(Box::new(read_as::<MwBind, _>(&w.seg)));
        }
        WrOpcode::RegMr => {
            wr.fast_reg = Some(Box::new(read_as::<FastReg, _>(&w.seg)));
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
    if matches!(wr.opcode, WrOpcode::BindMw | WrOpcode::RegMr) {
        // Their segment is all they carry.
        spares.give_back_data(std::mem::replace(&mut wr.data, SendData::Sges(Vec::new())));
    }
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

    /// 1024 QPs on pages 1, 2 and 3 (504 a page), CQ 3 on page 3 and CQ 4 on page 4; pages 1,
    /// 2 and 4 say they store news, and the kernel's page too (the driver's word).
    fn many_qps(doorbells: &DoorbellBar) -> (DoorbellsUsed, IdMap<Qpn, QpQueues>, IdMap<u32, Cq>) {
        let mut used = DoorbellsUsed::default();
        let mut qps = IdMap::default();
        for n in 0..1024 {
            let qp = queues(n, n % 2 == 0);
            assert!(used.claim(qp.db_page, qp.db_slot, DbObject::Qp(qp.qpn)));
            qps.insert(qp.qpn, qp);
        }
        let mut cqs = IdMap::default();
        for (page, slot) in [(3, DB_SLOTS_PER_PAGE as u32 - 1), (4, 0)] {
            assert!(used.claim(page, slot, DbObject::Cq(page)));
            cqs.insert(page, cq(page, slot));
        }
        for page in [DB_PAGE_KERNEL, 1, 2, 4] {
            doorbells.set_news_on(page, true);
        }
        (used, qps, cqs)
    }

    fn cq(page: u32, slot: u32) -> Cq {
        Cq {
            ring: Ring {
                pages: vec![0],
                page_shift: 12,
                depth: 64,
                entry_shift: 6,
            },
            eqn: 1,
            db_page: page,
            db_slot: slot,
            pi: 0,
            arm_seq: 0,
            armed: 0,
            error: false,
            users: 0,
        }
    }

    fn page_list(pages: PageSet) -> Vec<u32> {
        pages.iter().collect()
    }

    #[test]
    fn news_in_one_group_finds_exactly_the_qps_of_that_group_whose_doorbell_moved() {
        let doorbells = DoorbellBar::new().unwrap();
        let (used, mut qps, cqs) = many_qps(&doorbells);
        let mut out = DoorbellNews::default();
        let scan = |qps: &IdMap<Qpn, QpQueues>, out: &mut DoorbellNews| {
            page_list(doorbell_news(&used, qps, &cqs, &doorbells, out))
        };
        assert_eq!(scan(&qps, &mut out), [3], "page 3's owner stores no news");
        assert!(out.qps.is_empty(), "1024 idle QPs: nothing to visit");
        assert_eq!(
            out.cqs,
            [3],
            "a CQ of a page without news is looked at on every pass"
        );

        // Broken QPs are not looked at, whatever their slots say: one in the group below,
        // one on page 3 (scanned slot by slot).
        for n in [504 + 2 * DB_NEWS_GROUP_SLOTS as u32 + 1, 1011] {
            qps.get_mut(&Qpn::new(n + 2).unwrap()).unwrap().broken = true;
        }
        let qp = |n: u32| &qps[&Qpn::new(n + 2).unwrap()];
        let ring = |qp: &QpQueues, sq: bool| {
            if sq {
                doorbells.store_a(qp.db_page, qp.db_slot, 3);
            } else {
                doorbells.store_b(qp.db_page, qp.db_slot, 1);
            }
            doorbells.store_news(qp.db_page, qp.db_slot);
        };
        // Group 2 of page 2 (QPs 504 + 22..=32): two rung, one (without an RQ) on its RQ
        // word only, which is no news, one broken. A group with news and no doorbell moved; a
        // slot moved without news on page 1; a slot moved on page 3, which is scanned slot by
        // slot, and a broken QP's there.
        let group = 2 * DB_NEWS_GROUP_SLOTS as u32;
        ring(qp(504 + group), true);
        ring(qp(504 + group + 1), true);
        doorbells.store_a(qp(1011).db_page, qp(1011).db_slot, 1);
        ring(qp(504 + group + 4), false);
        ring(qp(504 + group + 5), false);
        doorbells.store_news(1, 7 * DB_NEWS_GROUP_SLOTS as u32);
        doorbells.store_a(qp(40).db_page, qp(40).db_slot, 1);
        doorbells.store_a(qp(1010).db_page, qp(1010).db_slot, 1);
        assert_eq!(scan(&qps, &mut out), [3]);
        assert_eq!(
            out.qps,
            [qp(504 + group).qpn, qp(504 + group + 4).qpn, qp(1010).qpn]
        );

        // Taken: the group's news is gone, page 3's QP is found while its slot is ahead.
        assert_eq!(scan(&qps, &mut out), [3]);
        assert_eq!(out.qps, [qp(1010).qpn]);
        qps.get_mut(&Qpn::new(1012).unwrap()).unwrap().sq_ci = 1;
        scan(&qps, &mut out);
        assert!(out.qps.is_empty());

        // A CQ's arm word with news: that CQ (and page 3's, looked at on every pass).
        doorbells.store_b(4, cqs[&4].db_slot, cq_arm_word(1, CQ_ARM_NEXT));
        doorbells.store_news(4, cqs[&4].db_slot);
        scan(&qps, &mut out);
        assert_eq!(out.cqs, [4, 3]);
    }

    /// A WQE of `opcode` with `num_sge` (zeroed) SGEs, or inline (8 bytes).
    fn send_wqe(opcode: WrOpcode, num_sge: u8, inline: bool) -> SqWqe {
        let mut w: SqWqe = crate::dma::from_bytes(&[]);
        w.opcode = opcode as u8;
        w.num_sge = num_sge;
        if inline {
            w.flags = WqeFlags::INLINE.bits();
            w.inline_len = 8;
        }
        w
    }

    /// Every SGE list taken from the spares stays in a WR that has SGEs or goes back: the
    /// WRs without any (ATOMIC WRITE, BIND_MW, REG_MR) dropped theirs, and a WQE refused
    /// before its SGEs were read takes none.
    #[test]
    fn decoding_keeps_a_spare_sge_list_only_in_a_wr_with_sges() {
        let gids = GidTable::default();
        let mut spares = SpareSges::default();
        for _ in 0..2 {
            spares.give_back(Vec::with_capacity(4));
        }
        let mut decode = |w: SqWqe| {
            let mut wr = SendWr::new(0, WrOpcode::Send);
            let result = decode_send(&gids, &mut spares, QPT_RC, false, &w, &mut wr);
            (result, wr.data, spares.len())
        };
        let (result, data, left) = decode(send_wqe(WrOpcode::RdmaWrite, 2, false));
        assert!(result.is_ok());
        assert!(matches!(&data, SendData::Sges(s) if s.len() == 2 && s.capacity() == 4));
        assert_eq!(left, 1, "the WRITE keeps its list");
        // Payloads without an SGE list: the inline bytes, the ATOMIC WRITE's 8, none.
        for (w, payload) in [
            (send_wqe(WrOpcode::Send, 0, true), 8),
            (send_wqe(WrOpcode::AtomicWrite, 1, false), 8),
            (send_wqe(WrOpcode::BindMw, 1, false), 0),
            (send_wqe(WrOpcode::RegMr, 1, false), 0),
        ] {
            let (result, data, left) = decode(w);
            assert!(result.is_ok());
            assert_eq!((data.len(), left), (payload, 1), "opcode {}", w.opcode);
        }
        let mut unknown = send_wqe(WrOpcode::Send, 1, false);
        unknown.opcode = 0xee;
        for w in [
            unknown,
            send_wqe(WrOpcode::Send, SQ_MAX_SGE as u8 + 1, false),
        ] {
            let (result, _, left) = decode(w);
            assert!(result.is_err());
            assert_eq!(left, 1, "refused before its SGEs: no list taken");
        }
    }

    #[test]
    fn pages_are_scanned_slot_by_slot_unless_their_owner_and_the_driver_say_they_store_news() {
        let doorbells = DoorbellBar::new().unwrap();
        let (used, qps, cqs) = many_qps(&doorbells);
        let mut out = DoorbellNews::default();
        // Moved without news on pages 1 and 2.
        let moved = [Qpn::new(2 + 40).unwrap(), Qpn::new(2 + 700).unwrap()];
        for qpn in moved {
            let qp = &qps[&qpn];
            doorbells.store_a(qp.db_page, qp.db_slot, 1);
        }
        let slot_by_slot = doorbell_news(&used, &qps, &cqs, &doorbells, &mut out);
        assert_eq!(page_list(slot_by_slot), [3]);
        assert!(
            out.qps.is_empty(),
            "news pages: a slot without news is not looked at"
        );

        // The driver's page without news_on: a user page's is not trusted (an older rox.ko
        // does not clear it for the page's next context).
        doorbells.set_news_on(DB_PAGE_KERNEL, false);
        let slot_by_slot = doorbell_news(&used, &qps, &cqs, &doorbells, &mut out);
        assert_eq!(page_list(slot_by_slot), [1, 2, 3, 4]);
        let mut found = out.qps.clone();
        found.sort();
        assert_eq!(found, moved);
        let mut cq_ids = out.cqs.clone();
        cq_ids.sort();
        assert_eq!(cq_ids, [3, 4]);

        // The driver says it again; page 2's owner stops: page 2 slot by slot.
        doorbells.set_news_on(DB_PAGE_KERNEL, true);
        doorbells.set_news_on(2, false);
        let slot_by_slot = doorbell_news(&used, &qps, &cqs, &doorbells, &mut out);
        assert_eq!(page_list(slot_by_slot), [2, 3]);
        assert_eq!(out.qps, [moved[1]]);
    }
}
