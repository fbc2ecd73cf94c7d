//! Target `gso`: a frame as a tap with segmentation offload reads it (a `virtio_net_hdr`, then
//! the frame), cut into the frames it stands for as the port cuts it (`port::tap::gso`).
//!
//! Invariants: a request is refused, or stands for at most `RX_MAX_SEGMENTS` frames whose
//! payloads are, in order, exactly the bytes behind the request's headers, each `gso_size`
//! long (at least `RX_MIN_SEGMENT`) but the last; every frame's headers are the request's
//! length, name its payload's length (IPv4 total length, UDP length) and, for IPv4, carry a
//! right header checksum; a frame without a request is itself, and completing its partial
//! checksum changes nothing outside the frame.

use crate::port::tap::gso::{
    complete_checksum, Segments, VnetHdr, RX_MAX_SEGMENTS, RX_MIN_SEGMENT, VNET_HDR_LEN,
};
use crate::roce::wire::ipv4_header_checksum;

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

pub fn run(data: &[u8]) {
    let Some((hdr, frame)) = data.split_first_chunk::<VNET_HDR_LEN>() else {
        return;
    };
    let vnet = VnetHdr::parse(hdr);
    let Ok(segments) = Segments::of(&vnet, frame) else {
        return;
    };
    let count = segments.count();
    assert!((1..=RX_MAX_SEGMENTS).contains(&count), "{count} segments");
    if !segments.is_request() {
        assert_eq!((count, segments.payload(0)), (1, frame));
        let mut copy = frame.to_vec();
        complete_checksum(&vnet, &mut copy);
        return;
    }
    let (v6, ip_at) = (frame[12..14] == [0x86, 0xdd], 14);
    let mut joined = Vec::with_capacity(frame.len());
    let mut head_len = 0;
    for i in 0..count {
        // Headers are at most Ethernet, IPv4 with options and UDP: 14 + 60 + 8 bytes.
        let mut head = [0u8; 96];
        let hl = segments.header(i, &mut head);
        assert!(
            i == 0 || hl == head_len,
            "segment {i}: headers of {hl} bytes"
        );
        head_len = hl;
        let payload = segments.payload(i);
        let size = usize::from(vnet.gso_size);
        assert!(size >= RX_MIN_SEGMENT);
        assert!(
            payload.len() == size || (i + 1 == count && (1..size).contains(&payload.len())),
            "segment {i} of {count}: {} bytes at gso_size {size}",
            payload.len()
        );
        let udp = hl - 8;
        let udp_len = 8 + payload.len();
        if udp_len <= 0xffff {
            assert_eq!(be16(&head, udp + 4), udp_len, "UDP length");
        }
        if v6 {
            assert_eq!(
                be16(&head, ip_at + 4),
                udp_len & 0xffff,
                "IPv6 payload length"
            );
        } else {
            let total = udp - ip_at + udp_len;
            assert_eq!(be16(&head, ip_at + 2), total & 0xffff, "IPv4 total length");
            let mut ip = head[ip_at..udp].to_vec();
            let sent = be16(&ip, 10);
            ip[10..12].fill(0);
            assert_eq!(
                usize::from(ipv4_header_checksum(&ip)),
                sent,
                "IPv4 checksum"
            );
        }
        joined.extend_from_slice(payload);
    }
    assert_eq!(
        joined,
        frame[head_len..],
        "the payloads are the request's bytes"
    );
}

/// A `virtio_net_hdr` for UDP_L4 segmentation at `gso_size`, in front of `frame`.
fn request(gso_size: u16, frame: &[u8]) -> Vec<u8> {
    let vnet = VnetHdr {
        gso_type: 5,
        hdr_len: 42,
        gso_size,
        ..VnetHdr::default()
    };
    [&vnet.to_bytes()[..], frame].concat()
}

/// An IPv4 (or IPv6) UDP frame to `port` with `payload` bytes.
fn udp_frame(v6: bool, port: u16, payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if v6 {
        f.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend(((8 + payload) as u16).to_be_bytes());
        f.extend([17, 64]);
        f.extend([0xfe, 0x80].iter().chain(&[0; 13]).chain(&[1]));
        f.extend([0xfe, 0x80].iter().chain(&[0; 13]).chain(&[2]));
    } else {
        f.extend([0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend([10, 0, 0, 1, 10, 0, 0, 2]);
        let total = ((28 + payload) as u16).to_be_bytes();
        f[16..18].copy_from_slice(&total);
    }
    f.extend(0xc000u16.to_be_bytes());
    f.extend(port.to_be_bytes());
    f.extend(((8 + payload) as u16).to_be_bytes());
    f.extend([0, 0]);
    f.extend((0..payload).map(|i| (i * 7) as u8));
    f
}

/// Requests rox's and the host's senders make (RoCEv2 and other UDP, IPv4 and IPv6), a lone
/// frame, and refused ones (segments too short, too many).
pub fn seeds() -> Vec<Vec<u8>> {
    vec![
        request(1040, &udp_frame(false, 4791, 4 * 1040 + 300)),
        request(1000, &udp_frame(false, 53, 3000)),
        request(512, &udp_frame(true, 4791, 2048)),
        [&[0u8; VNET_HDR_LEN][..], &udp_frame(false, 4791, 64)].concat(),
        request(1, &udp_frame(false, 4791, 3000)),
        request(16, &udp_frame(false, 4791, 4000)),
    ]
}
