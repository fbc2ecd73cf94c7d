//! rox-peer: an adversarial RoCEv2 peer on the lab bridge (tests/peer/run, docs/peer.md).
//!
//! Runs on the host inside a lab namespace (rox-lab --host-cmd) on an interface of the bridge
//! that holds the lab address given with --ip (the kernel answers ARP for it and carries the TCP
//! side channel). Guest programs (tests/peer/peer-cases.c) connect over TCP, one session per
//! guest, each in its own thread; per case the guest creates a fresh RC QP, the two exchange
//! QPN, PSN, R_Key and address, and the peer plays the other end of the QP with frames it
//! builds itself on a raw socket: well-behaved where the case says so, hostile where it does
//! not (src/cases.rs). After each case it tells the guest what it saw on the wire.

mod cases;
mod control;
mod port;
mod session;

use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use clap::Parser;

use control::{parse_case, Control};
use port::{Endpoint, Port};
use session::{Event, PeerQp, Session};

#[derive(Parser)]
#[command(about = "An adversarial RoCEv2 peer for RC conformance cases on the lab bridge")]
struct Cli {
    /// Interface on the lab bridge (rox-lab's $ROX_HOST_IF).
    #[arg(long)]
    iface: String,
    /// This peer's IPv4 address (must be assigned to --iface).
    #[arg(long)]
    ip: Ipv4Addr,
    /// TCP port of the side channel.
    #[arg(long, default_value_t = 18515)]
    port: u16,
    /// Exit after this many guest sessions ended (0: serve until stopped).
    #[arg(long, default_value_t = 0)]
    sessions: usize,
}

/// First PSN the peer sends with: just before the 24-bit wrap, so every case crosses it.
const PEER_FIRST_PSN: u32 = 0xff_fffe;
/// Long enough for a guest to boot, load its driver and start its program.
const SESSION_IDLE: Duration = Duration::from_secs(900);

fn main() {
    let cli = Cli::parse();
    // Keep the kernel quiet about RoCE packets to our address: with no socket on UDP 4791 it
    // would answer each with an ICMP port unreachable. This socket is never read.
    let _sink = UdpSocket::bind((cli.ip, wire_port())).unwrap_or_else(|e| {
        eprintln!("rox-peer: cannot bind UDP {}:{}: {e}", cli.ip, wire_port());
        std::process::exit(2)
    });
    let listener = TcpListener::bind((cli.ip, cli.port)).unwrap_or_else(|e| {
        eprintln!("rox-peer: cannot listen on {}:{}: {e}", cli.ip, cli.port);
        std::process::exit(2)
    });
    println!(
        "rox-peer: listening on {}:{} ({})",
        cli.ip, cli.port, cli.iface
    );
    let mut threads = Vec::new();
    for (index, stream) in listener.incoming().enumerate() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rox-peer: accept: {e}");
                continue;
            }
        };
        let iface = cli.iface.clone();
        let ip = cli.ip.octets();
        threads.push(std::thread::spawn(move || serve(index, &iface, ip, stream)));
        if cli.sessions != 0 && threads.len() == cli.sessions {
            break;
        }
    }
    // The verdicts reach the runner through the guests (a case the reference rdma_rxe fails
    // is not an error of this program): only a session that could not run fails it.
    let mut broken = false;
    for t in threads {
        broken |= t.join().map_or(true, |ran| !ran);
    }
    std::process::exit(i32::from(broken));
}

fn wire_port() -> u16 {
    rox_nic::roce::wire::ROCE_V2_UDP_PORT
}

/// One guest's session; false if it could not start.
fn serve(index: usize, iface: &str, ip: [u8; 4], stream: TcpStream) -> bool {
    let guest_ip = match stream.peer_addr().map(|a| a.ip()) {
        Ok(std::net::IpAddr::V4(a)) => a.octets(),
        other => {
            eprintln!("rox-peer: session {index}: not an IPv4 guest: {other:?}");
            return false;
        }
    };
    let port = match Port::open(iface, ip) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rox-peer: raw socket on {iface}: {e}");
            return false;
        }
    };
    let guest_name = Ipv4Addr::from(guest_ip);
    let guest = Endpoint {
        ip: guest_ip,
        mac: port::arp_lookup(guest_ip).unwrap_or([0xff; 6]),
    };
    let mut s = Session::new(port, Control::new(stream), guest);
    for case_index in 0u32.. {
        let line = match s.next_event(SESSION_IDLE) {
            Event::Line(line) => line,
            Event::Frame(_) => continue,
            Event::Timeout => break,
        };
        let Some(req) = parse_case(&line) else {
            let _ = s.ctrl.send(&format!("ERR not a CASE line: {line}"));
            break;
        };
        let Some(case) = cases::find(&req.name) else {
            let _ = s.ctrl.send(&format!("ERR unknown case {}", req.name));
            continue;
        };
        if let Some(mac) = port::arp_lookup(guest_ip) {
            s.guest.mac = mac;
        }
        // A fresh QPN per case, so late frames of an earlier case's QP are ignored.
        let qpn = 0x1000 * (index as u32 + 1) + case_index + 1;
        let npsn = PEER_FIRST_PSN.wrapping_sub(case_index) & 0xff_ffff;
        s.start_case(PeerQp::new(qpn, req.qpn, npsn, req.psn, req.rkey, req.va));
        let (rkey, va) = cases::peer_region();
        if s.ctrl
            .send(&format!("PEER {qpn} {npsn} {} {va}", rkey.get()))
            .is_err()
        {
            break;
        }
        if s.await_go() {
            case(&mut s);
        } else {
            s.fault("the guest never said GO".into());
        }
        let verdict = if s.faults.is_empty() {
            "ok".to_string()
        } else {
            format!("fail {}", s.faults.join("; "))
        };
        println!("rox-peer: {guest_name} {}: {verdict}", req.name);
        if s.ctrl.send(&format!("VERDICT {verdict}")).is_err() {
            break;
        }
    }
    println!("rox-peer: {guest_name}: session over");
    true
}
