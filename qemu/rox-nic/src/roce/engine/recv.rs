//! Packet checks and dispatch (as rxe_recv.c): parse, partition key, destination QP, its
//! transport and peer, then the completer (responses) or the responder (requests); multicast
//! fan-out to the attached UD QPs.

use super::{Engine, RxDrop};
use crate::roce::wire::{self, opcode as op, ParseError, Parsed, DEFAULT_PKEY};
use crate::roce::*;

impl Engine {
    /// Handles one received RoCEv2 IP packet (from the port or a local loopback).
    pub fn receive(&mut self, env: &mut dyn DeviceEnv, packet: &[u8]) -> Result<(), RxDrop> {
        self.receive_parsed(env, wire::parse_packet(packet))
    }

    /// Handles one received packet as its receiver parsed it (the port's frame check read the
    /// IP header, [`wire::parse_transport`] the rest): parse errors are counted here too.
    pub fn receive_parsed(
        &mut self,
        env: &mut dyn DeviceEnv,
        parsed: Result<Parsed<'_>, ParseError>,
    ) -> Result<(), RxDrop> {
        self.stats.rx_packets += 1;
        // Read in place: a Parsed is ~220 bytes.
        let p = match &parsed {
            Ok(p) => p,
            Err(e) => {
                match *e {
                    ParseError::BadIcrc => self.stats.rx_icrc_errors += 1,
                    _ => self.stats.rx_malformed += 1,
                }
                return Err(RxDrop::Parse(*e));
            }
        };
        const PKEY_MEMBER_BITS: u16 = 0x7fff;
        if p.hdr.bth.pkey & PKEY_MEMBER_BITS != DEFAULT_PKEY & PKEY_MEMBER_BITS {
            self.stats.rx_bad_pkey += 1;
            return Err(RxDrop::BadPkey(p.hdr.bth.pkey));
        }
        let ce = self.note_ce(p);
        if p.hdr.bth.opcode == op::CNP {
            return self.receive_cnp(env, p);
        }
        let qpn = p.hdr.bth.dest_qpn;
        if qpn == Qpn::MULTICAST {
            return self.receive_multicast(env, p);
        }
        let Some(mut qp) = self.qps.get_mut(&qpn) else {
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(qpn));
        };
        if p.hdr.bth.opcode & op::CLASS_MASK != qp.transport_bits() {
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(qpn));
        }
        // A connected QP talks to one peer: packets from any other address are not its own
        // (e.g. a stale connection that used the same QPN).
        if let Some(av) = qp.av.filter(|_| qp.cfg.qp_type != QpType::Ud) {
            if p.sgid != av.dgid {
                self.stats.rx_wrong_source += 1;
                return Err(RxDrop::WrongSource(qpn));
            }
        }
        if ce {
            qp.congestion_experienced(env, &mut self.stats, &mut self.cnp_limiter);
        }
        if qp.xrc.is_some() {
            return qp.xrc_receive(env, &mut self.stats, p);
        }
        let is_response = qp.cfg.qp_type == QpType::Rc && p.info.class.is_response();
        if is_response {
            qp.completer_receive(env, &mut self.stats, p);
        } else if !qp.can_receive() {
            // The caller learns of the drop too, not only the counter.
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(qpn));
        } else {
            qp.responder_receive(env, &mut self.stats, p);
        }
        Ok(())
    }

    /// A packet to the multicast QPN: a UD SEND for every QP attached to its destination
    /// GID, each checking its own Q_Key and state (IBA 10.5.2.5). Reliable and connected
    /// opcodes never go to a group.
    pub(super) fn receive_multicast(
        &mut self,
        env: &mut dyn DeviceEnv,
        p: &Parsed<'_>,
    ) -> Result<(), RxDrop> {
        let members = env.multicast_members(&p.dgid);
        if members.is_empty() || p.hdr.bth.opcode & op::CLASS_MASK != op::CLASS_UD {
            self.stats.rx_no_qp += 1;
            return Err(RxDrop::NoQp(Qpn::MULTICAST));
        }
        for qpn in members {
            let Some(mut qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if qp.cfg.qp_type == QpType::Ud {
                env.multicast_copy();
                qp.responder_receive(env, &mut self.stats, p);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use super::*;

    fn engine_with_rc_qp(env: &mut TestEnv) -> Engine {
        let mut engine = Engine::new();
        create_rts_qp(&mut engine, env, QpType::Rc);
        engine
    }

    #[test]
    fn packets_are_checked_before_any_qp_sees_them() {
        let mut env = TestEnv::new();
        let mut engine = engine_with_rc_qp(&mut env);
        let send =
            |pkey: u16, opcode: u8| packet_from_peer(opcode, 100, &[], |h| h.bth.pkey = pkey);
        let mut bad = send(DEFAULT_PKEY, op::RC_SEND_ONLY);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            engine.receive(&mut env, &bad),
            Err(RxDrop::Parse(ParseError::BadIcrc))
        );
        assert_eq!(
            engine.receive(&mut env, &send(0x1234, op::RC_SEND_ONLY)),
            Err(RxDrop::BadPkey(0x1234))
        );
        // Limited membership (the top bit clear) of the default partition is ours too.
        let limited = engine.receive(&mut env, &send(0x7fff, op::CLASS_UC | op::RC_SEND_ONLY));
        assert_eq!(
            limited,
            Err(RxDrop::NoQp(LOCAL_QPN)),
            "a UC packet for an RC QP"
        );
        let other = from_source(send(DEFAULT_PKEY, op::RC_SEND_ONLY), [10, 0, 0, 9]);
        assert_eq!(
            engine.receive(&mut env, &other),
            Err(RxDrop::WrongSource(LOCAL_QPN))
        );
        let stats = engine.stats();
        assert_eq!(
            (
                stats.rx_icrc_errors,
                stats.rx_bad_pkey,
                stats.rx_no_qp,
                stats.rx_wrong_source
            ),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn responses_go_to_the_completer_requests_to_the_responder() {
        let mut env = TestEnv::new();
        let mut engine = engine_with_rc_qp(&mut env);
        let ack = packet_from_peer(op::RC_ACKNOWLEDGE, 100, &[], |h| {
            h.aeth = Some(wire::Aeth {
                syndrome: wire::Syndrome::Ack,
                msn: Msn::default(),
            })
        });
        engine.receive(&mut env, &ack).unwrap();
        assert_eq!(
            engine.stats().rx_stale_responses,
            1,
            "nothing was sent to acknowledge"
        );
        env.recv.push_back(RecvWr {
            wqe_index: 0,
            wr_id: 5,
            sges: Vec::new(),
        });
        engine
            .receive(
                &mut env,
                &packet_from_peer(op::RC_SEND_ONLY, 100, &[], |_| {}),
            )
            .unwrap();
        assert_eq!(env.completions[0].wr_id, 5);
        assert_eq!(
            engine.receive(
                &mut env,
                &packet_from_peer(op::UD_SEND_ONLY, 0, &[], |h| {
                    h.bth.dest_qpn = Qpn::MULTICAST;
                    h.deth = Some(wire::Deth {
                        qkey: 0,
                        src_qpn: PEER_QPN,
                    });
                })
            ),
            Err(RxDrop::NoQp(Qpn::MULTICAST)),
            "no multicast group here"
        );
    }
}
