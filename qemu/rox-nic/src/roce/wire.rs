//! RoCEv2 wire format: IP/UDP encapsulation, BTH and extension headers, ICRC.
//!
//! A packet here is a complete IP packet: IPv4 (for v4-mapped GIDs) or IPv6 header, UDP header
//! (destination port 4791), BTH, extension headers, payload, pad to 4 bytes, ICRC. The ICRC is
//! computed as the IBA RoCEv2 annex (A17.3.3) and Linux rdma_rxe do: CRC-32 over 8 bytes of 0xff
//! (the masked LRH), the IP header with its variant fields (IPv4 TOS, TTL, header checksum;
//! IPv6 traffic class, flow label, hop limit) set to all ones, the UDP header with its checksum
//! set to all ones, the BTH with its reserved byte (resv8a) set to all ones, then the rest of the
//! headers, payload and pad; transmitted as a little-endian 32-bit value.

use super::{Gid, Key, Msn, Psn, Qpn};

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

/// Reads big-endian fields one after the other.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let v = self.bytes[self.at..self.at + N]
            .try_into()
            .expect("length checked by the caller");
        self.at += N;
        v
    }
    fn u8(&mut self) -> u8 {
        u8::from_be_bytes(self.take())
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

/// IB transport opcodes (BTH opcode byte) that rox uses.
pub mod opcode {
    pub const RC_SEND_FIRST: u8 = 0x00;
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    pub const RC_SEND_LAST: u8 = 0x02;
    pub const RC_SEND_LAST_IMM: u8 = 0x03;
    pub const RC_SEND_ONLY: u8 = 0x04;
    pub const RC_SEND_ONLY_IMM: u8 = 0x05;
    pub const RC_WRITE_FIRST: u8 = 0x06;
    pub const RC_WRITE_MIDDLE: u8 = 0x07;
    pub const RC_WRITE_LAST: u8 = 0x08;
    pub const RC_WRITE_LAST_IMM: u8 = 0x09;
    pub const RC_WRITE_ONLY: u8 = 0x0a;
    pub const RC_WRITE_ONLY_IMM: u8 = 0x0b;
    pub const RC_READ_REQUEST: u8 = 0x0c;
    pub const RC_READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const RC_READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const RC_READ_RESPONSE_LAST: u8 = 0x0f;
    pub const RC_READ_RESPONSE_ONLY: u8 = 0x10;
    pub const RC_ACKNOWLEDGE: u8 = 0x11;
    pub const RC_ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const RC_COMPARE_SWAP: u8 = 0x13;
    pub const RC_FETCH_ADD: u8 = 0x14;
    /// RC SEND with invalidate (IETH: the R_Key the responder invalidates).
    pub const RC_SEND_LAST_INV: u8 = 0x16;
    pub const RC_SEND_ONLY_INV: u8 = 0x17;
    /// IBA memory placement extensions (RC only): FLUSH (BTH, FETH, RETH) and ATOMIC WRITE
    /// (BTH, RETH, 8 bytes of payload); both answered by a zero-length READ RESPONSE ONLY.
    pub const RC_FLUSH: u8 = 0x1c;
    pub const RC_ATOMIC_WRITE: u8 = 0x1d;
    /// Opcode-class offsets: the low 5 bits are the operation, the high 3 the transport.
    pub const CLASS_RC: u8 = 0x00;
    pub const CLASS_UC: u8 = 0x20;
    pub const CLASS_UD: u8 = 0x60;
    pub const CLASS_MASK: u8 = 0xe0;
    pub const OP_MASK: u8 = 0x1f;
    pub const UD_SEND_ONLY: u8 = CLASS_UD | RC_SEND_ONLY;
    pub const UD_SEND_ONLY_IMM: u8 = CLASS_UD | RC_SEND_ONLY_IMM;
}

/// Which headers follow the BTH for an opcode, and what the opcode means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub feth: bool,
    pub ieth: bool,
    pub reth: bool,
    pub aeth: bool,
    pub atomic_eth: bool,
    pub atomic_ack_eth: bool,
    pub immdt: bool,
    pub deth: bool,
    /// First (or only) packet of a message.
    pub first: bool,
    /// Last (or only) packet of a message.
    pub last: bool,
}

/// Header layout of a (known) opcode; `None` for opcodes rox does not implement (dropped).
pub fn opcode_info(op: u8) -> Option<OpcodeInfo> {
    use opcode::*;
    let class = op & CLASS_MASK;
    let base = op & OP_MASK;
    let allowed = match class {
        CLASS_RC => {
            base <= RC_FETCH_ADD
                || matches!(
                    base,
                    RC_SEND_LAST_INV | RC_SEND_ONLY_INV | RC_FLUSH | RC_ATOMIC_WRITE
                )
        }
        CLASS_UC => base <= RC_WRITE_ONLY_IMM,
        CLASS_UD => base == RC_SEND_ONLY || base == RC_SEND_ONLY_IMM,
        _ => false,
    };
    if !allowed {
        return None;
    }
    let none = OpcodeInfo {
        feth: false,
        ieth: false,
        reth: false,
        aeth: false,
        atomic_eth: false,
        atomic_ack_eth: false,
        immdt: false,
        deth: class == CLASS_UD,
        first: false,
        last: false,
    };
    Some(match base {
        RC_SEND_FIRST | RC_READ_RESPONSE_FIRST => OpcodeInfo {
            first: true,
            aeth: base == RC_READ_RESPONSE_FIRST,
            ..none
        },
        RC_SEND_MIDDLE | RC_WRITE_MIDDLE | RC_READ_RESPONSE_MIDDLE => none,
        RC_SEND_LAST => OpcodeInfo { last: true, ..none },
        RC_SEND_LAST_IMM => OpcodeInfo {
            last: true,
            immdt: true,
            ..none
        },
        RC_SEND_ONLY => OpcodeInfo {
            first: true,
            last: true,
            ..none
        },
        RC_SEND_ONLY_IMM => OpcodeInfo {
            first: true,
            last: true,
            immdt: true,
            ..none
        },
        RC_WRITE_FIRST => OpcodeInfo {
            first: true,
            reth: true,
            ..none
        },
        RC_WRITE_LAST => OpcodeInfo { last: true, ..none },
        RC_WRITE_LAST_IMM => OpcodeInfo {
            last: true,
            immdt: true,
            ..none
        },
        RC_WRITE_ONLY => OpcodeInfo {
            first: true,
            last: true,
            reth: true,
            ..none
        },
        RC_WRITE_ONLY_IMM => OpcodeInfo {
            first: true,
            last: true,
            reth: true,
            immdt: true,
            ..none
        },
        RC_READ_REQUEST => OpcodeInfo {
            first: true,
            last: true,
            reth: true,
            ..none
        },
        RC_READ_RESPONSE_LAST => OpcodeInfo {
            last: true,
            aeth: true,
            ..none
        },
        RC_READ_RESPONSE_ONLY | RC_ACKNOWLEDGE => OpcodeInfo {
            first: true,
            last: true,
            aeth: true,
            ..none
        },
        RC_ATOMIC_ACKNOWLEDGE => OpcodeInfo {
            first: true,
            last: true,
            aeth: true,
            atomic_ack_eth: true,
            ..none
        },
        RC_COMPARE_SWAP | RC_FETCH_ADD => OpcodeInfo {
            first: true,
            last: true,
            atomic_eth: true,
            ..none
        },
        RC_SEND_LAST_INV => OpcodeInfo {
            last: true,
            ieth: true,
            ..none
        },
        RC_SEND_ONLY_INV => OpcodeInfo {
            first: true,
            last: true,
            ieth: true,
            ..none
        },
        RC_FLUSH => OpcodeInfo {
            first: true,
            last: true,
            feth: true,
            reth: true,
            ..none
        },
        RC_ATOMIC_WRITE => OpcodeInfo {
            first: true,
            last: true,
            reth: true,
            ..none
        },
        _ => return None,
    })
}

impl OpcodeInfo {
    /// Bytes of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN
            + if self.deth { DETH_LEN } else { 0 }
            + if self.feth { FETH_LEN } else { 0 }
            + if self.reth { RETH_LEN } else { 0 }
            + if self.atomic_eth { ATOMIC_ETH_LEN } else { 0 }
            + if self.aeth { AETH_LEN } else { 0 }
            + if self.atomic_ack_eth {
                ATOMIC_ACK_ETH_LEN
            } else {
                0
            }
            + if self.immdt { IMMDT_LEN } else { 0 }
            + if self.ieth { IETH_LEN } else { 0 }
    }
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

fn put_u16(buf: &mut Vec<u8>, v: u16) {
    buf.extend_from_slice(&v.to_be_bytes());
}
fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_be_bytes());
}
fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// The IPv4 header checksum of `header` (0 when `header` carries a correct one).
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// UDP checksum over the IPv6 pseudo header (mandatory for UDP over IPv6).
fn udp6_checksum(src: &Gid, dst: &Gid, udp: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    for w in src.chunks(2).chain(dst.chunks(2)) {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    sum += udp.len() as u64 + u64::from(IP_PROTO_UDP);
    let mut chunks = udp.chunks_exact(2);
    for w in &mut chunks {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

/// Builds a complete RoCEv2 IP packet with a valid ICRC.
pub fn build_packet(ip: &IpInfo, hdr: &Headers, payload: &[u8]) -> Vec<u8> {
    let info = opcode_info(hdr.bth.opcode).expect("engine builds only known opcodes");
    let pad = (4 - payload.len() % 4) % 4;
    let v4 = gid_ipv4(&ip.dgid).zip(gid_ipv4(&ip.sgid));
    let ip_len = if v4.is_some() {
        IPV4_HEADER_LEN
    } else {
        IPV6_HEADER_LEN
    };
    let udp_len = UDP_HEADER_LEN + info.header_len() + payload.len() + pad + ICRC_LEN;
    let mut buf = Vec::with_capacity(ip_len + udp_len);
    if let Some((dst, src)) = v4 {
        buf.push(IPV4_VERSION_IHL);
        buf.push(ip.traffic_class);
        put_u16(&mut buf, (ip_len + udp_len) as u16);
        put_u16(&mut buf, 0); // identification: unused with DF
        put_u16(&mut buf, IPV4_DONT_FRAGMENT);
        buf.push(ip.hop_limit);
        buf.push(IP_PROTO_UDP);
        put_u16(&mut buf, 0);
        buf.extend_from_slice(&src);
        buf.extend_from_slice(&dst);
        let csum = ipv4_header_checksum(&buf[..IPV4_HEADER_LEN]);
        buf[field::V4_CHECKSUM..field::V4_CHECKSUM + 2].copy_from_slice(&csum.to_be_bytes());
    } else {
        put_u32(
            &mut buf,
            (u32::from(IPV6_VERSION) << 28)
                | (u32::from(ip.traffic_class) << 20)
                | (ip.flow_label & 0xfffff),
        );
        put_u16(&mut buf, udp_len as u16);
        buf.push(IP_PROTO_UDP);
        buf.push(ip.hop_limit);
        buf.extend_from_slice(&ip.sgid);
        buf.extend_from_slice(&ip.dgid);
    }
    put_u16(&mut buf, ip.src_port);
    put_u16(&mut buf, ROCE_V2_UDP_PORT);
    put_u16(&mut buf, udp_len as u16);
    put_u16(&mut buf, 0); // UDP checksum: 0 (none) over IPv4, filled below for IPv6
    let b = &hdr.bth;
    buf.push(b.opcode);
    buf.push(
        if b.solicited { BTH_SE } else { 0 }
            | BTH_MIG
            | ((pad as u8 & BTH_PAD_MASK) << BTH_PAD_SHIFT)
            | BTH_TVER,
    );
    put_u16(&mut buf, b.pkey);
    // from_wire: a number wider than its field must not spill into the neighbouring bits.
    put_u32(&mut buf, Qpn::from_wire(b.dest_qpn.get()).get());
    put_u32(
        &mut buf,
        Psn::from_wire(b.psn.get()).get() | if b.ack_req { BTH_ACK_REQ } else { 0 },
    );
    if info.deth {
        let d = hdr.deth.expect("DETH required by opcode");
        put_u32(&mut buf, d.qkey);
        put_u32(&mut buf, Qpn::from_wire(d.src_qpn.get()).get());
    }
    if info.feth {
        put_u32(
            &mut buf,
            hdr.feth.expect("FETH required by opcode").encode(),
        );
    }
    if info.reth {
        let r = hdr.reth.expect("RETH required by opcode");
        put_u64(&mut buf, r.va);
        put_u32(&mut buf, r.rkey.get());
        put_u32(&mut buf, r.dma_len);
    }
    if info.atomic_eth {
        let a = hdr.atomic_eth.expect("AtomicETH required by opcode");
        put_u64(&mut buf, a.va);
        put_u32(&mut buf, a.rkey.get());
        put_u64(&mut buf, a.swap_add);
        put_u64(&mut buf, a.compare);
    }
    if info.aeth {
        let a = hdr.aeth.expect("AETH required by opcode");
        put_u32(
            &mut buf,
            (u32::from(a.syndrome.encode()) << 24) | Msn::from_wire(a.msn.get()).get(),
        );
    }
    if info.atomic_ack_eth {
        put_u64(
            &mut buf,
            hdr.atomic_ack.expect("AtomicAckETH required by opcode"),
        );
    }
    if info.immdt {
        put_u32(&mut buf, hdr.imm.expect("ImmDt required by opcode"));
    }
    if info.ieth {
        put_u32(&mut buf, hdr.ieth.expect("IETH required by opcode").get());
    }
    buf.extend_from_slice(payload);
    buf.resize(buf.len() + pad, 0);
    let icrc = compute_icrc(&buf, ip_len);
    buf.extend_from_slice(&icrc.to_le_bytes());
    if v4.is_none() {
        let csum = udp6_checksum(&ip.sgid, &ip.dgid, &buf[ip_len..]);
        let at = ip_len + field::UDP_CHECKSUM;
        buf[at..at + 2].copy_from_slice(&csum.to_be_bytes());
    }
    buf
}

/// ICRC of `packet` (IP header .. end of pad, without the ICRC itself); `ip_len` is the IP
/// header length (20 or 40).
pub fn compute_icrc(packet: &[u8], ip_len: usize) -> u32 {
    let fixed_len = ip_len + UDP_HEADER_LEN + BTH_LEN;
    let mut masked = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN];
    let masked = &mut masked[..fixed_len];
    masked.copy_from_slice(&packet[..fixed_len]);
    if ip_len == IPV4_HEADER_LEN {
        masked[field::V4_TOS] = ICRC_MASK;
        masked[field::V4_TTL] = ICRC_MASK;
        masked[field::V4_CHECKSUM..field::V4_CHECKSUM + 2].fill(ICRC_MASK);
    } else {
        // Everything but the 4-bit version: traffic class and flow label.
        const VERSION_BITS: u8 = 0xf0;
        let word = field::V6_VERSION_CLASS_FLOW;
        masked[word] |= !VERSION_BITS;
        masked[word + 1..word + 4].fill(ICRC_MASK);
        masked[field::V6_HOP_LIMIT] = ICRC_MASK;
    }
    let udp_checksum = ip_len + field::UDP_CHECKSUM;
    masked[udp_checksum..udp_checksum + 2].fill(ICRC_MASK);
    masked[ip_len + UDP_HEADER_LEN + field::BTH_RESV8A] = ICRC_MASK;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&ICRC_MASKED_LRH);
    hasher.update(masked);
    hasher.update(&packet[fixed_len..]);
    hasher.finalize()
}

/// Why a received packet was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("truncated or inconsistent lengths")]
    Malformed,
    #[error("not IPv4/IPv6 UDP to port 4791")]
    NotRoce,
    #[error("unsupported BTH opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("ICRC mismatch")]
    BadIcrc,
}

/// A parsed, ICRC-checked received packet.
#[derive(Clone, Copy, Debug)]
pub struct Parsed<'a> {
    pub sgid: Gid,
    pub dgid: Gid,
    /// The IP header (20 bytes for IPv4, 40 for IPv6): UD receives place it in the GRH area.
    pub ip_header: &'a [u8],
    pub hdr: Headers,
    pub info: OpcodeInfo,
    pub payload: &'a [u8],
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Parses and validates a received RoCEv2 IP packet (lengths, opcode, pad, ICRC).
pub fn parse_packet(packet: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let version = packet.first().ok_or(ParseError::Malformed)? >> IP_VERSION_SHIFT;
    let (ip_len, sgid, dgid, total_len) = match version {
        IPV4_VERSION => {
            if packet.len() < IPV4_HEADER_LEN {
                return Err(ParseError::Malformed);
            }
            if packet[0] != IPV4_VERSION_IHL || packet[field::V4_PROTOCOL] != IP_PROTO_UDP {
                return Err(ParseError::NotRoce);
            }
            let addr = |at: usize| -> [u8; IPV4_ADDR_LEN] {
                packet[at..at + IPV4_ADDR_LEN]
                    .try_into()
                    .expect("length checked")
            };
            (
                IPV4_HEADER_LEN,
                ipv4_gid(addr(field::V4_SRC)),
                ipv4_gid(addr(field::V4_DST)),
                usize::from(be16(packet, field::V4_TOTAL_LEN)),
            )
        }
        IPV6_VERSION => {
            if packet.len() < IPV6_HEADER_LEN {
                return Err(ParseError::Malformed);
            }
            if packet[field::V6_NEXT_HEADER] != IP_PROTO_UDP {
                return Err(ParseError::NotRoce);
            }
            let gid =
                |at: usize| -> Gid { packet[at..at + GID_LEN].try_into().expect("length checked") };
            let (src, dst) = (gid(field::V6_SRC), gid(field::V6_DST));
            (
                IPV6_HEADER_LEN,
                src,
                dst,
                IPV6_HEADER_LEN + usize::from(be16(packet, field::V6_PAYLOAD_LEN)),
            )
        }
        _ => return Err(ParseError::NotRoce),
    };
    if total_len != packet.len() || packet.len() < ip_len + UDP_HEADER_LEN + BTH_LEN + ICRC_LEN {
        return Err(ParseError::Malformed);
    }
    let udp = &packet[ip_len..];
    if be16(udp, field::UDP_DST_PORT) != ROCE_V2_UDP_PORT {
        return Err(ParseError::NotRoce);
    }
    if usize::from(be16(udp, field::UDP_LEN)) != udp.len() {
        return Err(ParseError::Malformed);
    }
    let t = &udp[UDP_HEADER_LEN..];
    let op = t[0];
    let info = opcode_info(op).ok_or(ParseError::UnknownOpcode(op))?;
    // Another transport header version is not a packet rox (or rxe) understands.
    if t[1] & BTH_TVER_MASK != BTH_TVER {
        return Err(ParseError::Malformed);
    }
    let pad = usize::from((t[1] >> BTH_PAD_SHIFT) & BTH_PAD_MASK);
    let hlen = info.header_len();
    // Senders pad the payload to whole 4-byte words (IBA 9.2); any other length is malformed.
    if t.len() < hlen + pad + ICRC_LEN || !t.len().is_multiple_of(4) {
        return Err(ParseError::Malformed);
    }
    let icrc_at = packet.len() - ICRC_LEN;
    let wire_icrc = u32::from_le_bytes(packet[icrc_at..].try_into().unwrap());
    if compute_icrc(&packet[..icrc_at], ip_len) != wire_icrc {
        return Err(ParseError::BadIcrc);
    }
    let mut r = Reader { bytes: t, at: 0 };
    let (opcode, flags, pkey, qpn_word, psn_word) = (r.u8(), r.u8(), r.u16(), r.u32(), r.u32());
    let bth = Bth {
        opcode,
        solicited: flags & BTH_SE != 0,
        pkey,
        dest_qpn: Qpn::from_wire(qpn_word),
        ack_req: psn_word & BTH_ACK_REQ != 0,
        psn: Psn::from_wire(psn_word),
    };
    let mut hdr = Headers::new(bth);
    if info.deth {
        hdr.deth = Some(Deth {
            qkey: r.u32(),
            src_qpn: Qpn::from_wire(r.u32()),
        });
    }
    if info.feth {
        hdr.feth = Some(Feth::decode(r.u32()));
    }
    if info.reth {
        hdr.reth = Some(Reth {
            va: r.u64(),
            rkey: Key::from_raw(r.u32()),
            dma_len: r.u32(),
        });
    }
    if info.atomic_eth {
        hdr.atomic_eth = Some(AtomicEth {
            va: r.u64(),
            rkey: Key::from_raw(r.u32()),
            swap_add: r.u64(),
            compare: r.u64(),
        });
    }
    if info.aeth {
        let syndrome = Syndrome::decode(r.u8()).ok_or(ParseError::Malformed)?;
        let msn = Msn::from_wire(u32::from_be_bytes([0, r.u8(), r.u8(), r.u8()]));
        hdr.aeth = Some(Aeth { syndrome, msn });
    }
    if info.atomic_ack_eth {
        hdr.atomic_ack = Some(r.u64());
    }
    if info.immdt {
        hdr.imm = Some(r.u32());
    }
    if info.ieth {
        hdr.ieth = Some(Key::from_raw(r.u32()));
    }
    let at = r.at;
    debug_assert_eq!(at, hlen);
    let payload_end = t.len() - ICRC_LEN - pad;
    Ok(Parsed {
        sgid,
        dgid,
        ip_header: &packet[..ip_len],
        hdr,
        info,
        payload: &t[at..payload_end],
    })
}
