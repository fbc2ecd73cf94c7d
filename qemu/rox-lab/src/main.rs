//! rox-lab: builds a test network in network namespaces (a bridge per subnet, a tap per guest
//! NIC, a router namespace joining subnets), starts rox-nic processes and QEMU guests on it,
//! runs one command per guest, and removes all of it at the end — on success, failure,
//! timeout, SIGINT/SIGTERM/SIGHUP. docs/networking.md describes shapes and addresses.

mod host;
mod spec;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};

use host::{in_netns, ip, ip_in, sysctl_in, Sink, Supervised, NETNS_PREFIX};
use spec::{bridge_name, router_ip4, router_ip6, GuestArg, Lab, NicKind};

/// Exit status when the --timeout watchdog stopped the guests (as timeout(1)).
const EXIT_TIMEOUT: u8 = 124;

/// The host command's interface on bridge 0 (`--host-cmd`) and the veth end enslaved to it.
const HOST_IF: &str = "host0";
const HOST_IF_BRIDGE_END: &str = "host0-br";
/// The host interface's MTU is the lab's plus an 802.1Q header: a Linux bridge forwards a
/// frame to a port of MTU M if it is at most M + 14 + 4 bytes, so with this the host command
/// can put every frame the bridge delivers on it — including ones just over the lab MTU, which
/// a NIC must drop as oversize.
const HOST_IF_MTU_EXTRA: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Accel {
    Auto,
    Kvm,
    Tcg,
}

/// Build a test network in network namespaces, boot rox guests on it, run one command in each
/// and tear everything down.
///
/// Each --guest pairs with the --cmd in the same position. Exit status: 0 when every guest's
/// command exited 0, 124 on timeout, 130/143 when interrupted, else the first failing guest's
/// (1 when only the --host-cmd failed).
#[derive(Parser, Debug)]
#[command(name = "rox-lab", version)]
struct Cli {
    /// MTU of the bridges, taps, router and guest NICs.
    #[arg(long, default_value_t = 9000)]
    mtu: u32,
    /// Put the guests on separate subnets (guest g on subnet g unless NICS@SUBNET says
    /// otherwise), joined by a router namespace.
    #[arg(long)]
    routed: bool,
    /// Kernel flavour: release or debug.
    #[arg(long, default_value = "release")]
    flavour: String,
    /// Stop every guest after this many seconds (exit status 124).
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Guest RAM in MiB (memory-backend-memfd, share=on).
    #[arg(long, default_value_t = 2048)]
    mem: u32,
    /// vCPUs per guest.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// kvm, tcg or auto (probe KVM once per kernel, fall back to TCG).
    #[arg(long, value_enum, env = "ROX_ACCEL", default_value = "auto")]
    accel: Accel,
    /// Fault injection spec passed to every rox-nic (--faults).
    #[arg(long)]
    faults: Option<String>,
    /// Capture bridge 0 with tcpdump into this pcap file.
    #[arg(long)]
    capture: Option<PathBuf>,
    /// Stop capturing after this many frames (tcpdump -c; the default takes every frame).
    #[arg(long, requires = "capture")]
    capture_frames: Option<u64>,
    /// Extra vfio-user device socket (under $ROX_CACHE) attached to guest 0; repeatable.
    #[arg(long = "vfio-user")]
    vfio_user: Vec<PathBuf>,
    /// Number this lab's guests from N (their MACs, addresses and taps follow), so labs on two
    /// hosts joined with --uplink do not collide.
    #[arg(long, default_value_t = 0)]
    first_guest: usize,
    /// An interface of the host namespace (a VXLAN device, a veth, a spare NIC) moved into
    /// the lab and enslaved to bridge 0: the lab's segment then extends through it
    /// (docs/networking.md). Physical NICs return to the host at the end; virtual ones are
    /// deleted with the lab.
    #[arg(long)]
    uplink: Option<String>,
    /// A command run on the host by bash, in the clone and inside the lab's namespace, once
    /// the guests are started; stopped (its process group) when the guests finish. Its output
    /// is prefixed `[host] `; a non-zero exit of its own fails the lab. It gets the guests'
    /// address environment, ROX_BRIDGE_<S>, ROX_HOST_IF (an interface on bridge 0, MTU lab
    /// MTU + 4) and ROX_RUN_<G> (guest G's run directory, /run/rox in the guest).
    #[arg(long, allow_hyphen_values = true, value_name = "CMD")]
    host_cmd: Option<String>,
    /// After a guest fails, give the others this many seconds to finish before stopping them.
    #[arg(long, default_value_t = 30)]
    grace: u64,
    /// A guest's lab NICs: a comma list of rox and virtio (or none), optionally @SUBNET.
    #[arg(long = "guest", required = true, value_name = "NICS[@SUBNET]")]
    guests: Vec<GuestArg>,
    /// The command for the guest given by the --guest in the same position (run by bash in
    /// /rox, the clone).
    #[arg(
        long = "cmd",
        required = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmds: Vec<String>,
}

/// Where things are: the clone, the cache and what `make setup` put there (asked from
/// scripts/lib.sh, the one definition of the cache layout).
struct Paths {
    top: PathBuf,
    cache: PathBuf,
    root: PathBuf,
    kernel: PathBuf,
    nic_bin: PathBuf,
}

impl Paths {
    fn find(flavour: &str) -> Result<Paths> {
        let top = find_top()?;
        let out = host::run(
            Command::new("bash")
                .arg("-c")
                .arg(r#"set -e; . "$1/scripts/lib.sh"; echo "$ROX_CACHE"; root_dir; kernel_dir "$2""#)
                .arg("_")
                .arg(&top)
                .arg(flavour),
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines().map(PathBuf::from);
        let (Some(cache), Some(root), Some(kernel)) = (lines.next(), lines.next(), lines.next())
        else {
            bail!("scripts/lib.sh did not name the cache, root and kernel directories");
        };
        if !root.join(".complete").exists() {
            bail!("no toolchain root in {}; run 'make setup'", cache.display());
        }
        if !kernel.join(".complete").exists() {
            bail!(
                "no {flavour} kernel in {}; run 'make setup' (ROX_KERNEL_FLAVOUR={flavour})",
                cache.display()
            );
        }
        let nic_bin = std::env::var_os("ROX_NIC_BIN")
            .map_or_else(|| top.join("target/release/rox-nic"), PathBuf::from);
        Ok(Paths {
            top,
            cache,
            root,
            kernel,
            nic_bin,
        })
    }

    /// The path QEMU and tcpdump (in scripts/in-root, the cache at /cache) see for `p`.
    fn in_root(&self, p: &Path) -> Result<PathBuf> {
        let rel = p.strip_prefix(&self.cache).with_context(|| {
            format!(
                "{} is not under the cache {}",
                p.display(),
                self.cache.display()
            )
        })?;
        Ok(Path::new("/cache").join(rel))
    }

    fn in_root_cmd(&self) -> Command {
        let mut c = Command::new(self.top.join("scripts/in-root"));
        c.env("ROX_TOP", &self.top).env("ROX_CACHE", &self.cache);
        c
    }
}

/// The clone: $ROX_TOP, else the directory holding scripts/lib.sh above this binary or the
/// current directory.
fn find_top() -> Result<PathBuf> {
    if let Some(t) = std::env::var_os("ROX_TOP") {
        return Ok(PathBuf::from(t));
    }
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    starts.push(std::env::current_dir()?);
    for s in starts {
        for dir in s.ancestors() {
            if dir.join("scripts/lib.sh").is_file() && dir.join("qemu/guest-init").is_file() {
                return Ok(dir.to_path_buf());
            }
        }
    }
    bail!("cannot find the rox clone (set ROX_TOP)")
}

/// A running lab. Dropping it tears everything down; `teardown` is idempotent.
struct Runner {
    cli: Cli,
    lab: Lab,
    paths: Paths,
    ns: String,
    router_ns: String,
    run: PathBuf,
    /// Namespaces created so far, deleted in reverse.
    namespaces: Vec<String>,
    /// tcpdump and rox-nic processes.
    helpers: Vec<Supervised>,
    /// One QEMU per guest, by guest index.
    guests: Vec<Supervised>,
    /// The --host-cmd process, once started.
    host_cmd: Option<Supervised>,
    /// How the host command ended when it ended by itself (not stopped by us).
    host_cmd_status: Option<std::process::ExitStatus>,
    capture_copied: bool,
}

/// What ended the run.
enum Outcome {
    Done,
    TimedOut,
    Signalled(i32),
}

impl Runner {
    fn new(cli: Cli, lab: Lab, paths: Paths) -> Runner {
        let pid = std::process::id();
        let run = paths.cache.join(format!("run/lab.{pid}"));
        Runner {
            ns: format!("{NETNS_PREFIX}{pid}"),
            router_ns: format!("{NETNS_PREFIX}{pid}-r"),
            cli,
            lab,
            paths,
            run,
            namespaces: Vec::new(),
            helpers: Vec::new(),
            guests: Vec::new(),
            host_cmd: None,
            host_cmd_status: None,
            capture_copied: false,
        }
    }

    fn guest_dir(&self, g: usize) -> PathBuf {
        self.run.join(format!("g{g}"))
    }

    fn add_netns(&mut self, name: &str) -> Result<()> {
        ip(&["netns", "add", name])?;
        self.namespaces.push(name.to_string());
        ip_in(name, &["link", "set", "lo", "up"])
    }

    /// The lab namespace: a bridge per subnet, a tap per NIC; in the routed shape a router
    /// namespace with a veth into each bridge.
    fn build_network(&mut self) -> Result<()> {
        let ns = self.ns.clone();
        let mtu = self.lab.mtu.to_string();
        self.add_netns(&ns)?;
        // The bridges and taps are layer 2 only: no addresses, no IPv6 chatter of their own.
        sysctl_in(
            &ns,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        )?;
        // If the host loaded br_netfilter, bridged frames would go through this namespace's
        // (empty) iptables; skip that. Absent keys (no br_netfilter) are fine.
        let _ = sysctl_in(
            &ns,
            &[
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
                "net.bridge.bridge-nf-call-arptables=0",
            ],
        );
        for s in 0..self.lab.subnets {
            let br = bridge_name(s);
            ip_in(
                &ns,
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
            )?;
            ip_in(&ns, &["link", "set", &br, "up"])?;
        }
        for g in &self.lab.guests {
            for n in &g.nics {
                ip_in(&ns, &["tuntap", "add", "dev", &n.tap, "mode", "tap"])?;
                ip_in(
                    &ns,
                    &[
                        "link",
                        "set",
                        &n.tap,
                        "mtu",
                        &mtu,
                        "master",
                        &bridge_name(g.subnet),
                        "up",
                    ],
                )?;
            }
        }
        if let Some(up) = self.cli.uplink.clone() {
            ip(&["link", "set", &up, "netns", &ns])
                .with_context(|| format!("cannot move --uplink {up} into the lab"))?;
            ip_in(
                &ns,
                &[
                    "link",
                    "set",
                    &up,
                    "mtu",
                    &mtu,
                    "master",
                    &bridge_name(0),
                    "up",
                ],
            )?;
        }
        if self.cli.host_cmd.is_some() {
            let host_mtu = (self.lab.mtu + HOST_IF_MTU_EXTRA).to_string();
            ip_in(
                &ns,
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
            )?;
            ip_in(
                &ns,
                &[
                    "link",
                    "set",
                    HOST_IF_BRIDGE_END,
                    "master",
                    &bridge_name(0),
                    "up",
                ],
            )?;
            ip_in(&ns, &["link", "set", HOST_IF, "up"])?;
        }
        if self.lab.routed {
            let r = self.router_ns.clone();
            self.add_netns(&r)?;
            sysctl_in(
                &r,
                &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
            )?;
            for s in 0..self.lab.subnets {
                let (lab_end, router_end) = (format!("rtr{s}"), format!("net{s}"));
                ip_in(
                    &ns,
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
                        &r,
                    ],
                )?;
                ip_in(
                    &ns,
                    &["link", "set", &lab_end, "master", &bridge_name(s), "up"],
                )?;
                ip_in(&r, &["link", "set", &router_end, "mtu", &mtu, "up"])?;
                ip_in(
                    &r,
                    &[
                        "addr",
                        "add",
                        &format!("{}/24", router_ip4(s)),
                        "dev",
                        &router_end,
                    ],
                )?;
                ip_in(
                    &r,
                    &[
                        "addr",
                        "add",
                        &format!("{}/64", router_ip6(s)),
                        "dev",
                        &router_end,
                        "nodad",
                    ],
                )?;
            }
        }
        Ok(())
    }

    fn start_capture(&mut self, file: &Path) -> Result<()> {
        let pcap = self.run.join("capture.pcap");
        let log = self.run.join("tcpdump.log");
        let mut cmd = in_netns(&self.ns, self.paths.top.join("scripts/in-root"));
        cmd.env("ROX_TOP", &self.paths.top)
            .env("ROX_CACHE", &self.paths.cache);
        // -U: every packet is written when captured, so the file is whole at any moment.
        cmd.args([
            "tcpdump",
            "-i",
            &bridge_name(0),
            "-U",
            "-Z",
            "root",
            "-s",
            "0",
        ]);
        if let Some(n) = self.cli.capture_frames {
            cmd.args(["-c", &n.to_string()]);
        }
        cmd.arg("-w").arg(self.paths.in_root(&pcap)?);
        self.helpers.push(Supervised::spawn(
            format!("tcpdump -> {}", file.display()),
            cmd,
            Sink::File(log.clone()),
        )?);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening on")
        {
            if Instant::now() > deadline
                || self.helpers.last_mut().and_then(Supervised::poll).is_some()
            {
                bail!("tcpdump did not start:\n{}", host::tail(&log, 20));
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// KVM guests stall at "Decompressing Linux..." on some machines: probe once per kernel
    /// with a short timeout and remember the verdict in the cache.
    fn accel(&self) -> Result<&'static str> {
        match self.cli.accel {
            Accel::Kvm => return Ok("kvm"),
            Accel::Tcg => return Ok("tcg"),
            Accel::Auto => {}
        }
        let kname = self
            .paths
            .kernel
            .file_name()
            .context("kernel dir has no name")?
            .to_string_lossy()
            .into_owned();
        let mark = self.paths.cache.join(format!("kvm-probe-{kname}"));
        if !mark.exists() {
            let mut verdict = "ko";
            if Path::new("/dev/kvm").exists() {
                eprintln!("rox-lab: probing KVM (at most 20 s)");
                let log = self.run.join("kvm-probe.log");
                let mut cmd = self.paths.in_root_cmd();
                cmd.args([
                    "qemu-system-x86_64",
                    "-accel",
                    "kvm",
                    "-m",
                    "256",
                    "-display",
                    "none",
                    "-serial",
                    "stdio",
                    "-no-reboot",
                ])
                .arg("-kernel")
                .arg(self.paths.in_root(&self.paths.kernel.join("bzImage"))?)
                .args(["-append", "console=ttyS0 panic=-1 init=/bin/true"]);
                let mut probe = Supervised::spawn("KVM probe", cmd, Sink::File(log.clone()))?;
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline && probe.poll().is_none() {
                    let text = fs::read_to_string(&log).unwrap_or_default();
                    if text.contains("Run /bin/true") || text.contains("Kernel panic") {
                        verdict = "ok";
                        break;
                    }
                    thread::sleep(Duration::from_millis(200));
                }
                probe.stop(Duration::ZERO);
            }
            fs::write(&mark, format!("{verdict}\n"))?;
        }
        Ok(if fs::read_to_string(&mark)?.trim() == "ok" {
            "kvm"
        } else {
            "tcg"
        })
    }

    fn start_rox_nic(&mut self, g: usize, n: usize) -> Result<(PathBuf, PathBuf, PathBuf)> {
        let dir = self.guest_dir(g);
        let nic = self.lab.guests[g].nics[n].clone();
        let sock = dir.join(format!("rox{n}.sock"));
        // rox-nic's and QEMU's ends of the paired virtio-net's datagram link.
        let (nic_end, qemu_end) = (
            dir.join(format!("rox{n}-nic.dgram")),
            dir.join(format!("rox{n}-qemu.dgram")),
        );
        if !self.paths.nic_bin.is_file() {
            bail!(
                "no rox-nic binary at {}; run 'cargo build --release -p rox-nic'",
                self.paths.nic_bin.display()
            );
        }
        let mut cmd = in_netns(&self.ns, &self.paths.nic_bin);
        cmd.arg("--socket").arg(&sock).args([
            "--mac",
            &nic.mac,
            "--port",
            &format!("tap:{}", nic.tap),
        ]);
        cmd.arg("--netdev").arg(format!(
            "dgram:local={},remote={}",
            nic_end.display(),
            qemu_end.display()
        ));
        cmd.args(["--mtu", &self.lab.mtu.to_string()]);
        if let Some(f) = &self.cli.faults {
            cmd.args(["--faults", f]);
        }
        let log = dir.join(format!("rox-nic{n}.log"));
        self.helpers.push(Supervised::spawn(
            format!("rox-nic g{g} nic{n}"),
            cmd,
            Sink::File(log.clone()),
        )?);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            if Instant::now() > deadline
                || self.helpers.last_mut().and_then(Supervised::poll).is_some()
            {
                bail!(
                    "rox-nic {n} of guest {g} did not start:\n{}",
                    host::tail(&log, 20)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok((sock, nic_end, qemu_end))
    }

    fn start_guest(&mut self, g: usize, accel: &str) -> Result<()> {
        let dir = self.guest_dir(g);
        fs::create_dir_all(&dir)?;
        let guest = self.lab.guests[g].clone();
        let gi = guest.index;
        // The command, with the lab's addresses in its environment (bash reads it in /rox).
        let mut script = String::new();
        for (k, v) in self.lab.env_for(g) {
            script.push_str(&format!("export {k}='{v}'\n"));
        }
        script.push_str(&format!("cd /rox\n{}\n", guest.cmd));
        fs::write(dir.join("cmd"), script)?;
        fs::write(dir.join("net"), self.lab.guest_net_config(g))?;

        let kernel = self.paths.in_root(&self.paths.kernel)?;
        let dir_in_root = self.paths.in_root(&dir)?;
        let mem = self.cli.mem;
        let mtu = self.lab.mtu;
        let mut args: Vec<String> = vec![
            "-accel".into(),
            accel.into(),
            "-cpu".into(),
            "max".into(),
            "-smp".into(),
            self.cli.cpus.to_string(),
            "-m".into(),
            mem.to_string(),
            "-object".into(),
            format!("memory-backend-memfd,id=mem0,size={mem}M,share=on"),
            "-machine".into(),
            "q35,memory-backend=mem0".into(),
            "-nographic".into(),
            "-vga".into(),
            "none".into(),
            "-no-reboot".into(),
            "-serial".into(),
            "mon:stdio".into(),
            "-kernel".into(),
            format!("{}/bzImage", kernel.display()),
            "-append".into(),
            format!(
                "console=ttyS0 loglevel=4 panic=-1 oops=panic no_timer_check rootfstype=9p root=rootfs \
                 rootflags=trans=virtio,version=9p2000.L,msize=1048576,cache=loose ro init=/rox/qemu/guest-init \
                 rox.run={} rox.modules={}/modules rox.guest={gi}",
                dir_in_root.display(),
                kernel.display()
            ),
            "-fsdev".into(),
            "local,id=rootfs,path=/,security_model=none,readonly=on,multidevs=remap".into(),
            "-device".into(),
            "virtio-9p-pci,fsdev=rootfs,mount_tag=rootfs".into(),
            "-fsdev".into(),
            format!("local,id=run,path={},security_model=none,multidevs=remap", dir_in_root.display()),
            "-device".into(),
            "virtio-9p-pci,fsdev=run,mount_tag=rox-run".into(),
            // eth0: slirp with restrict=on (nothing leaves QEMU), as before the lab.
            "-netdev".into(),
            "user,id=net0,restrict=on".into(),
            "-device".into(),
            format!("virtio-net-pci,netdev=net0,mac=52:54:00:12:34:{gi}{gi},romfile="),
        ];
        let mut vfio_sockets = Vec::new();
        for nic in &guest.nics {
            let n = nic.index;
            let id = format!("lab{n}");
            match nic.kind {
                NicKind::Virtio => {
                    args.push("-netdev".into());
                    args.push(format!(
                        "tap,id={id},ifname={},script=no,downscript=no",
                        nic.tap
                    ));
                }
                NicKind::Rox => {
                    let (sock, nic_end, qemu_end) = self.start_rox_nic(g, n)?;
                    args.push("-netdev".into());
                    args.push(format!(
                        "dgram,id={id},local.type=unix,local.path={},remote.type=unix,remote.path={}",
                        self.paths.in_root(&qemu_end)?.display(),
                        self.paths.in_root(&nic_end)?.display()
                    ));
                    vfio_sockets.push(sock);
                }
            }
            args.push("-device".into());
            args.push(format!(
                "virtio-net-pci,netdev={id},mac={},host_mtu={mtu},romfile=",
                nic.mac
            ));
        }
        if g == 0 {
            vfio_sockets.extend(self.cli.vfio_user.iter().cloned());
        }
        for s in &vfio_sockets {
            let s = self
                .paths
                .in_root(s)
                .context("vfio-user sockets must live under $ROX_CACHE")?;
            args.push("-device".into());
            args.push(format!(
                r#"{{"driver":"vfio-user-pci","socket":{{"type":"unix","path":"{}"}}}}"#,
                s.display()
            ));
        }
        let mut cmd = in_netns(&self.ns, self.paths.top.join("scripts/in-root"));
        cmd.env("ROX_TOP", &self.paths.top)
            .env("ROX_CACHE", &self.paths.cache);
        cmd.arg("qemu-system-x86_64").args(&args);
        let prefix = if self.lab.guests.len() > 1 {
            format!("[g{gi}] ")
        } else {
            String::new()
        };
        let q = Supervised::spawn(format!("guest {g}"), cmd, Sink::Console(prefix))?;
        self.guests.push(q);
        Ok(())
    }

    /// The guest's command status as guest-init recorded it.
    fn guest_status(&self, g: usize) -> Option<i32> {
        fs::read_to_string(self.guest_dir(g).join("status"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn setup(&mut self, signal: &AtomicUsize) -> Result<()> {
        host::sweep_stale(&self.paths.cache.join("run"));
        fs::create_dir_all(&self.run)?;
        // The guest loads modules from the kernel build; the mount point must exist in the root.
        fs::create_dir_all(self.paths.root.join("usr/lib/modules"))?;
        self.build_network()?;
        if let Some(file) = self.cli.capture.clone() {
            self.start_capture(&file)?;
        }
        let accel = self.accel()?;
        let l = &self.lab;
        eprintln!(
            "rox-lab: {} guest(s), {accel}, {} MiB, {} vCPUs, MTU {}, {} subnet(s){}, namespace {}",
            l.guests.len(),
            self.cli.mem,
            self.cli.cpus,
            l.mtu,
            l.subnets,
            if l.routed { " + router" } else { "" },
            self.ns
        );
        for g in 0..self.lab.guests.len() {
            if signal.load(Ordering::SeqCst) != 0 {
                return Ok(());
            }
            let desc: Vec<String> = self.lab.guests[g]
                .nics
                .iter()
                .map(|n| format!("{} {} {}", n.kind, n.ip4, n.mac))
                .collect();
            eprintln!(
                "rox-lab: guest {} on subnet {}: {}",
                self.lab.guests[g].index,
                self.lab.guests[g].subnet,
                desc.join(", ")
            );
            self.start_guest(g, accel)?;
        }
        if let Some(c) = self.cli.host_cmd.clone() {
            self.start_host_cmd(&c)?;
        }
        Ok(())
    }

    /// The --host-cmd: bash in the lab namespace, in its own process group (stopped with the
    /// guests; `remove_netns` kills anything of it still in the namespace).
    fn start_host_cmd(&mut self, command: &str) -> Result<()> {
        let mut cmd = in_netns(&self.ns, "bash");
        cmd.arg("-c").arg(command).current_dir(&self.paths.top);
        cmd.envs(self.lab.host_env()).env("ROX_HOST_IF", HOST_IF);
        for g in 0..self.lab.guests.len() {
            cmd.env(
                format!("ROX_RUN_{}", self.lab.guests[g].index),
                self.guest_dir(g),
            );
        }
        eprintln!(
            "rox-lab: host command on {HOST_IF} (bridge {}): {command}",
            bridge_name(0)
        );
        self.host_cmd = Some(Supervised::spawn(
            "host command",
            cmd,
            Sink::Console("[host] ".to_string()),
        )?);
        Ok(())
    }

    /// Waits for every guest (or the timeout, a signal, or the grace period after a failure).
    fn supervise(&mut self, signal: &AtomicUsize) -> Outcome {
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout);
        let mut grace_end: Option<Instant> = None;
        let mut reported_helpers = vec![false; self.helpers.len()];
        loop {
            let sig = signal.load(Ordering::SeqCst);
            if sig != 0 {
                return Outcome::Signalled(i32::try_from(sig).unwrap_or(15));
            }
            if Instant::now() > deadline {
                return Outcome::TimedOut;
            }
            let mut running = 0;
            for g in 0..self.guests.len() {
                if self.guests[g].poll().is_none() {
                    running += 1;
                } else if self.guest_status(g) != Some(0) && grace_end.is_none() {
                    grace_end = Some(Instant::now() + Duration::from_secs(self.cli.grace));
                }
            }
            for (i, h) in self.helpers.iter_mut().enumerate() {
                if !reported_helpers[i] {
                    // rox-nic ends by itself (status 0) when its QEMU disconnects.
                    if let Some(st) = h.poll().filter(|st| !st.success()) {
                        eprintln!("rox-lab: {} failed ({st})", h.what);
                        reported_helpers[i] = true;
                    }
                }
            }
            if self.host_cmd_status.is_none() {
                if let Some(st) = self.host_cmd.as_mut().and_then(Supervised::poll) {
                    if !st.success() {
                        eprintln!("rox-lab: host command failed ({st})");
                    }
                    self.host_cmd_status = Some(st);
                }
            }
            if running == 0 {
                return Outcome::Done;
            }
            if grace_end.is_some_and(|t| Instant::now() > t) {
                eprintln!(
                    "rox-lab: a guest failed; stopping the others after {} s of grace",
                    self.cli.grace
                );
                return Outcome::Done;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the host command and the guests, then rox-nic and tcpdump, deletes the namespaces (with every bridge, tap
    /// and veth in them) and copies the capture out. Idempotent.
    fn stop_all(&mut self) {
        // Its output is awaited only once the namespace is gone: removing it kills anything
        // the command left running outside its process group, which may hold the pipe.
        if let Some(h) = &mut self.host_cmd {
            h.stop_group(Duration::from_secs(3));
        }
        for q in &mut self.guests {
            q.stop(Duration::from_secs(3));
        }
        if self.lab.routed && self.namespaces.contains(&self.router_ns) {
            self.report_router();
        }
        for h in self.helpers.iter_mut().rev() {
            h.stop(Duration::from_secs(3));
        }
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = host::remove_netns(&ns) {
                eprintln!("rox-lab: {e:#}");
            }
        }
        if let Some(h) = &mut self.host_cmd {
            h.join_output();
        }
        if let Some(file) = &self.cli.capture {
            let pcap = self.run.join("capture.pcap");
            if pcap.exists() && !self.capture_copied {
                self.capture_copied = true;
                match fs::copy(&pcap, file) {
                    Ok(bytes) => eprintln!(
                        "rox-lab: capture of {} ({bytes} bytes) in {}",
                        bridge_name(0),
                        file.display()
                    ),
                    Err(e) => eprintln!(
                        "rox-lab: cannot copy the capture to {}: {e}",
                        file.display()
                    ),
                }
            }
        }
    }

    /// What the router forwarded, for tests to check that traffic really crossed it (printed
    /// in a fixed form: `rox-lab: router netS: rx N packets, tx N packets` and `rox-lab:
    /// router forwarded N IPv4 and N IPv6 datagrams`).
    fn report_router(&self) {
        let read = |path: &str| -> String {
            host::run(in_netns(&self.router_ns, "cat").arg(path))
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        for s in 0..self.lab.subnets {
            let stat = |what: &str| {
                read(&format!("/sys/class/net/net{s}/statistics/{what}"))
                    .trim()
                    .to_string()
            };
            eprintln!(
                "rox-lab: router net{s}: rx {} packets, tx {} packets",
                stat("rx_packets"),
                stat("tx_packets")
            );
        }
        let fwd4 = host::snmp_field(&read("/proc/net/snmp"), "Ip", "ForwDatagrams").unwrap_or(0);
        let fwd6 = host::snmp6_field(&read("/proc/net/snmp6"), "Ip6OutForwDatagrams").unwrap_or(0);
        eprintln!("rox-lab: router forwarded {fwd4} IPv4 and {fwd6} IPv6 datagrams");
    }

    /// `stop_all`, then removes the run directory (logs, sockets, statuses).
    fn teardown(&mut self) {
        self.stop_all();
        if self.run.exists() {
            let _ = fs::remove_dir_all(&self.run);
        }
    }

    /// Exit status from the guests' recorded statuses; explains guests that failed.
    fn verdict(&self) -> u8 {
        let mut rc = 0u8;
        for g in 0..self.lab.guests.len() {
            let st = self.guest_status(g);
            match st {
                Some(0) => {}
                Some(s) => eprintln!("rox-lab: guest {g}: command exited {s}"),
                None => eprintln!("rox-lab: guest {g} ended without reporting the command's status (kernel panic, crash, or stopped)"),
            }
            if st != Some(0) {
                for n in self.lab.guests[g]
                    .nics
                    .iter()
                    .filter(|n| n.kind == NicKind::Rox)
                {
                    let log = self.guest_dir(g).join(format!("rox-nic{}.log", n.index));
                    eprintln!(
                        "--- tail of guest {g} rox-nic{}.log\n{}",
                        n.index,
                        host::tail(&log, 20)
                    );
                }
                if rc == 0 {
                    rc = st
                        .and_then(|s| u8::try_from(s).ok())
                        .filter(|&s| s != 0)
                        .unwrap_or(1);
                }
            }
        }
        if rc == 0 && self.host_cmd_status.is_some_and(|st| !st.success()) {
            rc = 1;
        }
        rc
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let lab = match Lab::new(cli.mtu, cli.routed, cli.first_guest, &cli.guests, &cli.cmds) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rox-lab: error: {e}");
            return ExitCode::from(2);
        }
    };
    // SIGINT/SIGTERM/SIGHUP only set a flag: the supervision loop sees it and tears down.
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let flag = Arc::clone(&signal);
        // The handler stores the signal number (async-signal-safe: one atomic store).
        if let Err(e) =
            signal_hook::flag::register_usize(sig, flag, usize::try_from(sig).unwrap_or(15))
        {
            eprintln!("rox-lab: error: cannot handle signal {sig}: {e}");
            return ExitCode::from(1);
        }
    }
    let paths = match Paths::find(&cli.flavour) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rox-lab: error: {e:#}");
            return ExitCode::from(1);
        }
    };
    let mut runner = Runner::new(cli, lab, paths);
    if let Err(e) = runner.setup(&signal) {
        eprintln!("rox-lab: error: {e:#}");
        runner.teardown();
        return ExitCode::from(1);
    }
    let outcome = runner.supervise(&signal);
    runner.stop_all();
    let code = match outcome {
        Outcome::TimedOut => {
            eprintln!("rox-lab: guests timed out after {} s", runner.cli.timeout);
            ExitCode::from(EXIT_TIMEOUT)
        }
        Outcome::Signalled(sig) => {
            eprintln!("rox-lab: stopped by signal {sig}");
            ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
        }
        Outcome::Done => ExitCode::from(runner.verdict()),
    };
    runner.teardown();
    code
}
