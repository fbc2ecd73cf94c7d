//! rox-nic command line: serve one emulated RoCEv2 NIC on a vfio-user socket.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::Parser;
use rox_nic::device::{DeviceConfig, FabricConfig, FaultConfig, RoxNic, DEFAULT_IDLE_AFTER};

/// An emulated PCIe RoCEv2 NIC for QEMU's vfio-user-pci.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// vfio-user socket path QEMU connects to
    /// (`-device '{"driver":"vfio-user-pci","socket":{"type":"unix","path":PATH}}'`).
    #[arg(long)]
    socket: PathBuf,
    /// MAC of the guest's paired virtio-net NIC, reported to the driver (xx:xx:xx:xx:xx:xx).
    #[arg(long, value_parser = parse_mac)]
    mac: [u8; 6],
    /// Fabric directory shared by all rox-nic processes (GID -> UDP address entries).
    /// Without it only QP-to-QP loopback on this device works.
    #[arg(long)]
    fabric_dir: Option<PathBuf>,
    /// Loopback address of this device's fabric socket.
    #[arg(long, default_value = "127.0.0.1")]
    fabric_addr: Ipv4Addr,
    /// Fabric fault injection, e.g. `loss=0.01,dup=0.01,reorder=0.01,corrupt=0.01,seed=42`.
    #[arg(long, alias = "fabric-faults")]
    faults: Option<String>,
    /// Write every transmitted RoCEv2 packet to this pcap file (tshark decodes it).
    #[arg(long, alias = "capture")]
    pcap: Option<PathBuf>,
    /// Milliseconds without work before the data path sleeps until woken.
    #[arg(long, default_value_t = DEFAULT_IDLE_AFTER.as_millis() as u64)]
    idle_ms: u64,
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
    if args.fabric_dir.is_none() && (faults.is_some() || args.pcap.is_some()) {
        return Err("--faults and --pcap need --fabric-dir (they act on the fabric)".into());
    }
    let fabric = args.fabric_dir.map(|directory| FabricConfig {
        directory,
        bind: args.fabric_addr,
        faults,
        pcap: args.pcap,
    });
    let mut config = DeviceConfig::new(args.mac);
    config.fabric = fabric;
    config.idle_after = std::time::Duration::from_millis(args.idle_ms);
    let mut nic = RoxNic::new(config)?;
    let server = rox_nic::server::bind(&args.socket, &nic)?;
    log::info!("rox-nic: serving on {}", args.socket.display());
    server.run(&mut nic)?;
    log::info!("rox-nic: client disconnected, exiting");
    Ok(())
}
