//! Sleeping on file descriptors.

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
