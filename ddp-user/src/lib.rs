//! # ddp-user — the user-level DDP engine
//!
//! Runs `ddp_proto::conn::Connection`s (RDMAP over DDP over MPA, RFC 5040/5041/5044/6581)
//! over real TCP sockets, with a process-wide memory registry, a completion queue per
//! socket and one progress thread. It is what `libexsock.so` routes DDP sockets into, and it
//! is usable on its own through [`DdpSocket`]. It holds no libc interposition and makes
//! every system call raw ([`sys`]), so it never re-enters the preload.
//!
//! ## How it works
//!
//! - **fd model.** A DDP socket owns its TCP connection on a private, high, non-blocking fd
//!   and a `socketpair(AF_UNIX)`: [`DdpSocket::app_fd`] is the end the preload installs under
//!   the application's fd number; the engine keeps the other end. Received stream data
//!   (Sends that found no posted receive) is written into the socketpair, so the kernel
//!   itself reports readiness (poll, select, epoll LT/ET, FIONREAD, raw `read`); EOF is
//!   `shutdown(SHUT_WR)` of the engine's end after the last byte. Bytes the application
//!   writes with raw syscalls arrive at the engine's end and are sent as stream data.
//! - **Inline fast paths.** A thread inside the library does the protocol work itself:
//!   `send` copies, frames and `sendmsg`s at once (keeping any unsent tail of final FPDU
//!   bytes); `recv` takes from the socketpair first, and when it is empty reads the TCP
//!   socket itself, delivering stream data straight into the caller's buffers; `wait_cq`
//!   makes progress inline. Waiting is `poll` on the TCP fd (plus the socketpair or the CQ
//!   eventfd) with the connection's lock released.
//! - **Direct placement.** When the connection's `rx_plan()` is `Direct`, the driver reads
//!   from TCP with one `recvmsg` straight into the destination (registered region for RDMA
//!   Write / Read Response, posted receive buffer for Sends) plus a small tail buffer for
//!   the CRC and the next header, then calls `placed_direct`. `info().placed_direct` counts it.
//! - **Progress thread** (one per process, started with the first socket): epoll with
//!   `EPOLLONESHOT` over every TCP fd and engine socketpair end (+ a wake eventfd). It
//!   serves sockets no application thread is in: one-sided Writes/Reads arriving, Read
//!   Responses owed, unsent tails, non-blocking MPA exchanges, raw writes, EOF propagation,
//!   close linger. See [`driver`]'s `conn` module docs for how it and the inline paths share a
//!   socket (one lock, never held across a wait; `inline` count; re-arm by the last thread
//!   to leave).
//! - **Memory.** [`engine::registry`]: STag = 24-bit index (free list) + random 8-bit key,
//!   PD per socket or shared by id, access rights; deregistration waits until no placement
//!   into the region is in flight (pins held per session). All `unsafe` that touches
//!   application memory is in `driver::mem`.
//! - **Errors.** A protocol error sends the Terminate (the protocol core builds it), every
//!   outstanding work request completes with an error status ([`engine::cq`] maps them to
//!   `DDP_WC_*`, `vendor_err = layer<<16 | etype<<8 | ecode`), the app fd reads EOF, later
//!   calls fail with `EPIPE`, [`DdpSocket::take_error`] reports `ECONNRESET`. Other sockets
//!   and the process carry on.
//!
//! ## Choices and limits (documented deviations)
//!
//! - Stream mode → posted mode: connections start in stream mode (incoming Sends feed the
//!   byte stream) and the first `post_recv` switches them to posted mode
//!   (`Connection::set_recv_mode`): from the next incoming message on, a Send that finds no
//!   posted receive ends the connection with the DDP Terminate "no buffer available".
//! - A clean TCP EOF (between messages, `Connection::is_idle`) on a socket used only as a
//!   byte stream is a half-close (the application may still send); an EOF in the middle of an
//!   FPDU or message, or on a socket with posted receives or reads outstanding, ends the
//!   connection (outstanding work → `FLUSH_ERR`; mid-message: the stream is lost).
//! - `close` returns at once (with `SO_LINGER {1, N}` it waits at most N s, as TCP's): the
//!   progress thread sends what is left, the MPA exchange finished first if it was under
//!   way, and gives up only after 2 s without a byte written (then a reset, not a FIN).
//! - Buffers named by work requests must stay valid until their completion (as with
//!   verbs); the engine only rejects null and wrapping ranges.
//! - After `SHUT_WR` the peer's RDMA Read Requests cannot be answered.

pub mod driver;
pub mod engine;
pub mod sigdefer;
pub mod sync;
pub mod sys;

pub use driver::close::{Unflushed, flush_at_exit, flush_before_exec};
pub use driver::group::{EpollGroup, GroupVisit};
pub use driver::socket::{
    Counters, DdpSocket, Held, MAX_SGE, MORE, PollEnter, PollWait, QUEUE_ANNOUNCED, QUEUE_ARMED_IN,
    QUEUE_ARMED_OUT, QUEUE_HELD, QUEUE_LAZY, QUEUE_OTHERS, QUEUE_RX_DONE, QUEUE_SPILLED, Queues,
    SIGNALED, SOLICITED, WeakDdpSocket, release_lazy_besides,
};
pub use driver::{
    after_fork_in_child, after_fork_in_parent, engine_pid, engine_started, flush_held, lazy_held,
    release_lazy,
};
pub use engine::cq::{ConnInfo, Wc};
pub use engine::options::Options;
pub use sys::Errno;

pub use ddp_proto::ddp::STag;
