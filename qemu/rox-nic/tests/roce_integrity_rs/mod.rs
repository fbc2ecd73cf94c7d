//! rsockets (librdmacm/rsocket.c, rdma-core 56) as a test program, over any pair of RC QPs
//! that [`Verbs`] reaches: the transport engines alone (`roce_integrity.rs`) or whole rox-nic
//! devices with their rings, doorbells and data-path threads (`roce_integrity_device.rs`).
//!
//! rsockets moves stream data with RDMA WRITE WITH IMMEDIATE into a ring buffer on the peer and
//! tracks that ring purely from the immediates' lengths; credits (new ring halves) come back as
//! small inline WRITE WITH IMMEDIATE into the sender's target SGL array, which the sender reads
//! straight from memory. Any completion without its payload, payload without its completion,
//! duplicated completion or early slot reuse corrupts the stream. The program is rstream's
//! (`-S size -C count -I iterations -T v`): every byte received is checked as verify_buf does.
#![allow(dead_code)]

use std::collections::VecDeque;

// rsocket.c's defaults (def_mem, def_wmem, def_inline, RS_SNDLOWAT, RS_QP_CTRL_SIZE, ...).
pub const RBUF_SIZE: u32 = 1 << 17;
pub const SBUF_SIZE: u32 = 1 << 17;
const SNDLOWAT: u32 = 2048;
pub const RQ_SIZE: u16 = (RBUF_SIZE / SNDLOWAT) as u16;
pub const SQ_SIZE: u32 = SBUF_SIZE / SNDLOWAT;
pub const SQ_INLINE: u32 = 64;
const CTRL_SIZE: u32 = 4;
pub const SGL_SIZE: u32 = 2;
const OLAP_START_SIZE: u32 = 2048;
const MAX_TRANSFER: u32 = 65536;
const OP_DATA: u32 = 0;
const OP_SGL: u32 = 4;
pub const RS_SGE_BYTES: u64 = 16;
pub const RECV_WR_ID: u64 = 1 << 63;

fn msg_set(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1fff_ffff)
}

/// Where one side's registered buffers are (one MR over all three, lkey = rkey = `key`).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub sbuf: u64,
    pub rbuf: u64,
    pub target_sgl: u64,
    pub key: u32,
}

impl Layout {
    /// Bytes of the region starting at `sbuf` when the three lie back to back.
    pub const BYTES: u64 = SBUF_SIZE as u64 + RBUF_SIZE as u64 + SGL_SIZE as u64 * RS_SGE_BYTES;

    pub fn back_to_back(base: u64, key: u32) -> Layout {
        Layout {
            sbuf: base,
            rbuf: base + u64::from(SBUF_SIZE),
            target_sgl: base + u64::from(SBUF_SIZE) + u64::from(RBUF_SIZE),
            key,
        }
    }
}

/// The payload of a write: inline bytes, or (address, length) pieces of the side's region.
pub enum Payload {
    Inline(Vec<u8>),
    Sges(Vec<(u64, u32)>),
}

/// A work completion as rsockets looks at it.
#[derive(Debug)]
pub struct Wc {
    pub is_recv: bool,
    pub wr_id: u64,
    /// `None` for success, else what went wrong.
    pub error: Option<String>,
    /// The immediate (host order) of a receive with immediate.
    pub imm: Option<u32>,
    pub byte_len: u32,
}

/// The verbs rsockets uses, on side 0 or 1 of a connected pair of RC QPs.
pub trait Verbs {
    /// Posts a signaled RDMA WRITE WITH IMMEDIATE (wr_id = `msg`, immediate = `msg`).
    fn post_write_imm(&mut self, side: usize, msg: u32, data: Payload, remote_addr: u64, rkey: u32);
    /// Posts `n` receive WRs without SGEs (wr_id [`RECV_WR_ID`]).
    fn post_recvs(&mut self, side: usize, n: u32);
    /// Every completion waiting on the side's CQ (send and receive share it, as in rsockets).
    fn poll(&mut self, side: usize) -> Vec<Wc>;
    fn read(&self, side: usize, addr: u64, len: usize) -> Vec<u8>;
    fn write(&mut self, side: usize, addr: u64, data: &[u8]);
}

/// The SGE rsockets keeps in the target SGL array: addr, key, length (native order).
fn read_sge(v: &impl Verbs, side: usize, at: u64) -> (u64, u32, u32) {
    let b = v.read(side, at, RS_SGE_BYTES as usize);
    (
        u64::from_le_bytes(b[..8].try_into().unwrap()),
        u32::from_le_bytes(b[8..12].try_into().unwrap()),
        u32::from_le_bytes(b[12..16].try_into().unwrap()),
    )
}

fn sge_bytes(addr: u64, key: u32, length: u32) -> Vec<u8> {
    [
        &addr.to_le_bytes()[..],
        &key.to_le_bytes(),
        &length.to_le_bytes(),
    ]
    .concat()
}

/// One rsocket (its state as rsocket.c keeps it) on side `side`.
pub struct Rs {
    side: usize,
    me: Layout,
    peer: Layout,
    sseq_no: u16,
    sseq_comp: u16,
    sqe_avail: u32,
    sbuf_bytes_avail: u32,
    /// Where the next send-buffer copy goes (rs->ssgl[0].addr).
    ssgl_addr: u64,
    target_sge: u64,
    rseq_no: u16,
    rseq_comp: u16,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    pub rbuf_offset: u32,
    remote_sge: u64,
    /// Lengths of data messages received and not yet read (rs->rmsg).
    rmsg: VecDeque<u32>,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    /// Receive WRs to post again once the round reaches the first number (a slow receiver).
    pub reposts: VecDeque<(u64, u32)>,
    /// format_buf / verify_buf's running byte counters.
    tx_pattern: u8,
    rx_pattern: u8,
    pub rx_total: u64,
    pub writes_posted: u64,
    pub inline_writes: u64,
    pub credits_sent: u64,
    /// The last events of this side, printed when verification fails.
    pub trace: VecDeque<String>,
}

const TRACE_LEN: usize = 400;
static TRACE: std::sync::Mutex<VecDeque<String>> = std::sync::Mutex::new(VecDeque::new());

impl Rs {
    fn log(&mut self, event: String) {
        let mut t = TRACE.lock().unwrap();
        if t.len() == TRACE_LEN {
            t.pop_front();
        }
        t.push_back(format!("side {}: {event}", self.side));
    }

    /// rs_init_bufs + rs_save_conn_data: the peer gave the first half of its ring at connect.
    pub fn connect(v: &mut impl Verbs, side: usize, me: Layout, peer: Layout) -> Rs {
        v.write(
            side,
            me.target_sgl,
            &sge_bytes(peer.rbuf, peer.key, RBUF_SIZE / 2),
        );
        v.write(side, me.target_sgl + RS_SGE_BYTES, &sge_bytes(0, 0, 0));
        v.post_recvs(side, u32::from(RQ_SIZE));
        Rs {
            side,
            me,
            peer,
            sseq_no: 0,
            sseq_comp: RQ_SIZE,
            sqe_avail: SQ_SIZE - CTRL_SIZE,
            sbuf_bytes_avail: SBUF_SIZE,
            ssgl_addr: me.sbuf,
            target_sge: 0,
            rseq_no: 0,
            rseq_comp: RQ_SIZE / 2,
            rbuf_bytes_avail: RBUF_SIZE / 2,
            rbuf_free_offset: RBUF_SIZE / 2,
            rbuf_offset: 0,
            remote_sge: 1,
            rmsg: VecDeque::new(),
            ctrl_seqno: 0,
            ctrl_max_seqno: CTRL_SIZE,
            reposts: VecDeque::new(),
            tx_pattern: 0,
            rx_pattern: 0,
            rx_total: 0,
            writes_posted: 0,
            inline_writes: 0,
            credits_sent: 0,
            trace: VecDeque::new(),
        }
    }

    /// rs_send_credits: a new ring half (inline SGE written into the peer's target SGL), or
    /// just the credit count (a zero-length write).
    fn send_credits(&mut self, v: &mut impl Verbs) {
        self.ctrl_seqno += 1;
        self.rseq_comp = self.rseq_no.wrapping_add(RQ_SIZE / 2);
        let msg = msg_set(OP_SGL, u32::from(self.rseq_no) + u32::from(RQ_SIZE));
        self.credits_sent += 1;
        if self.rbuf_bytes_avail >= RBUF_SIZE / 2 {
            let sge = sge_bytes(
                self.me.rbuf + u64::from(self.rbuf_free_offset),
                self.me.key,
                RBUF_SIZE / 2,
            );
            let at = self.peer.target_sgl + self.remote_sge * RS_SGE_BYTES;
            self.log(format!(
                "credit half {:#x} -> peer sge {} (rseq_no {})",
                self.rbuf_free_offset, self.remote_sge, self.rseq_no
            ));
            v.post_write_imm(self.side, msg, Payload::Inline(sge), at, self.peer.key);
            self.rbuf_bytes_avail -= RBUF_SIZE / 2;
            self.rbuf_free_offset += RBUF_SIZE / 2;
            if self.rbuf_free_offset >= RBUF_SIZE {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge = (self.remote_sge + 1) % u64::from(SGL_SIZE);
        } else {
            // rs_post_msg: no SGE; its remote address and key are whatever was on the stack.
            self.log(format!("credit count only (rseq_no {})", self.rseq_no));
            v.post_write_imm(self.side, msg, Payload::Sges(Vec::new()), 0, 0);
        }
    }

    /// rs_give_credits / rs_update_credits.
    fn update_credits(&mut self, v: &mut impl Verbs) {
        let behind = self.rseq_no.wrapping_sub(self.rseq_comp) as i16 >= 0;
        if (self.rbuf_bytes_avail >= RBUF_SIZE / 2 || behind)
            && self.ctrl_seqno != self.ctrl_max_seqno
        {
            self.send_credits(v);
        }
    }

    /// rs_poll_cq; the receive WRs go back at round `round + repost_delay`.
    pub fn poll_cq(&mut self, v: &mut impl Verbs, round: u64, repost_delay: u64) {
        let mut rcnt = 0;
        for c in v.poll(self.side) {
            assert_eq!(c.error, None, "side {} completion {c:?}", self.side);
            if c.is_recv {
                assert_eq!(c.wr_id, RECV_WR_ID);
                let imm = c.imm.expect("every receive carries an immediate");
                rcnt += 1;
                let (op, data) = (imm >> 29, imm & 0x1fff_ffff);
                self.log(format!(
                    "recv imm op {op} data {data:#x} len {}",
                    c.byte_len
                ));
                match op {
                    OP_SGL => self.sseq_comp = data as u16,
                    OP_DATA => {
                        assert_eq!(c.byte_len, data, "WRITE_WITH_IMM length = its immediate");
                        self.rmsg.push_back(data);
                        assert!(
                            self.rmsg.len() <= usize::from(RQ_SIZE) + 1,
                            "rmsg ring overrun"
                        );
                    }
                    _ => panic!("unexpected immediate {imm:#x}"),
                }
            } else {
                let wr_id = c.wr_id as u32;
                match wr_id >> 29 {
                    OP_SGL => self.ctrl_max_seqno += 1,
                    OP_DATA => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += wr_id & 0x1fff_ffff;
                    }
                    _ => panic!("unexpected send wr_id {:#x}", c.wr_id),
                }
            }
        }
        if rcnt > 0 {
            self.reposts.push_back((round + repost_delay, rcnt));
        }
        while self.reposts.front().is_some_and(|&(at, _)| at <= round) {
            let (_, n) = self.reposts.pop_front().unwrap();
            v.post_recvs(self.side, n);
        }
    }

    /// rs_process_cq's bookkeeping around one poll.
    pub fn process_cq(&mut self, v: &mut impl Verbs, round: u64, repost_delay: u64) {
        self.update_credits(v);
        self.poll_cq(v, round, repost_delay);
        self.update_credits(v);
    }

    fn target(&self) -> u64 {
        self.me.target_sgl + self.target_sge * RS_SGE_BYTES
    }

    fn can_send(&self, v: &impl Verbs) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && read_sge(v, self.side, self.target()).2 != 0
    }

    /// rs_write_data: claim the target SGE's next `length` bytes and write there.
    fn write_data(&mut self, v: &mut impl Verbs, data: Payload, length: u32) {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= length;
        let at = self.target();
        let (addr, key, len) = read_sge(v, self.side, at);
        self.log(format!(
            "write {length:#x} at ring {:#x} from sge {} (len {len:#x})",
            addr.wrapping_sub(self.peer.rbuf),
            self.target_sge
        ));
        v.write(
            self.side,
            at,
            &sge_bytes(addr + u64::from(length), key, len - length),
        );
        if len == length {
            self.target_sge = (self.target_sge + 1) % u64::from(SGL_SIZE);
        }
        self.writes_posted += 1;
        v.post_write_imm(self.side, msg_set(OP_DATA, length), data, addr, key);
    }

    /// One pass of rsend's loop over `buf` (what a blocking rsend does between waits): sends
    /// while it may, returns the bytes taken. `olen` carries over between passes of one call.
    pub fn rsend(&mut self, v: &mut impl Verbs, buf: &[u8], olen: &mut u32) -> usize {
        let mut done = 0usize;
        while done < buf.len() && self.can_send(v) {
            let left = (buf.len() - done) as u32;
            let mut xfer = if *olen < left {
                let x = *olen;
                if *olen < MAX_TRANSFER {
                    *olen <<= 1;
                }
                x
            } else {
                left
            };
            xfer = xfer.min(self.sbuf_bytes_avail);
            xfer = xfer.min(read_sge(v, self.side, self.target()).2);
            let piece = &buf[done..done + xfer as usize];
            if xfer <= SQ_INLINE {
                self.inline_writes += 1;
                self.write_data(v, Payload::Inline(piece.to_vec()), xfer);
            } else {
                let sbuf_end = self.me.sbuf + u64::from(SBUF_SIZE);
                let sbuf_left = (sbuf_end - self.ssgl_addr) as u32;
                let sges = if xfer <= sbuf_left {
                    v.write(self.side, self.ssgl_addr, piece);
                    let s = vec![(self.ssgl_addr, xfer)];
                    self.ssgl_addr = if xfer < sbuf_left {
                        self.ssgl_addr + u64::from(xfer)
                    } else {
                        self.me.sbuf
                    };
                    s
                } else {
                    let (a, b) = piece.split_at(sbuf_left as usize);
                    v.write(self.side, self.ssgl_addr, a);
                    v.write(self.side, self.me.sbuf, b);
                    let s = vec![(self.ssgl_addr, sbuf_left), (self.me.sbuf, b.len() as u32)];
                    self.ssgl_addr = self.me.sbuf + b.len() as u64;
                    s
                };
                self.write_data(v, Payload::Sges(sges), xfer);
            }
            done += xfer as usize;
        }
        done
    }

    /// rrecv: copy what has arrived (up to `want` bytes) out of the ring, in order.
    pub fn rrecv(&mut self, v: &impl Verbs, want: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while out.len() < want {
            let Some(head) = self.rmsg.front_mut() else {
                break;
            };
            let left = (want - out.len()) as u32;
            let mut rsize = if left < *head {
                *head -= left;
                left
            } else {
                self.rseq_no = self.rseq_no.wrapping_add(1);
                self.rmsg.pop_front().unwrap()
            };
            let end_size = RBUF_SIZE - self.rbuf_offset;
            self.log(format!("read {rsize:#x} at ring {:#x}", self.rbuf_offset));
            let at = |off: u32| self.me.rbuf + u64::from(off);
            if rsize > end_size {
                out.extend(v.read(self.side, at(self.rbuf_offset), end_size as usize));
                self.rbuf_offset = 0;
                rsize -= end_size;
                self.rbuf_bytes_avail += end_size;
            }
            out.extend(v.read(self.side, at(self.rbuf_offset), rsize as usize));
            self.rbuf_offset += rsize;
            self.rbuf_bytes_avail += rsize;
        }
        out
    }

    /// format_buf.
    pub fn next_payload(&mut self, size: usize) -> Vec<u8> {
        (0..size)
            .map(|_| {
                let b = self.tx_pattern;
                self.tx_pattern = b.wrapping_add(1);
                b
            })
            .collect()
    }

    /// verify_buf: panics at the first wrong byte with where it sat in the ring.
    pub fn verify(&mut self, data: &[u8], ring_at: u32) {
        if let Some(i) = data
            .iter()
            .enumerate()
            .position(|(i, &b)| b != self.rx_pattern.wrapping_add(i as u8))
        {
            let t = TRACE.lock().unwrap();
            eprintln!("trace:\n{}", Vec::from(t.clone()).join("\n"));
            let _ = i;
        }
        for (i, &b) in data.iter().enumerate() {
            assert_eq!(
                b,
                self.rx_pattern,
                "side {}: data verification failed byte {} (ring offset {:#x})",
                self.side,
                self.rx_total,
                (ring_at as usize + i) % RBUF_SIZE as usize
            );
            self.rx_pattern = self.rx_pattern.wrapping_add(1);
            self.rx_total += 1;
        }
    }
}

/// What one side of the test program does next (rstream's run_test).
enum Step {
    Send {
        buf: Vec<u8>,
        done: usize,
        olen: u32,
    },
    Recv {
        size: usize,
        got: usize,
    },
}

/// Steps of the program a side works through per round (a busy application).
const STEPS_PER_ROUND: usize = 16;

/// rstream's run_test for both sides: a 16-byte sync each way, then per iteration (`-I`)
/// `count` (`-C`) messages of `size` (`-S`) client (side 0) -> server and then `count` server
/// -> client (none back if `one_way`). `rstream -S 65536 -C 200` is one iteration of 200 each
/// way; each side works on its own head of the plan (a sender may run ahead of its receiver).
pub struct Program {
    plan: VecDeque<(bool, usize)>,
    current: [Option<Step>; 2],
    pending_recv: [VecDeque<usize>; 2],
}

impl Program {
    pub fn new(size: usize, count: usize, iterations: usize, one_way: bool) -> Program {
        let mut plan = VecDeque::from([(true, 16), (false, 16)]);
        for _ in 0..iterations {
            plan.extend(std::iter::repeat_n((true, size), count));
            if !one_way {
                plan.extend(std::iter::repeat_n((false, size), count));
            }
        }
        Program {
            plan,
            current: [None, None],
            pending_recv: [VecDeque::new(), VecDeque::new()],
        }
    }

    pub fn finished(&self) -> bool {
        self.plan.is_empty()
            && self.current.iter().all(Option::is_none)
            && self.pending_recv.iter().all(VecDeque::is_empty)
    }

    /// One side's turn: it takes its next steps (a receive the peer's send queued for it comes
    /// first) and works on them until one has to wait. Returns whether anything moved.
    pub fn turn(&mut self, side: usize, rs: &mut Rs, v: &mut impl Verbs) -> bool {
        let mut progress = false;
        for _ in 0..STEPS_PER_ROUND {
            let current = &mut self.current[side];
            if current.is_none() {
                if let Some(size) = self.pending_recv[side].pop_front() {
                    *current = Some(Step::Recv { size, got: 0 });
                } else if self
                    .plan
                    .front()
                    .is_some_and(|&(client, _)| (side == 0) == client)
                {
                    let (_, size) = self.plan.pop_front().unwrap();
                    self.pending_recv[1 - side].push_back(size);
                    *current = Some(Step::Send {
                        buf: rs.next_payload(size),
                        done: 0,
                        olen: OLAP_START_SIZE,
                    });
                }
            }
            let finished = match current {
                Some(Step::Send { buf, done, olen }) => {
                    let n = rs.rsend(v, &buf[*done..], olen);
                    *done += n;
                    progress |= n > 0;
                    *done == buf.len()
                }
                Some(Step::Recv { size, got }) => {
                    let at = rs.rbuf_offset;
                    let data = rs.rrecv(v, *size - *got);
                    rs.verify(&data, at);
                    *got += data.len();
                    progress |= !data.is_empty();
                    *got == *size
                }
                None => false,
            };
            if !finished {
                break;
            }
            *current = None;
        }
        progress
    }
}
