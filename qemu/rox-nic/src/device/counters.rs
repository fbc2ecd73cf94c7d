//! QUERY_COUNTERS: the port's PMA counters and the transport's mlx5-named counters, gathered from
//! where each event is counted once: packets and octets in `Hw::stats` (the data path's route
//! and deliver), transport events in the engine's `EngineStats`, and here what only the device
//! sees (completion statuses, multicast destinations, sends without a link) and the counters of
//! the congested queue in front of its port (`--bottleneck`), as the data path last read them.

use rox_uapi::admin::*;

use super::state::Hw;
use crate::port::BottleneckStats;
use crate::roce::{Engine, EngineStats, Gid, WcStatus};

/// Events only the device layer sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub tx_multicast_packets: u64,
    pub rx_multicast_packets: u64,
    /// Packets the engine sent while the port had no link (lost).
    pub tx_port_down_discards: u64,
    /// Frames the port lost: its transmit queue was full, or the wire refused them.
    pub tx_port_queue_discards: u64,
    /// Error completions other than flushes: send queue, receive queue.
    pub req_cqe_errors: u64,
    pub resp_cqe_errors: u64,
    /// Receive completions with LOC_LEN_ERR.
    pub resp_local_length_errors: u64,
    /// The port's bottleneck (the switch queue in front of it), copied after each receive
    /// from the port: the one count the bottleneck keeps, read here and nowhere else.
    pub bottleneck: BottleneckStats,
}

impl DeviceCounters {
    /// Counts a completion the device writes.
    pub fn completion(&mut self, is_recv: bool, status: WcStatus) {
        if matches!(status, WcStatus::Success | WcStatus::WrFlushErr) {
            return;
        }
        if is_recv {
            self.resp_cqe_errors += 1;
            self.resp_local_length_errors += u64::from(status == WcStatus::LocLenErr);
        } else {
            self.req_cqe_errors += 1;
        }
    }

    /// Counts a packet sent (`rx` false) or received to `dgid` by its destination kind.
    pub fn destination(&mut self, rx: bool, dgid: &Gid) {
        if is_multicast_gid(dgid) {
            if rx {
                self.rx_multicast_packets += 1;
            } else {
                self.tx_multicast_packets += 1;
            }
        }
    }
}

/// The QUERY_COUNTERS response of the device's port.
pub fn port_counters(hw: &Hw, engine: &Engine) -> PortCounters {
    gather(&hw.stats, &hw.counters, engine.stats())
}

/// [`PortCounters`] from where each event is counted: the data path's stats, the device's
/// own counters and the engine's.
fn gather(stats: &Stats, dc: &DeviceCounters, es: &EngineStats) -> PortCounters {
    PortCounters {
        xmit_packets: stats[STAT_TX_PACKETS],
        xmit_octets: stats[STAT_TX_BYTES],
        xmit_multicast_packets: dc.tx_multicast_packets,
        rcv_packets: stats[STAT_RX_PACKETS],
        rcv_octets: stats[STAT_RX_BYTES],
        rcv_multicast_packets: dc.rx_multicast_packets,
        rcv_errors: es.rx_icrc_errors + es.rx_malformed,
        xmit_discards: dc.tx_port_down_discards
            + dc.tx_port_queue_discards
            + stats[STAT_PORT_DROP_NO_DMAC],
        out_of_sequence: es.rx_out_of_sequence,
        duplicate_request: es.rx_duplicates,
        rx_write_requests: es.rx_write_requests,
        rx_read_requests: es.rx_read_requests,
        rx_atomic_requests: es.rx_atomic_requests,
        resp_remote_access_errors: es.rx_remote_access_errors,
        resp_local_length_error: dc.resp_local_length_errors,
        resp_cqe_error: dc.resp_cqe_errors,
        packet_seq_err: es.rx_seq_naks,
        implied_nak_seq_err: es.rx_read_gaps,
        local_ack_timeout_err: es.retransmit_timeouts,
        rnr_nak_retry_err: es.rx_rnr_naks,
        req_remote_access_errors: es.rx_access_naks,
        req_remote_invalid_request: es.rx_invalid_request_naks,
        req_cqe_error: dc.req_cqe_errors,
        np_cnp_sent: es.np_cnp_sent,
        np_ecn_marked_roce_packets: es.np_ecn_marked_roce_packets,
        rp_cnp_handled: es.rp_cnp_handled,
        rp_cnp_ignored: es.rp_cnp_ignored,
        rx_xrc_domain_errors: es.rx_xrc_domain_errors,
        bottleneck_packets: dc.bottleneck.passed,
        bottleneck_bytes: dc.bottleneck.passed_bytes,
        bottleneck_dropped_packets: dc.bottleneck.tail_drops + dc.bottleneck.red_drops,
        bottleneck_wred_dropped_packets: dc.bottleneck.red_drops,
        bottleneck_wred_ecn_marked_packets: dc.bottleneck.ce_marked,
        bottleneck_watermark_bytes: dc.bottleneck.max_depth,
        roce_adp_retrans: es.tail_probes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_and_successes_are_not_cqe_errors() {
        let mut c = DeviceCounters::default();
        c.completion(false, WcStatus::Success);
        c.completion(true, WcStatus::WrFlushErr);
        assert_eq!(c, DeviceCounters::default());
    }

    #[test]
    fn error_completions_count_by_queue() {
        let mut c = DeviceCounters::default();
        c.completion(false, WcStatus::RemAccessErr);
        c.completion(true, WcStatus::LocLenErr);
        c.completion(true, WcStatus::LocProtErr);
        assert_eq!(c.req_cqe_errors, 1);
        assert_eq!(c.resp_cqe_errors, 2);
        assert_eq!(c.resp_local_length_errors, 1);
    }

    /// A tail probe is a retransmission before the local ACK timeout: counted apart from the
    /// timeouts, under mlx5's name for its adaptive retransmissions.
    #[test]
    fn tail_probes_are_roce_adp_retrans_and_timeouts_local_ack_timeout_err() {
        let es = EngineStats {
            tail_probes: 7,
            retransmit_timeouts: 3,
            ..EngineStats::default()
        };
        let c = gather(&[0; STATS_COUNT], &DeviceCounters::default(), &es);
        assert_eq!((c.roce_adp_retrans, c.local_ack_timeout_err), (7, 3));
        let others = PortCounters {
            roce_adp_retrans: 0,
            local_ack_timeout_err: 0,
            ..c
        };
        assert_eq!(others, PortCounters::default(), "nothing else moved");
    }

    #[test]
    fn multicast_destinations_count_by_direction() {
        let mut c = DeviceCounters::default();
        let mut group = [0u8; 16];
        group[0] = 0xff;
        let unicast = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        c.destination(false, &group);
        c.destination(true, &group);
        c.destination(true, &group);
        c.destination(true, &unicast);
        assert_eq!((c.tx_multicast_packets, c.rx_multicast_packets), (1, 2));
    }
}
