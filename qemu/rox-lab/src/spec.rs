//! The lab's shape and addresses: pure data, derived deterministically from the command line
//! (docs/networking.md documents the scheme; the tests below pin it).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use thiserror::Error;

/// Guests, NICs per guest and subnets are single digits: they are spelled into MACs and
/// interface names.
pub const MAX_GUESTS: usize = 9;
pub const MAX_NICS: usize = 9;
pub const MAX_SUBNETS: usize = 9;
/// The subnet of the rox-to-rox cable's two NICs (`--cable`): one no bridge has.
pub const CABLE_SUBNET: u8 = 9;

/// The IPv4 and IPv6 prefixes every lab subnet is carved from (routes in the guests point
/// these at the router).
pub const LAB_NET4: &str = "10.50.0.0/16";
pub const LAB_NET6: &str = "fd00:50::/32";

#[derive(Debug, Error, PartialEq)]
pub enum SpecError {
    #[error("unknown NIC kind '{0}' (rox or virtio)")]
    NicKind(String),
    #[error("bad subnet '{0}' (a number 0-{max})", max = MAX_SUBNETS - 1)]
    Subnet(String),
    #[error("a guest has at most {MAX_NICS} NICs, '{0}' names more")]
    TooManyNics(String),
    #[error("at most {MAX_GUESTS} guests, numbered 0-8 (--first-guest counts)")]
    TooManyGuests,
    #[error("{guests} --guest but {cmds} --cmd: give each guest exactly one command")]
    CmdCount { guests: usize, cmds: usize },
    #[error("no guest: give at least one --guest NICS --cmd CMD")]
    NoGuest,
    #[error(
        "--routed needs guests on at least two subnets (e.g. --guest rox@0 ... --guest rox@1)"
    )]
    RoutedOneSubnet,
    #[error("guests on subnets {0:?} but no --routed: only a router joins subnets")]
    SubnetsWithoutRouter(Vec<u8>),
    #[error("MTU {0} outside 1280-9000 (IPv6 needs 1280)")]
    Mtu(u32),
    #[error(
        "--cable joins the first NICs of the first two guests: both must be rox (and not --routed)"
    )]
    Cable,
    #[error("bad --nic-args '{0}' (want G=ARGS or all=ARGS: G a guest number, ARGS rox-nic options split at spaces)")]
    NicArgs(String),
    #[error("--nic-args for guest {0}, which has no rox NIC in this lab")]
    NicArgsGuest(usize),
}

/// One `--nic-args G=ARGS` argument: rox-nic options added to every rox NIC of guest G (its
/// number, as in ROX_IP_<G>_<N>), or of every guest with `all=ARGS`. ARGS is split at
/// whitespace (no quoting: rox-nic's options take no spaces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicArgs {
    /// None: every guest.
    pub guest: Option<usize>,
    pub args: Vec<String>,
}

impl FromStr for NicArgs {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let bad = || SpecError::NicArgs(s.to_string());
        let (g, rest) = s.split_once('=').ok_or_else(bad)?;
        let guest = match g {
            "all" => None,
            n => Some(n.parse::<usize>().map_err(|_| bad())?),
        };
        let args: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        if args.is_empty() {
            return Err(bad());
        }
        Ok(NicArgs { guest, args })
    }
}

/// What backs one guest NIC on the lab bridge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicKind {
    /// A rox-nic process (vfio-user RDMA device) whose port is the tap; the guest's paired
    /// virtio-net reaches the wire through rox-nic.
    Rox,
    /// A plain virtio-net NIC on the tap (what an rdma_rxe guest binds to).
    Virtio,
}

impl fmt::Display for NicKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NicKind::Rox => "rox",
            NicKind::Virtio => "virtio",
        })
    }
}

impl FromStr for NicKind {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "rox" => Ok(NicKind::Rox),
            "virtio" => Ok(NicKind::Virtio),
            other => Err(SpecError::NicKind(other.to_string())),
        }
    }
}

/// One `--guest NICS[@SUBNET]` argument: `rox,rox`, `virtio@1`, `none`.
#[derive(Clone, Debug, PartialEq)]
pub struct GuestArg {
    pub nics: Vec<NicKind>,
    pub subnet: Option<u8>,
}

impl FromStr for GuestArg {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let (nics, subnet) = match s.split_once('@') {
            Some((n, sub)) => {
                let v: u8 = sub
                    .parse()
                    .map_err(|_| SpecError::Subnet(sub.to_string()))?;
                if usize::from(v) >= MAX_SUBNETS {
                    return Err(SpecError::Subnet(sub.to_string()));
                }
                (n, Some(v))
            }
            None => (s, None),
        };
        let nics = match nics {
            "" | "none" => Vec::new(),
            list => list
                .split(',')
                .map(str::parse)
                .collect::<Result<Vec<_>, _>>()?,
        };
        if nics.len() > MAX_NICS {
            return Err(SpecError::TooManyNics(s.to_string()));
        }
        Ok(GuestArg { nics, subnet })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Nic {
    pub kind: NicKind,
    /// Index among this guest's lab NICs (the N of ROX_IP_<G>_<N>).
    pub index: usize,
    pub mac: String,
    pub ip4: Ipv4Addr,
    pub ip6: Ipv6Addr,
    /// The tap in the lab namespace (rox-nic's port, or QEMU's -netdev tap).
    pub tap: String,
    /// This rox NIC's port is an end of the lab's rox-to-rox cable instead of its tap.
    pub cable: Option<CableEnd>,
    /// More rox-nic options for this rox NIC (`--nic-args`).
    pub extra_args: Vec<String>,
}

/// The two ends of the lab's rox-to-rox cable (`--cable`): rox-nic `--port cable:listen=` and
/// `--port cable:connect=` on one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CableEnd {
    Listen,
    Connect,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Guest {
    pub index: usize,
    pub subnet: u8,
    pub nics: Vec<Nic>,
    pub cmd: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lab {
    pub mtu: u32,
    pub routed: bool,
    /// Bridges br0..br<subnets-1>, one per subnet.
    pub subnets: u8,
    pub guests: Vec<Guest>,
}

pub fn bridge_name(subnet: u8) -> String {
    format!("br{subnet}")
}

pub fn router_ip4(subnet: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 50, subnet, 254)
}

pub fn router_ip6(subnet: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x50, subnet.into(), 0, 0, 0, 0, 0xfe)
}

/// Host part of guest `g`'s NIC `n`: 10*(g+1)+n+1, so guest 0 has .11, .12, guest 1 .21 ...
pub fn host_part(guest: usize, nic: usize) -> u8 {
    u8::try_from(10 * (guest + 1) + nic + 1).expect("guest and NIC indices are single digits")
}

pub fn guest_ip4(subnet: u8, guest: usize, nic: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 50, subnet, host_part(guest, nic))
}

/// fd00:50:<subnet>::<host part>, the host part written with the same digits as in IPv4
/// (10.50.0.21 <-> fd00:50:0::21), so the two read alike.
pub fn guest_ip6(subnet: u8, guest: usize, nic: usize) -> Ipv6Addr {
    let digits = host_part(guest, nic).to_string();
    let last = u16::from_str_radix(&digits, 16).expect("decimal digits are hex digits");
    Ipv6Addr::new(0xfd00, 0x50, subnet.into(), 0, 0, 0, 0, last)
}

/// rox NICs keep the MACs of the first harness (52:54:00:52:4f = "RO"), virtio NICs use
/// 52:54:00:56:4e ("VN"); the last byte is the guest and NIC digits.
pub fn mac(kind: NicKind, guest: usize, nic: usize) -> String {
    let oui = match kind {
        NicKind::Rox => "52:54:00:52:4f",
        NicKind::Virtio => "52:54:00:56:4e",
    };
    format!("{oui}:{guest}{nic}")
}

pub fn tap_name(guest: usize, nic: usize) -> String {
    format!("g{guest}n{nic}")
}

impl Lab {
    /// Builds the lab from the repeated `--guest` and `--cmd` arguments (paired in order).
    /// Guests are numbered from `first_guest` (labs on two hosts joined by an uplink use
    /// disjoint numbers, hence disjoint MACs and addresses).
    pub fn new(
        mtu: u32,
        routed: bool,
        first_guest: usize,
        guests: &[GuestArg],
        cmds: &[String],
    ) -> Result<Lab, SpecError> {
        if !(1280..=9000).contains(&mtu) {
            return Err(SpecError::Mtu(mtu));
        }
        if guests.is_empty() {
            return Err(SpecError::NoGuest);
        }
        if guests.len() != cmds.len() {
            return Err(SpecError::CmdCount {
                guests: guests.len(),
                cmds: cmds.len(),
            });
        }
        if first_guest + guests.len() > MAX_GUESTS {
            return Err(SpecError::TooManyGuests);
        }
        let guests: Vec<Guest> = guests
            .iter()
            .zip(cmds)
            .enumerate()
            .map(|(pos, (arg, cmd))| {
                let g = first_guest + pos;
                // In the routed shape the lab's guest i sits on subnet i unless told otherwise
                // (two guests: one on each side of the router).
                let default_subnet = if routed {
                    u8::try_from(pos).expect("at most 9 guests")
                } else {
                    0
                };
                let subnet = arg.subnet.unwrap_or(default_subnet);
                let nics = arg
                    .nics
                    .iter()
                    .enumerate()
                    .map(|(n, &kind)| Nic {
                        kind,
                        index: n,
                        mac: mac(kind, g, n),
                        ip4: guest_ip4(subnet, g, n),
                        ip6: guest_ip6(subnet, g, n),
                        tap: tap_name(g, n),
                        cable: None,
                        extra_args: Vec::new(),
                    })
                    .collect();
                Guest {
                    index: g,
                    subnet,
                    nics,
                    cmd: cmd.clone(),
                }
            })
            .collect();
        let used: Vec<u8> = {
            let mut v: Vec<u8> = guests
                .iter()
                .filter(|g| !g.nics.is_empty())
                .map(|g| g.subnet)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        if routed && used.len() < 2 {
            return Err(SpecError::RoutedOneSubnet);
        }
        if !routed && used.iter().any(|&s| s != 0) {
            return Err(SpecError::SubnetsWithoutRouter(used));
        }
        let subnets = used.iter().max().map_or(1, |&s| s + 1);
        Ok(Lab {
            mtu,
            routed,
            subnets,
            guests,
        })
    }

    /// Adds each `--nic-args` item's options, in order, to the rox NICs it names; an item for
    /// a guest without rox NICs (or not in the lab) is an error.
    pub fn with_nic_args(mut self, items: &[NicArgs]) -> Result<Lab, SpecError> {
        for item in items {
            let mut matched = false;
            for g in &mut self.guests {
                if item.guest.is_some_and(|n| n != g.index) {
                    continue;
                }
                for nic in g.nics.iter_mut().filter(|n| n.kind == NicKind::Rox) {
                    nic.extra_args.extend(item.args.iter().cloned());
                    matched = true;
                }
            }
            if let (Some(n), false) = (item.guest, matched) {
                return Err(SpecError::NicArgsGuest(n));
            }
        }
        Ok(self)
    }

    /// Joins the first NICs of the first two guests with a rox-to-rox cable instead of the
    /// bridge (both rox NICs; the guests' other NICs stay on the bridge).
    pub fn with_cable(mut self) -> Result<Lab, SpecError> {
        let is_rox = |g: Option<&Guest>| {
            g.and_then(|g| g.nics.first())
                .is_some_and(|n| n.kind == NicKind::Rox)
        };
        if self.routed || !is_rox(self.guests.first()) || !is_rox(self.guests.get(1)) {
            return Err(SpecError::Cable);
        }
        for (pos, end) in [(0, CableEnd::Listen), (1, CableEnd::Connect)] {
            let g = self.guests[pos].index;
            let nic = &mut self.guests[pos].nics[0];
            nic.cable = Some(end);
            // A subnet of its own: with the cable's addresses on the bridge's /24, a guest would
            // route bridge addresses out of the cable too (and, arp_ignore=1, never reach them).
            nic.ip4 = guest_ip4(CABLE_SUBNET, g, 0);
            nic.ip6 = guest_ip6(CABLE_SUBNET, g, 0);
        }
        Ok(self)
    }

    /// Whether the lab has a cable (`--cable`).
    pub fn has_cable(&self) -> bool {
        self.guests
            .iter()
            .any(|g| g.nics.iter().any(|n| n.cable.is_some()))
    }

    /// The environment every guest command gets, so it can find its peers.
    /// (`guest`: position in this lab; ROX_GUEST is its number.)
    pub fn env_for(&self, guest: usize) -> Vec<(String, String)> {
        let mut env = vec![(
            "ROX_GUEST".to_string(),
            self.guests[guest].index.to_string(),
        )];
        env.extend(self.shared_env());
        env
    }

    /// The environment of the host command (rox-lab --host-cmd): what every guest gets except
    /// ROX_GUEST, plus each subnet's bridge (ROX_BRIDGE_<S>).
    pub fn host_env(&self) -> Vec<(String, String)> {
        let mut env = self.shared_env();
        for s in 0..self.subnets {
            env.push((format!("ROX_BRIDGE_{s}"), bridge_name(s)));
        }
        env
    }

    /// The lab's shape and every NIC's addresses.
    fn shared_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("ROX_GUESTS".to_string(), self.guests.len().to_string()),
            ("ROX_MTU".to_string(), self.mtu.to_string()),
            ("ROX_ROUTED".to_string(), u8::from(self.routed).to_string()),
            (
                "ROX_CABLE".to_string(),
                u8::from(self.has_cable()).to_string(),
            ),
        ];
        for g in &self.guests {
            let i = g.index;
            env.push((format!("ROX_SUBNET_{i}"), g.subnet.to_string()));
            env.push((format!("ROX_NICS_{i}"), g.nics.len().to_string()));
            for n in &g.nics {
                let j = n.index;
                env.push((format!("ROX_NIC_{i}_{j}"), n.kind.to_string()));
                env.push((format!("ROX_IP_{i}_{j}"), n.ip4.to_string()));
                env.push((format!("ROX_IP6_{i}_{j}"), n.ip6.to_string()));
                env.push((format!("ROX_MAC_{i}_{j}"), n.mac.clone()));
            }
        }
        if self.routed {
            for s in 0..self.subnets {
                env.push((format!("ROX_ROUTER_IP_{s}"), router_ip4(s).to_string()));
                env.push((format!("ROX_ROUTER_IP6_{s}"), router_ip6(s).to_string()));
            }
        }
        env
    }

    /// The lines guest-init reads from `net` in the run directory, one per lab NIC:
    /// `INDEX MAC MTU IPV4/24 IPV6/64 GW4 GW6 LAB_NET4 LAB_NET6` (`-` for no gateway).
    pub fn guest_net_config(&self, guest: usize) -> String {
        let g = &self.guests[guest];
        let (gw4, gw6) = if self.routed {
            (
                router_ip4(g.subnet).to_string(),
                router_ip6(g.subnet).to_string(),
            )
        } else {
            ("-".to_string(), "-".to_string())
        };
        g.nics
            .iter()
            .map(|n| {
                format!(
                    "{} {} {} {}/24 {}/64 {gw4} {gw6} {LAB_NET4} {LAB_NET6}\n",
                    n.index, n.mac, self.mtu, n.ip4, n.ip6
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("cmd{i}")).collect()
    }

    #[test]
    fn guest_args_parse() {
        assert_eq!(
            "rox,virtio".parse::<GuestArg>(),
            Ok(GuestArg {
                nics: vec![NicKind::Rox, NicKind::Virtio],
                subnet: None
            })
        );
        assert_eq!(
            "virtio@1".parse::<GuestArg>(),
            Ok(GuestArg {
                nics: vec![NicKind::Virtio],
                subnet: Some(1)
            })
        );
        assert_eq!(
            "none".parse::<GuestArg>(),
            Ok(GuestArg {
                nics: vec![],
                subnet: None
            })
        );
        assert_eq!(
            "rxe".parse::<GuestArg>(),
            Err(SpecError::NicKind("rxe".into()))
        );
        assert_eq!(
            "rox@x".parse::<GuestArg>(),
            Err(SpecError::Subnet("x".into()))
        );
        assert_eq!(
            "rox@9".parse::<GuestArg>(),
            Err(SpecError::Subnet("9".into()))
        );
        assert!(matches!(
            "rox,rox,rox,rox,rox,rox,rox,rox,rox,rox".parse::<GuestArg>(),
            Err(SpecError::TooManyNics(_))
        ));
    }

    #[test]
    fn nic_args_go_to_the_rox_nics_of_the_guests_they_name() {
        let g = |s: &str| -> GuestArg { s.parse().unwrap() };
        let items: Vec<NicArgs> = [
            "all=--cc on",
            "2=--bottleneck rate=200M,kmin=8K  --idle-ms 5",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let lab = Lab::new(
            9000,
            false,
            0,
            &[g("rox"), g("rox,virtio"), g("rox,rox")],
            &cmds(3),
        )
        .unwrap()
        .with_nic_args(&items)
        .unwrap();
        assert_eq!(lab.guests[0].nics[0].extra_args, ["--cc", "on"]);
        assert_eq!(lab.guests[1].nics[0].extra_args, ["--cc", "on"]);
        assert!(lab.guests[1].nics[1].extra_args.is_empty(), "a virtio NIC");
        for nic in &lab.guests[2].nics {
            assert_eq!(
                nic.extra_args,
                [
                    "--cc",
                    "on",
                    "--bottleneck",
                    "rate=200M,kmin=8K",
                    "--idle-ms",
                    "5"
                ]
            );
        }
        let no_rox = Lab::new(9000, false, 0, &[g("rox"), g("virtio")], &cmds(2)).unwrap();
        let to = |s: &str| vec![s.parse::<NicArgs>().unwrap()];
        assert_eq!(
            no_rox.clone().with_nic_args(&to("1=--cc on")),
            Err(SpecError::NicArgsGuest(1))
        );
        assert_eq!(
            no_rox.with_nic_args(&to("5=--cc on")),
            Err(SpecError::NicArgsGuest(5))
        );
        for bad in ["", "--cc on", "x=--cc", "1=", "1=   ", "-1=--cc on"] {
            assert_eq!(
                bad.parse::<NicArgs>(),
                Err(SpecError::NicArgs(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn addresses_are_the_documented_ones() {
        assert_eq!(guest_ip4(0, 0, 0), Ipv4Addr::new(10, 50, 0, 11));
        assert_eq!(guest_ip4(0, 0, 1), Ipv4Addr::new(10, 50, 0, 12));
        assert_eq!(guest_ip4(1, 1, 0), Ipv4Addr::new(10, 50, 1, 21));
        assert_eq!(guest_ip6(1, 1, 0).to_string(), "fd00:50:1::21");
        assert_eq!(router_ip4(1).to_string(), "10.50.1.254");
        assert_eq!(router_ip6(0).to_string(), "fd00:50::fe");
        assert_eq!(mac(NicKind::Rox, 1, 0), "52:54:00:52:4f:10");
        assert_eq!(mac(NicKind::Virtio, 0, 2), "52:54:00:56:4e:02");
    }

    #[test]
    fn pair_and_routed_shapes() {
        let rox: GuestArg = "rox".parse().unwrap();
        let virtio: GuestArg = "virtio".parse().unwrap();
        let lab = Lab::new(9000, false, 0, &[rox.clone(), virtio.clone()], &cmds(2)).unwrap();
        assert_eq!(lab.subnets, 1);
        assert_eq!(lab.guests[1].nics[0].ip4.to_string(), "10.50.0.21");
        let env = lab.env_for(0);
        assert!(env.contains(&("ROX_IP_1_0".into(), "10.50.0.21".into())));
        assert!(env.contains(&("ROX_NIC_1_0".into(), "virtio".into())));
        assert_eq!(
            lab.guest_net_config(0),
            "0 52:54:00:52:4f:00 9000 10.50.0.11/24 fd00:50::11/64 - - 10.50.0.0/16 fd00:50::/32\n"
        );

        let routed = Lab::new(1500, true, 0, &[rox.clone(), rox.clone()], &cmds(2)).unwrap();
        assert_eq!(routed.subnets, 2);
        assert_eq!(routed.guests[1].subnet, 1);
        assert_eq!(
            routed.guest_net_config(1),
            "0 52:54:00:52:4f:10 1500 10.50.1.21/24 fd00:50:1::21/64 10.50.1.254 fd00:50:1::fe 10.50.0.0/16 fd00:50::/32\n"
        );
        assert!(routed
            .env_for(0)
            .contains(&("ROX_ROUTER_IP_1".into(), "10.50.1.254".into())));
        let host = routed.host_env();
        assert!(host.contains(&("ROX_MAC_1_0".into(), "52:54:00:52:4f:10".into())));
        assert!(host.contains(&("ROX_BRIDGE_1".into(), "br1".into())));
        assert!(!host.iter().any(|(k, _)| k == "ROX_GUEST"));
    }

    #[test]
    fn bad_shapes_are_refused() {
        let rox: GuestArg = "rox".parse().unwrap();
        let rox1: GuestArg = "rox@1".parse().unwrap();
        assert_eq!(
            Lab::new(9000, false, 0, std::slice::from_ref(&rox), &cmds(2)),
            Err(SpecError::CmdCount { guests: 1, cmds: 2 })
        );
        assert_eq!(
            Lab::new(9000, true, 0, std::slice::from_ref(&rox), &cmds(1)),
            Err(SpecError::RoutedOneSubnet)
        );
        assert_eq!(
            Lab::new(9000, false, 0, &[rox.clone(), rox1], &cmds(2)),
            Err(SpecError::SubnetsWithoutRouter(vec![0, 1]))
        );
        assert_eq!(
            Lab::new(100, false, 0, &[rox], &cmds(1)),
            Err(SpecError::Mtu(100))
        );
        assert_eq!(Lab::new(9000, false, 0, &[], &[]), Err(SpecError::NoGuest));
    }

    #[test]
    fn a_cable_joins_the_first_rox_nics_of_the_first_two_guests_only() {
        let args =
            |list: &[&str]| -> Vec<GuestArg> { list.iter().map(|a| a.parse().unwrap()).collect() };
        let lab = Lab::new(9000, false, 0, &args(&["rox,virtio", "rox"]), &cmds(2))
            .unwrap()
            .with_cable()
            .unwrap();
        assert_eq!(lab.guests[0].nics[0].cable, Some(CableEnd::Listen));
        assert_eq!(lab.guests[1].nics[0].cable, Some(CableEnd::Connect));
        assert_eq!(lab.guests[0].nics[1].cable, None);
        assert_eq!(lab.guests[0].nics[0].ip4.to_string(), "10.50.9.11");
        assert_eq!(lab.guests[1].nics[0].ip6.to_string(), "fd00:50:9::21");
        assert_eq!(lab.guests[0].nics[1].ip4.to_string(), "10.50.0.12");
        assert!(lab.env_for(1).contains(&("ROX_CABLE".into(), "1".into())));
        for bad in [&["rox"][..], &["rox", "virtio"], &["virtio,rox", "rox"]] {
            let l = Lab::new(9000, false, 0, &args(bad), &cmds(bad.len())).unwrap();
            assert_eq!(l.with_cable(), Err(SpecError::Cable), "{bad:?}");
        }
        let routed = Lab::new(9000, true, 0, &args(&["rox", "rox"]), &cmds(2)).unwrap();
        assert_eq!(routed.with_cable(), Err(SpecError::Cable));
        let plain = Lab::new(9000, false, 0, &args(&["rox", "rox"]), &cmds(2)).unwrap();
        assert!(plain.env_for(0).contains(&("ROX_CABLE".into(), "0".into())));
    }
}
