//! One trace record and the dump file that holds a ring's records: fixed 32-byte little-endian
//! records behind a 24-byte header, so a dump is written without formatting and read back by
//! `rox-trace` on any host.

use std::io::{self, Read, Write};

/// What happened (the record's fields mean what each kind says).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The data path saw new SQ WQEs: `a` the producer index, `b` how many are new.
    Doorbell = 1,
    /// A send WQE was read from guest memory: `a` its SQ index, `b` its length in bytes, `op`
    /// the WR opcode (`WR_*`), `wr_id`.
    WqeFetch = 2,
    /// The requester gave the WQE its PSNs (its first packet follows): `a` the first PSN,
    /// `b` the PSNs it takes, `wr_id`.
    WqeStart = 3,
    /// A packet left the QP: `a` its PSN, `b` its payload length, `op` the BTH opcode.
    FrameOut = 4,
    /// An ACK, NAK, READ response or atomic ACK arrived for the requester: `a` its PSN, `b`
    /// the AETH syndrome byte (`NO_SYNDROME` without one), `op` the BTH opcode.
    ResponseIn = 5,
    /// The requester went back to `a` (a PSN) to send again: `b` a [`Retransmit`] reason.
    Retransmit = 6,
    /// A CQE was written: `a` its status, `b` the CQ, `op` the WC opcode, `flags` [`CQE_RECV`]
    /// for a receive completion, `wr_id`.
    Cqe = 7,
    /// An EQE was written: `qpn` its handle (a CQ for a completion event), `a` the EQ, `op`
    /// its type (`EQE_TYPE_*`).
    Eqe = 8,
    /// An MSI-X interrupt was raised: `a` the vector.
    Interrupt = 9,
    /// A well-formed RoCEv2 packet reached the device (before the transport looks at it):
    /// `qpn` its destination QP, `a` its PSN, `b` its payload length, `op` the BTH opcode.
    FrameIn = 10,
    /// The data-path thread's wait (a nap while backing off, or the idle sleep) ended: `a`
    /// how long it waited (µs), `b` the timeout it asked for (µs, `u32::MAX` for none),
    /// `flags` [`WAIT_IDLE`] for the idle sleep (the doorbell pages said the device was idle).
    Wait = 11,
    /// The wake register was written (a vCPU's trapped write reached the device's server
    /// thread; the vCPU waits for the reply).
    Wake = 12,
}

impl Kind {
    /// Every kind (the values a record's kind byte may hold).
    pub const ALL: [Kind; 12] = [
        Kind::Doorbell,
        Kind::WqeFetch,
        Kind::WqeStart,
        Kind::FrameOut,
        Kind::ResponseIn,
        Kind::Retransmit,
        Kind::Cqe,
        Kind::Eqe,
        Kind::Interrupt,
        Kind::FrameIn,
        Kind::Wait,
        Kind::Wake,
    ];

    pub fn from_u8(v: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|&k| k as u8 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Doorbell => "doorbell",
            Kind::WqeFetch => "fetch",
            Kind::WqeStart => "start",
            Kind::FrameOut => "frame-out",
            Kind::ResponseIn => "response-in",
            Kind::Retransmit => "retransmit",
            Kind::Cqe => "cqe",
            Kind::Eqe => "eqe",
            Kind::Interrupt => "interrupt",
            Kind::FrameIn => "frame-in",
            Kind::Wait => "wait",
            Kind::Wake => "wake",
        }
    }
}

/// Why the requester sent PSNs again.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retransmit {
    AckTimeout = 0,
    SequenceNak = 1,
    RnrNak = 2,
    /// A READ response was missing (responses arrive in order): asked again from it.
    ReadGap = 3,
}

/// `ResponseIn.b` of a response without an AETH.
pub const NO_SYNDROME: u32 = 0x100;
/// `Cqe.flags`: a receive completion.
pub const CQE_RECV: u16 = 1;
/// `Wait.flags`: the idle sleep, not a nap.
pub const WAIT_IDLE: u16 = 1;

/// One timestamped event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    pub wr_id: u64,
    pub qpn: u32,
    pub a: u32,
    pub b: u32,
    /// A [`Kind`].
    pub kind: u8,
    pub op: u8,
    pub flags: u16,
}

pub const RECORD_SIZE: usize = 32;
const MAGIC: &[u8; 8] = b"ROXWQET1";
const HEADER_SIZE: usize = 24;

impl Record {
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_u8(self.kind)
    }

    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        b[0..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[8..16].copy_from_slice(&self.wr_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.qpn.to_le_bytes());
        b[20..24].copy_from_slice(&self.a.to_le_bytes());
        b[24..28].copy_from_slice(&self.b.to_le_bytes());
        b[28] = self.kind;
        b[29] = self.op;
        b[30..32].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; RECORD_SIZE]) -> Record {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Record {
            ts_ns: u64_at(0),
            wr_id: u64_at(8),
            qpn: u32_at(16),
            a: u32_at(20),
            b: u32_at(24),
            kind: b[28],
            op: b[29],
            flags: u16::from_le_bytes([b[30], b[31]]),
        }
    }
}

/// A ring's contents as dumped: the records (oldest first) and how many older ones the ring
/// overwrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    pub records: Vec<Record>,
    pub overwritten: u64,
}

impl Dump {
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let mut header = [0u8; HEADER_SIZE];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&self.overwritten.to_le_bytes());
        header[16..24].copy_from_slice(&(self.records.len() as u64).to_le_bytes());
        w.write_all(&header)?;
        for r in &self.records {
            w.write_all(&r.encode())?;
        }
        w.flush()
    }

    /// Reads a dump; a file that is not one, or is cut short, is an error.
    pub fn read_from(r: &mut impl Read) -> io::Result<Dump> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let mut header = [0u8; HEADER_SIZE];
        r.read_exact(&mut header)
            .map_err(|_| bad("not a rox-nic WQE trace (too short)"))?;
        if &header[..8] != MAGIC {
            return Err(bad("not a rox-nic WQE trace (bad magic)"));
        }
        let overwritten = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        let count = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
        let mut records = Vec::new();
        let mut buf = [0u8; RECORD_SIZE];
        for _ in 0..count {
            r.read_exact(&mut buf)
                .map_err(|_| bad("WQE trace cut short"))?;
            records.push(Record::decode(&buf));
        }
        Ok(Dump {
            records,
            overwritten,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            ts_ns: 0x0102_0304_0506_0708,
            wr_id: u64::MAX - 1,
            qpn: 0x12,
            a: 0xff_fffe,
            b: 4096,
            kind: Kind::FrameOut as u8,
            op: 0x0a,
            flags: CQE_RECV,
        }
    }

    #[test]
    fn a_record_survives_encoding() {
        let r = sample();
        assert_eq!(Record::decode(&r.encode()), r);
        assert_eq!(r.kind(), Some(Kind::FrameOut));
        assert_eq!(r.encode()[28], Kind::FrameOut as u8);
    }

    #[test]
    fn every_kind_round_trips_through_its_byte() {
        for v in 0..=255u8 {
            if let Some(k) = Kind::from_u8(v) {
                assert_eq!(k as u8, v);
            }
        }
        assert_eq!(Kind::from_u8(0), None);
        assert_eq!(Kind::from_u8(10), Some(Kind::FrameIn));
        assert_eq!(Kind::from_u8(12), Some(Kind::Wake));
        assert_eq!(Kind::from_u8(13), None);
    }

    #[test]
    fn a_dump_reads_back_and_a_short_or_foreign_file_is_refused() {
        let d = Dump {
            records: vec![sample(), Record::default()],
            overwritten: 7,
        };
        let mut bytes = Vec::new();
        d.write_to(&mut bytes).unwrap();
        assert_eq!(bytes.len(), HEADER_SIZE + 2 * RECORD_SIZE);
        assert_eq!(Dump::read_from(&mut &bytes[..]).unwrap(), d);
        let cut = &bytes[..bytes.len() - 1];
        assert!(Dump::read_from(&mut &cut[..]).is_err());
        let mut foreign = bytes.clone();
        foreign[0] = b'X';
        assert!(Dump::read_from(&mut &foreign[..]).is_err());
    }
}
