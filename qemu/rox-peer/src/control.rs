//! The TCP side channel to the guest program (tests/peer/peer-cases.c): one text line per
//! message, both ways.
//!
//! guest: `CASE <name> <qpn> <psn> <rkey> <va>`  its fresh RC QP and a buffer the peer may use
//! peer:  `PEER <qpn> <psn> <rkey> <va>`         the peer's QP and memory (or `ERR <why>`)
//! guest: `GO`                                   its QP is in RTS: the case starts
//! guest: `END`                                  its verbs side is done
//! peer:  `VERDICT ok|fail <detail>`             what the peer saw on the wire

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

pub struct Control {
    stream: TcpStream,
    pending: Vec<u8>,
    closed: bool,
}

impl Control {
    pub fn new(stream: TcpStream) -> Control {
        Control {
            stream,
            pending: Vec::new(),
            closed: false,
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    pub fn send(&mut self, line: &str) -> io::Result<()> {
        self.stream.write_all(format!("{line}\n").as_bytes())
    }

    /// A complete line already received, if any.
    pub fn take_line(&mut self) -> Option<String> {
        let at = self.pending.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.pending.drain(..=at).collect();
        Some(String::from_utf8_lossy(&line).trim().to_string())
    }

    /// Reads what the socket holds (it must be readable); Err on end of stream.
    pub fn fill(&mut self) -> io::Result<()> {
        let mut buf = [0u8; 4096];
        let n = self.stream.read(&mut buf)?;
        if n == 0 {
            self.closed = true;
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "guest closed"));
        }
        self.pending.extend_from_slice(&buf[..n]);
        Ok(())
    }

    pub fn closed(&self) -> bool {
        self.closed
    }
}

/// The guest's `CASE` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseRequest {
    pub name: String,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub va: u64,
}

pub fn parse_case(line: &str) -> Option<CaseRequest> {
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.as_slice() {
        ["CASE", name, qpn, psn, rkey, va] => Some(CaseRequest {
            name: name.to_string(),
            qpn: qpn.parse().ok()?,
            psn: psn.parse().ok()?,
            rkey: rkey.parse().ok()?,
            va: va.parse().ok()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_line_parses_and_junk_does_not() {
        assert_eq!(
            parse_case("CASE dup_ack 17 4660 256 140000"),
            Some(CaseRequest {
                name: "dup_ack".into(),
                qpn: 17,
                psn: 4660,
                rkey: 256,
                va: 140000
            })
        );
        assert_eq!(parse_case("CASE dup_ack 17 4660 256"), None);
        assert_eq!(parse_case("CASE dup_ack x 4660 256 1"), None);
        assert_eq!(parse_case("GO"), None);
    }
}
