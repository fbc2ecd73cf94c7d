//! RoCEv2 wire format: IP/UDP encapsulation, BTH and extension headers, ICRC.
//!
//! A packet here is a complete IP packet: IPv4 (for v4-mapped GIDs) or IPv6 header, UDP header
//! (destination port 4791), BTH, extension headers, payload, pad to 4 bytes, ICRC. The ICRC is
//! computed as the IBA RoCEv2 annex (A17.3.3) and Linux rdma_rxe do: CRC-32 over 8 bytes of 0xff
//! (the masked LRH), the IP header with its variant fields (IPv4 TOS, TTL, header checksum;
//! IPv6 traffic class, flow label, hop limit) set to all ones, the UDP header with its checksum
//! set to all ones, the BTH with its reserved byte (resv8a) set to all ones, then the rest of the
//! headers, payload and pad; transmitted as a little-endian 32-bit value.

mod icrc;
pub mod opcode;
mod packet;
pub mod pool;
pub mod xrceth;

use super::{Gid, Key, Msn, Psn, Qpn};
pub use icrc::{
    compute_icrc, icrc_front, icrc_matches, rxe_flush_icrc, FlushIcrc, IcrcFold, ICRC_RESIDUE,
};
pub use opcode::{opcode_info, OpcodeClass, OpcodeInfo};
pub use packet::{
    build_packet, build_packet_filled, build_packet_with, ipv4_header_checksum, parse_packet,
    parse_transport, IpView, ParseError, Parsed,
};
pub use pool::{recycle, Packet};

/// IANA UDP port of RoCEv2.
pub const ROCE_V2_UDP_PORT: u16 = 4791;
pub const IPV4_HEADER_LEN: usize = 20;
pub const IPV6_HEADER_LEN: usize = 40;
pub const UDP_HEADER_LEN: usize = 8;
pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const ATOMIC_ETH_LEN: usize = 28;
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// FLUSH extended transport header (IBA memory placement extensions, A19).
pub const FETH_LEN: usize = 4;
/// Invalidate extended transport header: the R_Key to invalidate (SEND with invalidate).
pub const IETH_LEN: usize = 4;
pub const IMMDT_LEN: usize = 4;
pub const DETH_LEN: usize = 8;
/// XRC extended transport header: 8 reserved bits, the 24-bit XRC SRQ number.
pub const XRCETH_LEN: usize = 4;
pub const ICRC_LEN: usize = 4;
/// Size of the GRH an IB receive buffer of a UD QP starts with.
pub const GRH_LEN: usize = rox_uapi::verbs::GRH_SIZE as usize;
/// The default partition key (full membership).
pub const DEFAULT_PKEY: u16 = 0xffff;
const IP_PROTO_UDP: u8 = 17;
const IPV4_VERSION_IHL: u8 = 0x45;
const IPV4_DONT_FRAGMENT: u16 = 0x4000;
const IPV4_VERSION: u8 = 4;
const IPV6_VERSION: u8 = 6;
/// The IP version is the high nibble of the first byte of both IP headers.
const IP_VERSION_SHIFT: u8 = 4;
/// UDP source ports of RoCEv2 flows come from this range (the IANA dynamic range, as rxe does).
const ROCE_SOURCE_PORT_BASE: u16 = 0xc000;
const ROCE_SOURCE_PORT_MASK: u16 = 0x3fff;
/// BTH transport header version.
const BTH_TVER: u8 = 0;
const BTH_TVER_MASK: u8 = 0x0f;
const BTH_SE: u8 = 0x80;
const BTH_MIG: u8 = 0x40;
const BTH_PAD_SHIFT: u8 = 4;
const BTH_PAD_MASK: u8 = 0x3;
const BTH_ACK_REQ: u32 = 0x8000_0000;
/// BECN (IBA 9.2): in the top byte of the destination QP word, which RoCEv2's ICRC masks.
const BTH_BECN: u32 = 0x4000_0000;
/// The CRC-32 of the masked LRH: 8 bytes of 0xff precede the IP header in the ICRC.
const ICRC_MASKED_LRH: [u8; 8] = [0xff; 8];
/// A field masked out of the ICRC is replaced by all ones.
const ICRC_MASK: u8 = 0xff;
const IPV4_ADDR_LEN: usize = 4;
const GID_LEN: usize = 16;

/// Byte offsets of the header fields rox reads or masks (RFC 791, RFC 8200, RFC 768, IBA 9.2).
mod field {
    pub const V4_TOS: usize = 1;
    pub const V4_TOTAL_LEN: usize = 2;
    pub const V4_TTL: usize = 8;
    pub const V4_PROTOCOL: usize = 9;
    pub const V4_CHECKSUM: usize = 10;
    pub const V4_SRC: usize = 12;
    pub const V4_DST: usize = 16;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const V6_VERSION_CLASS_FLOW: usize = 0;
    pub const V6_PAYLOAD_LEN: usize = 4;
    pub const V6_NEXT_HEADER: usize = 6;
    pub const V6_HOP_LIMIT: usize = 7;
    pub const V6_SRC: usize = 8;
    pub const V6_DST: usize = 24;
    pub const UDP_DST_PORT: usize = 2;
    pub const UDP_LEN: usize = 4;
    pub const UDP_CHECKSUM: usize = 6;
    pub const BTH_RESV8A: usize = 4;
}

/// Base transport header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    pub solicited: bool,
    pub pkey: u16,
    pub dest_qpn: Qpn,
    pub ack_req: bool,
    pub psn: Psn,
}

/// RDMA extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: Key,
    pub dma_len: u32,
}

/// FLUSH extended transport header: placement type (PLT, bits 3..0: `FLUSH_TYPE_*`) and
/// selectivity level (SEL, bits 5..4: `FLUSH_LEVEL_*`); the other bits are reserved (sent 0,
/// ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feth {
    pub placement_type: u8,
    pub selectivity_level: u8,
}

const FETH_PLT_MASK: u32 = 0xf;
const FETH_SEL_SHIFT: u32 = 4;
const FETH_SEL_MASK: u32 = 0x3;

impl Feth {
    fn encode(self) -> u32 {
        (u32::from(self.placement_type) & FETH_PLT_MASK)
            | ((u32::from(self.selectivity_level) & FETH_SEL_MASK) << FETH_SEL_SHIFT)
    }

    fn decode(word: u32) -> Feth {
        Feth {
            placement_type: (word & FETH_PLT_MASK) as u8,
            selectivity_level: ((word >> FETH_SEL_SHIFT) & FETH_SEL_MASK) as u8,
        }
    }
}

/// Atomic extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: Key,
    pub swap_add: u64,
    pub compare: u64,
}

/// Datagram extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deth {
    pub qkey: u32,
    pub src_qpn: Qpn,
}

/// ACK extended transport header syndrome, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syndrome {
    Ack,
    /// Receiver not ready; the 5-bit RNR timer code.
    RnrNak(u8),
    Nak(NakCode),
}

/// NAK codes of the AETH (IBA table 44).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

const AETH_SYNDROME_ACK: u8 = 0x00;
const AETH_SYNDROME_RNR: u8 = 0x20;
const AETH_SYNDROME_NAK: u8 = 0x60;
const AETH_SYNDROME_KIND_MASK: u8 = 0x60;
const AETH_SYNDROME_VALUE_MASK: u8 = 0x1f;
/// ACK credit field value meaning "no end-to-end credit information" (rox does not use credits).
const AETH_NO_CREDIT: u8 = 0x1f;

impl Syndrome {
    pub fn encode(self) -> u8 {
        match self {
            Syndrome::Ack => AETH_SYNDROME_ACK | AETH_NO_CREDIT,
            Syndrome::RnrNak(timer) => AETH_SYNDROME_RNR | (timer & AETH_SYNDROME_VALUE_MASK),
            Syndrome::Nak(code) => AETH_SYNDROME_NAK | code as u8,
        }
    }

    pub fn decode(byte: u8) -> Option<Syndrome> {
        let value = byte & AETH_SYNDROME_VALUE_MASK;
        match byte & AETH_SYNDROME_KIND_MASK {
            AETH_SYNDROME_ACK if byte & 0x80 == 0 => Some(Syndrome::Ack),
            AETH_SYNDROME_RNR if byte & 0x80 == 0 => Some(Syndrome::RnrNak(value)),
            AETH_SYNDROME_NAK if byte & 0x80 == 0 => Some(Syndrome::Nak(match value {
                0 => NakCode::PsnSequenceError,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessError,
                3 => NakCode::RemoteOperationalError,
                4 => NakCode::InvalidRdRequest,
                _ => return None,
            })),
            _ => None,
        }
    }
}

/// ACK extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: Syndrome,
    pub msn: Msn,
}

/// Everything a packet carries besides the IP/UDP header and the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    pub bth: Bth,
    pub feth: Option<Feth>,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub atomic_eth: Option<AtomicEth>,
    pub atomic_ack: Option<u64>,
    pub imm: Option<u32>,
    /// The R_Key a SEND with invalidate names.
    pub ieth: Option<Key>,
    pub deth: Option<Deth>,
    /// XRC requests: the number of the XRC SRQ the target delivers into (24 bits).
    pub xrceth: Option<u32>,
}

impl Headers {
    pub fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            feth: None,
            reth: None,
            aeth: None,
            atomic_eth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            deth: None,
            xrceth: None,
        }
    }
}

/// IP-level addressing of a packet to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpInfo {
    pub sgid: Gid,
    pub dgid: Gid,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub src_port: u16,
}

/// The ECN bits (RFC 3168) of a RoCEv2 packet's IP header: the low 2 bits of the IPv4 TOS
/// or of the IPv6 traffic class.
pub fn ecn_of(ip_header: &[u8]) -> u8 {
    let ecn = if is_ipv6(ip_header) {
        // The traffic class spans the low nibble of byte 0 and the high nibble of byte 1.
        ip_header.get(1).map_or(0, |b| b >> 4)
    } else {
        ip_header.get(field::V4_TOS).copied().unwrap_or(0)
    };
    ecn & super::cc::ECN_MASK
}

/// True if `packet` starts with an IPv6 header (else IPv4).
pub fn is_ipv6(packet: &[u8]) -> bool {
    packet.first().map(|b| b >> IP_VERSION_SHIFT) == Some(IPV6_VERSION)
}

/// The UDP source port of a QP's flow.
pub fn flow_source_port(qpn: Qpn) -> u16 {
    ROCE_SOURCE_PORT_BASE | (qpn.get() as u16 & ROCE_SOURCE_PORT_MASK)
}

/// The IPv4 address of a v4-mapped GID (`::ffff:a.b.c.d`).
pub fn gid_ipv4(gid: &Gid) -> Option<[u8; 4]> {
    const V4_MAPPED_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    if gid[..12] == V4_MAPPED_PREFIX {
        Some([gid[12], gid[13], gid[14], gid[15]])
    } else {
        None
    }
}

/// The v4-mapped GID of an IPv4 address.
pub fn ipv4_gid(addr: [u8; 4]) -> Gid {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&addr);
    gid
}
