/*
 * xs-load — many concurrent DDP connections in one process, mixed operations, for a fixed
 * time; every byte verified; RSS and fd count sampled and required to stay flat.
 *
 *   xs-load -s [-a ADDR] [-p PORT] [-n CONNS] [-T THREADS]        (server)
 *   xs-load -c ADDR [-p PORT] [-n CONNS] [-T THREADS] [-d SECONDS] [-r SEED] [-i SAMPLE_S]
 *
 * The client opens CONNS DDP connections (CRC on unless -K 0) and drives them from THREADS
 * threads (connection i belongs to thread i % THREADS). Each connection runs one transaction
 * at a time, chosen at random (seeded by -r, the connection and the transaction number):
 *   Send   a Send of 16..4096 bytes (pattern); the server checks every byte and answers
 *          with a 32-byte ack Send;
 *   Write  an RDMA Write of 1..16384 bytes into the server's write area at a random
 *          offset, then a note Send; the server checks the area and acks;
 *   Read   an RDMA Read of 1..16384 bytes of the server's read area (a pattern known to
 *          both), checked by the client.
 * Threads wait in poll() on the connections' completion fds (ddp_event_fd), never spin.
 * After -d seconds the client finishes the open transactions, sends END on every
 * connection and closes them; the server exits 0 once every connection has ended after its
 * END, 1 if any connection failed before.
 *
 * Both processes sample their own RSS (/proc/self/statm) and open fd count (/proc/self/fd)
 * every -i seconds (default 5) and print one line per sample. At the end each checks
 * flatness over the steady state (from the first sample at or after a quarter of the run,
 * or after 10 s, whichever is later, until the last sample before END): the fd count must
 * not change and RSS must not grow by more than -g percent (default 10). RLIMIT_NOFILE is
 * raised to its hard limit (each DDP connection needs 4 fds).
 *
 * Exit: 0 zero errors and flat, 1 otherwise, 2 usage, 77 libexsock.so not loaded.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define MAX_CONNS 4096
#define AREA 16384u
#define MAX_SEND 4096u
#define HDR 32u
#define RBUF (HDR + MAX_SEND)
#define NRECV 2
#define HELLO 0x78734c6f61643031ull /* "xsLoad01" */

enum { OP_SEND, OP_WRITE, OP_READ, OP_END, OP_ACK };
static const char *op_names[] = { "Send", "Write", "Read" };

struct hdr { /* every Send starts with it (32 bytes) */
	uint32_t type, len;    /* payload length (Send) / written length (Write) */
	uint64_t seq, seed;
	uint32_t off, status;
};
_Static_assert(sizeof(struct hdr) == HDR, "hdr");

struct advert {
	uint64_t wr_addr, rd_addr;
	uint32_t wr_stag, rd_stag, index, pad;
};

struct conn {
	int fd, index, state; /* client: 0 idle, 1 waiting */
	uint64_t seq, wait_wr;
	uint8_t *rbuf;        /* NRECV receive buffers */
	uint8_t *sbuf;        /* our Send buffer (RBUF) */
	uint8_t *wbuf;        /* client: Write source / Read sink (AREA); server: write area */
	uint8_t *rarea;       /* server: read area */
	struct advert ad;
	int op;
	uint32_t len, off;
	uint64_t seed;
	int ended, counted;
};

static int is_server, nconns = 1000, nthreads = 4, duration_s = 20, sample_s = 5;
static unsigned growth_pct = 10;
static uint64_t opt_seed = 1;
static struct conn *conns;
static atomic_int stop, failed, ended_count;
static atomic_ullong n_ops[3], n_bytes;
static uint64_t t_start;

static void fail(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct conn *c, const char *fmt, ...)
{
	char m[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	if (atomic_fetch_add(&failed, 1) < 20)
		xs_msg("%s conn %d: %s", is_server ? "server" : "client", c->index, m);
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- resource samples ------------------------------------------------------------------ */
struct sample {
	double t;
	long rss_kb, fds;
};
#define MAX_SAMPLES 4096
static struct sample samples[MAX_SAMPLES];
static int nsamples;
/* the steady state ends when the first connection starts to close (server: first END) */
static _Atomic double flat_until = 1e300;

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, res = 0;
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", "..", the directory's own fd */
}

static void take_sample(void)
{
	if (nsamples >= MAX_SAMPLES)
		return;
	struct sample *s = &samples[nsamples++];
	s->t = (double)(xs_now_ns() - t_start) / 1e9;
	s->rss_kb = rss_kb();
	s->fds = fd_count();
	printf("%s: sample t=%6.1f s  rss=%7ld KiB  fds=%5ld  ops: %llu Sends, %llu Writes, %llu Reads, "
	       "%llu bytes verified, errors %d\n",
	       xs_prog, s->t, s->rss_kb, s->fds, (unsigned long long)n_ops[0],
	       (unsigned long long)n_ops[1], (unsigned long long)n_ops[2],
	       (unsigned long long)n_bytes, atomic_load(&failed));
	fflush(stdout);
}

/* Flatness over samples [from, nsamples): 0 ok. */
static int check_flat(double run_s)
{
	double warm = run_s / 4 > 10 ? run_s / 4 : 10;
	int from = -1;
	int upto = nsamples;
	while (upto > 0 && samples[upto - 1].t > flat_until)
		upto--;
	for (int i = 0; i < upto; i++)
		if (samples[i].t >= warm) {
			from = i;
			break;
		}
	if (from < 0 || upto - from < 2) {
		printf("%s: flatness: not enough steady-state samples (run longer than %.0f s)\n",
		       xs_prog, warm + 2.0 * sample_s);
		return 1;
	}
	long r0 = samples[from].rss_kb, rmax = r0, f0 = samples[from].fds;
	int bad = 0;
	for (int i = from; i < upto; i++) {
		if (samples[i].rss_kb > rmax)
			rmax = samples[i].rss_kb;
		if (samples[i].fds != f0)
			bad = 1;
	}
	double growth = 100.0 * (double)(rmax - r0) / (double)r0;
	printf("%s: steady state from t=%.1f s (%d samples): rss %ld -> max %ld KiB (%+.1f%%, limit "
	       "%u%%), fds %ld%s\n",
	       xs_prog, samples[from].t, upto - from, r0, rmax, growth, growth_pct, f0,
	       bad ? " CHANGED" : " constant");
	return bad || growth > growth_pct;
}

static void *sampler(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		take_sample();
		for (int i = 0; i < sample_s * 10 && !atomic_load(&stop); i++)
			usleep(100000); /* the sampling period, not a readiness wait */
	}
	return NULL;
}

/* ---- common ---------------------------------------------------------------------------- */
static int post_recv_i(struct conn *c, int i)
{
	struct iovec v = { c->rbuf + (size_t)i * RBUF, RBUF };
	return ddp_post_recv(c->fd, (uint64_t)i, &v, 1);
}

static int post_send(struct conn *c, size_t len, int signaled)
{
	struct iovec v = { c->sbuf, len };
	return ddp_post_send(c->fd, 100, &v, 1, signaled ? DDP_SIGNALED : 0);
}

/* ---- server ---------------------------------------------------------------------------- */
static void server_recv(struct conn *c, const struct ddp_wc *wc)
{
	uint8_t *b = c->rbuf + wc->wr_id * RBUF;
	struct hdr h;
	memcpy(&h, b, sizeof h);
	size_t bad;
	int ack = 1;
	if (wc->byte_len < HDR) {
		fail(c, "short message (%u bytes)", wc->byte_len);
		return;
	}
	switch (h.type) {
	case OP_SEND:
		if (h.len != wc->byte_len - HDR || xs_check(b + HDR, h.len, h.seed, 0, &bad)) {
			fail(c, "Send %" PRIu64 " of %u bytes: content differs", h.seq, h.len);
			return;
		}
		n_ops[OP_SEND]++;
		n_bytes += h.len;
		break;
	case OP_WRITE:
		if (h.off > AREA || h.len > AREA - h.off ||
		    xs_check(c->wbuf + h.off, h.len, h.seed, 0, &bad)) {
			fail(c, "Write %" PRIu64 " (%u bytes at %u): content differs", h.seq, h.len, h.off);
			return;
		}
		n_ops[OP_WRITE]++;
		n_bytes += h.len;
		break;
	case OP_END:
		if (flat_until > 1e299)
			flat_until = (double)(xs_now_ns() - t_start) / 1e9;
		c->ended = 1;
		ack = 0;
		break;
	default:
		fail(c, "unknown message type %u", h.type);
		return;
	}
	if (ack) {
		struct hdr a = { OP_ACK, 0, h.seq, 0, 0, 0 };
		memcpy(c->sbuf, &a, sizeof a);
		if (post_send(c, HDR, 0))
			fail(c, "post ack: %s", xs_errname(errno));
	}
	if (!c->ended && post_recv_i(c, (int)wc->wr_id))
		fail(c, "post_recv: %s", xs_errname(errno));
}

/* The connection is over (after END: the client closed it; before: a failure). */
static void server_ended(struct conn *c, struct pollfd *pf)
{
	c->ended = 1;
	if (!c->counted) {
		c->counted = 1;
		atomic_fetch_add(&ended_count, 1);
	}
	pf->fd = -1;
}

/* ---- client ---------------------------------------------------------------------------- */
static void client_start(struct conn *c)
{
	uint64_t s = xs_seed(opt_seed, (uint64_t)c->index, c->seq);
	c->op = (int)(rnd(&s) % 3);
	c->seed = rnd(&s);
	struct hdr h = { (uint32_t)c->op, 0, c->seq, c->seed, 0, 0 };
	int r = 0;
	switch (c->op) {
	case OP_SEND:
		c->len = 16 + (uint32_t)(rnd(&s) % (MAX_SEND - 15));
		h.len = c->len;
		memcpy(c->sbuf, &h, sizeof h);
		xs_fill(c->sbuf + HDR, c->len, c->seed, 0);
		r = post_send(c, HDR + c->len, 0);
		break;
	case OP_WRITE: {
		c->len = 1 + (uint32_t)(rnd(&s) % AREA);
		c->off = (uint32_t)(rnd(&s) % (AREA - c->len + 1));
		h.len = c->len;
		h.off = c->off;
		xs_fill(c->wbuf, c->len, c->seed, 0);
		struct iovec v = { c->wbuf, c->len };
		r = ddp_post_write(c->fd, 200, &v, 1, c->ad.wr_stag, c->ad.wr_addr + c->off, 0);
		if (!r) {
			memcpy(c->sbuf, &h, sizeof h);
			r = post_send(c, HDR, 0);
		}
		break;
	}
	default: {
		c->len = 1 + (uint32_t)(rnd(&s) % AREA);
		c->off = (uint32_t)(rnd(&s) % (AREA - c->len + 1));
		memset(c->wbuf, 0xa5, c->len); /* poison: stale data cannot pass */
		struct iovec v = { c->wbuf, c->len };
		r = ddp_post_read(c->fd, 300, &v, 1, c->ad.rd_stag, c->ad.rd_addr + c->off,
				  DDP_SIGNALED);
	}
	}
	if (r)
		fail(c, "post %s: %s", op_names[c->op], xs_errname(errno));
	c->state = 1;
}

static void client_wc(struct conn *c, const struct ddp_wc *wc)
{
	size_t bad;
	if (wc->status != DDP_WC_SUCCESS) {
		char d[160];
		xs_wc_describe(wc, d, sizeof d);
		fail(c, "%s", d);
		c->state = 2;
		return;
	}
	if (wc->opcode == DDP_WC_OP_READ) {
		if (c->state != 1 || c->op != OP_READ)
			fail(c, "unexpected Read completion");
		else if (xs_check(c->wbuf, c->len, xs_seed(77, (uint64_t)c->index, 0), c->off, &bad))
			fail(c, "Read of %u bytes at %u: content differs at %zu", c->len, c->off, bad);
		n_ops[OP_READ]++;
		n_bytes += c->len;
		c->state = 0;
		c->seq++;
	} else if (wc->opcode == DDP_WC_OP_RECV) {
		struct hdr h;
		memcpy(&h, c->rbuf + wc->wr_id * RBUF, sizeof h);
		if (c->state != 1 || h.type != OP_ACK || h.seq != c->seq)
			fail(c, "unexpected ack (type %u seq %" PRIu64 ", expected %" PRIu64 ")", h.type,
			     h.seq, c->seq);
		if (post_recv_i(c, (int)wc->wr_id))
			fail(c, "post_recv: %s", xs_errname(errno));
		c->state = 0;
		c->seq++;
	}
}

/* ---- thread loop ------------------------------------------------------------------------- */
struct thr {
	int id;
	pthread_t t;
};

static void *worker(void *arg)
{
	struct thr *me = arg;
	int mine = 0;
	for (int i = me->id; i < nconns; i += nthreads)
		mine++;
	struct pollfd *pf = calloc((size_t)mine, sizeof *pf);
	struct conn **cs = calloc((size_t)mine, sizeof *cs);
	for (int i = me->id, k = 0; i < nconns; i += nthreads, k++) {
		cs[k] = &conns[i];
		pf[k].fd = ddp_event_fd(conns[i].fd);
		pf[k].events = POLLIN;
		if (pf[k].fd < 0)
			xs_pfatal("ddp_event_fd");
	}
	uint64_t end = t_start + (uint64_t)duration_s * 1000000000ull;
	int draining = 0, done = 0;
	struct ddp_wc wcs[16];
	while (!done) {
		if (!is_server && !draining && xs_now_ns() >= end)
			draining = 1;
		int busy = 0;
		for (int k = 0; k < mine; k++) {
			struct conn *c = cs[k];
			if (!is_server && c->state == 0 && !draining && !atomic_load(&failed))
				client_start(c);
			if (!is_server && c->state == 1)
				busy = 1;
		}
		if (!is_server && draining && !busy)
			break;
		if (is_server && atomic_load(&ended_count) >= nconns)
			break;
		int n = poll(pf, (nfds_t)mine, 200);
		if (n < 0 && errno != EINTR)
			xs_pfatal("poll");
		for (int k = 0; k < mine && n > 0; k++) {
			if (!pf[k].revents)
				continue;
			struct conn *c = cs[k];
			int got = ddp_poll(c->fd, wcs, 16);
			if (got < 0) {
				if (is_server) {
					if (!c->ended)
						fail(c, "ddp_poll: %s (before END)", xs_errname(errno));
					server_ended(c, &pf[k]);
				} else {
					fail(c, "ddp_poll: %s", xs_errname(errno));
					c->state = 2;
					pf[k].fd = -1;
				}
				continue;
			}
			for (int j = 0; j < got; j++) {
				if (is_server) {
					if (wcs[j].status != DDP_WC_SUCCESS) {
						if (!c->ended) {
							char d[160];
							xs_wc_describe(&wcs[j], d, sizeof d);
							fail(c, "%s (before END)", d);
						}
						server_ended(c, &pf[k]);
					} else if (wcs[j].opcode == DDP_WC_OP_RECV) {
						server_recv(c, &wcs[j]);
					}
				} else {
					client_wc(c, &wcs[j]);
				}
			}
		}
		(void)done;
	}
	free(pf);
	free(cs);
	return NULL;
}

static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < (rlim_t)nconns * 5 + 64)
		xs_fatal("RLIMIT_NOFILE %llu is too low for %d connections (need %d)",
			 (unsigned long long)rl.rlim_cur, nconns, nconns * 5 + 64);
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	const char *addr = NULL, *port = "18520";
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.ddp = 1;
	int opt;
	while ((opt = getopt(argc, argv, "sc:a:p:n:T:d:r:i:g:K:t:h")) != -1) {
		switch (opt) {
		case 's': is_server = 1; break;
		case 'c': addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'n': nconns = (int)xs_opt_u64("-n", optarg, 1, MAX_CONNS, 0); break;
		case 'T': nthreads = (int)xs_opt_u64("-T", optarg, 1, 64, 0); break;
		case 'd': duration_s = (int)xs_opt_u64("-d", optarg, 1, 86400, 0); break;
		case 'r': opt_seed = xs_opt_u64("-r", optarg, 0, UINT64_MAX, 0); break;
		case 'i': sample_s = (int)xs_opt_u64("-i", optarg, 1, 3600, 0); break;
		case 'g': growth_pct = (unsigned)xs_opt_u64("-g", optarg, 0, 1000, 0); break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 3600, 0) * 1000; break;
		case 'h':
			printf("usage: xs-load -s|-c ADDR [-a ADDR] [-p PORT] [-n CONNS] [-T THREADS] "
			       "[-d SECONDS] [-r SEED] [-i SAMPLE_S] [-g GROWTH_PCT] [-K 0|1] [-t S]\n");
			return 0;
		default: xs_usage_error("bad option");
		}
	}
	if (!is_server && !addr)
		xs_usage_error("-s or -c ADDR");
	if (nthreads > nconns)
		nthreads = nconns;
	xs_require_ddp();
	raise_nofile();
	conns = calloc((size_t)nconns, sizeof *conns);
	int lfd = -1;
	if (is_server) {
		int p;
		lfd = xs_listen(addr, port, &o, &p);
	}
	uint64_t t0 = xs_now_ns();
	for (int i = 0; i < nconns; i++) {
		struct conn *c = &conns[i];
		c->rbuf = xs_alloc((size_t)NRECV * RBUF);
		c->sbuf = xs_alloc(RBUF);
		c->wbuf = xs_alloc(AREA);
		uint64_t hello[2];
		if (is_server) {
			c->fd = xs_accept(lfd, xs_timeout_ms);
			if (xs_read_full(c->fd, hello, sizeof hello, xs_timeout_ms) || hello[0] != HELLO)
				xs_fatal("server: connection %d: no hello", i);
			c->index = (int)hello[1];
			for (int k = 0; k < NRECV; k++)
				if (post_recv_i(c, k))
					xs_pfatal("server: post_recv");
			c->rarea = xs_alloc(AREA);
			xs_fill(c->rarea, AREA, xs_seed(77, (uint64_t)c->index, 0), 0);
			if (ddp_reg_mr(c->fd, c->wbuf, AREA, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE,
				       &c->ad.wr_stag) ||
			    ddp_reg_mr(c->fd, c->rarea, AREA, DDP_ACCESS_REMOTE_READ, &c->ad.rd_stag))
				xs_pfatal("server: ddp_reg_mr");
			c->ad.wr_addr = (uint64_t)(uintptr_t)c->wbuf;
			c->ad.rd_addr = (uint64_t)(uintptr_t)c->rarea;
			c->ad.index = (uint32_t)c->index;
			memcpy(c->sbuf, &c->ad, sizeof c->ad);
			if (post_send(c, sizeof c->ad, 0))
				xs_pfatal("server: advert");
		} else {
			c->index = i;
			c->fd = xs_connect(addr, port, &o, xs_timeout_ms);
			for (int k = 0; k < NRECV; k++)
				if (post_recv_i(c, k))
					xs_pfatal("client: post_recv");
			hello[0] = HELLO;
			hello[1] = (uint64_t)i;
			if (xs_write_full(c->fd, hello, sizeof hello, xs_timeout_ms))
				xs_pfatal("client: hello");
		}
	}
	if (!is_server) { /* the adverts */
		struct xs_cq *cq = malloc(sizeof *cq);
		for (int i = 0; i < nconns; i++) {
			struct conn *c = &conns[i];
			struct ddp_wc wc;
			xs_cq_init(cq, c->fd);
			if (xs_cq_next(cq, &wc, xs_timeout_ms) != 1 || wc.status != DDP_WC_SUCCESS ||
			    wc.opcode != DDP_WC_OP_RECV || wc.byte_len != sizeof c->ad)
				xs_fatal("client: connection %d: no advert", i);
			memcpy(&c->ad, c->rbuf + wc.wr_id * RBUF, sizeof c->ad);
			if (c->ad.index != (uint32_t)i)
				xs_fatal("client: connection %d: advert for %u", i, c->ad.index);
			if (post_recv_i(c, (int)wc.wr_id))
				xs_pfatal("client: post_recv");
		}
		free(cq);
	} else {
		close(lfd);
	}
	printf("%s: %s: %d DDP connections set up in %.2f s; %d threads, %s\n", xs_prog,
	       is_server ? "server" : "client", nconns, (double)(xs_now_ns() - t0) / 1e9, nthreads,
	       is_server ? "serving until every connection ends" : "running");
	fflush(stdout);

	t_start = xs_now_ns();
	pthread_t st;
	pthread_create(&st, NULL, sampler, NULL);
	struct thr *th = calloc((size_t)nthreads, sizeof *th);
	for (int t = 0; t < nthreads; t++) {
		th[t].id = t;
		pthread_create(&th[t].t, NULL, worker, &th[t]);
	}
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t].t, NULL);
	double run_s = (double)(xs_now_ns() - t_start) / 1e9;
	atomic_store(&stop, 1);
	pthread_join(st, NULL);
	take_sample(); /* the last one, before END / close */
	int flat_bad = check_flat(is_server ? run_s : (double)duration_s);

	if (!is_server) {
		for (int i = 0; i < nconns; i++) {
			struct conn *c = &conns[i];
			struct hdr h = { OP_END, 0, c->seq, 0, 0, 0 };
			memcpy(c->sbuf, &h, sizeof h);
			if (c->state != 2 && post_send(c, HDR, 1) == 0) {
				struct ddp_wc wc;
				/* the END Send's own completion: it is on the wire */
				for (;;) {
					int r = ddp_wait(c->fd, &wc, 1, xs_timeout_ms);
					if (r != 1 || wc.status != DDP_WC_SUCCESS) {
						fail(c, "END: %s", r < 0 ? xs_errname(errno) : "no completion");
						break;
					}
					if (wc.opcode == DDP_WC_OP_SEND)
						break;
				}
			}
			close(c->fd);
		}
	}
	printf("%s: %s: %d connections, %.1f s: %llu Sends, %llu Writes, %llu Reads, %llu bytes "
	       "verified, %d errors\n",
	       xs_prog, is_server ? "server" : "client", nconns, run_s, (unsigned long long)n_ops[0],
	       (unsigned long long)n_ops[1], (unsigned long long)n_ops[2],
	       (unsigned long long)n_bytes, atomic_load(&failed));
	return atomic_load(&failed) || flat_bad ? 1 : 0;
}
