//! The XRC extended transport header (IBA 9.3.? "XRCETH", RoCEv2 the same): one 32-bit word
//! right after the BTH of every XRC request (SEND, WRITE, READ, atomics) — 8 reserved bits and
//! the 24-bit number of the XRC SRQ the target QP delivers into. XRC responses (ACK, READ
//! RESPONSE, ATOMIC ACK) have none: the requester knows what it asked for.

/// The XRC SRQ number is 24 bits wide, as a QPN.
pub const SRQN_MASK: u32 = 0x00ff_ffff;

/// The header word of XRC SRQ `srqn` (bits above 24 are not on the wire; reserved sent 0).
pub fn encode(srqn: u32) -> u32 {
    srqn & SRQN_MASK
}

/// The XRC SRQ number a received header names (reserved bits ignored, as IBA asks).
pub fn decode(word: u32) -> u32 {
    word & SRQN_MASK
}

/// Appends the XRCETH of `hdr` to a packet being built, if its opcode has one.
pub(super) fn put(buf: &mut impl Extend<u8>, hdr: &super::Headers, info: &super::OpcodeInfo) {
    if info.xrceth {
        let srqn = hdr.xrceth.expect("XRCETH required by opcode");
        buf.extend(encode(srqn).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::opcode::{self as op, CLASS_XRC};
    use super::super::*;

    fn ip() -> IpInfo {
        IpInfo {
            sgid: ipv4_gid([10, 0, 0, 1]),
            dgid: ipv4_gid([10, 0, 0, 2]),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            src_port: 0xc011,
        }
    }

    fn xrc_headers(opcode: u8, srqn: Option<u32>) -> Headers {
        let mut h = Headers::new(Bth {
            opcode,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: Qpn::new(0x42).unwrap(),
            ack_req: true,
            psn: Psn::new(7).unwrap(),
        });
        h.xrceth = srqn;
        h
    }

    const BTH_AT: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN;

    #[test]
    fn xrc_requests_carry_xrceth_after_the_bth_and_responses_do_not() {
        for base in 0..=op::OP_MASK {
            let Some(info) = opcode_info(CLASS_XRC | base) else {
                continue;
            };
            let rc = opcode_info(base).expect("XRC's operations are RC's");
            assert_eq!(info.class, rc.class);
            assert_eq!(info.xrceth, !info.class.is_response(), "{base:#04x}");
            assert_eq!(
                info.header_len(),
                rc.header_len() + if info.xrceth { XRCETH_LEN } else { 0 }
            );
        }
        // IBA names no XRC FLUSH or ATOMIC WRITE.
        assert_eq!(opcode_info(CLASS_XRC | op::RC_FLUSH), None);
        assert_eq!(opcode_info(CLASS_XRC | op::RC_ATOMIC_WRITE), None);
        let xrc: Vec<u8> = (0..=u8::MAX)
            .filter(|&o| o & op::CLASS_MASK == CLASS_XRC && opcode_info(o).is_some())
            .collect();
        assert_eq!(xrc.len(), 23, "{xrc:x?}");
    }

    #[test]
    fn xrc_send_round_trips_with_its_srq_number_on_the_wire() {
        let hdr = xrc_headers(CLASS_XRC | op::RC_SEND_ONLY, Some(0x00ab_cdef));
        let packet = build_packet(&ip(), &hdr, b"payload!");
        // BTH, then the XRCETH word: reserved byte 0, SRQN big-endian, then the payload.
        let at = BTH_AT + BTH_LEN;
        assert_eq!(packet[at..at + 4], [0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(&packet[at + 4..at + 12], b"payload!");
        let parsed = parse_packet(&packet).unwrap();
        assert_eq!(parsed.hdr, hdr);
        assert_eq!(parsed.payload, b"payload!");
    }

    #[test]
    fn xrceth_precedes_reth_and_atomic_eth() {
        let mut write = xrc_headers(CLASS_XRC | op::RC_WRITE_ONLY_IMM, Some(5));
        write.reth = Some(Reth {
            va: 0x1122_3344_5566_7788,
            rkey: Key::from_raw(0x99),
            dma_len: 3,
        });
        write.imm = Some(0xfeed);
        let packet = build_packet(&ip(), &write, b"abc");
        let at = BTH_AT + BTH_LEN;
        assert_eq!(packet[at..at + 4], [0, 0, 0, 5]);
        assert_eq!(
            packet[at + 4..at + 12],
            0x1122_3344_5566_7788u64.to_be_bytes()
        );
        assert_eq!(parse_packet(&packet).unwrap().hdr, write);
        let mut cas = xrc_headers(CLASS_XRC | op::RC_COMPARE_SWAP, Some(6));
        cas.atomic_eth = Some(AtomicEth {
            va: 0x1000,
            rkey: Key::from_raw(1),
            swap_add: 2,
            compare: 3,
        });
        let parsed = build_packet(&ip(), &cas, &[]);
        assert_eq!(parse_packet(&parsed).unwrap().hdr, cas);
    }

    #[test]
    fn reserved_bits_are_ignored_and_wide_numbers_do_not_spill() {
        let hdr = xrc_headers(CLASS_XRC | op::RC_SEND_ONLY, Some(0x7f12_3456));
        let mut packet = build_packet(&ip(), &hdr, &[]);
        let at = BTH_AT + BTH_LEN;
        assert_eq!(packet[at], 0, "reserved byte sent 0");
        packet[at] = 0xa5;
        let icrc_at = packet.len() - ICRC_LEN;
        let icrc = compute_icrc(&packet[..icrc_at], IPV4_HEADER_LEN);
        packet[icrc_at..].copy_from_slice(&icrc.to_le_bytes());
        assert_eq!(parse_packet(&packet).unwrap().hdr.xrceth, Some(0x12_3456));
    }

    #[test]
    fn xrc_ack_has_no_xrceth_and_a_truncated_request_is_malformed() {
        let mut ack = xrc_headers(CLASS_XRC | op::RC_ACKNOWLEDGE, None);
        ack.aeth = Some(Aeth {
            syndrome: Syndrome::Nak(NakCode::InvalidRequest),
            msn: Msn::default(),
        });
        let packet = build_packet(&ip(), &ack, &[]);
        assert_eq!(packet.len(), BTH_AT + BTH_LEN + AETH_LEN + ICRC_LEN);
        assert_eq!(parse_packet(&packet).unwrap().hdr, ack);
        // An XRC SEND ONLY with its XRCETH cut off: shorter than its headers.
        let mut short = build_packet(&ip(), &xrc_headers(op::RC_SEND_ONLY, None), &[]);
        short[BTH_AT] = CLASS_XRC | op::RC_SEND_ONLY;
        let icrc_at = short.len() - ICRC_LEN;
        let icrc = compute_icrc(&short[..icrc_at], IPV4_HEADER_LEN);
        short[icrc_at..].copy_from_slice(&icrc.to_le_bytes());
        assert_eq!(parse_packet(&short).unwrap_err(), ParseError::Malformed);
    }
}
