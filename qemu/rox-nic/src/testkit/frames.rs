//! RoCEv2 packets and frames as a peer on the wire sends them, for the tests of the port, the
//! frame check and the data path.

use crate::port::frame::{roce_header, Mac};
use crate::port::FaultConfig;
use crate::roce::wire::{self, Headers, IpInfo};
use crate::roce::{AddressVector, Gid};

/// The IP and UDP fields of a peer's packet from `sgid` to `dgid` (hop limit 64, source port
/// 0xc000, no traffic class or flow label).
pub fn peer_ip(sgid: Gid, dgid: Gid) -> IpInfo {
    IpInfo {
        sgid,
        dgid,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        src_port: 0xc000,
    }
}

/// A peer's RoCEv2 packet with `hdr` and `payload` from `sgid` to `dgid`, in an Ethernet frame
/// from `smac` to `dmac`.
pub fn roce_frame(
    dmac: &Mac,
    smac: &Mac,
    (sgid, dgid): (Gid, Gid),
    hdr: &Headers,
    payload: &[u8],
) -> Vec<u8> {
    let packet = wire::build_packet(&peer_ip(sgid, dgid), hdr, payload);
    [&roce_header(dmac, smac, &packet)[..], &packet].concat()
}

/// The MAC of the test device owning a GID (the engine tests' name for it).
pub use super::test_mac as mac_of;

/// The address vector from `src` to `dst` (hop limit 64, to [`mac_of`] `dst`).
pub fn av_between(src: Gid, dst: Gid) -> AddressVector {
    AddressVector {
        dgid: dst,
        sgid: src,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        dmac: mac_of(&dst),
    }
}

/// A faulty wire: each frame lost, duplicated and reordered with probability `rate` each and
/// corrupted with `corrupt`, from the random sequence of `seed`.
pub fn faults(rate: f64, corrupt: f64, seed: u64) -> FaultConfig {
    FaultConfig {
        loss: rate,
        duplicate: rate,
        reorder: rate,
        corrupt,
        seed,
    }
}
