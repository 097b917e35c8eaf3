//! One test per Terminate code the connection emits. Each case triggers the error at B
//! (through A's operations or by injecting a crafted FPDU), then checks: the error B
//! reports; the exact layer/etype/ecode (as literal numbers) of the Terminate B put on the
//! wire, parsed from B's output; the header copies (M/D/R); that A sees the same Terminate;
//! that no byte of B's memory outside registered regions (and buffers the case may fill)
//! changed; that both ends close; and the error completions.

#[path = "conn_harness.rs"]
mod harness;

use ddp_proto::conn::{SendFlags, State, WcStatus};
use ddp_proto::ddp::{Access, Sge};
use ddp_proto::error::ProtoError;
use ddp_proto::wire::ddp::{DdpBuffer, STag};
use ddp_proto::wire::rdmap::{Opcode, RdmapControl, RdmapHeader, RdmapMessage, ReadRequestBody};
use harness::*;

const SIG: SendFlags = SendFlags {
    signaled: true,
    solicited: false,
};

/// How a case provokes the error at B.
enum Trigger {
    /// Run A's posted operations.
    Ops,
    /// Inject this ULPDU (as a lone FPDU) into B.
    Inject(Vec<u8>),
}

struct Case {
    err: ProtoError,
    raw: (u8, u8, u8),
    /// Expected (M, D, R) copies.
    copies: (bool, bool, bool),
    /// Extra `(addr, len)` ranges of B the case may legitimately write.
    allowed: Vec<(u64, u64)>,
}

fn run(mut p: Pair, trigger: Trigger, case: Case) -> Pair {
    let mut allowed = p.b.mem.region_ranges();
    allowed.extend(case.allowed.iter().copied());
    let before = p.b.mem.checksum_outside(&allowed);
    match trigger {
        Trigger::Ops => {}
        Trigger::Inject(u) => {
            let wire = fpdu(&u, p.opts.crc);
            let r = p.b.conn.handle_input(&wire, &mut p.b.mem);
            assert_eq!(r, Err(case.err));
            drain_events(&mut p.b);
        }
    }
    p.drive();
    let e = case.err;
    assert_eq!(
        p.b.error_events(),
        vec![e],
        "{e:?}: first error wins, reported once"
    );
    assert_eq!(p.b.conn.error(), Some(e));
    assert_eq!(raw(e.term_code()), case.raw, "{e:?}: mapping");
    let t = sent_terminate(&p.b, p.opts.crc, p.opts.markers).expect("B sent a Terminate");
    assert_eq!(raw(t.code), case.raw, "{e:?}: code on the wire");
    let copies = (
        t.segment_length_valid,
        t.ddp_header.is_some(),
        t.rdmap_header.is_some(),
    );
    assert_eq!(copies, case.copies, "{e:?}: M/D/R");
    assert_eq!(p.a.peer_terminated(), Some(t), "{e:?}: A received it");
    assert_eq!(
        p.b.mem.checksum_outside(&allowed),
        before,
        "{e:?}: memory outside regions changed"
    );
    assert!(p.a.closed() && p.b.closed(), "{e:?}: both ends closed");
    assert_eq!(p.b.conn.state(), State::Closed);
    assert_eq!(p.b.conn.stats().terminates_sent, 1);
    assert_eq!(p.a.conn.stats().terminates_received, 1);
    // the Terminate is the last thing B sent, on QN 2 with MSN 1
    let last = ulpdus(&p.b.sent, p.opts.crc, p.opts.markers).pop().unwrap();
    let (h, _) = RdmapHeader::parse(&last).unwrap();
    assert!(matches!(
        h.message(),
        RdmapMessage::Terminate { msn: 1, mo: 0, .. }
    ));
    assert!(matches!(h.ddp.buffer, DdpBuffer::Untagged { qn: 2, .. }));
    // nothing is accepted any more
    assert!(p.b.conn.post_send(1, &[], SIG).is_err());
    assert!(p.b.conn.poll_transmit(&p.b.mem).is_none());
    p
}

fn case(err: ProtoError, raw: (u8, u8, u8), copies: (bool, bool, bool)) -> Case {
    Case {
        err,
        raw,
        copies,
        allowed: Vec::new(),
    }
}

const MD: (bool, bool, bool) = (true, true, false);
const MDR: (bool, bool, bool) = (true, true, true);
const NONE: (bool, bool, bool) = (false, false, false);

fn pair() -> Pair {
    Pair::new(Opts::default())
}

fn send_hdr(msn: u32, mo: u32, last: bool) -> RdmapHeader {
    RdmapHeader::new(RdmapMessage::Send { msn, mo }, last)
}

// ---------------------------------------------------------------- DDP tagged buffer errors

#[test]
fn ddp_invalid_stag_unknown_index_wrong_key_and_rights() {
    let mut p = pair();
    p.a.conn
        .post_write(
            1,
            &[Sge::new(BASE, 64)],
            STag::from_parts(0x999, 3),
            BASE,
            true,
        )
        .unwrap();
    let p = run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpInvalidStag, (1, 1, 0), MD),
    );
    // the D copy is the Write's header
    let t = p.a.peer_terminated().unwrap();
    assert_eq!(
        t.ddp_header.unwrap().repr().buffer,
        DdpBuffer::Tagged {
            stag: STag::from_parts(0x999, 3),
            to: BASE
        }
    );
    assert_eq!(t.ddp_segment_length, 14 + 64);

    let mut p = pair();
    let s = p.b.mem.register(BASE, 4096, Access::REMOTE_WRITE, 1);
    let wrong = STag::from_parts(s.index(), s.key() ^ 0x80);
    p.a.conn
        .post_write(1, &[Sge::new(BASE, 64)], wrong, BASE, true)
        .unwrap();
    run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpInvalidStag, (1, 1, 0), MD),
    );

    // no REMOTE_WRITE right: DDP has no access code, siw reports invalid STag
    let mut p = pair();
    let s =
        p.b.mem
            .register(BASE, 4096, Access::REMOTE_READ | Access::LOCAL_WRITE, 1);
    p.a.conn
        .post_write(1, &[Sge::new(BASE, 64)], s, BASE, true)
        .unwrap();
    run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpInvalidStag, (1, 1, 0), MD),
    );
}

#[test]
fn ddp_base_bounds() {
    let mut p = pair();
    let s = p.b.mem.register(BASE + 4096, 4096, Access::REMOTE_WRITE, 1);
    p.a.conn
        .post_write(1, &[Sge::new(BASE, 100)], s, BASE + 8192 - 99, true)
        .unwrap();
    run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpBaseBounds, (1, 1, 1), MD),
    );
}

#[test]
fn ddp_stag_not_associated() {
    let mut p = pair();
    let s = p.b.mem.register(BASE, 4096, Access::REMOTE_WRITE, 2);
    p.a.conn
        .post_write(1, &[Sge::new(BASE, 100)], s, BASE, true)
        .unwrap();
    run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpStagNotAssociated, (1, 1, 2), MD),
    );
}

#[test]
fn ddp_to_wrap() {
    let mut p = pair();
    let s = p.b.mem.register(BASE, 4096, Access::REMOTE_WRITE, 1);
    p.a.conn
        .post_write(1, &[Sge::new(BASE, 100)], s, u64::MAX - 10, true)
        .unwrap();
    run(p, Trigger::Ops, case(ProtoError::DdpToWrap, (1, 1, 3), MD));
}

#[test]
fn ddp_version_tagged_and_untagged() {
    let mut h = RdmapHeader::new(
        RdmapMessage::Write {
            sink_stag: STag(0x100),
            sink_to: 0,
        },
        true,
    );
    h.ddp.ddp_version = 0;
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[1, 2, 3])),
        case(ProtoError::DdpVersionTagged, (1, 1, 4), NONE),
    );
    let mut h = send_hdr(1, 0, true);
    h.ddp.ddp_version = 2;
    let mut p = pair();
    p.b.conn.post_recv(1, &[Sge::new(BASE, 16)]).unwrap();
    let p = run(
        p,
        Trigger::Inject(ulpdu(&h, &[1; 8])),
        case(ProtoError::DdpVersionUntagged, (1, 2, 6), NONE),
    );
    assert_eq!(
        p.b.recv_completions()[0].status,
        WcStatus::Flushed,
        "the header never took the receive"
    );
}

#[test]
fn ddp_read_response_mismatch() {
    // a Read Response whose sink STag is not the one we sent: DDP invalid STag (siw)
    let mut p = pair();
    let s = p.b.mem.register(BASE, 4096, Access::REMOTE_READ, 1);
    p.b.conn
        .post_read(1, &[Sge::new(BASE + 8192, 64)], s, BASE, 64, true)
        .unwrap();
    p.b.conn.poll_transmit(&p.b.mem).unwrap(); // the Read Request "left" (A never sees it)
    p.b.conn.on_written(u64::MAX);
    let h = RdmapHeader::new(
        RdmapMessage::ReadResponse {
            sink_stag: STag(0x7700),
            sink_to: BASE + 8192,
        },
        true,
    );
    let p = run(
        p,
        Trigger::Inject(ulpdu(&h, &[9; 64])),
        case(ProtoError::DdpInvalidStag, (1, 1, 0), MD),
    );
    let c = p.b.completions();
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (1, WcStatus::Fatal(ProtoError::DdpInvalidStag))
    );
}

// ---------------------------------------------------------------- DDP untagged buffer errors

#[test]
fn ddp_invalid_qn() {
    let mut h = send_hdr(1, 0, true);
    if let DdpBuffer::Untagged { qn, .. } = &mut h.ddp.buffer {
        *qn = 3;
    }
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[0; 4])),
        case(ProtoError::DdpInvalidQn, (1, 2, 1), MD),
    );
}

#[test]
fn ddp_no_buffer() {
    let mut p = pair();
    p.a.conn.post_send(1, &[Sge::new(BASE, 10)], SIG).unwrap();
    let p = run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpNoBuffer, (1, 2, 2), MD),
    );
    let t = p.a.peer_terminated().unwrap();
    assert!(matches!(
        t.ddp_header.unwrap().repr().buffer,
        DdpBuffer::Untagged {
            qn: 0,
            msn: 1,
            mo: 0,
            ..
        }
    ));
    assert_eq!(t.ddp_segment_length, 18 + 10);
}

#[test]
fn ddp_msn_range() {
    let mut p = pair();
    p.b.conn.post_recv(1, &[Sge::new(BASE, 64)]).unwrap();
    let p = run(
        p,
        Trigger::Inject(ulpdu(&send_hdr(2, 0, true), &[0; 4])),
        case(ProtoError::DdpMsnRange, (1, 2, 3), MD),
    );
    assert_eq!(p.b.recv_completions()[0].status, WcStatus::Flushed);
}

#[test]
fn ddp_invalid_mo() {
    let mut p = pair();
    p.b.conn.post_recv(1, &[Sge::new(BASE, 64)]).unwrap();
    run(
        p,
        Trigger::Inject(ulpdu(&send_hdr(1, 4, true), &[0; 4])),
        case(ProtoError::DdpInvalidMo, (1, 2, 4), MD),
    );
}

#[test]
fn ddp_message_too_long() {
    let mut p = Pair::new(Opts {
        mulpdu: 128,
        ..Opts::default()
    });
    p.b.conn.post_recv(7, &[Sge::new(BASE, 150)]).unwrap();
    p.a.conn.post_send(1, &[Sge::new(BASE, 151)], SIG).unwrap();
    // the first segment (110 bytes) is placed; the second would overflow and is refused
    let case = Case {
        allowed: vec![(BASE, 150)],
        ..case(ProtoError::DdpMessageTooLong, (1, 2, 5), MD)
    };
    let p = run(p, Trigger::Ops, case);
    let rc = p.b.recv_completions();
    assert_eq!((rc[0].wr_id, rc[0].status), (7, WcStatus::LocalLength));
    assert!(matches!(
        p.a.peer_terminated()
            .unwrap()
            .ddp_header
            .unwrap()
            .repr()
            .buffer,
        DdpBuffer::Untagged { mo: 110, .. }
    ));
}

#[test]
fn ddp_local_catastrophic() {
    let mut p = pair();
    p.b.conn.post_recv(7, &[Sge::new(1, 64)]).unwrap(); // outside B's memory
    p.a.conn.post_send(1, &[Sge::new(BASE, 10)], SIG).unwrap();
    let p = run(
        p,
        Trigger::Ops,
        case(ProtoError::DdpLocalCatastrophic, (1, 0, 0), NONE),
    );
    assert_eq!(
        p.b.recv_completions()[0].status,
        WcStatus::Fatal(ProtoError::DdpLocalCatastrophic)
    );
}

// ---------------------------------------------------------------- RDMAP errors

#[test]
fn rdmap_version() {
    let mut h = send_hdr(1, 0, true);
    h.ddp.ulp_ctrl = RdmapControl {
        version: 0,
        ..RdmapControl::new(Opcode::Send)
    }
    .to_byte();
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[0; 4])),
        case(ProtoError::RdmapVersion, (0, 2, 5), MD),
    );
}

#[test]
fn rdmap_unexpected_opcode() {
    let h = RdmapHeader::new(
        RdmapMessage::Unexpected {
            opcode: Opcode::Unknown(9),
            tagged: false,
        },
        true,
    );
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[])),
        case(ProtoError::RdmapUnexpectedOpcode, (0, 2, 6), MD),
    );
    // a tagged Send
    let h = RdmapHeader::new(
        RdmapMessage::Unexpected {
            opcode: Opcode::Send,
            tagged: true,
        },
        true,
    );
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[1])),
        case(ProtoError::RdmapUnexpectedOpcode, (0, 2, 6), MD),
    );
    // a Read Response with no read outstanding
    let h = RdmapHeader::new(
        RdmapMessage::ReadResponse {
            sink_stag: STag(0x100),
            sink_to: 0,
        },
        true,
    );
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[1; 8])),
        case(ProtoError::RdmapUnexpectedOpcode, (0, 2, 6), MD),
    );
}

fn read_case(
    setup: impl FnOnce(&mut Pair) -> (STag, u64, u32),
    err: ProtoError,
    rawc: (u8, u8, u8),
) {
    let mut p = pair();
    let (stag, to, len) = setup(&mut p);
    p.a.conn
        .post_read(5, &[Sge::new(BASE, len)], stag, to, len, true)
        .unwrap();
    let p = run(p, Trigger::Ops, case(err, rawc, MDR));
    let t = p.a.peer_terminated().unwrap();
    let rr = t.rdmap_header.unwrap();
    assert_eq!(
        (rr.source_stag, rr.source_to, rr.read_size),
        (stag, to, len)
    );
    assert_eq!(t.ddp_segment_length, 46);
    assert!(matches!(
        t.ddp_header.unwrap().repr().buffer,
        DdpBuffer::Untagged { qn: 1, msn: 1, .. }
    ));
    // A's read fails with the peer's Terminate
    let c = p.a.completions();
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::RemoteTerminated));
}

#[test]
fn rdmap_read_source_invalid_stag() {
    read_case(
        |_| (STag::from_parts(0x4242, 1), BASE, 16),
        ProtoError::RdmapInvalidStag,
        (0, 1, 0),
    );
    read_case(
        |p| {
            let s = p.b.mem.register(BASE, 64, Access::REMOTE_READ, 1);
            ddp_proto::ddp::Memory::invalidate(&mut p.b.mem, s).unwrap();
            (s, BASE, 16)
        },
        ProtoError::RdmapInvalidStag,
        (0, 1, 0),
    );
}

#[test]
fn rdmap_read_source_base_bounds() {
    read_case(
        |p| {
            (
                p.b.mem.register(BASE, 64, Access::REMOTE_READ, 1),
                BASE + 60,
                16,
            )
        },
        ProtoError::RdmapBaseBounds,
        (0, 1, 1),
    );
}

#[test]
fn rdmap_read_source_access_rights() {
    read_case(
        |p| {
            (
                p.b.mem.register(BASE, 64, Access::REMOTE_WRITE, 1),
                BASE,
                16,
            )
        },
        ProtoError::RdmapAccessRights,
        (0, 1, 2),
    );
}

#[test]
fn rdmap_read_source_stag_not_associated() {
    read_case(
        |p| (p.b.mem.register(BASE, 64, Access::REMOTE_READ, 9), BASE, 16),
        ProtoError::RdmapStagNotAssociated,
        (0, 1, 3),
    );
}

#[test]
fn rdmap_read_source_to_wrap() {
    read_case(
        |p| {
            (
                p.b.mem.register(BASE, 64, Access::REMOTE_READ, 1),
                u64::MAX - 3,
                16,
            )
        },
        ProtoError::RdmapToWrap,
        (0, 1, 4),
    );
}

#[test]
fn rdmap_ird_exceeded() {
    let mut p = Pair::new(Opts {
        ord_a: 4,
        ird_b: 1,
        ..Opts::default()
    });
    let s = p.b.mem.register(BASE, 64, Access::REMOTE_READ, 1);
    p.a.conn
        .post_read(1, &[Sge::new(BASE, 16)], s, BASE, 16, true)
        .unwrap();
    p.a.conn
        .post_read(2, &[Sge::new(BASE, 16)], s, BASE, 16, true)
        .unwrap();
    let p = run(
        p,
        Trigger::Ops,
        case(ProtoError::RdmapCatastrophicStream, (0, 2, 7), MDR),
    );
    let t = p.a.peer_terminated().unwrap();
    assert!(matches!(
        t.ddp_header.unwrap().repr().buffer,
        DdpBuffer::Untagged { qn: 1, msn: 2, .. }
    ));
}

#[test]
fn rdmap_cannot_invalidate() {
    let mut p = pair();
    p.b.conn.post_recv(3, &[Sge::new(BASE + 100, 64)]).unwrap();
    p.a.conn
        .post_send_inv(1, &[Sge::new(BASE, 10)], STag::from_parts(0x5555, 0), SIG)
        .unwrap();
    let c = Case {
        allowed: vec![(BASE + 100, 64)],
        ..case(ProtoError::RdmapCannotInvalidate, (0, 2, 9), MD)
    };
    let p = run(p, Trigger::Ops, c);
    let rc = p.b.recv_completions();
    assert_eq!(
        (rc[0].wr_id, rc[0].status, rc[0].inv_stag),
        (3, WcStatus::RemoteInvalidate, None)
    );
    let t = p.a.peer_terminated().unwrap();
    assert!(matches!(
        t.ddp_header.unwrap().repr().buffer,
        DdpBuffer::Untagged {
            qn: 0,
            msn: 1,
            ulp_rsvd: 0x0055_5500,
            ..
        }
    ));
}

#[test]
fn rdmap_cannot_invalidate_other_pd() {
    let mut p = pair();
    let s = p.b.mem.register(BASE + 1000, 64, Access::REMOTE_WRITE, 2);
    p.b.conn.post_recv(3, &[Sge::new(BASE + 100, 64)]).unwrap();
    p.a.conn
        .post_send_inv(
            1,
            &[Sge::new(BASE, 10)],
            s,
            SendFlags {
                signaled: true,
                solicited: true,
            },
        )
        .unwrap();
    let c = Case {
        allowed: vec![(BASE + 100, 64)],
        ..case(ProtoError::RdmapCannotInvalidateProtection, (0, 1, 9), MD)
    };
    let p = run(p, Trigger::Ops, c);
    assert!(p.b.mem.region_ranges().contains(&(BASE + 1000, 64)));
    assert!(
        ddp_proto::ddp::Memory::region(&p.b.mem, s).unwrap().valid,
        "other PD's STag untouched"
    );
}

#[test]
fn rdmap_unspecified_malformed_read_request() {
    let body = ReadRequestBody {
        sink_stag: STag(1),
        sink_to: 0,
        read_size: 4,
        source_stag: STag(2),
        source_to: 0,
    };
    // split over two segments (L clear)
    let h = RdmapHeader::new(
        RdmapMessage::ReadRequest {
            msn: 1,
            mo: 0,
            body,
        },
        false,
    );
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[])),
        case(ProtoError::RdmapUnspecified, (0, 2, 0xff), MD),
    );
    // with payload after the 28-byte header: too long for the queue element
    let h = RdmapHeader::new(
        RdmapMessage::ReadRequest {
            msn: 1,
            mo: 0,
            body,
        },
        true,
    );
    run(
        pair(),
        Trigger::Inject(ulpdu(&h, &[0; 4])),
        case(ProtoError::DdpMessageTooLong, (1, 2, 5), MD),
    );
}

// ---------------------------------------------------------------- LLP errors

#[test]
fn llp_crc_error_on_payload_and_header_bit_flips() {
    for at in [2usize, 9, 40, 100] {
        let mut p = pair();
        let s = p.b.mem.register(BASE, 4096, Access::REMOTE_WRITE, 1);
        p.b.conn
            .post_recv(3, &[Sge::new(BASE + 8192, 200)])
            .unwrap();
        p.a.conn.post_send(1, &[Sge::new(BASE, 200)], SIG).unwrap();
        p.a.conn
            .post_write(2, &[Sge::new(BASE, 64)], s, BASE, true)
            .unwrap();
        p.fault_to_b = Some(Fault::Flip { at, bit: 3 });
        // a flipped header bit would fail a check too, but the CRC is checked first
        let c = Case {
            allowed: vec![(BASE + 8192, 200)],
            ..case(ProtoError::Crc, (2, 0, 2), NONE)
        };
        let p = run(p, Trigger::Ops, c);
        assert_eq!(p.b.conn.stats().crc_errors, 1);
        // a payload flip hits a receive in progress; a header flip that fails a check (the QN
        // at byte 9) is refused before the receive is taken, which is then just flushed
        let want = if at == 9 {
            WcStatus::Flushed
        } else {
            WcStatus::Fatal(ProtoError::Crc)
        };
        assert_eq!(p.b.recv_completions()[0].status, want, "byte {at}");
        assert_eq!(
            p.b.mem.writes, 0,
            "the Write after the bad FPDU was ignored (byte {at})"
        );
    }
}

#[test]
fn llp_marker_mismatch_implausible_length() {
    // a ULPDU shorter than its own DDP header
    run(
        pair(),
        Trigger::Inject(vec![0x41, 0x43, 0, 0]),
        case(ProtoError::MarkerMismatch, (2, 0, 3), NONE),
    );
    // a zero ULPDU_LENGTH (the deframer's check)
    let mut p = pair();
    let before = p.b.mem.checksum_outside_regions();
    let r =
        p.b.conn
            .handle_input(&[0, 0, 0, 0, 0, 0, 0, 0], &mut p.b.mem);
    assert_eq!(r, Err(ProtoError::MarkerMismatch));
    p.drive();
    assert_eq!(
        raw(sent_terminate(&p.b, true, false).unwrap().code),
        (2, 0, 3)
    );
    assert_eq!(p.b.mem.checksum_outside_regions(), before);
}

#[test]
fn peer_terminate_flushes_everything() {
    let mut p = pair();
    p.b.conn.post_recv(1, &[Sge::new(BASE, 64)]).unwrap();
    p.b.conn.post_recv(2, &[Sge::new(BASE, 64)]).unwrap();
    p.a.conn.post_send(10, &[Sge::new(BASE, 10)], SIG).unwrap();
    p.a.conn.post_send(11, &[Sge::new(BASE, 10)], SIG).unwrap();
    let mut h = send_hdr(1, 0, true);
    h.ddp.ddp_version = 3;
    // A receives garbage and terminates; B sees the peer's Terminate
    assert!(
        p.a.conn
            .handle_input(&fpdu(&ulpdu(&h, &[]), true), &mut p.a.mem)
            .is_err()
    );
    p.drive();
    let t = p.b.peer_terminated().expect("B got A's Terminate");
    assert_eq!(raw(t.code), (1, 2, 6));
    assert!(p.b.closed());
    let rc = p.b.recv_completions();
    assert!(
        rc.iter()
            .all(|c| c.status == WcStatus::RemoteTerminated || c.status == WcStatus::Flushed)
    );
    let c = p.a.completions();
    assert_eq!(
        c.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![WcStatus::Flushed, WcStatus::Flushed]
    );
    assert!(p.b.error_events().is_empty());
}

/// Found by the `connection_ops` fuzz target: a peer's Terminate whose body is shorter than
/// the copies its M/D/R flags announce must be reported (code only), not crash the process.
#[test]
fn peer_terminate_with_truncated_body_is_reported_not_fatal() {
    let mut p = pair();
    // Untagged, last, DDP version 1; RDMAP version 1, opcode 7 (Terminate); QN 2, MSN 1, MO 0.
    let mut u = vec![0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0];
    // Terminate Control cut after 3 bytes: layer 0, etype 1, ecode 2, and M|D|R all set.
    u.extend_from_slice(&[0x01, 0x02, 0xe0]);
    let r = p.b.conn.handle_input(&fpdu(&u, true), &mut p.b.mem);
    assert!(r.is_ok(), "{r:?}");
    p.drive();
    let t =
        p.b.peer_terminated()
            .expect("B reports the peer's Terminate");
    assert_eq!(raw(t.code), (0, 1, 2));
    assert!(t.ddp_header.is_none() && t.rdmap_header.is_none());
    assert!(p.b.closed());
}

/// A receiver that starts as a byte stream and switches to posted receives (what ddp-user does
/// on the first `ddp_post_recv`): Sends before the switch feed the stream, the next Send
/// lands in a posted receive, and a Send after that, with no receive posted, is the DDP error
/// "invalid MSN - no buffer available".
#[test]
fn switching_to_posted_receives_enforces_them() {
    let mut p = Pair::new(Opts {
        mode_b: ddp_proto::conn::RecvMode::Stream,
        ..Opts::default()
    });
    p.a.conn.post_send(1, &[Sge::new(BASE, 10)], SIG).unwrap();
    p.drive();
    assert_eq!(p.b.mem.stream.len(), 10);
    p.b.conn.set_recv_mode(ddp_proto::conn::RecvMode::Posted);
    assert_eq!(p.b.conn.recv_mode(), ddp_proto::conn::RecvMode::Posted);
    p.b.conn.post_recv(7, &[Sge::new(BASE, 64)]).unwrap();
    p.a.conn.post_send(2, &[Sge::new(BASE, 20)], SIG).unwrap();
    p.drive();
    let rc = p.b.recv_completions();
    assert_eq!(rc.len(), 1);
    assert_eq!((rc[0].wr_id, rc[0].byte_len), (7, 20));
    assert_eq!(p.b.mem.stream.len(), 10, "nothing more went to the stream");
    p.a.conn.post_send(3, &[Sge::new(BASE, 5)], SIG).unwrap();
    p.drive();
    assert_eq!(p.b.error_events(), vec![ProtoError::DdpNoBuffer]);
    assert_eq!(
        raw(sent_terminate(&p.b, true, false).unwrap().code),
        (1, 2, 2)
    );
}
