//! Host benchmark of the transport engine between two in-memory devices (not a timed test):
//! messages/s and GB/s of RDMA WRITE and SEND from 8 B to 1 MiB at MTU 4096, next to the host's
//! memcpy bandwidth measured in the same run (one table, `rox_nic::benchkit`). The first test
//! measures the engine alone (packet building, ICRC, parsing, PSN/ACK logic, memory copies
//! through the env); the second puts two ports (Ethernet frames on a unix datagram socket
//! pair, batched sendmmsg/recvmmsg) between the two engines.
//!
//! Run: cargo test --release -p rox-nic --test roce_bench -- --ignored --nocapture

mod roce_common;
use roce_common::*;

use std::time::Instant;

use rox_nic::benchkit::{self, Rate};

const QPN_A: Qpn = Qpn::new(0x11).unwrap();
const QPN_B: Qpn = Qpn::new(0x22).unwrap();
const SRC: u64 = MEM_BASE;
const DST: u64 = MEM_BASE + (2 << 20);
const MAX_SIZE: u32 = 1 << 20;
/// WRs kept in flight.
const DEPTH: u64 = 32;
/// Bytes moved per measurement (bounded by the message counts below).
const BYTES_PER_POINT: u64 = 256 << 20;
const MIN_MESSAGES: u64 = 200;
const MAX_MESSAGES: u64 = 200_000;

/// Two engines connected RC at MTU 4096 with an MR each, keeping `DEPTH` WRs of one opcode and
/// size in flight; a SEND run gets all its receive WRs up front.
struct Exchange {
    net: Net,
    key_a: Key,
    key_b: Key,
    opcode: WrOpcode,
    size: u32,
    messages: u64,
    posted: u64,
    done: u64,
}

impl Exchange {
    fn new(opcode: WrOpcode, size: u32, params: &QpParams, messages: u64) -> Exchange {
        let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
        let key_a = net.devs[0]
            .env
            .reg_mr(PD, SRC, u64::from(MAX_SIZE), ALL_ACCESS);
        let key_b = net.devs[1]
            .env
            .reg_mr(PD, DST, u64::from(MAX_SIZE), ALL_ACCESS);
        connect(&mut net, 0, QPN_A, 1, QPN_B, params);
        if opcode == WrOpcode::Send {
            for wr_id in 0..messages {
                let sges = vec![sge(DST, size, key_b)];
                net.devs[1].env.post_recv(QPN_B, recv_wr(wr_id, sges));
            }
        }
        Exchange {
            net,
            key_a,
            key_b,
            opcode,
            size,
            messages,
            posted: 0,
            done: 0,
        }
    }

    /// Tops the requester up to `DEPTH` WRs in flight.
    fn post(&mut self) {
        while self.posted < self.messages && self.posted - self.done < DEPTH {
            let data = SendData::Sges(vec![sge(SRC, self.size, self.key_a)]);
            let mut wr = send_wr(self.posted, self.opcode, data);
            wr.remote_addr = DST;
            wr.rkey = self.key_b;
            let (engine, env) = self.net.dev(0);
            engine.post_send(env, QPN_A, wr).unwrap();
            self.posted += 1;
        }
    }

    /// Counts the requester's completions (every one must succeed); drops the responder's.
    fn reap(&mut self) {
        for c in self.net.devs[0].env.take_completions() {
            assert_eq!(c.status, WcStatus::Success);
            self.done += 1;
        }
        self.net.devs[1].env.completions.clear();
    }

    fn finished(&self) -> bool {
        self.done == self.messages
    }
}

fn run(opcode: WrOpcode, size: u32) -> Rate {
    let params = QpParams {
        mtu: Mtu::Mtu4096,
        ..QpParams::rc()
    };
    let messages = (BYTES_PER_POINT / u64::from(size)).clamp(MIN_MESSAGES, MAX_MESSAGES);
    let mut x = Exchange::new(opcode, size, &params, messages);
    let start = Instant::now();
    while !x.finished() {
        x.post();
        assert!(x.net.pump());
        x.reap();
    }
    Rate::new(messages, u64::from(size), start.elapsed().as_secs_f64())
}

/// Prints the table of `measure(opcode, size)` for every size.
fn table(title: &str, measure: impl Fn(WrOpcode, u32) -> Rate) {
    benchkit::print_header(title);
    for size in benchkit::SIZES {
        let size = size as u32;
        let write = measure(WrOpcode::RdmaWrite, size);
        let send = measure(WrOpcode::Send, size);
        benchkit::print_row(u64::from(size), write, send);
    }
    benchkit::print_footer();
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn engine_write_and_send_bandwidth() {
    table(
        &format!(
            "transport engine only, two in-memory devices, RC, MTU 4096, {DEPTH} WRs in flight"
        ),
        run,
    );
}

/// The same exchange with every packet going through a port, as an Ethernet frame on a unix
/// datagram socket pair (two ports in one process, one thread): what two rox-nic processes'
/// data paths can reach.
fn run_over_ports(opcode: WrOpcode, size: u32) -> Rate {
    use rox_nic::port::frame::{sort_frame, Arrival};
    use rox_nic::port::{Link, LinkSpec, Port};
    /// Real time and a loaded host: the ACK timeout of ibv_rc_pingpong (67 ms).
    const ACK_TIMEOUT: u8 = 14;
    const MTU: usize = 9000;
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a"), dir.path().join("b"));
    let params = QpParams {
        mtu: Mtu::Mtu4096,
        timeout: ACK_TIMEOUT,
        ..QpParams::rc()
    };
    let messages = (BYTES_PER_POINT / 4 / u64::from(size)).clamp(MIN_MESSAGES, MAX_MESSAGES / 4);
    let mut x = Exchange::new(opcode, size, &params, messages);
    let mut ports: Vec<Port> = [(&pa, &pb), (&pb, &pa)]
        .into_iter()
        .zip(&x.net.devs)
        .map(|((local, remote), d)| {
            let link = Link::open(&LinkSpec::Dgram {
                local: local.clone(),
                remote: remote.clone(),
            })
            .unwrap();
            Port::with_link(link, mac_of(&d.gid), MTU, None, None).unwrap()
        })
        .collect();
    let epoch = Instant::now();
    while !x.finished() {
        // The engines run on the real clock here (Net::dev hands out `net.now`).
        x.net.now = epoch.elapsed().as_nanos() as u64;
        x.post();
        for (d, port) in x.net.devs.iter_mut().zip(ports.iter_mut()) {
            d.env.now = epoch.elapsed().as_nanos() as u64;
            for ((_, p), dmac) in d.env.outbox.drain(..).zip(d.env.tx_dmacs.drain(..)) {
                port.queue_ip(&dmac, p);
            }
            port.flush();
            let (mac, max, gid) = (port.mac(), port.max_frame(), d.gid);
            while port.recv().unwrap() > 0 {
                for f in port.frames() {
                    if let Arrival::Roce(ip, _) = sort_frame(f, &mac, max, |g| *g == gid) {
                        let _ = d.engine.receive(&mut d.env, &f[ip]);
                    }
                }
            }
            d.engine.poll(&mut d.env);
        }
        x.reap();
    }
    let secs = epoch.elapsed().as_secs_f64();
    let stats = x.net.devs[0].engine.stats();
    if stats.retransmit_timeouts + stats.nak_rewinds > 0 {
        println!(
            "  ({size} B {opcode:?}: {} timeouts, {} NAK rewinds: packets lost, or the process was descheduled past the ACK timeout)",
            stats.retransmit_timeouts, stats.nak_rewinds
        );
    }
    Rate::new(messages, u64::from(size), secs)
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn port_write_and_send_bandwidth() {
    table(
        &format!("two engines over a unix dgram socket pair (Ethernet frames, sendmmsg/recvmmsg), one thread for both, RC, MTU 4096, {DEPTH} WRs in flight"),
        run_over_ports,
    );
}
