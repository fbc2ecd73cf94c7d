//! The data path's packet I/O: frames from the port, the netdev and the device's own
//! loopback into the engine, the engine's frames out on the port.

use super::*;

impl DataPath {
    /// Packets the device sent to its own GIDs.
    pub(super) fn receive_loopback(&mut self) -> bool {
        let mut work = false;
        for _ in 0..RX_BATCH {
            let Some(p) = self.hw.loopback.pop_front() else {
                break;
            };
            deliver(&mut self.engine, &mut self.hw, &p);
            work = true;
        }
        work
    }

    /// Whether to look at the port and netdev on this pass: always while frames keep coming,
    /// else at most every `WIRE_POLL_INTERVAL` (each look is a system call; doorbells are
    /// memory and are looked at on every pass).
    pub(super) fn wire_due(&self) -> bool {
        (self.port.is_some() || self.netdev.is_some())
            && (self.wire_busy || self.last_wire_poll.elapsed() >= WIRE_POLL_INTERVAL)
    }

    /// Frames from the port: RoCEv2 for this device to the engine, the rest to the netdev.
    pub(super) fn receive_port(&mut self) -> bool {
        let Some(port) = &mut self.port else {
            return false;
        };
        let mut work = false;
        let (mac, max_frame) = (port.mac(), port.max_frame());
        for _ in 0..RX_BATCHES_PER_PASS {
            let n = match port.recv() {
                Ok(n) => n,
                Err(e) => {
                    log::warn!("rox-nic: port receive: {e}");
                    break;
                }
            };
            if n == 0 {
                break;
            }
            work = true;
            self.hw.stats[STAT_PORT_RX_FRAMES] += n as u64;
            let mut to_netdev: Vec<FrameRef> = Vec::new();
            for f in port.frames() {
                match frame::classify(f, &mac, max_frame, |g| {
                    self.hw.is_own_gid(g) || self.hw.has_mcast_group(g)
                }) {
                    Rx::Roce(ip) => {
                        self.hw.stats[STAT_RX_BYTES] += ip.len() as u64;
                        deliver(&mut self.engine, &mut self.hw, &f[ip]);
                    }
                    Rx::Netdev => to_netdev.push(FrameRef::whole(f)),
                    Rx::Drop(counter) => self.hw.stats[counter] += 1,
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
            if n < crate::port::BATCH {
                break;
            }
        }
        work
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

    /// Puts the engine's packets (and queued netdev frames) on the port.
    pub(super) fn flush_outbound(&mut self) -> bool {
        let Some(port) = &mut self.port else {
            self.hw.outbound.clear();
            return false;
        };
        let queued = !self.hw.outbound.is_empty();
        for (dmac, p) in self.hw.outbound.drain(..) {
            port.queue_ip(&dmac, p);
        }
        let sent = port.flush();
        self.account_port_tx();
        queued || sent > 0
    }

    /// Adds the frames the port sent since the last look to `STAT_PORT_TX_FRAMES` (the port
    /// also sends on its own: a frame held back by reorder injection leaves when nothing
    /// arrives).
    pub(super) fn account_port_tx(&mut self) {
        if let Some(port) = &self.port {
            let sent = port.stats().tx_frames;
            self.hw.stats[STAT_PORT_TX_FRAMES] += sent - self.port_tx_seen;
            self.port_tx_seen = sent;
        }
    }
}

fn count_forwarded(hw: &mut Hw, f: Forwarded) {
    hw.stats[STAT_PORT_TO_NETDEV] += f.delivered;
    hw.stats[STAT_PORT_DROP_NETDEV] += f.dropped;
}

/// Hands a received packet to the transport, unless the port is down (no link, no packets).
fn deliver(engine: &mut Engine, hw: &mut Hw, packet: &[u8]) {
    if hw.port_up() {
        // Drops (bad ICRC, no such QP, ...) are counted by the engine.
        let _ = engine.receive(hw, packet);
    } else {
        hw.rx_port_down_drops += 1;
    }
}
