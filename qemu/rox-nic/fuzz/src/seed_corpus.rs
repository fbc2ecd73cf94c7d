//! Writes each fuzz target's seed inputs (rox_nic::fuzzing::seeds) into `corpus/<target>/`,
//! named by content, so a run starts from packets and commands the host tests know work.
//! Each argument is a pcap file (Ethernet link type, e.g. `tests/roce_capture.rs`'s or a
//! bridge capture with rdma_rxe's frames): its RoCEv2 packets become `wire` seeds as they are
//! (input byte 0 = 0: the harness fixes nothing).

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for target in rox_nic::fuzzing::TARGETS {
        let dir = root.join(target.name);
        std::fs::create_dir_all(&dir)?;
        let seeds = rox_nic::fuzzing::seeds(target.name);
        for seed in &seeds {
            write_seed(&dir, "seed", seed)?;
        }
        println!(
            "{}: {} seeds in {}",
            target.name,
            seeds.len(),
            dir.display()
        );
    }
    for pcap in std::env::args().skip(1) {
        let bytes = std::fs::read(&pcap)?;
        let packets = roce_packets(&bytes);
        for p in &packets {
            write_seed(&root.join("wire"), "pcap", &[&[0u8][..], p].concat())?;
        }
        println!("wire: {} RoCEv2 packets from {pcap}", packets.len());
    }
    Ok(())
}

fn write_seed(dir: &Path, kind: &str, seed: &[u8]) -> std::io::Result<()> {
    let mut h = crc32fast::Hasher::new();
    h.update(seed);
    std::fs::write(dir.join(format!("{kind}-{:08x}", h.finalize())), seed)
}

/// The IP packets of the UDP-4791 Ethernet frames of a little-endian pcap.
fn roce_packets(pcap: &[u8]) -> Vec<Vec<u8>> {
    const GLOBAL_HEADER: usize = 24;
    const RECORD_HEADER: usize = 16;
    const MAGIC_LE: u32 = 0xa1b2_c3d4;
    const LINKTYPE_ETHERNET: u32 = 1;
    let word = |at: usize| u32::from_le_bytes(pcap[at..at + 4].try_into().expect("4 bytes"));
    if pcap.len() < GLOBAL_HEADER || word(0) != MAGIC_LE || word(20) != LINKTYPE_ETHERNET {
        eprintln!("not a little-endian Ethernet pcap: skipped");
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = GLOBAL_HEADER;
    while at + RECORD_HEADER <= pcap.len() {
        let len = word(at + 8) as usize;
        let Some(frame) = pcap.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
            break;
        };
        at += RECORD_HEADER + len;
        let ip = match frame.get(12..14) {
            Some([0x08, 0x00]) | Some([0x86, 0xdd]) => &frame[14..],
            _ => continue,
        };
        let udp = if ip.first().map(|b| b >> 4) == Some(6) {
            40
        } else {
            20
        };
        if ip.get(udp + 2..udp + 4) == Some(&4791u16.to_be_bytes()[..]) {
            let total = if udp == 40 {
                40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]))
            } else {
                usize::from(u16::from_be_bytes([ip[2], ip[3]]))
            };
            out.push(ip[..total.min(ip.len())].to_vec());
        }
    }
    out
}
