//! DDP (RFC 5041): memory access, tagged validation, untagged queues and outgoing
//! segmentation.
//!
//! What lives here:
//! - [`Memory`], the trait through which the protocol core reaches memory. The core validates
//!   STag, key, PD, access rights, TO wrap and bounds ([`tagged`]) and only then hands
//!   `(stag, offset, bytes)` to [`Memory::write`]; it never computes an address of a registered
//!   region itself. Local buffers named by the application's work requests (send sources,
//!   receive sinks, read sinks) are `(addr, len)` scatter/gather elements ([`Sge`]) reached
//!   through [`Memory::local`] / [`Memory::local_mut`].
//! - [`tagged`]: the check order for tagged placement (RFC 5041 §5.1/§7, siw's
//!   `siw_check_mem`), reporting DDP tagged-buffer errors for placement (RDMA Write, Read
//!   Response) and RDMAP remote-protection errors for Read Request sources (RFC 5040 §7.1).
//! - [`untagged`]: the three untagged queues RDMAP uses (QN 0 Send, QN 1 Read Request, QN 2
//!   Terminate), MSN/MO/L rules (RFC 5041 §5.2, §5.3, §7.2) and the posted receive queue.
//! - [`segment`]: cutting an outgoing message into DDP segments no longer than the MULPDU
//!   (RFC 5041 §5.1, §8).
//! - [`mem_vec::VecMemory`]: the reference implementation of [`Memory`] over a `Vec<u8>`,
//!   used by the tests.
//!
//! What it refuses to do: any I/O, any address arithmetic on registered memory outside the
//! [`Memory`] implementation, and placement of a single byte before the segment's header has
//! been validated.

pub mod mem_vec;
pub mod segment;
pub mod tagged;
pub mod untagged;

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

pub use crate::wire::ddp::STag;

/// Access rights of a registered region (siw: `IB_ACCESS_*`, reduced to what iWARP uses).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights.
    pub const NONE: Access = Access(0);
    /// The local side may place into the region (receive sinks, Read Response sinks).
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may RDMA Write into the region.
    pub const REMOTE_WRITE: Access = Access(2);
    /// The peer may RDMA Read from the region.
    pub const REMOTE_READ: Access = Access(4);

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// From raw bits (unknown bits dropped).
    pub const fn from_bits_truncate(bits: u8) -> Access {
        Access(bits & 7)
    }

    /// Whether every right in `other` is also in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.contains(Access::LOCAL_WRITE) {
            parts.push("LOCAL_WRITE");
        }
        if self.contains(Access::REMOTE_WRITE) {
            parts.push("REMOTE_WRITE");
        }
        if self.contains(Access::REMOTE_READ) {
            parts.push("REMOTE_READ");
        }
        if parts.is_empty() {
            parts.push("NONE");
        }
        write!(f, "Access({})", parts.join("|"))
    }
}

/// What the memory registry knows about the region registered under an STag index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    /// The STag the region is registered under, key included. The core compares its key with
    /// the key of the STag on the wire: a wrong key is an invalid STag (siw: "STag mismatch").
    pub stag: STag,
    /// Protection domain of the region.
    pub pd: u32,
    /// Tagged Offset of the first byte of the region. Tagged offsets are virtual addresses:
    /// byte `to` of the region is at offset `to - base`.
    pub base: u64,
    /// Length in bytes.
    pub len: u64,
    /// Rights granted.
    pub access: Access,
    /// Whether the STag is in the valid state (not invalidated).
    pub valid: bool,
}

/// Why [`Memory::invalidate`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidateError {
    /// No region is registered under this STag (index unknown or key wrong).
    UnknownStag,
    /// The region exists but cannot be invalidated remotely (e.g. it was registered without
    /// that permission).
    NotInvalidatable,
}

/// One local scatter/gather element named by a work request: `len` bytes at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Address (as understood by the [`Memory`] implementation).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

impl Sge {
    /// Builds an SGE.
    pub const fn new(addr: u64, len: u32) -> Sge {
        Sge { addr, len }
    }
}

/// SGEs kept inline in an [`SgeList`] (a work request names one or two buffers almost always).
const SGE_INLINE: usize = 2;

/// The SGE list of a posted work request: up to two SGEs inline (no allocation per work
/// request on the data path), more on the heap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SgeList {
    /// `n` SGEs in `sges[..n]`.
    Inline {
        /// How many of `sges` are used.
        n: u8,
        /// The SGEs.
        sges: [Sge; SGE_INLINE],
    },
    /// More than fit inline.
    Heap(Vec<Sge>),
}

impl SgeList {
    /// A copy of `sges`.
    pub fn from_slice(sges: &[Sge]) -> SgeList {
        if sges.len() <= SGE_INLINE {
            let mut a = [Sge::default(); SGE_INLINE];
            a[..sges.len()].copy_from_slice(sges);
            SgeList::Inline {
                n: sges.len() as u8,
                sges: a,
            }
        } else {
            SgeList::Heap(sges.to_vec())
        }
    }

    /// The list of the `n` SGEs `f(0)`, ..., `f(n - 1)`, built in place (no array to fill
    /// and copy); the first error ends it.
    pub fn try_from_fn<E>(
        n: usize,
        mut f: impl FnMut(usize) -> Result<Sge, E>,
    ) -> Result<SgeList, E> {
        if n <= SGE_INLINE {
            let mut sges = [Sge::default(); SGE_INLINE];
            for (i, s) in sges[..n].iter_mut().enumerate() {
                *s = f(i)?;
            }
            Ok(SgeList::Inline { n: n as u8, sges })
        } else {
            (0..n)
                .map(f)
                .collect::<Result<Vec<_>, E>>()
                .map(SgeList::Heap)
        }
    }
}

impl core::ops::DerefMut for SgeList {
    fn deref_mut(&mut self) -> &mut [Sge] {
        match self {
            SgeList::Inline { n, sges } => &mut sges[..usize::from(*n)],
            SgeList::Heap(v) => v,
        }
    }
}

impl core::ops::Deref for SgeList {
    type Target = [Sge];

    fn deref(&self) -> &[Sge] {
        match self {
            SgeList::Inline { n, sges } => &sges[..usize::from(*n)],
            SgeList::Heap(v) => v,
        }
    }
}

/// Total length of an SGE list.
pub fn sge_total(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.len)).sum()
}

/// Splits `len` bytes starting at byte `offset` of the concatenation of `sges` into
/// `(addr, len)` pieces, in order, calling `f` for each. Returns `false` (after calling `f`
/// for what fits) if the range runs past the end of the list.
pub fn sge_pieces(
    sges: &[Sge],
    mut offset: u64,
    mut len: u64,
    mut f: impl FnMut(u64, usize),
) -> bool {
    for sge in sges {
        let sl = u64::from(sge.len);
        if offset >= sl {
            offset -= sl;
            continue;
        }
        if len == 0 {
            return true;
        }
        let take = (sl - offset).min(len);
        f(sge.addr + offset, take as usize);
        len -= take;
        offset = 0;
    }
    len == 0
}

/// The memory the protocol core places into and sends from.
///
/// Contract: the core calls [`Memory::write`] and [`Memory::read`] only for ranges it has
/// validated against [`Memory::region`] (STag key, valid state, PD, access, bounds); an
/// implementation may treat a call outside the region as a bug (panic). `local`/`local_mut`
/// return `None` when the range is not accessible; the core then fails the work request.
pub trait Memory {
    /// The region registered under `stag`'s 24-bit index, whatever the key (the core checks
    /// the key against [`RegionInfo::stag`]).
    fn region(&self, stag: STag) -> Option<RegionInfo>;
    /// Places `data` at byte `offset` of the region of `stag` (validated before).
    fn write(&mut self, stag: STag, offset: u64, data: &[u8]);
    /// Bytes `offset..offset+len` of the region of `stag` (validated before): the source of
    /// Read Responses.
    fn read(&self, stag: STag, offset: u64, len: usize) -> &[u8];
    /// A local buffer named by a work request (send source), if accessible.
    fn local(&self, addr: u64, len: usize) -> Option<&[u8]>;
    /// A local buffer named by a work request (receive or Read Response sink), if writable.
    fn local_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]>;
    /// Moves the region of `stag` to the invalid state (Send with Invalidate, RFC 5040 §5.1).
    fn invalidate(&mut self, stag: STag) -> Result<(), InvalidateError>;
    /// Stream-mode receive (plain read/write on a DDP socket): the payload of Sends that found
    /// no posted receive, in order.
    fn deliver_stream(&mut self, data: &[u8]);

    /// Stream-mode receive straight into the reader's buffer, before the CRC is known: how
    /// many bytes fit past the first `at` unverified bytes already placed there (0: none,
    /// the core then keeps the bytes itself until they are verified). The reader's buffer
    /// must hold nothing else after what was delivered: bytes placed there are delivered by
    /// [`Memory::stream_commit`], in order, before anything later.
    fn stream_room(&self, at: usize) -> usize {
        let _ = at;
        0
    }
    /// Copies `data` to unverified byte `at` of the reader's buffer (`at + data.len()` is
    /// within [`Memory::stream_room`]`(0)`, checked by the core).
    fn stream_place(&mut self, at: usize, data: &[u8]) {
        let _ = (at, data);
        unreachable!("stream_place without stream_room");
    }
    /// Calls `f` with unverified bytes `at..at + len` of the reader's buffer, in order (read
    /// back for the CRC after a direct placement, or taken back by the core).
    fn stream_unverified(&self, at: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        let _ = (at, len, f);
        unreachable!("stream_unverified without stream_room");
    }
    /// The first `n` unverified bytes are verified: they are delivered, as by
    /// [`Memory::deliver_stream`], and the ones after them become the first.
    fn stream_commit(&mut self, n: usize) {
        assert_eq!(n, 0, "stream_commit without stream_room");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_bits() {
        let a = Access::REMOTE_READ | Access::LOCAL_WRITE;
        assert!(a.contains(Access::REMOTE_READ));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert!(a.contains(Access::NONE));
        assert_eq!(format!("{a:?}"), "Access(LOCAL_WRITE|REMOTE_READ)");
    }

    #[test]
    fn sge_pieces_split_across_elements() {
        let sges = [Sge::new(100, 4), Sge::new(0, 0), Sge::new(200, 6)];
        let mut got = Vec::new();
        assert!(sge_pieces(&sges, 2, 5, |a, l| got.push((a, l))));
        assert_eq!(got, vec![(102, 2), (200, 3)]);
        got.clear();
        assert!(!sge_pieces(&sges, 8, 5, |a, l| got.push((a, l))));
        assert_eq!(got, vec![(204, 2)]);
        assert_eq!(sge_total(&sges), 10);
        assert!(sge_pieces(&sges, 10, 0, |_, _| panic!()));
    }

    #[test]
    fn sge_list_built_in_place_equals_the_copied_one() {
        let all: Vec<Sge> = (0..5).map(|i| Sge::new(1000 * i, i as u32 + 1)).collect();
        for n in 0..=all.len() {
            let built = SgeList::try_from_fn(n, |i| Ok::<_, ()>(all[i])).unwrap();
            assert_eq!(built, SgeList::from_slice(&all[..n]), "{n} SGEs");
            assert_eq!(&built[..], &all[..n]);
        }
        // The first error ends the list, inline or on the heap.
        let mut asked = Vec::new();
        let r = SgeList::try_from_fn(4, |i| {
            asked.push(i);
            if i == 2 { Err(i) } else { Ok(all[i]) }
        });
        assert_eq!((r, asked), (Err(2), vec![0, 1, 2]));
        assert_eq!(
            SgeList::try_from_fn(2, |i| if i == 1 { Err(7) } else { Ok(all[i]) }),
            Err(7)
        );
    }
}
