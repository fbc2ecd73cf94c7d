//! An injected admin refusal: the device answers chosen admin commands with an error status
//! instead of running them, as a real NIC's firmware may refuse a command (out of resources,
//! a state it cannot handle, a bug), so a driver's error paths, probe's above all, can be
//! tested against a device that is otherwise sane. rox-nic's `--admin-fault SPEC` (for the
//! device's life) and `--admin-fault-file PATH` (re-read whenever the driver enables the
//! admin queue, so a test flips faults on and off between loads without restarting the
//! device; rox-lab gives each rox-nic one in its guest's run directory when asked) ask for
//! it. That file is the guest's to write: `read_fault_file` reads it so that it can neither
//! block the data path nor reach a host file.
//!
//! A spec is `OPCODE[:STATUS][,count=N]`: OPCODE is an admin opcode by its uapi name without
//! `ADMIN_OP_` (`QUERY_DEVICE`, `READ_MAC`, ...), STATUS an admin status by its name without
//! `ADMIN_STATUS_` (default `BAD_PARAM`) or a number 1-255 (one uapi does not define: a driver
//! must cope with firmware answering garbage); `count=N` refuses the first N such commands
//! and then runs them again, without it every one is refused. A refused command changes
//! nothing in the device and writes no response; its completion carries the status and zero
//! result words. For a query, `written=B` in STATUS's place answers short (or long) instead:
//! the query runs, and its completion claims B bytes of response written (`QueryAnswer`'s
//! `written`), fewer than the driver reads or more than its buffer holds.

use std::path::PathBuf;

use rox_uapi::admin::*;

/// The admin opcodes by their uapi names (`ADMIN_OP_` dropped).
const OPCODES: [(&str, u8); 25] = [
    ("QUERY_DEVICE", ADMIN_OP_QUERY_DEVICE),
    ("QUERY_PORT", ADMIN_OP_QUERY_PORT),
    ("SET_GID", ADMIN_OP_SET_GID),
    ("READ_MAC", ADMIN_OP_READ_MAC),
    ("SET_PORT_STATE", ADMIN_OP_SET_PORT_STATE),
    ("REG_MR", ADMIN_OP_REG_MR),
    ("DEREG_MR", ADMIN_OP_DEREG_MR),
    ("ALLOC_MW", ADMIN_OP_ALLOC_MW),
    ("DEALLOC_MW", ADMIN_OP_DEALLOC_MW),
    ("ODP_UPDATE", ADMIN_OP_ODP_UPDATE),
    ("CREATE_CQ", ADMIN_OP_CREATE_CQ),
    ("DESTROY_CQ", ADMIN_OP_DESTROY_CQ),
    ("RESIZE_CQ", ADMIN_OP_RESIZE_CQ),
    ("CREATE_QP", ADMIN_OP_CREATE_QP),
    ("MODIFY_QP", ADMIN_OP_MODIFY_QP),
    ("QUERY_QP", ADMIN_OP_QUERY_QP),
    ("DESTROY_QP", ADMIN_OP_DESTROY_QP),
    ("ATTACH_MCAST", ADMIN_OP_ATTACH_MCAST),
    ("DETACH_MCAST", ADMIN_OP_DETACH_MCAST),
    ("CREATE_SRQ", ADMIN_OP_CREATE_SRQ),
    ("MODIFY_SRQ", ADMIN_OP_MODIFY_SRQ),
    ("QUERY_SRQ", ADMIN_OP_QUERY_SRQ),
    ("DESTROY_SRQ", ADMIN_OP_DESTROY_SRQ),
    ("QUERY_STATS", ADMIN_OP_QUERY_STATS),
    ("QUERY_COUNTERS", ADMIN_OP_QUERY_COUNTERS),
];

/// The admin error statuses by their uapi names (`ADMIN_STATUS_` dropped; SUCCESS is no
/// refusal).
const STATUSES: [(&str, u8); 8] = [
    ("BAD_OPCODE", ADMIN_STATUS_BAD_OPCODE),
    ("BAD_HANDLE", ADMIN_STATUS_BAD_HANDLE),
    ("BAD_STATE", ADMIN_STATUS_BAD_STATE),
    ("BAD_PARAM", ADMIN_STATUS_BAD_PARAM),
    ("NO_RESOURCES", ADMIN_STATUS_NO_RESOURCES),
    ("BAD_DMA", ADMIN_STATUS_BAD_DMA),
    ("BUSY", ADMIN_STATUS_BUSY),
    ("BAD_DOORBELL", ADMIN_STATUS_BAD_DOORBELL),
];

/// The queries (`AdminQuery`): the opcodes whose `result1` says how much response was written.
const QUERIES: [u8; 5] = [
    ADMIN_OP_QUERY_DEVICE,
    ADMIN_OP_QUERY_PORT,
    ADMIN_OP_QUERY_QP,
    ADMIN_OP_QUERY_STATS,
    ADMIN_OP_QUERY_COUNTERS,
];

/// An admin opcode's uapi name (`ADMIN_OP_` dropped), or None for one uapi does not define.
pub fn opcode_name(opcode: u8) -> Option<&'static str> {
    OPCODES
        .iter()
        .find(|(_, op)| *op == opcode)
        .map(|(n, _)| *n)
}

/// What a fault does to the command it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// Not run; completed with this status: an `ADMIN_STATUS_*` other than SUCCESS, or one
    /// uapi does not define.
    Refuse(u8),
    /// (Queries only) run, and its completion claims this many bytes of response written.
    Written(u32),
}

/// One `--admin-fault`: which command it takes, what it does, how many times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminFault {
    pub opcode: u8,
    pub action: Injected,
    /// How many more commands it takes; None: every one.
    pub remaining: Option<u64>,
}

impl std::str::FromStr for AdminFault {
    type Err = String;

    fn from_str(s: &str) -> Result<AdminFault, String> {
        let want =
            "want OPCODE[:STATUS|:written=B][,count=N], e.g. QUERY_DEVICE:NO_RESOURCES,count=1";
        let (command, count) = match s.split_once(',') {
            None => (s, None),
            Some((command, count)) => {
                let n = count
                    .strip_prefix("count=")
                    .and_then(|n| n.parse::<u64>().ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{s:?}: {count:?} is not count=N (N > 0); {want}"))?;
                (command, Some(n))
            }
        };
        let (opcode, status) = command.split_once(':').unwrap_or((command, "BAD_PARAM"));
        let opcode = OPCODES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(opcode))
            .map(|(_, op)| *op)
            .ok_or_else(|| {
                let names: Vec<_> = OPCODES.iter().map(|(n, _)| *n).collect();
                format!(
                    "{s:?}: {opcode:?} is not an admin opcode ({})",
                    names.join(", ")
                )
            })?;
        let action = match status.strip_prefix("written=") {
            Some(bytes) => {
                if !QUERIES.contains(&opcode) {
                    return Err(format!("{s:?}: written= needs a query (QUERY_*)"));
                }
                let bytes = bytes
                    .parse::<u32>()
                    .map_err(|_| format!("{s:?}: {bytes:?} is not a number of bytes"))?;
                Injected::Written(bytes)
            }
            None => Injected::Refuse(parse_status(status).map_err(|e| format!("{s:?}: {e}"))?),
        };
        Ok(AdminFault {
            opcode,
            action,
            remaining: count,
        })
    }
}

/// An error status by its uapi name (`ADMIN_STATUS_` dropped) or number (not 0: SUCCESS is
/// no refusal).
fn parse_status(status: &str) -> Result<u8, String> {
    let named = STATUSES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(status))
        .map(|(_, st)| *st);
    named
        .or_else(|| status.parse::<u8>().ok().filter(|st| *st != 0))
        .ok_or_else(|| {
            let names: Vec<_> = STATUSES.iter().map(|(n, _)| *n).collect();
            format!(
                "{status:?} is not an admin error status ({}, or 1-255), nor written=B",
                names.join(", ")
            )
        })
}

/// Parses a list of specs separated by white space (a file's content):
/// `QUERY_PORT:BUSY,count=2 READ_MAC`. Empty: no fault.
pub fn parse_list(text: &str) -> Result<Vec<AdminFault>, String> {
    text.split_whitespace().map(str::parse).collect()
}

/// The most a fault file may hold: a few specs take a few dozen bytes.
pub const FAULT_FILE_MAX: usize = 4096;

/// The most of a fault file's text (or of an error quoting it) a log line holds, in
/// characters: enough for a parse error's list of names.
const QUOTE_MAX: usize = 512;

/// Reads a fault file, which lives in a directory the guest writes (rox-lab's run directory,
/// shared over 9p), on the data path's thread: so it must neither block nor reach beyond that
/// file. Not followed if a symbolic link (a guest's link to a host file would read, and
/// log, the host's content), opened without blocking (a FIFO would stop the data path until
/// someone writes it), accepted only as a regular file of at most `FAULT_FILE_MAX` bytes of
/// text (a link to /dev/zero or a huge file would read without end). A missing file is no
/// fault (empty text); anything else refused says why, without the content.
pub(crate) fn read_fault_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Looked at before it is opened: opening a device node the guest made (its directory is
    // shared without mapped permissions) could itself act on the host's device. The fstat
    // below still decides, on the file actually opened.
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(format!("cannot stat: {e}")),
        Ok(m) if m.file_type().is_symlink() => {
            return Err("a symbolic link, not followed".to_string())
        }
        Ok(m) if !m.is_file() => return Err(format!("not a regular file ({:?})", m.file_type())),
        Ok(_) => {}
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("a symbolic link, not followed".to_string())
        }
        Err(e) => return Err(format!("cannot open: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err(format!("not a regular file ({:?})", meta.file_type()));
    }
    let mut bytes = Vec::new();
    file.take(FAULT_FILE_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() > FAULT_FILE_MAX {
        return Err(format!("longer than {FAULT_FILE_MAX} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// At most `QUOTE_MAX` characters of `text`, for a log line.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes in all)", &text[..cut], text.len()),
    }
}

/// What the device is configured with (`DeviceConfig::admin_faults`).
#[derive(Clone, Debug, Default)]
pub struct AdminFaultConfig {
    /// For the device's life (`--admin-fault`): their counts run across resets and loads.
    pub fixed: Vec<AdminFault>,
    /// Re-read at each admin queue enable (`--admin-fault-file`); a missing file is no fault.
    pub file: Option<PathBuf>,
}

/// The faults in effect on the data path.
#[derive(Debug, Default)]
pub(crate) struct AdminFaults {
    fixed: Vec<AdminFault>,
    file: Option<PathBuf>,
    /// The file's content when it was last read, and the faults it named (their counts
    /// running since).
    file_text: String,
    from_file: Vec<AdminFault>,
}

impl AdminFaults {
    pub(crate) fn new(config: &AdminFaultConfig) -> AdminFaults {
        AdminFaults {
            fixed: config.fixed.clone(),
            file: config.file.clone(),
            ..AdminFaults::default()
        }
    }

    /// The driver enables the admin queue: the file's faults are re-read if its content
    /// changed since (so a count runs across loads until the file is written again). A file
    /// that is refused (`read_fault_file`) or does not parse is logged and injects nothing: a
    /// test then sees its command run.
    pub(crate) fn reload(&mut self) {
        let Some(path) = &self.file else { return };
        let text = match read_fault_file(path) {
            Ok(text) => text,
            Err(e) => {
                log::error!("rox-nic: {}: {e}; no admin fault injected", path.display());
                self.from_file = Vec::new();
                self.file_text = String::new();
                return;
            }
        };
        if text == self.file_text {
            return;
        }
        self.from_file = match parse_list(&text) {
            Ok(faults) => {
                log::info!(
                    "rox-nic: admin faults from {}: {:?}",
                    path.display(),
                    bounded(text.trim())
                );
                faults
            }
            Err(e) => {
                log::error!(
                    "rox-nic: {}: {}; no admin fault injected",
                    path.display(),
                    bounded(&e)
                );
                Vec::new()
            }
        };
        self.file_text = text;
    }

    /// What a fault does to a command of `opcode`, if one takes it (its count goes down): the
    /// fixed faults first, then the file's, each list in its order.
    pub(crate) fn take(&mut self, opcode: u8) -> Option<Injected> {
        let fault = self
            .fixed
            .iter_mut()
            .chain(self.from_file.iter_mut())
            .find(|f| f.opcode == opcode && f.remaining != Some(0))?;
        if let Some(n) = &mut fault.remaining {
            *n -= 1;
        }
        let command = opcode_name(opcode).unwrap_or("?");
        match fault.action {
            Injected::Refuse(status) => {
                let name = STATUSES
                    .iter()
                    .find(|(_, st)| *st == status)
                    .map_or_else(|| status.to_string(), |(n, _)| n.to_string());
                log::warn!("rox-nic: admin {command} refused with {name} (injected admin fault)");
            }
            Injected::Written(bytes) => log::warn!(
                "rox-nic: admin {command} answers {bytes} bytes written (injected admin fault)"
            ),
        }
        Some(fault.action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_names_statuses_and_counts() {
        let f: AdminFault = "QUERY_DEVICE".parse().unwrap();
        assert_eq!(
            f,
            AdminFault {
                opcode: ADMIN_OP_QUERY_DEVICE,
                action: Injected::Refuse(ADMIN_STATUS_BAD_PARAM),
                remaining: None
            }
        );
        let f: AdminFault = "read_mac:busy,count=3".parse().unwrap();
        assert_eq!(
            (f.opcode, f.action, f.remaining),
            (
                ADMIN_OP_READ_MAC,
                Injected::Refuse(ADMIN_STATUS_BUSY),
                Some(3)
            )
        );
        let f: AdminFault = "QUERY_PORT:200".parse().unwrap();
        assert_eq!(f.action, Injected::Refuse(200));
        let f: AdminFault = "QUERY_COUNTERS:written=8,count=1".parse().unwrap();
        assert_eq!(
            (f.opcode, f.action, f.remaining),
            (ADMIN_OP_QUERY_COUNTERS, Injected::Written(8), Some(1))
        );
        for bad in [
            "",
            "CREATE_EQ",
            "QUERY_DEVICE:SUCCESS",
            "QUERY_DEVICE:0",
            "QUERY_DEVICE:256",
            "QUERY_DEVICE,count=0",
            "QUERY_DEVICE,count=x",
            "QUERY_DEVICE,times=1",
            "READ_MAC:written=8",
            "QUERY_PORT:written=-1",
            "QUERY_PORT:written=",
        ] {
            assert!(bad.parse::<AdminFault>().is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_list(" \n").unwrap(), Vec::new());
        assert_eq!(
            parse_list("QUERY_PORT\nREAD_MAC:BUSY,count=1 ")
                .unwrap()
                .len(),
            2
        );
        assert!(parse_list("QUERY_PORT NOPE").is_err());
    }

    #[test]
    fn every_opcode_and_status_has_one_name() {
        for (i, (name, op)) in OPCODES.iter().enumerate() {
            assert_eq!(opcode_name(*op), Some(*name));
            assert!(OPCODES[i + 1..].iter().all(|(n, o)| n != name && o != op));
        }
        for op in QUERIES {
            assert!(opcode_name(op).is_some_and(|n| n.starts_with("QUERY_")));
        }
        for (i, (name, st)) in STATUSES.iter().enumerate() {
            assert_ne!(*st, ADMIN_STATUS_SUCCESS);
            assert!(STATUSES[i + 1..].iter().all(|(n, s)| n != name && s != st));
        }
    }

    #[test]
    fn a_count_runs_out_and_fixed_faults_come_first() {
        let mut faults = AdminFaults::new(&AdminFaultConfig {
            fixed: parse_list("QUERY_PORT:BUSY,count=2").unwrap(),
            file: None,
        });
        faults.from_file = parse_list("QUERY_PORT:NO_RESOURCES").unwrap();
        let port = |f: &mut AdminFaults| f.take(ADMIN_OP_QUERY_PORT);
        let busy = Some(Injected::Refuse(ADMIN_STATUS_BUSY));
        let no_resources = Some(Injected::Refuse(ADMIN_STATUS_NO_RESOURCES));
        assert_eq!(port(&mut faults), busy);
        assert_eq!(faults.take(ADMIN_OP_READ_MAC), None);
        assert_eq!(port(&mut faults), busy);
        assert_eq!(port(&mut faults), no_resources);
        assert_eq!(port(&mut faults), no_resources);
    }

    #[test]
    fn the_file_is_read_again_only_when_it_changed() {
        let dir = std::env::temp_dir().join(format!("rox-admin-fault-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("faults");
        let mut faults = AdminFaults::new(&AdminFaultConfig {
            fixed: Vec::new(),
            file: Some(path.clone()),
        });
        faults.reload();
        assert_eq!(faults.take(ADMIN_OP_READ_MAC), None, "no file, no fault");
        std::fs::write(&path, "READ_MAC,count=1\n").unwrap();
        faults.reload();
        assert_eq!(
            faults.take(ADMIN_OP_READ_MAC),
            Some(Injected::Refuse(ADMIN_STATUS_BAD_PARAM))
        );
        faults.reload();
        assert_eq!(
            faults.take(ADMIN_OP_READ_MAC),
            None,
            "the same content: the count ran out"
        );
        std::fs::write(&path, "READ_MAC,count=1 \n").unwrap();
        faults.reload();
        assert_eq!(
            faults.take(ADMIN_OP_READ_MAC),
            Some(Injected::Refuse(ADMIN_STATUS_BAD_PARAM)),
            "written again: the count starts again"
        );
        std::fs::write(&path, "READ_MAC:NOPE").unwrap();
        faults.reload();
        assert_eq!(faults.take(ADMIN_OP_READ_MAC), None, "a bad file: none");
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }

    /// A fault file's reload in a thread: what it leaves injected for READ_MAC, or None if
    /// it has not returned after 30 s (a blocked data path; the thread is left behind).
    fn reload_in_thread(path: &std::path::Path) -> Option<Option<Injected>> {
        let mut faults = AdminFaults::new(&AdminFaultConfig {
            fixed: Vec::new(),
            file: Some(path.to_path_buf()),
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            faults.reload();
            let _ = tx.send(faults.take(ADMIN_OP_READ_MAC));
        });
        rx.recv_timeout(std::time::Duration::from_secs(30)).ok()
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults");
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo failed");
        // Nobody ever writes the FIFO: a reader that blocks never returns (so in a thread
        // first: a blocking read fails the test instead of hanging it).
        let injected = reload_in_thread(&path).expect("reload blocked on a FIFO");
        assert_eq!(injected, None);
        let err = read_fault_file(&path).unwrap_err();
        assert!(err.starts_with("not a regular file"), "{err}");
    }

    #[test]
    fn a_symbolic_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        // The target holds a valid spec: followed, it would inject.
        let target = dir.path().join("host-file");
        std::fs::write(&target, "READ_MAC\n").unwrap();
        let path = dir.path().join("faults");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert_eq!(
            read_fault_file(&path),
            Err("a symbolic link, not followed".to_string())
        );
        assert_eq!(reload_in_thread(&path).expect("reload blocked"), None);
    }

    #[test]
    fn an_over_long_file_is_refused_and_a_bounded_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults");
        // Valid specs all through: read whole, they would inject.
        let spec = "READ_MAC ";
        let fits = spec.repeat(FAULT_FILE_MAX / spec.len());
        std::fs::write(&path, &fits).unwrap();
        assert_eq!(read_fault_file(&path).as_deref(), Ok(fits.as_str()));
        assert_eq!(
            reload_in_thread(&path).expect("reload blocked"),
            Some(Injected::Refuse(ADMIN_STATUS_BAD_PARAM))
        );
        std::fs::write(&path, spec.repeat(FAULT_FILE_MAX / spec.len() + 1)).unwrap();
        let err = read_fault_file(&path).unwrap_err();
        assert_eq!(err, format!("longer than {FAULT_FILE_MAX} bytes"));
        assert_eq!(reload_in_thread(&path).expect("reload blocked"), None);
        std::fs::write(&path, b"READ_MAC\xff").unwrap();
        assert_eq!(read_fault_file(&path), Err("not UTF-8 text".to_string()));
    }

    #[test]
    fn a_refused_file_drops_the_faults_it_named_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults");
        let mut faults = AdminFaults::new(&AdminFaultConfig {
            fixed: Vec::new(),
            file: Some(path.clone()),
        });
        std::fs::write(&path, "READ_MAC").unwrap();
        faults.reload();
        assert!(faults.take(ADMIN_OP_READ_MAC).is_some());
        std::fs::write(&path, "READ_MAC ".repeat(FAULT_FILE_MAX)).unwrap();
        faults.reload();
        assert_eq!(faults.take(ADMIN_OP_READ_MAC), None);
    }

    #[test]
    fn a_log_quote_is_bounded() {
        assert_eq!(bounded("READ_MAC"), "READ_MAC");
        let long = "x".repeat(QUOTE_MAX + 100);
        let quoted = bounded(&long);
        assert!(quoted.starts_with(&long[..QUOTE_MAX]));
        assert!(quoted.ends_with(&format!("... ({} bytes in all)", long.len())));
        assert!(quoted.len() < QUOTE_MAX + 40);
    }
}
