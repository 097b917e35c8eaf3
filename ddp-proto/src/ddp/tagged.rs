//! Validation of a tagged access (STag, TO, length) against registered memory.
//!
//! The check order is siw's (`siw_mem_id2obj` → key compare → `siw_check_mem`), with the TO
//! wrap check placed before the bounds check so that a wrapping range is reported as a wrap,
//! not as a bounds violation:
//!
//! 1. the STag index names a region (else *invalid STag*),
//! 2. the key matches the registered STag (else *invalid STag*; siw: "re-registered with a
//!    different key"),
//! 3. the STag is in the valid state (else *invalid STag*),
//! 4. the region belongs to our protection domain (else *STag not associated with the
//!    stream*),
//! 5. the region grants the right needed (else: RDMAP *access rights violation*; DDP has no
//!    such code, RFC 5041 §7.2, and like siw's `siw_tagged_error` we report *invalid STag*),
//! 6. `to + len` does not wrap past 2^64 (else *TO wrap*),
//! 7. `[to, to + len)` lies inside `[base, base + len)` (else *base or bounds violation*).
//!
//! Which layer reports: placement of RDMA Write and Read Response payload is a DDP tagged
//! buffer operation, so failures are DDP tagged-buffer errors (RFC 5041 §7.2, siw
//! `siw_proc_write`). The source of an incoming RDMA Read Request is checked by RDMAP before it
//! generates the Read Response, so failures are RDMAP remote protection errors (RFC 5040 §7.1,
//! siw `siw_rdmap_error`).
//!
//! A zero-length access is not validated at all (RFC 5040 §5.3 allows zero-length RDMA
//! Write/Read; siw skips the checks, and the MPA v2 RTR message uses STag 1, which names no
//! region).

use super::{Access, Memory, STag};
use crate::error::ProtoError;

/// Which layer reports a failed tagged check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckLayer {
    /// DDP tagged buffer error (placement of RDMA Write / Read Response payload).
    Ddp,
    /// RDMAP remote protection error (source of an RDMA Read Request).
    Rdmap,
}

/// A failed tagged check, before it is mapped to a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaggedFault {
    /// Unknown index, wrong key or invalidated STag.
    InvalidStag,
    /// The region belongs to another protection domain.
    StagNotAssociated,
    /// The region lacks the needed right.
    AccessRights,
    /// `to + len` wraps.
    ToWrap,
    /// Outside the region.
    BaseBounds,
}

impl TaggedFault {
    /// The protocol error the given layer reports for this fault.
    pub fn to_error(self, layer: CheckLayer) -> ProtoError {
        match (layer, self) {
            (CheckLayer::Ddp, TaggedFault::InvalidStag) => ProtoError::DdpInvalidStag,
            // RFC 5041 has no access-rights code; siw_tagged_error maps E_ACCESS_PERM to
            // "invalid STag", and so do we.
            (CheckLayer::Ddp, TaggedFault::AccessRights) => ProtoError::DdpInvalidStag,
            (CheckLayer::Ddp, TaggedFault::StagNotAssociated) => ProtoError::DdpStagNotAssociated,
            (CheckLayer::Ddp, TaggedFault::ToWrap) => ProtoError::DdpToWrap,
            (CheckLayer::Ddp, TaggedFault::BaseBounds) => ProtoError::DdpBaseBounds,
            (CheckLayer::Rdmap, TaggedFault::InvalidStag) => ProtoError::RdmapInvalidStag,
            (CheckLayer::Rdmap, TaggedFault::AccessRights) => ProtoError::RdmapAccessRights,
            (CheckLayer::Rdmap, TaggedFault::StagNotAssociated) => {
                ProtoError::RdmapStagNotAssociated
            }
            (CheckLayer::Rdmap, TaggedFault::ToWrap) => ProtoError::RdmapToWrap,
            (CheckLayer::Rdmap, TaggedFault::BaseBounds) => ProtoError::RdmapBaseBounds,
        }
    }
}

/// A validated tagged access: `len` bytes at byte `offset` of the region of `stag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedTarget {
    /// The STag (as on the wire, key included).
    pub stag: STag,
    /// Byte offset inside the region (`to - base`).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Checks a tagged access of `len` bytes at `to` under `stag`, in siw's order (module docs).
/// `len == 0` is not checked and yields offset 0.
pub fn check<M: Memory + ?Sized>(
    mem: &M,
    stag: STag,
    to: u64,
    len: u64,
    pd: u32,
    need: Access,
) -> Result<TaggedTarget, TaggedFault> {
    if len == 0 {
        return Ok(TaggedTarget {
            stag,
            offset: 0,
            len: 0,
        });
    }
    let region = mem.region(stag).ok_or(TaggedFault::InvalidStag)?;
    if region.stag != stag {
        return Err(TaggedFault::InvalidStag);
    }
    if !region.valid {
        return Err(TaggedFault::InvalidStag);
    }
    if region.pd != pd {
        return Err(TaggedFault::StagNotAssociated);
    }
    if !region.access.contains(need) {
        return Err(TaggedFault::AccessRights);
    }
    let end = to.checked_add(len).ok_or(TaggedFault::ToWrap)?;
    let region_end = region
        .base
        .checked_add(region.len)
        .ok_or(TaggedFault::BaseBounds)?;
    if to < region.base || end > region_end {
        return Err(TaggedFault::BaseBounds);
    }
    Ok(TaggedTarget {
        stag,
        offset: to - region.base,
        len,
    })
}

/// [`check`] with the failure mapped to the error `layer` reports.
pub fn validate<M: Memory + ?Sized>(
    mem: &M,
    stag: STag,
    to: u64,
    len: u64,
    pd: u32,
    need: Access,
    layer: CheckLayer,
) -> Result<TaggedTarget, ProtoError> {
    check(mem, stag, to, len, pd, need).map_err(|f| f.to_error(layer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::mem_vec::VecMemory;

    fn setup() -> (VecMemory, STag) {
        let mut m = VecMemory::new(0x1000, 0x1000);
        let s = m.register(0x1100, 0x100, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 7);
        (m, s)
    }

    #[test]
    fn order_and_codes() {
        let (mut m, s) = setup();
        let w = Access::REMOTE_WRITE;
        assert_eq!(
            check(&m, s, 0x1100, 0x100, 7, w),
            Ok(TaggedTarget {
                stag: s,
                offset: 0,
                len: 0x100
            })
        );
        assert_eq!(check(&m, s, 0x11ff, 1, 7, w).unwrap().offset, 0xff);
        // unknown index
        let unknown = STag::from_parts(s.index() ^ 0x55, s.key());
        assert_eq!(
            check(&m, unknown, 0x1100, 1, 7, w),
            Err(TaggedFault::InvalidStag)
        );
        // wrong key
        let wrong_key = STag::from_parts(s.index(), s.key().wrapping_add(1));
        assert_eq!(
            check(&m, wrong_key, 0x1100, 1, 7, w),
            Err(TaggedFault::InvalidStag)
        );
        // PD before rights before bounds
        assert_eq!(
            check(&m, s, 0, 1, 8, Access::REMOTE_READ),
            Err(TaggedFault::StagNotAssociated)
        );
        assert_eq!(
            check(&m, s, 0, 1, 7, Access::REMOTE_READ),
            Err(TaggedFault::AccessRights)
        );
        assert_eq!(check(&m, s, u64::MAX, 2, 7, w), Err(TaggedFault::ToWrap));
        assert_eq!(check(&m, s, 0x10ff, 1, 7, w), Err(TaggedFault::BaseBounds));
        assert_eq!(
            check(&m, s, 0x1100, 0x101, 7, w),
            Err(TaggedFault::BaseBounds)
        );
        // zero length is never checked
        assert!(check(&m, STag(1), 0, 0, 0, w).is_ok());
        // invalidated
        m.invalidate(s).unwrap();
        assert_eq!(check(&m, s, 0x1100, 1, 7, w), Err(TaggedFault::InvalidStag));
    }

    #[test]
    fn layer_mapping() {
        assert_eq!(
            TaggedFault::AccessRights.to_error(CheckLayer::Ddp),
            ProtoError::DdpInvalidStag
        );
        assert_eq!(
            TaggedFault::AccessRights.to_error(CheckLayer::Rdmap),
            ProtoError::RdmapAccessRights
        );
        assert_eq!(
            TaggedFault::BaseBounds.to_error(CheckLayer::Ddp),
            ProtoError::DdpBaseBounds
        );
        assert_eq!(
            TaggedFault::ToWrap.to_error(CheckLayer::Rdmap),
            ProtoError::RdmapToWrap
        );
    }
}
