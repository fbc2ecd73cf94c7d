//! Target `wire`: RoCEv2 IP packets into [`roce::wire::parse_packet`].
//!
//! Invariants: (1) the parser's ICRC verdict agrees with an independent ICRC written here from
//! the IBA annex A17 rules (its own CRC-32 table and masks); (2) every packet the parser accepts
//! re-encodes through [`build_packet`] from the parsed fields to the same bytes, except the
//! fields listed in [`canonical`] that the parser leaves to the port (IPv4 identification,
//! flags, checksums: `port::frame::sort_frame` checks them) or that IBA says a receiver ignores.
//! A field the parser drops silently, or a packet it accepts that rox would answer
//! differently, shows up as a byte that differs.

use crate::roce::wire::{
    build_packet, opcode, opcode_info, parse_packet, Aeth, AtomicEth, Bth, Deth, Feth, Headers,
    IpInfo, NakCode, ParseError, Reth, Syndrome, BTH_LEN, DEFAULT_PKEY, ICRC_LEN, IPV4_HEADER_LEN,
    IPV6_HEADER_LEN, UDP_HEADER_LEN,
};
use crate::roce::{Key, Msn, Psn, Qpn};
use crate::testkit::frames::{headers_for_opcode, ExtensionValues};

/// Input byte 0 says what the harness fixes before the parser sees bytes 1..: a CRC is a wall
/// coverage guidance does not climb, so with `FIX_LENGTHS` the IP and UDP lengths are made to
/// match and with `FIX_ICRC` the ICRC is made right (by the reference), and the fuzzer is free
/// to explore every header field. Without them it tests the parser's checks themselves.
const FIX_LENGTHS: u8 = 1;
const FIX_ICRC: u8 = 2;

/// The body of the target.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut packet = rest.to_vec();
    if mode & FIX_LENGTHS != 0 {
        fix_lengths(&mut packet);
    }
    if mode & FIX_ICRC != 0 {
        if let Some(icrc) = reference_icrc(&packet) {
            let at = packet.len() - ICRC_LEN;
            packet[at..].copy_from_slice(&icrc.to_le_bytes());
        }
    }
    check_packet(&packet);
}

/// Sets the IPv4 total length or IPv6 payload length and the UDP length to what the packet
/// holds (where they fit in 16 bits).
fn fix_lengths(p: &mut [u8]) {
    let Some(ip) = ip_len(p) else { return };
    let Ok(total) = u16::try_from(p.len()) else {
        return;
    };
    let udp = total - ip as u16;
    if ip == IPV4_HEADER_LEN {
        p[2..4].copy_from_slice(&total.to_be_bytes());
    } else {
        p[4..6].copy_from_slice(&udp.to_be_bytes());
    }
    p[ip + 4..ip + 6].copy_from_slice(&udp.to_be_bytes());
}

/// The invariants for one packet.
pub(crate) fn check_packet(packet: &[u8]) {
    let reference = reference_icrc_ok(packet);
    match parse_packet(packet) {
        Ok(parsed) => {
            assert_eq!(
                reference,
                Some(true),
                "accepted a packet whose ICRC is wrong"
            );
            let rebuilt = rebuild(packet, &parsed);
            assert_eq!(
                reference_icrc_ok(&rebuilt),
                Some(true),
                "build_packet wrote a wrong ICRC"
            );
            assert_eq!(
                canonical(packet),
                canonical(&rebuilt),
                "accepted packet does not re-encode to itself"
            );
        }
        Err(ParseError::BadIcrc) => {
            assert_eq!(
                reference,
                Some(false),
                "rejected a packet whose ICRC is right"
            )
        }
        Err(_) => {}
    }
}

/// IP header length by version nibble, if the packet can hold the fixed headers and an ICRC.
fn ip_len(packet: &[u8]) -> Option<usize> {
    let len = match packet.first()? >> 4 {
        4 => IPV4_HEADER_LEN,
        6 => IPV6_HEADER_LEN,
        _ => return None,
    };
    (packet.len() >= len + UDP_HEADER_LEN + BTH_LEN + ICRC_LEN).then_some(len)
}

/// CRC-32 (IEEE, reflected) from its own table: deliberately not crc32fast.
fn crc32_reference(chunks: &[&[u8]]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &byte in chunks.iter().flat_map(|c| c.iter()) {
        crc = TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The ICRC of `packet` per IBA A17.3.3, or None if it has no room for one.
fn reference_icrc(packet: &[u8]) -> Option<u32> {
    let masked = reference_masked(packet)?;
    Some(crc32_reference(&[&[0xff; 8], &masked]))
}

/// rdma_rxe's ICRC of a FLUSH (which the parser accepts too, docs/interop.md): the IBA input,
/// then the packet from the BTH on again, unmasked.
fn reference_rxe_flush_icrc(packet: &[u8]) -> Option<u32> {
    let masked = reference_masked(packet)?;
    let transport = &packet[ip_len(packet)? + UDP_HEADER_LEN..packet.len() - ICRC_LEN];
    Some(crc32_reference(&[&[0xff; 8], &masked, transport]))
}

/// `packet` without its ICRC and with the fields the ICRC masks set to ones.
fn reference_masked(packet: &[u8]) -> Option<Vec<u8>> {
    let ip = ip_len(packet)?;
    let body = &packet[..packet.len() - ICRC_LEN];
    let mut masked = body.to_vec();
    if ip == IPV4_HEADER_LEN {
        for at in [1, 8, 10, 11] {
            masked[at] = 0xff; // TOS, TTL, header checksum
        }
    } else {
        masked[0] |= 0x0f; // traffic class and flow label, all but the version
        masked[1..4].fill(0xff);
        masked[7] = 0xff; // hop limit
    }
    masked[ip + 6..ip + 8].fill(0xff); // UDP checksum
    masked[ip + UDP_HEADER_LEN + 4] = 0xff; // BTH resv8a
    Some(masked)
}

/// Whether the ICRC at the end of `packet` is right (None: too short to have one).
fn reference_icrc_ok(packet: &[u8]) -> Option<bool> {
    let icrc = reference_icrc(packet)?;
    let at = packet.len() - ICRC_LEN;
    let wire = u32::from_le_bytes(packet[at..].try_into().expect("4 bytes"));
    let flush = packet[ip_len(packet)? + UDP_HEADER_LEN] == opcode::RC_FLUSH;
    Some(wire == icrc || (flush && Some(wire) == reference_rxe_flush_icrc(packet)))
}

/// `build_packet` of what was parsed, with the IP fields the parser does not return (TOS,
/// TTL, flow label, UDP source port) taken from the packet.
fn rebuild(packet: &[u8], parsed: &crate::roce::wire::Parsed) -> Vec<u8> {
    let ip = parsed.ip_header.len();
    let be16 = |at: usize| u16::from_be_bytes([packet[at], packet[at + 1]]);
    let (traffic_class, hop_limit, flow_label) = if ip == IPV4_HEADER_LEN {
        (packet[1], packet[8], 0)
    } else {
        let word = u32::from_be_bytes(packet[..4].try_into().expect("4 bytes"));
        ((word >> 20) as u8, packet[7], word & 0xf_ffff)
    };
    let info = IpInfo {
        sgid: parsed.sgid,
        dgid: parsed.dgid,
        traffic_class,
        hop_limit,
        flow_label,
        src_port: be16(ip),
    };
    build_packet(&info, &parsed.hdr, parsed.payload)
}

/// `packet` with the fields a re-encoding may change set to fixed values, and the ICRC
/// recomputed over the result. Each is a field rox must not act on:
/// - IPv4 identification, flags and header checksum: checked by the port's classify;
/// - the UDP checksum: masked from the ICRC, checked by the port's classify;
/// - the BTH's first reserved byte (resv8a: masked from the ICRC, variant like a TTL);
/// - BTH MigReq (rox has no path migration), the reserved bits after AckReq, the reserved
///   byte of the DETH, the XRCETH's and the FETH's reserved bits (IBA: ignored by the receiver);
/// - the credit count of an ACK's AETH (rox gives and reads no end-to-end credits);
/// - the contents of the pad bytes.
fn canonical(packet: &[u8]) -> Vec<u8> {
    let mut p = packet.to_vec();
    let Some(ip) = ip_len(&p) else { return p };
    if ip == IPV4_HEADER_LEN {
        p[4..8].fill(0);
        p[10..12].fill(0);
    }
    p[ip + 6..ip + 8].fill(0);
    let bth = ip + UDP_HEADER_LEN;
    let op = p[bth];
    p[bth + 1] &= !0x40;
    p[bth + 4] = 0;
    p[bth + 8] &= 0x80;
    if let Some(info) = opcode_info(op) {
        let mut at = bth + BTH_LEN;
        let end = p.len() - ICRC_LEN;
        let mut field = |len: usize, p: &mut Vec<u8>, mask: &dyn Fn(&mut [u8])| {
            if at + len <= end {
                mask(&mut p[at..at + len]);
            }
            at += len;
        };
        if info.xrceth {
            field(4, &mut p, &|x| x[0] = 0);
        }
        if info.deth {
            field(8, &mut p, &|d| d[4] = 0);
        }
        if info.feth {
            field(4, &mut p, &|f| {
                f[..3].fill(0);
                f[3] &= 0x3f;
            });
        }
        if info.reth {
            field(16, &mut p, &|_| {});
        }
        if info.atomic_eth {
            field(28, &mut p, &|_| {});
        }
        if info.aeth {
            field(4, &mut p, &|a| {
                if a[0] & 0x60 == 0 {
                    a[0] &= 0x60;
                }
            });
        }
        let pad = usize::from((p[bth + 1] >> 4) & 3);
        if end >= bth + pad {
            p[end - pad..end].fill(0);
        }
    }
    let icrc = reference_icrc(&p).expect("length checked");
    let at = p.len() - ICRC_LEN;
    p[at..].copy_from_slice(&icrc.to_le_bytes());
    p
}

/// Headers with every field of `op` set (values varied by `seed`).
fn headers_for(op: u8, seed: u32) -> Headers {
    let bth = Bth {
        opcode: op,
        solicited: seed & 1 != 0,
        pkey: DEFAULT_PKEY,
        dest_qpn: Qpn::from_wire(0x11 + seed),
        ack_req: seed & 2 != 0,
        psn: Psn::from_wire(0xff_fff0u32.wrapping_add(seed)),
    };
    let syndrome = match seed % 3 {
        0 => Syndrome::Ack,
        1 => Syndrome::RnrNak(3),
        _ => Syndrome::Nak(NakCode::PsnSequenceError),
    };
    let values = ExtensionValues {
        xrceth: 0x20 + seed,
        feth: Feth {
            placement_type: 1,
            selectivity_level: 1,
        },
        reth: Reth {
            va: 0x1_0000_0000 + u64::from(seed) * 64,
            rkey: Key::from_raw(0x100 + seed),
            dma_len: 64 * seed,
        },
        aeth: Aeth {
            syndrome,
            msn: Msn::from_wire(seed),
        },
        atomic_eth: AtomicEth {
            va: 0x1_0000_0000,
            rkey: Key::from_raw(0x101),
            swap_add: 1,
            compare: 0,
        },
        atomic_ack: u64::from(seed),
        imm: 0xcafe_0000 | seed,
        ieth: Key::from_raw(0x200 + seed),
        deth: Deth {
            qkey: 0x1111,
            src_qpn: Qpn::from_wire(0x12),
        },
    };
    headers_for_opcode(bth, &values)
}

/// A GID: IPv4-mapped 10.0.0.`host`, or fd00::`host`.
fn gid(v6: bool, host: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    if v6 {
        g[0] = 0xfd;
    } else {
        g[10] = 0xff;
        g[11] = 0xff;
        g[12] = 10;
    }
    g[15] = host;
    g
}

/// Every opcode rox knows, over IPv4 and IPv6, with payloads of every pad length.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        for op in (0..=u8::MAX).filter(|&o| opcode_info(o).is_some()) {
            for (seed, len) in [0usize, 1, 2, 3, 64].into_iter().enumerate() {
                let ip = seed_path(v6);
                let payload: Vec<u8> = (0..len as u8).collect();
                let packet = build_packet(&ip, &headers_for(op, seed as u32), &payload);
                out.push([&[FIX_LENGTHS | FIX_ICRC][..], &packet].concat());
            }
        }
    }
    // One of each ACK kind with a credit count, as hardware NICs send them.
    let mut ack = build_packet(
        &seed_path(false),
        &headers_for(opcode::RC_ACKNOWLEDGE, 0),
        &[],
    );
    let aeth = IPV4_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN;
    ack[aeth] = 0x05;
    let icrc = reference_icrc(&ack).expect("fits");
    let at = ack.len() - ICRC_LEN;
    ack[at..].copy_from_slice(&icrc.to_le_bytes());
    out.push([&[0][..], &ack].concat());
    // A CNP as a congested flow's receiver sends it: 16 reserved bytes, marked CE on its way.
    let mut path = seed_path(false);
    path.traffic_class = crate::roce::cc::ECN_CE;
    let cnp = build_packet(
        &path,
        &headers_for(opcode::CNP, 0),
        &[0; opcode::CNP_RESERVED_LEN],
    );
    out.push([&[0][..], &cnp].concat());
    out
}

/// The path of the seeds (IPv6 or IPv4): from the seeds' GID 1 to GID 2.
fn seed_path(v6: bool) -> IpInfo {
    IpInfo {
        sgid: gid(v6, 1),
        dgid: gid(v6, 2),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        src_port: 0xc011,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::wire::FlushIcrc;

    #[test]
    fn reference_icrc_agrees_with_the_encoder_on_every_seed() {
        for s in seeds() {
            assert_eq!(reference_icrc_ok(&s[1..]), Some(true));
            run(&s);
        }
    }

    #[test]
    fn rxe_flush_icrc_is_accepted_by_parser_and_reference_alike() {
        let ip = seed_path(false);
        let hdr = headers_for(opcode::RC_FLUSH, 3);
        let p = crate::roce::wire::build_packet_with(&ip, &hdr, &[], FlushIcrc::Rxe);
        assert_eq!(reference_icrc_ok(&p), Some(true));
        assert!(parse_packet(&p).is_ok());
        check_packet(&p);
        // The same ICRC on a READ request is wrong for both.
        let mut read = build_packet(&ip, &headers_for(opcode::RC_READ_REQUEST, 3), &[]);
        let at = read.len() - ICRC_LEN;
        let rxe = crate::roce::wire::rxe_flush_icrc(&read[..at], IPV4_HEADER_LEN);
        read[at..].copy_from_slice(&rxe.to_le_bytes());
        assert_eq!(reference_icrc_ok(&read), Some(false));
        check_packet(&read);
    }

    #[test]
    fn a_flipped_byte_is_caught_by_both_icrcs() {
        let s = &seeds()[3][1..];
        for at in IPV4_HEADER_LEN + UDP_HEADER_LEN..s.len() {
            let mut p = s.to_vec();
            p[at] ^= 0x10;
            check_packet(&p);
        }
    }
}
