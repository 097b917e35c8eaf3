//! `VecMemory`: the reference (and test) implementation of [`Memory`] over one `Vec<u8>`.
//!
//! The vector stands for an address space `[base_addr, base_addr + size)`. Local buffers of
//! work requests are plain `(addr, len)` ranges in it; regions are registered over ranges of
//! it with Tagged Offsets equal to their addresses (as verbs do with virtual addresses). STag
//! keys are derived from a seed so that tests can detect a wrong key. Stream-mode deliveries
//! are appended to [`VecMemory::stream`].
//!
//! For tests, [`VecMemory::checksum_outside`] hashes every byte outside a set of ranges, so a
//! test can prove that a rejected segment changed nothing it was not allowed to change.
//!
//! It refuses (panics on) `write`/`read` calls outside a registered region: the protocol core
//! must never make them, and a test must see it if it does.

use std::collections::BTreeMap;

use super::{Access, InvalidateError, Memory, RegionInfo, STag};

#[derive(Debug, Clone)]
struct Region {
    info: RegionInfo,
    addr: u64,
    remote_invalidate: bool,
}

/// A [`Memory`] over a `Vec<u8>` (see the module docs).
#[derive(Debug, Clone)]
pub struct VecMemory {
    base_addr: u64,
    bytes: Vec<u8>,
    regions: BTreeMap<u32, Region>,
    next_index: u32,
    key_seed: u8,
    /// Everything delivered by [`Memory::deliver_stream`], in order.
    pub stream: Vec<u8>,
    /// How many times [`Memory::write`] was called (placement calls, any length).
    pub writes: u64,
    /// Room of the simulated reader's buffer for unverified stream bytes
    /// ([`Memory::stream_room`]; 0 by default: the core keeps them itself).
    pub stream_sink: usize,
    /// Unverified stream bytes placed by [`Memory::stream_place`] (committed ones move to
    /// `stream`).
    pub unverified: Vec<u8>,
}

impl VecMemory {
    /// An address space of `size` zero bytes starting at `base_addr`.
    pub fn new(base_addr: u64, size: usize) -> VecMemory {
        VecMemory {
            base_addr,
            bytes: vec![0; size],
            regions: BTreeMap::new(),
            next_index: 1,
            key_seed: 0x5a,
            stream_sink: 0,
            unverified: Vec::new(),
            stream: Vec::new(),
            writes: 0,
        }
    }

    /// First address of the space.
    pub fn base_addr(&self) -> u64 {
        self.base_addr
    }

    /// Size of the space in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    fn off(&self, addr: u64, len: usize) -> Option<usize> {
        let o = addr.checked_sub(self.base_addr)?;
        let end = o.checked_add(len as u64)?;
        if end > self.bytes.len() as u64 {
            return None;
        }
        Some(o as usize)
    }

    /// Registers `[addr, addr + len)` with `access` in protection domain `pd`; the TO of the
    /// first byte is `addr`. Remote invalidation is allowed. Panics if the range is outside the
    /// space.
    pub fn register(&mut self, addr: u64, len: u64, access: Access, pd: u32) -> STag {
        self.register_with(addr, len, access, pd, true)
    }

    /// Like [`VecMemory::register`], choosing whether the peer may invalidate it.
    pub fn register_with(
        &mut self,
        addr: u64,
        len: u64,
        access: Access,
        pd: u32,
        remote_invalidate: bool,
    ) -> STag {
        assert!(
            self.off(addr, len as usize).is_some(),
            "region outside the space"
        );
        let index = self.next_index;
        self.next_index = (self.next_index + 1) & 0x00ff_ffff;
        self.key_seed = self.key_seed.wrapping_mul(29).wrapping_add(17);
        let stag = STag::from_parts(index, self.key_seed);
        let info = RegionInfo {
            stag,
            pd,
            base: addr,
            len,
            access,
            valid: true,
        };
        self.regions.insert(
            index,
            Region {
                info,
                addr,
                remote_invalidate,
            },
        );
        stag
    }

    /// Removes a registration.
    pub fn deregister(&mut self, stag: STag) {
        self.regions.remove(&stag.index());
    }

    /// Moves a region back to the valid state (like a fast re-registration).
    pub fn revalidate(&mut self, stag: STag) {
        if let Some(r) = self.regions.get_mut(&stag.index()) {
            r.info.valid = true;
        }
    }

    /// The bytes at `[addr, addr + len)`. Panics outside the space.
    pub fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        let o = self.off(addr, len).expect("range outside the space");
        &self.bytes[o..o + len]
    }

    /// Fills `[addr, addr + data.len())` with `data`. Panics outside the space.
    pub fn fill(&mut self, addr: u64, data: &[u8]) {
        let o = self.off(addr, data.len()).expect("range outside the space");
        self.bytes[o..o + data.len()].copy_from_slice(data);
    }

    /// Fills the whole space with a deterministic pattern derived from `seed`.
    pub fn fill_pattern(&mut self, seed: u64) {
        let mut x = seed | 1;
        for b in &mut self.bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }

    /// Address ranges of all registered regions.
    pub fn region_ranges(&self) -> Vec<(u64, u64)> {
        self.regions
            .values()
            .map(|r| (r.addr, r.info.len))
            .collect()
    }

    /// A 64-bit FNV-1a hash of every byte (with its address) outside `allowed` ranges
    /// (`(addr, len)` pairs).
    pub fn checksum_outside(&self, allowed: &[(u64, u64)]) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (i, b) in self.bytes.iter().enumerate() {
            let addr = self.base_addr + i as u64;
            if allowed.iter().any(|&(a, l)| addr >= a && addr < a + l) {
                continue;
            }
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }

    /// [`VecMemory::checksum_outside`] of every registered region.
    pub fn checksum_outside_regions(&self) -> u64 {
        self.checksum_outside(&self.region_ranges())
    }

    fn region_bytes(&self, stag: STag, offset: u64, len: usize) -> usize {
        let r = self
            .regions
            .get(&stag.index())
            .expect("write/read of an unknown region");
        assert!(
            offset
                .checked_add(len as u64)
                .is_some_and(|e| e <= r.info.len),
            "access outside the region (the core must validate first)"
        );
        self.off(r.addr + offset, len)
            .expect("region outside the space")
    }
}

impl Memory for VecMemory {
    fn region(&self, stag: STag) -> Option<RegionInfo> {
        self.regions.get(&stag.index()).map(|r| r.info)
    }

    fn write(&mut self, stag: STag, offset: u64, data: &[u8]) {
        let o = self.region_bytes(stag, offset, data.len());
        self.bytes[o..o + data.len()].copy_from_slice(data);
        self.writes += 1;
    }

    fn read(&self, stag: STag, offset: u64, len: usize) -> &[u8] {
        let o = self.region_bytes(stag, offset, len);
        &self.bytes[o..o + len]
    }

    fn local(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let o = self.off(addr, len)?;
        Some(&self.bytes[o..o + len])
    }

    fn local_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let o = self.off(addr, len)?;
        Some(&mut self.bytes[o..o + len])
    }

    fn invalidate(&mut self, stag: STag) -> Result<(), InvalidateError> {
        let r = self
            .regions
            .get_mut(&stag.index())
            .ok_or(InvalidateError::UnknownStag)?;
        if r.info.stag != stag {
            return Err(InvalidateError::UnknownStag);
        }
        if !r.remote_invalidate {
            return Err(InvalidateError::NotInvalidatable);
        }
        r.info.valid = false;
        Ok(())
    }

    fn deliver_stream(&mut self, data: &[u8]) {
        assert!(
            self.unverified.is_empty(),
            "stream delivered past unverified bytes"
        );
        self.stream.extend_from_slice(data);
    }

    fn stream_room(&self, at: usize) -> usize {
        self.stream_sink.saturating_sub(at)
    }

    fn stream_place(&mut self, at: usize, data: &[u8]) {
        assert!(
            at + data.len() <= self.stream_sink,
            "stream_place past the room"
        );
        if self.unverified.len() < at + data.len() {
            self.unverified.resize(at + data.len(), 0);
        }
        self.unverified[at..at + data.len()].copy_from_slice(data);
    }

    fn stream_unverified(&self, at: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        f(&self.unverified[at..at + len]);
    }

    fn stream_commit(&mut self, n: usize) {
        self.stream.extend(self.unverified.drain(..n));
        self.stream_sink -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_write_read_checksum() {
        let mut m = VecMemory::new(0x1000, 256);
        m.fill_pattern(3);
        let s = m.register(0x1010, 16, Access::REMOTE_WRITE, 1);
        let before = m.checksum_outside_regions();
        m.write(s, 4, &[1, 2, 3]);
        assert_eq!(m.read(s, 4, 3), &[1, 2, 3]);
        assert_eq!(m.bytes(0x1014, 3), &[1, 2, 3]);
        assert_eq!(m.checksum_outside_regions(), before);
        m.fill(0x1000, &[9]);
        assert_ne!(m.checksum_outside_regions(), before);
        assert_eq!(m.region(s).unwrap().base, 0x1010);
        assert!(m.local(0x10ff, 1).is_some());
        assert!(m.local(0x10ff, 2).is_none());
        assert!(m.local(0xfff, 1).is_none());
        let t = m.register(0x1020, 16, Access::REMOTE_WRITE, 1);
        assert_ne!(s.key(), t.key());
        assert_eq!(
            m.invalidate(STag::from_parts(t.index(), t.key() ^ 1)),
            Err(InvalidateError::UnknownStag)
        );
        m.invalidate(t).unwrap();
        assert!(!m.region(t).unwrap().valid);
        let u = m.register_with(0x1030, 16, Access::REMOTE_WRITE, 1, false);
        assert_eq!(m.invalidate(u), Err(InvalidateError::NotInvalidatable));
    }

    #[test]
    #[should_panic(expected = "outside the region")]
    fn write_outside_region_panics() {
        let mut m = VecMemory::new(0, 64);
        let s = m.register(0, 8, Access::REMOTE_WRITE, 1);
        m.write(s, 7, &[0, 0]);
    }
}
