//! What explains a guest that hangs booting: the threads of its QEMU and rox-nic processes
//! (waiting or spinning, and where in the kernel), QEMU's monitor (status, registers, PCI),
//! rox-nic's trace of vfio-user requests, the console's last lines.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::host;
use crate::runner::{monitor_socket, Runner};

/// HMP commands asked of a hung guest's QEMU.
pub const MONITOR_COMMANDS: [&str; 3] = ["info status", "info registers -a", "info pci"];

/// How long one monitor command may take: the monitor runs in QEMU's main loop, which a vCPU
/// holding the big QEMU lock while waiting for its device blocks.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(5);

/// One thread of a process, as /proc shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadState {
    pub tid: i32,
    pub name: String,
    /// R running, S sleeping, D uninterruptible, T stopped, ...
    pub state: char,
    /// Where in the kernel it sleeps (empty when running or unknown).
    pub wchan: String,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
}

/// The state and CPU ticks from a /proc/PID/stat or /proc/PID/task/TID/stat line.
pub fn parse_stat(stat: &str) -> Option<(char, i32, u64)> {
    // "PID (COMM) STATE PPID PGRP ... UTIME(14) STIME(15) ...": COMM may hold spaces or ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let pgrp = f.get(2)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((state, pgrp, utime + stime))
}

/// The processes of process group `pgid` (a supervised child and what it started).
pub fn group_pids(pgid: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| parse_stat(&s))
                .is_some_and(|(_, pgrp, _)| pgrp == pgid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

fn read_trim(path: String) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The threads of `pid` now.
pub fn threads(pid: i32) -> Vec<ThreadState> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<ThreadState> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|tid| {
            let base = format!("/proc/{pid}/task/{tid}");
            let (state, _, cpu_ticks) =
                parse_stat(&fs::read_to_string(format!("{base}/stat")).ok()?)?;
            let wchan = read_trim(format!("{base}/wchan"));
            Some(ThreadState {
                tid,
                name: read_trim(format!("{base}/comm")),
                state,
                wchan: if wchan == "0" { String::new() } else { wchan },
                cpu_ticks,
            })
        })
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

/// Threads of each process of `pids`, sampled twice `interval` apart: a line per thread with
/// its state, where it waits, and the CPU it used in between (spinning or waiting).
pub fn thread_report(pids: &[(String, i32)], interval: Duration) -> String {
    let before: Vec<Vec<ThreadState>> = pids.iter().map(|(_, p)| threads(*p)).collect();
    thread::sleep(interval);
    // USER_HZ, the unit of /proc/PID/stat times, is 100 on Linux.
    const TICKS_PER_SEC: u64 = 100;
    let interval_ticks = (interval.as_millis() as u64 * TICKS_PER_SEC / 1000).max(1);
    let mut out = String::new();
    for ((what, pid), before) in pids.iter().zip(before) {
        let comm = read_trim(format!("/proc/{pid}/comm"));
        let after = threads(*pid);
        if after.is_empty() {
            let _ = writeln!(out, "  {what} (pid {pid}): gone");
            continue;
        }
        let _ = writeln!(out, "  {what} (pid {pid}, {comm}):");
        for t in &after {
            let used = before
                .iter()
                .find(|b| b.tid == t.tid)
                .map(|b| t.cpu_ticks.saturating_sub(b.cpu_ticks));
            let cpu = used.map_or("new".to_string(), |u| {
                format!("{}% CPU", u * 100 / interval_ticks)
            });
            let _ = writeln!(
                out,
                "    {:>7} {:<16} {} {:<24} {cpu}",
                t.tid,
                t.name,
                t.state,
                if t.wchan.is_empty() { "-" } else { &t.wchan }
            );
        }
    }
    out
}

/// Removes terminal escape sequences (HMP's readline redraws the line it echoes).
pub fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // CSI: parameters, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        if c != '\r' {
            out.push(c);
        }
    }
    out
}

const PROMPT: &str = "(qemu) ";

/// Reads until the monitor prompt or the deadline; the text before the prompt.
fn read_to_prompt(sock: &mut UnixStream, deadline: Instant) -> Result<String, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = strip_escapes(&String::from_utf8_lossy(&buf));
        if let Some(body) = text.strip_suffix(PROMPT) {
            return Ok(body.to_string());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no answer in {} s", MONITOR_TIMEOUT.as_secs()));
        }
        let _ = sock.set_read_timeout(Some(left.max(Duration::from_millis(10))));
        match sock.read(&mut chunk) {
            Ok(0) => return Err("monitor closed the connection".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(format!("monitor read: {e}")),
        }
    }
}

/// Asks QEMU's human monitor (a unix socket) each command; the answers, or why there are none.
pub fn ask_monitor(socket: &Path, commands: &[&str]) -> String {
    let mut out = String::new();
    let mut sock = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => return format!("  cannot connect to {}: {e}\n", socket.display()),
    };
    if let Err(e) = read_to_prompt(&mut sock, Instant::now() + MONITOR_TIMEOUT) {
        return format!("  monitor: {e} (QEMU's main loop is blocked)\n");
    }
    for cmd in commands {
        let _ = writeln!(out, "  (qemu) {cmd}");
        if let Err(e) = sock.write_all(format!("{cmd}\n").as_bytes()) {
            let _ = writeln!(out, "    cannot send: {e}");
            break;
        }
        match read_to_prompt(&mut sock, Instant::now() + MONITOR_TIMEOUT) {
            Ok(answer) => {
                // The first line is the echo of the command.
                for line in answer.lines().skip(1).filter(|l| !l.trim().is_empty()) {
                    let _ = writeln!(out, "    {line}");
                }
            }
            Err(e) => {
                let _ = writeln!(out, "    {e} (QEMU's main loop is blocked)");
                break;
            }
        }
    }
    out
}

/// Where one vCPU was, from QEMU's `info registers -a`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcpuPlace {
    pub cpu: u32,
    /// RIP, or CS base + EIP outside long mode.
    pub linear: u64,
    pub halted: bool,
    pub smm: bool,
    pub long_mode: bool,
    pub protected: bool,
}

fn hex_field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(key)? + key.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u64::from_str_radix(&digits, 16).ok()
}

/// Each vCPU's place in an `info registers -a` answer (x86: `CPU#N`, `RIP=`/`EIP=`, `HLT=`,
/// `SMM=`, the `CS =sel base limit flags` line, `CR0=`).
pub fn vcpu_places(registers: &str) -> Vec<VcpuPlace> {
    let mut out: Vec<VcpuPlace> = Vec::new();
    let mut ip = 0u64;
    for line in registers.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("CPU#") {
            out.push(VcpuPlace {
                cpu: n.trim().parse().unwrap_or(out.len() as u32),
                linear: 0,
                halted: false,
                smm: false,
                long_mode: false,
                protected: false,
            });
            continue;
        }
        let Some(cpu) = out.last_mut() else { continue };
        if let Some(v) = hex_field(line, "RIP=").or_else(|| hex_field(line, "EIP=")) {
            ip = v;
            cpu.linear = v;
            cpu.halted = line.contains("HLT=1");
            cpu.smm = line.contains("SMM=1");
        } else if let Some(cs) = line.strip_prefix("CS =") {
            cpu.long_mode = cs.contains("CS64");
            let base = cs.split_whitespace().nth(1);
            let base = base.and_then(|b| u64::from_str_radix(b, 16).ok());
            if !cpu.long_mode {
                cpu.linear = base.unwrap_or(0).wrapping_add(ip);
            }
        } else if let Some(cr0) = hex_field(line, "CR0=") {
            cpu.protected = cr0 & 1 != 0;
        }
    }
    out
}

/// The function holding `addr` in a System.map's text ("ADDR TYPE NAME" lines), as name+off.
pub fn symbolize(system_map: &str, addr: u64) -> Option<String> {
    let best = system_map
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let a = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            (matches!(kind, "T" | "t" | "W" | "w") && a <= addr).then_some((a, name))
        })
        .max_by_key(|(a, _)| *a)?;
    Some(format!("{}+{:#x}", best.1, addr - best.0))
}

/// What a vCPU's place means: firmware, the kernel (with the function, when `system_map` is
/// given), halted or running.
pub fn describe_place(p: &VcpuPlace, system_map: Option<&str>) -> String {
    const KERNEL_TEXT: u64 = 0xffff_ffff_8000_0000;
    let what = if p.smm {
        format!("in SMM at {:#x} (firmware)", p.linear)
    } else if p.long_mode && p.linear >= KERNEL_TEXT {
        let sym = system_map.and_then(|m| symbolize(m, p.linear));
        format!(
            "in the kernel at {:#x} {}",
            p.linear,
            sym.as_deref().unwrap_or("(no System.map)")
        )
    } else if p.long_mode {
        format!(
            "64-bit at {:#x} (the kernel's decompressor or early entry)",
            p.linear
        )
    } else if (0xc_0000..0xe_0000).contains(&p.linear) {
        // Option ROM space; with -kernel, linuxboot_dma loads the kernel from here, after
        // SeaBIOS printed "Booting from ROM..".
        format!(
            "at {:#x} in an option ROM (linuxboot: loading the kernel)",
            p.linear
        )
    } else if !p.protected {
        format!(
            "real mode at {:#x} (firmware: SeaBIOS or an option ROM)",
            p.linear
        )
    } else if p.linear < 0x10_0000 || p.linear >= 0xfffc_0000 {
        format!("32-bit at {:#x} (firmware: SeaBIOS)", p.linear)
    } else {
        format!(
            "32-bit at {:#x} (SeaBIOS's relocated POST code, or the kernel's 32-bit entry)",
            p.linear
        )
    };
    let state = if p.halted { "halted" } else { "running" };
    format!("vCPU {} {state}, {what}", p.cpu)
}

impl Runner {
    /// Prints what explains the late guests' hang: their QEMU's threads and monitor, their
    /// rox-nics' threads and vfio-user traces, their consoles. Takes about 10 s.
    pub fn diagnose_boot_hang(&self, late: &[usize]) {
        let mut out = String::new();
        for &g in late {
            let _ = writeln!(
                out,
                "rox-lab: guest {} has not reached guest-init {:.0} s after its QEMU started",
                self.lab.guests[g].index,
                self.guests[g].age().as_secs_f64()
            );
        }
        // Ask every rox-nic of the lab for its trace first: it prints while we look around.
        for h in self.helpers.iter().filter(|h| h.nic_of.is_some()) {
            h.proc.signal(Signal::USR1);
        }
        let mut procs: Vec<(String, i32)> = Vec::new();
        for (g, q) in self.guests.iter().enumerate() {
            for pid in group_pids(q.pid()) {
                let comm = read_trim(format!("/proc/{pid}/comm"));
                if comm.starts_with("qemu") {
                    procs.push((format!("guest {g} QEMU"), pid));
                }
            }
        }
        for h in self.helpers.iter().filter(|h| h.nic_of.is_some()) {
            procs.push((h.proc.what.clone(), h.proc.pid()));
        }
        let _ = writeln!(
            out,
            "--- threads (state, kernel wait channel, CPU over 1 s) of every guest's QEMU and rox-nic"
        );
        out.push_str(&thread_report(&procs, Duration::from_secs(1)));
        let system_map = fs::read_to_string(self.paths.kernel.join("linux/System.map")).ok();
        for &g in late {
            let _ = writeln!(out, "--- guest {g}: QEMU monitor");
            let monitor = ask_monitor(&monitor_socket(&self.guest_dir(g)), &MONITOR_COMMANDS);
            out.push_str(&monitor);
            let _ = writeln!(out, "--- guest {g}: where its vCPUs are");
            for place in vcpu_places(&monitor) {
                let _ = writeln!(out, "  {}", describe_place(&place, system_map.as_deref()));
            }
            let _ = writeln!(
                out,
                "--- guest {g}: last console lines (age; a last line without its newline is shown)"
            );
            for (age, line) in self.guests[g].console_tail(25) {
                let line = strip_escapes(&line);
                let _ = writeln!(out, "  [{:>5.1} s ago] {line}", age.as_secs_f64());
            }
            for h in self
                .helpers
                .iter()
                .filter(|h| h.nic_of.is_some_and(|(hg, _)| hg == g))
            {
                let _ = writeln!(
                    out,
                    "--- {}: its log's tail (the vfio-user trace it prints on SIGUSR1; none if stopped)",
                    h.proc.what
                );
                out.push_str(&host::tail(&h.log, 60));
                out.push('\n');
            }
        }
        eprint!("{out}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_despite_odd_names() {
        let line = "4242 (CPU 0/TCG) S 1 4000 4000 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 5 0 1 2 3";
        assert_eq!(parse_stat(line), Some(('S', 4000, 300)));
        let odd = "7 (a) b) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0";
        assert_eq!(parse_stat(odd), Some(('R', 7, 3)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn our_own_threads_are_found() {
        let me = i32::try_from(std::process::id()).unwrap();
        let t = threads(me);
        assert!(t.iter().any(|t| t.tid == me), "{t:?}");
        let report = thread_report(&[("me".into(), me)], Duration::from_millis(20));
        assert!(report.contains(&format!("me (pid {me}")), "{report}");
    }

    #[test]
    fn vcpus_are_placed_in_firmware_or_the_kernel() {
        // Abridged `info registers -a` of a guest: CPU 0 in the kernel's idle loop, CPU 1
        // spinning in SeaBIOS's 32-bit code, CPU 2 halted in real mode (an AP before SIPI).
        let regs = "CPU#0\nRAX=0 RBX=0\nRIP=ffffffff81a0b2c6 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n\
            ES =0000 0000000000000000 00000000 00000000\n\
            CS =0010 0000000000000000 ffffffff 00af9b00 DPL=0 CS64 [-RA]\nCR0=80050033 CR2=0\n\
            CPU#1\nEIP=000f1a2b EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n\
            CS =0008 00000000 ffffffff 00cf9b00 DPL=0 CS32 [-RA]\nCR0=00000011 CR2=0\n\
            CPU#2\nEIP=0000fff0 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=1\n\
            CS =f000 ffff0000 0000ffff 00009b00\nCR0=60000010 CR2=0\n";
        let p = vcpu_places(regs);
        assert_eq!(p.len(), 3, "{p:?}");
        let rom = VcpuPlace {
            linear: 0xc_00aa,
            ..p[2].clone()
        };
        assert_eq!(
            describe_place(&rom, None),
            "vCPU 2 halted, at 0xc00aa in an option ROM (linuxboot: loading the kernel)"
        );
        let map = "ffffffff81000000 T _text\nffffffff81a0b2b0 T default_idle\n\
                   ffffffff81a0b300 T other\nffffffff81a0b2c0 D data_not_code\n";
        assert_eq!(
            describe_place(&p[0], Some(map)),
            "vCPU 0 halted, in the kernel at 0xffffffff81a0b2c6 default_idle+0x16"
        );
        assert_eq!(
            describe_place(&p[1], None),
            "vCPU 1 running, 32-bit at 0xf1a2b (firmware: SeaBIOS)"
        );
        assert_eq!(
            describe_place(&p[2], None),
            "vCPU 2 halted, real mode at 0xfffffff0 (firmware: SeaBIOS or an option ROM)"
        );
    }

    #[test]
    fn escapes_and_carriage_returns_are_removed() {
        assert_eq!(
            strip_escapes("info status\r\n\u{1b}[K\u{1b}[Dok\r\n(qemu) "),
            "info status\nok\n(qemu) "
        );
    }

    #[test]
    fn a_silent_monitor_is_reported_not_waited_for() {
        let dir = std::env::temp_dir().join(format!("rox-lab-mon-{}", std::process::id()));
        let _ = fs::create_dir_all(&dir);
        let path = dir.join("m.sock");
        let _ = fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // A monitor that greets and answers the first command, then says nothing.
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"QEMU 11 monitor\r\n(qemu) ").unwrap();
            let mut b = [0u8; 64];
            let _ = s.read(&mut b);
            s.write_all(b"info status\r\nVM status: running\r\n(qemu) ")
                .unwrap();
            let _ = s.read(&mut b);
            thread::sleep(MONITOR_TIMEOUT + Duration::from_secs(1));
        });
        let t0 = Instant::now();
        let out = ask_monitor(&path, &["info status", "info pci"]);
        assert!(t0.elapsed() < MONITOR_TIMEOUT + Duration::from_secs(2));
        assert!(out.contains("    VM status: running\n"), "{out}");
        assert!(out.contains("no answer in 5 s"), "{out}");
        server.join().unwrap();
        let _ = fs::remove_dir_all(&dir);
    }
}
