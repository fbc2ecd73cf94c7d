//! Ethernet frames on the port: building the header of a RoCEv2 frame and classifying what
//! arrives (RoCEv2 for this device, for the paired netdev, or dropped with the counter that
//! says why).

use std::ops::Range;

use rox_uapi::admin::{
    STAT_PORT_DROP_MALFORMED, STAT_PORT_DROP_OTHER_MAC, STAT_PORT_DROP_OVERSIZE,
    STAT_PORT_DROP_VLAN,
};

use crate::roce::wire::{
    icrc_front, ipv4_gid, ipv4_header_checksum, IcrcFold, IpView, IPV4_HEADER_LEN, IPV6_HEADER_LEN,
    ROCE_V2_UDP_PORT, UDP_HEADER_LEN,
};
use crate::roce::Gid;
use crate::sys::crc32::Front;

pub type Mac = [u8; 6];
pub const MAC_LEN: usize = 6;
/// Destination MAC, source MAC, ethertype.
pub const ETH_HEADER_LEN: usize = 2 * MAC_LEN + 2;
pub type EthHeader = [u8; ETH_HEADER_LEN];
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// IEEE 802.1Q and 802.1ad tags: rox's port is untagged.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
const ETHERTYPE_AT: usize = 2 * MAC_LEN;
/// The I/G bit: set in group (multicast and broadcast) addresses.
const MAC_GROUP_BIT: u8 = 0x01;
pub const ZERO_MAC: Mac = [0; MAC_LEN];
const IP_PROTO_UDP: u8 = 17;
const IPV4_VERSION: u8 = 4;
const IPV6_VERSION: u8 = 6;
const IP_VERSION_SHIFT: u8 = 4;
const IPV4_IHL_MASK: u8 = 0x0f;
/// IHL counts 32-bit words.
const IPV4_IHL_UNIT: usize = 4;
/// More-fragments flag and fragment offset: a fragment is never a whole RoCEv2 packet.
const IPV4_FRAGMENT_MASK: u16 = 0x3fff;
const IPV4_FRAGMENT_OFFSET_MASK: u16 = 0x1fff;

/// The Ethernet header this port puts in front of a RoCEv2 IP packet.
pub fn roce_header(dmac: &Mac, smac: &Mac, ip_packet: &[u8]) -> EthHeader {
    let ethertype = if ip_packet.first().map(|b| b >> IP_VERSION_SHIFT) == Some(IPV6_VERSION) {
        ETHERTYPE_IPV6
    } else {
        ETHERTYPE_IPV4
    };
    let mut h = [0u8; ETH_HEADER_LEN];
    h[..MAC_LEN].copy_from_slice(dmac);
    h[MAC_LEN..2 * MAC_LEN].copy_from_slice(smac);
    h[ETHERTYPE_AT..].copy_from_slice(&ethertype.to_be_bytes());
    h
}

pub fn is_group_mac(mac: &[u8]) -> bool {
    mac.first().is_some_and(|b| b & MAC_GROUP_BIT != 0)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A frame as the data path takes it: a RoCEv2 packet for this device with what its IP
/// header said (so the transport parses only the rest), for the netdev, or dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The IP packet's bytes in the frame (Ethernet padding excluded) and its IP header.
    Roce(Range<usize>, IpView),
    Netdev,
    /// Dropped; the `STAT_PORT_DROP_*` counter to raise.
    Drop(usize),
}

/// What the IP layer of a frame says.
enum Ip {
    /// Not a RoCEv2 packet for this device (or not IP at all).
    Other,
    /// A UDP packet to port 4791 at `range` (unicast, or to a multicast group the device may
    /// have QPs in), that passed the IP and UDP header checks.
    Roce { range: Range<usize>, ip: IpView },
}

/// Sorts one received frame for a port whose device has MAC `own_mac`, owns the GIDs (its
/// own, and the multicast groups it has QPs attached to) `own_gid` accepts, and whose longest
/// valid frame is `max_frame` bytes (IP MTU + Ethernet header).
pub fn sort_frame(
    frame: &[u8],
    own_mac: &Mac,
    max_frame: usize,
    own_gid: impl Fn(&Gid) -> bool,
) -> Arrival {
    sort_received(frame, None, own_mac, max_frame, own_gid)
}

/// [`sort_frame`] of a frame whose ICRC run the port folded as it copied the frame (`fold`,
/// [`received_icrc_front`]): a RoCEv2 packet that reaches to the frame's end, which the fold
/// proves right, is handed on with its ICRC checked, and is not hashed again. Anything else
/// (no fold, a wrong ICRC, rdma_rxe's FLUSH ICRC, Ethernet padding behind the packet) is
/// checked by the transport as every other frame is, and dropped there if wrong.
pub fn sort_received(
    frame: &[u8],
    fold: Option<IcrcFold>,
    own_mac: &Mac,
    max_frame: usize,
    own_gid: impl Fn(&Gid) -> bool,
) -> Arrival {
    if frame.len() < ETH_HEADER_LEN {
        return Arrival::Drop(STAT_PORT_DROP_MALFORMED);
    }
    if frame.len() > max_frame {
        return Arrival::Drop(STAT_PORT_DROP_OVERSIZE);
    }
    let dst = &frame[..MAC_LEN];
    if !is_group_mac(dst) && dst != own_mac {
        return Arrival::Drop(STAT_PORT_DROP_OTHER_MAC);
    }
    let ethertype = be16(frame, ETHERTYPE_AT);
    let l3 = &frame[ETH_HEADER_LEN..];
    let ip = match ethertype {
        ETHERTYPE_VLAN | ETHERTYPE_QINQ => return Arrival::Drop(STAT_PORT_DROP_VLAN),
        ETHERTYPE_IPV4 => ipv4(l3),
        ETHERTYPE_IPV6 => ipv6(l3),
        _ => Ok(Ip::Other),
    };
    match ip {
        Err(Malformed) => Arrival::Drop(STAT_PORT_DROP_MALFORMED),
        Ok(Ip::Roce { range, mut ip }) if own_gid(&ip.dgid) => {
            let end = range.end + ETH_HEADER_LEN;
            ip.icrc_checked = fold.is_some_and(|f| end == frame.len() && f.proves(ip.header_len));
            Arrival::Roce(range.start + ETH_HEADER_LEN..end, ip)
        }
        Ok(_) => Arrival::Netdev,
    }
}

/// The ICRC runs of RoCEv2 frames, for folds of whole frames (the IP packet behind the
/// Ethernet header).
static ICRC_FRONT_V4: Front = icrc_front(ETH_HEADER_LEN, IPV4_HEADER_LEN);
static ICRC_FRONT_V6: Front = icrc_front(ETH_HEADER_LEN, IPV6_HEADER_LEN);

/// The ICRC fold to make of a received frame whose first bytes are `first` (the Ethernet, IP
/// and UDP headers at least), if they say it is a UDP packet to RoCEv2's port right behind the
/// Ethernet header, over IPv4 (no options) or IPv6: its IP header length and the fold's
/// front. None for anything else, or too few bytes to tell: [`sort_received`] decides from
/// the whole copy whether the fold proves anything.
pub fn received_icrc_front(first: &[u8]) -> Option<(usize, &'static Front)> {
    const V4_FIRST_BYTE: u8 = IPV4_VERSION << IP_VERSION_SHIFT | (IPV4_HEADER_LEN / 4) as u8;
    const V4_PROTOCOL: usize = 9;
    const V6_NEXT_HEADER: usize = 6;
    let ip = first.get(ETH_HEADER_LEN..)?;
    let (ip_len, front) = match be16(first, ETHERTYPE_AT) {
        ETHERTYPE_IPV4
            if ip.first() == Some(&V4_FIRST_BYTE) && ip.get(V4_PROTOCOL) == Some(&IP_PROTO_UDP) =>
        {
            (IPV4_HEADER_LEN, &ICRC_FRONT_V4)
        }
        ETHERTYPE_IPV6
            if ip.first().map(|b| b >> IP_VERSION_SHIFT) == Some(IPV6_VERSION)
                && ip.get(V6_NEXT_HEADER) == Some(&IP_PROTO_UDP) =>
        {
            (IPV6_HEADER_LEN, &ICRC_FRONT_V6)
        }
        _ => return None,
    };
    let port = ip.get(ip_len + 2..ip_len + 4)?;
    (be16(port, 0) == ROCE_V2_UDP_PORT).then_some((ip_len, front))
}

struct Malformed;

/// Checks an IPv4 packet (with Ethernet padding possibly behind it).
fn ipv4(p: &[u8]) -> Result<Ip, Malformed> {
    if p.len() < IPV4_HEADER_LEN || p[0] >> IP_VERSION_SHIFT != IPV4_VERSION {
        return Err(Malformed);
    }
    let header_len = usize::from(p[0] & IPV4_IHL_MASK) * IPV4_IHL_UNIT;
    let total = usize::from(be16(p, 2));
    if header_len < IPV4_HEADER_LEN || total < header_len || total > p.len() {
        return Err(Malformed);
    }
    if !ipv4_header_checksum_ok(&p[..header_len]) {
        return Err(Malformed);
    }
    const PROTOCOL: usize = 9;
    const FLAGS_FRAGMENT: usize = 6;
    const SRC: usize = 12;
    const DST: usize = 16;
    if p[PROTOCOL] != IP_PROTO_UDP {
        return Ok(Ip::Other);
    }
    let dst: [u8; 4] = p[DST..DST + 4].try_into().unwrap();
    let udp = &p[header_len..total];
    let is_fragment = be16(p, FLAGS_FRAGMENT) & IPV4_FRAGMENT_MASK != 0;
    if be16(p, FLAGS_FRAGMENT) & IPV4_FRAGMENT_OFFSET_MASK != 0 {
        // A later fragment: no UDP header to look at; the guest's stack reassembles.
        return Ok(Ip::Other);
    }
    check_udp_header(udp)?;
    if be16(udp, 2) != ROCE_V2_UDP_PORT {
        return Ok(Ip::Other);
    }
    // A RoCEv2 packet: rxe's rules (no options, no fragments, UDP length = IP payload).
    if header_len != IPV4_HEADER_LEN || is_fragment || usize::from(be16(udp, 4)) != udp.len() {
        return Err(Malformed);
    }
    if be16(udp, 6) != 0 && !udp_checksum_ok(&p[SRC..SRC + 4], &dst, udp) {
        return Err(Malformed);
    }
    let src: [u8; 4] = p[SRC..SRC + 4].try_into().unwrap();
    Ok(Ip::Roce {
        range: 0..total,
        ip: IpView {
            header_len: IPV4_HEADER_LEN,
            sgid: ipv4_gid(src),
            dgid: ipv4_gid(dst),
            icrc_checked: false,
        },
    })
}

/// Checks an IPv6 packet (with Ethernet padding possibly behind it).
fn ipv6(p: &[u8]) -> Result<Ip, Malformed> {
    if p.len() < IPV6_HEADER_LEN || p[0] >> IP_VERSION_SHIFT != IPV6_VERSION {
        return Err(Malformed);
    }
    let total = IPV6_HEADER_LEN + usize::from(be16(p, 4));
    if total > p.len() {
        return Err(Malformed);
    }
    const NEXT_HEADER: usize = 6;
    const SRC: usize = 8;
    const DST: usize = 24;
    if p[NEXT_HEADER] != IP_PROTO_UDP {
        // Extension headers are not RoCEv2 (rxe sends none); the guest's stack decides.
        return Ok(Ip::Other);
    }
    let udp = &p[IPV6_HEADER_LEN..total];
    check_udp_header(udp)?;
    let dgid: Gid = p[DST..DST + 16].try_into().unwrap();
    if be16(udp, 2) != ROCE_V2_UDP_PORT {
        return Ok(Ip::Other);
    }
    if usize::from(be16(udp, 4)) != udp.len() {
        return Err(Malformed);
    }
    if be16(udp, 6) != 0 && !udp_checksum_ok(&p[SRC..SRC + 16], &dgid, udp) {
        return Err(Malformed);
    }
    Ok(Ip::Roce {
        range: 0..total,
        ip: IpView {
            header_len: IPV6_HEADER_LEN,
            sgid: p[SRC..SRC + 16].try_into().unwrap(),
            dgid,
            icrc_checked: false,
        },
    })
}

/// Whether the checksum of an IPv4 header (whole 32-bit words: its IHL) holds: its 16-bit
/// words sum to all ones in ones' complement (RFC 1071). Summed a 32-bit word at a time in the
/// CPU's byte order and folded: byte-swapped words sum to the byte-swapped sum, and all ones
/// is its own swap (a word-by-word big-endian sum cost ~80 instructions a frame).
fn ipv4_header_checksum_ok(header: &[u8]) -> bool {
    let word = |w: &[u8]| u64::from(u32::from_ne_bytes(w.try_into().expect("4 bytes")));
    let mut sum: u64 = match header.first_chunk::<IPV4_HEADER_LEN>() {
        // Every RoCEv2 packet's: five words, unrolled.
        Some(h) if header.len() == IPV4_HEADER_LEN => {
            word(&h[..4]) + word(&h[4..8]) + word(&h[8..12]) + word(&h[12..16]) + word(&h[16..])
        }
        _ => {
            let words = header.chunks_exact(4);
            if !words.remainder().is_empty() {
                return ipv4_header_checksum(header) == 0;
            }
            words.map(word).sum()
        }
    };
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// A UDP header that fits and a length field within the IP payload.
fn check_udp_header(udp: &[u8]) -> Result<(), Malformed> {
    if udp.len() < UDP_HEADER_LEN {
        return Err(Malformed);
    }
    let len = usize::from(be16(udp, 4));
    if len < UDP_HEADER_LEN || len > udp.len() {
        return Err(Malformed);
    }
    Ok(())
}

/// Verifies a UDP checksum (RFC 768) over the pseudo header of `src`/`dst` (4 or 16 bytes).
fn udp_checksum_ok(src: &[u8], dst: &[u8], udp: &[u8]) -> bool {
    let mut sum: u64 = udp.len() as u64 + u64::from(IP_PROTO_UDP);
    let mut add = |bytes: &[u8]| {
        let mut words = bytes.chunks_exact(2);
        for w in &mut words {
            sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = words.remainder() {
            sum += u64::from(*last) << 8;
        }
    };
    add(src);
    add(dst);
    add(udp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// Where fault injection may corrupt a frame body that starts at the IP header: after the
/// IP and UDP headers of a RoCEv2 packet (so the ICRC catches it), anywhere otherwise.
pub fn corruptible_from(ethertype: u16, body: &[u8]) -> usize {
    let ip_len = match ethertype {
        ETHERTYPE_IPV4 => IPV4_HEADER_LEN,
        ETHERTYPE_IPV6 => IPV6_HEADER_LEN,
        _ => return 0,
    };
    let is_roce =
        body.len() >= ip_len + UDP_HEADER_LEN && be16(body, ip_len + 2) == ROCE_V2_UDP_PORT;
    if is_roce {
        ip_len + UDP_HEADER_LEN
    } else {
        0
    }
}

pub fn ethertype(header: &EthHeader) -> u16 {
    be16(header, ETHERTYPE_AT)
}

#[cfg(test)]
mod tests;
