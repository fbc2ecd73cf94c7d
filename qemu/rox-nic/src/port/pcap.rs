//! A classic pcap writer (link type Ethernet) for the frames a port sends and receives;
//! tshark and wireshark decode RoCEv2 in it as IP/UDP/InfiniBand.

use std::io::Write;

/// A classic little-endian pcap with microsecond timestamps starts with this.
pub const PCAP_MAGIC: u32 = 0xa1b2_c3d4;
const PCAP_VERSION_MAJOR: u16 = 2;
const PCAP_VERSION_MINOR: u16 = 4;
/// Longest frame recorded whole (a 9000-byte MTU frame fits).
const PCAP_SNAPLEN: u32 = 65535;
pub const PCAP_LINKTYPE_ETHERNET: u32 = 1;
pub const PCAP_HEADER_LEN: usize = 24;
pub const PCAP_RECORD_HEADER_LEN: usize = 16;

pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W) -> std::io::Result<Self> {
        let mut h = Vec::with_capacity(PCAP_HEADER_LEN);
        h.extend_from_slice(&PCAP_MAGIC.to_le_bytes());
        h.extend_from_slice(&PCAP_VERSION_MAJOR.to_le_bytes());
        h.extend_from_slice(&PCAP_VERSION_MINOR.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&PCAP_SNAPLEN.to_le_bytes());
        h.extend_from_slice(&PCAP_LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Appends one frame, given as the concatenation of `parts`, with timestamp `time_ns`.
    pub fn write_frame(&mut self, time_ns: u64, parts: &[&[u8]]) -> std::io::Result<()> {
        const NS_PER_S: u64 = 1_000_000_000;
        const NS_PER_US: u64 = 1_000;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let captured = len.min(PCAP_SNAPLEN as usize);
        let mut rec = [0u8; PCAP_RECORD_HEADER_LEN];
        rec[0..4].copy_from_slice(&((time_ns / NS_PER_S) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&(((time_ns % NS_PER_S) / NS_PER_US) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&(captured as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        let mut left = captured;
        for p in parts {
            let take = p.len().min(left);
            self.out.write_all(&p[..take])?;
            left -= take;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The frames of a pcap file written by [`PcapWriter`] (or any classic little-endian pcap):
/// (timestamp in µs, frame). For tests and tools that check a capture.
pub fn read_frames(bytes: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, String> {
    if bytes.len() < PCAP_HEADER_LEN
        || u32::from_le_bytes(bytes[..4].try_into().unwrap()) != PCAP_MAGIC
    {
        return Err("not a little-endian classic pcap file".into());
    }
    let linktype = u32::from_le_bytes(bytes[20..24].try_into().unwrap());
    if linktype != PCAP_LINKTYPE_ETHERNET {
        return Err(format!("link type {linktype}, not Ethernet"));
    }
    let mut at = PCAP_HEADER_LEN;
    let mut frames = Vec::new();
    while at < bytes.len() {
        let rec = bytes
            .get(at..at + PCAP_RECORD_HEADER_LEN)
            .ok_or("truncated record header")?;
        let word = |i: usize| u64::from(u32::from_le_bytes(rec[i..i + 4].try_into().unwrap()));
        let (secs, usecs, captured) = (word(0), word(4), word(8) as usize);
        at += PCAP_RECORD_HEADER_LEN;
        let frame = bytes.get(at..at + captured).ok_or("truncated frame")?;
        frames.push((secs * 1_000_000 + usecs, frame.to_vec()));
        at += captured;
    }
    Ok(frames)
}
