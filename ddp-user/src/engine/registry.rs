//! The memory registry: STag index → registered region, process-wide.
//!
//! An STag is a 24-bit index (from a free list; index 0 is never used, so the peer-to-peer
//! RTR's STag 1 never names a region) and an 8-bit key chosen by the caller (the driver uses
//! `getrandom`), different from the key the index had before, so that a stale STag is
//! refused (siw's check order: index, then key).
//!
//! Every region belongs to a protection domain (`pd`): the protocol core refuses tagged
//! access from a connection of another PD. Tagged offsets are virtual addresses (`base =
//! addr`) unless the region was registered zero-based (`base = 0`).
//!
//! **Pins.** Whoever touches the memory of a region (placement of an incoming Write or Read
//! Response, the source of a Read Response) holds a pin on it for as long as it may touch
//! it. [`Registry::deregister`] first makes the region unreachable (new pins fail), then
//! waits until the last pin is gone: when it returns, the engine will never touch the
//! memory again and the application may free it.
//!
//! What it refuses to do: look at the memory itself (that is [`crate::driver::mem`]).

use std::sync::Condvar;

use crate::sync::{Guard, Mutex};

use ddp_proto::ddp::{Access, InvalidateError, RegionInfo, STag};

/// Largest STag index (24 bits).
pub const MAX_INDEX: u32 = 0x00ff_ffff;

/// A registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// The STag, key included.
    pub stag: STag,
    /// Protection domain.
    pub pd: u32,
    /// Address of the first byte.
    pub addr: u64,
    /// Length in bytes (> 0).
    pub len: u64,
    /// Tagged offset of the first byte (`addr`, or 0 for zero-based regions).
    pub base: u64,
    /// Rights granted.
    pub access: Access,
    /// Valid (not invalidated by a Send with Invalidate).
    pub valid: bool,
}

impl Region {
    /// What the protocol core sees.
    pub fn info(&self) -> RegionInfo {
        RegionInfo {
            stag: self.stag,
            pd: self.pd,
            base: self.base,
            len: self.len,
            access: self.access,
            valid: self.valid,
        }
    }
}

/// Why a registration call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegError {
    /// Length 0, unknown access bits, or a range that wraps the address space.
    Invalid,
    /// All 2^24 - 1 indices are in use.
    NoStags,
    /// No such STag in this protection domain (or it is already being deregistered).
    NoSuchStag,
}

#[derive(Debug, Default)]
struct Slot {
    region: Option<Region>,
    pins: u32,
    dying: bool,
    last_key: Option<u8>,
}

#[derive(Debug, Default)]
struct Slots {
    table: Vec<Slot>,
    free: Vec<u32>,
}

/// The registry (see the module docs).
#[derive(Debug, Default)]
pub struct Registry {
    slots: Mutex<Slots>,
    released: Condvar,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    fn lock(&self) -> Guard<'_, Slots> {
        self.slots.lock()
    }

    /// Registers `[addr, addr + len)` in `pd`; `key` is the proposed 8-bit key (changed if it
    /// equals the key the index had before).
    pub fn register(
        &self,
        pd: u32,
        addr: u64,
        len: u64,
        access_bits: u32,
        zero_based: bool,
        key: u8,
    ) -> Result<STag, RegError> {
        if len == 0 || access_bits & !7 != 0 || addr.checked_add(len).is_none() {
            return Err(RegError::Invalid);
        }
        let access = Access::from_bits_truncate(access_bits as u8);
        let mut s = self.lock();
        let index = match s.free.pop() {
            Some(i) => i,
            None => {
                if s.table.is_empty() {
                    s.table.push(Slot::default()); // index 0: never used
                }
                let i = s.table.len() as u32;
                if i > MAX_INDEX {
                    return Err(RegError::NoStags);
                }
                s.table.push(Slot::default());
                i
            }
        };
        let slot = &mut s.table[index as usize];
        let key = if slot.last_key == Some(key) {
            key.wrapping_add(1)
        } else {
            key
        };
        slot.last_key = Some(key);
        let stag = STag::from_parts(index, key);
        slot.region = Some(Region {
            stag,
            pd,
            addr,
            len,
            base: if zero_based { 0 } else { addr },
            access,
            valid: true,
        });
        slot.pins = 0;
        slot.dying = false;
        Ok(stag)
    }

    /// Deregisters `stag` of `pd`: makes it unreachable at once, then waits until no pin on
    /// it remains (no placement into it, no Read Response from it, is in flight).
    pub fn deregister(&self, stag: STag, pd: u32) -> Result<(), RegError> {
        let index = stag.index();
        let mut s = self.lock();
        match s.table.get_mut(index as usize) {
            Some(slot)
                if !slot.dying && slot.region.is_some_and(|r| r.stag == stag && r.pd == pd) =>
            {
                slot.dying = true;
            }
            _ => return Err(RegError::NoSuchStag),
        }
        while s.table[index as usize].pins > 0 {
            s = s.wait(&self.released);
        }
        let slot = &mut s.table[index as usize];
        slot.region = None;
        slot.dying = false;
        s.free.push(index);
        Ok(())
    }

    /// Deregisters every region of `pd` (a socket with its own PD is closing).
    pub fn deregister_pd(&self, pd: u32) {
        let stags: Vec<STag> = self
            .lock()
            .table
            .iter()
            .filter_map(|s| s.region.filter(|r| r.pd == pd && !s.dying).map(|r| r.stag))
            .collect();
        for stag in stags {
            let _ = self.deregister(stag, pd);
        }
    }

    /// Pins the region under `index` (whatever the key): `None` if there is none or it is
    /// being deregistered. Every successful pin must be matched by [`Registry::unpin`].
    pub fn pin(&self, index: u32) -> Option<Region> {
        let mut s = self.lock();
        let slot = s.table.get_mut(index as usize)?;
        if slot.dying {
            return None;
        }
        let r = slot.region?;
        slot.pins += 1;
        Some(r)
    }

    /// Releases a pin taken by [`Registry::pin`].
    pub fn unpin(&self, index: u32) {
        let mut s = self.lock();
        let slot = &mut s.table[index as usize];
        slot.pins -= 1;
        if slot.pins == 0 && slot.dying {
            self.released.notify_all();
        }
    }

    /// The current record of `index` (for refreshing a pinned copy after an invalidation).
    pub fn get(&self, index: u32) -> Option<Region> {
        let s = self.lock();
        s.table.get(index as usize).and_then(|slot| slot.region)
    }

    /// Moves `stag` to the invalid state (the peer's Send with Invalidate).
    pub fn invalidate(&self, stag: STag) -> Result<(), InvalidateError> {
        let mut s = self.lock();
        let slot = s
            .table
            .get_mut(stag.index() as usize)
            .ok_or(InvalidateError::UnknownStag)?;
        match slot.region.as_mut() {
            Some(r) if r.stag == stag && !slot.dying => {
                r.valid = false;
                Ok(())
            }
            _ => Err(InvalidateError::UnknownStag),
        }
    }

    /// Number of registered regions (for tests and stats).
    pub fn len(&self) -> usize {
        self.lock()
            .table
            .iter()
            .filter(|s| s.region.is_some())
            .count()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn register_lookup_deregister_reuse_changes_key() {
        let r = Registry::new();
        let a = r.register(7, 0x1000, 64, 6, false, 0x42).unwrap();
        assert_eq!(a.index(), 1);
        assert_eq!(a.key(), 0x42);
        let reg = r.pin(1).unwrap();
        assert_eq!((reg.base, reg.len, reg.pd), (0x1000, 64, 7));
        r.unpin(1);
        assert_eq!(r.deregister(a, 8), Err(RegError::NoSuchStag)); // other PD
        r.deregister(a, 7).unwrap();
        assert!(r.pin(1).is_none());
        let b = r.register(7, 0x2000, 8, 1, true, 0x42).unwrap();
        assert_eq!(b.index(), 1);
        assert_ne!(b.key(), 0x42, "a reused index gets a new key");
        assert_eq!(r.pin(1).unwrap().base, 0);
        r.unpin(1);
        assert_eq!(r.register(7, 1, 0, 1, false, 0), Err(RegError::Invalid));
        assert_eq!(r.register(7, 1, 1, 8, false, 0), Err(RegError::Invalid));
        assert_eq!(
            r.register(7, u64::MAX, 2, 1, false, 0),
            Err(RegError::Invalid)
        );
    }

    #[test]
    fn deregister_waits_for_pins() {
        let r = Arc::new(Registry::new());
        let s = r.register(1, 0x1000, 64, 2, false, 1).unwrap();
        assert!(r.pin(s.index()).is_some());
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let (r, done) = (r.clone(), done.clone());
            std::thread::spawn(move || {
                r.deregister(s, 1).unwrap();
                done.store(true, Ordering::SeqCst);
            })
        };
        // Wait until the deregistration has made the region unreachable.
        while r.pin(s.index()).map(|_| r.unpin(s.index())).is_some() {
            std::thread::yield_now();
        }
        assert!(!done.load(Ordering::SeqCst), "dereg returned while pinned");
        r.unpin(s.index());
        t.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert!(r.is_empty());
    }

    #[test]
    fn invalidate_needs_the_right_key() {
        let r = Registry::new();
        let s = r.register(1, 0x1000, 64, 2, false, 9).unwrap();
        assert_eq!(
            r.invalidate(STag::from_parts(s.index(), 10)),
            Err(InvalidateError::UnknownStag)
        );
        r.invalidate(s).unwrap();
        assert!(!r.get(s.index()).unwrap().valid);
    }
}
