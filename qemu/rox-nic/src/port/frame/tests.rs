//! The frame check's unit tests: checksums, the sort, and the ICRC folded as a frame is copied.

use super::*;
use crate::roce::wire::{self, opcode as op, Bth, Headers, DEFAULT_PKEY};
use crate::roce::{Psn, Qpn};
use crate::sys::crc32;
use crate::testkit::frames::roce_frame;

/// The word-wise checksum check agrees with the checksum every IPv4 header is built
/// with, for every header length and for headers with any one bit flipped (each must
/// fail), and with random headers, valid or not.
#[test]
fn the_header_checksum_check_agrees_with_the_checksum() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    for len in (IPV4_HEADER_LEN..=60).step_by(4) {
        for _ in 0..50 {
            let mut h: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            assert_eq!(
                ipv4_header_checksum_ok(&h),
                ipv4_header_checksum(&h) == 0,
                "{h:02x?}"
            );
            h[10..12].fill(0);
            let sum = ipv4_header_checksum(&h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
            assert!(ipv4_header_checksum_ok(&h), "{h:02x?}");
            for bit in 0..len * 8 {
                h[bit / 8] ^= 1 << (bit % 8);
                assert!(!ipv4_header_checksum_ok(&h), "bit {bit} of {h:02x?}");
                h[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }
    assert!(!ipv4_header_checksum_ok(&[0; IPV4_HEADER_LEN]));
    assert!(ipv4_header_checksum_ok(&[0xff; IPV4_HEADER_LEN]));
}

/// The IP header the frame check read and the transport parse behind it give what a
/// whole parse gives, for IPv4 and IPv6, so the data path parses each frame once.
#[test]
fn sorted_frames_parse_from_behind_the_ip_header_as_whole_packets_do() {
    let own = [2, 0, 0, 0, 0, 1];
    for (sgid, dgid) in [
        (ipv4_gid([10, 0, 0, 2]), ipv4_gid([10, 0, 0, 1])),
        (
            [0xfe, 0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 2],
            [0xfe; 16],
        ),
    ] {
        let bth = Bth {
            opcode: op::RC_SEND_ONLY,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: Qpn::from_wire(0x11),
            ack_req: true,
            psn: Psn::from_wire(7),
        };
        let hdr = Headers::new(bth);
        let peer = [2, 0, 0, 0, 0, 2];
        let frame = roce_frame(&own, &peer, (sgid, dgid), &hdr, b"payload!");
        let ip = &frame[ETH_HEADER_LEN..];
        let Arrival::Roce(range, view) = sort_frame(&frame, &own, 9000, |g| *g == dgid) else {
            panic!("not sorted as RoCE");
        };
        assert_eq!((view.sgid, view.dgid), (sgid, dgid));
        let once = wire::parse_transport(&frame[range], view).expect("parses");
        let whole = wire::parse_packet(ip).expect("parses");
        assert_eq!(
            (once.sgid, once.dgid, once.hdr),
            (whole.sgid, whole.dgid, whole.hdr)
        );
        assert_eq!(
            (once.payload, once.ip_header),
            (whole.payload, whole.ip_header)
        );
    }
}

/// `frame` copied as a cable copies a received one out of the peer's buffer (its ICRC run
/// folded as it is copied), and the fold.
fn copied_as_received(frame: &[u8]) -> (Vec<u8>, Option<IcrcFold>) {
    use crate::sys::shm::{PeerBytes, SharedMapping};
    let map = SharedMapping::anonymous(frame.len().next_multiple_of(4096)).unwrap();
    let map = std::sync::Arc::new(map);
    assert!(map.write(0, frame));
    let buffer = PeerBytes::carve(&map, 0, frame.len(), 1)
        .unwrap()
        .pop()
        .unwrap();
    let mut copy = vec![0; frame.len()];
    let fold = crate::port::cable::copy_received(&buffer, &mut copy).expect("fits");
    assert_eq!(copy, frame);
    (copy, fold)
}

const OWN: Mac = [2, 0, 0, 0, 0, 1];
const PEER: Mac = [2, 0, 0, 0, 0, 2];

/// The GIDs of a packet from the peer to this device, over IPv4 or IPv6.
fn gids(v6: bool) -> (Gid, Gid) {
    if v6 {
        let mut own = [0xfd; 16];
        own[15] = 1;
        ([0xfd; 16], own)
    } else {
        (ipv4_gid([10, 0, 0, 2]), ipv4_gid([10, 0, 0, 1]))
    }
}

/// A WRITE ONLY of `len` bytes from the peer, in a frame.
fn write_frame(v6: bool, len: usize) -> Vec<u8> {
    let mut hdr = Headers::new(Bth {
        opcode: op::RC_WRITE_ONLY,
        solicited: false,
        pkey: DEFAULT_PKEY,
        dest_qpn: Qpn::from_wire(0x11),
        ack_req: true,
        psn: Psn::from_wire(7),
    });
    hdr.reth = Some(wire::Reth {
        va: 0x7f00_0000_1000,
        rkey: crate::roce::Key::from_raw(0x1234_5601),
        dma_len: len as u32,
    });
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    roce_frame(&OWN, &PEER, gids(v6), &hdr, &payload)
}

/// The sort of a frame copied as received, and the transport's verdict on it (None: not a
/// RoCEv2 packet for this device).
fn receive(frame: &[u8]) -> (Arrival, Option<Result<(), wire::ParseError>>) {
    let (copy, fold) = copied_as_received(frame);
    // Folded where the copy fuses, and then for every RoCEv2 frame.
    let roce = received_icrc_front(&frame[..frame.len().min(64)]).is_some();
    assert_eq!(fold.is_some(), roce && crc32::copy_folds(frame.len()));
    let own_gid = |g: &Gid| *g == gids(false).1 || *g == gids(true).1;
    let arrival = sort_received(&copy, fold, &OWN, 9014, own_gid);
    let parsed = match &arrival {
        Arrival::Roce(range, ip) => {
            Some(wire::parse_transport(&copy[range.clone()], *ip).map(drop))
        }
        _ => None,
    };
    (arrival, parsed)
}

/// A RoCEv2 frame copied as a cable receives it has its ICRC proved by the fold (and is not
/// hashed again) where the copy fuses (long frames, the wide fold), over IPv4 and IPv6; a
/// short one is left to the transport. With any one bit of its IP packet flipped, the fold
/// proves it exactly when the two-pass check (`icrc_matches` over the packet) passes, which
/// is when the bit is one the ICRC masks; a frame with any other bit flipped is never
/// accepted.
#[test]
fn a_received_frame_s_icrc_is_proved_by_the_copy_and_every_flipped_bit_is_refused() {
    for v6 in [false, true] {
        for len in [0, 8, 200, 1000, 4096] {
            let frame = write_frame(v6, len);
            let ip_len = if v6 { IPV6_HEADER_LEN } else { IPV4_HEADER_LEN };
            let (arrival, parsed) = receive(&frame);
            let Arrival::Roce(_, ip) = arrival else {
                panic!("v6 {v6}, {len} B: {arrival:?}");
            };
            let folds = crc32::copy_folds(frame.len());
            assert_eq!(
                ip.icrc_checked, folds,
                "v6 {v6}, {len} B: proved by the fold"
            );
            assert_eq!(parsed, Some(Ok(())));
            // Every bit of the short frames, a bit of every byte of the long ones.
            let bits: Vec<usize> = if frame.len() <= 300 {
                (ETH_HEADER_LEN * 8..frame.len() * 8).collect()
            } else {
                (ETH_HEADER_LEN..frame.len())
                    .map(|b| b * 8 + b % 8)
                    .collect()
            };
            for bit in bits {
                let mut bad = frame.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                let packet = &bad[ETH_HEADER_LEN..];
                let icrc_at = packet.len() - 4;
                let wire_icrc = u32::from_le_bytes(packet[icrc_at..].try_into().unwrap());
                let two_pass = wire::icrc_matches(&packet[..icrc_at], ip_len, wire_icrc);
                let (arrival, parsed) = receive(&bad);
                if let Arrival::Roce(range, ip) = &arrival {
                    let whole = range.end == bad.len();
                    let proved = two_pass && whole && folds;
                    assert_eq!(ip.icrc_checked, proved, "v6 {v6}, {len} B, bit {bit}");
                }
                if parsed == Some(Ok(())) {
                    assert!(
                        two_pass,
                        "v6 {v6}, {len} B, bit {bit}: accepted, ICRC wrong"
                    );
                }
            }
        }
    }
}

/// What the fold does not prove is left to the transport's own check, as on every other
/// wire: a packet with Ethernet padding behind it, rdma_rxe's FLUSH ICRC (accepted), a wrong
/// ICRC (refused as `BadIcrc`), even with a tail forged to bring the frame's fold to the
/// residue; and a fold of the other IP version's masks proves nothing.
#[test]
fn what_the_fold_does_not_prove_the_transport_checks() {
    let mut padded = write_frame(false, 1000);
    padded.extend([0, 0]);
    let (arrival, parsed) = receive(&padded);
    assert!(matches!(arrival, Arrival::Roce(_, ip) if !ip.icrc_checked));
    assert_eq!(parsed, Some(Ok(())), "padding: hashed, and right");

    let mut hdr = Headers::new(Bth {
        opcode: op::RC_FLUSH,
        solicited: false,
        pkey: DEFAULT_PKEY,
        dest_qpn: Qpn::from_wire(0x11),
        ack_req: true,
        psn: Psn::from_wire(7),
    });
    hdr.feth = Some(wire::Feth {
        placement_type: 1,
        selectivity_level: 0,
    });
    hdr.reth = Some(wire::Reth {
        va: 0x1000,
        rkey: crate::roce::Key::from_raw(0x1234_5601),
        dma_len: 64,
    });
    let (sgid, dgid) = gids(true);
    let ip = crate::testkit::frames::peer_ip(sgid, dgid);
    let flush = wire::build_packet_with(&ip, &hdr, &[], wire::FlushIcrc::Rxe);
    let frame = [&roce_header(&OWN, &PEER, &flush)[..], &flush].concat();
    let (arrival, parsed) = receive(&frame);
    assert!(matches!(arrival, Arrival::Roce(_, ip) if !ip.icrc_checked));
    assert_eq!(
        parsed,
        Some(Ok(())),
        "rdma_rxe's FLUSH ICRC: hashed, and accepted"
    );

    // Over IPv4: IPv6's UDP checksum covers the ICRC, and the frame check refuses it first.
    let mut bad = write_frame(false, 1000);
    *bad.last_mut().unwrap() ^= 0x80;
    let (arrival, parsed) = receive(&bad);
    assert!(matches!(arrival, Arrival::Roce(_, ip) if !ip.icrc_checked));
    assert_eq!(parsed, Some(Err(wire::ParseError::BadIcrc)));
    // A peer can pick four bytes behind a packet with a wrong ICRC that bring the fold of the
    // whole frame to the residue: the fold proves only a packet that ends at the frame's end.
    let forged = wire::compute_icrc(&bad[ETH_HEADER_LEN..], IPV4_HEADER_LEN).to_le_bytes();
    let mut padded_bad = bad.clone();
    padded_bad.extend(forged);
    let (copy, fold) = copied_as_received(&padded_bad);
    if let Some(fold) = fold {
        assert!(
            fold.proves(IPV4_HEADER_LEN),
            "the forged tail hits the residue"
        );
        let arrival = sort_received(&copy, Some(fold), &OWN, 9014, |_| true);
        assert!(matches!(arrival, Arrival::Roce(_, ip) if !ip.icrc_checked));
    }
    let (_, parsed) = receive(&padded_bad);
    assert_eq!(
        parsed,
        Some(Err(wire::ParseError::BadIcrc)),
        "hashed, and refused"
    );

    let (copy, fold) = copied_as_received(&write_frame(false, 1000));
    let Some(fold) = fold else {
        assert!(
            !crc32::copy_folds(copy.len()),
            "a long RoCEv2 frame is folded"
        );
        return;
    };
    assert!(fold.proves(IPV4_HEADER_LEN) && !fold.proves(IPV6_HEADER_LEN));
    let other = IcrcFold {
        ip_len: IPV6_HEADER_LEN,
        ..fold
    };
    let arrival = sort_received(&copy, Some(other), &OWN, 9014, |_| true);
    assert!(matches!(arrival, Arrival::Roce(_, ip) if !ip.icrc_checked));
    let (_, none) = copied_as_received(&[0x5a; 100]);
    assert_eq!(none, None, "not RoCEv2: nothing folded");
}
