//! rox-pcap-check: recomputes the ICRC of every RoCEv2 frame in an Ethernet pcap (a capture of
//! a bridge, a tap or a rox-nic port) and reports the ones that do not match. Frames from any
//! RoCE implementation count: on a bridge shared with rdma_rxe this checks both stacks' ICRCs
//! against rox-nic's computation.
//!
//!   rox-pcap-check FILE [--min-roce N]
//!
//! Exit status 0 when every RoCEv2 frame's ICRC matches and there are at least N of them
//! (default 1), else 1 with the first mismatches listed.

use std::process::ExitCode;

use clap::Parser;
use rox_nic::port::frame::ETH_HEADER_LEN;
use rox_nic::port::pcap::read_frames;
use rox_nic::roce::wire::{
    compute_icrc, is_ipv6, IPV4_HEADER_LEN, IPV6_HEADER_LEN, ROCE_V2_UDP_PORT,
};

#[derive(Parser, Debug)]
#[command(about = "Recompute the ICRC of every RoCEv2 frame in an Ethernet pcap")]
struct Args {
    /// The capture (classic pcap, Ethernet link type).
    file: std::path::PathBuf,
    /// Fail unless the capture holds at least this many RoCEv2 frames.
    #[arg(long, default_value_t = 1)]
    min_roce: usize,
}

/// Bytes of the ICRC at the end of a RoCEv2 packet.
const ICRC_LEN: usize = 4;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPV4_PROTO_AT: usize = 9;
const IPV6_NEXT_HEADER_AT: usize = 6;
const IP_PROTO_UDP: u8 = 17;
const UDP_DST_PORT_AT: usize = 2;
const UDP_HEADER_LEN: usize = 8;

/// The IP packet of a RoCEv2 frame and its IP header length; None for any other frame.
fn roce_packet(frame: &[u8]) -> Option<(&[u8], usize)> {
    let ethertype = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    let packet = frame.get(ETH_HEADER_LEN..)?;
    let (ip_len, proto) = match ethertype {
        ETHERTYPE_IPV4 if !is_ipv6(packet) => {
            let ihl = usize::from(packet.first()? & 0x0f) * 4;
            (ihl, *packet.get(IPV4_PROTO_AT)?)
        }
        ETHERTYPE_IPV6 => (IPV6_HEADER_LEN, *packet.get(IPV6_NEXT_HEADER_AT)?),
        _ => return None,
    };
    let udp = packet.get(ip_len..ip_len + UDP_HEADER_LEN)?;
    let dport = u16::from_be_bytes(udp[UDP_DST_PORT_AT..UDP_DST_PORT_AT + 2].try_into().ok()?);
    (proto == IP_PROTO_UDP && dport == ROCE_V2_UDP_PORT).then_some((packet, ip_len))
}

/// The IP packet as long as its header says (Ethernet pads short frames to 60 bytes).
fn trim_to_ip_length(packet: &[u8], ip_len: usize) -> Option<&[u8]> {
    let len = if ip_len == IPV4_HEADER_LEN {
        usize::from(u16::from_be_bytes(packet.get(2..4)?.try_into().ok()?))
    } else {
        IPV6_HEADER_LEN + usize::from(u16::from_be_bytes(packet.get(4..6)?.try_into().ok()?))
    };
    packet.get(..len)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let bytes = match std::fs::read(&args.file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rox-pcap-check: {}: {e}", args.file.display());
            return ExitCode::FAILURE;
        }
    };
    let frames = match read_frames(&bytes) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rox-pcap-check: {}: {e}", args.file.display());
            return ExitCode::FAILURE;
        }
    };
    let (mut roce, mut bad, mut options) = (0usize, 0usize, 0usize);
    for (index, (_, frame)) in frames.iter().enumerate() {
        let Some((packet, ip_len)) = roce_packet(frame) else {
            continue;
        };
        roce += 1;
        if ip_len != IPV4_HEADER_LEN && ip_len != IPV6_HEADER_LEN {
            // IPv4 options: not a packet any RoCE stack sends (rox and rxe drop them).
            options += 1;
            continue;
        }
        let Some(packet) = trim_to_ip_length(packet, ip_len) else {
            bad += 1;
            eprintln!("frame {}: shorter than its IP length", index + 1);
            continue;
        };
        let Some(body_len) = packet.len().checked_sub(ICRC_LEN) else {
            bad += 1;
            continue;
        };
        let stored = u32::from_le_bytes(packet[body_len..].try_into().expect("4 bytes"));
        let computed = compute_icrc(&packet[..body_len], ip_len);
        if stored != computed {
            bad += 1;
            if bad <= 10 {
                eprintln!(
                    "frame {}: ICRC {stored:#010x}, recomputed {computed:#010x}",
                    index + 1
                );
            }
        }
    }
    println!(
        "rox-pcap-check: {} frames, {roce} RoCEv2, {} ICRC recomputed equal, {bad} different, {options} with IPv4 options",
        frames.len(),
        roce - bad - options
    );
    if bad > 0 || roce < args.min_roce {
        if roce < args.min_roce {
            eprintln!("rox-pcap-check: fewer than {} RoCEv2 frames", args.min_roce);
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
