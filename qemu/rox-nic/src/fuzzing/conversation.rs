//! Target `conversation`: one RC connection between two engines (A requests, B responds)
//! over a wire the fuzzer controls. A posts a stream of SENDs, RDMA WRITEs with immediate
//! and RDMA READs, starting at a PSN the fuzzer picks (so the 24-bit wrap is crossed); the
//! fuzzer delivers, drops, duplicates, reorders and corrupts packets in both directions,
//! replays any earlier packet, lets time pass (retransmit and RNR timers), makes B short of
//! receive WRs, and forges ACKs, NAKs and read responses for PSNs A never sent or long
//! acknowledged. Then the wire turns clean and everything settles.
//!
//! Invariants (IBA RC): every WR of A completes exactly once, in order: successes, then at
//! most one error, then flushes; B delivers each message exactly once and in order (receive
//! completions match the SENDs and WRITE-with-immediates in order, with their bytes); every
//! message A saw succeed arrived (its bytes at B, or READ data at A); with no error all of
//! them did; the connection settles (no endless retransmission); and everything either
//! engine sends is a packet rox accepts.

use std::collections::VecDeque;

use arbitrary::{Result, Unstructured};

use super::engine_kit::{make_qp, pattern, send_wr, Node, Params};
use crate::roce::wire::{self, opcode as op, Aeth, Bth, Headers, IpInfo, Syndrome};
use crate::roce::*;
use crate::testkit::mock_env::MEM_BASE;

const QPN_A: Qpn = Qpn::new(0x11).unwrap();
const QPN_B: Qpn = Qpn::new(0x22).unwrap();
const MAX_MESSAGES: usize = 10;
const SLOT: u64 = 1024;
const A_SRC: u64 = MEM_BASE;
const A_DST: u64 = MEM_BASE + 0x10_0000;
const B_RECV: u64 = MEM_BASE;
const B_WRITE: u64 = MEM_BASE + 0x10_0000;
const B_READ: u64 = MEM_BASE + 0x20_0000;
const MAX_ACTIONS: usize = 200;
const SETTLE_STEPS: usize = 20_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    WriteImm,
    Read,
}

#[derive(Clone, Copy, Debug)]
struct Message {
    kind: Kind,
    len: u32,
}

struct Conversation {
    a: Node,
    b: Node,
    now: u64,
    to_b: VecDeque<Vec<u8>>,
    to_a: VecDeque<Vec<u8>>,
    /// Everything each side ever sent (for replays).
    sent_by_a: Vec<Vec<u8>>,
    sent_by_b: Vec<Vec<u8>>,
    messages: Vec<Message>,
    recvs_posted: usize,
    keys_a: Key,
    keys_b: Key,
    first_psn: Psn,
    /// The PSN of the last request packet A sent, once it sent one.
    last_sent: Option<Psn>,
}

impl Conversation {
    fn new(u: &mut Unstructured) -> Result<Conversation> {
        let mut a = Node::new(1);
        let mut b = Node::new(2);
        let all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
        let keys_a = a
            .env
            .reg_mr(super::engine_kit::PD, MEM_BASE, 3 * 0x10_0000, all);
        let keys_b = b
            .env
            .reg_mr(super::engine_kit::PD, MEM_BASE, 3 * 0x10_0000, all);
        let first_psn = Psn::from_wire(u.arbitrary::<u32>()?);
        let b_psn = Psn::from_wire(u.arbitrary::<u32>()?);
        let base = Params {
            qp_type: QpType::Rc,
            timeout: u.int_in_range(1..=6)?,
            retry_cnt: u.int_in_range(0..=7)?,
            rnr_retry: u.int_in_range(0..=7)?,
            access: all,
            qkey: 0,
            sq_psn: first_psn,
            rq_psn: b_psn,
        };
        let (gid_a, gid_b) = (a.gid, b.gid);
        make_qp(&mut a, QPN_A, &base, false, gid_b, QPN_B, QpState::Rts);
        let pb = Params {
            sq_psn: b_psn,
            rq_psn: first_psn,
            ..base
        };
        make_qp(&mut b, QPN_B, &pb, false, gid_a, QPN_A, QpState::Rts);
        let n = u.int_in_range(1..=MAX_MESSAGES)?;
        let mut messages = Vec::new();
        for i in 0..n {
            let kind = *u.choose(&[Kind::Send, Kind::WriteImm, Kind::Read])?;
            let len = u.int_in_range(0..=SLOT as u32)?;
            let len = if kind == Kind::Read { len.max(1) } else { len };
            messages.push(Message { kind, len });
            let slot = i as u64 * SLOT;
            a.env.fill(A_SRC + slot, &pattern(i as u32, SLOT as usize));
            b.env
                .fill(B_READ + slot, &pattern(1000 + i as u32, SLOT as usize));
        }
        let mut c = Conversation {
            a,
            b,
            now: 1_000_000,
            to_b: VecDeque::new(),
            to_a: VecDeque::new(),
            sent_by_a: Vec::new(),
            sent_by_b: Vec::new(),
            messages,
            recvs_posted: 0,
            keys_a,
            keys_b,
            first_psn,
            last_sent: None,
        };
        for _ in 0..u.int_in_range(0..=n)? {
            c.post_recv();
        }
        for i in 0..n {
            c.post(i);
        }
        c.collect();
        Ok(c)
    }

    fn post_recv(&mut self) {
        let slot = self.recvs_posted as u64;
        if slot as usize >= MAX_MESSAGES {
            return;
        }
        let wr = RecvWr {
            wqe_index: 0,
            wr_id: slot,
            sges: vec![Sge {
                addr: B_RECV + slot * SLOT,
                length: SLOT as u32,
                lkey: self.keys_b,
            }],
        };
        self.b.env.post_recv(QPN_B, wr);
        self.recvs_posted += 1;
    }

    fn post(&mut self, i: usize) {
        let m = self.messages[i];
        let slot = i as u64 * SLOT;
        let src = Sge {
            addr: A_SRC + slot,
            length: m.len,
            lkey: self.keys_a,
        };
        let mut wr = match m.kind {
            Kind::Send => send_wr(i as u64, WrOpcode::Send, SendData::Sges(vec![src])),
            Kind::WriteImm => {
                let mut wr = send_wr(
                    i as u64,
                    WrOpcode::RdmaWriteWithImm,
                    SendData::Sges(vec![src]),
                );
                wr.remote_addr = B_WRITE + slot;
                wr.imm = i as u32;
                wr
            }
            Kind::Read => {
                let dst = Sge {
                    addr: A_DST + slot,
                    ..src
                };
                let mut wr = send_wr(i as u64, WrOpcode::RdmaRead, SendData::Sges(vec![dst]));
                wr.remote_addr = B_READ + slot;
                wr
            }
        };
        wr.rkey = self.keys_b;
        self.a.env.now = self.now;
        self.a
            .engine
            .post_send(&mut self.a.env, QPN_A, wr)
            .expect("post");
    }

    /// Moves what both engines sent onto the wire.
    fn collect(&mut self) {
        for (_, p) in self.a.take_sent() {
            let psn = wire::parse_packet(&p).expect("checked").hdr.bth.psn;
            if self.last_sent.is_none_or(|l| psn.after(l)) {
                self.last_sent = Some(psn);
            }
            self.sent_by_a.push(p.clone());
            self.to_b.push_back(p);
        }
        for (_, p) in self.b.take_sent() {
            self.sent_by_b.push(p.clone());
            self.to_a.push_back(p);
        }
    }

    /// The wire's queue toward B (`to_b`) or toward A.
    fn queue(&mut self, to_b: bool) -> &mut VecDeque<Vec<u8>> {
        if to_b {
            &mut self.to_b
        } else {
            &mut self.to_a
        }
    }

    /// Gives `p` to B (`to_b`) or A, and puts what that made it send on the wire.
    fn deliver(&mut self, to_b: bool, p: &[u8]) {
        let end = if to_b { &mut self.b } else { &mut self.a };
        let _ = end.receive(self.now, p);
        self.collect();
    }

    /// A response to A for a PSN A never sent (beyond the last) or long before the first.
    fn forge(&mut self, u: &mut Unstructured) -> Result<Vec<u8>> {
        let far = u.int_in_range(0..=(1u32 << 22))?;
        let psn = if u.arbitrary::<bool>()? {
            let last = self.last_sent.unwrap_or(self.first_psn.prev());
            Psn::from_wire(last.get().wrapping_add(1 + far))
        } else {
            Psn::from_wire(self.first_psn.get().wrapping_sub(1 + far))
        };
        let opcode = *u.choose(&[
            op::RC_ACKNOWLEDGE,
            op::RC_READ_RESPONSE_ONLY,
            op::RC_READ_RESPONSE_FIRST,
            op::RC_READ_RESPONSE_MIDDLE,
            op::RC_READ_RESPONSE_LAST,
            op::RC_ATOMIC_ACKNOWLEDGE,
        ])?;
        let mut hdr = Headers::new(Bth {
            opcode,
            solicited: false,
            pkey: wire::DEFAULT_PKEY,
            dest_qpn: QPN_A,
            ack_req: false,
            psn,
        });
        let info = wire::opcode_info(opcode).expect("known");
        if info.aeth {
            let syndrome = Syndrome::decode(u.arbitrary::<u8>()?).unwrap_or(Syndrome::Ack);
            hdr.aeth = Some(Aeth {
                syndrome,
                msn: Msn::from_wire(u.arbitrary::<u32>()?),
            });
        }
        if info.atomic_ack_eth {
            hdr.atomic_ack = Some(u.arbitrary::<u64>()?);
        }
        let len = if opcode == op::RC_ACKNOWLEDGE || info.atomic_ack_eth {
            0
        } else {
            u.int_in_range(0..=256)?
        };
        let ip = IpInfo {
            sgid: self.b.gid,
            dgid: self.a.gid,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            src_port: wire::flow_source_port(QPN_B),
        };
        Ok(wire::build_packet(&ip, &hdr, &pattern(77, len)))
    }

    /// One thing the fuzzer makes happen on the wire or at the ends.
    fn act(&mut self, u: &mut Unstructured) -> Result<()> {
        let to_b = u.arbitrary::<bool>()?;
        match u.int_in_range(0u8..=11)? {
            0..=3 => {
                if let Some(p) = self.queue(to_b).pop_front() {
                    self.deliver(to_b, &p);
                }
            }
            4 => {
                self.queue(to_b).pop_front();
            }
            5 => {
                let q = self.queue(to_b);
                if let Some(p) = q.front().cloned() {
                    q.push_back(p);
                }
            }
            6 => {
                let q = self.queue(to_b);
                if q.len() >= 2 {
                    let i = u.int_in_range(1..=q.len() - 1)?;
                    q.swap(0, i);
                }
            }
            7 => {
                let history = if to_b {
                    &self.sent_by_a
                } else {
                    &self.sent_by_b
                };
                if !history.is_empty() {
                    let p = u.choose(history)?.clone();
                    self.deliver(to_b, &p);
                }
            }
            8 => {
                if let Some(p) = self.queue(to_b).front_mut() {
                    let at = u.choose_index(p.len())?;
                    p[at] ^= u.int_in_range(1..=255)?;
                }
            }
            9 => {
                self.now += u.int_in_range(1..=300_000_000u64)?;
                self.a.poll(self.now);
                self.b.poll(self.now);
                self.collect();
            }
            10 => {
                self.post_recv();
                self.b.env.now = self.now;
                let _ = self.b.engine.recv_posted(&mut self.b.env, QPN_B);
                self.collect();
            }
            _ => {
                let p = self.forge(u)?;
                self.deliver(false, &p);
            }
        }
        Ok(())
    }

    /// A clean wire from now on: deliver in order, post every receive, let timers run.
    fn settle(&mut self) {
        while self.recvs_posted < self.messages.len() {
            self.post_recv();
        }
        self.b.env.now = self.now;
        let _ = self.b.engine.recv_posted(&mut self.b.env, QPN_B);
        self.collect();
        for _ in 0..SETTLE_STEPS {
            if let Some(p) = self.to_b.pop_front() {
                self.deliver(true, &p);
            } else if let Some(p) = self.to_a.pop_front() {
                self.deliver(false, &p);
            } else {
                let next = [&self.a, &self.b]
                    .iter()
                    .filter_map(|n| n.engine.next_deadline())
                    .min();
                let Some(t) = next else { return };
                self.now = self.now.max(t);
                self.a.poll(self.now);
                self.b.poll(self.now);
                self.collect();
            }
        }
        panic!("the connection did not settle in {SETTLE_STEPS} steps");
    }

    fn check(&mut self) {
        let n = self.messages.len();
        let done = self.a.env.take_completions();
        let ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
        assert_eq!(
            ids,
            (0..n as u64).collect::<Vec<_>>(),
            "A's completions: {done:?}"
        );
        let ok = done
            .iter()
            .take_while(|c| c.status == WcStatus::Success)
            .count();
        if let Some(first_err) = done.get(ok) {
            assert_ne!(first_err.status, WcStatus::WrFlushErr, "{done:?}");
            for c in &done[ok + 1..] {
                assert_eq!(c.status, WcStatus::WrFlushErr, "after an error: {done:?}");
            }
            assert_eq!(self.a.engine.qp_state(QPN_A), Some(QpState::Err));
        }
        for (i, c) in done.iter().enumerate().take(ok) {
            let m = self.messages[i];
            let slot = i as u64 * SLOT;
            assert!(!c.is_recv);
            match m.kind {
                Kind::Read => assert_eq!(
                    self.a.env.bytes(A_DST + slot, m.len as usize),
                    &pattern(1000 + i as u32, m.len as usize)[..],
                    "READ {i} data"
                ),
                Kind::WriteImm => assert_eq!(
                    self.b.env.bytes(B_WRITE + slot, m.len as usize),
                    &pattern(i as u32, m.len as usize)[..],
                    "WRITE {i} data"
                ),
                Kind::Send => {}
            }
        }
        self.check_deliveries(ok);
    }

    /// B's receive completions are the recv-consuming messages, in order, each once.
    fn check_deliveries(&mut self, a_succeeded: usize) {
        let consuming: Vec<usize> = (0..self.messages.len())
            .filter(|&i| self.messages[i].kind != Kind::Read)
            .collect();
        let got: Vec<Completion> = self
            .b
            .env
            .take_completions()
            .into_iter()
            .filter(|c| c.is_recv && c.status == WcStatus::Success)
            .collect();
        assert!(
            got.len() <= consuming.len(),
            "B delivered more messages than were sent"
        );
        for (k, c) in got.iter().enumerate() {
            let i = consuming[k];
            let m = self.messages[i];
            assert_eq!(c.wr_id, k as u64, "receive WRs complete in order");
            assert_eq!(c.byte_len, m.len, "message {i} length at B: {c:?}");
            match m.kind {
                Kind::Send => {
                    let at = B_RECV + c.wr_id * SLOT;
                    assert_eq!(
                        self.b.env.bytes(at, m.len as usize),
                        &pattern(i as u32, m.len as usize)[..],
                        "message {i} bytes at B"
                    );
                }
                _ => assert_eq!(c.imm, i as u32, "WRITE {i} immediate at B: {c:?}"),
            }
        }
        let must = consuming.iter().filter(|&&i| i < a_succeeded).count();
        assert!(
            got.len() >= must,
            "A saw {must} recv-consuming messages succeed, B delivered {}",
            got.len()
        );
        if a_succeeded == self.messages.len() {
            assert_eq!(got.len(), consuming.len(), "every message delivered");
        }
    }
}

/// The body of the target.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(mut c) = Conversation::new(&mut u) else {
        return;
    };
    for _ in 0..MAX_ACTIONS {
        if u.is_empty() || c.act(&mut u).is_err() {
            break;
        }
    }
    c.settle();
    c.check();
}

/// Inputs of a few shapes (the fuzzer grows the rest).
pub fn seeds() -> Vec<Vec<u8>> {
    super::hashed_inputs(24, 256, 2_246_822_519, 11, 37)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clean_conversation_delivers_everything() {
        super::run(&[]);
        for s in super::seeds() {
            super::run(&s);
        }
    }
}
