//! The engine's congestion control hooks (the algorithm is `crate::roce::cc`): the
//! notification point answering CE-marked packets with CNPs, the reaction point taking CNPs,
//! and the requester's pacing at its QP's DCQCN rate.

use super::qp::Qp;
use super::{Engine, EngineStats, RxDrop};
use crate::roce::cc::{ECN_CE, ECN_MASK};
use crate::roce::wire::{self, opcode as op, Bth, Headers, Parsed, DEFAULT_PKEY};
use crate::roce::*;

/// A CNP's reserved bytes, sent as zeros.
const CNP_RESERVED: [u8; op::CNP_RESERVED_LEN] = [0; op::CNP_RESERVED_LEN];

impl Engine {
    /// Counts a received RoCE packet marked Congestion Experienced (whatever then becomes
    /// of it). Returns whether it was.
    pub(super) fn note_ce(&mut self, p: &Parsed<'_>) -> bool {
        let ce = wire::ecn_of(p.ip_header) & ECN_MASK == ECN_CE;
        if ce {
            self.stats.np_ecn_marked_roce_packets += 1;
        }
        ce
    }

    /// A CNP for one of this device's QPs: the reaction point of an RC/UC QP connected to
    /// the CNP's sender cuts its rate (congestion control on) or counts it ignored (off).
    /// Any other CNP is dropped and counted, and affects nothing else.
    pub(super) fn receive_cnp(
        &mut self,
        env: &mut dyn DeviceEnv,
        p: &Parsed<'_>,
    ) -> Result<(), RxDrop> {
        let qpn = p.hdr.bth.dest_qpn;
        let qp = self.qps.get_mut(&qpn).filter(|qp| {
            matches!(qp.cfg.qp_type, QpType::Rc | QpType::Uc)
                && qp.av.is_some_and(|av| av.dgid == p.sgid)
        });
        let Some(qp) = qp else {
            self.stats.rx_cnp_dropped += 1;
            return Err(RxDrop::UnwantedCnp(qpn));
        };
        if qp.cc.enabled {
            self.stats.rp_cnp_handled += 1;
            qp.cc.on_cnp(env.now_ns());
        } else {
            self.stats.rp_cnp_ignored += 1;
        }
        Ok(())
    }
}

impl Qp {
    /// The notification point: a CE-marked packet arrived for this QP. An RC/UC QP with
    /// congestion control on tells its peer's QP with a CNP, at most one per
    /// min_time_between_cnps.
    pub(super) fn congestion_experienced(
        &mut self,
        env: &mut dyn DeviceEnv,
        stats: &mut EngineStats,
    ) {
        let connected = matches!(self.cfg.qp_type, QpType::Rc | QpType::Uc);
        if !self.cc.enabled || !connected || !self.cc.cnp_due(env.now_ns()) {
            return;
        }
        // Not `self.bth`: an XRC QP's CNP is a CNP too, and it names no PSN (A17.9.3).
        let hdr = Headers::new(Bth {
            opcode: op::CNP,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: self.dest_qpn,
            ack_req: false,
            psn: Psn::default(),
        });
        stats.np_cnp_sent += 1;
        self.send_connected(env, stats, &hdr, &CNP_RESERVED);
    }
}
