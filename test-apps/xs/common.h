/*
 * common.h — helpers shared by the xs-* test programs (xs-pingpong, xs-bw, xs-rdma, xs-rping,
 * xs-transact). Plain C11 + POSIX, against sockopt_ext.h only (no link to libexsock.so: its
 * weak symbols resolve when the library is preloaded).
 *
 * Conventions of every xs-* program:
 *   exit 0   every transfer completed and its content was verified
 *   exit 1   an error, an error completion, a timeout or a content mismatch
 *   exit 2   bad usage
 *   exit 77  the program needs libexsock.so (a DDP mode) and it is not loaded
 *            (77 = "skipped" in automake-style test harnesses)
 *
 * Every wait is bounded (-t SECONDS, default 10): poll() before each read/write of a stream,
 * ddp_wait() with a timeout, accept/connect via poll. EINTR is retried with the remaining time.
 */
#ifndef XS_COMMON_H
#define XS_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "sockopt_ext.h"

#define XS_EXIT_OK      0
#define XS_EXIT_FAIL    1
#define XS_EXIT_USAGE   2
#define XS_EXIT_NOLIB   77

extern const char *xs_prog;  /* program name for messages */
extern int xs_verbose;       /* -v count */
extern int xs_timeout_ms;    /* bound of every single wait */

void xs_init(const char *argv0);

/* errno value -> "EPIPE" (or "errno 1234"). */
const char *xs_errname(int e);
/* "prog: <msg>" on stderr. */
void xs_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "prog: <msg>: EPIPE (Broken pipe)" on stderr with the current errno. */
void xs_perr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* xs_msg + exit(XS_EXIT_FAIL). */
_Noreturn void xs_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* xs_perr + exit(XS_EXIT_FAIL). */
_Noreturn void xs_pfatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "prog: <msg>" + "try '<prog> -h'" + exit(XS_EXIT_USAGE). */
_Noreturn void xs_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Exits with XS_EXIT_NOLIB and a clear message unless libexsock.so provides the extension
 * API (ddp_available()). Also checks DDP_API_VERSION. */
void xs_require_ddp(void);

/* ---- argument parsing ---------------------------------------------------------------- */
/* Unsigned integer with an optional binary suffix K, M, G (if suffix_ok). 0 on success. */
int xs_parse_u64(const char *s, uint64_t *out, int suffix_ok);
/* Integer option in [lo, hi] or xs_usage_error. */
uint64_t xs_opt_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, int suffix_ok);
/* Size list: comma-separated items, each SIZE or LO-HI (powers of two from LO up to HI, HI
 * included), with K/M/G suffixes: "1,64,4K", "1-4M", "1-64K,1M". Every size in [lo, hi].
 * Returns the count (<= max) or xs_usage_error. */
int xs_parse_sizes(const char *opt, const char *s, uint32_t *sizes, int max, uint64_t lo,
		   uint64_t hi);
/* "4K", "1M", "100" */
const char *xs_fmt_size(uint64_t n, char buf[32]);

/* ---- time ------------------------------------------------------------------------------ */
uint64_t xs_now_ns(void);
/* Milliseconds left until deadline_ns (>= 0). */
int xs_ms_left(uint64_t deadline_ns);
/* For a wait about to be repeated (EINTR, a full queue): the first call sets *deadline_ns
 * (0 before) timeout_ms from now and returns timeout_ms, later calls the ms left. The first
 * wait reads no clock (clock_gettime is 16 ns here, several waits per round trip), so the
 * bound counts from the first repeat. */
int xs_retry_ms(uint64_t *deadline_ns, int timeout_ms);
uint64_t xs_deadline(int timeout_ms);

/* ---- content patterns ------------------------------------------------------------------
 * Byte at absolute position p of pattern `seed` is a function of (seed, p) only, so any
 * window [off, off+len) of a pattern can be produced and checked independently. */
uint64_t xs_seed(uint64_t a, uint64_t b, uint64_t c);
void xs_fill(void *buf, size_t len, uint64_t seed, uint64_t off);
/* 0 if equal; else 1 and *bad = first differing index (relative to buf). */
int xs_check(const void *buf, size_t len, uint64_t seed, uint64_t off, size_t *bad);
/* Checks the first and last 64 bytes and `samples` 8-byte words spread over the buffer.
 * Returns like xs_check; *checked receives the number of bytes compared. */
int xs_check_sampled(const void *buf, size_t len, uint64_t seed, uint64_t off, int samples,
		     size_t *bad, size_t *checked);
/* Prints "expected xx got yy at offset N" context for a mismatch. */
void xs_report_mismatch(const char *what, const void *buf, size_t len, uint64_t seed,
			uint64_t off, size_t bad);

/* ---- latency samples ------------------------------------------------------------------
 * The table of xs-pingpong and xs-rdmalat: a header naming the mode and what a sample is,
 * then per size "size iters median_us p99_us min_us mean_us" (the samples in ns, sorted in
 * place). */
void xs_print_lat_header(const char *mode, const char *what);
void xs_print_lat_row(uint32_t size, uint64_t *ns, uint64_t n);

/* ---- command line ------------------------------------------------------------------------
 * After getopt: no operands left (argv[optind..]), a client has an address, and port "0" (any
 * free port) is only for a server. Otherwise xs_usage_error. */
void xs_check_args(int argc, char **argv, int is_server, const char *addr, const char *port);

/* ---- a region advertised on the byte stream (ddp-readbw, xs-rdmalat) --------------------
 * rping's struct rping_rdma_info on the wire: BE64 address, BE32 STag, BE32 length. Sent with
 * write() before either side posts a receive (it travels as stream bytes). */
struct xs_region {
	uint64_t addr;
	uint32_t stag, len;
};
int xs_send_region(int fd, const void *addr, uint32_t stag, size_t len); /* 0 / -1 + message */
/* Reads the peer's advertisement; -1 (message printed) if it names fewer than `need` bytes. */
int xs_recv_region(int fd, struct xs_region *r, size_t need);
/* The end of a run of RDMA Reads from a region filled with pattern `seed` (xs_fill at offset
 * 0): the server waits (at most bound_ms) for the client's "done", deregisters the region,
 * checks that it is unchanged (read-only to the peer) and answers "done"; the client says done
 * and waits for the answer. 0, or -1 with a message. */
int xs_serve_reads_until_done(int fd, const uint8_t *region, size_t len, uint32_t stag,
			      uint64_t seed, int bound_ms);
int xs_reads_done(int fd);

/* ---- sockets ---------------------------------------------------------------------------- */
struct xs_ddpopt {
	int ddp;      /* set DDP_MODE */
	int crc;      /* -1: library default, else DDP_CRC value */
	int mpa_rev;  /* 0: default, else DDP_MPA_REV */
	int ird, ord; /* 0: default */
	int markers;  /* -1: default */
};
#define XS_DDPOPT_INIT { 0, -1, 0, 0, 0, -1 }

/* The environment's XS_CRC (0 or 1; a usage error otherwise), or `dflt` if it is unset or
 * empty: the default of every program's -K. */
int xs_env_crc(int dflt);

/* Applies the options to a socket (before connect/listen), and the environment's XS_MPA_REV,
 * XS_MARKERS, XS_P2P (DDP_RTR_* bits), XS_MARKERS_ALLOW if set. Returns 0 or -1 (message printed;
 * ENOPROTOOPT is explained as "library not loaded"). */
int xs_ddp_apply(int fd, const struct xs_ddpopt *o);
/* Listens on addr (NULL/"" = any) : port ("0" = ephemeral). Prints a line
 * "<prog>: listening on ADDR:PORT" on stdout (flushed) once listening: scripts wait for it.
 * *port_out receives the port. Exits on error. */
int xs_listen(const char *addr, const char *port, const struct xs_ddpopt *o, int *port_out);
/* accept() bounded by timeout_ms. Returns the fd or exits. Sets TCP_NODELAY. */
int xs_accept(int lfd, int timeout_ms);
/* Connects to addr:port; retries ECONNREFUSED (the server not listening yet) until
 * timeout_ms has passed, every 20 ms (bounded polling of a real condition). TCP_NODELAY.
 * DDP options are applied to each new socket before connect(). Exits on error. */
int xs_connect(const char *addr, const char *port, const struct xs_ddpopt *o, int timeout_ms);
/* After a DDP connect (the MPA exchange done), before the first message: sleeps
 * XS_CONNECT_SETTLE_MS milliseconds if that is set (0..10000). A workaround for a race in
 * Linux siw as MPA responder (docs/interop-siw.md): siw_accept() sends the MPA Reply and only
 * then moves the socket's data_ready callback to the QP, so an FPDU that arrives in between
 * sits unprocessed until more data comes. scripts/interop-siw sets it against siw servers. */
void xs_connect_settle(void);
/* Prints the negotiated DDP_CONN_INFO (with -v) and returns 0, or -1 if it cannot be read. */
int xs_print_conn_info(int fd, const char *who);

/* read/write exactly n bytes, each step bounded by timeout_ms (poll). 0 on success, -1 with
 * errno (ETIMEDOUT on timeout, ECONNRESET... on error, EPIPE with "eof" on a clean EOF). */
int xs_read_full(int fd, void *buf, size_t n, int timeout_ms);
int xs_write_full(int fd, const void *buf, size_t n, int timeout_ms);

/* ---- completions -------------------------------------------------------------------------
 * A small completion stash per DDP socket: posting functions that meet EAGAIN (send queue
 * full) pull completions into it while they wait, and xs_cq_next returns stashed ones first,
 * so no completion is ever lost. */
#define XS_CQ_STASH 4096
struct xs_cq {
	int fd;
	int head, count;
	struct ddp_wc wc[XS_CQ_STASH];
};
void xs_cq_init(struct xs_cq *cq, int fd);
/* Next completion (stash first, then ddp_wait bounded by timeout_ms). 1: got one; 0: timeout;
 * -1: error (errno). */
int xs_cq_next(struct xs_cq *cq, struct ddp_wc *wc, int timeout_ms);
const char *xs_wc_status_str(uint32_t status);
const char *xs_wc_opcode_str(uint32_t op);
/* "RECV wr_id 5 status REM_ACCESS_ERR vendor_err 0x020102 len 0" */
void xs_wc_describe(const struct ddp_wc *wc, char *buf, size_t len);
/* xs_msg("<what>: <the completion described>"). For error paths only: describing a completion
 * is a snprintf, thousands of instructions, too slow for every completion of a benchmark. */
void xs_wc_complain(const char *what, const struct ddp_wc *wc);

/* ddp_post_* with EAGAIN handling (pull completions into the stash, bounded by timeout_ms).
 * 0 or -1 with errno (ETIMEDOUT if the queue stayed full). */
int xs_post_send(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len, int flags);
int xs_post_recv(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len);
int xs_post_write(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len, uint32_t rstag,
		  uint64_t rto, int flags);
int xs_post_read(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len, uint32_t rstag,
		 uint64_t rto, int flags);

/* Allocates len bytes aligned to 4096 (zeroed). Exits on failure. */
void *xs_alloc(size_t len);

/* ---- the opening exchange of xs-pingpong/xs-bw/xs-rdma/xs-transact ----------------------
 * The client sends its test plan as plain stream bytes (write) right after connecting; the
 * server reads it from the stream before posting any receive (a DDP socket that has posted
 * no receive gets incoming Sends as its byte stream). A client in `ext` mode posts its
 * receives before it writes the plan, so the server may answer with ddp_post_send. */
#define XS_PLAN_MAGIC 0x78735031u /* "xsP1" */
#define XS_MAX_SIZES 64
enum xs_mode { XS_TCP = 1, XS_DDP = 2, XS_EXT = 3, XS_WRITE = 4, XS_READ = 5 };
struct xs_plan {
	uint32_t magic;
	uint32_t prog;       /* which program: 'P' pingpong, 'B' bw, 'R' rdma, 'T' transact,
			      * 'L' rdmalat */
	uint32_t mode;       /* enum xs_mode */
	uint32_t nsizes;
	uint32_t iters;      /* iterations / windows / count / transactions */
	uint32_t warmup;
	uint32_t window;
	uint32_t flags;      /* program-specific (e.g. XS_PLAN_VERIFY_ALL) */
	uint32_t conn_index; /* xs-transact: index of this connection */
	uint32_t nconns;
	uint64_t seed;
	uint64_t duration_ns;
	uint32_t max_ops;
	uint32_t pad;
	uint32_t sizes[XS_MAX_SIZES];
};
#define XS_PLAN_VERIFY_ALL 0x1
const char *xs_mode_name(uint32_t m);
/* Parses "tcp|ddp|ext|write" (write only if allow_write). */
enum xs_mode xs_parse_mode(const char *s, int allow_write);
int xs_send_plan(int fd, const struct xs_plan *p);             /* 0 / -1 (message printed) */
int xs_recv_plan(int fd, struct xs_plan *p, uint32_t prog);    /* 0 / -1 (message printed) */

#endif
