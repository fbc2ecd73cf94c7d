//! Supervision of a running lab: waiting for the guests, the verdict, the teardown.

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::diagnose::ask_monitor;
use crate::host::{self, in_netns, Supervised};
use crate::runner::{
    die_request, kill_expected_mark, monitor_socket, Outcome, Runner, BOOTED_MARK, DIE_ON,
};
use crate::spec::{bridge_name, NicKind};

impl Runner {
    /// Waits for every guest (or the timeout, a signal, a boot deadline missed, or the grace
    /// period after a guest or helper failed).
    pub fn supervise(&mut self, signal: &AtomicUsize) -> Outcome {
        let deadline = Instant::now() + Duration::from_secs(self.cli.timeout);
        let mut grace_end: Option<Instant> = None;
        let mut hang_forced = false;
        loop {
            let sig = signal.load(Ordering::SeqCst);
            if sig != 0 {
                return Outcome::Signalled(i32::try_from(sig).unwrap_or(15));
            }
            if Instant::now() > deadline {
                return Outcome::TimedOut;
            }
            let late = self.check_boots();
            if !late.is_empty() {
                self.diagnose_boot_hang(&late);
                return Outcome::BootHang(late);
            }
            if !hang_forced {
                hang_forced = self.debug_hang();
            }
            let mut running = 0;
            for g in 0..self.guests.len() {
                if self.guests[g].poll().is_none() {
                    running += 1;
                } else if self.guest_status(g) != Some(0) && grace_end.is_none() {
                    grace_end = Some(Instant::now() + Duration::from_secs(self.cli.grace));
                }
            }
            self.serve_die_requests();
            if self.check_helpers() && grace_end.is_none() {
                grace_end = Some(Instant::now() + Duration::from_secs(self.cli.grace));
            }
            if self.host_cmd_status.is_none() {
                if let Some(st) = self.host_cmd.as_mut().and_then(Supervised::poll) {
                    if !st.success() {
                        eprintln!("rox-lab: host command failed ({st})");
                    }
                    self.host_cmd_status = Some(st);
                }
            }
            if running == 0 {
                return Outcome::Done;
            }
            if grace_end.is_some_and(|t| Instant::now() > t) {
                eprintln!(
                    "rox-lab: a guest or helper failed; stopping the rest after {} s of grace",
                    self.cli.grace
                );
                return Outcome::Done;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Notes guests that reached guest-init; the running guests past their boot deadline.
    fn check_boots(&mut self) -> Vec<usize> {
        let limit = Duration::from_secs(self.cli.boot_deadline());
        let mut late = Vec::new();
        for g in 0..self.guests.len() {
            if self.boot_times[g].is_some() {
                continue;
            }
            let age = self.guests[g].age();
            if self.guest_dir(g).join(BOOTED_MARK).exists() {
                self.boot_times[g] = Some(age);
                eprintln!(
                    "rox-lab: guest {} booted in {:.1} s",
                    self.lab.guests[g].index,
                    age.as_secs_f64()
                );
            } else if !limit.is_zero() && age > limit && self.guests[g].poll().is_none() {
                late.push(g);
            }
        }
        late
    }

    /// Reports helpers that ended by themselves: a failure unless the runner declared the kill
    /// (a rox-nic ends by itself with status 0 when its QEMU disconnects). True if one failed.
    fn check_helpers(&mut self) -> bool {
        let mut failed = false;
        for i in 0..self.helpers.len() {
            let h = &mut self.helpers[i];
            if h.reported {
                continue;
            }
            let Some(st) = h.proc.ended_by_itself() else {
                continue;
            };
            h.reported = true;
            if st.success() {
                continue;
            }
            let (what, log, nic_of) = (h.proc.what.clone(), h.log.clone(), h.nic_of);
            let expected =
                nic_of.is_some_and(|(g, n)| kill_expected_mark(&self.guest_dir(g), n).exists());
            if expected {
                eprintln!("rox-lab: {what} ended ({st}), as its runner declared it would");
            } else {
                eprintln!(
                    "rox-lab: {what} failed ({st})\n--- tail of {}\n{}",
                    log.display(),
                    host::tail(&log, 20)
                );
                self.helper_failed = true;
                failed = true;
            }
        }
        failed
    }

    /// Kills the device of every rox-nic whose runner asked (`die_request`) with the signal
    /// of the mode asked for. A request rox-lab cannot carry out fails the lab.
    fn serve_die_requests(&mut self) {
        for i in 0..self.helpers.len() {
            let Some((g, n)) = self.helpers[i].nic_of else {
                continue;
            };
            let request = die_request(&self.guest_dir(g), n);
            // Empty: the runner is still writing it.
            let Some(text) = fs::read_to_string(&request)
                .ok()
                .filter(|t| !t.trim().is_empty())
            else {
                continue;
            };
            let done = request.with_extension("die.done");
            let renamed = fs::rename(&request, &done);
            let what = self.helpers[i].proc.what.clone();
            let mode = text.trim();
            let sent = match (DIE_ON.iter().find(|(m, _)| *m == mode), renamed) {
                (Some((_, rt)), Ok(())) => host::run(std::process::Command::new("kill").args([
                    "-s",
                    &format!("RTMIN+{rt}"),
                    &self.helpers[i].proc.pid().to_string(),
                ]))
                .map(|_| ()),
                (None, _) => Err(anyhow::anyhow!(
                    "{}: {mode:?} is not a death mode ({})",
                    request.display(),
                    DIE_ON.map(|(m, _)| m).join(", ")
                )),
                (_, Err(e)) => Err(anyhow::anyhow!("renaming {}: {e}", request.display())),
            };
            match sent {
                Ok(()) => {
                    eprintln!("rox-lab: {what}: its device dies ({mode}), as its runner asked")
                }
                Err(e) => {
                    eprintln!("rox-lab: {what}: cannot kill its device: {e:#}");
                    self.helper_failed = true;
                }
            }
        }
    }

    /// --debug-hang G: once guest G's firmware runs, SIGSTOP its first rox-nic and pause its
    /// vCPUs (monitor `stop`): a boot hang on purpose. A stopped rox-nic alone does not hang
    /// a boot: QEMU gives up on each request after 5 s (x-msg-timeout) and boots without the
    /// device. True once done (or nothing to do).
    fn debug_hang(&mut self) -> bool {
        let Some(g) = self.cli.debug_hang else {
            return true;
        };
        if !self
            .guests
            .get(g)
            .is_some_and(|q| q.console_contains("SeaBIOS"))
        {
            return false;
        }
        if let Some(h) = self.helpers.iter().find(|h| h.nic_of == Some((g, 0))) {
            eprintln!(
                "rox-lab: debug: stopping {} (pid {}) with SIGSTOP",
                h.proc.what,
                h.proc.pid()
            );
            h.proc.signal(Signal::STOP);
        }
        eprintln!("rox-lab: debug: pausing guest {g}'s vCPUs (monitor: stop)");
        let answer = ask_monitor(&monitor_socket(&self.guest_dir(g)), &["stop"]);
        if answer.contains("cannot") || answer.contains("no answer") {
            eprintln!("rox-lab: debug: {}", answer.trim());
        }
        true
    }

    /// Stops the host command and the guests, then rox-nic and tcpdump, deletes the namespaces (with every bridge, tap
    /// and veth in them) and copies the capture out. Idempotent.
    pub fn stop_all(&mut self) {
        // Its output is awaited only once the namespace is gone: removing it kills anything
        // the command left running outside its process group, which may hold the pipe.
        if let Some(h) = &mut self.host_cmd {
            h.stop_group(Duration::from_secs(3));
        }
        for q in &mut self.guests {
            q.stop(Duration::from_secs(3));
        }
        if self.lab.routed && self.namespaces.contains(&self.router_ns) {
            self.report_router();
        }
        // A rox-nic ends by itself once its QEMU is gone: let it, so its own status (a
        // panicked data path exits 101) is seen rather than our SIGTERM's.
        let wait_end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < wait_end
            && self
                .helpers
                .iter_mut()
                .any(|h| h.nic_of.is_some() && h.proc.poll().is_none())
        {
            thread::sleep(Duration::from_millis(50));
        }
        self.check_helpers();
        for h in self.helpers.iter_mut().rev() {
            h.proc.stop(Duration::from_secs(3));
        }
        if self.namespaces.contains(&self.ns) {
            self.report_taps();
        }
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = host::remove_netns(&ns) {
                eprintln!("rox-lab: {e:#}");
            }
        }
        if let Some(h) = &mut self.host_cmd {
            h.join_output();
        }
        if let Some(file) = &self.cli.capture {
            let pcap = self.run.join("capture.pcap");
            if pcap.exists() && !self.capture_copied {
                self.capture_copied = true;
                match fs::copy(&pcap, file) {
                    Ok(bytes) => eprintln!(
                        "rox-lab: capture of {} ({bytes} bytes) in {}",
                        bridge_name(0),
                        file.display()
                    ),
                    Err(e) => eprintln!(
                        "rox-lab: cannot copy the capture to {}: {e}",
                        file.display()
                    ),
                }
            }
        }
    }

    /// What the router forwarded, for tests to check that traffic really crossed it (printed
    /// in a fixed form: `rox-lab: router netS: rx N packets, tx N packets` and `rox-lab:
    /// router forwarded N IPv4 and N IPv6 datagrams`).
    fn report_router(&self) {
        let read = |path: &str| -> String {
            host::run(in_netns(&self.router_ns, "cat").arg(path))
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        for s in 0..self.lab.subnets {
            let stat = |what: &str| {
                read(&format!("/sys/class/net/net{s}/statistics/{what}"))
                    .trim()
                    .to_string()
            };
            eprintln!(
                "rox-lab: router net{s}: rx {} packets, tx {} packets",
                stat("rx_packets"),
                stat("tx_packets")
            );
        }
        let fwd4 = host::snmp_field(&read("/proc/net/snmp"), "Ip", "ForwDatagrams").unwrap_or(0);
        let fwd6 = host::snmp6_field(&read("/proc/net/snmp6"), "Ip6OutForwDatagrams").unwrap_or(0);
        eprintln!("rox-lab: router forwarded {fwd4} IPv4 and {fwd6} IPv6 datagrams");
    }

    /// What each rox NIC's tap moved and dropped, for benchmarks to tell a slow run from one
    /// whose frames were lost on the way (printed as `rox-lab: tap g0n0: ...`). The tap's rx is
    /// what rox-nic wrote, its tx what the bridge queued for rox-nic to read; tx dropped counts
    /// what did not fit that queue. A segmentation-offload request counts once.
    fn report_taps(&self) {
        for nic in self.lab.guests.iter().flat_map(|g| &g.nics) {
            if nic.kind != NicKind::Rox || nic.cable.is_some() {
                continue;
            }
            let mut cat = in_netns(&self.ns, "cat");
            for what in TAP_STATS {
                cat.arg(format!("/sys/class/net/{}/statistics/{what}", nic.tap));
            }
            match host::run(&mut cat) {
                Ok(o) => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    eprintln!("rox-lab: tap {}: {}", nic.tap, tap_report(&text));
                }
                Err(e) => eprintln!("rox-lab: tap {}: statistics unreadable: {e}", nic.tap),
            }
        }
    }

    /// Exit status from the guests' recorded statuses; explains guests that failed.
    pub fn verdict(&self) -> u8 {
        let mut rc = 0u8;
        for g in 0..self.lab.guests.len() {
            let st = self.guest_status(g);
            match st {
                Some(0) => {}
                Some(s) => eprintln!("rox-lab: guest {g}: command exited {s}"),
                None => eprintln!("rox-lab: guest {g} ended without reporting the command's status (kernel panic, crash, or stopped)"),
            }
            if st != Some(0) {
                for n in self.lab.guests[g]
                    .nics
                    .iter()
                    .filter(|n| n.kind == NicKind::Rox)
                {
                    let log = self.guest_dir(g).join(format!("rox-nic{}.log", n.index));
                    eprintln!(
                        "--- tail of guest {g} rox-nic{}.log\n{}",
                        n.index,
                        host::tail(&log, 20)
                    );
                }
                if rc == 0 {
                    rc = st
                        .and_then(|s| u8::try_from(s).ok())
                        .filter(|&s| s != 0)
                        .unwrap_or(1);
                }
            }
        }
        if rc == 0 && self.host_cmd_status.is_some_and(|st| !st.success()) {
            rc = 1;
        }
        if self.helper_failed {
            eprintln!("rox-lab: FAILED: a helper process failed (see above)");
            rc = rc.max(1);
        }
        if self.rox_nic_panicked() {
            rc = rc.max(1);
        }
        rc
    }

    /// Whether a rox-nic log shows a panic (of any thread, also one its process survived);
    /// prints each panic's message and the log's tail.
    fn rox_nic_panicked(&self) -> bool {
        let mut panicked = false;
        for h in self.helpers.iter().filter(|h| h.nic_of.is_some()) {
            let text = fs::read_to_string(&h.log).unwrap_or_default();
            let messages = panic_messages(&text);
            if !messages.is_empty() {
                eprintln!(
                    "rox-lab: FAILED: {} panicked:\n{}\n--- tail of {}\n{}",
                    h.proc.what,
                    messages.join("\n"),
                    h.log.display(),
                    host::tail(&h.log, 20)
                );
                panicked = true;
            }
        }
        panicked
    }
}

/// The tap statistics [`Runner::report_taps`] reads, in the order it names them.
const TAP_STATS: [&str; 4] = ["rx_packets", "tx_packets", "rx_dropped", "tx_dropped"];

/// `rx N packets, tx N packets, rx dropped N, tx dropped N` from `cat`'s lines in
/// [`TAP_STATS`] order; `unreadable` when they are not all there.
fn tap_report(cat_output: &str) -> String {
    let values: Vec<&str> = cat_output.split_whitespace().collect();
    if values.len() != TAP_STATS.len() || values.iter().any(|v| v.parse::<u64>().is_err()) {
        return "statistics unreadable".to_string();
    }
    format!(
        "rx {} packets, tx {} packets, rx dropped {}, tx dropped {}",
        values[0], values[1], values[2], values[3]
    )
}

/// The panics in a Rust program's output: each `thread '…' panicked at FILE:LINE:COL:` line
/// with the message line that follows it.
fn panic_messages(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("panicked"))
        .map(|(i, l)| match lines.get(i + 1) {
            Some(next) if l.trim_end().ends_with(':') => format!("  {l}\n  {next}"),
            _ => format!("  {l}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_are_found_with_their_message() {
        let log = "INFO serving\nthread 'rox-datapath' panicked at src/x.rs:3:5:\nindex out of range\nnote: run with RUST_BACKTRACE=1\n";
        assert_eq!(
            panic_messages(log),
            ["  thread 'rox-datapath' panicked at src/x.rs:3:5:\n  index out of range"]
        );
        assert!(panic_messages("INFO all fine\n").is_empty());
    }

    #[test]
    fn tap_statistics_are_named_or_called_unreadable() {
        assert_eq!(
            tap_report("16400\n1024\n0\n37\n"),
            "rx 16400 packets, tx 1024 packets, rx dropped 0, tx dropped 37"
        );
        assert_eq!(tap_report("16400\n1024\n"), "statistics unreadable");
        assert_eq!(tap_report(""), "statistics unreadable");
    }
}
