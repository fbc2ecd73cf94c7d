//! Tests only: what the adaptive spin's records were asked about, as the data path saw it —
//! the side ([`Side`]) of each idle period whose way the records decided (`--adaptive-spin`
//! with posted wakes). A test of the data path's wiring reads it: a pass that names the wrong
//! side (or none) passes every test of the records themselves (`datapath/spin/history.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::datapath::Side;

/// The log: off (recording nothing, a relaxed load per period) until a test starts it, so the
/// benchmarks built with the testkit measure what a device without it does.
#[derive(Debug, Default)]
pub struct SpinSideLog {
    on: AtomicBool,
    sides: Mutex<Vec<Side>>,
}

impl SpinSideLog {
    /// Records the sides of the periods opened from now on.
    pub fn start(&self) {
        self.on.store(true, Ordering::SeqCst);
    }

    /// The sides recorded so far, oldest first.
    pub fn sides(&self) -> Vec<Side> {
        self.sides.lock().expect("spin side log").clone()
    }

    /// The data path opened an idle period that follows `side` and asked the records about it.
    pub(crate) fn record(&self, side: Side) {
        if self.on.load(Ordering::Relaxed) {
            self.sides.lock().expect("spin side log").push(side);
        }
    }
}
