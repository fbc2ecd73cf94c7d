//! Produces a pcap of every packet kind rox-nic puts on the wire (RC/UC/UD opcodes, ACK, NAK,
//! RNR NAK, READ responses, atomic ACKs, IPv4 and IPv6) as the Ethernet frames a port sends,
//! for `tests/host/tshark-capture.sh` to decode with tshark. Set `ROX_PCAP_OUT=/path/file.pcap`
//! to keep the capture.

mod roce_common;
use roce_common::roce::wire::parse_packet;
use roce_common::*;
use rox_nic::port::frame::ETH_HEADER_LEN;
use rox_nic::port::pcap::PcapWriter;

const BUF: u64 = MEM_BASE + 0x1000;
const BUF_LEN: u64 = 0x10_0000;
const REMOTE: u64 = BUF + 0x8_0000;

fn exchange(net: &mut Net, qp_type: QpType, qpn_a: Qpn, qpn_b: Qpn) {
    let ka = net.devs[0].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = net.devs[1].env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let params = QpParams {
        min_rnr_timer: 1,
        ..QpParams::of(qp_type)
    };
    connect(net, 0, qpn_a, 1, qpn_b, &params);
    net.devs[0].env.fill(BUF, &pattern(1, 1000));
    let mut wrs = Vec::new();
    let mut with = |opcode, len: u32, imm: u32| {
        let mut wr = send_wr(
            wrs.len() as u64,
            opcode,
            SendData::Sges(vec![sge(BUF, len, ka)]),
        );
        wr.imm = imm;
        wr.remote_addr = REMOTE;
        wr.rkey = kb;
        wr.compare_add = 1;
        wrs.push(wr);
    };
    if qp_type == QpType::Ud {
        with(WrOpcode::Send, 200, 0);
        with(WrOpcode::SendWithImm, 100, 7);
        let av = av_between(net.devs[0].gid, net.devs[1].gid);
        for wr in &mut wrs {
            wr.ud = Some(UdDest {
                av,
                remote_qpn: qpn_b,
                remote_qkey: params.qkey,
            });
        }
    } else {
        with(WrOpcode::Send, 1000, 0); // FIRST, MIDDLE, LAST — the first try meets an RNR NAK
        with(WrOpcode::SendWithImm, 600, 0x55);
        with(WrOpcode::Send, 40, 0);
        with(WrOpcode::SendWithImm, 40, 0x66);
        with(WrOpcode::RdmaWrite, 1000, 0);
        with(WrOpcode::RdmaWriteWithImm, 600, 0x77);
        with(WrOpcode::RdmaWrite, 40, 0);
        with(WrOpcode::RdmaWriteWithImm, 40, 0x88);
        if qp_type == QpType::Rc {
            with(WrOpcode::RdmaRead, 1000, 0);
            with(WrOpcode::RdmaRead, 40, 0);
            with(WrOpcode::AtomicCmpAndSwp, 8, 0);
            with(WrOpcode::AtomicFetchAndAdd, 8, 0);
            // Memory placement extensions and SEND with invalidate.
            with(WrOpcode::AtomicWrite, 8, 0);
            with(WrOpcode::SendWithInv, 40, 0);
            with(WrOpcode::SendWithInv, 1000, 0);
            // Each names a key the responder may invalidate: a valid fast-registration
            // region of its own.
            let n = wrs.len();
            for wr in &mut wrs[n - 2..] {
                let env = &mut net.devs[1].env;
                wr.rkey = env.reg(PD, REMOTE, 4096, ALL_ACCESS, RegionKind::FastReg);
            }
            let mut flush = send_wr(
                wrs.len() as u64,
                WrOpcode::Flush,
                SendData::Sges(Vec::new()),
            );
            flush.remote_addr = REMOTE;
            flush.rkey = kb;
            flush.flush = FlushSpec {
                length: 64,
                placement_type: FLUSH_TYPE_GLOBAL,
                level: FLUSH_LEVEL_RANGE,
            };
            wrs.push(flush);
        }
    }
    for wr in wrs {
        let (engine, env) = net.dev(0);
        engine.post_send(env, qpn_a, wr).unwrap();
    }
    if qp_type == QpType::Rc {
        // No receive WR yet: the responder answers with an RNR NAK.
        net.step();
        net.step();
    }
    for i in 0..8 {
        net.devs[1]
            .env
            .post_recv(qpn_b, recv_wr(i, vec![sge(REMOTE + 0x1_0000, 4096, kb)]));
    }
    net.run(10_000);
    if qp_type == QpType::Rc {
        // Then a remote access error: a NAK on the wire.
        let mut wr = send_wr(
            99,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![sge(BUF, 8, ka)]),
        );
        wr.rkey = key_plus(kb, 1000);
        let (engine, env) = net.dev(0);
        engine.post_send(env, qpn_a, wr).unwrap();
        net.run(10_000);
    }
}

#[test]
fn capture_every_packet_kind() {
    let mut all = Vec::new();
    for (gids, qp_type) in [
        ([gid_v4(1), gid_v4(2)], QpType::Rc),
        ([gid_v4(1), gid_v4(2)], QpType::Uc),
        ([gid_v4(1), gid_v4(2)], QpType::Ud),
        ([gid_v6(1), gid_v6(2)], QpType::Rc),
    ] {
        let mut net = Net::new(&gids);
        net.capture = Some(Vec::new());
        let qpn = |n| Qpn::new(n).unwrap();
        exchange(&mut net, qp_type, qpn(0x11), qpn(0x22));

        all.append(net.capture.as_mut().unwrap());
    }
    let opcodes: std::collections::BTreeSet<u8> = all
        .iter()
        .map(|(_, f)| {
            parse_packet(&f[ETH_HEADER_LEN..])
                .expect("valid packet")
                .hdr
                .bth
                .opcode
        })
        .collect();
    // 25 RC opcodes, 12 UC, 2 UD: all but the few the exchange does not need.
    assert!(opcodes.len() >= 34, "opcodes on the wire: {opcodes:x?}");
    for op in [0x16, 0x17, 0x1c, 0x1d] {
        assert!(opcodes.contains(&op), "opcode {op:#x} not on the wire");
    }
    let path = match std::env::var_os("ROX_PCAP_OUT") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::temp_dir().join(format!("rox-roce-capture-{}.pcap", std::process::id())),
    };
    let mut w = PcapWriter::new(std::io::BufWriter::new(
        std::fs::File::create(&path).unwrap(),
    ))
    .unwrap();
    for (t, f) in &all {
        w.write_frame(*t, &[f]).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let written = std::fs::metadata(&path).unwrap().len();
    assert!(written > 24 + 16 * all.len() as u64);
    println!(
        "wrote {} packets ({} opcodes) to {}",
        all.len(),
        opcodes.len(),
        path.display()
    );
    if std::env::var_os("ROX_PCAP_OUT").is_none() {
        std::fs::remove_file(&path).unwrap();
    }
}
