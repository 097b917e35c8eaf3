//! Two iWARP endpoints in memory, no sockets: the MPA exchange, then Send/Recv, an RDMA
//! Write into a registered region of the peer, an RDMA Read back from it, a Send with
//! Invalidate of that region, and a graceful close, all through the real
//! [`Connection`] objects over a [`VecMemory`] on each side.
//!
//! A wire tap decodes every byte each side transmitted, independently of the connections:
//! MPA Request/Reply with [`MpaFrameRepr`], then the FPDU stream with a [`Deframer`] (its
//! CRC and marker settings taken from the decoded MPA flags) and [`RdmapHeader::parse`].
//! Every payload byte that moved is compared with its source; any mismatch, error event or
//! Terminate fails the run (exit status 1).
//!
//! ```text
//! cargo run -p ddp-proto --example exchange -- [--markers] [--no-crc] [--size N] [-v]
//! ```
//!
//! `->` is initiator to responder, `<-` responder to initiator. Consecutive segments of one
//! message are shown as one line ("x3 segments") unless `-v` is given.

use core::time::Duration;
use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::process::ExitCode;

use ddp_proto::conn::{
    Completion, ConnConfig, Connection, Event, RecvMode, Role, SendFlags, WcOpcode, WcStatus,
};
use ddp_proto::ddp::mem_vec::VecMemory;
use ddp_proto::ddp::{Access, Memory, STag, Sge};
use ddp_proto::mpa::deframer::{Deframer, Event as DfEvent, RxConfig};
use ddp_proto::mpa::markers::{MAX_ULPDU_LEN, fpdu_len_without_markers, mulpdu};
use ddp_proto::mpa::startup::{Initiator, MpaConfig, Negotiated, Responder};
use ddp_proto::wire::ddp::DdpBuffer;
use ddp_proto::wire::mpa::{HEADER_LEN, MpaFrameKind, MpaFrameRepr};
use ddp_proto::wire::rdmap::{Opcode, RdmapHeader, RdmapMessage};

type Result<T = (), E = Box<dyn Error>> = core::result::Result<T, E>;

/// Fails the run with a message unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+).into());
        }
    };
}

/// Private data of the MPA Request (and of the Reply).
const PRIVATE_DATA: &[u8] = b"exsock demo";
/// Protection domain of both sides.
const PD: u32 = 1;
/// Effective MSS of the pretend TCP connection (Ethernet, IPv4, TCP timestamps).
const EMSS: usize = 1448;
/// The largest --size accepted (each side allocates about twice this).
const MAX_SIZE: usize = 64 << 20;

/// Memory layout. Each side's address space starts at its own base, so the Tagged Offsets on
/// the wire are visibly the responder's addresses.
const A_BASE: u64 = 0x10_0000;
const B_BASE: u64 = 0x20_0000;
const SMALL: u64 = 0x100; // room for each small message buffer
const BULK_AT: u64 = 0x1000; // offset of the first bulk buffer

const HELLO: &[u8] = b"hello from the exsock initiator!";
const GOODBYE: &[u8] = b"done with your buffer: invalidate it";

struct Args {
    markers: bool,
    crc: bool,
    size: usize,
    verbose: bool,
}

fn usage() -> String {
    "usage: exchange [--markers] [--no-crc] [--size N[k|M]] [-v]".to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        markers: false,
        crc: true,
        size: 4096,
        verbose: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--markers" => a.markers = true,
            "--no-crc" => a.crc = false,
            "-v" | "--verbose" => a.verbose = true,
            "--size" => {
                let v = it.next().ok_or_else(usage)?;
                a.size = parse_size(&v).ok_or_else(|| format!("bad --size {v:?}\n{}", usage()))?;
            }
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if a.size == 0 || a.size > MAX_SIZE {
        return Err(format!("--size must be 1..={MAX_SIZE}"));
    }
    Ok(a)
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exchange: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

// ------------------------------------------------------------------------------ the wire tap

/// A direction on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Initiator to responder.
    Out,
    /// Responder to initiator.
    Back,
}

impl Dir {
    fn arrow(self) -> &'static str {
        match self {
            Dir::Out => "->",
            Dir::Back => "<-",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// One decoded FPDU.
#[derive(Debug, Clone)]
struct Fpdu {
    dir: Dir,
    /// Octets on the wire: length field, ULPDU, pad, CRC and the markers in front of/inside it.
    wire_len: usize,
    markers: usize,
    header: RdmapHeader,
    /// ULP payload octets after the RDMAP header.
    payload: usize,
    /// The CRC was checked (and matched: a mismatch stops the decoder).
    crc: bool,
}

/// What the tap saw, in the order it was sent.
#[derive(Debug, Clone)]
enum Record {
    Mpa { dir: Dir, line: String },
    Fpdu(Fpdu),
    Fin { dir: Dir, note: &'static str },
}

/// The decoded MPA flags that decide how FPDUs are framed.
#[derive(Debug, Clone, Copy)]
struct MpaFlags {
    markers: bool,
    crc: bool,
}

/// The decoder of one direction.
#[derive(Default)]
struct Tap {
    /// Octets not yet decoded (the MPA frame while it is incomplete, or FPDU octets that
    /// arrived before the framing was known).
    pending: Vec<u8>,
    frame: Option<MpaFlags>,
    deframer: Option<Deframer>,
    last_end: u64,
    /// The first octets of the current ULPDU (enough for any RDMAP header).
    prefix: Vec<u8>,
    ulpdu_len: usize,
}

/// Longest RDMAP header: untagged DDP (18) + Terminate with both header copies (52).
const MAX_HEADER: usize = 70;

/// Both directions of the wire, decoded as bytes are written.
#[derive(Default)]
struct Wire {
    taps: [Tap; 2],
    log: Vec<Record>,
    /// Records already printed.
    shown: usize,
}

impl Wire {
    /// Decodes octets `dir` transmitted.
    fn observe(&mut self, dir: Dir, bytes: &[u8]) -> Result {
        self.taps[dir.index()].pending.extend_from_slice(bytes);
        self.decode(dir)?;
        // the Reply fixes the framing of both directions: the other tap may now go on
        let other = if dir == Dir::Out { Dir::Back } else { Dir::Out };
        self.decode(other)
    }

    /// How FPDUs in `dir` are framed, once both MPA frames were decoded: CRC if either frame
    /// has C, markers if the *receiver's* frame has M (RFC 5044 §7.1.1).
    fn framing(&self, dir: Dir) -> Option<RxConfig> {
        let (req, rep) = (self.taps[0].frame?, self.taps[1].frame?);
        let receiver = if dir == Dir::Out { rep } else { req };
        Some(RxConfig {
            crc: req.crc || rep.crc,
            markers: receiver.markers,
            max_ulpdu: MAX_ULPDU_LEN,
        })
    }

    fn decode(&mut self, dir: Dir) -> Result {
        let i = dir.index();
        if self.taps[i].frame.is_none() {
            let t = &mut self.taps[i];
            if t.pending.len() < HEADER_LEN {
                return Ok(());
            }
            let pd_len = usize::from(u16::from_be_bytes([t.pending[18], t.pending[19]]));
            if t.pending.len() < HEADER_LEN + pd_len {
                return Ok(());
            }
            let frame = MpaFrameRepr::parse_bytes(&t.pending)
                .map_err(|e| format!("{} MPA frame does not decode: {e}", dir.arrow()))?;
            let expected = if dir == Dir::Out {
                MpaFrameKind::Request
            } else {
                MpaFrameKind::Reply
            };
            ensure!(
                frame.kind == expected,
                "{} {:?}, expected {expected:?}",
                dir.arrow(),
                frame.kind
            );
            let flags = MpaFlags {
                markers: frame.markers,
                crc: frame.crc,
            };
            let (line, len) = (mpa_line(&frame), frame.buffer_len());
            t.frame = Some(flags);
            t.pending.drain(..len);
            self.log.push(Record::Mpa { dir, line });
        }
        if self.taps[i].deframer.is_none() {
            match self.framing(dir) {
                Some(cfg) => self.taps[i].deframer = Some(Deframer::new(cfg)),
                None => return Ok(()),
            }
        }
        let t = &mut self.taps[i];
        let input = core::mem::take(&mut t.pending);
        let d = t.deframer.as_mut().expect("set above");
        let mut at = 0;
        loop {
            let ev = d
                .next(&input, &mut at)
                .map_err(|e| format!("{} FPDU stream does not decode: {e}", dir.arrow()))?;
            match ev {
                DfEvent::Header(h) => {
                    t.prefix.clear();
                    t.prefix.extend_from_slice(h.bytes());
                    t.ulpdu_len = h.ulpdu_len();
                }
                DfEvent::Payload { range, .. } => {
                    let room = MAX_HEADER.saturating_sub(t.prefix.len());
                    let take = range.len().min(room);
                    t.prefix
                        .extend_from_slice(&input[range.start..range.start + take]);
                }
                DfEvent::End => {
                    let (header, hlen) = RdmapHeader::parse(&t.prefix)
                        .map_err(|e| format!("{} ULPDU header does not parse: {e}", dir.arrow()))?;
                    let wire_len = (d.position() - t.last_end) as usize;
                    t.last_end = d.position();
                    self.log.push(Record::Fpdu(Fpdu {
                        dir,
                        wire_len,
                        markers: (wire_len - fpdu_len_without_markers(t.ulpdu_len)) / 4,
                        header,
                        payload: t.ulpdu_len - hlen,
                        crc: d.config().crc,
                    }));
                }
                DfEvent::NeedMore => break,
            }
        }
        Ok(())
    }

    /// Whether the decoder of `dir` stands between FPDUs (nothing half-decoded).
    fn idle(&self, dir: Dir) -> bool {
        let t = &self.taps[dir.index()];
        t.pending.is_empty() && t.deframer.as_ref().is_some_and(Deframer::is_idle)
    }

    /// Prints what was decoded since the last call.
    fn show(&mut self, verbose: bool) {
        let new = &self.log[self.shown..];
        self.shown = self.log.len();
        let mut i = 0;
        while i < new.len() {
            match &new[i] {
                Record::Mpa { dir, line } => println!("{} {line}", dir.arrow()),
                Record::Fin { dir, note } => println!("{} TCP FIN  {note}", dir.arrow()),
                Record::Fpdu(first) => {
                    // the segments of one message: same direction and message, up to L
                    let mut group = vec![first];
                    while !verbose && !group.last().expect("non-empty").header.last() {
                        match new.get(i + group.len()) {
                            Some(Record::Fpdu(f)) if same_message(first, f) => group.push(f),
                            _ => break,
                        }
                    }
                    println!("{}", fpdu_line(&group));
                    i += group.len() - 1;
                }
            }
            i += 1;
        }
    }
}

/// Whether `f` continues the message `first` started.
fn same_message(first: &Fpdu, f: &Fpdu) -> bool {
    if f.dir != first.dir || f.header.opcode() != first.header.opcode() {
        return false;
    }
    match (first.header.ddp.buffer, f.header.ddp.buffer) {
        (DdpBuffer::Tagged { stag: a, .. }, DdpBuffer::Tagged { stag: b, .. }) => a == b,
        (
            DdpBuffer::Untagged {
                qn: qa, msn: ma, ..
            },
            DdpBuffer::Untagged {
                qn: qb, msn: mb, ..
            },
        ) => qa == qb && ma == mb,
        _ => false,
    }
}

fn mpa_line(f: &MpaFrameRepr<'_>) -> String {
    let kind = match f.kind {
        MpaFrameKind::Request => "Request",
        MpaFrameKind::Reply => "Reply  ",
    };
    let mut s = format!(
        "MPA {kind}  rev {}  {}  markers:{}",
        f.revision,
        if f.crc { "CRC" } else { "no CRC" },
        if f.markers { "yes" } else { "no" },
    );
    if f.reject {
        s.push_str("  REJECT");
    }
    if let Some(p) = f.v2_params() {
        let _ = write!(s, "  IRD {} ORD {}", p.ird, p.ord);
        if p.p2p {
            s.push_str("  P2P");
        }
    }
    let _ = write!(
        s,
        "  pd \"{}\"",
        String::from_utf8_lossy(f.ulp_private_data()).escape_debug()
    );
    s
}

/// Short opcode names for the per-frame lines.
fn short_name(op: Opcode) -> String {
    match op {
        Opcode::Write => "RDMA Write".into(),
        Opcode::ReadRequest => "Read Request".into(),
        Opcode::ReadResponse => "Read Response".into(),
        Opcode::Send => "Send".into(),
        Opcode::SendInvalidate => "Send Inv".into(),
        Opcode::SendSe => "Send SE".into(),
        Opcode::SendSeInvalidate => "Send SE Inv".into(),
        Opcode::Terminate => "Terminate".into(),
        Opcode::Unknown(v) => format!("opcode {v:#x}"),
    }
}

/// One line for a message's segments (one segment unless collapsed): where the first segment
/// goes, L if the last one has it, then what the message carries.
fn fpdu_line(group: &[&Fpdu]) -> String {
    let first = group[0];
    let last = group[group.len() - 1];
    let wire: usize = group.iter().map(|f| f.wire_len).sum();
    let payload: usize = group.iter().map(|f| f.payload).sum();
    let markers: usize = group.iter().map(|f| f.markers).sum();
    let (place, carries) = match first.header.message() {
        RdmapMessage::Write { sink_stag, sink_to }
        | RdmapMessage::ReadResponse { sink_stag, sink_to } => {
            (format!("STag {sink_stag} TO {sink_to:#x}"), String::new())
        }
        RdmapMessage::Send { msn, mo } | RdmapMessage::SendSe { msn, mo } => {
            (format!("QN 0 MSN {msn} MO {mo}"), String::new())
        }
        RdmapMessage::SendInvalidate {
            msn,
            mo,
            inval_stag,
        }
        | RdmapMessage::SendSeInvalidate {
            msn,
            mo,
            inval_stag,
        } => (
            format!("QN 0 MSN {msn} MO {mo}"),
            format!("  invalidate {inval_stag}"),
        ),
        RdmapMessage::ReadRequest { msn, mo, body } => (
            format!("QN 1 MSN {msn} MO {mo}"),
            format!(
                "  read {} B at STag {} TO {:#x}",
                body.read_size, body.source_stag, body.source_to
            ),
        ),
        RdmapMessage::Terminate { msn, mo, term } => (
            format!("QN 2 MSN {msn} MO {mo}"),
            format!("  {:?}", term.code),
        ),
        RdmapMessage::Unexpected { tagged, .. } => {
            (format!("T {}", u8::from(tagged)), String::new())
        }
    };
    let mut s = format!(
        "{} FPDU {wire:>6} B  {:<13}  {place}{}{carries}",
        first.dir.arrow(),
        short_name(first.header.opcode()),
        if last.header.last() { "  L" } else { "" },
    );
    if !matches!(
        first.header.opcode(),
        Opcode::ReadRequest | Opcode::Terminate
    ) {
        let _ = write!(s, "  payload {payload} B");
    }
    if group.len() > 1 {
        let _ = write!(s, "  x{} segments", group.len());
    }
    if markers > 0 {
        let _ = write!(
            s,
            "  {markers} marker{}",
            if markers == 1 { "" } else { "s" }
        );
    }
    s.push_str(if first.crc { "  CRC ok" } else { "  no CRC" });
    s
}

// ------------------------------------------------------------------------------ the endpoints

/// One endpoint: its connection, its memory, and the events it reported.
struct Side {
    name: &'static str,
    conn: Connection,
    mem: VecMemory,
    events: Vec<Event>,
}

impl Side {
    fn new(
        name: &'static str,
        role: Role,
        neg: &Negotiated,
        base: u64,
        size: usize,
    ) -> Result<Side> {
        let cfg = ConnConfig::new(mulpdu(EMSS, neg.markers_tx), RecvMode::Posted, PD);
        let mut mem = VecMemory::new(base, size);
        mem.fill_pattern(base); // a different pattern on each side: nothing matches by chance
        Ok(Side {
            name,
            conn: Connection::new(role, neg, cfg)?,
            mem,
            events: Vec::new(),
        })
    }

    /// Collects events; any error or Terminate fails the run.
    fn drain_events(&mut self) -> Result {
        while let Some(e) = self.conn.poll_event() {
            match &e {
                Event::Error(err) => return Err(format!("{}: error {err}", self.name).into()),
                Event::PeerTerminated(t) => {
                    return Err(format!("{}: peer sent Terminate {:?}", self.name, t.code).into());
                }
                _ => {}
            }
            self.events.push(e);
        }
        Ok(())
    }

    /// Removes and returns the completion of `wr_id` (send queue or receive queue); it must
    /// exist and be successful.
    fn completion(&mut self, wr_id: u64) -> Result<Completion> {
        let pos = self.events.iter().position(|e| match e {
            Event::Completion(c) | Event::RecvCompletion(c) => c.wr_id == wr_id,
            _ => false,
        });
        let Some(pos) = pos else {
            return Err(format!("{}: no completion for work request {wr_id}", self.name).into());
        };
        let (Event::Completion(c) | Event::RecvCompletion(c)) = self.events.remove(pos) else {
            unreachable!("matched above");
        };
        ensure!(
            c.status == WcStatus::Success,
            "{}: work request {wr_id} completed with {:?}",
            self.name,
            c.status
        );
        Ok(c)
    }
}

/// Writes everything `from` has to send into the wire tap and into `to`, as a driver would
/// with `writev` and `read`. Returns whether anything moved.
fn transmit(from: &mut Side, to: &mut Side, dir: Dir, wire: &mut Wire) -> Result<bool> {
    let mut moved = false;
    while let Some(t) = from.conn.poll_transmit(&from.mem) {
        let bytes = t.gather(&from.mem);
        wire.observe(dir, &bytes)?;
        to.conn
            .handle_input(&bytes, &mut to.mem)
            .map_err(|e| format!("{} refused what it received: {e}", to.name))?;
        from.conn.on_written(bytes.len() as u64);
        moved = true;
        from.drain_events()?;
        to.drain_events()?;
    }
    from.drain_events()?;
    Ok(moved)
}

/// Moves bytes both ways until neither side has anything left to send.
fn pump(a: &mut Side, b: &mut Side, wire: &mut Wire, now: &mut Duration) -> Result {
    loop {
        *now += Duration::from_micros(10);
        let moved_out = transmit(a, b, Dir::Out, wire)?;
        let moved_back = transmit(b, a, Dir::Back, wire)?;
        if !moved_out && !moved_back {
            return Ok(());
        }
    }
}

/// Compares a byte range that was moved with its source.
fn verify(what: &str, got: &[u8], want: &[u8], verified: &mut Vec<(String, usize)>) -> Result {
    ensure!(
        got.len() == want.len(),
        "{what}: {} bytes arrived, {} sent",
        got.len(),
        want.len()
    );
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        return Err(format!(
            "{what}: byte {i} differs: {:#04x} arrived, {:#04x} sent",
            got[i], want[i]
        )
        .into());
    }
    verified.push((what.to_string(), got.len()));
    Ok(())
}

// ------------------------------------------------------------------------------ the exchange

/// Announces a step of the exchange (the wire lines that follow are decoded, not announced).
fn step(what: &str) {
    println!("== {what}");
}

fn run(args: &Args) -> Result {
    let mut wire = Wire::default();
    let result = exchange(args, &mut wire);
    if result.is_err() {
        wire.show(args.verbose); // what was decoded up to the failure
    }
    result
}

fn exchange(args: &Args, wire: &mut Wire) -> Result {
    let n = args.size;
    let n32 = u32::try_from(n)?;
    let bulk = (n as u64).next_multiple_of(0x1000);
    let mut now = Duration::ZERO;
    let mut verified: Vec<(String, usize)> = Vec::new();

    println!(
        "Two iWARP endpoints in memory; every line below is decoded from the bytes one side sent \
         (-> initiator to responder, <- back)."
    );

    // ---- MPA Request / Reply (RFC 5044 §7.1, RFC 6581)
    step("MPA exchange: revision 2, IRD/ORD, private data");
    let cfg = MpaConfig {
        revision: 2,
        want_crc: args.crc,
        markers_rx: args.markers,
        allow_markers_tx: args.markers,
        ird: 4,
        ord: 4,
        private_data: PRIVATE_DATA.to_vec(),
        ..MpaConfig::siw_compat()
    };
    let mut ini = Initiator::new(cfg.clone(), now)?;
    let mut resp = Responder::new(cfg, now)?;
    let request = ini.poll_transmit().ok_or("initiator has no MPA Request")?;
    wire.observe(Dir::Out, &request)?;
    ensure!(
        resp.handle_input(&request, now) == request.len(),
        "responder did not take the whole Request"
    );
    ensure!(
        resp.awaiting_decision(),
        "responder did not decide on the Request"
    );
    let asked = resp
        .request()
        .map(|r| r.private_data.clone())
        .unwrap_or_default();
    verify("MPA private data", &asked, PRIVATE_DATA, &mut verified)?;
    resp.accept(PRIVATE_DATA)?;
    let reply = resp.poll_transmit().ok_or("responder has no MPA Reply")?;
    wire.observe(Dir::Back, &reply)?;
    ensure!(
        ini.handle_input(&reply, now) == reply.len(),
        "initiator did not take the whole Reply"
    );
    let neg_a = ini.poll_outcome().ok_or("initiator: no outcome")??;
    let neg_b = resp.poll_outcome().ok_or("responder: no outcome")??;
    verify(
        "MPA private data",
        &neg_a.peer_private_data,
        PRIVATE_DATA,
        &mut verified,
    )?;
    check_negotiated(args, &neg_a, &neg_b)?;
    // the tap derived the framing from the decoded frames alone: it must agree
    for (dir, neg) in [(Dir::Out, &neg_a), (Dir::Back, &neg_b)] {
        let f = wire
            .framing(dir)
            .ok_or("tap: framing unknown after both frames")?;
        ensure!(
            (f.crc, f.markers) == (neg.crc, neg.markers_tx),
            "{} tap framing {f:?} differs from the negotiated one",
            dir.arrow()
        );
    }
    wire.show(args.verbose);

    // ---- the two endpoints
    let mem_size = (BULK_AT + 2 * bulk) as usize;
    let mut a = Side::new("initiator", Role::Initiator, &neg_a, A_BASE, mem_size)?;
    let mut b = Side::new("responder", Role::Responder, &neg_b, B_BASE, mem_size)?;
    // initiator buffers
    let (a_hello, a_recv, a_bye) = (A_BASE, A_BASE + SMALL, A_BASE + 2 * SMALL);
    let (a_src, a_sink) = (A_BASE + BULK_AT, A_BASE + BULK_AT + bulk);
    // responder buffers, and the region the initiator will write and read
    let (b_recv1, b_recv2, b_advert) = (B_BASE, B_BASE + SMALL, B_BASE + 2 * SMALL);
    let b_region = B_BASE + BULK_AT;
    let stag = b.mem.register(
        b_region,
        n as u64,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
        PD,
    );
    // the responder's reply: where the initiator may write and read (STag, TO, length)
    let mut advert = Vec::with_capacity(16);
    advert.extend_from_slice(&stag.0.to_be_bytes());
    advert.extend_from_slice(&b_region.to_be_bytes());
    advert.extend_from_slice(&n32.to_be_bytes());
    b.mem.fill(b_advert, &advert);
    a.mem.fill(a_hello, HELLO);
    a.mem.fill(a_bye, GOODBYE);
    // every byte the Write brings differs from the byte it overwrites, and so does every
    // byte the Read brings back: the checks below see each byte arrive
    let src: Vec<u8> = b.mem.bytes(b_region, n).iter().map(|x| !x).collect();
    a.mem.fill(a_src, &src);
    let stale: Vec<u8> = src.iter().map(|x| !x).collect();
    a.mem.fill(a_sink, &stale);
    // what must not change: everything outside the buffers that receive data
    let a_untouched = [(a_recv, SMALL), (a_sink, bulk)];
    let b_untouched = [(b_recv1, 2 * SMALL), (b_region, bulk)];
    let a_sum = a.mem.checksum_outside(&a_untouched);
    let b_sum = b.mem.checksum_outside(&b_untouched);

    // ---- Send / Recv: a message each way; the responder's reply advertises its region
    step("Send/Recv: a greeting; the reply advertises a region (STag, TO, length)");
    b.conn.post_recv(10, &[Sge::new(b_recv1, SMALL as u32)])?;
    b.conn.post_recv(11, &[Sge::new(b_recv2, SMALL as u32)])?;
    a.conn.post_recv(20, &[Sge::new(a_recv, SMALL as u32)])?;
    let signaled = SendFlags {
        signaled: true,
        solicited: false,
    };
    a.conn
        .post_send(1, &[Sge::new(a_hello, HELLO.len() as u32)], signaled)?;
    pump(&mut a, &mut b, wire, &mut now)?;
    a.completion(1)?;
    let got = b.completion(10)?;
    verify(
        "Send",
        b.mem.bytes(b_recv1, got.byte_len as usize),
        HELLO,
        &mut verified,
    )?;

    b.conn
        .post_send(2, &[Sge::new(b_advert, advert.len() as u32)], signaled)?;
    pump(&mut a, &mut b, wire, &mut now)?;
    b.completion(2)?;
    let got = a.completion(20)?;
    let received = a.mem.bytes(a_recv, got.byte_len as usize).to_vec();
    verify("Send", &received, &advert, &mut verified)?;
    // the initiator learns the peer's buffer from the bytes it received
    let peer_stag = STag(u32::from_be_bytes(received[0..4].try_into()?));
    let peer_to = u64::from_be_bytes(received[4..12].try_into()?);
    let peer_len = u32::from_be_bytes(received[12..16].try_into()?);
    wire.show(args.verbose);

    // ---- RDMA Write into the peer's region
    step(&format!("RDMA Write of {n} B into that region"));
    a.conn
        .post_write(3, &[Sge::new(a_src, peer_len)], peer_stag, peer_to, true)?;
    pump(&mut a, &mut b, wire, &mut now)?;
    a.completion(3)?;
    verify("RDMA Write", b.mem.bytes(b_region, n), &src, &mut verified)?;
    wire.show(args.verbose);

    // ---- RDMA Read back from it into another buffer
    step(&format!("RDMA Read of the {n} B back into another buffer"));
    a.conn.post_read(
        4,
        &[Sge::new(a_sink, peer_len)],
        peer_stag,
        peer_to,
        peer_len,
        true,
    )?;
    pump(&mut a, &mut b, wire, &mut now)?;
    let got = a.completion(4)?;
    ensure!(
        got.opcode == WcOpcode::Read && got.byte_len == n as u64,
        "read completion {got:?}"
    );
    verify(
        "RDMA Read",
        a.mem.bytes(a_sink, n),
        b.mem.bytes(b_region, n),
        &mut verified,
    )?;
    ensure!(
        a.mem.bytes(a_sink, n) == src.as_slice(),
        "read back differs from what was written"
    );
    wire.show(args.verbose);

    // ---- Send with Invalidate: the peer's region is invalid afterwards
    step("Send with Invalidate: the region is unusable afterwards");
    a.conn.post_send_inv(
        5,
        &[Sge::new(a_bye, GOODBYE.len() as u32)],
        peer_stag,
        signaled,
    )?;
    pump(&mut a, &mut b, wire, &mut now)?;
    a.completion(5)?;
    let got = b.completion(11)?;
    verify(
        "Send with Invalidate",
        b.mem.bytes(b_recv2, got.byte_len as usize),
        GOODBYE,
        &mut verified,
    )?;
    ensure!(
        got.inv_stag == Some(stag),
        "receive reports invalidated STag {:?}",
        got.inv_stag
    );
    let region = b.mem.region(stag).ok_or("region vanished")?;
    ensure!(
        !region.valid,
        "STag {stag} is still valid after Send with Invalidate"
    );
    wire.show(args.verbose);

    // ---- graceful close: the initiator closes once its queue is drained; the responder sees
    // the end of the stream between FPDUs (a clean close, no error) and closes too
    step("graceful close");
    a.conn.close();
    pump(&mut a, &mut b, wire, &mut now)?;
    a.drain_events()?;
    ensure!(
        a.events.iter().any(|e| matches!(e, Event::Closed)),
        "initiator did not close"
    );
    ensure!(wire.idle(Dir::Out), "-> stream ends inside an FPDU");
    wire.log.push(Record::Fin {
        dir: Dir::Out,
        note: "initiator closed: send queue drained, nothing owed",
    });
    b.conn.handle_eof();
    b.drain_events()?;
    ensure!(
        b.events.iter().any(|e| matches!(e, Event::Closed)),
        "responder did not close"
    );
    ensure!(wire.idle(Dir::Back), "<- stream ends inside an FPDU");
    wire.log.push(Record::Fin {
        dir: Dir::Back,
        note: "responder: end of stream at an FPDU boundary, closed cleanly",
    });
    wire.show(args.verbose);
    for s in [&a, &b] {
        let left: Vec<_> = s
            .events
            .iter()
            .filter(|e| !matches!(e, Event::Closed))
            .collect();
        ensure!(left.is_empty(), "{}: unexpected events {left:?}", s.name);
    }
    ensure!(
        a.mem.checksum_outside(&a_untouched) == a_sum,
        "initiator memory changed outside its receive buffers"
    );
    ensure!(
        b.mem.checksum_outside(&b_untouched) == b_sum,
        "responder memory changed outside its receive buffers and region"
    );

    summary(args, wire, &a, &b, &neg_a, &verified, stag)
}

/// What both sides negotiated must fit together.
fn check_negotiated(args: &Args, a: &Negotiated, b: &Negotiated) -> Result {
    ensure!(
        a.revision == 2 && b.revision == 2,
        "revision {} / {}",
        a.revision,
        b.revision
    );
    ensure!(
        a.crc == args.crc && b.crc == args.crc,
        "CRC {} / {}",
        a.crc,
        b.crc
    );
    ensure!(
        a.markers_tx == args.markers
            && a.markers_rx == args.markers
            && b.markers_tx == a.markers_rx,
        "markers disagree: {a:?} / {b:?}"
    );
    ensure!(
        a.ord <= b.ird && b.ord <= a.ird,
        "ORD exceeds the peer's IRD: {a:?} / {b:?}"
    );
    ensure!(
        (a.ird, a.ord) == (4, 4),
        "initiator IRD/ORD {}/{}",
        a.ird,
        a.ord
    );
    Ok(())
}

fn summary(
    args: &Args,
    wire: &Wire,
    a: &Side,
    b: &Side,
    neg: &Negotiated,
    verified: &[(String, usize)],
    stag: STag,
) -> Result {
    let onoff = |x: bool| if x { "on" } else { "off" };
    println!("summary");
    println!(
        "  negotiated      MPA rev {}, CRC-32C {}, markers {} both ways, IRD {} ORD {} (each side), MULPDU {} B",
        neg.revision,
        onoff(neg.crc),
        onoff(neg.markers_tx),
        neg.ird,
        neg.ord,
        mulpdu(EMSS, neg.markers_tx),
    );
    // per opcode: messages (and FPDUs when segmented), from the decoded bytes
    let mut per_op: BTreeMap<u8, (Opcode, usize, usize)> = BTreeMap::new();
    let mut dir_totals = [(0usize, 0usize); 2];
    for r in &wire.log {
        if let Record::Fpdu(f) = r {
            let e = per_op
                .entry(f.header.opcode().to_raw())
                .or_insert((f.header.opcode(), 0, 0));
            e.2 += 1;
            if f.header.last() {
                e.1 += 1;
            }
            dir_totals[f.dir.index()].0 += 1;
            dir_totals[f.dir.index()].1 += f.wire_len;
        }
    }
    let ops: Vec<String> = per_op
        .values()
        .map(|(op, msgs, fpdus)| {
            if fpdus == msgs {
                format!("{op} {msgs}")
            } else {
                format!("{op} {msgs} ({fpdus} FPDUs)")
            }
        })
        .collect();
    println!(
        "  on the wire     -> {} FPDUs {} B, <- {} FPDUs {} B",
        dir_totals[0].0, dir_totals[0].1, dir_totals[1].0, dir_totals[1].1
    );
    println!("  per opcode      {}", ops.join(", "));
    let total: usize = verified.iter().map(|(_, n)| n).sum();
    let mut merged: Vec<(&str, usize)> = Vec::new();
    for (what, n) in verified {
        match merged.iter_mut().find(|(w, _)| w == what) {
            Some(m) => m.1 += n,
            None => merged.push((what, *n)),
        }
    }
    let parts: Vec<String> = merged.iter().map(|(w, n)| format!("{w} {n}")).collect();
    println!("  bytes verified  {total} ({})", parts.join(", "));
    let (sa, sb) = (a.conn.stats(), b.conn.stats());
    let crc_errors = sa.crc_errors + sb.crc_errors;
    ensure!(crc_errors == 0, "CRC errors: {crc_errors}");
    let terminates =
        sa.terminates_sent + sb.terminates_sent + sa.terminates_received + sb.terminates_received;
    ensure!(terminates == 0, "Terminates: {terminates}");
    ensure!(
        sa.fpdus_out as usize == dir_totals[0].0 && sb.fpdus_out as usize == dir_totals[1].0,
        "FPDU counts: connections sent {}/{}, tap decoded {}/{}",
        sa.fpdus_out,
        sb.fpdus_out,
        dir_totals[0].0,
        dir_totals[1].0
    );
    println!(
        "  CRC errors 0{}, Terminates 0, STag {stag} invalidated by the peer, both sides closed",
        if args.crc {
            ""
        } else {
            " (CRC off: not checked)"
        }
    );
    println!("OK");
    Ok(())
}
