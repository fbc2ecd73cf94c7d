//! The QUERY_STATS counters: indices into its [`Stats`] response.

pub const STAT_TX_PACKETS: usize = 0;
pub const STAT_TX_BYTES: usize = 1;
pub const STAT_RX_PACKETS: usize = 2;
pub const STAT_RX_BYTES: usize = 3;
pub const STAT_RX_DROPPED: usize = 4;
pub const STAT_RX_ICRC_ERRORS: usize = 5;
/// Go-back-N rewinds (ACK timeouts plus sequence-error / RNR NAKs received).
pub const STAT_RETRANSMITS: usize = 6;
/// NAKs (sequence error, RNR) this device's responders sent.
pub const STAT_NAKS_SENT: usize = 7;
/// ACKs this device's responders sent (after coalescing).
pub const STAT_ACKS_SENT: usize = 8;
/// Local ACK timeouts that caused a retransmission.
pub const STAT_TIMEOUTS: usize = 9;
pub const STAT_DUP_REQUESTS: usize = 10;
pub const STAT_SEND_WQES: usize = 11;
pub const STAT_RECV_WQES: usize = 12;
pub const STAT_CQES: usize = 13;
pub const STAT_EQES: usize = 14;
pub const STAT_INTERRUPTS: usize = 15;
pub const STAT_DOORBELL_SCANS: usize = 16;
pub const STAT_WAKEUPS: usize = 17;
pub const STAT_WQE_ERRORS: usize = 18;
/// Page fault events posted for on-demand paging regions (`EQE_TYPE_PAGE_FAULT`).
pub const STAT_PAGE_FAULTS: usize = 19;
/// Ethernet frames received on the port (every frame, before any check).
pub const STAT_PORT_RX_FRAMES: usize = 20;
/// Ethernet frames sent on the port (RoCE and the paired netdev's).
pub const STAT_PORT_TX_FRAMES: usize = 21;
/// Frames from the port handed to the paired netdev (not RoCE for this device).
pub const STAT_PORT_TO_NETDEV: usize = 22;
/// Frames the paired netdev sent, put on the port.
pub const STAT_PORT_FROM_NETDEV: usize = 23;
/// Dropped: shorter than their headers say, a malformed IP/UDP header, or IPv4 options on a
/// RoCEv2 packet.
pub const STAT_PORT_DROP_MALFORMED: usize = 24;
/// Dropped: longer than the port MTU allows.
pub const STAT_PORT_DROP_OVERSIZE: usize = 25;
/// Dropped: unicast to another MAC.
pub const STAT_PORT_DROP_OTHER_MAC: usize = 26;
/// Dropped: VLAN-tagged (rox's port is untagged).
pub const STAT_PORT_DROP_VLAN: usize = 27;
/// Dropped: the paired netdev could not take the frame (not attached, or its socket full).
pub const STAT_PORT_DROP_NETDEV: usize = 28;
/// RoCE packets dropped because no QP of this device has the destination QPN.
pub const STAT_RX_UNKNOWN_QP: usize = 29;
/// RoCE packets dropped for a P_Key or (UD) Q_Key that does not match the QP's.
pub const STAT_RX_BAD_KEY: usize = 30;
/// RoCE packets to another device dropped before the port because their destination MAC was
/// all zeroes (the sender had no resolved address).
pub const STAT_PORT_DROP_NO_DMAC: usize = 31;
/// Copies of multicast RoCE packets (received, or sent by this device to a group it has QPs
/// in) handed to attached QPs: one per packet and QP; each QP then checks its own Q_Key
/// (`STAT_RX_BAD_KEY`) and state.
pub const STAT_RX_MCAST_COPIES: usize = 32;
/// RoCEv2 CNPs dropped: for a QP that does not exist, is not RC/UC, or is not connected to
/// the CNP's sender (docs/transport.md, "Congestion control").
pub const STAT_RX_CNP_DROPPED: usize = 33;
/// Receive segmentation requests (a tap with offloads hands over a run of UDP datagrams as
/// one) refused and dropped whole: segments shorter than a RoCEv2 packet's BTH and ICRC, or
/// more than the kernel's UDP_MAX_SEGMENTS of them. One per request, however many frames.
pub const STAT_PORT_RX_GSO_REFUSED: usize = 34;
/// Writes of the trapped wake register (`regs::WAKE_REG`): each one stalled a vCPU for a
/// vfio-user round trip.
pub const STAT_WAKES_TRAPPED: usize = 35;
/// Doorbells of the posted-wake companion (`wake`) the device took (eventfd signals; several
/// rung before the device looks count once).
pub const STAT_WAKES_POSTED: usize = 36;
/// Idle sleeps (`STAT_WAKEUPS`) the port or the paired netdev ended: a frame arrived (or a
/// blocked send could go on). With the next two, why a sleep ended when no wake did (a sleep
/// may count under several): a doorbell rung while the device is awake for one of these
/// needs no wake, so tests that count wakes discount it (tests/guest/wake_after_idle.py).
pub const STAT_WAKEUPS_WIRE: usize = 37;
/// Idle sleeps that ended with nothing to read: the transport's next timer or a link's retry
/// was due (or a signal came).
pub const STAT_WAKEUPS_TIMER: usize = 38;
/// Idle sleeps the driver's register writes ended: admin and EQ doorbells, queue enables, a
/// reset (not `WAKE_REG`: `STAT_WAKES_TRAPPED`).
pub const STAT_WAKEUPS_DRIVER: usize = 39;
pub const STATS_COUNT: usize = 40;

/// The response of QUERY_STATS: the counters by `STAT_*` index, each a u64 little-endian like
/// every field of this crate (written and read in native order, which the crate asserts is
/// little-endian). A device writes a prefix of it (`QueryCmd::resp_len`), a shorter one when
/// it has fewer counters: the driver reads the rest as 0.
pub type Stats = [u64; STATS_COUNT];
