//! UDP segmentation offload on a tap (IFF_VNET_HDR with TUNSETOFFLOAD USO4/USO6, Linux 6.2
//! on): a run of RoCEv2 frames of one flow leaves as one write of up to 64 KiB, crosses a
//! Linux bridge as one packet, and reaches a peer tap that takes such packets as one read.
//! Per-frame costs in the kernel (a write, a bridge hop, a read each) are paid once per run
//! (docs/benchmarks/session-06.md, "Issue 18's measurements: the bridge with UDP segmentation
//! offload on the taps", and session-10.md, "Session 10: the tap's offload, settled", have the
//! measurements that chose it).
//!
//! Transmit ([`GsoWriter`]): consecutive IPv4 RoCEv2 frames with one Ethernet header, one
//! IP/UDP flow and equally long UDP payloads (the last may be shorter) leave as one frame
//! behind a `virtio_net_hdr` asking for UDP_L4 segmentation at that length. Whoever cuts it
//! (the kernel, for a port that cannot take it whole; the receiving rox-nic) gives segment i
//! the IP ID of the first plus i, as Linux numbers segments, and the ICRC covers the IP ID.
//! So frame i leaves with the ICRC it has with IP ID i: its own ICRC XOR a delta that only
//! depends on i and the frame's length (the CRC is linear in its input), from a table made
//! once per length. The UDP checksum (0 in rox's frames) is filled in by the cutter; the ICRC
//! masks it.
//!
//! Receive ([`Segments`], [`complete_checksum`]): a frame that arrives with a segmentation
//! request is cut into the frames it stands for, each with its own IP/UDP header, as the
//! kernel would cut it; a frame with a partial checksum gets it completed (the paired netdev's
//! guest expects finished frames).

use std::ops::Range;

use crate::port::frame::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_HEADER_LEN};
use crate::port::FrameRef;
use crate::roce::wire::{
    ipv4_header_checksum, opcode, BTH_LEN, ICRC_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN,
    ROCE_V2_UDP_PORT, UDP_HEADER_LEN,
};

/// Bytes of the `virtio_net_hdr` in front of every frame of a tap with IFF_VNET_HDR.
pub const VNET_HDR_LEN: usize = 10;
const F_NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_UDP_L4: u8 = 5;
/// The header of a frame that asks for nothing.
pub static NO_OFFLOAD: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];
/// Frames per segmentation request: the kernel's UDP_MAX_SEGMENTS of older kernels, and
/// half that of newer ones (128; see [`RX_MAX_SEGMENTS`]).
pub const MAX_SEGMENTS: usize = 64;
/// The most frames a received request may stand for: the kernel's UDP_MAX_SEGMENTS (128 in
/// recent kernels, 64 in older ones, as rox's own [`MAX_SEGMENTS`]), since a tap on a bridge
/// also takes requests from the host's UDP sockets. A larger count is no sender's: refused,
/// so one frame read cannot become a flood of them (64 KiB cut at 1 byte would be 65k frames).
pub const RX_MAX_SEGMENTS: usize = 128;
/// The shortest segment a received request may ask for: a RoCEv2 packet's BTH and ICRC (the
/// least UDP payload any frame the port takes carries).
pub const RX_MIN_SEGMENT: usize = BTH_LEN + ICRC_LEN;
/// An IP packet's largest total length.
const MAX_IP_PACKET: usize = 65535;
/// IPv4 (20 bytes, no options) and UDP headers: what a segmentation request repeats per frame.
const V4_UDP: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN;
const IP_PROTO_UDP: u8 = 17;
/// Flags and fragment offset of an unfragmented IPv4 packet with DF set.
const V4_DONT_FRAGMENT: u16 = 0x4000;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// A `virtio_net_hdr` (linux/virtio_net.h), little-endian as a tap on an x86/arm64 host has it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn parse(b: &[u8; VNET_HDR_LEN]) -> VnetHdr {
        let le = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        }
    }

    pub fn to_bytes(self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        for (at, v) in [
            (2, self.hdr_len),
            (4, self.gso_size),
            (6, self.csum_start),
            (8, self.csum_offset),
        ] {
            b[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// One's-complement sum of `bytes` as big-endian 16-bit words (an odd last byte padded), added
/// to `acc`; fold with [`fold`].
fn sum16(bytes: &[u8], mut acc: u64) -> u64 {
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

// ---------------------------------------------------------------------------------------------
// Transmit

/// The UDP payload length of frame `f` if it may travel in a segmentation request: IPv4
/// RoCEv2 without options or padding, DF set, IP ID 0 (rox's), UDP checksum 0, not a FLUSH
/// (whose rdma_rxe-style ICRC covers more than the packet once).
fn groupable(f: &FrameRef) -> Option<usize> {
    let (h, b) = (f.head, f.body);
    let ok = h.len() == ETH_HEADER_LEN
        && be16(h, 12) == ETHERTYPE_IPV4
        && b.len() >= V4_UDP + BTH_LEN + ICRC_LEN
        && b[0] == 0x45
        && usize::from(be16(b, 2)) == b.len()
        && be16(b, 4) == 0
        && be16(b, 6) == V4_DONT_FRAGMENT
        && b[9] == IP_PROTO_UDP
        && be16(b, IPV4_HEADER_LEN + 2) == ROCE_V2_UDP_PORT
        && usize::from(be16(b, IPV4_HEADER_LEN + 4)) == b.len() - IPV4_HEADER_LEN
        && be16(b, IPV4_HEADER_LEN + 6) == 0
        && b[V4_UDP] != opcode::RC_FLUSH;
    ok.then(|| b.len() - V4_UDP)
}

/// Same Ethernet header, IP version/TOS, ID/flags, TTL/protocol, addresses and UDP ports (all
/// but the lengths and checksums a segmentation rewrites).
fn same_flow(a: &FrameRef, b: &FrameRef) -> bool {
    a.head == b.head
        && a.body[..2] == b.body[..2]
        && a.body[4..10] == b.body[4..10]
        && a.body[12..IPV4_HEADER_LEN + 4] == b.body[12..IPV4_HEADER_LEN + 4]
}

/// The runs of `frames` that may leave as one write each (with `grouping` off, none): `out`
/// gets consecutive ranges covering all of `frames` (a range of one is a frame on its own).
pub fn plan(frames: &[FrameRef], grouping: bool, out: &mut Vec<Range<usize>>) {
    out.clear();
    let mut i = 0;
    while i < frames.len() {
        let mut j = i + 1;
        if let Some(size) = groupable(&frames[i]).filter(|_| grouping) {
            let mut total = V4_UDP + size;
            while j < frames.len() && j - i < MAX_SEGMENTS {
                let next = &frames[j];
                let Some(len) = groupable(next) else { break };
                if len > size || total + len > MAX_IP_PACKET || !same_flow(&frames[i], next) {
                    break;
                }
                total += len;
                j += 1;
                if len < size {
                    break;
                }
            }
        }
        out.push(i..j);
        i = j;
    }
}

/// The ICRC delta of giving a frame IP ID `id` instead of 0, when `after` bytes of the ICRC's
/// input follow the IP ID field: bit b of the ID changes the CRC by `basis[b]`.
struct IdDelta {
    after: usize,
    basis: [u32; 16],
}

static ZEROS: [u8; MAX_IP_PACKET] = [0; MAX_IP_PACKET];

impl IdDelta {
    fn new(after: usize) -> IdDelta {
        // crc(m ^ d) = crc(m) ^ crc(d) ^ crc(0…0) for messages of one length; the leading
        // zeros of d add nothing, so the delta is crc(id, 0 × after) ^ crc(0 × (after + 2)).
        let crc = |head: [u8; 2]| {
            let mut h = crc32fast::Hasher::new();
            h.update(&head);
            h.update(&ZEROS[..after]);
            h.finalize()
        };
        let zero = crc([0, 0]);
        IdDelta {
            after,
            basis: std::array::from_fn(|b| crc((1u16 << b).to_be_bytes()) ^ zero),
        }
    }

    fn of(&self, id: u16) -> u32 {
        (0..16)
            .filter(|b| id & (1 << b) != 0)
            .fold(0, |d, b| d ^ self.basis[b])
    }
}

/// The IP ID's place in the ICRC's input: behind the 8 masked LRH bytes, at byte 4 of the
/// IPv4 header; the input ends before the ICRC.
fn bytes_after_ip_id(ip_packet_len: usize) -> usize {
    ip_packet_len - ICRC_LEN - 4 - 2
}

/// Bytes of a request's own header: the virtio_net_hdr, the Ethernet header and the first
/// frame's IPv4/UDP headers with the whole request's lengths.
const REQUEST_HEAD: usize = VNET_HDR_LEN + ETH_HEADER_LEN + V4_UDP;

/// Turns a list of frames into the writes that carry them (see the module documentation).
#[derive(Default)]
pub struct GsoWriter {
    groups: Vec<Range<usize>>,
    heads: Vec<[u8; REQUEST_HEAD]>,
    icrcs: Vec<[u8; ICRC_LEN]>,
    deltas: Vec<IdDelta>,
}

/// Cached delta tables (one per frame length seen lately).
const DELTA_CACHE: usize = 8;

impl GsoWriter {
    /// The writes that carry `frames`: each frame behind a `virtio_net_hdr`, runs as one
    /// segmentation request if `grouping`. `pieces` gets the bytes to write in order and
    /// `writes` the ranges of them one write takes; returns the frames of each write.
    pub fn build<'a>(
        &'a mut self,
        frames: &[FrameRef<'a>],
        grouping: bool,
        pieces: &mut Vec<&'a [u8]>,
        writes: &mut Vec<Range<usize>>,
    ) -> &'a [Range<usize>] {
        plan(frames, grouping, &mut self.groups);
        self.heads.clear();
        self.icrcs.clear();
        for g in 0..self.groups.len() {
            let group = self.groups[g].clone();
            if group.len() > 1 {
                self.heads.push(request_head(&frames[group.clone()]));
                for (i, f) in frames[group].iter().enumerate().skip(1) {
                    let icrc = self.icrc_with_id(f.body, i as u16);
                    self.icrcs.push(icrc);
                }
            }
        }
        let this: &'a GsoWriter = self;
        pieces.clear();
        writes.clear();
        let (mut heads, mut icrcs) = (this.heads.iter(), this.icrcs.iter());
        for group in &this.groups {
            let at = pieces.len();
            let first = &frames[group.start];
            if group.len() == 1 {
                pieces.extend([&NO_OFFLOAD[..], first.head, first.body]);
            } else {
                let head = heads.next().expect("a head per request");
                pieces.extend([&head[..], &first.body[V4_UDP..]]);
                for f in &frames[group.start + 1..group.end] {
                    let icrc = icrcs.next().expect("an ICRC per later frame");
                    pieces.extend([&f.body[V4_UDP..f.body.len() - ICRC_LEN], &icrc[..]]);
                }
            }
            writes.push(at..pieces.len());
        }
        &this.groups
    }

    /// The ICRC of IP packet `body` (IP ID 0) as it is with IP ID `id`.
    fn icrc_with_id(&mut self, body: &[u8], id: u16) -> [u8; ICRC_LEN] {
        let after = bytes_after_ip_id(body.len());
        let at = match self.deltas.iter().position(|d| d.after == after) {
            Some(at) => at,
            None => {
                if self.deltas.len() == DELTA_CACHE {
                    self.deltas.remove(0);
                }
                self.deltas.push(IdDelta::new(after));
                self.deltas.len() - 1
            }
        };
        let own = u32::from_le_bytes(body[body.len() - ICRC_LEN..].try_into().expect("4 bytes"));
        (own ^ self.deltas[at].of(id)).to_le_bytes()
    }
}

/// The header of a segmentation request for `frames` (a run [`plan`] made): the first frame's
/// headers with the run's total lengths, a valid IP checksum and the UDP pseudo-header sum a
/// partial checksum starts from.
fn request_head(frames: &[FrameRef]) -> [u8; REQUEST_HEAD] {
    let first = &frames[0];
    let payload: usize = frames.iter().map(|f| f.body.len() - V4_UDP).sum();
    let mut h = [0u8; REQUEST_HEAD];
    let vnet = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_UDP_L4,
        hdr_len: (ETH_HEADER_LEN + V4_UDP) as u16,
        gso_size: (first.body.len() - V4_UDP) as u16,
        csum_start: (ETH_HEADER_LEN + IPV4_HEADER_LEN) as u16,
        csum_offset: 6,
    };
    h[..VNET_HDR_LEN].copy_from_slice(&vnet.to_bytes());
    h[VNET_HDR_LEN..VNET_HDR_LEN + ETH_HEADER_LEN].copy_from_slice(first.head);
    let ip = &mut h[VNET_HDR_LEN + ETH_HEADER_LEN..];
    ip.copy_from_slice(&first.body[..V4_UDP]);
    let udp_len = UDP_HEADER_LEN + payload;
    put16(ip, 2, (IPV4_HEADER_LEN + udp_len) as u16);
    put16(ip, 10, 0);
    let checksum = ipv4_header_checksum(&ip[..IPV4_HEADER_LEN]);
    put16(ip, 10, checksum);
    put16(ip, IPV4_HEADER_LEN + 4, udp_len as u16);
    let pseudo = sum16(&ip[12..20], u64::from(IP_PROTO_UDP) + udp_len as u64);
    put16(ip, IPV4_HEADER_LEN + 6, fold(pseudo));
    h
}

// ---------------------------------------------------------------------------------------------
// Receive

/// Why an arrived frame was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsplittable {
    /// A request this port cannot cut (not UDP, no headers).
    Unsupported,
    /// A request it will not cut: segments shorter than [`RX_MIN_SEGMENT`] or more than
    /// [`RX_MAX_SEGMENTS`] of them (counted in the port's statistics, `rx_gso_refused`).
    Refused,
}

/// The frames a segmentation request stands for (see [`Segments::header`]).
pub struct Segments<'a> {
    frame: &'a [u8],
    /// Bytes of headers repeated per frame (Ethernet, IP, UDP).
    head_len: usize,
    ip_at: usize,
    v6: bool,
    size: usize,
    count: usize,
}

impl<'a> Segments<'a> {
    /// The frames `frame` (read behind `vnet`) stands for: one, itself, without a
    /// segmentation request; an error for a request this port cannot cut (not UDP) or will
    /// not (segments shorter than [`RX_MIN_SEGMENT`], more than [`RX_MAX_SEGMENTS`]).
    pub fn of(vnet: &VnetHdr, frame: &'a [u8]) -> Result<Segments<'a>, Unsplittable> {
        let whole = Segments {
            frame,
            head_len: 0,
            ip_at: 0,
            v6: false,
            size: frame.len(),
            count: 1,
        };
        if vnet.gso_type == GSO_NONE {
            return Ok(whole);
        }
        if vnet.gso_type != GSO_UDP_L4 || vnet.gso_size == 0 || frame.len() < ETH_HEADER_LEN {
            return Err(Unsplittable::Unsupported);
        }
        let ip_at = ETH_HEADER_LEN;
        let (v6, ip_len) = match be16(frame, 12) {
            ETHERTYPE_IPV4 if frame.len() > ip_at && frame[ip_at] >> 4 == 4 => {
                let len = usize::from(frame[ip_at] & 0x0f) * 4;
                let ok = len >= IPV4_HEADER_LEN
                    && frame.len() >= ip_at + len
                    && frame[ip_at + 9] == IP_PROTO_UDP;
                (false, ok.then_some(len))
            }
            ETHERTYPE_IPV6 if frame.len() >= ip_at + IPV6_HEADER_LEN => (
                true,
                (frame[ip_at + 6] == IP_PROTO_UDP).then_some(IPV6_HEADER_LEN),
            ),
            _ => (false, None),
        };
        let ip_len = ip_len.ok_or(Unsplittable::Unsupported)?;
        let head_len = ip_at + ip_len + UDP_HEADER_LEN;
        if frame.len() <= head_len {
            return Err(Unsplittable::Unsupported);
        }
        let size = usize::from(vnet.gso_size);
        let count = (frame.len() - head_len).div_ceil(size);
        if size < RX_MIN_SEGMENT || count > RX_MAX_SEGMENTS {
            log::debug!("rox-nic: tap: refused a request of {count} segments of {size} bytes");
            return Err(Unsplittable::Refused);
        }
        Ok(Segments {
            frame,
            head_len,
            ip_at,
            v6,
            size,
            count,
        })
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether the frame was a segmentation request (else it is its one frame).
    pub fn is_request(&self) -> bool {
        self.head_len != 0
    }

    /// Frame `i`'s payload (all of the frame without a request; its header is empty).
    pub fn payload(&self, i: usize) -> &'a [u8] {
        let start = self.head_len + i * self.size;
        &self.frame[start..(start + self.size).min(self.frame.len())]
    }

    /// Writes frame `i`'s headers into `out` (at least their length) and returns
    /// their length: the request's, with this frame's lengths, IP ID (IPv4: the first's
    /// plus i), IP checksum and UDP checksum (0 for RoCEv2 over IPv4, as rox sends it; a
    /// computed one otherwise).
    pub fn header(&self, i: usize, out: &mut [u8]) -> usize {
        let hl = self.head_len;
        if hl == 0 {
            return 0;
        }
        let h = &mut out[..hl];
        h.copy_from_slice(&self.frame[..hl]);
        let payload = self.payload(i);
        let udp_len = UDP_HEADER_LEN + payload.len();
        let (ip, udp) = (self.ip_at, hl - UDP_HEADER_LEN);
        if self.v6 {
            put16(h, ip + 4, udp_len as u16);
        } else {
            put16(h, ip + 2, (udp - ip + udp_len) as u16);
            put16(h, ip + 4, be16(h, ip + 4).wrapping_add(i as u16));
            put16(h, ip + 10, 0);
            let checksum = ipv4_header_checksum(&h[ip..udp]);
            put16(h, ip + 10, checksum);
        }
        put16(h, udp + 4, udp_len as u16);
        put16(h, udp + 6, 0);
        if self.v6 || be16(h, udp + 2) != ROCE_V2_UDP_PORT {
            let addrs = if self.v6 {
                ip + 8..ip + 40
            } else {
                ip + 12..ip + 20
            };
            let sum = sum16(&h[addrs], u64::from(IP_PROTO_UDP) + udp_len as u64);
            let sum = sum16(payload, sum16(&h[udp..], sum));
            let checksum = match !fold(sum) {
                0 => 0xffff,
                c => c,
            };
            put16(h, udp + 6, checksum);
        }
        hl
    }
}

/// Completes the partial checksum `vnet` asks for in `frame` (whole, as arrived): the sum of
/// the bytes from `csum_start` on, which include the pseudo-header sum already in the
/// checksum field. Out-of-range offsets leave the frame as it is.
pub fn complete_checksum(vnet: &VnetHdr, frame: &mut [u8]) {
    if vnet.flags & F_NEEDS_CSUM == 0 {
        return;
    }
    let start = usize::from(vnet.csum_start);
    let field = start + usize::from(vnet.csum_offset);
    if field + 2 > frame.len() {
        return;
    }
    let sum = !fold(sum16(&frame[start..], 0));
    put16(frame, field, sum);
}

#[cfg(test)]
mod tests;
