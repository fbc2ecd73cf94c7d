//! Packet checks and dispatch (as rxe_recv.c): parse, partition key, destination QP, its
//! transport and peer, then the completer (responses) or the responder (requests); multicast
//! fan-out to the attached UD QPs.

use super::{Engine, RxDrop};
use crate::roce::wire::{self, opcode as op, ParseError, Parsed, DEFAULT_PKEY};
use crate::roce::*;

impl Engine {
    /// Handles one received RoCEv2 IP packet (from the port or a local loopback).
    pub fn receive(&mut self, env: &mut dyn DeviceEnv, packet: &[u8]) -> Result<(), RxDrop> {
        self.stats.rx_packets += 1;
        let p = match wire::parse_packet(packet) {
            Ok(p) => p,
            Err(e) => {
                match e {
                    ParseError::BadIcrc => self.stats.rx_icrc_errors += 1,
                    _ => self.stats.rx_malformed += 1,
                }
                return Err(RxDrop::Parse(e));
            }
        };
        const PKEY_MEMBER_BITS: u16 = 0x7fff;
        if p.hdr.bth.pkey & PKEY_MEMBER_BITS != DEFAULT_PKEY & PKEY_MEMBER_BITS {
            self.stats.rx_bad_pkey += 1;
            return Err(RxDrop::BadPkey(p.hdr.bth.pkey));
        }
        let qpn = p.hdr.bth.dest_qpn;
        if qpn == Qpn::MULTICAST {
            return self.receive_multicast(env, &p);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
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
        let is_response = qp.cfg.qp_type == QpType::Rc && p.info.class.is_response();
        if is_response {
            qp.completer_receive(env, &mut self.stats, &p);
        } else {
            qp.responder_receive(env, &mut self.stats, &p);
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
            let Some(qp) = self.qps.get_mut(&qpn) else {
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
