//! `errno` as a value: [`Errno`], the conversions between C return conventions and
//! `Result<_, Errno>`, and [`ErrnoGuard`], which keeps the library's own work from changing the
//! errno the application sees.
//!
//! Pass-through calls never come here: the real function sets errno and we return its result
//! untouched. Routed calls convert at the edge: `cvt` reads errno once after a failed real call,
//! and [`ret`] stores it back exactly once before returning `-1` to the caller.

use libc::c_int;

/// An error number, as the kernel and libc report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub c_int);

impl Errno {
    /// The calling thread's current errno.
    pub fn last() -> Errno {
        // SAFETY: __errno_location returns a valid pointer to this thread's errno.
        Errno(unsafe { *libc::__errno_location() })
    }

    /// Stores this value in the calling thread's errno.
    pub fn set(self) {
        // SAFETY: as in `last`.
        unsafe { *libc::__errno_location() = self.0 }
    }
}

/// Return types whose C convention signals failure with `-1` and errno.
pub trait MinusOne: Copy + PartialEq {
    /// The failure sentinel.
    const MINUS_ONE: Self;
}

impl MinusOne for c_int {
    const MINUS_ONE: Self = -1;
}

impl MinusOne for libc::ssize_t {
    const MINUS_ONE: Self = -1;
}

/// Turns a C-convention result into a `Result`, reading errno only on failure.
#[inline]
pub fn cvt<T: MinusOne>(r: T) -> Result<T, Errno> {
    if r == T::MINUS_ONE {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

/// Turns a `Result` back into the C convention: `Err(e)` sets errno to `e` and returns `-1`.
#[inline]
pub fn ret<T: MinusOne>(r: Result<T, Errno>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            e.set();
            T::MINUS_ONE
        }
    }
}

/// Saves errno when created and restores it when dropped (around dlsym, logging, and any other
/// internal work that must stay invisible to the application).
pub struct ErrnoGuard(Errno);

impl ErrnoGuard {
    /// Saves the current errno.
    pub fn new() -> ErrnoGuard {
        ErrnoGuard(Errno::last())
    }
}

impl Default for ErrnoGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}
