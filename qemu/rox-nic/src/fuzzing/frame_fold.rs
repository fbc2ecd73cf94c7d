//! The `frame` target's property of the fused receive copy (`port::cable::copy_received`,
//! docs/benchmarks/session-17.md "Session 17: the cable's receive copy and its ICRC"): whatever
//! ICRC fold a port claims for a frame,
//! `port::frame::sort_received` hands a RoCEv2 packet on as ICRC-checked only if the
//! two-pass check (`wire::compute_icrc` over the packet, against its last four bytes) finds
//! its ICRC right; and with the fold the cable makes, a packet that ends at the frame's end
//! with a right ICRC is handed on checked (the fold is not wasted).

use std::ops::Range;

use arbitrary::{Result, Unstructured};

use crate::port::frame::{sort_received, Arrival, Mac, ETH_HEADER_LEN};
use crate::roce::wire::{self, IcrcFold, IpView, ICRC_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN};
use crate::roce::Gid;

/// The fold claimed for a frame.
#[derive(Clone, Copy)]
enum Claim {
    /// None (a port that does not fold, or a frame too short to).
    Nothing,
    /// The fold the cable makes as it copies the frame out of the peer's buffer.
    Cable(Option<IcrcFold>),
    /// A fold of the whole frame with the masks of IP header length `ip_len`, whatever the
    /// frame is: a port that took the other version's masks, or folded a frame that is no
    /// RoCEv2 packet at all.
    Masks(IcrcFold),
}

/// Sorts `frame` with a fold `u` chooses and checks the property; the port has MAC
/// `own_mac`, frames of up to `max_frame` bytes and the GIDs `own_gid` accepts.
pub fn check(
    frame: &[u8],
    u: &mut Unstructured,
    own_mac: &Mac,
    max_frame: usize,
    own_gid: impl Fn(&Gid) -> bool,
) -> Result<()> {
    let claim = match u.int_in_range(0u8..=2)? {
        0 => Claim::Nothing,
        1 => Claim::Cable(cable_fold(frame)),
        _ => {
            let ip_len = if u.arbitrary::<bool>()? {
                IPV6_HEADER_LEN
            } else {
                IPV4_HEADER_LEN
            };
            let front = wire::icrc_front(ETH_HEADER_LEN, ip_len);
            Claim::Masks(IcrcFold {
                ip_len,
                state: front.update(frame),
            })
        }
    };
    check_claim(frame, claim, own_mac, max_frame, own_gid);
    Ok(())
}

/// [`check`] with the fold `claim`; returns whether a RoCEv2 packet was handed on checked
/// (None: not handed on as one).
fn check_claim(
    frame: &[u8],
    claim: Claim,
    own_mac: &Mac,
    max_frame: usize,
    own_gid: impl Fn(&Gid) -> bool,
) -> Option<bool> {
    let fold = match claim {
        Claim::Nothing => None,
        Claim::Cable(fold) => fold,
        Claim::Masks(fold) => Some(fold),
    };
    let Arrival::Roce(range, ip) = sort_received(frame, fold, own_mac, max_frame, own_gid) else {
        return None;
    };
    let right = icrc_right(&frame[range.clone()], &ip);
    assert!(
        !ip.icrc_checked || right,
        "a packet with a wrong ICRC handed on as checked ({fold:?}, {range:?})"
    );
    if let Claim::Cable(Some(_)) = claim {
        assert!(
            ip.icrc_checked || !right || !ends_the_frame(&range, frame),
            "the cable's fold proved nothing of a right packet at the frame's end ({fold:?})"
        );
    }
    Some(ip.icrc_checked)
}

/// The two-pass check: the IBA ICRC of `packet` is its last four bytes.
fn icrc_right(packet: &[u8], ip: &IpView) -> bool {
    let Some(body_len) = packet.len().checked_sub(ICRC_LEN) else {
        return false;
    };
    let (body, icrc) = packet.split_at(body_len);
    let icrc = u32::from_le_bytes(icrc.try_into().expect("four bytes"));
    wire::compute_icrc(body, ip.header_len) == icrc
}

fn ends_the_frame(range: &Range<usize>, frame: &[u8]) -> bool {
    range.end == frame.len()
}

/// `frame` copied as a cable copies a received one out of the peer's buffer, and the fold
/// that copy made (None where the copy does not fold: a short frame, a CPU without the wide
/// fold, a frame that is no RoCEv2 one).
fn cable_fold(frame: &[u8]) -> Option<IcrcFold> {
    use crate::sys::shm::{PeerBytes, SharedMapping};
    let map = SharedMapping::anonymous(frame.len().max(1).next_multiple_of(4096))
        .expect("an anonymous mapping");
    let map = std::sync::Arc::new(map);
    assert!(map.write(0, frame));
    let buffer = PeerBytes::carve(&map, 0, frame.len(), 1)?.pop()?;
    let mut copy = vec![0; frame.len()];
    let fold = crate::port::cable::copy_received(&buffer, &mut copy).expect("the frame fits");
    assert_eq!(copy, frame, "the copy");
    fold
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::wire::{opcode, Bth, Headers, DEFAULT_PKEY};
    use crate::roce::{Psn, Qpn};
    use crate::testkit::frames::roce_frame;

    const OWN: Mac = [2, 0, 0, 0, 0, 1];

    /// A SEND ONLY of `len` bytes from 10.0.0.2 to 10.0.0.1, in a frame.
    fn send_frame(len: usize) -> Vec<u8> {
        let hdr = Headers::new(Bth {
            opcode: opcode::RC_SEND_ONLY,
            solicited: false,
            pkey: DEFAULT_PKEY,
            dest_qpn: Qpn::from_wire(0x11),
            ack_req: true,
            psn: Psn::from_wire(7),
        });
        let gids = (wire::ipv4_gid([10, 0, 0, 2]), wire::ipv4_gid([10, 0, 0, 1]));
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        roce_frame(&OWN, &[2, 0, 0, 0, 0, 2], gids, &hdr, &payload)
    }

    fn sorted(frame: &[u8], claim: Claim) -> Option<bool> {
        check_claim(frame, claim, &OWN, 9014, |_| true)
    }

    /// The claims the target makes, on a right packet and on one with a byte changed: only
    /// the right masks over a right packet prove it, and the cable's copy folds (where this
    /// CPU has the wide fold) as the masks do.
    #[test]
    fn only_a_fold_of_a_right_packet_with_its_own_masks_proves_it() {
        let right = send_frame(1000);
        let mut wrong = right.clone();
        wrong[600] ^= 1;
        let masks = |frame: &[u8], ip_len| {
            let state = wire::icrc_front(ETH_HEADER_LEN, ip_len).update(frame);
            Claim::Masks(IcrcFold { ip_len, state })
        };
        assert_eq!(sorted(&right, Claim::Nothing), Some(false));
        assert_eq!(sorted(&right, masks(&right, IPV4_HEADER_LEN)), Some(true));
        assert_eq!(sorted(&right, masks(&right, IPV6_HEADER_LEN)), Some(false));
        assert_eq!(sorted(&wrong, masks(&wrong, IPV4_HEADER_LEN)), Some(false));
        let folds = crate::sys::crc32::copy_folds(right.len());
        assert_eq!(cable_fold(&right).is_some(), folds);
        assert_eq!(
            sorted(&right, Claim::Cable(cable_fold(&right))),
            Some(folds)
        );
        assert_eq!(
            sorted(&wrong, Claim::Cable(cable_fold(&wrong))),
            Some(false)
        );
    }
}
