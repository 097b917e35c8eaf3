//! Byte-exact vectors and property tests for `wire::ddp` and `wire::rdmap`.
//!
//! The vectors are ULPDUs copied from the tshark decodes of the real siw captures
//! (`../shared/interop/siw-vm/captures/*.decode.txt`, the bytes after the 2-byte MPA length);
//! the frame each comes from is named next to it. The properties: repr → emit → parse is the
//! identity for every header kind, and parse → emit gives back the input bytes for any input.

use ddp_proto::error::{ProtoError, TermCode, TermLayer};
use ddp_proto::wire::ddp::{
    DdpBuffer, DdpControl, DdpPacket, DdpRepr, STag, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
    WireError,
};
use ddp_proto::wire::rdmap::{
    FIRST_MSN, Opcode, QN_READ_REQUEST, QN_SEND, RdmapBody, RdmapControl, RdmapHeader,
    RdmapMessage, ReadRequestBody, TerminateHeader, TerminatedDdpHeader,
};
use proptest::prelude::*;

/// rping-default.server.pcap frame 10: client → server Send, MSN 1, 16-byte payload
/// (`buf_addr | rkey | size` of the client's start buffer).
const SEND: &[u8] = &[
    0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, // header
    0x00, 0x00, 0x55, 0x73, 0xdb, 0x36, 0xde, 0x60, 0xd1, 0x51, 0x16, 0x00, 0x00, 0x00, 0x00,
    0x40, // payload
];

/// rping-default.server.pcap frame 11: server → client RDMA Read Request, QN 1, MSN 1.
const READ_REQUEST: &[u8] = &[
    0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, // DDP header
    0xa5, 0xa0, 0x6c, 0x00, // sink STag
    0x00, 0x00, 0x55, 0xa3, 0x39, 0x52, 0x0a, 0xb0, // sink TO
    0x00, 0x00, 0x00, 0x40, // read size
    0xd1, 0x51, 0x16, 0x00, // source STag
    0x00, 0x00, 0x55, 0x73, 0xdb, 0x36, 0xde, 0x60, // source TO
];

/// rping-default.server.pcap frame 13: client → server RDMA Read Response (header and the
/// first payload bytes).
const READ_RESPONSE: &[u8] = &[
    0xc1, 0x42, 0xa5, 0xa0, 0x6c, 0x00, 0x00, 0x00, 0x55, 0xa3, 0x39, 0x52, 0x0a, 0xb0, b'r', b'd',
    b'm', b'a', b'-', b'p', b'i', b'n', b'g', b'-',
];

/// rping-default.server.pcap frame 16: server → client RDMA Write (header and the first
/// payload bytes).
const WRITE: &[u8] = &[
    0xc1, 0x40, 0x53, 0xf5, 0x9a, 0x00, 0x00, 0x00, 0x55, 0x73, 0xdb, 0x36, 0x9a, 0xb0, b'r', b'd',
    b'm', b'a',
];

/// rping-p2p.server.pcap frame 10: the zero-length RDMA Write RTR (ULPDU length 14).
const P2P_WRITE_RTR: &[u8] = &[
    0xc1, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// rping-large.server.pcap frame 13: the first segment of a 4000-byte Read Response (L clear).
const READ_RESPONSE_NOT_LAST: &[u8] = &[
    0x81, 0x42, 0xda, 0xbf, 0xd7, 0x00, 0x00, 0x00, 0x55, 0xf8, 0xc6, 0x83, 0xe3, 0x50, b'r', b'd',
];

/// rping-large.server.pcap frame 11: the Read Request of 4000 bytes.
const READ_REQUEST_LARGE: &[u8] = &[
    0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0xda, 0xbf, 0xd7, 0x00, 0x00, 0x00, 0x55, 0xf8, 0xc6, 0x83, 0xe3, 0x50, 0x00, 0x00,
    0x0f, 0xa0, 0x72, 0x83, 0x8d, 0x00, 0x00, 0x00, 0x55, 0x6b, 0x55, 0x21, 0xbe, 0x10,
];

/// Parses `ulpdu`, checks header length and message, re-emits and compares the bytes.
fn check_vector(ulpdu: &[u8], header_len: usize, message: RdmapMessage, last: bool) {
    assert_eq!(RdmapHeader::required_len(ulpdu), Ok(header_len));
    let (h, len) = RdmapHeader::parse(ulpdu).expect("parses");
    assert_eq!(len, header_len);
    assert_eq!(h.message(), message);
    assert_eq!(h.last(), last);
    assert_eq!(h.control().version, 1);
    assert_eq!(h.ddp.ddp_version, 1);
    // siw writes canonical headers: building the message from scratch gives the same bytes.
    assert_eq!(RdmapHeader::new(message, last), h);
    let mut out = vec![0u8; len];
    assert_eq!(h.emit(&mut out), Ok(len));
    assert_eq!(out, ulpdu[..len]);
    // One byte short of the header is "need more", not a panic.
    assert_eq!(
        RdmapHeader::parse(&ulpdu[..len - 1]),
        Err(WireError::Truncated)
    );
}

#[test]
fn real_send() {
    check_vector(SEND, 18, RdmapMessage::Send { msn: 1, mo: 0 }, true);
    let p = DdpPacket::new_checked(SEND).unwrap();
    assert_eq!(p.qn(), QN_SEND);
    assert_eq!(p.msn(), FIRST_MSN);
    assert_eq!(p.payload().len(), 16);
    assert_eq!(&p.payload()[12..], &[0, 0, 0, 0x40]);
}

#[test]
fn real_read_request() {
    let body = ReadRequestBody {
        sink_stag: STag(0xa5a0_6c00),
        sink_to: 0x0000_55a3_3952_0ab0,
        read_size: 64,
        source_stag: STag(0xd151_1600),
        source_to: 0x0000_5573_db36_de60,
    };
    check_vector(
        READ_REQUEST,
        46,
        RdmapMessage::ReadRequest {
            msn: 1,
            mo: 0,
            body,
        },
        true,
    );
    let (h, _) = RdmapHeader::parse(READ_REQUEST).unwrap();
    assert!(matches!(
        h.ddp.buffer,
        DdpBuffer::Untagged {
            qn: QN_READ_REQUEST,
            ..
        }
    ));
    assert_eq!(body.sink_stag.index(), 0xa5a06c);
    assert_eq!(body.source_stag.key(), 0x00);

    let large = ReadRequestBody::parse(&READ_REQUEST_LARGE[18..]).unwrap();
    assert_eq!(large.read_size, 4000);
    check_vector(
        READ_REQUEST_LARGE,
        46,
        RdmapMessage::ReadRequest {
            msn: 1,
            mo: 0,
            body: large,
        },
        true,
    );
}

#[test]
fn real_read_response() {
    check_vector(
        READ_RESPONSE,
        14,
        RdmapMessage::ReadResponse {
            sink_stag: STag(0xa5a0_6c00),
            sink_to: 0x0000_55a3_3952_0ab0,
        },
        true,
    );
    check_vector(
        READ_RESPONSE_NOT_LAST,
        14,
        RdmapMessage::ReadResponse {
            sink_stag: STag(0xdabf_d700),
            sink_to: 0x0000_55f8_c683_e350,
        },
        false,
    );
    // The read request's sink is the read response's target.
    let (rr, _) = RdmapHeader::parse(READ_REQUEST).unwrap();
    let (resp, _) = RdmapHeader::parse(READ_RESPONSE).unwrap();
    let (RdmapMessage::ReadRequest { body, .. }, RdmapMessage::ReadResponse { sink_stag, sink_to }) =
        (rr.message(), resp.message())
    else {
        panic!("wrong messages");
    };
    assert_eq!((body.sink_stag, body.sink_to), (sink_stag, sink_to));
}

#[test]
fn real_write() {
    check_vector(
        WRITE,
        14,
        RdmapMessage::Write {
            sink_stag: STag(0x53f5_9a00),
            sink_to: 0x0000_5573_db36_9ab0,
        },
        true,
    );
    assert_eq!(DdpPacket::new_checked(WRITE).unwrap().payload(), b"rdma");
}

#[test]
fn real_p2p_write_rtr() {
    check_vector(
        P2P_WRITE_RTR,
        14,
        RdmapMessage::Write {
            sink_stag: STag(1),
            sink_to: 0,
        },
        true,
    );
    assert!(
        DdpPacket::new_checked(P2P_WRITE_RTR)
            .unwrap()
            .payload()
            .is_empty()
    );
}

/// RFC 5041 §5.1–§5.3 and RFC 5040 §4.2 diagrams, field by field.
#[test]
fn rfc_header_diagrams() {
    // Tagged: T=1, L=0, DV=1; RsvdULP = RDMAP control (RV=1, opcode 0); STag; TO.
    let h = RdmapHeader::new(
        RdmapMessage::Write {
            sink_stag: STag::from_parts(0x123456, 0x78),
            sink_to: 0x1122_3344_5566_7788,
        },
        false,
    );
    let mut b = [0u8; TAGGED_HEADER_LEN];
    h.emit(&mut b).unwrap();
    assert_eq!(
        b,
        [
            0b1000_0001,
            0b0100_0000,
            0x12,
            0x34,
            0x56,
            0x78,
            0x11,
            0x22,
            0x33,
            0x44,
            0x55,
            0x66,
            0x77,
            0x88
        ]
    );
    // Untagged: T=0, L=1, DV=1; RDMAP control (RV=1, opcode 4); Inval STag; QN; MSN; MO.
    let h = RdmapHeader::new(
        RdmapMessage::SendInvalidate {
            msn: 0x0a0b_0c0d,
            mo: 0x1000,
            inval_stag: STag(0xcafe_f00d),
        },
        true,
    );
    let mut b = [0u8; UNTAGGED_HEADER_LEN];
    h.emit(&mut b).unwrap();
    assert_eq!(
        b,
        [
            0b0100_0001,
            0b0100_0100,
            0xca,
            0xfe,
            0xf0,
            0x0d,
            0,
            0,
            0,
            0,
            0x0a,
            0x0b,
            0x0c,
            0x0d,
            0,
            0,
            0x10,
            0
        ]
    );
    // Terminate control word: Layer(4) EType(4) ErrorCode(8) M D R Rsvd(13).
    let t = TerminateHeader {
        code: TermCode::new(TermLayer::Llp, 0, 0x02),
        segment_length_valid: true,
        ddp_segment_length: 0x0102,
        ddp_header: None,
        rdmap_header: None,
        reserved: 0,
    };
    let mut b = [0u8; 6];
    assert_eq!(t.emit(&mut b), Ok(6));
    assert_eq!(b, [0x20, 0x02, 0x80, 0x00, 0x01, 0x02]);
}

#[test]
fn terminate_built_from_a_real_segment() {
    // The state machine's use: copy the offending segment's header into the Terminate.
    let offending = TerminatedDdpHeader::from_ulpdu(SEND).unwrap();
    assert_eq!(offending.buffer_len(), 18);
    assert_eq!(offending.as_bytes(), &SEND[..18]);
    let term = TerminateHeader {
        code: ProtoError::DdpNoBuffer.term_code(),
        segment_length_valid: true,
        ddp_segment_length: SEND.len() as u16,
        ddp_header: Some(offending),
        rdmap_header: None,
        reserved: 0,
    };
    let h = RdmapHeader::new(
        RdmapMessage::Terminate {
            msn: FIRST_MSN,
            mo: 0,
            term,
        },
        true,
    );
    let mut b = vec![0u8; h.buffer_len()];
    assert_eq!(h.emit(&mut b), Ok(18 + 4 + 2 + 18));
    assert_eq!(b[..2], [0x41, 0x47]);
    assert_eq!(b[18..24], [0x12, 0x02, 0xc0, 0x00, 0x00, 34]);
    assert_eq!(RdmapHeader::parse(&b), Ok((h, b.len())));
    // A copy whose T bit contradicts its variant would not parse back: refused.
    let mut bad = h;
    if let RdmapBody::Terminate(t) = &mut bad.body {
        t.ddp_header = Some(TerminatedDdpHeader::Tagged([0x41; 14]));
    }
    assert_eq!(bad.emit(&mut [0u8; 64]), Err(WireError::Inconsistent));
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

fn stag() -> impl Strategy<Value = STag> {
    any::<u32>().prop_map(STag)
}

fn read_request_body() -> impl Strategy<Value = ReadRequestBody> {
    (stag(), any::<u64>(), any::<u32>(), stag(), any::<u64>()).prop_map(
        |(sink_stag, sink_to, read_size, source_stag, source_to)| ReadRequestBody {
            sink_stag,
            sink_to,
            read_size,
            source_stag,
            source_to,
        },
    )
}

fn ddp_repr() -> impl Strategy<Value = DdpRepr> {
    let buffer = prop_oneof![
        (stag(), any::<u64>()).prop_map(|(stag, to)| DdpBuffer::Tagged { stag, to }),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(qn, msn, mo, ulp_rsvd)| DdpBuffer::Untagged {
                qn,
                msn,
                mo,
                ulp_rsvd
            }
        ),
    ];
    (any::<bool>(), 0..4u8, 0..16u8, any::<u8>(), buffer).prop_map(
        |(last, ddp_version, reserved, ulp_ctrl, buffer)| DdpRepr {
            last,
            ddp_version,
            reserved,
            ulp_ctrl,
            buffer,
        },
    )
}

fn term_code() -> impl Strategy<Value = TermCode> {
    (0..16u8, 0..16u8, any::<u8>())
        .prop_map(|(layer, etype, ecode)| TermCode::new(TermLayer::from_raw(layer), etype, ecode))
}

fn terminated_ddp_header() -> impl Strategy<Value = TerminatedDdpHeader> {
    ddp_repr().prop_map(|r| {
        let mut b = [0u8; UNTAGGED_HEADER_LEN];
        r.emit_bytes(&mut b).unwrap();
        TerminatedDdpHeader::from_ulpdu(&b).unwrap()
    })
}

fn terminate_header() -> impl Strategy<Value = TerminateHeader> {
    (
        term_code(),
        any::<bool>(),
        any::<u16>(),
        proptest::option::of(terminated_ddp_header()),
        proptest::option::of(read_request_body()),
        0..0x2000u16,
    )
        .prop_map(|(code, m, len, ddp_header, rdmap_header, reserved)| {
            let mut t = TerminateHeader {
                code,
                segment_length_valid: m,
                ddp_segment_length: len,
                ddp_header,
                rdmap_header,
                reserved,
            };
            // Without M or D the length field is not on the wire.
            if !t.has_segment_length_field() {
                t.ddp_segment_length = 0;
            }
            t
        })
}

/// Every message kind, including unknown opcodes on either buffer model.
fn message() -> impl Strategy<Value = RdmapMessage> {
    prop_oneof![
        (stag(), any::<u64>())
            .prop_map(|(sink_stag, sink_to)| RdmapMessage::Write { sink_stag, sink_to }),
        (any::<u32>(), any::<u32>(), read_request_body())
            .prop_map(|(msn, mo, body)| RdmapMessage::ReadRequest { msn, mo, body }),
        (stag(), any::<u64>())
            .prop_map(|(sink_stag, sink_to)| RdmapMessage::ReadResponse { sink_stag, sink_to }),
        (any::<u32>(), any::<u32>()).prop_map(|(msn, mo)| RdmapMessage::Send { msn, mo }),
        (any::<u32>(), any::<u32>(), stag()).prop_map(|(msn, mo, inval_stag)| {
            RdmapMessage::SendInvalidate {
                msn,
                mo,
                inval_stag,
            }
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(msn, mo)| RdmapMessage::SendSe { msn, mo }),
        (any::<u32>(), any::<u32>(), stag()).prop_map(|(msn, mo, inval_stag)| {
            RdmapMessage::SendSeInvalidate {
                msn,
                mo,
                inval_stag,
            }
        }),
        (any::<u32>(), any::<u32>(), terminate_header())
            .prop_map(|(msn, mo, term)| RdmapMessage::Terminate { msn, mo, term }),
        (8..16u8, any::<bool>()).prop_map(|(op, tagged)| RdmapMessage::Unexpected {
            opcode: Opcode::Unknown(op),
            tagged
        }),
    ]
}

/// Any consistent header: a canonical message with arbitrary DDP bits laid over it (versions,
/// reserved bits, queue numbers), keeping T and the opcode, so the body stays consistent.
fn rdmap_header() -> impl Strategy<Value = RdmapHeader> {
    (
        message(),
        any::<bool>(),
        0..4u8,
        0..16u8,
        0..4u8,
        0..4u8,
        any::<u32>(),
    )
        .prop_map(|(msg, last, dv, rsvd, rv, rdmap_rsvd, qn)| {
            let mut h = RdmapHeader::new(msg, last);
            h.ddp.ddp_version = dv;
            h.ddp.reserved = rsvd;
            let mut c = h.control();
            c.version = rv;
            c.reserved = rdmap_rsvd;
            h.ddp.ulp_ctrl = c.to_byte();
            if let DdpBuffer::Untagged { qn: q, .. } = &mut h.ddp.buffer {
                *q = qn;
            }
            h
        })
}

proptest! {
    #[test]
    fn ddp_repr_emit_parse_identity(r in ddp_repr(), extra in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut b = vec![0u8; r.buffer_len() + extra.len()];
        b[r.buffer_len()..].copy_from_slice(&extra);
        prop_assert_eq!(r.emit_bytes(&mut b), Ok(r.buffer_len()));
        let p = DdpPacket::new_checked(&b[..]).unwrap();
        prop_assert_eq!(p.header_len(), r.buffer_len());
        prop_assert_eq!(p.payload(), &extra[..]);
        prop_assert_eq!(DdpRepr::parse(&p), Ok(r));
    }

    #[test]
    fn ddp_control_identity(b in any::<u8>()) {
        prop_assert_eq!(DdpControl::from_byte(b).to_byte(), b);
        prop_assert_eq!(RdmapControl::from_byte(b).to_byte(), b);
    }

    #[test]
    fn read_request_body_identity(body in read_request_body()) {
        let mut b = [0u8; 28];
        prop_assert_eq!(body.emit(&mut b), Ok(28));
        prop_assert_eq!(ReadRequestBody::parse(&b), Ok(body));
    }

    #[test]
    fn terminate_header_identity(t in terminate_header()) {
        let mut b = vec![0u8; t.buffer_len()];
        prop_assert_eq!(t.emit(&mut b), Ok(b.len()));
        prop_assert_eq!(TerminateHeader::required_len(&b), Ok(b.len()));
        prop_assert_eq!(TerminateHeader::parse(&b), Ok((t, b.len())));
    }

    #[test]
    fn message_new_then_message_identity(msg in message(), last in any::<bool>()) {
        let h = RdmapHeader::new(msg, last);
        prop_assert_eq!(h.message(), msg);
        prop_assert_eq!(h.opcode(), msg.opcode());
        prop_assert_eq!(h.last(), last);
        if let Some(qn) = msg.opcode().queue_number() {
            let is_on_its_queue = matches!(h.ddp.buffer, DdpBuffer::Untagged { qn: q, .. } if q == qn);
            prop_assert!(is_on_its_queue);
        }
    }

    #[test]
    fn rdmap_header_emit_parse_identity(h in rdmap_header(), payload in proptest::collection::vec(any::<u8>(), 0..16)) {
        let len = h.buffer_len();
        let mut b = vec![0u8; len + payload.len()];
        b[len..].copy_from_slice(&payload);
        prop_assert_eq!(h.emit(&mut b), Ok(len));
        prop_assert_eq!(&b[len..], &payload[..]);
        prop_assert_eq!(RdmapHeader::required_len(&b), Ok(len));
        prop_assert_eq!(RdmapHeader::parse(&b), Ok((h, len)));
        for cut in 0..len {
            prop_assert_eq!(RdmapHeader::parse(&b[..cut]), Err(WireError::Truncated));
        }
    }

    /// Any bytes at all: parse never panics, and what parses re-emits byte for byte.
    #[test]
    fn any_bytes_parse_then_emit_identity(b in proptest::collection::vec(any::<u8>(), 0..96)) {
        if let Ok((h, len)) = RdmapHeader::parse(&b) {
            prop_assert_eq!(RdmapHeader::required_len(&b), Ok(len));
            let mut out = vec![0u8; len];
            prop_assert_eq!(h.emit(&mut out), Ok(len));
            prop_assert_eq!(&out[..], &b[..len]);
        }
    }

    /// The same for prefixes shaped like real headers (so Terminates and Read Requests with
    /// their bodies come up often).
    #[test]
    fn shaped_bytes_parse_then_emit_identity(
        t in any::<bool>(),
        op in 0..16u8,
        mut b in proptest::collection::vec(any::<u8>(), 2..120),
    ) {
        b[0] = (b[0] & 0x7f) | if t { 0x80 } else { 0 };
        b[1] = (b[1] & 0xf0) | op;
        match RdmapHeader::parse(&b) {
            Ok((h, len)) => {
                let mut out = vec![0u8; len];
                prop_assert_eq!(h.emit(&mut out), Ok(len));
                prop_assert_eq!(&out[..], &b[..len]);
            }
            Err(e) => prop_assert_eq!(e, WireError::Truncated),
        }
    }
}
