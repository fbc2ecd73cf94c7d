//! One guest's session: its control connection, the peer's end of the RC QP of the current
//! case, the peer's memory, and the well-behaved responder and requester the cases build on.

use std::time::{Duration, Instant};

use rox_nic::roce::wire::{self, opcode as op, Aeth, Bth, Headers, NakCode, Reth, Syndrome};
use rox_nic::roce::{Key, Msn, Psn, Qpn};

use crate::control::Control;
use crate::port::{Endpoint, Port, Rx};

/// The peer's memory region: where its guest READs from and WRITEs to.
pub const PEER_VA: u64 = 0x7e00_0000_0000;
pub const PEER_MEM_LEN: usize = 64 * 1024;
pub const PEER_RKEY: u32 = 0x00c0_ff01;
/// Path MTU of every case (the guest sets IBV_MTU_1024).
pub const MTU: usize = 1024;
/// How long a case may take before the peer gives up on the guest.
const CASE_DEADLINE: Duration = Duration::from_secs(30);
/// How long the guest may take from the `PEER` line to its QP in RTS.
const GO_DEADLINE: Duration = Duration::from_secs(30);

/// What the event loop woke up for.
pub enum Event {
    Frame(Rx),
    Line(String),
    Timeout,
}

/// The peer's end of one RC QP.
pub struct PeerQp {
    pub qpn: Qpn,
    pub guest_qpn: Qpn,
    /// Next PSN the peer sends as requester.
    pub npsn: Psn,
    /// Next PSN the peer expects as responder.
    pub epsn: Psn,
    /// Messages the responder completed (the AETH MSN).
    pub msn: u32,
    pub guest_rkey: u32,
    pub guest_va: u64,
    /// A sequence NAK was sent for `epsn` (one per expected PSN, as IBA asks).
    nak_sent: bool,
    /// READ requests executed: (first PSN, RETH), to answer duplicates from.
    reads: Vec<(Psn, Reth)>,
}

impl PeerQp {
    pub fn new(qpn: u32, guest_qpn: u32, npsn: u32, guest_psn: u32, rkey: u32, va: u64) -> Self {
        PeerQp {
            qpn: Qpn::from_wire(qpn),
            guest_qpn: Qpn::from_wire(guest_qpn),
            npsn: Psn::from_wire(npsn),
            epsn: Psn::from_wire(guest_psn),
            msn: 0,
            guest_rkey: rkey,
            guest_va: va,
            nak_sent: false,
            reads: Vec::new(),
        }
    }
}

pub struct Session {
    pub port: Port,
    pub ctrl: Control,
    pub guest: Endpoint,
    pub qp: PeerQp,
    pub mem: Vec<u8>,
    /// What the peer saw that breaks the spec (the case fails if not empty).
    pub faults: Vec<String>,
    /// The guest said `END` while the case was still watching the wire.
    ended: bool,
    /// Frames of the case's QP that arrived before the guest's `GO` line did (its first
    /// request can overtake the TCP segment): handed to the case first.
    early: std::collections::VecDeque<Rx>,
}

/// The peer memory's initial contents: byte i is a function of i, so a READ's data is known.
pub fn mem_pattern(i: usize) -> u8 {
    (i.wrapping_mul(7) + 3) as u8
}

impl Session {
    pub fn new(port: Port, ctrl: Control, guest: Endpoint) -> Session {
        Session {
            port,
            ctrl,
            guest,
            qp: PeerQp::new(0, 0, 0, 0, 0, 0),
            mem: (0..PEER_MEM_LEN).map(mem_pattern).collect(),
            faults: Vec::new(),
            ended: false,
            early: Default::default(),
        }
    }

    pub fn fault(&mut self, what: String) {
        self.faults.push(what);
    }

    /// A new case starts: no faults, no `END` yet.
    pub fn start_case(&mut self, qp: PeerQp) {
        self.qp = qp;
        self.faults.clear();
        self.ended = false;
        self.early.clear();
    }

    /// Waits for the guest's `GO` (its QP is in RTS), keeping the frames that come first.
    pub fn await_go(&mut self) -> bool {
        let deadline = Instant::now() + GO_DEADLINE;
        // Kept aside until GO: next_event hands out `early` first, so pushing there now would
        // return the same frame forever.
        let mut before_go = std::collections::VecDeque::new();
        let go = loop {
            match self.next_event(deadline.saturating_duration_since(Instant::now())) {
                Event::Line(l) => break l == "GO",
                Event::Frame(rx) => before_go.push_back(rx),
                Event::Timeout => break false,
            }
        };
        self.early = before_go;
        go
    }

    /// Waits up to `timeout` for a frame to the current QP or a control line.
    pub fn next_event(&mut self, timeout: Duration) -> Event {
        if let Some(rx) = self.early.pop_front() {
            return Event::Frame(rx);
        }
        let until = Instant::now() + timeout;
        loop {
            if let Some(line) = self.ctrl.take_line() {
                return Event::Line(line);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.ctrl.closed() {
                return Event::Timeout;
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.port.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.ctrl.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n <= 0 {
                continue;
            }
            if fds[1].revents != 0 && self.ctrl.fill().is_err() {
                return Event::Timeout;
            }
            if fds[0].revents & libc::POLLIN != 0 {
                if let Some(rx) = self.port.recv_from(&mut self.guest) {
                    // Frames of an earlier case's QP (late retransmissions) are not this case's.
                    if rx.hdr.bth.dest_qpn == self.qp.qpn {
                        return Event::Frame(rx);
                    }
                }
            }
        }
    }

    /// Runs the case's frame handler until the guest says `END` (true) or the case deadline
    /// passes (false, recorded as a fault).
    pub fn until_end(&mut self, on_frame: &mut dyn FnMut(&mut Session, Rx)) -> bool {
        let deadline = Instant::now() + CASE_DEADLINE;
        loop {
            if self.ended {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left) {
                Event::Frame(rx) => on_frame(self, rx),
                Event::Line(line) if line == "END" => self.ended = true,
                Event::Line(line) => self.fault(format!("unexpected control line {line:?}")),
                Event::Timeout => {
                    self.fault("the guest never said END".into());
                    return false;
                }
            }
        }
    }

    /// Lets `wait` pass, handing frames that arrive meanwhile to `on_frame` (the guest may say
    /// `END` meanwhile: its verbs side is done, the wire is still watched).
    pub fn pause(&mut self, wait: Duration, on_frame: &mut dyn FnMut(&mut Session, Rx)) {
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.next_event(left) {
                Event::Frame(rx) => on_frame(self, rx),
                Event::Line(line) if line == "END" && !self.ended => self.ended = true,
                Event::Line(line) => self.fault(format!("unexpected control line {line:?}")),
                Event::Timeout => {}
            }
        }
    }

    fn bth(&self, opcode: u8, psn: Psn, ack_req: bool) -> Bth {
        Bth {
            opcode,
            solicited: false,
            pkey: wire::DEFAULT_PKEY,
            dest_qpn: self.qp.guest_qpn,
            ack_req,
            psn,
        }
    }

    fn transmit(&self, hdr: &Headers, payload: &[u8]) {
        let src_port = wire::flow_source_port(self.qp.qpn);
        self.port.send(&self.guest, src_port, hdr, payload);
    }

    /// An ACK or NAK for `psn`.
    pub fn send_ack(&self, psn: Psn, syndrome: Syndrome) {
        let mut hdr = Headers::new(self.bth(op::RC_ACKNOWLEDGE, psn, false));
        hdr.aeth = Some(Aeth {
            syndrome,
            msn: Msn::from_wire(self.qp.msn),
        });
        self.transmit(&hdr, &[]);
    }

    /// One READ response packet (`opcode` FIRST/MIDDLE/LAST/ONLY) at `psn`.
    pub fn send_read_response(&self, opcode: u8, psn: Psn, payload: &[u8]) {
        let mut hdr = Headers::new(self.bth(opcode, psn, false));
        if opcode != op::RC_READ_RESPONSE_MIDDLE {
            hdr.aeth = Some(Aeth {
                syndrome: Syndrome::Ack,
                msn: Msn::from_wire(self.qp.msn),
            });
        }
        self.transmit(&hdr, payload);
    }

    /// A request from the peer as requester: `opcode` at `psn` with an optional RETH.
    pub fn send_request(&self, opcode: u8, psn: Psn, reth: Option<Reth>, payload: &[u8]) {
        let mut hdr = Headers::new(self.bth(opcode, psn, true));
        hdr.reth = reth;
        self.transmit(&hdr, payload);
    }

    /// A SEND ONLY at the next PSN (the peer's requester side).
    pub fn send_message(&mut self, payload: &[u8]) -> Psn {
        let psn = self.qp.npsn;
        self.send_request(op::RC_SEND_ONLY, psn, None, payload);
        self.qp.npsn = psn.next();
        psn
    }

    /// The RETH naming `len` bytes of the guest's buffer, with `rkey`.
    pub fn guest_reth(&self, rkey: u32, len: u32) -> Reth {
        Reth {
            va: self.qp.guest_va,
            rkey: Key::from_raw(rkey),
            dma_len: len,
        }
    }

    /// The bytes `reth` names in the peer's memory, if its key and bounds are right.
    fn peer_range(&self, reth: &Reth) -> Option<std::ops::Range<usize>> {
        let start = reth.va.checked_sub(PEER_VA)? as usize;
        let end = start.checked_add(reth.dma_len as usize)?;
        (reth.rkey.get() == PEER_RKEY && end <= self.mem.len()).then_some(start..end)
    }

    /// Sends the READ responses for `reth` from `psn`, MTU-sized.
    pub fn answer_read(&self, psn: Psn, reth: &Reth) {
        let range = self.peer_range(reth).expect("checked by the caller");
        let data = &self.mem[range];
        let chunks: Vec<&[u8]> = if data.is_empty() {
            vec![&[][..]]
        } else {
            data.chunks(MTU).collect()
        };
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.iter().enumerate() {
            let opcode = match (i, last) {
                (0, 0) => op::RC_READ_RESPONSE_ONLY,
                (0, _) => op::RC_READ_RESPONSE_FIRST,
                (i, l) if i == l => op::RC_READ_RESPONSE_LAST,
                _ => op::RC_READ_RESPONSE_MIDDLE,
            };
            self.send_read_response(opcode, psn.add(i as u32), chunk);
        }
    }

    /// The well-behaved RC responder: executes SEND ONLY, WRITE ONLY and READ at the expected
    /// PSN, answers duplicates (ACK again, READ responses again), NAKs the first PSN gap. Returns
    /// the SEND payload it accepted, if the frame was one. Multi-packet requests are not part
    /// of any case: they get an invalid-request NAK.
    pub fn respond(&mut self, rx: &Rx) -> Option<Vec<u8>> {
        let psn = rx.hdr.bth.psn;
        let base = rx.hdr.bth.opcode;
        let diff = psn.diff(self.qp.epsn);
        if diff > 0 {
            if !self.qp.nak_sent {
                self.qp.nak_sent = true;
                self.send_ack(self.qp.epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return None;
        }
        if diff < 0 {
            match (base, rx.hdr.reth) {
                (op::RC_READ_REQUEST, Some(reth)) => {
                    if self.qp.reads.iter().any(|(p, r)| *p == psn && *r == reth) {
                        self.answer_read(psn, &reth);
                    }
                }
                _ => self.send_ack(self.qp.epsn.prev(), Syndrome::Ack),
            }
            return None;
        }
        self.qp.nak_sent = false;
        match (base, rx.hdr.reth) {
            (op::RC_SEND_ONLY, _) => {
                self.complete(psn);
                Some(rx.payload.clone())
            }
            (op::RC_WRITE_ONLY, Some(reth)) => {
                match self.peer_range(&reth) {
                    Some(range) if range.len() == rx.payload.len() => {
                        self.mem[range].copy_from_slice(&rx.payload);
                        self.complete(psn);
                    }
                    _ => self.send_ack(psn, Syndrome::Nak(NakCode::RemoteAccessError)),
                }
                None
            }
            (op::RC_READ_REQUEST, Some(reth)) => {
                if self.peer_range(&reth).is_none() {
                    self.send_ack(psn, Syndrome::Nak(NakCode::RemoteAccessError));
                    return None;
                }
                let packets = (reth.dma_len as usize).div_ceil(MTU).max(1) as u32;
                self.qp.msn += 1;
                self.qp.reads.push((psn, reth));
                self.qp.epsn = psn.add(packets);
                self.answer_read(psn, &reth);
                None
            }
            _ => {
                self.send_ack(psn, Syndrome::Nak(NakCode::InvalidRequest));
                None
            }
        }
    }

    /// A SEND/WRITE at `psn` executed: advance and ACK it.
    fn complete(&mut self, psn: Psn) {
        self.qp.msn += 1;
        self.qp.epsn = psn.next();
        self.send_ack(psn, Syndrome::Ack);
    }
}

/// A short description of a received packet for fault messages.
pub fn describe(rx: &Rx) -> String {
    let aeth = rx
        .hdr
        .aeth
        .map(|a| format!(" {:?}", a.syndrome))
        .unwrap_or_default();
    format!(
        "opcode {:#04x} psn {:#x}{aeth}",
        rx.hdr.bth.opcode,
        rx.hdr.bth.psn.get()
    )
}
