//! Building and parsing RoCEv2 IP packets: IP/UDP encapsulation, the BTH and its extension
//! headers in the order [`OpcodeInfo`] gives, pad, ICRC and checksums.

use super::icrc::{compute_icrc, icrc_matches, rxe_flush_icrc, FlushIcrc};
use super::pool::{self, Packet};
use super::*;

/// Reads big-endian fields one after the other (inlined: a call per field cost more than
/// the field).
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    #[inline(always)]
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let v = self.bytes[self.at..self.at + N]
            .try_into()
            .expect("length checked by the caller");
        self.at += N;
        v
    }
    #[inline(always)]
    fn u8(&mut self) -> u8 {
        u8::from_be_bytes(self.take())
    }
    #[inline(always)]
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    #[inline(always)]
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    #[inline(always)]
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

/// Writes a packet's headers one after the other into its buffer (big-endian fields).
struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    #[inline(always)]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    #[inline(always)]
    fn push(&mut self, v: u8) {
        self.extend_from_slice(&[v]);
    }
}

impl Extend<u8> for Writer<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
        bytes.into_iter().for_each(|b| self.push(b));
    }
}

#[inline(always)]
fn put_u16(buf: &mut Writer, v: u16) {
    buf.extend_from_slice(&v.to_be_bytes());
}
#[inline(always)]
fn put_u32(buf: &mut Writer, v: u32) {
    buf.extend_from_slice(&v.to_be_bytes());
}
#[inline(always)]
fn put_u64(buf: &mut Writer, v: u64) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// The IPv4 header checksum of `header` (0 when `header` carries a correct one).
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let words = header.chunks_exact(2);
    // An IP header is whole 32-bit words; an odd byte would count as a word padded with zero.
    let odd = words.remainder().first().map_or(0, |&b| u32::from(b) << 8);
    let mut sum: u32 = words
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>()
        + odd;
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

/// Appends the BTH of a packet whose payload has `pad` pad bytes (built whole, then stored
/// with one copy).
fn put_bth(buf: &mut Writer, b: &Bth, pad: usize) {
    let is_cnp = b.opcode == opcode::CNP;
    // A CNP's flags are all clear (A17.9.3: no migration state to carry).
    let mig = if is_cnp { 0 } else { BTH_MIG };
    let flags = if b.solicited { BTH_SE } else { 0 }
        | mig
        | ((pad as u8 & BTH_PAD_MASK) << BTH_PAD_SHIFT)
        | BTH_TVER;
    let pkey = b.pkey.to_be_bytes();
    // A CNP carries BECN: the flow it names went through a point of congestion. The bit is
    // in the byte the ICRC masks.
    let becn = if is_cnp { BTH_BECN } else { 0 };
    // from_wire: a number wider than its field must not spill into the neighbouring bits.
    let qpn = (Qpn::from_wire(b.dest_qpn.get()).get() | becn).to_be_bytes();
    let psn =
        (Psn::from_wire(b.psn.get()).get() | if b.ack_req { BTH_ACK_REQ } else { 0 }).to_be_bytes();
    buf.extend_from_slice(&[
        b.opcode, flags, pkey[0], pkey[1], qpn[0], qpn[1], qpn[2], qpn[3], psn[0], psn[1], psn[2],
        psn[3],
    ]);
}

/// Builds a complete RoCEv2 IP packet with a valid ICRC (IBA's).
pub fn build_packet(ip: &IpInfo, hdr: &Headers, payload: &[u8]) -> Vec<u8> {
    build_packet_with(ip, hdr, payload, FlushIcrc::Iba)
}

/// [`build_packet`] with the ICRC of a FLUSH request computed as `flush_icrc` says.
pub fn build_packet_with(
    ip: &IpInfo,
    hdr: &Headers,
    payload: &[u8],
    flush_icrc: FlushIcrc,
) -> Vec<u8> {
    let filled = build_packet_filled(ip, hdr, payload.len(), flush_icrc, |out| {
        out.copy_from_slice(payload);
        Ok::<(), std::convert::Infallible>(())
    });
    match filled {
        Ok(packet) => packet.into_vec(),
        Err(never) => match never {},
    }
}

/// [`build_packet_with`] whose `payload_len` payload bytes `fill` writes in place, straight
/// into the packet (a requester gathers them from guest memory there: no payload buffer of
/// its own and no second copy). `fill` must write every byte of its slice: the buffer is a
/// recycled one ([`super::recycle`]) or one a port lent ([`pool`]: a cable's transmit slot),
/// never zeroed first. If `fill` fails, no packet is built and its error returned.
pub fn build_packet_filled<E>(
    ip: &IpInfo,
    hdr: &Headers,
    payload_len: usize,
    flush_icrc: FlushIcrc,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Packet, E> {
    let info = opcode_info(hdr.bth.opcode).expect("engine builds only known opcodes");
    let pad = (4 - payload_len % 4) % 4;
    let v4 = gid_ipv4(&ip.dgid).zip(gid_ipv4(&ip.sgid));
    let ip_len = if v4.is_some() {
        IPV4_HEADER_LEN
    } else {
        IPV6_HEADER_LEN
    };
    let udp_len = UDP_HEADER_LEN + info.header_len() + payload_len + pad + ICRC_LEN;
    let mut buf = pool::buffer(ip_len + udp_len);
    let mut w = Writer {
        buf: &mut buf,
        at: 0,
    };
    put_ip_udp(&mut w, ip, v4, ip_len + udp_len);
    put_bth(&mut w, &hdr.bth, pad);
    put_extension_headers(&mut w, hdr, &info);
    let payload_at = w.at;
    // The buffer is recycled, not zeroed: a header shorter than its opcode's layout would send
    // stale bytes, so a mismatch is a bug that must stop here in every build.
    assert_eq!(payload_at, ip_len + UDP_HEADER_LEN + info.header_len());
    let payload_end = payload_at + payload_len;
    if let Err(e) = fill(&mut buf[payload_at..payload_end]) {
        buf.recycle();
        return Err(e);
    }
    buf[payload_end..payload_end + pad].fill(0);
    let rxe_flush = hdr.bth.opcode == opcode::RC_FLUSH && flush_icrc == FlushIcrc::Rxe;
    put_icrc(&mut buf, ip, ip_len, rxe_flush);
    Ok(buf)
}

/// The IP header (with its IPv4 checksum) and the UDP header of a packet of `total_len`
/// bytes; `v4`: the IPv4 destination and source, None for IPv6. Each header is built whole
/// and stored with one copy.
fn put_ip_udp(w: &mut Writer, ip: &IpInfo, v4: Option<([u8; 4], [u8; 4])>, total_len: usize) {
    let ip_len = if v4.is_some() {
        IPV4_HEADER_LEN
    } else {
        IPV6_HEADER_LEN
    };
    let udp_len = total_len - ip_len;
    if let Some((dst, src)) = v4 {
        let len = (total_len as u16).to_be_bytes();
        let df = IPV4_DONT_FRAGMENT.to_be_bytes();
        // Identification 0 (unused with DF), checksum 0 until computed below.
        let mut h: [u8; IPV4_HEADER_LEN] = [
            IPV4_VERSION_IHL,
            ip.traffic_class,
            len[0],
            len[1],
            0,
            0,
            df[0],
            df[1],
            ip.hop_limit,
            IP_PROTO_UDP,
            0,
            0,
            src[0],
            src[1],
            src[2],
            src[3],
            dst[0],
            dst[1],
            dst[2],
            dst[3],
        ];
        let csum = ipv4_header_checksum(&h).to_be_bytes();
        h[field::V4_CHECKSUM..field::V4_CHECKSUM + 2].copy_from_slice(&csum);
        w.extend_from_slice(&h);
    } else {
        put_u32(
            w,
            (u32::from(IPV6_VERSION) << 28)
                | (u32::from(ip.traffic_class) << 20)
                | (ip.flow_label & 0xfffff),
        );
        put_u16(w, udp_len as u16);
        w.push(IP_PROTO_UDP);
        w.push(ip.hop_limit);
        w.extend_from_slice(&ip.sgid);
        w.extend_from_slice(&ip.dgid);
    }
    let (sport, dport, len) = (
        ip.src_port.to_be_bytes(),
        ROCE_V2_UDP_PORT.to_be_bytes(),
        (udp_len as u16).to_be_bytes(),
    );
    // UDP checksum: 0 (none) over IPv4, filled in at the end for IPv6.
    w.extend_from_slice(&[sport[0], sport[1], dport[0], dport[1], len[0], len[1], 0, 0]);
}

/// The headers after the BTH, in the order `info` gives.
fn put_extension_headers(w: &mut Writer, hdr: &Headers, info: &OpcodeInfo) {
    xrceth::put(w, hdr, info);
    if info.deth {
        let d = hdr.deth.expect("DETH required by opcode");
        put_u32(w, d.qkey);
        put_u32(w, Qpn::from_wire(d.src_qpn.get()).get());
    }
    if info.feth {
        put_u32(w, hdr.feth.expect("FETH required by opcode").encode());
    }
    if info.reth {
        let r = hdr.reth.expect("RETH required by opcode");
        put_u64(w, r.va);
        put_u32(w, r.rkey.get());
        put_u32(w, r.dma_len);
    }
    if info.atomic_eth {
        let a = hdr.atomic_eth.expect("AtomicETH required by opcode");
        put_u64(w, a.va);
        put_u32(w, a.rkey.get());
        put_u64(w, a.swap_add);
        put_u64(w, a.compare);
    }
    if info.aeth {
        let a = hdr.aeth.expect("AETH required by opcode");
        put_u32(
            w,
            (u32::from(a.syndrome.encode()) << 24) | Msn::from_wire(a.msn.get()).get(),
        );
    }
    if info.atomic_ack_eth {
        put_u64(w, hdr.atomic_ack.expect("AtomicAckETH required by opcode"));
    }
    if info.immdt {
        put_u32(w, hdr.imm.expect("ImmDt required by opcode"));
    }
    if info.ieth {
        put_u32(w, hdr.ieth.expect("IETH required by opcode").get());
    }
}

/// Ends a built packet: its ICRC (rdma_rxe's FLUSH one if `rxe_flush`) in its last 4 bytes
/// and, over IPv6, the UDP checksum, which covers the ICRC.
fn put_icrc(buf: &mut [u8], ip: &IpInfo, ip_len: usize, rxe_flush: bool) {
    let icrc_at = buf.len() - ICRC_LEN;
    let icrc = if rxe_flush {
        rxe_flush_icrc(&buf[..icrc_at], ip_len)
    } else {
        compute_icrc(&buf[..icrc_at], ip_len)
    };
    buf[icrc_at..].copy_from_slice(&icrc.to_le_bytes());
    if ip_len == IPV6_HEADER_LEN {
        let csum = udp6_checksum(&ip.sgid, &ip.dgid, &buf[ip_len..]);
        let at = ip_len + field::UDP_CHECKSUM;
        buf[at..at + 2].copy_from_slice(&csum.to_be_bytes());
    }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The IP header of a RoCEv2 packet: its length, source and destination GIDs and the total
/// length it claims.
fn parse_ip(packet: &[u8]) -> Result<(usize, Gid, Gid, usize), ParseError> {
    let version = packet.first().ok_or(ParseError::Malformed)? >> IP_VERSION_SHIFT;
    match version {
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
            Ok((
                IPV4_HEADER_LEN,
                ipv4_gid(addr(field::V4_SRC)),
                ipv4_gid(addr(field::V4_DST)),
                usize::from(be16(packet, field::V4_TOTAL_LEN)),
            ))
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
            Ok((
                IPV6_HEADER_LEN,
                src,
                dst,
                IPV6_HEADER_LEN + usize::from(be16(packet, field::V6_PAYLOAD_LEN)),
            ))
        }
        _ => Err(ParseError::NotRoce),
    }
}

/// What the IP layer of a received RoCEv2 packet says, as whoever read it first found it:
/// the port's frame check, or [`parse_packet`] for a packet without a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpView {
    /// 20 (IPv4) or 40 (IPv6).
    pub header_len: usize,
    pub sgid: Gid,
    pub dgid: Gid,
    /// The port already proved the packet's IBA ICRC right ([`IcrcFold::proves`], over the
    /// very bytes handed on): [`parse_transport`] does not hash it again. Set only by the
    /// port's frame check (port/frame.rs); not public, so no one outside the crate can
    /// build a view that skips the check.
    pub(crate) icrc_checked: bool,
}

/// Parses and validates a received RoCEv2 IP packet (lengths, opcode, pad, ICRC).
pub fn parse_packet(packet: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let (header_len, sgid, dgid, total_len) = parse_ip(packet)?;
    if total_len != packet.len() {
        return Err(ParseError::Malformed);
    }
    let ip = IpView {
        header_len,
        sgid,
        dgid,
        icrc_checked: false,
    };
    parse_transport(packet, ip)
}

/// Parses and validates the rest of a RoCEv2 IP packet whose IP header `ip` describes
/// (already checked, and the packet exactly as long as the header claims): UDP, the transport
/// headers, pad and ICRC.
pub fn parse_transport(packet: &[u8], ip: IpView) -> Result<Parsed<'_>, ParseError> {
    let IpView {
        header_len: ip_len,
        sgid,
        dgid,
        icrc_checked,
    } = ip;
    if packet.len() < ip_len + UDP_HEADER_LEN + BTH_LEN + ICRC_LEN {
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
    if t.len() < hlen + pad + ICRC_LEN || t.len() % 4 != 0 {
        return Err(ParseError::Malformed);
    }
    let icrc_at = packet.len() - ICRC_LEN;
    let wire_icrc = u32::from_le_bytes(packet[icrc_at..].try_into().unwrap());
    if !icrc_checked && !icrc_matches(&packet[..icrc_at], ip_len, wire_icrc) {
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
    if info.xrceth {
        hdr.xrceth = Some(xrceth::decode(r.u32()));
    }
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

#[cfg(test)]
mod tests {
    use super::super::recycle;
    use super::*;

    fn flush_headers() -> Headers {
        let mut hdr = Headers::new(Bth {
            opcode: opcode::RC_FLUSH,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: Qpn::new(0x11).unwrap(),
            ack_req: true,
            psn: Psn::new(0x123456).unwrap(),
        });
        hdr.feth = Some(Feth {
            placement_type: 1,
            selectivity_level: 0,
        });
        hdr.reth = Some(Reth {
            va: 0x7f00_0000_1000,
            rkey: Key::from_raw(0x1234_5601),
            dma_len: 4096,
        });
        hdr
    }

    fn ip(v6: bool) -> IpInfo {
        let gid = |last| {
            if v6 {
                let mut g = [0u8; 16];
                g[0] = 0xfd;
                g[15] = last;
                g
            } else {
                ipv4_gid([10, 50, 0, last])
            }
        };
        IpInfo {
            sgid: gid(1),
            dgid: gid(2),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            src_port: 0xc011,
        }
    }

    /// rdma_rxe's ICRC of a FLUSH, step by step as rxe_icrc.c with rxe_opcode.c's RC_FLUSH
    /// entry computes it: CRC-32 over the masked LRH, the masked IP/UDP/BTH, the headers after
    /// the BTH (opcode length 32 - 12), then the "payload" from offset 0 (no payload offset):
    /// paylen - 4 bytes.
    fn rxe_steps(packet: &[u8], ip_len: usize) -> u32 {
        let transport = &packet[ip_len + UDP_HEADER_LEN..];
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        let mut pseudo = packet[..ip_len + UDP_HEADER_LEN + BTH_LEN].to_vec();
        if ip_len == IPV4_HEADER_LEN {
            pseudo[1] = 0xff; // TOS
            pseudo[8] = 0xff; // TTL
            pseudo[10..12].fill(0xff); // header checksum
        } else {
            pseudo[0] |= 0x0f; // traffic class and flow label
            pseudo[1..4].fill(0xff);
            pseudo[7] = 0xff; // hop limit
        }
        pseudo[ip_len + 6..ip_len + 8].fill(0xff); // UDP checksum
        pseudo[ip_len + UDP_HEADER_LEN + 4] = 0xff; // BTH resv8a
        h.update(&pseudo);
        let opcode_len = BTH_LEN + FETH_LEN + RETH_LEN;
        h.update(&transport[BTH_LEN..opcode_len]);
        h.update(&transport[..transport.len() - ICRC_LEN]);
        h.finalize()
    }

    /// A packet built over a recycled buffer full of another packet's bytes is byte for byte
    /// the packet built over a fresh one: every byte is written (headers, payload, pad, ICRC).
    #[test]
    fn a_packet_built_over_a_dirty_recycled_buffer_is_the_same_packet() {
        // Every extension header present: each opcode writes the ones its layout has.
        let mut hdr = flush_headers();
        hdr.deth = Some(Deth {
            qkey: 0x1122_3344,
            src_qpn: Qpn::new(0x55).unwrap(),
        });
        hdr.xrceth = Some(0x00ab_cdef);
        hdr.atomic_eth = Some(AtomicEth {
            va: 0x7f00_0000_2000,
            rkey: Key::from_raw(0x2345_6702),
            swap_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
        });
        hdr.aeth = Some(Aeth {
            syndrome: Syndrome::Ack,
            msn: Msn::new(0x33).unwrap(),
        });
        hdr.atomic_ack = Some(0x2122_2324_2526_2728);
        hdr.imm = Some(0x3132_3334);
        hdr.ieth = Some(Key::from_raw(0x4142_4344));
        let ops: Vec<u8> = (0..=u8::MAX)
            .filter(|&op| opcode_info(op).is_some())
            .collect();
        assert!(ops.len() > 40, "{} opcodes", ops.len());
        for op in ops {
            hdr.bth.opcode = op;
            for v6 in [false, true] {
                for len in [1021usize, 1024] {
                    let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                    let fresh = build_packet(&ip(v6), &hdr, &payload);
                    for _ in 0..4 {
                        recycle(vec![0xa5; 9000]);
                    }
                    let reused = build_packet(&ip(v6), &hdr, &payload);
                    assert_eq!(reused, fresh, "opcode {op:#04x}, v6 {v6}, {len} B");
                }
            }
        }
        hdr.bth.opcode = opcode::RC_WRITE_ONLY;
        let payload: Vec<u8> = (0..4095).map(|i| (i * 7) as u8).collect();
        let built = build_packet(&ip(true), &hdr, &payload);
        assert_eq!(parse_packet(&built).expect("parses").payload, &payload[..]);
        let refused = build_packet_filled(&ip(false), &hdr, 2048, FlushIcrc::Iba, |_| Err(()));
        assert_eq!(refused, Err(()), "a failed fill builds nothing");
    }

    #[test]
    fn flush_icrc_follows_iba_or_rxe_and_either_is_accepted() {
        for v6 in [false, true] {
            let ip = ip(v6);
            let ip_len = if v6 { IPV6_HEADER_LEN } else { IPV4_HEADER_LEN };
            let iba = build_packet_with(&ip, &flush_headers(), &[], FlushIcrc::Iba);
            let rxe = build_packet_with(&ip, &flush_headers(), &[], FlushIcrc::Rxe);
            let body = iba.len() - ICRC_LEN;
            // The same frame but for the ICRC (and IPv6's UDP checksum, which covers it).
            assert_eq!(iba[..ip_len], rxe[..ip_len]);
            assert_eq!(iba[ip_len + 8..body], rxe[ip_len + 8..body]);
            let icrc = |p: &[u8]| u32::from_le_bytes(p[body..].try_into().unwrap());
            assert_eq!(icrc(&iba), compute_icrc(&iba[..body], ip_len));
            assert_eq!(icrc(&rxe), rxe_steps(&rxe, ip_len), "v6 {v6}");
            assert_ne!(icrc(&iba), icrc(&rxe));
            for p in [&iba, &rxe] {
                let parsed = parse_packet(p).expect("either ICRC is accepted");
                assert_eq!(parsed.hdr.reth, flush_headers().reth);
            }
        }
    }

    #[test]
    fn rxe_style_icrc_is_refused_on_everything_but_flush() {
        let mut hdr = flush_headers();
        hdr.bth.opcode = opcode::RC_READ_REQUEST;
        hdr.feth = None;
        let ip = ip(false);
        let mut packet = build_packet_with(&ip, &hdr, &[], FlushIcrc::Rxe);
        let body = packet.len() - ICRC_LEN;
        let rxe = rxe_flush_icrc(&packet[..body], IPV4_HEADER_LEN);
        packet[body..].copy_from_slice(&rxe.to_le_bytes());
        assert_eq!(parse_packet(&packet).unwrap_err(), ParseError::BadIcrc);
        // A FLUSH with a damaged byte fails both ICRCs.
        let mut flush = build_packet_with(&ip, &flush_headers(), &[], FlushIcrc::Rxe);
        flush[IPV4_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN + 6] ^= 1;
        assert_eq!(parse_packet(&flush).unwrap_err(), ParseError::BadIcrc);
    }
}
