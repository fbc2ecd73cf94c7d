//! The performance management agent's answers (IBA vol. 1, 16.1: the PerfMgt class): the MAD
//! layouts of ClassPortInfo, PortCounters and PortCountersExtended and how the port's counters
//! ([`PortCounters`] of QUERY_COUNTERS) fill them. rox.ko's `process_mad` answers through
//! [`answer`]; ib_core reads `ports/<p>/counters/*` in sysfs this way, and perfquery and
//! monitoring agents read the same answers.
//!
//! MADs are 256 bytes, big-endian on the wire: a 24-byte common header, then for PerfMgt 40
//! reserved bytes and the attribute from byte 64.

use super::admin::PortCounters;

pub const MAD_SIZE: usize = 256;
pub type Mad = [u8; MAD_SIZE];

pub const MGMT_CLASS_PERF_MGMT: u8 = 0x04;
pub const METHOD_GET: u8 = 0x01;
pub const METHOD_SET: u8 = 0x02;
pub const METHOD_GET_RESP: u8 = 0x81;
pub const ATTR_CLASS_PORT_INFO: u16 = 0x0001;
pub const ATTR_PORT_COUNTERS: u16 = 0x0012;
pub const ATTR_PORT_COUNTERS_EXT: u16 = 0x001d;
/// MAD status: the class or base version is not supported.
pub const STATUS_BAD_VERSION: u16 = 0x0004;
/// MAD status: the method/attribute combination is not supported.
pub const STATUS_UNSUPPORTED_METHOD_ATTR: u16 = 0x000c;
/// MAD status: an attribute field (here PortSelect) is invalid.
pub const STATUS_INVALID_FIELD: u16 = 0x001c;
/// ClassPortInfo CapabilityMask: PortCountersExtended is supported in full (IETF counters
/// included), so ib_core shows the 64-bit counters in sysfs.
pub const CAP_EXT_WIDTH: u16 = 1 << 9;
/// PortSelect value meaning "all ports" (rox has one: the same answer).
pub const PORT_SELECT_ALL: u8 = 0xff;
/// ClassPortInfo RespTimeValue: 2^18 * 4.096 us (about 1 s), what HCAs commonly report.
const RESP_TIME_VALUE: u32 = 18;

// Common header offsets.
const HDR_BASE_VERSION: usize = 0;
const HDR_MGMT_CLASS: usize = 1;
const HDR_CLASS_VERSION: usize = 2;
const HDR_METHOD: usize = 3;
const HDR_STATUS: usize = 4;
const HDR_ATTR_ID: usize = 16;
/// Where a PerfMgt attribute starts.
pub const ATTR_OFFSET: usize = 64;
/// ib_core puts PortSelect (byte 1 of the PortCounters attributes) here.
const PORT_SELECT: usize = ATTR_OFFSET + 1;

// PortCounters field offsets (from the attribute's start).
const PC_RCV_ERRORS: usize = 8;
const PC_XMIT_DISCARDS: usize = 14;
const PC_XMIT_DATA: usize = 24;
const PC_RCV_DATA: usize = 28;
const PC_XMIT_PKTS: usize = 32;
const PC_RCV_PKTS: usize = 36;
// PortCountersExtended field offsets (all 64 bits).
const PCE_XMIT_DATA: usize = 8;
const PCE_RCV_DATA: usize = 16;
const PCE_XMIT_PKTS: usize = 24;
const PCE_RCV_PKTS: usize = 32;
const PCE_UNICAST_XMIT_PKTS: usize = 40;
const PCE_UNICAST_RCV_PKTS: usize = 48;
const PCE_MULTICAST_XMIT_PKTS: usize = 56;
const PCE_MULTICAST_RCV_PKTS: usize = 64;
// ClassPortInfo field offsets.
const CPI_BASE_VERSION: usize = 0;
const CPI_CLASS_VERSION: usize = 1;
const CPI_CAPABILITY_MASK: usize = 2;
const CPI_RESP_TIME: usize = 4;

/// What `process_mad` does with a MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Not a PerfMgt request: ib_core's MAD layer handles it (CM, SA, responses, ...).
    NotOurs,
    /// The response is in the out MAD.
    Reply,
}

/// PortXmitData and PortRcvData count 4-octet words (IBA 16.1.3.5).
pub const fn data_words(octets: u64) -> u64 {
    octets / 4
}

/// Answers PerfMgt request `mad` of `port` into `out`. `read` reads the port's counters; it is
/// called only for the counter attributes, and its error is returned as is.
pub fn answer<E>(
    mad: &Mad,
    out: &mut Mad,
    port: u8,
    read: impl FnOnce() -> Result<PortCounters, E>,
) -> Result<Answer, E> {
    let method = mad[HDR_METHOD];
    if mad[HDR_MGMT_CLASS] != MGMT_CLASS_PERF_MGMT || !matches!(method, METHOD_GET | METHOD_SET) {
        return Ok(Answer::NotOurs);
    }
    *out = *mad;
    out[HDR_METHOD] = METHOD_GET_RESP;
    let attr = u16::from_be_bytes([mad[HDR_ATTR_ID], mad[HDR_ATTR_ID + 1]]);
    let port_select = mad[PORT_SELECT];
    let status = if mad[HDR_BASE_VERSION] != 1 || mad[HDR_CLASS_VERSION] != 1 {
        STATUS_BAD_VERSION
    } else if method != METHOD_GET {
        // Counters are read-only here (no SET to clear them: they are free-running).
        STATUS_UNSUPPORTED_METHOD_ATTR
    } else {
        match attr {
            ATTR_CLASS_PORT_INFO => {
                class_port_info(attribute(out));
                0
            }
            ATTR_PORT_COUNTERS | ATTR_PORT_COUNTERS_EXT
                if port_select != port && port_select != PORT_SELECT_ALL =>
            {
                STATUS_INVALID_FIELD
            }
            ATTR_PORT_COUNTERS => {
                port_counters(attribute(out), &read()?);
                0
            }
            ATTR_PORT_COUNTERS_EXT => {
                port_counters_ext(attribute(out), &read()?);
                0
            }
            _ => STATUS_UNSUPPORTED_METHOD_ATTR,
        }
    };
    out[HDR_STATUS..HDR_STATUS + 2].copy_from_slice(&status.to_be_bytes());
    Ok(Answer::Reply)
}

fn attribute(out: &mut Mad) -> &mut [u8] {
    &mut out[ATTR_OFFSET..]
}

fn put_be16(a: &mut [u8], at: usize, v: u16) {
    a[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put_be32(a: &mut [u8], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put_be64(a: &mut [u8], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// The narrow PortCounters fields stop at their maximum (IBA 16.1.3.5), never wrap.
fn saturate16(v: u64) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

fn saturate32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn class_port_info(a: &mut [u8]) {
    a[CPI_BASE_VERSION] = 1;
    a[CPI_CLASS_VERSION] = 1;
    put_be16(a, CPI_CAPABILITY_MASK, CAP_EXT_WIDTH);
    put_be32(a, CPI_RESP_TIME, RESP_TIME_VALUE);
}

fn port_counters(a: &mut [u8], c: &PortCounters) {
    put_be16(a, PC_RCV_ERRORS, saturate16(c.rcv_errors));
    put_be16(a, PC_XMIT_DISCARDS, saturate16(c.xmit_discards));
    put_be32(a, PC_XMIT_DATA, saturate32(data_words(c.xmit_octets)));
    put_be32(a, PC_RCV_DATA, saturate32(data_words(c.rcv_octets)));
    put_be32(a, PC_XMIT_PKTS, saturate32(c.xmit_packets));
    put_be32(a, PC_RCV_PKTS, saturate32(c.rcv_packets));
}

fn port_counters_ext(a: &mut [u8], c: &PortCounters) {
    put_be64(a, PCE_XMIT_DATA, data_words(c.xmit_octets));
    put_be64(a, PCE_RCV_DATA, data_words(c.rcv_octets));
    put_be64(a, PCE_XMIT_PKTS, c.xmit_packets);
    put_be64(a, PCE_RCV_PKTS, c.rcv_packets);
    let unicast_xmit = c.xmit_packets.saturating_sub(c.xmit_multicast_packets);
    let unicast_rcv = c.rcv_packets.saturating_sub(c.rcv_multicast_packets);
    put_be64(a, PCE_UNICAST_XMIT_PKTS, unicast_xmit);
    put_be64(a, PCE_UNICAST_RCV_PKTS, unicast_rcv);
    put_be64(a, PCE_MULTICAST_XMIT_PKTS, c.xmit_multicast_packets);
    put_be64(a, PCE_MULTICAST_RCV_PKTS, c.rcv_multicast_packets);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(attr: u16, port_select: u8) -> Mad {
        let mut m = [0u8; MAD_SIZE];
        m[HDR_BASE_VERSION] = 1;
        m[HDR_MGMT_CLASS] = MGMT_CLASS_PERF_MGMT;
        m[HDR_CLASS_VERSION] = 1;
        m[HDR_METHOD] = METHOD_GET;
        m[HDR_ATTR_ID..HDR_ATTR_ID + 2].copy_from_slice(&attr.to_be_bytes());
        m[PORT_SELECT] = port_select;
        m
    }

    fn counters() -> PortCounters {
        PortCounters {
            xmit_packets: 10,
            xmit_octets: 4003,
            xmit_multicast_packets: 3,
            rcv_packets: 7,
            rcv_octets: 1 << 40,
            rcv_multicast_packets: 2,
            rcv_errors: 70_000,
            xmit_discards: 5,
            ..Default::default()
        }
    }

    fn be16(m: &Mad, at: usize) -> u16 {
        u16::from_be_bytes([m[at], m[at + 1]])
    }
    fn be32(m: &Mad, at: usize) -> u32 {
        u32::from_be_bytes(m[at..at + 4].try_into().unwrap())
    }
    fn be64(m: &Mad, at: usize) -> u64 {
        u64::from_be_bytes(m[at..at + 8].try_into().unwrap())
    }

    fn ask(mad: &Mad) -> (Answer, Mad) {
        let mut out = [0xaa; MAD_SIZE];
        let a = answer(mad, &mut out, 1, || Ok::<_, ()>(counters())).unwrap();
        (a, out)
    }

    #[test]
    fn port_counters_in_iba_units_and_widths() {
        let (a, out) = ask(&request(ATTR_PORT_COUNTERS, 1));
        assert_eq!(a, Answer::Reply);
        assert_eq!(out[HDR_METHOD], METHOD_GET_RESP);
        assert_eq!(be16(&out, HDR_STATUS), 0);
        let at = ATTR_OFFSET;
        assert_eq!(be16(&out, at + PC_RCV_ERRORS), u16::MAX, "saturates");
        assert_eq!(be16(&out, at + PC_XMIT_DISCARDS), 5);
        assert_eq!(be32(&out, at + PC_XMIT_DATA), 1000, "4-octet words");
        assert_eq!(be32(&out, at + PC_RCV_DATA), u32::MAX, "saturates");
        assert_eq!(be32(&out, at + PC_XMIT_PKTS), 10);
        assert_eq!(be32(&out, at + PC_RCV_PKTS), 7);
    }

    #[test]
    fn port_counters_extended_are_64_bit() {
        let (_, out) = ask(&request(ATTR_PORT_COUNTERS_EXT, PORT_SELECT_ALL));
        let at = ATTR_OFFSET;
        assert_eq!(be16(&out, HDR_STATUS), 0);
        assert_eq!(be64(&out, at + PCE_XMIT_DATA), 1000);
        assert_eq!(be64(&out, at + PCE_RCV_DATA), 1 << 38);
        assert_eq!(be64(&out, at + PCE_XMIT_PKTS), 10);
        assert_eq!(be64(&out, at + PCE_RCV_PKTS), 7);
        assert_eq!(be64(&out, at + PCE_UNICAST_XMIT_PKTS), 7);
        assert_eq!(be64(&out, at + PCE_UNICAST_RCV_PKTS), 5);
        assert_eq!(be64(&out, at + PCE_MULTICAST_XMIT_PKTS), 3);
        assert_eq!(be64(&out, at + PCE_MULTICAST_RCV_PKTS), 2);
    }

    #[test]
    fn class_port_info_announces_extended_counters() {
        let (_, out) = ask(&request(ATTR_CLASS_PORT_INFO, 0));
        assert_eq!(be16(&out, HDR_STATUS), 0);
        assert_eq!(be16(&out, ATTR_OFFSET + CPI_CAPABILITY_MASK), CAP_EXT_WIDTH);
    }

    #[test]
    fn bad_requests_get_a_status_not_counters() {
        let never_read = |mad: &Mad| {
            let mut out = [0; MAD_SIZE];
            let a = answer(mad, &mut out, 1, || -> Result<PortCounters, ()> {
                panic!("counters read for a refused request")
            });
            (a.unwrap(), be16(&out, HDR_STATUS))
        };
        let other_port = request(ATTR_PORT_COUNTERS, 2);
        assert_eq!(
            never_read(&other_port),
            (Answer::Reply, STATUS_INVALID_FIELD)
        );
        let mut set = request(ATTR_PORT_COUNTERS, 1);
        set[HDR_METHOD] = METHOD_SET;
        assert_eq!(
            never_read(&set),
            (Answer::Reply, STATUS_UNSUPPORTED_METHOD_ATTR)
        );
        let unknown = request(0x0016, 1);
        assert_eq!(
            never_read(&unknown),
            (Answer::Reply, STATUS_UNSUPPORTED_METHOD_ATTR)
        );
        let mut v2 = request(ATTR_PORT_COUNTERS, 1);
        v2[HDR_CLASS_VERSION] = 2;
        assert_eq!(never_read(&v2), (Answer::Reply, STATUS_BAD_VERSION));
    }

    #[test]
    fn other_classes_and_responses_are_not_ours() {
        let mut cm = request(ATTR_PORT_COUNTERS, 1);
        cm[HDR_MGMT_CLASS] = 0x07;
        let mut resp = request(ATTR_PORT_COUNTERS, 1);
        resp[HDR_METHOD] = METHOD_GET_RESP;
        for mad in [cm, resp] {
            let mut out = [0x55; MAD_SIZE];
            let a = answer(&mad, &mut out, 1, || Ok::<_, ()>(counters())).unwrap();
            assert_eq!(a, Answer::NotOurs);
            assert_eq!(out, [0x55; MAD_SIZE], "out untouched");
        }
    }

    #[test]
    fn read_errors_propagate() {
        let mut out = [0; MAD_SIZE];
        let r = answer(&request(ATTR_PORT_COUNTERS_EXT, 1), &mut out, 1, || Err(7));
        assert_eq!(r, Err(7));
    }
}
