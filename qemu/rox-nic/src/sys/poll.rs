//! Sleeping on file descriptors, and how late a timed sleep may end (the thread's timer slack).

use std::io;
use std::time::Duration;

/// Waits until one of `fds` is ready or `timeout` passed (None: no limit); an interrupted or
/// failed wait just returns (the caller looks at its work anyway).
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` and `ts` are valid for the duration of the call; no signal mask.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
}

/// Sets the calling thread's timer slack: the kernel may end a timed sleep of this thread
/// (a `ppoll` timeout) up to this much later, to batch wakeups. A normal thread starts with
/// 50 µs. Zero is refused: to the kernel it means "back to the default".
pub fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let ns = u64::try_from(slack.as_nanos()).unwrap_or(u64::MAX);
    if ns == 0 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: PR_SET_TIMERSLACK takes its value as an integer argument; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's id (what /proc/self/task/TID names it by).
pub fn thread_id() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// The calling thread's timer slack, as the kernel reads it back.
pub fn timer_slack() -> io::Result<Duration> {
    // SAFETY: PR_GET_TIMERSLACK takes no arguments and returns the slack in nanoseconds.
    let rc = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::from_nanos(rc as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_sets_its_own_timer_slack_and_no_other() {
        let mine = timer_slack().unwrap();
        let set = std::thread::spawn(|| {
            set_timer_slack(Duration::from_micros(1)).unwrap();
            timer_slack().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(set, Duration::from_micros(1));
        assert_eq!(
            timer_slack().unwrap(),
            mine,
            "another thread's slack is its own"
        );
    }

    #[test]
    fn zero_slack_is_refused() {
        let e = set_timer_slack(Duration::ZERO).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
