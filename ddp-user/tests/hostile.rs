//! The hostile-peer matrix (issue 6): a raw-TCP peer attacks a DDP listener and a DDP
//! connector, one case per test, each in both roles where the role matters.
//!
//! Every case asserts: (1) the exact Terminate (layer, error type, code) on the wire — or, in
//! the MPA phase, the documented answer (no Reply / a Reply with R=1 / a plain close) — or
//! none where the RFC wants none (a lost stream); (2) the victim's connection is over
//! (`DDP_CONN_INFO` state and term fields, `take_error`, `EPIPE` for new work, EOF) and its
//! outstanding work completed with the documented `DDP_WC_*` status and `vendor_err`;
//! (3) a healthy connection of the same process still transfers, and (listener role) the
//! same listener accepts a new connection that works; (4) every buffer the engine may touch
//! is guarded (PROT_NONE pages on both sides, a fault kills the test) and checksummed outside
//! what valid operations may write; (5) bounded time (`common::bounded`, a 400 ms MPA
//! timeout, both scaled by `EXSOCK_TEST_TIME_SCALE` under valgrind; 10 s read bounds in the
//! hostile peer).
//!
//! The table of cases and results is in `docs/reliability.md`.

// Lists of byte ranges (what a case may write) often hold one range: that is the meaning.
#![allow(clippy::single_range_in_vec_init)]

#[path = "hostile/bench.rs"]
mod bench;
mod common;
#[path = "hostile/guard.rs"]
mod guard;
#[path = "hostile/peer.rs"]
mod peer;

use std::io::{IoSlice, IoSliceMut, Write};
use std::ops::Range;
use std::time::{Duration, Instant};

use bench::*;
use common::{bounded, iov, pattern, send_all};
use ddp_proto::ddp::STag;
use ddp_proto::mpa::markers::is_marker_start;
use ddp_proto::mpa::startup::MpaConfig;
use ddp_proto::wire::mpa::MpaFrameRepr;
use ddp_proto::wire::rdmap::{Opcode, RdmapControl, RdmapHeader, RdmapMessage};
use ddp_user::engine::cq::{Wc, status};
use ddp_user::{DdpSocket, SIGNALED};
use guard::Watched;
use peer::*;

/// One test per role for a case: `victim_listener` (the victim accepts) and
/// `victim_connector` (the victim connects).
macro_rules! both_roles {
    ($name:ident, $f:path) => {
        mod $name {
            use super::*;
            #[test]
            fn victim_listener() {
                bounded(60, || $f(Role::Listener));
            }
            #[test]
            fn victim_connector() {
                bounded(60, || $f(Role::Connector));
            }
        }
    };
}

// --------------------------------------------------------------------------------------
// Full-operation cases: one FPDU (or a few) after a correct MPA exchange.

/// What a full-operation case expects.
struct Expect {
    /// The Terminate the victim sends.
    code: Code,
    /// Status of the posted receive (wr_id 500).
    recv_status: u32,
    /// Bytes of the rw region the attack may (tentatively) have written.
    rw: Vec<Range<usize>>,
    /// Bytes of the receive buffer the attack may (tentatively) have written.
    recv: Vec<Range<usize>>,
}

impl Expect {
    /// A Terminate with `code`; the posted receive is flushed; nothing may be written.
    fn flush(code: Code) -> Expect {
        Expect {
            code,
            recv_status: status::FLUSH_ERR,
            rw: vec![],
            recv: vec![],
        }
    }
}

/// Runs a full-operation case: a correct exchange, the victim's guarded memory registered
/// and one receive posted, `attack`, then every check of the module docs.
fn fpdu_case(
    role: Role,
    markers: bool,
    want: Expect,
    attack: impl FnOnce(&mut Hostile, &VictimMem),
) {
    let mut opts = victim_options();
    opts.markers = markers;
    let bench = Bench::new(role, opts);
    let (mut h, v) = bench.establish();
    let mem = VictimMem::new(&v, &bench.healthy.1, want.rw.clone(), want.recv.clone());
    mem.post_recv(500);
    attack(&mut h, &mem);
    // (1) the Terminate on the wire, then the close.
    h.expect_terminate_code(want.code);
    // (2) the victim's view.
    let wc = wait_wcs(&v, 1);
    assert_wc(&wc[0], 500, want.recv_status, Some(want.code));
    assert_ended(
        &v,
        Ended {
            term: Some((1, want.code)),
            so_error: libc::ECONNRESET,
        },
    );
    // (4) memory.
    mem.assert_untouched();
    drop(mem);
    drop(v);
    // (3) the rest of the process.
    bench.finish();
}

// ---- MPA (LLP) errors in full operation

fn bad_crc(role: Role) {
    let want = Expect {
        code: (2, 0, 2),
        recv_status: status::FATAL_ERR,
        rw: vec![],
        // payload is placed before the CRC is known (documented: into the validated
        // target only); nothing completes.
        recv: vec![0..32],
    };
    fpdu_case(role, false, want, |h, _| {
        let hb = emit(&RdmapHeader::new(
            RdmapMessage::Send { msn: 1, mo: 0 },
            true,
        ));
        let mut f = h.frame(&[&hb, &[0x5a; 32]]);
        let n = f.len();
        f[n - 1] ^= 0x01;
        h.send_raw(&f);
    });
}
both_roles!(bad_crc_terminates_llp_crc, super::bad_crc);

fn marker_wrong_place(role: Role) {
    let want = Expect {
        code: (2, 0, 3),
        recv_status: status::FLUSH_ERR,
        // the Write's payload before the bad marker is placed tentatively
        rw: vec![0..1200],
        recv: vec![],
    };
    fpdu_case(role, true, want, |h, m| {
        assert!(
            h.neg.as_ref().unwrap().markers_tx,
            "victim asked for markers"
        );
        let start = h.tx_position();
        let hb = emit(&RdmapHeader::new(
            RdmapMessage::Write {
                sink_stag: m.rw_stag,
                sink_to: m.rw.g.addr(),
            },
            true,
        ));
        let mut f = h.frame(&[&hb, &pattern(1200, 3)]);
        // the second marker inside this FPDU: point it 4 bytes off
        let at = (1..f.len())
            .find(|&i| is_marker_start(start + i as u64))
            .expect("a marker inside a 1200-byte FPDU");
        let ptr = u16::from_be_bytes([f[at + 2], f[at + 3]]);
        f[at + 2..at + 4].copy_from_slice(&ptr.wrapping_add(4).to_be_bytes());
        fix_crc(&mut f); // only the marker is wrong
        h.send_raw(&f);
    });
}
both_roles!(marker_pointing_elsewhere, super::marker_wrong_place);

fn ulpdu_len_zero(role: Role) {
    fpdu_case(role, false, Expect::flush((2, 0, 3)), |h, _| {
        h.send_raw(&[0, 0, 0, 0, 0, 0, 0, 0]);
    });
}
both_roles!(ulpdu_length_zero, super::ulpdu_len_zero);

// ---- DDP header errors

fn ddp_version_untagged(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 2, 6)), |h, _| {
        let mut d = untagged(Opcode::Send, 0, 1, 0, true);
        d.ddp_version = 2;
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(bad_ddp_version_untagged, super::ddp_version_untagged);

fn ddp_version_tagged(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 4)), |h, m| {
        let mut d = tagged(Opcode::Write, m.rw_stag, m.rw.g.addr());
        d.ddp_version = 0;
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(bad_ddp_version_tagged, super::ddp_version_tagged);

// ---- RDMAP header errors

fn rdmap_version(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 2, 5)), |h, _| {
        let mut d = untagged(Opcode::Send, 0, 1, 0, true);
        d.ulp_ctrl = RdmapControl {
            version: 2,
            ..RdmapControl::new(Opcode::Send)
        }
        .to_byte();
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(bad_rdmap_version, super::rdmap_version);

fn unknown_opcode(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 2, 6)), |h, _| {
        let d = untagged(Opcode::Unknown(9), 0, 1, 0, true);
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(unknown_rdmap_opcode, super::unknown_opcode);

// ---- tagged RDMA Write

fn write_invalid_stag(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 0)), |h, m| {
        // an index no region has (the victim's own STag index, shifted far away)
        let stag = STag::from_parts(m.rw_stag.index() ^ 0x00ab_cd00, m.rw_stag.key());
        h.write(stag, m.rw.g.addr(), &[7; 64]);
    });
}
both_roles!(write_to_invalid_stag, super::write_invalid_stag);

fn write_wrong_key(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 0)), |h, m| {
        let stag = STag::from_parts(m.rw_stag.index(), m.rw_stag.key() ^ 0x5a);
        h.write(stag, m.rw.g.addr(), &[7; 64]);
    });
}
both_roles!(write_with_wrong_key, super::write_wrong_key);

fn write_other_connection(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 2)), |h, m| {
        h.write(m.other_stag, m.other.g.addr(), &[7; 64]);
    });
}
both_roles!(
    write_to_other_connections_stag,
    super::write_other_connection
);

fn write_no_remote_write(role: Role) {
    // RFC 5041 has no access-rights code: invalid STag (siw does the same).
    fpdu_case(role, false, Expect::flush((1, 1, 0)), |h, m| {
        h.write(m.ro_stag, m.ro.g.addr(), &[7; 64]);
    });
}
both_roles!(write_without_remote_write, super::write_no_remote_write);

fn write_past_end(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 1)), |h, m| {
        // 16 bytes fit, the 17th is the first byte of the guard page
        h.write(m.rw_stag, m.rw.g.addr() + (RW_LEN - 16) as u64, &[7; 17]);
    });
}
both_roles!(write_one_byte_past_the_end, super::write_past_end);

fn write_before_start(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 1)), |h, m| {
        h.write(m.rw_stag, m.rw.g.addr() - 1, &[7; 16]);
    });
}
both_roles!(write_one_byte_before_the_start, super::write_before_start);

fn write_to_wrap(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 1, 3)), |h, m| {
        h.write(m.rw_stag, u64::MAX - 7, &[7; 32]);
    });
}
both_roles!(write_with_wrapping_to, super::write_to_wrap);

// ---- untagged (Send)

fn send_bad_qn(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 2, 1)), |h, _| {
        let d = untagged(Opcode::Send, 5, 1, 0, true);
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(send_with_bad_qn, super::send_bad_qn);

fn send_msn_out_of_window(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 2, 3)), |h, _| {
        let d = untagged(Opcode::Send, 0, 7, 0, true);
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(send_msn_out_of_window, super::send_msn_out_of_window);

fn send_mo_past_buffer(role: Role) {
    fpdu_case(role, false, Expect::flush((1, 2, 4)), |h, _| {
        // first segment of MSN 1 claiming offset 4096 into a 256-byte receive
        let d = untagged(Opcode::Send, 0, 1, 4096, true);
        h.send_ulpdu(&[&emit_ddp(&d), &[1; 8]]);
    });
}
both_roles!(send_mo_past_posted_buffer, super::send_mo_past_buffer);

fn send_too_long(role: Role) {
    let want = Expect {
        code: (1, 2, 5),
        recv_status: status::LOC_LEN_ERR,
        rw: vec![],
        recv: vec![0..200], // the first segment fits and is placed
    };
    fpdu_case(role, false, want, |h, _| {
        let d1 = untagged(Opcode::Send, 0, 1, 0, false);
        h.send_ulpdu(&[&emit_ddp(&d1), &[1; 200]]);
        let d2 = untagged(Opcode::Send, 0, 1, 200, true);
        h.send_ulpdu(&[&emit_ddp(&d2), &[2; 100]]);
    });
}
both_roles!(send_longer_than_posted_buffer, super::send_too_long);

/// A Send with no posted receive, on a socket that posts receives: the first Send takes the
/// one posted receive, the second finds none.
fn send_without_recv(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let mem = VictimMem::new(&v, &bench.healthy.1, vec![], vec![0..32]);
    mem.post_recv(500);
    h.send(&[0x33; 32]);
    h.send(&[0x44; 32]);
    let code = (1, 2, 2);
    h.expect_terminate_code(code);
    let wc = wait_wcs(&v, 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (500, 0, 32));
    assert_eq!(&mem.recv.g.snapshot()[..32], &[0x33; 32]);
    assert_ended(
        &v,
        Ended {
            term: Some((1, code)),
            so_error: libc::ECONNRESET,
        },
    );
    mem.assert_untouched();
    drop((mem, v));
    bench.finish();
}
both_roles!(send_with_no_posted_receive, super::send_without_recv);

/// The LLP CRC Terminate on the wire, and the victim's connection ended by it.
fn expect_crc_end(h: &mut Hostile, v: &DdpSocket) {
    h.expect_terminate_code((2, 0, 2));
    assert_ended(
        v,
        Ended {
            term: Some((1, (2, 0, 2))),
            so_error: libc::ECONNRESET,
        },
    );
}

/// The invalid STag Terminate (an RDMA Write to an STag no region has) on the wire, and the
/// victim's connection ended by it.
fn expect_bad_stag_end(h: &mut Hostile, v: &DdpSocket) {
    h.expect_terminate_code((1, 1, 0));
    assert_ended(
        v,
        Ended {
            term: Some((1, (1, 1, 0))),
            so_error: libc::ECONNRESET,
        },
    );
}

/// Fills `buf` from the stream with blocking `recv`s (at most 10,000 of them; a panic
/// says how far it got).
fn recv_exactly(v: &DdpSocket, buf: &mut [u8]) {
    let mut n = 0;
    for _ in 0..10_000 {
        if n == buf.len() {
            return;
        }
        n += v.recv(&mut [IoSliceMut::new(&mut buf[n..])], 0).unwrap();
    }
    assert_eq!(n, buf.len(), "{n} of {} octets", buf.len());
}

/// Small Sends enough to end the large-FPDU mode a stream starts in
/// (`ConnState::large_stream`), read back and checked: the rounds a test counts after this
/// find the socket as a small-message exchange leaves it.
fn settle_small_stream(h: &mut Hostile, v: &DdpSocket) {
    for k in 0..4u64 {
        let body = pattern(24, 0x5e77 + k);
        h.send(&body);
        let mut got = vec![0u8; body.len()];
        recv_exactly(v, &mut got);
        assert!(got == body, "settling Send {k}: content differs");
    }
}

/// Waits (5 s, scaled) until `fd` is readable; `what` names what should arrive.
fn wait_readable(fd: i32, what: &str) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = 5000 * common::time_scale() as i32;
    // SAFETY: one pollfd on the stack.
    assert_eq!(unsafe { libc::poll(&mut p, 1, ms) }, 1, "{what}");
}

/// Stream data (no receive posted) read in 1 MiB buffers, so that reads place several FPDUs
/// each (chained reads), with a bad CRC on the large FPDU of message `BAD` of 96 equal
/// 64 KiB messages: every byte before that message arrives, in order, and not one more; the
/// LLP CRC Terminate goes out; the payloads read ahead into the reader's buffer stay past
/// what `recv` returned, inside the buffer (guarded).
fn stream_chain_bad_crc(role: Role) {
    const MSG: usize = 65536;
    const MSGS: usize = 96;
    const BAD: usize = 61;
    // (a full FPDU's payload at the loopback MULPDU, as exsock and siw cut 64 KiB)
    const SPLIT: usize = 65456;
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    // The victim's reads wake with at least 1 MiB waiting in the kernel: each read takes
    // several FPDUs (the chained reads this case is about), not one as it arrives.
    let lowat: libc::c_int = 1 << 20;
    // SAFETY: one int option on the victim's TCP socket.
    let rc = unsafe {
        libc::setsockopt(
            v.tcp_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&lowat as *const libc::c_int).cast(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVLOWAT");
    let data = pattern(MSGS * MSG, 31);
    let mut wire = Vec::with_capacity(MSGS * (MSG + 64));
    for (m, body) in data.chunks(MSG).enumerate() {
        let msn = h.send_msn;
        h.send_msn += 1;
        let first = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, false));
        let mut f = h.frame(&[&first, &body[..SPLIT]]);
        if m == BAD {
            let n = f.len();
            f[n - 1] ^= 0x01;
        }
        wire.extend_from_slice(&f);
        let mo = SPLIT as u32;
        let second = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo }, true));
        wire.extend_from_slice(&h.frame(&[&second, &body[SPLIT..]]));
    }
    // (made first: the reader is waiting in `recv` when the first bytes come)
    let buf = guard::Guarded::new(MSGS * MSG, 3);
    // The input is this thread's from now on (a poll wait keeps it from the progress thread,
    // whose reads would take the FPDUs one at a time into its backlog if the writer got ahead
    // of the reader's first `recv`: 6 of 60 runs under load did).
    let pw = v.poll_wait().expect("open connection: a poll wait");
    let mut w = h.s.try_clone().unwrap();
    // (the victim ends the connection partway through: the write may fail)
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&wire);
    });
    let mut got = 0;
    let mut end = None;
    for _ in 0..10_000 {
        let want = (1usize << 20).min(buf.len() - got);
        // SAFETY: the guarded buffer is ours, `got + want` stays inside it, and nothing
        // else uses it while `recv` runs.
        let slice = unsafe { std::slice::from_raw_parts_mut(buf.ptr().add(got), want) };
        match v.recv(&mut [IoSliceMut::new(slice)], 0) {
            Ok(0) => {
                end = Some(0);
                break;
            }
            Ok(n) => got += n,
            Err(e) => {
                end = Some(e.0);
                break;
            }
        }
    }
    drop(pw);
    let c = v.counters().unwrap();
    eprintln!("stream_chain_bad_crc: {c:?}");
    assert_eq!(end, Some(0), "EOF after the last good byte");
    assert_eq!(
        got,
        BAD * MSG,
        "every byte before the bad FPDU, and not one more"
    );
    assert!(
        buf.snapshot()[..got] == data[..got],
        "stream content differs"
    );
    buf.assert_slack_untouched("reader's buffer");
    assert_eq!(c.crc_errors, 1);
    assert!(c.rx_chained >= 8, "reads placed several FPDUs each: {c:?}");
    expect_crc_end(&mut h, &v);
    writer.join().unwrap();
    drop(v);
    bench.finish();
}
both_roles!(
    stream_chain_bad_crc_ends_in_order,
    super::stream_chain_bad_crc
);

/// A poll round on a large stream reads the next FPDU's header before it knows what the FPDU
/// is (so that a reader's `recv` starts at the payload): when it is not stream data but an
/// RDMA Write to an STag no region has, those octets still go to the connection, and the
/// Terminate says invalid STag (not a framing error of an FPDU missing its start).
fn poll_round_non_stream_header(role: Role) {
    const MSG: usize = 65536;
    const SPLIT: usize = 65456;
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    // Two large stream messages, read: the socket counts as a large stream now.
    let data = pattern(2 * MSG, 7);
    let mut wire = Vec::new();
    for body in data.chunks(MSG) {
        let msn = h.send_msn;
        h.send_msn += 1;
        let first = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, false));
        wire.extend_from_slice(&h.frame(&[&first, &body[..SPLIT]]));
        let mo = SPLIT as u32;
        let second = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo }, true));
        wire.extend_from_slice(&h.frame(&[&second, &body[SPLIT..]]));
    }
    h.s.write_all(&wire).unwrap();
    let mut got = vec![0u8; data.len()];
    recv_exactly(&v, &mut got);
    assert!(got == data, "stream content differs");
    // Then a tagged FPDU, seen first by a poll round: the wait takes the input from the
    // progress thread before the FPDU is sent (taken after, it raced the progress thread,
    // which could read the FPDU and end the connection first).
    let pw = v.poll_wait().expect("open connection: a poll wait");
    let stag = STag::from_parts(0x00ab_cd00, 0x5a);
    h.write(stag, 0x1000, &[7; 64]);
    wait_readable(pw.tcp_fd(), "the FPDU arrives");
    assert!(!pw.service(), "not stream data: nothing held for a reader");
    drop(pw);
    expect_bad_stag_end(&mut h, &v);
    drop(v);
    bench.finish();
}
both_roles!(
    poll_round_reads_a_non_stream_header,
    super::poll_round_non_stream_header
);

/// A TCP segment may end inside an FPDU's header: over loopback a 65,483-octet segment
/// carries a large FPDU and the first octets of the small one after it. A poll round then
/// reads the rest of the header, wherever the split is, and leaves the payload in the
/// kernel for the reader's `recv` (it used to read the input into the engine, to be
/// copied out again); the stream arrives intact.
fn poll_round_split_header(role: Role) {
    const MSG: usize = 65536;
    const SPLIT: usize = 65456;
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let message = |h: &mut Hostile, body: &[u8]| {
        let msn = h.send_msn;
        h.send_msn += 1;
        let first = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, false));
        let big = h.frame(&[&first, &body[..SPLIT]]);
        let mo = SPLIT as u32;
        let second = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo }, true));
        (big, h.frame(&[&second, &body[SPLIT..]]))
    };
    let inq = |fd: i32| {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        assert_eq!(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) }, 0);
        n as usize
    };
    // Two large messages, read: the socket counts as a large stream now.
    for seed in 0..2 {
        let body = pattern(MSG, 100 + seed);
        let (big, small) = message(&mut h, &body);
        h.s.write_all(&[big, small].concat()).unwrap();
        let mut got = vec![0u8; MSG];
        recv_exactly(&v, &mut got);
        assert!(got == body, "stream content differs (message {seed})");
    }
    // (the small FPDU's ULPDU_LENGTH is 2 octets, its untagged header 18)
    for k in 1..20 {
        let body = pattern(MSG, k as u64);
        let (big, small) = message(&mut h, &body);
        h.s.write_all(&[&big[..], &small[..k]].concat()).unwrap();
        let mut got = vec![0u8; MSG];
        recv_exactly(&v, &mut got[..SPLIT]);
        assert_eq!(
            inq(v.tcp_fd()),
            0,
            "split {k}: the header's first octets were read"
        );
        let pw = v.poll_wait().expect("open connection: a poll wait");
        h.s.write_all(&small[k..]).unwrap();
        wait_readable(pw.tcp_fd(), &format!("split {k}: the rest arrives"));
        assert!(pw.service(), "split {k}: stream data for the reader");
        // Only the header's rest was read: payload and CRC wait for the reader.
        assert_eq!(
            inq(pw.tcp_fd()),
            MSG - SPLIT + 4,
            "split {k}: payload left in the kernel"
        );
        drop(pw);
        recv_exactly(&v, &mut got[SPLIT..]);
        assert!(got == body, "split {k}: stream content differs");
    }
    drop(v);
    bench.finish();
}
both_roles!(
    poll_round_reads_the_rest_of_a_split_header,
    super::poll_round_split_header
);

/// What follows the small Sends of [`poll_round_small_sends`] in the same write.
#[derive(Clone, Copy, Debug, PartialEq)]
enum SmallEnd {
    /// Nothing: three Sends, 20 rounds of them, each round taken in one step.
    Nothing,
    /// The first 5 octets of a third Send (the rest is written after the round).
    Split,
    /// An RDMA Write to an STag no region has.
    Write,
    /// A third Send whose CRC is wrong.
    BadCrc,
    /// The end of the stream (FIN).
    Fin,
}

/// The [`SmallEnd`] cases of `$run(role, end)`: each a test module `$name` in both roles (as
/// [`both_roles`]).
macro_rules! small_end_cases {
    ($run:ident: $($name:ident => $end:ident),+ $(,)?) => {
        $(
            mod $name {
                use super::*;
                fn case(role: Role) {
                    $run(role, SmallEnd::$end);
                }
                #[test]
                fn victim_listener() {
                    bounded(60, || case(Role::Listener));
                }
                #[test]
                fn victim_connector() {
                    bounded(60, || case(Role::Connector));
                }
            }
        )+
    };
}

impl SmallEnd {
    /// Rounds of three Sends the case runs: 20 of good ones, else one with its end.
    fn rounds(self) -> usize {
        if self == SmallEnd::Nothing { 20 } else { 1 }
    }

    /// Good Sends per round.
    fn good(self) -> usize {
        if matches!(self, SmallEnd::Nothing | SmallEnd::Split) {
            3
        } else {
            2
        }
    }
}

/// The write of a [`SmallEnd`] case: a Send of each of `bodies` (the third one cut, with a
/// bad CRC, or left out as `end` says), then an RDMA Write to an STag no region has if it
/// says so; and the octets of the cut Send that come later.
fn small_sends_wire(h: &mut Hostile, bodies: &[Vec<u8>], end: SmallEnd) -> (Vec<u8>, Vec<u8>) {
    let mut wire = Vec::new();
    let mut late = Vec::new();
    for (k, body) in bodies.iter().enumerate() {
        if k == 2 && matches!(end, SmallEnd::Write | SmallEnd::Fin) {
            break;
        }
        let msn = h.send_msn;
        h.send_msn += 1;
        let hb = emit(&RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, true));
        let mut f = h.frame(&[&hb, body]);
        if k == 2 && end == SmallEnd::Split {
            late = f.split_off(5);
        }
        if k == 2 && end == SmallEnd::BadCrc {
            let n = f.len();
            f[n - 1] ^= 0x01;
        }
        wire.extend_from_slice(&f);
    }
    if end == SmallEnd::Write {
        let stag = STag::from_parts(0x00ab_cd00, 0x5a);
        let hb = emit(&RdmapHeader::new(
            RdmapMessage::Write {
                sink_stag: stag,
                sink_to: 0x1000,
            },
            true,
        ));
        wire.extend_from_slice(&h.frame(&[&hb, &[7; 64]]));
    }
    (wire, late)
}

/// A new connection's stream starts in the large-FPDU mode (`ConnState::large_stream`), in
/// which a poll reads a header first and leaves the payload for the reader; small Sends read
/// so end that mode after four, and from then on a poll round takes them whole in one step.
/// (The headers read by the poll were not counted once: the mode never ended, a 64 B round
/// trip paid a `recvmsg` more.)
fn small_sends_after_a_poll_end_the_large_mode(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    const ROUNDS: usize = 10;
    for r in 0..ROUNDS {
        let body = pattern(40 + r, 0x77 + r as u64);
        let pw = v.poll_wait().expect("open connection: a poll wait");
        h.send(&body);
        wait_readable(pw.tcp_fd(), "the Send arrives");
        assert!(pw.service(), "round {r}: stream data held for the reader");
        drop(pw);
        let mut got = vec![0u8; body.len()];
        recv_exactly(&v, &mut got);
        assert!(got == body, "round {r}: content differs");
    }
    let taken = v.counters().unwrap().rx_small_rounds;
    assert!(
        taken >= (ROUNDS - 4) as u64,
        "{taken} of the last {} rounds taken in one step",
        ROUNDS - 4
    );
    drop(v);
    bench.finish();
}

both_roles!(
    small_sends_after_a_poll_end_the_large_mode,
    small_sends_after_a_poll_end_the_large_mode
);

/// Small stream messages as a request-response exchange brings them: a poll round takes the
/// FPDUs that are whole plain Sends in one step (`ConnState::small_round`) and leaves what
/// follows them in the same read to the general round. Every byte of the good Sends arrives
/// in order and not one more, and the end is the one the peer caused: the LLP CRC Terminate,
/// the invalid STag Terminate, or an EOF. Only reads of whole Sends count as one step.
fn poll_round_small_sends(role: Role, end: SmallEnd) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    settle_small_stream(&mut h, &v);
    let (rounds, good) = (end.rounds(), end.good());
    let before = v.counters().unwrap().rx_small_rounds;
    let reader = |want: &[u8]| {
        let mut got = vec![0u8; want.len()];
        recv_exactly(&v, &mut got);
        assert!(got == want, "{end:?}: stream content differs");
    };
    for r in 0..rounds {
        let bodies: Vec<Vec<u8>> = (0..3)
            .map(|k| pattern(1 + (r * 37 + k * 91) % 200, (r * 3 + k) as u64))
            .collect();
        let (wire, late) = small_sends_wire(&mut h, &bodies, end);
        // (the wait first: the input is this thread's, not the progress thread's)
        let pw = v.poll_wait().expect("open connection: a poll wait");
        h.s.write_all(&wire).unwrap();
        if end == SmallEnd::Fin {
            h.s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        wait_readable(pw.tcp_fd(), "the FPDUs arrive");
        assert!(pw.service(), "{end:?}: stream data held for the reader");
        drop(pw);
        if end == SmallEnd::Split {
            h.s.write_all(&late).unwrap();
        }
        reader(&bodies[..good].concat());
    }
    let taken = v.counters().unwrap().rx_small_rounds - before;
    // (a FIN after whole Sends is found by the next read: that round was whole too)
    let whole = if matches!(end, SmallEnd::Nothing | SmallEnd::Fin) {
        rounds
    } else {
        0
    };
    assert_eq!(taken, whole as u64, "{end:?}: rounds taken in one step");
    match end {
        SmallEnd::Nothing | SmallEnd::Split => {}
        SmallEnd::Fin => {
            let mut b = [0u8; 16];
            assert_eq!(v.recv(&mut [IoSliceMut::new(&mut b)], 0), Ok(0), "EOF");
        }
        SmallEnd::Write | SmallEnd::BadCrc => {
            let mut b = [0u8; 16];
            let r = v.recv(&mut [IoSliceMut::new(&mut b)], 0);
            assert_eq!(r, Ok(0), "{end:?}: EOF after the last good byte");
            if end == SmallEnd::BadCrc {
                expect_crc_end(&mut h, &v);
            } else {
                expect_bad_stag_end(&mut h, &v);
            }
        }
    }
    drop(v);
    bench.finish();
}
small_end_cases!(poll_round_small_sends:
    poll_round_small_sends_whole => Nothing,
    poll_round_small_sends_split => Split,
    poll_round_small_sends_then_a_write => Write,
    poll_round_small_sends_bad_crc => BadCrc,
    poll_round_small_sends_fin => Fin,
);

/// Small Sends into posted receives as a request-response exchange brings them: a thread
/// waiting for completions takes a read of whole Sends into the receives in one step
/// (`ConnState::posted_round`) and leaves everything else to the general round. Every good
/// Send lands in its receive, whole and with nothing written past it, its completion in
/// order, and the end is the one the peer caused: the LLP CRC Terminate, the invalid STag
/// Terminate, or an EOF (the receives left flushed; the one a bad Send was placed into
/// failed). Rounds whose read ended with the socket drained and nothing but receive
/// completions count as one step, a split Send's first part included (its rest comes to the
/// general round).
fn posted_round_small_sends(role: Role, end: SmallEnd) {
    const BUF: usize = 128;
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    settle_small_stream(&mut h, &v);
    let (rounds, good) = (end.rounds(), end.good());
    let before = v.counters().unwrap().rx_small_rounds;
    for r in 0..rounds {
        // (three of them in one read of 256 octets, the first read between messages)
        let bodies: Vec<Vec<u8>> = (0..3)
            .map(|k| pattern(1 + (r * 37 + k * 11) % 40, (r * 3 + k) as u64))
            .collect();
        let bufs: Vec<Watched> = bodies
            .iter()
            .enumerate()
            .map(|(k, b)| Watched::new(BUF, (r * 3 + k) as u64 + 0x51, vec![0..b.len()]))
            .collect();
        for (k, b) in bufs.iter().enumerate() {
            // SAFETY: every buffer outlives the completion taken below.
            unsafe { v.post_recv(k as u64, &[b.g.iov(0..BUF)]) }.unwrap();
        }
        let (wire, late) = small_sends_wire(&mut h, &bodies, end);
        assert!(
            wire.len() < 256,
            "one read between messages takes the round"
        );
        // (a poll wait first: the input is this thread's, not the progress thread's)
        let pw = v.poll_wait().expect("open connection: a poll wait");
        h.s.write_all(&wire).unwrap();
        if end == SmallEnd::Fin {
            h.s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        wait_readable(pw.tcp_fd(), "the FPDUs arrive");
        let mut wcs = Vec::new();
        let mut wc = [Wc::default(); 8];
        let k = v
            .wait_cq(&mut wc, Some(Duration::from_secs(10)))
            .expect("wait_cq");
        wcs.extend_from_slice(&wc[..k]);
        drop(pw);
        if end == SmallEnd::Split {
            h.s.write_all(&late).unwrap();
        }
        // The good ones, then (after an end) the rest flushed.
        let all = if end == SmallEnd::Nothing || end == SmallEnd::Split {
            good
        } else {
            3
        };
        for _ in 0..100 {
            if wcs.len() >= all {
                break;
            }
            let k = v
                .wait_cq(&mut wc, Some(Duration::from_secs(10)))
                .expect("wait_cq");
            assert!(k > 0, "{end:?}: completions within 10 s");
            wcs.extend_from_slice(&wc[..k]);
        }
        assert_eq!(wcs.len(), all, "{end:?}: completions {wcs:?}");
        for (k, w) in wcs.iter().enumerate() {
            assert_eq!(w.wr_id, k as u64, "{end:?}: completions in order");
            if k < good {
                assert_eq!(
                    (w.status, w.byte_len as usize),
                    (status::SUCCESS, bodies[k].len()),
                    "{end:?}: receive {k}"
                );
                assert!(
                    bufs[k].g.snapshot()[..bodies[k].len()] == bodies[k][..],
                    "{end:?}: receive {k} content"
                );
            } else if end == SmallEnd::BadCrc {
                // (the Send with the bad CRC was placed into this one: it ends with the error)
                assert_eq!(w.status, status::FATAL_ERR, "{end:?}: receive {k} failed");
            } else {
                assert_eq!(w.status, status::FLUSH_ERR, "{end:?}: receive {k} flushed");
            }
        }
        for (k, b) in bufs.iter().enumerate() {
            b.assert_untouched(&format!("{end:?}: receive buffer {k}"));
        }
    }
    let taken = v.counters().unwrap().rx_small_rounds - before;
    let whole = match end {
        SmallEnd::Nothing => rounds,
        SmallEnd::Split | SmallEnd::Fin => 1,
        SmallEnd::Write | SmallEnd::BadCrc => 0,
    };
    assert_eq!(taken, whole as u64, "{end:?}: rounds taken in one step");
    match end {
        SmallEnd::Nothing | SmallEnd::Split => {}
        SmallEnd::Fin => {
            assert_eq!(h.expect_silent_close(), Close::Fin, "no Terminate, a FIN");
        }
        SmallEnd::BadCrc => expect_crc_end(&mut h, &v),
        SmallEnd::Write => expect_bad_stag_end(&mut h, &v),
    }
    drop(v);
    bench.finish();
}
small_end_cases!(posted_round_small_sends:
    posted_round_small_sends_whole => Nothing,
    posted_round_small_sends_split => Split,
    posted_round_small_sends_then_a_write => Write,
    posted_round_small_sends_bad_crc => BadCrc,
    posted_round_small_sends_fin => Fin,
);

// ---- RDMA Read Request (source checks are RDMAP remote protection errors)

fn rr_bad_source_stag(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 1, 0)), |h, m| {
        let s = STag::from_parts(m.rw_stag.index(), m.rw_stag.key() ^ 0x11);
        h.read_request(s, m.rw.g.addr(), 64, 0);
    });
}
both_roles!(read_request_bad_source_stag, super::rr_bad_source_stag);

fn rr_no_remote_read(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 1, 2)), |h, m| {
        h.read_request(m.wo_stag, m.wo.g.addr(), 64, 0);
    });
}
both_roles!(read_request_without_remote_read, super::rr_no_remote_read);

fn rr_past_end(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 1, 1)), |h, m| {
        h.read_request(m.rw_stag, m.rw.g.addr() + (RW_LEN - 100) as u64, 101, 0);
    });
}
both_roles!(read_request_past_the_end, super::rr_past_end);

fn rr_other_connection(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 1, 3)), |h, m| {
        h.read_request(m.other_stag, m.other.g.addr(), 64, 0);
    });
}
both_roles!(
    read_request_other_connections_stag,
    super::rr_other_connection
);

fn rr_to_wrap(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 1, 4)), |h, m| {
        h.read_request(m.rw_stag, u64::MAX - 10, 64, 0);
    });
}
both_roles!(read_request_wrapping_to, super::rr_to_wrap);

fn rresp_unsolicited(role: Role) {
    fpdu_case(role, false, Expect::flush((0, 2, 6)), |h, _| {
        let hdr = RdmapHeader::new(
            RdmapMessage::ReadResponse {
                sink_stag: STag(1),
                sink_to: 0,
            },
            true,
        );
        h.send_msg(&hdr, &[9; 16]);
    });
}
both_roles!(read_response_without_read, super::rresp_unsolicited);

// ---- Read Request floods

const FLOOD_LEN: usize = 1 << 20;

/// More Read Requests than IRD in one burst: the first IRD are accepted, the next one is
/// the IRD Terminate (RDMAP remote operation error, catastrophic for the stream).
fn rr_flood_over_ird(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let ird = v.info().unwrap().ird;
    assert_eq!(ird, 16);
    let region = Watched::new(FLOOD_LEN, 77, vec![]);
    // SAFETY: deregistered below before `region` is dropped.
    let stag = unsafe { v.reg_mr(region.g.ptr(), FLOOD_LEN, REMOTE_READ) }.unwrap();
    let mut burst = Vec::new();
    for i in 0..(ird + 4) {
        // 1 MiB each: far more than the socket buffers hold, so none is retired meanwhile
        burst.extend(h.read_request_fpdu(stag, region.g.addr(), FLOOD_LEN as u32, u64::from(i)));
    }
    h.send_raw(&burst);
    let (t, skipped) = h.expect_terminate();
    assert_eq!(code_of(&t), (0, 2, 7), "IRD overflow Terminate: {t:?}");
    let rr = t
        .rdmap_header
        .expect("the Read Request header is copied (R)");
    assert_eq!(
        rr.sink_to,
        u64::from(ird),
        "the request past IRD is reported"
    );
    h.expect_close();
    eprintln!("{skipped} Read Response FPDUs came before the Terminate");
    assert_ended(
        &v,
        Ended {
            term: Some((1, (0, 2, 7))),
            so_error: libc::ECONNRESET,
        },
    );
    v.dereg_mr(stag).unwrap();
    region.assert_untouched("flooded region");
    drop(v);
    bench.finish();
}
both_roles!(read_request_flood_over_ird, super::rr_flood_over_ird);

/// A legal flood, repeated: IRD Read Requests in one burst, all served with the right bytes,
/// 20 times over; memory and connection stay sound.
fn rr_flood_within_ird(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let ird = v.info().unwrap().ird;
    let region = Watched::new(FLOOD_LEN, 78, vec![]);
    let content = region.g.snapshot();
    // SAFETY: deregistered below before `region` is dropped.
    let stag = unsafe { v.reg_mr(region.g.ptr(), FLOOD_LEN, REMOTE_READ) }.unwrap();
    const SIZE: usize = 48 * 1024;
    for round in 0..20u64 {
        let mut burst = Vec::new();
        let mut offs = Vec::new();
        for i in 0..u64::from(ird) {
            let off = ((round * 7919 + i * 65_537) % (FLOOD_LEN - SIZE) as u64) as usize;
            offs.push(off);
            burst.extend(h.read_request_fpdu(
                stag,
                region.g.addr() + off as u64,
                SIZE as u32,
                i << 32,
            ));
        }
        h.send_raw(&burst);
        for (i, off) in offs.iter().enumerate() {
            let mut got = Vec::new();
            loop {
                let Next::Ulpdu(u) = h.next() else {
                    panic!("victim closed during a legal flood")
                };
                let (hdr, n) = RdmapHeader::parse(&u).unwrap();
                let RdmapMessage::ReadResponse { sink_stag, sink_to } = hdr.message() else {
                    panic!("expected a Read Response, got {:?}", hdr.message());
                };
                assert_eq!(sink_stag, STag(0x0000_7701));
                assert_eq!(sink_to, ((i as u64) << 32) + got.len() as u64);
                got.extend_from_slice(&u[n..]);
                if hdr.last() {
                    break;
                }
            }
            assert!(got == content[*off..*off + SIZE], "round {round} read {i}");
        }
        assert_eq!(v.info().unwrap().state, 2, "still RTS after round {round}");
    }
    v.dereg_mr(stag).unwrap();
    region.assert_untouched("read-only flooded region");
    // The connection is still good for a Send the other way.
    let note = Watched::new(64, 79, vec![0..4]);
    // SAFETY: `note` outlives the completion taken below.
    unsafe { v.post_recv(1, &[note.g.iov(0..64)]) }.unwrap();
    h.send(b"done");
    let wc = wait_wcs(&v, 1);
    assert_eq!((wc[0].status, wc[0].byte_len), (0, 4));
    note.assert_untouched("receive buffer");
    drop(v);
    bench.finish();
}
both_roles!(read_request_flood_within_ird, super::rr_flood_within_ird);

// ---- the peer's Terminate, lost streams

/// A Terminate from the peer: no Terminate back, the stream closes, the victim's read in
/// flight completes with REM_ACCESS_ERR (the code is a protection error), other work is
/// flushed, both carrying the received code.
fn peer_terminate(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let mem = VictimMem::new(&v, &bench.healthy.1, vec![], vec![]);
    mem.post_recv(500);
    let sink = Watched::new(64, 90, vec![]);
    // SAFETY: `sink` outlives the completion taken below.
    unsafe {
        v.post_read(
            600,
            &[sink.g.iov(0..64)],
            STag(0x0012_3400),
            0x1000,
            SIGNALED,
        )
    }
    .unwrap();
    let Next::Ulpdu(u) = h.next() else {
        panic!("no Read Request from the victim")
    };
    let (rr, _) = RdmapHeader::parse(&u).unwrap();
    assert!(matches!(rr.message(), RdmapMessage::ReadRequest { .. }));
    let code = (0, 1, 0); // RDMAP remote protection error, invalid STag
    h.terminate(code);
    h.expect_silent_close();
    let wcs = wait_wcs(&v, 2);
    let recv = wcs
        .iter()
        .find(|w| w.wr_id == 500)
        .expect("receive flushed");
    let read = wcs.iter().find(|w| w.wr_id == 600).expect("read completed");
    assert_wc(recv, 500, status::FLUSH_ERR, Some(code));
    assert_wc(read, 600, status::REM_ACCESS_ERR, Some(code));
    assert_ended(
        &v,
        Ended {
            term: Some((2, code)),
            so_error: libc::ECONNRESET,
        },
    );
    mem.assert_untouched();
    sink.assert_untouched("read sink");
    drop((mem, v));
    bench.finish();
}
both_roles!(terminate_from_the_peer, super::peer_terminate);

/// The inode of the file `fd` refers to, if it is open.
fn inode_of(fd: i32) -> Option<u64> {
    // SAFETY: all-zero is a valid `stat`; fstat writes one.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// Reads from the raw fd until `want` bytes or the end, each wait bounded.
fn read_raw(fd: i32, want: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < want {
        wait_readable(fd, "the holder's fd is readable");
        // SAFETY: our own buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 0, "read: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    out
}

/// The application closes its socket while another holder still has the socketpair's app end
/// (a raw `dup` of its fd here, as a forked child's copy would be): the connection carries on
/// for that holder, its bytes reach the peer and the peer's reach it. Then the peer
/// terminates the connection: no Terminate back, the holder reads the end of the stream, and
/// once it has closed its copy the engine has let go of the socket (its TCP fd is closed).
fn closed_while_others_hold(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    // SAFETY: plain dup of an open fd.
    let other = unsafe { libc::dup(v.app_fd()) };
    assert!(other >= 0, "dup");
    let tcp = v.tcp_fd();
    let tcp_ino = inode_of(tcp).expect("the TCP fd is open");
    drop(v); // the application's close: the holder keeps the connection
    let out = pattern(3000, 71);
    // SAFETY: our own buffer.
    let n = unsafe { libc::write(other, out.as_ptr().cast(), out.len()) };
    assert_eq!(n, out.len() as isize, "the holder's write");
    let mut got = Vec::new();
    while got.len() < out.len() {
        let Next::Ulpdu(u) = h.next() else {
            panic!(
                "the connection ended after {} of the holder's bytes",
                got.len()
            )
        };
        let (hdr, len) = RdmapHeader::parse(&u).unwrap();
        assert!(
            matches!(hdr.message(), RdmapMessage::Send { .. }),
            "{hdr:?}"
        );
        got.extend_from_slice(&u[len..]);
    }
    assert!(
        got == out,
        "the peer received other bytes than the holder wrote"
    );
    let back = pattern(2000, 72);
    h.send(&back);
    assert!(
        read_raw(other, back.len()) == back,
        "the holder read other bytes than the peer sent"
    );
    h.terminate((0, 1, 0));
    h.expect_silent_close();
    assert!(
        read_raw(other, 1).is_empty(),
        "the holder reads the end of the stream"
    );
    // SAFETY: our own dup.
    unsafe { libc::close(other) };
    let deadline = Instant::now() + Duration::from_secs(5 * common::time_scale());
    while inode_of(tcp) == Some(tcp_ino) {
        assert!(
            Instant::now() < deadline,
            "the engine kept the socket after every holder closed"
        );
        std::thread::sleep(Duration::from_millis(2)); // (bounded polling of the engine's close)
    }
    bench.finish();
}
both_roles!(
    closed_while_others_hold_then_terminated,
    super::closed_while_others_hold
);

/// Half an FPDU, then the end of the stream (`rst`: an RST, else a FIN): a lost stream, no
/// Terminate (RFC 5044 §8: "TCP stream lost" is reported locally only).
fn lost_mid_fpdu(role: Role, rst: bool) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let mem = VictimMem::new(&v, &bench.healthy.1, vec![], vec![0..200]);
    mem.post_recv(500);
    let hb = emit(&RdmapHeader::new(
        RdmapMessage::Send { msn: 1, mo: 0 },
        true,
    ));
    let f = h.frame(&[&hb, &[0x21; 200]]);
    h.send_raw(&f[..f.len() / 2]);
    if rst {
        h.reset();
    } else {
        h.s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(h.expect_silent_close(), Close::Fin, "no Terminate, a FIN");
    }
    let wc = wait_wcs(&v, 1);
    // the receive in progress ends with the local "stream lost" code; no Terminate was sent
    assert_wc(&wc[0], 500, status::FATAL_ERR, Some((2, 0, 1)));
    assert_ended(
        &v,
        Ended {
            term: None,
            so_error: libc::ECONNRESET,
        },
    );
    mem.assert_untouched();
    drop((mem, v));
    bench.finish();
}

fn truncated_then_close(role: Role) {
    lost_mid_fpdu(role, false);
}
both_roles!(truncated_fpdu_then_close, super::truncated_then_close);

fn rst_mid_fpdu(role: Role) {
    lost_mid_fpdu(role, true);
}
both_roles!(rst_in_the_middle_of_an_fpdu, super::rst_mid_fpdu);

/// Garbage right behind the peer's MPA frame (where its first FPDU would be): the MPA
/// exchange succeeds and the garbage is the first FPDU — a CRC error.
fn garbage_after_frame(role: Role) {
    let bench = Bench::default(role);
    let (mut h, t) = bench.start();
    let garbage: Vec<u8> = b"garbage after the MPA frame! "
        .iter()
        .copied()
        .cycle()
        .take(70_000)
        .collect();
    match role {
        Role::Listener => h.initiate_with_extra(fair_config(), &garbage),
        Role::Connector => h.respond_with_extra(fair_config(), &garbage),
    };
    let v = t.join().unwrap().expect("the MPA frame itself was valid");
    // "ga" = ULPDU length 0x6761; its CRC cannot match
    expect_crc_end(&mut h, &v);
    drop(v);
    bench.finish();
}
both_roles!(garbage_after_the_mpa_frame, super::garbage_after_frame);

/// A ULPDU longer than the victim's own MULPDU (up to 65535): RFC 5044 bounds what a sender
/// sends, not what a receiver takes; exsock accepts any ULPDU_LENGTH up to 65535 (exsock
/// peers send large FPDUs to each other). No Terminate: the Send is delivered intact.
fn ulpdu_over_mulpdu(role: Role) {
    let bench = Bench::default(role);
    let (mut h, v) = bench.establish();
    let mulpdu = v.info().unwrap().mulpdu as usize;
    const ULPDU: usize = 65535;
    assert!(mulpdu < ULPDU, "MULPDU {mulpdu}");
    let payload = pattern(ULPDU - 18, 5);
    let buf = Watched::new(64 * 1024, 91, vec![0..payload.len()]);
    // SAFETY: `buf` outlives the completion taken below.
    unsafe { v.post_recv(1, &[buf.g.iov(0..64 * 1024)]) }.unwrap();
    h.send(&payload);
    let wc = wait_wcs(&v, 1);
    assert_eq!((wc[0].status, wc[0].byte_len as usize), (0, payload.len()));
    assert!(buf.g.snapshot()[..payload.len()] == payload[..]);
    buf.assert_untouched("receive buffer");
    assert_eq!(v.info().unwrap().state, 2, "still RTS");
    drop(v);
    bench.finish();
}
both_roles!(ulpdu_length_over_mulpdu, super::ulpdu_over_mulpdu);

// --------------------------------------------------------------------------------------
// MPA-phase cases.

/// The victim's blocking `accept`/`connect` must fail with `errno`, after `bound` at most.
fn victim_fails(t: std::thread::JoinHandle<Result<DdpSocket, ddp_user::Errno>>, errno: i32) {
    match t.join().unwrap() {
        Ok(_) => panic!("the victim completed MPA with a broken peer"),
        Err(e) => assert_eq!(e.0, errno, "errno of the failed MPA exchange: {e}"),
    }
}

/// The hostile peer's frame (Request or Reply) for its role, broken by `f`; returns what the
/// hostile peer read back until the close.
fn broken_frame(
    bench: &Bench,
    prefix: &[u8],
    f: impl FnOnce(&mut Vec<u8>),
) -> (
    Vec<u8>,
    std::thread::JoinHandle<Result<DdpSocket, ddp_user::Errno>>,
) {
    let (mut h, t) = bench.start();
    let mut frame = match bench.role {
        Role::Listener => Hostile::request_for(fair_config()),
        Role::Connector => {
            let req = h.read_mpa_request();
            Hostile::reply_for(&req, fair_config())
        }
    };
    f(&mut frame);
    let mut out = prefix.to_vec();
    out.extend_from_slice(&frame);
    h.send_raw(&out);
    let (back, _close) = h.read_to_close();
    (back, t)
}

fn mpa_wrong_key(role: Role) {
    let bench = Bench::default(role);
    let (back, t) = broken_frame(&bench, b"", |f| f[15] = b'X');
    // RFC 5044 §7.1.2: a bad Request is not answered, the responder closes; an initiator
    // cannot frame a Terminate for a Reply it could not parse: it closes too.
    assert!(back.is_empty(), "nothing sent back: {back:?}");
    victim_fails(t, libc::EPROTO);
    bench.finish();
}
both_roles!(mpa_wrong_key, super::mpa_wrong_key);

fn mpa_unknown_revision(role: Role) {
    let bench = Bench::default(role);
    let (back, t) = broken_frame(&bench, b"", |f| f[17] = 3);
    match role {
        Role::Listener => {
            // a Reply with R=1 carrying the revision we speak, then the close
            let r = MpaFrameRepr::parse_bytes(&back).expect("a reject Reply");
            assert!(
                r.reject && r.revision == 2 && r.private_data.is_empty(),
                "{r:?}"
            );
            assert_eq!(back.len(), r.buffer_len(), "nothing after the reject");
        }
        Role::Connector => assert!(back.is_empty(), "no Terminate for an unparsable Reply"),
    }
    victim_fails(t, libc::EPROTO);
    bench.finish();
}
both_roles!(mpa_unknown_revision, super::mpa_unknown_revision);

fn mpa_private_data_over_512(role: Role) {
    let bench = Bench::default(role);
    let (back, t) = broken_frame(&bench, b"", |f| {
        f[18..20].copy_from_slice(&513u16.to_be_bytes());
        f.truncate(20);
        f.extend_from_slice(&[0xee; 513]);
    });
    assert!(back.is_empty(), "nothing sent back: {back:?}");
    victim_fails(t, libc::EPROTO);
    bench.finish();
}
both_roles!(mpa_private_data_over_512, super::mpa_private_data_over_512);

fn mpa_garbage_before(role: Role) {
    let bench = Bench::default(role);
    let (back, t) = broken_frame(&bench, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", |_| {});
    assert!(back.is_empty(), "nothing sent back: {back:?}");
    victim_fails(t, libc::EPROTO);
    bench.finish();
}
both_roles!(mpa_garbage_before_the_frame, super::mpa_garbage_before);

/// The peer asks for markers on what it receives (M=1). exsock always can insert markers
/// (`allow_markers_tx`), so this is accepted, not refused (siw would reject): the test checks
/// the victim then really sends correct markers (the hostile deframer verifies each).
fn mpa_markers_requested(role: Role) {
    let bench = Bench::default(role);
    let cfg = MpaConfig {
        markers_rx: true,
        ..fair_config()
    };
    let (mut h, v) = bench.establish_with(cfg);
    let i = v.info().unwrap();
    assert_eq!((i.markers_tx, i.markers_rx), (1, 0));
    let data = pattern(5000, 6);
    send_all(&v, &data);
    let mut got = Vec::new();
    while got.len() < data.len() {
        let Next::Ulpdu(u) = h.next() else {
            panic!("closed")
        };
        let (hdr, n) = RdmapHeader::parse(&u).unwrap();
        assert!(matches!(hdr.message(), RdmapMessage::Send { .. }));
        got.extend_from_slice(&u[n..]);
    }
    assert!(got == data);
    drop(v);
    bench.finish();
}
both_roles!(mpa_markers_requested, super::mpa_markers_requested);

/// The MPA frame never completes (a slow peer): the blocking exchange fails with ETIMEDOUT
/// by the MPA timeout; nothing is sent back.
fn mpa_slow_peer(role: Role) {
    let bench = Bench::default(role);
    let started = Instant::now();
    let (mut h, t) = bench.start();
    match role {
        Role::Listener => h.send_raw(&Hostile::request_for(fair_config())[..10]),
        Role::Connector => {
            let req = h.read_mpa_request();
            h.send_raw(&Hostile::reply_for(&req, fair_config())[..10]);
        }
    }
    victim_fails(t, libc::ETIMEDOUT);
    let took = started.elapsed();
    assert!(
        took >= bench.opts.mpa_timeout
            && took < bench.opts.mpa_timeout + Duration::from_secs(2 * common::time_scale()),
        "ended after {took:?}"
    );
    let (back, _) = h.read_to_close();
    assert!(back.is_empty(), "nothing sent back: {back:?}");
    bench.finish();
}
both_roles!(mpa_never_completed, super::mpa_slow_peer);

/// A slow peer on a non-blocking accept does not hold up the listener: while it stalls, a
/// new connection on the same listener completes and works; the stalled one then fails
/// with ETIMEDOUT (SO_ERROR) and EOF on its fd.
#[test]
fn mpa_slow_peer_does_not_block_the_listener() {
    bounded(60, || {
        let mut opts = victim_options();
        opts.mpa_timeout = Duration::from_millis(1500 * common::time_scale());
        let bench = Bench::new(Role::Listener, opts);
        let (mut h, t) = bench.start_with(true);
        h.send_raw(&Hostile::request_for(fair_config())[..10]);
        let slow = t
            .join()
            .unwrap()
            .expect("non-blocking accept returns at once");
        assert_eq!(slow.info().unwrap().state, 1, "still connecting");
        let started = Instant::now();
        let timeout = bench.opts.mpa_timeout;
        bench.finish(); // a new accept on the same listener works meanwhile
        assert!(started.elapsed() < timeout);
        let mut p = libc::pollfd {
            fd: slow.app_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(
            unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32 + 5000) },
            1,
            "EOF after the timeout"
        );
        assert_eq!(slow.take_error(), libc::ETIMEDOUT);
        let mut b = [0u8; 4];
        assert_eq!(slow.recv(&mut [IoSliceMut::new(&mut b)], 0).unwrap(), 0);
        assert_eq!(
            slow.send(&[IoSlice::new(b"x")], 0).unwrap_err().0,
            libc::EPIPE
        );
        let (back, _) = h.read_to_close();
        assert!(back.is_empty());
    });
}

// keep `iov` in use for helpers shared with other test binaries
#[allow(dead_code)]
fn _uses(b: &[u8]) -> libc::iovec {
    iov(b)
}
