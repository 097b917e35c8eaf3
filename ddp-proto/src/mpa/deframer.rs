//! The FPDU deframer: a resumable, push-style parser of one direction's FPDU stream
//! (RFC 5044 §4.1 FPDU format, §4.2 pad, §4.3 markers, §4.4 CRC, §8 errors; placement rule in
//! [`super::markers`]).
//!
//! What it is: a state machine fed whatever octets TCP delivered, in chunks of any size (one
//! octet at a time works). It strips markers and checks that each points back to its FPDU,
//! checks the CRC-32C, and reports each FPDU as a sequence of [`Event`]s:
//!
//! 1. [`Event::Header`]: the ULPDU header octets, copied into a small array — the first 14
//!    octets of the ULPDU if the DDP T bit (bit 7 of the first ULPDU octet) is set, else 18,
//!    or the whole ULPDU if it is shorter — plus the ULPDU length;
//! 2. zero or more [`Event::Payload`]: the rest of the ULPDU as ranges into the caller's input
//!    slice (never copied), each with its offset inside the ULPDU and never containing a
//!    marker;
//! 3. [`Event::End`]: the pad and CRC were consumed and the CRC (when in use) matched.
//!
//! Header and payload are reported *before* the CRC is verified (that is what allows direct
//! placement). The consumer must treat them as tentative until `End`: it may place payload
//! into a validated target buffer, but completes nothing before `End`; a CRC error is fatal
//! for the connection anyway (RFC 5044 §8: Terminate, then close).
//!
//! # Driving it
//!
//! ```
//! use ddp_proto::mpa::deframer::{Deframer, Event, RxConfig};
//! # use ddp_proto::mpa::framer::{Framer, TxConfig};
//! # let wire = Framer::new(TxConfig { crc: true, markers: true }).frame_to_vec(&[&[0x41; 18], b"hello"]);
//! let mut deframer = Deframer::new(RxConfig { crc: true, markers: true, max_ulpdu: 1454 });
//! let input: &[u8] = &wire; // whatever one read() returned
//! let mut at = 0;
//! loop {
//!     match deframer.next(input, &mut at).expect("fatal: send Terminate, close") {
//!         Event::Header(h) => assert_eq!(h.ulpdu_len(), 23),
//!         Event::Payload { range, offset } => assert_eq!((&input[range], offset), (&b"hello"[..], 18)),
//!         Event::End => {}
//!         Event::NeedMore => break, // all of `input` consumed; read more
//!     }
//! }
//! ```
//!
//! [`Deframer::next`] consumes framing octets (markers, ULPDU_LENGTH, pad, CRC) silently and
//! returns at the first event; `NeedMore` means every octet of `input` has been consumed and is
//! never an error. Ranges are indices into the `input` of that call.
//!
//! **Direct placement.** After `Header`, [`Deframer::payload_run`] says how many of the next
//! stream octets are pure payload (no marker, nothing of the next FPDU), starting at ULPDU
//! offset [`Deframer::ulpdu_offset`]. The driver may read up to that many octets straight into
//! target memory and account them with [`Deframer::consume_placed`] (they go into the CRC and
//! the stream position). When the run is 0 in the middle of a payload, a marker is next: read
//! a few octets into a buffer and call `next` as usual (it consumes the marker, and reports any
//! payload octets that came with it as ordinary `Payload` events).
//!
//! # Errors (all fatal; the deframer then stays failed and returns the same error)
//!
//! * [`ProtoError::Crc`]: the CRC did not match.
//! * [`ProtoError::MarkerMismatch`]: a marker's FPDUPTR does not point at its FPDU (see
//!   [`super::markers`] for the rule), or ULPDU_LENGTH is 0 or above the configured
//!   `max_ulpdu`. RFC 5044 §8 has no separate code for an implausible ULPDU_LENGTH; it means
//!   the receiver lost FPDU framing, which is what "Marker and ULPDU Length field mismatch"
//!   (LLP error 0x03) reports, so we chose it (the error taxonomy in [`crate::error`] documents
//!   the same choice). Checking the length before anything else is placed matters: with CRC
//!   off, nothing else would catch a corrupted length.
//!
//! What it refuses to do: interpret the DDP/RDMAP header (that is [`crate::wire`] and
//! [`crate::ddp`]), look at the pad octets' values (RFC 5044 §4.2: ignored on receive, but
//! CRC-covered), check the CRC field when CRC is off (it is ignored), or check a marker's
//! RESERVED field (ignored on receive, CRC-covered).

use core::ops::Range;

use super::crc::{self, CRC_LEN, Crc32c};
use super::markers::{
    self, MARKER_LEN, MAX_ULPDU_LEN, ULPDU_LENGTH_LEN, decode_fpduptr, expected_fpduptr, in_marker,
    octets_to_next_marker, pad_len,
};
use crate::error::ProtoError;

/// ULPDU header octets reported for a tagged DDP segment: DDP control, RDMAP control, STag (4)
/// and TO (8).
pub const TAGGED_HEADER_LEN: usize = 14;

/// ULPDU header octets reported for an untagged DDP segment: DDP control, RDMAP control, the
/// ULP-reserved word (4), QN, MSN and MO (4 each).
pub const UNTAGGED_HEADER_LEN: usize = 18;

/// The DDP T (tagged) bit in the first ULPDU octet.
const DDP_TAGGED_BIT: u8 = 0x80;

/// What the receive side of one MPA direction checks (negotiated at MPA startup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RxConfig {
    /// Verify the CRC-32C (else the CRC field is ignored).
    pub crc: bool,
    /// The peer inserts markers (we set M in our Request/Reply).
    pub markers: bool,
    /// The largest acceptable ULPDU_LENGTH (clamped to 65535). A larger value is fatal.
    pub max_ulpdu: usize,
}

/// The copied header octets of one FPDU's ULPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UlpduHeader {
    bytes: [u8; UNTAGGED_HEADER_LEN],
    len: u8,
    ulpdu_len: u16,
}

impl UlpduHeader {
    /// The header octets: 14 (T bit set) or 18 (T bit clear), fewer if the ULPDU is shorter.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The ULPDU length (from ULPDU_LENGTH): header plus payload.
    pub fn ulpdu_len(&self) -> usize {
        usize::from(self.ulpdu_len)
    }

    /// Octets of payload that follow the header in this FPDU.
    pub fn payload_len(&self) -> usize {
        self.ulpdu_len() - usize::from(self.len)
    }

    /// Whether the DDP T bit is set.
    pub fn is_tagged(&self) -> bool {
        self.bytes[0] & DDP_TAGGED_BIT != 0
    }
}

/// One step of deframing, returned by [`Deframer::next`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Event {
    /// A new FPDU: its ULPDU header octets and length.
    Header(UlpduHeader),
    /// `input[range]` holds ULPDU octets starting at ULPDU offset `offset` (after the
    /// header; never empty, never containing a marker).
    Payload {
        /// Range of the caller's input slice.
        range: Range<usize>,
        /// Offset of `input[range.start]` inside the ULPDU.
        offset: usize,
    },
    /// The FPDU is complete: pad and CRC consumed, CRC verified (when in use).
    End,
    /// All of the input has been consumed; more octets are needed. Not an error.
    NeedMore,
}

/// A whole FPDU taken in one step by [`Deframer::whole`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whole {
    /// Its ULPDU header octets and length (as [`Event::Header`]).
    pub header: UlpduHeader,
    /// The rest of the ULPDU in the caller's input (as one [`Event::Payload`]; may be empty).
    pub payload: Range<usize>,
}

/// Where inside an FPDU the next non-marker octet belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading ULPDU_LENGTH (`field_got` octets of it so far; 0 = between FPDUs).
    Length,
    /// Reading the header octets.
    Header,
    /// Reading payload octets.
    Payload,
    /// Skipping pad octets.
    Pad,
    /// Reading the CRC field.
    Crc,
}

/// The receive side of one MPA direction in Full Operation Phase.
#[derive(Debug, Clone)]
pub struct Deframer {
    cfg: RxConfig,
    /// Octets consumed since the first octet of the first FPDU, markers included.
    pos: u64,
    phase: Phase,
    failed: Option<ProtoError>,
    crc: Crc32c,
    /// Octets of the marker being read (indexed by `pos % 512`).
    marker: [u8; MARKER_LEN],
    /// Whether any octet of the current FPDU (a leading marker included) was consumed.
    started: bool,
    /// Stream position of the current FPDU's ULPDU_LENGTH field, once its first octet is in.
    ulpdu_length_at: Option<u64>,
    /// ULPDU_LENGTH or CRC octets collected so far.
    field: [u8; CRC_LEN],
    field_got: usize,
    ulpdu_len: usize,
    header: [u8; UNTAGGED_HEADER_LEN],
    header_len: usize,
    /// ULPDU octets consumed so far (header included).
    ulpdu_off: usize,
    pad_left: usize,
}

impl Deframer {
    /// A deframer whose next octet is the first octet of the first FPDU (stream position 0).
    pub fn new(cfg: RxConfig) -> Deframer {
        Deframer {
            cfg: RxConfig {
                max_ulpdu: cfg.max_ulpdu.min(MAX_ULPDU_LEN),
                ..cfg
            },
            pos: 0,
            phase: Phase::Length,
            failed: None,
            crc: Crc32c::new(),
            marker: [0; MARKER_LEN],
            started: false,
            ulpdu_length_at: None,
            field: [0; CRC_LEN],
            field_got: 0,
            ulpdu_len: 0,
            header: [0; UNTAGGED_HEADER_LEN],
            header_len: 0,
            ulpdu_off: 0,
            pad_left: 0,
        }
    }

    /// The configuration in use (`max_ulpdu` clamped).
    pub fn config(&self) -> RxConfig {
        self.cfg
    }

    /// Octets consumed since the first octet of the first FPDU, markers included.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The fatal error this deframer stopped at, if any.
    pub fn error(&self) -> Option<ProtoError> {
        self.failed
    }

    /// Whether the stream is between FPDUs with nothing of the next one consumed (where a
    /// clean TCP close may happen; a close anywhere else means the stream was lost).
    pub fn is_idle(&self) -> bool {
        self.failed.is_none() && !self.started
    }

    /// Octets still to come of the current FPDU's ULPDU_LENGTH and DDP header once the FPDU
    /// has begun (an untagged header counted while its first octet is still to come);
    /// `None` between FPDUs, past the header, with markers, or after an error. A TCP
    /// segment may end anywhere in a header: a driver that reads headers on their own
    /// (to place the payload after them elsewhere) reads this many next.
    pub fn header_left(&self) -> Option<usize> {
        if self.failed.is_some() || self.cfg.markers || !self.started {
            return None;
        }
        match self.phase {
            Phase::Length => Some(ULPDU_LENGTH_LEN - self.field_got + UNTAGGED_HEADER_LEN),
            Phase::Header if self.ulpdu_off == 0 => Some(UNTAGGED_HEADER_LEN.min(self.ulpdu_len)),
            Phase::Header => Some(self.header_len - self.ulpdu_off),
            Phase::Payload | Phase::Pad | Phase::Crc => None,
        }
    }

    /// ULPDU offset of the next payload octet (meaningful while a payload is being read).
    pub fn ulpdu_offset(&self) -> usize {
        self.ulpdu_off
    }

    /// How many of the next stream octets are payload of the current FPDU with no marker
    /// among them: the most the driver may place directly and pass to
    /// [`Deframer::consume_placed`]. 0 outside a payload, at a marker, or after an error.
    pub fn payload_run(&self) -> usize {
        if self.failed.is_some() || self.phase != Phase::Payload {
            return 0;
        }
        let left = self.ulpdu_len - self.ulpdu_off;
        if !self.cfg.markers {
            return left;
        }
        if in_marker(self.pos) {
            return 0;
        }
        left.min(octets_to_next_marker(self.pos) as usize)
    }

    /// Whether the current FPDU's payload is complete (the last [`Event::Payload`] ended at
    /// `input[at]`) and what follows it in `input` (pad and CRC field, no marker among them)
    /// carries the CRC the payload needs, or CRC is off: then the payload may be used before
    /// the [`Event::End`] that [`Deframer::next`] will give for it. Consumes nothing; false
    /// whenever it cannot tell (the rest not in `input`, a marker in the way) or the CRC
    /// does not match (the error then comes from `next`, as always).
    pub fn verified_ahead(&self, input: &[u8], at: usize) -> bool {
        if self.failed.is_some() || self.phase != Phase::Payload {
            return false;
        }
        if !self.cfg.crc {
            return true;
        }
        if self.ulpdu_off != self.ulpdu_len || self.cfg.markers {
            return false;
        }
        let pad_end = at + self.pad_left;
        let Some(field) = input.get(pad_end..pad_end + CRC_LEN) else {
            return false;
        };
        let mut c = self.crc;
        c.update(&input[at..pad_end]);
        crc::from_wire(field.try_into().expect("CRC_LEN octets")) == c.value()
    }

    /// Octets of the stream up to the end of the current FPDU (the rest of its payload, pad
    /// and CRC field) while its payload is being received without markers; `None` otherwise.
    pub fn octets_to_end(&self) -> Option<usize> {
        (self.failed.is_none() && self.phase == Phase::Payload && !self.cfg.markers)
            .then(|| self.ulpdu_len - self.ulpdu_off + self.pad_left + CRC_LEN)
    }

    /// The ULPDU length of the FPDU whose payload is being received (`None` between
    /// payloads or after an error).
    pub fn current_ulpdu_len(&self) -> Option<usize> {
        (self.failed.is_none() && self.phase == Phase::Payload).then_some(self.ulpdu_len)
    }

    /// Accounts for payload octets the driver read itself, straight into target memory, at
    /// ULPDU offset [`Deframer::ulpdu_offset`]: they are fed to the CRC and advance the
    /// stream position.
    ///
    /// # Panics
    ///
    /// If `bytes` is longer than [`Deframer::payload_run`] (a driver bug: it would have read
    /// a marker or the next FPDU into payload memory).
    pub fn consume_placed(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= self.payload_run(),
            "consume_placed: {} octets but the payload run is {}",
            bytes.len(),
            self.payload_run()
        );
        self.take_payload(bytes);
    }

    /// A fast path for what is common with small messages: when the stream is between FPDUs
    /// (nothing of the next one consumed), markers are off and `input[*at..]` holds the whole
    /// next FPDU, takes it in one step: one CRC pass over it instead of one per piece, and the
    /// events [`Deframer::next`] would give (`Header`, at most one `Payload`, `End`) as one
    /// [`Whole`]. `None` (nothing consumed) whenever that does not apply, including an
    /// implausible ULPDU_LENGTH and a CRC that does not match: their errors then come from
    /// `next` as always, after the header and payload events (so what a bad FPDU does to the
    /// consumer does not depend on how the stream was cut).
    pub fn whole(&mut self, input: &[u8], at: &mut usize) -> Option<Whole> {
        if self.failed.is_some()
            || self.cfg.markers
            || self.phase != Phase::Length
            || self.started
            || self.field_got != 0
        {
            return None;
        }
        let avail = input.get(*at..)?;
        let len = usize::from(u16::from_be_bytes([*avail.first()?, *avail.get(1)?]));
        if len == 0 || len > self.cfg.max_ulpdu {
            return None;
        }
        let covered = ULPDU_LENGTH_LEN + len + pad_len(len);
        let field = avail.get(covered..covered + CRC_LEN)?;
        if self.cfg.crc
            && crc::from_wire(field.try_into().expect("CRC_LEN octets"))
                != crc::crc32c(&avail[..covered])
        {
            return None;
        }
        let ulpdu = &avail[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + len];
        let wanted = if ulpdu[0] & DDP_TAGGED_BIT != 0 {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        let header_len = wanted.min(len);
        let mut bytes = [0u8; UNTAGGED_HEADER_LEN];
        bytes[..header_len].copy_from_slice(&ulpdu[..header_len]);
        let start = *at + ULPDU_LENGTH_LEN;
        let w = Whole {
            header: UlpduHeader {
                bytes,
                len: header_len as u8,
                ulpdu_len: len as u16,
            },
            payload: start + header_len..start + len,
        };
        self.ulpdu_len = len;
        self.ulpdu_off = len;
        self.header_len = header_len;
        self.pad_left = 0;
        self.pos += (covered + CRC_LEN) as u64;
        *at += covered + CRC_LEN;
        self.finish_fpdu();
        Some(w)
    }

    /// Consumes octets from `input[*at..]`, advancing `*at`, up to and including the next
    /// event. Returns [`Event::NeedMore`] exactly when `*at == input.len()` and no event is
    /// pending. Ranges in [`Event::Payload`] index `input`.
    ///
    /// # Errors
    ///
    /// A fatal framing error (see the module documentation); every later call returns it too.
    pub fn next(&mut self, input: &[u8], at: &mut usize) -> Result<Event, ProtoError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        match self.step(input, at) {
            Ok(ev) => Ok(ev),
            Err(e) => {
                self.failed = Some(e);
                Err(e)
            }
        }
    }

    fn step(&mut self, input: &[u8], at: &mut usize) -> Result<Event, ProtoError> {
        loop {
            // Transitions that consume nothing.
            if self.phase == Phase::Payload && self.ulpdu_off == self.ulpdu_len {
                self.phase = Phase::Pad;
            }
            if self.phase == Phase::Pad && self.pad_left == 0 {
                self.phase = Phase::Crc;
            }
            if *at == input.len() {
                return Ok(Event::NeedMore);
            }
            if self.cfg.markers && in_marker(self.pos) {
                self.take_marker(input, at)?;
                continue;
            }
            let avail = &input[*at..];
            let room = if self.cfg.markers {
                octets_to_next_marker(self.pos) as usize
            } else {
                usize::MAX
            };
            match self.phase {
                Phase::Length => {
                    if self.ulpdu_length_at.is_none() {
                        self.ulpdu_length_at = Some(self.pos);
                    }
                    let n = (ULPDU_LENGTH_LEN - self.field_got)
                        .min(avail.len())
                        .min(room);
                    self.take_field(&avail[..n]);
                    *at += n;
                    if self.field_got == ULPDU_LENGTH_LEN {
                        let len = usize::from(u16::from_be_bytes([self.field[0], self.field[1]]));
                        if len == 0 || len > self.cfg.max_ulpdu {
                            return Err(ProtoError::MarkerMismatch);
                        }
                        self.field_got = 0;
                        self.ulpdu_len = len;
                        self.ulpdu_off = 0;
                        self.header_len = 0;
                        self.pad_left = pad_len(len);
                        self.phase = Phase::Header;
                    }
                }
                Phase::Header => {
                    if self.ulpdu_off == 0 {
                        let wanted = if avail[0] & DDP_TAGGED_BIT != 0 {
                            TAGGED_HEADER_LEN
                        } else {
                            UNTAGGED_HEADER_LEN
                        };
                        self.header_len = wanted.min(self.ulpdu_len);
                    }
                    let n = (self.header_len - self.ulpdu_off)
                        .min(avail.len())
                        .min(room);
                    let chunk = &avail[..n];
                    self.header[self.ulpdu_off..self.ulpdu_off + n].copy_from_slice(chunk);
                    self.hash(chunk);
                    self.pos += n as u64;
                    self.ulpdu_off += n;
                    *at += n;
                    if self.ulpdu_off == self.header_len {
                        self.phase = Phase::Payload;
                        return Ok(Event::Header(UlpduHeader {
                            bytes: self.header,
                            len: self.header_len as u8,
                            ulpdu_len: self.ulpdu_len as u16,
                        }));
                    }
                }
                Phase::Payload => {
                    let n = (self.ulpdu_len - self.ulpdu_off).min(avail.len()).min(room);
                    let offset = self.ulpdu_off;
                    self.take_payload(&avail[..n]);
                    let range = *at..*at + n;
                    *at += n;
                    return Ok(Event::Payload { range, offset });
                }
                Phase::Pad => {
                    let n = self.pad_left.min(avail.len()).min(room);
                    self.hash(&avail[..n]);
                    self.pos += n as u64;
                    self.pad_left -= n;
                    *at += n;
                }
                Phase::Crc => {
                    let n = (CRC_LEN - self.field_got).min(avail.len()).min(room);
                    // The CRC field itself is not covered: collect without hashing.
                    self.field[self.field_got..self.field_got + n].copy_from_slice(&avail[..n]);
                    self.field_got += n;
                    self.pos += n as u64;
                    *at += n;
                    if self.field_got == CRC_LEN {
                        if self.cfg.crc && crc::from_wire(self.field) != self.crc.value() {
                            return Err(ProtoError::Crc);
                        }
                        self.finish_fpdu();
                        return Ok(Event::End);
                    }
                }
            }
        }
    }

    /// Reads (part of) the marker at the current position and checks it once complete.
    fn take_marker(&mut self, input: &[u8], at: &mut usize) -> Result<(), ProtoError> {
        let k = (self.pos % markers::MARKER_INTERVAL) as usize;
        let n = (MARKER_LEN - k).min(input.len() - *at);
        let chunk = &input[*at..*at + n];
        self.marker[k..k + n].copy_from_slice(chunk);
        // A marker inside the CRC field cannot happen (the field starts at a multiple of 4);
        // every other marker is covered by the CRC of the FPDU it belongs to.
        debug_assert!(self.phase != Phase::Crc || self.field_got == 0);
        self.hash(chunk);
        self.started = true;
        self.pos += n as u64;
        *at += n;
        if k + n == MARKER_LEN {
            let marker_at = self.pos - MARKER_LEN as u64;
            let found = decode_fpduptr(self.marker);
            if expected_fpduptr(marker_at, self.ulpdu_length_at) != Some(found) {
                return Err(ProtoError::MarkerMismatch);
            }
        }
        Ok(())
    }

    fn take_field(&mut self, bytes: &[u8]) {
        self.field[self.field_got..self.field_got + bytes.len()].copy_from_slice(bytes);
        self.field_got += bytes.len();
        self.hash(bytes);
        self.started = true;
        self.pos += bytes.len() as u64;
    }

    fn take_payload(&mut self, bytes: &[u8]) {
        self.hash(bytes);
        self.pos += bytes.len() as u64;
        self.ulpdu_off += bytes.len();
    }

    fn hash(&mut self, bytes: &[u8]) {
        if self.cfg.crc {
            self.crc.update(bytes);
        }
    }

    fn finish_fpdu(&mut self) {
        self.phase = Phase::Length;
        self.field_got = 0;
        self.crc.reset();
        self.started = false;
        self.ulpdu_length_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::framer::{Framer, TxConfig};

    fn rx(crc: bool, markers: bool) -> Deframer {
        Deframer::new(RxConfig {
            crc,
            markers,
            max_ulpdu: 65535,
        })
    }

    /// Deframes `input` in one call sequence; returns the events (payload as octets).
    fn run(d: &mut Deframer, input: &[u8]) -> Result<Vec<(Event, Vec<u8>)>, ProtoError> {
        let mut at = 0;
        let mut evs = Vec::new();
        loop {
            let ev = d.next(input, &mut at)?;
            let bytes = match &ev {
                Event::Payload { range, .. } => input[range.clone()].to_vec(),
                Event::NeedMore => return Ok(evs),
                _ => Vec::new(),
            };
            evs.push((ev, bytes));
        }
    }

    #[test]
    fn siw_send_from_a_capture() {
        // rping-crc.decode.txt frame 10.
        let fpdu: [u8; 40] = [
            0x00, 0x22, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55, 0x84, 0xf9, 0x14, 0xde, 0x60,
            0x34, 0xb5, 0x76, 0x00, 0x00, 0x00, 0x00, 0x40, 0x35, 0xbd, 0x6b, 0xb0,
        ];
        let mut d = rx(true, false);
        let evs = run(&mut d, &fpdu).unwrap();
        assert_eq!(evs.len(), 3);
        match &evs[0].0 {
            Event::Header(h) => {
                assert_eq!(h.bytes(), &fpdu[2..20]);
                assert_eq!(h.ulpdu_len(), 34);
                assert_eq!(h.payload_len(), 16);
                assert!(!h.is_tagged());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            evs[1].0,
            Event::Payload {
                range: 20..36,
                offset: 18
            }
        );
        assert_eq!(evs[2].0, Event::End);
        assert!(d.is_idle());
        assert_eq!(d.position(), 40);
    }

    /// Fed a header one octet at a time (a TCP segment may end anywhere in it), the
    /// deframer says how many octets of it are still to come: the length field and an
    /// untagged header until the first header octet tells, then the header it starts.
    #[test]
    fn header_left_counts_down_to_the_payload() {
        for (ctrl, hdr) in [(0x41u8, UNTAGGED_HEADER_LEN), (0xc1, TAGGED_HEADER_LEN)] {
            let wire = Framer::new(TxConfig {
                crc: true,
                markers: false,
            })
            .frame_to_vec(&[&[ctrl; UNTAGGED_HEADER_LEN][..hdr], &[7u8; 100]]);
            let mut d = rx(true, false);
            assert_eq!(d.header_left(), None, "between FPDUs");
            let mut lefts = Vec::new();
            let mut at = 0;
            while at < 2 + hdr {
                let ev = d.next(&wire[..at + 1], &mut at).unwrap();
                assert_eq!(matches!(ev, Event::Header(_)), at == 2 + hdr, "octet {at}");
                lefts.push(d.header_left());
            }
            let mut want = vec![Some(1 + UNTAGGED_HEADER_LEN), Some(UNTAGGED_HEADER_LEN)];
            want.extend((1..hdr).rev().map(Some));
            want.push(None);
            assert_eq!(lefts, want, "ctrl {ctrl:#x}");
            // (the rest of the FPDU goes as always)
            let evs = run(&mut d, &wire[at..]).unwrap();
            assert!(matches!(evs.last(), Some((Event::End, _))));
            assert_eq!(d.header_left(), None);
        }
        // With markers the driver reads no headers on their own.
        let mut d = rx(true, true);
        let mut at = 0;
        let wire = Framer::new(TxConfig {
            crc: true,
            markers: true,
        })
        .frame_to_vec(&[&[0x41; UNTAGGED_HEADER_LEN], &[1u8; 8]]);
        let _ = d.next(&wire[..3], &mut at);
        assert_eq!(d.header_left(), None);
    }

    #[test]
    fn need_more_is_not_an_error_and_a_failure_sticks() {
        let wire = Framer::new(TxConfig {
            crc: true,
            markers: false,
        })
        .frame_to_vec(&[b"xy"]);
        let mut d = rx(true, false);
        let mut at = 0;
        assert_eq!(d.next(&wire[..1], &mut at), Ok(Event::NeedMore));
        assert!(!d.is_idle());
        let mut bad = wire.clone();
        bad[3] ^= 1;
        let mut at = 1;
        assert!(matches!(d.next(&bad, &mut at), Ok(Event::Header(_))));
        assert_eq!(d.next(&bad, &mut at), Err(ProtoError::Crc));
        assert_eq!(d.next(&wire, &mut 0), Err(ProtoError::Crc));
        assert_eq!(d.error(), Some(ProtoError::Crc));
    }

    #[test]
    fn zero_and_oversized_lengths_are_fatal() {
        let mut d = rx(false, false);
        assert_eq!(
            d.next(&[0, 0, 1, 2], &mut 0),
            Err(ProtoError::MarkerMismatch)
        );
        let mut d = Deframer::new(RxConfig {
            crc: false,
            markers: false,
            max_ulpdu: 100,
        });
        assert_eq!(d.next(&[0, 101], &mut 0), Err(ProtoError::MarkerMismatch));
        let mut d = Deframer::new(RxConfig {
            crc: false,
            markers: false,
            max_ulpdu: 100,
        });
        assert!(matches!(d.next(&[0, 100, 0], &mut 0), Ok(Event::NeedMore)));
    }

    #[test]
    fn wrong_fpduptr_is_a_marker_mismatch() {
        let mut wire = Framer::new(TxConfig {
            crc: false,
            markers: true,
        })
        .frame_to_vec(&[&[0u8; 600]]);
        wire[515] ^= 4; // the marker at 512 points 4 octets off
        let mut d = rx(false, true);
        assert_eq!(run(&mut d, &wire).err(), Some(ProtoError::MarkerMismatch));
        // The two low bits of FPDUPTR are ignored on receive.
        let mut wire = Framer::new(TxConfig {
            crc: false,
            markers: true,
        })
        .frame_to_vec(&[&[0u8; 600]]);
        wire[515] |= 3;
        wire[512] = 0xff; // RESERVED is ignored too (only the CRC would see it)
        let mut d = rx(false, true);
        assert!(run(&mut d, &wire).is_ok());
    }

    #[test]
    fn direct_placement_stops_at_markers() {
        let payload: Vec<u8> = (0..1200u32).map(|i| (i * 7) as u8).collect();
        let wire = Framer::new(TxConfig {
            crc: true,
            markers: true,
        })
        .frame_to_vec(&[&[0xc1; 14], &payload]);
        let mut d = rx(true, true);
        let mut at = 0;
        let mut placed = vec![0u8; payload.len()];
        assert!(matches!(d.next(&wire, &mut at), Ok(Event::Header(h)) if h.is_tagged()));
        assert_eq!(d.payload_run(), 512 - 20);
        let mut runs = Vec::new();
        loop {
            let run = d.payload_run();
            if run > 0 {
                let off = d.ulpdu_offset() - 14;
                placed[off..off + run].copy_from_slice(&wire[at..at + run]);
                d.consume_placed(&wire[at..at + run]);
                at += run;
                runs.push(run);
                continue;
            }
            // A marker (or the trailer) is next: read a few octets the ordinary way.
            let lim = (at + 4).min(wire.len());
            match d.next(&wire[..lim], &mut at).unwrap() {
                Event::End => break,
                Event::NeedMore => {}
                ev => panic!("payload must have been placed directly: {ev:?}"),
            }
        }
        assert_eq!(placed, payload);
        assert_eq!(runs, vec![492, 508, 200]);
        assert_eq!(d.next(&wire, &mut at), Ok(Event::NeedMore));
        assert!(d.is_idle());
    }

    /// The payload's CRC can be vouched for before its End event only when the pad and CRC
    /// follow in the same input and match; a flipped bit anywhere says no, and `next` then
    /// fails with `Crc` as always.
    /// `whole` takes exactly what `next` would (same header, payload, end position), only
    /// for a whole FPDU at a boundary without markers; a flipped bit is the same CRC error.
    #[test]
    fn whole_equals_next_for_whole_fpdus() {
        for (tagged, payload_len) in [(false, 0), (false, 1), (false, 64), (true, 3), (true, 1000)]
        {
            let mut ulpdu = vec![if tagged { 0xc1u8 } else { 0x41 }; if tagged { 14 } else { 18 }];
            ulpdu.extend((0..payload_len).map(|i| i as u8));
            let mut framer = Framer::new(TxConfig {
                crc: true,
                markers: false,
            });
            let mut wire = framer.frame_to_vec(&[&ulpdu]);
            let first = wire.len();
            wire.extend(framer.frame_to_vec(&[&ulpdu]));
            // `next`, event by event
            let mut a = rx(true, false);
            let want = run(&mut a, &wire).expect("good FPDUs");
            // `whole` twice, then nothing left
            let mut b = rx(true, false);
            let mut at = 0;
            for k in 0..2 {
                let w = b.whole(&wire, &mut at).expect("applies");
                let mut got = vec![(Event::Header(w.header), Vec::new())];
                if !w.payload.is_empty() {
                    got.push((
                        Event::Payload {
                            range: w.payload.clone(),
                            offset: w.header.bytes().len(),
                        },
                        wire[w.payload.clone()].to_vec(),
                    ));
                }
                got.push((Event::End, Vec::new()));
                let n = got.len();
                let exp: Vec<_> = want[k * n..(k + 1) * n].to_vec();
                assert_eq!(got, exp, "tagged {tagged}, {payload_len} bytes, FPDU {k}");
                assert_eq!(at, first * (k + 1));
            }
            assert_eq!(b.position(), a.position());
            assert!(b.whole(&wire, &mut at).is_none(), "nothing left");
            // not whole: None, nothing consumed; the normal path still works from there
            let mut c = rx(true, false);
            let mut at = 0;
            assert!(c.whole(&wire[..first - 1], &mut at).is_none());
            assert_eq!(at, 0);
            assert!(run(&mut c, &wire[..first]).is_ok());
            // mid-FPDU: None
            let mut d = rx(true, false);
            let mut at = 0;
            assert!(matches!(d.next(&wire[..3], &mut at), Ok(Event::NeedMore)));
            assert!(d.whole(&wire, &mut at).is_none());
            // a flipped payload or CRC bit: not taken; `next` reports it as always
            for flip in [first - 1, 2 + 2] {
                let mut bad = wire.clone();
                bad[flip] ^= 4;
                let mut e = rx(true, false);
                let mut at = 0;
                assert!(e.whole(&bad, &mut at).is_none());
                assert_eq!(at, 0);
                assert_eq!(run(&mut e, &bad), Err(ProtoError::Crc));
            }
        }
        // markers on, or an implausible length: never
        let mut m = rx(true, true);
        let mut at = 0;
        assert!(m.whole(&[0u8; 64], &mut at).is_none());
        let mut z = rx(true, false);
        assert!(z.whole(&[0u8; 64], &mut at).is_none());
        assert_eq!(z.next(&[0u8; 64], &mut at), Err(ProtoError::MarkerMismatch));
    }

    #[test]
    fn verified_ahead_only_for_a_complete_good_fpdu() {
        let payload = [0x5au8; 23]; // a 1-octet pad after the 18-octet header + 23
        let mut ulpdu = vec![0x41u8; 18];
        ulpdu.extend_from_slice(&payload);
        let wire = Framer::new(TxConfig {
            crc: true,
            markers: false,
        })
        .frame_to_vec(&[&ulpdu]);
        // Reads up to the end of the payload; returns (deframer, end of the payload).
        let at_payload_end = |input: &[u8]| {
            let mut d = rx(true, false);
            let mut at = 0;
            loop {
                match d.next(input, &mut at).expect("no error before the CRC") {
                    Event::Payload { range, .. } if range.end == 2 + 18 + 23 => return (d, at),
                    Event::NeedMore => panic!("payload end not reached"),
                    _ => {}
                }
            }
        };
        let (d, at) = at_payload_end(&wire);
        assert!(d.verified_ahead(&wire, at));
        // the CRC field not (wholly) in this input: cannot tell
        assert!(!d.verified_ahead(&wire[..wire.len() - 1], at));
        for flip in [5usize, 30, wire.len() - 2] {
            let mut bad = wire.clone();
            bad[flip] ^= 0x10;
            let (d, mut at) = at_payload_end(&bad);
            assert!(!d.verified_ahead(&bad, at), "flip at {flip}");
            let mut d = d;
            let end = loop {
                match d.next(&bad, &mut at) {
                    Ok(Event::NeedMore) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(e),
                }
            };
            assert_eq!(end, Err(ProtoError::Crc), "flip at {flip}");
        }
        // in the middle of a payload (a piece of it): no
        let mut d = rx(true, false);
        let mut at = 0;
        let part = &wire[..2 + 18 + 10];
        while d.next(part, &mut at) != Ok(Event::NeedMore) {}
        assert!(!d.verified_ahead(part, at));
        // CRC off: nothing to verify
        let mut d = rx(false, false);
        let mut at = 0;
        while d.next(part, &mut at) != Ok(Event::NeedMore) {}
        assert!(d.verified_ahead(part, at));
        // markers on (one may fall into the pad or CRC): not vouched for
        let wire_m = Framer::new(TxConfig {
            crc: true,
            markers: true,
        })
        .frame_to_vec(&[&ulpdu]);
        let mut d = rx(true, true);
        let mut at = 0;
        loop {
            match d.next(&wire_m, &mut at).unwrap() {
                Event::Payload { .. } if d.ulpdu_offset() == 18 + 23 => break,
                Event::NeedMore => panic!("payload end not reached"),
                _ => {}
            }
        }
        assert!(!d.verified_ahead(&wire_m, at));
    }
}
