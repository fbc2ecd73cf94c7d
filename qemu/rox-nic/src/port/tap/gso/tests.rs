use super::*;
use crate::roce::wire::{compute_icrc, icrc_matches};

const HEAD: [u8; ETH_HEADER_LEN] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];

/// A RoCEv2 IPv4 packet as rox sends it (IP ID 0, DF, UDP checksum 0) with `payload` bytes
/// after the BTH, numbered `n`, and its ICRC.
fn roce_packet(payload: usize, n: u8, opcode: u8) -> Vec<u8> {
    let len = V4_UDP + BTH_LEN + payload + ICRC_LEN;
    let mut p = vec![0u8; len];
    p[..12].copy_from_slice(&[0x45, 0x02, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    put16(&mut p, 2, len as u16);
    p[12..20].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    let checksum = ipv4_header_checksum(&p[..20]);
    put16(&mut p, 10, checksum);
    put16(&mut p, 20, 0xc000);
    put16(&mut p, 22, ROCE_V2_UDP_PORT);
    put16(&mut p, 24, (len - IPV4_HEADER_LEN) as u16);
    p[V4_UDP] = opcode;
    for (i, b) in p[V4_UDP + 1..len - ICRC_LEN].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7) ^ n;
    }
    let icrc = compute_icrc(&p[..len - ICRC_LEN], IPV4_HEADER_LEN);
    p[len - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    p
}

fn refs(bodies: &[Vec<u8>]) -> Vec<FrameRef<'_>> {
    bodies
        .iter()
        .map(|b| FrameRef {
            head: &HEAD,
            body: b,
        })
        .collect()
}

const WRITE_MIDDLE: u8 = 0x07;

#[test]
fn the_icrc_delta_is_the_icrc_with_that_ip_id() {
    let mut w = GsoWriter::default();
    for payload in [0, 4, 1000, 4096] {
        let p = roce_packet(payload, 3, WRITE_MIDDLE);
        for id in [1u16, 2, 15, 63, 0x1234, 0xffff] {
            let mut q = p.clone();
            put16(&mut q, 4, id);
            let want = compute_icrc(&q[..q.len() - ICRC_LEN], IPV4_HEADER_LEN);
            let got = u32::from_le_bytes(w.icrc_with_id(&p, id));
            assert_eq!(got, want, "payload {payload}, IP ID {id}");
        }
    }
}

#[test]
fn runs_are_one_flow_of_equal_lengths_a_shorter_one_last() {
    let mut bodies: Vec<Vec<u8>> = (0..5).map(|n| roce_packet(4096, n, WRITE_MIDDLE)).collect();
    bodies.push(roce_packet(100, 5, WRITE_MIDDLE)); // shorter: ends the run
    bodies.push(roce_packet(4096, 6, WRITE_MIDDLE));
    let mut other = roce_packet(4096, 7, WRITE_MIDDLE);
    other[19] = 9; // another destination
    bodies.push(other);
    bodies.push(roce_packet(4096, 8, opcode::RC_FLUSH)); // alone
    let mut nonzero_id = roce_packet(4096, 9, WRITE_MIDDLE);
    put16(&mut nonzero_id, 4, 1);
    bodies.push(nonzero_id); // alone
    bodies.push(roce_packet(4096, 10, WRITE_MIDDLE));
    bodies.push(roce_packet(5000, 11, WRITE_MIDDLE)); // longer: not in the run
    let mut out = Vec::new();
    plan(&refs(&bodies), true, &mut out);
    assert_eq!(out, [0..6, 6..7, 7..8, 8..9, 9..10, 10..11, 11..12]);
    plan(&refs(&bodies), false, &mut out);
    assert_eq!(out.len(), bodies.len(), "grouping off: one by one");
    // At most MAX_SEGMENTS frames and 64 KiB of IP packet per request.
    let many: Vec<Vec<u8>> = (0..100)
        .map(|n| roce_packet(200, n, WRITE_MIDDLE))
        .collect();
    plan(&refs(&many), true, &mut out);
    assert_eq!(out, [0..64, 64..100]);
    let big: Vec<Vec<u8>> = (0..40)
        .map(|n| roce_packet(4096, n, WRITE_MIDDLE))
        .collect();
    plan(&refs(&big), true, &mut out);
    assert!(out
        .iter()
        .all(|r| V4_UDP + r.len() * (big[0].len() - V4_UDP) <= MAX_IP_PACKET));
    assert_eq!(out.iter().map(|r| r.len()).sum::<usize>(), 40);
}

/// The bytes one write puts on the tap.
fn written(pieces: &[&[u8]], write: &Range<usize>) -> Vec<u8> {
    pieces[write.clone()].concat()
}

#[test]
fn a_request_cut_again_gives_each_frame_with_an_icrc_that_holds() {
    let mut bodies: Vec<Vec<u8>> = (0..7).map(|n| roce_packet(4096, n, WRITE_MIDDLE)).collect();
    bodies.push(roce_packet(52, 7, WRITE_MIDDLE));
    let frames = refs(&bodies);
    let mut w = GsoWriter::default();
    let (mut pieces, mut writes) = (Vec::new(), Vec::new());
    let groups = w.build(&frames, true, &mut pieces, &mut writes).to_vec();
    assert_eq!(groups, vec![0..8_usize]);
    let raw = written(&pieces, &writes[0]);
    let (hdr, frame) = raw.split_first_chunk::<VNET_HDR_LEN>().unwrap();
    let vnet = VnetHdr::parse(hdr);
    assert_eq!((vnet.gso_type, vnet.flags), (GSO_UDP_L4, F_NEEDS_CSUM));
    assert_eq!(
        ipv4_header_checksum(&frame[14..34]),
        0,
        "the request's IP header holds"
    );
    let segments = Segments::of(&vnet, frame).unwrap();
    assert_eq!(segments.count(), 8);
    for (i, body) in bodies.iter().enumerate() {
        let mut slot = vec![0u8; 9000];
        let hl = segments.header(i, &mut slot);
        let payload = segments.payload(i);
        slot[hl..hl + payload.len()].copy_from_slice(payload);
        let cut = &slot[ETH_HEADER_LEN..hl + payload.len()];
        assert_eq!(&slot[..ETH_HEADER_LEN], &HEAD);
        assert_eq!(cut.len(), body.len(), "frame {i}'s length");
        assert_eq!(be16(cut, 4), i as u16, "frame {i}'s IP ID");
        assert_eq!(
            ipv4_header_checksum(&cut[..20]),
            0,
            "frame {i}'s IP checksum"
        );
        let icrc = u32::from_le_bytes(cut[cut.len() - 4..].try_into().unwrap());
        assert!(
            icrc_matches(&cut[..cut.len() - 4], 20, icrc),
            "frame {i}'s ICRC"
        );
        // Apart from the IP ID, its checksum and the ICRC, the frame as it was built.
        let (mut a, mut b) = (cut.to_vec(), body.clone());
        for x in [&mut a, &mut b] {
            let n = x.len();
            x[4..6].fill(0);
            x[10..12].fill(0);
            x[n - 4..].fill(0);
        }
        assert_eq!(a, b, "frame {i}");
    }
}

#[test]
fn a_lone_frame_goes_behind_an_empty_header() {
    let bodies = vec![roce_packet(64, 1, opcode::RC_FLUSH)];
    let frames = refs(&bodies);
    let mut w = GsoWriter::default();
    let (mut pieces, mut writes) = (Vec::new(), Vec::new());
    w.build(&frames, true, &mut pieces, &mut writes);
    let raw = written(&pieces, &writes[0]);
    assert_eq!(raw, [&NO_OFFLOAD[..], &HEAD, &bodies[0]].concat());
}

#[test]
fn cut_udp_frames_that_are_not_rox_s_get_their_checksum() {
    // A guest's UDP datagram of 3000 bytes cut at 1000 (not RoCEv2: checksummed per frame).
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    let mut frame = HEAD.to_vec();
    let mut ip = vec![
        0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    put16(&mut ip, 2, (28 + payload.len()) as u16);
    frame.extend(&ip);
    frame.extend([0x30, 0x39, 0x00, 0x35, 0, 0, 0, 0]);
    frame.extend(&payload);
    let vnet = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_UDP_L4,
        hdr_len: 42,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 6,
    };
    let segments = Segments::of(&vnet, &frame).unwrap();
    assert_eq!(segments.count(), 3);
    for i in 0..3 {
        let mut slot = vec![0u8; 2000];
        let hl = segments.header(i, &mut slot);
        let p = segments.payload(i);
        slot[hl..hl + p.len()].copy_from_slice(p);
        let cut = &slot[14..hl + p.len()];
        assert_eq!(be16(cut, 4), 0x1234 + i as u16);
        let pseudo = sum16(&cut[12..20], 17 + (cut.len() - 20) as u64);
        assert_eq!(
            fold(sum16(&cut[20..], pseudo)),
            0xffff,
            "segment {i}'s UDP checksum"
        );
    }
    // Not UDP: refused.
    let mut tcp = frame.clone();
    tcp[14 + 9] = 6;
    assert!(Segments::of(&vnet, &tcp).is_err());
}

#[test]
fn a_partial_checksum_is_completed() {
    let mut frame = HEAD.to_vec();
    let mut ip = vec![
        0x45, 0, 0, 48, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    let c = ipv4_header_checksum(&ip);
    put16(&mut ip, 10, c);
    frame.extend(&ip);
    frame.extend([0x30, 0x39, 0x00, 0x35, 0, 28, 0, 0]);
    frame.extend((0..20u8).map(|i| i * 3));
    let pseudo = fold(sum16(&frame[26..34], 17 + 28));
    put16(&mut frame, 40, pseudo);
    let vnet = VnetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 6,
        ..VnetHdr::default()
    };
    complete_checksum(&vnet, &mut frame);
    let check = sum16(&frame[26..34], 17 + 28);
    assert_eq!(fold(sum16(&frame[34..], check)), 0xffff);
    // Offsets beyond the frame: left alone, no panic.
    let far = VnetHdr {
        csum_start: 60,
        csum_offset: 6,
        ..vnet
    };
    let before = frame.clone();
    complete_checksum(&far, &mut frame);
    assert_eq!(frame, before);
}

/// A request for more frames than the receive batch has room for: the batch takes what fits,
/// the rest waits (the tap keeps the request) and comes next, in order, nothing lost.
#[test]
fn a_request_beyond_the_batch_continues_in_the_next() {
    use crate::port::{RxBatch, BATCH};
    let mut refused = 0;
    let mut deliver = |raw: &[u8], from, batch: &mut RxBatch| {
        super::super::deliver(raw, from, batch, &mut refused)
    };
    let mut batch = RxBatch::new(9014);
    let lone = [&NO_OFFLOAD[..], &HEAD, &roce_packet(100, 99, WRITE_MIDDLE)].concat();
    for _ in 0..BATCH - 4 {
        assert_eq!(deliver(&lone, 0, &mut batch), None);
    }
    // 16 frames of 2 KiB: one request (16 of 4 KiB would pass 64 KiB and make two).
    let bodies: Vec<Vec<u8>> = (0..16)
        .map(|n| roce_packet(2048, n, WRITE_MIDDLE))
        .collect();
    let frames = refs(&bodies);
    let mut w = GsoWriter::default();
    let (mut pieces, mut writes) = (Vec::new(), Vec::new());
    w.build(&frames, true, &mut pieces, &mut writes);
    assert_eq!(writes.len(), 1);
    let raw = written(&pieces, &writes[0]);
    assert_eq!(deliver(&raw, 0, &mut batch), Some(4), "four fit");
    let mut got: Vec<Vec<u8>> = batch.frames().skip(BATCH - 4).map(<[u8]>::to_vec).collect();
    batch.clear();
    assert_eq!(
        deliver(&raw, 4, &mut batch),
        None,
        "the rest fits the next batch"
    );
    got.extend(batch.frames().map(<[u8]>::to_vec));
    assert_eq!(got.len(), 16);
    for (i, (f, body)) in got.iter().zip(&bodies).enumerate() {
        assert_eq!(&f[..ETH_HEADER_LEN], &HEAD);
        let ip = &f[ETH_HEADER_LEN..];
        assert_eq!(be16(ip, 4), i as u16, "frame {i} in its place");
        assert_eq!(
            ip[V4_UDP..ip.len() - ICRC_LEN],
            body[V4_UDP..body.len() - ICRC_LEN]
        );
    }
    // A frame shorter than its header, or a request this port cannot cut: dropped.
    assert_eq!(deliver(&[0u8; 4], 0, &mut batch), None);
    let mut tcp = raw.clone();
    tcp[VNET_HDR_LEN + ETH_HEADER_LEN + 9] = 6;
    let before = batch.len();
    assert_eq!(deliver(&tcp, 0, &mut batch), None);
    assert_eq!(batch.len(), before, "nothing taken");
    assert_eq!(
        refused, 0,
        "dropped, not refused: only tiny or too many segments are"
    );
}

/// A request cut into segments shorter than a RoCEv2 packet's BTH and ICRC, or into more than
/// the kernel's UDP_MAX_SEGMENTS, is no sender's: refused and counted, not turned into a flood
/// of frames (64 KiB at gso_size 1 would be 65k frames from one read).
#[test]
fn a_request_for_tiny_or_too_many_segments_is_refused_and_counted() {
    let request = |payload: usize, gso_size: u16| {
        let mut frame = HEAD.to_vec();
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        put16(&mut ip, 2, (V4_UDP + payload) as u16);
        frame.extend(&ip);
        frame.extend([0xc0, 0x00, 0x12, 0xb7, 0, 0, 0, 0]);
        frame.resize(frame.len() + payload, 0x5a);
        let vnet = VnetHdr {
            gso_type: GSO_UDP_L4,
            hdr_len: 42,
            gso_size,
            ..VnetHdr::default()
        };
        (vnet, frame)
    };
    for (payload, gso_size, count) in [(2048, 16, Some(128)), (60000, 469, Some(128))] {
        let (vnet, frame) = request(payload, gso_size);
        let got = Segments::of(&vnet, &frame).map(|s| s.count()).ok();
        assert_eq!(got, count, "{payload} B at {gso_size}");
    }
    let mut batch = crate::port::RxBatch::new(9014);
    let mut refused = 0;
    for (n, (payload, gso_size)) in [(3000, 1), (2048, 15), (60000, 468), (65000, 500)]
        .into_iter()
        .enumerate()
    {
        let (vnet, frame) = request(payload, gso_size);
        assert_eq!(
            Segments::of(&vnet, &frame).err(),
            Some(Unsplittable::Refused),
            "{payload} B at {gso_size}"
        );
        let raw = [&vnet.to_bytes()[..], &frame].concat();
        assert_eq!(
            super::super::deliver(&raw, 0, &mut batch, &mut refused),
            None
        );
        assert_eq!(batch.len(), 0, "no frame of it taken");
        assert_eq!(
            refused,
            n as u64 + 1,
            "counted once, for the port's rx_gso_refused"
        );
    }
    // One the port takes is not counted.
    let (vnet, frame) = request(2048, 16);
    let raw = [&vnet.to_bytes()[..], &frame].concat();
    assert_eq!(
        super::super::deliver(&raw, 0, &mut batch, &mut refused),
        Some(crate::port::BATCH)
    );
    assert_eq!(refused, 4);
}
