/*
 * xs-rping — rping (rdma-core librdmacm/examples/rping.c) over exsock's extended sockets.
 * Same options, same messages on the wire, same output, so that it interoperates with the
 * real rping on siw in both directions.
 *
 * Per iteration (client C, server S), exactly as rping.c:
 *   1. C -> S Send, 16 bytes: struct rping_rdma_info { BE64 buf; BE32 rkey; BE32 size; }
 *      describing C's start_buf (the ping data: "rdma-ping-%d: " + rotating A..z, NUL).
 *   2. S RDMA Reads remote size bytes of it into its rdma_buf.
 *   3. S -> C Send, 16 bytes: "go ahead" (the server's send_buf, never filled: zeros).
 *   4. C -> S Send, 16 bytes: C's rdma_buf (the sink).
 *   5. S RDMA Writes strlen(rdma_buf)+1 bytes there.
 *   6. S -> C Send, 16 bytes: "go ahead" (write done). C compares start_buf and rdma_buf.
 * The client ends with a plain close (rdma_disconnect is a TCP FIN on iWARP). MPA rev 2 with
 * IRD = ORD = 1 (rping's conn_param), tagged offsets = virtual addresses, no P2P, CRC as
 * asked (-K / XS_CRC; the initiator's wish decides, as with siw).
 */
#include "common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* rping.c */
struct rping_rdma_info {
	uint64_t buf;  /* __be64 */
	uint32_t rkey; /* __be32 */
	uint32_t size; /* __be32 */
};
_Static_assert(sizeof(struct rping_rdma_info) == 16, "rping_rdma_info is 16 bytes");
#define RPING_BUFSIZE (64 * 1024)
#define _stringify(_x) #_x
#define stringify(_x) _stringify(_x)
#define RPING_MSG_FMT "rdma-ping-%d: "
#define RPING_MIN_BUFSIZE (sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT))

static int debug;
#define DEBUG_LOG(...)                                                                        \
	do {                                                                                  \
		if (debug)                                                                    \
			printf(__VA_ARGS__);                                                  \
	} while (0)

struct opts {
	int server, verbose, validate, quiet_qp, persistent;
	int count, size, tos;
	int p2p; /* DDP_P2P bits (env XS_P2P), -1 = library default */
	const char *addr, *src, *port;
	struct xs_ddpopt o;
};

/* One connection, like rping's struct rping_cb. */
struct cb {
	const struct opts *opt;
	int fd;
	struct xs_cq cq;
	struct rping_rdma_info recv_buf, send_buf;
	char *rdma_buf, *start_buf;
	uint32_t rdma_stag, start_stag;
	int recv_done, send_done, read_done, write_done;
	uint32_t recv_len;
	int disconnected;
	int flushed;
};

#define WR_RECV 1
#define WR_SEND 2
#define WR_READ 3
#define WR_WRITE 4

static void usage(FILE *f, const char *name)
{
	fprintf(f, "%s -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n", name);
	fprintf(f, "%s -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n", name);
	fprintf(f, "\t-c\t\tclient side\n");
	fprintf(f, "\t-I\t\tSource address to bind to for client.\n");
	fprintf(f, "\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n");
	fprintf(f, "\t-v\t\tdisplay ping data to stdout\n");
	fprintf(f, "\t-V\t\tvalidate ping data (the client always compares; with -V the\n"
		   "\t\t\tserver also checks rping's ping pattern)\n");
	fprintf(f, "\t-d\t\tdebug printfs\n");
	fprintf(f, "\t-S size \tping data size (%zu to %d, default 64)\n", RPING_MIN_BUFSIZE,
		RPING_BUFSIZE - 1);
	fprintf(f, "\t-C count\tping count times (0 = forever, the default)\n");
	fprintf(f, "\t-a addr\t\taddress\n");
	fprintf(f, "\t-p port\t\tport (default 7174)\n");
	fprintf(f, "\t-P\t\tpersistent server mode allowing multiple connections\n");
	fprintf(f, "\t-q\t\taccepted for rping compatibility (self-created QP): no effect\n");
	fprintf(f, "\t-t tos\t\tIP type of service of the connection\n");
	fprintf(f, "exsock options:\n");
	fprintf(f, "\t-K 0|1\t\tDDP_CRC: ask for MPA CRC-32C (default: env XS_CRC, else library default)\n");
	fprintf(f, "\tenvironment: XS_MPA_REV=1|2 (default 2), XS_MARKERS=0|1, XS_P2P=DDP_RTR_* bits,\n\t\t\tXS_MARKERS_ALLOW=0|1 (0: refuse a peer asking for markers)\n");
	fprintf(f, "\t-T seconds\tbound of every wait (default 60)\n");
	fprintf(f, "\t-h\t\tthis help\n");
	fprintf(f, "exit: 0 every ping completed (client: and compared equal), 1 error/mismatch/timeout,\n"
		   "      2 usage, 77 libexsock.so not loaded\n");
}

/* ---- completions ------------------------------------------------------------------------ */

static int is_disconnect_errno(int e)
{
	return e == EPIPE || e == ECONNRESET || e == ENOTCONN;
}

/* One completion. 0: handled; -1: error; -2: the connection ended. */
static int dispatch(struct cb *cb, const char *waiting_for)
{
	struct ddp_wc wc;
	int r = xs_cq_next(&cb->cq, &wc, xs_timeout_ms);
	if (r < 0) {
		if (is_disconnect_errno(errno)) {
			cb->disconnected = 1;
			return -2;
		}
		xs_perr("ddp_wait (waiting for %s)", waiting_for);
		return -1;
	}
	if (r == 0) {
		xs_msg("timeout: nothing within %d ms (waiting for %s)", xs_timeout_ms, waiting_for);
		return -1;
	}
	if (wc.status != DDP_WC_SUCCESS) {
		if (wc.status == DDP_WC_FLUSH_ERR) {
			cb->flushed = 1;
			cb->disconnected = 1;
			return -2;
		}
		char d[160];
		xs_wc_describe(&wc, d, sizeof d);
		fprintf(stderr, "cq completion failed status %d (%s)\n", wc.status, d);
		return -1;
	}
	switch (wc.opcode) {
	case DDP_WC_OP_SEND:
		DEBUG_LOG("send completion\n");
		cb->send_done = 1;
		break;
	case DDP_WC_OP_WRITE:
		DEBUG_LOG("rdma write completion\n");
		cb->write_done = 1;
		break;
	case DDP_WC_OP_READ:
		DEBUG_LOG("rdma read completion\n");
		cb->read_done = 1;
		break;
	case DDP_WC_OP_RECV:
		DEBUG_LOG("recv completion\n");
		cb->recv_done = 1;
		cb->recv_len = wc.byte_len;
		break;
	default:
		DEBUG_LOG("unknown!!!!! completion\n");
		return -1;
	}
	return 0;
}

static int wait_flag(struct cb *cb, int *flag, const char *what)
{
	while (!*flag) {
		int r = dispatch(cb, what);
		if (r)
			return r;
	}
	*flag = 0;
	return 0;
}

static int post_recv(struct cb *cb)
{
	if (xs_post_recv(&cb->cq, WR_RECV, &cb->recv_buf, sizeof cb->recv_buf) != 0) {
		if (is_disconnect_errno(errno)) {
			cb->disconnected = 1;
			return -2;
		}
		fprintf(stderr, "post recv error: %s\n", xs_errname(errno));
		return -1;
	}
	return 0;
}

/* Receive one 16-byte message: wait, check its size like rping's server_recv/client_recv,
 * repost. The result is in cb->recv_buf (copied out by the caller before the next one). */
static int get_msg(struct cb *cb, struct rping_rdma_info *out, const char *what)
{
	int r = wait_flag(cb, &cb->recv_done, what);
	if (r)
		return r;
	if (cb->recv_len != sizeof cb->recv_buf) {
		fprintf(stderr, "Received bogus data, size %u\n", cb->recv_len);
		return -1;
	}
	*out = cb->recv_buf;
	return post_recv(cb);
}

static int send_msg(struct cb *cb)
{
	if (xs_post_send(&cb->cq, WR_SEND, &cb->send_buf, sizeof cb->send_buf, DDP_SIGNALED) != 0) {
		if (is_disconnect_errno(errno)) {
			cb->disconnected = 1;
			return -2;
		}
		fprintf(stderr, "post send error %s\n", xs_errname(errno));
		return -1;
	}
	/* rping reuses send_buf at once; here the buffer is reused only after its completion,
	 * since the interface does not say that ddp_post_send copies it. */
	return wait_flag(cb, &cb->send_done, "a send completion");
}

static void format_send(struct cb *cb, char *buf, uint32_t stag)
{
	cb->send_buf.buf = htobe64((uint64_t)(uintptr_t)buf);
	cb->send_buf.rkey = htonl(stag);
	cb->send_buf.size = htonl((uint32_t)cb->opt->size);
	DEBUG_LOG("RDMA addr %" PRIx64 " rkey %x len %d\n", be64toh(cb->send_buf.buf),
		  ntohl(cb->send_buf.rkey), ntohl(cb->send_buf.size));
}

/* rping's ping data for iteration `ping`: "rdma-ping-%d: " then A..z rotating, starting one
 * letter later every iteration, NUL-terminated at size-1. */
static void ping_data(char *buf, int size, int ping)
{
	int start = 65 + ping % 58;
	int cc = snprintf(buf, (size_t)size, RPING_MSG_FMT, ping);
	unsigned char c = (unsigned char)start;
	for (int i = cc; i < size; i++) {
		buf[i] = (char)c;
		c++;
		if (c > 122)
			c = 65;
	}
	buf[size - 1] = 0;
}

static int reg(struct cb *cb, void *buf, size_t len, uint32_t *stag, const char *name)
{
	if (ddp_reg_mr(cb->fd, buf, len,
		       DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_READ | DDP_ACCESS_REMOTE_WRITE,
		       stag) != 0) {
		fprintf(stderr, "%s reg_mr failed: %s\n", name, xs_errname(errno));
		return -1;
	}
	DEBUG_LOG("registered %s %p len %zu stag %x\n", name, buf, len, *stag);
	return 0;
}

/* ---- server ------------------------------------------------------------------------------ */

/* The first advertisement may race with our first ddp_post_recv: the client sends it as soon
 * as MPA completes, and a DDP socket that has not posted a receive yet gets Sends as its byte
 * stream. So wait for either a receive completion or 16 bytes on the stream. */
static int first_msg(struct cb *cb, struct rping_rdma_info *out)
{
	int efd = ddp_event_fd(cb->fd);
	if (efd < 0) {
		xs_perr("ddp_event_fd");
		return -1;
	}
	uint64_t dl = xs_deadline(xs_timeout_ms);
	for (;;) {
		struct ddp_wc wc;
		int n = ddp_poll(cb->fd, &wc, 1);
		if (n < 0 && is_disconnect_errno(errno)) {
			cb->disconnected = 1;
			return -2;
		}
		if (n < 0) {
			xs_perr("ddp_poll");
			return -1;
		}
		if (n == 1) { /* hand it to the normal path through the stash */
			cb->cq.wc[(cb->cq.head + cb->cq.count++) % XS_CQ_STASH] = wc;
			return get_msg(cb, out, "the client's first advertisement");
		}
		char tmp[16];
		ssize_t r = recv(cb->fd, tmp, sizeof tmp, MSG_DONTWAIT | MSG_PEEK);
		if (r > 0) {
			DEBUG_LOG("first advertisement arrived before the receive was posted: "
				  "taking it from the stream\n");
			if (xs_read_full(cb->fd, out, sizeof *out, xs_timeout_ms) != 0) {
				xs_perr("read(advertisement)");
				return -1;
			}
			return 0;
		}
		if (r == 0) {
			cb->disconnected = 1;
			return -2;
		}
		struct pollfd p[2] = { { .fd = efd, .events = POLLIN }, { .fd = cb->fd, .events = POLLIN } };
		int left = xs_ms_left(dl);
		if (left == 0) {
			xs_msg("timeout: no advertisement from the client within %d ms", xs_timeout_ms);
			return -1;
		}
		if (poll(p, 2, left) < 0 && errno != EINTR) {
			xs_perr("poll");
			return -1;
		}
	}
}

static int check_ping(const char *got, uint32_t len, int ping, int size)
{
	char *exp = malloc((size_t)size);
	if (!exp)
		return -1;
	ping_data(exp, size, ping);
	int bad = len != (uint32_t)size || memcmp(exp, got, (size_t)size) != 0;
	if (bad)
		fprintf(stderr, "server: ping %d data mismatch!\n  got:      %.*s\n  expected: %s\n", ping,
			(int)len, got, exp);
	free(exp);
	return bad ? -1 : 0;
}

static int rping_test_server(struct cb *cb)
{
	const struct opts *opt = cb->opt;
	int r, ping = 0;
	struct rping_rdma_info adv;
	for (;; ping++) {
		/* Wait for client's Start STAG/TO/Len */
		r = ping == 0 ? first_msg(cb, &adv) : get_msg(cb, &adv, "the client's advertisement");
		if (r == -2) {
			/* rping's output at this point (DISCONNECTED = state 10) */
			fprintf(stderr, "server DISCONNECT EVENT...\n");
			fprintf(stderr, "wait for RDMA_READ_ADV state 10\n");
			if (ping == 0) {
				xs_msg("the client disconnected before the first ping");
				return -1;
			}
			return 0; /* between iterations: the client is done */
		}
		if (r)
			return -1;
		uint32_t rkey = ntohl(adv.rkey), len = ntohl(adv.size);
		uint64_t addr = be64toh(adv.buf);
		DEBUG_LOG("Received rkey %x addr %" PRIx64 " len %d from peer\n", rkey, addr, len);
		DEBUG_LOG("server received sink adv\n");
		if (len > (uint32_t)opt->size) {
			xs_msg("the client's ping data is %u bytes, larger than this server's -S %d", len,
			       opt->size);
			return -1;
		}
		/* Issue RDMA Read. */
		if (xs_post_read(&cb->cq, WR_READ, cb->rdma_buf, len, rkey, addr, DDP_SIGNALED) != 0) {
			fprintf(stderr, "post send error %s\n", xs_errname(errno));
			return -1;
		}
		DEBUG_LOG("server posted rdma read req \n");
		if ((r = wait_flag(cb, &cb->read_done, "the RDMA Read's completion"))) {
			xs_msg("wait for RDMA_READ_COMPLETE: %s", r == -2 ? "disconnected" : "failed");
			return -1;
		}
		DEBUG_LOG("server received read complete\n");
		if (opt->verbose)
			printf("server ping data: %.*s\n", (int)len, cb->rdma_buf);
		if (opt->validate && check_ping(cb->rdma_buf, len, ping, opt->size) != 0)
			return -1;
		/* Tell client to continue */
		memset(&cb->send_buf, 0, sizeof cb->send_buf);
		if ((r = send_msg(cb)))
			return -1;
		DEBUG_LOG("server posted go ahead\n");
		/* Wait for client's RDMA STAG/TO/Len */
		if ((r = get_msg(cb, &adv, "the client's sink advertisement"))) {
			xs_msg("wait for RDMA_WRITE_ADV: %s", r == -2 ? "disconnected" : "failed");
			return -1;
		}
		rkey = ntohl(adv.rkey);
		addr = be64toh(adv.buf);
		uint32_t sink_len = ntohl(adv.size);
		DEBUG_LOG("Received rkey %x addr %" PRIx64 " len %d from peer\n", rkey, addr, sink_len);
		DEBUG_LOG("server received sink adv\n");
		/* RDMA Write echo data: strlen(rdma_buf) + 1, as rping (bounded by what was read) */
		uint32_t wlen = (uint32_t)strnlen(cb->rdma_buf, len);
		wlen = wlen < len ? wlen + 1 : len;
		if (wlen > sink_len) {
			xs_msg("the client's sink (%u bytes) is smaller than the data (%u)", sink_len, wlen);
			return -1;
		}
		DEBUG_LOG("rdma write from stag %x laddr %p len %u\n", cb->rdma_stag,
			  (void *)cb->rdma_buf, wlen);
		if (xs_post_write(&cb->cq, WR_WRITE, cb->rdma_buf, wlen, rkey, addr, DDP_SIGNALED) != 0) {
			fprintf(stderr, "post send error %s\n", xs_errname(errno));
			return -1;
		}
		if ((r = wait_flag(cb, &cb->write_done, "the RDMA Write's completion"))) {
			xs_msg("wait for RDMA_WRITE_COMPLETE: %s", r == -2 ? "disconnected" : "failed");
			return -1;
		}
		DEBUG_LOG("server rdma write complete \n");
		/* Tell client to begin again */
		memset(&cb->send_buf, 0, sizeof cb->send_buf);
		if ((r = send_msg(cb))) {
			xs_msg("sending write-done: %s", r == -2 ? "disconnected" : "failed");
			return -1;
		}
		DEBUG_LOG("server posted go ahead\n");
	}
}

static int setup_conn(struct cb *cb)
{
	xs_cq_init(&cb->cq, cb->fd);
	xs_print_conn_info(cb->fd, cb->opt->server ? "server" : "client");
	struct ddp_conn_info ci;
	socklen_t cl = sizeof ci;
	if (getsockopt(cb->fd, SOL_DDP, DDP_CONN_INFO, &ci, &cl) == 0)
		DEBUG_LOG("MPA rev %u CRC %u IRD %u ORD %u\n", ci.mpa_rev, ci.crc, ci.ird, ci.ord);
	size_t size = (size_t)cb->opt->size;
	cb->rdma_buf = xs_alloc(size);
	if (reg(cb, cb->rdma_buf, size, &cb->rdma_stag, "rdma_buf"))
		return -1;
	if (!cb->opt->server) {
		cb->start_buf = xs_alloc(size);
		if (reg(cb, cb->start_buf, size, &cb->start_stag, "start_buf"))
			return -1;
	}
	DEBUG_LOG("allocated & registered buffers...\n");
	return post_recv(cb) ? -1 : 0;
}

static void free_conn(struct cb *cb)
{
	ddp_dereg_mr(cb->fd, cb->rdma_stag);
	if (cb->start_buf)
		ddp_dereg_mr(cb->fd, cb->start_stag);
	close(cb->fd);
	free(cb->rdma_buf);
	free(cb->start_buf);
	free(cb);
}

static void *persistent_server_thread(void *arg)
{
	struct cb *cb = arg;
	if (setup_conn(cb) == 0)
		rping_test_server(cb);
	free_conn(cb);
	return NULL;
}

static int apply_common(int fd, const struct opts *opt)
{
	if (xs_ddp_apply(fd, &opt->o) != 0)
		return -1;
	if (opt->p2p >= 0 && setsockopt(fd, SOL_DDP, DDP_P2P, &opt->p2p, sizeof opt->p2p) != 0) {
		xs_perr("setsockopt(SOL_DDP, DDP_P2P, %d)", opt->p2p);
		return -1;
	}
	int zero = 0;
	if (setsockopt(fd, SOL_DDP, DDP_ZERO_BASED_TO, &zero, sizeof zero) != 0) {
		xs_perr("setsockopt(SOL_DDP, DDP_ZERO_BASED_TO, 0)");
		return -1;
	}
	if (opt->tos >= 0 && setsockopt(fd, IPPROTO_IP, IP_TOS, &opt->tos, sizeof opt->tos) != 0)
		xs_perr("setsockopt(IP_TOS) (continuing)");
	return 0;
}

static int run_server(const struct opts *opt)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res;
	if (!opt->addr)
		hints.ai_family = AF_INET;
	int g = getaddrinfo(opt->addr, opt->port, &hints, &res);
	if (g) {
		printf("getaddrinfo failed (%s) - invalid hostname or IP address\n", gai_strerror(g));
		return -1;
	}
	int lfd = socket(res->ai_family, SOCK_STREAM, 0);
	if (lfd < 0) {
		xs_perr("socket");
		return -1;
	}
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (apply_common(lfd, opt) != 0)
		return -1;
	if (bind(lfd, res->ai_addr, res->ai_addrlen) != 0) {
		xs_perr("rdma_bind_addr (bind)");
		return -1;
	}
	freeaddrinfo(res);
	DEBUG_LOG("rdma_bind_addr successful\n");
	DEBUG_LOG("rdma_listen\n");
	if (listen(lfd, 3) != 0) {
		xs_perr("rdma_listen (listen)");
		return -1;
	}
	if (opt->persistent) {
		for (;;) { /* like rping -P: serves until killed */
			int fd = accept(lfd, NULL, NULL);
			if (fd < 0) {
				if (errno == EINTR || errno == ECONNABORTED)
					continue;
				/* an MPA failure of one connection must not end the server */
				xs_perr("accept (continuing)");
				continue;
			}
			struct cb *cb = calloc(1, sizeof *cb);
			if (!cb) {
				close(fd);
				continue;
			}
			cb->opt = opt;
			cb->fd = fd;
			pthread_t t;
			pthread_attr_t a;
			pthread_attr_init(&a);
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			if (pthread_create(&t, &a, persistent_server_thread, cb) != 0) {
				xs_msg("pthread_create failed");
				free_conn(cb);
			}
			pthread_attr_destroy(&a);
		}
	}
	int fd = xs_accept(lfd, xs_timeout_ms);
	close(lfd);
	DEBUG_LOG("accepting client connection request\n");
	struct cb *cb = calloc(1, sizeof *cb);
	if (!cb)
		return -1;
	cb->opt = opt;
	cb->fd = fd;
	int ret = setup_conn(cb);
	if (ret == 0) {
		ret = rping_test_server(cb);
		if (ret)
			fprintf(stderr, "rping server failed: %d\n", ret);
	}
	free_conn(cb);
	return ret;
}

/* ---- client ------------------------------------------------------------------------------ */

static int rping_test_client(struct cb *cb)
{
	const struct opts *opt = cb->opt;
	int r;
	struct rping_rdma_info m;
	for (int ping = 0; !opt->count || ping < opt->count; ping++) {
		/* Put some ascii text in the buffer. */
		ping_data(cb->start_buf, opt->size, ping);
		memset(cb->rdma_buf, 0, (size_t)opt->size); /* the Write must really arrive */
		format_send(cb, cb->start_buf, cb->start_stag);
		if ((r = send_msg(cb))) {
			xs_msg("sending the start advertisement (ping %d): %s", ping,
			       r == -2 ? "disconnected" : "failed");
			return -1;
		}
		/* Wait for server to ACK */
		if ((r = get_msg(cb, &m, "the server's go-ahead"))) {
			fprintf(stderr, "wait for RDMA_WRITE_ADV state: %s\n",
				r == -2 ? "DISCONNECTED" : "ERROR");
			return -1;
		}
		format_send(cb, cb->rdma_buf, cb->rdma_stag);
		if ((r = send_msg(cb))) {
			xs_msg("sending the sink advertisement (ping %d): %s", ping,
			       r == -2 ? "disconnected" : "failed");
			return -1;
		}
		/* Wait for the server to say the RDMA Write is complete. */
		if ((r = get_msg(cb, &m, "the server's write-done"))) {
			fprintf(stderr, "wait for RDMA_WRITE_COMPLETE state: %s\n",
				r == -2 ? "DISCONNECTED" : "ERROR");
			return -1;
		}
		/* rping compares only with -V; a mismatch is always an error here. */
		if (memcmp(cb->start_buf, cb->rdma_buf, (size_t)opt->size)) {
			fprintf(stderr, "data mismatch!\n");
			return -1;
		}
		if (opt->verbose)
			printf("ping data: %s\n", cb->rdma_buf);
	}
	return 0;
}

static int run_client(const struct opts *opt)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	int g = getaddrinfo(opt->addr, opt->port, &hints, &res);
	if (g) {
		printf("getaddrinfo failed (%s) - invalid hostname or IP address\n", gai_strerror(g));
		return -1;
	}
	int fd = socket(res->ai_family, SOCK_STREAM, 0);
	if (fd < 0) {
		xs_perr("socket");
		return -1;
	}
	if (apply_common(fd, opt) != 0)
		return -1;
	if (opt->src) {
		struct addrinfo sh = { .ai_family = res->ai_family, .ai_socktype = SOCK_STREAM }, *sr;
		g = getaddrinfo(opt->src, NULL, &sh, &sr);
		if (g) {
			printf("getaddrinfo failed (%s) - invalid hostname or IP address\n",
			       gai_strerror(g));
			return -1;
		}
		if (bind(fd, sr->ai_addr, sr->ai_addrlen) != 0) {
			xs_perr("bind -I %s", opt->src);
			return -1;
		}
		freeaddrinfo(sr);
	}
	/* connect: TCP, then the MPA exchange as initiator (bounded by DDP_MPA_TIMEOUT_MS);
	 * SO_SNDTIMEO bounds the TCP part by -T. */
	struct timeval tv = { .tv_sec = xs_timeout_ms / 1000, .tv_usec = 0 };
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
		xs_perr("setsockopt(SO_SNDTIMEO) (continuing)");
	int r;
	do
		r = connect(fd, res->ai_addr, res->ai_addrlen);
	while (r != 0 && errno == EINTR);
	freeaddrinfo(res);
	if (r != 0) {
		fprintf(stderr, "cma event RDMA_CM_EVENT_REJECTED/UNREACHABLE: connect: %s (%s)\n",
			xs_errname(errno), strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	xs_connect_settle(); /* env XS_CONNECT_SETTLE_MS: siw's accept race (common.h) */
	DEBUG_LOG("rdma_connect successful\n");
	struct cb *cb = calloc(1, sizeof *cb);
	if (!cb)
		return -1;
	cb->opt = opt;
	cb->fd = fd;
	int ret = setup_conn(cb);
	if (ret == 0) {
		ret = rping_test_client(cb);
		if (ret)
			fprintf(stderr, "rping client failed: %d\n", ret);
	}
	free_conn(cb); /* rdma_disconnect: a plain close, TCP FIN */
	if (ret == 0)
		fprintf(stderr, "client DISCONNECT EVENT...\n"); /* as rping prints it */
	return ret;
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	xs_timeout_ms = 60000;
	struct opts opt = { .server = -1, .size = 64, .port = "7174", .tos = -1, .p2p = -1 };
	opt.o = (struct xs_ddpopt)XS_DDPOPT_INIT;
	opt.o.ddp = 1;
	opt.o.mpa_rev = 2;
	opt.o.ird = 1;
	opt.o.ord = 1;
	opt.o.crc = xs_env_crc(opt.o.crc);
	/* interop knobs (scripts/interop-siw): MPA revision, markers, peer-to-peer RTR kinds */
	const char *env;
	if ((env = getenv("XS_MPA_REV")) && *env)
		opt.o.mpa_rev = (int)xs_opt_u64("XS_MPA_REV", env, 1, 2, 0);
	if ((env = getenv("XS_MARKERS")) && *env)
		opt.o.markers = (int)xs_opt_u64("XS_MARKERS", env, 0, 1, 0);
	if ((env = getenv("XS_P2P")) && *env)
		opt.p2p = (int)xs_opt_u64("XS_P2P", env, 0, 7, 0);
	int op, ret = 0;
	opterr = 0;
	while ((op = getopt(argc, argv, "a:I:Pp:C:S:t:scvVdqK:T:h")) != -1) {
		switch (op) {
		case 'a': opt.addr = optarg; break;
		case 'I': opt.src = optarg; break;
		case 'P': opt.persistent = 1; break;
		case 'p': xs_opt_u64("-p", optarg, 1, 65535, 0); opt.port = optarg; break;
		case 's': opt.server = 1; DEBUG_LOG("server\n"); break;
		case 'c': opt.server = 0; DEBUG_LOG("client\n"); break;
		case 'S': {
			uint64_t v;
			if (xs_parse_u64(optarg, &v, 0) || v < RPING_MIN_BUFSIZE || v > RPING_BUFSIZE - 1) {
				fprintf(stderr, "Invalid size %s (valid range is %zd to %d)\n", optarg,
					RPING_MIN_BUFSIZE, RPING_BUFSIZE - 1);
				ret = XS_EXIT_USAGE;
			} else {
				opt.size = (int)v;
				DEBUG_LOG("size %d\n", opt.size);
			}
			break;
		}
		case 'C': {
			uint64_t v;
			if (xs_parse_u64(optarg, &v, 0) || v > INT_MAX) {
				fprintf(stderr, "Invalid count %s\n", optarg);
				ret = XS_EXIT_USAGE;
			} else {
				opt.count = (int)v;
				DEBUG_LOG("count %d\n", opt.count);
			}
			break;
		}
		case 't': opt.tos = (int)xs_opt_u64("-t", optarg, 0, 255, 0); break;
		case 'v': opt.verbose++; xs_verbose = opt.verbose > 1; DEBUG_LOG("verbose\n"); break;
		case 'V': opt.validate++; DEBUG_LOG("validate data\n"); break;
		case 'd': debug++; break;
		case 'q': opt.quiet_qp = 1; break;
		case 'K': opt.o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'T': xs_timeout_ms = (int)xs_opt_u64("-T", optarg, 1, 86400, 0) * 1000; break;
		case 'h': usage(stdout, "xs-rping"); return XS_EXIT_OK;
		default:
			usage(stderr, "xs-rping");
			return XS_EXIT_USAGE;
		}
	}
	if (ret)
		return ret;
	if (optind != argc)
		xs_usage_error("unexpected argument '%s'", argv[optind]);
	if (opt.server == -1) {
		usage(stderr, "xs-rping");
		return XS_EXIT_USAGE;
	}
	if (!opt.server && !opt.addr)
		xs_usage_error("the client needs -a ADDR");
	xs_require_ddp();
	ret = opt.server ? run_server(&opt) : run_client(&opt);
	return ret == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
