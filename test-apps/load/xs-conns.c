/*
 * xs-conns — aggregate stream throughput over many connections, one process per side,
 * single-threaded, epoll-driven, nonblocking (issue 8: 1, 10, 100, 1000 connections; CPU per GB).
 *
 *   xs-conns -s [-a ADDR] [-p PORT] [-m tcp|ddp] [-K 0|1] [-R READ] [-t SECONDS]      (server)
 *   xs-conns -c ADDR -p PORT [-n CONNS] [-m tcp|ddp] [-K 0|1] [-S WRITE] [-b TOTAL]
 *            [-T SECONDS] [-r SEED] [-t SECONDS]                                         (client)
 *
 * The client opens CONNS connections at once (nonblocking connect; DDP mode via
 * setsockopt(SOL_DDP, DDP_MODE) under libexsock.so with -m ddp, CRC on unless -K 0). Per
 * connection:
 *   client -> server  HELLO (32 B: magic, index, conns, seed)
 *   server -> client  GO    (16 B) as soon as it has read the HELLO
 *   once every connection has its GO (all connected, MPA done), the clock starts and the
 *   client writes WRITE-byte chunks (default 64 KiB) on every writable connection, until the
 *   connection's share of TOTAL (default 1 GiB / CONNS) is written or -T SECONDS passed, then
 *   shutdown(SHUT_WR);
 *   the server reads (READ bytes per call, default 256 KiB), checks every byte against the
 *   connection's pattern, and at EOF answers DONE (32 B: bytes received, errors, its CPU time,
 *   its peak RSS) and closes; the client checks the byte count and closes. The clock stops at the last DONE.
 * Content: connection i's byte at stream position p is T[(base_i + p) mod P], T a seeded
 * pseudo-random table of P = 1048573 (prime) bytes, base_i from the seed and i; so the client
 * writes straight from the table and the server checks with memcmp — every byte, at memcpy
 * cost. A byte of another connection, a lost, repeated or reordered chunk is a mismatch.
 * Level-triggered epoll, one write (client) or one read (server) per ready connection per
 * round, so every connection gets its turn.
 *
 * Output (stdout, one line each; the server's also carries its CPU so the client's line has
 * both sides):
 *   server: "xs-conns: listening on ADDR:PORT (TCP|DDP)", at the end
 *           "xs-conns server: conns=N bytes=B errors=E cpu_total_s=X rss_max_MB=M"
 *   client: "xs-conns: mode=ddp conns=1000 write=65536 bytes=... setup_s=... xfer_s=...
 *            MBps=... conn_MB_min=... conn_MB_max=... cpu_cli_s=... cpu_srv_s=...
 *            cpu_s_per_GB=... cpu_cli_total_s=... rss_cli_MB=... rss_srv_MB=... errors=0"
 *   MBps = bytes / xfer_s / 1e6; cpu_cli_s/cpu_srv_s are user+sys (getrusage(RUSAGE_SELF):
 *   every thread, so the engine's progress thread too) from the clock start to the last DONE
 *   (the server's measured from its last GO to its last DONE); cpu_s_per_GB = (cpu_cli_s +
 *   cpu_srv_s) / (bytes / 1e9); cpu_cli_total_s (and the server's cpu_total_s) include setup.
 *   rss_*_MB: peak resident set (ru_maxrss; the server's as of its last DONE).
 * RLIMIT_NOFILE is raised to the hard limit; a DDP connection holds 5 fds per process (4
 * sockets and an eventfd, docs/engine.md: the app fd, the engine's TCP fd and socketpair end,
 * the per-socket eventfd; 5009 in /proc/PID/fd with 1000 connections), so 1000 DDP
 * connections need ~5000 per process; too low a limit is reported before anything starts.
 *
 * Every wait is bounded: -t SECONDS (default 60) is the longest time without progress and
 * also bounds the whole run (10 x -t). Exit 0: every connection done, every byte verified;
 * 1: error/mismatch/timeout; 2: usage; 77: -m ddp without libexsock.so.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define PERIOD 1048573u /* prime: no chunk size lines up with it */
#define MAX_IO (1u << 20)
#define MAX_CONNS 16384
#define MAGIC_HELLO 0x78734e6848656c6full
#define MAGIC_GO 0x78734e68476f2121ull
#define MAGIC_DONE 0x78734e68446f6e65ull
#define DDP_FDS_PER_CONN 5

struct hello {
	uint64_t magic;
	uint32_t index, conns;
	uint64_t seed, pad;
};
struct go {
	uint64_t magic;
	uint32_t index, pad;
};
struct done {
	uint64_t magic, bytes;
	uint32_t errors, rss_mb;       /* server: content errors, max RSS so far (MiB) */
	uint32_t cpu_us_lo, cpu_us_hi; /* server CPU since its last GO (µs) */
};
_Static_assert(sizeof(struct hello) == 32 && sizeof(struct go) == 16 && sizeof(struct done) == 32,
	       "wire structs");

enum state { ST_CONNECTING, ST_HELLO, ST_WAIT_GO, ST_READY, ST_STREAM, ST_WAIT_DONE, ST_EOF,
	     ST_CLOSED };

struct conn {
	int fd, index;
	enum state st;
	uint32_t base;              /* pattern offset of stream position 0 */
	uint64_t pos, budget;       /* bytes streamed / to stream */
	uint8_t in[32];             /* HELLO/GO/DONE being read */
	uint32_t in_len;
	uint8_t out[32];            /* HELLO/GO/DONE being written */
	uint32_t out_len, out_off;
	uint32_t events;            /* current epoll interest */
	int got_done;
	struct done d;
};

static uint8_t *table; /* PERIOD + MAX_IO bytes: any window of <= MAX_IO is contiguous */
static int ep = -1, timeout_s = 60;
static struct xs_ddpopt dopt = XS_DDPOPT_INIT;
static enum xs_mode mode = XS_TCP;
static struct conn *conns;
static long errors;

static unsigned max_rss_mb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (unsigned)(ru.ru_maxrss / 1024);
}

static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void make_table(uint64_t seed)
{
	table = xs_alloc(PERIOD + MAX_IO);
	xs_fill(table, PERIOD, xs_seed(seed, 0x7461626c65ull, 0), 0);
	for (size_t i = 0; i < MAX_IO; i++) /* forward: the extension is periodic */
		table[PERIOD + i] = table[i];
}

static uint32_t conn_base(uint64_t seed, uint32_t index)
{
	return (uint32_t)(xs_seed(seed, index, 0x62617365ull) % PERIOD);
}

static const uint8_t *pattern_at(const struct conn *c, uint64_t pos)
{
	return table + (c->base + pos % PERIOD) % PERIOD;
}

static void raise_nofile(long need)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		xs_pfatal("getrlimit(RLIMIT_NOFILE)");
	if (rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			xs_perr("setrlimit(RLIMIT_NOFILE, %llu) (continuing)",
				(unsigned long long)rl.rlim_max);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (need > 0 && rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < need)
		xs_fatal("RLIMIT_NOFILE is %llu (hard limit), %ld connections in %s mode need %ld: "
			 "raise it (ulimit -Hn)", (unsigned long long)rl.rlim_cur,
			 (need - 64) / (mode == XS_TCP ? 1 : DDP_FDS_PER_CONN), xs_mode_name(mode), need);
}

static void set_events(struct conn *c, uint32_t ev)
{
	if (c->events == ev)
		return;
	struct epoll_event e = { .events = ev, .data.u32 = (uint32_t)c->index };
	if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e) != 0)
		xs_pfatal("epoll_ctl(MOD) conn %d", c->index);
	c->events = ev;
}

static void add_fd(int fd, uint32_t key, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.u32 = key };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) != 0)
		xs_pfatal("epoll_ctl(ADD)");
}

static void close_conn(struct conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->st = ST_CLOSED;
}

static void conn_fail(struct conn *c, const char *what, int e)
{
	if (errors++ < 20)
		xs_msg("conn %d: %s%s%s", c->index, what, e ? ": " : "", e ? xs_errname(e) : "");
	close_conn(c);
}

/* Writes the pending small message; 1 done, 0 wait for EPOLLOUT, -1 failed (closed). */
static int flush_out(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (n > 0) {
			c->out_off += (uint32_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		conn_fail(c, "send (control message)", n < 0 ? errno : 0);
		return -1;
	}
	return 1;
}

static void queue_out(struct conn *c, const void *msg, uint32_t len)
{
	memcpy(c->out, msg, len);
	c->out_len = len;
	c->out_off = 0;
}

/* Reads toward a 'want'-byte control message; 1 complete, 0 more to come, -1 failed/EOF. */
static int read_ctl(struct conn *c, uint32_t want, const char *what)
{
	while (c->in_len < want) {
		ssize_t n = recv(c->fd, c->in + c->in_len, want - c->in_len, 0);
		if (n > 0) {
			c->in_len += (uint32_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		char m[64];
		snprintf(m, sizeof m, "%s while reading %s", n == 0 ? "EOF" : "recv", what);
		conn_fail(c, m, n < 0 ? errno : 0);
		return -1;
	}
	return 1;
}

static int make_listener(const char *addr, const char *port, int *port_out)
{
	struct addrinfo hints = { 0 }, *res = NULL;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	int r = getaddrinfo(addr && *addr ? addr : NULL, port, &hints, &res);
	if (r != 0)
		xs_fatal("cannot resolve %s:%s: %s", addr ? addr : "*", port, gai_strerror(r));
	int fd = socket(res->ai_family, SOCK_STREAM, 0), one = 1;
	if (fd < 0)
		xs_pfatal("socket");
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
		xs_pfatal("setsockopt(SO_REUSEADDR)");
	if (xs_ddp_apply(fd, &dopt) != 0)
		exit(XS_EXIT_FAIL);
	if (bind(fd, res->ai_addr, res->ai_addrlen) != 0)
		xs_pfatal("bind %s:%s", addr && *addr ? addr : "*", port);
	freeaddrinfo(res);
	if (listen(fd, 4096) != 0) /* capped by net.core.somaxconn */
		xs_pfatal("listen");
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
		xs_pfatal("fcntl(O_NONBLOCK)");
	struct sockaddr_in sin;
	socklen_t sl = sizeof sin;
	if (getsockname(fd, (struct sockaddr *)&sin, &sl) != 0)
		xs_pfatal("getsockname");
	*port_out = ntohs(sin.sin_port);
	char host[64];
	inet_ntop(AF_INET, &sin.sin_addr, host, sizeof host);
	printf("%s: listening on %s:%d (%s)\n", xs_prog, host, *port_out, dopt.ddp ? "DDP" : "TCP");
	fflush(stdout);
	return fd;
}

/* ---- server ----------------------------------------------------------------------------- */

static int run_server(const char *addr, const char *port, size_t read_size)
{
	int pnum, lfd = make_listener(addr, port, &pnum);
	uint8_t *rbuf = xs_alloc(read_size);
	conns = calloc(MAX_CONNS, sizeof *conns);
	if (!conns)
		xs_fatal("out of memory");
	add_fd(lfd, UINT32_MAX, EPOLLIN);
	int accepted = 0, expect = -1, finished = 0, gos = 0;
	uint64_t seed = 0, total = 0;
	double cpu_ready = cpu_now();
	uint64_t last_progress = xs_now_ns(), hard_dl = xs_deadline(timeout_s * 10000);
	struct epoll_event evs[256];
	while (expect < 0 || finished < expect) {
		int n = epoll_wait(ep, evs, 256, 1000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			xs_pfatal("epoll_wait");
		uint64_t now = xs_now_ns();
		if (n > 0)
			last_progress = now;
		else if (now - last_progress > (uint64_t)timeout_s * 1000000000ull || now > hard_dl)
			xs_fatal("server: no progress for %d s (accepted %d, finished %d of %d)", timeout_s,
				 accepted, finished, expect);
		for (int i = 0; i < n; i++) {
			uint32_t key = evs[i].data.u32;
			if (key == UINT32_MAX) { /* listener: accept what is queued (bounded) */
				for (int k = 0; k < 256; k++) {
					int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (fd < 0) {
						if (errno == EINTR || errno == ECONNABORTED)
							continue;
						if (errno == EAGAIN)
							break;
						if (errno == EMFILE || errno == ENFILE)
							xs_pfatal("accept (fd limit; %d accepted)", accepted);
						xs_pfatal("accept");
					}
					if (accepted >= MAX_CONNS)
						xs_fatal("more than %d connections", MAX_CONNS);
					int one = 1;
					setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
					struct conn *c = &conns[accepted];
					memset(c, 0, sizeof *c);
					c->fd = fd;
					c->index = accepted++;
					c->st = ST_HELLO;
					c->events = EPOLLIN;
					add_fd(fd, (uint32_t)c->index, EPOLLIN);
				}
				continue;
			}
			struct conn *c = &conns[key];
			if (c->st == ST_CLOSED)
				continue;
			if (c->out_len && c->out_off < c->out_len) {
				int r = flush_out(c);
				if (r < 0)
					continue;
				if (r == 0) {
					set_events(c, EPOLLOUT);
					continue;
				}
				if (c->st == ST_EOF) { /* DONE sent */
					close_conn(c);
					finished++;
					continue;
				}
				set_events(c, EPOLLIN);
			}
			if (c->st == ST_HELLO) {
				int r = read_ctl(c, sizeof(struct hello), "HELLO");
				if (r <= 0)
					continue;
				struct hello h;
				memcpy(&h, c->in, sizeof h);
				if (h.magic != MAGIC_HELLO || h.conns == 0 || h.conns > MAX_CONNS) {
					conn_fail(c, "bad HELLO", 0);
					continue;
				}
				if (expect < 0) {
					expect = (int)h.conns;
					seed = h.seed;
					make_table(seed);
				} else if ((int)h.conns != expect || h.seed != seed) {
					conn_fail(c, "HELLO of another run", 0);
					continue;
				}
				c->base = conn_base(seed, h.index);
				c->index = (int)key; /* our slot; h.index only selects the pattern */
				c->st = ST_STREAM;
				struct go g = { MAGIC_GO, h.index, 0 };
				queue_out(c, &g, sizeof g);
				if (++gos == expect)
					cpu_ready = cpu_now();
				int w = flush_out(c);
				if (w == 0)
					set_events(c, EPOLLOUT);
				continue;
			}
			if (c->st != ST_STREAM)
				continue;
			ssize_t r = recv(c->fd, rbuf, read_size, 0);
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r < 0) {
				conn_fail(c, "recv", errno);
				continue;
			}
			if (r > 0) {
				const uint8_t *want = pattern_at(c, c->pos);
				if (memcmp(rbuf, want, (size_t)r) != 0) {
					size_t b = 0;
					while (rbuf[b] == want[b])
						b++;
					if (errors++ < 20)
						xs_msg("conn %d: content mismatch at stream byte %" PRIu64
						       ": expected 0x%02x, got 0x%02x", c->index, c->pos + b,
						       want[b], rbuf[b]);
					c->d.errors++;
				}
				c->pos += (uint64_t)r;
				total += (uint64_t)r;
				continue;
			}
			/* EOF: answer DONE with the count and our CPU since the last GO */
			uint64_t us = (uint64_t)((cpu_now() - cpu_ready) * 1e6);
			struct done d = { MAGIC_DONE, c->pos, c->d.errors, max_rss_mb(), (uint32_t)us,
					  (uint32_t)(us >> 32) };
			queue_out(c, &d, sizeof d);
			c->st = ST_EOF;
			int w = flush_out(c);
			if (w < 0)
				continue;
			if (w == 0) {
				set_events(c, EPOLLOUT);
				continue;
			}
			close_conn(c);
			finished++;
		}
		if (expect > 0 && accepted > expect)
			xs_fatal("more connections (%d) than announced (%d)", accepted, expect);
	}
	printf("%s server: conns=%d bytes=%" PRIu64 " errors=%ld cpu_total_s=%.3f rss_max_MB=%u\n",
	       xs_prog, expect, total, errors, cpu_now(), max_rss_mb());
	fflush(stdout);
	close(lfd);
	return errors ? XS_EXIT_FAIL : XS_EXIT_OK;
}

/* ---- client ----------------------------------------------------------------------------- */

static int run_client(const char *addr, const char *port, int nconns, size_t wsize,
		      uint64_t total_bytes, double seconds, uint64_t seed)
{
	struct addrinfo hints = { 0 }, *res = NULL;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	int gr = getaddrinfo(addr, port, &hints, &res);
	if (gr != 0)
		xs_fatal("cannot resolve %s:%s: %s", addr, port, gai_strerror(gr));
	make_table(seed);
	conns = calloc((size_t)nconns, sizeof *conns);
	if (!conns)
		xs_fatal("out of memory");
	uint64_t share = total_bytes / (uint64_t)nconns;
	double t_start = (double)xs_now_ns() / 1e9;
	for (int i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		c->index = i;
		c->base = conn_base(seed, (uint32_t)i);
		c->budget = share;
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			xs_pfatal("socket (connection %d)", i);
		if (xs_ddp_apply(c->fd, &dopt) != 0)
			exit(XS_EXIT_FAIL);
		int one = 1;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		int r;
		do
			r = connect(c->fd, res->ai_addr, res->ai_addrlen);
		while (r != 0 && errno == EINTR);
		if (r != 0 && errno != EINPROGRESS)
			xs_pfatal("connect (connection %d)", i);
		struct hello h = { MAGIC_HELLO, (uint32_t)i, (uint32_t)nconns, seed, 0 };
		queue_out(c, &h, sizeof h);
		c->st = ST_CONNECTING;
		c->events = EPOLLOUT;
		add_fd(c->fd, (uint32_t)i, EPOLLOUT);
	}
	freeaddrinfo(res);
	int gos = 0, finished = 0;
	double t_go = 0, t_end = 0, cpu_go = 0, cpu_end = 0, srv_cpu = 0;
	unsigned srv_rss = 0;
	uint64_t xfer_deadline = 0, sent = 0, recv_total = 0;
	uint64_t last_progress = xs_now_ns(), hard_dl = xs_deadline(timeout_s * 10000);
	struct epoll_event evs[256];
	while (finished < nconns) {
		int n = epoll_wait(ep, evs, 256, 1000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			xs_pfatal("epoll_wait");
		uint64_t now = xs_now_ns();
		if (n > 0)
			last_progress = now;
		else if (now - last_progress > (uint64_t)timeout_s * 1000000000ull || now > hard_dl)
			xs_fatal("client: no progress for %d s (GO %d of %d, done %d)", timeout_s, gos,
				 nconns, finished);
		int stop_now = xfer_deadline && now >= xfer_deadline;
		for (int i = 0; i < n; i++) {
			struct conn *c = &conns[evs[i].data.u32];
			uint32_t ev = evs[i].events;
			switch (c->st) {
			case ST_CONNECTING: {
				int err = 0;
				socklen_t el = sizeof err;
				if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
					err = errno;
				if (err) {
					conn_fail(c, "connect", err);
					finished++;
					break;
				}
				c->st = ST_HELLO;
			} /* fall through */
			case ST_HELLO: {
				int r = flush_out(c);
				if (r < 0) {
					finished++;
					break;
				}
				if (r == 1) {
					c->st = ST_WAIT_GO;
					c->in_len = 0;
					set_events(c, EPOLLIN);
				}
				break;
			}
			case ST_WAIT_GO: {
				int r = read_ctl(c, sizeof(struct go), "GO");
				if (r < 0) {
					finished++;
					break;
				}
				if (r == 0)
					break;
				struct go g;
				memcpy(&g, c->in, sizeof g);
				if (g.magic != MAGIC_GO || g.index != (uint32_t)c->index) {
					conn_fail(c, "bad GO", 0);
					finished++;
					break;
				}
				c->st = ST_READY;
				set_events(c, 0);
				if (++gos == nconns) { /* everyone connected: start the clock */
					t_go = (double)xs_now_ns() / 1e9;
					cpu_go = cpu_now();
					if (seconds > 0)
						xfer_deadline = xs_now_ns() + (uint64_t)(seconds * 1e9);
					for (int k = 0; k < nconns; k++)
						if (conns[k].st == ST_READY) {
							conns[k].st = ST_STREAM;
							set_events(&conns[k], EPOLLOUT);
						}
				}
				break;
			}
			case ST_STREAM: {
				if (ev & (EPOLLERR | EPOLLHUP)) {
					int err = 0;
					socklen_t el = sizeof err;
					getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
					conn_fail(c, "connection error while streaming", err);
					finished++;
					break;
				}
				if (c->pos < c->budget && !stop_now) {
					uint64_t left = c->budget - c->pos;
					size_t len = left < wsize ? (size_t)left : wsize;
					ssize_t w = send(c->fd, pattern_at(c, c->pos), len, MSG_NOSIGNAL);
					if (w > 0) {
						c->pos += (uint64_t)w;
						sent += (uint64_t)w;
					} else if (w < 0 && errno != EAGAIN && errno != EINTR) {
						conn_fail(c, "send", errno);
						finished++;
					}
					if (c->pos < c->budget)
						break;
				}
				if (shutdown(c->fd, SHUT_WR) != 0) {
					conn_fail(c, "shutdown(SHUT_WR)", errno);
					finished++;
					break;
				}
				c->st = ST_WAIT_DONE;
				c->in_len = 0;
				set_events(c, EPOLLIN);
				break;
			}
			case ST_WAIT_DONE: {
				int r = read_ctl(c, sizeof(struct done), "DONE");
				if (r < 0) {
					finished++;
					break;
				}
				if (r == 0)
					break;
				memcpy(&c->d, c->in, sizeof c->d);
				if (c->d.magic != MAGIC_DONE || c->d.bytes != c->pos || c->d.errors) {
					char m[160];
					snprintf(m, sizeof m, "DONE says %" PRIu64 " bytes, %u errors; "
						 "we sent %" PRIu64, c->d.bytes, c->d.errors, c->pos);
					conn_fail(c, m, 0);
					finished++;
					break;
				}
				recv_total += c->d.bytes;
				double s = (double)(((uint64_t)c->d.cpu_us_hi << 32) | c->d.cpu_us_lo) / 1e6;
				if (s > srv_cpu)
					srv_cpu = s;
				if (c->d.rss_mb > srv_rss)
					srv_rss = c->d.rss_mb;
				c->got_done = 1;
				c->st = ST_EOF;
				if (++finished == nconns) {
					t_end = (double)xs_now_ns() / 1e9;
					cpu_end = cpu_now();
				}
				break;
			}
			case ST_EOF: { /* after DONE: EOF (or a reset once the server closed) */
				char b[64];
				ssize_t r = recv(c->fd, b, sizeof b, 0);
				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (r > 0) {
					conn_fail(c, "data after DONE", 0);
					break;
				}
				close_conn(c);
				break;
			}
			default:
				break;
			}
		}
	}
	if (!t_end) {
		t_end = (double)xs_now_ns() / 1e9;
		cpu_end = cpu_now();
	}
	for (int i = 0; i < nconns; i++)
		if (conns[i].fd >= 0)
			close_conn(&conns[i]);
	double mn = 1e300, mx = 0;
	for (int i = 0; i < nconns; i++) {
		double mb = (double)conns[i].pos / 1e6;
		mn = mb < mn ? mb : mn;
		mx = mb > mx ? mb : mx;
	}
	double xfer = t_go ? t_end - t_go : 0, cli_cpu = t_go ? cpu_end - cpu_go : 0;
	double gb = (double)recv_total / 1e9;
	printf("%s: mode=%s conns=%d write=%zu bytes=%" PRIu64 " setup_s=%.3f xfer_s=%.3f MBps=%.1f "
	       "conn_MB_min=%.2f conn_MB_max=%.2f cpu_cli_s=%.3f cpu_srv_s=%.3f cpu_s_per_GB=%.3f "
	       "cpu_cli_total_s=%.3f rss_cli_MB=%u rss_srv_MB=%u errors=%ld\n",
	       xs_prog, xs_mode_name(mode), nconns, wsize, recv_total, t_go ? t_go - t_start : 0,
	       xfer, xfer > 0 ? (double)recv_total / xfer / 1e6 : 0, mn, mx, cli_cpu, srv_cpu,
	       gb > 0 ? (cli_cpu + srv_cpu) / gb : 0, cpu_now(), max_rss_mb(), srv_rss, errors);
	fflush(stdout);
	(void)sent;
	return errors || recv_total == 0 ? XS_EXIT_FAIL : XS_EXIT_OK;
}

static void usage(void)
{
	printf("usage: %s -s [-a ADDR] [-p PORT] [-m tcp|ddp] [-K 0|1] [-R READ] [-t S]\n"
	       "       %s -c ADDR -p PORT [-n CONNS] [-m tcp|ddp] [-K 0|1] [-S WRITE] [-b TOTAL]\n"
	       "                 [-T SECONDS] [-r SEED] [-t S]\n"
	       "  -n  connections (default 1, max %d)     -S  write size (default 64K, max 1M)\n"
	       "  -b  total bytes over all connections (default 1G)\n"
	       "  -T  stop streaming after SECONDS (0: only -b; fractions allowed)\n"
	       "  -R  server read size (default 256K)     -K  DDP CRC (default library default)\n"
	       "  -t  bound of any wait without progress (default 60 s; the run: 10x)\n",
	       xs_prog, xs_prog, MAX_CONNS);
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int server = 0, opt, nconns = 1;
	const char *addr = NULL, *port = "0";
	uint64_t wsize = 64 << 10, rsize = 256 << 10, total = 1ull << 30, seed = 1;
	double seconds = 0;
	while ((opt = getopt(argc, argv, "sc:a:p:n:m:K:S:R:b:T:r:t:vh")) != -1) {
		switch (opt) {
		case 's': server = 1; break;
		case 'c': addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'n': nconns = (int)xs_opt_u64("-n", optarg, 1, MAX_CONNS, 0); break;
		case 'm': mode = xs_parse_mode(optarg, 0); break;
		case 'K': dopt.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'S': wsize = xs_opt_u64("-S", optarg, 1, MAX_IO, 1); break;
		case 'R': rsize = xs_opt_u64("-R", optarg, 1, MAX_IO, 1); break;
		case 'b': total = xs_opt_u64("-b", optarg, 1, 1ull << 40, 1); break;
		case 'T': seconds = atof(optarg); break;
		case 'r': seed = xs_opt_u64("-r", optarg, 0, UINT64_MAX, 0); break;
		case 't': timeout_s = (int)xs_opt_u64("-t", optarg, 1, 3600, 0); break;
		case 'v': xs_verbose++; break;
		case 'h': usage(); return XS_EXIT_OK;
		default: xs_usage_error("unknown option");
		}
	}
	if (mode == XS_EXT)
		xs_usage_error("-m: tcp or ddp (a byte stream per connection)");
	if (!server && !addr)
		xs_usage_error("-s or -c ADDR");
	if (!server && total < (uint64_t)nconns)
		xs_usage_error("-b smaller than -n");
	if (mode == XS_DDP) {
		xs_require_ddp();
		dopt.ddp = 1;
	}
	xs_timeout_ms = timeout_s * 1000;
	/* server: up to MAX_CONNS; client: what it opens */
	long per = mode == XS_TCP ? 1 : DDP_FDS_PER_CONN;
	raise_nofile(server ? 0 : nconns * per + 64);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		xs_pfatal("epoll_create1");
	return server ? run_server(addr, port, (size_t)rsize)
		      : run_client(addr, port, nconns, (size_t)wsize, total, seconds, seed);
}
