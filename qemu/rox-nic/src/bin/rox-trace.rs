//! rox-trace: reads WQE trace dumps of rox-nic devices (`rox-nic --trace-wqe N`, SIGUSR2) and
//! writes them as Chrome trace-event JSON for Perfetto (ui.perfetto.dev), a text timeline and
//! per-stage latency histograms. Several dumps (one per device, e.g. the two ends of a
//! connection) share one time base: CLOCK_MONOTONIC of the host.

use std::path::PathBuf;

use clap::Parser;
use rox_nic::trace::{chrome, report, Dump};

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Trace dumps, one per device (a device is named after its file unless --name says).
    #[arg(required = true)]
    dumps: Vec<PathBuf>,
    /// Device names, in the order of the dumps.
    #[arg(long = "name")]
    names: Vec<String>,
    /// Write Chrome trace-event JSON here (open it in ui.perfetto.dev).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print the text timeline (the default when nothing else is asked for).
    #[arg(long)]
    timeline: bool,
    /// Print per-stage latency histograms (the default when nothing else is asked for).
    #[arg(long)]
    histograms: bool,
    /// Print only the timeline of the last WQE of this work-request opcode (RDMA_WRITE,
    /// SEND, RDMA_READ, ...): every device's records from its doorbell to its interrupt.
    #[arg(long, value_name = "OPCODE")]
    wqe: Option<String>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("rox-trace: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let mut dumps = Vec::new();
    let mut names = Vec::new();
    for (i, path) in args.dumps.iter().enumerate() {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let dump = Dump::read_from(&mut std::io::BufReader::new(f))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        dumps.push(dump);
        names.push(args.names.get(i).cloned().unwrap_or_else(|| {
            path.file_name()
                .map_or(format!("device {i}"), |n| n.to_string_lossy().into_owned())
        }));
    }
    if let Some(out) = &args.json {
        let doc = chrome::export(&dumps, &names);
        let text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
        std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!(
            "rox-trace: wrote {} (open it in ui.perfetto.dev)",
            out.display()
        );
    }
    if let Some(op) = &args.wqe {
        let text = report::wqe_timeline(&dumps, &names, op)
            .ok_or_else(|| format!("no {op} WQE in the trace"))?;
        print!("{text}");
        return Ok(());
    }
    let both = !args.timeline && !args.histograms && args.json.is_none();
    if args.timeline || both {
        print!("{}", report::timeline(&dumps, &names));
    }
    if args.histograms || both {
        if args.timeline || both {
            println!();
        }
        print!("{}", report::histograms(&dumps));
    }
    Ok(())
}
