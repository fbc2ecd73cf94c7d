//! QUERY_COUNTERS: the port's traffic counters (what the driver's performance management agent
//! reports as PortCounters / PortCountersExtended) and the transport's event counters, named as
//! mlx5 names its hw_counters so that `rdma statistic` users find the names they know.
//!
//! Every counter is free-running from device reset and never saturates here (64 bits); the
//! driver converts to IBA widths and units (PortXmitData counts 4-octet words, the 32-bit
//! PortCounters fields stop at their maximum).

use super::{AdminCommand, AdminPayload, AdminQuery, QueryAnswer, QueryCmd, ADMIN_PAYLOAD_SIZE};

/// Payload [`QueryCmd`] (`index` = port number, 1); response [`PortCounters`] (its first
/// `resp_len` bytes: a driver built against a shorter layout gets the prefix it knows); result0
/// = its size in bytes, result1 = the bytes written.
pub const ADMIN_OP_QUERY_COUNTERS: u8 = 0x51;

/// Response of QUERY_COUNTERS.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PortCounters {
    // Traffic, counted where packets leave and enter the device's transport (same-device
    // loopback included: it crosses the device's port logic as a real HCA's loopback does).
    /// RoCE packets sent.
    pub xmit_packets: u64,
    /// Their octets, from the IP header through the ICRC (the RoCEv2 packet without the
    /// Ethernet header and FCS).
    pub xmit_octets: u64,
    /// Of `xmit_packets`, those to a multicast GID.
    pub xmit_multicast_packets: u64,
    /// RoCE packets received (before any check of their contents).
    pub rcv_packets: u64,
    /// Their octets, counted as `xmit_octets`.
    pub rcv_octets: u64,
    /// Of `rcv_packets`, those to a multicast GID.
    pub rcv_multicast_packets: u64,
    /// Received packets dropped as damaged: bad ICRC, malformed headers (PortRcvErrors).
    pub rcv_errors: u64,
    /// Packets the port could not send: no link, or no resolved destination MAC
    /// (PortXmitDiscards).
    pub xmit_discards: u64,

    // Responder events.
    /// RC requests with a PSN beyond the expected one (a gap), and UC resynchronisations.
    pub out_of_sequence: u64,
    /// RC requests with a PSN below the expected one.
    pub duplicate_request: u64,
    /// RDMA WRITE requests received in sequence (messages: first or only packets).
    pub rx_write_requests: u64,
    /// RDMA READ requests received in sequence.
    pub rx_read_requests: u64,
    /// Atomic requests (compare-and-swap, fetch-and-add, ATOMIC WRITE) received in sequence.
    pub rx_atomic_requests: u64,
    /// Requests that failed the responder's key, bounds or access check (NAK remote access
    /// error sent).
    pub resp_remote_access_errors: u64,
    /// Messages longer than the receive WR that took them (local length error).
    pub resp_local_length_error: u64,
    /// Receive completions with an error status other than WR_FLUSH_ERR.
    pub resp_cqe_error: u64,

    // Requester events.
    /// NAK sequence error packets received.
    pub packet_seq_err: u64,
    /// READ responses past a gap (an implied NAK: an earlier response was lost).
    pub implied_nak_seq_err: u64,
    /// Local ACK timeouts (each a go-back-N retransmission, or the retry count's end).
    pub local_ack_timeout_err: u64,
    /// RNR NAK packets received.
    pub rnr_nak_retry_err: u64,
    /// NAK remote access error packets received.
    pub req_remote_access_errors: u64,
    /// NAK invalid request packets received.
    pub req_remote_invalid_request: u64,
    /// Send completions with an error status other than WR_FLUSH_ERR.
    pub req_cqe_error: u64,

    // Congestion control (ECN → CNP → DCQCN).
    /// CNPs sent as notification point.
    pub np_cnp_sent: u64,
    /// RoCE packets received with ECN Congestion Experienced.
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs received and acted on as reaction point.
    pub rp_cnp_handled: u64,
    /// CNPs received and ignored.
    pub rp_cnp_ignored: u64,

    // XRC.
    /// XRC requests a target QP refused because the SRQ they name is not in the target's XRC
    /// domain (or does not exist): NAK invalid request sent, nothing delivered.
    pub rx_xrc_domain_errors: u64,

    // The congested switch queue in front of the port's receive side (rox-nic `--bottleneck`,
    // docs/congestion-lab.md), counted as a switch counts its egress queue toward this port
    // (SAI's / SONiC's queue counters: packets, bytes, drops, WRED drops, ECN marks,
    // watermark); all 0 without a bottleneck. Frames, Ethernet header included; RoCEv2 only.
    /// Frames the queue passed on to the device.
    pub bottleneck_packets: u64,
    /// Their bytes.
    pub bottleneck_bytes: u64,
    /// Frames the queue dropped: full (tail drop) or by WRED (`bottleneck_wred_dropped_packets`).
    pub bottleneck_dropped_packets: u64,
    /// Of those, frames that were not ECN-capable dropped by WRED where it would have marked.
    pub bottleneck_wred_dropped_packets: u64,
    /// ECN-capable frames WRED marked Congestion Experienced.
    pub bottleneck_wred_ecn_marked_packets: u64,
    /// The deepest the queue was, in bytes (a high-water mark, not a count).
    pub bottleneck_watermark_bytes: u64,

    // Requester retransmissions (appended: older drivers read the prefix above).
    /// Retransmissions the requester sent before its local ACK timeout, on a timer adapted to
    /// the measured round trip (rox: tail probes, each the first packet not known to have
    /// arrived, sent again); mlx5's name for its adaptive retransmissions. The timeouts
    /// themselves are `local_ack_timeout_err`.
    pub roce_adp_retrans: u64,
}
const _: () = assert!(core::mem::size_of::<PortCounters>() == 35 * 8);

/// Writes [`PortCounters`] of port `index` (its first `resp_len` bytes) to `resp_addr`,
/// answers its size.
pub struct QueryCounters;
impl AdminCommand for QueryCounters {
    const OPCODE: u8 = ADMIN_OP_QUERY_COUNTERS;
    type Payload = QueryCmd;
    type Result = QueryAnswer<u32>;
    fn payload(payload: QueryCmd) -> AdminPayload {
        let mut area = AdminPayload {
            raw: [0; ADMIN_PAYLOAD_SIZE],
        };
        area.query = payload;
        area
    }
}
impl AdminQuery for QueryCounters {
    type Response = PortCounters;
    const NAME: &'static str = "QUERY_COUNTERS";
    const REQUIRED_LEN: usize = 0;
}
