//! RoCEv2 wire format: header layouts, ICRC as rdma_rxe computes it, corruption detection.

mod roce_common;
use roce_common::roce::wire::{self, opcode as op, *};
use roce_common::*;
use rox_nic::testkit::frames::{headers_for_opcode, ExtensionValues};

fn ip(v6: bool) -> IpInfo {
    let (sgid, dgid) = if v6 {
        (gid_v6(1), gid_v6(2))
    } else {
        (gid_v4(1), gid_v4(2))
    };
    IpInfo {
        sgid,
        dgid,
        traffic_class: 0x12,
        hop_limit: 33,
        flow_label: 0xabcde,
        src_port: flow_source_port(Qpn::new(0x11).unwrap()),
    }
}

/// Headers of `opcode` with full-width values in every field it carries, so a field the
/// encoder or parser truncates or misplaces shows.
fn headers_for(opcode: u8) -> Headers {
    let bth = Bth {
        opcode,
        solicited: true,
        pkey: DEFAULT_PKEY,
        dest_qpn: Qpn::new(0xabcdef).unwrap(),
        ack_req: true,
        psn: Psn::new(0x123456).unwrap(),
    };
    let values = ExtensionValues {
        xrceth: 0x00ab_cdef,
        feth: Feth {
            placement_type: 0x3,
            selectivity_level: 0x1,
        },
        reth: Reth {
            va: 0x1122_3344_5566_7788,
            rkey: Key::from_raw(0x99aa_bbcc),
            dma_len: 4242,
        },
        aeth: Aeth {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: Msn::new(0x00fe_dcba).unwrap(),
        },
        atomic_eth: AtomicEth {
            va: 0x1000,
            rkey: Key::from_raw(7),
            swap_add: 0xdead,
            compare: 0xbeef,
        },
        atomic_ack: 0x0123_4567_89ab_cdef,
        imm: 0xcafe_f00d,
        ieth: Key::from_raw(0x1357_9bdf),
        deth: Deth {
            qkey: 0x8001_0000,
            src_qpn: Qpn::new(0x000042).unwrap(),
        },
    };
    headers_for_opcode(bth, &values)
}

fn all_opcodes() -> Vec<u8> {
    (0..=u8::MAX)
        .filter(|&o| opcode_info(o).is_some())
        .collect()
}

#[test]
fn icrc_seed_is_the_crc_of_the_masked_lrh() {
    // rdma_rxe starts from the raw CRC state 0xdebb20e3: CRC-32 (init all ones) over 8 bytes of
    // 0xff. crc32fast returns the finalised (inverted) value.
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    assert_eq!(!h.finalize(), 0xdebb_20e3);
}

#[test]
fn opcode_table_covers_rc_uc_ud() {
    let ops = all_opcodes();
    assert_eq!(
        ops.iter()
            .filter(|&&o| o & op::CLASS_MASK == op::CLASS_RC)
            .count(),
        25
    );
    assert_eq!(
        ops.iter()
            .filter(|&&o| o & op::CLASS_MASK == op::CLASS_UC)
            .count(),
        12
    );
    assert_eq!(
        ops.iter()
            .filter(|&&o| o & op::CLASS_MASK == op::CLASS_UD)
            .count(),
        2
    );
    assert_eq!(
        opcode_info(op::RC_WRITE_ONLY_IMM).unwrap().header_len(),
        12 + 16 + 4
    );
    assert_eq!(
        opcode_info(op::RC_ATOMIC_ACKNOWLEDGE).unwrap().header_len(),
        12 + 4 + 8
    );
    assert_eq!(
        opcode_info(op::RC_COMPARE_SWAP).unwrap().header_len(),
        12 + 28
    );
    assert_eq!(
        opcode_info(op::UD_SEND_ONLY_IMM).unwrap().header_len(),
        12 + 8 + 4
    );
    assert_eq!(opcode_info(0x15), None, "RC RESYNC is not implemented");
    // Memory placement extensions: FLUSH is BTH, FETH, RETH; ATOMIC WRITE is BTH, RETH + data.
    assert_eq!(opcode_info(op::RC_FLUSH).unwrap().header_len(), 12 + 4 + 16);
    assert_eq!(
        opcode_info(op::RC_ATOMIC_WRITE).unwrap().header_len(),
        12 + 16
    );
    assert_eq!(opcode_info(op::CLASS_UC | op::RC_FLUSH), None);
    assert_eq!(opcode_info(op::CLASS_UC | op::RC_ATOMIC_WRITE), None);
    // SEND with invalidate: BTH, IETH (RC only).
    assert_eq!(
        opcode_info(op::RC_SEND_ONLY_INV).unwrap().header_len(),
        12 + 4
    );
    assert_eq!(
        opcode_info(op::RC_SEND_LAST_INV).unwrap().header_len(),
        12 + 4
    );
    assert_eq!(opcode_info(op::CLASS_UC | op::RC_SEND_ONLY_INV), None);
}

#[test]
fn feth_bits_are_the_placement_type_and_selectivity_level() {
    let mut h = headers_for(op::RC_FLUSH);
    h.feth = Some(Feth {
        placement_type: FLUSH_TYPE_GLOBAL | FLUSH_TYPE_PERSISTENT,
        selectivity_level: FLUSH_LEVEL_MR,
    });
    let ip = rox_nic::testkit::frames::peer_ip(ipv4_gid([10, 0, 0, 1]), ipv4_gid([10, 0, 0, 2]));
    let packet = build_packet(&ip, &h, &[]);
    // IPv4 (20) + UDP (8) + BTH (12): the FETH word, big-endian: SEL in bits 5..4, PLT 3..0.
    assert_eq!(&packet[40..44], &[0, 0, 0, 0x13]);
    let parsed = parse_packet(&packet).unwrap();
    assert_eq!(parsed.hdr.feth, h.feth);
    assert_eq!(parsed.hdr.reth, h.reth);
    assert!(parsed.payload.is_empty());
}

#[test]
fn every_opcode_round_trips_over_ipv4_and_ipv6() {
    for v6 in [false, true] {
        for opcode in all_opcodes() {
            for len in [0usize, 1, 3, 4, 257] {
                let payload = pattern(u32::from(opcode), len);
                let hdr = headers_for(opcode);
                let packet = build_packet(&ip(v6), &hdr, &payload);
                assert_eq!(packet.len() % 4, 0, "padded to 4 bytes");
                let p = parse_packet(&packet)
                    .unwrap_or_else(|e| panic!("opcode {opcode:#x} v6={v6}: {e}"));
                assert_eq!(p.hdr, hdr);
                assert_eq!(p.payload, &payload[..]);
                assert_eq!((p.sgid, p.dgid), (ip(v6).sgid, ip(v6).dgid));
                assert_eq!(
                    p.ip_header.len(),
                    if v6 { IPV6_HEADER_LEN } else { IPV4_HEADER_LEN }
                );
            }
        }
    }
}

#[test]
fn ipv4_and_udp_headers_are_well_formed() {
    let packet = build_packet(&ip(false), &headers_for(op::RC_SEND_ONLY), b"hello");
    assert_eq!(packet[0], 0x45);
    assert_eq!(
        u16::from_be_bytes([packet[2], packet[3]]) as usize,
        packet.len()
    );
    assert_eq!(packet[9], 17, "UDP");
    // The IPv4 header checksum verifies: the one's complement sum over the header is 0xffff.
    let sum: u32 = packet[..20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff);
    assert_eq!(
        u16::from_be_bytes([packet[22], packet[23]]),
        ROCE_V2_UDP_PORT
    );
    assert_eq!(
        u16::from_be_bytes([packet[24], packet[25]]) as usize,
        packet.len() - 20
    );
    assert_eq!(&packet[12..16], &[10, 0, 0, 1]);
    assert_eq!(&packet[16..20], &[10, 0, 0, 2]);
}

#[test]
fn icrc_ignores_the_masked_fields_only() {
    for v6 in [false, true] {
        let packet = build_packet(&ip(v6), &headers_for(op::RC_WRITE_FIRST), &pattern(1, 64));
        let ip_len = if v6 { IPV6_HEADER_LEN } else { IPV4_HEADER_LEN };
        // Variant fields a router may change: TTL/hop limit, TOS/traffic class, flow label,
        // checksums, and the BTH reserved byte.
        let masked: Vec<usize> = if v6 {
            vec![1, 2, 3, 7, ip_len + 6, ip_len + 7, ip_len + 8 + 4]
        } else {
            vec![1, 8, 10, 11, ip_len + 6, ip_len + 7, ip_len + 8 + 4]
        };
        for &at in &masked {
            let mut p = packet.clone();
            p[at] ^= 0x5a;
            assert!(
                parse_packet(&p).is_ok(),
                "byte {at} is masked from the ICRC (v6={v6})"
            );
        }
        // Any other single-byte change in the transport part is caught.
        for at in ip_len + UDP_HEADER_LEN..packet.len() {
            if masked.contains(&at) {
                continue;
            }
            let mut p = packet.clone();
            p[at] ^= 0x01;
            assert!(
                parse_packet(&p).is_err(),
                "flip at byte {at} (v6={v6}) must be rejected"
            );
        }
        // And addresses are covered.
        let mut p = packet.clone();
        p[if v6 { 8 } else { 12 }] ^= 1;
        assert_eq!(parse_packet(&p).unwrap_err(), ParseError::BadIcrc);
    }
}

#[test]
fn truncated_and_foreign_packets_are_rejected() {
    let packet = build_packet(&ip(false), &headers_for(op::RC_SEND_ONLY), b"abcd");
    for len in 0..packet.len() {
        assert!(parse_packet(&packet[..len]).is_err(), "truncated to {len}");
    }
    let mut other_port = packet.clone();
    other_port[22] ^= 0xff;
    assert_eq!(parse_packet(&other_port).unwrap_err(), ParseError::NotRoce);
    let mut unknown = packet.clone();
    unknown[28] = 0xff;
    assert_eq!(
        parse_packet(&unknown).unwrap_err(),
        ParseError::UnknownOpcode(0xff)
    );
}

#[test]
fn psn_arithmetic_wraps_at_24_bits() {
    let psn = Psn::from_wire;
    assert_eq!(psn(0xff_ffff).next(), psn(0));
    assert!(psn(0).after(psn(0xff_ffff)));
    assert!(psn(0xff_fff0).before(psn(5)));
    assert_eq!(psn(7).diff(psn(7)), 0);

    assert_eq!(wire::gid_ipv4(&gid_v4(9)), Some([10, 0, 0, 9]));
    assert_eq!(wire::gid_ipv4(&gid_v6(9)), None);
}

/// Known-answer packets and ICRCs (tests/data/known_icrcs.txt): rox's build of each must be
/// exactly the bytes pinned there. The same file is the input of the independent check,
/// tests/lib/test_icrc_known_answers.py, which recomputes every ICRC with
/// tests/host/icrc-check.py (IBA annex A17 written in Python apart from rox-nic), so the pins
/// are not only what rox printed. A deliberate change: the failure prints the new line.
#[test]
fn icrc_known_answers() {
    let mut versions = Vec::new();
    for line in KNOWN_ICRCS
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [version, opcode, icrc, hex] = fields[..] else {
            panic!("known_icrcs.txt: not 'ip opcode icrc packet': {line:?}");
        };
        let v6 = match version {
            "ipv4" => false,
            "ipv6" => true,
            _ => panic!("known_icrcs.txt: {version:?} is neither ipv4 nor ipv6"),
        };
        let hex_value = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let opcode = u8::try_from(hex_value(opcode)).unwrap();
        let packet = build_packet(&ip(v6), &headers_for(opcode), b"rox known answer");
        let built: String = packet.iter().map(|b| format!("{b:02x}")).collect();
        let built_icrc = u32::from_le_bytes(packet[packet.len() - 4..].try_into().unwrap());
        let now = format!("{version} {opcode:#04x} {built_icrc:#010x} {built}");
        assert_eq!(
            built, hex,
            "{version} {opcode:#04x}: the packet changed; now:\n{now}"
        );
        assert_eq!(built_icrc, hex_value(icrc), "{version} {opcode:#04x}: ICRC");
        versions.push(v6);
    }
    assert!(
        versions.contains(&false) && versions.contains(&true),
        "known_icrcs.txt must pin IPv4 and IPv6 packets"
    );
}

/// One line per packet: `ipv4|ipv6 OPCODE ICRC PACKET` (hex; the packet from its IP header
/// through its ICRC, stored little-endian at its end).
const KNOWN_ICRCS: &str = include_str!("data/known_icrcs.txt");
