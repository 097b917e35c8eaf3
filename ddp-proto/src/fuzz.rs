//! Fuzz bodies: functions of arbitrary bytes that must never panic, and that check the
//! invariants of the protocol core while they run (rustls habit: the bodies live in the
//! library, the cargo-fuzz targets in `ddp-proto/fuzz/` are one-liners calling them, and
//! `tests/fuzz_corpus.rs` replays the checked-in corpus through them on stable).
//!
//! A panic in a body is a bug found: either an `assert!` below (an invariant that failed) or a
//! panic in the code under test. Each body reads a few leading selector bytes (configuration,
//! chunking pattern) and treats the rest as what a hostile peer sent; its documentation gives
//! the exact layout, so that seeds can be built from real captures by prefixing the right
//! selector bytes.
//!
//! | body | what it drives | main invariants |
//! |---|---|---|
//! | [`deframer`] | [`Deframer`] over any chunking, plus a direct-placement pass | agrees with an independent whole-buffer model; framer → deframer is the identity; CRC catches any single bit flip |
//! | [`mpa_responder`] | [`Responder`] | consumes only the Request, one outcome, Reply consistent with the config |
//! | [`mpa_initiator`] | [`Initiator`] | consumes only the Reply, one outcome, result consistent with the config |
//! | [`wire_headers`] | every repr in [`crate::wire`] | parse → emit is byte-identical, emit → parse is the identity |
//! | [`connection_ops`] | two [`Connection`]s and a hostile peer | no byte outside registered regions changes; completions exactly once |
//!
//! What the bodies refuse to do: allocate without bound (inputs are capped by the fuzzer's
//! `-max_len`; every loop is bounded by the input) or read the clock (time is a function of
//! the input).

use core::ops::Range;
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

use crate::conn::{
    ConnConfig, Connection, DirectTarget, Event as ConnEvent, PostError, RecvMode, Role, RxPlan,
    SendFlags, State, WcOpcode, WcStatus,
};
use crate::ddp::mem_vec::VecMemory;
use crate::ddp::{Access, Memory, STag, Sge, sge_pieces, sge_total};

use crate::error::ProtoError;
use crate::mpa::crc::{Crc32c, crc32c, from_wire};
use crate::mpa::deframer::{Deframer, Event, RxConfig, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::mpa::framer::{Framer, TxConfig};
use crate::mpa::markers::{
    MARKER_INTERVAL, MARKER_LEN, MAX_ULPDU_LEN, in_marker, is_marker_start, octets_to_next_marker,
    pad_len,
};
use crate::mpa::startup::{
    Initiator, MpaConfig, Negotiated, Responder, RtrKind, RtrKinds, StartupError, TxFraming,
    UsageError,
};
use crate::wire::ddp::{DdpControl, DdpPacket, DdpRepr};
use crate::wire::mpa::{
    HEADER_LEN, MAX_IRD_ORD, MAX_PRIVATE_DATA, MpaFrameKind, MpaFrameRepr, MpaV2Params,
};
use crate::wire::rdmap::{
    Opcode, RdmapControl, RdmapHeader, RdmapMessage, ReadRequestBody, TerminateHeader,
    TerminatedDdpHeader,
};

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// Splits `n` selector bytes off the front (missing ones read as 0).
fn selectors<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut sel = [0u8; N];
    let n = data.len().min(N);
    sel[..n].copy_from_slice(&data[..n]);
    (sel, &data[n..])
}

/// A small deterministic generator (xorshift), seeded from the input.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Cuts `0..len` into consecutive chunks, as TCP reads might deliver them. `sel & 3`: 0 = one
/// chunk, 1 = one byte at a time, 2 = fixed size `(sel >> 2) + 1`, 3 = pseudo-random sizes
/// (0 to a few hundred; empty reads included) seeded by `sel`.
fn chunks(len: usize, sel: u8) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut rng = Rng::new(u64::from(sel));
    while at < len {
        let n = match sel & 3 {
            0 => len,
            1 => 1,
            2 => usize::from(sel >> 2) + 1,
            _ => match rng.below(8) {
                0 => 0,
                1..=3 => 1 + rng.below(4) as usize,
                4..=6 => 1 + rng.below(64) as usize,
                _ => 1 + rng.below(700) as usize,
            },
        };
        let end = (at + n).min(len);
        out.push(at..end);
        at = end;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Deframer

/// The ULPDU limits a deframer body can be configured with (65535, a TCP-MSS-sized MULPDU,
/// the connection minimum, and one below an untagged header).
const MAX_ULPDU_CHOICES: [usize; 4] = [MAX_ULPDU_LEN, 1454, 128, 17];

/// A deframer event with the input slice resolved, payload pieces merged: what any two
/// correct runs over the same stream must agree on, whatever the chunking.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Header { bytes: Vec<u8>, ulpdu_len: usize },
    Payload { offset: usize, bytes: Vec<u8> },
    End,
}

/// Everything one run over a stream produced.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Deframed {
    seen: Vec<Seen>,
    error: Option<ProtoError>,
    /// Stream position when the run stopped (at the error, or the stream length).
    position: u64,
    idle: bool,
}

fn push_payload(seen: &mut Vec<Seen>, offset: usize, bytes: &[u8]) {
    if let Some(Seen::Payload {
        offset: o,
        bytes: b,
    }) = seen.last_mut()
        && *o + b.len() == offset
    {
        b.extend_from_slice(bytes);
        return;
    }
    seen.push(Seen::Payload {
        offset,
        bytes: bytes.to_vec(),
    });
}

/// Checks every event of one run against the FPDU it belongs to.
struct Tracker {
    cfg: RxConfig,
    /// The FPDU being read: (ULPDU length, next payload offset).
    fpdu: Option<(usize, usize)>,
    seen: Vec<Seen>,
}

impl Tracker {
    fn new(cfg: RxConfig) -> Tracker {
        Tracker {
            cfg,
            fpdu: None,
            seen: Vec::new(),
        }
    }

    /// The payload run the deframer offers must stay inside the ULPDU and before a marker.
    fn check_run(&self, d: &Deframer) {
        let run = d.payload_run();
        if run == 0 {
            return;
        }
        let (ulpdu_len, next) = self.fpdu.expect("payload run outside an FPDU");
        assert_eq!(d.ulpdu_offset(), next, "ulpdu_offset");
        assert!(next + run <= ulpdu_len, "payload run beyond the ULPDU");
        if self.cfg.markers {
            let p = d.position();
            assert!(!in_marker(p) && octets_to_next_marker(p) >= run as u64);
        }
    }

    fn header(&mut self, d: &Deframer, bytes: &[u8], ulpdu_len: usize) {
        assert!(self.fpdu.is_none(), "header inside an FPDU");
        let max = self.cfg.max_ulpdu.min(MAX_ULPDU_LEN);
        assert!((1..=max).contains(&ulpdu_len), "ULPDU length {ulpdu_len}");
        let wanted = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        assert_eq!(bytes.len(), wanted.min(ulpdu_len), "header length");
        assert_eq!(d.ulpdu_offset(), bytes.len());
        self.fpdu = Some((ulpdu_len, bytes.len()));
        self.seen.push(Seen::Header {
            bytes: bytes.to_vec(),
            ulpdu_len,
        });
    }

    /// Payload `bytes` at ULPDU `offset`, whose first byte was at stream position `at`.
    fn payload(&mut self, offset: usize, bytes: &[u8], at: u64) {
        let (ulpdu_len, next) = self.fpdu.as_mut().expect("payload outside an FPDU");
        assert!(!bytes.is_empty(), "empty payload event");
        assert_eq!(offset, *next, "payload offset");
        assert!(
            offset + bytes.len() <= *ulpdu_len,
            "payload beyond the ULPDU"
        );
        *next += bytes.len();
        if self.cfg.markers {
            assert!(
                !in_marker(at) && octets_to_next_marker(at) >= bytes.len() as u64,
                "payload contains a marker"
            );
        }
        push_payload(&mut self.seen, offset, bytes);
    }

    fn end(&mut self, d: &Deframer) {
        let (ulpdu_len, next) = self.fpdu.take().expect("end outside an FPDU");
        assert_eq!(next, ulpdu_len, "end before the whole ULPDU");
        assert!(d.is_idle(), "not idle after an FPDU");
        self.seen.push(Seen::End);
    }

    /// After a fatal error: it sticks, and nothing is placeable.
    fn failed(self, d: &mut Deframer, e: ProtoError, input: &[u8]) -> Deframed {
        assert_eq!(d.error(), Some(e));
        assert!(!d.is_idle());
        assert_eq!(d.payload_run(), 0);
        for probe in [input, &[][..], &[0, 0, 0, 0][..]] {
            let mut at = 0;
            assert_eq!(d.next(probe, &mut at), Err(e), "error not sticky");
            assert_eq!(at, 0, "a failed deframer consumed input");
        }
        Deframed {
            seen: self.seen,
            error: Some(e),
            position: d.position(),
            idle: false,
        }
    }

    fn finished(self, d: &Deframer, len: usize) -> Deframed {
        assert_eq!(d.position(), len as u64, "not every byte consumed");
        assert_eq!(d.error(), None);
        Deframed {
            seen: self.seen,
            error: None,
            position: d.position(),
            idle: d.is_idle(),
        }
    }
}

/// One run over `stream` cut into `chunks`; with `place = Some(limit)`, payload is taken by
/// direct placement (`payload_run` / `consume_placed`, at most `limit` bytes at a time)
/// whenever the deframer offers it.
fn run_deframer(
    cfg: RxConfig,
    stream: &[u8],
    chunks: &[Range<usize>],
    place: Option<usize>,
) -> Deframed {
    let mut d = Deframer::new(cfg);
    assert_eq!(d.config().max_ulpdu, cfg.max_ulpdu.min(MAX_ULPDU_LEN));
    assert!(d.is_idle());
    let mut t = Tracker::new(cfg);
    for c in chunks {
        let input = &stream[c.clone()];
        let mut at = 0;
        loop {
            t.check_run(&d);
            if let Some(limit) = place {
                let run = d.payload_run();
                if run > 0 && at < input.len() {
                    let n = run.min(input.len() - at).min(limit);
                    let (offset, pos) = (d.ulpdu_offset(), d.position());
                    d.consume_placed(&input[at..at + n]);
                    assert_eq!(d.position(), pos + n as u64);
                    assert_eq!(d.ulpdu_offset(), offset + n);
                    t.payload(offset, &input[at..at + n], pos);
                    at += n;
                    continue;
                }
            }
            let (before, pos) = (at, d.position());
            let result = d.next(input, &mut at);
            assert!(before <= at && at <= input.len(), "`at` out of range");
            assert_eq!(
                d.position() - pos,
                (at - before) as u64,
                "position vs consumed"
            );
            let ev = match result {
                Ok(ev) => ev,
                Err(e) => return t.failed(&mut d, e, input),
            };
            if ev == Event::NeedMore {
                assert_eq!(at, input.len(), "NeedMore with input left");
                break;
            }
            assert!(at > before, "an event without consuming input");
            match ev {
                Event::Header(h) => {
                    assert_eq!(h.payload_len(), h.ulpdu_len() - h.bytes().len());
                    assert_eq!(h.is_tagged(), h.bytes()[0] & 0x80 != 0);
                    t.header(&d, h.bytes(), h.ulpdu_len());
                }
                Event::Payload { range, offset } => {
                    // The payload is the last thing this call consumed.
                    assert!(range.start >= before && range.end == at, "payload range");
                    let at_pos = d.position() - range.len() as u64;
                    t.payload(offset, &input[range], at_pos);
                }
                Event::End => t.end(&d),
                Event::NeedMore => unreachable!(),
            }
        }
    }
    t.finished(&d, stream.len())
}

/// An independent deframer over the whole buffer (no incremental state): strips markers,
/// walks the FPDUs, and orders every error and event by the stream position of the byte that
/// completes it. Only what the incremental one reports before its first error survives.
fn model_deframer(cfg: RxConfig, s: &[u8]) -> Deframed {
    /// One FPDU as the model sees it (indices into the marker-free bytes `d`).
    struct Fpdu {
        /// Stream position of ULPDU_LENGTH.
        l_pos: u64,
        /// Index of the first ULPDU byte, the ULPDU length and the header length, once known.
        ulpdu: Option<(usize, usize, usize)>,
        /// Stream position after the CRC field, if complete.
        end: Option<u64>,
    }
    let max = cfg.max_ulpdu.min(MAX_ULPDU_LEN);
    // Non-marker bytes and their stream positions.
    let mut d = Vec::with_capacity(s.len());
    let mut pos = Vec::with_capacity(s.len());
    for (i, &b) in s.iter().enumerate() {
        if !(cfg.markers && in_marker(i as u64)) {
            d.push(b);
            pos.push(i as u64);
        }
    }
    // Errors, each at the stream position after the byte that reveals it.
    let mut errors: Vec<(u64, ProtoError)> = Vec::new();
    let mut fpdus: Vec<Fpdu> = Vec::new();
    let mut prev_end = 0u64;
    let mut i = 0;
    while i < d.len() {
        let mut f = Fpdu {
            l_pos: pos[i],
            ulpdu: None,
            end: None,
        };
        if i + 2 > d.len() {
            fpdus.push(f);
            break;
        }
        let len = usize::from(u16::from_be_bytes([d[i], d[i + 1]]));
        if len == 0 || len > max {
            errors.push((pos[i + 1] + 1, ProtoError::MarkerMismatch));
            fpdus.push(f);
            break;
        }
        let u = i + 2;
        if u < d.len() {
            let hl = if d[u] & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            f.ulpdu = Some((u, len, hl.min(len)));
        }
        let crc_at = u + len + pad_len(len);
        if crc_at + 4 > d.len() {
            fpdus.push(f);
            break;
        }
        let end = pos[crc_at + 3] + 1;
        f.end = Some(end);
        fpdus.push(f);
        if cfg.crc {
            let field = [d[crc_at], d[crc_at + 1], d[crc_at + 2], d[crc_at + 3]];
            let covered = &s[prev_end as usize..pos[crc_at] as usize];
            if crc32c(covered) != from_wire(field) {
                errors.push((end, ProtoError::Crc));
                break;
            }
        }
        prev_end = end;
        i = crc_at + 4;
    }
    if cfg.markers {
        let mut k = 0u64;
        let mut f = 0; // FPDUs are in stream order, so are markers
        while k * MARKER_INTERVAL + MARKER_LEN as u64 <= s.len() as u64 {
            let p = k * MARKER_INTERVAL;
            let m = &s[p as usize..p as usize + MARKER_LEN];
            let found = u16::from_be_bytes([m[2], m[3]]) & !3;
            while f < fpdus.len() && fpdus[f].end.is_some_and(|e| e <= p) {
                f += 1;
            }
            // The FPDU the marker is inside; none: it precedes the next one (FPDUPTR 0).
            let expected = match fpdus.get(f) {
                Some(x) if x.l_pos <= p => u16::try_from(p - x.l_pos).ok(),
                _ => Some(0),
            };
            if expected != Some(found) {
                errors.push((p + MARKER_LEN as u64, ProtoError::MarkerMismatch));
                break; // later markers cannot come first
            }
            k += 1;
        }
    }
    let first_error = errors.iter().min_by_key(|&&(t, _)| t).copied();
    let cut = first_error.map_or(u64::MAX, |(t, _)| t);
    // Everything completed strictly before the cut, in stream order.
    let mut seen = Vec::new();
    'fpdus: for f in &fpdus {
        let Some((u, len, hl)) = f.ulpdu else {
            break;
        };
        if u + hl > d.len() || pos[u + hl - 1] + 1 >= cut {
            break;
        }
        seen.push(Seen::Header {
            bytes: d[u..u + hl].to_vec(),
            ulpdu_len: len,
        });
        let stop = (u + len).min(d.len());
        let upto = (u + hl..stop).find(|&j| pos[j] + 1 >= cut).unwrap_or(stop);
        if upto > u + hl {
            seen.push(Seen::Payload {
                offset: hl,
                bytes: d[u + hl..upto].to_vec(),
            });
        }
        if upto < stop {
            break 'fpdus;
        }
        match f.end {
            Some(e) if e < cut => seen.push(Seen::End),
            _ => break,
        }
    }
    match first_error {
        Some((t, e)) => Deframed {
            seen,
            error: Some(e),
            position: t,
            idle: false,
        },
        None => Deframed {
            seen,
            error: None,
            position: s.len() as u64,
            idle: prev_end == s.len() as u64,
        },
    }
}

/// Runs `stream` through the model, one chunked pass and one direct-placement pass with
/// another chunking, and asserts that all three agree.
fn check_stream(cfg: RxConfig, chunk_sel: u8, stream: &[u8]) -> Deframed {
    let model = model_deframer(cfg, stream);
    let a = run_deframer(cfg, stream, &chunks(stream.len(), chunk_sel), None);
    assert_eq!(a, model, "chunked deframer vs model");
    let sel_b = chunk_sel.rotate_left(3) ^ 0x5a;
    let limit = match chunk_sel >> 6 {
        0 => usize::MAX,
        1 => 1,
        2 => 7,
        _ => 100,
    };
    let b = run_deframer(cfg, stream, &chunks(stream.len(), sel_b), Some(limit));
    assert_eq!(b, model, "direct-placement deframer vs model");
    a
}

/// Fuzz body for [`Deframer`].
///
/// Layout: `data[0]` is the configuration — bit 0 CRC, bit 1 markers, bits 2–3 `max_ulpdu`
/// (65535, 1454, 128, 17), bit 4 *framed mode*; `data[1]` chooses the chunking (see
/// `chunks`: whole, byte by byte, fixed, pseudo-random) and, in its top two bits, how much
/// the direct-placement pass places per call.
///
/// * Raw mode (bit 4 clear): `data[2..]` is the received stream (an FPDU stream from a
///   capture, with `data[0] = 0x01` for siw's CRC-on connections, `0x00` for CRC off). It is
///   deframed three times — by an independent whole-buffer model, by `next` over the chosen
///   chunks, and over other chunks with payload taken through `payload_run`/`consume_placed` —
///   and the three must agree on the events (headers, payload bytes and offsets, ends), the
///   error and the stream position where it happened. Each event is checked as it comes:
///   payload ranges inside the input just consumed, offsets continuous from the header length
///   to the ULPDU length, no marker inside a payload, `End` only after the whole ULPDU, position
///   advancing by exactly the bytes consumed; after an error, it sticks and nothing more is
///   consumed.
/// * Framed mode (bit 4 set): `data[2..5]` is a corruption (bit 0 of `data[2]`: flip bit
///   `data[2] >> 1 & 7` of the byte at `u16(data[3..5]) % len`), then records of 3 bytes
///   (`u16` length mod 1600 + 1, fill byte) become ULPDUs framed by [`Framer`] with the same
///   CRC/marker setting. Uncorrupted, the deframer must give back exactly those ULPDUs (or
///   stop with `MarkerMismatch` at the first one over `max_ulpdu`); corrupted with CRC on, it
///   must fail unless the flip hit a ULPDU_LENGTH field.
pub fn deframer(data: &[u8]) {
    let ([cfg_byte, chunk_sel], rest) = selectors::<2>(data);
    let cfg = RxConfig {
        crc: cfg_byte & 1 != 0,
        markers: cfg_byte & 2 != 0,
        max_ulpdu: MAX_ULPDU_CHOICES[usize::from((cfg_byte >> 2) & 3)],
    };
    if cfg_byte & 0x10 == 0 {
        check_stream(cfg, chunk_sel, rest);
        return;
    }
    let ([flip, hi, lo], mut records) = selectors::<3>(rest);
    let mut framer = Framer::new(TxConfig {
        crc: cfg.crc,
        markers: cfg.markers,
    });
    let mut wire = Vec::new();
    let mut ulpdus: Vec<Vec<u8>> = Vec::new();
    let mut length_fields = Vec::new();
    while records.len() >= 3 && ulpdus.len() < 64 && wire.len() < 32 * 1024 {
        let len = 1 + usize::from(u16::from_be_bytes([records[0], records[1]])) % 1600;
        let fill = records[2];
        records = &records[3..];
        let ulpdu: Vec<u8> = (0..len)
            .map(|i| fill.wrapping_add((i as u8).wrapping_mul(31)) ^ (i >> 8) as u8)
            .collect();
        let start = framer.position();
        let markers_first = cfg.markers && is_marker_start(start);
        length_fields.push(start + if markers_first { 4 } else { 0 });
        let wire_len = framer.next_fpdu_len(len);
        let fpdu = framer.frame_to_vec(&[&ulpdu]);
        assert_eq!(fpdu.len(), wire_len, "next_fpdu_len");
        assert_eq!(framer.position(), start + fpdu.len() as u64);
        wire.extend_from_slice(&fpdu);
        ulpdus.push(ulpdu);
    }
    let corrupted = flip & 1 != 0 && !wire.is_empty();
    let mut flipped_at = 0;
    if corrupted {
        flipped_at = usize::from(u16::from_be_bytes([hi, lo])) % wire.len();
        wire[flipped_at] ^= 1 << ((flip >> 1) & 7);
    }
    let out = check_stream(cfg, records.first().copied().unwrap_or(0) ^ flip, &wire);
    if !corrupted {
        let mut expected = Vec::new();
        let mut error = None;
        for u in &ulpdus {
            if u.len() > cfg.max_ulpdu {
                error = Some(ProtoError::MarkerMismatch);
                break;
            }
            let hl = if u[0] & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            }
            .min(u.len());
            expected.push(Seen::Header {
                bytes: u[..hl].to_vec(),
                ulpdu_len: u.len(),
            });
            if hl < u.len() {
                expected.push(Seen::Payload {
                    offset: hl,
                    bytes: u[hl..].to_vec(),
                });
            }
            expected.push(Seen::End);
        }
        assert_eq!(out.seen, expected, "framer -> deframer is not the identity");
        assert_eq!(out.error, error);
        if error.is_none() {
            assert!(out.idle);
        }
    } else if cfg.crc {
        let in_length_field = length_fields
            .iter()
            .any(|&l| (l..l + 2).contains(&(flipped_at as u64)));
        if !in_length_field {
            assert!(
                out.error.is_some(),
                "a bit flip at {flipped_at} went unnoticed"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MPA startup

const T0: Duration = Duration::ZERO;

/// An [`MpaConfig`] chosen by two selector bytes; always valid.
///
/// `a`: bit 0 revision 1 (else 2), bit 1 `want_crc`, bit 2 `crc_strict`, bit 3 `markers_rx`,
/// bit 4 `allow_markers_tx`, bit 5 `p2p` (revision 2 only). `b`: bits 0–2 RTR kinds (write,
/// read, send; Write+Read if P2P and none), bits 3–4 IRD/ORD (128/128, 1/1, 0/0,
/// 0x3fff/7), bit 5 `max_tx_private_data` 512 (else 256), bits 6–7 private data length (0,
/// 5, 64, the most that fits).
fn mpa_config(a: u8, b: u8) -> MpaConfig {
    let mut c = MpaConfig::siw_compat();
    c.revision = if a & 1 != 0 { 1 } else { 2 };
    c.want_crc = a & 2 != 0;
    c.crc_strict = a & 4 != 0;
    c.markers_rx = a & 8 != 0;
    c.allow_markers_tx = a & 0x10 != 0;
    c.p2p = a & 0x20 != 0 && c.revision == 2;
    c.rtr = RtrKinds {
        write: b & 1 != 0,
        read: b & 2 != 0,
        send: b & 4 != 0,
    };
    if c.p2p && c.rtr.is_empty() {
        c.rtr = RtrKinds::WRITE_READ;
    }
    (c.ird, c.ord) = match (b >> 3) & 3 {
        0 => (128, 128),
        1 => (1, 1),
        2 => (0, 0),
        _ => (MAX_IRD_ORD, 7),
    };
    c.max_tx_private_data = if b & 0x20 != 0 { MAX_PRIVATE_DATA } else { 256 };
    let most = c.max_tx_private_data - if c.revision == 2 { 4 } else { 0 };
    let pd_len = match b >> 6 {
        0 => 0,
        1 => 5,
        2 => 64,
        _ => most,
    };
    c.private_data = (0..pd_len).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(c.validate(), Ok(()), "fuzz config must be valid: {c:?}");
    c
}

/// Where the MPA frame at the start of `stream` ends, if its header is there (whatever the
/// key says): 20 + PD_Length.
fn frame_end(stream: &[u8]) -> Option<usize> {
    (stream.len() >= HEADER_LEN)
        .then(|| HEADER_LEN + usize::from(u16::from_be_bytes([stream[18], stream[19]])))
}

/// What one startup run produced (compared across chunkings).
#[derive(Debug, Clone, PartialEq, Eq)]
struct StartupRun {
    consumed: usize,
    outcome: Option<Result<Negotiated, StartupError>>,
    transmit: Option<Vec<u8>>,
}

/// Driver flags from a selector byte: bits 0–1 the responder's decision (0 auto-accept, 1
/// accept, 2 reject, 3 none), bit 2 EOF after the input, bit 3 a clock advancing 1 s per
/// chunk (else time stands still at 0).
#[derive(Debug, Clone, Copy)]
struct Drive {
    decision: u8,
    eof: bool,
    clock: bool,
}

impl Drive {
    fn new(c: u8) -> Drive {
        Drive {
            decision: c & 3,
            eof: c & 4 != 0,
            clock: c & 8 != 0,
        }
    }

    fn now(&self, chunk: usize) -> Duration {
        if self.clock {
            Duration::from_secs(chunk as u64)
        } else {
            T0
        }
    }
}

/// Takes the outcome (at most one, ever) and the transmit (at most one).
fn collect(
    run: &mut StartupRun,
    outcome: Option<Result<Negotiated, StartupError>>,
    transmit: Option<Vec<u8>>,
) {
    if let Some(o) = outcome {
        assert!(run.outcome.is_none(), "a second outcome");
        run.outcome = Some(o);
    }
    if let Some(t) = transmit {
        assert!(run.transmit.is_none(), "a second transmit");
        run.transmit = Some(t);
    }
}

/// Feeds one chunk; the startup machine may take only a prefix, and only when it has what it
/// needs (the rest belongs to the FPDU stream).
fn feed_check(used: usize, chunk: &[u8], done: bool) -> usize {
    assert!(used <= chunk.len(), "consumed more than fed");
    if used < chunk.len() {
        assert!(done, "left input unconsumed while still waiting");
    }
    used
}

fn run_responder(
    cfg: &MpaConfig,
    drive: Drive,
    stream: &[u8],
    chunks: &[Range<usize>],
) -> StartupRun {
    let mut r = if drive.decision == 0 {
        Responder::new_auto_accept(cfg.clone(), T0)
    } else {
        Responder::new(cfg.clone(), T0)
    }
    .expect("valid config");
    assert_eq!(r.poll_timeout(), Some(cfg.request_timeout));
    assert!(r.poll_transmit().is_none() && r.request().is_none());
    let mut run = StartupRun {
        consumed: 0,
        outcome: None,
        transmit: None,
    };
    let too_long = vec![0u8; MAX_PRIVATE_DATA + 1];
    for (i, c) in chunks.iter().enumerate() {
        let now = drive.now(i);
        if r.poll_timeout().is_some_and(|d| now >= d) && i % 2 == 1 {
            r.handle_timeout(now);
        }
        let chunk = &stream[c.clone()];
        let used = r.handle_input(chunk, now);
        let done = r.is_finished() || r.awaiting_decision();
        run.consumed += feed_check(used, chunk, done);
        if r.awaiting_decision() {
            assert!(r.request().is_some() && r.poll_timeout().is_none());
            assert_eq!(
                r.accept(&too_long)
                    .err()
                    .map(|e| matches!(e, UsageError::PrivateDataTooLong { .. })),
                Some(true)
            );
            assert!(r.awaiting_decision(), "a refused accept changed the state");
            match drive.decision {
                1 => r.accept(&cfg.private_data).expect("accept"),
                2 => r.reject(&cfg.private_data).expect("reject"),
                _ => {}
            }
        }
        collect(&mut run, r.poll_outcome(), r.poll_transmit());
        if r.is_finished() {
            assert!(r.poll_timeout().is_none());
            assert_eq!(
                r.handle_input(chunk, now),
                0,
                "input taken after the outcome"
            );
        }
    }
    if drive.eof {
        r.handle_eof();
        assert!(r.is_finished());
    }
    collect(&mut run, r.poll_outcome(), r.poll_transmit());
    assert!(r.poll_outcome().is_none() && r.poll_transmit().is_none());
    assert_eq!(
        run.outcome.is_some(),
        r.is_finished(),
        "finished without outcome"
    );
    if !r.awaiting_decision() {
        assert_eq!(
            r.accept(&[]),
            Err(UsageError::NotAwaitingDecision),
            "accept outside a decision"
        );
    }
    run
}

/// Checks a Reply we sent: a well-formed Reply frame with our markers flag when accepting,
/// M=0 when rejecting.
fn check_reply_sent<'a>(bytes: &'a [u8], reject: bool, cfg: &MpaConfig) -> MpaFrameRepr<'a> {
    let reply = MpaFrameRepr::parse_bytes(bytes).expect("our Reply parses");
    assert_eq!(reply.buffer_len(), bytes.len(), "Reply length");
    assert_eq!(reply.kind, MpaFrameKind::Reply);
    assert_eq!(reply.reject, reject);
    assert_eq!(reply.reserved, 0);
    assert!((1..=2).contains(&reply.revision));
    assert!(
        bytes.len() <= HEADER_LEN + cfg.max_tx_private_data.max(4),
        "Reply too long"
    );
    if reject {
        assert!(!reply.markers, "reject with M");
    } else {
        assert_eq!(reply.markers, cfg.markers_rx);
    }
    reply
}

/// Fuzz body for the MPA [`Responder`]: the input is what an initiator sends.
///
/// Layout: `data[0..2]` the configuration (see `mpa_config`: revision, CRC, strict, markers
/// each way, P2P, RTR kinds, IRD/ORD, private data), `data[2]` the driver (decision: auto,
/// accept, reject, none; EOF at the end; a clock of 1 s per chunk), `data[3]` the chunking,
/// `data[4..]` the initiator's bytes (a real MPA Request and the FPDUs after it, from a
/// capture).
///
/// Invariants: it never takes more than fed, never a byte after the Request (an accepted
/// outcome took exactly 20 + PD_Length bytes, which parse as a Request), leaves input only once
/// it has the Request, gives at most one outcome and one Reply; the Reply is well formed, and
/// an accept is consistent with the configuration and the Request (revision, CRC rule, markers
/// only if allowed, IRD/ORD within ours, an RTR both sides support), each error has its cause
/// in the Request or the driver, and without a clock the chunking does not matter.
pub fn mpa_responder(data: &[u8]) {
    let ([a, b, c, chunk_sel], stream) = selectors::<4>(data);
    let cfg = mpa_config(a, b);
    let drive = Drive::new(c);
    let run = run_responder(&cfg, drive, stream, &chunks(stream.len(), chunk_sel));
    if !drive.clock {
        let whole = run_responder(&cfg, drive, stream, &chunks(stream.len(), 0));
        assert_eq!(run, whole, "chunking changed the responder's result");
    }
    let end = frame_end(stream);
    assert!(run.consumed <= end.unwrap_or(stream.len()).min(stream.len()));
    let Some(outcome) = &run.outcome else {
        assert!(run.transmit.is_none() || drive.decision == 3);
        return;
    };
    let request = MpaFrameRepr::parse_bytes(&stream[..run.consumed]);
    match outcome {
        Ok(neg) => {
            assert!(drive.decision < 2, "accepted without accepting");
            assert_eq!(Some(run.consumed), end, "accepted before the whole Request");
            let req = request.expect("an accepted Request parses");
            assert_eq!(req.kind, MpaFrameKind::Request);
            assert_eq!(neg.revision, req.revision.min(cfg.revision));
            assert!((1..=2).contains(&neg.revision));
            assert_eq!(neg.crc, req.crc || cfg.want_crc, "CRC rule");
            if cfg.crc_strict && !cfg.want_crc {
                assert!(!neg.crc, "strict: CRC accepted");
            }
            assert_eq!(neg.markers_tx, req.markers);
            assert!(
                !neg.markers_tx || cfg.allow_markers_tx,
                "markers we cannot send"
            );
            assert_eq!(neg.markers_rx, cfg.markers_rx);
            assert_eq!(neg.enhanced, neg.revision == 2 && req.enhanced);
            assert_eq!(neg.p2p, neg.rtr.is_some());
            assert_eq!(neg.initiator_sends_rtr, neg.p2p);
            assert_eq!(neg.responder_expects_rtr, neg.p2p);
            let reply_bytes = run.transmit.as_deref().expect("accept sends a Reply");
            let reply = check_reply_sent(reply_bytes, false, &cfg);
            assert_eq!(reply.revision, neg.revision);
            assert_eq!(reply.crc, neg.crc);
            assert_eq!(reply.enhanced, neg.enhanced);
            assert_eq!(reply.ulp_private_data(), &cfg.private_data[..]);
            if neg.enhanced {
                let p = req.v2_params().expect("enhanced Request has IRD/ORD");
                assert_eq!(neg.peer_params, Some(p));
                assert_eq!(neg.ird, p.ord.min(cfg.ird));
                assert_eq!(neg.ord, p.ird.min(cfg.ord));
                assert_eq!(neg.peer_private_data, req.ulp_private_data());
                let ours = reply.v2_params().expect("enhanced Reply has IRD/ORD");
                assert_eq!((ours.ird, ours.ord, ours.p2p), (neg.ird, neg.ord, neg.p2p));
                if let Some(kind) = neg.rtr {
                    assert!(p.p2p, "P2P without a P2P Request");
                    let offered = RtrKinds::from_params(&p);
                    assert!(
                        offered.contains(kind) && cfg.rtr.contains(kind),
                        "RTR {kind:?}"
                    );
                    let picked = RtrKinds::from_params(&ours);
                    assert_eq!(picked.preferred(), Some(kind));
                    assert_eq!(
                        u8::from(picked.write) + u8::from(picked.read) + u8::from(picked.send),
                        1
                    );
                } else {
                    assert!(!p.p2p, "P2P Request accepted without RTR");
                }
            } else {
                assert_eq!((neg.ird, neg.ord), (cfg.ird, cfg.ord));
                assert!(!neg.p2p && neg.peer_params.is_none());
                assert_eq!(neg.peer_private_data, req.private_data);
            }
        }
        Err(e) => {
            let reply = run
                .transmit
                .as_deref()
                .map(|t| check_reply_sent(t, true, &cfg));
            let req = request.ok();
            match e {
                StartupError::BadKey => {
                    assert!(reply.is_none(), "a Reply to garbage");
                    let n = run.consumed;
                    assert!((1..=16).contains(&n));
                    assert_eq!(stream[..n - 1], b"MPA ID Req Frame"[..n - 1]);
                    assert_ne!(stream[n - 1], b"MPA ID Req Frame"[n - 1]);
                }
                StartupError::InvalidFrame => {
                    let over = end.is_some_and(|e| e > HEADER_LEN + MAX_PRIVATE_DATA);
                    if over {
                        assert!(reply.is_none());
                        assert_eq!(run.consumed, HEADER_LEN);
                    } else {
                        let req = req.expect("InvalidFrame of a parsed Request");
                        assert!(req.enhanced && req.private_data.len() < 4);
                        assert!(reply.is_some());
                    }
                }
                StartupError::UnsupportedRevision { revision } => {
                    assert!(*revision == 0 || *revision > 2);
                    assert_eq!(reply.expect("reject").revision, cfg.revision);
                }
                StartupError::MarkersUnsupported => {
                    assert!(req.expect("parsed").markers && !cfg.allow_markers_tx);
                    assert!(reply.is_some());
                }
                StartupError::CrcRequiredButRefused => {
                    assert!(req.expect("parsed").crc && cfg.crc_strict && !cfg.want_crc);
                    assert!(!reply.expect("reject").crc, "strict reject with C");
                }
                StartupError::NoMatchingRtr => {
                    let p = req.and_then(|r| r.v2_params()).expect("P2P Request");
                    assert!(p.p2p && RtrKinds::from_params(&p).intersect(cfg.rtr).is_empty());
                    assert!(reply.is_some());
                }
                StartupError::LocallyRejected => {
                    assert_eq!(drive.decision, 2);
                    assert!(reply.is_some());
                }
                StartupError::Timeout => assert!(drive.clock && reply.is_none()),
                StartupError::StreamLost => assert!(drive.eof),
                StartupError::Rejected { .. } | StartupError::InsufficientIrd { .. } => {
                    panic!("initiator-only error from a responder: {e:?}")
                }
            }
        }
    }
}

fn run_initiator(
    cfg: &MpaConfig,
    drive: Drive,
    stream: &[u8],
    chunks: &[Range<usize>],
) -> StartupRun {
    let mut ini = Initiator::new(cfg.clone(), T0).expect("valid config");
    assert_eq!(ini.poll_timeout(), Some(cfg.reply_timeout));
    let request = ini.poll_transmit().expect("the Request");
    assert!(ini.poll_transmit().is_none(), "the Request twice");
    check_request_sent(&request, cfg);
    let mut run = StartupRun {
        consumed: 0,
        outcome: None,
        transmit: None,
    };
    for (i, c) in chunks.iter().enumerate() {
        let now = drive.now(i);
        if ini.poll_timeout().is_some_and(|d| now >= d) && i % 2 == 1 {
            ini.handle_timeout(now);
        }
        let chunk = &stream[c.clone()];
        let used = ini.handle_input(chunk, now);
        run.consumed += feed_check(used, chunk, ini.is_finished());
        collect(&mut run, ini.poll_outcome(), ini.poll_transmit());
        if ini.is_finished() {
            assert!(ini.poll_timeout().is_none());
            assert_eq!(
                ini.handle_input(chunk, now),
                0,
                "input taken after the outcome"
            );
        }
    }
    if drive.eof {
        ini.handle_eof();
        assert!(ini.is_finished());
    }
    collect(&mut run, ini.poll_outcome(), ini.poll_transmit());
    assert!(
        run.transmit.is_none(),
        "the initiator sends only the Request"
    );
    assert_eq!(run.outcome.is_some(), ini.is_finished());
    if let Some(Ok(neg)) = &run.outcome {
        assert_eq!(
            ini.reply_framing(),
            Some(TxFraming {
                crc: neg.crc,
                markers: neg.markers_tx
            })
        );
    }
    run
}

/// Our Request says what the configuration says.
fn check_request_sent(bytes: &[u8], cfg: &MpaConfig) {
    let req = MpaFrameRepr::parse_bytes(bytes).expect("our Request parses");
    assert_eq!(req.buffer_len(), bytes.len());
    assert_eq!(req.kind, MpaFrameKind::Request);
    assert_eq!(
        (req.revision, req.crc, req.markers, req.reject, req.reserved),
        (cfg.revision, cfg.want_crc, cfg.markers_rx, false, 0)
    );
    assert_eq!(req.enhanced, cfg.revision == 2);
    assert_eq!(req.ulp_private_data(), &cfg.private_data[..]);
    assert!(bytes.len() <= HEADER_LEN + cfg.max_tx_private_data);
    if let Some(p) = req.v2_params() {
        let ord = if cfg.p2p { cfg.ord.max(1) } else { cfg.ord };
        assert_eq!((p.ird, p.ord, p.p2p), (cfg.ird, ord, cfg.p2p));
        let offered = RtrKinds::from_params(&p);
        assert_eq!(offered, if cfg.p2p { cfg.rtr } else { RtrKinds::NONE });
    }
}

/// Fuzz body for the MPA [`Initiator`]: the input is what a responder sends.
///
/// Layout: `data[0..2]` the configuration (as for [`mpa_responder`]), `data[2]` the driver
/// (EOF at the end, clock), `data[3]` the chunking, `data[4..]` the responder's bytes (a real
/// MPA Reply and the FPDUs after it).
///
/// Invariants: the Request matches the configuration and is sent once; input is taken only up
/// to the end of the Reply; one outcome; an accepted Reply gives a [`Negotiated`] consistent
/// with the configuration (revision ≤ ours, CRC if either side asked and never against
/// `crc_strict`, markers only if allowed, ORD ≤ what we asked and the peer's IRD, IRD ≤ what we
/// offered, P2P with an RTR we offered), and the chunking does not matter without a clock.
pub fn mpa_initiator(data: &[u8]) {
    let ([a, b, c, chunk_sel], stream) = selectors::<4>(data);
    let cfg = mpa_config(a, b);
    let drive = Drive::new(c);
    let run = run_initiator(&cfg, drive, stream, &chunks(stream.len(), chunk_sel));
    if !drive.clock {
        let whole = run_initiator(&cfg, drive, stream, &chunks(stream.len(), 0));
        assert_eq!(run, whole, "chunking changed the initiator's result");
    }
    let end = frame_end(stream);
    assert!(run.consumed <= end.unwrap_or(stream.len()).min(stream.len()));
    let Some(outcome) = &run.outcome else {
        return;
    };
    let reply = MpaFrameRepr::parse_bytes(&stream[..run.consumed]);
    match outcome {
        Ok(neg) => {
            assert_eq!(Some(run.consumed), end, "accepted before the whole Reply");
            let reply = reply.expect("an accepted Reply parses");
            assert_eq!(reply.kind, MpaFrameKind::Reply);
            assert!(!reply.reject);
            assert!((1..=cfg.revision).contains(&reply.revision));
            assert_eq!(neg.revision, reply.revision);
            assert_eq!(neg.crc, cfg.want_crc || reply.crc, "CRC rule");
            if cfg.crc_strict && !cfg.want_crc {
                assert!(!neg.crc, "strict: CRC accepted");
            }
            assert_eq!(neg.markers_tx, reply.markers);
            assert!(
                !neg.markers_tx || cfg.allow_markers_tx,
                "markers we cannot send"
            );
            assert_eq!(neg.markers_rx, cfg.markers_rx);
            assert_eq!(neg.enhanced, cfg.revision == 2 && reply.revision == 2);
            assert_eq!(neg.p2p, neg.rtr.is_some());
            assert_eq!(
                (neg.initiator_sends_rtr, neg.responder_expects_rtr),
                (neg.p2p, neg.p2p)
            );
            if neg.enhanced {
                let p = reply.v2_params().expect("enhanced Reply has IRD/ORD");
                let our_ord = if cfg.p2p { cfg.ord.max(1) } else { cfg.ord };
                assert!(p.ord <= cfg.ird, "peer ORD above our IRD accepted");
                assert_eq!(neg.ird, p.ord);
                assert_eq!(neg.ord, our_ord.min(p.ird));
                assert_eq!(neg.peer_params, Some(p));
                assert_eq!(neg.peer_private_data, reply.ulp_private_data());
                assert_eq!(neg.p2p, cfg.p2p);
                if let Some(kind) = neg.rtr {
                    assert!(cfg.rtr.contains(kind) && RtrKinds::from_params(&p).contains(kind));
                }
            } else {
                assert!(!cfg.p2p && !neg.p2p);
                assert_eq!((neg.ird, neg.ord), (cfg.ird, cfg.ord));
                assert_eq!(neg.peer_private_data, reply.private_data);
            }
        }
        Err(e) => {
            let reply = reply.ok();
            match e {
                StartupError::BadKey => {
                    let n = run.consumed;
                    assert!((1..=16).contains(&n));
                    assert_eq!(stream[..n - 1], b"MPA ID Rep Frame"[..n - 1]);
                    assert_ne!(stream[n - 1], b"MPA ID Rep Frame"[n - 1]);
                }
                StartupError::InvalidFrame => {
                    let over = end.is_some_and(|e| e > HEADER_LEN + MAX_PRIVATE_DATA);
                    if !over {
                        let r = reply.expect("InvalidFrame of a parsed Reply");
                        assert!(r.revision == 2 && cfg.revision == 2 && r.v2_params().is_none());
                    }
                }
                StartupError::UnsupportedRevision { revision } => {
                    assert!(*revision == 0 || *revision > cfg.revision);
                }
                StartupError::Rejected { private_data } => {
                    let r = reply.expect("a reject parses");
                    assert!(r.reject);
                    assert!(private_data.len() <= r.private_data.len());
                }
                StartupError::MarkersUnsupported => {
                    assert!(reply.expect("parsed").markers && !cfg.allow_markers_tx);
                }
                StartupError::CrcRequiredButRefused => {
                    assert!(reply.expect("parsed").crc && cfg.crc_strict && !cfg.want_crc);
                }
                StartupError::NoMatchingRtr => assert!(cfg.p2p),
                StartupError::InsufficientIrd { peer_ord, our_ird } => {
                    assert!(peer_ord > our_ird && *our_ird == cfg.ird);
                }
                StartupError::Timeout => assert!(drive.clock),
                StartupError::StreamLost => assert!(drive.eof),
                StartupError::LocallyRejected => panic!("responder-only error from an initiator"),
            }
            if let Some(p) = e.proto_error() {
                // The Terminate that follows reports an MPA (LLP) error.
                assert!(p.is_llp(), "{e:?} maps to a non-LLP error {p:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Wire headers

/// Emits with `emit` into a copy of `original` (so bytes the repr does not cover stay) and
/// asserts the covered prefix of `len` bytes is unchanged.
fn assert_reemits(original: &[u8], len: usize, what: &str, emit: impl FnOnce(&mut [u8])) {
    let mut buf = original.to_vec();
    buf[..len].fill(0xa5);
    emit(&mut buf);
    assert_eq!(
        buf[..len],
        original[..len],
        "{what}: emit differs from the parsed bytes"
    );
}

/// Fuzz body for the views and reprs in [`crate::wire`]: `data` is tried as a DDP/RDMAP
/// ULPDU header, an MPA Request/Reply frame, IRD/ORD words, a Read Request body and a
/// Terminate header (no selector bytes; seeds are real ULPDU headers and MPA frames).
///
/// Invariants: whatever parses re-emits byte-identically over the bytes its repr covers and
/// re-parses to the same value; `required_len` agrees with `parse`; the views' getters agree
/// with the reprs; control bytes and opcodes round-trip; the canonical header of a parsed
/// message ([`RdmapHeader::new`]) emits and means the same message.
pub fn wire_headers(data: &[u8]) {
    if let Some(&b) = data.first() {
        assert_eq!(DdpControl::from_byte(b).to_byte(), b);
        assert_eq!(RdmapControl::from_byte(b).to_byte(), b);
        assert_eq!(Opcode::from_raw(b & 0x0f).to_raw(), b & 0x0f);
    }

    // DDP header.
    if let Ok(ddp) = DdpRepr::parse_bytes(data) {
        let len = ddp.buffer_len();
        assert!(len <= data.len());
        assert_eq!(ddp.control().to_byte(), data[0]);
        let view = DdpPacket::new_checked(data).expect("parsed, so long enough");
        assert_eq!(view.header_len(), len);
        assert_eq!(view.payload(), &data[len..]);
        assert_reemits(data, len, "DdpRepr", |buf| {
            assert_eq!(ddp.emit_bytes(buf), Ok(len));
        });
        assert_eq!(DdpRepr::parse_bytes(&data[..len]), Ok(ddp));
    } else {
        assert!(DdpPacket::new_checked(data).is_err());
    }

    // The whole RDMAP ULPDU header.
    let required = RdmapHeader::required_len(data);
    match RdmapHeader::parse(data) {
        Ok((h, len)) => {
            assert_eq!(required, Ok(len), "required_len vs parse");
            assert_eq!(h.buffer_len(), len);
            assert_reemits(data, len, "RdmapHeader", |buf| {
                assert_eq!(h.emit(buf), Ok(len));
            });
            assert_eq!(RdmapHeader::parse(&data[..len]), Ok((h, len)));
            let message = h.message();
            assert_eq!(message.opcode(), h.opcode());
            let canonical = RdmapHeader::new(message, h.last());
            let mut buf = vec![0u8; canonical.buffer_len()];
            assert_eq!(
                canonical.emit(&mut buf),
                Ok(buf.len()),
                "canonical {message:?}"
            );
            let (again, n) = RdmapHeader::parse(&buf).expect("canonical header parses");
            assert_eq!((again, n), (canonical, buf.len()));
            assert_eq!(
                again.message(),
                message,
                "canonical header means another message"
            );
            let _ = format!("{h}");
        }
        Err(_) => {
            if let Ok(n) = required {
                assert!(
                    data.len() < n,
                    "required_len {n} satisfied but parse failed"
                );
            }
        }
    }

    // MPA Request/Reply.
    if let Ok(f) = MpaFrameRepr::parse_bytes(data) {
        let len = f.buffer_len();
        assert_eq!(frame_end(data), Some(len));
        assert_eq!(f.to_bytes(), data[..len], "MpaFrameRepr re-emit");
        assert_eq!(MpaFrameRepr::parse_bytes(&data[..len]), Ok(f));
        assert_eq!(f.flags(), data[16]);
        if let Some(p) = f.v2_params() {
            assert_eq!(p.to_bytes(), f.private_data[..4]);
            assert_eq!(f.ulp_private_data(), &f.private_data[4..]);
        }
    }

    // IRD/ORD words.
    if let Ok(p) = MpaV2Params::parse(data) {
        assert_eq!(p.to_bytes(), data[..4], "MpaV2Params re-emit");
        assert_eq!(MpaV2Params::parse(&p.to_bytes()), Ok(p));
    }

    // Read Request body.
    if let Ok(rr) = ReadRequestBody::parse(data) {
        let len = rr.buffer_len();
        assert_reemits(data, len, "ReadRequestBody", |buf| {
            assert_eq!(rr.emit(buf), Ok(len));
        });
    }

    // Terminate header (the bytes after the DDP header).
    let term_required = TerminateHeader::required_len(data);
    match TerminateHeader::parse(data) {
        Ok((t, len)) => {
            assert_eq!(term_required, Ok(len));
            assert_eq!(t.buffer_len(), len);
            assert_reemits(data, len, "TerminateHeader", |buf| {
                assert_eq!(t.emit(buf), Ok(len));
            });
            assert_eq!(TerminateHeader::parse(&data[..len]), Ok((t, len)));
            if let Some(h) = t.ddp_header {
                assert!(h.is_consistent());
                let _ = h.repr();
            }
        }
        Err(_) => {
            if let Ok(n) = term_required {
                assert!(
                    data.len() < n,
                    "Terminate required_len {n} satisfied, parse failed"
                );
            }
        }
    }
    if let Ok(h) = TerminatedDdpHeader::from_ulpdu(data) {
        assert_eq!(h.as_bytes(), &data[..h.buffer_len()]);
        let r = h.repr();
        assert_eq!(r.buffer_len(), h.buffer_len());
        assert_reemits(data, h.buffer_len(), "TerminatedDdpHeader", |buf| {
            assert_eq!(r.emit_bytes(buf), Ok(h.buffer_len()));
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Connection

/// Base address of each side's memory in [`connection_ops`].
const MEM_BASE: u64 = 0x10_0000;
/// Layout of each side's address space (offsets from [`MEM_BASE`]): send and write sources
/// (only ever read), 32 receive slots, 16 read-sink slots, 5 registered regions, and an
/// unused tail. Only receive slots, read sinks and the regions the peer may write may change.
const SRC_AREA: u64 = 0;
const RECV_AREA: u64 = 12 * 1024;
const SINK_AREA: u64 = 28 * 1024;
const REGION_AREA: u64 = 36 * 1024;
const MEM_SIZE: usize = 48 * 1024;
const SLOT: u64 = 512;
const RECV_SLOTS: u64 = 32;
const SINK_SLOTS: u64 = 16;
const REGION_LEN: u64 = 2048;
/// Our protection domain (region 3 is registered in another one).
const PD: u32 = 1;

/// CRC-32C over the ranges (cheaper than [`VecMemory::checksum_outside`] per input).
fn frozen_checksum(mem: &VecMemory, ranges: &[(u64, u64)]) -> u32 {
    let mut crc = Crc32c::new();
    for &(addr, len) in ranges {
        crc.update(mem.bytes(addr, len as usize));
    }
    crc.value()
}

/// Reads operation arguments from the input; 0 once it is exhausted.
struct Cursor<'a> {
    data: &'a [u8],
}

impl Cursor<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head.to_vec()
    }
}

/// One end of the pair, with everything the invariants need.
struct Side {
    conn: Connection,
    mem: VecMemory,
    stags: Vec<STag>,
    mode: RecvMode,
    direct: bool,
    /// Bytes sent to this side, not fed yet (always whole FPDUs of the peer, plus injections).
    inbox: Vec<u8>,
    /// Everything this side transmitted, in order.
    sent: Vec<u8>,
    /// Bytes transmitted but not yet confirmed with `on_written`.
    unconfirmed: u64,
    /// Frames hostile ULPDUs injected towards this side.
    hostile: Framer,
    /// Only the peer's own bytes, unmodified, ever reached this side.
    clean_in: bool,
    /// Send-queue work requests posted: opcode and whether signaled.
    sq: BTreeMap<u64, (WcOpcode, bool)>,
    sq_done: BTreeSet<u64>,
    recvs: BTreeMap<u64, Vec<Sge>>,
    recv_done: BTreeSet<u64>,
    recv_slots: u64,
    sink_slots: u64,
    /// Payloads of the Sends this side posted, in order (what the peer must receive).
    sends: Vec<Vec<u8>>,
    recv_ok: usize,
    error: Option<ProtoError>,
    closed: bool,
    /// Address ranges that must never change, and their CRC-32C at the start.
    frozen: Vec<(u64, u64)>,
    checksum: u32,
}

impl Side {
    fn new(role: Role, neg: &Negotiated, cfg: ConnConfig, direct: bool) -> Side {
        let mut mem = VecMemory::new(MEM_BASE, MEM_SIZE);
        mem.fill_pattern(0x5eed ^ role as u64);
        let rw = Access::REMOTE_WRITE | Access::REMOTE_READ;
        let kinds = [
            (Access::REMOTE_WRITE, PD, true),
            (Access::REMOTE_READ, PD, true),
            (rw, PD, false),
            (rw, PD + 1, true),
            (Access::NONE, PD, true),
        ];
        let mut stags = Vec::new();
        let regions_end = REGION_AREA + kinds.len() as u64 * REGION_LEN;
        let mut frozen = vec![
            (MEM_BASE + SRC_AREA, RECV_AREA - SRC_AREA),
            (MEM_BASE + regions_end, MEM_SIZE as u64 - regions_end),
        ];
        for (i, (access, pd, inval)) in kinds.into_iter().enumerate() {
            let addr = MEM_BASE + REGION_AREA + i as u64 * REGION_LEN;
            stags.push(mem.register_with(addr, REGION_LEN, access, pd, inval));
            if !(access.contains(Access::REMOTE_WRITE) && pd == PD) {
                frozen.push((addr, REGION_LEN));
            }
        }
        let checksum = frozen_checksum(&mem, &frozen);
        Side {
            conn: Connection::new(role, neg, cfg).expect("valid connection config"),
            mem,
            stags,
            mode: cfg.recv_mode,
            direct,
            inbox: Vec::new(),
            sent: Vec::new(),
            unconfirmed: 0,
            hostile: Framer::new(TxConfig {
                crc: neg.crc,
                markers: neg.markers_rx,
            }),
            clean_in: true,
            sq: BTreeMap::new(),
            sq_done: BTreeSet::new(),
            recvs: BTreeMap::new(),
            recv_done: BTreeSet::new(),
            recv_slots: 0,
            sink_slots: 0,
            sends: Vec::new(),
            recv_ok: 0,
            error: None,
            closed: false,
            frozen,
            checksum,
        }
    }

    fn open(&self) -> bool {
        self.conn.state() == State::Open
    }

    /// A source SGE list of `len` bytes at source offset `off` (split in two if `split`).
    fn source(off: u8, len: u32, split: bool) -> Vec<Sge> {
        let addr = MEM_BASE + SRC_AREA + u64::from(off) * 16;
        match (len, split) {
            (0, _) => Vec::new(),
            (_, true) if len > 1 => vec![
                Sge::new(addr, len / 2),
                Sge::new(addr + 4096, len - len / 2),
            ],
            _ => vec![Sge::new(addr, len)],
        }
    }

    fn gather(&self, sges: &[Sge], len: u64) -> Vec<u8> {
        let mut out = Vec::new();
        sge_pieces(sges, 0, len, |addr, l| {
            out.extend_from_slice(self.mem.local(addr, l).expect("SGE in the space"));
        });
        out
    }

    /// Takes every event and checks it: completions exactly once, for work requests we posted,
    /// unsignaled ones only on error; receive contents equal the peer's Sends on a clean
    /// stream; one error, one close.
    fn drain(&mut self, peer_sends: &[Vec<u8>]) {
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                ConnEvent::Completion(c) => {
                    let &(op, signaled) = self.sq.get(&c.wr_id).expect("completion of no WR");
                    assert!(
                        self.sq_done.insert(c.wr_id),
                        "WR {} completed twice",
                        c.wr_id
                    );
                    assert_eq!(c.opcode, op, "completion opcode");
                    assert!(
                        signaled || c.status != WcStatus::Success,
                        "unsignaled success"
                    );
                }
                ConnEvent::RecvCompletion(c) => {
                    let sges = self
                        .recvs
                        .get(&c.wr_id)
                        .expect("receive completion of no WR");
                    assert!(self.recv_done.insert(c.wr_id), "receive {} twice", c.wr_id);
                    assert_eq!(c.opcode, WcOpcode::Recv);
                    if c.status == WcStatus::Success {
                        assert!(c.byte_len <= sge_total(sges), "received beyond the buffer");
                        if self.mode == RecvMode::Posted && self.clean_in {
                            let expect = peer_sends
                                .get(self.recv_ok)
                                .expect("a receive completed for a Send never posted");
                            assert_eq!(c.byte_len, expect.len() as u64, "received length");
                            let got = self.gather(sges, c.byte_len);
                            assert!(got == *expect, "received bytes differ from the Send");
                        }
                        self.recv_ok += 1;
                    }
                }
                ConnEvent::PeerTerminated(_) => {}
                ConnEvent::Error(e) => {
                    assert!(self.error.is_none(), "a second error: {e:?}");
                    assert_eq!(self.conn.error(), Some(e));
                    self.error = Some(e);
                }
                ConnEvent::Closed => {
                    assert!(!self.closed, "closed twice");
                    self.closed = true;
                }
            }
        }
    }

    /// Moves everything this side has to send into `to`'s inbox; confirms `confirm` of 4
    /// quarters of the unconfirmed bytes as written.
    fn pump(&mut self, to: &mut Vec<u8>, confirm: u8) -> bool {
        let mut moved = false;
        for _ in 0..10_000 {
            let Some(t) = self.conn.poll_transmit(&self.mem) else {
                break;
            };
            let bytes = t.gather(&self.mem);
            assert_eq!(bytes.len(), t.len());
            assert!(t.fpdus > 0 && !bytes.is_empty(), "empty transmit");
            self.sent.extend_from_slice(&bytes);
            to.extend_from_slice(&bytes);
            self.unconfirmed += bytes.len() as u64;
            moved = true;
        }
        let n = self.unconfirmed * u64::from(confirm.min(4)) / 4;
        if n > 0 {
            self.conn.on_written(n);
            self.unconfirmed -= n;
        }
        moved
    }

    /// Feeds the inbox, cut by `sel`, placing payload directly when offered and enabled.
    fn feed(&mut self, sel: u8, peer_sends: &[Vec<u8>]) -> bool {
        if self.inbox.is_empty() {
            return false;
        }
        let data = core::mem::take(&mut self.inbox);
        let mut rng = Rng::new(u64::from(sel));
        // A reader's buffer with room for stream data (a driver's session), taken back at
        // the end of this feed.
        self.mem.stream_sink = if self.direct {
            rng.below(4000) as usize
        } else {
            0
        };
        let mut off = 0;
        while off < data.len() {
            let plan = match self.conn.rx_plan() {
                RxPlan::Direct {
                    target: DirectTarget::Stream { at, left },
                    ..
                } if self.mem.stream_room(at) < left => RxPlan::Buffered,
                p => p,
            };
            if self.direct
                && let RxPlan::Direct { target, len } = plan
            {
                assert!(len > 0, "empty direct plan");
                let n = len.min(data.len() - off).min(1 + rng.below(700) as usize);
                let bytes = &data[off..off + n];
                match target {
                    DirectTarget::Stream { at, .. } => self.mem.stream_place(at, bytes),
                    DirectTarget::Local { addr } => self.mem.fill(addr, bytes),
                    DirectTarget::Region { stag, offset } => {
                        let r = self.mem.region(stag).expect("direct target is registered");
                        assert!(r.valid && r.pd == PD && r.access.contains(Access::REMOTE_WRITE));
                        assert!(
                            offset + n as u64 <= r.len,
                            "direct target beyond the region"
                        );
                        self.mem.fill(r.base + offset, bytes);
                    }
                }
                self.conn.placed_direct(n, &mut self.mem);
                off += n;
                self.drain(peer_sends);
                continue;
            }
            let n = match sel & 3 {
                0 => data.len() - off,
                1 => 1,
                2 => usize::from(sel >> 2) + 1,
                _ => 1 + rng.below(300) as usize,
            }
            .min(data.len() - off);
            let n = if self.direct { n.min(24) } else { n };
            match self.conn.handle_input(&data[off..off + n], &mut self.mem) {
                Ok(used) => assert_eq!(used, n, "input not consumed"),
                Err(e) => assert_eq!(self.conn.error(), Some(e), "error not recorded"),
            }
            off += n;
            self.drain(peer_sends);
        }
        self.conn.unplace_stream(&self.mem);
        self.mem.unverified.clear();
        self.mem.stream_sink = 0;
        true
    }

    /// The peer's regions as seen from this side's operations: a real STag, a wrong key, or
    /// garbage.
    fn pick_stag(peer: &Side, sel: u8) -> (STag, u64) {
        let i = usize::from(sel % 8);
        let region_to = |i: usize| MEM_BASE + REGION_AREA + i as u64 * REGION_LEN;
        match i {
            0..=4 => (peer.stags[i], region_to(i)),
            5 => (STag(peer.stags[0].0 ^ 1), region_to(0)),
            6 => (STag(0), 0),
            _ => (STag(0xdead_beef), region_to(2)),
        }
    }

    /// Final checks once everything is over.
    fn check_end(&self, name: &str, mulpdu: usize, crc: bool, markers_tx: bool) {
        assert_eq!(self.conn.state(), State::Closed, "{name} not closed");
        assert!(self.closed, "{name}: no Closed event");
        for (id, &(_, signaled)) in &self.sq {
            if signaled {
                assert!(self.sq_done.contains(id), "{name}: WR {id} never completed");
            }
        }
        for id in self.recvs.keys() {
            assert!(
                self.recv_done.contains(id),
                "{name}: receive {id} never completed"
            );
        }
        assert_eq!(
            frozen_checksum(&self.mem, &self.frozen),
            self.checksum,
            "{name}: memory outside the writable areas changed"
        );
        // What we sent is well framed, every ULPDU fits MULPDU and parses; after an error,
        // the last one is the Terminate reporting it.
        let mut d = Deframer::new(RxConfig {
            crc,
            markers: markers_tx,
            max_ulpdu: MAX_ULPDU_LEN,
        });
        let mut at = 0;
        let mut ulpdu = Vec::new();
        let mut last = None;
        loop {
            match d
                .next(&self.sent, &mut at)
                .expect("our own stream deframes")
            {
                Event::Header(h) => {
                    assert!(h.ulpdu_len() <= mulpdu, "{name}: ULPDU above MULPDU");
                    ulpdu.clear();
                    ulpdu.extend_from_slice(h.bytes());
                }
                Event::Payload { range, .. } => ulpdu.extend_from_slice(&self.sent[range]),
                Event::End => {
                    let (h, _) = RdmapHeader::parse(&ulpdu).expect("our ULPDU header parses");
                    last = Some(h);
                }
                Event::NeedMore => break,
            }
        }
        assert!(d.is_idle(), "{name}: sent a partial FPDU");
        if let Some(e) = self.error.filter(|&e| e != ProtoError::StreamLost) {
            let h = last.expect("a Terminate was sent");
            match h.message() {
                RdmapMessage::Terminate { term, .. } => {
                    assert_eq!(term.code, e.term_code(), "{name}: Terminate code for {e:?}")
                }
                m => panic!("{name}: last message after {e:?} is {m:?}, not a Terminate"),
            }
        }
    }
}

/// Fuzz body for [`Connection`]: two connections over [`VecMemory`] joined in memory, driven
/// by operations read from the input, with a hostile peer able to inject bytes.
///
/// Layout: `data[0]` bit 0 CRC, bit 1 markers, bits 2/3 stream receive mode on A/B, bits 4–5
/// the RTR (none, Write, Read, Send), bits 6/7 direct placement on A/B; `data[1]` bits 0–1
/// MULPDU (128, 300, 1454, 9000), bits 2–3 A's IRD/ORD (0/0, 1/1, 4/4, 128/128; B gets the
/// mirror), bit 4 B's ORD one above A's IRD (a peer that overruns our IRD), bits 5–6 the
/// transmit batch (64 KiB, one FPDU, 2000 bytes, 256 KiB). Then operations, one byte each
/// (bit 7: side B, else A; the rest mod 12) with their argument bytes: post a receive / Send
/// / Send with Invalidate / Write / Read (real, wrong-key or garbage STags of the peer),
/// transmit, feed (with a chunking), inject a framed hostile ULPDU, inject raw bytes, flip a
/// bit in flight, close, EOF. At the end both sides are driven until quiet and get EOF.
///
/// Invariants: no panic (a [`VecMemory`] access outside a region panics too); no byte outside
/// receive buffers, read sinks and the regions the peer may write (ours, REMOTE_WRITE) ever
/// changes; every signaled work request and every receive completes exactly once, an
/// unsignaled one only with an error; a receive on a clean stream holds exactly the peer's
/// Send; at most one error and one close per side; both end closed; what each side sent
/// deframes cleanly with ULPDUs ≤ MULPDU, and after an error it ends with the Terminate
/// carrying that error's code; every command result is consistent with the state.
pub fn connection_ops(data: &[u8]) {
    let ([c0, c1], ops) = selectors::<2>(data);
    let crc = c0 & 1 != 0;
    let markers = c0 & 2 != 0;
    let rtr = match (c0 >> 4) & 3 {
        0 => None,
        1 => Some(RtrKind::Write),
        2 => Some(RtrKind::Read),
        _ => Some(RtrKind::Send),
    };
    let mulpdu = [128, 300, 1454, 9000][usize::from(c1 & 3)];
    let (ird_a, mut ord_a) = [(0, 0), (1, 1), (4, 4), (128, 128)][usize::from((c1 >> 2) & 3)];
    if rtr == Some(RtrKind::Read) {
        ord_a = ord_a.max(1);
    }
    let ord_b = ird_a + u16::from(c1 & 0x10 != 0);
    let max_transmit = [64 * 1024, 1, 2000, 256 * 1024][usize::from((c1 >> 5) & 3)];
    let neg = |ird, ord| Negotiated {
        revision: 2,
        crc,
        markers_tx: markers,
        markers_rx: markers,
        enhanced: true,
        ird,
        ord,
        p2p: rtr.is_some(),
        rtr,
        peer_params: None,
        peer_private_data: Vec::new(),
        initiator_sends_rtr: rtr.is_some(),
        responder_expects_rtr: rtr.is_some(),
    };
    let cfg = |stream: bool| ConnConfig {
        max_transmit,
        max_transmit_read_response: max_transmit * 4,
        ..ConnConfig::new(
            mulpdu,
            if stream {
                RecvMode::Stream
            } else {
                RecvMode::Posted
            },
            PD,
        )
    };
    let mut a = Side::new(
        Role::Initiator,
        &neg(ird_a, ord_a),
        cfg(c0 & 4 != 0),
        c0 & 0x40 != 0,
    );
    let mut b = Side::new(
        Role::Responder,
        &neg(ord_a, ord_b),
        cfg(c0 & 8 != 0),
        c0 & 0x80 != 0,
    );
    let mut cur = Cursor { data: ops };
    for id in 1..=512u64 {
        if cur.data.is_empty() {
            break;
        }
        let op = cur.byte();
        let (s, p) = if op & 0x80 != 0 {
            (&mut b, &mut a)
        } else {
            (&mut a, &mut b)
        };
        match (op & 0x7f) % 12 {
            0 => {
                let x = cur.byte();
                if s.recv_slots < RECV_SLOTS {
                    let addr = MEM_BASE + RECV_AREA + s.recv_slots * SLOT;
                    let len = 1 + u32::from(x) * 2;
                    let sges = match x {
                        0 => Vec::new(),
                        _ if x & 1 != 0 => vec![
                            Sge::new(addr, len / 2),
                            Sge::new(addr + u64::from(len / 2), len - len / 2),
                        ],
                        _ => vec![Sge::new(addr, len)],
                    };
                    let closed = matches!(s.conn.state(), State::Error | State::Closed);
                    match s.conn.post_recv(id, &sges) {
                        Ok(()) => {
                            s.recvs.insert(id, sges);
                            s.recv_slots += 1;
                        }
                        Err(e) => assert!(closed && e == PostError::NotOpen, "post_recv: {e:?}"),
                    }
                }
            }
            k @ (1 | 2) => {
                let (off, len, f) = (cur.byte(), cur.byte(), cur.byte());
                let sges = Side::source(off, u32::from(len) * 9, f & 4 != 0);
                let flags = SendFlags {
                    signaled: f & 1 != 0,
                    solicited: f & 2 != 0,
                };
                let open = s.open();
                let r = if k == 1 {
                    s.conn.post_send(id, &sges, flags)
                } else {
                    let (stag, _) = Side::pick_stag(p, f >> 3);
                    s.conn.post_send_inv(id, &sges, stag, flags)
                };
                match r {
                    Ok(()) => {
                        assert!(open, "posted on a connection not open");
                        s.sq.insert(id, (WcOpcode::Send, flags.signaled));
                        let payload = s.gather(&sges, sge_total(&sges));
                        s.sends.push(payload);
                    }
                    Err(e) => assert!(!open && e == PostError::NotOpen, "post_send: {e:?}"),
                }
            }
            3 => {
                let (sel, to, len, f) = (cur.byte(), cur.byte(), cur.byte(), cur.byte());
                let (stag, base) = Side::pick_stag(p, sel);
                let to = if sel & 0x80 != 0 {
                    u64::from(to) << 40
                } else {
                    base + u64::from(to) * 16
                };
                let sges = Side::source(f, u32::from(len) * 9, f & 4 != 0);
                let open = s.open();
                match s.conn.post_write(id, &sges, stag, to, f & 1 != 0) {
                    Ok(()) => {
                        assert!(open);
                        s.sq.insert(id, (WcOpcode::Write, f & 1 != 0));
                    }
                    Err(e) => assert!(!open && e == PostError::NotOpen, "post_write: {e:?}"),
                }
            }
            4 => {
                let (sel, to, len, f) = (cur.byte(), cur.byte(), cur.byte(), cur.byte());
                if s.sink_slots < SINK_SLOTS {
                    let (stag, base) = Side::pick_stag(p, sel);
                    let to = base + u64::from(to) * 8;
                    let len = u32::from(len) * 3;
                    let sink = [Sge::new(
                        MEM_BASE + SINK_AREA + s.sink_slots * SLOT,
                        SLOT as u32,
                    )];
                    let open = s.open();
                    match s.conn.post_read(id, &sink, stag, to, len, f & 1 != 0) {
                        Ok(()) => {
                            assert!(open && u64::from(len) <= SLOT);
                            s.sq.insert(id, (WcOpcode::Read, f & 1 != 0));
                            s.sink_slots += 1;
                        }
                        Err(PostError::NotOpen) => assert!(!open),
                        Err(PostError::SinkTooSmall) => assert!(u64::from(len) > SLOT),
                        Err(e) => assert!(e == PostError::NoReads, "post_read: {e:?}"),
                    }
                }
            }
            5 => {
                let confirm = cur.byte();
                s.pump(&mut p.inbox, confirm);
                s.drain(&p.sends);
            }
            6 => {
                let sel = cur.byte();
                s.feed(sel, &p.sends);
            }
            7 => {
                let (n, x) = (cur.byte(), cur.byte());
                let mut ulpdu = cur.bytes(1 + usize::from(n));
                if ulpdu.is_empty() {
                    ulpdu.push(x);
                }
                // Aim tagged segments at this side's real regions (else only CMP finds keys).
                if ulpdu.len() >= 6 && ulpdu[0] & 0x80 != 0 && x & 0x80 != 0 {
                    let stag = s.stags[usize::from(x % 5)];
                    ulpdu[2..6].copy_from_slice(&stag.0.to_be_bytes());
                }
                let fpdu = s.hostile.frame_to_vec(&[&ulpdu]);
                s.inbox.extend_from_slice(&fpdu);
                s.clean_in = false;
            }
            8 => {
                let n = cur.byte();
                let raw = cur.bytes(1 + usize::from(n));
                s.inbox.extend_from_slice(&raw);
                s.clean_in = false;
            }
            9 => {
                let (hi, lo, bit) = (cur.byte(), cur.byte(), cur.byte());
                if !s.inbox.is_empty() {
                    let at = usize::from(u16::from_be_bytes([hi, lo])) % s.inbox.len();
                    s.inbox[at] ^= 1 << (bit & 7);
                    s.clean_in = false;
                }
            }
            10 => {
                s.conn.close();
                s.drain(&p.sends);
            }
            _ => {
                s.conn.handle_eof();
                s.drain(&p.sends);
                assert_eq!(s.conn.state(), State::Closed, "not closed after EOF");
            }
        }
    }
    // Drive until quiet, confirm everything written, then end both streams.
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 100_000, "the pair does not converge");
        let mut moved = a.pump(&mut b.inbox, 4);
        a.drain(&b.sends);
        moved |= b.pump(&mut a.inbox, 4);
        b.drain(&a.sends);
        moved |= a.feed(0, &b.sends);
        moved |= b.feed(0, &a.sends);
        if !moved {
            break;
        }
    }
    a.conn.handle_eof();
    a.drain(&b.sends);
    a.pump(&mut Vec::new(), 4);
    a.drain(&b.sends);
    b.conn.handle_eof();
    b.drain(&a.sends);
    b.pump(&mut Vec::new(), 4);
    b.drain(&a.sends);
    a.check_end("A", mulpdu, crc, markers);
    b.check_end("B", mulpdu, crc, markers);
}
