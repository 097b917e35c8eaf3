/*
 * xs-perftest — perftest's ib_send_bw / ib_write_bw / ib_read_bw over rdma_cm (-R), on
 * exsock's extended sockets, so that the real perftest (linux-rdma/perftest 4.5+0.17, Debian
 * bookworm) on siw talks to it in both directions:
 *
 *   xs-perftest -t send|write|read [-s SIZE] [-n ITERS] [-p PORT]            (server)
 *   xs-perftest -t send|write|read [-s SIZE] [-n ITERS] [-p PORT] ADDR       (client)
 *
 * like `ib_send_bw -R -d siw0 -p PORT -s SIZE -n ITERS [ADDR]`. Both sides must be given the
 * same -s and -n (perftest does not exchange them; neither does this program).
 *
 * The protocol, as perftest implements it (src/perftest_communication.c, send_bw.c,
 * write_bw.c, read_bw.c, perftest_resources.c) and as the siw captures show it
 * (/work/shared/interop/siw-vm/captures/{send,write,read}_bw-*.lo.pcap):
 *
 * Two rdma_cm connections to the same port, both MPA rev 2 by default. The first is the
 * parameter-exchange ("comm") connection, IRD/ORD 0/0. Every exchange on it is a pair of
 * RDMAP Sends of the same size (ctx_xchg_data_rdma / ctx_hand_shake): the client sends first
 * and then receives, the server receives first and then sends (rdma_write_data, rdma_read_data;
 * each side has one 56-byte receive posted at a time, so the strict ping-pong is what keeps a
 * receive posted for every Send). In order, MSN per direction:
 *    1  16 B  exchange_versions: char version[16], "6.06" here (must parse >= 5.70)
 *    2   4 B  check_sys_data: cycle_buffer (page size), big-endian int; both take the max
 *    3   4 B  check_sys_data: cache_line_size, big-endian int; both take the max
 *    4   2 B  check_mtu (remote version >= 5.31): sprintf("%d", enum ibv_mtu) -> "3\0" (1024)
 *    5  56 B  create_rdma_cm_connection: ctx_hand_shake before the test connection (all-zero
 *             struct pingpong_dest: set_up_connection has not run yet); the server starts
 *             listening for the test connection after it, the client connects (retrying,
 *             rdma_cm_client_connection: 10 x 100 ms)
 *    -        the test connection: MPA Request/Reply, IRD/ORD 0/0 (send, write) or 128/128
 *             (read: conn_param.responder_resources = initiator_depth = out_reads)
 *    6  56 B  ctx_hand_shake after the test connection (zeros)
 *    7  56 B  ctx_hand_shake per QP: struct pingpong_dest, big-endian fields:
 *             0 lid, 4 out_reads, 8 qpn, 12 psn, 16 rkey, 20 (padding), 24 vaddr (BE64),
 *             32 gid[16], 48 srqn, 52 gid_index.  send_bw on iWARP (ctx.send_rcredit):
 *             rkey/vaddr name the 4-byte credit word (ctx_alloc_credit); write/read: the
 *             second half of the data buffer, buf + BUFF_SIZE (set_up_connection)
 *    8  56 B  ctx_hand_shake "after RTR"
 *    9  56 B  ctx_hand_shake per QP (print remote)
 *   send_bw:  10 56 B hand shake after the server posted its receives (ctx_set_recv_wqes),
 *             then the test, then 11 56 B ctx_close_connection.
 *   write/read_bw: the client runs the test, waits until the test connection's data is
 *             acknowledged (SIOCOUTQ 0: the server closes that connection right after the
 *             next exchange, see await_acked), then 10 56 B hand shake (the server waits in it),
 *             11..15 xchg_bw_reports, 8 B each: size (BE64), iters (BE64, remote version >=
 *             5.33), bw_peak, bw_avg, msgRate_avg (byte-swapped doubles), then 16 56 B
 *             ctx_close_connection.
 *
 * The test connection:
 *   send_bw: the client Sends ITERS messages of SIZE; on iWARP the server RDMA Writes its
 *     receive count (uint32, host order) into the client's credit word every credit_cnt =
 *     rx_depth/3 receives (when (rcnt % rx_depth) % credit_cnt == 0), and the client keeps
 *     scnt + 1 - credit < rx_depth (run_iter_bw/run_iter_bw_server, send_rcredit).
 *     rx_depth = min(ITERS, 512) (force_dependecies); siw's perftest 4.5 posts one more
 *     (prints "RX depth: 6" for -n 5), so the client window here is conservative.
 *   write_bw: the client RDMA Writes ITERS x SIZE into the server's buffer; read_bw: the
 *     client RDMA Reads ITERS x SIZE from it. Addresses advance by INC(SIZE, cache line)
 *     and wrap after cycle_buffer when SIZE <= cycle_buffer/2 (increase_rem_addr), else stay.
 *
 * What is verified (exit 1 otherwise):
 *   - every exchange message has the expected size, the remote version is >= 5.70;
 *   - every work request completes successfully with the right opcode and byte count
 *     (send_bw server: ITERS receives of exactly SIZE bytes);
 *   - send_bw client: the credit word the server wrote equals the count perftest's rule gives
 *     for its last credit Write (the server saw our Sends);
 *   - write/read_bw server: the client's report carries our SIZE and ITERS, and DDP_CONN_INFO
 *     of the test connection counted exactly ITERS x SIZE payload bytes received (write) or
 *     sent (read);
 *   - perftest fills its buffers with rand(), so payload content is checked only when both
 *     ends are xs-perftest (recognised by a tag in the GID field): then every Send, every
 *     written slot and every read slot is compared with a known pattern.
 */
#include "common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PERFTEST_VERSION "6.06" /* what siw's perftest 4.5+0.17 sends */
#define VERSION_LEN 16
#define DEST_LEN 56
#define DEF_CYCLE_BUFFER 4096
#define DEF_CACHE_LINE 64
#define MTU_ENUM_1024 3
#define DEF_RX_SEND 512
#define DEF_TX_BW 128
#define READ_OUTS 128 /* perftest's out_reads on siw (max_qp_rd_atom = 128) */
#define MAX_RECV_POSTED 600
#define MAX_BUF (512ull << 20)
#define XS_GID_TAG "xsperf01" /* in gid[0..7]: the peer is xs-perftest, data is a pattern */

enum test { T_SEND = 1, T_WRITE, T_READ };

struct opts {
	enum test test;
	uint64_t size, iters;
	const char *port, *addr;
	int crc, mpa_rev, markers, p2p; /* -1 = library default */
};

struct dest {
	uint32_t lid, out_reads, qpn, psn, rkey;
	uint64_t vaddr;
	uint8_t gid[16];
	uint32_t srqn, gid_index;
};

struct conn {
	int fd;
	struct xs_cq cq;
};

static const struct opts *O;
static int is_client;

/* ---- helpers ----------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return be64toh(v); }

static void dest_to_wire(const struct dest *d, uint8_t w[DEST_LEN])
{
	memset(w, 0, DEST_LEN);
	put32(w + 0, d->lid);
	put32(w + 4, d->out_reads);
	put32(w + 8, d->qpn);
	put32(w + 12, d->psn);
	put32(w + 16, d->rkey);
	put64(w + 24, d->vaddr);
	memcpy(w + 32, d->gid, 16);
	put32(w + 48, d->srqn);
	put32(w + 52, d->gid_index);
}

static void dest_from_wire(struct dest *d, const uint8_t w[DEST_LEN])
{
	d->lid = get32(w + 0);
	d->out_reads = get32(w + 4);
	d->qpn = get32(w + 8);
	d->psn = get32(w + 12);
	d->rkey = get32(w + 16);
	d->vaddr = get64(w + 24);
	memcpy(d->gid, w + 32, 16);
	d->srqn = get32(w + 48);
	d->gid_index = get32(w + 52);
}

static uint64_t bswap_dbl(double x)
{
	uint64_t u;
	memcpy(&u, &x, 8);
	return htobe64(u);
}

static double unswap_dbl(uint64_t u)
{
	double x;
	u = be64toh(u);
	memcpy(&x, &u, 8);
	return x;
}

static int setopt(int fd, int opt, int v, const char *name)
{
	if (setsockopt(fd, SOL_DDP, opt, &v, sizeof v) == 0)
		return 0;
	if (errno == ENOPROTOOPT)
		xs_msg("setsockopt(SOL_DDP, %s): ENOPROTOOPT: libexsock.so is not loaded or has no DDP "
		       "support", name);
	else
		xs_perr("setsockopt(SOL_DDP, %s, %d)", name, v);
	return -1;
}

/* IRD/ORD as perftest's rdma_cm conn_param: 0/0 (send, write), out_reads (read). Should the
 * library refuse 0, 1 is the nearest it takes (a deviation on the wire only). */
static int set_ird_ord(int fd, int v)
{
	static const int opt[2] = { DDP_IRD, DDP_ORD };
	static const char *name[2] = { "DDP_IRD", "DDP_ORD" };
	for (int i = 0; i < 2; i++) {
		int x = v;
		if (setsockopt(fd, SOL_DDP, opt[i], &x, sizeof x) == 0)
			continue;
		if (v == 0 && errno == EINVAL) {
			static int noted;
			if (!noted++)
				xs_msg("note: the library refuses %s 0 (perftest's value): using 1", name[i]);
			x = 1;
			if (setsockopt(fd, SOL_DDP, opt[i], &x, sizeof x) == 0)
				continue;
		}
		xs_perr("setsockopt(SOL_DDP, %s, %d)", name[i], v);
		return -1;
	}
	return 0;
}

/* DDP options of a socket (before connect/listen). IRD/ORD as perftest's conn_param. */
static int apply_opts(int fd, int ird_ord)
{
	if (setopt(fd, DDP_MODE, 1, "DDP_MODE"))
		return -1;
	if (O->mpa_rev > 0 && setopt(fd, DDP_MPA_REV, O->mpa_rev, "DDP_MPA_REV"))
		return -1;
	if (O->crc >= 0 && setopt(fd, DDP_CRC, O->crc, "DDP_CRC"))
		return -1;
	if (O->markers >= 0 && setopt(fd, DDP_MARKERS, O->markers, "DDP_MARKERS"))
		return -1;
	if (O->p2p >= 0 && setopt(fd, DDP_P2P, O->p2p, "DDP_P2P"))
		return -1;
	if (setopt(fd, DDP_ZERO_BASED_TO, 0, "DDP_ZERO_BASED_TO"))
		return -1;
	return set_ird_ord(fd, ird_ord);
}

static int retryable(int e)
{
	/* hostfwd accepts at once and closes when nothing listens in the guest yet (siw-vm
	 * README, pitfall 6): the MPA exchange then sees the stream end. */
	return e == ECONNREFUSED || e == ECONNRESET || e == EPIPE || e == ENOTCONN ||
	       e == ECONNABORTED || e == ETIMEDOUT || e == EPROTO;
}

/* Client, after the last exchange: let the server close first (EOF on the exchange
 * connection, bounded by 5 s). siw completes the server's last Send with
 * IBV_WC_LOC_QP_OP_ERR ("Bad wc status 2", perftest exits 1) when our FIN reaches it before
 * its send path has finished with that Send, although the Send is complete on the wire
 * (seen in write_bw-to-siw: our FIN 0.1 ms after its last FPDU). */
static void await_peer_close(int fd)
{
	uint64_t dl = xs_deadline(5000);
	char b[64];
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = xs_ms_left(dl);
		if (left == 0 || poll(&p, 1, left) <= 0)
			return;
		ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return; /* EOF or the connection ended: the server is done */
	}
}

/* Client, after the last Write/Read completion and before the "after test" exchange: wait
 * until the peer's TCP has acknowledged everything sent on the test connection (SIOCOUTQ 0;
 * on a DDP socket: the engine's unsent FPDU bytes plus the TCP socket's unacknowledged ones,
 * docs/engine.md). A Write completion only means "handed to TCP" (in siw as here), and
 * perftest's server closes the test connection as soon as that exchange arrives, never
 * checking the Writes: with MiBs still in flight its reset cut the stream mid-FPDU.
 * There is no event for "all acknowledged" on a socket (POLLOUT is about buffer space, not
 * ACKs; SO_TIMESTAMPING's ACK timestamps would belong to the engine's TCP socket, which the
 * application does not hold), so this re-checks after a short poll: the poll is for
 * POLLRDHUP on the test connection, which carries nothing towards us in write/read_bw, so it
 * returns early only if the connection ends; the interval grows from 1 to 16 ms. Bounded by
 * -T. Returns 0 when everything is acknowledged, -1 otherwise (said why). */
static int await_acked(int fd)
{
	uint64_t t0 = xs_now_ns(), dl = xs_deadline(xs_timeout_ms);
	int step = 1, first = -1;
	for (;;) {
		int q = -1;
		if (ioctl(fd, SIOCOUTQ, &q) != 0) {
			xs_perr("ioctl(SIOCOUTQ) on the test connection");
			return -1;
		}
		if (first < 0)
			first = q;
		if (q == 0)
			break;
		int left = xs_ms_left(dl);
		if (left == 0) {
			xs_msg("%d bytes of the test connection still unacknowledged after %d ms", q,
			       xs_timeout_ms);
			return -1;
		}
		struct pollfd p = { .fd = fd, .events = POLLRDHUP };
		int r = poll(&p, 1, step < left ? step : left);
		if (r < 0 && errno != EINTR) {
			xs_perr("poll(test connection)");
			return -1;
		}
		if (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			xs_msg("the test connection ended with %d bytes unacknowledged (revents 0x%x)", q,
			       p.revents);
			return -1;
		}
		if (step < 16)
			step *= 2;
	}
	if (xs_verbose)
		printf("%s: test connection: %d bytes were unacknowledged, all acknowledged after %.1f ms\n",
		       xs_prog, first, (double)(xs_now_ns() - t0) / 1e6);
	return 0;
}

/* Client: TCP connect + MPA as initiator, retried while the server is not there yet
 * (rdma_cm_client_connection retries 10 x 100 ms; here up to the -T bound). */
static int connect_ddp(int ird_ord, const char *what)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	int g = getaddrinfo(O->addr, O->port, &hints, &res);
	if (g)
		xs_fatal("cannot resolve %s:%s: %s", O->addr, O->port, gai_strerror(g));
	uint64_t dl = xs_deadline(xs_timeout_ms);
	int tries = 0;
	for (;;) {
		int fd = socket(res->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			xs_pfatal("socket");
		if (apply_opts(fd, ird_ord))
			exit(XS_EXIT_FAIL);
		int r;
		do
			r = connect(fd, res->ai_addr, res->ai_addrlen);
		while (r != 0 && errno == EINTR);
		tries++;
		if (r == 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			freeaddrinfo(res);
			if (xs_verbose)
				printf("%s: %s connected after %d attempt(s)\n", xs_prog, what, tries);
			xs_connect_settle();
			return fd;
		}
		int e = errno;
		close(fd);
		if (retryable(e) && xs_ms_left(dl) > 100) {
			if (xs_verbose)
				printf("%s: %s: connect: %s, retrying\n", xs_prog, what, xs_errname(e));
			struct timespec ts = { 0, 100 * 1000000 }; /* rdma_cm_client_connection's delay */
			nanosleep(&ts, NULL);
			continue;
		}
		errno = e;
		xs_pfatal("connect %s to %s:%s (%d attempts)", what, O->addr, O->port, tries);
	}
}

/* Server: the listener carries the DDP options (accepted sockets inherit them). */
static int listen_ddp(void)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res;
	int g = getaddrinfo(O->addr, O->port, &hints, &res);
	if (g)
		xs_fatal("cannot resolve %s:%s: %s", O->addr ? O->addr : "*", O->port, gai_strerror(g));
	int fd = socket(res->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		xs_pfatal("socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (apply_opts(fd, 0))
		exit(XS_EXIT_FAIL);
	if (bind(fd, res->ai_addr, res->ai_addrlen) != 0)
		xs_pfatal("bind port %s", O->port);
	freeaddrinfo(res);
	if (listen(fd, 8) != 0)
		xs_pfatal("listen");
	printf("%s: listening on port %s (DDP)\n", xs_prog, O->port);
	fflush(stdout);
	return fd;
}

static int conn_info(int fd, struct ddp_conn_info *ci)
{
	socklen_t len = sizeof *ci;
	memset(ci, 0, sizeof *ci);
	if (getsockopt(fd, SOL_DDP, DDP_CONN_INFO, ci, &len) != 0) {
		xs_perr("getsockopt(DDP_CONN_INFO)");
		return -1;
	}
	return 0;
}

static void print_info(int fd, const char *who)
{
	struct ddp_conn_info ci;
	if (conn_info(fd, &ci) == 0)
		printf("%s: %s: MPA rev %u, CRC %s, markers tx %u rx %u, p2p %u rtr %u, %s, IRD %u ORD %u\n",
		       xs_prog, who, ci.mpa_rev, ci.crc ? "on" : "off", ci.markers_tx, ci.markers_rx,
		       ci.p2p, ci.rtr, ci.initiator ? "initiator" : "responder", ci.ird, ci.ord);
}

/* ---- the exchange connection --------------------------------------------------------------- */

static int n_xchg; /* exchanges done, = the MSN of the last one in each direction */

/* One Send of exactly len bytes (ddp_post_send: one RDMAP message), waited for. */
static int xsend(struct conn *c, const void *buf, size_t len)
{
	static uint8_t out[64]; /* stays untouched until the completion */
	memcpy(out, buf, len);
	if (xs_post_send(&c->cq, 1, out, len, DDP_SIGNALED) != 0) {
		xs_perr("exchange %d: ddp_post_send(%zu bytes)", n_xchg + 1, len);
		return -1;
	}
	struct ddp_wc wc;
	int r = xs_cq_next(&c->cq, &wc, xs_timeout_ms);
	if (r <= 0) {
		if (r == 0)
			xs_msg("exchange %d: no send completion within %d ms", n_xchg + 1, xs_timeout_ms);
		else
			xs_perr("exchange %d: ddp_wait", n_xchg + 1);
		return -1;
	}
	if (wc.status != DDP_WC_SUCCESS || wc.opcode != DDP_WC_OP_SEND) {
		char d[160];
		xs_wc_describe(&wc, d, sizeof d);
		xs_msg("exchange %d: send completion: %s", n_xchg + 1, d);
		return -1;
	}
	return 0;
}

/* The peer's Sends on the exchange connection: no receive is ever posted on it, so they are
 * the socket's byte stream (sockopt_ext.h), and every message has a size known in advance. */
static int xrecv(struct conn *c, void *buf, size_t len)
{
	if (xs_read_full(c->fd, buf, len, xs_timeout_ms) != 0) {
		xs_perr("exchange %d: receiving %zu bytes", n_xchg + 1, len);
		return -1;
	}
	return 0;
}

/* ctx_xchg_data_rdma: the client sends first, the server receives first. */
static int xchg(struct conn *c, const void *mine, void *theirs, size_t len, const char *what)
{
	int r = is_client ? (xsend(c, mine, len) || xrecv(c, theirs, len))
			  : (xrecv(c, theirs, len) || xsend(c, mine, len));
	if (r) {
		xs_msg("exchange %d (%s, %zu bytes) failed", n_xchg + 1, what, len);
		return -1;
	}
	n_xchg++;
	if (xs_verbose > 1)
		printf("%s: exchange %d: %s (%zu bytes)\n", xs_prog, n_xchg, what, len);
	return 0;
}

static int hand_shake(struct conn *c, const struct dest *mine, struct dest *theirs,
		      const char *what)
{
	uint8_t m[DEST_LEN], t[DEST_LEN];
	dest_to_wire(mine, m);
	if (xchg(c, m, t, DEST_LEN, what))
		return -1;
	if (theirs)
		dest_from_wire(theirs, t);
	return 0;
}

/* ---- buffers and layout -------------------------------------------------------------------- */

struct test_ctx {
	struct conn comm, tc;
	uint64_t cycle, cache_line, buff_size, inc;
	uint64_t nslots;
	uint8_t *buf; /* 2 x buff_size: [local | remote target] */
	uint32_t stag;
	uint32_t *ctrl; /* send_bw: ctrl[0] = our count source (unused), ctrl[1] = credit word */
	uint32_t ctrl_stag;
	uint8_t *rbufs; /* send_bw server: one buffer per posted receive */
	uint64_t nrecv;
	struct dest my, rem;
	int peer_xs;
	uint64_t seed;
	double secs;
};

static uint64_t slot_off(const struct test_ctx *t, uint64_t i)
{
	return t->nslots > 1 ? (i % t->nslots) * t->inc : 0;
}

static int check_pattern(const struct test_ctx *t, const void *p, uint64_t off, const char *what,
			 uint64_t idx)
{
	size_t bad;
	if (xs_check(p, O->size, t->seed, off, &bad) == 0)
		return 0;
	char w[96];
	snprintf(w, sizeof w, "%s %llu", what, (unsigned long long)idx);
	xs_report_mismatch(w, p, O->size, t->seed, off, bad);
	return -1;
}

static int wc_ok(const struct ddp_wc *wc, uint32_t op, uint32_t len, const char *what)
{
	if (wc->status == DDP_WC_SUCCESS && wc->opcode == op && (len == UINT32_MAX || wc->byte_len == len))
		return 1;
	char d[160];
	xs_wc_describe(wc, d, sizeof d);
	xs_msg("%s: unexpected completion %s (expected %s of %u bytes)", what, d,
	       xs_wc_opcode_str(op), len);
	return 0;
}

static int next_wc(struct test_ctx *t, struct ddp_wc *wc, int timeout_ms, const char *what)
{
	int r = xs_cq_next(&t->tc.cq, wc, timeout_ms);
	if (r < 0) {
		xs_perr("ddp_wait (%s)", what);
		return -1;
	}
	return r; /* 0 = timeout */
}

/* ---- the tests ----------------------------------------------------------------------------- */

static uint64_t rx_depth(void) { return O->iters < DEF_RX_SEND ? O->iters : DEF_RX_SEND; }
static uint64_t tx_depth(void) { return O->iters < DEF_TX_BW ? O->iters : DEF_TX_BW; }

/* send_bw client: Sends within the tx window and perftest's credit window. */
static int send_client(struct test_ctx *t)
{
	volatile uint32_t *credit = &t->ctrl[1];
	uint64_t scnt = 0, ccnt = 0, rxd = rx_depth(), txd = tx_depth();
	uint64_t last_progress = xs_now_ns();
	while (ccnt < O->iters) {
		while (scnt < O->iters && scnt - ccnt < txd &&
		       (uint32_t)(scnt + 1 - __atomic_load_n(credit, __ATOMIC_ACQUIRE)) < rxd) {
			if (xs_post_send(&t->tc.cq, 100 + scnt, t->buf + slot_off(t, scnt), O->size,
					 DDP_SIGNALED)) {
				xs_perr("ddp_post_send (message %llu)", (unsigned long long)scnt);
				return -1;
			}
			scnt++;
			last_progress = xs_now_ns();
		}
		struct ddp_wc wc;
		/* blocked on credit: the server's credit Write makes no completion here, so look
		 * again every few ms; blocked on completions: wait for one */
		int r = next_wc(t, &wc, 10, "send completions / credit");
		if (r < 0)
			return -1;
		if (r == 1) {
			if (!wc_ok(&wc, DDP_WC_OP_SEND, (uint32_t)O->size, "send_bw"))
				return -1;
			ccnt++;
			last_progress = xs_now_ns();
		} else if (xs_now_ns() - last_progress > (uint64_t)xs_timeout_ms * 1000000ull) {
			xs_msg("send_bw: stuck for %d ms: sent %llu completed %llu credit %u",
			       xs_timeout_ms, (unsigned long long)scnt, (unsigned long long)ccnt, *credit);
			return -1;
		}
	}
	return 0;
}

/* The credit the server's last Write carries: the largest rcnt <= iters with
 * (rcnt % rx_depth) % (rx_depth / 3) == 0, for perftest 4.5's rx_depth (iters + 1 for
 * iters < 512, as siw's perftest prints) or ours. */
static uint32_t expected_credit(uint64_t rxd)
{
	uint64_t cc = rxd / 3;
	if (cc == 0)
		return 0;
	for (uint64_t r = O->iters; r > 0; r--)
		if ((r % rxd) % cc == 0)
			return (uint32_t)r;
	return 0;
}

/* send_bw server: receives posted before hand shake 10; credits by RDMA Write. */
static int post_recv_n(struct test_ctx *t, uint64_t i)
{
	uint64_t b = i % t->nrecv;
	if (t->peer_xs)
		memset(t->rbufs + b * O->size, 0xa5, O->size); /* stale data cannot pass */
	if (xs_post_recv(&t->tc.cq, 1000000 + i, t->rbufs + b * O->size, O->size)) {
		xs_perr("ddp_post_recv (%llu)", (unsigned long long)i);
		return -1;
	}
	return 0;
}

static int send_server_post(struct test_ctx *t)
{
	t->nrecv = O->iters < MAX_RECV_POSTED ? O->iters : MAX_RECV_POSTED;
	if (t->nrecv * O->size > MAX_BUF)
		xs_fatal("-s %llu x %llu receives needs too much memory", (unsigned long long)O->size,
			 (unsigned long long)t->nrecv);
	t->rbufs = xs_alloc(t->nrecv * O->size);
	for (uint64_t i = 0; i < t->nrecv; i++)
		if (post_recv_n(t, i))
			return -1;
	return 0;
}

static int send_server(struct test_ctx *t)
{
	uint64_t rcnt = 0, posted = t->nrecv, rxd = rx_depth(), cc = rxd / 3, nwrites = 0, wdone = 0;
	if (cc == 0)
		cc = 1;
	uint32_t *src = calloc(O->iters + 1, sizeof *src); /* one word per credit Write in flight */
	if (!src)
		xs_fatal("out of memory");
	while (rcnt < O->iters || wdone < nwrites) {
		struct ddp_wc wc;
		int r = next_wc(t, &wc, xs_timeout_ms, "receives");
		if (r <= 0) {
			if (r == 0)
				xs_msg("send_bw server: nothing within %d ms: received %llu of %llu",
				       xs_timeout_ms, (unsigned long long)rcnt, (unsigned long long)O->iters);
			free(src);
			return -1;
		}
		if (wc.opcode == DDP_WC_OP_WRITE) {
			if (!wc_ok(&wc, DDP_WC_OP_WRITE, 4, "credit write")) {
				free(src);
				return -1;
			}
			wdone++;
			continue;
		}
		if (!wc_ok(&wc, DDP_WC_OP_RECV, (uint32_t)O->size, "send_bw receive") ||
		    wc.wr_id != 1000000 + rcnt) {
			if (wc.wr_id != 1000000 + rcnt)
				xs_msg("receive %llu completed out of order (wr_id %llu)",
				       (unsigned long long)rcnt, (unsigned long long)wc.wr_id);
			free(src);
			return -1;
		}
		if (t->peer_xs &&
		    check_pattern(t, t->rbufs + (rcnt % t->nrecv) * O->size, slot_off(t, rcnt), "message", rcnt)) {
			free(src);
			return -1;
		}
		rcnt++;
		if (posted < O->iters) {
			if (post_recv_n(t, posted)) {
				free(src);
				return -1;
			}
			posted++;
		}
		if ((rcnt % rxd) % cc == 0) { /* perftest's credit rule (run_iter_bw_server) */
			src[nwrites] = (uint32_t)rcnt; /* host order, as perftest's ctrl_buf */
			if (xs_post_write(&t->tc.cq, 2000000 + nwrites, &src[nwrites], 4, t->rem.rkey,
					  t->rem.vaddr, DDP_SIGNALED)) {
				xs_perr("credit ddp_post_write");
				free(src);
				return -1;
			}
			nwrites++;
		}
	}
	free(src);
	printf("%s: received %llu messages of %llu bytes%s, %llu credit writes\n", xs_prog,
	       (unsigned long long)rcnt, (unsigned long long)O->size,
	       t->peer_xs ? " (content verified)" : "", (unsigned long long)nwrites);
	return 0;
}

/* write_bw / read_bw client: ITERS one-sided operations, window tx_depth (read: and ORD). */
static int rdma_client(struct test_ctx *t)
{
	int rd = O->test == T_READ;
	uint64_t scnt = 0, ccnt = 0, win = tx_depth();
	if (rd && win > READ_OUTS)
		win = READ_OUTS;
	uint32_t op = rd ? DDP_WC_OP_READ : DDP_WC_OP_WRITE;
	while (ccnt < O->iters) {
		while (scnt < O->iters && scnt - ccnt < win) {
			uint64_t off = slot_off(t, scnt);
			int r = rd ? xs_post_read(&t->tc.cq, scnt, t->buf + off, O->size, t->rem.rkey,
						  t->rem.vaddr + off, DDP_SIGNALED)
				   : xs_post_write(&t->tc.cq, scnt, t->buf + off, O->size, t->rem.rkey,
						   t->rem.vaddr + off, DDP_SIGNALED);
			if (r) {
				xs_perr("ddp_post_%s (%llu)", rd ? "read" : "write", (unsigned long long)scnt);
				return -1;
			}
			scnt++;
		}
		struct ddp_wc wc;
		int r = next_wc(t, &wc, xs_timeout_ms, "completions");
		if (r <= 0) {
			if (r == 0)
				xs_msg("no completion within %d ms (%llu of %llu done)", xs_timeout_ms,
				       (unsigned long long)ccnt, (unsigned long long)O->iters);
			return -1;
		}
		if (!wc_ok(&wc, op, (uint32_t)O->size, rd ? "read_bw" : "write_bw"))
			return -1;
		if (wc.wr_id != ccnt) {
			xs_msg("completion %llu out of order (wr_id %llu)", (unsigned long long)ccnt,
			       (unsigned long long)wc.wr_id);
			return -1;
		}
		if (rd && t->peer_xs &&
		    check_pattern(t, t->buf + slot_off(t, ccnt), slot_off(t, ccnt), "read", ccnt))
			return -1;
		ccnt++;
	}
	return 0;
}

/* ---- reports ----------------------------------------------------------------------------- */

struct report {
	uint64_t size, iters;
	double bw_peak, bw_avg, msg_rate;
};

static void make_report(const struct test_ctx *t, struct report *r)
{
	double s = t->secs > 0 ? t->secs : 1e-9;
	r->size = O->size;
	r->iters = O->iters;
	r->bw_avg = (double)O->size * (double)O->iters / s / 1048576.0; /* perftest: MB = 2^20 */
	r->bw_peak = r->bw_avg;
	r->msg_rate = (double)O->iters / s / 1e6;
}

static void print_report(const struct report *r)
{
	printf("---------------------------------------------------------------------------------------\n");
	printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
	printf(" %-7llu    %-7llu          %-7.2f            %-7.2f\t\t   %-7.6f\n",
	       (unsigned long long)r->size, (unsigned long long)r->iters, r->bw_peak, r->bw_avg,
	       r->msg_rate);
	printf("---------------------------------------------------------------------------------------\n");
}

/* xchg_bw_reports (remote version >= 5.33: iters as 64 bits; report_per_port off). */
static int xchg_reports(struct conn *c, const struct report *mine, struct report *theirs)
{
	uint64_t m[5] = { htobe64(mine->size), htobe64(mine->iters), bswap_dbl(mine->bw_peak),
			  bswap_dbl(mine->bw_avg), bswap_dbl(mine->msg_rate) };
	uint64_t th[5];
	static const char *names[5] = { "report size", "report iters", "report bw_peak",
					"report bw_avg", "report msgRate" };
	for (int i = 0; i < 5; i++)
		if (xchg(c, &m[i], &th[i], 8, names[i]))
			return -1;
	theirs->size = be64toh(th[0]);
	theirs->iters = be64toh(th[1]);
	theirs->bw_peak = unswap_dbl(th[2]);
	theirs->bw_avg = unswap_dbl(th[3]);
	theirs->msg_rate = unswap_dbl(th[4]);
	return 0;
}

/* ---- main flow ---------------------------------------------------------------------------- */

static int run(void)
{
	struct test_ctx T;
	memset(&T, 0, sizeof T);
	struct test_ctx *t = &T;
	int lfd = -1;
	int test_ird = O->test == T_READ ? READ_OUTS : 0;

	/* establish_connection: the comm connection, IRD/ORD 0/0 */
	if (is_client) {
		t->comm.fd = connect_ddp(0, "exchange connection");
	} else {
		lfd = listen_ddp();
		t->comm.fd = xs_accept(lfd, xs_timeout_ms);
	}
	xs_cq_init(&t->comm.cq, t->comm.fd);
	if (xs_verbose)
		print_info(t->comm.fd, "exchange connection");

	/* exchange_versions, check_version_compatibility */
	char myv[VERSION_LEN] = PERFTEST_VERSION, remv[VERSION_LEN + 1] = { 0 };
	if (xchg(&t->comm, myv, remv, VERSION_LEN, "version"))
		return -1;
	double rv = atof(remv);
	if (rv < 5.70) {
		xs_msg("the peer's perftest version '%.16s' is older than 5.70 (not supported)", remv);
		return -1;
	}
	/* check_sys_data */
	uint32_t mine32 = htobe32(DEF_CYCLE_BUFFER), theirs32 = 0;
	if (xchg(&t->comm, &mine32, &theirs32, 4, "cycle_buffer"))
		return -1;
	t->cycle = be32toh(theirs32) > DEF_CYCLE_BUFFER ? be32toh(theirs32) : DEF_CYCLE_BUFFER;
	mine32 = htobe32(DEF_CACHE_LINE);
	if (xchg(&t->comm, &mine32, &theirs32, 4, "cache_line_size"))
		return -1;
	t->cache_line = be32toh(theirs32) > DEF_CACHE_LINE ? be32toh(theirs32) : DEF_CACHE_LINE;
	if (t->cycle == 0 || t->cycle > (64u << 20) || t->cache_line == 0 || t->cache_line > 4096) {
		xs_msg("implausible cycle_buffer %llu / cache line %llu from the peer",
		       (unsigned long long)t->cycle, (unsigned long long)t->cache_line);
		return -1;
	}
	/* check_mtu: "%d" of enum ibv_mtu in 2 bytes */
	char mtu[2] = { '0' + MTU_ENUM_1024, 0 }, rmtu[3] = { 0 };
	if (xchg(&t->comm, mtu, rmtu, 2, "mtu"))
		return -1;

	/* create_rdma_cm_connection */
	struct dest zero;
	memset(&zero, 0, sizeof zero);
	if (hand_shake(&t->comm, &zero, NULL, "sync before the test connection"))
		return -1;
	if (is_client) {
		t->tc.fd = connect_ddp(test_ird, "test connection");
	} else {
		/* accepted sockets inherit the listener's options: IRD/ORD of the test connection */
		if (test_ird && set_ird_ord(lfd, test_ird))
			return -1;
		t->tc.fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
	}
	xs_cq_init(&t->tc.cq, t->tc.fd);
	print_info(t->tc.fd, "test connection");
	if (hand_shake(&t->comm, &zero, NULL, "sync after the test connection"))
		return -1;

	/* buffers (ctx_init / set_up_connection / ctx_alloc_credit) */
	t->inc = (O->size + t->cache_line - 1) / t->cache_line * t->cache_line;
	t->buff_size = O->size < t->cycle ? t->cycle : O->size;
	t->nslots = O->size <= t->cycle / 2 ? t->cycle / t->inc : 1;
	if (2 * t->buff_size > MAX_BUF)
		xs_fatal("-s %llu is too large", (unsigned long long)O->size);
	t->buf = xs_alloc(2 * t->buff_size);
	t->seed = xs_seed(O->size, O->test, 0x7870u);
	if (ddp_reg_mr(t->tc.fd, t->buf, 2 * t->buff_size,
		       DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE | DDP_ACCESS_REMOTE_READ, &t->stag))
		xs_pfatal("ddp_reg_mr(data buffer)");
	/* the pattern where data comes from: the local half of senders and writers, the remote
	 * half of a read server; where data arrives stays zero (so what arrives is checked) */
	if (is_client && O->test != T_READ)
		xs_fill(t->buf, t->buff_size, t->seed, 0);
	if (!is_client && O->test == T_READ)
		xs_fill(t->buf + t->buff_size, t->buff_size, t->seed, 0);
	t->my.lid = 0;
	t->my.out_reads = O->test == T_READ ? READ_OUTS : 1;
	t->my.qpn = (uint32_t)t->tc.fd;
	srand48((long)getpid() * (long)time(NULL));
	t->my.psn = (uint32_t)lrand48() & 0xffffff;
	t->my.rkey = t->stag;
	t->my.vaddr = (uint64_t)(uintptr_t)(t->buf + t->buff_size);
	memcpy(t->my.gid, XS_GID_TAG, 8);
	if (O->test == T_SEND) { /* ctx_alloc_credit: rkey/vaddr of the credit word */
		t->ctrl = xs_alloc(2 * sizeof(uint32_t));
		if (ddp_reg_mr(t->tc.fd, t->ctrl, 2 * sizeof(uint32_t),
			       DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE, &t->ctrl_stag))
			xs_pfatal("ddp_reg_mr(credit)");
		t->my.rkey = t->ctrl_stag;
		t->my.vaddr = (uint64_t)(uintptr_t)&t->ctrl[1];
	}

	if (hand_shake(&t->comm, &t->my, &t->rem, "pingpong_dest"))
		return -1;
	t->peer_xs = memcmp(t->rem.gid, XS_GID_TAG, 8) == 0;
	printf("%s: local  QPN 0x%04x PSN 0x%06x RKey 0x%08x VAddr 0x%016llx OUT %u\n", xs_prog,
	       t->my.qpn, t->my.psn, t->my.rkey, (unsigned long long)t->my.vaddr, t->my.out_reads);
	printf("%s: remote QPN 0x%04x PSN 0x%06x RKey 0x%08x VAddr 0x%016llx OUT %u%s\n", xs_prog,
	       t->rem.qpn, t->rem.psn, t->rem.rkey, (unsigned long long)t->rem.vaddr,
	       t->rem.out_reads, t->peer_xs ? " (peer is xs-perftest: content checked)" : "");
	if (hand_shake(&t->comm, &t->my, NULL, "after RTR"))
		return -1;
	if (hand_shake(&t->comm, &t->my, NULL, "print remote"))
		return -1;

	struct report mine, theirs;
	uint64_t t0;
	if (O->test == T_SEND) {
		if (!is_client && send_server_post(t))
			return -1;
		if (hand_shake(&t->comm, &t->my, NULL, "before the test"))
			return -1;
		t0 = xs_now_ns();
		if (is_client ? send_client(t) : send_server(t))
			return -1;
		t->secs = (double)(xs_now_ns() - t0) / 1e9;
		make_report(t, &mine);
		print_report(&mine);
		if (is_client) {
			/* the server's last credit Write may still be on its way: wait for it (bounded) */
			uint32_t e1 = expected_credit(O->iters < DEF_RX_SEND ? O->iters + 1 : DEF_RX_SEND + 1);
			uint32_t e2 = expected_credit(rx_depth());
			uint64_t dl = xs_deadline(2000);
			uint32_t c;
			while ((c = __atomic_load_n(&t->ctrl[1], __ATOMIC_ACQUIRE)) != e1 && c != e2 &&
			       xs_ms_left(dl) > 0) {
				struct ddp_wc wc;
				if (ddp_wait(t->tc.fd, &wc, 1, 5) > 0) {
					xs_msg("unexpected completion after the test");
					return -1;
				}
			}
			if (c != e1 && c != e2) {
				xs_msg("credit word is %u: expected %u (perftest 4.5 rx_depth) or %u", c, e1, e2);
				return -1;
			}
			printf("%s: sent %llu messages of %llu bytes, server's credit %u (as expected)\n",
			       xs_prog, (unsigned long long)O->iters, (unsigned long long)O->size, c);
		}
		if (hand_shake(&t->comm, &t->my, NULL, "close"))
			return -1;
	} else {
		if (is_client) {
			t0 = xs_now_ns();
			if (rdma_client(t))
				return -1;
			t->secs = (double)(xs_now_ns() - t0) / 1e9;
			make_report(t, &mine);
			print_report(&mine);
			printf("%s: %llu RDMA %ss of %llu bytes completed%s\n", xs_prog,
			       (unsigned long long)O->iters, O->test == T_READ ? "Read" : "Write",
			       (unsigned long long)O->size,
			       t->peer_xs && O->test == T_READ ? " (content verified)" : "");
			if (await_acked(t->tc.fd))
				return -1;
			if (hand_shake(&t->comm, &t->my, NULL, "after the test"))
				return -1;
			if (xchg_reports(&t->comm, &mine, &theirs))
				return -1;
		} else {
			t0 = xs_now_ns();
			if (hand_shake(&t->comm, &t->my, NULL, "after the test")) /* waits for the client */
				return -1;
			t->secs = (double)(xs_now_ns() - t0) / 1e9;
			memset(&mine, 0, sizeof mine);
			if (xchg_reports(&t->comm, &mine, &theirs))
				return -1;
			print_report(&theirs); /* print_full_bw_report(rem_bw_rep), as perftest's server */
			if (theirs.size != O->size || theirs.iters != O->iters) {
				xs_msg("the client reports size %llu iters %llu, this server has -s %llu -n %llu",
				       (unsigned long long)theirs.size, (unsigned long long)theirs.iters,
				       (unsigned long long)O->size, (unsigned long long)O->iters);
				return -1;
			}
			struct ddp_conn_info ci;
			if (conn_info(t->tc.fd, &ci))
				return -1;
			uint64_t want = O->size * O->iters;
			uint64_t got = O->test == T_WRITE ? ci.bytes_rx : ci.bytes_tx;
			if (got != want) {
				xs_msg("test connection counted %llu payload bytes %s, expected %llu",
				       (unsigned long long)got, O->test == T_WRITE ? "received" : "sent",
				       (unsigned long long)want);
				return -1;
			}
			if (O->test == T_WRITE && t->peer_xs) {
				uint64_t n = O->iters < t->nslots ? O->iters : t->nslots;
				for (uint64_t i = 0; i < n; i++)
					if (check_pattern(t, t->buf + t->buff_size + slot_off(t, i), slot_off(t, i),
							  "written slot", i))
						return -1;
			}
			printf("%s: the client's %llu RDMA %ss of %llu bytes: %llu payload bytes %s%s\n",
			       xs_prog, (unsigned long long)O->iters, O->test == T_READ ? "Read" : "Write",
			       (unsigned long long)O->size, (unsigned long long)got,
			       O->test == T_WRITE ? "placed" : "served",
			       t->peer_xs && O->test == T_WRITE ? " (content verified)" : "");
		}
		if (hand_shake(&t->comm, &t->my, NULL, "close"))
			return -1;
	}
	if (is_client)
		await_peer_close(t->comm.fd);
	ddp_dereg_mr(t->tc.fd, t->stag);
	if (t->ctrl)
		ddp_dereg_mr(t->tc.fd, t->ctrl_stag);
	close(t->tc.fd);
	close(t->comm.fd);
	free(t->buf);
	free(t->ctrl);
	free(t->rbufs);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-perftest -t send|write|read [-s SIZE] [-n ITERS] [-p PORT] [-a BINDADDR] [ADDR]\n"
		"  perftest's ib_send_bw / ib_write_bw / ib_read_bw -R (rdma_cm) on exsock: server without\n"
		"  ADDR, client with it. Both sides need the same -s and -n.\n"
		"  -t TEST     send, write or read (also send_bw, ib_send_bw, ...)\n"
		"  -s SIZE     message size (default 65536; K/M suffixes; 1 to 8M)\n"
		"  -n ITERS    iterations (default 1000; send needs >= 3: perftest divides by rx_depth/3)\n"
		"  -p PORT     port of both connections (default 18515)\n"
		"  -a ADDR     server: address to listen on (default any)\n"
		"  -R, -d DEV  accepted for perftest compatibility (no effect)\n"
		"  -T SECONDS  bound of every wait (default 60)\n"
		"  -v          verbose (twice: every exchange)\n"
		"environment: XS_CRC=0|1, XS_MPA_REV=1|2, XS_MARKERS=0|1, XS_P2P=DDP_RTR_* bits\n"
		"exit: 0 the test completed and checked, 1 error, 2 usage, 77 libexsock.so not loaded\n");
}

static int env_int(const char *name, int lo, int hi)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return -1;
	return (int)xs_opt_u64(name, v, (uint64_t)lo, (uint64_t)hi, 0);
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	xs_timeout_ms = 60000;
	static struct opts opt = { .size = 65536, .iters = 1000, .port = "18515" };
	opt.crc = env_int("XS_CRC", 0, 1);
	opt.mpa_rev = env_int("XS_MPA_REV", 1, 2);
	opt.markers = env_int("XS_MARKERS", 0, 1);
	opt.p2p = env_int("XS_P2P", 0, 7);
	O = &opt;
	int op;
	while ((op = getopt(argc, argv, "t:s:n:p:a:Rd:T:vh")) != -1) {
		switch (op) {
		case 't':
			if (strstr(optarg, "send"))
				opt.test = T_SEND;
			else if (strstr(optarg, "write"))
				opt.test = T_WRITE;
			else if (strstr(optarg, "read"))
				opt.test = T_READ;
			else
				xs_usage_error("-t: unknown test '%s'", optarg);
			break;
		case 's': opt.size = xs_opt_u64("-s", optarg, 1, 8u << 20, 1); break;
		case 'n': opt.iters = xs_opt_u64("-n", optarg, 1, 100000000, 0); break;
		case 'p': xs_opt_u64("-p", optarg, 1, 65535, 0); opt.port = optarg; break;
		case 'a': opt.addr = optarg; break;
		case 'R': break;
		case 'd': break;
		case 'T': xs_timeout_ms = (int)xs_opt_u64("-T", optarg, 1, 86400, 0) * 1000; break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	if (!opt.test)
		xs_usage_error("-t send|write|read is required");
	if (optind < argc) {
		opt.addr = argv[optind++];
		is_client = 1;
	}
	if (optind != argc)
		xs_usage_error("unexpected argument '%s'", argv[optind]);
	if (opt.test == T_SEND && opt.iters < 3)
		xs_usage_error("-n %llu: send needs at least 3 iterations (perftest's credit count "
			       "is rx_depth/3)", (unsigned long long)opt.iters);
	xs_require_ddp();
	int r = run();
	if (r == 0)
		printf("%s: %s %s PASSED\n", xs_prog, is_client ? "client" : "server",
		       opt.test == T_SEND ? "send_bw" : opt.test == T_WRITE ? "write_bw" : "read_bw");
	return r == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
