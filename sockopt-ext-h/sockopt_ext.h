/*
 * sockopt_ext.h — the exsock extended sockets interface.
 *
 * A TCP socket switched to DDP mode speaks standard iWARP (RDMAP over DDP over MPA over TCP,
 * RFC 5040/5041/5044/6581). Plain read/write/send/recv keep working on it (a byte stream
 * carried in RDMAP Sends); the functions below add message-based Sends with posted receives,
 * one-sided RDMA Write and Read into registered memory, and completions.
 *
 * ioctl(fd, SIOCOUTQ, &n) (= TIOCOUTQ) and SIOCOUTQNSD count, as for a TCP socket, the bytes
 * the peer's TCP has not acknowledged / that are not sent yet, the library's own queue
 * included (in wire bytes: FPDU headers and CRCs count). n == 0 means that everything written
 * and posted has been acknowledged; a Send or Write completion only means "handed to TCP".
 *
 * The implementation is libexsock.so, loaded with LD_PRELOAD (scripts/exsock-run) or linked
 * (pkg-config exsock). The functions are declared weak: a program built against this header
 * runs without the library, and ddp_available() tells at run time whether it is there.
 *
 * Every function returns -1 and sets errno on failure. Errors common to all of them:
 *   EBADF       fd is not an open file descriptor
 *   ENOTSOCK    fd is not a socket
 *   EOPNOTSUPP  fd is not a DDP socket (DDP_MODE was never set, or it is not TCP)
 *   ENOTCONN    the DDP socket is not connected (MPA has not completed)
 *   EPIPE       the connection has ended (closed, reset, or a Terminate was sent/received;
 *               DDP_CONN_INFO's term_* fields say which error)
 *   EINVAL      a bad argument (flags, access bits, iovcnt < 0 or > DDP_MAX_SGE, ...)
 *   ENOMEM      out of memory or out of STags
 *   ENOSYS      the library is not loaded (only from the ddp_available() probe)
 */
#ifndef EXSOCK_SOCKOPT_EXT_H
#define EXSOCK_SOCKOPT_EXT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The setsockopt/getsockopt level of every DDP option. Without the library, the kernel
 * refuses this level: ENOPROTOOPT (setsockopt; IPv6 getsockopt) or EOPNOTSUPP (IPv4
 * getsockopt). Use ddp_available() to probe. */
#define SOL_DDP 0x6578 /* 'ex' */

/* ---- socket options (level SOL_DDP) ----------------------------------------------------
 * All but DDP_PEER_PRIVATE_DATA and DDP_CONN_INFO are set before the MPA exchange: on a
 * socket before connect(), on a listener (it answers each client's MPA Request itself, in the
 * background, with the options it has then; accepted sockets inherit them), or on a connected
 * plain socket when switching it with DDP_MODE (both ends must switch at the same point of
 * the stream; the side that called connect() initiates MPA). Setting them later: EISCONN. */
#define DDP_MODE              1  /* int 0/1: switch this socket to DDP mode */
#define DDP_CRC               2  /* int 0/1: ask for MPA CRC-32C (default 1; on if either side asks) */
#define DDP_MARKERS           3  /* int 0/1: ask for MPA markers on what we receive (default 0) */
#define DDP_MPA_REV           4  /* int 1 or 2 (default 2: RFC 6581 IRD/ORD exchange) */
#define DDP_PRIVATE_DATA      5  /* bytes (<= 512) sent in our MPA Request/Reply; get returns them */
#define DDP_PEER_PRIVATE_DATA 6  /* get only: the peer's MPA private data (without IRD/ORD words) */
#define DDP_IRD               7  /* int: inbound RDMA Read queue depth (default 16, max 16383) */
#define DDP_ORD               8  /* int: outbound RDMA Read queue depth (default 16, max 16383) */
#define DDP_P2P               9  /* int: 0 off, else DDP_RTR_* bits offered/accepted (MPA rev 2) */
#define DDP_CONN_INFO         10 /* get only: struct ddp_conn_info */
#define DDP_PD                11 /* int: protection domain id; 0 (default) = one of its own.
                                  * Sockets set to the same non-zero id share STags. */
#define DDP_ZERO_BASED_TO     12 /* int 0/1: tagged offsets are offsets into the region (default
                                  * 0: tagged offsets are virtual addresses, as verbs/rping) */
#define DDP_MPA_TIMEOUT_MS    13 /* int: bound on the MPA exchange (default 10000) */
#define DDP_MARKERS_ALLOW     14 /* int 0/1: honour a peer's request for markers on what we send
                                  * (default 1). 0: a peer asking for them is refused. As
                                  * responder: the MPA Reply rejects it (R=1), the peer's connect
                                  * fails (ECONNREFUSED from exsock), the listener goes on (that
                                  * connection never reaches accept). As initiator:
                                  * a Reply with M=1 fails connect with EPROTO. */

/* DDP_P2P values: ready-to-receive message kinds (RFC 6581). */
#define DDP_RTR_WRITE 0x1 /* zero-length RDMA Write (preferred) */
#define DDP_RTR_READ  0x2 /* zero-length RDMA Read */
#define DDP_RTR_SEND  0x4 /* zero-length Send (siw never accepts it) */

/* getsockopt(fd, SOL_DDP, DDP_CONN_INFO, &info, &len) */
struct ddp_conn_info {
	uint8_t  mpa_rev;      /* negotiated MPA revision (1 or 2) */
	uint8_t  crc;          /* 1 if FPDUs carry CRC-32C */
	uint8_t  markers_tx;   /* 1 if we send markers */
	uint8_t  markers_rx;   /* 1 if the peer sends markers */
	uint8_t  p2p;          /* 1 if peer-to-peer mode */
	uint8_t  rtr;          /* DDP_RTR_* kind used in P2P mode, else 0 */
	uint8_t  initiator;    /* 1 if this side sent the MPA Request */
	uint8_t  state;        /* DDP_STATE_* */
	uint32_t ird;          /* negotiated inbound read depth */
	uint32_t ord;          /* negotiated outbound read depth */
	uint32_t mulpdu;       /* largest ULPDU we send */
	uint32_t pd;           /* protection domain id */
	uint8_t  term_layer;   /* last Terminate sent or received: layer, etype, ecode */
	uint8_t  term_etype;
	uint8_t  term_ecode;
	uint8_t  term_sent;    /* 1 = we sent it, 2 = we received it, 0 = none */
	uint32_t reserved0;    /* explicit: the layout is the same on every ABI */
	uint64_t bytes_tx;     /* payload bytes sent / received */
	uint64_t bytes_rx;
	uint64_t fpdus_tx;
	uint64_t fpdus_rx;
	uint64_t placed_direct; /* bytes read from TCP straight into their destination memory */
	uint64_t reserved[4];
};

#define DDP_STATE_CONNECTING 1 /* MPA exchange under way */
#define DDP_STATE_RTS        2 /* connected: ready to send */
#define DDP_STATE_CLOSING    3
#define DDP_STATE_ERROR      4 /* a Terminate was sent or received, or the stream broke */
#define DDP_STATE_CLOSED     5

/* ---- memory registration ------------------------------------------------------------ */
#define DDP_ACCESS_LOCAL_WRITE  0x1
#define DDP_ACCESS_REMOTE_WRITE 0x2 /* peers may RDMA Write into it */
#define DDP_ACCESS_REMOTE_READ  0x4 /* peers may RDMA Read from it */

/* Registers [addr, addr+len) in fd's protection domain; *stag receives the STag
 * (24-bit index, 8-bit random key). EINVAL: len 0 or bad access bits. */
__attribute__((weak)) int ddp_reg_mr(int fd, void *addr, size_t len, int access, uint32_t *stag);
/* Deregisters: returns only when no placement into the region is in flight.
 * EINVAL: no such STag in fd's protection domain. */
__attribute__((weak)) int ddp_dereg_mr(int fd, uint32_t stag);

/* ---- work requests ------------------------------------------------------------------
 * Semantics follow verbs:
 * - Payload is never copied: a buffer named by a work request must stay valid and unchanged
 *   until that request completes (an unsignaled request: until a later signaled request on the
 *   same socket completes).
 * - Each socket has a send queue and a receive queue of DDP_QUEUE_DEPTH entries each;
 *   unsignaled requests hold their slot until they would have completed. A full queue: EAGAIN.
 * - Completions of one queue arrive in posting order. A request that fails always produces a
 *   completion, signaled or not. When the connection ends, every outstanding request completes
 *   (DDP_WC_FLUSH_ERR or the error) before ddp_poll/ddp_wait report EPIPE.
 * - close() is TCP's: it returns at once, and what was posted before it still goes out in
 *   the background (Sends, Writes, Read Responses owed; Reads still complete), as data
 *   written to a TCP socket is still sent; on a socket closed during its MPA exchange, once
 *   the exchange is done. Only when no byte can be written for 2 s does the library give up:
 *   the rest completes with DDP_WC_FLUSH_ERR and the peer gets a reset. Until then the
 *   buffers of those requests (and of posted receives) may still be used, after close()
 *   returned: take the completions of everything posted before closing, or set SO_LINGER
 *   {1, N}, and close() returns once everything posted has completed and the FIN is sent
 *   (or after N s). SO_LINGER {1, 0} makes close() an abort: every request completes with
 *   DDP_WC_FLUSH_ERR, the peer gets a reset, and no buffer is used after close() returns.
 * - All functions are thread-safe; one socket may be used from several threads.
 * - Until the first ddp_post_recv, incoming Sends feed the socket's byte stream (read/recv):
 *   a peer's first Send may arrive before the receiver posts, so a protocol that needs a
 *   posted receive for it reads that first message from the stream (rping's server does). */
#define DDP_MAX_SGE 16
#define DDP_QUEUE_DEPTH 1024

#define DDP_SIGNALED  0x1 /* generate a completion for this work request */
#define DDP_SOLICITED 0x2 /* Send with Solicited Event */
/* More work requests follow at once (as MSG_MORE): the library may keep this Send, Write or
 * Read queued, off the wire, and put it out together with the following ones (several FPDUs
 * per system call). Queued requests go out with the next post on the socket without
 * DDP_MORE, at the next ddp_poll/ddp_wait on it, or once a batch is full; a request posted
 * with DDP_MORE and followed by none of these may stay queued: end every batch with a post
 * without it, or poll. Post an RDMA Write that a Send announces with it: both then leave in
 * one system call and the peer is woken once, by the Send (a 64 B Write + Send round trip on
 * loopback: 7 us with it, 13-16 us without; docs/performance.md, session 48). */
#define DDP_MORE      0x4

/* Posts a receive buffer for one incoming Send. Once a socket has posted a receive, every
 * incoming Send needs one: a Send with none posted is a DDP error (Terminate: untagged
 * buffer, invalid MSN - no buffer available), the connection ends. A socket that never posts
 * receives gets incoming Sends as its plain byte stream (read/recv). Receives always complete. */
__attribute__((weak)) int ddp_post_recv(int fd, uint64_t wr_id, const struct iovec *iov, int iovcnt);
/* Sends iov as one message. EAGAIN: the send queue is full. */
__attribute__((weak)) int ddp_post_send(int fd, uint64_t wr_id, const struct iovec *iov, int iovcnt,
					int flags);
/* Send with Invalidate: the peer invalidates its STag inv_stag on receipt. */
__attribute__((weak)) int ddp_post_send_inv(int fd, uint64_t wr_id, const struct iovec *iov,
					    int iovcnt, uint32_t inv_stag, int flags);
/* RDMA Write of iov into the peer's region rstag at tagged offset rto. */
__attribute__((weak)) int ddp_post_write(int fd, uint64_t wr_id, const struct iovec *iov,
					 int iovcnt, uint32_t rstag, uint64_t rto, int flags);
/* RDMA Read from the peer's region rstag at rto into iov (total length = read size). At most
 * ORD reads are on the wire; more wait in order. */
__attribute__((weak)) int ddp_post_read(int fd, uint64_t wr_id, const struct iovec *iov,
					int iovcnt, uint32_t rstag, uint64_t rto, int flags);

/* ---- completions -------------------------------------------------------------------- */
struct ddp_wc {
	uint64_t wr_id;
	uint32_t status;   /* DDP_WC_* status */
	uint32_t opcode;   /* DDP_WC_OP_* */
	uint32_t byte_len; /* bytes received (receives) or transferred */
	uint32_t flags;    /* DDP_WC_WITH_INV, DDP_WC_SOLICITED */
	uint32_t inv_stag; /* with DDP_WC_WITH_INV: the STag the peer invalidated here */
	uint32_t vendor_err; /* with an error status: layer<<16 | etype<<8 | ecode of the Terminate */
};

/* status */
#define DDP_WC_SUCCESS        0
#define DDP_WC_FLUSH_ERR      1 /* the connection ended before this request completed */
#define DDP_WC_LOC_LEN_ERR    2 /* incoming message longer than the posted receive */
#define DDP_WC_LOC_PROT_ERR   3 /* a local buffer could not be accessed */
#define DDP_WC_REM_ACCESS_ERR 4 /* the peer refused access (STag, bounds, rights) */
#define DDP_WC_REM_OP_ERR     5 /* the peer reported another error (Terminate received) */
#define DDP_WC_FATAL_ERR      6 /* protocol error detected here (Terminate sent) */

/* opcode */
#define DDP_WC_OP_SEND  1
#define DDP_WC_OP_WRITE 2
#define DDP_WC_OP_READ  3
#define DDP_WC_OP_RECV  4

/* flags */
#define DDP_WC_WITH_INV  0x1
#define DDP_WC_SOLICITED 0x2

/* Takes up to max completions without blocking; returns how many (0 if none). */
__attribute__((weak)) int ddp_poll(int fd, struct ddp_wc *wc, int max);
/* Like ddp_poll, but waits up to timeout_ms (-1: no limit) for at least one completion;
 * returns 0 on timeout (as with poll, the wait may run over by a few milliseconds: up to two
 * ticks of the kernel's coarse clock after a wake-up that brought no completion). EINTR if a
 * signal arrived first. */
__attribute__((weak)) int ddp_wait(int fd, struct ddp_wc *wc, int max, int timeout_ms);
/* A file descriptor that is readable while completions are pending (works with poll, select
 * and epoll; it is owned by the socket: do not close it). The first call makes it: -1 with
 * EMFILE or ENFILE if no descriptor is left. */
__attribute__((weak)) int ddp_event_fd(int fd);

/* ---- presence ----------------------------------------------------------------------- */
/* The library's interface version (DDP_API_VERSION of the library). */
__attribute__((weak)) int ddp_version(void);
#define DDP_API_VERSION 1

/* The library's own view of this interface: every constant, and the size and field offsets of
 * every struct, as "name value" lines (sockopt-ext-h/test/abi.c compares it with the header). */
__attribute__((weak)) const char *ddp_abi_describe(void);

/* 1 if libexsock.so is loaded (preloaded or linked), else 0. Call it before any other ddp_*
 * function: without the library those symbols are null. A second, library-independent probe:
 * setsockopt(fd, SOL_DDP, DDP_MODE, ...) on a TCP socket fails with ENOPROTOOPT when the
 * library is absent. */
static inline int ddp_available(void)
{
	return ddp_version != NULL && ddp_version() >= 1;
}

#ifdef __cplusplus
}
#endif

#endif /* EXSOCK_SOCKOPT_EXT_H */
