//! A running lab: its namespaces, rox-nic and tcpdump helpers, QEMU guests and host command,
//! started in order and torn down in reverse.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::host::{self, in_netns, ip, ip_in, Sink, Supervised, NETNS_PREFIX};
use crate::paths::Paths;
use crate::plan::{
    qemu_args, rox_nic_args, rox_nic_files, rox_nic_trace_args, GuestLaunch, RoxNicFiles, HOST_IF,
};
use crate::spec::{bridge_name, Lab, NicKind};
use crate::{Accel, Cli};

/// The file in a guest's run directory whose presence says its rox-nic N may die: a runner
/// that kills it on purpose (tests/ulp/run's fault case) writes it first.
pub fn kill_expected_mark(guest_dir: &Path, nic: usize) -> PathBuf {
    guest_dir.join(format!("rox{nic}.kill-expected"))
}

/// The file a runner writes in a guest's run directory to have rox-lab kill the device of its
/// rox-nic N as a firmware crash or PCIe surprise down would (rox-nic `--die-on`; the process
/// and QEMU live on, unlike after a kill): its content is the death mode, a key of [`DIE_ON`].
/// rox-lab renames it to `<name>.done` once the signal is sent.
pub fn die_request(guest_dir: &Path, nic: usize) -> PathBuf {
    guest_dir.join(format!("rox{nic}.die"))
}

/// The death modes every rox-nic of a lab is started with, and N of the SIGRTMIN+N asking for
/// each (rox-nic `--die-on rtmin+N,fatal=MODE`).
pub const DIE_ON: [(&str, u32); 3] = [("silent", 1), ("report", 2), ("hang", 3)];

/// QEMU's human monitor socket for rox-lab, in the guest's run directory.
pub fn monitor_socket(guest_dir: &Path) -> PathBuf {
    guest_dir.join("monitor.sock")
}

/// The file guest-init writes in its run directory once the guest reached userspace.
pub const BOOTED_MARK: &str = "booted";

/// A process the lab runs beside the guests: a rox-nic or tcpdump.
pub struct Helper {
    pub proc: Supervised,
    pub log: PathBuf,
    /// The guest and NIC a rox-nic serves.
    pub nic_of: Option<(usize, usize)>,
    /// Whether its death was reported already.
    pub reported: bool,
}

/// A running lab. Dropping it tears everything down; `teardown` is idempotent.
pub struct Runner {
    pub cli: Cli,
    pub lab: Lab,
    pub paths: Paths,
    pub ns: String,
    pub router_ns: String,
    pub run: PathBuf,
    /// Namespaces created so far, deleted in reverse.
    pub namespaces: Vec<String>,
    /// tcpdump and rox-nic processes.
    pub helpers: Vec<Helper>,
    /// One QEMU per guest, by guest index.
    pub guests: Vec<Supervised>,
    /// How long each guest took to reach guest-init, once it did.
    pub boot_times: Vec<Option<Duration>>,
    /// The --host-cmd process, once started.
    pub host_cmd: Option<Supervised>,
    /// How the host command ended when it ended by itself (not stopped by us).
    pub host_cmd_status: Option<std::process::ExitStatus>,
    /// A helper died or panicked without the runner expecting it.
    pub helper_failed: bool,
    pub capture_copied: bool,
}

/// What ended the run.
pub enum Outcome {
    Done,
    TimedOut,
    /// These guests missed their boot deadline.
    BootHang(Vec<usize>),
    Signalled(i32),
}

impl Runner {
    pub fn new(cli: Cli, lab: Lab, paths: Paths) -> Runner {
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
            boot_times: Vec::new(),
            host_cmd: None,
            host_cmd_status: None,
            helper_failed: false,
            capture_copied: false,
        }
    }

    pub fn guest_dir(&self, g: usize) -> PathBuf {
        self.run.join(format!("g{g}"))
    }

    pub fn add_netns(&mut self, name: &str) -> Result<()> {
        ip(&["netns", "add", name])?;
        self.namespaces.push(name.to_string());
        ip_in(name, &["link", "set", "lo", "up"])
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
        self.helpers.push(Helper {
            proc: Supervised::spawn(
                format!("tcpdump -> {}", file.display()),
                cmd,
                Sink::File(log.clone()),
            )?,
            log: log.clone(),
            nic_of: None,
            reported: false,
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        while !fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening on")
        {
            if Instant::now() > deadline
                || self
                    .helpers
                    .last_mut()
                    .and_then(|h| h.proc.poll())
                    .is_some()
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
            // kvm_pvm (a paravirtual /dev/kvm) runs only kernels with its own patches: a
            // probe would only wait out its timeout.
            if Path::new("/sys/module/kvm_pvm").exists() {
                eprintln!("rox-lab: /dev/kvm is kvm_pvm's; TCG");
            } else if Path::new("/dev/kvm").exists() {
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

    /// Starts rox-nic for NIC `n` of guest `g` and waits for its vfio-user socket (and its
    /// companion's, which rox-nic binds first).
    fn start_rox_nic(&mut self, g: usize, n: usize) -> Result<RoxNicFiles> {
        let posted_wake = self.cli.posted_wake == crate::OnOff::On;
        let files = rox_nic_files(&self.guest_dir(g), n, posted_wake, self.cli.admin_faults);
        if let Some(path) = &files.admin_faults {
            // Empty (no fault), so that the guest sees it was asked for.
            fs::write(path, "")?;
        }
        if !self.paths.nic_bin.is_file() {
            bail!(
                "no rox-nic binary at {}; run 'cargo build --release -p rox-nic'",
                self.paths.nic_bin.display()
            );
        }
        let panic_at = self.cli.debug_nic_panic_at.filter(|_| (g, n) == (0, 0));
        let args = rox_nic_args(
            &self.lab.guests[g].nics[n],
            &files,
            self.lab.mtu,
            self.cli.faults.as_deref(),
            panic_at,
        );
        let mut cmd = in_netns(&self.ns, &self.paths.nic_bin);
        cmd.args(args);
        cmd.envs(self.cli.rox_nic_env());
        let records = std::env::var("ROX_NIC_TRACE").ok();
        cmd.args(rox_nic_trace_args(records.as_deref(), &trace_dir()?, g, n));
        let what = format!("rox-nic g{g} nic{n}");
        self.helpers.push(Helper {
            proc: Supervised::spawn(what, cmd, Sink::File(files.log.clone()))?,
            log: files.log.clone(),
            nic_of: Some((g, n)),
            reported: false,
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !files.socket.exists() || files.wake.as_ref().is_some_and(|w| !w.exists()) {
            let ended = self.helpers.last_mut().and_then(|h| h.proc.poll());
            if Instant::now() > deadline || ended.is_some() {
                bail!(
                    "rox-nic {n} of guest {g} did not start:\n{}",
                    host::tail(&files.log, 20)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(files)
    }

    /// Writes guest `g`'s command and network configuration, starts its rox-nics and its QEMU.
    fn start_guest(&mut self, g: usize, accel: &str) -> Result<()> {
        let dir = self.guest_dir(g);
        fs::create_dir_all(&dir)?;
        let guest = self.lab.guests[g].clone();
        // The command, with the lab's addresses in its environment (bash reads it in /rox).
        let mut script = String::new();
        for (k, v) in self.lab.env_for(g) {
            script.push_str(&format!("export {k}='{v}'\n"));
        }
        script.push_str(&format!("cd /rox\n{}\n", guest.cmd));
        fs::write(dir.join("cmd"), script)?;
        fs::write(dir.join("net"), self.lab.guest_net_config(g))?;

        // Every path as QEMU sees it, in the toolchain root.
        let mut rox_files = Vec::new();
        for nic in &guest.nics {
            rox_files.push(match nic.kind {
                NicKind::Rox => {
                    let f = self.start_rox_nic(g, nic.index)?;
                    Some(RoxNicFiles {
                        socket: self.paths.in_root(&f.socket)?,
                        nic_end: self.paths.in_root(&f.nic_end)?,
                        qemu_end: self.paths.in_root(&f.qemu_end)?,
                        log: f.log,
                        cable: f.cable,
                        wake: f.wake.map(|w| self.paths.in_root(&w)).transpose()?,
                        admin_faults: f.admin_faults,
                    })
                }
                NicKind::Virtio => None,
            });
        }
        let extra_vfio = if g == 0 {
            self.cli
                .vfio_user
                .iter()
                .map(|s| {
                    self.paths
                        .in_root(s)
                        .context("vfio-user sockets must live under $ROX_CACHE")
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let args = qemu_args(&GuestLaunch {
            guest: &guest,
            mtu: self.lab.mtu,
            accel,
            cpus: self.cli.cpus,
            mem_mib: self.cli.mem,
            kernel: self.paths.in_root(&self.paths.kernel)?,
            initrd: self.paths.kernel.join("initrd").is_file(),
            run_dir: self.paths.in_root(&dir)?,
            monitor: self.paths.in_root(&monitor_socket(&dir))?,
            rox_files,
            extra_vfio,
        });
        let mut cmd = in_netns(&self.ns, self.paths.top.join("scripts/in-root"));
        cmd.env("ROX_TOP", &self.paths.top)
            .env("ROX_CACHE", &self.paths.cache);
        cmd.arg("qemu-system-x86_64").args(&args);
        let prefix = if self.lab.guests.len() > 1 {
            format!("[g{}] ", guest.index)
        } else {
            String::new()
        };
        let q = Supervised::spawn(format!("guest {g}"), cmd, Sink::Console(prefix))?;
        self.guests.push(q);
        self.boot_times.push(None);
        Ok(())
    }

    /// The guest's command status as guest-init recorded it.
    pub fn guest_status(&self, g: usize) -> Option<i32> {
        fs::read_to_string(self.guest_dir(g).join("status"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn setup(&mut self, signal: &AtomicUsize) -> Result<()> {
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

    /// `stop_all`, then removes the run directory (logs, sockets, statuses).
    pub fn teardown(&mut self) {
        self.stop_all();
        if self.run.exists() {
            let _ = fs::remove_dir_all(&self.run);
        }
    }
}

/// Where rox-nic WQE traces go: `$ROX_NIC_TRACE_DIR`, else the current directory (absolute:
/// rox-nic runs in a network namespace, not necessarily from here).
fn trace_dir() -> Result<PathBuf> {
    let dir =
        std::env::var_os("ROX_NIC_TRACE_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from);
    Ok(std::path::absolute(&dir)?)
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.teardown();
    }
}
