//! A rox-nic process a test starts: wait until it listens on its vfio-user socket, and stop
//! it when the test ends, also when the test panics.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// `__SO_ACCEPTCON` in /proc/net/unix's flags column: the socket listens.
const ACCEPTCON: &str = "00010000";

/// Whether a socket listens on the unix socket path `path` (/proc/net/unix). Tells more than
/// the file's existence: the file appears at bind, before listen, and a connect in between is
/// refused (a test that waited only for the file failed once under load). Does not connect, so
/// it never takes a one-client server's only client. A path with whitespace never matches.
pub fn listening_at(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() == 8 && fields[3] == ACCEPTCON && Path::new(fields[7]) == path
    })
}

/// Waits up to `limit` for a server to listen at `path`; panics naming `what` if none does.
pub fn wait_listening(path: &Path, limit: Duration, what: &str) {
    let start = Instant::now();
    while !listening_at(path) {
        assert!(start.elapsed() < limit, "{what} did not listen on {path:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A child process killed and reaped when dropped, unless it already ended.
pub struct StopOnDrop(pub Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_bound_socket_listens_and_a_missing_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        assert!(!listening_at(&path));
        let listener = UnixListener::bind(&path).unwrap();
        assert!(listening_at(&path));
        drop(listener);
        assert!(
            !listening_at(&path),
            "closed: the path is no socket's any more"
        );
    }

    #[test]
    fn a_bound_socket_that_does_not_listen_is_not_listening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let _bound = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        assert!(path.exists());
        assert!(!listening_at(&path));
    }
}
