//! Outgoing segmentation (RFC 5041 §5.1, §8): a message of N bytes becomes DDP segments whose
//! ULPDU (header + payload) is at most the MULPDU. Tagged segments advance the TO, untagged
//! segments the MO, by the payload already sent; only the last segment carries the L bit. A
//! zero-length message is one segment with L set.
//!
//! It refuses a MULPDU that leaves no room for payload after the header (panics: the MULPDU
//! comes from MPA and is always far larger than any DDP header).

pub use crate::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};

/// One outgoing DDP segment of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Offset of its first payload byte in the message (MO, or TO minus the message's TO).
    pub offset: u64,
    /// Payload bytes.
    pub len: usize,
    /// Whether it is the last segment (L bit).
    pub last: bool,
}

/// Cuts a message into segments; iterate to get them in order.
#[derive(Debug, Clone)]
pub struct Segmenter {
    total: u64,
    max_payload: usize,
    next: u64,
    done: bool,
}

impl Segmenter {
    /// Segments of a `total`-byte message whose ULPDUs (header of `header_len` bytes plus
    /// payload) are at most `mulpdu` bytes.
    pub fn new(total: u64, mulpdu: usize, header_len: usize) -> Segmenter {
        assert!(
            mulpdu > header_len,
            "MULPDU {mulpdu} leaves no room after a {header_len}-byte header"
        );
        Segmenter {
            total,
            max_payload: mulpdu - header_len,
            next: 0,
            done: false,
        }
    }

    /// Largest payload per segment.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Bytes not yet handed out.
    pub fn remaining(&self) -> u64 {
        self.total - self.next
    }

    /// Whether every segment has been handed out.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

impl Iterator for Segmenter {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if self.done {
            return None;
        }
        let left = self.total - self.next;
        let len = left.min(self.max_payload as u64) as usize;
        let seg = Segment {
            offset: self.next,
            len,
            last: len as u64 == left,
        };
        self.next += len as u64;
        self.done = seg.last;
        Some(seg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(total: u64, mulpdu: usize, hdr: usize) -> Vec<Segment> {
        Segmenter::new(total, mulpdu, hdr).collect()
    }

    #[test]
    fn zero_length_is_one_segment() {
        assert_eq!(
            cut(0, 100, 14),
            vec![Segment {
                offset: 0,
                len: 0,
                last: true
            }]
        );
    }

    #[test]
    fn exact_multiple_and_remainder() {
        let s = cut(172, 100, 14);
        assert_eq!(
            s,
            vec![
                Segment {
                    offset: 0,
                    len: 86,
                    last: false
                },
                Segment {
                    offset: 86,
                    len: 86,
                    last: true
                }
            ]
        );
        let s = cut(173, 100, 14);
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[2],
            Segment {
                offset: 172,
                len: 1,
                last: true
            }
        );
        assert!(s.iter().all(|x| x.len + 14 <= 100));
    }

    #[test]
    fn every_byte_once() {
        for total in [1u64, 81, 82, 83, 1000, 4096] {
            let mut at = 0;
            let segs = cut(total, 100, 18);
            for (i, s) in segs.iter().enumerate() {
                assert_eq!(s.offset, at);
                assert_eq!(s.last, i == segs.len() - 1);
                assert!(s.len > 0);
                at += s.len as u64;
            }
            assert_eq!(at, total);
        }
    }
}
