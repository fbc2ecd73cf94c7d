//! Two in-memory devices with an RC (or UC, UD) QP each, connected: the set-up of the
//! engine's transport tests (tests/roce_engine*.rs), every test's memory a zeroed window
//! between guard bytes.

use super::*;

pub const QPN_A: Qpn = Qpn::new(0x11).unwrap();

pub const QPN_B: Qpn = Qpn::new(0x22).unwrap();

/// Registered window on each device; everything outside it is a guard area.
pub const BUF: u64 = MEM_BASE + 0x10_0000;

pub const BUF_LEN: u64 = 0x10_0000;

pub const GUARD: u8 = 0xee;

pub const RECV_AREA: u64 = BUF + 0x8_0000;

pub struct Pair {
    pub net: Net,
    pub key_a: Key,
    pub key_b: Key,
}

pub fn pair_with(p: &QpParams, gid_b: Gid) -> Pair {
    let mut net = Net::new(&[gid_v4(1), gid_b]);
    let mut keys = [Key::default(); 2];
    for (i, key) in keys.iter_mut().enumerate() {
        let env = &mut net.devs[i].env;
        env.mem.fill(GUARD);
        env.mem[(BUF - MEM_BASE) as usize..(BUF - MEM_BASE + BUF_LEN) as usize].fill(0);
        *key = env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    }
    connect(&mut net, 0, QPN_A, 1, QPN_B, p);
    Pair {
        net,
        key_a: keys[0],
        key_b: keys[1],
    }
}

pub fn pair(p: &QpParams) -> Pair {
    pair_with(p, gid_v4(2))
}

impl Pair {
    pub fn post(&mut self, wr: SendWr) {
        let (engine, env) = self.net.dev(0);
        engine.post_send(env, QPN_A, wr).unwrap();
    }
    pub fn recv_b(&mut self, wr_id: u64, sges: Vec<Sge>) {
        self.net.devs[1].env.post_recv(QPN_B, recv_wr(wr_id, sges));
    }
    pub fn run(&mut self) {
        self.net.run(100_000);
    }
    /// Writes `pattern(seed, len)` where a sends from (device 0: BUF) or where b is written
    /// and read (device 1: RECV_AREA), and returns it.
    pub fn fill_pattern(&mut self, dev: usize, seed: u32, len: usize) -> Vec<u8> {
        let data = pattern(seed, len);
        let at = if dev == 0 { BUF } else { RECV_AREA };
        self.net.devs[dev].env.fill(at, &data);
        data
    }
    /// `rounds` rounds of one network step and `ns` of time.
    pub fn step_for(&mut self, rounds: usize, ns: u64) {
        for _ in 0..rounds {
            self.net.step();
            self.net.advance(ns);
        }
    }
    pub fn cqes(&mut self, dev: usize) -> Vec<Completion> {
        self.net.devs[dev].env.take_completions()
    }
    /// A signaled RDMA WR of `opcode` of `len` bytes from BUF on a to `remote_addr` on b.
    pub fn wr_to_b(&self, wr_id: u64, opcode: WrOpcode, len: u32, remote_addr: u64) -> SendWr {
        rdma_wr(
            wr_id,
            opcode,
            sge(BUF, len, self.key_a),
            remote_addr,
            self.key_b,
        )
    }
    /// One signaled RDMA WR of `opcode` (id 1) of `len` bytes from BUF on a to `remote_addr`
    /// on b, run to the end: its completion's status.
    pub fn rdma_once(&mut self, opcode: WrOpcode, len: u32, remote_addr: u64) -> WcStatus {
        self.post(self.wr_to_b(1, opcode, len, remote_addr));
        self.run();
        one(&self.cqes(0)).status
    }
    /// One signaled RDMA WR (`wr_id`, `opcode`) whose local side is `pieces` of a's BUF
    /// (offset, length), to or from `remote_addr` on b, run to the end: a's one completion.
    pub fn rdma_pieces(
        &mut self,
        wr_id: u64,
        opcode: WrOpcode,
        pieces: &[(u64, u32)],
        remote_addr: u64,
    ) -> Completion {
        let sges = pieces
            .iter()
            .map(|&(offset, len)| sge(BUF + offset, len, self.key_a))
            .collect();
        let data = SendData::Sges(sges);
        self.post(remote_wr(wr_id, opcode, data, remote_addr, self.key_b));
        self.run();
        one(&self.cqes(0))
    }
    /// Posts `wr` (id 1) with a SEND (id 2) behind it and runs to the end: a's completions
    /// (the SEND shows whether a failure of `wr` flushed the queue).
    pub fn with_send_behind(&mut self, wr: SendWr) -> Vec<Completion> {
        self.post(wr);
        self.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
        self.run();
        self.cqes(0)
    }
    /// The responder's QP is in ERR, having reported `error` and nothing else.
    pub fn assert_responder_failed(&self, error: QpAsyncError) {
        self.assert_responder(QpState::Err, &[(QPN_B, error)], "");
    }
    /// The responder's QP is in `state`, having reported `events` and nothing else (`what`
    /// names the case in a failure).
    pub fn assert_responder(&self, state: QpState, events: &[(Qpn, QpAsyncError)], what: &str) {
        let responder = &self.net.devs[1];
        assert_eq!(responder.engine.qp_state(QPN_B), Some(state), "{what}");
        assert_eq!(responder.env.async_errors, events, "{what}");
    }
    /// Guard bytes outside the registered window are untouched on both devices.
    pub fn assert_guards(&self) {
        for d in &self.net.devs {
            let lo = (BUF - MEM_BASE) as usize;
            let hi = lo + BUF_LEN as usize;
            assert!(
                d.env.mem[..lo].iter().all(|&b| b == GUARD),
                "guard below MR changed"
            );
            assert!(
                d.env.mem[hi..].iter().all(|&b| b == GUARD),
                "guard above MR changed"
            );
        }
    }
}

/// Each completion's (wr_id, status), in order.
pub fn id_status(cqes: &[Completion]) -> Vec<(u64, WcStatus)> {
    cqes.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// Each completion's (wr_id, status, is_recv), in order.
pub fn id_status_recv(cqes: &[Completion]) -> Vec<(u64, WcStatus, bool)> {
    cqes.iter()
        .map(|c| (c.wr_id, c.status, c.is_recv))
        .collect()
}

pub fn one(cqes: &[Completion]) -> Completion {
    assert_eq!(cqes.len(), 1, "expected one completion, got {cqes:?}");
    cqes[0]
}

pub fn ud_pair(gid_a: Gid, gid_b: Gid) -> (Net, Key, Key) {
    let mut net = Net::new(&[gid_a, gid_b]);
    let ka = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 1, QPN_B, &QpParams::of(QpType::Ud));
    (net, ka, kb)
}
