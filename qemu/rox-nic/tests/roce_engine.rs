//! Engine-level tests of the RoCE transport: every RC opcode, UC and UD, inline, immediate
//! data, every error status, RNR, retry exhaustion and flushing, on in-memory devices.

mod roce_common;
use roce_common::*;

const QPN_A: Qpn = Qpn::new(0x11).unwrap();
const QPN_B: Qpn = Qpn::new(0x22).unwrap();
/// Registered window on each device; everything outside it is a guard area.
const BUF: u64 = MEM_BASE + 0x10_0000;
const BUF_LEN: u64 = 0x10_0000;
const GUARD: u8 = 0xee;
const RECV_AREA: u64 = BUF + 0x8_0000;

struct Pair {
    net: Net,
    key_a: Key,
    key_b: Key,
}

fn pair_with(p: &QpParams, gid_b: Gid) -> Pair {
    let mut net = Net::new(&[gid_v4(1), gid_b]);
    let mut keys = [Key::default(); 2];
    for (i, key) in keys.iter_mut().enumerate() {
        let env = &mut net.devs[i].env;
        env.mem.fill(GUARD);
        env.mem[(BUF - MEM_BASE) as usize..(BUF - MEM_BASE + BUF_LEN) as usize].fill(0);
        *key = env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    }
    connect(&mut net, 0, QPN_A, 1, QPN_B, p);
    Pair {
        net,
        key_a: keys[0],
        key_b: keys[1],
    }
}

fn pair(p: &QpParams) -> Pair {
    pair_with(p, gid_v4(2))
}

impl Pair {
    fn post(&mut self, wr: SendWr) {
        let (engine, env) = self.net.dev(0);
        engine.post_send(env, QPN_A, wr).unwrap();
    }
    fn recv_b(&mut self, wr_id: u64, sges: Vec<Sge>) {
        self.net.devs[1]
            .env
            .post_recv(QPN_B, RecvWr { wr_id, sges });
    }
    fn run(&mut self) {
        self.net.run(100_000);
    }
    fn cqes(&mut self, dev: usize) -> Vec<Completion> {
        self.net.devs[dev].env.take_completions()
    }
    /// Guard bytes outside the registered window are untouched on both devices.
    fn assert_guards(&self) {
        for d in &self.net.devs {
            let lo = (BUF - MEM_BASE) as usize;
            let hi = lo + BUF_LEN as usize;
            assert!(
                d.env.mem[..lo].iter().all(|&b| b == GUARD),
                "guard below MR changed"
            );
            assert!(
                d.env.mem[hi..].iter().all(|&b| b == GUARD),
                "guard above MR changed"
            );
        }
    }
}

fn one(cqes: &[Completion]) -> Completion {
    assert_eq!(cqes.len(), 1, "expected one completion, got {cqes:?}");
    cqes[0]
}

#[test]
fn rc_send_multi_packet_with_imm_and_solicited() {
    let mut t = pair(&QpParams::rc());
    let data = pattern(1, 1000);
    t.net.devs[0].env.fill(BUF, &data);
    let kb = t.key_b;
    t.recv_b(
        7,
        vec![sge(RECV_AREA, 600, kb), sge(RECV_AREA + 0x1000, 600, kb)],
    );
    let mut wr = send_wr(
        1,
        WrOpcode::SendWithImm,
        SendData::Sges(vec![sge(BUF, 1000, t.key_a)]),
    );
    wr.imm = 0xdead_beef;
    wr.solicited = true;
    t.post(wr);
    t.run();
    let s = one(&t.cqes(0));
    assert_eq!(
        (s.wr_id, s.status, s.opcode, s.byte_len, s.is_recv),
        (1, WcStatus::Success, WcOpcode::Send, 1000, false)
    );
    let r = one(&t.cqes(1));
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 1000)
    );
    assert_eq!(
        (r.imm, r.wc_flags, r.solicited, r.qp_num),
        (0xdead_beef, WC_FLAG_WITH_IMM, true, QPN_B)
    );
    let env = &t.net.devs[1].env;
    assert_eq!(env.bytes(RECV_AREA, 600), &data[..600]);
    assert_eq!(env.bytes(RECV_AREA + 0x1000, 400), &data[600..]);
    assert_eq!(
        t.net.devs[0].engine.stats().tx_packets,
        4,
        "1000 B at MTU 256 is 4 packets"
    );
    t.assert_guards();
}

#[test]
fn rc_send_zero_length_and_inline() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![]);
    t.recv_b(2, vec![sge(RECV_AREA, 64, kb)]);
    t.post(send_wr(10, WrOpcode::Send, SendData::Sges(vec![])));
    t.post(send_wr(
        11,
        WrOpcode::Send,
        SendData::Inline(b"inline payload!".to_vec()),
    ));
    t.run();
    let s = t.cqes(0);
    assert_eq!(
        s.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    let r = t.cqes(1);
    assert_eq!(
        r.iter().map(|c| (c.wr_id, c.byte_len)).collect::<Vec<_>>(),
        [(1, 0), (2, 15)]
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 15), b"inline payload!");
}

#[test]
fn rc_unsignaled_wrs_retire_silently() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    for i in 0..3 {
        t.recv_b(i, vec![sge(RECV_AREA, 64, kb)]);
    }
    for i in 0..3 {
        let mut wr = send_wr(100 + i, WrOpcode::Send, SendData::Inline(vec![i as u8; 8]));
        wr.signaled = i == 2;
        t.post(wr);
    }
    t.run();
    assert_eq!(one(&t.cqes(0)).wr_id, 102);
    assert_eq!(t.cqes(1).len(), 3);
}

#[test]
fn rc_write_multi_packet() {
    let mut t = pair(&QpParams::rc());
    let data = pattern(2, 3000);
    t.net.devs[0].env.fill(BUF, &data);
    let mut wr = send_wr(
        3,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![
            sge(BUF, 1000, t.key_a),
            sge(BUF + 1000, 2000, t.key_a),
        ]),
    );
    wr.remote_addr = RECV_AREA + 5;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    let s = one(&t.cqes(0));
    assert_eq!(
        (s.status, s.opcode, s.byte_len),
        (WcStatus::Success, WcOpcode::RdmaWrite, 3000)
    );
    assert!(t.cqes(1).is_empty(), "RDMA WRITE consumes no receive WR");
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 5, 3000), &data[..]);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 3005, 1), &[0]);
    t.assert_guards();
}

#[test]
fn rc_write_with_imm_consumes_recv() {
    let mut t = pair(&QpParams::rc());
    let data = pattern(3, 700);
    t.net.devs[0].env.fill(BUF, &data);
    t.recv_b(9, vec![]);
    let mut wr = send_wr(
        4,
        WrOpcode::RdmaWriteWithImm,
        SendData::Sges(vec![sge(BUF, 700, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    wr.imm = 0x1234_5678;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    let r = one(&t.cqes(1));
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm, r.wc_flags),
        (
            9,
            WcOpcode::RecvRdmaWithImm,
            700,
            0x1234_5678,
            WC_FLAG_WITH_IMM
        )
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 700), &data[..]);
}

#[test]
fn rc_read_multi_packet() {
    let mut t = pair(&QpParams::rc());
    let data = pattern(4, 1500);
    t.net.devs[1].env.fill(RECV_AREA, &data);
    let mut wr = send_wr(
        5,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![
            sge(BUF, 100, t.key_a),
            sge(BUF + 0x1000, 1400, t.key_a),
        ]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    let s = one(&t.cqes(0));
    assert_eq!(
        (s.status, s.opcode, s.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 1500)
    );
    let env = &t.net.devs[0].env;
    assert_eq!(env.bytes(BUF, 100), &data[..100]);
    assert_eq!(env.bytes(BUF + 0x1000, 1400), &data[100..]);
    t.assert_guards();
}

/// The responder checks a READ's range before the first response without copying it: the
/// data is read once, for the responses (the check probes a byte at each end).
#[test]
fn rc_read_reads_its_range_once() {
    let mut t = pair(&QpParams::rc());
    let len = 3 * 4096 + 100;
    let data = pattern(9, len);
    t.net.devs[1].env.fill(RECV_AREA, &data);
    let mut wr = send_wr(
        6,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(BUF, len as u32, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[0].env.bytes(BUF, len), &data[..]);
    assert!(
        t.net.devs[1].env.remote_bytes_read <= len as u64 + 2,
        "{} bytes read for a {len}-byte READ",
        t.net.devs[1].env.remote_bytes_read
    );
}

/// A requester whose source page stays missing backs off (doubling its wait up to
/// PAGE_FAULT_RETRY_MAX_NS) instead of retrying every PAGE_FAULT_RETRY_NS, and sends once the
/// page is there.
#[test]
fn page_fault_stalls_back_off() {
    let mut t = pair(&QpParams::rc());
    let data = pattern(5, 300);
    t.net.devs[0].env.fill(BUF, &data);
    t.net.devs[0].env.fault_until = Some((t.key_a, 50_000_000));
    let mut wr = send_wr(
        7,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(BUF, 300, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 300), &data[..]);
    let faults = t.net.devs[0].env.page_faults;
    // 50 ms: 100 µs doubling to 10 ms is a dozen tries; 100 µs flat would be 500.
    assert!((5..=20).contains(&faults), "{faults} tries");
}

#[test]
fn rc_atomics() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA + 64;
    t.net.devs[1].env.fill(target, &100u64.to_le_bytes());
    let (ka, kb) = (t.key_a, t.key_b);
    let atomic = |id: u64, opcode, compare_add, swap, result: u64| {
        let mut wr = send_wr(id, opcode, SendData::Sges(vec![sge(result, 8, ka)]));
        wr.remote_addr = target;
        wr.rkey = kb;
        wr.compare_add = compare_add;
        wr.swap = swap;
        wr
    };
    t.post(atomic(1, WrOpcode::AtomicCmpAndSwp, 100, 200, BUF)); // matches: 100 -> 200
    t.post(atomic(2, WrOpcode::AtomicCmpAndSwp, 100, 300, BUF + 8)); // no match: stays 200
    t.post(atomic(3, WrOpcode::AtomicFetchAndAdd, 5, 0, BUF + 16)); // 200 -> 205
    t.run();
    let s = t.cqes(0);
    assert_eq!(
        s.iter()
            .map(|c| (c.wr_id, c.status, c.opcode))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::CompSwap),
            (2, WcStatus::Success, WcOpcode::CompSwap),
            (3, WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    let env = &t.net.devs[0].env;
    let val = |a| u64::from_le_bytes(env.bytes(a, 8).try_into().unwrap());
    assert_eq!((val(BUF), val(BUF + 8), val(BUF + 16)), (100, 200, 200));
    assert_eq!(
        u64::from_le_bytes(t.net.devs[1].env.bytes(target, 8).try_into().unwrap()),
        205
    );
}

#[test]
fn rc_loopback_on_one_device() {
    let mut net = Net::new(&[gid_v4(1)]);
    let key = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 0, QPN_B, &QpParams::rc());
    let data = pattern(5, 500);
    net.devs[0].env.fill(BUF, &data);
    net.devs[0].env.post_recv(
        QPN_B,
        RecvWr {
            wr_id: 1,
            sges: vec![sge(RECV_AREA, 512, key)],
        },
    );
    let (engine, env) = net.dev(0);
    engine
        .post_send(
            env,
            QPN_A,
            send_wr(2, WrOpcode::Send, SendData::Sges(vec![sge(BUF, 500, key)])),
        )
        .unwrap();
    net.run(1000);
    let c = net.devs[0].env.take_completions();
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(net.devs[0].env.bytes(RECV_AREA, 500), &data[..]);
}

#[test]
fn ipv6_gids_carry_rc_traffic() {
    let mut net = Net::new(&[gid_v6(1), gid_v6(2)]);
    let ka = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 1, QPN_B, &QpParams::rc());
    let data = pattern(6, 300);
    net.devs[0].env.fill(BUF, &data);
    let (engine, env) = net.dev(0);
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(BUF, 300, ka)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = kb;
    engine.post_send(env, QPN_A, wr).unwrap();
    net.run(1000);
    assert_eq!(
        one(&net.devs[0].env.take_completions()).status,
        WcStatus::Success
    );
    assert_eq!(net.devs[1].env.bytes(RECV_AREA, 300), &data[..]);
}

#[test]
fn uc_send_and_write() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let data = pattern(7, 900);
    t.net.devs[0].env.fill(BUF, &data);
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 1024, kb)]);
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 900, t.key_a)]),
    ));
    let mut wr = send_wr(
        2,
        WrOpcode::RdmaWriteWithImm,
        SendData::Sges(vec![sge(BUF, 900, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA + 0x2000;
    wr.rkey = kb;
    wr.imm = 77;
    t.recv_b(2, vec![]);
    t.post(wr);
    t.run();
    assert_eq!(
        t.cqes(0)
            .iter()
            .filter(|c| c.status == WcStatus::Success)
            .count(),
        2
    );
    let r = t.cqes(1);
    assert_eq!(
        r.iter()
            .map(|c| (c.wr_id, c.opcode, c.byte_len))
            .collect::<Vec<_>>(),
        [
            (1, WcOpcode::Recv, 900),
            (2, WcOpcode::RecvRdmaWithImm, 900)
        ]
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 900), &data[..]);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 0x2000, 900), &data[..]);
    assert_eq!(
        t.net.devs[0].engine.stats().rx_packets,
        0,
        "UC sends no ACKs"
    );
}

#[test]
fn uc_drops_a_message_with_a_lost_packet() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let first = pattern(8, 700);
    let second = pattern(9, 300);
    t.net.devs[0].env.fill(BUF, &first);
    t.net.devs[0].env.fill(BUF + 0x1000, &second);
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 1024, kb)]);
    t.recv_b(2, vec![sge(RECV_AREA + 0x1000, 1024, kb)]);
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 700, t.key_a)]),
    ));
    t.post(send_wr(
        2,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF + 0x1000, 300, t.key_a)]),
    ));
    // Lose the middle packet of the first (3-packet) message.
    let lost = t.net.devs[0].env.outbox.remove(1);
    assert!(lost.1.len() > 256);
    t.run();
    assert_eq!(t.cqes(0).len(), 2, "UC requester completes on send");
    let r = one(&t.cqes(1));
    // The receive WR taken for the dropped message is reused for the next one.
    assert_eq!((r.wr_id, r.byte_len), (1, 300));
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 300), &second[..]);
    assert!(t.net.devs[1].engine.stats().rx_out_of_sequence >= 1);
}

#[test]
fn uc_rejects_read_and_atomic_as_local_qp_operation_error_and_enters_sqe() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(BUF, 8, t.key_a)]),
    );
    wr.rkey = t.key_b;
    t.post(wr);
    t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::LocQpOpErr), (2, WcStatus::WrFlushErr)]
    );
    // A UC send error stops only the send queue (IBA 10.3.1: Send Queue Error state).
    assert_eq!(t.net.devs[0].engine.qp_state(QPN_A), Some(QpState::Sqe));
}

fn ud_pair(gid_a: Gid, gid_b: Gid) -> (Net, Key, Key) {
    let mut net = Net::new(&[gid_a, gid_b]);
    let ka = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 1, QPN_B, &QpParams::of(QpType::Ud));
    (net, ka, kb)
}

fn ud_wr(net: &Net, wr_id: u64, data: SendData, qkey: u32) -> SendWr {
    let mut wr = send_wr(wr_id, WrOpcode::SendWithImm, data);
    wr.imm = 0xabcd;
    let av = AddressVector {
        dgid: net.devs[1].gid,
        sgid: net.devs[0].gid,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        dmac: mac_of(&net.devs[1].gid),
    };
    wr.ud = Some(UdDest {
        av,
        remote_qpn: QPN_B,
        remote_qkey: qkey,
    });
    wr
}

#[test]
fn ud_send_delivers_grh_src_qp_and_checks_qkey() {
    for (gid_a, gid_b) in [(gid_v4(1), gid_v4(2)), (gid_v6(1), gid_v6(2))] {
        let (mut net, ka, kb) = ud_pair(gid_a, gid_b);
        let qkey = QpParams::of(QpType::Ud).qkey;
        let data = pattern(10, 200);
        net.devs[0].env.fill(BUF, &data);
        for i in 0..2 {
            net.devs[1].env.post_recv(
                QPN_B,
                RecvWr {
                    wr_id: i,
                    sges: vec![sge(RECV_AREA + i * 0x1000, 256, kb)],
                },
            );
        }
        let wrs = [
            ud_wr(&net, 1, SendData::Sges(vec![sge(BUF, 200, ka)]), qkey),
            ud_wr(&net, 2, SendData::Inline(vec![1, 2, 3]), qkey ^ 1), // wrong Q_Key: dropped
            ud_wr(&net, 3, SendData::Inline(vec![4, 5]), 0x8000_0000), // MSB: the QP's own Q_Key
        ];
        for wr in wrs {
            let (engine, env) = net.dev(0);
            engine.post_send(env, QPN_A, wr).unwrap();
        }
        net.run(1000);
        assert_eq!(
            net.devs[0].env.take_completions().len(),
            3,
            "UD sends complete when sent"
        );
        let r = net.devs[1].env.take_completions();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].wr_id, r[0].byte_len, r[0].src_qp),
            (0, 40 + 200, QPN_A)
        );
        assert_eq!(
            (r[0].wc_flags, r[0].imm),
            (WC_FLAG_GRH | WC_FLAG_WITH_IMM, 0xabcd)
        );
        assert_eq!((r[1].wr_id, r[1].byte_len), (1, 42));
        assert_eq!(net.devs[1].engine.stats().rx_qkey_violations, 1);
        let env = &net.devs[1].env;
        let grh = env.bytes(RECV_AREA, 40);
        // The completion says which header the GRH area holds (as mlx5's CQE does).
        let network_hdr = if gid_a == gid_v4(1) {
            rox_uapi::queue::CQE_NETWORK_HDR_IPV4
        } else {
            rox_uapi::queue::CQE_NETWORK_HDR_IPV6
        };
        assert_eq!(
            (r[0].network_hdr, r[1].network_hdr),
            (network_hdr, network_hdr)
        );
        if gid_a == gid_v4(1) {
            assert!(
                grh[..20].iter().all(|&b| b == 0),
                "IPv4: first 20 bytes of the GRH are zero"
            );
            assert_eq!(grh[20] >> 4, 4);
            assert_eq!(&grh[32..36], &gid_a[12..], "source address in the GRH");
        } else {
            assert_eq!(grh[0] >> 4, 6);
            assert_eq!(&grh[8..24], &gid_a, "source GID in the GRH");
        }
        assert_eq!(env.bytes(RECV_AREA + 40, 200), &data[..]);
    }
}

#[test]
fn ud_errors_local_length_and_recv_too_small() {
    let (mut net, ka, kb) = ud_pair(gid_v4(1), gid_v4(2));
    let qkey = QpParams::of(QpType::Ud).qkey;
    net.devs[1].env.post_recv(
        QPN_B,
        RecvWr {
            wr_id: 1,
            sges: vec![sge(RECV_AREA, 50, kb)],
        },
    );
    let (engine, env) = net.dev(0);
    engine
        .post_send(env, QPN_A, ud_wr_len(&net_gids(), ka, 300, qkey))
        .unwrap();
    net.run(100);
    assert_eq!(
        one(&net.devs[0].env.take_completions()).status,
        WcStatus::LocLenErr,
        "UD message > MTU"
    );
    // A fresh pair: a message that does not fit the receive buffer after the GRH.
    let (mut net, ka, kb) = ud_pair(gid_v4(1), gid_v4(2));
    net.devs[1].env.post_recv(
        QPN_B,
        RecvWr {
            wr_id: 1,
            sges: vec![sge(RECV_AREA, 50, kb)],
        },
    );
    let (engine, env) = net.dev(0);
    engine
        .post_send(env, QPN_A, ud_wr_len(&net_gids(), ka, 20, qkey))
        .unwrap();
    net.run(100);
    assert_eq!(
        one(&net.devs[0].env.take_completions()).status,
        WcStatus::Success
    );
    assert_eq!(
        one(&net.devs[1].env.take_completions()).status,
        WcStatus::LocLenErr
    );
}

fn net_gids() -> [Gid; 2] {
    [gid_v4(1), gid_v4(2)]
}

fn ud_wr_len(gids: &[Gid; 2], key: Key, len: u32, qkey: u32) -> SendWr {
    let mut wr = send_wr(1, WrOpcode::Send, SendData::Sges(vec![sge(BUF, len, key)]));
    let av = AddressVector {
        dgid: gids[1],
        sgid: gids[0],
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        dmac: mac_of(&gids[1]),
    };
    wr.ud = Some(UdDest {
        av,
        remote_qpn: QPN_B,
        remote_qkey: qkey,
    });
    wr
}

#[test]
fn local_protection_error_then_flush() {
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 16, key_plus(t.key_a, 99))]),
    ));
    t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    // Outside the MR is a protection error too.
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF + BUF_LEN - 8, 16, t.key_a)]),
    ));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocProtErr);
}

#[test]
fn local_protection_error_on_read_destination() {
    let mut t = pair(&QpParams::rc());
    // The READ lands past the end of the local MR: nothing may be written outside it.
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(BUF + BUF_LEN - 100, 300, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocProtErr);
    t.assert_guards();
}

#[test]
fn remote_access_errors_leave_memory_untouched() {
    let cases: [(&str, WrOpcode, u64, u32, u32); 5] = [
        ("bad rkey", WrOpcode::RdmaWrite, RECV_AREA, 1, 64),
        (
            "write past MR end",
            WrOpcode::RdmaWrite,
            BUF + BUF_LEN - 32,
            0,
            64,
        ),
        ("write before MR", WrOpcode::RdmaWrite, BUF - 16, 0, 64),
        (
            "read past MR end",
            WrOpcode::RdmaRead,
            BUF + BUF_LEN - 32,
            0,
            64,
        ),
        (
            "atomic past MR end",
            WrOpcode::AtomicFetchAndAdd,
            BUF + BUF_LEN,
            0,
            8,
        ),
    ];
    for (what, opcode, remote_addr, rkey_delta, len) in cases {
        let mut t = pair(&QpParams::rc());
        let mut wr = send_wr(1, opcode, SendData::Sges(vec![sge(BUF, len, t.key_a)]));
        wr.remote_addr = remote_addr;
        wr.rkey = key_plus(t.key_b, rkey_delta);
        t.post(wr);
        t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
        t.run();
        let c = t.cqes(0);
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)],
            "{what}"
        );
        t.assert_guards();
        // The responder's QP is in ERR too, and its owner was told (QP_ACCESS_ERR).
        let responder = &t.net.devs[1];
        assert_eq!(
            responder.engine.qp_state(QPN_B),
            Some(QpState::Err),
            "{what}"
        );
        assert_eq!(
            responder.env.async_errors,
            [(QPN_B, QpAsyncError::AccessViolation)],
            "{what}"
        );
    }
}

/// A WRITE that overruns its target region (from its start or from inside it, one packet or
/// many, with or without immediate data, RC and UC) fails without writing a single byte: the
/// responder checks the whole RETH range on the first packet, not packet by packet.
#[test]
fn write_overrunning_its_region_writes_nothing() {
    // (what, region length, offset of the write in it, write length, with immediate)
    let cases: [(&str, u64, u64, u32, bool); 5] = [
        ("8001 into 8000", 8000, 0, 8001, false),
        ("65537 into 65536", 65536, 0, 65537, false),
        ("inside and overrunning", 8000, 4000, 5000, false),
        ("one packet overrunning", 8000, 7990, 20, false),
        ("with immediate", 8000, 0, 8001, true),
    ];
    for qp_type in [QpType::Rc, QpType::Uc] {
        for (what, region_len, offset, len, imm) in cases {
            let what = format!("{qp_type:?} {what}");
            let params = QpParams {
                mtu: Mtu::Mtu1024,
                ..QpParams::of(qp_type)
            };
            let mut t = pair(&params);
            let data = pattern(7, len as usize);
            t.net.devs[0].env.fill(BUF, &data);
            // The target region sits in a known pattern, which the whole memory of the
            // responder keeps.
            let target = RECV_AREA + 0x1000;
            let env = &mut t.net.devs[1].env;
            let fill = pattern(9, env.mem.len());
            env.mem.copy_from_slice(&fill);
            let rkey = env.reg_mr(PD, target, region_len, ALL_ACCESS);
            let before = env.mem.clone();
            t.recv_b(50, vec![sge(RECV_AREA, 64, t.key_b)]);
            let opcode = if imm {
                WrOpcode::RdmaWriteWithImm
            } else {
                WrOpcode::RdmaWrite
            };
            let mut wr = send_wr(1, opcode, SendData::Sges(vec![sge(BUF, len, t.key_a)]));
            wr.remote_addr = target + offset;
            wr.rkey = rkey;
            t.post(wr);
            t.run();
            let c = t.cqes(0);
            let expect = if qp_type == QpType::Rc {
                WcStatus::RemAccessErr
            } else {
                // UC has no NAK: the requester completes, the responder drops the message.
                WcStatus::Success
            };
            assert_eq!(
                c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
                [(1, expect)],
                "{what}"
            );
            let env = &t.net.devs[1].env;
            if let Some(at) = env.mem.iter().zip(&before).position(|(a, b)| a != b) {
                panic!(
                    "{what}: responder memory changed at {:#x} (region {target:#x}..{:#x})",
                    MEM_BASE + at as u64,
                    target + region_len
                );
            }
            // RC: the responder's QP went to ERR (class C), so the receive WR the WRITE did
            // not consume is flushed; UC dropped the message and keeps its receive WR.
            let (recv, state, events) = if qp_type == QpType::Rc {
                (
                    vec![(50, WcStatus::WrFlushErr)],
                    QpState::Err,
                    vec![(QPN_B, QpAsyncError::AccessViolation)],
                )
            } else {
                (vec![], QpState::Rts, vec![])
            };
            let got: Vec<_> = t.cqes(1).iter().map(|c| (c.wr_id, c.status)).collect();
            assert_eq!(got, recv, "{what}: the failed WRITE consumed no receive WR");
            let responder = &t.net.devs[1];
            assert_eq!(responder.engine.qp_state(QPN_B), Some(state), "{what}");
            assert_eq!(responder.env.async_errors, events, "{what}");
        }
    }
}

#[test]
fn remote_access_error_when_qp_forbids_the_operation() {
    let params = QpParams {
        access: ACCESS_REMOTE_WRITE,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(BUF, 8, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemAccessErr);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    assert_eq!(
        t.net.devs[1].env.async_errors,
        [(QPN_B, QpAsyncError::AccessViolation)]
    );
}

#[test]
fn misaligned_atomic_is_remote_invalid_request() {
    let mut t = pair(&QpParams::rc());
    let mut wr = send_wr(
        1,
        WrOpcode::AtomicFetchAndAdd,
        SendData::Sges(vec![sge(BUF, 8, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA + 4;
    wr.rkey = t.key_b;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    assert_eq!(
        t.net.devs[1].env.async_errors,
        [(QPN_B, QpAsyncError::InvalidRequest)]
    );
}

#[test]
fn send_larger_than_recv_buffer_is_remote_invalid_request() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 100, kb)]);
    t.recv_b(2, vec![sge(RECV_AREA, 100, kb)]);
    t.post(send_wr(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![sge(BUF, 300, t.key_a)]),
    ));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    let r = t.cqes(1);
    assert_eq!(
        r.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    t.assert_guards();
    // The error is the receive WR's (its completion says so): no asynchronous error.
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    assert!(t.net.devs[1].env.async_errors.is_empty());
}

#[test]
fn bad_recv_lkey_is_remote_operational_error() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 100, key_plus(kb, 5))]);
    t.post(send_wr(1, WrOpcode::Send, SendData::Inline(vec![9; 10])));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemOpErr);
    assert_eq!(one(&t.cqes(1)).status, WcStatus::LocProtErr);
}

#[test]
fn retry_exceeded_then_flush() {
    let params = QpParams {
        retry_cnt: 3,
        ..QpParams::rc()
    };
    // Device 1 owns another GID: nobody answers QP A.
    let mut t = pair_with(&params, gid_v4(2));
    t.net.devs[1].gid = gid_v4(99);
    for i in 0..3 {
        t.post(send_wr(
            i,
            WrOpcode::Send,
            SendData::Inline(vec![i as u8; 4]),
        ));
    }
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(t.net.devs[0].engine.stats().retransmit_timeouts, 3);
    assert_eq!(t.net.devs[0].engine.qp_state(QPN_A), Some(QpState::Err));
    // Timeout 12: 4.096 µs × 2^12 ≈ 16.8 ms per try, 4 tries.
    assert!(t.net.now >= 1_000_000 + 4 * (4096 << 12));
}

#[test]
fn rnr_retry_exceeded() {
    let params = QpParams {
        rnr_retry: 2,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    t.post(send_wr(1, WrOpcode::Send, SendData::Inline(vec![1])));
    t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![2])));
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(t.net.devs[1].engine.stats().rnr_naks_sent, 3);
}

#[test]
fn rnr_then_success() {
    let params = QpParams {
        rnr_retry: 7,
        min_rnr_timer: 14,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let mut wr = send_wr(1, WrOpcode::Send, SendData::Inline(b"late".to_vec()));
    wr.imm = 5;
    t.post(wr);
    // A few RNR rounds with no receive WR posted.
    for _ in 0..20 {
        t.net.step();
        t.net.advance(1_000_000);
    }
    assert!(t.net.devs[1].engine.stats().rnr_naks_sent >= 2);
    assert!(t.cqes(0).is_empty());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 16, kb)]);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(one(&t.cqes(1)).byte_len, 4);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 4), b"late");
}

#[test]
fn rnr_on_write_with_imm_then_success() {
    let params = QpParams {
        min_rnr_timer: 1,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let data = pattern(11, 600);
    t.net.devs[0].env.fill(BUF, &data);
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaWriteWithImm,
        SendData::Sges(vec![sge(BUF, 600, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    for _ in 0..5 {
        t.net.step();
        t.net.advance(100_000);
    }
    t.recv_b(3, vec![]);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(one(&t.cqes(1)).opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 600), &data[..]);
}

#[test]
fn modify_to_error_flushes_everything() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 16, kb)]);
    t.recv_b(2, vec![sge(RECV_AREA, 16, kb)]);
    let (engine, env) = t.net.dev(1);
    engine
        .modify_qp(
            env,
            QPN_B,
            &QpModify {
                state: Some(QpState::Err),
                ..Default::default()
            },
        )
        .unwrap();
    let c = t.cqes(1);
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.status, c.is_recv))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::WrFlushErr, true),
            (2, WcStatus::WrFlushErr, true)
        ]
    );
    // Work posted after the error is flushed at once.
    t.recv_b(3, vec![]);
    let (engine, env) = t.net.dev(1);
    engine.recv_posted(env, QPN_B).unwrap();
    engine
        .post_send(
            env,
            QPN_B,
            send_wr(4, WrOpcode::Send, SendData::Inline(vec![1])),
        )
        .unwrap();
    let c = t.cqes(1);
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.status, c.is_recv))
            .collect::<Vec<_>>(),
        [
            (3, WcStatus::WrFlushErr, true),
            (4, WcStatus::WrFlushErr, false)
        ]
    );
}

#[test]
fn max_rd_atomic_limits_outstanding_reads_and_fence_waits() {
    let params = QpParams {
        max_rd_atomic: 1,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let data = pattern(12, 64);
    t.net.devs[1].env.fill(RECV_AREA, &data);
    for i in 0..3u64 {
        let mut wr = send_wr(
            i,
            WrOpcode::RdmaRead,
            SendData::Sges(vec![sge(BUF + i * 64, 64, t.key_a)]),
        );
        wr.remote_addr = RECV_AREA;
        wr.rkey = t.key_b;
        t.post(wr);
    }
    let mut fenced = send_wr(
        3,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(BUF, 64, t.key_a)]),
    );
    fenced.fence = true;
    fenced.remote_addr = RECV_AREA + 0x1000;
    fenced.rkey = t.key_b;
    t.post(fenced);
    assert_eq!(
        t.net.devs[0].env.outbox.len(),
        1,
        "only one READ may be outstanding"
    );
    t.run();
    let c = t.cqes(0);
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    // The fenced WRITE sent the data the READs brought in.
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 0x1000, 64), &data[..]);
}

#[test]
fn duplicate_atomic_is_replayed_not_reexecuted() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA;
    t.net.devs[1].env.fill(target, &1u64.to_le_bytes());
    let mut wr = send_wr(
        1,
        WrOpcode::AtomicFetchAndAdd,
        SendData::Sges(vec![sge(BUF, 8, t.key_a)]),
    );
    wr.remote_addr = target;
    wr.rkey = t.key_b;
    wr.compare_add = 10;
    t.post(wr);
    // Deliver the request twice and lose the first response: the requester times out and
    // retransmits; the responder must answer from its saved result.
    let request = t.net.devs[0].env.outbox[0].1.clone();
    t.net.devs[0].env.outbox.push((gid_v4(2), request));
    t.net.step();
    t.net.devs[1].env.outbox.clear();
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(
        u64::from_le_bytes(t.net.devs[0].env.bytes(BUF, 8).try_into().unwrap()),
        1
    );
    assert_eq!(
        u64::from_le_bytes(t.net.devs[1].env.bytes(target, 8).try_into().unwrap()),
        11,
        "added once"
    );
    assert!(t.net.devs[1].engine.stats().rx_duplicates >= 1);
}

/// Posts a 4-packet READ, drops response number `lost` and returns (timeouts, re-requests).
fn read_with_lost_response(lost: usize) -> (u64, u64) {
    let mut t = pair(&QpParams::rc());
    let data = pattern(13, 1000);
    t.net.devs[1].env.fill(RECV_AREA, &data);
    let mut wr = send_wr(
        1,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![sge(BUF, 1000, t.key_a)]),
    );
    wr.remote_addr = RECV_AREA;
    wr.rkey = t.key_b;
    t.post(wr);
    t.net.step();
    assert_eq!(
        t.net.devs[1].env.outbox.len(),
        4,
        "1000 B at MTU 256: 4 responses"
    );
    t.net.devs[1].env.outbox.remove(lost);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[0].env.bytes(BUF, 1000), &data[..]);
    let stats = t.net.devs[0].engine.stats();
    (stats.retransmit_timeouts, stats.nak_rewinds)
}

#[test]
fn lost_read_response_is_re_requested_at_the_gap() {
    // A later response shows the gap: the READ is re-requested from it at once.
    assert_eq!(read_with_lost_response(2), (0, 1));
}

#[test]
fn lost_last_read_response_is_recovered_by_timeout() {
    // Nothing follows the lost response: only the ACK timer can tell.
    assert_eq!(read_with_lost_response(3), (1, 0));
}

#[test]
fn srq_receive_wrs_are_not_flushed_with_the_qp() {
    let mut net = Net::new(&[gid_v4(1)]);
    let (engine, env) = net.dev(0);
    let qpn = Qpn::new(5).unwrap();
    engine
        .create_qp(QpConfig {
            qpn,
            qp_type: QpType::Rc,
            pd: PD,
            uses_srq: true,
        })
        .unwrap();
    env.post_recv(
        qpn,
        RecvWr {
            wr_id: 1,
            sges: vec![],
        },
    );
    engine
        .modify_qp(
            env,
            qpn,
            &QpModify {
                state: Some(QpState::Err),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(
        env.take_completions().is_empty(),
        "SRQ WRs belong to the SRQ, not the QP"
    );
    assert_eq!(env.recv_queues[&qpn].len(), 1);
}

#[test]
fn work_posted_before_rts_is_sent_on_rts() {
    let mut net = Net::new(&[gid_v4(1), gid_v4(2)]);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect(&mut net, 0, QPN_A, 1, QPN_B, &QpParams::rc());
    // Take QP A back through RESET and post while it is only INIT.
    let (engine, env) = net.dev(0);
    engine
        .modify_qp(
            env,
            QPN_A,
            &QpModify {
                state: Some(QpState::Reset),
                ..Default::default()
            },
        )
        .unwrap();
    engine
        .modify_qp(
            env,
            QPN_A,
            &QpModify {
                state: Some(QpState::Init),
                ..Default::default()
            },
        )
        .unwrap();
    engine
        .post_send(
            env,
            QPN_A,
            send_wr(1, WrOpcode::Send, SendData::Inline(b"early".to_vec())),
        )
        .unwrap();
    assert!(env.outbox.is_empty(), "nothing leaves before RTS");
    let av = AddressVector {
        dgid: gid_v4(2),
        sgid: gid_v4(1),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        dmac: mac_of(&gid_v4(2)),
    };
    let rtr = QpModify {
        state: Some(QpState::Rtr),
        dest_qpn: Some(QPN_B),
        rq_psn: Some(SQ_PSN_B),
        av: Some(av),
        ..Default::default()
    };
    engine.modify_qp(env, QPN_A, &rtr).unwrap();
    let rts = QpModify {
        state: Some(QpState::Rts),
        sq_psn: Some(SQ_PSN_A),
        timeout: Some(12),
        ..Default::default()
    };
    engine.modify_qp(env, QPN_A, &rts).unwrap();
    net.devs[1].env.post_recv(
        QPN_B,
        RecvWr {
            wr_id: 9,
            sges: vec![sge(RECV_AREA, 16, kb)],
        },
    );
    net.run(1000);
    assert_eq!(
        one(&net.devs[0].env.take_completions()).status,
        WcStatus::Success
    );
    assert_eq!(net.devs[1].env.bytes(RECV_AREA, 5), b"early");
}

/// Well-formed packets (valid ICRC) with random opcodes, PSNs, keys, addresses and lengths,
/// plus raw garbage: the engine must neither panic nor touch memory outside registered regions.
#[test]
fn random_packets_never_panic_or_escape_regions() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use roce_common::roce::wire::{
        self, Aeth, AtomicEth, Bth, Deth, Feth, Headers, IpInfo, NakCode, Reth, Syndrome,
    };
    const PACKETS: usize = 8_000;
    let mut rng = StdRng::seed_from_u64(0xf022);
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let mut t = pair(&QpParams::of(qp_type));
        let kb = t.key_b;
        let ip = IpInfo {
            sgid: gid_v4(1),
            dgid: gid_v4(2),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            src_port: 0xc000,
        };
        let opcodes: Vec<u8> = (0..=u8::MAX)
            .filter(|&o| wire::opcode_info(o).is_some())
            .collect();
        for i in 0..PACKETS {
            if i % 64 == 0 {
                t.recv_b(
                    i as u64,
                    vec![sge(
                        RECV_AREA + rng.gen_range(0..0x1000),
                        rng.gen_range(0..3000),
                        kb,
                    )],
                );
            }
            let opcode = opcodes[rng.gen_range(0..opcodes.len())];
            let info = wire::opcode_info(opcode).unwrap();
            let near = |rng: &mut StdRng, base: Psn| base.add(rng.gen_range(0..8));
            let mut h = Headers::new(Bth {
                opcode,
                solicited: rng.gen(),
                pkey: if rng.gen_bool(0.95) {
                    0xffff
                } else {
                    rng.gen()
                },
                dest_qpn: if rng.gen_bool(0.9) {
                    QPN_B
                } else {
                    Qpn::from_wire(rng.gen_range(0..0x100))
                },
                ack_req: rng.gen(),
                psn: if rng.gen_bool(0.8) {
                    near(&mut rng, SQ_PSN_A.sub(4))
                } else {
                    Psn::from_wire(rng.gen_range(0..0x100_0000))
                },
            });
            let va = || BUF + BUF_LEN / 2;
            let va = if rng.gen_bool(0.5) { va() } else { rng.gen() };
            if info.xrceth {
                h.xrceth = Some(rng.gen());
            }
            let rkey = if rng.gen_bool(0.7) {
                kb
            } else {
                Key::from_raw(rng.gen())
            };
            if info.reth {
                h.reth = Some(Reth {
                    va,
                    rkey,
                    dma_len: if rng.gen_bool(0.8) {
                        rng.gen_range(0..5000)
                    } else {
                        rng.gen()
                    },
                });
            }
            if info.ieth {
                h.ieth = Some(if rng.gen_bool(0.5) {
                    kb
                } else {
                    Key::from_raw(rng.gen())
                });
            }
            if info.feth {
                h.feth = Some(Feth {
                    placement_type: rng.gen_range(0..16),
                    selectivity_level: rng.gen_range(0..4),
                });
            }
            if info.atomic_eth {
                h.atomic_eth = Some(AtomicEth {
                    va,
                    rkey,
                    swap_add: rng.gen(),
                    compare: rng.gen(),
                });
            }
            if info.aeth {
                let syndrome = match rng.gen_range(0..3) {
                    0 => Syndrome::Ack,
                    1 => Syndrome::RnrNak(rng.gen_range(0..32)),
                    _ => Syndrome::Nak(NakCode::PsnSequenceError),
                };
                h.aeth = Some(Aeth {
                    syndrome,
                    msn: Msn::from_wire(rng.gen_range(0..0x100_0000)),
                });
            }
            if info.atomic_ack_eth {
                h.atomic_ack = Some(rng.gen());
            }
            if info.immdt {
                h.imm = Some(rng.gen());
            }
            if info.deth {
                h.deth = Some(Deth {
                    qkey: if rng.gen_bool(0.8) {
                        QpParams::of(qp_type).qkey
                    } else {
                        rng.gen()
                    },
                    src_qpn: Qpn::from_wire(rng.gen_range(0..0x100_0000)),
                });
            }
            let mut payload = vec![0u8; rng.gen_range(0..600)];
            rng.fill(&mut payload[..]);
            let mut packet = wire::build_packet(&ip, &h, &payload);
            if rng.gen_bool(0.05) {
                let at = rng.gen_range(0..packet.len());
                packet[at] = rng.gen();
            }
            if rng.gen_bool(0.02) {
                packet = vec![0u8; rng.gen_range(0..100)];
                rng.fill(&mut packet[..]);
            }
            let (engine, env) = t.net.dev(1);
            let _ = engine.receive(env, &packet);
            if i % 16 == 0 {
                engine.poll(env);
                env.outbox.clear();
                t.net.advance(1_000_000);
            }
        }
        t.assert_guards();
    }
}

#[test]
fn acks_are_coalesced_per_poll() {
    const MESSAGES: u64 = 50;
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    for i in 0..MESSAGES {
        t.recv_b(i, vec![sge(RECV_AREA, 64, kb)]);
        t.post(send_wr(
            i,
            WrOpcode::Send,
            SendData::Inline(vec![i as u8; 16]),
        ));
    }
    t.run();
    assert_eq!(t.cqes(0).len() as u64, MESSAGES);
    assert_eq!(t.cqes(1).len() as u64, MESSAGES);
    let acks = t.net.devs[1].engine.stats().acks_sent;
    // All 50 requests asked for an ACK and arrived in one batch: one ACK answers them all.
    assert_eq!(acks, 1, "ACKs sent for {MESSAGES} messages");
}

#[test]
fn connected_qps_ignore_packets_from_other_peers() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    t.recv_b(1, vec![sge(RECV_AREA, 64, kb)]);
    // A third party (another GID) sends a perfectly valid request to QP B.
    let mut h = roce_common::roce::wire::Headers::new(roce_common::roce::wire::Bth {
        opcode: roce_common::roce::wire::opcode::RC_SEND_ONLY,
        solicited: false,
        pkey: roce_common::roce::wire::DEFAULT_PKEY,
        dest_qpn: QPN_B,
        ack_req: true,
        psn: SQ_PSN_A,
    });
    h.imm = None;
    let ip = roce_common::roce::wire::IpInfo {
        sgid: gid_v4(66),
        dgid: gid_v4(2),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        src_port: 0xc000,
    };
    let packet = roce_common::roce::wire::build_packet(&ip, &h, b"intruder");
    let (engine, env) = t.net.dev(1);
    assert_eq!(
        engine.receive(env, &packet),
        Err(RxDrop::WrongSource(QPN_B))
    );
    assert!(t.cqes(1).is_empty());
    // The real peer still gets through.
    t.post(send_wr(
        2,
        WrOpcode::Send,
        SendData::Inline(b"peer".to_vec()),
    ));
    t.run();
    assert_eq!(one(&t.cqes(1)).byte_len, 4);
}

#[test]
fn uc_without_receive_wr_or_with_bad_rkey_drops_silently() {
    let mut t = pair(&QpParams::of(QpType::Uc));
    let kb = t.key_b;
    // No receive WR: the message is dropped (UC has no RNR NAK).
    t.post(send_wr(1, WrOpcode::Send, SendData::Inline(vec![1; 32])));
    // Bad rkey: the WRITE is dropped, no NAK, the requester still completes.
    let mut wr = send_wr(2, WrOpcode::RdmaWrite, SendData::Inline(vec![2; 32]));
    wr.remote_addr = RECV_AREA;
    wr.rkey = key_plus(kb, 7);
    t.post(wr);
    // The connection keeps working afterwards.
    t.run();
    t.recv_b(3, vec![sge(RECV_AREA + 0x100, 64, kb)]);
    t.post(send_wr(
        3,
        WrOpcode::Send,
        SendData::Inline(b"after".to_vec()),
    ));
    t.run();
    let s = t.cqes(0);
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(one(&t.cqes(1)).wr_id, 3);
    assert_eq!(
        t.net.devs[1].env.bytes(RECV_AREA, 32),
        &[0u8; 32][..],
        "dropped WRITE wrote nothing"
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA + 0x100, 5), b"after");
    assert_eq!(t.net.devs[1].engine.stats().rx_no_recv_wr, 1);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Rts));
}

/// Flow control: a receiver that takes only 32 packets per burst (a small socket buffer) drops
/// the tail of every larger burst. The requester halves its send window on each loss, so the
/// WRITEs complete with a bounded number of extra packets instead of resending full
/// `MAX_INFLIGHT_PSNS` windows into the same overflow.
#[test]
fn send_window_shrinks_to_what_a_small_receive_buffer_holds() {
    const RX_CAPACITY: usize = 32;
    const WRITES: u64 = 8;
    const LEN: u64 = 64 << 10;
    const MTU_BYTES: u64 = 1024;
    const DST: u64 = BUF + WRITES * LEN;
    let mut t = pair(&QpParams {
        mtu: Mtu::Mtu1024,
        ..QpParams::rc()
    });
    t.net.rx_capacity = Some(RX_CAPACITY);
    let data: Vec<u8> = (0..WRITES * LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    t.net.devs[0].env.fill(BUF, &data);
    for i in 0..WRITES {
        let mut wr = send_wr(
            i,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![sge(BUF + i * LEN, LEN as u32, t.key_a)]),
        );
        wr.remote_addr = DST + i * LEN;
        wr.rkey = t.key_b;
        t.post(wr);
    }
    t.run();
    let c = t.cqes(0);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        (0..WRITES)
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>()
    );
    assert_eq!(t.net.devs[1].env.bytes(DST, data.len()), &data[..]);
    let needed = WRITES * LEN / MTU_BYTES;
    let sent = t.net.devs[0].engine.stats().tx_packets;
    assert!(t.net.overflow_drops > 0, "the receiver did overflow");
    // A fixed 256-packet window resends ~8 packets for every one that fits (> 4000 here).
    assert!(
        sent < 3 * needed,
        "{sent} packets sent for {needed} ({} dropped)",
        t.net.overflow_drops
    );
}

// ---- memory placement extensions: FLUSH and ATOMIC WRITE ----------------------------------

fn atomic_write_wr(id: u64, remote_addr: u64, rkey: Key, value: [u8; 8]) -> SendWr {
    let mut wr = send_wr(id, WrOpcode::AtomicWrite, SendData::Inline(value.to_vec()));
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr
}

fn flush_wr(id: u64, remote_addr: u64, rkey: Key, length: u32, ptype: u8, level: u8) -> SendWr {
    let mut wr = send_wr(id, WrOpcode::Flush, SendData::Sges(Vec::new()));
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr.flush = FlushSpec {
        length,
        placement_type: ptype,
        level,
    };
    wr
}

fn statuses(cqes: &[Completion]) -> Vec<(u64, WcStatus, WcOpcode)> {
    cqes.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect()
}

#[test]
fn rc_atomic_write_stores_eight_bytes_once() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA + 64;
    let kb = t.key_b;
    t.post(atomic_write_wr(1, target, kb, *b"ABCDEFGH"));
    t.post(atomic_write_wr(2, target + 8, kb, 7u64.to_le_bytes()));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::AtomicWrite),
            (2, WcStatus::Success, WcOpcode::AtomicWrite)
        ]
    );
    let env = &t.net.devs[1].env;
    assert_eq!(env.bytes(target, 8), b"ABCDEFGH");
    assert_eq!(env.bytes(target + 8, 8), 7u64.to_le_bytes());
    assert_eq!(
        env.bytes(target + 16, 8),
        [0; 8],
        "nothing beyond the 8 bytes"
    );
    t.assert_guards();
}

#[test]
fn rc_atomic_write_errors() {
    // Misaligned target: invalid request (the responder's QP goes to ERR).
    let mut t = pair(&QpParams::rc());
    t.post(atomic_write_wr(1, RECV_AREA + 4, t.key_b, [1; 8]));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    // Past the end of the region, a bad rkey, a region without remote write: remote access.
    for (what, addr, rkey_delta, mr_access) in [
        ("past MR end", BUF + BUF_LEN, 0, ALL_ACCESS),
        ("bad rkey", RECV_AREA, 7, ALL_ACCESS),
        (
            "no remote write",
            RECV_AREA,
            0,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ,
        ),
    ] {
        let mut t = pair(&QpParams::rc());
        t.net.devs[1].env.mrs[0].access = mr_access;
        t.post(atomic_write_wr(
            1,
            addr,
            key_plus(t.key_b, rkey_delta),
            [2; 8],
        ));
        t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
        t.run();
        assert_eq!(
            statuses(&t.cqes(0)),
            [
                (1, WcStatus::RemAccessErr, WcOpcode::AtomicWrite),
                (2, WcStatus::WrFlushErr, WcOpcode::Send)
            ],
            "{what}"
        );
        t.assert_guards();
    }
    // QP without remote write access.
    let params = QpParams {
        access: ACCESS_REMOTE_READ,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    t.post(atomic_write_wr(1, RECV_AREA, t.key_b, [3; 8]));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemAccessErr);
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 8), [0; 8]);
    // Not 8 bytes: local length error, nothing sent.
    let mut t = pair(&QpParams::rc());
    let mut wr = atomic_write_wr(1, RECV_AREA, t.key_b, [4; 8]);
    wr.data = SendData::Sges(vec![sge(BUF, 4, t.key_a)]);
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocLenErr);
    assert_eq!(t.net.devs[0].engine.stats().tx_packets, 0);
    // UC has no ATOMIC WRITE or FLUSH.
    for wr in [
        atomic_write_wr(1, RECV_AREA, Key::from_raw(1), [5; 8]),
        flush_wr(
            1,
            RECV_AREA,
            Key::from_raw(1),
            8,
            FLUSH_TYPE_GLOBAL,
            FLUSH_LEVEL_RANGE,
        ),
    ] {
        let mut t = pair(&QpParams::of(QpType::Uc));
        t.post(wr);
        t.run();
        assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
    }
}

#[test]
fn duplicate_atomic_write_is_answered_not_reexecuted() {
    let mut t = pair(&QpParams::rc());
    let target = RECV_AREA;
    t.post(atomic_write_wr(1, target, t.key_b, 0x1111u64.to_le_bytes()));
    // The responder executes it, its response is lost; software then changes the word; the
    // requester's retransmission must be answered without writing again.
    t.net.step();
    t.net.devs[1].env.outbox.clear();
    t.net.devs[1].env.fill(target, &0x2222u64.to_le_bytes());
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::Success);
    assert_eq!(t.net.devs[1].env.bytes(target, 8), 0x2222u64.to_le_bytes());
    assert!(t.net.devs[1].engine.stats().rx_duplicates >= 1);
}

#[test]
fn rc_flush_range_and_whole_region() {
    let mut t = pair(&QpParams::rc());
    let kb = t.key_b;
    let mut write = send_wr(1, WrOpcode::RdmaWrite, SendData::Inline(vec![9; 16]));
    write.remote_addr = RECV_AREA;
    write.rkey = kb;
    write.signaled = false;
    t.post(write);
    t.post(flush_wr(
        2,
        RECV_AREA,
        kb,
        16,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_RANGE,
    ));
    t.post(flush_wr(
        3,
        RECV_AREA,
        kb,
        0,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_RANGE,
    ));
    // Level MR ignores address and length.
    t.post(flush_wr(
        4,
        0,
        kb,
        u32::MAX,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_MR,
    ));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (2, WcStatus::Success, WcOpcode::Flush),
            (3, WcStatus::Success, WcOpcode::Flush),
            (4, WcStatus::Success, WcOpcode::Flush)
        ]
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 16), [9; 16]);
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Rts));
}

/// (what, type, level, addr, len, rkey delta, MR access, QP access, status)
type FlushCase = (&'static str, u8, u8, u64, u32, u32, u32, u32, WcStatus);

#[test]
fn rc_flush_errors() {
    let global = FLUSH_TYPE_GLOBAL;
    let cases: [FlushCase; 6] = [
        (
            "persistent on a region without FLUSH_PERSISTENT",
            FLUSH_TYPE_PERSISTENT,
            FLUSH_LEVEL_RANGE,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "region without FLUSH_GLOBAL",
            global,
            FLUSH_LEVEL_MR,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS & !ACCESS_FLUSH_GLOBAL,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "QP without FLUSH_GLOBAL",
            global,
            FLUSH_LEVEL_RANGE,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS & !ACCESS_FLUSH_GLOBAL,
            WcStatus::RemAccessErr,
        ),
        (
            "range past the region",
            global,
            FLUSH_LEVEL_RANGE,
            BUF + BUF_LEN - 4,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "bad rkey",
            global,
            FLUSH_LEVEL_MR,
            RECV_AREA,
            8,
            5,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::RemAccessErr,
        ),
        (
            "no placement type",
            0,
            FLUSH_LEVEL_RANGE,
            RECV_AREA,
            8,
            0,
            ALL_ACCESS,
            ALL_QP_ACCESS,
            WcStatus::LocQpOpErr,
        ),
    ];
    for (what, ptype, level, addr, len, delta, mr_access, qp_access, status) in cases {
        let params = QpParams {
            access: qp_access,
            ..QpParams::rc()
        };
        let mut t = pair(&params);
        t.net.devs[1].env.mrs[0].access = mr_access;
        t.post(flush_wr(
            1,
            addr,
            key_plus(t.key_b, delta),
            len,
            ptype,
            level,
        ));
        t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
        t.run();
        assert_eq!(
            statuses(&t.cqes(0)),
            [
                (1, status, WcOpcode::Flush),
                (2, WcStatus::WrFlushErr, WcOpcode::Send)
            ],
            "{what}"
        );
        // A remote access error is a class C error of the responder too (IBA C9-222.1.1): its
        // QP goes to ERR and its owner gets QP_ACCESS_ERR. A malformed FLUSH never leaves
        // the requester (LOC_QP_OP_ERR) and the responder keeps working.
        let (state, events) = if status == WcStatus::RemAccessErr {
            (QpState::Err, vec![(QPN_B, QpAsyncError::AccessViolation)])
        } else {
            (QpState::Rts, vec![])
        };
        let responder = &t.net.devs[1];
        assert_eq!(responder.engine.qp_state(QPN_B), Some(state), "{what}");
        assert_eq!(responder.env.async_errors, events, "{what}");
    }
}

#[test]
fn flush_and_atomic_write_count_against_max_rd_atomic() {
    let params = QpParams {
        max_rd_atomic: 1,
        ..QpParams::rc()
    };
    let mut t = pair(&params);
    let kb = t.key_b;
    t.post(flush_wr(
        1,
        RECV_AREA,
        kb,
        8,
        FLUSH_TYPE_GLOBAL,
        FLUSH_LEVEL_RANGE,
    ));
    t.post(atomic_write_wr(2, RECV_AREA, kb, [6; 8]));
    // Only the first request may be on the wire until its response is back.
    assert_eq!(t.net.devs[0].env.outbox.len(), 1);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::Flush),
            (2, WcStatus::Success, WcOpcode::AtomicWrite)
        ]
    );
}

// ---- memory windows: BIND_MW, LOCAL_INV, SEND with invalidate ------------------------------

fn bind_wr(id: u64, new_rkey: Key, lkey: Key) -> SendWr {
    let mut wr = send_wr(id, WrOpcode::BindMw, SendData::Sges(Vec::new()));
    wr.bind = Some(MwBind {
        addr: BUF,
        length: 4096,
        new_rkey,
        lkey,
        access: ACCESS_REMOTE_WRITE,
    });
    wr
}

#[test]
fn local_operations_complete_in_sq_order_without_packets() {
    let mut t = pair(&QpParams::rc());
    let ka = t.key_a;
    let window = Key::window(1, 1);
    t.post(bind_wr(1, window, ka));
    let mut inv = send_wr(2, WrOpcode::LocalInv, SendData::Sges(Vec::new()));
    inv.rkey = window;
    t.net.devs[0].env.invalidatable.push(window);
    t.post(inv);
    let fast_reg = FastReg {
        iova: 0xabcd_0000_1000,
        length: 4096,
        page_list: BUF,
        key: Key::region(2, 7),
        access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
        npages: 1,
        page_shift: 12,
    };
    let mut reg = send_wr(4, WrOpcode::RegMr, SendData::Sges(Vec::new()));
    reg.fast_reg = Some(fast_reg);
    t.post(reg);
    t.post(send_wr(3, WrOpcode::Send, SendData::Inline(vec![1, 2])));
    t.recv_b(9, vec![sge(RECV_AREA, 64, t.key_b)]);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::BindMw),
            (2, WcStatus::Success, WcOpcode::LocalInv),
            (4, WcStatus::Success, WcOpcode::RegMr),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
    let ops = &t.net.devs[0].env.local_ops;
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[2], (QPN_A, LocalOp::FastReg(fast_reg)));
    assert!(matches!(ops[0], (QPN_A, LocalOp::Bind(b)) if b.new_rkey == window && b.lkey == ka));
    assert_eq!(
        ops[1],
        (
            QPN_A,
            LocalOp::Invalidate {
                rkey: window,
                remote: false
            }
        )
    );
    // The SEND took the first PSN: the local operations took none.
    assert_eq!(t.net.devs[0].engine.stats().tx_packets, 1);
}

#[test]
fn failed_bind_and_invalidate_complete_in_error_and_flush() {
    let mut t = pair(&QpParams::rc());
    t.post(bind_wr(1, BAD_RKEY, t.key_a));
    t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::MwBindErr, WcOpcode::BindMw),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert_eq!(t.net.devs[0].engine.qp_state(QPN_A), Some(QpState::Err));
    let mut t = pair(&QpParams::rc());
    let mut inv = send_wr(1, WrOpcode::LocalInv, SendData::Sges(Vec::new()));
    inv.rkey = Key::window(2, 0);
    t.post(inv);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [(1, WcStatus::MwBindErr, WcOpcode::LocalInv)]
    );
    // A fast registration the device refuses: MW_BIND_ERR with the REG_MR opcode, then flush.
    let mut t = pair(&QpParams::rc());
    let mut reg = send_wr(1, WrOpcode::RegMr, SendData::Sges(Vec::new()));
    reg.fast_reg = Some(FastReg {
        key: BAD_RKEY,
        ..Default::default()
    });
    t.post(reg);
    t.post(send_wr(2, WrOpcode::Send, SendData::Inline(vec![1])));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::MwBindErr, WcOpcode::RegMr),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    // A REG_MR without its segment is malformed; UD has no memory registration WRs.
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(1, WrOpcode::RegMr, SendData::Sges(Vec::new())));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
    // UD has no memory windows; a BIND_MW without its segment is malformed.
    let (mut net, _, _) = ud_pair(gid_v4(1), gid_v4(2));
    let (engine, env) = net.dev(0);
    engine
        .post_send(env, QPN_A, bind_wr(1, Key::window(3, 0), Key::from_raw(1)))
        .unwrap();
    assert_eq!(one(&env.take_completions()).status, WcStatus::LocQpOpErr);
    let mut t = pair(&QpParams::rc());
    t.post(send_wr(1, WrOpcode::BindMw, SendData::Sges(Vec::new())));
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
}

#[test]
fn failed_bind_behind_an_unacked_write_stops_the_send_queue() {
    // The WRITE is on the wire (not yet ACKed) when the BIND fails: the SEND behind the BIND
    // must never reach the responder, which would otherwise complete a receive for a message
    // the requester reports as flushed.
    let mut t = pair(&QpParams::rc());
    t.net.devs[0].env.fill(BUF, &pattern(5, 64));
    let mut write = send_wr(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(BUF, 64, t.key_a)]),
    );
    write.remote_addr = RECV_AREA;
    write.rkey = t.key_b;
    t.recv_b(9, vec![sge(RECV_AREA + 1024, 64, t.key_b)]);
    t.post(write);
    t.post(bind_wr(2, BAD_RKEY, t.key_a));
    t.post(send_wr(3, WrOpcode::Send, SendData::Inline(vec![1])));
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::MwBindErr, WcOpcode::BindMw),
            (3, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    assert!(
        t.cqes(1).is_empty(),
        "the SEND after the failed BIND reached the responder"
    );
}

#[test]
fn send_with_invalidate_invalidates_at_the_responder() {
    let mut t = pair(&QpParams::rc());
    let rkey = Key::window(4, 5);
    t.net.devs[1].env.invalidatable.push(rkey);
    // Multi-packet (MTU 256): the IETH rides on the last packet only.
    let payload = pattern(4, 600);
    let mut wr = send_wr(1, WrOpcode::SendWithInv, SendData::Inline(payload.clone()));
    wr.rkey = rkey;
    t.recv_b(7, vec![sge(RECV_AREA, 1024, t.key_b)]);
    t.post(wr);
    t.run();
    assert_eq!(
        statuses(&t.cqes(0)),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    let r = one(&t.cqes(1));
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.wc_flags, r.imm),
        (
            7,
            WcStatus::Success,
            WcOpcode::Recv,
            600,
            WC_FLAG_WITH_INV,
            rkey.get()
        )
    );
    assert_eq!(t.net.devs[1].env.bytes(RECV_AREA, 600), &payload[..]);
    assert_eq!(
        t.net.devs[1].env.local_ops,
        [(QPN_B, LocalOp::Invalidate { rkey, remote: true })]
    );
    // An rkey the responder cannot invalidate: invalid request, both QPs end in ERR.
    t.recv_b(8, vec![sge(RECV_AREA, 1024, t.key_b)]);
    let mut wr = send_wr(2, WrOpcode::SendWithInv, SendData::Inline(vec![1; 8]));
    wr.rkey = rkey;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::RemInvReqErr);
    let r = one(&t.cqes(1));
    assert_eq!((r.wr_id, r.status), (8, WcStatus::LocQpOpErr));
    assert_eq!(t.net.devs[1].engine.qp_state(QPN_B), Some(QpState::Err));
    // Only RC can carry it.
    let mut t = pair(&QpParams::of(QpType::Uc));
    let mut wr = send_wr(1, WrOpcode::SendWithInv, SendData::Inline(vec![1]));
    wr.rkey = rkey;
    t.post(wr);
    t.run();
    assert_eq!(one(&t.cqes(0)).status, WcStatus::LocQpOpErr);
}
