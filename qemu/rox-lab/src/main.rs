//! rox-lab: builds a test network in network namespaces (a bridge per subnet, a tap per guest
//! NIC, a router namespace joining subnets), starts rox-nic processes and QEMU guests on it,
//! runs one command per guest, and removes all of it at the end — on success, failure,
//! timeout, SIGINT/SIGTERM/SIGHUP. docs/networking.md describes shapes and addresses.

mod diagnose;
mod host;
mod network;
mod paths;
mod plan;
mod runner;
mod spec;
mod supervise;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use clap::{Parser, ValueEnum};

use paths::Paths;
use runner::{Outcome, Runner};
use spec::{GuestArg, Lab, NicArgs};

/// Exit status when the --timeout watchdog stopped the guests (as timeout(1)), or a guest
/// missed its boot deadline.
const EXIT_TIMEOUT: u8 = 124;

/// Seconds a guest has to reach guest-init (its `booted` mark) under TCG on a loaded machine,
/// with the release and the debug kernel (kmemleak, KFENCE, SLUB debugging boot slower).
const DEFAULT_BOOT_TIMEOUT: u64 = 150;
const DEFAULT_BOOT_TIMEOUT_DEBUG: u64 = 300;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

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
    /// Kernel flavour: release, debug or stock (Debian's kernel, docs/kernel.md).
    #[arg(long, env = "ROX_KERNEL_FLAVOUR", default_value = "release")]
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
    /// Join the first NICs of the first two guests (both rox) with a rox-to-rox cable
    /// (shared-memory rings between their rox-nics, docs/networking.md) instead of the
    /// bridge; their frames then never reach bridge 0 (--capture does not see them).
    #[arg(long)]
    cable: bool,
    /// More rox-nic options for the rox NICs of guest G (its number), or of every guest with
    /// `all=ARGS`, e.g. `--nic-args 2='--bottleneck rate=200M'`; split at spaces, added after
    /// the lab's own; repeatable (docs/networking.md).
    #[arg(long = "nic-args", value_name = "G=ARGS", allow_hyphen_values = true)]
    nic_args: Vec<NicArgs>,
    /// Capture bridge 0 with tcpdump into this pcap file (implies --raw-bridge-reader).
    #[arg(long)]
    capture: Option<PathBuf>,
    /// Something reads bridge 0 raw (a --host-cmd's tcpdump or AF_PACKET socket): the rox-nics
    /// send frames one by one (ROX_TAP_GSO=off), not the tap's segmentation-offload requests of
    /// up to 64 KiB, which such a reader would see uncut (docs/networking.md).
    #[arg(long)]
    raw_bridge_reader: bool,
    /// Stop capturing after this many frames (tcpdump -c; the default takes every frame).
    #[arg(long, requires = "capture")]
    capture_frames: Option<u64>,
    /// Give each rox NIC its posted-wake companion (`on`): a QEMU `ivshmem-doorbell` whose
    /// ivshmem server is the NIC's rox-nic (`--wake-socket`), so the driver wakes a sleeping
    /// device without a vfio-user round trip (docs/hardware.md, "Doorbells, arm and wake").
    /// `off` leaves it out (A/B runs, the trapped-wake fallback).
    #[arg(long, value_enum, env = "ROX_POSTED_WAKE", default_value = "on")]
    posted_wake: OnOff,
    /// Give each rox-nic `--admin-fault-file` in its guest's run directory (created empty;
    /// the guest writes `/run/rox/rox<N>.admin-fault` to have its device refuse admin
    /// commands, docs/hardware.md). Off unless asked: a rox-nic built before the option (an
    /// A/B benchmark's base) refuses it. tests/guest/run asks (ROX_LAB_ADMIN_FAULTS=1).
    #[arg(long, env = "ROX_LAB_ADMIN_FAULTS", value_parser = clap::builder::FalseyValueParser::new())]
    admin_faults: bool,
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
    /// A guest that has not reached guest-init this many seconds after its QEMU started has
    /// hung booting: rox-lab prints what explains it (QEMU's threads and monitor, rox-nic's
    /// vfio-user trace, the console), stops the lab and exits 124. 0: no deadline. Default:
    /// 150 (release kernel), 300 (debug kernel).
    #[arg(long, env = "ROX_BOOT_TIMEOUT")]
    boot_timeout: Option<u64>,
    /// Debugging rox-lab itself: force a boot hang of guest G once its firmware runs (its
    /// console shows SeaBIOS): SIGSTOP its first rox-nic, pause its vCPUs.
    #[arg(long, hide = true, value_name = "G")]
    debug_hang: Option<usize>,
    /// Debugging rox-lab itself: guest 0's first rox-nic panics at vfio-user request N.
    #[arg(long, hide = true, value_name = "N")]
    debug_nic_panic_at: Option<u64>,
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

impl Cli {
    /// The environment rox-lab adds to each rox-nic's own.
    fn rox_nic_env(&self) -> Vec<(&'static str, &'static str)> {
        if self.raw_bridge_reader || self.capture.is_some() {
            // A raw reader of the bridge takes frames, not segmentation-offload requests.
            vec![("ROX_TAP_GSO", "off")]
        } else {
            Vec::new()
        }
    }

    /// Seconds a guest has to boot (0: no deadline).
    fn boot_deadline(&self) -> u64 {
        self.boot_timeout.unwrap_or(if self.flavour == "debug" {
            DEFAULT_BOOT_TIMEOUT_DEBUG
        } else {
            DEFAULT_BOOT_TIMEOUT
        })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let lab = Lab::new(cli.mtu, cli.routed, cli.first_guest, &cli.guests, &cli.cmds)
        .and_then(|l| if cli.cable { l.with_cable() } else { Ok(l) })
        .and_then(|l| l.with_nic_args(&cli.nic_args));
    let lab = match lab {
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
        Outcome::BootHang(late) => {
            let which: Vec<String> = late.iter().map(|g| format!("guest {g}")).collect();
            eprintln!(
                "rox-lab: FAILED: {} did not boot within {} s (no guest-init mark): a boot hang; \
                 the diagnosis is above",
                which.join(" and "),
                runner.cli.boot_deadline()
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let lab = ["rox-lab", "--guest", "rox", "--cmd", "true"];
        Cli::try_parse_from(lab.iter().chain(args)).expect("a valid command line")
    }

    #[test]
    fn a_raw_reader_of_the_bridge_turns_the_taps_offload_off() {
        let off = vec![("ROX_TAP_GSO", "off")];
        assert_eq!(cli(&["--raw-bridge-reader"]).rox_nic_env(), off);
        assert_eq!(cli(&["--capture", "/tmp/x.pcap"]).rox_nic_env(), off);
        // Without one the offload stays as rox-nic's environment says (on by default).
        assert_eq!(cli(&[]).rox_nic_env(), Vec::new());
        assert_eq!(cli(&["--host-cmd", "true"]).rox_nic_env(), Vec::new());
    }

    #[test]
    fn admin_fault_files_are_given_only_when_asked() {
        // Off is checked only when the environment does not ask (tests/guest/run's does).
        assert!(cli(&["--admin-faults"]).admin_faults);
        if std::env::var_os("ROX_LAB_ADMIN_FAULTS").is_none() {
            assert!(!cli(&[]).admin_faults);
        }
    }
}
