//! The conformance cases, peer side. Each runs after the guest's `GO` and ends at its `END`;
//! it plays its part on the wire and records in `Session::faults` what the guest's device did
//! against the IBA transport rules (the guest program asserts completions and QP states).
//! tests/peer/peer-cases.c is the guest side of the same table; docs/peer.md describes both.

use std::time::Duration;

use rox_nic::roce::wire::{opcode as op, NakCode, Reth, Syndrome};
use rox_nic::roce::{Key, Psn};

use crate::port::Rx;
use crate::session::{describe, Session, MTU, PEER_RKEY, PEER_VA};

/// The guest's QP attributes every case relies on (peer-cases.c sets them): retry_cnt and
/// rnr_retry are 2, so a request is sent at most 3 times before the QP fails.
pub const GUEST_RETRY_CNT: u32 = 2;
pub const GUEST_RNR_RETRY: u32 = 2;
/// RNR NAK timer code 1: 0.01 ms (IBA table 45).
const RNR_TIMER_SHORT: u8 = 1;
/// How long the peer watches for the guest's answer to one of its requests.
const ANSWER_WAIT: Duration = Duration::from_millis(500);
/// A PSN this far from the expected one lies in the other half of the 24-bit space: the
/// "duplicate" region (IBA 9.7.5.2.2 — more than 2^22 behind still counts as old).
const FAR_BEHIND: u32 = 0x40_0000;
const GHOST_FAR_AHEAD: u32 = 0x30_0000;

pub type Case = fn(&mut Session);

pub const CASES: &[(&str, Case)] = &[
    ("normal", normal),
    ("dup_ack", dup_ack),
    ("ack_unsent_psn", ack_unsent_psn),
    ("nak_seq", nak_seq),
    ("implied_nak", implied_nak),
    ("retry_exc", retry_exc),
    ("rnr_retry_exc", rnr_retry_exc),
    ("psn_ahead", psn_ahead),
    ("psn_duplicate", psn_duplicate),
    ("opcode_seq", opcode_seq),
    ("read_resp_long", read_resp_long),
    ("rkey_to_guest", rkey_to_guest),
    ("rkey_from_peer", rkey_from_peer),
    ("read_resp_resend", read_resp_resend),
];

pub fn find(name: &str) -> Option<Case> {
    CASES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// The payload of the peer's message `k` (peer-cases.c checks it byte for byte).
pub fn peer_message(k: u8) -> Vec<u8> {
    (0..64u32).map(|i| (i * 13) as u8 ^ k).collect()
}

fn is_ack_of(rx: &Rx, psn: Psn, want: Syndrome) -> bool {
    rx.hdr.bth.opcode == op::RC_ACKNOWLEDGE
        && rx.hdr.bth.psn == psn
        && rx.hdr.aeth.map(|a| a.syndrome) == Some(want)
}

/// Counts how often each PSN of a request arrived.
#[derive(Default)]
struct Seen(Vec<(u8, Psn)>);

impl Seen {
    fn note(&mut self, rx: &Rx) {
        self.0.push((rx.hdr.bth.opcode, rx.hdr.bth.psn));
    }
    fn count(&self, opcode: u8, psn: Psn) -> usize {
        self.0.iter().filter(|&&x| x == (opcode, psn)).count()
    }
}

/// A normal exchange on a fresh QP: the guest SENDs 64 bytes (echoed back to it as a SEND) and
/// READs 256 bytes; the guest's ACK of the echo must arrive.
fn normal(s: &mut Session) {
    let mut echo: Option<Psn> = None;
    let mut echo_acked = false;
    let mut reads = 0;
    s.until_end(&mut |s, rx| {
        if rx.hdr.bth.opcode == op::RC_ACKNOWLEDGE {
            echo_acked |= echo.is_some_and(|p| is_ack_of(&rx, p, Syndrome::Ack));
            return;
        }
        reads += usize::from(rx.hdr.bth.opcode == op::RC_READ_REQUEST);
        if let Some(payload) = s.respond(&rx) {
            if echo.is_none() {
                echo = Some(s.send_message(&payload));
            }
        }
    });
    if echo.is_none() {
        s.fault("no SEND from the guest".into());
    } else if !echo_acked {
        s.fault("the guest never ACKed the echo".into());
    }
    if reads == 0 {
        s.fault("no READ request from the guest".into());
    }
}

/// The guest's two SENDs each get their ACK three times plus an ACK of the PSN before.
fn dup_ack(s: &mut Session) {
    let mut sends = Seen::default();
    s.until_end(&mut |s, rx| {
        sends.note(&rx);
        let first = s.qp.epsn;
        let was_new = rx.hdr.bth.psn == first;
        s.respond(&rx);
        if was_new && sends.0.len() == 1 {
            s.send_ack(first, Syndrome::Ack);
            s.send_ack(first, Syndrome::Ack);
            s.send_ack(first.prev(), Syndrome::Ack);
        }
    });
    let first = s.qp.epsn.sub(2);
    if sends.count(op::RC_SEND_ONLY, first) == 0 || sends.count(op::RC_SEND_ONLY, first.next()) == 0
    {
        s.fault(format!("expected SENDs at {first:?} and the next PSN"));
    }
}

/// ACKs for PSNs the guest never sent: they must not complete the guest's SEND, which is never
/// really ACKed and must be retried retry_cnt times, then fail (RETRY_EXC_ERR).
fn ack_unsent_psn(s: &mut Session) {
    let mut sends = Seen::default();
    let psn = s.qp.epsn;
    s.until_end(&mut |s, rx| {
        sends.note(&rx);
        if sends.0.len() == 1 {
            s.send_ack(psn.add(5), Syndrome::Ack);
            s.send_ack(psn.add(GHOST_FAR_AHEAD), Syndrome::Ack);
        }
    });
    let n = sends.count(op::RC_SEND_ONLY, psn);
    if n != 1 + GUEST_RETRY_CNT as usize {
        s.fault(format!(
            "SEND {psn:?} sent {n} times, expected {} (a ghost ACK stopped its retries?)",
            1 + GUEST_RETRY_CNT
        ));
    }
}

/// The first transmission of the guest's first SEND is lost; its second SEND gets a NAK
/// (PSN sequence error): the guest must go back and send both again.
fn nak_seq(s: &mut Session) {
    let mut sends = Seen::default();
    let first = s.qp.epsn;
    s.until_end(&mut |s, rx| {
        sends.note(&rx);
        if rx.hdr.bth.psn == first && sends.count(op::RC_SEND_ONLY, first) == 1 {
            return; // "lost"
        }
        s.respond(&rx);
    });
    if sends.count(op::RC_SEND_ONLY, first) < 2 {
        s.fault(format!("SEND {first:?} was not sent again after the NAK"));
    }
    if s.qp.epsn != first.add(2) {
        s.fault(format!(
            "expected 2 SENDs executed, next PSN {:?}",
            s.qp.epsn
        ));
    }
}

/// The guest's READ gets no response, but its following SEND is ACKed: an implied NAK of the
/// READ (IBA 9.7.5.1.2), which the guest must send again and then complete with data.
fn implied_nak(s: &mut Session) {
    let mut seen = Seen::default();
    let read_psn = s.qp.epsn;
    s.until_end(&mut |s, rx| {
        seen.note(&rx);
        let opcode = rx.hdr.bth.opcode;
        if opcode == op::RC_READ_REQUEST && seen.count(opcode, read_psn) == 1 {
            return; // not answered
        }
        if opcode == op::RC_SEND_ONLY && rx.hdr.bth.psn == read_psn.next() && s.qp.epsn == read_psn
        {
            s.send_ack(read_psn.next(), Syndrome::Ack);
            return;
        }
        s.respond(&rx);
    });
    if seen.count(op::RC_READ_REQUEST, read_psn) < 2 {
        s.fault("the READ was not requested again after the implied NAK".into());
    }
}

/// Nothing answers: the guest's SEND goes out 1 + retry_cnt times, then fails.
fn retry_exc(s: &mut Session) {
    let mut sends = Seen::default();
    let psn = s.qp.epsn;
    s.until_end(&mut |_, rx| sends.note(&rx));
    let n = sends.count(op::RC_SEND_ONLY, psn);
    if n != 1 + GUEST_RETRY_CNT as usize {
        s.fault(format!(
            "SEND {psn:?} sent {n} times, expected {}",
            1 + GUEST_RETRY_CNT
        ));
    }
}

/// Every SEND gets an RNR NAK: sent 1 + rnr_retry times, then the guest fails it.
fn rnr_retry_exc(s: &mut Session) {
    let mut sends = Seen::default();
    let psn = s.qp.epsn;
    s.until_end(&mut |s, rx| {
        sends.note(&rx);
        if rx.hdr.bth.opcode == op::RC_SEND_ONLY {
            s.send_ack(rx.hdr.bth.psn, Syndrome::RnrNak(RNR_TIMER_SHORT));
        }
    });
    let n = sends.count(op::RC_SEND_ONLY, psn);
    if n != 1 + GUEST_RNR_RETRY as usize {
        s.fault(format!(
            "SEND {psn:?} sent {n} times, expected {}",
            1 + GUEST_RNR_RETRY
        ));
    }
}

/// Watches the guest's answers for `ANSWER_WAIT`; returns them.
fn answers(s: &mut Session) -> Vec<Rx> {
    let mut got = Vec::new();
    s.pause(ANSWER_WAIT, &mut |_, rx| got.push(rx));
    got
}

fn count_acks(got: &[Rx], psn: Psn, want: Syndrome) -> usize {
    got.iter().filter(|rx| is_ack_of(rx, psn, want)).count()
}

/// Two SENDs ahead of the expected PSN: exactly one sequence NAK naming the expected PSN, no
/// delivery; then the SEND at the expected PSN is delivered and ACKed.
fn psn_ahead(s: &mut Session) {
    let psn = s.qp.npsn;
    s.send_request(op::RC_SEND_ONLY, psn.add(5), None, &peer_message(9));
    s.send_request(op::RC_SEND_ONLY, psn.add(6), None, &peer_message(9));
    let got = answers(s);
    let naks = count_acks(&got, psn, Syndrome::Nak(NakCode::PsnSequenceError));
    if naks != 1 {
        s.fault(format!(
            "{naks} sequence NAKs for {psn:?}, expected 1: {:?}",
            list(&got)
        ));
    }
    s.send_message(&peer_message(1));
    let got = answers(s);
    if count_acks(&got, psn, Syndrome::Ack) == 0 {
        s.fault(format!("no ACK of {psn:?}: {:?}", list(&got)));
    }
    s.until_end(&mut |_, _| {});
}

/// The same SEND twice, then one from the far "duplicate" half of the PSN space: one delivery,
/// the duplicate ACKed again.
fn psn_duplicate(s: &mut Session) {
    let psn = s.qp.npsn;
    s.send_message(&peer_message(2));
    let mut got = answers(s);
    s.send_request(op::RC_SEND_ONLY, psn, None, &peer_message(2));
    got.extend(answers(s));
    let acks = count_acks(&got, psn, Syndrome::Ack);
    if acks < 2 {
        s.fault(format!(
            "{acks} ACKs of {psn:?} (sent twice): {:?}",
            list(&got)
        ));
    }
    s.send_request(
        op::RC_SEND_ONLY,
        psn.sub(FAR_BEHIND),
        None,
        &peer_message(3),
    );
    let got = answers(s);
    if let Some(nak) = got
        .iter()
        .find(|rx| rx.hdr.aeth.is_some_and(|a| a.syndrome != Syndrome::Ack))
    {
        s.fault(format!(
            "a PSN in the duplicate region was NAKed: {}",
            describe(nak)
        ));
    }
    s.until_end(&mut |_, _| {});
}

/// SEND MIDDLE without a FIRST: NAK invalid request (the guest's QP goes to error).
fn opcode_seq(s: &mut Session) {
    let psn = s.qp.npsn;
    // A MIDDLE packet carries exactly one MTU.
    s.send_request(op::RC_SEND_MIDDLE, psn, None, &vec![4; MTU]);
    let got = answers(s);
    if count_acks(&got, psn, Syndrome::Nak(NakCode::InvalidRequest)) != 1 {
        s.fault(format!(
            "expected one invalid-request NAK of {psn:?}: {:?}",
            list(&got)
        ));
    }
    s.until_end(&mut |_, _| {});
}

/// The guest READs 64 bytes; the response carries 128.
fn read_resp_long(s: &mut Session) {
    let mut reads = 0;
    s.until_end(&mut |s, rx| {
        if rx.hdr.bth.opcode == op::RC_READ_REQUEST {
            reads += 1;
            let asked = rx.hdr.reth.map_or(0, |r| r.dma_len as usize);
            let long = vec![0x5a; asked * 2];
            s.send_read_response(op::RC_READ_RESPONSE_ONLY, rx.hdr.bth.psn, &long);
        }
    });
    if reads == 0 {
        s.fault("no READ request from the guest".into());
    }
}

/// An RDMA WRITE into the guest's buffer with a wrong R_Key: NAK remote access error, then
/// silence (the guest's QP is in ERR).
fn rkey_to_guest(s: &mut Session) {
    let psn = s.qp.npsn;
    // Same index, another key variant (the low byte): a key the guest never handed out.
    let bad = s.qp.guest_rkey ^ 0x5a;
    let reth = s.guest_reth(bad, 64);
    s.send_request(op::RC_WRITE_ONLY, psn, Some(reth), &peer_message(5));
    let got = answers(s);
    if count_acks(&got, psn, Syndrome::Nak(NakCode::RemoteAccessError)) != 1 {
        s.fault(format!(
            "expected one remote-access NAK of {psn:?}: {:?}",
            list(&got)
        ));
    }
    // Class C: the responder's QP is in the error state now and answers nothing, not even the
    // same WRITE with the right R_Key (which a QP still in RTS would execute and ACK; the
    // guest would then also find its buffer changed).
    let good = s.guest_reth(s.qp.guest_rkey, 64);
    s.send_request(op::RC_WRITE_ONLY, psn, Some(good), &peer_message(5));
    let after = answers(s);
    if !after.is_empty() {
        s.fault(format!(
            "the responder answered after its remote access error: {:?}",
            list(&after)
        ));
    }
    s.until_end(&mut |_, _| {});
}

/// The guest's RDMA WRITE to the peer is refused: NAK remote access error.
fn rkey_from_peer(s: &mut Session) {
    let mut writes = 0;
    s.until_end(&mut |s, rx| {
        if rx.hdr.bth.opcode == op::RC_WRITE_ONLY {
            writes += 1;
            s.send_ack(rx.hdr.bth.psn, Syndrome::Nak(NakCode::RemoteAccessError));
        }
    });
    if writes == 0 {
        s.fault("no WRITE from the guest".into());
    }
}

/// READ 1 is answered; before READ 2's response the peer sends READ 1's response again, and
/// after it both again: the guest must place only READ 2's data in READ 2's buffer.
fn read_resp_resend(s: &mut Session) {
    let mut first: Option<(Psn, Reth)> = None;
    s.until_end(&mut |s, rx| {
        let (Some(reth), op::RC_READ_REQUEST) = (rx.hdr.reth, rx.hdr.bth.opcode) else {
            s.respond(&rx);
            return;
        };
        match first {
            None => first = Some((rx.hdr.bth.psn, reth)),
            Some((old_psn, old)) if rx.hdr.bth.psn != old_psn => {
                s.answer_read(old_psn, &old);
                s.respond(&rx);
                s.answer_read(old_psn, &old);
                s.answer_read(rx.hdr.bth.psn, &reth);
                return;
            }
            Some(_) => {}
        }
        s.respond(&rx);
    });
    if first.is_none() {
        s.fault("no READ from the guest".into());
    }
}

fn list(got: &[Rx]) -> Vec<String> {
    got.iter().map(describe).collect()
}

/// The peer's memory key and address, for the `PEER` line.
pub fn peer_region() -> (Key, u64) {
    (Key::from_raw(PEER_RKEY), PEER_VA)
}
