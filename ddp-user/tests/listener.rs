//! The background acceptor (`ddp_user::driver::listener`) over real loopback sockets: MPA is
//! answered before anyone accepts, connections come out of the stand-in in full operation,
//! failed exchanges never come out, dual listeners classify, and nothing but a hand-off with
//! the listener's secret is ever taken for a connection.

mod common;

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use common::bounded;
use ddp_user::driver::listener::{self, Accepted, ListenSpec, Verdict};
use ddp_user::{DdpSocket, Options};

/// A stand-in listener with an abstract, kernel-chosen name, and that name.
fn standin() -> (UnixListener, (libc::sockaddr_un, libc::socklen_t)) {
    // SAFETY: plain syscalls on our own values.
    unsafe {
        let u = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(u >= 0);
        let mut sun: libc::sockaddr_un = core::mem::zeroed();
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let fam = core::mem::size_of::<libc::sa_family_t>() as libc::socklen_t;
        assert_eq!(
            libc::bind(u, (&sun as *const libc::sockaddr_un).cast(), fam),
            0
        );
        assert_eq!(libc::listen(u, 64), 0);
        let mut len = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(
            libc::getsockname(u, (&mut sun as *mut libc::sockaddr_un).cast(), &mut len),
            0
        );
        (UnixListener::from_raw_fd(u), (sun, len))
    }
}

struct Served {
    tcp: TcpListener,
    standin: UnixListener,
    served: listener::Served,
    secret: u64,
}

fn serve(dual: Option<Duration>) -> Served {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let (standin, addr) = standin();
    let secret = 0x5eed_1234_abcd_0001;
    let served = listener::listen(ListenSpec {
        tcp_fd: tcp.as_raw_fd(),
        opts: Options::default(),
        dual_wait: dual,
        standin: addr,
        backlog: 64,
        secret,
    })
    .unwrap();
    Served {
        tcp,
        standin,
        served,
        secret,
    }
}

/// A blocking DDP connect to `l` (the MPA exchange runs in it).
fn ddp_connect(l: &TcpListener) -> Result<DdpSocket, ddp_user::Errno> {
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let r = DdpSocket::connect(s.as_raw_fd(), &Options::default(), false);
    drop(s); // (the engine has its own descriptor)
    r
}

fn take(s: &Served) -> Result<Accepted, ddp_user::Errno> {
    let (u, _) = s.standin.accept().unwrap();
    let r = listener::take(u.as_raw_fd(), s.secret, &Options::default(), false);
    drop(u);
    r
}

fn send_all(s: &DdpSocket, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        off += s.send(&[IoSlice::new(&data[off..])], 0).unwrap();
    }
}

fn recv_exact(s: &DdpSocket, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut off = 0;
    while off < n {
        let k = s.recv(&mut [IoSliceMut::new(&mut out[off..])], 0).unwrap();
        assert!(k > 0, "EOF after {off} of {n} bytes");
        off += k;
    }
    out
}

/// Several clients complete their blocking connects while nobody accepts; then each accepted
/// connection carries data both ways, content checked.
#[test]
fn connects_complete_before_accept() {
    bounded(60, || {
        let s = serve(None);
        let t0 = Instant::now();
        let clients: Vec<DdpSocket> = (0..8).map(|_| ddp_connect(&s.tcp).unwrap()).collect();
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "connects took {:?}",
            t0.elapsed()
        );
        for (i, c) in clients.iter().enumerate() {
            let Accepted::Ddp(a) = take(&s).unwrap() else {
                panic!("connection {i} came out plain");
            };
            assert!(a.is_connected());
            let msg: Vec<u8> = (0..5000u32).map(|k| (k * 7 + i as u32) as u8).collect();
            send_all(c, &msg);
            assert_eq!(recv_exact(&a, msg.len()), msg);
            let back: Vec<u8> = msg.iter().rev().copied().collect();
            send_all(&a, &back);
            assert_eq!(recv_exact(c, back.len()), back);
        }
        listener::unlisten(s.served);
    });
}

/// A client that does not speak MPA to a strict listener fails its exchange in the acceptor
/// and never reaches the stand-in; the next good client does.
#[test]
fn failed_exchanges_never_reach_accept() {
    bounded(60, || {
        let s = serve(None);
        let mut bad = TcpStream::connect(s.tcp.local_addr().unwrap()).unwrap();
        bad.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        // the acceptor answers a bad Request by closing (after its Reject, if any)
        bad.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut sink = Vec::new();
        let _ = bad.read_to_end(&mut sink);
        let good = ddp_connect(&s.tcp).unwrap();
        let Accepted::Ddp(a) = take(&s).unwrap() else {
            panic!("plain connection from a strict listener");
        };
        send_all(&good, b"after the bad one");
        assert_eq!(recv_exact(&a, 17), b"after the bad one");
        // nothing else is waiting in the stand-in
        s.standin.set_nonblocking(true).unwrap();
        assert!(s.standin.accept().is_err());
        listener::unlisten(s.served);
    });
}

/// A dual listener: an iWARP client becomes a DDP socket, a plain client stays a plain TCP
/// socket with its bytes unread, a silent one is plain after the wait.
#[test]
fn dual_listeners_classify() {
    bounded(60, || {
        let s = serve(Some(Duration::from_millis(100)));
        let mut plain = TcpStream::connect(s.tcp.local_addr().unwrap()).unwrap();
        plain.write_all(b"PING\r\n").unwrap();
        match take(&s).unwrap() {
            Accepted::Plain(fd, Verdict::Bytes(b, n)) => {
                assert_eq!(&b[..n], b"PING\r\n");
                // SAFETY: the taken descriptor is ours.
                let mut t = unsafe { TcpStream::from_raw_fd(fd) };
                let mut got = [0u8; 6];
                t.read_exact(&mut got).unwrap();
                assert_eq!(&got, b"PING\r\n");
                t.write_all(b"PONG").unwrap();
                let mut back = [0u8; 4];
                plain.read_exact(&mut back).unwrap();
                assert_eq!(&back, b"PONG");
            }
            _ => panic!("a plain client was not taken for plain"),
        }
        let ddp = ddp_connect(&s.tcp).unwrap();
        let Accepted::Ddp(a) = take(&s).unwrap() else {
            panic!("an iWARP client was taken for plain");
        };
        send_all(&ddp, b"iwarp");
        assert_eq!(recv_exact(&a, 5), b"iwarp");
        let _silent = TcpStream::connect(s.tcp.local_addr().unwrap()).unwrap();
        match take(&s).unwrap() {
            Accepted::Plain(fd, Verdict::Silent(100)) => {
                // SAFETY: ours.
                drop(unsafe { TcpStream::from_raw_fd(fd) });
            }
            _ => panic!("a silent client was not plain after the wait"),
        }
        listener::unlisten(s.served);
    });
}

/// A connection to the stand-in that is not the acceptor's (no message, or a message
/// without the secret) is refused, never taken for a connection.
#[test]
fn foreign_connections_to_the_standin_are_refused() {
    bounded(60, || {
        let s = serve(None);
        let addr = s.standin.local_addr().unwrap();
        // (an abstract address: connect through the raw name)
        let connect = || -> UnixStream {
            // SAFETY: plain syscalls on our own values.
            unsafe {
                let u = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                let mut sun: libc::sockaddr_un = core::mem::zeroed();
                let mut len = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                libc::getsockname(
                    s.standin.as_raw_fd(),
                    (&mut sun as *mut libc::sockaddr_un).cast(),
                    &mut len,
                );
                assert_eq!(
                    libc::connect(u, (&sun as *const libc::sockaddr_un).cast(), len),
                    0
                );
                UnixStream::from_raw_fd(u)
            }
        };
        let _ = addr;
        let silent = connect();
        let t0 = Instant::now();
        assert_eq!(take(&s).err(), Some(ddp_user::Errno(libc::ECONNABORTED)));
        assert!(
            t0.elapsed() >= Duration::from_millis(900),
            "gave up too early"
        );
        drop(silent);
        let mut forged = connect();
        let mut msg = b"XSA1".to_vec();
        msg.extend_from_slice(&64u32.to_le_bytes());
        msg.resize(64, 0);
        forged.write_all(&msg).unwrap();
        assert_eq!(take(&s).err(), Some(ddp_user::Errno(libc::ECONNABORTED)));
        // the listener still serves real clients
        let good = ddp_connect(&s.tcp).unwrap();
        let Accepted::Ddp(a) = take(&s).unwrap() else {
            panic!("plain");
        };
        send_all(&good, b"ok");
        assert_eq!(recv_exact(&a, 2), b"ok");
        listener::unlisten(s.served);
    });
}

/// After `unlisten` the acceptor has let go of its duplicate of the TCP listener.
#[test]
fn unlisten_lets_go_of_the_listener() {
    bounded(30, || {
        let s = serve(None);
        let dup: RawFd = s.served.dup_fd;
        let ino = |fd: RawFd| {
            // SAFETY: fstat into our own buffer.
            let mut st: libc::stat = unsafe { core::mem::zeroed() };
            (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
        };
        let listener_ino = ino(s.tcp.as_raw_fd());
        assert_eq!(ino(dup), listener_ino);
        listener::unlisten(s.served);
        let deadline = Instant::now() + Duration::from_secs(10);
        // (the acceptor thread closes it when it takes the command: bounded wait; another
        // test may reuse the number meanwhile, so the inode says whether it is still ours)
        loop {
            if ino(dup) != listener_ino {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the acceptor's duplicate is still open"
            );
            std::thread::yield_now();
        }
        let tcp = s.tcp.into_raw_fd();
        // SAFETY: ours.
        unsafe { libc::close(tcp) };
    });
}
