//! What a stream's failure report says about its device threads while no completion came:
//! sampled without waking them (their `/proc/self/task/TID` entries and the data path's shared
//! loop counters, never an admin command, which would wake a sleeping data path and hide a
//! missed wake), at the last completion and every [`GAP_SAMPLE`] after it.
//!
//! Read a gap's rows so: a data-path thread whose runqueue wait grows by most of the gap was
//! starved of a core (the kernel adds a wait to `schedstat` only when the thread gets the
//! core: until then it shows state R and nothing grows); one that ran and passed its loop but
//! made no progress points at the engine; one asleep (state S, its loop counters still) while
//! its peer waits for it missed a wake.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::device::Shared;

/// How often a gap without completions is sampled.
pub const GAP_SAMPLE: Duration = Duration::from_millis(10);
/// How often samples are taken while completions come (the one at the last completion is at
/// most this old): a sample reads six /proc files, which a benchmark's application thread
/// must not do every millisecond.
const BUSY_SAMPLE: Duration = Duration::from_millis(10);
/// Gap samples kept (the first ones: a gap longer than this many samples shows its start).
const GAP_SAMPLES_KEPT: usize = 128;

/// One thread as the kernel shows it: scheduler state, time run and time waited on a
/// runqueue (`schedstat`), in ns.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadSample {
    state: char,
    run_ns: u64,
    wait_ns: u64,
}

/// One device's data path: its thread and its loop counters.
#[derive(Clone, Copy, Debug, Default)]
struct DataPathSample {
    thread: ThreadSample,
    passes: u64,
    work_passes: u64,
    naps: u64,
    idle: bool,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    /// The application thread (the one running the stream).
    app: ThreadSample,
    sides: [DataPathSample; 2],
}

/// The samples of a stream's two data paths.
pub struct Watch {
    app_tid: i32,
    last_done: Option<Sample>,
    gap: Vec<Sample>,
}

impl Watch {
    pub fn new() -> Watch {
        Watch {
            app_tid: crate::sys::poll::thread_id(),
            last_done: None,
            gap: Vec::new(),
        }
    }

    /// A completion came now: the gap is over; sampled if the last sample is old enough.
    pub fn completion(&mut self, sides: [&Shared; 2]) {
        self.gap.clear();
        let now = Instant::now();
        if self
            .last_done
            .is_none_or(|s| now.duration_since(s.at) >= BUSY_SAMPLE)
        {
            self.last_done = Some(self.sample(sides));
        }
    }

    /// The application found nothing to do: a gap sample if one is due.
    pub fn idle(&mut self, sides: [&Shared; 2]) {
        let Some(last) = self.gap.last().or(self.last_done.as_ref()) else {
            return;
        };
        if last.at.elapsed() >= GAP_SAMPLE && self.gap.len() < GAP_SAMPLES_KEPT {
            let s = self.sample(sides);
            self.gap.push(s);
        }
    }

    fn sample(&self, sides: [&Shared; 2]) -> Sample {
        Sample {
            at: Instant::now(),
            app: thread_sample(self.app_tid),
            sides: sides.map(data_path_sample),
        }
    }

    /// The samples since the last completion and one now, each as what changed since the one
    /// before: per side (a, b) the data path's state, ms run, ms waited for a core, loop
    /// passes, passes with work, naps and whether it announced idleness; then the
    /// application thread's.
    pub fn report(&self, sides: [&Shared; 2]) -> String {
        let Some(first) = self.last_done else {
            return "no sample".into();
        };
        let mut out = format!(
            "data paths since the last completion (tids {} {}; ms run/waited for a core, \
             passes/with work/naps):",
            sides[0].datapath_tid.load(Ordering::Relaxed),
            sides[1].datapath_tid.load(Ordering::Relaxed),
        );
        let now = self.sample(sides);
        let mut before = first;
        for s in self.gap.iter().chain(std::iter::once(&now)) {
            let _ = write!(out, "\n  +{:>4} ms:", ms(s.at.duration_since(first.at)));
            for (name, (b, a)) in ["a", "b"].iter().zip(before.sides.iter().zip(&s.sides)) {
                let _ = write!(
                    out,
                    " {name} {} {:.1}/{:.1} {}/{}/{}{}",
                    a.thread.state,
                    ms_ns(a.thread.run_ns.saturating_sub(b.thread.run_ns)),
                    ms_ns(a.thread.wait_ns.saturating_sub(b.thread.wait_ns)),
                    a.passes.saturating_sub(b.passes),
                    a.work_passes.saturating_sub(b.work_passes),
                    a.naps.saturating_sub(b.naps),
                    if a.idle { " idle" } else { "" },
                );
            }
            let _ = write!(
                out,
                " app {:.1}/{:.1}",
                ms_ns(s.app.run_ns.saturating_sub(before.app.run_ns)),
                ms_ns(s.app.wait_ns.saturating_sub(before.app.wait_ns))
            );
            before = *s;
        }
        out
    }
}

impl Default for Watch {
    fn default() -> Watch {
        Watch::new()
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

fn ms_ns(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn data_path_sample(shared: &Shared) -> DataPathSample {
    DataPathSample {
        thread: thread_sample(shared.datapath_tid.load(Ordering::Relaxed)),
        passes: shared.loop_passes.load(Ordering::Relaxed),
        work_passes: shared.loop_work_passes.load(Ordering::Relaxed),
        naps: shared.loop_naps.load(Ordering::Relaxed),
        idle: shared.idle.load(Ordering::Relaxed) == rox_uapi::regs::DB_DEVICE_IDLE,
    }
}

/// Thread `tid` of this process as `/proc` shows it; zeros and state `?` if it cannot be read.
fn thread_sample(tid: i32) -> ThreadSample {
    let dir = format!("/proc/self/task/{tid}");
    let mut t = ThreadSample {
        state: '?',
        ..Default::default()
    };
    if let Ok(s) = std::fs::read_to_string(format!("{dir}/schedstat")) {
        let mut f = s.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
        t.run_ns = f.next().unwrap_or(0);
        t.wait_ns = f.next().unwrap_or(0);
    }
    if let Ok(s) = std::fs::read_to_string(format!("{dir}/stat")) {
        // The state follows the command name, which ends at the last ')'.
        if let Some(rest) = s.rsplit_once(')') {
            t.state = rest.1.trim_start().chars().next().unwrap_or('?');
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_thread_asleep_shows_state_s_and_the_one_sampling_r_and_its_run_time() {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tid_tx.send(crate::sys::poll::thread_id()).unwrap();
            let _ = stop_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        // recv blocks in a futex; give it time to get there.
        assert_eq!(wait_state(tid, 'S').state, 'S');
        // The kernel brings a thread's run time up to date when it leaves the core: a thread
        // that never slept may still show none.
        std::thread::sleep(Duration::from_millis(1));
        let me = thread_sample(crate::sys::poll::thread_id());
        assert_eq!(me.state, 'R');
        assert!(me.run_ns > 0);
        stop_tx.send(()).unwrap();
        sleeper.join().unwrap();
        // join returns once the kernel clears the thread's tid, a moment before it unhashes
        // the thread's /proc entry.
        assert_eq!(
            wait_state(tid, '?').state,
            '?',
            "a thread that is gone has no entry"
        );
    }

    /// Samples thread `tid` until it shows state `want`, for up to a second; the last sample.
    fn wait_state(tid: i32, want: char) -> ThreadSample {
        let mut sample = thread_sample(tid);
        for _ in 0..100 {
            if sample.state == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            sample = thread_sample(tid);
        }
        sample
    }
}
