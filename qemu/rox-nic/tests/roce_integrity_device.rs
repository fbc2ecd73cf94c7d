//! rstream's program over rsockets' WRITE_WITH_IMM ring protocol (`roce_integrity_rs`) between
//! two whole rox-nic devices wired back to back through `dgram` ports: real SQ, RQ and CQ rings
//! in memfd "guest RAM", doorbells, and each device's data-path thread writing payloads and
//! CQEs while the test (the application, as librox would) reads the ring buffer, the target SGL
//! array and the CQ concurrently. Queue sizes are rsockets' (SQ 64, RQ 64, one CQ of 128 for
//! both). Every byte received is verified; optionally the ports lose, duplicate, reorder and
//! corrupt frames. `ROX_INTEGRITY_DEVICE_RUNS=N` repeats each case N times.

mod roce_integrity_rs;
use roce_integrity_rs::{Layout, Payload, Program, Rs, Verbs, Wc, RECV_WR_ID};

use rox_nic::device::FaultConfig;
use rox_nic::testkit::frames::faults;
use rox_nic::testkit::*;
use rox_uapi::admin::*;
use rox_uapi::queue::*;
use rox_uapi::regs::ROX_PAGE_SIZE;
use rox_uapi::verbs::*;
use std::time::{Duration, Instant};

const PD: u32 = 1;
const ALL_ACCESS: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const SUBNET: u8 = 3;
/// rsockets' queues: SQ 64, RQ 64 (2^6), one CQ of sq + rq = 128 (2^7) for both.
const LOG_SQ: u8 = 6;
const LOG_RQ: u8 = 6;
const LOG_CQ: u8 = 7;
/// With no progress for this long the run has hung.
const STALL: Duration = Duration::from_secs(60);

/// One device with rsockets' QP, CQ and registered buffers.
struct Side {
    d: TestDriver,
    qp: TestQp,
    cq: TestCq,
    layout: Layout,
    /// Send WQEs posted and completed (the ring must never hold more than its depth).
    sends: (u64, u64),
    recvs: (u64, u64),
}

struct DeviceVerbs {
    sides: [Side; 2],
}

impl Verbs for DeviceVerbs {
    fn post_write_imm(
        &mut self,
        side: usize,
        msg: u32,
        data: Payload,
        remote_addr: u64,
        rkey: u32,
    ) {
        let s = &mut self.sides[side];
        assert!(
            s.sends.0 - s.sends.1 < u64::from(s.qp.sq_depth),
            "rsockets never overfills its send queue"
        );
        let key = Key::from_raw(s.layout.key);
        let wqe = match data {
            Payload::Inline(bytes) => inline_wqe(
                u64::from(msg),
                WR_RDMA_WRITE_WITH_IMM,
                WQE_FLAG_SIGNALED,
                &bytes,
            ),
            Payload::Sges(pieces) => {
                let sges: Vec<Sge> = pieces.iter().map(|&(a, n)| sge(a, n, key)).collect();
                send_wqe(
                    u64::from(msg),
                    WR_RDMA_WRITE_WITH_IMM,
                    WQE_FLAG_SIGNALED,
                    &sges,
                )
            }
        };
        let mut wqe = with_rdma(wqe, remote_addr, Key::from_raw(rkey));
        wqe.imm_data = msg.to_be();
        s.d.post_send(&mut s.qp, &wqe);
        s.sends.0 += 1;
    }

    fn post_recvs(&mut self, side: usize, n: u32) {
        let s = &mut self.sides[side];
        for _ in 0..n {
            assert!(s.recvs.0 - s.recvs.1 < u64::from(s.qp.rq_depth));
            s.d.post_recv(&mut s.qp, RECV_WR_ID, &[]);
            s.recvs.0 += 1;
        }
    }

    fn poll(&mut self, side: usize) -> Vec<Wc> {
        let s = &mut self.sides[side];
        let mut out = Vec::new();
        while let Some(c) = s.d.poll_cq(&mut s.cq) {
            assert_eq!(c.qp_num, s.qp.qpn);
            let is_recv = matches!(c.opcode, WC_OPC_RECV | WC_OPC_RECV_RDMA_WITH_IMM);
            if is_recv {
                s.recvs.1 += 1;
            } else {
                s.sends.1 += 1;
            }
            out.push(Wc {
                is_recv,
                wr_id: c.wr_id,
                error: (c.status != WC_SUCCESS).then(|| format!("{c:?}")),
                imm: (c.wc_flags & WC_FLAG_WITH_IMM != 0).then(|| u32::from_be(c.imm_data)),
                byte_len: c.byte_len,
            });
        }
        out
    }

    fn read(&self, side: usize, addr: u64, len: usize) -> Vec<u8> {
        self.sides[side].d.ram.read(addr, len)
    }

    fn write(&mut self, side: usize, addr: u64, data: &[u8]) {
        self.sides[side].d.ram.write(addr, data);
    }
}

fn side(dir: &std::path::Path, host: u8, faults: Option<FaultConfig>) -> Side {
    let (one, two) = dgram_wire(dir, "1.sock", "2.sock");
    let mut port = PortConfig::new(if host == 1 { one } else { two });
    port.faults = faults;
    // ROX_INTEGRITY_PCAP=DIR: each device's frames in DIR/dev<host>.pcap (the last run's).
    port.pcap = std::env::var_os("ROX_INTEGRITY_PCAP")
        .map(|d| std::path::PathBuf::from(d).join(format!("dev{host}.pcap")));
    let mut d = port_device_with(port, SUBNET, host);
    let cq = d.create_cq(LOG_CQ);
    let (cmd, mut qp) = d.create_qp_cmd(QPT_RC, PD, cq.id, cq.id, SRQ_NONE, LOG_SQ, LOG_RQ);
    qp.qpn = d.run::<CreateQp>(cmd);
    let base = d.ram.alloc(Layout::BYTES, ROX_PAGE_SIZE as u64);
    let key = d.reg_mr(PD, base, Layout::BYTES, ALL_ACCESS).unwrap();
    Side {
        d,
        qp,
        cq,
        layout: Layout::back_to_back(base, key.get()),
        sends: (0, 0),
        recvs: (0, 0),
    }
}

#[derive(Clone, Copy, Debug)]
struct Case {
    size: usize,
    count: usize,
    iterations: usize,
    mtu: u8,
    faults: Option<FaultConfig>,
}

/// Runs `case` once; returns the bytes verified and both devices' counters.
fn run(case: &Case) -> (u64, Vec<u64>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let mut a = side(dir.path(), 1, case.faults);
    let mut b = side(dir.path(), 2, case.faults);
    // A 134 ms ACK timeout (7 retries: ~1 s): a data-path thread of a heavily loaded 2-core
    // host can be off its CPU for longer than the default's 67 ms * 7.
    let p = ConnectParams {
        mtu: case.mtu,
        timeout: 15,
        ..Default::default()
    };
    let (qa, qb) = (a.qp, b.qp);
    a.d.connect_with(&qa, gid_v4(127, 0, SUBNET, 2), qb.qpn, ALL_ACCESS, &p);
    b.d.connect_with(&qb, gid_v4(127, 0, SUBNET, 1), qa.qpn, ALL_ACCESS, &p);
    let (la, lb) = (a.layout, b.layout);
    let mut v = DeviceVerbs { sides: [a, b] };
    let mut rs = [
        Rs::connect(&mut v, 0, la, lb),
        Rs::connect(&mut v, 1, lb, la),
    ];
    let mut program = Program::new(case.size, case.count, case.iterations, false);
    let (mut round, mut last_progress) = (0u64, Instant::now());
    while !program.finished() {
        round += 1;
        let mut progress = false;
        for (side, r) in rs.iter_mut().enumerate() {
            r.process_cq(&mut v, round, 0);
            progress |= program.turn(side, r, &mut v);
        }
        if progress {
            last_progress = Instant::now();
        } else {
            assert!(
                last_progress.elapsed() < STALL,
                "no progress for {STALL:?} at round {round}"
            );
            std::thread::yield_now();
        }
    }
    // Every write completes (no error CQE) before the devices go.
    let deadline = Instant::now() + STALL;
    while v.sides.iter().any(|s| s.sends.0 != s.sends.1) {
        for r in rs.iter_mut() {
            r.poll_cq(&mut v, round, 0);
        }
        assert!(Instant::now() < deadline, "sends never completed");
        std::thread::yield_now();
    }
    let [mut a, mut b] = v.sides;
    let (sa, sb) = (a.d.query_stats(), b.d.query_stats());
    (rs[0].rx_total + rs[1].rx_total, sa, sb)
}

fn runs() -> usize {
    std::env::var("ROX_INTEGRITY_DEVICE_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn run_all(name: &str, case: Case) -> (Vec<u64>, Vec<u64>) {
    let n = runs();
    let mut last = (Vec::new(), Vec::new());
    for i in 0..n {
        let (bytes, sa, sb) = run(&case);
        assert_eq!(
            bytes,
            2 * (16 + (case.size * case.count * case.iterations) as u64)
        );
        println!(
            "{name} run {i}: {bytes} bytes verified; retransmits {} {}, timeouts {} {}, \
             duplicates {} {}, icrc drops {} {}",
            sa[STAT_RETRANSMITS],
            sb[STAT_RETRANSMITS],
            sa[STAT_TIMEOUTS],
            sb[STAT_TIMEOUTS],
            sa[STAT_DUP_REQUESTS],
            sb[STAT_DUP_REQUESTS],
            sa[STAT_RX_ICRC_ERRORS],
            sb[STAT_RX_ICRC_ERRORS],
        );
        last = (sa, sb);
    }
    last
}

/// `rstream -S 65536 -C 200 -T v` between two devices, as in the failing guest run.
#[test]
fn rstream_64k_200_each_way_between_devices() {
    run_all(
        "clean",
        Case {
            size: 65536,
            count: 200,
            iterations: 1,
            mtu: MTU_4096,
            faults: None,
        },
    );
}

/// The same over ports that lose, duplicate, reorder and corrupt what they send.
#[test]
fn rstream_64k_between_devices_over_faulty_ports() {
    let (sa, sb) = run_all(
        "faulty",
        Case {
            size: 65536,
            count: 40,
            iterations: 1,
            mtu: MTU_1024,
            faults: Some(faults(0.01, 0.005, 7)),
        },
    );
    let sum = |i: usize| sa[i] + sb[i];
    assert!(sum(STAT_RETRANSMITS) > 0 && sum(STAT_DUP_REQUESTS) > 0);
}
