//! A mutex that can also stay locked across calls: libibverbs' extended APIs lock in one call
//! and unlock in another (`ibv_start_poll` .. `ibv_end_poll`, `ibv_wr_start` ..
//! `ibv_wr_complete`), which `std::sync::Mutex` guards cannot express.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

/// `T` behind a pthread mutex.
pub struct Locked<T> {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached with the mutex held.
unsafe impl<T: Send> Send for Locked<T> {}
// SAFETY: as above: sharing a Locked shares the value only through the mutex.
unsafe impl<T: Send> Sync for Locked<T> {}

impl<T> Locked<T> {
    pub fn new(value: T) -> Self {
        Locked {
            mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            value: UnsafeCell::new(value),
        }
    }

    /// Lock for the rest of this scope.
    pub fn lock(&self) -> LockedGuard<'_, T> {
        self.acquire();
        LockedGuard { locked: self }
    }

    /// Lock until a later [`Self::release`] (possibly in another call on the same thread).
    pub fn acquire(&self) {
        // SAFETY: a mutex initialised by PTHREAD_MUTEX_INITIALIZER that never moves while in
        // use (its owner is heap-allocated); a default mutex's lock cannot fail when used
        // correctly.
        unsafe { libc::pthread_mutex_lock(self.mutex.get()) };
    }

    /// # Safety
    /// The calling thread holds the lock (from [`Self::acquire`]).
    pub unsafe fn release(&self) {
        // SAFETY: per the contract.
        unsafe { libc::pthread_mutex_unlock(self.mutex.get()) };
    }

    /// The value, while the lock is held through [`Self::acquire`].
    ///
    /// # Safety
    /// The calling thread holds the lock, and no other reference from this function or a guard
    /// is alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn held(&self) -> &mut T {
        // SAFETY: per the contract, access is exclusive.
        unsafe { &mut *self.value.get() }
    }
}

impl<T> Drop for Locked<T> {
    fn drop(&mut self) {
        // SAFETY: nobody holds an unlocked-to-be mutex that is being dropped (`&mut self`).
        unsafe { libc::pthread_mutex_destroy(self.mutex.get()) };
    }
}

pub struct LockedGuard<'a, T> {
    locked: &'a Locked<T>,
}

impl<T> Deref for LockedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.locked.value.get() }
    }
}

impl<T> DerefMut for LockedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, and `&mut self` makes this the only reference.
        unsafe { &mut *self.locked.value.get() }
    }
}

impl<T> Drop for LockedGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard took the lock in `Locked::lock`.
        unsafe { self.locked.release() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn guards_and_held_locking_exclude_each_other() {
        let counter = Arc::new(Locked::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let c = Arc::clone(&counter);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        if i % 2 == 0 {
                            *c.lock() += 1;
                        } else {
                            c.acquire();
                            // SAFETY: held just above, released just below.
                            unsafe {
                                *c.held() += 1;
                                c.release();
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(*counter.lock(), 40_000);
    }
}
