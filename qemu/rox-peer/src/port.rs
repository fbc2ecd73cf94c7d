//! The peer's Ethernet port: a raw AF_PACKET socket on one interface of the lab bridge.
//!
//! Frames leave as Ethernet + a RoCEv2 IP packet built by rox-nic's `roce::wire` (so their
//! ICRC is computed the one way rox computes it); frames arriving are kept only if they are
//! IPv4 RoCEv2 packets from the guest this session talks to, with a valid ICRC.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use rox_nic::roce::wire::{self, Headers, IpInfo};

const ETH_HEADER_LEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_ALL: u16 = 0x0003;
/// Big enough for a 9000-byte lab MTU frame plus slack.
const FRAME_BUF: usize = 16 * 1024;
/// RoCEv2 packets the peer sends: the TTL and traffic class rdma_rxe uses by default.
const HOP_LIMIT: u8 = 64;
const IPV4_SRC: usize = 12;

pub type Mac = [u8; 6];

/// A received RoCEv2 packet (owned, ICRC checked).
#[derive(Clone, Debug)]
pub struct Rx {
    pub hdr: Headers,
    pub payload: Vec<u8>,
}

pub struct Port {
    fd: OwnedFd,
    ifindex: i32,
    pub mac: Mac,
    pub ip: [u8; 4],
}

impl Port {
    /// Opens a raw socket on `iface` (needs CAP_NET_RAW: the lab's host command runs as root).
    pub fn open(iface: &str, ip: [u8; 4]) -> io::Result<Port> {
        let mac = read_mac(iface)?;
        let name = std::ffi::CString::new(iface).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: if_nametoindex reads a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        let proto = ETH_P_ALL.to_be();
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let addr = sockaddr_ll(ifindex, proto, &[0; 6]);
        // SAFETY: `addr` is a valid sockaddr_ll for the duration of the call.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Port {
            fd,
            ifindex,
            mac,
            ip,
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends one RoCEv2 packet (`hdr`, `payload`) from this port to `dst`.
    pub fn send(&self, dst: &Endpoint, src_port: u16, hdr: &Headers, payload: &[u8]) {
        let ip = IpInfo {
            sgid: wire::ipv4_gid(self.ip),
            dgid: wire::ipv4_gid(dst.ip),
            traffic_class: 0,
            hop_limit: HOP_LIMIT,
            flow_label: 0,
            src_port,
        };
        let packet = wire::build_packet(&ip, hdr, payload);
        let mut frame = Vec::with_capacity(ETH_HEADER_LEN + packet.len());
        frame.extend_from_slice(&dst.mac);
        frame.extend_from_slice(&self.mac);
        frame.extend_from_slice(&ETH_P_IP.to_be_bytes());
        frame.extend_from_slice(&packet);
        let addr = sockaddr_ll(self.ifindex, ETH_P_IP.to_be(), &dst.mac);
        // SAFETY: `frame` and `addr` are valid for the duration of the call.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            // A frame the kernel refuses is a bug of this program, not of the device under test.
            panic!("rox-peer: sendto: {}", io::Error::last_os_error());
        }
    }

    /// Reads one frame (the socket must be readable) and returns it if it is a valid RoCEv2
    /// packet from `from` (its source MAC is remembered in `from`).
    pub fn recv_from(&self, from: &mut Endpoint) -> Option<Rx> {
        let mut buf = vec![0u8; FRAME_BUF];
        // SAFETY: `buf` is writable for its whole length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            return None;
        }
        let frame = &buf[..n as usize];
        let packet = roce_packet_from(frame, from.ip)?;
        let parsed = wire::parse_packet(packet).ok()?;
        from.mac.copy_from_slice(&frame[6..12]);
        Some(Rx {
            hdr: parsed.hdr,
            payload: parsed.payload.to_vec(),
        })
    }
}

/// The IPv4 packet of `frame` if it is IPv4 from `src_ip` (anything else: None).
fn roce_packet_from(frame: &[u8], src_ip: [u8; 4]) -> Option<&[u8]> {
    if frame.len() < ETH_HEADER_LEN + wire::IPV4_HEADER_LEN
        || frame[12..14] != ETH_P_IP.to_be_bytes()
    {
        return None;
    }
    let packet = &frame[ETH_HEADER_LEN..];
    if packet[IPV4_SRC..IPV4_SRC + 4] != src_ip {
        return None;
    }
    // A frame may carry Ethernet padding after a short IP packet: cut it to the IP length.
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    packet.get(..total)
}

/// The other end: the guest's address on the lab link.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint {
    pub ip: [u8; 4],
    pub mac: Mac,
}

fn sockaddr_ll(ifindex: i32, proto_be: u16, mac: &Mac) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as u16;
    a.sll_protocol = proto_be;
    a.sll_ifindex = ifindex;
    a.sll_halen = 6;
    a.sll_addr[..6].copy_from_slice(mac);
    a
}

pub fn parse_mac(text: &str) -> Option<Mac> {
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for b in mac.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn read_mac(iface: &str) -> io::Result<Mac> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))?;
    parse_mac(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad MAC"))
}

/// The MAC the kernel's neighbour table holds for `ip` (the guest talked TCP to us, so it is
/// there), from /proc/net/arp.
pub fn arp_lookup(ip: [u8; 4]) -> Option<Mac> {
    let table = std::fs::read_to_string("/proc/net/arp").ok()?;
    let want = std::net::Ipv4Addr::from(ip).to_string();
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.first() == Some(&want.as_str()))
            .then(|| cols.get(3).and_then(|m| parse_mac(m)))
            .flatten()
            .filter(|m| *m != [0; 6])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_text_round_trips_and_rejects_junk() {
        assert_eq!(
            parse_mac("52:54:00:52:4f:00\n"),
            Some([0x52, 0x54, 0, 0x52, 0x4f, 0])
        );
        assert_eq!(parse_mac("52:54:00:52:4f"), None);
        assert_eq!(parse_mac("52:54:00:52:4f:00:11"), None);
        assert_eq!(parse_mac("zz:54:00:52:4f:00"), None);
    }

    #[test]
    fn only_ipv4_from_the_guest_is_taken_and_padding_is_cut() {
        let guest = [10, 50, 0, 11];
        let mut frame = vec![0u8; 14];
        frame[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        let mut ip = vec![0u8; 20];
        ip[2..4].copy_from_slice(&24u16.to_be_bytes());
        ip[12..16].copy_from_slice(&guest);
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&[1, 2, 3, 4, 0, 0]); // 4 bytes of packet, 2 of padding
        assert_eq!(roce_packet_from(&frame, guest).map(<[u8]>::len), Some(24));
        assert!(roce_packet_from(&frame, [10, 50, 0, 21]).is_none());
        frame[12] = 0x86;
        assert!(roce_packet_from(&frame, guest).is_none());
    }
}
