//! The MPA Request/Reply exchange over a real socket, non-blocking and resumable: the
//! blocking `connect`/`accept` drive it inline with `poll` between steps, the progress thread
//! drives it for non-blocking sockets.
//!
//! Rules kept here: the TCP connect of a non-blocking initiator may still be in progress
//! (the Request goes out once the socket is writable without an error); the Request/Reply
//! is written completely, in its own `send`, before any FPDU (tshark cannot decode an FPDU
//! that shares a segment with the Reply, and TCP_NODELAY is set, so the Reply leaves alone);
//! bytes read after the peer's frame belong to the FPDU stream and are handed on; a failed
//! initiator sends the Terminate that [`StartupError::proto_error`] asks for (best effort)
//! framed as [`Initiator::reply_framing`] says.

use core::time::Duration;
use std::os::fd::RawFd;

use ddp_proto::mpa::framer::{Framer, TxConfig};
use ddp_proto::mpa::startup::{Initiator, MpaConfig, Negotiated, Responder, StartupError};
use ddp_proto::rdmap::terminate::{terminate_header, terminate_message};

use crate::sys::{self, Errno};

enum Handshake {
    /// Waiting for a non-blocking TCP connect; the Initiator is built when it completes.
    TcpConnecting(MpaConfig),
    Initiator(Initiator),
    Responder(Responder),
}

/// What a step ended in.
pub(crate) enum Step {
    /// Not finished: wait for these `poll` events (`POLLIN`/`POLLOUT`) or the deadline.
    Pending { events: i16 },
    /// Done: the negotiated parameters and the bytes read past the peer's frame.
    Done(Negotiated, Vec<u8>),
    /// Failed, with the errno the application sees.
    Failed(Errno),
}

/// One MPA exchange in progress.
pub(crate) struct Startup {
    hs: Handshake,
    out: Vec<u8>,
    out_off: usize,
    outcome: Option<Result<Negotiated, StartupError>>,
    leftover: Vec<u8>,
}

/// The errno an application sees for a failed exchange.
pub(crate) fn startup_errno(e: &StartupError) -> Errno {
    match e {
        StartupError::Rejected { .. } | StartupError::LocallyRejected => Errno::ECONNREFUSED,
        StartupError::Timeout => Errno::ETIMEDOUT,
        StartupError::StreamLost => Errno::ECONNRESET,
        _ => Errno::EPROTO,
    }
}

impl Startup {
    /// An initiator; `connecting` if the TCP connect may still be in progress.
    pub(crate) fn initiator(cfg: MpaConfig, connecting: bool, now: Duration) -> Startup {
        let hs = if connecting {
            Handshake::TcpConnecting(cfg)
        } else {
            Handshake::Initiator(Initiator::new(cfg, now).expect("options validated"))
        };
        let mut s = Startup {
            hs,
            out: Vec::new(),
            out_off: 0,
            outcome: None,
            leftover: Vec::new(),
        };
        s.collect_output();
        s
    }

    /// A responder that accepts every acceptable Request.
    pub(crate) fn responder(cfg: MpaConfig, now: Duration) -> Startup {
        Startup {
            hs: Handshake::Responder(
                Responder::new_auto_accept(cfg, now).expect("options validated"),
            ),
            out: Vec::new(),
            out_off: 0,
            outcome: None,
            leftover: Vec::new(),
        }
    }

    /// The deadline of the exchange, if one is running.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        match &self.hs {
            Handshake::TcpConnecting(_) => None,
            Handshake::Initiator(i) => i.poll_timeout(),
            Handshake::Responder(r) => r.poll_timeout(),
        }
    }

    /// Bytes of our MPA frames not written yet.
    pub(crate) fn unsent(&self) -> usize {
        self.out.len() - self.out_off
    }

    fn collect_output(&mut self) {
        let more = match &mut self.hs {
            Handshake::TcpConnecting(_) => None,
            Handshake::Initiator(i) => i.poll_transmit(),
            Handshake::Responder(r) => r.poll_transmit(),
        };
        if let Some(b) = more {
            self.out.extend_from_slice(&b);
        }
        if self.outcome.is_none() {
            self.outcome = match &mut self.hs {
                Handshake::TcpConnecting(_) => None,
                Handshake::Initiator(i) => i.poll_outcome(),
                Handshake::Responder(r) => r.poll_outcome(),
            };
            if let Some(Err(e)) = &self.outcome
                && let (Some(err), Handshake::Initiator(i)) = (e.proto_error(), &self.hs)
                && let Some(f) = i.reply_framing()
            {
                // RFC 5044/6581: the initiator answers a bad Reply with a Terminate.
                let h = terminate_message(terminate_header(err, None), 0);
                let mut b = [0u8; 80];
                if let Ok(n) = h.emit(&mut b) {
                    let mut fr = Framer::new(TxConfig {
                        crc: f.crc,
                        markers: f.markers,
                    });
                    self.out.extend_from_slice(&fr.frame_to_vec(&[&b[..n]]));
                }
            }
        }
    }

    /// Makes all the progress possible without blocking on `fd` (non-blocking I/O).
    pub(crate) fn step(&mut self, fd: RawFd, now: Duration) -> Step {
        if let Handshake::TcpConnecting(cfg) = &self.hs {
            let mut p = [libc::pollfd {
                fd,
                events: libc::POLLOUT,
                revents: 0,
            }];
            match sys::poll(&mut p, Some(Duration::ZERO)) {
                Ok(1) => {}
                Ok(_) | Err(Errno::EINTR) => {
                    return Step::Pending {
                        events: libc::POLLOUT,
                    };
                }
                Err(e) => return Step::Failed(e),
            }
            // A connect that failed is reported with POLLERR (and POLLHUP): only then is
            // `SO_ERROR` asked (one `getsockopt` per connection fewer). A connection broken
            // right after it was made fails the Request's `send` below instead.
            if p[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                match sys::socket_error(fd) {
                    Ok(0) => {}
                    Ok(e) => return Step::Failed(Errno(e)),
                    Err(e) => return Step::Failed(e),
                }
            }
            let ini = Initiator::new(cfg.clone(), now).expect("options validated");
            self.hs = Handshake::Initiator(ini);
            self.collect_output();
        }
        loop {
            // 1. our frame (or a reject Reply / Terminate) goes out first, completely.
            while self.out_off < self.out.len() {
                match sys::send(fd, &self.out[self.out_off..], libc::MSG_DONTWAIT) {
                    Ok(n) => self.out_off += n,
                    Err(Errno::EAGAIN) => {
                        return Step::Pending {
                            events: libc::POLLOUT,
                        };
                    }
                    Err(e) => {
                        return Step::Failed(self.take_error().map_or(e, |se| startup_errno(&se)));
                    }
                }
            }
            if let Some(o) = self.outcome.take() {
                return match o {
                    Ok(neg) => Step::Done(neg, core::mem::take(&mut self.leftover)),
                    Err(e) => Step::Failed(startup_errno(&e)),
                };
            }
            // 2. the peer's frame.
            let mut buf = [0u8; 2048];
            match sys::recv(fd, &mut buf, libc::MSG_DONTWAIT) {
                Ok(0) => match &mut self.hs {
                    Handshake::Initiator(i) => i.handle_eof(),
                    Handshake::Responder(r) => r.handle_eof(),
                    Handshake::TcpConnecting(_) => unreachable!("connected above"),
                },
                Ok(n) => {
                    let used = match &mut self.hs {
                        Handshake::Initiator(i) => i.handle_input(&buf[..n], now),
                        Handshake::Responder(r) => r.handle_input(&buf[..n], now),
                        Handshake::TcpConnecting(_) => unreachable!("connected above"),
                    };
                    self.leftover.extend_from_slice(&buf[used..n]);
                }
                Err(Errno::EAGAIN) => {
                    match &mut self.hs {
                        Handshake::Initiator(i) => i.handle_timeout(now),
                        Handshake::Responder(r) => r.handle_timeout(now),
                        Handshake::TcpConnecting(_) => unreachable!("connected above"),
                    }
                    self.collect_output();
                    if self.outcome.is_none() {
                        return Step::Pending {
                            events: libc::POLLIN,
                        };
                    }
                    continue;
                }
                Err(e) => return Step::Failed(e),
            }
            self.collect_output();
        }
    }

    fn take_error(&mut self) -> Option<StartupError> {
        match self.outcome.take() {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }
}
