//! Host-side plumbing: running `ip`, network namespaces, supervised child processes.

use std::collections::VecDeque;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::{kill_process_group, Pid, Signal};

/// Namespaces this program creates are named `roxlab-<pid>` (the lab) and `roxlab-<pid>-r`
/// (its router), so a lab whose owner died can be recognised and removed.
pub const NETNS_PREFIX: &str = "roxlab-";

/// Runs a command to completion; a non-zero exit is an error carrying its stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

/// `ip ARGS...`
pub fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args)).map(|_| ())
}

/// `ip -n NS ARGS...`
pub fn ip_in(ns: &str, args: &[&str]) -> Result<()> {
    run(Command::new("ip").arg("-n").arg(ns).args(args)).map(|_| ())
}

/// A command that runs inside network namespace `ns` (`ip netns exec` execs it: the child's pid
/// is the program's own).
pub fn in_netns(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

/// `sysctl -qw` inside a namespace.
pub fn sysctl_in(ns: &str, settings: &[&str]) -> Result<()> {
    run(in_netns(ns, "sysctl").arg("-qw").args(settings)).map(|_| ())
}

pub fn netns_list() -> Result<Vec<String>> {
    let out = run(Command::new("ip").args(["netns", "list"]))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Pids of the processes inside a namespace.
pub fn netns_pids(ns: &str) -> Vec<i32> {
    match run(Command::new("ip").args(["netns", "pids", ns])) {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The pid a lab namespace or run directory name belongs to (`roxlab-123`, `roxlab-123-r`).
pub fn owner_pid(name: &str) -> Option<i32> {
    let rest = name
        .strip_prefix(NETNS_PREFIX)
        .or_else(|| name.strip_prefix("lab."))?;
    rest.split('-').next()?.parse().ok()
}

/// Is `pid` a live rox-lab (not a zombie waiting to be reaped)?
pub fn is_live_lab(pid: i32) -> bool {
    // /proc/PID/stat: "PID (COMM) STATE ...".
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((comm, rest)) = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')) else {
        return false;
    };
    comm == "rox-lab" && !matches!(rest.split_whitespace().next(), Some("Z" | "X"))
}

/// Kills every process left in a namespace and deletes it.
pub fn remove_netns(ns: &str) -> Result<()> {
    for pid in netns_pids(ns) {
        if let Some(p) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, Signal::KILL);
        }
    }
    ip(&["netns", "del", ns])
}

/// Removes labs (namespaces and run directories) whose rox-lab is gone, e.g. killed with
/// SIGKILL, which no handler can clean up after.
pub fn sweep_stale(run_root: &Path) {
    if let Ok(names) = netns_list() {
        for ns in names.iter().filter(|n| n.starts_with(NETNS_PREFIX)) {
            if owner_pid(ns).is_some_and(|p| !is_live_lab(p)) {
                eprintln!("rox-lab: removing stale namespace {ns} (its rox-lab is gone)");
                if let Err(e) = remove_netns(ns) {
                    eprintln!("rox-lab: {e:#}");
                }
            }
        }
    }
    if let Ok(dirs) = fs::read_dir(run_root) {
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if name.starts_with("lab.") && owner_pid(&name).is_some_and(|p| !is_live_lab(p)) {
                let _ = fs::remove_dir_all(d.path());
            }
        }
    }
}

/// A child process in its own process group, so stopping it reaches everything it started
/// (in-root's unshare, the chroot, QEMU) and a Ctrl-C on the terminal reaches only rox-lab,
/// which then stops them in order.
pub struct Supervised {
    pub what: String,
    child: Child,
    status: Option<ExitStatus>,
    readers: Vec<JoinHandle<()>>,
    /// Whether we signalled it to stop (so its end is ours, not its own).
    stopped_by_us: bool,
    /// When it started, and the last lines of its output (Sink::Console only).
    started: Instant,
    console: Arc<Mutex<ConsoleTail>>,
}

/// The last lines a child printed, each with when it arrived, and the line it is still
/// printing: firmware and the kernel's first words end without a newline ("Booting from
/// ROM.." then a terminal reset), and a boot that stops there must show them.
#[derive(Default)]
pub struct ConsoleTail {
    lines: VecDeque<(Instant, String)>,
    partial: Option<(Instant, String)>,
}

/// Marks the unterminated last line in [`Supervised::console_tail`].
pub const NO_NEWLINE_YET: &str = "  [no newline yet]";

impl ConsoleTail {
    /// Lines kept: enough to see where a boot stopped.
    const KEEP: usize = 200;

    fn push(&mut self, line: String) {
        if self.lines.len() == Self::KEEP {
            self.lines.pop_front();
        }
        self.lines.push_back((Instant::now(), line));
        self.partial = None;
    }

    fn set_partial(&mut self, bytes: &[u8]) {
        self.partial = (!bytes.is_empty()).then(|| {
            let text = String::from_utf8_lossy(bytes);
            (Instant::now(), text.trim_end_matches('\r').to_string())
        });
    }
}

/// Where a child's output goes.
pub enum Sink {
    /// A log file.
    File(PathBuf),
    /// rox-lab's own stdout/stderr, each line prefixed (empty prefix: passed through as is).
    Console(String),
}

impl Supervised {
    pub fn spawn(what: impl Into<String>, mut cmd: Command, sink: Sink) -> Result<Supervised> {
        use std::os::unix::process::CommandExt;
        let what = what.into();
        cmd.stdin(Stdio::null()).process_group(0);
        match &sink {
            Sink::File(path) => {
                let f = fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                cmd.stdout(f.try_clone()?).stderr(f);
            }
            Sink::Console(_) => {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {what}: {cmd:?}"))?;
        let mut readers = Vec::new();
        let console = Arc::new(Mutex::new(ConsoleTail::default()));
        if let Sink::Console(prefix) = sink {
            if let Some(out) = child.stdout.take() {
                readers.push(relay(out, prefix.clone(), false, console.clone()));
            }
            if let Some(err) = child.stderr.take() {
                readers.push(relay(err, prefix, true, console.clone()));
            }
        }
        Ok(Supervised {
            what,
            child,
            status: None,
            readers,
            stopped_by_us: false,
            started: Instant::now(),
            console,
        })
    }

    /// The process id (of the group leader: the program itself, `ip netns exec` execs it).
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// Time since the process was started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// How the process ended, if it ended by itself (not stopped by us).
    pub fn ended_by_itself(&mut self) -> Option<ExitStatus> {
        self.poll().filter(|_| !self.stopped_by_us)
    }

    /// Sends a signal to the process group (e.g. SIGSTOP to force a hang when testing rox-lab).
    pub fn signal(&self, sig: Signal) {
        self.signal_group(sig);
    }

    /// The last `n` lines of its output, each with how long before now it arrived.
    pub fn console_tail(&self, n: usize) -> Vec<(Duration, String)> {
        let tail = self.console.lock().unwrap_or_else(|e| e.into_inner());
        let partial = tail
            .partial
            .as_ref()
            .map(|(t, l)| (t.elapsed(), format!("{l}{NO_NEWLINE_YET}")));
        let skip = (tail.lines.len() + usize::from(partial.is_some())).saturating_sub(n);
        tail.lines
            .iter()
            .map(|(t, l)| (t.elapsed(), l.clone()))
            .chain(partial)
            .skip(skip)
            .collect()
    }

    /// Whether any kept line of its output contains `needle`.
    pub fn console_contains(&self, needle: &str) -> bool {
        let tail = self.console.lock().unwrap_or_else(|e| e.into_inner());
        tail.lines.iter().any(|(_, l)| l.contains(needle))
    }

    /// The exit status once the process has ended (never blocks).
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    fn signal_group(&self, sig: Signal) {
        if let Some(pgid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) {
            // ESRCH: the group is already gone.
            let _ = kill_process_group(pgid, sig);
        }
    }

    /// SIGTERM to the process group, SIGKILL after `grace`; waits for the process and the
    /// threads relaying its output.
    pub fn stop(&mut self, grace: Duration) {
        self.stop_group(grace);
        self.join_output();
    }

    /// As `stop`, without waiting for its output to end: a process that left the group (e.g.
    /// with setsid) may still hold the pipe until it is killed some other way.
    pub fn stop_group(&mut self, grace: Duration) {
        if self.poll().is_none() {
            self.stopped_by_us = true;
            self.signal_group(Signal::TERM);
            // A stopped process (SIGSTOP) acts on SIGTERM only once continued.
            self.signal_group(Signal::CONT);
            let deadline = Instant::now() + grace;
            while self.poll().is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
            }
        }
        // Also when the leader has exited: a child of it may linger in the group.
        self.signal_group(Signal::KILL);
        if self.status.is_none() {
            self.status = self.child.wait().ok();
        }
    }

    /// Waits until the threads relaying the output have seen its end.
    pub fn join_output(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

/// Copies a child's output to ours line by line, with a prefix (and the serial console's
/// carriage returns removed) when guests share the terminal.
fn relay(
    src: impl Read + Send + 'static,
    prefix: String,
    to_stderr: bool,
    console: Arc<Mutex<ConsoleTail>>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut src = src;
        let mut chunk = [0u8; 4096];
        let mut pending = Vec::new();
        loop {
            let n = match src.read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            if n == 0 && !pending.is_empty() {
                // The end terminates the last line.
                pending.push(b'\n');
            }
            pending.extend_from_slice(&chunk[..n]);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if pass_line(line, &prefix, to_stderr, &console).is_err() {
                    // Our output is gone (e.g. piped into `head`): keep draining the child's,
                    // or a guest blocked on its serial console would stall until the timeout.
                    let _ = std::io::copy(&mut src, &mut std::io::sink());
                    return;
                }
            }
            // The unterminated rest stays visible in the console tail until its newline comes.
            console
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .set_partial(&pending);
            if n == 0 {
                return;
            }
        }
    })
}

/// Records a whole line in the console tail and writes it to our output, prefixed.
fn pass_line(
    mut line: Vec<u8>,
    prefix: &str,
    to_stderr: bool,
    console: &Mutex<ConsoleTail>,
) -> std::io::Result<()> {
    let text = String::from_utf8_lossy(&line);
    console
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(text.trim_end_matches(['\n', '\r']).to_string());
    let mut buf = Vec::with_capacity(line.len() + prefix.len());
    if prefix.is_empty() {
        buf.extend_from_slice(&line);
    } else {
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        buf.extend_from_slice(prefix.as_bytes());
        buf.extend_from_slice(&line);
        buf.push(b'\n');
    }
    if to_stderr {
        std::io::stderr().lock().write_all(&buf)
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(&buf).and_then(|_| o.flush())
    }
}

/// A counter from /proc/net/snmp: a `Proto: names...` line followed by `Proto: values...`.
pub fn snmp_field(snmp: &str, proto: &str, field: &str) -> Option<u64> {
    let tag = format!("{proto}:");
    let mut rows = snmp.lines().filter(|l| l.starts_with(&tag));
    let names = rows.next()?.split_whitespace().skip(1);
    let values = rows.next()?.split_whitespace().skip(1);
    names
        .zip(values)
        .find(|(n, _)| *n == field)
        .and_then(|(_, v)| v.parse().ok())
}

/// A counter from /proc/net/snmp6 (`Name value` lines).
pub fn snmp6_field(snmp6: &str, field: &str) -> Option<u64> {
    snmp6.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == field).then(|| it.next()?.parse().ok())?
    })
}

/// The last `n` lines of a file (for logs of processes that failed).
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unterminated_last_line_shows_in_the_console_tail() {
        // What SeaBIOS leaves when the kernel it starts says nothing: no newline.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "printf 'SeaBIOS\\r\\nBooting from ROM..'; sleep 5"]);
        let mut p = Supervised::spawn("printer", cmd, Sink::Console("[t] ".into())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(4);
        let want = format!("Booting from ROM..{NO_NEWLINE_YET}");
        while p.console_tail(5).last().map(|(_, l)| l.as_str()) != Some(want.as_str())
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(20));
        }
        let tail: Vec<String> = p.console_tail(5).into_iter().map(|(_, l)| l).collect();
        assert_eq!(tail, ["SeaBIOS".to_string(), want]);
        assert_eq!(p.console_tail(1).len(), 1);
        p.stop(Duration::from_secs(1));
        // The end of the output terminates the line.
        let tail: Vec<String> = p.console_tail(5).into_iter().map(|(_, l)| l).collect();
        assert_eq!(tail, ["SeaBIOS", "Booting from ROM.."]);
    }

    #[test]
    fn owner_pids() {
        assert_eq!(owner_pid("roxlab-123"), Some(123));
        assert_eq!(owner_pid("roxlab-123-r"), Some(123));
        assert_eq!(owner_pid("lab.77"), Some(77));
        assert_eq!(owner_pid("other-1"), None);
    }

    #[test]
    fn snmp_counters() {
        let snmp = "Ip: Forwarding DefaultTTL InReceives ForwDatagrams\nIp: 1 64 10 7\nIcmp: InMsgs\nIcmp: 3\n";
        assert_eq!(snmp_field(snmp, "Ip", "ForwDatagrams"), Some(7));
        assert_eq!(snmp_field(snmp, "Ip", "Nope"), None);
        assert_eq!(
            snmp6_field(
                "Ip6InReceives 5\nIp6OutForwDatagrams 42\n",
                "Ip6OutForwDatagrams"
            ),
            Some(42)
        );
    }
}
