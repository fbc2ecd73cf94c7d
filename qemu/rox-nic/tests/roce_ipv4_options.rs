//! RoCEv2 over IPv4 with IP options (IHL > 5): dropped and counted, whatever ICRC it carries.
//!
//! IBA annex A17's ICRC covers the IP header with named fields masked (TOS, TTL, header
//! checksum); it names no rule for options, and options such as record route or timestamp
//! are rewritten by routers in flight (RFC 791), so no ICRC over them is invariant. rdma_rxe
//! hashes 20 bytes of IP header and the next 8 as the UDP header (rxe_icrc.c), which with
//! options are option bytes: there is no interoperable ICRC for such a packet, and neither
//! rox nor rxe sends one. rox's port drops it as malformed (`STAT_PORT_DROP_MALFORMED`),
//! and the engine's parser refuses it too (docs/transport.md). These tests build the packet
//! both ways a sender could have summed it and check it never reaches a QP, while the same
//! packet without options is taken (the control that the drop is the options').

mod roce_common;
use roce_common::roce::wire::{self, opcode as op, *};
use roce_common::*;
use rox_nic::port::frame::{roce_header, sort_frame, Arrival};
use rox_uapi::admin::STAT_PORT_DROP_MALFORMED;

const MAC_A: [u8; 6] = [0x52, 0x54, 0x00, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x52, 0x54, 0x00, 0, 0, 0xb];
const MAX_FRAME: usize = 4096 + 14;
const IPV4_HEADER: usize = 20;
/// Four option bytes: three NOPs and End of Options (RFC 791), the smallest IHL 6 header.
const NOP_OPTIONS: [u8; 4] = [1, 1, 1, 0];

/// A valid RC SEND_ONLY from 10.0.0.1 to 10.0.0.2 (IPv4, no options).
fn plain_send() -> Vec<u8> {
    let ip = IpInfo {
        sgid: gid_v4(1),
        dgid: gid_v4(2),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        src_port: flow_source_port(Qpn::new(0x11).unwrap()),
    };
    let hdr = Headers::new(Bth {
        opcode: op::RC_SEND_ONLY,
        solicited: false,
        pkey: DEFAULT_PKEY,
        dest_qpn: Qpn::new(0x12).unwrap(),
        ack_req: true,
        psn: Psn::new(7).unwrap(),
    });
    build_packet(&ip, &hdr, &[0x5a; 64])
}

/// How a sender could have summed the ICRC of a packet with options.
#[derive(Clone, Copy, Debug)]
enum OptionsIcrc {
    /// The annex's masks, the options hashed as part of the IP header.
    OptionsCovered,
    /// rdma_rxe's: 20 bytes of IP header, then 8 bytes hashed as "UDP" with bytes 6..8
    /// masked (here option bytes and the UDP header's first half).
    RxeFixedOffsets,
}

/// `plain` with `options` inserted after its 20-byte IPv4 header: IHL, total length and header
/// checksum made right, the ICRC summed as `icrc` says.
fn with_options(plain: &[u8], options: &[u8], icrc: OptionsIcrc) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let header_len = IPV4_HEADER + options.len();
    let mut p = Vec::with_capacity(plain.len() + options.len());
    p.extend_from_slice(&plain[..IPV4_HEADER]);
    p.extend_from_slice(options);
    p.extend_from_slice(&plain[IPV4_HEADER..]);
    p[0] = 0x40 | (header_len / 4) as u8;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[10..12].fill(0);
    let checksum = ipv4_header_checksum(&p[..header_len]);
    p[10..12].copy_from_slice(&checksum.to_be_bytes());
    let icrc_at = p.len() - 4;
    let fixed = match icrc {
        OptionsIcrc::OptionsCovered => header_len,
        OptionsIcrc::RxeFixedOffsets => IPV4_HEADER,
    };
    let mut masked = p[..fixed + UDP_HEADER_LEN + BTH_LEN].to_vec();
    for at in [1, 8, 10, 11] {
        masked[at] = 0xff; // TOS, TTL, header checksum
    }
    masked[fixed + 6..fixed + 8].fill(0xff); // what is taken for the UDP checksum
    masked[fixed + UDP_HEADER_LEN + 4] = 0xff; // BTH resv8a
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[0xff; 8]); // the masked LRH
    hasher.update(&masked);
    hasher.update(&p[masked.len()..icrc_at]);
    let sum = hasher.finalize();
    p[icrc_at..].copy_from_slice(&sum.to_le_bytes());
    p
}

fn arrival(ip_packet: &[u8]) -> Arrival {
    let mut frame = roce_header(&MAC_B, &MAC_A, ip_packet).to_vec();
    frame.extend_from_slice(ip_packet);
    sort_frame(&frame, &MAC_B, MAX_FRAME, |g| *g == gid_v4(2))
}

#[test]
fn the_packet_without_options_is_taken_by_the_port_and_the_parser() {
    let plain = plain_send();
    assert!(matches!(arrival(&plain), Arrival::Roce(..)));
    let parsed = parse_packet(&plain).expect("a valid packet parses");
    assert_eq!(parsed.hdr.bth.opcode, op::RC_SEND_ONLY);
    assert_eq!(parsed.payload, &[0x5a; 64][..]);
}

#[test]
fn an_ipv4_rocev2_packet_with_options_is_dropped_as_malformed_whatever_its_icrc() {
    let plain = plain_send();
    // Record route (type 7, length 7, pointer 4, one empty slot) and End of Options.
    let record_route = [7, 7, 4, 0, 0, 0, 0, 0];
    for options in [&NOP_OPTIONS[..], &record_route[..]] {
        for icrc in [OptionsIcrc::OptionsCovered, OptionsIcrc::RxeFixedOffsets] {
            let p = with_options(&plain, options, icrc);
            assert_eq!(ipv4_header_checksum(&p[..IPV4_HEADER + options.len()]), 0);
            assert_eq!(
                arrival(&p),
                Arrival::Drop(STAT_PORT_DROP_MALFORMED),
                "{} option bytes, ICRC {icrc:?}: the port must drop and count it",
                options.len()
            );
            assert_eq!(
                parse_packet(&p),
                Err(ParseError::NotRoce),
                "{} option bytes, ICRC {icrc:?}: the engine's parser must refuse it",
                options.len()
            );
        }
    }
}

#[test]
fn removing_the_options_again_gives_back_a_packet_the_port_takes() {
    // The options packet differs from a valid one only by its options: cut them out, fix the
    // header as a sender without options would, and the port takes it.
    let plain = plain_send();
    let p = with_options(&plain, &NOP_OPTIONS, OptionsIcrc::OptionsCovered);
    let mut cut = p[..IPV4_HEADER].to_vec();
    cut.extend_from_slice(&p[IPV4_HEADER + NOP_OPTIONS.len()..]);
    cut[0] = 0x45;
    let total = cut.len() as u16;
    cut[2..4].copy_from_slice(&total.to_be_bytes());
    cut[10..12].fill(0);
    let checksum = ipv4_header_checksum(&cut[..IPV4_HEADER]);
    cut[10..12].copy_from_slice(&checksum.to_be_bytes());
    let icrc_at = cut.len() - 4;
    let icrc = wire::compute_icrc(&cut[..icrc_at], IPV4_HEADER);
    cut[icrc_at..].copy_from_slice(&icrc.to_le_bytes());
    assert_eq!(cut, plain);
    assert!(matches!(arrival(&cut), Arrival::Roce(..)));
}
