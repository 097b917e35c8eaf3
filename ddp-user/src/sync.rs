//! The library's lock: `std::sync::Mutex` that holds the application's signal handlers back
//! on its thread while it is held ([`crate::sigdefer`]), and ignores poisoning (a panic
//! aborts the process: `panic = "abort"`).

use core::ops::{Deref, DerefMut};
use std::sync::{Condvar, MutexGuard, TryLockError};

use crate::sigdefer::{self, Critical};

/// A mutex whose holder's thread runs no application signal handler.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized> {
    inner: std::sync::Mutex<T>,
}

/// [`Mutex::try_lock`] found the lock taken.
#[derive(Debug)]
pub struct WouldBlock;

/// A held [`Mutex`]. Unlocks, then lets waiting handlers run (field order).
pub struct Guard<'a, T: ?Sized> {
    g: MutexGuard<'a, T>,
    _c: Critical,
}

impl<T> Mutex<T> {
    pub const fn new(v: T) -> Self {
        Mutex {
            inner: std::sync::Mutex::new(v),
        }
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Takes the lock (handlers held back from before it is taken: one arriving between the
    /// take and the count would run with the lock held).
    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        let c = sigdefer::enter();
        Guard {
            g: self.inner.lock().unwrap_or_else(|p| p.into_inner()),
            _c: c,
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Result<Guard<'_, T>, WouldBlock> {
        let c = sigdefer::enter();
        let g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(WouldBlock),
        };
        Ok(Guard { g, _c: c })
    }

    /// The value, through exclusive access (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(|p| p.into_inner())
    }
}

impl<'a, T> Guard<'a, T> {
    /// Waits on `cv`, the lock released meanwhile. Handlers stay held back for the wait: use
    /// only where the wait is short (another thread's critical section).
    pub fn wait(self, cv: &Condvar) -> Guard<'a, T> {
        let Guard { g, _c } = self;
        Guard {
            g: cv.wait(g).unwrap_or_else(|p| p.into_inner()),
            _c,
        }
    }
}

impl<T: ?Sized> Deref for Guard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.g
    }
}

impl<T: ?Sized> DerefMut for Guard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_in_the_depth() {
        sigdefer::activate();
        let a = Mutex::new(1);
        let b = Mutex::new(2);
        let d0 = sigdefer::depth();
        {
            let ga = a.lock();
            assert_eq!(sigdefer::depth(), d0 + 1);
            let gb = b.try_lock().expect("free");
            assert_eq!(*ga + *gb, 3);
            assert_eq!(sigdefer::depth(), d0 + 2);
            assert!(a.try_lock().is_err());
            assert_eq!(
                sigdefer::depth(),
                d0 + 2,
                "a failed try_lock keeps no count"
            );
        }
        assert_eq!(sigdefer::depth(), d0);
    }
}
