//! IB transport opcodes (BTH opcode byte) that rox uses, what each one means
//! ([`OpcodeClass`]) and which headers follow its BTH ([`OpcodeInfo`]).

use std::sync::LazyLock;

use super::{
    AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, BTH_LEN, DETH_LEN, FETH_LEN, IETH_LEN, IMMDT_LEN,
    RETH_LEN, XRCETH_LEN,
};

pub const RC_SEND_FIRST: u8 = 0x00;
pub const RC_SEND_MIDDLE: u8 = 0x01;
pub const RC_SEND_LAST: u8 = 0x02;
pub const RC_SEND_LAST_IMM: u8 = 0x03;
pub const RC_SEND_ONLY: u8 = 0x04;
pub const RC_SEND_ONLY_IMM: u8 = 0x05;
pub const RC_WRITE_FIRST: u8 = 0x06;
pub const RC_WRITE_MIDDLE: u8 = 0x07;
pub const RC_WRITE_LAST: u8 = 0x08;
pub const RC_WRITE_LAST_IMM: u8 = 0x09;
pub const RC_WRITE_ONLY: u8 = 0x0a;
pub const RC_WRITE_ONLY_IMM: u8 = 0x0b;
pub const RC_READ_REQUEST: u8 = 0x0c;
pub const RC_READ_RESPONSE_FIRST: u8 = 0x0d;
pub const RC_READ_RESPONSE_MIDDLE: u8 = 0x0e;
pub const RC_READ_RESPONSE_LAST: u8 = 0x0f;
pub const RC_READ_RESPONSE_ONLY: u8 = 0x10;
pub const RC_ACKNOWLEDGE: u8 = 0x11;
pub const RC_ATOMIC_ACKNOWLEDGE: u8 = 0x12;
pub const RC_COMPARE_SWAP: u8 = 0x13;
pub const RC_FETCH_ADD: u8 = 0x14;
/// RC SEND with invalidate (IETH: the R_Key the responder invalidates).
pub const RC_SEND_LAST_INV: u8 = 0x16;
pub const RC_SEND_ONLY_INV: u8 = 0x17;
/// IBA memory placement extensions (RC only): FLUSH (BTH, FETH, RETH) and ATOMIC WRITE
/// (BTH, RETH, 8 bytes of payload); both answered by a zero-length READ RESPONSE ONLY.
pub const RC_FLUSH: u8 = 0x1c;
pub const RC_ATOMIC_WRITE: u8 = 0x1d;
/// Opcode-class offsets: the low 5 bits are the operation, the high 3 the transport.
pub const CLASS_RC: u8 = 0x00;
pub const CLASS_UC: u8 = 0x20;
pub const CLASS_UD: u8 = 0x60;
/// eXtended Reliable Connected: RC's operations; every request carries an XRCETH.
pub const CLASS_XRC: u8 = 0xa0;
pub const CLASS_MASK: u8 = 0xe0;
pub const OP_MASK: u8 = 0x1f;
pub const UD_SEND_ONLY: u8 = CLASS_UD | RC_SEND_ONLY;
/// RoCEv2's congestion notification packet (IBA Annex A17.9.3): the CNP class's only
/// opcode; BTH (BECN set, PSN 0), 16 reserved bytes, ICRC.
pub const CLASS_CNP: u8 = 0x80;
pub const CNP: u8 = CLASS_CNP | 0x01;
/// The reserved bytes after a CNP's BTH (sent as zeros, ignored on receipt).
pub const CNP_RESERVED_LEN: usize = 16;
pub const UD_SEND_ONLY_IMM: u8 = CLASS_UD | RC_SEND_ONLY_IMM;

/// What an opcode asks for, whatever its transport (the low 5 bits of the opcode byte): the
/// responder and the completer dispatch on it instead of on opcode ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpcodeClass {
    /// SEND FIRST/MIDDLE/LAST/ONLY, with immediate or invalidate.
    Send,
    /// RDMA WRITE FIRST/MIDDLE/LAST/ONLY, with immediate.
    Write,
    ReadRequest,
    /// READ RESPONSE FIRST/MIDDLE/LAST/ONLY (also the answer to FLUSH and ATOMIC WRITE).
    ReadResponse,
    /// ACKNOWLEDGE: an ACK, RNR NAK or NAK, by its AETH syndrome.
    Ack,
    AtomicAck,
    /// COMPARE SWAP or FETCH ADD.
    Atomic,
    Flush,
    AtomicWrite,
    /// A congestion notification (RoCEv2 CNP): no transport operation; the engine's
    /// congestion control takes it before any role.
    Cnp,
}

impl OpcodeClass {
    /// A response a responder sends back to a requester (its completer takes it).
    pub fn is_response(self) -> bool {
        matches!(
            self,
            OpcodeClass::ReadResponse | OpcodeClass::Ack | OpcodeClass::AtomicAck
        )
    }
}

/// Which headers follow the BTH for an opcode, and what the opcode means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub class: OpcodeClass,
    pub feth: bool,
    pub ieth: bool,
    pub reth: bool,
    pub aeth: bool,
    pub atomic_eth: bool,
    pub atomic_ack_eth: bool,
    pub immdt: bool,
    pub deth: bool,
    /// XRC requests: the XRC SRQ the target QP delivers into (right after the BTH).
    pub xrceth: bool,
    /// First (or only) packet of a message.
    pub first: bool,
    /// Last (or only) packet of a message.
    pub last: bool,
}

/// Header layout of a (known) opcode; `None` for opcodes rox does not implement (dropped).
/// RC has every operation; UC only SEND and WRITE (not with invalidate); UD only SEND ONLY
/// (with or without immediate); XRC RC's but the memory placement extensions (IBA 9.2
/// defines no XRC FLUSH or ATOMIC WRITE).
///
/// Every packet in and out asks (several times): a table of all 256 answers, worked out once
/// by [`decode_opcode`], makes that one load.
pub fn opcode_info(op: u8) -> Option<OpcodeInfo> {
    static TABLE: LazyLock<[Option<OpcodeInfo>; 256]> =
        LazyLock::new(|| std::array::from_fn(|op| decode_opcode(op as u8)));
    TABLE[usize::from(op)]
}

/// The header layout of `op` ([`opcode_info`] is its table).
fn decode_opcode(op: u8) -> Option<OpcodeInfo> {
    if op == CNP {
        return Some(CNP_INFO);
    }
    let info = operation_info(op & OP_MASK)?;
    let xrc = op & CLASS_MASK == CLASS_XRC;
    let allowed = match op & CLASS_MASK {
        CLASS_RC => true,
        CLASS_UC => matches!(info.class, OpcodeClass::Send | OpcodeClass::Write) && !info.ieth,
        CLASS_UD => info.class == OpcodeClass::Send && info.first && info.last && !info.ieth,
        CLASS_XRC => !matches!(info.class, OpcodeClass::Flush | OpcodeClass::AtomicWrite),
        _ => false,
    };
    allowed.then_some(OpcodeInfo {
        deth: op & CLASS_MASK == CLASS_UD,
        xrceth: xrc && !info.class.is_response(),
        ..info
    })
}

/// A CNP: the BTH only (its reserved bytes parse as the payload).
const CNP_INFO: OpcodeInfo = OpcodeInfo {
    class: OpcodeClass::Cnp,
    feth: false,
    ieth: false,
    reth: false,
    aeth: false,
    atomic_eth: false,
    atomic_ack_eth: false,
    immdt: false,
    deth: false,
    xrceth: false,
    first: true,
    last: true,
};

/// The class and headers of an operation (the low 5 bits), as on RC.
fn operation_info(base: u8) -> Option<OpcodeInfo> {
    let class = match base {
        RC_SEND_FIRST..=RC_SEND_ONLY_IMM | RC_SEND_LAST_INV | RC_SEND_ONLY_INV => OpcodeClass::Send,
        RC_WRITE_FIRST..=RC_WRITE_ONLY_IMM => OpcodeClass::Write,
        RC_READ_REQUEST => OpcodeClass::ReadRequest,
        RC_READ_RESPONSE_FIRST..=RC_READ_RESPONSE_ONLY => OpcodeClass::ReadResponse,
        RC_ACKNOWLEDGE => OpcodeClass::Ack,
        RC_ATOMIC_ACKNOWLEDGE => OpcodeClass::AtomicAck,
        RC_COMPARE_SWAP | RC_FETCH_ADD => OpcodeClass::Atomic,
        RC_FLUSH => OpcodeClass::Flush,
        RC_ATOMIC_WRITE => OpcodeClass::AtomicWrite,
        _ => return None,
    };
    let (first, last) = match base {
        RC_SEND_FIRST | RC_WRITE_FIRST | RC_READ_RESPONSE_FIRST => (true, false),
        RC_SEND_MIDDLE | RC_WRITE_MIDDLE | RC_READ_RESPONSE_MIDDLE => (false, false),
        RC_SEND_LAST
        | RC_SEND_LAST_IMM
        | RC_SEND_LAST_INV
        | RC_WRITE_LAST
        | RC_WRITE_LAST_IMM
        | RC_READ_RESPONSE_LAST => (false, true),
        _ => (true, true),
    };
    Some(OpcodeInfo {
        class,
        feth: class == OpcodeClass::Flush,
        ieth: matches!(base, RC_SEND_LAST_INV | RC_SEND_ONLY_INV),
        // WRITE's first packet, READ, FLUSH and ATOMIC WRITE name their target.
        reth: match class {
            OpcodeClass::Write => first,
            OpcodeClass::ReadRequest | OpcodeClass::Flush | OpcodeClass::AtomicWrite => true,
            _ => false,
        },
        // Every response but a READ RESPONSE MIDDLE carries the MSN.
        aeth: class.is_response() && (first || last),
        atomic_eth: class == OpcodeClass::Atomic,
        atomic_ack_eth: class == OpcodeClass::AtomicAck,
        immdt: matches!(
            base,
            RC_SEND_LAST_IMM | RC_SEND_ONLY_IMM | RC_WRITE_LAST_IMM | RC_WRITE_ONLY_IMM
        ),
        deth: false,
        xrceth: false,
        first,
        last,
    })
}

impl OpcodeInfo {
    /// Bytes of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN
            + if self.xrceth { XRCETH_LEN } else { 0 }
            + if self.deth { DETH_LEN } else { 0 }
            + if self.feth { FETH_LEN } else { 0 }
            + if self.reth { RETH_LEN } else { 0 }
            + if self.atomic_eth { ATOMIC_ETH_LEN } else { 0 }
            + if self.aeth { AETH_LEN } else { 0 }
            + if self.atomic_ack_eth {
                ATOMIC_ACK_ETH_LEN
            } else {
                0
            }
            + if self.immdt { IMMDT_LEN } else { 0 }
            + if self.ieth { IETH_LEN } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_class() {
        use OpcodeClass::*;
        let expect = [
            (RC_SEND_FIRST, Send),
            (RC_SEND_MIDDLE, Send),
            (RC_SEND_LAST, Send),
            (RC_SEND_LAST_IMM, Send),
            (RC_SEND_ONLY, Send),
            (RC_SEND_ONLY_IMM, Send),
            (RC_SEND_LAST_INV, Send),
            (RC_SEND_ONLY_INV, Send),
            (RC_WRITE_FIRST, Write),
            (RC_WRITE_MIDDLE, Write),
            (RC_WRITE_LAST, Write),
            (RC_WRITE_LAST_IMM, Write),
            (RC_WRITE_ONLY, Write),
            (RC_WRITE_ONLY_IMM, Write),
            (RC_READ_REQUEST, ReadRequest),
            (RC_READ_RESPONSE_FIRST, ReadResponse),
            (RC_READ_RESPONSE_MIDDLE, ReadResponse),
            (RC_READ_RESPONSE_LAST, ReadResponse),
            (RC_READ_RESPONSE_ONLY, ReadResponse),
            (RC_ACKNOWLEDGE, Ack),
            (RC_ATOMIC_ACKNOWLEDGE, AtomicAck),
            (RC_COMPARE_SWAP, Atomic),
            (RC_FETCH_ADD, Atomic),
            (RC_FLUSH, Flush),
            (RC_ATOMIC_WRITE, AtomicWrite),
        ];
        for (op, class) in expect {
            assert_eq!(opcode_info(op).map(|i| i.class), Some(class), "{op:#04x}");
        }
        let known: Vec<u8> = (0..=OP_MASK)
            .filter(|&b| opcode_info(b).is_some())
            .collect();
        assert_eq!(
            known.len(),
            expect.len(),
            "RC knows exactly these: {known:x?}"
        );
    }

    /// Which headers each opcode has: feth ieth reth aeth atomic_eth atomic_ack_eth immdt deth
    /// first last (IBA table 38, the memory placement extensions and RoCEv2).
    #[test]
    fn header_layout_of_every_opcode() {
        let expect = [
            (0x00, "0000000010"),
            (0x01, "0000000000"),
            (0x02, "0000000001"),
            (0x03, "0000001001"),
            (0x04, "0000000011"),
            (0x05, "0000001011"),
            (0x06, "0010000010"),
            (0x07, "0000000000"),
            (0x08, "0000000001"),
            (0x09, "0000001001"),
            (0x0a, "0010000011"),
            (0x0b, "0010001011"),
            (0x0c, "0010000011"),
            (0x0d, "0001000010"),
            (0x0e, "0000000000"),
            (0x0f, "0001000001"),
            (0x10, "0001000011"),
            (0x11, "0001000011"),
            (0x12, "0001010011"),
            (0x13, "0000100011"),
            (0x14, "0000100011"),
            (0x16, "0100000001"),
            (0x17, "0100000011"),
            (0x1c, "1010000011"),
            (0x1d, "0010000011"),
            (0x20, "0000000010"),
            (0x21, "0000000000"),
            (0x22, "0000000001"),
            (0x23, "0000001001"),
            (0x24, "0000000011"),
            (0x25, "0000001011"),
            (0x26, "0010000010"),
            (0x27, "0000000000"),
            (0x28, "0000000001"),
            (0x29, "0000001001"),
            (0x2a, "0010000011"),
            (0x2b, "0010001011"),
            (0x64, "0000000111"),
            (0x65, "0000001111"),
            (CNP, "0000000011"),
        ];
        let b = |x: bool| if x { '1' } else { '0' };
        let known: Vec<(u8, String)> = (0..=u8::MAX)
            .filter(|&op| op & CLASS_MASK != CLASS_XRC)
            .filter_map(|op| {
                let i = opcode_info(op)?;
                let flags = [
                    i.feth,
                    i.ieth,
                    i.reth,
                    i.aeth,
                    i.atomic_eth,
                    i.atomic_ack_eth,
                    i.immdt,
                    i.deth,
                    i.first,
                    i.last,
                ];
                Some((op, flags.into_iter().map(b).collect()))
            })
            .collect();
        let expect: Vec<(u8, String)> = expect.iter().map(|&(o, f)| (o, f.to_string())).collect();
        assert_eq!(known, expect);
    }

    #[test]
    fn responses_are_the_completers_classes() {
        let responses: Vec<u8> = (0..=OP_MASK)
            .filter(|&b| opcode_info(b).is_some_and(|i| i.class.is_response()))
            .collect();
        assert_eq!(
            responses,
            (RC_READ_RESPONSE_FIRST..=RC_ATOMIC_ACKNOWLEDGE).collect::<Vec<u8>>()
        );
    }

    #[test]
    fn uc_carries_send_and_write_only_ud_send_only() {
        let uc: Vec<u8> = (0..=OP_MASK)
            .filter(|&b| opcode_info(CLASS_UC | b).is_some())
            .collect();
        assert_eq!(uc, (RC_SEND_FIRST..=RC_WRITE_ONLY_IMM).collect::<Vec<u8>>());
        let ud: Vec<u8> = (0..=u8::MAX)
            .filter(|&o| opcode_info(o).is_some_and(|i| i.deth))
            .collect();
        assert_eq!(ud, [UD_SEND_ONLY, UD_SEND_ONLY_IMM]);
        // No other transport bits are a transport rox speaks; the CNP class has the CNP.
        let cnp_class: Vec<u8> = (0..=OP_MASK)
            .filter(|&b| opcode_info(CLASS_CNP | b).is_some())
            .map(|b| CLASS_CNP | b)
            .collect();
        assert_eq!(cnp_class, [CNP]);
        assert_eq!(opcode_info(CNP).unwrap().class, OpcodeClass::Cnp);
        assert_eq!(opcode_info(CNP).unwrap().header_len(), BTH_LEN);
    }

    #[test]
    fn first_and_last_mark_message_boundaries() {
        let only = opcode_info(RC_SEND_ONLY_IMM).unwrap();
        assert!(only.first && only.last && only.immdt);
        let middle = opcode_info(CLASS_UC | RC_WRITE_MIDDLE).unwrap();
        assert!(!middle.first && !middle.last && !middle.reth);
        let first = opcode_info(RC_READ_RESPONSE_FIRST).unwrap();
        assert!(first.first && !first.last && first.aeth);
    }
}
