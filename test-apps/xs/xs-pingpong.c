/*
 * xs-pingpong — round-trip latency over plain TCP, a DDP socket with read/write, or a DDP
 * socket with the extension API (ddp_post_send/ddp_post_recv + ddp_wait).
 *
 * The client sends a message of SIZE bytes, the server verifies it and echoes it, the client
 * verifies the echo; one round trip per iteration. The content of each message is a pattern
 * seeded by (size, iteration number), checked in full on both sides. The client prints a
 * table: size, iterations, median, p99, min and mean round-trip time in microseconds.
 * With -E the server (tcp/ddp plain calls) waits for each ping in epoll_wait (level-triggered
 * EPOLLIN on the one connection) instead of poll, so the epoll path's latency is measured.
 */

#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define PROG_ID 'P'
#define MAX_SIZE (16u << 20)
#define READY_MAGIC 0x52454459u /* "REDY" */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-pingpong -s [-a ADDR] [-p PORT] [-m tcp|ddp] [options]\n"
		"       xs-pingpong -c ADDR [-p PORT] [-m tcp|ddp|ext] [-S SIZES] [-n ITERS] [-w WARMUP] [options]\n"
		"  -s          server (serves one client, then exits)\n"
		"  -c ADDR     client, connect to ADDR\n"
		"  -a ADDR     server: address to listen on (default: any)\n"
		"  -p PORT     TCP port (default 18515; server: 0 = any free port, printed)\n"
		"  -m MODE     tcp: plain TCP; ddp: DDP socket, plain read/write;\n"
		"              ext: DDP socket, ddp_post_send/ddp_post_recv + ddp_wait (default tcp).\n"
		"              The server takes tcp or ddp (a ddp server serves ddp and ext clients).\n"
		"  -S SIZES    message sizes, 0 B to 16 MiB: list and/or power-of-two ranges,\n"
		"              e.g. 1,64,4K or 1-4M or 1-64K,1M (default 1-64K)\n"
		"  -n ITERS    timed iterations per size (default 1000)\n"
		"  -w WARMUP   untimed iterations per size before (default 100)\n"
		"  -t SECONDS  bound of every single wait (default 10)\n"
		"  -K 0|1      DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -E          server: wait for each ping in epoll_wait instead of poll (plain\n"
		"              read/write clients, i.e. -m tcp or ddp; an ext client ignores it)\n"
		"  -v          verbose (connection info)\n"
		"  -h          this help\n"
		"exit: 0 all echoes verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n");
}

struct conn {
	int fd;
	enum xs_mode mode;
	struct xs_cq *cq;
	uint8_t *sbuf;     /* client: send buffer */
	uint8_t *rbuf[2];  /* receive buffers (ext: both posted; tcp/ddp: rbuf[0]) */
	uint32_t max_size;
	int pend_which;    /* ext: a receive completion that arrived while waiting for a send */
	uint32_t pend_len;
	int epfd;          /* server -E: epoll fd watching fd for EPOLLIN, else -1 */
};

static int get_wc(struct conn *c, struct ddp_wc *wc, const char *waiting_for)
{
	int r = xs_cq_next(c->cq, wc, xs_timeout_ms);
	if (r < 0) {
		xs_perr("ddp_wait (waiting for %s)", waiting_for);
		return -1;
	}
	if (r == 0) {
		xs_msg("timeout: no completion within %d ms (waiting for %s)", xs_timeout_ms,
		       waiting_for);
		return -1;
	}
	if (wc->status != DDP_WC_SUCCESS) {
		char d[160];
		xs_wc_describe(wc, d, sizeof d);
		xs_msg("error completion (waiting for %s): %s", waiting_for, d);
		return -1;
	}
	return 0;
}

/* ext: wait until the completions for the send (wr_id SEND_ID, if need_send) and/or one
 * receive (if need_recv) have arrived, in either order; *which gets the receive's buffer index,
 * *len its length. A receive that arrives while only the send was awaited is kept for later. */
#define SEND_ID 100
static int ext_wait(struct conn *c, int need_send, int need_recv, int *which, uint32_t *len)
{
	if (need_recv && c->pend_which >= 0) {
		*which = c->pend_which;
		*len = c->pend_len;
		c->pend_which = -1;
		need_recv = 0;
	}
	while (need_send || need_recv) {
		struct ddp_wc wc;
		if (get_wc(c, &wc, need_send ? (need_recv ? "send+receive completions"
							  : "a send completion")
					     : "a receive completion") != 0)
			return -1;
		if (wc.opcode == DDP_WC_OP_SEND && wc.wr_id == SEND_ID && need_send) {
			need_send = 0;
		} else if (wc.opcode == DDP_WC_OP_RECV && wc.wr_id < 2 && need_recv) {
			need_recv = 0;
			*which = (int)wc.wr_id;
			*len = wc.byte_len;
		} else if (wc.opcode == DDP_WC_OP_RECV && wc.wr_id < 2 && c->pend_which < 0) {
			c->pend_which = (int)wc.wr_id;
			c->pend_len = wc.byte_len;
		} else {
			char d[160];
			xs_wc_describe(&wc, d, sizeof d);
			xs_msg("unexpected completion: %s", d);
			return -1;
		}
	}
	return 0;
}

static int verify(const uint8_t *buf, uint32_t len, uint32_t size, uint64_t iter, const char *who)
{
	if (len != size) {
		xs_msg("%s: message of %u bytes, expected %u (iteration %llu)", who, len, size,
		       (unsigned long long)iter);
		return -1;
	}
	size_t bad;
	uint64_t seed = xs_seed(PROG_ID, size, iter);
	if (xs_check(buf, size, seed, 0, &bad)) {
		char what[96];
		snprintf(what, sizeof what, "%s: size %u iteration %llu", who, size,
			 (unsigned long long)iter);
		xs_report_mismatch(what, buf, size, seed, 0, bad);
		return -1;
	}
	return 0;
}

/* Server -E: read exactly n bytes, waiting in epoll_wait (bounded by timeout_ms per wait). */
static int epoll_read_full(struct conn *c, void *buf, size_t n, int timeout_ms)
{
	size_t got = 0;
	while (got < n) {
		struct epoll_event ev;
		int r = epoll_wait(c->epfd, &ev, 1, timeout_ms);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		for (;;) { /* drain what is there; the next wait is level-triggered */
			ssize_t k = recv(c->fd, (char *)buf + got, n - got, MSG_DONTWAIT);
			if (k > 0) {
				got += (size_t)k;
				if (got == n)
					break;
				continue;
			}
			if (k == 0) {
				errno = EPIPE; /* EOF before n bytes */
				return -1;
			}
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -1;
		}
	}
	return 0;
}

/* ---- server ------------------------------------------------------------------------------ */

static int serve(struct conn *c, const struct xs_plan *p)
{
	uint64_t verified = 0;
	uint32_t ready = htonl(READY_MAGIC);
	if (c->mode == XS_EXT) {
		/* The client posted its receives before sending the plan; ours go up now, before
		 * we tell it to start. */
		for (int i = 0; i < 2; i++)
			if (xs_post_recv(c->cq, (uint64_t)i, c->rbuf[i], c->max_size) != 0) {
				xs_perr("ddp_post_recv");
				return -1;
			}
		static uint32_t rdy;
		rdy = ready;
		if (xs_post_send(c->cq, SEND_ID, &rdy, sizeof rdy, DDP_SIGNALED) != 0) {
			xs_perr("ddp_post_send(ready)");
			return -1;
		}
		if (ext_wait(c, 1, 0, NULL, NULL) != 0)
			return -1;
	} else if (xs_write_full(c->fd, &ready, sizeof ready, xs_timeout_ms) != 0) {
		xs_perr("write(ready)");
		return -1;
	}
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si];
		uint64_t total = (uint64_t)p->iters + p->warmup;
		for (uint64_t it = 0; it < total; it++) {
			if (c->mode == XS_EXT) {
				int which;
				uint32_t len;
				if (ext_wait(c, 0, 1, &which, &len) != 0)
					return -1;
				if (verify(c->rbuf[which], len, size, it, "server") != 0)
					return -1;
				/* Echo from the receive buffer; the other buffer stays posted for
				 * the next ping. Repost this one once the send has completed. */
				if (xs_post_send(c->cq, SEND_ID, c->rbuf[which], size, DDP_SIGNALED) != 0) {
					xs_perr("ddp_post_send(echo)");
					return -1;
				}
				if (ext_wait(c, 1, 0, NULL, NULL) != 0)
					return -1;
				/* Not after the last echo: the client may already have closed, and a
				 * post on an ended connection says EPIPE. */
				int last = si + 1 == p->nsizes && it + 1 == total;
				if (!last &&
				    xs_post_recv(c->cq, (uint64_t)which, c->rbuf[which], c->max_size) != 0) {
					xs_perr("ddp_post_recv");
					return -1;
				}
			} else {
				if ((c->epfd >= 0 ? epoll_read_full(c, c->rbuf[0], size, xs_timeout_ms)
						   : xs_read_full(c->fd, c->rbuf[0], size, xs_timeout_ms)) != 0) {
					xs_perr("read (size %u, iteration %llu)", size,
						(unsigned long long)it);
					return -1;
				}
				if (verify(c->rbuf[0], size, size, it, "server") != 0)
					return -1;
				if (xs_write_full(c->fd, c->rbuf[0], size, xs_timeout_ms) != 0) {
					xs_perr("write (size %u, iteration %llu)", size,
						(unsigned long long)it);
					return -1;
				}
			}
			verified += size;
		}
	}
	printf("%s: server: %u sizes, %llu bytes received and verified, all echoed\n", xs_prog,
	       p->nsizes, (unsigned long long)verified);
	return 0;
}

/* ---- client ------------------------------------------------------------------------------ */

static int run_client(struct conn *c, const struct xs_plan *p)
{
	uint32_t ready = 0;
	if (c->mode == XS_EXT) {
		int which;
		uint32_t len;
		if (ext_wait(c, 0, 1, &which, &len) != 0)
			return -1;
		memcpy(&ready, c->rbuf[which], sizeof ready);
		if (len != sizeof ready || ntohl(ready) != READY_MAGIC) {
			xs_msg("bad ready message from the server (%u bytes)", len);
			return -1;
		}
		if (xs_post_recv(c->cq, (uint64_t)which, c->rbuf[which], c->max_size) != 0) {
			xs_perr("ddp_post_recv");
			return -1;
		}
	} else {
		if (xs_read_full(c->fd, &ready, sizeof ready, xs_timeout_ms) != 0) {
			xs_perr("waiting for the server's ready message");
			return -1;
		}
		if (ntohl(ready) != READY_MAGIC) {
			xs_msg("bad ready message from the server");
			return -1;
		}
	}
	uint64_t *rtt = malloc(sizeof *rtt * (p->iters ? p->iters : 1));
	if (!rtt)
		xs_pfatal("malloc");
	xs_print_lat_header(xs_mode_name(c->mode), "round trip");
	uint64_t verified = 0;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si];
		uint64_t total = (uint64_t)p->iters + p->warmup;
		for (uint64_t it = 0; it < total; it++) {
			xs_fill(c->sbuf, size, xs_seed(PROG_ID, size, it), 0);
			uint64_t t0 = xs_now_ns();
			const uint8_t *echo;
			uint32_t len = size;
			if (c->mode == XS_EXT) {
				if (xs_post_send(c->cq, SEND_ID, c->sbuf, size, DDP_SIGNALED) != 0) {
					xs_perr("ddp_post_send (size %u)", size);
					return -1;
				}
				int which;
				if (ext_wait(c, 1, 1, &which, &len) != 0)
					return -1;
				uint64_t t1 = xs_now_ns();
				if (it >= p->warmup)
					rtt[it - p->warmup] = t1 - t0;
				echo = c->rbuf[which];
				if (verify(echo, len, size, it, "client") != 0)
					return -1;
				/* Not after the last echo: the server closes once it has sent it. */
				int last = si + 1 == p->nsizes && it + 1 == total;
				if (!last &&
				    xs_post_recv(c->cq, (uint64_t)which, c->rbuf[which], c->max_size) != 0) {
					xs_perr("ddp_post_recv");
					return -1;
				}
			} else {
				if (xs_write_full(c->fd, c->sbuf, size, xs_timeout_ms) != 0) {
					xs_perr("write (size %u, iteration %llu)", size,
						(unsigned long long)it);
					return -1;
				}
				if (xs_read_full(c->fd, c->rbuf[0], size, xs_timeout_ms) != 0) {
					xs_perr("read echo (size %u, iteration %llu)", size,
						(unsigned long long)it);
					return -1;
				}
				uint64_t t1 = xs_now_ns();
				if (it >= p->warmup)
					rtt[it - p->warmup] = t1 - t0;
				if (verify(c->rbuf[0], size, size, it, "client") != 0)
					return -1;
			}
			verified += size;
		}
		xs_print_lat_row(size, rtt, p->iters);
	}
	free(rtt);
	printf("%s: client: %llu bytes echoed and verified\n", xs_prog, (unsigned long long)verified);
	return 0;
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int server = 0;
	const char *addr = NULL, *port = "18515", *sizes_s = "1-64K";
	enum xs_mode mode = XS_TCP;
	uint64_t iters = 1000, warmup = 100;
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.crc = xs_env_crc(o.crc);
	int op, use_epoll = 0;
	while ((op = getopt(argc, argv, "sc:a:p:m:S:n:w:t:K:Evh")) != -1) {
		switch (op) {
		case 's': server = 1; break;
		case 'c': server = 0; addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': xs_opt_u64("-p", optarg, 0, 65535, 0); port = optarg; break;
		case 'm': mode = xs_parse_mode(optarg, 0); break;
		case 'S': sizes_s = optarg; break;
		case 'n': iters = xs_opt_u64("-n", optarg, 1, 100000000, 1); break;
		case 'w': warmup = xs_opt_u64("-w", optarg, 0, 100000000, 1); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 86400, 0) * 1000; break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'E': use_epoll = 1; break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	xs_check_args(argc, argv, server, addr, port);
	struct xs_plan plan = { 0 };
	plan.nsizes = (uint32_t)xs_parse_sizes("-S", sizes_s, plan.sizes, XS_MAX_SIZES, 0, MAX_SIZE);
	if (mode != XS_TCP)
		xs_require_ddp();
	o.ddp = mode != XS_TCP;
	if (server && mode == XS_EXT)
		mode = XS_DDP; /* the server learns ddp/ext from the client's plan */

	struct xs_cq *cq = malloc(sizeof *cq);
	if (!cq)
		xs_pfatal("malloc");
	struct conn c = { .fd = -1, .mode = mode, .cq = cq, .pend_which = -1, .epfd = -1 };
	int rc;
	if (server) {
		int lfd = xs_listen(addr, port, &o, NULL);
		c.fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
		if (xs_recv_plan(c.fd, &plan, PROG_ID) != 0)
			return XS_EXIT_FAIL;
		if ((mode == XS_TCP) != (plan.mode == XS_TCP)) {
			xs_msg("mode mismatch: server runs %s, client asks for %s", xs_mode_name(mode),
			       xs_mode_name(plan.mode));
			return XS_EXIT_FAIL;
		}
		c.mode = (enum xs_mode)plan.mode;
		for (uint32_t i = 0; i < plan.nsizes; i++) {
			if (plan.sizes[i] > MAX_SIZE) {
				xs_msg("bad size %u in the client's plan", plan.sizes[i]);
				return XS_EXIT_FAIL;
			}
			if (plan.sizes[i] > c.max_size)
				c.max_size = plan.sizes[i];
		}
		if (o.ddp)
			xs_print_conn_info(c.fd, "server");
		xs_cq_init(cq, c.fd);
		c.rbuf[0] = xs_alloc(c.max_size);
		c.rbuf[1] = xs_alloc(c.max_size);
		if (use_epoll && c.mode != XS_EXT) {
			c.epfd = epoll_create1(EPOLL_CLOEXEC);
			struct epoll_event ev = { .events = EPOLLIN, .data.fd = c.fd };
			if (c.epfd < 0 || epoll_ctl(c.epfd, EPOLL_CTL_ADD, c.fd, &ev) != 0)
				xs_pfatal("epoll");
		}
		rc = serve(&c, &plan);
		if (c.epfd >= 0)
			close(c.epfd);
	} else {
		plan.magic = XS_PLAN_MAGIC;
		plan.prog = PROG_ID;
		plan.mode = mode;
		plan.iters = (uint32_t)iters;
		plan.warmup = (uint32_t)warmup;
		for (uint32_t i = 0; i < plan.nsizes; i++)
			if (plan.sizes[i] > c.max_size)
				c.max_size = plan.sizes[i];
		/* ext: the receives posted now also take the server's 4-byte ready message */
		if (c.max_size < sizeof(uint32_t))
			c.max_size = sizeof(uint32_t);
		c.fd = xs_connect(addr, port, &o, xs_timeout_ms);
		if (o.ddp)
			xs_print_conn_info(c.fd, "client");
		xs_cq_init(cq, c.fd);
		c.sbuf = xs_alloc(c.max_size);
		c.rbuf[0] = xs_alloc(c.max_size);
		c.rbuf[1] = xs_alloc(c.max_size);
		if (mode == XS_EXT) {
			for (int i = 0; i < 2; i++)
				if (xs_post_recv(cq, (uint64_t)i, c.rbuf[i], c.max_size) != 0)
					xs_pfatal("ddp_post_recv");
		}
		if (xs_send_plan(c.fd, &plan) != 0)
			return XS_EXIT_FAIL;
		rc = run_client(&c, &plan);
	}
	if (close(c.fd) != 0 && rc == 0)
		xs_perr("close (ignored)");
	free(cq);
	return rc == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
