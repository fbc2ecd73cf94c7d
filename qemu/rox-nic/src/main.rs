//! rox-nic command line: serve one emulated RoCEv2 NIC on a vfio-user socket.

use std::path::PathBuf;

use std::sync::Arc;

use clap::Parser;
use rox_nic::device::admin_fault::{AdminFault, AdminFaultConfig};
use rox_nic::device::datapath::SPIN_PERIOD;
use rox_nic::device::{
    BottleneckConfig, DeviceConfig, DieOn, FaultConfig, LinkSpec, PortConfig, RoxNic, Shared,
    DEFAULT_IDLE_AFTER, DEFAULT_POSTED_IDLE_AFTER,
};
use rox_nic::roce::cc::CcConfig;
use rox_nic::roce::wire::FlushIcrc;
use rox_nic::server::Trace;

/// An emulated PCIe RoCEv2 NIC for QEMU's vfio-user-pci, with an Ethernet port shared with
/// the guest's paired virtio-net (like a converged RoCE NIC).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// vfio-user socket path QEMU connects to
    /// (`-device '{"driver":"vfio-user-pci","socket":{"type":"unix","path":PATH}}'`).
    #[arg(long)]
    socket: PathBuf,
    /// MAC of the device and of the guest's paired virtio-net NIC (xx:xx:xx:xx:xx:xx): the
    /// source MAC of RoCE frames, and the unicast MAC the port accepts.
    #[arg(long, value_parser = parse_mac)]
    mac: [u8; 6],
    /// The Ethernet port: `tap:IFNAME` (an existing tap interface in this network
    /// namespace), `dgram:local=PATH,remote=PATH` (QEMU `-netdev dgram` framing over unix
    /// datagram sockets: binds `local`, sends to `remote`), `stream:connect=PATH` or
    /// `stream:listen=PATH` (QEMU `-netdev stream` framing: 4-byte big-endian length before
    /// each frame), `cable:listen=PATH` or `cable:connect=PATH` (a rox-to-rox cable to another
    /// rox-nic on this host: rings of frames in shared memory, docs/networking.md). Without it
    /// there is no wire: only QP-to-QP loopback on this device works.
    #[arg(long)]
    port: Option<LinkSpec>,
    /// IP MTU of the port (default: the tap's MTU; 9000 for socket ports and cables).
    #[arg(long)]
    mtu: Option<usize>,
    /// The guest's paired virtio-net, as `dgram:local=PATH,remote=PATH` (or a `stream:` form).
    /// QEMU runs it as `-netdev dgram,id=N,local.type=unix,local.path=<remote>,
    /// remote.type=unix,remote.path=<local>`. Its frames go out on the port; frames from the
    /// port that are not RoCEv2 for this device go to it.
    #[arg(long)]
    netdev: Option<LinkSpec>,
    /// Fault injection on every frame the port sends, e.g.
    /// `loss=0.01,dup=0.01,reorder=0.01,corrupt=0.01,seed=42`.
    #[arg(long)]
    faults: Option<String>,
    /// A congested switch queue in front of the port's receive side (docs/congestion-lab.md):
    /// `rate=R[k|M|G]` bits/s, and optionally `limit=B`, `kmin=B`, `kmax=B` (bytes, K/M =
    /// KiB/MiB), `pmax=P`, `seed=N`. Arriving frames drain at the rate; beyond `limit` queued
    /// bytes they are dropped; from `kmin` to `kmax` ECN-capable frames are marked CE with a
    /// probability rising to `pmax` (always above `kmax`), others dropped, as RED does.
    #[arg(long, value_name = "SPEC")]
    bottleneck: Option<String>,
    /// Write every frame the port sends and receives to this pcap file (Ethernet; tshark
    /// decodes RoCEv2 as InfiniBand).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Milliseconds without work before the data path sleeps until woken.
    #[arg(long, default_value_t = DEFAULT_IDLE_AFTER.as_millis() as u64)]
    idle_ms: u64,
    /// Serve a posted-wake companion on this unix socket: the ivshmem server of a QEMU
    /// `ivshmem-doorbell` (`-chardev socket,id=C,path=PATH -device
    /// ivshmem-doorbell,chardev=C,vectors=1`) whose doorbell wakes this device without a
    /// vfio-user round trip (docs/hardware.md, "Doorbells, arm and wake"). Default:
    /// $ROX_NIC_WAKE_SOCKET, else none.
    #[arg(long, value_name = "PATH")]
    wake_socket: Option<PathBuf>,
    /// Microseconds without work before the data path sleeps while the driver wakes it
    /// through the companion (REG_WAKE_MODE posted). Default: $ROX_NIC_POSTED_IDLE_US, else
    /// the measured default (docs/benchmarks/session-11.md, "Session 11: the posted wake").
    #[arg(long)]
    posted_idle_us: Option<u64>,
    /// Microseconds the data path keeps polling after its last work before it naps. While it
    /// polls it holds a core that a peer device on the same host may be waiting for
    /// (docs/benchmarks/session-06.md, "What a crossing waits for"). Default: $ROX_NIC_SPIN_US,
    /// else 10.
    #[arg(long)]
    spin_us: Option<u64>,
    /// Microseconds the data path keeps polling after its last work while the driver wakes it
    /// through the companion (posted wakes), at most `--spin-us`. 0 sleeps at once and leaves
    /// the core to whoever the device waits for: faster host streams and two-guest latency,
    /// but a bimodal loopback ib_send_lat (docs/benchmarks/session-14.md, "Session 14: the host
    /// engine at window 64").
    /// Default: $ROX_NIC_POSTED_SPIN_US, else 10 (as `--spin-us`).
    #[arg(long)]
    posted_spin_us: Option<u64>,
    /// Spin the posted spin only where it brings the next work sooner than sleeping at once
    /// (the gaps of the device's recent idle periods that spun against those that slept, kept
    /// per side of its work: the QP whose doorbell or packet ended the idle period before),
    /// else sleep at once and leave the core to whoever the device waits for
    /// (docs/benchmarks/session-19-spin.md, session-20-spin.md). Default:
    /// $ROX_NIC_ADAPTIVE_SPIN (1 or 0), else on (`false` gives the plain spin).
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    adaptive_spin: Option<bool>,
    /// Microseconds the data path keeps polling after its last work while an answer is
    /// expected (RC requests unacknowledged, or packets in / CQEs out since it last had
    /// nothing to do) before it naps; 0 (the default) polls as long as at any other time (`--spin-us`). For a
    /// host with cores to spare: where the guests' vCPUs take every core it made latency
    /// worse (docs/benchmarks/session-06.md, "Spinning while an answer is expected"). Default:
    /// $ROX_NIC_EXPECT_SPIN_US, else 0.
    #[arg(long)]
    expect_spin_us: Option<u64>,
    /// The data-path thread's timer slack in µs: how much later than asked the kernel may end
    /// a nap (a doorbell stored during a nap is seen when it ends); 0 keeps the thread's own
    /// (50 µs). For a host with cores to spare: where the guests' vCPUs take every core, 1 µs
    /// made latency worse (docs/benchmarks/session-10.md, "Session 10: timer slack for the data
    /// path's naps"). Default: $ROX_NIC_NAP_SLACK_US,
    /// else 0.
    #[arg(long)]
    nap_slack_us: Option<u64>,
    /// How FLUSH requests this device sends carry their ICRC: `iba` (the spec), or `rxe` (as
    /// Linux rdma_rxe computes it, which an rxe responder requires; docs/interop.md). Received
    /// FLUSH requests are accepted with either. Default: $ROX_NIC_FLUSH_ICRC, else `iba`.
    #[arg(long, value_enum)]
    flush_icrc: Option<FlushIcrcArg>,
    /// RoCEv2 congestion control: `on` (ECT(0) on every RoCE packet, a CNP answers packets
    /// that arrive marked Congestion Experienced, CNPs cut the QP's rate by DCQCN; as mlx5)
    /// or `off` (Not-ECT, no CNPs sent, CNPs received counted and ignored). Default:
    /// $ROX_NIC_CC, else `on`. docs/transport.md, "Congestion control".
    #[arg(long, value_enum)]
    cc: Option<CcArg>,
    /// DCQCN and notification point parameters under mlx5's names, as
    /// `name=value,...` (e.g. `rpg_ai_rate=10,min_time_between_cnps=0`); repeatable. Default:
    /// $ROX_NIC_CC_PARAMS, else mlx5's defaults. docs/transport.md lists them.
    #[arg(long, value_name = "NAME=VALUE,...")]
    cc_param: Vec<String>,
    /// Trace every send WQE's life (doorbell, fetch, packets, ACKs, retransmissions, CQE,
    /// event, interrupt) into a ring of the newest N records from the start (default:
    /// $ROX_NIC_TRACE). SIGUSR2 starts a stopped trace, or stops a running one and writes it
    /// to the trace file; a trace is also written when rox-nic exits. `rox-trace` reads it
    /// (docs/debugging.md, "A WQE's life").
    #[arg(long, value_name = "N")]
    trace_wqe: Option<usize>,
    /// The WQE trace file (default: $ROX_NIC_TRACE_FILE, else the socket path with
    /// `.wqe-trace` appended).
    #[arg(long, value_name = "PATH")]
    trace_wqe_file: Option<PathBuf>,
    /// Fault injection: on this real-time signal the device dies as a NIC whose firmware
    /// crashed or whose PCIe link went down: `rtmin+N[,fatal=silent|report|hang]` (`report` and
    /// `hang` raise the device's fatal event first). It then does nothing and its BARs read
    /// all-ones (`hang`: they answer, and a reset never completes), but QEMU stays served.
    /// Repeatable (one signal per mode). docs/hardware.md.
    #[arg(long, value_name = "SPEC")]
    die_on: Vec<DieOn>,
    /// Fault injection: the device refuses admin commands of this opcode with an error status
    /// instead of running them, as firmware may: `OPCODE[:STATUS][,count=N]`, the opcode and
    /// status by their uapi names without `ADMIN_OP_` / `ADMIN_STATUS_` (e.g.
    /// `QUERY_DEVICE:NO_RESOURCES,count=1`; the status defaults to `BAD_PARAM`, or is a number
    /// 1-255), the first N such commands or every one; for a query, `written=B` in STATUS's
    /// place runs it and claims B bytes of response written (short or long). Repeatable.
    /// docs/hardware.md.
    #[arg(long, value_name = "SPEC")]
    admin_fault: Vec<AdminFault>,
    /// Fault injection as `--admin-fault`, the specs (separated by white space) read from this
    /// file whenever the driver enables the admin queue, if its content changed: a test flips
    /// faults on and off between driver loads. No file: no fault. Read without blocking and
    /// only as a regular file of at most 4 KiB, not through a symbolic link (the guest writes
    /// its directory); anything else is logged and injects nothing. rox-lab gives every
    /// rox-nic one in its guest's run directory (`/run/rox/rox<N>.admin-fault` in the guest)
    /// when asked (`--admin-faults`, ROX_LAB_ADMIN_FAULTS=1).
    #[arg(long, value_name = "PATH")]
    admin_fault_file: Option<PathBuf>,
    /// Debugging only (rox-lab's own test that a rox-nic panic fails its lab): panic when
    /// vfio-user request number N reaches the device.
    #[arg(long, hide = true, value_name = "N")]
    debug_panic_at: Option<u64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum FlushIcrcArg {
    Iba,
    Rxe,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CcArg {
    On,
    Off,
}

/// A duration in µs from the command line, else (through rox-lab) the environment variable
/// `env`, else `default`.
fn micros_arg(arg: Option<u64>, env: &str, default: u64) -> Result<std::time::Duration, String> {
    let us = match (arg, std::env::var(env)) {
        (Some(us), _) => us,
        (None, Ok(v)) => v
            .parse()
            .map_err(|_| format!("{env}={v}: not a number of µs"))?,
        (None, Err(_)) => default,
    };
    Ok(std::time::Duration::from_micros(us))
}

/// The spin while wakes are posted: `--posted-spin-us`, else $ROX_NIC_POSTED_SPIN_US, else the
/// spin itself (`--spin-us`: a device with posted wakes spins as one without unless told). The
/// device refuses one longer than the spin (`Backoff::new`).
fn posted_spin(arg: Option<u64>, spin: std::time::Duration) -> Result<std::time::Duration, String> {
    micros_arg(arg, "ROX_NIC_POSTED_SPIN_US", spin.as_micros() as u64)
}

/// Whether the posted spin adapts: `--adaptive-spin true|false`, else $ROX_NIC_ADAPTIVE_SPIN
/// (1 or 0), else on.
fn adaptive_spin(arg: Option<bool>) -> Result<bool, String> {
    match (arg, std::env::var("ROX_NIC_ADAPTIVE_SPIN")) {
        (Some(a), _) => Ok(a),
        (None, Ok(v)) => match v.as_str() {
            "1" => Ok(true),
            "0" => Ok(false),
            _ => Err(format!("ROX_NIC_ADAPTIVE_SPIN={v:?}: want 1 or 0")),
        },
        (None, Err(_)) => Ok(true),
    }
}

/// The congestion control the command line (or, through rox-lab, the environment) asks for.
fn congestion_control(arg: Option<CcArg>, params: &[String]) -> Result<CcConfig, String> {
    let mode = match (arg, std::env::var("ROX_NIC_CC")) {
        (Some(a), _) => a,
        (None, Ok(v)) => clap::ValueEnum::from_str(&v, true)
            .map_err(|_| format!("ROX_NIC_CC={v:?}: want on or off"))?,
        (None, Err(_)) => CcArg::On,
    };
    let mut cc = CcConfig {
        enabled: mode == CcArg::On,
        ..CcConfig::default()
    };
    if params.is_empty() {
        if let Ok(v) = std::env::var("ROX_NIC_CC_PARAMS") {
            cc.params
                .apply_list(&v)
                .map_err(|e| format!("ROX_NIC_CC_PARAMS: {e}"))?;
        }
    }
    for list in params {
        cc.params
            .apply_list(list)
            .map_err(|e| format!("--cc-param: {e}"))?;
    }
    Ok(cc)
}

/// The FLUSH ICRC the command line (or, through rox-lab, the environment) asks for.
fn flush_icrc(arg: Option<FlushIcrcArg>) -> Result<FlushIcrc, String> {
    let arg = match (arg, std::env::var("ROX_NIC_FLUSH_ICRC")) {
        (Some(a), _) => a,
        (None, Ok(v)) => clap::ValueEnum::from_str(&v, true)
            .map_err(|_| format!("ROX_NIC_FLUSH_ICRC={v:?}: want iba or rxe"))?,
        (None, Err(_)) => FlushIcrcArg::Iba,
    };
    Ok(match arg {
        FlushIcrcArg::Iba => FlushIcrc::Iba,
        FlushIcrcArg::Rxe => FlushIcrc::Rxe,
    })
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!(
            "{s:?} is not a MAC address (want xx:xx:xx:xx:xx:xx)"
        ));
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not a MAC address"))?;
    }
    Ok(mac)
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("rox-nic: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let faults = args.faults.as_deref().map(FaultConfig::parse).transpose()?;
    let bottleneck = args
        .bottleneck
        .as_deref()
        .map(BottleneckConfig::parse)
        .transpose()?;
    let flush = flush_icrc(args.flush_icrc)?;
    let cc = congestion_control(args.cc, &args.cc_param)?;
    if !cc.enabled {
        log::info!("rox-nic: congestion control off (Not-ECT, no CNPs, CNPs ignored)");
    }
    if flush == FlushIcrc::Rxe {
        log::info!("rox-nic: FLUSH requests carry rdma_rxe's ICRC");
    }
    let port = match args.port {
        Some(link) => Some(PortConfig {
            link,
            mtu: args.mtu,
            faults,
            pcap: args.pcap,
            bottleneck,
        }),
        None if faults.is_some()
            || args.pcap.is_some()
            || args.mtu.is_some()
            || bottleneck.is_some() =>
        {
            return Err(
                "--faults, --pcap, --mtu and --bottleneck need --port (they act on the port)"
                    .into(),
            );
        }
        None => None,
    };
    let mut config = DeviceConfig::new(args.mac);
    config.port = port;
    config.netdev = args.netdev;
    config.idle_after = std::time::Duration::from_millis(args.idle_ms);
    config.spin = micros_arg(
        args.spin_us,
        "ROX_NIC_SPIN_US",
        SPIN_PERIOD.as_micros() as u64,
    )?;
    config.posted_spin = posted_spin(args.posted_spin_us, config.spin)?;
    config.adaptive_spin = adaptive_spin(args.adaptive_spin)?;
    config.expect_spin = micros_arg(args.expect_spin_us, "ROX_NIC_EXPECT_SPIN_US", 0)?;
    let slack = micros_arg(args.nap_slack_us, "ROX_NIC_NAP_SLACK_US", 0)?;
    config.nap_slack = (!slack.is_zero()).then_some(slack);
    config.flush_icrc = flush;
    config.cc = cc;
    config.posted_idle_after = micros_arg(
        args.posted_idle_us,
        "ROX_NIC_POSTED_IDLE_US",
        DEFAULT_POSTED_IDLE_AFTER.as_micros() as u64,
    )?;
    let wake_socket = args
        .wake_socket
        .or_else(|| std::env::var_os("ROX_NIC_WAKE_SOCKET").map(PathBuf::from))
        .filter(|p| !p.as_os_str().is_empty());
    config.posted_wake = wake_socket.is_some();
    config.admin_faults = AdminFaultConfig {
        fixed: args.admin_fault,
        file: args.admin_fault_file,
    };
    let mut nic = RoxNic::new(config)?;
    // Before the socket exists: whoever sees it may signal us.
    let wqe_trace_file = start_wqe_trace(args.trace_wqe, args.trace_wqe_file, &args.socket, &nic)?;
    die_on_signals(&args.die_on, nic.shared().clone())?;
    if let Some(path) = &wake_socket {
        // Before the vfio-user socket: whoever waits for that one finds this one too.
        rox_nic::server::ivshmem::bind(path, nic.shared())?.spawn()?;
        log::info!("rox-nic: wake companion on {}", path.display());
    }
    let server = rox_nic::server::bind(&args.socket, &nic)?;
    let trace = Trace::new(Trace::DEFAULT_CAPACITY);
    dump_trace_on_sigusr1(trace.clone())?;
    log::info!("rox-nic: serving on {}", args.socket.display());
    rox_nic::server::serve(&server, &mut nic, trace, args.debug_panic_at)?;
    log::info!("rox-nic: client disconnected, exiting");
    if !nic.shared().wqe_trace.dump().records.is_empty() {
        write_wqe_trace(nic.shared(), &wqe_trace_file);
    }
    Ok(())
}

/// The WQE trace as the command line and environment ask: started now with `--trace-wqe N`
/// (or $ROX_NIC_TRACE=N), toggled by SIGUSR2 (a stop writes it out). Returns its file.
fn start_wqe_trace(
    capacity: Option<usize>,
    file: Option<PathBuf>,
    socket: &std::path::Path,
    nic: &RoxNic,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let capacity = match (capacity, std::env::var("ROX_NIC_TRACE")) {
        (Some(n), _) => Some(n),
        (None, Ok(v)) if v.is_empty() => None,
        (None, Ok(v)) => Some(
            v.parse()
                .map_err(|_| format!("ROX_NIC_TRACE={v:?}: want a number of records"))?,
        ),
        (None, Err(_)) => None,
    };
    let file = match (file, std::env::var_os("ROX_NIC_TRACE_FILE")) {
        (Some(f), _) => f,
        (None, Some(f)) => PathBuf::from(f),
        (None, None) => {
            let mut f = socket.as_os_str().to_owned();
            f.push(".wqe-trace");
            PathBuf::from(f)
        }
    };
    let shared = nic.shared().clone();
    match capacity {
        Some(0) => {
            return Err("--trace-wqe 0: the trace needs room for at least one record".into())
        }
        Some(n) => {
            shared.wqe_trace.start(Some(n));
            log::info!("rox-nic: WQE trace on ({n} records; {})", file.display());
        }
        None => {}
    }
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR2])?;
    let path = file.clone();
    std::thread::Builder::new()
        .name("rox-wqe-trace".into())
        .spawn(move || {
            for _ in signals.forever() {
                if shared.wqe_trace.toggle() {
                    log::info!("rox-nic: WQE trace started (SIGUSR2 again stops and writes it)");
                } else {
                    write_wqe_trace(&shared, &path);
                }
            }
        })?;
    Ok(file)
}

fn write_wqe_trace(shared: &Shared, path: &std::path::Path) {
    match shared.wqe_trace.write_dump(path) {
        Ok(n) => log::info!(
            "rox-nic: WQE trace: {n} records written to {}",
            path.display()
        ),
        Err(e) => log::error!("rox-nic: WQE trace: cannot write {}: {e}", path.display()),
    }
}

/// `--die-on`: a thread that kills the device on each given signal.
fn die_on_signals(specs: &[DieOn], shared: Arc<Shared>) -> std::io::Result<()> {
    if specs.is_empty() {
        return Ok(());
    }
    let specs = specs.to_vec();
    let mut signals = signal_hook::iterator::Signals::new(specs.iter().map(DieOn::signal))?;
    std::thread::Builder::new()
        .name("rox-die-on".into())
        .spawn(move || {
            for sig in signals.forever() {
                if let Some(spec) = specs.iter().find(|s| s.signal() == sig) {
                    log::warn!("rox-nic: signal {sig}: the device dies ({:?})", spec.mode);
                    shared.die(spec.mode);
                }
            }
        })?;
    Ok(())
}

/// On SIGUSR1, print the vfio-user trace to stderr (rox-nic's log in a lab): rox-lab asks for it
/// when a guest misses its boot deadline. A thread of its own, so a server loop blocked in a read
/// of its socket still answers.
fn dump_trace_on_sigusr1(trace: Arc<Trace>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR1])?;
    std::thread::Builder::new()
        .name("rox-trace-dump".into())
        .spawn(move || {
            for _ in signals.forever() {
                eprint!("rox-nic: {}", trace.render());
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_adaptive_spin_is_on_unless_told() {
        assert_eq!(adaptive_spin(Some(true)), Ok(true));
        assert_eq!(adaptive_spin(Some(false)), Ok(false));
        if std::env::var_os("ROX_NIC_ADAPTIVE_SPIN").is_none() {
            assert_eq!(adaptive_spin(None), Ok(true));
        }
    }

    #[test]
    fn admin_faults_parse_and_bad_ones_are_refused() {
        let base = ["rox-nic", "--socket", "/s", "--mac", "02:00:00:00:00:01"];
        let args = Args::try_parse_from(base.iter().chain(&[
            "--admin-fault",
            "QUERY_DEVICE",
            "--admin-fault",
            "READ_MAC:BUSY,count=2",
            "--admin-fault",
            "QUERY_PORT:written=8",
            "--admin-fault-file",
            "/run/f",
        ]))
        .unwrap();
        assert_eq!(args.admin_fault.len(), 3);
        assert_eq!(args.admin_fault_file, Some(PathBuf::from("/run/f")));
        for bad in [
            "CREATE_EQ",
            "QUERY_DEVICE:SUCCESS",
            "READ_MAC,count=0",
            "READ_MAC:written=8",
        ] {
            let parsed = Args::try_parse_from(base.iter().chain(&["--admin-fault", bad]));
            assert!(parsed.is_err(), "--admin-fault {bad} accepted");
        }
    }

    #[test]
    fn the_posted_spin_is_the_spin_unless_told() {
        let us = Duration::from_micros;
        assert_eq!(posted_spin(Some(0), us(50)), Ok(us(0)));
        assert_eq!(posted_spin(Some(50), us(50)), Ok(us(50)));
        if std::env::var_os("ROX_NIC_POSTED_SPIN_US").is_none() {
            assert_eq!(posted_spin(None, us(50)), Ok(us(50)));
        }
    }
}
