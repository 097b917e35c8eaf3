//! The dual-mode listener: one DDP listener serves iWARP clients and plain TCP clients on the
//! same port. The first bytes the client sent decide: the 16-byte MPA Request key
//! (`"MPA ID Req Frame"`, RFC 5044 §7.1) makes the connection a DDP socket (the MPA exchange
//! follows as for any DDP listener); anything else leaves it a plain TCP socket with its bytes
//! unread (they were only peeked at), passed through like any socket that never opted in.
//!
//! The listener's acceptor classifies each connection in the background, before `accept`
//! (`ddp_user::driver::listener`), so no call of the program waits for a client's first bytes
//! (our choices; `docs/rules.md`, DUAL MODE):
//! - A dual listener gets `TCP_DEFER_ACCEPT` (`EXSOCK_DUAL_DEFER_S`, default 1 s, unless the
//!   program set its own): the kernel queues a connection for the acceptor only once its first
//!   data arrived, or after the deferral (a SYN-ACK retransmission later) for clients that
//!   wait for the server to speak first. So a client-speaks-first protocol (MPA, HTTP, redis,
//!   iperf) has its first bytes there at once.
//! - Then the acceptor waits at most `EXSOCK_DUAL_WAIT_MS` (default 200) for first bytes, or
//!   for the rest of a key whose beginning arrived.
//! - No bytes within the bound, or EOF, or an error: plain TCP (a server-speaks-first client
//!   then gets its greeting from the program, as without the library).
//!
//! Where a listener has no acceptor (it could not be started), `accept` classifies as it
//! takes the connection ([`classify`]): a blocking listener waits as above, a non-blocking one
//! takes no bytes yet for plain TCP.
//!
//! Dual mode is on for rule-switched listeners (`EXSOCK_DUAL`, default 1) and off for
//! listeners the program switched with `setsockopt(DDP_MODE)` (`EXSOCK_DUAL_SOCKOPT`, default
//! 0), whose clients are expected to speak MPA.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use libc::c_int;

use crate::log::debug;

pub use ddp_user::driver::listener::{Judgement, MPA_REQUEST_KEY, Verdict, judge};

static FOR_RULES: AtomicBool = AtomicBool::new(true);
static FOR_SOCKOPT: AtomicBool = AtomicBool::new(false);
static WAIT_MS: AtomicU32 = AtomicU32::new(200);
static DEFER_S: AtomicU32 = AtomicU32::new(1);

/// Reads `EXSOCK_DUAL*` (from the constructor).
pub fn setup() {
    if let Some(v) = crate::rules::env_int(c"EXSOCK_DUAL", 0..=1) {
        FOR_RULES.store(v == 1, Ordering::Relaxed);
    }
    if let Some(v) = crate::rules::env_int(c"EXSOCK_DUAL_SOCKOPT", 0..=1) {
        FOR_SOCKOPT.store(v == 1, Ordering::Relaxed);
    }
    if let Some(v) = crate::rules::env_int(c"EXSOCK_DUAL_WAIT_MS", 0..=60_000) {
        WAIT_MS.store(v as u32, Ordering::Relaxed);
    }
    if let Some(v) = crate::rules::env_int(c"EXSOCK_DUAL_DEFER_S", 0..=3600) {
        DEFER_S.store(v as u32, Ordering::Relaxed);
    }
}

/// How long a dual listener waits for a connection's first bytes (`EXSOCK_DUAL_WAIT_MS`).
pub fn wait_ms() -> u32 {
    WAIT_MS.load(Ordering::Relaxed)
}

/// Whether rule-switched listeners are dual (`EXSOCK_DUAL`).
pub fn for_rule_listeners() -> bool {
    FOR_RULES.load(Ordering::Relaxed)
}

/// Whether listeners switched by `setsockopt(DDP_MODE)` are dual (`EXSOCK_DUAL_SOCKOPT`).
pub fn for_sockopt_listeners() -> bool {
    FOR_SOCKOPT.load(Ordering::Relaxed)
}

/// Sets `TCP_DEFER_ACCEPT` on a new dual listener, unless disabled or the program set one.
pub fn prepare_listener(fd: c_int) {
    let secs = DEFER_S.load(Ordering::Relaxed) as c_int;
    if secs == 0 {
        return;
    }
    let mut cur: c_int = 0;
    let mut len = core::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: our own int and length; the real getsockopt.
    let rc = unsafe {
        crate::real::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&mut cur as *mut c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 && cur == 0 {
        // SAFETY: our own int; the real setsockopt.
        unsafe {
            crate::real::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&secs as *const c_int).cast(),
                core::mem::size_of::<c_int>() as libc::socklen_t,
            )
        };
    }
}

fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: our own timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Waits (raw `ppoll`) up to `ms` for `fd` to become readable.
fn wait_readable(fd: c_int, ms: u64) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: one pollfd and a timespec of our own; raw ppoll (no hooks).
    unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            &mut p as *mut libc::pollfd,
            1,
            &ts as *const libc::timespec,
            core::ptr::null::<libc::sigset_t>(),
            0,
        )
    };
}

fn set_rcvlowat(fd: c_int, v: c_int) {
    // SAFETY: our own int; the real setsockopt.
    unsafe {
        crate::real::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const c_int).cast(),
            core::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
}

/// Classifies the new connection `nfd` of a dual listener (see the module docs) by peeking
/// at its first bytes; `nonblocking` is the listener's mode.
pub fn classify(nfd: c_int, nonblocking: bool) -> Verdict {
    let wait = WAIT_MS.load(Ordering::Relaxed);
    let start = now_ms();
    let first_deadline = start + if nonblocking { 0 } else { u64::from(wait) };
    let mut lowat = false;
    let verdict = loop {
        let mut buf = [0u8; 16];
        // SAFETY: our own buffer; raw recvfrom with MSG_PEEK leaves the bytes in the socket.
        let n = unsafe {
            libc::syscall(
                libc::SYS_recvfrom,
                nfd,
                buf.as_mut_ptr(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
                core::ptr::null_mut::<libc::sockaddr>(),
                core::ptr::null_mut::<libc::socklen_t>(),
            )
        };
        let now = now_ms();
        if n > 0 {
            let n = n as usize;
            match judge(&buf[..n]) {
                Judgement::Mpa => break Verdict::Ddp,
                Judgement::NotMpa => break Verdict::Bytes(buf, n),
                Judgement::NeedMore => {
                    if now >= start + u64::from(wait) {
                        break Verdict::Bytes(buf, n);
                    }
                    if !lowat {
                        set_rcvlowat(nfd, MPA_REQUEST_KEY.len() as c_int);
                        lowat = true;
                    }
                    wait_readable(nfd, start + u64::from(wait) - now);
                }
            }
        } else if n == 0 {
            break Verdict::Eof;
        } else {
            match crate::errno::Errno::last().0 {
                libc::EINTR => {}
                libc::EAGAIN => {
                    if now >= first_deadline {
                        break Verdict::Silent(if nonblocking { 0 } else { wait });
                    }
                    wait_readable(nfd, first_deadline - now);
                }
                e => break Verdict::Error(e),
            }
        }
    };
    if lowat {
        set_rcvlowat(nfd, 1);
    }
    verdict
}

/// On `accept` from a dual listener: whether `nfd` goes on to the MPA exchange (`true`) or
/// stays a plain TCP socket (`false`, unmarked). Logs the verdict.
pub fn accept_as_ddp(lfd: c_int, nfd: c_int, listener_nonblocking: bool) -> bool {
    let v = classify(nfd, listener_nonblocking);
    debug!("mode: accept({lfd}) = {nfd}: {v}");
    v == Verdict::Ddp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over real loopback sockets: MPA key, other bytes, silence, EOF.
    #[test]
    fn classifies_real_connections() {
        use std::io::Write;
        use std::net::{TcpListener, TcpStream};
        use std::os::fd::AsRawFd;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let cases: [(&[u8], bool); 3] = [
            (b"MPA ID Req Frame..", true),
            (b"GET / HTTP/1.0", false),
            (b"MPA", false),
        ];
        for (bytes, ddp) in cases {
            let mut c = TcpStream::connect(a).unwrap();
            c.write_all(bytes).unwrap();
            let (s, _) = l.accept().unwrap();
            let v = classify(s.as_raw_fd(), false);
            assert_eq!(v == Verdict::Ddp, ddp, "{v}");
        }
        let c = TcpStream::connect(a).unwrap();
        let (s, _) = l.accept().unwrap();
        WAIT_MS.store(20, Ordering::Relaxed);
        assert_eq!(classify(s.as_raw_fd(), false), Verdict::Silent(20));
        assert_eq!(classify(s.as_raw_fd(), true), Verdict::Silent(0));
        drop(c);
        assert_eq!(classify(s.as_raw_fd(), false), Verdict::Eof);
    }
}
