//! An in-memory pair of connections (quinn-proto's test `Pair`, for iWARP): two
//! [`Connection`]s over [`VecMemory`], a virtual clock, arbitrary re-chunking of the byte
//! streams (1-byte chunks included), optional direct placement, and fault injection (bit
//! flips, truncation). Included by the `conn_*` tests with `#[path = "conn_harness.rs"]`;
//! compiled on its own it is an empty test crate.
#![allow(dead_code)]

use core::time::Duration;

use ddp_proto::conn::{ConnConfig, Connection, DirectTarget, Event, RecvMode, Role, RxPlan};
use ddp_proto::ddp::Memory;
use ddp_proto::ddp::mem_vec::VecMemory;
use ddp_proto::error::TermCode;
use ddp_proto::mpa::deframer::{Deframer, Event as DfEvent, RxConfig};
use ddp_proto::mpa::framer::{Framer, TxConfig};
use ddp_proto::mpa::startup::{Negotiated, RtrKind};
use ddp_proto::wire::rdmap::{RdmapBody, RdmapHeader, TerminateHeader};

/// Address of the first byte of each side's memory.
pub const BASE: u64 = 0x10_0000;

/// A small deterministic RNG (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

/// How the byte stream is cut into reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunking {
    /// Everything available at once.
    Whole,
    /// One byte at a time.
    Bytes,
    /// Random sizes 1..=max.
    Random(usize),
}

/// Pair options.
#[derive(Debug, Clone)]
pub struct Opts {
    pub crc: bool,
    pub markers: bool,
    pub mulpdu: usize,
    pub mode_a: RecvMode,
    pub mode_b: RecvMode,
    pub ird_a: u16,
    pub ord_a: u16,
    pub ird_b: u16,
    pub ord_b: u16,
    pub rtr: Option<RtrKind>,
    pub chunking: Chunking,
    pub direct: bool,
    /// Room of the simulated reader's buffer for unverified stream data (random up to
    /// this, per session; sessions end at random and at the end of each feed).
    pub sink: usize,
    pub mem_size: usize,
    pub seed: u64,
    pub pd: u32,
    /// Each read is offered to `Connection::take_stream_sends` first (as the driver's
    /// small-message round does), and only what it leaves goes to `handle_input`.
    pub take_sends: bool,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            crc: true,
            markers: false,
            mulpdu: 1454,
            mode_a: RecvMode::Posted,
            mode_b: RecvMode::Posted,
            ird_a: 4,
            ord_a: 4,
            ird_b: 4,
            ord_b: 4,
            rtr: None,
            chunking: Chunking::Whole,
            direct: false,
            sink: 0,
            mem_size: 1 << 16,
            seed: 1,
            pd: 1,
            take_sends: false,
        }
    }
}

pub fn negotiated(o: &Opts, ird: u16, ord: u16) -> Negotiated {
    Negotiated {
        revision: 2,
        crc: o.crc,
        markers_tx: o.markers,
        markers_rx: o.markers,
        enhanced: true,
        ird,
        ord,
        p2p: o.rtr.is_some(),
        rtr: o.rtr,
        peer_params: None,
        peer_private_data: Vec::new(),
        initiator_sends_rtr: o.rtr.is_some(),
        responder_expects_rtr: o.rtr.is_some(),
    }
}

/// One end.
pub struct Side {
    pub conn: Connection,
    pub mem: VecMemory,
    pub events: Vec<Event>,
    /// Bytes sent to this side not yet fed.
    pub inbox: Vec<u8>,
    /// Everything this side sent, in order (as it left, before faults).
    pub sent: Vec<u8>,
    /// The length of each `Transmit` this side framed, in order.
    pub transmits: Vec<usize>,
    pub errors: Vec<ddp_proto::error::ProtoError>,
}

impl Side {
    pub fn completions(&self) -> Vec<ddp_proto::conn::Completion> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Completion(c) => Some(*c),
                _ => None,
            })
            .collect()
    }
    pub fn recv_completions(&self) -> Vec<ddp_proto::conn::Completion> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::RecvCompletion(c) => Some(*c),
                _ => None,
            })
            .collect()
    }
    pub fn closed(&self) -> bool {
        self.events.iter().any(|e| matches!(e, Event::Closed))
    }
    pub fn peer_terminated(&self) -> Option<TerminateHeader> {
        self.events.iter().find_map(|e| match e {
            Event::PeerTerminated(t) => Some(*t),
            _ => None,
        })
    }
    pub fn error_events(&self) -> Vec<ddp_proto::error::ProtoError> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Error(x) => Some(*x),
                _ => None,
            })
            .collect()
    }
}

/// A fault on the stream towards one side.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Flip bit `bit` of the byte at stream offset `at`.
    Flip { at: usize, bit: u8 },
    /// Deliver only the first `len` bytes, then nothing.
    Truncate { len: usize },
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Duration,
    pub opts: Opts,
    rng: Rng,
    /// Faults on the stream to a / to b.
    pub fault_to_a: Option<Fault>,
    pub fault_to_b: Option<Fault>,
    fed_to_a: usize,
    fed_to_b: usize,
}

fn side(role: Role, o: &Opts, ird: u16, ord: u16, mode: RecvMode) -> Side {
    let mut cfg = ConnConfig::new(o.mulpdu, mode, o.pd);
    cfg.max_transmit = 64 * 1024;
    let mut mem = VecMemory::new(BASE, o.mem_size);
    mem.fill_pattern(o.seed ^ role as u64 ^ 0x77);
    Side {
        conn: Connection::new(role, &negotiated(o, ird, ord), cfg).expect("valid config"),
        mem,
        events: Vec::new(),
        inbox: Vec::new(),
        sent: Vec::new(),
        transmits: Vec::new(),
        errors: Vec::new(),
    }
}

impl Pair {
    pub fn new(o: Opts) -> Pair {
        Pair {
            a: side(Role::Initiator, &o, o.ird_a, o.ord_a, o.mode_a),
            b: side(Role::Responder, &o, o.ird_b, o.ord_b, o.mode_b),
            now: Duration::ZERO,
            rng: Rng::new(o.seed),
            opts: o,
            fault_to_a: None,
            fault_to_b: None,
            fed_to_a: 0,
            fed_to_b: 0,
        }
    }

    /// Moves bytes until neither side has anything to send or feed. Returns the number of
    /// rounds.
    pub fn drive(&mut self) -> usize {
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds < 1_000_000, "pair does not converge");
            let mut moved = false;
            moved |= transmit(&mut self.a, &mut self.b.inbox);
            moved |= transmit(&mut self.b, &mut self.a.inbox);
            moved |= self.feed(true);
            moved |= self.feed(false);
            self.now += Duration::from_micros(10);
            if !moved {
                return rounds;
            }
        }
    }

    fn feed(&mut self, to_b: bool) -> bool {
        let (s, fault, fed) = if to_b {
            (&mut self.b, self.fault_to_b, &mut self.fed_to_b)
        } else {
            (&mut self.a, self.fault_to_a, &mut self.fed_to_a)
        };
        if s.inbox.is_empty() {
            return false;
        }
        let mut data = core::mem::take(&mut s.inbox);
        let mut limit = data.len();
        match fault {
            Some(Fault::Flip { at, bit }) if at >= *fed && at < *fed + data.len() => {
                data[at - *fed] ^= 1 << bit;
            }
            Some(Fault::Truncate { len }) => limit = len.saturating_sub(*fed).min(data.len()),
            _ => {}
        }
        let mut off = 0;
        let sink = self.opts.sink;
        let session = |s: &mut Side, rng: &mut Rng| {
            s.conn.unplace_stream(&s.mem);
            s.mem.unverified.clear();
            s.mem.stream_sink = if sink > 0 {
                rng.below(sink as u64 + 1) as usize
            } else {
                0
            };
        };
        session(s, &mut self.rng);
        while off < limit {
            if sink > 0 && self.rng.below(8) == 0 {
                session(s, &mut self.rng);
            }
            let plan = match s.conn.rx_plan() {
                RxPlan::Direct {
                    target: DirectTarget::Stream { at, left },
                    ..
                } if s.mem.stream_room(at) < left => RxPlan::Buffered,
                p => p,
            };
            // direct placement when offered
            if self.opts.direct
                && let RxPlan::Direct { target, len } = plan
            {
                let n = len
                    .min(limit - off)
                    .min(chunk(&mut self.rng, self.opts.chunking, len));
                let bytes = &data[off..off + n];
                match target {
                    DirectTarget::Stream { at, .. } => s.mem.stream_place(at, bytes),
                    DirectTarget::Local { addr } => s.mem.fill(addr, bytes),
                    DirectTarget::Region { stag, offset } => {
                        let base = s.mem.region(stag).expect("validated").base;
                        s.mem.fill(base + offset, bytes);
                    }
                }
                s.conn.placed_direct(n, &mut s.mem);
                off += n;
                drain_events(s);
                continue;
            }
            // with direct placement, read headers in small pieces so payload can go direct
            let want = if self.opts.direct {
                24.min(limit - off)
            } else {
                limit - off
            };
            let n = chunk(&mut self.rng, self.opts.chunking, want);
            let mut at = 0;
            if self.opts.take_sends {
                let mut out = Vec::new();
                s.conn
                    .take_stream_sends(&data[off..off + n], &mut at, &mut out);
                s.mem.deliver_stream(&out);
            }
            if at < n
                && let Err(e) = s.conn.handle_input(&data[off + at..off + n], &mut s.mem)
            {
                s.errors.push(e);
            }
            off += n;
            drain_events(s);
        }
        session(s, &mut self.rng);
        *fed += data.len();
        true
    }
}

fn chunk(rng: &mut Rng, c: Chunking, avail: usize) -> usize {
    match c {
        Chunking::Whole => avail,
        Chunking::Bytes => 1,
        Chunking::Random(max) => (1 + rng.below(max as u64) as usize).min(avail),
    }
    .max(1)
    .min(avail)
}

pub fn drain_events(s: &mut Side) {
    while let Some(e) = s.conn.poll_event() {
        s.events.push(e);
    }
}

fn transmit(s: &mut Side, to: &mut Vec<u8>) -> bool {
    let mut moved = false;
    // A driver skips `poll_transmit` when `transmit_idle` says so: it must never be wrong.
    let idle = s.conn.transmit_idle();
    while let Some(t) = s.conn.poll_transmit(&s.mem) {
        assert!(
            !idle,
            "transmit_idle was true, yet {} bytes were framed",
            t.len()
        );
        let bytes = t.gather(&s.mem);
        assert_eq!(bytes.len(), t.len());
        s.sent.extend_from_slice(&bytes);
        s.transmits.push(bytes.len());
        to.extend_from_slice(&bytes);
        s.conn.on_written(bytes.len() as u64);
        moved = true;
    }
    drain_events(s);
    moved
}

/// Splits an FPDU stream (no faults) into its ULPDUs.
pub fn ulpdus(stream: &[u8], crc: bool, markers: bool) -> Vec<Vec<u8>> {
    let mut d = Deframer::new(RxConfig {
        crc,
        markers,
        max_ulpdu: 65535,
    });
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut at = 0;
    loop {
        match d.next(stream, &mut at).expect("clean stream") {
            DfEvent::Header(h) => cur = h.bytes().to_vec(),
            DfEvent::Payload { range, .. } => cur.extend_from_slice(&stream[range]),
            DfEvent::End => out.push(core::mem::take(&mut cur)),
            DfEvent::NeedMore => break,
        }
    }
    out
}

/// The Terminate a side sent (parsed from its output), if any.
pub fn sent_terminate(s: &Side, crc: bool, markers: bool) -> Option<TerminateHeader> {
    ulpdus(&s.sent, crc, markers)
        .iter()
        .find_map(|u| match RdmapHeader::parse(u) {
            Ok((
                RdmapHeader {
                    body: RdmapBody::Terminate(t),
                    ..
                },
                _,
            )) => Some(t),
            _ => None,
        })
}

/// Frames `ulpdu` as a lone FPDU (no markers) for injection.
pub fn fpdu(ulpdu: &[u8], crc: bool) -> Vec<u8> {
    Framer::new(TxConfig {
        crc,
        markers: false,
    })
    .frame_to_vec(&[ulpdu])
}

/// Emits a header (plus payload) into a ULPDU.
pub fn ulpdu(h: &RdmapHeader, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0; h.buffer_len()];
    h.emit(&mut b).expect("emit");
    b.extend_from_slice(payload);
    b
}

/// `(layer, etype, ecode)` of a code.
pub fn raw(c: TermCode) -> (u8, u8, u8) {
    (c.layer.to_raw(), c.etype, c.ecode)
}
