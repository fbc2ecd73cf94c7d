//! Test harness for the RoCE engine: in-memory devices (plain Vec memory behind the device's
//! protection table) joined by a virtual wire with optional fault injection and a virtual
//! clock.
#![allow(dead_code)]

pub mod engine_pair;

pub use rox_nic::roce;

pub use roce::*;
#[allow(unused_imports)]
pub use rox_nic::port::{FaultConfig, FaultInjector};
#[allow(unused_imports)]
pub use rox_nic::testkit::frames::{av_between, faults, mac_of, peer_ip};
pub use rox_nic::testkit::mock_env::*;
#[allow(unused_imports)]
pub use rox_nic::testkit::protected::RegionKind;

pub const PD: u32 = 1;
/// Every access an MR can have (rox has no persistent memory: no FLUSH_PERSISTENT).
pub const ALL_ACCESS: u32 = ACCESS_LOCAL_WRITE
    | ACCESS_REMOTE_WRITE
    | ACCESS_REMOTE_READ
    | ACCESS_REMOTE_ATOMIC
    | ACCESS_FLUSH_GLOBAL;
/// Every access a QP can allow its peer.
pub const ALL_QP_ACCESS: u32 = ALL_ACCESS | ACCESS_FLUSH_PERSISTENT;

pub struct Device {
    pub engine: Engine,
    pub env: MockEnv,
    pub gid: Gid,
}

/// Devices on a virtual wire with a virtual clock.
pub struct Net {
    pub devs: Vec<Device>,
    pub now: u64,
    pub faults: Option<FaultInjector<Gid>>,
    /// Every packet that went on the wire (before faults) as an Ethernet frame between the
    /// devices' [`mac_of`] MACs, with its time.
    pub capture: Option<Vec<(u64, Vec<u8>)>>,
    /// Packets to GIDs nobody owns.
    pub unroutable: u64,
    /// Packets a device can take per step, like a socket buffer: the rest of a burst is
    /// dropped at the tail (None: unlimited).
    pub rx_capacity: Option<usize>,
    /// Packets dropped for `rx_capacity`.
    pub overflow_drops: u64,
}

pub fn gid_v4(last: u8) -> Gid {
    roce::wire::ipv4_gid([10, 0, 0, last])
}

pub fn gid_v6(last: u8) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfd;
    g[15] = last;
    g
}

impl Net {
    pub fn new(gids: &[Gid]) -> Net {
        Net {
            devs: gids
                .iter()
                .map(|&gid| Device {
                    engine: Engine::new(),
                    env: MockEnv::new(),
                    gid,
                })
                .collect(),
            now: 1_000_000,
            faults: None,
            capture: None,
            unroutable: 0,
            rx_capacity: None,
            overflow_drops: 0,
        }
    }

    /// The key of device `i`'s one memory region (a set-up that registers a single MR per
    /// device and posts work requests later, when the keys are needed).
    pub fn only_mr_key(&self, i: usize) -> Key {
        let mrs = &self.devs[i].env.mrs.table.mrs;
        assert_eq!(mrs.len(), 1, "device {i} has {} MRs, not one", mrs.len());
        mrs.values().next().expect("one MR").key
    }

    pub fn dev(&mut self, i: usize) -> (&mut Engine, &mut MockEnv) {
        let d = &mut self.devs[i];
        d.env.now = self.now;
        (&mut d.engine, &mut d.env)
    }

    /// Delivers every pending packet once, then polls every engine. Returns packets moved.
    pub fn step(&mut self) -> usize {
        let mut moved = 0;
        let mut wire: Vec<(Gid, Gid, Vec<u8>)> = Vec::new();
        for d in &mut self.devs {
            let src = d.gid;
            wire.extend(d.env.outbox.drain(..).map(|(dst, p)| (src, dst, p)));
        }
        let mut deliver: Vec<(Gid, Vec<u8>)> = Vec::new();
        for (src, gid, p) in wire {
            if let Some(c) = &mut self.capture {
                let head = rox_nic::port::frame::roce_header(&mac_of(&gid), &mac_of(&src), &p);
                c.push((self.now, [&head[..], &p].concat()));
            }
            match &mut self.faults {
                Some(f) => {
                    let ip_len = if roce::wire::is_ipv6(&p) {
                        roce::wire::IPV6_HEADER_LEN
                    } else {
                        roce::wire::IPV4_HEADER_LEN
                    };
                    f.apply(gid, p, ip_len + roce::wire::UDP_HEADER_LEN, &mut deliver)
                }
                None => deliver.push((gid, p)),
            }
        }
        let mut taken = vec![0usize; self.devs.len()];
        for (gid, p) in deliver {
            moved += 1;
            let now = self.now;
            match self.devs.iter().position(|d| d.gid == gid) {
                Some(i) if self.rx_capacity.is_some_and(|cap| taken[i] >= cap) => {
                    self.overflow_drops += 1;
                }
                Some(i) => {
                    taken[i] += 1;
                    let d = &mut self.devs[i];
                    d.env.now = now;
                    let _ = d.engine.receive(&mut d.env, &p);
                }
                None => self.unroutable += 1,
            }
        }
        for d in &mut self.devs {
            d.env.now = self.now;
            d.engine.poll(&mut d.env);
        }
        moved
    }

    /// One round: deliver and poll; if the wire was quiet, release a held-back packet or advance
    /// the virtual clock to the next timer. Returns false when nothing at all is left to do.
    pub fn pump(&mut self) -> bool {
        let moved = self.step();
        if moved > 0 || self.devs.iter().any(|d| !d.env.outbox.is_empty()) {
            return true;
        }
        if let Some(f) = &mut self.faults {
            let mut out = Vec::new();
            f.flush(&mut out);
            if !out.is_empty() {
                for (gid, p) in out {
                    if let Some(d) = self.devs.iter_mut().find(|d| d.gid == gid) {
                        d.env.now = self.now;
                        let _ = d.engine.receive(&mut d.env, &p);
                    }
                }
                return true;
            }
        }
        match self
            .devs
            .iter()
            .filter_map(|d| d.engine.next_deadline())
            .min()
        {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Runs until nothing moves and no timer is armed. Gives up after `max_steps`.
    pub fn run(&mut self, max_steps: usize) {
        for _ in 0..max_steps {
            if !self.pump() {
                return;
            }
        }
        panic!("network did not settle in {max_steps} steps");
    }

    pub fn advance(&mut self, ns: u64) {
        self.now += ns;
    }
}

pub struct QpParams {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: u32,
    pub qkey: u32,
}

impl QpParams {
    pub fn rc() -> QpParams {
        QpParams {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu256,
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            access: ALL_QP_ACCESS,
            qkey: 0,
        }
    }
    pub fn of(qp_type: QpType) -> QpParams {
        QpParams {
            qp_type,
            qkey: 0x1111_2222,
            ..QpParams::rc()
        }
    }
}

/// Both sides start close to the 24-bit PSN wrap so every test crosses it.
pub const SQ_PSN_A: Psn = Psn::new(0xff_ff00).unwrap();
pub const SQ_PSN_B: Psn = Psn::new(0xff_fff0).unwrap();

/// Creates QP `qpn_a` on device `a` and `qpn_b` on device `b` and connects them (RTS both).
pub fn connect(net: &mut Net, a: usize, qpn_a: Qpn, b: usize, qpn_b: Qpn, p: &QpParams) {
    let (ga, gb) = (net.devs[a].gid, net.devs[b].gid);
    let (engine, env) = net.dev(a);
    connect_qp(
        engine,
        env,
        (qpn_a, qpn_b),
        (ga, gb),
        (SQ_PSN_A, SQ_PSN_B),
        p,
    );
    let (engine, env) = net.dev(b);
    connect_qp(
        engine,
        env,
        (qpn_b, qpn_a),
        (gb, ga),
        (SQ_PSN_B, SQ_PSN_A),
        p,
    );
}

/// Creates QP `qpn` of `engine` and takes it to RTS talking to `peer_qpn`, from `sgid` to
/// `dgid`, sending from `sq_psn` and expecting `rq_psn`.
pub fn connect_qp(
    engine: &mut Engine,
    env: &mut MockEnv,
    (qpn, peer_qpn): (Qpn, Qpn),
    (sgid, dgid): (Gid, Gid),
    (sq_psn, rq_psn): (Psn, Psn),
    p: &QpParams,
) {
    engine
        .create_qp(QpConfig {
            qpn,
            qp_type: p.qp_type,
            pd: PD,
            uses_srq: false,
        })
        .unwrap();
    let steps = rts_steps(&QpSetup {
        access: p.access,
        qkey: p.qkey,
        mtu: p.mtu,
        peer_qpn,
        rq_psn,
        sq_psn,
        max_rd_atomic: p.max_rd_atomic,
        min_rnr_timer: p.min_rnr_timer,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        av: (p.qp_type != QpType::Ud).then_some(av_between(sgid, dgid)),
    });
    for m in steps {
        engine.modify_qp(env, qpn, &m).unwrap();
    }
}

/// The mock key `delta` after `key` (0: `key` itself): another region's key, or no region's.
pub fn key_plus(key: Key, delta: u32) -> Key {
    Key::from_raw(key.get() + delta)
}

/// A signaled RDMA WR (WRITE, READ, atomic...) of `opcode` from `sge` to `remote_addr`
/// through `rkey`.
pub fn rdma_wr(wr_id: u64, opcode: WrOpcode, sge: Sge, remote_addr: u64, rkey: Key) -> SendWr {
    remote_wr(wr_id, opcode, SendData::Sges(vec![sge]), remote_addr, rkey)
}

/// A signaled WR of `opcode` carrying `data` (a gather list, inline bytes) to `remote_addr`
/// through `rkey`.
pub fn remote_wr(
    wr_id: u64,
    opcode: WrOpcode,
    data: SendData,
    remote_addr: u64,
    rkey: Key,
) -> SendWr {
    let mut wr = send_wr(wr_id, opcode, data);
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr
}

pub fn sge(addr: u64, length: u32, lkey: Key) -> Sge {
    Sge { addr, length, lkey }
}

/// Deterministic test pattern.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize).wrapping_mul(31).wrapping_add(i * 7) as u8 ^ 0x5a)
        .collect()
}
