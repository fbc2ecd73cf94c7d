//! What the engine-level targets share: an [`Engine`] with the test kit's [`MockEnv`] as one
//! node, QP set-up through the engine's control calls, and checks of what an engine sends.

use crate::roce::wire::{ipv4_gid, parse_packet};
use crate::roce::*;
use crate::testkit::frames::av_between as av;
pub use crate::testkit::mock_env::send_wr;
use crate::testkit::mock_env::{rts_steps, MockEnv, QpSetup};

/// An engine and its memory, MRs and queues.
pub struct Node {
    pub engine: Engine,
    pub env: MockEnv,
    pub gid: Gid,
}

impl Node {
    pub fn new(host: u8) -> Node {
        Node {
            engine: Engine::new(),
            env: MockEnv::new(),
            gid: ipv4_gid([10, 0, 0, host]),
        }
    }

    /// Receives one packet at time `now` and polls, as the device's data path does.
    pub fn receive(&mut self, now: u64, packet: &[u8]) -> Result<(), RxDrop> {
        self.env.now = now;
        let r = self.engine.receive(&mut self.env, packet);
        self.engine.poll(&mut self.env);
        r
    }

    /// Like [`Node::receive`], for a packet its receiver has parsed already (the data path's
    /// frame check and [`crate::roce::wire::parse_transport`]).
    pub fn receive_parsed(
        &mut self,
        now: u64,
        parsed: Result<wire::Parsed<'_>, wire::ParseError>,
    ) -> Result<(), RxDrop> {
        self.env.now = now;
        let r = self.engine.receive_parsed(&mut self.env, parsed);
        self.engine.poll(&mut self.env);
        r
    }

    pub fn poll(&mut self, now: u64) {
        self.env.now = now;
        self.engine.poll(&mut self.env);
    }

    /// Packets sent since the last call; each must be one a peer accepts (see
    /// [`check_sent`]).
    pub fn take_sent(&mut self) -> Vec<(Gid, Vec<u8>)> {
        let sent = std::mem::take(&mut self.env.outbox);
        for (_, p) in &sent {
            check_sent(p);
        }
        sent
    }
}

/// Transport parameters of a QP the targets make.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub qp_type: QpType,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub access: u32,
    pub qkey: u32,
    pub sq_psn: Psn,
    pub rq_psn: Psn,
}

/// Creates `qpn` on `node` and walks it to `state` (RESET .. RTS, or ERR/SQD from RTS)
/// towards `peer_qpn` at `peer_gid`.
pub fn make_qp(
    node: &mut Node,
    qpn: Qpn,
    p: &Params,
    uses_srq: bool,
    peer_gid: Gid,
    peer_qpn: Qpn,
    state: QpState,
) {
    let cfg = QpConfig {
        qpn,
        qp_type: p.qp_type,
        pd: PD,
        uses_srq,
    };
    node.engine.create_qp(cfg).expect("create QP");
    let connected = p.qp_type != QpType::Ud;
    let steps = rts_steps(&QpSetup {
        access: p.access,
        qkey: p.qkey,
        mtu: Mtu::Mtu256,
        peer_qpn,
        rq_psn: p.rq_psn,
        sq_psn: p.sq_psn,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        av: connected.then(|| av(node.gid, peer_gid)),
    });
    let target = match state {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        _ => 3,
    };
    for m in &steps[..target] {
        node.engine
            .modify_qp(&mut node.env, qpn, m)
            .expect("modify QP");
    }
    if matches!(state, QpState::Sqd | QpState::Err) {
        let m = QpModify {
            state: Some(state),
            ..Default::default()
        };
        node.engine
            .modify_qp(&mut node.env, qpn, &m)
            .expect("modify QP");
    }
}

/// The protection domain of every object.
pub const PD: u32 = 1;

/// A packet an engine sent parses, and passes the wire target's invariants (ICRC agreed,
/// re-encodes to itself).
pub fn check_sent(packet: &[u8]) {
    if let Err(e) = parse_packet(packet) {
        panic!("the engine sent a packet rox itself rejects ({e}): {packet:02x?}");
    }
    super::wire::check_packet(packet);
}

/// Deterministic bytes for message `seed`.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize).wrapping_mul(131).wrapping_add(i * 7) as u8 ^ 0x5a)
        .collect()
}
