//! RoCEv2 packets and frames as a peer on the wire sends them, for the tests of the port, the
//! frame check and the data path.

use crate::port::frame::{roce_header, Mac};
use crate::port::FaultConfig;
use crate::roce::wire::{self, Aeth, AtomicEth, Bth, Deth, Feth, Headers, IpInfo, Reth};
use crate::roce::{AddressVector, Gid, Key};

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

/// A value for every extension header, for [`headers_for_opcode`] to take those an opcode
/// carries from (the wire round-trip test's full-width values, the fuzz seeds' varied ones).
#[derive(Clone, Copy, Debug)]
pub struct ExtensionValues {
    pub xrceth: u32,
    pub feth: Feth,
    pub reth: Reth,
    pub aeth: Aeth,
    pub atomic_eth: AtomicEth,
    pub atomic_ack: u64,
    pub imm: u32,
    pub ieth: Key,
    pub deth: Deth,
}

/// Headers of `bth` with exactly the extension headers its opcode carries (by
/// [`wire::opcode_info`]), each set from `values`.
pub fn headers_for_opcode(bth: Bth, values: &ExtensionValues) -> Headers {
    let info = wire::opcode_info(bth.opcode).expect("a known opcode");
    Headers {
        xrceth: info.xrceth.then_some(values.xrceth),
        feth: info.feth.then_some(values.feth),
        reth: info.reth.then_some(values.reth),
        aeth: info.aeth.then_some(values.aeth),
        atomic_eth: info.atomic_eth.then_some(values.atomic_eth),
        atomic_ack: info.atomic_ack_eth.then_some(values.atomic_ack),
        imm: info.immdt.then_some(values.imm),
        ieth: info.ieth.then_some(values.ieth),
        deth: info.deth.then_some(values.deth),
        ..Headers::new(bth)
    }
}
