//! The plan of a lab, computed without touching the host: the network steps (namespaces,
//! bridges, taps, veths, addresses), each rox-nic's files and arguments, each guest's QEMU
//! arguments. The runner (runner.rs, network.rs) carries it out; tests check it without root.

use std::path::{Path, PathBuf};

use crate::spec::{bridge_name, router_ip4, router_ip6, CableEnd, Guest, Lab, Nic, NicKind};

/// The host command's interface on bridge 0 (`--host-cmd`) and the veth end enslaved to it.
pub const HOST_IF: &str = "host0";
pub const HOST_IF_BRIDGE_END: &str = "host0-br";
/// The host interface's MTU is the lab's plus an 802.1Q header: a Linux bridge forwards a
/// frame to a port of MTU M if it is at most M + 14 + 4 bytes, so with this the host command
/// can put every frame the bridge delivers on it — including ones just over the lab MTU, which
/// a NIC must drop as oversize.
pub const HOST_IF_MTU_EXTRA: u32 = 4;

/// One step of building the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `ip netns add NS` (and `lo` up in it); deleted again at teardown.
    AddNetns(String),
    /// `ip [-n NS] ARGS...`
    Ip {
        ns: Option<String>,
        args: Vec<String>,
    },
    /// `sysctl -qw` in NS; `optional` settings may be absent (a module not loaded).
    Sysctl {
        ns: String,
        settings: Vec<String>,
        optional: bool,
    },
}

fn ip_in(ns: &str, args: &[&str]) -> Step {
    Step::Ip {
        ns: Some(ns.to_string()),
        args: args.iter().map(|s| s.to_string()).collect(),
    }
}

fn sysctl(ns: &str, settings: &[&str], optional: bool) -> Step {
    Step::Sysctl {
        ns: ns.to_string(),
        settings: settings.iter().map(|s| s.to_string()).collect(),
        optional,
    }
}

/// What the network joins besides the guests.
pub struct NetworkExtras<'a> {
    /// A host interface moved into the lab and enslaved to bridge 0 (--uplink).
    pub uplink: Option<&'a str>,
    /// A veth for the --host-cmd on bridge 0.
    pub host_if: bool,
}

/// The lab namespace `ns`: a bridge per subnet, a tap per NIC, the uplink and host veth; in
/// the routed shape a router namespace `router_ns` with a veth into each bridge.
pub fn network_steps(lab: &Lab, ns: &str, router_ns: &str, extras: &NetworkExtras) -> Vec<Step> {
    let mtu = lab.mtu.to_string();
    let mut steps = vec![
        Step::AddNetns(ns.to_string()),
        // The bridges and taps are layer 2 only: no addresses, no IPv6 chatter of their own.
        sysctl(
            ns,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
            false,
        ),
        // If the host loaded br_netfilter, bridged frames would go through this namespace's
        // (empty) iptables; skip that. Absent keys (no br_netfilter) are fine.
        sysctl(
            ns,
            &[
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
                "net.bridge.bridge-nf-call-arptables=0",
            ],
            true,
        ),
    ];
    for s in 0..lab.subnets {
        let br = bridge_name(s);
        steps.push(ip_in(
            ns,
            &[
                "link",
                "add",
                &br,
                "mtu",
                &mtu,
                "type",
                "bridge",
                "stp_state",
                "0",
                "mcast_snooping",
                "0",
            ],
        ));
        steps.push(ip_in(ns, &["link", "set", &br, "up"]));
    }
    for g in &lab.guests {
        let br = bridge_name(g.subnet);
        // A NIC on the cable has no tap: its port is the cable.
        for n in g.nics.iter().filter(|n| n.cable.is_none()) {
            steps.push(ip_in(ns, &["tuntap", "add", "dev", &n.tap, "mode", "tap"]));
            steps.push(ip_in(
                ns,
                &["link", "set", &n.tap, "mtu", &mtu, "master", &br, "up"],
            ));
        }
    }
    if let Some(up) = extras.uplink {
        steps.push(Step::Ip {
            ns: None,
            args: ["link", "set", up, "netns", ns].map(String::from).to_vec(),
        });
        steps.push(ip_in(
            ns,
            &[
                "link",
                "set",
                up,
                "mtu",
                &mtu,
                "master",
                &bridge_name(0),
                "up",
            ],
        ));
    }
    if extras.host_if {
        let host_mtu = (lab.mtu + HOST_IF_MTU_EXTRA).to_string();
        steps.push(ip_in(
            ns,
            &[
                "link",
                "add",
                HOST_IF,
                "mtu",
                &host_mtu,
                "type",
                "veth",
                "peer",
                "name",
                HOST_IF_BRIDGE_END,
                "mtu",
                &host_mtu,
            ],
        ));
        steps.push(ip_in(
            ns,
            &[
                "link",
                "set",
                HOST_IF_BRIDGE_END,
                "master",
                &bridge_name(0),
                "up",
            ],
        ));
        steps.push(ip_in(ns, &["link", "set", HOST_IF, "up"]));
    }
    if lab.routed {
        steps.extend(router_steps(lab, ns, router_ns));
    }
    steps
}

/// The router namespace: forwarding on, a veth per subnet with the subnet's router address.
fn router_steps(lab: &Lab, ns: &str, r: &str) -> Vec<Step> {
    let mtu = lab.mtu.to_string();
    let mut steps = vec![
        Step::AddNetns(r.to_string()),
        sysctl(
            r,
            &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
            false,
        ),
    ];
    for s in 0..lab.subnets {
        let (lab_end, router_end) = (format!("rtr{s}"), format!("net{s}"));
        steps.push(ip_in(
            ns,
            &[
                "link",
                "add",
                &lab_end,
                "mtu",
                &mtu,
                "type",
                "veth",
                "peer",
                "name",
                &router_end,
                "netns",
                r,
            ],
        ));
        steps.push(ip_in(
            ns,
            &["link", "set", &lab_end, "master", &bridge_name(s), "up"],
        ));
        steps.push(ip_in(r, &["link", "set", &router_end, "mtu", &mtu, "up"]));
        let a4 = format!("{}/24", router_ip4(s));
        steps.push(ip_in(r, &["addr", "add", &a4, "dev", &router_end]));
        let a6 = format!("{}/64", router_ip6(s));
        steps.push(ip_in(r, &["addr", "add", &a6, "dev", &router_end, "nodad"]));
    }
    steps
}

/// The files of a guest's rox NIC N, in the guest's run directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoxNicFiles {
    /// The vfio-user socket rox-nic serves and QEMU connects to.
    pub socket: PathBuf,
    /// rox-nic's and QEMU's ends of the paired virtio-net's datagram link.
    pub nic_end: PathBuf,
    pub qemu_end: PathBuf,
    pub log: PathBuf,
    /// The lab's rox-to-rox cable socket (used by a NIC on the cable), in the lab's run
    /// directory.
    pub cable: PathBuf,
    /// The socket of the NIC's posted-wake companion (rox-nic `--wake-socket`, QEMU's
    /// `ivshmem-doorbell` chardev); None: the NIC has none.
    pub wake: Option<PathBuf>,
    /// The admin faults a guest asks for (rox-nic `--admin-fault-file`), in the guest's run
    /// directory: the guest writes `/run/rox/rox<N>.admin-fault`. None: the lab was not
    /// asked for them (rox-lab `--admin-faults`), and rox-nic gets no such option (one built
    /// before it, an A/B benchmark's base, would refuse it).
    pub admin_faults: Option<PathBuf>,
}

/// The files of NIC `n` in `guest_dir`, with a posted-wake companion or not, with an admin
/// fault file or not.
pub fn rox_nic_files(
    guest_dir: &Path,
    n: usize,
    posted_wake: bool,
    admin_faults: bool,
) -> RoxNicFiles {
    RoxNicFiles {
        wake: posted_wake.then(|| guest_dir.join(format!("rox{n}-wake.sock"))),
        socket: guest_dir.join(format!("rox{n}.sock")),
        admin_faults: admin_faults.then(|| guest_dir.join(format!("rox{n}.admin-fault"))),
        nic_end: guest_dir.join(format!("rox{n}-nic.dgram")),
        qemu_end: guest_dir.join(format!("rox{n}-qemu.dgram")),
        log: guest_dir.join(format!("rox-nic{n}.log")),
        cable: guest_dir.parent().unwrap_or(guest_dir).join("cable.sock"),
    }
}

/// rox-nic's arguments for `nic` (its port the NIC's tap or its end of the cable, its netdev
/// the datagram link).
pub fn rox_nic_args(
    nic: &Nic,
    files: &RoxNicFiles,
    mtu: u32,
    faults: Option<&str>,
    panic_at: Option<u64>,
) -> Vec<String> {
    let mut args = vec![
        "--socket".to_string(),
        files.socket.display().to_string(),
        "--mac".to_string(),
        nic.mac.clone(),
        "--port".to_string(),
        match nic.cable {
            None => format!("tap:{}", nic.tap),
            Some(CableEnd::Listen) => format!("cable:listen={}", files.cable.display()),
            Some(CableEnd::Connect) => format!("cable:connect={}", files.cable.display()),
        },
        "--netdev".to_string(),
        format!(
            "dgram:local={},remote={}",
            files.nic_end.display(),
            files.qemu_end.display()
        ),
        "--mtu".to_string(),
        mtu.to_string(),
    ];
    if let Some(f) = faults {
        args.extend(["--faults".to_string(), f.to_string()]);
    }
    if let Some(w) = &files.wake {
        args.extend(["--wake-socket".to_string(), w.display().to_string()]);
    }
    for (mode, n) in crate::runner::DIE_ON {
        args.extend(["--die-on".to_string(), format!("rtmin+{n},fatal={mode}")]);
    }
    if let Some(path) = &files.admin_faults {
        args.extend(["--admin-fault-file".to_string(), path.display().to_string()]);
    }
    if let Some(at) = panic_at {
        args.extend(["--debug-panic-at".to_string(), at.to_string()]);
    }
    // Last: the lab's own options above are the defaults `--nic-args` may follow.
    args.extend(nic.extra_args.iter().cloned());
    args
}

/// rox-nic's WQE trace arguments for NIC `n` of guest `g` when `$ROX_NIC_TRACE` asks for a
/// trace of that many records: started at launch, written at exit into `dir` (which outlives
/// the run directory) as `g<g>-rox<n>.wqe-trace`. docs/debugging.md, "A WQE's life".
pub fn rox_nic_trace_args(records: Option<&str>, dir: &Path, g: usize, n: usize) -> Vec<String> {
    match records {
        Some(r) if !r.is_empty() => vec![
            "--trace-wqe".to_string(),
            r.to_string(),
            "--trace-wqe-file".to_string(),
            dir.join(format!("g{g}-rox{n}.wqe-trace"))
                .display()
                .to_string(),
        ],
        _ => Vec::new(),
    }
}

/// What a guest's QEMU is given; every path as QEMU sees it (in the toolchain root).
pub struct GuestLaunch<'a> {
    pub guest: &'a Guest,
    pub mtu: u32,
    pub accel: &'a str,
    pub cpus: u32,
    pub mem_mib: u32,
    /// The kernel build directory (bzImage, modules).
    pub kernel: PathBuf,
    /// The kernel needs an initramfs (the stock kernel: 9p and virtio-pci are modules).
    pub initrd: bool,
    /// The guest's run directory (cmd, net, status, booted, sockets).
    pub run_dir: PathBuf,
    /// rox-lab's monitor socket.
    pub monitor: PathBuf,
    /// Per rox NIC, by NIC index: its files.
    pub rox_files: Vec<Option<RoxNicFiles>>,
    /// Extra vfio-user sockets (--vfio-user, guest 0).
    pub extra_vfio: Vec<PathBuf>,
}

/// The kernel parameter that gives each posted-wake companion's 256-byte register BAR a page
/// of its own (aligned to and grown to 4 KiB): rox.ko maps that page into user processes only
/// then (no other device's registers share it).
pub fn companion_alignment() -> String {
    use rox_uapi::wake::{IVSHMEM_DEVICE_ID, IVSHMEM_VENDOR_ID};
    let shift = rox_uapi::regs::ROX_PAGE_SHIFT;
    format!("pci=resource_alignment={shift}@pci:{IVSHMEM_VENDOR_ID:04x}:{IVSHMEM_DEVICE_ID:04x}")
}

/// QEMU's arguments for the posted-wake companion of rox NIC `n`: its chardev, a client of
/// the rox-nic's ivshmem server, and the `ivshmem-doorbell` with one vector.
fn companion_args(n: usize, wake: &Path) -> [String; 4] {
    [
        "-chardev".to_string(),
        format!("socket,id=wake{n},path={}", wake.display()),
        "-device".to_string(),
        format!("ivshmem-doorbell,chardev=wake{n},vectors=1"),
    ]
}

/// QEMU's arguments for a guest: q35, memfd RAM shared with the rox-nics, the kernel with
/// guest-init as init, the root and run directory over 9p, slirp eth0, a virtio-net per lab
/// NIC, a vfio-user-pci device per rox NIC and after them each rox NIC's posted-wake
/// companion.
pub fn qemu_args(l: &GuestLaunch) -> Vec<String> {
    let companions: Vec<(usize, &Path)> = l
        .rox_files
        .iter()
        .enumerate()
        .filter_map(|(n, f)| Some((n, f.as_ref()?.wake.as_deref()?)))
        .collect();
    let alignment = if companions.is_empty() {
        String::new()
    } else {
        format!(" {}", companion_alignment())
    };
    let gi = l.guest.index;
    let (kernel, run, mem) = (l.kernel.display(), l.run_dir.display(), l.mem_mib);
    let mut args: Vec<String> = [
        "-accel", l.accel, "-cpu", "max", "-smp", &l.cpus.to_string(), "-m", &mem.to_string(),
        "-object", &format!("memory-backend-memfd,id=mem0,size={mem}M,share=on"),
        "-machine", "q35,memory-backend=mem0",
        "-nographic", "-vga", "none", "-no-reboot", "-serial", "mon:stdio",
        // A second monitor for rox-lab: asked what the guest is doing when it hangs.
        "-monitor", &format!("unix:{},server=on,wait=off", l.monitor.display()),
        "-kernel", &format!("{kernel}/bzImage"),
        // tsc=nowatchdog: one boot in ~520 deadlocked in the clocksource watchdog's skew
        // check (CPU 0 waiting for CPU 1's answer on a clock that counts ticks, CPU 1 in the
        // first clocksource switch's stop_machine with interrupts off; docs/testing.md).
        "-append", &format!(
            "console=ttyS0 loglevel=4 panic=-1 oops=panic no_timer_check tsc=nowatchdog rootfstype=9p root=rootfs \
             rootflags=trans=virtio,version=9p2000.L,msize=1048576,cache=loose ro init=/rox/qemu/guest-init \
             rox.run={run} rox.modules={kernel}/modules rox.guest={gi}{alignment}"),
        "-fsdev", "local,id=rootfs,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=rootfs,mount_tag=rootfs",
        "-fsdev", &format!("local,id=run,path={run},security_model=none,multidevs=remap"),
        "-device", "virtio-9p-pci,fsdev=run,mount_tag=rox-run",
        // eth0: slirp with restrict=on (nothing leaves QEMU).
        "-netdev", "user,id=net0,restrict=on",
        "-device", &format!("virtio-net-pci,netdev=net0,mac=52:54:00:12:34:{gi}{gi},romfile="),
    ]
    .map(String::from)
    .to_vec();
    if l.initrd {
        args.extend(["-initrd".to_string(), format!("{kernel}/initrd")]);
    }
    let mut vfio_sockets = Vec::new();
    for nic in &l.guest.nics {
        let id = format!("lab{}", nic.index);
        let files = l.rox_files.get(nic.index).and_then(Option::as_ref);
        args.push("-netdev".into());
        match (nic.kind, files) {
            (NicKind::Rox, Some(f)) => {
                args.push(format!(
                    "dgram,id={id},local.type=unix,local.path={},remote.type=unix,remote.path={}",
                    f.qemu_end.display(),
                    f.nic_end.display()
                ));
                vfio_sockets.push(f.socket.clone());
            }
            _ => args.push(format!(
                "tap,id={id},ifname={},script=no,downscript=no",
                nic.tap
            )),
        }
        args.push("-device".into());
        args.push(format!(
            "virtio-net-pci,netdev={id},mac={},host_mtu={},romfile=",
            nic.mac, l.mtu
        ));
    }
    vfio_sockets.extend(l.extra_vfio.iter().cloned());
    for s in &vfio_sockets {
        args.push("-device".into());
        args.push(format!(
            r#"{{"driver":"vfio-user-pci","socket":{{"type":"unix","path":"{}"}}}}"#,
            s.display()
        ));
    }
    for (n, wake) in companions {
        args.extend(companion_args(n, wake));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::GuestArg;

    fn lab(routed: bool, guests: &[&str]) -> Lab {
        let args: Vec<GuestArg> = guests.iter().map(|g| g.parse().unwrap()).collect();
        let cmds = vec!["true".to_string(); guests.len()];
        Lab::new(9000, routed, 0, &args, &cmds).unwrap()
    }

    fn ip_lines(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::AddNetns(n) => format!("netns add {n}"),
                Step::Ip { ns, args } => {
                    format!("{}: {}", ns.as_deref().unwrap_or("host"), args.join(" "))
                }
                Step::Sysctl {
                    ns,
                    settings,
                    optional,
                } => {
                    format!(
                        "{ns}: sysctl{} {}",
                        if *optional { "?" } else { "" },
                        settings.join(" ")
                    )
                }
            })
            .collect()
    }

    #[test]
    fn the_pair_shape_is_one_bridge_with_a_tap_per_nic() {
        let steps = network_steps(
            &lab(false, &["rox", "rox"]),
            "L",
            "R",
            &NetworkExtras {
                uplink: None,
                host_if: false,
            },
        );
        let lines = ip_lines(&steps);
        assert_eq!(lines[0], "netns add L");
        assert!(lines.contains(
            &"L: link add br0 mtu 9000 type bridge stp_state 0 mcast_snooping 0".to_string()
        ));
        assert!(lines.contains(&"L: tuntap add dev g0n0 mode tap".to_string()));
        assert!(lines.contains(&"L: link set g1n0 mtu 9000 master br0 up".to_string()));
        assert!(!lines
            .iter()
            .any(|l| l.contains("br1") || l.starts_with("R") || l.contains(HOST_IF)));
        assert_eq!(
            steps
                .iter()
                .filter(|s| matches!(s, Step::AddNetns(_)))
                .count(),
            1
        );
    }

    #[test]
    fn the_routed_shape_adds_a_router_with_an_address_per_subnet() {
        let steps = network_steps(
            &lab(true, &["rox", "rox"]),
            "L",
            "R",
            &NetworkExtras {
                uplink: Some("vx0"),
                host_if: true,
            },
        );
        let lines = ip_lines(&steps);
        for l in [
            "netns add R",
            "R: sysctl net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1",
            "L: link set g1n0 mtu 9000 master br1 up",
            "L: link add rtr1 mtu 9000 type veth peer name net1 netns R",
            "L: link set rtr1 master br1 up",
            "host: link set vx0 netns L",
            "L: link set vx0 mtu 9000 master br0 up",
            "L: link add host0 mtu 9004 type veth peer name host0-br mtu 9004",
        ] {
            assert!(
                lines.contains(&l.to_string()),
                "missing {l:?} in {lines:#?}"
            );
        }
        assert!(lines
            .iter()
            .any(|l| l.starts_with("R: addr add ") && l.ends_with("/24 dev net0")));
        assert!(lines
            .iter()
            .any(|l| l.starts_with("R: addr add ") && l.ends_with("/64 dev net1 nodad")));
    }

    #[test]
    fn a_rox_nic_serves_its_socket_on_its_tap() {
        let l = lab(false, &["rox,virtio"]);
        let f = rox_nic_files(Path::new("/run/g0"), 0, false, true);
        assert_eq!(f.socket, Path::new("/run/g0/rox0.sock"));
        let args = rox_nic_args(&l.guests[0].nics[0], &f, 1500, Some("loss=0.1"), None).join(" ");
        assert!(
            args.starts_with("--socket /run/g0/rox0.sock --mac "),
            "{args}"
        );
        assert!(args.contains(" --port tap:g0n0 --netdev dgram:local=/run/g0/rox0-nic.dgram,remote=/run/g0/rox0-qemu.dgram --mtu 1500 --faults loss=0.1"), "{args}");
        assert!(!args.contains("debug"));
        assert!(
            args.contains(" --die-on rtmin+1,fatal=silent --die-on rtmin+2,fatal=report"),
            "{args}"
        );
        assert!(
            args.contains(" --admin-fault-file /run/g0/rox0.admin-fault"),
            "{args}"
        );
        let extra: crate::spec::NicArgs = "0=--cc off --bottleneck rate=1G".parse().unwrap();
        let l = l.with_nic_args(&[extra]).unwrap();
        let args = rox_nic_args(&l.guests[0].nics[0], &f, 1500, None, None).join(" ");
        assert!(
            args.ends_with("rox0.admin-fault --cc off --bottleneck rate=1G"),
            "{args}"
        );
    }

    #[test]
    fn a_rox_nic_gets_an_admin_fault_file_only_when_asked() {
        let l = lab(false, &["rox"]);
        let run = Path::new("/run/g0");
        let asked = rox_nic_files(run, 0, false, true);
        assert_eq!(
            asked.admin_faults.as_deref(),
            Some(Path::new("/run/g0/rox0.admin-fault"))
        );
        let args = rox_nic_args(&l.guests[0].nics[0], &asked, 9000, None, None);
        let at = args.iter().position(|a| a == "--admin-fault-file");
        assert_eq!(
            at.map(|at| args[at + 1].as_str()),
            Some("/run/g0/rox0.admin-fault")
        );
        let not_asked = rox_nic_files(run, 0, false, false);
        assert_eq!(not_asked.admin_faults, None);
        let args = rox_nic_args(&l.guests[0].nics[0], &not_asked, 9000, None, None);
        assert!(
            !args.iter().any(|a| a.starts_with("--admin-fault")),
            "{args:?}"
        );
    }

    #[test]
    fn cabled_rox_nics_take_the_cable_as_their_port_and_get_no_tap() {
        let l = lab(false, &["rox", "rox"]).with_cable().unwrap();
        let port = |g: usize| {
            let f = rox_nic_files(Path::new(&format!("/run/lab.1/g{g}")), 0, false, false);
            assert_eq!(f.cable, Path::new("/run/lab.1/cable.sock"));
            let args = rox_nic_args(&l.guests[g].nics[0], &f, 9000, None, None);
            let at = args.iter().position(|a| a == "--port").unwrap();
            args[at + 1].clone()
        };
        assert_eq!(port(0), "cable:listen=/run/lab.1/cable.sock");
        assert_eq!(port(1), "cable:connect=/run/lab.1/cable.sock");
        let extras = NetworkExtras {
            uplink: None,
            host_if: false,
        };
        let lines = ip_lines(&network_steps(&l, "L", "R", &extras));
        assert!(!lines.iter().any(|s| s.contains("tuntap")), "{lines:?}");
    }

    /// QEMU's arguments for guest 0 of `l` (MTU 9000, TCG, 2 CPUs, 2 GiB) with
    /// `kernel`, `initrd` or not, a rox-nic on its first NIC of `nics` (without a posted-wake
    /// companion) and `extra_vfio`.
    fn launch_args(
        l: &Lab,
        kernel: &str,
        initrd: bool,
        nics: usize,
        extra_vfio: Vec<PathBuf>,
    ) -> Vec<String> {
        launch_args_wake(l, kernel, initrd, nics, extra_vfio, false)
    }

    fn launch_args_wake(
        l: &Lab,
        kernel: &str,
        initrd: bool,
        nics: usize,
        extra_vfio: Vec<PathBuf>,
        posted_wake: bool,
    ) -> Vec<String> {
        let run = PathBuf::from("/cache/run/lab.1/g0");
        let mut rox_files = vec![None; nics];
        rox_files[0] = Some(rox_nic_files(&run, 0, posted_wake, false));
        qemu_args(&GuestLaunch {
            guest: &l.guests[0],
            mtu: 9000,
            accel: "tcg",
            cpus: 2,
            mem_mib: 2048,
            kernel: PathBuf::from(kernel),
            initrd,
            run_dir: run.clone(),
            monitor: run.join("monitor.sock"),
            rox_files,
            extra_vfio,
        })
    }

    #[test]
    fn a_kernel_with_an_initramfs_gets_it() {
        let l = lab(false, &["rox"]);
        let text = launch_args(&l, "/cache/stock", true, 1, vec![]).join(" ");
        assert!(text.contains("-kernel /cache/stock/bzImage "), "{text}");
        assert!(text.contains("-initrd /cache/stock/initrd"), "{text}");
    }

    #[test]
    fn a_wqe_trace_is_asked_for_by_record_count_and_named_per_guest_and_nic() {
        let dir = Path::new("/tmp/traces");
        assert!(rox_nic_trace_args(None, dir, 0, 0).is_empty());
        assert!(rox_nic_trace_args(Some(""), dir, 0, 0).is_empty());
        assert_eq!(
            rox_nic_trace_args(Some("4096"), dir, 1, 0).join(" "),
            "--trace-wqe 4096 --trace-wqe-file /tmp/traces/g1-rox0.wqe-trace"
        );
    }

    #[test]
    fn qemu_gets_a_vfio_user_device_per_rox_nic_and_a_tap_per_virtio_nic() {
        let l = lab(false, &["rox,virtio"]);
        let extra = vec![PathBuf::from("/cache/x.sock")];
        let args = launch_args(&l, "/cache/k", false, 2, extra);
        let text = args.join(" ");
        assert!(
            text.starts_with("-accel tcg -cpu max -smp 2 -m 2048 "),
            "{text}"
        );
        assert!(text.contains("-monitor unix:/cache/run/lab.1/g0/monitor.sock,server=on,wait=off"));
        assert!(!text.contains("-initrd"), "{text}");
        assert!(
            text.contains("rox.run=/cache/run/lab.1/g0 rox.modules=/cache/k/modules rox.guest=0")
        );
        assert!(text.contains("-netdev dgram,id=lab0,local.type=unix,local.path=/cache/run/lab.1/g0/rox0-qemu.dgram,remote.type=unix,remote.path=/cache/run/lab.1/g0/rox0-nic.dgram"));
        assert!(text.contains("-netdev tap,id=lab1,ifname=g0n1,script=no,downscript=no"));
        let vfio: Vec<&String> = args
            .iter()
            .filter(|a| a.contains("vfio-user-pci"))
            .collect();
        assert_eq!(vfio.len(), 2, "{vfio:?}");
        assert!(vfio[0].contains(r#""path":"/cache/run/lab.1/g0/rox0.sock""#));
        assert!(vfio[1].contains(r#""path":"/cache/x.sock""#));
        // Each -device/-netdev flag has its value.
        for (i, a) in args.iter().enumerate() {
            if a.starts_with('-') && a != "-nographic" && a != "-no-reboot" {
                assert!(
                    args.get(i + 1).is_some_and(|v| !v.starts_with('-')),
                    "{a} without a value"
                );
            }
        }
    }

    #[test]
    fn a_rox_nic_with_a_companion_serves_it_and_qemu_gets_an_ivshmem_doorbell() {
        let l = lab(false, &["rox,rox"]);
        let run = Path::new("/run/g0");
        let f = rox_nic_files(run, 1, true, false);
        assert_eq!(f.wake.as_deref(), Some(Path::new("/run/g0/rox1-wake.sock")));
        let args = rox_nic_args(&l.guests[0].nics[1], &f, 9000, None, None).join(" ");
        assert!(
            args.contains(" --wake-socket /run/g0/rox1-wake.sock "),
            "{args}"
        );
        let off = rox_nic_files(run, 1, false, false);
        assert_eq!(off.wake, None);
        let args = rox_nic_args(&l.guests[0].nics[1], &off, 9000, None, None).join(" ");
        assert!(!args.contains("--wake-socket"), "{args}");

        let args = launch_args_wake(&l, "/cache/k", false, 2, vec![], true);
        let text = args.join(" ");
        assert!(
            text.contains(" -chardev socket,id=wake0,path=/cache/run/lab.1/g0/rox0-wake.sock -device ivshmem-doorbell,chardev=wake0,vectors=1"),
            "{text}"
        );
        assert!(
            text.ends_with("ivshmem-doorbell,chardev=wake0,vectors=1"),
            "after the NICs: {text}"
        );
        let append = &args[args.iter().position(|a| a == "-append").unwrap() + 1];
        assert!(
            append.ends_with(" rox.guest=0 pci=resource_alignment=12@pci:1af4:1110"),
            "{append}"
        );
        let args = launch_args_wake(&l, "/cache/k", false, 2, vec![], false);
        let text = args.join(" ");
        assert!(
            !text.contains("ivshmem") && !text.contains("-chardev"),
            "{text}"
        );
        assert!(!text.contains("resource_alignment"), "{text}");
    }
}
