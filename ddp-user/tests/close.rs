//! `close` as TCP closes a socket: every byte written before it reaches the peer,
//! then a clean end, also when the MPA exchange of a nonblocking connect is still under way
//! at the close and when bytes wait in the socketpair; `SO_LINGER` 0 resets the connection
//! and flushes posted work; `SO_LINGER` with a time makes `close` wait until everything is
//! written and the FIN sent.
//!
//! Every wait is bounded (`common::bounded`, the hostile peer's read bound); the peers are
//! a DDP socket reading its byte stream, or a raw TCP peer that does the MPA exchange itself
//! and sees exactly how the connection ends (FIN or reset).

mod common;
#[path = "hostile/peer.rs"]
mod peer;

use std::io::{IoSlice, IoSliceMut};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{bounded, iov, pattern, send_all, set_bufs};
use ddp_proto::wire::rdmap::{RdmapHeader, RdmapMessage};
use ddp_user::engine::cq::status;
use ddp_user::{DdpSocket, Options, SIGNALED};
use peer::{Close, Hostile, Next, fair_config};

/// Reads the DDP socket's byte stream to its end: the bytes, and the socket's pending error
/// at the end (0: a clean end).
fn read_to_eof(s: &DdpSocket) -> (Vec<u8>, i32) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match s.recv(&mut [IoSliceMut::new(&mut buf)], 0) {
            Ok(0) => return (got, s.take_error()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.0 == libc::EINTR => {}
            Err(e) => return (got, e.0),
        }
    }
}

/// Writes `b` on `fd` with raw `write` calls (what a program's stdio or an unintercepted
/// call does on a DDP fd: the bytes go into the socketpair).
fn raw_write_all(fd: i32, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: `b` is a valid buffer of this length.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        assert!(n > 0, "raw write: {}", std::io::Error::last_os_error());
        b = &b[n as usize..];
    }
}

/// Whether `fd` reports `POLLHUP` or `POLLERR` within `ms` milliseconds.
fn hung_up_within(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r == 1 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// `SO_LINGER` of `fd`.
fn set_linger(fd: i32, secs: i32) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: secs,
    };
    // SAFETY: a valid option struct for SO_LINGER.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            core::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_LINGER");
}

/// A TCP connection over 127.0.0.1: (the client's end, the server's end), both with
/// `SO_SNDBUF`/`SO_RCVBUF` of `bufs` bytes when given (set before connecting).
fn tcp_conn(bufs: Option<i32>) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    if let Some(n) = bufs {
        set_bufs(l.as_raw_fd(), n);
    }
    let port = l.local_addr().unwrap().port();
    // SAFETY: plain socket/connect calls; the fd is owned by the stream made of it.
    let c = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket");
        if let Some(n) = bufs {
            set_bufs(fd, n);
        }
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect");
        TcpStream::from_raw_fd(fd)
    };
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// A DDP initiator (blocking MPA exchange) and the raw peer that answered it, over TCP
/// buffers of `bufs` bytes.
fn with_raw_peer(bufs: i32) -> (DdpSocket, Hostile) {
    let (c, s) = tcp_conn(Some(bufs));
    let t = std::thread::spawn(move || {
        let mut h = Hostile::new(s);
        h.respond(fair_config());
        h
    });
    let a = DdpSocket::connect(c.as_raw_fd(), &Options::default(), false).expect("connect");
    drop(c);
    (a, t.join().unwrap())
}

/// Reads the victim's Sends until it closes: their payloads and how it closed.
fn sends_to_close(h: &mut Hostile) -> (Vec<u8>, Close) {
    let mut got = Vec::new();
    loop {
        match h.next() {
            Next::Ulpdu(u) => {
                let (hdr, n) = RdmapHeader::parse(&u).unwrap();
                assert!(matches!(hdr.message(), RdmapMessage::Send { .. }));
                got.extend_from_slice(&u[n..]);
            }
            Next::Closed(c) => return (got, c),
        }
    }
}

/// A nonblocking connect whose MPA exchange is still under way (the responder has not
/// started it): written to (stream sends queued for after the exchange, then raw bytes into
/// the socketpair) and closed at once. The responder then answers: it must get every byte,
/// in order, then a clean end. With 4 MiB sent, the engine's queue is full and the raw bytes
/// wait in the socketpair until the exchange is over and the queue drains.
#[test]
fn close_during_the_mpa_exchange_sends_everything_then_ends_cleanly() {
    bounded(120, || {
        let o = Options::default();
        for (i, &(sent, raw)) in [
            (1, 0),
            (7, 0),
            (1000, 0),
            (65536, 0),
            (1 << 20, 0),
            (1, 3000),
            (100_000, 50_000),
            (4 << 20, 64 << 10),
        ]
        .iter()
        .enumerate()
        {
            let (c, s) = tcp_conn(None);
            let a = DdpSocket::connect(c.as_raw_fd(), &o, true).unwrap();
            drop(c);
            let data = pattern(sent + raw, i as u64);
            let mut at = 0;
            while at < sent {
                at += a
                    .send(&[IoSlice::new(&data[at..sent])], libc::MSG_DONTWAIT)
                    .expect("a send queued before the exchange completed");
            }
            raw_write_all(a.app_fd(), &data[sent..]);
            assert!(
                !a.is_connected(),
                "the exchange completed without a responder"
            );
            drop(a);
            // (only now does the peer begin the exchange)
            let b = DdpSocket::accept(s.as_raw_fd(), &o, false).expect("accept");
            drop(s);
            let (got, err) = read_to_eof(&b);
            assert_eq!(
                got.len(),
                data.len(),
                "{sent} B sent + {raw} B raw, closed during the MPA exchange"
            );
            assert!(got == data, "{sent} + {raw} B: content differs");
            assert_eq!(err, 0, "{sent} + {raw} B: the end was not clean");
        }
    });
}

/// Bytes left in the socketpair (raw writes) when the application closes, or shuts down
/// writing, on an open connection: sent before the FIN.
#[test]
fn bytes_in_the_socketpair_go_out_before_the_fin() {
    bounded(60, || {
        let o = Options::default();
        for (i, size) in [1usize, 5000, 200_000].into_iter().enumerate() {
            for shut in [false, true] {
                let (a, b) = common::pair(&o, &o);
                let data = pattern(size, 100 + i as u64);
                raw_write_all(a.app_fd(), &data);
                if shut {
                    a.shutdown(libc::SHUT_WR).unwrap();
                } else {
                    a.close();
                }
                let (got, err) = read_to_eof(&b);
                assert_eq!(got.len(), size, "{size} B raw, shutdown {shut}");
                assert!(
                    got == data,
                    "{size} B raw, shutdown {shut}: content differs"
                );
                assert_eq!(err, 0);
            }
        }
    });
}

/// The peer shuts down its side while our close is still sending: a half-close, as before
/// the close; everything still reaches it, then our FIN.
#[test]
fn the_peer_s_fin_during_the_close_does_not_cut_what_is_left() {
    bounded(60, || {
        let (a, mut h) = with_raw_peer(16 << 10);
        // (the peer reads nothing yet: most of it stays queued in the engine)
        let data = pattern(1 << 20, 7);
        send_all(&a, &data);
        a.close();
        h.s.shutdown(std::net::Shutdown::Write).unwrap();
        let (got, how) = sends_to_close(&mut h);
        assert_eq!(how, Close::Fin);
        assert_eq!(got.len(), data.len());
        assert!(got == data, "content differs");
    });
}

/// `SO_LINGER {1, 0}`: the close is an abort. The peer sees a reset (not the data and a
/// FIN), and a work request still queued completes with `FLUSH_ERR`.
#[test]
fn linger_zero_resets_and_flushes_posted_work() {
    bounded(60, || {
        let (a, mut h) = with_raw_peer(16 << 10);
        // (the peer reads nothing yet: most of it stays queued in the engine)
        let data = pattern(1 << 20, 8);
        send_all(&a, &data);
        let msg = pattern(64 << 10, 9);
        // SAFETY: `msg` outlives the request (it completes at the close, below).
        unsafe { a.post_send(77, &[iov(&msg)], SIGNALED) }.unwrap();
        set_linger(a.tcp_fd(), 0);
        let t0 = Instant::now();
        a.close();
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "an abort does not wait"
        );
        let wc = common::wait_one(&a);
        assert_eq!((wc.wr_id, wc.status), (77, status::FLUSH_ERR));
        let (got, how) = h.read_to_close();
        assert_eq!(how, Close::Reset, "after {} bytes", got.len());
        assert!(
            got.len() < data.len(),
            "everything was sent before the reset"
        );
        drop(msg);
    });
}

/// `SO_LINGER {1, N}`: `close` waits until everything is written and the FIN sent (here
/// until the peer reads), and at most N seconds; the connection then ends as usual.
#[test]
fn linger_time_makes_close_wait_until_flushed() {
    bounded(60, || {
        let (a, mut h) = with_raw_peer(16 << 10);
        let data = pattern(1 << 20, 10);
        send_all(&a, &data);
        set_linger(a.tcp_fd(), 30);
        let (tx, rx) = mpsc::channel();
        let closer = std::thread::spawn(move || {
            a.close();
            tx.send(Instant::now()).unwrap();
        });
        // The peer reads nothing: the engine cannot write everything, so close waits.
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "close returned with a lingering socket's data unsent"
        );
        let (got, how) = sends_to_close(&mut h);
        let seen_fin = Instant::now();
        let returned = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("close returned once everything was written");
        closer.join().unwrap();
        assert_eq!(how, Close::Fin);
        assert_eq!(got.len(), data.len());
        assert!(got == data, "content differs");
        // (written and FIN queued before the peer read it all: close returned by then, give
        // or take the scheduling of two threads)
        assert!(returned <= seen_fin + Duration::from_secs(1));
    });
}

/// `SO_LINGER {1, 1}` with a peer that never reads: `close` returns after about a second;
/// the engine goes on, and once no byte could be written for the close linger it gives up
/// with a reset (not a FIN: the peer must not take the cut stream for a whole one).
#[test]
fn linger_time_is_a_bound_and_a_stalled_close_resets() {
    bounded(60, || {
        let (a, mut h) = with_raw_peer(16 << 10);
        let data = pattern(1 << 20, 11);
        send_all(&a, &data);
        set_linger(a.tcp_fd(), 1);
        let t0 = Instant::now();
        drop(a);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "close took {took:?} with SO_LINGER 1 s"
        );
        // The peer still reads nothing: the engine gives up 2 to 4 s after its last write,
        // and the peer's socket hangs up (a reset; a FIN would be a half-close, no hang-up).
        assert!(
            hung_up_within(h.s.as_raw_fd(), 10_000),
            "the stalled close never ended"
        );
        let (got, how) = h.read_to_close();
        assert_eq!(how, Close::Reset, "after {} bytes", got.len());
        assert!(got.len() < data.len());
    });
}
