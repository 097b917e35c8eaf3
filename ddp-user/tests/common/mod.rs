//! Helpers for the engine tests: connected pairs over 127.0.0.1, a time bound per test,
//! patterns, iovecs, a small RNG.
#![allow(dead_code)]

use std::io::IoSlice;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::mpsc;
use std::time::Duration;

use ddp_user::{DdpSocket, Options, STag, Wc};

/// How much slower than natively the tests run (`EXSOCK_TEST_TIME_SCALE`, default 1; the
/// valgrind run sets 10): every time bound below is multiplied by it.
pub fn time_scale() -> u64 {
    std::env::var("EXSOCK_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

/// A registration that is deregistered when dropped, also while a failed test unwinds: the
/// memory must stay valid while it is registered (the engine may place into it), so it has
/// to be declared *after* the buffer it covers (locals drop in reverse order).
pub struct Registered<'a> {
    sock: &'a DdpSocket,
    /// The STag.
    pub stag: STag,
    done: bool,
}

impl<'a> Registered<'a> {
    /// Takes ownership of `stag`'s registration on `sock`.
    pub fn new(sock: &'a DdpSocket, stag: STag) -> Self {
        Registered {
            sock,
            stag,
            done: false,
        }
    }

    /// Deregisters now, asserting success.
    pub fn dereg(mut self) {
        self.done = true;
        self.sock.dereg_mr(self.stag).unwrap();
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.sock.dereg_mr(self.stag);
        }
    }
}

/// Runs `f` on a thread; if it does not finish within `secs` (times [`time_scale`]), the whole
/// test binary fails (a hung engine must not hang the test run).
pub fn bounded<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let secs = secs * time_scale();
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            eprintln!("test did not finish within {secs} s");
            std::process::exit(101);
        }
    }
}

/// A connected pair: (initiator, responder), blocking MPA on both sides.
pub fn pair(a: &Options, b: &Options) -> (DdpSocket, DdpSocket) {
    pair_bufs(a, b, None)
}

/// `SO_SNDBUF`/`SO_RCVBUF` of `fd` to `bytes` (the kernel doubles it).
pub fn set_bufs(fd: i32, bytes: i32) {
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: plain setsockopt with an int option.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &bytes as *const i32 as *const libc::c_void,
                4,
            )
        };
        assert_eq!(r, 0, "setsockopt");
    }
}

/// [`pair`], with both TCP sockets' buffers set to `bufs` bytes (before connecting: the
/// window follows) when given.
pub fn pair_bufs(a: &Options, b: &Options, bufs: Option<i32>) -> (DdpSocket, DdpSocket) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    if let Some(n) = bufs {
        set_bufs(l.as_raw_fd(), n); // (the accepted socket inherits them)
    }
    let addr = l.local_addr().unwrap();
    let bo = b.clone();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let r = DdpSocket::accept(s.as_raw_fd(), &bo, false);
        drop(s);
        r
    });
    let s = match bufs {
        None => TcpStream::connect(addr).unwrap(),
        Some(n) => {
            // SAFETY: plain socket/connect calls; the fd is owned by the stream made of it.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                assert!(fd >= 0, "socket");
                set_bufs(fd, n);
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: addr.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
                    },
                    sin_zero: [0; 8],
                };
                let r = libc::connect(
                    fd,
                    &sin as *const libc::sockaddr_in as *const libc::sockaddr,
                    core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                assert_eq!(r, 0, "connect");
                TcpStream::from_raw_fd(fd)
            }
        }
    };
    let ini = DdpSocket::connect(s.as_raw_fd(), a, false).expect("connect");
    drop(s);
    let resp = t.join().unwrap().expect("accept");
    (ini, resp)
}

/// A raw TCP connection pair: (engine side listener-accepted fd as std stream, raw peer).
pub fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Gives up ownership of a std stream's fd number, returning it (the caller closes it).
pub fn into_fd(s: TcpStream) -> i32 {
    s.into_raw_fd()
}

/// A deterministic pattern.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut v = vec![0u8; len];
    for c in v.chunks_mut(8) {
        let x = r.next_u64().to_le_bytes();
        c.copy_from_slice(&x[..c.len()]);
    }
    v
}

/// xorshift64*.
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

pub fn iov(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    }
}

/// Blocking stream send of everything.
pub fn send_all(s: &DdpSocket, data: &[u8]) {
    let mut at = 0;
    while at < data.len() {
        at += s.send(&[IoSlice::new(&data[at..])], 0).expect("send");
    }
}

/// Blocking stream receive of exactly `len` bytes.
pub fn recv_exact(s: &DdpSocket, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let n = s
            .recv(&mut [std::io::IoSliceMut::new(&mut v[at..])], 0)
            .expect("recv");
        assert!(n > 0, "unexpected EOF after {at} of {len} bytes");
        at += n;
    }
    v
}

/// Waits for exactly one completion (10 s bound, times [`time_scale`]).
pub fn wait_one(s: &DdpSocket) -> Wc {
    let mut wc = [Wc::default(); 1];
    let secs = 10 * time_scale();
    let n = s
        .wait_cq(&mut wc, Some(Duration::from_secs(secs)))
        .expect("wait_cq");
    assert_eq!(n, 1, "no completion within {secs} s");
    wc[0]
}

/// Options variants used by the matrix tests.
pub fn variant(name: &str) -> (Options, Options) {
    use ddp_user::engine::options::rtr_from_bits;
    let mut a = Options::default();
    match name {
        "default" => {}
        "nocrc_markers" => {
            a.crc = false;
            a.markers = true;
        }
        "crc_markers_rev1" => {
            a.markers = true;
            a.mpa_rev = 1;
        }
        "nocrc_rev1" => {
            a.crc = false;
            a.mpa_rev = 1;
        }
        "p2p_write" => a.p2p = rtr_from_bits(1),
        "p2p_read" => a.p2p = rtr_from_bits(2),
        _ => panic!("unknown variant {name}"),
    }
    let mut b = a.clone();
    // The responder asks for markers too in the marker variants (both directions).
    b.markers = a.markers;
    (a, b)
}

/// Whether `fd` reports `POLLOUT` within `ms` milliseconds.
pub fn poll_out(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLOUT != 0 }
}
