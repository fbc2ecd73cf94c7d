//! The data path's packet I/O: frames from the port, the netdev and the device's own
//! loopback into the engine (each parsed once), the deferred-work queue drained and the
//! engine's packets routed, frames out on the port.

use super::*;

impl DataPath {
    /// Packets the device sent to its own GIDs (and what they cause, at once, as if they
    /// had been queued behind: a device-local RC pair's ACKs).
    pub(super) fn receive_loopback(&mut self) -> bool {
        let mut work = false;
        for _ in 0..RX_BATCH {
            let Some(p) = self.loopback.pop_front() else {
                break;
            };
            let side = deliver(&mut self.engine, &mut self.hw, &p, None);
            self.work_side = self.work_side.or(side);
            p.recycle();
            self.run_deferred();
            work = true;
        }
        work
    }

    /// Drains the work the engine's calls left, in order: packets routed, events posted,
    /// broken QPs made fatal (which may leave more work: drained too).
    pub(super) fn run_deferred(&mut self) -> bool {
        let mut work = false;
        while let Some(item) = self.hw.deferred.pop_front() {
            work = true;
            match item {
                Deferred::Transmit { dgid, dmac, packet } => self.route(&dgid, &dmac, packet),
                Deferred::Event { event_type, qpn } => {
                    self.hw.async_event(event_type, qpn.get(), 0)
                }
                Deferred::FatalQp { qpn, why } => self.qp_fatal(qpn, why),
            }
        }
        work
    }

    /// Where a packet the engine sent goes: back into the device for its own GIDs, out on the
    /// port for others (a multicast group's both), nowhere without a link. The one place
    /// transmitted packets are counted.
    fn route(&mut self, dgid: &Gid, dmac: &Mac, packet: wire::Packet) {
        if !self.hw.port_up() {
            // No link: the packet is lost like on a real wire (RC retransmits later).
            self.hw.counters.tx_port_down_discards += 1;
            return;
        }
        self.hw.stats[STAT_TX_PACKETS] += 1;
        self.hw.stats[STAT_TX_BYTES] += packet.len() as u64;
        self.hw.counters.destination(false, dgid);
        if self.hw.is_own_gid(dgid) {
            // Same-device QP to QP: looped back inside the device, never on the wire.
            self.loopback.push_back(packet);
            return;
        }
        if self.hw.has_mcast_group(dgid) {
            // Like mlx5 (and rdma_rxe through IP multicast loopback), a packet to a group
            // reaches this device's own attached QPs too, the sender included (IBA leaves
            // the sender's copy to the CA; nothing here asks to block it). It still goes
            // out on the port for the other members.
            self.loopback.push_back(packet.clone());
        }
        let Some(port) = &mut self.port else {
            log::debug!("rox-nic: no port, dropping packet to a remote GID");
            return;
        };
        if *dmac == [0; 6] {
            if self.hw.stats[STAT_PORT_DROP_NO_DMAC] == 0 {
                log::warn!(
                    "rox-nic: dropping packets to a GID of another device without a resolved \
                     destination MAC (logged once; counter port_drop_no_dmac)"
                );
            }
            self.hw.stats[STAT_PORT_DROP_NO_DMAC] += 1;
        } else {
            port.queue_ip(dmac, packet);
            self.port_queued = true;
        }
    }

    /// Whether to look at the port and netdev on this pass: always while frames keep coming,
    /// else at most every `WIRE_POLL_INTERVAL` (each look is a system call; doorbells are
    /// memory and are looked at on every pass), `now` being the pass's time.
    pub(super) fn wire_due(&self, now: Instant) -> bool {
        (self.port.is_some() || self.netdev.is_some())
            && (self.wire_busy
                || now.saturating_duration_since(self.last_wire_poll) >= WIRE_POLL_INTERVAL)
    }

    /// Frames from the port: RoCEv2 for this device to the engine, the rest to the netdev;
    /// after each batch the answers it owes leave (`answer_taken`).
    pub(super) fn receive_port(&mut self) -> bool {
        use roce::DeviceEnv;
        if self.port.is_none() {
            return false;
        }
        // What arrives from here on is not taken before this pass's timers: they are judged
        // at this time (roce/engine/rto/clock.rs).
        self.engine.wire_read(self.hw.now_ns());
        let mut work = false;
        for _ in 0..RX_BATCHES_PER_PASS {
            let n = self.take_port_batch();
            if n == 0 {
                break;
            }
            work = true;
            self.answer_taken();
            #[cfg(feature = "testkit")]
            self.shared.hold_after_rx_batch.reached();
            if n < crate::port::BATCH {
                break;
            }
        }
        let Some(port) = &mut self.port else {
            return work;
        };
        // A cable lent the frames where they lie: its peer may fill the slots again.
        port.release_frames();
        // Requests the port refused whole (a receive may take nothing else).
        let refused = port.stats().rx_gso_refused;
        self.hw.stats[STAT_PORT_RX_GSO_REFUSED] += refused - self.port_gso_refused_seen;
        self.port_gso_refused_seen = refused;
        if let Some(queue) = port.bottleneck_stats() {
            self.hw.counters.bottleneck = queue;
        }
        work
    }

    /// One receive from the port (up to `port::BATCH` frames), each frame handed on; returns
    /// how many it took (0 also after an error, which is logged).
    fn take_port_batch(&mut self) -> usize {
        let Some(port) = &mut self.port else {
            return 0;
        };
        let n = match port.recv() {
            Ok(n) => n,
            Err(e) => {
                log::warn!("rox-nic: port receive: {e}");
                return 0;
            }
        };
        if n == 0 {
            return 0;
        }
        self.hw.stats[STAT_PORT_RX_FRAMES] += n as u64;
        let (mac, max_frame) = (port.mac(), port.max_frame());
        let mut to_netdev: Vec<FrameRef> = Vec::new();
        let mut first_side = None;
        for (f, fold) in port.frames_folded() {
            match frame::sort_received(f, fold, &mac, max_frame, |g| {
                self.hw.is_own_gid(g) || self.hw.has_mcast_group(g)
            }) {
                Arrival::Roce(range, ip) => {
                    let side = deliver(&mut self.engine, &mut self.hw, &f[range], Some(ip));
                    first_side = first_side.or(side);
                }
                Arrival::Netdev => to_netdev.push(FrameRef::whole(f)),
                Arrival::Drop(counter) => self.hw.stats[counter] += 1,
            }
        }
        if !to_netdev.is_empty() {
            let forwarded = match &mut self.netdev {
                Some(nd) => nd.forward(&to_netdev),
                None => Forwarded {
                    delivered: 0,
                    dropped: to_netdev.len() as u64,
                },
            };
            count_forwarded(&mut self.hw, forwarded);
        }
        self.work_side = self.work_side.or(first_side);
        n
    }

    /// After the engine took a batch of packets: the answers it owes now (coalesced ACKs, READ
    /// responses held by a rate) are built and routed, and if the batch made any answer (those,
    /// or what its requests were answered with at once: READ responses, atomic ACKs, NAKs),
    /// the port's queue leaves at once. Not at the end of the pass: a thread that loses its core
    /// before then (a loaded host) would hold answers the peer's timers are counting
    /// (docs/transport.md, "When answers leave"). One ACK per QP per batch, not per packet. A
    /// batch that made no answer (a requester's ACKs) flushes nothing: the packets it let go
    /// leave with the pass's turns, in one flush, as before.
    pub(super) fn answer_taken(&mut self) {
        self.engine.send_answers(&mut self.hw);
        self.run_deferred();
        if self.engine.stats().tx_responses != self.responses_at_flush && self.port_queued {
            self.flush_port();
        }
    }

    /// Frames the netdev sent: out on the port unchanged.
    pub(super) fn receive_netdev(&mut self) -> bool {
        let Some(nd) = &mut self.netdev else {
            return false;
        };
        let backlog = nd.backlog();
        count_forwarded(&mut self.hw, nd.flush());
        let mut work = nd.backlog() < backlog;
        for _ in 0..RX_BATCHES_PER_PASS {
            let n = match nd.recv() {
                Ok(n) => n,
                Err(e) => {
                    log::warn!("rox-nic: netdev receive: {e}");
                    break;
                }
            };
            if n == 0 {
                break;
            }
            work = true;
            let Some(port) = &mut self.port else {
                // No wire: the frames have nowhere to go.
                continue;
            };
            for f in nd.frames() {
                if f.len() < ETH_HEADER_LEN {
                    self.hw.stats[STAT_PORT_DROP_MALFORMED] += 1;
                } else if f.len() > port.max_frame() {
                    self.hw.stats[STAT_PORT_DROP_OVERSIZE] += 1;
                } else {
                    self.hw.stats[STAT_PORT_FROM_NETDEV] += 1;
                    port.queue_frame(f);
                }
            }
            if n < crate::port::BATCH {
                break;
            }
        }
        work
    }

    /// Sends what was queued on the port this pass (the engine's packets, netdev frames).
    pub(super) fn flush_port(&mut self) -> bool {
        let queued = std::mem::take(&mut self.port_queued);
        self.responses_at_flush = self.engine.stats().tx_responses;
        let Some(port) = &mut self.port else {
            // Nothing waits in a port: the packets left when the engine built them.
            self.engine.packets_left(&self.hw);
            return false;
        };
        let sent = port.flush();
        if port.backlog() == 0 {
            // Every packet queued so far left: their timers count from now (rto/clock.rs).
            self.engine.packets_left(&self.hw);
        }
        self.account_port_tx();
        queued || sent > 0
    }

    /// Adds the frames the port sent since the last look to `STAT_PORT_TX_FRAMES` (the port
    /// also sends on its own: a frame held back by reorder injection leaves when nothing
    /// arrives), and those it lost (queue full, wire refused) to the port's transmit discards.
    pub(super) fn account_port_tx(&mut self) {
        if let Some(port) = &self.port {
            let stats = port.stats();
            self.hw.stats[STAT_PORT_TX_FRAMES] += stats.tx_frames - self.port_tx_seen;
            self.port_tx_seen = stats.tx_frames;
            let dropped = stats.tx_queue_full + stats.tx_lost;
            self.hw.counters.tx_port_queue_discards += dropped - self.port_drops_seen;
            self.port_drops_seen = dropped;
        }
    }
}

fn count_forwarded(hw: &mut Hw, f: Forwarded) {
    hw.stats[STAT_PORT_TO_NETDEV] += f.delivered;
    hw.stats[STAT_PORT_DROP_NETDEV] += f.dropped;
}

/// Hands a received packet to the transport, unless the port is down (no link, no packets):
/// parsed once, from behind the IP header if the port's frame check read it (`ip`). The one
/// place received packets are counted. Returns the side of the device's work the packet is
/// (its QP, and whether it answers a request: the adaptive spin's record, `spin::history`), if
/// the engine took it (a dropped packet names no side: `spin.rs`'s head).
fn deliver(engine: &mut Engine, hw: &mut Hw, packet: &[u8], ip: Option<IpView>) -> Option<Side> {
    if !hw.port_up() {
        hw.rx_port_down_drops += 1;
        return None;
    }
    hw.stats[STAT_RX_PACKETS] += 1;
    hw.stats[STAT_RX_BYTES] += packet.len() as u64;
    let parsed = match ip {
        Some(ip) => wire::parse_transport(packet, ip),
        None => wire::parse_packet(packet),
    };
    hw.shared.wqe_trace.frame_in(&parsed);
    let side = parsed.as_ref().ok().map(|p| {
        hw.counters.destination(true, &p.dgid);
        Side::packet(p.hdr.bth.dest_qpn, p.info.class.is_response())
    });
    // Drops (bad ICRC, no such QP, ...) are counted by the engine.
    let taken = engine.receive_parsed(hw, parsed).is_ok();
    side.filter(|_| taken)
}
