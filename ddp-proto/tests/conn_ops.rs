//! Connection operations end to end over the in-memory pair: Send/Recv (posted and stream),
//! RDMA Write, RDMA Read under ORD/IRD, Send with Invalidate, SE, P2P RTR, direct placement,
//! close/EOF, and a seeded random mix checked against a simple model.

#[path = "conn_harness.rs"]
mod harness;

use ddp_proto::conn::{
    Event, RecvMode, SMALL_SEND_MAX, SendFlags, State, Transmit, WcOpcode, WcStatus,
};
use ddp_proto::ddp::{Access, Memory, Sge};
use ddp_proto::error::ProtoError;
use ddp_proto::mpa::startup::RtrKind;
use ddp_proto::wire::ddp::STag;
use ddp_proto::wire::rdmap::{Opcode, RdmapHeader, RdmapMessage};
use harness::*;

const SIZES: [usize; 6] = [0, 1, 4095, 4096, 65536, (1 << 20) + 1];

fn big(o: Opts, size: usize) -> Opts {
    Opts {
        mem_size: 2 * size + 16384,
        ..o
    }
}

fn flags() -> SendFlags {
    SendFlags {
        signaled: true,
        solicited: false,
    }
}

fn send_recv(o: Opts, size: usize) {
    let mut p = Pair::new(big(o, size));
    let src = BASE;
    let dst = BASE + size as u64 + 4096;
    p.b.conn
        .post_recv(77, &[Sge::new(dst, size as u32)])
        .unwrap();
    p.a.conn
        .post_send(5, &[Sge::new(src, size as u32)], flags())
        .unwrap();
    p.drive();
    let want = p.a.mem.bytes(src, size).to_vec();
    assert_eq!(p.b.mem.bytes(dst, size), &want[..], "size {size}");
    let rc = p.b.recv_completions();
    assert_eq!(rc.len(), 1);
    assert_eq!(
        (rc[0].wr_id, rc[0].status, rc[0].byte_len),
        (77, WcStatus::Success, size as u64)
    );
    let c = p.a.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status),
        (5, WcOpcode::Send, WcStatus::Success)
    );
    assert!(p.a.errors.is_empty() && p.b.errors.is_empty());
}

#[test]
fn send_recv_all_sizes() {
    for &size in &SIZES {
        send_recv(Opts::default(), size);
    }
}

#[test]
fn send_recv_markers_and_rechunking() {
    for &size in &SIZES[..5] {
        send_recv(
            Opts {
                markers: true,
                chunking: Chunking::Random(700),
                seed: size as u64,
                ..Opts::default()
            },
            size,
        );
    }
    for &size in &[0usize, 1, 4095] {
        send_recv(
            Opts {
                markers: true,
                chunking: Chunking::Bytes,
                ..Opts::default()
            },
            size,
        );
        send_recv(
            Opts {
                crc: false,
                chunking: Chunking::Bytes,
                ..Opts::default()
            },
            size,
        );
    }
}

#[test]
fn send_multi_sge_both_ends() {
    let mut p = Pair::new(Opts {
        mulpdu: 200,
        chunking: Chunking::Random(37),
        ..Opts::default()
    });
    let src = [
        Sge::new(BASE, 100),
        Sge::new(BASE + 1000, 0),
        Sge::new(BASE + 2000, 333),
    ];
    let dst = [Sge::new(BASE + 10_000, 7), Sge::new(BASE + 20_000, 500)];
    p.b.conn.post_recv(1, &dst).unwrap();
    p.a.conn.post_send(2, &src, flags()).unwrap();
    p.drive();
    let mut want = p.a.mem.bytes(BASE, 100).to_vec();
    want.extend_from_slice(p.a.mem.bytes(BASE + 2000, 333));
    let mut got = p.b.mem.bytes(BASE + 10_000, 7).to_vec();
    got.extend_from_slice(p.b.mem.bytes(BASE + 20_000, 426));
    assert_eq!(got, want);
    assert_eq!(p.b.recv_completions()[0].byte_len, 433);
}

/// Stream data arrives in order, whether it waits in the connection until its CRC checks,
/// or is placed unverified into a reader's buffer (directly from the socket or from buffered
/// input), and whether that buffer goes away before the FPDU ends (taken back) or not.
#[test]
fn stream_mode_delivers_in_order() {
    for (direct, sink, chunking, crc) in [
        (false, 0, Chunking::Random(50), true),
        (false, 700, Chunking::Random(50), true),
        (true, 0, Chunking::Random(50), true),
        (true, 700, Chunking::Random(50), true),
        (true, 700, Chunking::Random(50), false),
        (true, 5000, Chunking::Random(400), true),
        (true, 5000, Chunking::Whole, true),
    ] {
        let mut p = Pair::new(Opts {
            mode_b: RecvMode::Stream,
            chunking,
            mulpdu: 300,
            direct,
            sink,
            crc,
            ..Opts::default()
        });
        let mut want = Vec::new();
        for i in 0..20u64 {
            let len = (i * 97 % 1000) as u32;
            p.a.conn
                .post_send(i, &[Sge::new(BASE + i * 1000, len)], flags())
                .unwrap();
            want.extend_from_slice(p.a.mem.bytes(BASE + i * 1000, len as usize));
        }
        p.drive();
        let what = format!("direct {direct}, sink {sink}, {chunking:?}, crc {crc}");
        assert!(p.b.mem.stream == want, "{what}: stream differs");
        assert!(p.b.recv_completions().is_empty(), "{what}");
        assert_eq!(p.a.completions().len(), 20, "{what}");
        let st = p.b.conn.stats();
        if direct && sink > 0 {
            assert!(st.bytes_placed_direct > 0, "{what}: {st:?}");
        } else if sink == 0 {
            assert_eq!(st.bytes_placed_direct, 0, "{what}: {st:?}");
        }
        if sink > 0 && chunking != Chunking::Whole {
            assert!(st.bytes_unplaced > 0, "{what}: {st:?}");
        }
    }
}

/// Two cut points `x <= y` in `0..=len`: a payload as one part (both at the end), two or
/// three (some possibly empty).
fn split3(rng: &mut Rng, len: usize) -> (usize, usize) {
    match rng.below(3) {
        0 => (len, len),
        _ => {
            let (a, b) = (
                rng.below(len as u64 + 1) as usize,
                rng.below(len as u64 + 1) as usize,
            );
            (a.min(b), a.max(b))
        }
    }
}

/// The small-Send fast path puts on the wire exactly what posting the same Sends does (the
/// same FPDUs, MSNs included, with and without CRC and markers), mixed with posted Sends in
/// any order, its payload whole or gathered from up to three parts; it refuses while
/// anything else waits to be framed, and beyond its size limit.
#[test]
fn send_now_small_matches_posted_sends() {
    for (crc, markers) in [(true, false), (false, false), (true, true)] {
        let o = Opts {
            mode_b: RecvMode::Stream,
            mulpdu: 1200,
            crc,
            markers,
            ..Opts::default()
        };
        let (mut posted, mut fast) = (Pair::new(o.clone()), Pair::new(o));
        let mut rng = Rng::new(7);
        let mut t = Transmit::default();
        let mut want = Vec::new();
        let mut fast_sends = 0;
        for i in 0..200u64 {
            let len = 1 + rng.below(1182) as usize;
            let at = BASE + (i % 16) * 1200;
            let bytes = posted.a.mem.bytes(at, len).to_vec();
            assert_eq!(fast.a.mem.bytes(at, len), &bytes[..]);
            want.extend_from_slice(&bytes);
            posted
                .a
                .conn
                .post_send(i, &[Sge::new(at, len as u32)], flags())
                .unwrap();
            posted.drive();
            if rng.below(3) == 0 {
                // (the posted way on this side too: the fast path must carry on after it)
                fast.a
                    .conn
                    .post_send(i, &[Sge::new(at, len as u32)], flags())
                    .unwrap();
                // refused while that Send waits to be framed
                assert!(!fast.a.conn.send_now_small(&[&bytes], &mut t));
            } else {
                let (x, y) = split3(&mut rng, len);
                let parts = [&bytes[..x], &bytes[x..y], &bytes[y..]];
                assert!(fast.a.conn.send_now_small(&parts, &mut t), "Send {i}");
                let wire = t.gather(&fast.a.mem);
                assert_eq!(wire.len(), t.len());
                fast.a.sent.extend_from_slice(&wire);
                fast.b.inbox.extend_from_slice(&wire);
                fast.a.conn.on_written(wire.len() as u64);
                fast_sends += 1;
            }
            fast.drive();
            assert_eq!(
                fast.a.sent, posted.a.sent,
                "crc {crc}, markers {markers}: wire differs after Send {i}"
            );
        }
        assert!(fast_sends > 100);
        assert!(fast.b.mem.stream == want && posted.b.mem.stream == want);
        assert!(fast.a.errors.is_empty() && fast.b.errors.is_empty());
        // (completions only for the posted ones)
        assert_eq!(fast.a.completions().len(), 200 - fast_sends);
        assert_eq!(
            fast.a.conn.stats().fpdus_out,
            posted.a.conn.stats().fpdus_out
        );
    }
    let mut p = Pair::new(Opts {
        mulpdu: SMALL_SEND_MAX + 18,
        ..Opts::default()
    });
    let big = vec![7u8; SMALL_SEND_MAX + 1];
    let mut t = Transmit::default();
    assert!(!p.a.conn.send_now_small(&[&big], &mut t), "over the limit");
    assert!(
        !p.a.conn.send_now_small(&[&big[..9], &big[9..]], &mut t),
        "over the limit in two parts"
    );
    assert!(!p.a.conn.send_now_small(&[], &mut t), "empty");
    assert!(!p.a.conn.send_now_small(&[&[], &[]], &mut t), "empty parts");
    assert!(
        p.a.conn.send_now_small(&[&big[1..]], &mut t),
        "at the limit"
    );
    p.a.conn.set_mulpdu(SMALL_SEND_MAX + 17).unwrap();
    assert!(
        !p.a.conn.send_now_small(&[&big[1..]], &mut t),
        "over the MULPDU"
    );
}

/// The posted-Send fast path (`send_now_small_wr`) is a posted Send on the wire (MSNs, SE)
/// and in its completion: it comes only once the driver reported the bytes written, and in
/// order behind a Read still waiting for its response. Checked against a pair that posts the
/// same Sends, with Reads mixed in.
#[test]
fn send_now_small_wr_matches_posted_sends() {
    for (crc, markers) in [(true, false), (false, false), (true, true)] {
        let o = Opts {
            mulpdu: 1200,
            crc,
            markers,
            ..Opts::default()
        };
        let (mut posted, mut fast) = (Pair::new(o.clone()), Pair::new(o));
        let mut rng = Rng::new(11);
        let mut t = Transmit::default();
        let mut fast_sends = 0;
        let rsrc = BASE + 20_000;
        let stag = posted.b.mem.register(rsrc, 4096, Access::REMOTE_READ, 1);
        assert_eq!(
            fast.b.mem.register(rsrc, 4096, Access::REMOTE_READ, 1),
            stag
        );
        let mut reads = 0;
        for i in 0..200u64 {
            let len = 1 + rng.below(1182) as usize;
            let at = BASE + (i % 16) * 1200;
            let dst = BASE + 32_768 + (i % 8) * 1300;
            let solicited = rng.below(2) == 0;
            let fl = SendFlags {
                signaled: true,
                solicited,
            };
            let read = rng.below(5) == 0;
            reads += usize::from(read);
            for p in [&mut posted, &mut fast] {
                p.b.conn
                    .post_recv(1000 + i, &[Sge::new(dst, 1300)])
                    .unwrap();
                if read {
                    // A Read on the wire, its response not back yet: owed first.
                    let sink = BASE + 40_000 + (i % 4) * 100;
                    p.a.conn
                        .post_read(500 + i, &[Sge::new(sink, 100)], stag, rsrc, 100, true)
                        .unwrap();
                    while let Some(rt) = p.a.conn.poll_transmit(&p.a.mem) {
                        let w = rt.gather(&p.a.mem);
                        p.a.sent.extend_from_slice(&w);
                        p.b.inbox.extend_from_slice(&w);
                        p.a.conn.on_written(w.len() as u64);
                    }
                }
            }
            let bytes = posted.a.mem.bytes(at, len).to_vec();
            posted
                .a
                .conn
                .post_send(i, &[Sge::new(at, len as u32)], fl)
                .unwrap();
            posted.drive();
            if rng.below(4) == 0 {
                fast.a
                    .conn
                    .post_send(i, &[Sge::new(at, len as u32)], fl)
                    .unwrap();
                assert!(!fast.a.conn.send_now_small_wr(i, &[&bytes], fl, &mut t));
            } else {
                let (x, y) = split3(&mut rng, len);
                let parts = [&bytes[..x], &bytes[x..y], &bytes[y..]];
                assert!(
                    fast.a.conn.send_now_small_wr(i, &parts, fl, &mut t),
                    "Send {i}"
                );
                let wire = t.gather(&fast.a.mem);
                fast.a.sent.extend_from_slice(&wire);
                fast.b.inbox.extend_from_slice(&wire);
                let before = fast.a.completions().len();
                // Not complete until all of its bytes were written.
                let part = rng.below(wire.len() as u64) as usize;
                fast.a.conn.on_written(part as u64);
                drain_events(&mut fast.a);
                assert_eq!(
                    fast.a.completions().len(),
                    before,
                    "Send {i} completed early"
                );
                fast.a.conn.on_written((wire.len() - part) as u64);
                drain_events(&mut fast.a);
                let now = fast.a.completions();
                if read {
                    assert_eq!(now.len(), before, "Send {i} overtook the Read");
                } else {
                    assert_eq!(now.len(), before + 1);
                    let c = now[before];
                    assert_eq!(
                        (c.wr_id, c.opcode, c.status, c.byte_len),
                        (i, WcOpcode::Send, WcStatus::Success, len as u64)
                    );
                }
                fast_sends += 1;
            }
            fast.drive();
            assert_eq!(
                fast.a.sent, posted.a.sent,
                "crc {crc}, markers {markers}: wire differs after Send {i}"
            );
            assert_eq!(fast.b.mem.bytes(dst, len), &bytes[..], "Send {i}");
        }
        assert!(fast_sends > 100, "{fast_sends}");
        let key = |c: &ddp_proto::conn::Completion| (c.wr_id, c.opcode, c.status, c.byte_len);
        let sq = |s: &Side| s.completions().iter().map(key).collect::<Vec<_>>();
        assert_eq!(sq(&fast.a), sq(&posted.a));
        assert_eq!(fast.a.completions().len(), 200 + reads);
        assert!(reads > 20, "{reads}");
        let rq = |s: &Side| {
            s.recv_completions()
                .iter()
                .map(|c| (c.wr_id, c.status, c.byte_len, c.solicited))
                .collect::<Vec<_>>()
        };
        assert_eq!(rq(&fast.b), rq(&posted.b));
        assert_eq!(fast.b.recv_completions().len(), 200);
        assert!(fast.a.errors.is_empty() && fast.b.errors.is_empty());
    }
}

/// A new MULPDU (the EMSS grew) cuts the messages posted after it; the bytes arrive the same.
#[test]
fn mulpdu_change_applies_to_later_messages() {
    let mut p = Pair::new(Opts {
        mode_b: RecvMode::Stream,
        mulpdu: 300,
        ..Opts::default()
    });
    p.a.conn
        .post_send(1, &[Sge::new(BASE, 1000)], flags())
        .unwrap();
    p.drive();
    assert_eq!(
        p.b.conn.stats().fpdus_in,
        4,
        "1000 bytes in 282-byte segments"
    );
    assert!(p.a.conn.set_mulpdu(10).is_err());
    assert_eq!(p.a.conn.mulpdu(), 300, "a refused MULPDU changes nothing");
    p.a.conn.set_mulpdu(600).unwrap();
    p.a.conn
        .post_send(2, &[Sge::new(BASE + 1000, 1000)], flags())
        .unwrap();
    p.drive();
    assert_eq!(p.b.conn.stats().fpdus_in, 4 + 2, "then 582-byte segments");
    assert!(
        p.b.mem.stream == p.a.mem.bytes(BASE, 2000),
        "stream differs"
    );
    assert_eq!(p.a.completions().len(), 2);
}

/// Where a receiver was left, for the one-step tests that feed the same FPDUs whole and a
/// byte at a time: its stream, receive completions, counters (FPDUs in, bytes placed, CRC
/// errors), state, error, the bytes it sent back (a Terminate), `len` bytes of its memory
/// from `at`, and the receives still posted.
#[derive(Debug, PartialEq)]
struct Left {
    stream: Vec<u8>,
    recvs: Vec<ddp_proto::conn::Completion>,
    counts: (u64, u64, u64),
    state: State,
    error: Option<ProtoError>,
    sent: Vec<u8>,
    mem: Vec<u8>,
    posted: usize,
}

impl Left {
    fn of(s: &Side, at: u64, len: usize) -> Left {
        let st = s.conn.stats();
        Left {
            stream: s.mem.stream.clone(),
            recvs: s.recv_completions(),
            counts: (st.fpdus_in, st.bytes_placed_buffered, st.crc_errors),
            state: s.conn.state(),
            error: s.conn.error(),
            sent: s.sent.clone(),
            mem: s.mem.bytes(at, len).to_vec(),
            posted: s.conn.recvs_posted(),
        }
    }

    /// `run` fed whole and a byte at a time: both must leave the receiver the same.
    fn same_either_way(seed: u64, run: impl Fn(Chunking) -> Left) -> Left {
        let (whole, bytes) = (run(Chunking::Whole), run(Chunking::Bytes));
        assert!(
            whole == bytes,
            "seed {seed}: fed whole {:?}, a byte at a time {:?}",
            whole.brief(),
            bytes.brief()
        );
        whole
    }

    fn brief(&self) -> impl core::fmt::Debug + '_ {
        let n = self.stream.len();
        (
            &self.recvs,
            self.counts,
            self.state,
            self.error,
            n,
            self.posted,
        )
    }
}

/// `sends` random Send messages from MSN 1, as FPDUs, for the one-step tests: payloads of
/// `len` random octets; each message good, or broken in one way (a wrong MSN, queue, MO,
/// DDP or RDMAP control octet or ULP field, a flipped bit), or sent in two segments. Returns
/// the stream, whether every message was good and in one segment, and the shortest payload.
fn random_sends(
    rng: &mut Rng,
    crc: bool,
    sends: u64,
    mut len: impl FnMut(&mut Rng) -> u64,
) -> (Vec<u8>, bool, usize) {
    let mut stream = Vec::new();
    let mut good = true;
    let mut shortest = usize::MAX;
    for msn in (1u32..).take(sends as usize) {
        let n = len(rng);
        let payload: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
        shortest = shortest.min(payload.len());
        let kind = rng.below(24);
        let last = kind != 20;
        let mut u = ulpdu(
            &RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, last),
            &payload,
        );
        match kind {
            13 => u[10..14].copy_from_slice(&(msn + 1).to_be_bytes()), // MSN
            14 => u[9] = 1 + rng.below(3) as u8,                       // queue
            15 => u[17] = 1 + rng.below(255) as u8,                    // MO
            16 => u[0] = [0x40, 0x42, 0x45, 0x61, 0xc1][rng.below(5) as usize], // DDP ctrl
            17 => u[1] = [0x03, 0x83, 0x53, 0x45, 0x41][rng.below(5) as usize], // RDMAP ctrl
            18 => u[2 + rng.below(4) as usize] = 1 + rng.below(255) as u8, // ULP field
            _ => {}
        }
        let mut f = fpdu(&u, crc);
        if kind == 19 && crc {
            let at = rng.below(f.len() as u64) as usize;
            f[at] ^= 1 << rng.below(8);
        }
        stream.extend_from_slice(&f);
        good &= kind < 13;
        if !last {
            // the message goes on: its next segment, at the MO after this one
            let rest = [7u8; 5];
            let u = ulpdu(
                &RdmapHeader::new(
                    RdmapMessage::Send {
                        msn,
                        mo: payload.len() as u32,
                    },
                    true,
                ),
                &rest,
            );
            stream.extend_from_slice(&fpdu(&u, crc));
        }
    }
    (stream, good, shortest)
}

/// A random stream of Sends for the one-step tests (seed `seed`): the FPDUs, whether they
/// are all good and non-empty, whether a receive is posted first, the CRC setting and how
/// many messages there are.
struct SendCase {
    stream: Vec<u8>,
    good: bool,
    recvs: bool,
    crc: bool,
    sends: u64,
}

impl SendCase {
    fn new(seed: u64) -> SendCase {
        let mut rng = Rng::new(seed);
        let crc = seed % 5 != 4;
        let sends = 1 + rng.below(10);
        let (stream, kinds_good, shortest) = random_sends(&mut rng, crc, sends, |r| r.below(300));
        let recvs = rng.below(4) == 0;
        SendCase {
            stream,
            good: kinds_good && shortest > 0,
            recvs,
            crc,
            sends,
        }
    }

    /// Feeds the stream to a stream-mode receiver (a receive posted first if `recvs`), cut
    /// by `chunking`, each read offered to `take_stream_sends` first if `take_sends`.
    fn run(&self, seed: u64, chunking: Chunking, take_sends: bool) -> Left {
        let mut p = Pair::new(Opts {
            mode_b: RecvMode::Stream,
            crc: self.crc,
            chunking,
            mem_size: 16384,
            seed,
            take_sends,
            ..Opts::default()
        });
        if self.recvs {
            p.b.conn
                .post_recv(3, &[Sge::new(BASE + 8192, 200)])
                .unwrap();
        }
        p.b.inbox = self.stream.clone();
        p.drive();
        Left::of(&p.b, BASE + 8192, 200)
    }
}

/// A whole plain Send in stream mode is taken in one step (`Connection::handle_input`'s
/// shortcut); any other FPDU, or any state the shortcut does not cover, takes the general
/// steps. Random FPDU streams (good Sends, and Sends with a wrong MSN, queue, MO, version,
/// reserved bit, opcode, L bit, CRC or ULP field; zero-length ones; receives posted or not)
/// fed whole, where the shortcut applies, and a byte at a time, where it never does, must
/// leave the receiver in the same place: the same stream, completions, counters, state,
/// error, and the same bytes sent back (the Terminate).
#[test]
fn whole_stream_sends_match_the_general_steps() {
    let mut shortcut_streams = 0;
    for seed in 0..300u64 {
        let case = SendCase::new(seed);
        shortcut_streams += usize::from(case.good && !case.recvs);
        let whole = Left::same_either_way(seed, |chunking| case.run(seed, chunking, false));
        if case.good && !case.recvs {
            assert_eq!(whole.state, State::Open, "seed {seed}");
            assert!(!whole.stream.is_empty(), "seed {seed}");
        }
    }
    assert!(
        shortcut_streams > 20,
        "{shortcut_streams} streams of good Sends only"
    );
}

/// `Connection::take_stream_sends` (the driver's small-message round) takes whole plain
/// Sends for a stream reader as `handle_input` does and leaves everything else to it. The
/// streams of `whole_stream_sends_match_the_general_steps`, each read offered to it first
/// (whole, and cut at random so that reads end inside FPDUs), must leave the receiver where
/// `handle_input` alone, fed a byte at a time, leaves it: the same stream, completions,
/// counters, state, error and Terminate.
#[test]
fn taken_stream_sends_match_the_general_steps() {
    let mut taken_streams = 0;
    for seed in 0..300u64 {
        let case = SendCase::new(seed);
        taken_streams += usize::from(case.good && !case.recvs);
        let general = case.run(seed, Chunking::Bytes, false);
        for chunking in [Chunking::Whole, Chunking::Random(200)] {
            let taken = case.run(seed, chunking, true);
            assert!(
                taken == general,
                "seed {seed} {chunking:?}: taken first {:?}, general steps {:?}",
                taken.brief(),
                general.brief()
            );
        }
        if case.good && !case.recvs {
            assert_eq!(general.state, State::Open, "seed {seed}");
            assert_eq!(general.counts.0, case.sends, "seed {seed}");
        }
    }
    assert!(
        taken_streams > 20,
        "{taken_streams} streams of good Sends only"
    );
}

/// A whole plain Send that fits the receive posted at the head of the queue is taken in one
/// step too (`Connection::posted_send`). Random FPDU streams against random posted receives
/// (none to six; short ones, empty ones, two SGEs, an SGE outside memory; stream or posted
/// mode) with good Sends, zero-length Sends, two-segment messages and Sends broken as in
/// `whole_stream_sends_match_the_general_steps`, fed whole and a byte at a time, must leave
/// the receiver in the same place: receive memory, completions, stream, counters, state,
/// error and the bytes sent back.
#[test]
fn whole_posted_sends_match_the_general_steps() {
    let mut clean = 0;
    for seed in 0..400u64 {
        let mut rng = Rng::new(1000 + seed);
        let crc = seed % 5 != 4;
        let mode = if rng.below(3) == 0 {
            RecvMode::Stream
        } else {
            RecvMode::Posted
        };
        let sends = 1 + rng.below(6);
        let (stream, good, _) = random_sends(&mut rng, crc, sends, |r| {
            if r.below(8) == 0 { 0 } else { 1 + r.below(300) }
        });
        // Receives: 400 bytes apart from BASE + 4096; sizes from 0 to 400 (some too short),
        // some split in two SGEs, some with an SGE past the end of memory.
        let mut recvs = Vec::new();
        for i in 0..rng.below(7) {
            let at = BASE + 4096 + i * 400;
            let len = match rng.below(5) {
                0 => rng.below(301) as u32,
                _ => 300 + rng.below(101) as u32,
            };
            let sges = match rng.below(8) {
                0 | 1 if len > 1 => {
                    let h = len / 2;
                    vec![Sge::new(at, h), Sge::new(at + 3000, len - h)]
                }
                2 => vec![Sge::new(BASE + (1 << 20), len.max(1))],
                _ => vec![Sge::new(at, len)],
            };
            recvs.push(sges);
        }
        let fits = recvs.len() as u64 >= sends;
        let run = |chunking| {
            let mut p = Pair::new(Opts {
                mode_b: mode,
                crc,
                chunking,
                mem_size: 16384,
                seed,
                ..Opts::default()
            });
            for (i, sges) in recvs.iter().enumerate() {
                p.b.conn.post_recv(10 + i as u64, sges).unwrap();
            }
            p.b.inbox = stream.clone();
            p.drive();
            Left::of(&p.b, BASE + 4096, 12288)
        };
        let whole = Left::same_either_way(seed, run);
        if good && fits && whole.state == State::Open {
            clean += 1;
            assert_eq!(whole.recvs.len() as u64, sends, "seed {seed}");
        }
    }
    assert!(clean > 30, "{clean} streams of good Sends all taken");
}

/// Stream data goes to the application before its FPDU's End only when its CRC is already
/// known good: a flipped payload or CRC bit in an FPDU that arrives whole delivers nothing of
/// it (the FPDUs before it are delivered, the connection fails with a CRC error).
#[test]
fn stream_mode_delivers_nothing_of_a_bad_fpdu() {
    for (chunking, direct, sink) in [
        (Chunking::Whole, false, 0),
        (Chunking::Random(700), false, 0),
        (Chunking::Random(700), false, 3000),
        (Chunking::Random(700), true, 3000),
        (Chunking::Random(2000), true, 3000),
    ] {
        for (what, at) in [("payload", 1460 + 2 + 18 + 100), ("CRC", 2 * 1460 - 2)] {
            let mut p = Pair::new(Opts {
                mode_b: RecvMode::Stream,
                chunking,
                direct,
                sink,
                mem_size: 16384,
                ..Opts::default()
            });
            // three full FPDUs of 1436 payload octets each (ULPDU 1454 = MULPDU, FPDU 1460)
            p.a.conn
                .post_send(1, &[Sge::new(BASE, 3 * 1436)], flags())
                .unwrap();
            let first = p.a.mem.bytes(BASE, 1436).to_vec();
            p.fault_to_b = Some(Fault::Flip { at, bit: 2 });
            p.drive();
            assert!(
                p.b.mem.stream == first,
                "{what} flip, {chunking:?}, direct {direct}, sink {sink}: {} stream bytes \
                 delivered, want the first FPDU's {}",
                p.b.mem.stream.len(),
                first.len()
            );
            assert_eq!(p.b.conn.stats().crc_errors, 1, "{what} flip, {chunking:?}");
            assert!(
                matches!(p.b.conn.state(), State::Error | State::Closed),
                "{what} flip, {chunking:?}: {:?}",
                p.b.conn.state()
            );
        }
    }
}

fn write(o: Opts, size: usize) {
    let mut p = Pair::new(big(o, size));
    let dst = BASE + 4096;
    let stag =
        p.b.mem
            .register(dst, size.max(1) as u64, Access::REMOTE_WRITE, 1);
    let outside = p.b.mem.checksum_outside(&[(dst, size as u64)]);
    p.a.conn
        .post_write(
            9,
            &[Sge::new(BASE + 4096 + size as u64, size as u32)],
            stag,
            dst,
            true,
        )
        .unwrap();
    p.drive();
    assert_eq!(
        p.b.mem.bytes(dst, size),
        p.a.mem.bytes(BASE + 4096 + size as u64, size)
    );
    assert_eq!(p.b.mem.checksum_outside(&[(dst, size as u64)]), outside);
    let c = p.a.completions();
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status, c[0].byte_len),
        (9, WcOpcode::Write, WcStatus::Success, size as u64)
    );
    assert!(
        p.b.events.is_empty(),
        "a Write completes nothing at the target"
    );
}

/// Posted work is framed in `Transmit`s of about `max_transmit` octets, a Read Response in
/// pieces of `max_transmit_read_response` (the harness: 64 KiB and the 256 KiB default):
/// ddp-user sends Writes in small pieces and Read Responses whole (docs/performance.md,
/// "Session 26").
#[test]
fn read_responses_and_posted_work_have_their_own_transmit_bounds() {
    const SIZE: usize = 200_000;
    const MULPDU: usize = 9000;
    let mut p = Pair::new(Opts {
        mulpdu: MULPDU,
        mem_size: 3 * SIZE + 16384,
        ..Opts::default()
    });
    let (dst, src, sink) = (
        BASE + 4096,
        BASE + 4096 + SIZE as u64,
        BASE + 4096 + 2 * SIZE as u64,
    );
    let stag = p.b.mem.register(
        dst,
        SIZE as u64,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
        1,
    );
    p.a.conn
        .post_write(1, &[Sge::new(src, SIZE as u32)], stag, dst, true)
        .unwrap();
    p.drive();
    assert_eq!(p.b.mem.bytes(dst, SIZE), p.a.mem.bytes(src, SIZE));
    let w = core::mem::take(&mut p.a.transmits);
    assert!(w.len() >= 3, "a 200 KB Write in {w:?}");
    assert!(
        w.iter().all(|&n| n < 64 * 1024 + MULPDU),
        "each Transmit of the Write stops once it holds 64 KiB: {w:?}"
    );
    // a reads it back: b's Read Response goes out in one Transmit
    let before = p.a.mem.bytes(sink, SIZE).to_vec();
    assert_ne!(before, p.a.mem.bytes(src, SIZE));
    p.a.conn
        .post_read(
            2,
            &[Sge::new(sink, SIZE as u32)],
            stag,
            dst,
            SIZE as u32,
            true,
        )
        .unwrap();
    p.b.transmits.clear();
    p.drive();
    assert_eq!(p.a.mem.bytes(sink, SIZE), p.a.mem.bytes(src, SIZE));
    assert!(
        p.b.transmits.iter().any(|&n| n > SIZE),
        "the whole Read Response in one Transmit: {:?}",
        p.b.transmits
    );
    let c = p.a.completions();
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn rdma_write_all_sizes() {
    for &size in &SIZES {
        write(Opts::default(), size);
    }
    write(
        Opts {
            markers: true,
            chunking: Chunking::Random(999),
            ..Opts::default()
        },
        70_000,
    );
}

#[test]
fn rdma_write_direct_placement() {
    let size = 200_000;
    let mut p = Pair::new(big(
        Opts {
            direct: true,
            markers: true,
            chunking: Chunking::Random(3000),
            ..Opts::default()
        },
        size,
    ));
    let dst = BASE + 4096;
    let stag = p.b.mem.register(dst, size as u64, Access::REMOTE_WRITE, 1);
    p.a.conn
        .post_write(
            1,
            &[Sge::new(BASE + 4096 + size as u64, size as u32)],
            stag,
            dst,
            true,
        )
        .unwrap();
    p.b.conn.post_recv(2, &[Sge::new(BASE, 4000)]).unwrap();
    p.a.conn
        .post_send(3, &[Sge::new(BASE, 4000)], flags())
        .unwrap();
    p.drive();
    assert_eq!(
        p.b.mem.bytes(dst, size),
        p.a.mem.bytes(BASE + 4096 + size as u64, size)
    );
    assert_eq!(p.b.mem.bytes(BASE, 4000), p.a.mem.bytes(BASE, 4000));
    let st = p.b.conn.stats();
    assert!(st.bytes_placed_direct > (size as u64) / 2, "{st:?}");
    assert_eq!(
        st.bytes_placed_direct + st.bytes_placed_buffered,
        size as u64 + 4000
    );
    // Tagged payload counted apart from the Send (regression: the siw interop's write_bw
    // server counted none of the peer's RDMA Writes as received).
    assert_eq!(st.bytes_tagged_in, size as u64, "{st:?}");
    assert_eq!(p.b.recv_completions().len(), 1);
}

#[test]
fn rdma_read_all_sizes() {
    for &size in &SIZES {
        let mut p = Pair::new(big(Opts::default(), size));
        let src = BASE + 8192;
        let stag =
            p.b.mem
                .register(src, size.max(1) as u64, Access::REMOTE_READ, 1);
        let sink = BASE + 8192 + size as u64;
        p.a.conn
            .post_read(
                4,
                &[Sge::new(sink, size as u32)],
                stag,
                src,
                size as u32,
                true,
            )
            .unwrap();
        p.drive();
        assert_eq!(
            p.a.mem.bytes(sink, size),
            p.b.mem.bytes(src, size),
            "size {size}"
        );
        let c = p.a.completions();
        assert_eq!(
            (c[0].wr_id, c[0].opcode, c[0].status, c[0].byte_len),
            (4, WcOpcode::Read, WcStatus::Success, size as u64)
        );
        assert_eq!(p.b.conn.reads_owed(), 0);
        assert_eq!(p.b.conn.stats().bytes_read_response_out, size as u64);
        assert_eq!(p.a.conn.stats().bytes_tagged_in, size as u64);
    }
}

#[test]
fn reads_beyond_ord_wait_and_complete_in_order() {
    let mut p = Pair::new(Opts {
        ord_a: 2,
        ird_b: 2,
        chunking: Chunking::Random(100),
        mulpdu: 256,
        ..Opts::default()
    });
    let src = BASE;
    let stag = p.b.mem.register(src, 8192, Access::REMOTE_READ, 1);
    for i in 0..7u64 {
        let len = 100 + 300 * i as u32;
        p.a.conn
            .post_read(
                i,
                &[Sge::new(BASE + 10_000 + i * 4096, len)],
                stag,
                src + i * 10,
                len,
                true,
            )
            .unwrap();
    }
    // a Send posted after the reads waits behind them (the send queue is ordered)
    p.b.conn
        .post_recv(100, &[Sge::new(BASE + 60_000, 16)])
        .unwrap();
    p.a.conn
        .post_send(100, &[Sge::new(BASE, 16)], flags())
        .unwrap();
    // the first poll only issues ORD = 2 Read Requests
    let t = p.a.conn.poll_transmit(&p.a.mem).unwrap();
    assert_eq!(t.fpdus, 2);
    assert_eq!(p.a.conn.reads_outstanding(), 2);
    assert!(p.a.conn.poll_transmit(&p.a.mem).is_none());
    p.b.inbox.extend_from_slice(&t.gather(&p.a.mem));
    p.a.sent.extend_from_slice(&t.gather(&p.a.mem));
    p.a.conn.on_written(t.len() as u64);
    p.drive();
    let c = p.a.completions();
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 5, 6, 100]
    );
    for i in 0..7u64 {
        let len = 100 + 300 * i as usize;
        assert_eq!(
            p.a.mem.bytes(BASE + 10_000 + i * 4096, len),
            p.b.mem.bytes(src + i * 10, len)
        );
        assert_eq!(c[i as usize].byte_len, len as u64);
    }
    assert!(p.a.errors.is_empty() && p.b.errors.is_empty());
}

#[test]
fn read_responses_interleave_with_sends() {
    // B owes A three Read Responses while it sends its own messages: both make progress and
    // nothing is lost.
    let mut p = Pair::new(Opts {
        mulpdu: 300,
        mem_size: 1 << 17,
        ..Opts::default()
    });
    let stag = p.b.mem.register(BASE, 30_000, Access::REMOTE_READ, 1);
    for i in 0..3u64 {
        p.a.conn
            .post_read(
                i,
                &[Sge::new(BASE + 40_000 + i * 5000, 5000)],
                stag,
                BASE + i * 5000,
                5000,
                true,
            )
            .unwrap();
        p.a.conn
            .post_recv(10 + i, &[Sge::new(BASE + 60_000 + i * 2000, 2000)])
            .unwrap();
        p.b.conn
            .post_send(10 + i, &[Sge::new(BASE + 32_000 + i * 2000, 2000)], flags())
            .unwrap();
    }
    p.drive();
    assert!(
        p.a.errors.is_empty() && p.b.errors.is_empty(),
        "{:?} {:?}",
        p.a.errors,
        p.b.errors
    );
    assert_eq!(p.a.completions().len(), 3);
    assert_eq!(p.a.recv_completions().len(), 3);
    assert_eq!(p.b.completions().len(), 3);
    for i in 0..3u64 {
        let (x, y) = (
            p.a.mem.bytes(BASE + 40_000 + i * 5000, 5000),
            p.b.mem.bytes(BASE + i * 5000, 5000),
        );
        let bad = x.iter().zip(y).position(|(a, b)| a != b);
        assert_eq!(bad, None, "read {i}");
    }
    // message-level alternation: a Send appears before the last Read Response ends
    let kinds: Vec<Opcode> = ulpdus(&p.b.sent, true, false)
        .iter()
        .map(|u| RdmapHeader::parse(u).unwrap().0.opcode())
        .collect();
    let first_send = kinds.iter().position(|o| *o == Opcode::Send).unwrap();
    let last_rr = kinds
        .iter()
        .rposition(|o| *o == Opcode::ReadResponse)
        .unwrap();
    assert!(first_send < last_rr, "{kinds:?}");
}

#[test]
fn send_with_invalidate_and_solicited() {
    let mut p = Pair::new(Opts::default());
    let victim = p.b.mem.register(BASE + 30_000, 64, Access::REMOTE_WRITE, 1);
    p.b.conn.post_recv(1, &[Sge::new(BASE, 100)]).unwrap();
    p.b.conn.post_recv(2, &[Sge::new(BASE + 100, 100)]).unwrap();
    p.a.conn
        .post_send_inv(
            7,
            &[Sge::new(BASE, 10)],
            victim,
            SendFlags {
                signaled: true,
                solicited: true,
            },
        )
        .unwrap();
    p.a.conn
        .post_send(
            8,
            &[Sge::new(BASE, 10)],
            SendFlags {
                signaled: false,
                solicited: true,
            },
        )
        .unwrap();
    p.drive();
    assert!(!p.b.mem.region(victim).unwrap().valid);
    let rc = p.b.recv_completions();
    assert_eq!((rc[0].inv_stag, rc[0].solicited), (Some(victim), true));
    assert_eq!((rc[1].inv_stag, rc[1].solicited), (None, true));
    // the unsignaled send produced no completion
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|c| c.wr_id)
            .collect::<Vec<_>>(),
        vec![7]
    );
    let ops: Vec<Opcode> = ulpdus(&p.a.sent, true, false)
        .iter()
        .map(|u| RdmapHeader::parse(u).unwrap().0.opcode())
        .collect();
    assert_eq!(ops, vec![Opcode::SendSeInvalidate, Opcode::SendSe]);
    // a Write to the invalidated region now fails
    p.a.conn
        .post_write(9, &[Sge::new(BASE, 4)], victim, BASE + 30_000, true)
        .unwrap();
    p.drive();
    assert_eq!(p.b.errors, vec![ProtoError::DdpInvalidStag]);
}

#[test]
fn p2p_write_rtr_goes_first_and_responder_waits() {
    let mut p = Pair::new(Opts {
        rtr: Some(RtrKind::Write),
        ..Opts::default()
    });
    // the responder has something to send but must wait for the RTR
    p.a.conn.post_recv(1, &[Sge::new(BASE, 64)]).unwrap();
    p.b.conn
        .post_send(2, &[Sge::new(BASE, 64)], flags())
        .unwrap();
    assert!(p.b.conn.poll_transmit(&p.b.mem).is_none());
    p.a.conn
        .post_send(3, &[Sge::new(BASE, 0)], flags())
        .unwrap();
    p.b.conn.post_recv(4, &[Sge::new(BASE + 100, 0)]).unwrap();
    p.drive();
    let first = &ulpdus(&p.a.sent, true, false)[0];
    assert_eq!(first.len(), 14, "zero-length tagged Write: ULPDU length 14");
    let (h, _) = RdmapHeader::parse(first).unwrap();
    assert_eq!(
        h.message(),
        RdmapMessage::Write {
            sink_stag: STag(1),
            sink_to: 0
        }
    );
    assert_eq!(&p.a.sent[..4], &[0x00, 0x0e, 0xc1, 0x40]);
    assert_eq!(p.a.recv_completions().len(), 1);
    assert_eq!(p.b.recv_completions().len(), 1);
    assert_eq!(p.a.completions().len(), 1, "the RTR completes nothing");
}

#[test]
fn p2p_read_and_send_rtr() {
    for kind in [RtrKind::Read, RtrKind::Send] {
        let mut p = Pair::new(Opts {
            rtr: Some(kind),
            ..Opts::default()
        });
        p.a.conn.post_recv(1, &[Sge::new(BASE, 8)]).unwrap();
        p.b.conn.post_recv(5, &[Sge::new(BASE, 8)]).unwrap();
        p.b.conn
            .post_send(2, &[Sge::new(BASE, 8)], flags())
            .unwrap();
        assert!(p.b.conn.poll_transmit(&p.b.mem).is_none());
        p.drive();
        assert_eq!(p.a.recv_completions().len(), 1, "{kind:?}");
        assert!(
            p.b.recv_completions().is_empty(),
            "the Send RTR consumes no receive"
        );
        assert!(p.a.completions().is_empty() && p.a.errors.is_empty() && p.b.errors.is_empty());
        let (h, _) = RdmapHeader::parse(&ulpdus(&p.a.sent, true, false)[0]).unwrap();
        assert_eq!(
            h.opcode(),
            if kind == RtrKind::Read {
                Opcode::ReadRequest
            } else {
                Opcode::Send
            }
        );
    }
}

#[test]
fn close_is_graceful_and_eof_clean() {
    let mut p = Pair::new(Opts::default());
    p.b.conn.post_recv(1, &[Sge::new(BASE, 100)]).unwrap();
    p.b.conn.post_recv(2, &[Sge::new(BASE, 100)]).unwrap();
    p.a.conn
        .post_send(3, &[Sge::new(BASE, 100)], flags())
        .unwrap();
    p.a.conn.close();
    assert_eq!(
        p.a.conn.post_send(4, &[], flags()),
        Err(ddp_proto::conn::PostError::NotOpen)
    );
    assert_eq!(p.a.conn.state(), State::Closing);
    p.drive();
    assert!(p.a.closed());
    assert_eq!(p.a.completions().len(), 1);
    p.b.conn.handle_eof();
    drain_events(&mut p.b);
    assert!(p.b.closed());
    assert!(p.b.error_events().is_empty());
    let rc = p.b.recv_completions();
    assert_eq!(
        (rc[0].status, rc[1].status),
        (WcStatus::Success, WcStatus::Flushed)
    );
}

#[test]
fn truncation_needs_more_then_stream_lost() {
    let mut p = Pair::new(Opts::default());
    p.b.conn.post_recv(1, &[Sge::new(BASE, 5000)]).unwrap();
    p.a.conn
        .post_send(2, &[Sge::new(BASE, 5000)], flags())
        .unwrap();
    p.fault_to_b = Some(Fault::Truncate { len: 2000 });
    p.drive();
    assert!(
        p.b.events.is_empty(),
        "a truncated stream is just 'need more'"
    );
    p.b.conn.handle_eof();
    drain_events(&mut p.b);
    assert_eq!(p.b.error_events(), vec![ProtoError::StreamLost]);
    assert!(p.b.closed());
    assert_eq!(
        p.b.recv_completions()[0].status,
        WcStatus::Fatal(ProtoError::StreamLost)
    );
    assert!(
        p.b.conn.poll_transmit(&p.b.mem).is_none(),
        "StreamLost sends no Terminate"
    );
}

#[test]
fn local_protection_fails_only_the_work_request() {
    let mut p = Pair::new(Opts::default());
    p.b.conn.post_recv(1, &[Sge::new(BASE, 8)]).unwrap();
    p.a.conn.post_send(2, &[Sge::new(1, 8)], flags()).unwrap();
    p.a.conn
        .post_send(3, &[Sge::new(BASE, 8)], flags())
        .unwrap();
    p.drive();
    let c = p.a.completions();
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::LocalProtection));
    assert_eq!((c[1].wr_id, c[1].status), (3, WcStatus::Success));
    assert_eq!(p.b.recv_completions().len(), 1);
}

#[test]
fn completion_waits_for_on_written() {
    let mut p = Pair::new(Opts::default());
    p.a.conn
        .post_send(1, &[Sge::new(BASE, 8)], flags())
        .unwrap();
    let t = p.a.conn.poll_transmit(&p.a.mem).unwrap();
    assert!(p.a.conn.poll_event().is_none());
    p.a.conn.on_written(t.len() as u64 - 1);
    assert!(p.a.conn.poll_event().is_none());
    p.a.conn.on_written(1);
    assert!(matches!(p.a.conn.poll_event(), Some(Event::Completion(c)) if c.wr_id == 1));
}

/// `poll_event_if` takes the next event only when its test says so, and leaves it next
/// otherwise: two Sends' completions, taken one by one only as completions.
#[test]
fn poll_event_if_takes_only_what_it_is_asked_for() {
    let mut p = Pair::new(Opts::default());
    for id in [1, 2] {
        p.a.conn
            .post_send(id, &[Sge::new(BASE, 8)], flags())
            .unwrap();
    }
    while let Some(t) = p.a.conn.poll_transmit(&p.a.mem) {
        p.a.conn.on_written(t.len() as u64);
    }
    let recv = |e: &Event| matches!(e, Event::RecvCompletion(_));
    let send = |e: &Event| matches!(e, Event::Completion(_));
    assert!(
        p.a.conn.poll_event_if(recv).is_none(),
        "a send completion is next"
    );
    assert!(matches!(p.a.conn.poll_event_if(send), Some(Event::Completion(c)) if c.wr_id == 1));
    assert!(p.a.conn.poll_event_if(recv).is_none());
    assert!(matches!(p.a.conn.poll_event(), Some(Event::Completion(c)) if c.wr_id == 2));
    assert!(p.a.conn.poll_event_if(send).is_none(), "no event left");
    assert!(!p.a.conn.has_events());
}

/// Frames and "writes" everything `s` has to send, checking `unsent_len` at every step: framing
/// moves bytes from the queue to the framed part without changing the total, every written
/// byte takes exactly one off it, and it is 0 exactly when `poll_transmit` has nothing more.
fn drain_checking_unsent(s: &mut Side) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let before = s.conn.unsent_len();
        let Some(t) = s.conn.poll_transmit(&s.mem) else {
            assert_eq!(before, 0, "nothing to send, yet {before} bytes unsent");
            return out;
        };
        let bytes = t.gather(&s.mem);
        assert_eq!(
            s.conn.unsent_len(),
            before,
            "framing must not change the total"
        );
        let half = bytes.len() / 2;
        s.conn.on_written(half as u64);
        assert_eq!(s.conn.unsent_len(), before - half as u64);
        s.conn.on_written((bytes.len() - half) as u64);
        assert_eq!(s.conn.unsent_len(), before - bytes.len() as u64);
        out.extend_from_slice(&bytes);
    }
}

#[test]
fn unsent_len_is_the_exact_stream_bytes_left() {
    // Several segments per message (MULPDU 300), a zero-length Send, a Write, a Read Request,
    // and on the other side Read Responses owed: SIOCOUTQ's engine part (the driver adds its
    // own) must be exact without markers.
    for crc in [true, false] {
        let mut p = Pair::new(Opts {
            crc,
            mulpdu: 300,
            mem_size: 1 << 17,
            ..Opts::default()
        });
        let stag =
            p.b.mem
                .register(BASE, 30_000, Access::REMOTE_READ | Access::REMOTE_WRITE, 1);
        assert_eq!(p.a.conn.unsent_len(), 0);
        p.b.conn
            .post_recv(1, &[Sge::new(BASE + 40_000, 2000)])
            .unwrap();
        p.b.conn
            .post_recv(2, &[Sge::new(BASE + 42_000, 16)])
            .unwrap();
        p.a.conn
            .post_send(1, &[Sge::new(BASE, 2000)], flags())
            .unwrap();
        p.a.conn.post_send(2, &[], flags()).unwrap();
        p.a.conn
            .post_write(3, &[Sge::new(BASE + 2000, 4097)], stag, BASE + 10_000, true)
            .unwrap();
        for i in 0..2u64 {
            p.a.conn
                .post_read(
                    4 + i,
                    &[Sge::new(BASE + 50_000 + i * 6000, 5000)],
                    stag,
                    BASE,
                    5000,
                    true,
                )
                .unwrap();
        }
        let queued = p.a.conn.unsent_len();
        let a_out = drain_checking_unsent(&mut p.a);
        assert_eq!(queued, a_out.len() as u64, "crc {crc}");
        p.b.conn.handle_input(&a_out, &mut p.b.mem).unwrap();
        drain_events(&mut p.b);
        assert!(p.b.errors.is_empty(), "{:?}", p.b.errors);
        assert_eq!(p.b.conn.reads_owed(), 2);
        let owed = p.b.conn.unsent_len();
        let b_out = drain_checking_unsent(&mut p.b);
        assert_eq!(owed, b_out.len() as u64, "crc {crc}");
        assert!(owed > 10_000, "{owed}");
        // and the responses complete A's reads
        p.a.conn.handle_input(&b_out, &mut p.a.mem).unwrap();
        drain_events(&mut p.a);
        assert_eq!(p.a.completions().len(), 5);
        assert_eq!(p.a.conn.unsent_len(), 0);
    }
}

/// A seeded random mix of operations, checked against a model: every Send lands in the next
/// posted receive in order, every Write and Read moves exactly its bytes (targets are
/// disjoint, so the model is exact), every work request completes once, in posting order.
#[test]
fn random_mix_against_model() {
    const MB: u64 = 1 << 20;
    for seed in 1..=8u64 {
        let chunking = [
            Chunking::Whole,
            Chunking::Random(1),
            Chunking::Random(200),
            Chunking::Random(5000),
        ][seed as usize % 4];
        let o = Opts {
            seed,
            chunking,
            markers: seed % 2 == 0,
            direct: seed % 3 == 0,
            mulpdu: 128 + (seed as usize * 211) % 1400,
            ord_a: 1 + (seed % 3) as u16,
            ird_b: 4,
            mem_size: 4 * MB as usize,
            ..Opts::default()
        };
        let mut p = Pair::new(o);
        let mut rng = Rng::new(seed * 1000);
        let win = p.b.mem.register(BASE + 2 * MB, MB, Access::REMOTE_WRITE, 1);
        let src =
            p.b.mem
                .register(BASE + 3 * MB, MB / 4, Access::REMOTE_READ, 1);
        let (mut recv_at, mut win_at, mut sink_at) = (BASE + MB / 4, BASE + 2 * MB, BASE + MB);
        let mut expect_recv = Vec::new();
        let mut expect_sq = Vec::new();
        let mut checks: Vec<(u64, u64, usize)> = Vec::new(); // (A addr, B addr, len)
        for i in 0..60u64 {
            let len = rng.below(9000) as usize;
            let a_addr = BASE + rng.below(MB / 4 - 9000);
            match rng.below(3) {
                0 => {
                    p.b.conn
                        .post_recv(i, &[Sge::new(recv_at, len as u32)])
                        .unwrap();
                    p.a.conn
                        .post_send(i, &[Sge::new(a_addr, len as u32)], flags())
                        .unwrap();
                    expect_recv.push((i, len as u64));
                    checks.push((a_addr, recv_at, len));
                    recv_at += len as u64;
                }
                1 => {
                    p.a.conn
                        .post_write(i, &[Sge::new(a_addr, len as u32)], win, win_at, true)
                        .unwrap();
                    checks.push((a_addr, win_at, len));
                    win_at += len as u64;
                }
                _ => {
                    let from = BASE + 3 * MB + rng.below(MB / 4 - 9000);
                    p.a.conn
                        .post_read(
                            i,
                            &[Sge::new(sink_at, len as u32)],
                            src,
                            from,
                            len as u32,
                            true,
                        )
                        .unwrap();
                    checks.push((sink_at, from, len));
                    sink_at += len as u64;
                }
            }
            expect_sq.push(i);
            if rng.below(4) == 0 {
                p.drive();
            }
        }
        p.drive();
        assert!(
            p.a.errors.is_empty() && p.b.errors.is_empty(),
            "seed {seed}: {:?} {:?}",
            p.a.errors,
            p.b.errors
        );
        let got_sq: Vec<u64> = p.a.completions().iter().map(|c| c.wr_id).collect();
        assert_eq!(got_sq, expect_sq, "seed {seed}");
        assert!(
            p.a.completions()
                .iter()
                .all(|c| c.status == WcStatus::Success)
        );
        let got_recv: Vec<(u64, u64)> =
            p.b.recv_completions()
                .iter()
                .map(|c| (c.wr_id, c.byte_len))
                .collect();
        assert_eq!(got_recv, expect_recv, "seed {seed}");
        for (a_addr, b_addr, len) in checks {
            assert_eq!(
                p.a.mem.bytes(a_addr, len),
                p.b.mem.bytes(b_addr, len),
                "seed {seed}"
            );
        }
    }
}

/// The general transmit path copies a small segment's payload into the scratch (one CRC pass,
/// one piece): a small Write and the Send that announces it go out as one contiguous run,
/// while a Write above the copy limit refers to the application's buffer. Either way the
/// octets deframe cleanly (CRC checked) and land where they belong; with markers (which the
/// contiguous framing declines) the payload is referenced as before.
#[test]
fn small_segments_are_framed_as_one_run_large_ones_by_reference() {
    for markers in [false, true] {
        for (size, small) in [
            (0usize, true),
            (1, true),
            (100, true),
            (1024, true),
            (1025, false),
        ] {
            let mut p = Pair::new(Opts {
                markers,
                mem_size: 64 * 1024,
                ..Opts::default()
            });
            let (src, dst, note, rbuf) = (BASE, BASE + 8192, BASE + 16384, BASE + 20480);
            let stag = p.b.mem.register(dst, 4096, Access::REMOTE_WRITE, 1);
            p.b.conn.post_recv(9, &[Sge::new(rbuf, 64)]).unwrap();
            p.a.conn
                .post_write(1, &[Sge::new(src, size as u32)], stag, dst, false)
                .unwrap();
            p.a.conn
                .post_send(2, &[Sge::new(note, 8)], flags())
                .unwrap();
            let t =
                p.a.conn
                    .poll_transmit(&p.a.mem)
                    .expect("both framed at once");
            assert_eq!(t.fpdus, 2, "size {size}, markers {markers}");
            let refs = t
                .pieces
                .iter()
                .filter(|x| !matches!(x, ddp_proto::conn::TxPiece::Scratch(_)))
                .count();
            if small && !markers {
                assert_eq!(t.pieces.len(), 1, "size {size}: one contiguous run");
            } else {
                assert!(
                    refs >= 1,
                    "size {size}, markers {markers}: the payload by reference"
                );
            }
            let bytes = t.gather(&p.a.mem);
            let u = ulpdus(&bytes, true, markers);
            assert_eq!(
                u.len(),
                2,
                "size {size}, markers {markers}: two clean FPDUs"
            );
            p.a.conn.on_written(bytes.len() as u64);
            p.b.inbox.extend_from_slice(&bytes);
            p.drive();
            let want = p.a.mem.bytes(src, size).to_vec();
            assert_eq!(p.b.mem.bytes(dst, size), &want[..], "size {size}");
            let want = p.a.mem.bytes(note, 8).to_vec();
            assert_eq!(p.b.mem.bytes(rbuf, 8), &want[..]);
            assert_eq!(p.b.recv_completions().len(), 1);
            assert!(p.a.errors.is_empty() && p.b.errors.is_empty());
        }
    }
}

/// A whole tagged RDMA Write is placed in one step too (`Connection::whole_write`). Random
/// FPDU streams of Writes (good; to an unknown STag, with a wrong key, past the region's end,
/// into a region without the remote write right, zero-length, in two segments, with a bad
/// DDP or RDMAP control octet, a flipped bit) and Sends into posted receives, fed whole and a
/// byte at a time, must leave the receiver in the same place: region and receive memory,
/// completions, counters (tagged bytes too), state, error and the Terminate sent back.
#[test]
fn whole_writes_match_the_general_steps() {
    let mut clean = 0;
    for seed in 0..400u64 {
        let mut rng = Rng::new(7000 + seed);
        let crc = seed % 5 != 4;
        let opts = |chunking| Opts {
            crc,
            chunking,
            mode_b: RecvMode::Posted,
            mem_size: 16384,
            seed,
            ..Opts::default()
        };
        // the regions as every run registers them: writable, and read-only
        let regions = |p: &mut Pair| {
            (
                p.b.mem.register(BASE + 4096, 2048, Access::REMOTE_WRITE, 1),
                p.b.mem.register(BASE + 8192, 512, Access::REMOTE_READ, 1),
            )
        };
        let (w, ro) = regions(&mut Pair::new(opts(Chunking::Whole)));
        let (mut stream, mut good, mut msn, mut writes) = (Vec::new(), true, 1u32, 0);
        for _ in 0..1 + rng.below(6) {
            if rng.below(3) == 0 {
                let payload = vec![rng.below(256) as u8; 1 + rng.below(64) as usize];
                let h = RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, true);
                stream.extend_from_slice(&fpdu(&ulpdu(&h, &payload), crc));
                msn += 1;
                continue;
            }
            writes += 1;
            let len = if rng.below(10) == 0 {
                0
            } else {
                1 + rng.below(300)
            };
            let payload: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let to = BASE + 4096 + rng.below(2048 - len);
            let kind = rng.below(24);
            let (stag, to) = match kind {
                13 => (STag::from_parts(w.index() + 7, w.key()), to),
                14 => (STag::from_parts(w.index(), w.key() ^ 0x5a), to),
                15 if len > 1 => (w, BASE + 4096 + 2048 - len / 2),
                16 => (ro, BASE + 8192),
                _ => (w, to),
            };
            let last = kind != 17;
            let h = RdmapHeader::new(
                RdmapMessage::Write {
                    sink_stag: stag,
                    sink_to: to,
                },
                last,
            );
            let mut u = ulpdu(&h, &payload);
            match kind {
                18 => u[0] = [0x41, 0x82, 0xc5, 0xe1][rng.below(4) as usize], // DDP ctrl
                19 => u[1] = [0x00, 0x80, 0x43, 0x4e][rng.below(4) as usize], // RDMAP ctrl
                _ => {}
            }
            let mut f = fpdu(&u, crc);
            if kind == 20 && crc {
                let at = rng.below(f.len() as u64) as usize;
                f[at] ^= 1 << rng.below(8);
            }
            stream.extend_from_slice(&f);
            if !last {
                // the rest of the message: its next segment, right after
                let h = RdmapHeader::new(
                    RdmapMessage::Write {
                        sink_stag: stag,
                        sink_to: to + len,
                    },
                    true,
                );
                stream.extend_from_slice(&fpdu(&ulpdu(&h, &[9u8; 3]), crc));
            }
            good &= kind < 13 || (kind == 15 && len <= 1);
        }
        let sends = u64::from(msn - 1);
        let run = |chunking| {
            let mut p = Pair::new(opts(chunking));
            assert_eq!(
                regions(&mut p),
                (w, ro),
                "seed {seed}: the same STags each run"
            );
            for i in 0..sends {
                p.b.conn
                    .post_recv(10 + i, &[Sge::new(BASE + 12288 + i * 64, 64)])
                    .unwrap();
            }
            p.b.inbox = stream.clone();
            p.drive();
            (
                Left::of(&p.b, BASE + 4096, 8192 + 512),
                p.b.conn.stats().bytes_tagged_in,
            )
        };
        let (whole, bytes) = (run(Chunking::Whole), run(Chunking::Bytes));
        assert!(
            whole == bytes,
            "seed {seed}: fed whole {:?} {}, a byte at a time {:?} {}",
            whole.0.brief(),
            whole.1,
            bytes.0.brief(),
            bytes.1
        );
        if good && writes > 0 && whole.0.state == State::Open {
            clean += 1;
        }
    }
    assert!(clean > 30, "{clean} streams of good Writes all placed");
}

/// A small message right behind a large one goes along in its `Transmit`, past the bound
/// (`Connection::small_behind`): a 64 KiB RDMA Write and the 8-byte Send that announces it
/// leave in one `writev`, so the peer is woken once. A large Send behind it does not, and
/// small ones take the `Transmit` at most 4 KiB past its bound.
#[test]
fn a_small_send_behind_a_large_write_goes_in_the_same_transmit() {
    const SIZE: usize = 64 * 1024;
    let opcodes = |bytes: &[u8]| -> Vec<Opcode> {
        ulpdus(bytes, true, false)
            .iter()
            .map(|u| {
                RdmapHeader::parse(u)
                    .expect("a clean ULPDU")
                    .0
                    .message()
                    .opcode()
            })
            .collect()
    };
    for behind in [8usize, 1024, 1025, 2 * SIZE] {
        let mut p = Pair::new(Opts {
            mulpdu: 9000,
            mem_size: 8 * SIZE,
            ..Opts::default()
        });
        let at = |k: u64| BASE + k * SIZE as u64;
        let (src, dst, note, rbuf) = (at(0), at(1), at(2), at(4));
        let stag = p.b.mem.register(dst, SIZE as u64, Access::REMOTE_WRITE, 1);
        p.b.conn
            .post_recv(9, &[Sge::new(rbuf, behind as u32)])
            .unwrap();
        p.a.conn
            .post_write(1, &[Sge::new(src, SIZE as u32)], stag, dst, false)
            .unwrap();
        p.a.conn
            .post_send(2, &[Sge::new(note, behind as u32)], flags())
            .unwrap();
        let t = p.a.conn.poll_transmit(&p.a.mem).expect("the Write");
        let first = t.gather(&p.a.mem);
        let ops = opcodes(&first);
        let sends = ops.iter().filter(|o| **o == Opcode::Send).count();
        if behind <= 1024 {
            assert_eq!(sends, 1, "{behind} B behind: {ops:?}");
        } else {
            assert_eq!(sends, 0, "{behind} B behind: {ops:?}");
        }
        assert!(
            first.len() < SIZE + 9000 + 4096 + 64,
            "{behind} B: {} bytes",
            first.len()
        );
        p.a.conn.on_written(first.len() as u64);
        p.b.inbox.extend_from_slice(&first);
        p.drive();
        let want = p.a.mem.bytes(src, SIZE).to_vec();
        assert_eq!(p.b.mem.bytes(dst, SIZE), &want[..], "{behind} B behind");
        let want = p.a.mem.bytes(note, behind).to_vec();
        assert_eq!(p.b.mem.bytes(rbuf, behind), &want[..]);
        assert_eq!(p.b.recv_completions().len(), 1);
        assert!(p.a.errors.is_empty() && p.b.errors.is_empty());
    }
}
