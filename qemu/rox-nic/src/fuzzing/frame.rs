//! Target `frame`: Ethernet frames arriving on the port, through classification
//! (`port::frame::sort_frame`), parsing (`wire::parse_transport`, checked against a whole
//! `wire::parse_packet`) and the transport engine, into an engine holding RC
//! QPs in every state (one with requests outstanding: a multi-packet SEND, a READ and an
//! atomic), a UC and a UD QP, an RC QP on a shared receive queue, MRs with different access
//! and a window that SEND-with-invalidate may name.
//!
//! A frame is raw bytes, or (so the fuzzer gets past the ICRC) a RoCEv2 packet built from
//! fuzzer-chosen header fields towards one of the QPs with a right ICRC, in an Ethernet
//! header, optionally with one byte changed afterwards.
//!
//! Invariants: every frame the frame check hands over lies inside the frame and is IPv4/IPv6 to an
//! own GID, and with any ICRC fold a port may claim, as ICRC-checked only if its ICRC is right
//! ([`super::frame_fold`]); the engine's drop counters move by exactly the drops it returned; memory changes
//! only inside the MR the QPs may write; every completion is for one of the QPs and a WR
//! posted there; every packet the engine sends is one rox accepts; and afterwards a new RC
//! pair with a second engine still moves a message.

use arbitrary::{Result, Unstructured};

use super::engine_kit::{make_qp, pattern, send_wr, Node, Params, PD};
use crate::port::frame::{roce_header, sort_frame, Arrival};
use crate::roce::wire::{self, AtomicEth, Bth, Deth, Feth, Headers, IpInfo, ParseError, Reth};
use crate::roce::*;
use crate::testkit::mock_env::{MEM_BASE, MEM_SIZE};
use crate::testkit::protected::RegionKind;

const OWN_MAC: [u8; 6] = [2, 0, 10, 0, 0, 1];
const MAX_FRAME: usize = 4096 + 14;
const QKEY: u32 = 0x1111;
const RW: u64 = MEM_BASE + 0x1000;
const RW_LEN: u64 = 0x8000;
const RO: u64 = MEM_BASE + 0x1_0000;
const RO_LEN: u64 = 0x4000;
/// The memory the targets compare: every MR and the gaps around them.
const CHECKED: usize = 0x2_0000;
const MAX_FRAMES: usize = 32;
const PEER_QPN: Qpn = Qpn::new(0x99).unwrap();

/// The QPs: (qpn, type, state, on the SRQ).
const QPS: [(u32, QpType, QpState, bool); 10] = [
    (0x11, QpType::Rc, QpState::Rts, false),
    (0x12, QpType::Rc, QpState::Rts, false),
    (0x13, QpType::Rc, QpState::Rtr, false),
    (0x14, QpType::Rc, QpState::Init, false),
    (0x15, QpType::Rc, QpState::Reset, false),
    (0x16, QpType::Rc, QpState::Err, false),
    (0x17, QpType::Rc, QpState::Sqd, false),
    (0x18, QpType::Uc, QpState::Rts, false),
    (0x19, QpType::Ud, QpState::Rts, false),
    (0x1a, QpType::Rc, QpState::Rts, true),
];

struct Rig {
    node: Node,
    peer_gid: Gid,
    own_v6: Gid,
    rw_key: Key,
    ro_key: Key,
    inv_key: Key,
    sq_psn: Psn,
    rq_psn: Psn,
    /// WR ids posted to each QP's send and receive queues.
    posted: Vec<(Qpn, u64)>,
}

fn qpn(raw: u32) -> Qpn {
    Qpn::new(raw).expect("valid QPN")
}

impl Rig {
    fn new() -> Rig {
        let mut node = Node::new(1);
        let peer_gid = wire::ipv4_gid([10, 0, 0, 2]);
        let mut own_v6 = [0u8; 16];
        own_v6[0] = 0xfd;
        own_v6[15] = 1;
        let all = ACCESS_LOCAL_WRITE
            | ACCESS_REMOTE_WRITE
            | ACCESS_REMOTE_READ
            | ACCESS_REMOTE_ATOMIC
            | ACCESS_FLUSH_GLOBAL;
        let rw_key = node.env.reg_mr(PD, RW, RW_LEN, all);
        let ro_key = node.env.reg_mr(PD, RO, RO_LEN, ACCESS_REMOTE_READ);
        // A key a SEND with invalidate may name: a valid fast-registration region over RW.
        let inv_key = node.env.reg(PD, RW, RW_LEN, all, RegionKind::FastReg);
        node.env.fill(RW, &pattern(1, RW_LEN as usize));
        node.env.fill(RO, &pattern(2, RO_LEN as usize));
        let (sq_psn, rq_psn) = (Psn::from_wire(0xff_fffe), Psn::from_wire(0xff_fff0));
        let mut rig = Rig {
            node,
            peer_gid,
            own_v6,
            rw_key,
            ro_key,
            inv_key,
            sq_psn,
            rq_psn,
            posted: Vec::new(),
        };
        for (raw, qp_type, state, srq) in QPS {
            let p = Params {
                qp_type,
                timeout: 10,
                retry_cnt: 3,
                rnr_retry: 3,
                access: all | ACCESS_FLUSH_PERSISTENT,
                qkey: QKEY,
                sq_psn,
                rq_psn,
            };
            make_qp(&mut rig.node, qpn(raw), &p, srq, peer_gid, PEER_QPN, state);
            for slot in 0..2u64 {
                let wr_id = 0x100 + slot;
                let sge = Sge {
                    addr: RW + (u64::from(raw) - 0x11) * 0x800 + slot * 0x400,
                    length: 0x400,
                    lkey: rw_key,
                };
                rig.node.env.post_recv(
                    qpn(raw),
                    RecvWr {
                        wqe_index: 0,
                        wr_id,
                        sges: vec![sge],
                    },
                );
                rig.posted.push((qpn(raw), wr_id));
            }
        }
        rig.outstanding_requests();
        rig
    }

    /// A multi-packet SEND, a READ and an atomic from QP 0x11, sent and not yet answered.
    fn outstanding_requests(&mut self) {
        let q = qpn(0x11);
        let src = |len| {
            SendData::Sges(vec![Sge {
                addr: RW,
                length: len,
                lkey: self.rw_key,
            }])
        };
        let mut wrs = vec![send_wr(1, WrOpcode::Send, src(600))];
        let mut read = send_wr(2, WrOpcode::RdmaRead, src(700));
        read.remote_addr = 0x5000;
        read.rkey = Key::from_raw(0x77);
        wrs.push(read);
        let mut atomic = send_wr(3, WrOpcode::AtomicFetchAndAdd, src(8));
        atomic.remote_addr = 0x6000;
        atomic.compare_add = 1;
        wrs.push(atomic);
        for wr in wrs {
            self.posted.push((q, wr.wr_id));
            self.node
                .engine
                .post_send(&mut self.node.env, q, wr)
                .expect("post");
        }
        self.node.take_sent();
    }

    fn key(&self, u: &mut Unstructured) -> Result<Key> {
        Ok(match u.int_in_range(0u8..=3)? {
            0 => self.rw_key,
            1 => self.ro_key,
            2 => self.inv_key,
            _ => Key::from_raw(u.arbitrary::<u32>()?),
        })
    }

    fn va(u: &mut Unstructured) -> Result<u64> {
        Ok(match u.int_in_range(0u8..=3)? {
            0 | 1 => RW - 8 + u.int_in_range(0..=RW_LEN + 16)?,
            2 => RO - 8 + u.int_in_range(0..=RO_LEN + 16)?,
            _ => u.arbitrary::<u64>()?,
        })
    }

    /// A RoCEv2 packet to one of the QPs with fuzzer-chosen fields and a right ICRC.
    fn built_packet(&self, u: &mut Unstructured) -> Result<Vec<u8>> {
        let known: Vec<u8> = (0..=u8::MAX)
            .filter(|&o| wire::opcode_info(o).is_some())
            .collect();
        // CNPs often (one opcode among ~90 would be rare): congestion control's input.
        let opcode = if u.ratio(1u8, 16)? {
            wire::opcode::CNP
        } else {
            *u.choose(&known)?
        };
        let info = wire::opcode_info(opcode).expect("known");
        let dest = match u.int_in_range(0u8..=7)? {
            0 => Qpn::from_wire(u.arbitrary::<u32>()?),
            _ => qpn(u.choose(&QPS)?.0),
        };
        let base = if u.arbitrary::<bool>()? {
            self.rq_psn
        } else {
            self.sq_psn
        };
        let delta = match u.int_in_range(0u8..=3)? {
            0 => u.arbitrary::<u32>()?,
            _ => u.int_in_range(0..=8u32)?.wrapping_sub(2),
        };
        let mut hdr = Headers::new(Bth {
            opcode,
            solicited: u.arbitrary::<bool>()?,
            pkey: if u.ratio(15u8, 16)? {
                wire::DEFAULT_PKEY
            } else {
                u.arbitrary::<u16>()?
            },
            dest_qpn: dest,
            ack_req: u.arbitrary::<bool>()?,
            psn: Psn::from_wire(base.get().wrapping_add(delta)),
        });
        self.extension_headers(u, &info, &mut hdr)?;
        let len = match u.int_in_range(0u8..=7)? {
            0 => u.int_in_range(0..=4096)?,
            1 => 256,
            _ => u.int_in_range(0..=300)?,
        };
        let ip = self.ip_info(u)?;
        Ok(wire::build_packet(&ip, &hdr, &pattern(9, len)))
    }

    /// The extension headers `info`'s opcode carries, with arbitrary (mostly plausible)
    /// contents.
    fn extension_headers(
        &self,
        u: &mut Unstructured,
        info: &wire::OpcodeInfo,
        hdr: &mut Headers,
    ) -> Result<()> {
        if info.xrceth {
            hdr.xrceth = Some(u.arbitrary::<u32>()?);
        }
        if info.deth {
            let qkey = if u.ratio(7u8, 8)? {
                QKEY
            } else {
                u.arbitrary::<u32>()?
            };
            hdr.deth = Some(Deth {
                qkey,
                src_qpn: PEER_QPN,
            });
        }
        if info.feth {
            hdr.feth = Some(Feth {
                placement_type: u.int_in_range(0..=3)?,
                selectivity_level: u.int_in_range(0..=3)?,
            });
        }
        if info.reth {
            let dma_len = match u.int_in_range(0u8..=3)? {
                0 => u.arbitrary::<u32>()?,
                _ => u.int_in_range(0..=2048)?,
            };
            hdr.reth = Some(Reth {
                va: Self::va(u)?,
                rkey: self.key(u)?,
                dma_len,
            });
        }
        if info.atomic_eth {
            hdr.atomic_eth = Some(AtomicEth {
                va: Self::va(u)?,
                rkey: self.key(u)?,
                swap_add: u.arbitrary::<u64>()?,
                compare: u.arbitrary::<u64>()?,
            });
        }
        if info.aeth {
            let syndrome =
                wire::Syndrome::decode(u.arbitrary::<u8>()?).unwrap_or(wire::Syndrome::Ack);
            hdr.aeth = Some(wire::Aeth {
                syndrome,
                msn: Msn::from_wire(u.arbitrary::<u32>()?),
            });
        }
        if info.atomic_ack_eth {
            hdr.atomic_ack = Some(u.arbitrary::<u64>()?);
        }
        if info.immdt {
            hdr.imm = Some(u.arbitrary::<u32>()?);
        }
        if info.ieth {
            hdr.ieth = Some(self.key(u)?);
        }
        Ok(())
    }

    /// Addresses (mostly the peer's, some IPv6 or strangers) and ECN (some CE-marked).
    fn ip_info(&self, u: &mut Unstructured) -> Result<IpInfo> {
        let v6 = u.ratio(1u8, 8)?;
        let (sgid, dgid) = if v6 {
            let mut peer6 = self.own_v6;
            peer6[15] = 2;
            (peer6, self.own_v6)
        } else if u.ratio(15u8, 16)? {
            (self.peer_gid, self.node.gid)
        } else {
            (wire::ipv4_gid(u.arbitrary::<[u8; 4]>()?), self.node.gid)
        };
        // Some packets arrive marked Congestion Experienced (the engine answers with CNPs).
        let traffic_class = if u.ratio(1u8, 4)? {
            crate::roce::cc::ECN_CE
        } else {
            crate::roce::cc::ECN_ECT0
        };
        Ok(IpInfo {
            sgid,
            dgid,
            traffic_class,
            hop_limit: 64,
            flow_label: 0,
            src_port: 0xc099,
        })
    }

    fn frame(&self, u: &mut Unstructured) -> Result<Vec<u8>> {
        if u.ratio(1u8, 8)? {
            let len = u.int_in_range(0..=MAX_FRAME + 8)?;
            return Ok(u.bytes(len)?.to_vec());
        }
        let packet = self.built_packet(u)?;
        let dmac = if u.ratio(15u8, 16)? {
            OWN_MAC
        } else {
            u.arbitrary::<[u8; 6]>()?
        };
        let mut frame = [
            &roce_header(&dmac, &[2, 0, 10, 0, 0, 2], &packet)[..],
            &packet,
        ]
        .concat();
        if u.ratio(1u8, 8)? {
            let at = u.choose_index(frame.len())?;
            frame[at] ^= u.int_in_range(1..=255)?;
        }
        if u.ratio(1u8, 16)? {
            frame.extend_from_slice(&[0; 8]); // Ethernet padding
        }
        Ok(frame)
    }
}

/// The body of the target.
pub fn run(data: &[u8]) {
    run_counted(data);
}

/// [`run`], returning the engine's counters before the final check.
fn run_counted(data: &[u8]) -> EngineStats {
    let mut rig = Rig::new();
    let mut u = Unstructured::new(data);
    let before = rig.node.env.mem[..CHECKED].to_vec();
    let stats_before = rig.node.engine.stats().clone();
    let mut drops = [0u64; 6];
    let mut received = 0u64;
    let mut now = 1_000_000u64;
    for _ in 0..MAX_FRAMES {
        let Ok(frame) = rig.frame(&mut u) else { break };
        let own = |g: &Gid| *g == rig.node.gid || *g == rig.own_v6;
        if super::frame_fold::check(&frame, &mut u, &OWN_MAC, MAX_FRAME, own).is_err() {
            break;
        }
        // The data path's own two steps: the frame check, then the transport parse from its
        // IP view; they must agree with a whole parse of the same packet.
        if let Arrival::Roce(range, ip) = sort_frame(&frame, &OWN_MAC, MAX_FRAME, own) {
            assert!(range.end <= frame.len() && range.start == 14, "{range:?}");
            received += 1;
            let packet = &frame[range];
            let parsed = wire::parse_transport(packet, ip);
            assert_eq!(
                parsed,
                wire::parse_packet(packet),
                "split parse != whole parse"
            );
            match rig.node.receive_parsed(now, parsed) {
                Ok(()) => {}
                Err(RxDrop::Parse(ParseError::BadIcrc)) => drops[0] += 1,
                Err(RxDrop::Parse(_)) => drops[1] += 1,
                Err(RxDrop::NoQp(_)) => drops[2] += 1,
                Err(RxDrop::WrongSource(_)) => drops[3] += 1,
                Err(RxDrop::BadPkey(_)) => drops[4] += 1,
                Err(RxDrop::UnwantedCnp(_)) => drops[5] += 1,
            }
            rig.node.take_sent();
        }
        if u.ratio(1u8, 4).unwrap_or(false) {
            now += u.int_in_range(1..=100_000_000u64).unwrap_or(1);
            rig.node.poll(now);
            rig.node.take_sent();
        }
    }
    let s = rig.node.engine.stats();
    let moved = |a: u64, b: u64| a - b;
    assert_eq!(
        moved(s.rx_packets, stats_before.rx_packets),
        received,
        "rx_packets"
    );
    // Each drop counter moved by exactly the drops `receive` returned of its kind.
    let counted = [
        (
            "rx_icrc_errors",
            s.rx_icrc_errors,
            stats_before.rx_icrc_errors,
        ),
        ("rx_malformed", s.rx_malformed, stats_before.rx_malformed),
        ("rx_no_qp", s.rx_no_qp, stats_before.rx_no_qp),
        (
            "rx_wrong_source",
            s.rx_wrong_source,
            stats_before.rx_wrong_source,
        ),
        ("rx_bad_pkey", s.rx_bad_pkey, stats_before.rx_bad_pkey),
        (
            "rx_cnp_dropped",
            s.rx_cnp_dropped,
            stats_before.rx_cnp_dropped,
        ),
    ];
    for ((name, after, before), dropped) in counted.into_iter().zip(drops) {
        assert_eq!(moved(after, before), dropped, "{name}");
    }
    check_memory(&before, &rig.node.env.mem[..CHECKED]);
    for c in rig.node.env.take_completions() {
        assert!(
            rig.posted.contains(&(c.qp_num, c.wr_id)),
            "completion of no posted WR: {c:?}"
        );
    }
    let stats = rig.node.engine.stats().clone();
    still_moves_messages(rig);
    stats
}

fn check_memory(before: &[u8], after: &[u8]) {
    let writable = (RW - MEM_BASE) as usize..(RW - MEM_BASE + RW_LEN) as usize;
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if a != b && !writable.contains(&i) {
            panic!(
                "memory at {:#x} changed outside the writable MR",
                MEM_BASE + i as u64
            );
        }
    }
    const _: () = assert!(CHECKED <= MEM_SIZE);
}

/// A new RC QP on the fuzzed engine and one on a fresh engine exchange a SEND.
fn still_moves_messages(mut rig: Rig) {
    let mut peer = Node::new(2);
    let key = peer.env.reg_mr(PD, MEM_BASE, 0x1000, ACCESS_LOCAL_WRITE);
    let (a, b) = (qpn(0x31), PEER_QPN);
    let p = Params {
        qp_type: QpType::Rc,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        access: 0,
        qkey: 0,
        sq_psn: Psn::from_wire(5),
        rq_psn: Psn::from_wire(9),
    };
    let peer_gid = peer.gid;
    make_qp(&mut rig.node, a, &p, false, peer_gid, b, QpState::Rts);
    let q = Params {
        sq_psn: p.rq_psn,
        rq_psn: p.sq_psn,
        ..p
    };
    make_qp(&mut peer, b, &q, false, rig.node.gid, a, QpState::Rts);
    peer.env.post_recv(
        b,
        RecvWr {
            wqe_index: 0,
            wr_id: 7,
            sges: vec![Sge {
                addr: MEM_BASE,
                length: 64,
                lkey: key,
            }],
        },
    );
    let msg = SendData::Inline(b"still here".to_vec());
    rig.node
        .engine
        .post_send(&mut rig.node.env, a, send_wr(8, WrOpcode::Send, msg))
        .expect("post");
    for _ in 0..16 {
        for (_, p) in rig.node.take_sent() {
            let _ = peer.receive(2_000_000_000, &p);
        }
        for (_, p) in peer.take_sent() {
            let _ = rig.node.receive(2_000_000_000, &p);
        }
    }
    let sent = rig.node.env.take_completions();
    assert!(
        sent.iter()
            .any(|c| c.wr_id == 8 && c.status == WcStatus::Success),
        "{sent:?}"
    );
    assert_eq!(peer.env.bytes(MEM_BASE, 10), b"still here");
}

/// Inputs of a few shapes (the fuzzer grows the rest).
pub fn seeds() -> Vec<Vec<u8>> {
    super::hashed_inputs(32, 384, 3_266_489_917, 9, 59)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_pass() {
        super::run(&[]);
        for s in super::seeds() {
            super::run(&s);
        }
    }

    /// The seeds reach congestion control: CE marks answered with CNPs, CNPs taken by a
    /// QP's reaction point and CNPs dropped.
    #[test]
    fn seeds_reach_the_cnp_paths() {
        let mut total = crate::roce::EngineStats::default();
        for s in super::seeds() {
            let st = super::run_counted(&s);
            total.np_ecn_marked_roce_packets += st.np_ecn_marked_roce_packets;
            total.np_cnp_sent += st.np_cnp_sent;
            total.rp_cnp_handled += st.rp_cnp_handled;
            total.rx_cnp_dropped += st.rx_cnp_dropped;
        }
        assert!(total.np_ecn_marked_roce_packets > 0 && total.np_cnp_sent > 0);
        assert!(
            total.rp_cnp_handled > 0 && total.rx_cnp_dropped > 0,
            "{total:?}"
        );
    }
}
