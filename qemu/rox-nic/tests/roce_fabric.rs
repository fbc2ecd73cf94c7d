//! The fabric over real host UDP sockets on 127.0.0.0/8: directory lookup by GID, loopback,
//! clear errors, fault injection knobs, pcap capture, and the engine running across it.

mod roce_common;
use roce_common::roce::fabric::{
    gid_hex, Fabric, FabricConfig, FabricError, FaultConfig, RxBatch, BATCH, MAX_DATAGRAM,
    RX_SLOT_BYTES,
};
use roce_common::*;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const QPN_A: u32 = 0x31;
const QPN_B: u32 = 0x42;
const BUF: u64 = MEM_BASE + 0x1000;
const BUF_LEN: u64 = 0x10_0000;
const REMOTE: u64 = BUF + 0x8_0000;

fn config(dir: &std::path::Path) -> FabricConfig {
    FabricConfig {
        directory: dir.to_path_buf(),
        bind: Ipv4Addr::LOCALHOST,
        faults: None,
        pcap: None,
    }
}

/// A mock device whose packets really travel through a fabric socket.
struct UdpDevice {
    engine: Engine,
    env: MockEnv,
    fabric: Fabric,
}

impl UdpDevice {
    fn new(cfg: &FabricConfig, gid: Gid) -> UdpDevice {
        let mut fabric = Fabric::open(cfg).unwrap();
        fabric.add_gid(gid).unwrap();
        UdpDevice {
            engine: Engine::new(),
            env: MockEnv::new(),
            fabric,
        }
    }

    /// Transmit what the engine queued, receive what arrived, poll. Returns packets handled.
    fn service(&mut self, epoch: Instant) -> usize {
        self.env.now = epoch.elapsed().as_nanos() as u64;
        let mut n = 0;
        for (gid, p) in std::mem::take(&mut self.env.outbox) {
            let _ = self.fabric.send(&gid, p);
            n += 1;
        }
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while let Some(len) = self.fabric.recv(&mut buf, None).unwrap() {
            let _ = self.engine.receive(&mut self.env, &buf[..len]);
            n += 1;
        }
        self.engine.poll(&mut self.env);
        n
    }
}

fn drive(devs: &mut [&mut UdpDevice], until: impl Fn(&[&mut UdpDevice]) -> bool) {
    let epoch = Instant::now();
    let give_up = Instant::now() + Duration::from_secs(10);
    while !until(devs) {
        assert!(Instant::now() < give_up, "fabric exchange did not finish");
        let moved: usize = devs.iter_mut().map(|d| d.service(epoch)).sum();
        if moved == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn connect_udp(a: &mut UdpDevice, ga: Gid, b: &mut UdpDevice, gb: Gid, p: &QpParams) {
    for (dev, qpn, peer, sgid, dgid, sq, rq) in [
        (&mut *a, QPN_A, QPN_B, ga, gb, 1, 2),
        (&mut *b, QPN_B, QPN_A, gb, ga, 2, 1),
    ] {
        dev.engine
            .create_qp(QpConfig {
                qpn,
                qp_type: p.qp_type,
                pd: PD,
                uses_srq: false,
            })
            .unwrap();
        let av = AddressVector {
            dgid,
            sgid,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let m = QpModify {
            state: Some(QpState::Rtr),
            access_flags: Some(p.access),
            path_mtu: Some(p.mtu),
            dest_qpn: Some(peer),
            rq_psn: Some(rq),
            max_dest_rd_atomic: Some(p.max_rd_atomic),
            av: Some(av),
            ..Default::default()
        };
        dev.engine.modify_qp(&mut dev.env, qpn, &m).unwrap();
        let m = QpModify {
            state: Some(QpState::Rts),
            sq_psn: Some(sq),
            timeout: Some(p.timeout),
            retry_cnt: Some(p.retry_cnt),
            rnr_retry: Some(p.rnr_retry),
            max_rd_atomic: Some(p.max_rd_atomic),
            ..Default::default()
        };
        dev.engine.modify_qp(&mut dev.env, qpn, &m).unwrap();
    }
}

#[test]
fn directory_maps_gids_to_sockets_and_is_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let gid = gid_v4(7);
    let entry = dir.path().join(gid_hex(&gid));
    {
        let mut f = Fabric::open(&config(dir.path())).unwrap();
        f.add_gid(gid).unwrap();
        let content = std::fs::read_to_string(&entry).unwrap();
        assert_eq!(content.trim(), f.local_addr().to_string());
        assert!(f.local_addr().ip().is_loopback());
    }
    assert!(!entry.exists(), "a closed fabric withdraws its GIDs");
}

#[test]
fn bad_configuration_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = FabricConfig {
        bind: Ipv4Addr::new(10, 0, 0, 1),
        ..config(dir.path())
    };
    let e = Fabric::open(&cfg).err().unwrap();
    assert!(matches!(e, FabricError::NotLoopback(_)));
    assert!(e.to_string().contains("127.0.0.0/8"), "{e}");

    let mut f = Fabric::open(&config(dir.path())).unwrap();
    let e = f.send(&gid_v4(99), vec![0; 64]).unwrap_err();
    assert!(e.to_string().contains(&gid_hex(&gid_v4(99))), "{e}");
    assert_eq!(f.stats().unknown_peer, 1);

    std::fs::write(dir.path().join(gid_hex(&gid_v4(98))), "not an address").unwrap();
    let e = f.send(&gid_v4(98), vec![0; 64]).unwrap_err();
    assert!(matches!(e, FabricError::BadEntry { .. }), "{e}");

    for spec in ["loss=2", "drop=0.1", "loss", "seed=x"] {
        assert!(FaultConfig::parse(spec).is_err(), "{spec}");
    }
    let f = FaultConfig::parse("loss=0.1,dup=0.2,reorder=0.3,corrupt=0.4,seed=9").unwrap();
    assert_eq!(
        f,
        FaultConfig {
            loss: 0.1,
            duplicate: 0.2,
            reorder: 0.3,
            corrupt: 0.4,
            seed: 9
        }
    );
}

#[test]
fn rc_traffic_between_two_fabric_sockets_and_capture() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("a.pcap");
    let (ga, gb) = (gid_v4(1), gid_v4(2));
    let mut a = UdpDevice::new(
        &FabricConfig {
            pcap: Some(pcap.clone()),
            ..config(dir.path())
        },
        ga,
    );
    let mut b = UdpDevice::new(&config(dir.path()), gb);
    let ka = a.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = b.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    connect_udp(&mut a, ga, &mut b, gb, &QpParams::rc());
    let data = pattern(1, 5000);
    a.env.fill(BUF, &data);
    b.env.post_recv(
        QPN_B,
        RecvWr {
            wr_id: 1,
            sges: vec![sge(REMOTE, 8192, kb)],
        },
    );
    a.engine
        .post_send(
            &mut a.env,
            QPN_A,
            send_wr(1, WrOpcode::Send, SendData::Sges(vec![sge(BUF, 5000, ka)])),
        )
        .unwrap();
    let mut w = send_wr(
        2,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![sge(BUF, 5000, ka)]),
    );
    w.remote_addr = REMOTE + 0x4000;
    w.rkey = kb;
    a.engine.post_send(&mut a.env, QPN_A, w).unwrap();
    drive(&mut [&mut a, &mut b], |d| {
        d[0].env.completions.len() == 2 && d[1].env.completions.len() == 1
    });
    assert!(a
        .env
        .completions
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert_eq!(b.env.completions[0].byte_len, 5000);
    assert_eq!(b.env.bytes(REMOTE, 5000), &data[..]);
    assert_eq!(b.env.bytes(REMOTE + 0x4000, 5000), &data[..]);
    a.fabric.flush_capture().unwrap();
    let captured = std::fs::metadata(&pcap).unwrap().len();
    // 2 × 5 packets of 1024 B (MTU 1024) at least.
    assert!(
        captured > 10 * 1024,
        "capture holds the sent packets ({captured} bytes)"
    );
}

#[test]
fn loopback_goes_through_the_own_socket() {
    let dir = tempfile::tempdir().unwrap();
    let g = gid_v4(1);
    let mut d = UdpDevice::new(&config(dir.path()), g);
    let k = d.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let p = QpParams::rc();
    for (qpn, peer) in [(QPN_A, QPN_B), (QPN_B, QPN_A)] {
        d.engine
            .create_qp(QpConfig {
                qpn,
                qp_type: QpType::Rc,
                pd: PD,
                uses_srq: false,
            })
            .unwrap();
        let av = AddressVector {
            dgid: g,
            sgid: g,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let rtr = QpModify {
            state: Some(QpState::Rtr),
            access_flags: Some(p.access),
            dest_qpn: Some(peer),
            rq_psn: Some(0),
            av: Some(av),
            path_mtu: Some(Mtu::Mtu1024),
            ..Default::default()
        };
        d.engine.modify_qp(&mut d.env, qpn, &rtr).unwrap();
        let rts = QpModify {
            state: Some(QpState::Rts),
            sq_psn: Some(0),
            timeout: Some(14),
            ..Default::default()
        };
        d.engine.modify_qp(&mut d.env, qpn, &rts).unwrap();
    }
    d.env.fill(BUF, b"to myself");
    d.env.post_recv(
        QPN_B,
        RecvWr {
            wr_id: 5,
            sges: vec![sge(REMOTE, 64, k)],
        },
    );
    d.engine
        .post_send(
            &mut d.env,
            QPN_A,
            send_wr(6, WrOpcode::Send, SendData::Sges(vec![sge(BUF, 9, k)])),
        )
        .unwrap();
    drive(&mut [&mut d], |d| d[0].env.completions.len() == 2);
    assert_eq!(d.env.bytes(REMOTE, 9), b"to myself");
    assert!(
        d.fabric.stats().received >= 2,
        "data and ACK both came in through the socket"
    );
}

#[test]
fn missing_peer_ends_in_retry_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let (ga, gone) = (gid_v4(1), gid_v4(200));
    let mut a = UdpDevice::new(&config(dir.path()), ga);
    let mut ghost = UdpDevice::new(&config(dir.path()), gid_v4(201));
    let params = QpParams {
        timeout: 6,
        retry_cnt: 2,
        ..QpParams::rc()
    };
    connect_udp(&mut a, ga, &mut ghost, gone, &params);
    a.engine
        .post_send(
            &mut a.env,
            QPN_A,
            send_wr(1, WrOpcode::Send, SendData::Inline(vec![1; 8])),
        )
        .unwrap();
    a.engine
        .post_send(
            &mut a.env,
            QPN_A,
            send_wr(2, WrOpcode::Send, SendData::Inline(vec![2; 8])),
        )
        .unwrap();
    drive(&mut [&mut a], |d| d[0].env.completions.len() == 2);
    let st: Vec<_> = a.env.completions.iter().map(|c| c.status).collect();
    assert_eq!(st, [WcStatus::RetryExcErr, WcStatus::WrFlushErr]);
    assert!(
        a.fabric.stats().unknown_peer >= 3,
        "every try met the missing directory entry"
    );
}

#[test]
fn fault_injection_on_the_fabric_is_seeded_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultConfig {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        corrupt: 0.1,
        seed: 3,
    };
    let run = || {
        let mut f = Fabric::open(&FabricConfig {
            faults: Some(faults),
            ..config(dir.path())
        })
        .unwrap();
        let g = gid_v4(50);
        f.add_gid(g).unwrap();
        let packet = roce_common::roce::wire::build_packet(
            &roce_common::roce::wire::IpInfo {
                sgid: g,
                dgid: g,
                traffic_class: 0,
                hop_limit: 64,
                flow_label: 0,
                src_port: 0xc000,
            },
            &roce_common::roce::wire::Headers::new(roce_common::roce::wire::Bth {
                opcode: 0x04,
                solicited: false,
                pkey: 0xffff,
                dest_qpn: 1,
                ack_req: false,
                psn: 0,
            }),
            &[0u8; 64],
        );
        for _ in 0..1000 {
            f.send(&g, packet.clone()).unwrap();
            let mut buf = vec![0u8; MAX_DATAGRAM];
            while f.recv(&mut buf, None).unwrap().is_some() {}
        }
        f.fault_stats().unwrap()
    };
    let (first, second) = (run(), run());
    assert_eq!(first, second, "same seed, same faults");
    for (what, n) in [
        ("lost", first.lost),
        ("duplicated", first.duplicated),
        ("reordered", first.reordered),
        ("corrupted", first.corrupted),
    ] {
        assert!((50..=150).contains(&n), "{what}: {n} of 1000 at p = 0.1");
    }
}

#[test]
fn rc_in_order_over_faulty_fabric_sockets() {
    const MESSAGES: u64 = 2000;
    const WINDOW: u64 = 32;
    const SLOT: u64 = 256;
    let dir = tempfile::tempdir().unwrap();
    let (ga, gb) = (gid_v4(1), gid_v4(2));
    let faulty = |seed| FabricConfig {
        faults: Some(FaultConfig {
            loss: 0.05,
            duplicate: 0.05,
            reorder: 0.05,
            corrupt: 0.02,
            seed,
        }),
        ..config(dir.path())
    };
    let mut a = UdpDevice::new(&faulty(1), ga);
    let mut b = UdpDevice::new(&faulty(2), gb);
    let ka = a.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let kb = b.env.reg_mr(PD, BUF, BUF_LEN, ALL_ACCESS);
    let params = QpParams {
        timeout: 8,
        ..QpParams::rc()
    };
    connect_udp(&mut a, ga, &mut b, gb, &params);
    for slot in 0..2 * WINDOW {
        b.env.post_recv(
            QPN_B,
            RecvWr {
                wr_id: slot,
                sges: vec![sge(REMOTE + slot * SLOT, SLOT as u32, kb)],
            },
        );
    }
    let epoch = Instant::now();
    let give_up = Instant::now() + Duration::from_secs(30);
    let (mut posted, mut sent, mut received) = (0u64, 0u64, 0u64);
    while received < MESSAGES || sent < MESSAGES {
        assert!(
            Instant::now() < give_up,
            "stuck at {sent} sent, {received} received"
        );
        while posted < MESSAGES && posted - sent < WINDOW {
            let addr = BUF + (posted % WINDOW) * SLOT;
            a.env.fill(addr, &posted.to_le_bytes());
            let wr = send_wr(
                posted,
                WrOpcode::Send,
                SendData::Sges(vec![sge(addr, 8, ka)]),
            );
            a.engine.post_send(&mut a.env, QPN_A, wr).unwrap();
            posted += 1;
        }
        let moved = a.service(epoch) + b.service(epoch);
        for c in a.env.take_completions() {
            assert_eq!((c.status, c.wr_id), (WcStatus::Success, sent));
            sent += 1;
        }
        for c in b.env.take_completions() {
            let addr = REMOTE + c.wr_id * SLOT;
            assert_eq!(
                b.env.bytes(addr, 8),
                &received.to_le_bytes(),
                "in order, exactly once"
            );
            received += 1;
            b.env.post_recv(
                QPN_B,
                RecvWr {
                    wr_id: c.wr_id,
                    sges: vec![sge(addr, SLOT as u32, kb)],
                },
            );
        }
        if moved == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let f = a.fabric.fault_stats().unwrap();
    assert!(
        f.lost > 0 && f.corrupted > 0 && f.duplicated > 0 && f.reordered > 0,
        "{f:?}"
    );
    assert!(b.engine.stats().rx_icrc_errors > 0);
}

/// Batched I/O: packets queued in one pass leave in order with a few `sendmmsg` calls and
/// arrive in order through `recvmmsg` batches; a datagram too long for a receive slot is not
/// one of ours and arrives empty (the transport's parser drops it), counted as truncated.
#[test]
fn batched_send_and_receive_keep_order_and_empty_oversized_datagrams() {
    const PACKETS: usize = 3 * BATCH + 5;
    let dir = tempfile::tempdir().unwrap();
    let gid = gid_v4(21);
    let mut f = Fabric::open(&config(dir.path())).unwrap();
    f.add_gid(gid).unwrap();
    for i in 0..PACKETS {
        let mut p = vec![0u8; 100 + i];
        p[..8].copy_from_slice(&(i as u64).to_le_bytes());
        f.queue(&gid, p).unwrap();
    }
    f.flush().unwrap();
    let stats = f.stats();
    assert_eq!(stats.sent, PACKETS as u64);
    assert!(
        stats.send_calls <= PACKETS.div_ceil(BATCH) as u64,
        "{} sendmmsg calls for {PACKETS} packets",
        stats.send_calls
    );
    let mut batch = RxBatch::new();
    let mut seen = 0usize;
    let give_up = Instant::now() + Duration::from_secs(5);
    while seen < PACKETS {
        assert!(Instant::now() < give_up, "received {seen} of {PACKETS}");
        let n = f.recv_batch(&mut batch).unwrap();
        assert!(n <= BATCH);
        for p in batch.packets() {
            assert_eq!(p.len(), 100 + seen);
            assert_eq!(u64::from_le_bytes(p[..8].try_into().unwrap()), seen as u64);
            seen += 1;
        }
    }
    assert!(
        f.stats().recv_calls < PACKETS as u64,
        "several datagrams per recvmmsg"
    );
    // Someone else's oversized datagram.
    let stranger = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    stranger
        .send_to(&vec![0xab; RX_SLOT_BYTES + 1], f.local_addr())
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(5);
    while f.recv_batch(&mut batch).unwrap() == 0 {
        assert!(Instant::now() < give_up, "oversized datagram never arrived");
    }
    assert_eq!(batch.packets().map(<[u8]>::len).collect::<Vec<_>>(), [0]);
    assert_eq!(f.stats().truncated, 1);
    assert_eq!(f.recv_batch(&mut batch).unwrap(), 0, "nothing else waiting");
}
