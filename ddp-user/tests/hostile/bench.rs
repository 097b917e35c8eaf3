//! The test bench around one hostile case: the victim (a DDP listener that accepts, or a DDP
//! connector), a healthy connection of the same process that must stay unaffected, guarded
//! memory registered on the victim, and the checks every case ends with.
#![allow(dead_code)]

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;
use std::time::Duration;

use ddp_proto::mpa::startup::MpaConfig;
use ddp_user::engine::cq::status;
use ddp_user::{DdpSocket, Errno, Options, SIGNALED, STag, Wc};

use super::guard::Watched;
use super::peer::{Code, Hostile, vendor};
use crate::common::{iov, pattern};

/// `DDP_ACCESS_REMOTE_WRITE`.
pub const REMOTE_WRITE: u32 = 2;
/// `DDP_ACCESS_REMOTE_READ`.
pub const REMOTE_READ: u32 = 4;

/// Which side of the MPA exchange the victim is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The victim listens and accepts (MPA responder); the hostile peer connects.
    Listener,
    /// The victim connects (MPA initiator); the hostile peer listens.
    Connector,
}

/// The victim's options in these tests: defaults (CRC on, no markers, revision 2, IRD/ORD
/// 16) with a short MPA timeout, so every MPA-phase case ends quickly.
pub fn victim_options() -> Options {
    Options {
        // (scaled like every other time bound: under valgrind a healthy exchange can take
        // longer than 400 ms while other cases load the machine)
        mpa_timeout: Duration::from_millis(400 * crate::common::time_scale()),
        ..Options::default()
    }
}

/// One case's world.
pub struct Bench {
    /// The victim's role.
    pub role: Role,
    /// The victim's options.
    pub opts: Options,
    /// Listener role: the victim's listening socket. Connector role: the hostile peer's.
    listener: TcpListener,
    /// The healthy connection: (remote end, victim-process end).
    pub healthy: (DdpSocket, DdpSocket),
}

fn accept_on(l: &TcpListener, opts: &Options) -> Result<DdpSocket, Errno> {
    let (s, _) = l.accept().unwrap();
    let r = DdpSocket::accept(s.as_raw_fd(), opts, false);
    drop(s);
    r
}

fn connect_to(addr: SocketAddr, opts: &Options) -> Result<DdpSocket, Errno> {
    let s = TcpStream::connect(addr).unwrap();
    let r = DdpSocket::connect(s.as_raw_fd(), opts, false);
    drop(s);
    r
}

impl Bench {
    /// A bench whose victim uses `opts`; the healthy connection is made first (through
    /// the victim's listener in the listener role).
    pub fn new(role: Role, opts: Options) -> Bench {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let healthy_opts = victim_options();
        let healthy = match role {
            Role::Listener => {
                let l = listener.try_clone().unwrap();
                let o = opts.clone();
                let t = std::thread::spawn(move || accept_on(&l, &o));
                let remote = connect_to(addr, &healthy_opts).expect("healthy connect");
                let local = t.join().unwrap().expect("healthy accept");
                (remote, local)
            }
            Role::Connector => {
                let hl = TcpListener::bind("127.0.0.1:0").unwrap();
                let haddr = hl.local_addr().unwrap();
                let o = healthy_opts.clone();
                let t = std::thread::spawn(move || accept_on(&hl, &o));
                let local = connect_to(haddr, &opts).expect("healthy connect");
                let remote = t.join().unwrap().expect("healthy accept");
                (remote, local)
            }
        };
        Bench {
            role,
            opts,
            listener,
            healthy,
        }
    }

    /// A bench with [`victim_options`].
    pub fn default(role: Role) -> Bench {
        Bench::new(role, victim_options())
    }

    /// Starts the victim's side of a new connection with the hostile peer: the victim's
    /// blocking `accept`/`connect` runs on a thread (its result is the join handle's).
    pub fn start(&self) -> (Hostile, JoinHandle<Result<DdpSocket, Errno>>) {
        self.start_with(false)
    }

    /// As [`Bench::start`]; `nonblocking` selects the non-blocking MPA exchange.
    pub fn start_with(&self, nonblocking: bool) -> (Hostile, JoinHandle<Result<DdpSocket, Errno>>) {
        let opts = self.opts.clone();
        match self.role {
            Role::Listener => {
                let l = self.listener.try_clone().unwrap();
                let t = std::thread::spawn(move || {
                    let (s, _) = l.accept().unwrap();
                    let r = DdpSocket::accept(s.as_raw_fd(), &opts, nonblocking);
                    drop(s);
                    r
                });
                let s = TcpStream::connect(self.listener.local_addr().unwrap()).unwrap();
                (Hostile::new(s), t)
            }
            Role::Connector => {
                let addr = self.listener.local_addr().unwrap();
                let t = std::thread::spawn(move || {
                    let s = TcpStream::connect(addr).unwrap();
                    let r = DdpSocket::connect(s.as_raw_fd(), &opts, nonblocking);
                    drop(s);
                    r
                });
                let (s, _) = self.listener.accept().unwrap();
                (Hostile::new(s), t)
            }
        }
    }

    /// A connection in full operation with a hostile peer that played MPA by the rules
    /// (`cfg` is the hostile side's MPA configuration).
    pub fn establish_with(&self, cfg: MpaConfig) -> (Hostile, DdpSocket) {
        let (mut h, t) = self.start();
        match self.role {
            Role::Listener => h.initiate(cfg),
            Role::Connector => h.respond(cfg),
        };
        let v = t
            .join()
            .unwrap()
            .expect("victim completes MPA with the hostile peer");
        (h, v)
    }

    /// [`Bench::establish_with`] with the hostile peer's fair configuration.
    pub fn establish(&self) -> (Hostile, DdpSocket) {
        self.establish_with(super::peer::fair_config())
    }

    /// The end of every case: the healthy connection still transfers correctly, and (listener
    /// role) the same listener accepts a new connection that works.
    pub fn finish(self) {
        healthy_transfer(&self.healthy.0, &self.healthy.1, 1);
        if self.role == Role::Listener {
            let l = self.listener.try_clone().unwrap();
            let o = self.opts.clone();
            let t = std::thread::spawn(move || accept_on(&l, &o));
            let remote = connect_to(self.listener.local_addr().unwrap(), &victim_options())
                .expect("a new connect to the listener");
            let local = t.join().unwrap().expect("the listener keeps accepting");
            healthy_transfer(&remote, &local, 2);
        }
    }
}

/// Waits for exactly `n` completions (10 s bound) and then checks none more is queued.
pub fn wait_wcs(s: &DdpSocket, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let mut wc = [Wc::default(); 16];
    while got.len() < n {
        let k = s
            .wait_cq(&mut wc, Some(Duration::from_secs(10)))
            .expect("wait_cq");
        assert!(k > 0, "only {} of {n} completions within 10 s", got.len());
        got.extend_from_slice(&wc[..k]);
    }
    assert_eq!(got.len(), n, "more completions than expected: {got:?}");
    got
}

/// A correct Write + Read + Send/receive exchange from `a` to `b` into guarded memory.
pub fn healthy_transfer(a: &DdpSocket, b: &DdpSocket, seed: u64) {
    const LEN: usize = 8192;
    let region = Watched::new(LEN, 0x4ea1 + seed, vec![0..LEN]);
    // SAFETY: deregistered below before `region` is dropped.
    let stag = unsafe { b.reg_mr(region.g.ptr(), LEN, REMOTE_WRITE | REMOTE_READ) }.unwrap();
    let data = pattern(LEN, seed * 31 + 7);
    let sink = vec![0u8; LEN];
    let note = Watched::new(64, 0x707e + seed, vec![0..5]);
    // SAFETY: every buffer lives until its completion is taken below.
    unsafe {
        b.post_recv(40, &[note.g.iov(0..64)]).unwrap();
        a.post_write(41, &[iov(&data)], stag, region.g.addr(), SIGNALED)
            .unwrap();
        a.post_read(42, &[iov(&sink)], stag, region.g.addr(), SIGNALED)
            .unwrap();
        a.post_send(43, &[iov(b"hello")], SIGNALED).unwrap();
    }
    let wa = wait_wcs(a, 3);
    for (w, id) in wa.iter().zip([41, 42, 43]) {
        assert_eq!((w.wr_id, w.status), (id, status::SUCCESS), "healthy: {w:?}");
    }
    let wb = wait_wcs(b, 1);
    assert_eq!((wb[0].wr_id, wb[0].status, wb[0].byte_len), (40, 0, 5));
    assert!(sink == data, "healthy: Read returned other bytes");
    b.dereg_mr(stag).unwrap();
    assert!(
        region.g.snapshot() == data,
        "healthy: Write placed other bytes"
    );
    assert_eq!(&note.g.snapshot()[..5], b"hello");
    region.assert_untouched("healthy region");
    note.assert_untouched("healthy receive buffer");
}

/// The victim's registered memory in a case, every buffer guarded. Registered on the
/// victim socket unless said otherwise; deregistered on drop.
pub struct VictimMem {
    victim: DdpSocket,
    other_sock: DdpSocket,
    /// Remote write + read, 8 KiB.
    pub rw: Watched,
    /// Remote read only, 4 KiB.
    pub ro: Watched,
    /// Remote write only, 4 KiB.
    pub wo: Watched,
    /// Remote write + read, registered on *another* connection (the healthy one's victim
    /// end: another protection domain).
    pub other: Watched,
    /// A local buffer for posted receives, 256 bytes (not registered).
    pub recv: Watched,
    /// STags.
    pub rw_stag: STag,
    /// STag of `ro`.
    pub ro_stag: STag,
    /// STag of `wo`.
    pub wo_stag: STag,
    /// STag of `other`.
    pub other_stag: STag,
}

/// Sizes of the [`VictimMem`] buffers.
pub const RW_LEN: usize = 8192;
/// Size of `ro`, `wo`, `other`.
pub const SMALL_LEN: usize = 4096;
/// Size of the receive buffer.
pub const RECV_LEN: usize = 256;

impl VictimMem {
    /// Registers the buffers. `allowed_rw` / `allowed_recv`: what this case's valid (or
    /// documented tentative) placements may write.
    pub fn new(
        victim: &DdpSocket,
        other_sock: &DdpSocket,
        allowed_rw: Vec<std::ops::Range<usize>>,
        allowed_recv: Vec<std::ops::Range<usize>>,
    ) -> VictimMem {
        let rw = Watched::new(RW_LEN, 11, allowed_rw);
        let ro = Watched::new(SMALL_LEN, 12, vec![]);
        let wo = Watched::new(SMALL_LEN, 13, vec![]);
        let other = Watched::new(SMALL_LEN, 14, vec![]);
        let recv = Watched::new(RECV_LEN, 15, allowed_recv);
        // SAFETY: each region is deregistered in `Drop` before its mapping is unmapped.
        let (rw_stag, ro_stag, wo_stag, other_stag) = unsafe {
            (
                victim
                    .reg_mr(rw.g.ptr(), RW_LEN, REMOTE_WRITE | REMOTE_READ)
                    .unwrap(),
                victim.reg_mr(ro.g.ptr(), SMALL_LEN, REMOTE_READ).unwrap(),
                victim.reg_mr(wo.g.ptr(), SMALL_LEN, REMOTE_WRITE).unwrap(),
                other_sock
                    .reg_mr(other.g.ptr(), SMALL_LEN, REMOTE_WRITE | REMOTE_READ)
                    .unwrap(),
            )
        };
        VictimMem {
            victim: victim.clone(),
            other_sock: other_sock.clone(),
            rw,
            ro,
            wo,
            other,
            recv,
            rw_stag,
            ro_stag,
            wo_stag,
            other_stag,
        }
    }

    /// Posts the receive buffer (all of it) as receive `wr_id`.
    pub fn post_recv(&self, wr_id: u64) {
        // SAFETY: `recv` outlives the socket's use of it (its completion is taken before
        // the test ends, and the connection has ended by then).
        unsafe {
            self.victim
                .post_recv(wr_id, &[self.recv.g.iov(0..RECV_LEN)])
        }
        .unwrap();
    }

    /// Every buffer unchanged outside what the case allows.
    pub fn assert_untouched(&self) {
        self.rw.assert_untouched("rw region");
        self.ro.assert_untouched("read-only region");
        self.wo.assert_untouched("write-only region");
        self.other.assert_untouched("other connection's region");
        self.recv.assert_untouched("receive buffer");
    }
}

impl Drop for VictimMem {
    fn drop(&mut self) {
        let _ = self.victim.dereg_mr(self.rw_stag);
        let _ = self.victim.dereg_mr(self.ro_stag);
        let _ = self.victim.dereg_mr(self.wo_stag);
        let _ = self.other_sock.dereg_mr(self.other_stag);
    }
}

/// What the victim must show after its connection ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// The Terminate in `DDP_CONN_INFO`: (term_sent: 1 sent / 2 received, code), or `None`.
    pub term: Option<(u8, Code)>,
    /// `take_error()`.
    pub so_error: i32,
}

/// Checks the victim's connection is over as documented: `DDP_CONN_INFO` state ERROR and
/// its term fields, `take_error`, `EPIPE` for new work, EOF on the byte stream.
pub fn assert_ended(v: &DdpSocket, want: Ended) {
    let i = v.info().unwrap();
    assert_eq!(i.state, 4, "DDP_STATE_ERROR");
    match want.term {
        Some((sent, c)) => assert_eq!(
            (i.term_sent, i.term_layer, i.term_etype, i.term_ecode),
            (sent, c.0, c.1, c.2),
            "DDP_CONN_INFO term fields"
        ),
        None => assert_eq!(i.term_sent, 0, "no Terminate recorded"),
    }
    assert_eq!(v.take_error(), want.so_error, "SO_ERROR");
    let x = [0u8; 4];
    // SAFETY: refused before anything is recorded.
    assert_eq!(
        unsafe { v.post_send(1, &[iov(&x)], SIGNALED) }
            .unwrap_err()
            .0,
        libc::EPIPE
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe { v.post_recv(1, &[iov(&x)]) }.unwrap_err().0,
        libc::EPIPE
    );
    assert_eq!(v.send(&[IoSlice::new(b"x")], 0).unwrap_err().0, libc::EPIPE);
    let mut b = [0u8; 8];
    assert_eq!(v.recv(&mut [IoSliceMut::new(&mut b)], 0).unwrap(), 0, "EOF");
    // sockopt_ext.h: every completion was taken, the connection has ended: EPIPE.
    let mut wc = [Wc::default(); 4];
    assert_eq!(
        v.poll_cq(&mut wc).map_err(|e| e.0),
        Err(libc::EPIPE),
        "ddp_poll after the end"
    );
    assert_eq!(
        v.wait_cq(&mut wc, Some(Duration::from_secs(5)))
            .map_err(|e| e.0),
        Err(libc::EPIPE),
        "ddp_wait after the end"
    );
}

/// Checks one completion: (wr_id, status, vendor_err code).
pub fn assert_wc(w: &Wc, wr_id: u64, st: u32, code: Option<Code>) {
    assert_eq!(
        (w.wr_id, w.status, w.vendor_err),
        (wr_id, st, code.map_or(0, vendor)),
        "completion {w:?}"
    );
}
