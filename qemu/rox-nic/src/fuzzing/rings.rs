//! Target `rings`: arbitrary WQEs, SGE lists, producer and consumer indices and arm words on
//! the SQs, RQs, SRQ, CQs and EQs of a real device holding RC, UC and UD QPs (each pair
//! talking over the device's loopback), two MRs and a memory window. The input chooses
//! whether the driver stores the summary doorbell's news bytes (docs/summary-doorbell.md)
//! after its doorbells, whether a raw arm word gets one, and what the doorbell pages'
//! `news_on` say meanwhile (a wrong one makes the device miss doorbells: software's fault,
//! and the checks below hold all the same; the pages say the truth again before them).
//!
//! Invariants, checked once the device has gone idle:
//! - no byte of the guest memory the setup laid out changed unless it lies in the one
//!   writable MR or in a CQ ring: the read-only MR, the guard pages around both MRs, the page
//!   lists and the work queues (as the driver wrote them) are as they were;
//! - every CQE names one of the QPs and a work request id the driver wrote to that QP's
//!   queue (after a wild producer index, any slot of the queue counts as posted); the device
//!   counted (`STAT_CQES`) the CQEs it wrote: as many as were polled when no consumer index
//!   was tampered with, never fewer;
//! - the device is not fatal, unless the driver overran an EQ by writing a wild consumer
//!   index (fatal by design: then a reset must bring it back); it answers READ_MAC, and a new
//!   RC pair still moves a message.

use arbitrary::{Result, Unstructured};
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::*;
use rox_uapi::verbs::*;

use crate::device::DeviceConfig;
use crate::dma::{as_bytes, from_bytes};
use crate::testkit::*;

const MAC: [u8; 6] = [2, 0, 0, 0xf0, 0, 2];
const PD: u32 = 1;
const PAGE: u64 = ROX_PAGE_SIZE as u64;
const RW_LEN: u64 = 16 * PAGE;
const RO_LEN: u64 = 4 * PAGE;
const GUARD: u8 = 0xa5;
const MAX_OPS: usize = 48;
/// Work requests are settled after this long without the device going idle: a hang.
const SETTLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The device and what the setup made.
struct Rig {
    d: TestDriver,
    rw: u64,
    rw_key: Key,
    ro_key: Key,
    mw_key: Key,
    gid: [u8; 16],
    cqs: Vec<TestCq>,
    qps: Vec<TestQp>,
    srq: TestSrq,
    /// The guest memory the setup laid out, and what it must hold (updated for every store
    /// the driver makes).
    window: std::ops::Range<u64>,
    expected: Vec<u8>,
    /// Work request ids written to each QP's SQ and RQ (index as `qps`), and to the SRQ.
    sq_ids: Vec<Vec<u64>>,
    rq_ids: Vec<Vec<u64>>,
    srq_ids: Vec<u64>,
    /// CQEs polled so far.
    polled: u64,
    /// A consumer index was set to something else than what was polled.
    ci_tampered: bool,
    /// An EQ consumer index was set to something else than what was polled: the device may
    /// then find the EQ overflowing, which is fatal by design (the driver must reset).
    eq_tampered: bool,
}

impl Rig {
    fn new() -> Rig {
        let mut cfg = DeviceConfig::new(MAC);
        cfg.idle_after = std::time::Duration::from_millis(1);
        let mut d = TestDriver::in_process(cfg);
        let gid = gid_v4(127, 0, 0, 1);
        d.set_gid(0, gid);
        let start = d.ram.alloc(0, PAGE);
        let guard = |d: &mut TestDriver, len: u64| {
            let at = d.ram.alloc(len, PAGE);
            d.ram.fill(at, len as usize, GUARD);
        };
        guard(&mut d, PAGE);
        let rw = d.ram.alloc(RW_LEN, PAGE);
        d.ram.write(rw, &pattern(1, RW_LEN as usize));
        guard(&mut d, PAGE);
        let ro = d.ram.alloc(RO_LEN, PAGE);
        d.ram.write(ro, &pattern(2, RO_LEN as usize));
        guard(&mut d, PAGE);
        let all = ACCESS_LOCAL_WRITE
            | ACCESS_REMOTE_WRITE
            | ACCESS_REMOTE_READ
            | ACCESS_REMOTE_ATOMIC
            | ACCESS_MW_BIND;
        let rw_key = d.reg_mr(PD, rw, RW_LEN, all).expect("rw MR");
        let ro_key = d.reg_mr(PD, ro, RO_LEN, ACCESS_REMOTE_READ).expect("ro MR");
        let mw_key = d.run::<AllocMw>(AllocMwCmd {
            pd: PD,
            mw_type: MW_TYPE_2,
            reserved: [0; 3],
        });
        let cqs = vec![d.create_cq(10), d.create_cq(10)];
        let srq = d.create_srq(PD, 6, 4);
        let mut qps = Vec::new();
        for (t, srq_id) in [
            (QPT_RC, SRQ_NONE),
            (QPT_RC, srq.id),
            (QPT_UC, SRQ_NONE),
            (QPT_UC, SRQ_NONE),
            (QPT_UD, SRQ_NONE),
            (QPT_UD, srq.id),
        ] {
            let cq = cqs[qps.len() % 2].id;
            qps.push(d.create_qp(t, PD, cq, cq, srq_id));
        }
        let params = ConnectParams {
            timeout: 8,
            retry_cnt: 2,
            rnr_retry: 2,
            ..Default::default()
        };
        let remote = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
        for pair in [0, 2] {
            let (a, b) = (qps[pair], qps[pair + 1]);
            d.connect_with(&a, gid, b.qpn, remote, &params);
            d.connect_with(&b, gid, a.qpn, remote, &params);
        }
        d.activate_ud(&qps[4], PAIR_QKEY);
        d.activate_ud(&qps[5], PAIR_QKEY);
        let end = d.ram.alloc(0, PAGE);
        let expected = d.ram.read(start, (end - start) as usize);
        let n = qps.len();
        Rig {
            d,
            rw,
            rw_key,
            ro_key,
            mw_key,
            gid,
            cqs,
            qps,
            srq,
            window: start..end,
            expected,
            sq_ids: vec![Vec::new(); n],
            rq_ids: vec![Vec::new(); n],
            srq_ids: Vec::new(),
            polled: 0,
            ci_tampered: false,
            eq_tampered: false,
        }
    }

    /// A driver store into guest memory, mirrored into what the memory must hold.
    fn store(&mut self, addr: u64, bytes: &[u8]) {
        self.d.ram.write(addr, bytes);
        let at = (addr - self.window.start) as usize;
        self.expected[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// The work request ids in every slot of a work queue, as the driver left them.
    fn ring_ids(&self, base: u64, depth: u32, entry: usize) -> Vec<u64> {
        (0..u64::from(depth))
            .map(|i| {
                let at = (base + i * entry as u64 - self.window.start) as usize;
                u64::from_le_bytes(self.expected[at..at + 8].try_into().expect("8 bytes"))
            })
            .collect()
    }

    fn key(&self, u: &mut Unstructured) -> Result<Key> {
        Ok(match u.int_in_range(0u8..=4)? {
            0 => self.rw_key,
            1 => self.ro_key,
            2 => self.mw_key,
            // The right index with another key part.
            3 => Key::from_raw(self.rw_key.get() ^ 1),
            _ => Key::from_raw(u.arbitrary::<u32>()?),
        })
    }

    /// An address near the MRs (inside, at the edges, in the guards) or anywhere.
    fn addr(&self, u: &mut Unstructured) -> Result<u64> {
        let near = |base: u64, len: u64, u: &mut Unstructured| -> Result<u64> {
            Ok(base - PAGE + u.int_in_range(0..=len + 2 * PAGE)?)
        };
        Ok(match u.int_in_range(0u8..=3)? {
            0 | 1 => near(self.rw, RW_LEN, u)?,
            2 => near(self.rw + RW_LEN + PAGE, RO_LEN, u)?,
            _ => u.arbitrary::<u64>()?,
        })
    }

    fn length(u: &mut Unstructured) -> Result<u32> {
        Ok(match u.int_in_range(0u8..=7)? {
            0 => u.arbitrary::<u32>()?,
            1 => u.int_in_range(0..=RW_LEN as u32 + 8)?,
            _ => u.int_in_range(0..=256)?,
        })
    }

    fn sges(&self, u: &mut Unstructured, max: u32) -> Result<Vec<Sge>> {
        let n = u.int_in_range(0..=max + 1)?;
        (0..n)
            .map(|_| {
                Ok(Sge {
                    addr: self.addr(u)?,
                    length: Self::length(u)?,
                    lkey: self.key(u)?,
                })
            })
            .collect()
    }
}

/// One WQE for QP `qp`, shaped by the fuzzer (or raw bytes).
fn send_wqe_for(rig: &Rig, qp: usize, u: &mut Unstructured) -> Result<SqWqe> {
    if u.ratio(1u8, 8)? {
        let raw: [u8; SQ_WQE_SIZE] = u.arbitrary::<[u8; SQ_WQE_SIZE]>()?;
        return Ok(from_bytes(&raw));
    }
    let opcode = match u.int_in_range(0u8..=12)? {
        0..=9 => u.int_in_range(WR_RDMA_WRITE..=WR_SEND_WITH_INV)?,
        10 => u
            .choose(&[WR_FLUSH, WR_ATOMIC_WRITE, WR_REG_MR])?
            .to_owned(),
        _ => u.arbitrary::<u8>()?,
    };
    let mut flags = u.arbitrary::<u8>()? & WQE_FLAGS_ALL;
    if u.ratio(1u8, 16)? {
        flags = u.arbitrary::<u8>()?;
    }
    let mut w = if flags & WQE_FLAG_INLINE != 0 {
        let len = u.int_in_range(0..=SQ_MAX_INLINE as usize + 8)?;
        let bytes: Vec<u8> = (0..len.min(SQ_WQE_DATA_SIZE)).map(|i| i as u8).collect();
        let mut w = inline_wqe(u.arbitrary::<u64>()?, opcode, flags, &bytes);
        w.inline_len = len as u32;
        w
    } else {
        let sges = rig.sges(u, SQ_MAX_SGE)?;
        let mut w = send_wqe(
            u.arbitrary::<u64>()?,
            opcode,
            flags,
            &sges[..sges.len().min(12)],
        );
        w.num_sge = sges.len() as u8;
        w
    };
    w.imm_data = u.arbitrary::<u32>()?;
    let t = rig.qps[qp].qp_type;
    w = if t == QPT_UD {
        let dest = rig.qps[u.int_in_range(0..=rig.qps.len() - 1)?].qpn;
        let qkey = if u.ratio(7u8, 8)? {
            PAIR_QKEY
        } else {
            u.arbitrary::<u32>()?
        };
        let dgid = if u.ratio(7u8, 8)? {
            rig.gid
        } else {
            u.arbitrary::<[u8; 16]>()?
        };
        with_ud(w, dgid, dest, qkey)
    } else if opcode == WR_BIND_MW {
        w.seg = SqSeg {
            bind: BindSeg {
                addr: rig.addr(u)?,
                length: u64::from(Rig::length(u)?),
                new_rkey: Key::from_raw(rig.mw_key.get().wrapping_add(u.int_in_range(0..=2)?)),
                lkey: rig.key(u)?,
                access: u.arbitrary::<u32>()?,
                reserved: [0; 12],
            },
        };
        w
    } else {
        w.seg = SqSeg {
            rdma: RdmaSeg {
                remote_addr: rig.addr(u)?,
                rkey: rig.key(u)?,
                length: Rig::length(u)?,
                compare_add: u.arbitrary::<u64>()?,
                swap: u.arbitrary::<u64>()?,
                flush_type: u.arbitrary::<u8>()?,
                flush_level: u.arbitrary::<u8>()?,
                reserved: [0; 6],
            },
        };
        w
    };
    Ok(w)
}

/// What the fuzzer does next.
fn step(rig: &mut Rig, u: &mut Unstructured) -> Result<()> {
    let qp = u.int_in_range(0..=rig.qps.len() - 1)?;
    match u.int_in_range(0u8..=12)? {
        0..=3 => {
            let w = send_wqe_for(rig, qp, u)?;
            let q = rig.qps[qp];
            let addr = q.sq + u64::from(q.sq_pi & (q.sq_depth - 1)) * SQ_WQE_SIZE as u64;
            rig.store(addr, as_bytes(&w));
            rig.sq_ids[qp].push(w.wr_id);
            rig.qps[qp].sq_pi = q.sq_pi.wrapping_add(1);
            if u.ratio(3u8, 4)? {
                rig.d.ring_sq(&rig.qps[qp]);
            }
        }
        4 => {
            let q = rig.qps[qp];
            let pi = if u.arbitrary::<bool>()? {
                // Any slot may now be what the driver claims it posted.
                let ids = rig.ring_ids(q.sq, q.sq_depth, SQ_WQE_SIZE);
                rig.sq_ids[qp].extend(ids);
                u.arbitrary::<u32>()?
            } else {
                q.sq_pi
            };
            rig.d.ring_sq_raw(&q, pi);
        }
        5 | 6 => {
            let to_srq = u.ratio(1u8, 3)?;
            let mut wqe = recv_wqe(u.arbitrary::<u64>()?, &[]);
            let sges = rig.sges(u, RQ_MAX_SGE)?;
            wqe.sge[..sges.len().min(RQ_MAX_SGE as usize)]
                .copy_from_slice(&sges[..sges.len().min(RQ_MAX_SGE as usize)]);
            wqe.num_sge = sges.len() as u8;
            let wild = u.ratio(1u8, 8)?;
            if to_srq {
                let s = rig.srq;
                let addr = s.ring + u64::from(s.pi & (s.depth - 1)) * RQ_WQE_SIZE as u64;
                rig.store(addr, as_bytes(&wqe));
                rig.srq_ids.push(wqe.wr_id);
                rig.srq.pi = s.pi.wrapping_add(1);
                let pi = if wild {
                    let ids = rig.ring_ids(s.ring, s.depth, RQ_WQE_SIZE);
                    rig.srq_ids.extend(ids);
                    u.arbitrary::<u32>()?
                } else {
                    rig.srq.pi
                };
                rig.d.doorbell_a(s.db_slot, pi);
            } else {
                let q = rig.qps[qp];
                let addr = q.rq + u64::from(q.rq_pi & (q.rq_depth - 1)) * RQ_WQE_SIZE as u64;
                rig.store(addr, as_bytes(&wqe));
                rig.rq_ids[qp].push(wqe.wr_id);
                rig.qps[qp].rq_pi = q.rq_pi.wrapping_add(1);
                let pi = if wild {
                    let ids = rig.ring_ids(q.rq, q.rq_depth, RQ_WQE_SIZE);
                    rig.rq_ids[qp].extend(ids);
                    u.arbitrary::<u32>()?
                } else {
                    rig.qps[qp].rq_pi
                };
                rig.d.doorbell_b(q.db_slot, pi);
            }
            rig.d.write_reg(WAKE_REG, TEST_DB_PAGE);
        }
        7 => {
            let cq = u.int_in_range(0..=rig.cqs.len() - 1)?;
            poll_all(rig, cq);
            if u.ratio(1u8, 2)? {
                rig.ci_tampered = true;
                rig.d
                    .db
                    .store_a(TEST_DB_PAGE, rig.cqs[cq].db_slot, u.arbitrary::<u32>()?);
            }
        }
        8 => arm_word(rig, u)?,
        9 => {
            let eqn = u.int_in_range(0..=MAX_EQS)?;
            let polled = rig.d.eqs.get(eqn as usize).copied().flatten().map(|r| r.ci);
            let arm = if u.arbitrary::<bool>()? { EQ_DB_ARM } else { 0 };
            let value = match polled {
                Some(ci) if u.ratio(3u8, 4)? => (ci & EQ_DB_CI_MASK) | arm,
                _ => {
                    rig.eq_tampered = true;
                    u.arbitrary::<u32>()?
                }
            };
            rig.d.write_reg(reg_eq(eqn, EQ_DB), value);
        }
        10 if is_fatal(&rig.d) => {}
        10 => {
            let state = u.int_in_range(QPS_RESET..=QPS_ERR + 1)?;
            let attr = QpAttr {
                qp_state: state,
                ..Default::default()
            };
            rig.d.modify_qp(rig.qps[qp].qpn, QP_STATE, attr);
        }
        11 => news_on(rig, u)?,
        _ => settle(rig),
    }
    Ok(())
}

/// A CQ's arm word: armed as the driver does, or any word, with its news byte or without.
fn arm_word(rig: &mut Rig, u: &mut Unstructured) -> Result<()> {
    let cq = u.int_in_range(0..=rig.cqs.len() - 1)?;
    if u.arbitrary::<bool>()? {
        rig.d.arm_cq(&mut rig.cqs[cq], u.int_in_range(0..=3)?);
    } else {
        let slot = rig.cqs[cq].db_slot;
        rig.d.db.store_b(TEST_DB_PAGE, slot, u.arbitrary::<u32>()?);
        if u.arbitrary::<bool>()? {
            rig.d.db.store_news(TEST_DB_PAGE, slot);
        }
    }
    Ok(())
}

/// The kernel's or the test page's `news_on`, said or not, whatever the driver does.
fn news_on(rig: &mut Rig, u: &mut Unstructured) -> Result<()> {
    let page = if u.arbitrary::<bool>()? {
        DB_PAGE_KERNEL
    } else {
        TEST_DB_PAGE
    };
    rig.d.db.set_news_on(page, u.arbitrary::<bool>()?);
    rig.d.write_reg(WAKE_REG, TEST_DB_PAGE);
    Ok(())
}

fn is_fatal(d: &TestDriver) -> bool {
    d.read_reg(REG_STATUS) & STATUS_FATAL != 0
}

/// Waits until the data path has gone idle (everything rung has been looked at).
fn settle(rig: &mut Rig) {
    let start = std::time::Instant::now();
    rig.d.write_reg(WAKE_REG, TEST_DB_PAGE);
    std::thread::sleep(std::time::Duration::from_micros(200));
    while rig
        .d
        .shared()
        .idle
        .load(std::sync::atomic::Ordering::SeqCst)
        != DB_DEVICE_IDLE
    {
        assert!(start.elapsed() < SETTLE_TIMEOUT, "device never went idle");
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The body of the target.
pub fn run(data: &[u8]) {
    let mut rig = Rig::new();
    let cqes_before = rig.d.query_stats()[STAT_CQES];
    let mut u = Unstructured::new(data);
    // The driver stores news (rox.ko and librox on a device with CAP_DB_SUMMARY), or never
    // (an older provider): the device looks behind the news or at every slot.
    if u.arbitrary::<bool>().unwrap_or(false) {
        rig.d.stop_news();
    }
    for _ in 0..MAX_OPS {
        if u.is_empty() || step(&mut rig, &mut u).is_err() {
            break;
        }
    }
    // What the pages say is the truth again: every doorbell rung is looked at from here on.
    rig.d.say_news();
    settle(&mut rig);
    check_memory(&rig);
    if !reset_if_fatal(&mut rig) {
        check_completions(&mut rig, cqes_before);
        // The admin commands of the checks post events to the EQ the input may have overrun.
        reset_if_fatal(&mut rig);
    }
    still_moves_messages(&mut rig);
}

/// A fatal device must have had an EQ overrun by the driver; it is reset. Answers whether it
/// was fatal.
fn reset_if_fatal(rig: &mut Rig) -> bool {
    if !is_fatal(&rig.d) {
        return false;
    }
    let code = rig.d.read_reg(REG_FATAL_CODE);
    assert!(
        rig.eq_tampered && code == FATAL_EQ_OVERFLOW,
        "device went fatal (code {code}) without an EQ overrun by the driver"
    );
    rig.d.reset();
    true
}

/// Nothing outside the writable MR and the CQ rings changed.
fn check_memory(rig: &Rig) {
    let w = &rig.window;
    let actual = rig.d.ram.read(w.start, (w.end - w.start) as usize);
    let cq_rings = rig.cqs.iter().map(|cq| {
        let len = u64::from(cq.ring.depth) * cq.ring.entry_size;
        cq.ring.base..cq.ring.base + len
    });
    let writable: Vec<std::ops::Range<u64>> = std::iter::once(rig.rw..rig.rw + RW_LEN)
        .chain(cq_rings)
        .collect();
    for (i, (a, e)) in actual.iter().zip(&rig.expected).enumerate() {
        let addr = w.start + i as u64;
        if a != e && !writable.iter().any(|r| r.contains(&addr)) {
            panic!(
                "device wrote {a:#04x} over {e:#04x} at {addr:#x}, outside every writable region"
            );
        }
    }
}

/// Every CQE is one of ours and the counters agree with what was polled.
fn check_completions(rig: &mut Rig, cqes_before: u64) {
    let start = std::time::Instant::now();
    loop {
        for c in 0..rig.cqs.len() {
            poll_all(rig, c);
        }
        let polled = rig.polled;
        let written = rig.d.query_stats()[STAT_CQES] - cqes_before;
        // Acknowledge the admin events of the checks' own commands (an EQ 0 the input did
        // not overrun must not overflow because of the harness).
        if !rig.eq_tampered {
            rig.d.drain_eq(EQ_ADMIN_ASYNC);
        }
        assert!(
            written >= polled,
            "polled {polled} CQEs, device counted {written}"
        );
        if written == polled || rig.ci_tampered || is_fatal(&rig.d) {
            break;
        }
        // Retransmission timers may still be completing work requests.
        assert!(
            start.elapsed() < SETTLE_TIMEOUT,
            "device counted {written} CQEs, {polled} arrived"
        );
        settle(rig);
    }
}

/// Polls every CQE of CQ `cq` (counted in `polled`, each checked).
fn poll_all(rig: &mut Rig, cq: usize) {
    while let Some(cqe) = rig.d.poll_cq(&mut rig.cqs[cq]) {
        rig.polled += 1;
        check_cqe(rig, &cqe);
    }
}

fn check_cqe(rig: &Rig, cqe: &Cqe) {
    let qp = rig
        .qps
        .iter()
        .position(|q| q.qpn == cqe.qp_num)
        .unwrap_or_else(|| panic!("CQE for an unknown QP: {cqe:?}"));
    let ids = if cqe.opcode & WC_OPC_RECV != 0 {
        if rig.rq_ids[qp].contains(&cqe.wr_id) {
            return;
        }
        &rig.srq_ids
    } else {
        &rig.sq_ids[qp]
    };
    assert!(
        ids.contains(&cqe.wr_id),
        "CQE with a work request id never posted: {cqe:?}"
    );
}

/// A new RC pair on the same device moves a message after all that.
fn still_moves_messages(rig: &mut Rig) {
    let d = &mut rig.d;
    let mac = d.run::<ReadMac>(NoPayload::default());
    assert_eq!(mac.0, MAC, "READ_MAC");
    let buf = d.ram.alloc(2 * PAGE, PAGE);
    let key = d
        .reg_mr(PD, buf, 2 * PAGE, ACCESS_LOCAL_WRITE)
        .expect("MR after the input");
    d.ram.write(buf, b"still here");
    let (mut cq_a, mut cq_b, mut a, mut b) = d.qp_pair(QPT_RC, PD, 4, 0);
    d.post_recv(&mut b, 7, &[sge(buf + PAGE, 64, key)]);
    let w = send_wqe(8, WR_SEND, WQE_FLAG_SIGNALED, &[sge(buf, 10, key)]);
    d.post_send(&mut a, &w);
    let sent = d.wait_cqe(&mut cq_a);
    let got = d.wait_cqe(&mut cq_b);
    assert_eq!(
        (sent.status, got.status),
        (WC_SUCCESS, WC_SUCCESS),
        "{sent:?} {got:?}"
    );
    assert_eq!(d.ram.read(buf + PAGE, 10), b"still here");
}

/// A few inputs that post one of each kind of work request (the fuzzer grows the rest).
pub fn seeds() -> Vec<Vec<u8>> {
    super::hashed_inputs(16, 512, 2_654_435_761, 13, 1)
}
