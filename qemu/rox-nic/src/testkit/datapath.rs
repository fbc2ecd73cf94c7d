//! The data path as the test driver drives it: posting WQEs, ringing doorbells, polling CQs
//! and EQs, waiting for interrupts.

use super::*;

impl TestDriver {
    /// The software half of the idle protocol after a doorbell store.
    fn kick(&mut self) {
        fence(Ordering::SeqCst);
        if self.db.idle(TEST_DB_PAGE) == DB_DEVICE_IDLE {
            self.ring_wake();
        }
    }

    /// Stores word `a` of slot `slot` of the test page, then (when this driver stores news) the
    /// news byte of its group, as librox does; no wake.
    pub fn doorbell_a(&self, slot: u32, value: u32) {
        self.db.store_a(TEST_DB_PAGE, slot, value);
        self.news_after(slot);
    }

    /// [`Self::doorbell_a`] for word `b`.
    pub fn doorbell_b(&self, slot: u32, value: u32) {
        self.db.store_b(TEST_DB_PAGE, slot, value);
        self.news_after(slot);
    }

    fn news_after(&self, slot: u32) {
        if self.news {
            self.db.store_news(TEST_DB_PAGE, slot);
        }
    }

    /// Waits until the device announces idleness in the test doorbell page.
    pub fn wait_announced_idle(&self) {
        let start = Instant::now();
        while self.db.idle(TEST_DB_PAGE) != DB_DEVICE_IDLE {
            assert!(start.elapsed() < TIMEOUT, "device never went idle");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Write a send WQE at the SQ producer index (not yet rung).
    pub fn write_send(&mut self, qp: &mut TestQp, wqe: &SqWqe) {
        let addr = qp.sq + (qp.sq_pi & (qp.sq_depth - 1)) as u64 * SQ_WQE_SIZE as u64;
        self.ram.write_obj(addr, wqe);
        qp.sq_pi = qp.sq_pi.wrapping_add(1);
    }

    pub fn ring_sq(&mut self, qp: &TestQp) {
        fence(Ordering::Release);
        self.doorbell_a(qp.db_slot, qp.sq_pi);
        self.kick();
    }

    pub fn post_send(&mut self, qp: &mut TestQp, wqe: &SqWqe) {
        self.write_send(qp, wqe);
        self.ring_sq(qp);
    }

    /// Set the SQ producer index to anything (for wild-index tests).
    pub fn ring_sq_raw(&mut self, qp: &TestQp, pi: u32) {
        self.doorbell_a(qp.db_slot, pi);
        self.kick();
    }

    pub fn post_recv(&mut self, qp: &mut TestQp, wr_id: u64, sges: &[Sge]) {
        self.write_recv(qp.rq, qp.rq_depth, &mut qp.rq_pi, wr_id, sges);
        self.doorbell_b(qp.db_slot, qp.rq_pi);
        self.kick();
    }

    /// Posts a receive WQE as librox does: stores the RQ doorbell and wakes the idle device
    /// only if the page says its RQ doorbells need a wake (`DbPage::rq_no_wake`). Returns
    /// whether it woke the device.
    pub fn post_recv_as_librox(&mut self, qp: &mut TestQp, wr_id: u64, sges: &[Sge]) -> bool {
        self.write_recv(qp.rq, qp.rq_depth, &mut qp.rq_pi, wr_id, sges);
        self.doorbell_b(qp.db_slot, qp.rq_pi);
        self.kick_unless(|db| db.rq_no_wake(TEST_DB_PAGE) == DB_RQ_NO_WAKE)
    }

    /// The software half of the idle protocol after a doorbell store whose kind the idle
    /// device may say needs no wake (`says_no_wake` reads the page's word for it, as librox
    /// does). Returns whether it woke the device.
    fn kick_unless(&mut self, says_no_wake: impl FnOnce(&DbMap) -> bool) -> bool {
        fence(Ordering::SeqCst);
        let wake = self.db.idle(TEST_DB_PAGE) == DB_DEVICE_IDLE && !says_no_wake(&self.db);
        if wake {
            self.ring_wake();
        }
        wake
    }

    /// Posts a send WQE that sends packets on an RC QP as librox does: stores the SQ
    /// doorbell and wakes the idle device only if the page does not say its port's flight is
    /// full (`DbPage::rc_sq_no_wake`). Returns whether it woke the device.
    pub fn post_rc_send_as_librox(&mut self, qp: &mut TestQp, wqe: &SqWqe) -> bool {
        self.write_send(qp, wqe);
        fence(Ordering::Release);
        self.doorbell_a(qp.db_slot, qp.sq_pi);
        self.kick_unless(|db| db.rc_sq_no_wake(TEST_DB_PAGE) == DB_RC_SQ_NO_WAKE)
    }

    pub fn post_srq(&mut self, srq: &mut TestSrq, wr_id: u64, sges: &[Sge]) {
        self.write_recv(srq.ring, srq.depth, &mut srq.pi, wr_id, sges);
        self.doorbell_a(srq.db_slot, srq.pi);
        self.kick();
    }

    /// Writes a receive WQE at producer index `*pi` of the ring of `depth` WQEs at `ring` and
    /// advances `*pi`, ordered before the doorbell that publishes it.
    fn write_recv(&mut self, ring: u64, depth: u32, pi: &mut u32, wr_id: u64, sges: &[Sge]) {
        let addr = ring + (*pi & (depth - 1)) as u64 * RQ_WQE_SIZE as u64;
        self.ram.write_obj(addr, &recv_wqe(wr_id, sges));
        *pi = pi.wrapping_add(1);
        fence(Ordering::Release);
    }

    pub fn poll_cq(&mut self, cq: &mut TestCq) -> Option<Cqe> {
        if !cq.ring.ready(&self.ram) {
            return None;
        }
        let cqe: Cqe = self.ram.read_obj(cq.ring.addr(cq.ring.ci));
        cq.ring.ci = cq.ring.ci.wrapping_add(1);
        // No news, as librox: the device reads a consumer index when it writes a CQE.
        self.db.store_a(TEST_DB_PAGE, cq.db_slot, cq.ring.ci);
        Some(cqe)
    }

    pub fn wait_cqe(&mut self, cq: &mut TestCq) -> Cqe {
        let start = Instant::now();
        loop {
            if let Some(c) = self.poll_cq(cq) {
                return c;
            }
            assert!(start.elapsed() < TIMEOUT, "no CQE on CQ {}", cq.id);
            std::thread::yield_now();
        }
    }

    /// Waits for the next CQE of `cq` and checks it completes `wr_id` with `status`.
    pub fn expect_cqe(&mut self, cq: &mut TestCq, wr_id: u64, status: u8) -> Cqe {
        let c = self.wait_cqe(cq);
        assert_eq!((c.wr_id, c.status), (wr_id, status), "CQE {c:?}");
        c
    }

    /// Expect no CQE for `dur`.
    pub fn expect_no_cqe(&mut self, cq: &mut TestCq, dur: Duration) {
        let start = Instant::now();
        while start.elapsed() < dur {
            if let Some(c) = self.poll_cq(cq) {
                panic!("unexpected CQE {c:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn arm_cq(&mut self, cq: &mut TestCq, arm_type: u32) {
        cq.arm_seq = cq.arm_seq.wrapping_add(1);
        self.doorbell_b(cq.db_slot, cq_arm_word(cq.arm_seq, arm_type));
        self.kick();
    }

    pub fn poll_eq(&mut self, eqn: u32) -> Option<Eqe> {
        let ring = self.eqs[eqn as usize].as_mut().expect("EQ enabled");
        if !ring.ready(&self.ram) {
            return None;
        }
        let e: Eqe = self.ram.read_obj(ring.addr(ring.ci));
        ring.ci = ring.ci.wrapping_add(1);
        Some(e)
    }

    /// Next event of `event_type` on `eqn` (other events are skipped), acknowledging the EQ.
    pub fn wait_event(&mut self, eqn: u32, event_type: u8) -> Eqe {
        let start = Instant::now();
        loop {
            while let Some(e) = self.poll_eq(eqn) {
                self.ack_eq(eqn, false);
                if e.event_type == event_type {
                    return e;
                }
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "no event {event_type} on EQ {eqn}"
            );
            std::thread::yield_now();
        }
    }

    /// Report the EQ consumer index (and re-arm the interrupt if `arm`).
    pub fn ack_eq(&mut self, eqn: u32, arm: bool) {
        let ci = self.eqs[eqn as usize].expect("EQ enabled").ci & EQ_DB_CI_MASK;
        self.write_reg(reg_eq(eqn, EQ_DB), ci | if arm { EQ_DB_ARM } else { 0 });
    }

    /// Drain EQ 0 (admin completion events pile up there).
    pub fn drain_eq(&mut self, eqn: u32) -> Vec<Eqe> {
        let mut v = Vec::new();
        while let Some(e) = self.poll_eq(eqn) {
            v.push(e);
        }
        self.ack_eq(eqn, false);
        v
    }

    /// Wait until the MSI-X vector fired (consumes the eventfd count).
    pub fn wait_vector(&self, vector: u32, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.vectors[vector as usize].drain() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    }
}

/// Two RC QPs of one device connected to each other through its GID 127.0.0.1: `a` with its
/// own RQ, `b` taking its receives from `srq`; one CQ for both, and a buffer of `buf_len`
/// bytes in `pd` with every access (the SRQ fixture of the data-path tests).
pub struct SrqPair {
    pub d: TestDriver,
    pub cq: TestCq,
    pub srq: TestSrq,
    pub a: TestQp,
    pub b: TestQp,
    pub buf: u64,
    pub key: Key,
}

impl SrqPair {
    /// `mac_last`: the device MAC's last byte; CQ and SRQ depths as logs.
    pub fn new(mac_last: u8, pd: u32, access: u32, cq_log: u8, srq_log: u8, buf_len: u64) -> Self {
        let mut d = TestDriver::new(DeviceConfig::new([2, 0, 0, 0, 0, mac_last]));
        let gid = gid_v4(127, 0, 0, 1);
        d.set_gid(0, gid);
        let cq = d.create_cq(cq_log);
        let srq = d.create_srq(pd, srq_log, 0);
        let a = d.create_qp(QPT_RC, pd, cq.id, cq.id, SRQ_NONE);
        let b = d.create_qp(QPT_RC, pd, cq.id, cq.id, srq.id);
        d.connect(&a, gid, b.qpn, access);
        d.connect(&b, gid, a.qpn, access);
        let (buf, key) = d.buffer(pd, buf_len, access);
        SrqPair {
            d,
            cq,
            srq,
            a,
            b,
            buf,
            key,
        }
    }

    /// The pair with `n` receive WQEs on its SRQ (ids 100, 101, ...), each into its own slot
    /// of `slot` bytes after the first one of its buffer (which the tests send from).
    pub fn with_slots(
        mac_last: u8,
        pd: u32,
        access: u32,
        (cq_log, srq_log): (u8, u8),
        buf_len: u64,
        (n, slot): (u64, u64),
    ) -> Self {
        let mut p = SrqPair::new(mac_last, pd, access, cq_log, srq_log, buf_len);
        for i in 0..n {
            let s = sge(p.buf + slot * (i + 1), slot as u32, p.key);
            p.d.post_srq(&mut p.srq, 100 + i, &[s]);
        }
        p
    }
}
