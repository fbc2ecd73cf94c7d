//! The ICRC (IBA 9.9.2, RoCEv2 A17.3.3): a CRC-32 over the masked LRH, the IP packet's
//! headers with their variant fields masked to ones, and the rest of the packet; computed on
//! transmit, checked on receipt (where the port may have folded it already, [`IcrcFold`]).

use super::*;
use crate::sys::crc32;

/// ICRC of `packet` (IP header .. end of pad, without the ICRC itself); `ip_len` is the IP
/// header length (20 or 40).
pub fn compute_icrc(packet: &[u8], ip_len: usize) -> u32 {
    icrc_state(packet, ip_len)
}

/// The ICRC rdma_rxe puts on (and expects of) a FLUSH request: the IBA ICRC's input followed
/// by the whole transport part again, BTH (unmasked) to the end. rxe's opcode table gives
/// RC_FLUSH no payload offset (drivers/infiniband/sw/rxe/rxe_opcode.c, Linux 6.2 on, 7.3.4
/// here), so its ICRC code takes the packet from the BTH on as the "payload" after having
/// hashed FETH and RETH as headers. Only FLUSH has this; docs/interop.md.
pub fn rxe_flush_icrc(packet: &[u8], ip_len: usize) -> u32 {
    crc32::update(
        icrc_state(packet, ip_len),
        &packet[ip_len + UDP_HEADER_LEN..],
    )
}

/// How the ICRC of a FLUSH request is computed on transmit: as IBA says, or as rdma_rxe does
/// ([`rxe_flush_icrc`]), which an rxe responder needs (it drops the IBA one).
/// The device's choice (`DeviceConfig::flush_icrc`, rox-nic --flush-icrc); received FLUSH
/// requests are accepted with either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlushIcrc {
    #[default]
    Iba,
    Rxe,
}

/// Whether `wire_icrc` is the ICRC of `packet` (no ICRC) with IP header length `ip_len`: the
/// IBA one, or for a FLUSH request also rdma_rxe's ([`rxe_flush_icrc`]; the opcode is the
/// BTH's first byte).
pub fn icrc_matches(packet: &[u8], ip_len: usize, wire_icrc: u32) -> bool {
    compute_icrc(packet, ip_len) == wire_icrc
        || (packet.get(ip_len + UDP_HEADER_LEN) == Some(&opcode::RC_FLUSH)
            && rxe_flush_icrc(packet, ip_len) == wire_icrc)
}

/// The ICRC's CRC state (crc32fast's finalized form) after the masked LRH, IP/UDP/BTH and
/// everything after the BTH: one run over the packet where it lies, the masked fields ORed
/// to ones as the fold loads them (no copy of the headers or the payload).
fn icrc_state(packet: &[u8], ip_len: usize) -> u32 {
    let ored = if ip_len == IPV4_HEADER_LEN {
        &ICRC_ORED_V4
    } else {
        &ICRC_ORED_V6
    };
    crc32::update_ored(ICRC_LRH_STATE, packet, ored)
}

/// The CRC state after the masked LRH, where every ICRC run starts.
const ICRC_LRH_STATE: u32 = crc32::update_bitwise(0, &ICRC_MASKED_LRH);

/// The CRC state of any run followed by its own CRC (little-endian, as the ICRC is sent):
/// an ICRC run folded through the ICRC ends here exactly when the ICRC is right (the CRC of
/// the empty run from 0 is 0, so this is the CRC of four zero bytes).
pub const ICRC_RESIDUE: u32 = crc32::update_bitwise(0, &[0; ICRC_LEN]);

/// The ICRC's run over a packet that starts `at` bytes (under 16) into a buffer, for a fold
/// of the whole buffer (a frame's copy, `sys::shm::PeerBytes::copy_folding`); `ip_len` the IP
/// header's length (20 or 40).
pub const fn icrc_front(at: usize, ip_len: usize) -> crc32::Front {
    crc32::Front::new(at, ICRC_LRH_STATE, &icrc_ored(ip_len))
}

/// A received packet's ICRC run folded through its ICRC by the port (as it copied the frame):
/// the IP header length whose masks the fold took, and the CRC state it ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcrcFold {
    pub ip_len: usize,
    pub state: u32,
}

impl IcrcFold {
    /// Whether it proves the IBA ICRC right for a packet with IP header length `ip_len`
    /// (folded to the packet's end: the caller's to know).
    pub fn proves(&self, ip_len: usize) -> bool {
        self.ip_len == ip_len && self.state == ICRC_RESIDUE
    }
}

/// The header fields the ICRC masks (IBA A17.3.3) as ones to OR over a packet's first bytes.
static ICRC_ORED_V4: [u8; crc32::ORED_LEN] = icrc_ored(IPV4_HEADER_LEN);
static ICRC_ORED_V6: [u8; crc32::ORED_LEN] = icrc_ored(IPV6_HEADER_LEN);

/// [`ICRC_ORED_V4`] or [`ICRC_ORED_V6`] for IP header length `ip_len`.
const fn icrc_ored(ip_len: usize) -> [u8; crc32::ORED_LEN] {
    let mut ored = [0u8; crc32::ORED_LEN];
    if ip_len == IPV4_HEADER_LEN {
        ored[field::V4_TOS] = ICRC_MASK;
        ored[field::V4_TTL] = ICRC_MASK;
        ored[field::V4_CHECKSUM] = ICRC_MASK;
        ored[field::V4_CHECKSUM + 1] = ICRC_MASK;
    } else {
        // Everything but the 4-bit version: traffic class and flow label.
        const VERSION_BITS: u8 = 0xf0;
        let word = field::V6_VERSION_CLASS_FLOW;
        ored[word] = ICRC_MASK & !VERSION_BITS;
        ored[word + 1] = ICRC_MASK;
        ored[word + 2] = ICRC_MASK;
        ored[word + 3] = ICRC_MASK;
        ored[field::V6_HOP_LIMIT] = ICRC_MASK;
    }
    let udp_checksum = ip_len + field::UDP_CHECKSUM;
    ored[udp_checksum] = ICRC_MASK;
    ored[udp_checksum + 1] = ICRC_MASK;
    ored[ip_len + UDP_HEADER_LEN + field::BTH_RESV8A] = ICRC_MASK;
    ored
}
