//! A reusable hostile iWARP peer over raw TCP (std::net: the test binary does not run under
//! the preload). It performs a correct MPA exchange with `ddp_proto::mpa::startup` (or lets
//! the test send broken frames), frames arbitrary ULPDUs with `ddp_proto::mpa::framer` (or
//! sends raw bytes), and reads back what the victim sends, deframing and parsing it so a test
//! can assert the Terminate's layer / error type / code exactly.
//!
//! Every read is bounded (a socket read timeout): a victim that stays silent fails the test
//! instead of hanging it.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ddp_proto::ddp::STag;
use ddp_proto::error::TermLayer;
use ddp_proto::mpa::crc;
use ddp_proto::mpa::deframer::{Deframer, Event as DfEvent, RxConfig};
use ddp_proto::mpa::framer::{Framer, TxConfig};
use ddp_proto::mpa::startup::{Initiator, MpaConfig, Negotiated, Responder};
use ddp_proto::wire::ddp::{DdpBuffer, DdpRepr};
use ddp_proto::wire::mpa::HEADER_LEN;
use ddp_proto::wire::rdmap::{
    Opcode, RdmapControl, RdmapHeader, RdmapMessage, ReadRequestBody, TerminateHeader,
};

/// How long the hostile peer waits for the victim on any read.
pub const READ_BOUND: Duration = Duration::from_secs(10);

/// A Terminate code as three raw numbers: (layer, etype, ecode).
pub type Code = (u8, u8, u8);

/// The raw triple of a received Terminate.
pub fn code_of(t: &TerminateHeader) -> Code {
    (t.code.layer.to_raw(), t.code.etype, t.code.ecode)
}

/// `layer << 16 | etype << 8 | ecode` (`ddp_wc.vendor_err`).
pub fn vendor(c: Code) -> u32 {
    u32::from(c.0) << 16 | u32::from(c.1) << 8 | u32::from(c.2)
}

/// How the victim's side of the TCP connection ended, as the hostile peer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// FIN.
    Fin,
    /// RST (the victim closed with unread data, or aborted).
    Reset,
}

/// What a hostile read found.
#[derive(Debug)]
pub enum Next {
    /// One whole ULPDU.
    Ulpdu(Vec<u8>),
    /// The connection ended at an FPDU boundary.
    Closed(Close),
}

/// The hostile peer.
pub struct Hostile {
    /// The raw TCP connection.
    pub s: TcpStream,
    /// The negotiated parameters, once an exchange succeeded.
    pub neg: Option<Negotiated>,
    tx: Option<Framer>,
    rx: Option<Deframer>,
    inbuf: Vec<u8>,
    at: usize,
    /// Next MSN on QN 0 (Sends) and QN 1 (Read Requests).
    pub send_msn: u32,
    /// Next MSN on QN 1.
    pub rr_msn: u32,
}

/// The MPA configuration of the hostile peer when it plays by the rules: siw's defaults
/// (revision 2, IRD/ORD words, CRC if the victim asks — it does by default), except that it
/// inserts markers when the victim asks for them.
pub fn fair_config() -> MpaConfig {
    MpaConfig {
        allow_markers_tx: true,
        ..MpaConfig::siw_compat()
    }
}

impl Hostile {
    /// Wraps a connected raw stream (read/write timeouts set, `TCP_NODELAY`).
    pub fn new(s: TcpStream) -> Hostile {
        s.set_read_timeout(Some(READ_BOUND)).unwrap();
        s.set_write_timeout(Some(READ_BOUND)).unwrap();
        s.set_nodelay(true).unwrap();
        Hostile {
            s,
            neg: None,
            tx: None,
            rx: None,
            inbuf: Vec::new(),
            at: 0,
            send_msn: 1,
            rr_msn: 1,
        }
    }

    // ------------------------------------------------------------------ MPA

    /// Reads exactly one byte (bounded); `None` at EOF or reset.
    fn read_byte(&mut self) -> Option<u8> {
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(1) => Some(b[0]),
            Ok(_) => None,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
            Err(e) => panic!("hostile read: {e}"),
        }
    }

    /// A correct exchange as MPA initiator with `cfg`; the victim must accept.
    pub fn initiate(&mut self, cfg: MpaConfig) -> Negotiated {
        let mut ini = Initiator::new(cfg, Duration::ZERO).unwrap();
        let req = ini.poll_transmit().unwrap();
        self.s.write_all(&req).unwrap();
        let neg = loop {
            if let Some(o) = ini.poll_outcome() {
                break o.expect("the victim's Reply is valid");
            }
            let b = self.read_byte().expect("victim closed during MPA");
            // byte by byte: nothing past the Reply is taken from the stream
            assert_eq!(ini.handle_input(&[b], Duration::ZERO), 1);
        };
        self.set_negotiated(neg.clone());
        neg
    }

    /// Sends a valid Request for `cfg` with `extra` bytes right behind it (one write), then
    /// reads the victim's Reply like [`Hostile::initiate`].
    pub fn initiate_with_extra(&mut self, cfg: MpaConfig, extra: &[u8]) -> Negotiated {
        let mut ini = Initiator::new(cfg, Duration::ZERO).unwrap();
        let mut req = ini.poll_transmit().unwrap();
        req.extend_from_slice(extra);
        self.s.write_all(&req).unwrap();
        let neg = loop {
            if let Some(o) = ini.poll_outcome() {
                break o.expect("the victim's Reply is valid");
            }
            let b = self.read_byte().expect("victim closed during MPA");
            assert_eq!(ini.handle_input(&[b], Duration::ZERO), 1);
        };
        self.set_negotiated(neg.clone());
        neg
    }

    /// A correct exchange as MPA responder with `cfg`; the victim's Request must be valid.
    pub fn respond(&mut self, cfg: MpaConfig) -> Negotiated {
        self.respond_with_extra(cfg, &[])
    }

    /// As [`Hostile::respond`], with `extra` bytes right behind the Reply (one write).
    pub fn respond_with_extra(&mut self, cfg: MpaConfig, extra: &[u8]) -> Negotiated {
        let mut resp = Responder::new_auto_accept(cfg, Duration::ZERO).unwrap();
        let neg = loop {
            if let Some(o) = resp.poll_outcome() {
                break o.expect("the victim's Request is valid");
            }
            let b = self.read_byte().expect("victim closed during MPA");
            resp.handle_input(&[b], Duration::ZERO);
        };
        let mut reply = resp.poll_transmit().unwrap();
        reply.extend_from_slice(extra);
        self.s.write_all(&reply).unwrap();
        self.set_negotiated(neg.clone());
        neg
    }

    /// Reads the victim's whole MPA Request (header + private data) and returns it raw.
    pub fn read_mpa_request(&mut self) -> Vec<u8> {
        let mut v = vec![0u8; HEADER_LEN];
        self.s.read_exact(&mut v).expect("victim's MPA Request");
        let pd = usize::from(u16::from_be_bytes([v[18], v[19]]));
        let mut p = vec![0u8; pd];
        self.s.read_exact(&mut p).unwrap();
        v.extend_from_slice(&p);
        v
    }

    /// The valid Reply a responder with `cfg` gives to `request` (for tests that break it).
    pub fn reply_for(request: &[u8], cfg: MpaConfig) -> Vec<u8> {
        let mut resp = Responder::new_auto_accept(cfg, Duration::ZERO).unwrap();
        assert_eq!(resp.handle_input(request, Duration::ZERO), request.len());
        resp.poll_outcome().unwrap().expect("valid request");
        resp.poll_transmit().unwrap()
    }

    /// The valid Request an initiator with `cfg` sends (for tests that break it).
    pub fn request_for(cfg: MpaConfig) -> Vec<u8> {
        Initiator::new(cfg, Duration::ZERO)
            .unwrap()
            .poll_transmit()
            .unwrap()
    }

    /// Framing from now on follows `neg` (our view of the exchange).
    pub fn set_negotiated(&mut self, neg: Negotiated) {
        self.tx = Some(Framer::new(TxConfig {
            crc: neg.crc,
            markers: neg.markers_tx,
        }));
        self.rx = Some(Deframer::new(RxConfig {
            crc: neg.crc,
            markers: neg.markers_rx,
            max_ulpdu: 65535,
        }));
        self.neg = Some(neg);
    }

    // ------------------------------------------------------------------ sending

    /// The stream position of our next FPDU (markers are at multiples of 512).
    pub fn tx_position(&self) -> u64 {
        self.tx.as_ref().expect("negotiated").position()
    }

    /// Writes raw bytes.
    pub fn send_raw(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    /// The FPDU for `ulpdu` parts, framed at the current stream position (the framer
    /// advances: the bytes must then be sent, possibly after tampering).
    pub fn frame(&mut self, parts: &[&[u8]]) -> Vec<u8> {
        self.tx.as_mut().expect("negotiated").frame_to_vec(parts)
    }

    /// Frames and sends one ULPDU.
    pub fn send_ulpdu(&mut self, parts: &[&[u8]]) {
        let f = self.frame(parts);
        self.send_raw(&f);
    }

    /// Frames and sends `h` + `payload`.
    pub fn send_msg(&mut self, h: &RdmapHeader, payload: &[u8]) {
        let hb = emit(h);
        self.send_ulpdu(&[&hb, payload]);
    }

    /// An RDMA Write of `payload` to `stag` at `to`.
    pub fn write(&mut self, stag: STag, to: u64, payload: &[u8]) {
        let h = RdmapHeader::new(
            RdmapMessage::Write {
                sink_stag: stag,
                sink_to: to,
            },
            true,
        );
        self.send_msg(&h, payload);
    }

    /// A one-segment Send with the next MSN.
    pub fn send(&mut self, payload: &[u8]) {
        let msn = self.send_msn;
        self.send_msn += 1;
        let h = RdmapHeader::new(RdmapMessage::Send { msn, mo: 0 }, true);
        self.send_msg(&h, payload);
    }

    /// The header of a Read Request with the next MSN.
    pub fn read_request_header(&mut self, body: ReadRequestBody) -> RdmapHeader {
        let msn = self.rr_msn;
        self.rr_msn += 1;
        RdmapHeader::new(RdmapMessage::ReadRequest { msn, mo: 0, body }, true)
    }

    /// The FPDU of a Read Request with the next MSN (not sent).
    pub fn read_request_fpdu(
        &mut self,
        source: STag,
        source_to: u64,
        size: u32,
        sink_to: u64,
    ) -> Vec<u8> {
        let h = self.read_request_header(ReadRequestBody {
            sink_stag: STag(0x0000_7701),
            sink_to,
            read_size: size,
            source_stag: source,
            source_to,
        });
        let hb = emit(&h);
        self.frame(&[&hb])
    }

    /// Sends a Read Request with the next MSN.
    pub fn read_request(&mut self, source: STag, source_to: u64, size: u32, sink_to: u64) {
        let f = self.read_request_fpdu(source, source_to, size, sink_to);
        self.send_raw(&f);
    }

    /// Sends a Terminate with `code` (no header copies).
    pub fn terminate(&mut self, code: Code) {
        let term = TerminateHeader::new(ddp_proto::error::TermCode::new(
            TermLayer::from_raw(code.0),
            code.1,
            code.2,
        ));
        let h = RdmapHeader::new(
            RdmapMessage::Terminate {
                msn: 1,
                mo: 0,
                term,
            },
            true,
        );
        self.send_msg(&h, &[]);
    }

    /// Aborts the connection: `SO_LINGER {1, 0}` then close, so the kernel sends an RST.
    pub fn reset(self) {
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: a valid option struct for SO_LINGER on our own socket.
        let r = unsafe {
            libc::setsockopt(
                self.s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&l as *const libc::linger).cast(),
                core::mem::size_of::<libc::linger>() as u32,
            )
        };
        assert_eq!(r, 0);
        drop(self.s);
    }

    // ------------------------------------------------------------------ receiving

    /// The next ULPDU the victim sent, or how the connection ended (bounded by
    /// [`READ_BOUND`]). Panics on invalid framing from the victim, or an end mid-FPDU.
    pub fn next(&mut self) -> Next {
        let mut ulpdu = Vec::new();
        loop {
            let df = self.rx.as_mut().expect("negotiated");
            while self.at < self.inbuf.len() {
                let ev = df.next(&self.inbuf, &mut self.at).expect("victim's FPDU");
                match ev {
                    DfEvent::Header(h) => ulpdu.extend_from_slice(h.bytes()),
                    DfEvent::Payload { range, .. } => {
                        ulpdu.extend_from_slice(&self.inbuf[range]);
                    }
                    DfEvent::End => return Next::Ulpdu(ulpdu),
                    DfEvent::NeedMore => break,
                }
            }
            self.inbuf.clear();
            self.at = 0;
            let mut buf = vec![0u8; 64 * 1024];
            let n = match self.s.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    assert!(df.is_idle() && ulpdu.is_empty(), "victim reset mid-FPDU");
                    return Next::Closed(Close::Reset);
                }
                Err(e) => panic!("hostile read (bounded {READ_BOUND:?}): {e}"),
            };
            if n == 0 {
                assert!(df.is_idle() && ulpdu.is_empty(), "victim closed mid-FPDU");
                return Next::Closed(Close::Fin);
            }
            buf.truncate(n);
            self.inbuf = buf;
        }
    }

    /// Reads until the victim's Terminate; returns it and how many other ULPDUs came
    /// first (e.g. Read Responses already under way). Panics if the connection ends first.
    pub fn expect_terminate(&mut self) -> (TerminateHeader, usize) {
        let mut skipped = 0;
        loop {
            match self.next() {
                Next::Ulpdu(u) => {
                    let (h, _) = RdmapHeader::parse(&u).expect("victim's ULPDU header");
                    if let RdmapMessage::Terminate { term, .. } = h.message() {
                        return (term, skipped);
                    }
                    skipped += 1;
                }
                Next::Closed(c) => panic!("victim closed ({c:?}) without a Terminate"),
            }
        }
    }

    /// After the Terminate: nothing more, then the close. Returns how it closed.
    pub fn expect_close(&mut self) -> Close {
        match self.next() {
            Next::Closed(c) => c,
            Next::Ulpdu(u) => panic!("victim sent more after its Terminate: {:?}", &u[..2]),
        }
    }

    /// The Terminate the victim must send for a case, then its close: asserts the code.
    pub fn expect_terminate_code(&mut self, want: Code) -> TerminateHeader {
        let (t, _) = self.expect_terminate();
        assert_eq!(code_of(&t), want, "Terminate code on the wire: {t:?}");
        self.expect_close();
        t
    }

    /// Reads raw bytes until the victim closes (no framing assumed: MPA-phase cases).
    pub fn read_to_close(&mut self) -> (Vec<u8>, Close) {
        let mut v = core::mem::take(&mut self.inbuf);
        v.drain(..self.at);
        self.at = 0;
        let mut buf = [0u8; 4096];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return (v, Close::Fin),
                Ok(n) => v.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return (v, Close::Reset),
                Err(e) => panic!("hostile read (bounded {READ_BOUND:?}): {e}"),
            }
        }
    }

    /// The victim closes without sending anything more, at the framing level: no Terminate.
    pub fn expect_silent_close(&mut self) -> Close {
        match self.next() {
            Next::Closed(c) => c,
            Next::Ulpdu(u) => {
                let h = RdmapHeader::parse(&u).map(|(h, _)| h.message());
                panic!("expected a silent close, got {h:?}")
            }
        }
    }
}

/// The bytes of an RDMAP header.
pub fn emit(h: &RdmapHeader) -> Vec<u8> {
    let mut b = vec![0u8; h.buffer_len()];
    h.emit(&mut b).expect("header emits");
    b
}

/// The bytes of a raw DDP header (any field values, for headers RDMAP would not build).
pub fn emit_ddp(d: &DdpRepr) -> Vec<u8> {
    let mut b = vec![0u8; d.buffer_len()];
    d.emit_bytes(&mut b).expect("DDP header emits");
    b
}

/// An untagged header with every field chosen by the caller.
pub fn untagged(opcode: Opcode, qn: u32, msn: u32, mo: u32, last: bool) -> DdpRepr {
    DdpRepr::untagged(qn, msn, mo, last, RdmapControl::new(opcode).to_byte(), 0)
}

/// A tagged header with every field chosen by the caller.
pub fn tagged(opcode: Opcode, stag: STag, to: u64) -> DdpRepr {
    DdpRepr::tagged(stag, to, true, RdmapControl::new(opcode).to_byte())
}

/// Recomputes the CRC of one FPDU built without markers (after tampering with it).
pub fn fix_crc(fpdu: &mut [u8]) {
    let n = fpdu.len() - crc::CRC_LEN;
    let c = crc::to_wire(crc::crc32c(&fpdu[..n]));
    fpdu[n..].copy_from_slice(&c);
}

/// The QN of an untagged header (for tests that tamper with it).
pub fn with_qn(mut d: DdpRepr, new_qn: u32) -> DdpRepr {
    if let DdpBuffer::Untagged { qn, .. } = &mut d.buffer {
        *qn = new_qn;
    }
    d
}
