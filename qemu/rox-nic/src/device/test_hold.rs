//! Tests only: a point of the data-path pass where a test holds the thread, as a host that
//! takes its core away there would, for as long as the test needs (not a guessed duration):
//! the test arms the hold, sees the thread held, checks what the device did before that point
//! and lets it go.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

const NONE: u8 = 0;
const ARMED: u8 = 1;
const HELD: u8 = 2;

/// How long a hold lasts at most if the test never lets go (it failed): the device thread
/// goes on, so the test's teardown does not hang.
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// One hold: armed by a test, taken by the next pass that reaches the point, ended by the test.
#[derive(Debug, Default)]
pub struct TestHold(AtomicU8);

impl TestHold {
    /// The next pass that reaches the point holds there. Armed while a thread is held, it
    /// lets that one go and holds the next arrival (a test that holds two passes in a row).
    pub fn arm(&self) {
        self.0.store(ARMED, Ordering::SeqCst);
    }

    /// The thread is held at the point now.
    pub fn is_held(&self) -> bool {
        self.0.load(Ordering::SeqCst) == HELD
    }

    /// Lets a held thread go on (and disarms one not yet held).
    pub fn release(&self) {
        self.0.store(NONE, Ordering::SeqCst);
    }

    /// Releases the hold when dropped, however the test ends: a failed assertion must not
    /// leave the thread held through the teardown (up to [`HOLD_LIMIT`]).
    pub fn release_on_drop(&self) -> ReleaseOnDrop<'_> {
        ReleaseOnDrop(self)
    }

    /// The data path reached the point: holds if armed, until released.
    pub(crate) fn reached(&self) {
        if self
            .0
            .compare_exchange(ARMED, HELD, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        let start = Instant::now();
        while self.is_held() && start.elapsed() < HOLD_LIMIT {
            std::thread::sleep(Duration::from_micros(100));
        }
        // Ends a hold the test never ended; an `arm` since then stays for the next arrival.
        let _ = self
            .0
            .compare_exchange(HELD, NONE, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// [`TestHold::release_on_drop`]'s guard.
#[must_use = "the hold is released when this is dropped"]
pub struct ReleaseOnDrop<'a>(&'a TestHold);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn an_armed_hold_holds_the_first_arrival_until_released() {
        let hold = Arc::new(TestHold::default());
        hold.reached();
        assert!(!hold.is_held(), "a hold not armed holds nothing");
        hold.arm();
        let h = hold.clone();
        let thread = std::thread::spawn(move || h.reached());
        wait_held(&hold);
        assert!(!thread.is_finished());
        hold.release();
        thread.join().unwrap();
        hold.reached();
        assert!(!hold.is_held(), "a hold holds once");
    }

    /// Armed again while a thread is held: that thread goes on, the next arrival holds.
    #[test]
    fn an_arm_while_held_lets_go_and_holds_the_next_arrival() {
        let hold = Arc::new(TestHold::default());
        hold.arm();
        let h = hold.clone();
        let first = std::thread::spawn(move || h.reached());
        wait_held(&hold);
        hold.arm();
        first.join().unwrap();
        assert!(!hold.is_held(), "the first arrival went on");
        let h = hold.clone();
        let second = std::thread::spawn(move || h.reached());
        wait_held(&hold);
        assert!(!second.is_finished());
        hold.release();
        second.join().unwrap();
    }

    /// Waits until a thread is held at `hold` (10 s at most).
    fn wait_held(hold: &TestHold) {
        let start = Instant::now();
        while !hold.is_held() {
            assert!(start.elapsed() < Duration::from_secs(10), "never held");
            std::thread::yield_now();
        }
    }
}
