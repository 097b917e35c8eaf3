/* common.c — see common.h. */
#include "common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *xs_prog = "xs";
int xs_verbose;
int xs_timeout_ms = 10000;

void xs_init(const char *argv0)
{
	const char *s = strrchr(argv0, '/');
	xs_prog = s ? s + 1 : argv0;
	setvbuf(stdout, NULL, _IOLBF, 0);
}

const char *xs_errname(int e)
{
	static __thread char buf[32];
	const char *n = strerrorname_np(e);
	if (n)
		return n;
	snprintf(buf, sizeof buf, "errno %d", e);
	return buf;
}

static void vmsg(int with_errno, int e, const char *fmt, va_list ap)
{
	char line[1024];
	int n = snprintf(line, sizeof line, "%s: ", xs_prog);
	if (n < 0 || (size_t)n >= sizeof line)
		n = 0;
	vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	if (with_errno)
		fprintf(stderr, "%s: %s (%s)\n", line, xs_errname(e), strerror(e));
	else
		fprintf(stderr, "%s\n", line);
}

void xs_msg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(0, 0, fmt, ap);
	va_end(ap);
}

void xs_perr(const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vmsg(1, e, fmt, ap);
	va_end(ap);
	errno = e;
}

void xs_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(0, 0, fmt, ap);
	va_end(ap);
	exit(XS_EXIT_FAIL);
}

void xs_pfatal(const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vmsg(1, e, fmt, ap);
	va_end(ap);
	exit(XS_EXIT_FAIL);
}

void xs_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(0, 0, fmt, ap);
	va_end(ap);
	fprintf(stderr, "try '%s -h'\n", xs_prog);
	exit(XS_EXIT_USAGE);
}

void xs_require_ddp(void)
{
	if (!ddp_available()) {
		xs_msg("libexsock.so is not loaded: run under scripts/exsock-run "
		       "(the DDP modes need the library's extension API)");
		exit(XS_EXIT_NOLIB);
	}
	int v = ddp_version();
	if (v < DDP_API_VERSION) {
		xs_msg("libexsock.so implements DDP API version %d, this program needs %d", v,
		       DDP_API_VERSION);
		exit(XS_EXIT_NOLIB);
	}
}

/* ---- parsing ------------------------------------------------------------------------------ */

int xs_parse_u64(const char *s, uint64_t *out, int suffix_ok)
{
	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	uint64_t mul = 1;
	if (*end && suffix_ok) {
		switch (*end) {
		case 'k': case 'K': mul = 1ull << 10; break;
		case 'm': case 'M': mul = 1ull << 20; break;
		case 'g': case 'G': mul = 1ull << 30; break;
		default: return -1;
		}
		end++;
		if (*end == 'i' || *end == 'B') /* KiB, KB */
			end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	}
	if (*end)
		return -1;
	if (v > UINT64_MAX / mul)
		return -1;
	*out = v * mul;
	return 0;
}

uint64_t xs_opt_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, int suffix_ok)
{
	uint64_t v;
	if (xs_parse_u64(s, &v, suffix_ok) != 0)
		xs_usage_error("%s: '%s' is not a number", opt, s);
	if (v < lo || v > hi)
		xs_usage_error("%s: %s is out of range [%llu, %llu]", opt, s, (unsigned long long)lo,
			       (unsigned long long)hi);
	return v;
}

int xs_parse_sizes(const char *opt, const char *s, uint32_t *sizes, int max, uint64_t lo,
		   uint64_t hi)
{
	char *copy = strdup(s);
	if (!copy)
		xs_pfatal("strdup");
	int n = 0;
	char *save = NULL;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(item, '-');
		uint64_t a, b;
		if (dash) {
			*dash = 0;
			if (xs_parse_u64(item, &a, 1) || xs_parse_u64(dash + 1, &b, 1))
				xs_usage_error("%s: bad range '%s-%s'", opt, item, dash + 1);
			if (a > b || a == 0)
				xs_usage_error("%s: bad range '%s-%s'", opt, item, dash + 1);
		} else {
			if (xs_parse_u64(item, &a, 1))
				xs_usage_error("%s: bad size '%s'", opt, item);
			b = a;
		}
		for (uint64_t v = a; v <= b; v *= 2) {
			if (v < lo || v > hi)
				xs_usage_error("%s: size %llu out of range [%llu, %llu]", opt,
					       (unsigned long long)v, (unsigned long long)lo,
					       (unsigned long long)hi);
			if (n >= max)
				xs_usage_error("%s: more than %d sizes", opt, max);
			sizes[n++] = (uint32_t)v;
			if (a == b)
				break;
			if (v * 2 > b && v != b) { /* HI not a power-of-two multiple: include it */
				if (b > hi)
					xs_usage_error("%s: size %llu out of range [%llu, %llu]", opt,
						       (unsigned long long)b, (unsigned long long)lo,
						       (unsigned long long)hi);
				if (n >= max)
					xs_usage_error("%s: more than %d sizes", opt, max);
				sizes[n++] = (uint32_t)b;
				break;
			}
		}
	}
	free(copy);
	if (n == 0)
		xs_usage_error("%s: empty size list", opt);
	return n;
}

const char *xs_fmt_size(uint64_t n, char buf[32])
{
	if (n >= (1u << 20) && n % (1u << 20) == 0)
		snprintf(buf, 32, "%lluM", (unsigned long long)(n >> 20));
	else if (n >= 1024 && n % 1024 == 0)
		snprintf(buf, 32, "%lluK", (unsigned long long)(n >> 10));
	else
		snprintf(buf, 32, "%llu", (unsigned long long)n);
	return buf;
}

/* ---- time ---------------------------------------------------------------------------------- */

uint64_t xs_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xs_deadline(int timeout_ms)
{
	return xs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

int xs_retry_ms(uint64_t *deadline_ns, int timeout_ms)
{
	if (*deadline_ns == 0) {
		*deadline_ns = xs_deadline(timeout_ms);
		return timeout_ms;
	}
	return xs_ms_left(*deadline_ns);
}

int xs_ms_left(uint64_t deadline_ns)
{
	uint64_t now = xs_now_ns();
	if (now >= deadline_ns)
		return 0;
	uint64_t ms = (deadline_ns - now + 999999) / 1000000;
	return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* ---- patterns -------------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t xs_seed(uint64_t a, uint64_t b, uint64_t c)
{
	return mix64(mix64(mix64(a) ^ b) ^ c);
}

static inline uint64_t pat_word(uint64_t seed, uint64_t widx)
{
	return mix64(seed ^ (widx * 0xd6e8feb86659fd93ull));
}

static inline uint8_t pat_byte(uint64_t seed, uint64_t p)
{
	uint64_t w = pat_word(seed, p >> 3);
	return (uint8_t)(w >> ((p & 7) * 8));
}

void xs_fill(void *buf, size_t len, uint64_t seed, uint64_t off)
{
	uint8_t *b = buf;
	size_t i = 0;
	while (i < len && ((off + i) & 7)) {
		b[i] = pat_byte(seed, off + i);
		i++;
	}
	for (; i + 8 <= len; i += 8) {
		uint64_t w = htole64(pat_word(seed, (off + i) >> 3));
		memcpy(b + i, &w, 8);
	}
	for (; i < len; i++)
		b[i] = pat_byte(seed, off + i);
}

static int check_range(const uint8_t *b, size_t from, size_t to, uint64_t seed, uint64_t off,
		       size_t *bad)
{
	size_t i = from;
	while (i < to && ((off + i) & 7)) {
		if (b[i] != pat_byte(seed, off + i))
			goto bad;
		i++;
	}
	for (; i + 8 <= to; i += 8) {
		uint64_t w = htole64(pat_word(seed, (off + i) >> 3)), g;
		memcpy(&g, b + i, 8);
		if (g != w)
			break; /* find the byte below */
	}
	for (; i < to; i++)
		if (b[i] != pat_byte(seed, off + i))
			goto bad;
	return 0;
bad:
	*bad = i;
	return 1;
}

int xs_check(const void *buf, size_t len, uint64_t seed, uint64_t off, size_t *bad)
{
	size_t dummy;
	return check_range(buf, 0, len, seed, off, bad ? bad : &dummy);
}

int xs_check_sampled(const void *buf, size_t len, uint64_t seed, uint64_t off, int samples,
		     size_t *bad, size_t *checked)
{
	size_t dummy, n = 0;
	if (!bad)
		bad = &dummy;
	if (len <= 128 + (size_t)samples * 8) {
		if (checked)
			*checked = len;
		return check_range(buf, 0, len, seed, off, bad);
	}
	if (check_range(buf, 0, 64, seed, off, bad) || check_range(buf, len - 64, len, seed, off, bad))
		goto out_bad;
	n = 128;
	size_t step = (len - 128) / (size_t)(samples + 1);
	for (int s = 1; s <= samples; s++) {
		size_t at = 64 + step * (size_t)s;
		if (at + 8 > len - 64)
			break;
		if (check_range(buf, at, at + 8, seed, off, bad))
			goto out_bad;
		n += 8;
	}
	if (checked)
		*checked = n;
	return 0;
out_bad:
	if (checked)
		*checked = n;
	return 1;
}

void xs_report_mismatch(const char *what, const void *buf, size_t len, uint64_t seed, uint64_t off,
			size_t bad)
{
	const uint8_t *b = buf;
	xs_msg("%s: content mismatch at byte %zu of %zu: expected 0x%02x, got 0x%02x", what, bad, len,
	       pat_byte(seed, off + bad), b[bad]);
	size_t from = bad >= 8 ? bad - 8 : 0, to = bad + 8 < len ? bad + 8 : len;
	fprintf(stderr, "  got:     ");
	for (size_t i = from; i < to; i++)
		fprintf(stderr, "%02x%s", b[i], i == bad ? "*" : " ");
	fprintf(stderr, "\n  expect:  ");
	for (size_t i = from; i < to; i++)
		fprintf(stderr, "%02x%s", pat_byte(seed, off + i), i == bad ? "*" : " ");
	fprintf(stderr, "\n");
}

/* ---- sockets ---------------------------------------------------------------------------------- */

static int set_int(int fd, int opt, const char *name, int v)
{
	if (setsockopt(fd, SOL_DDP, opt, &v, sizeof v) == 0)
		return 0;
	if (errno == ENOPROTOOPT)
		xs_msg("setsockopt(SOL_DDP, %s): ENOPROTOOPT: libexsock.so is not loaded or has "
		       "no DDP support: run under scripts/exsock-run", name);
	else
		xs_perr("setsockopt(SOL_DDP, %s, %d)", name, v);
	return -1;
}

int xs_ddp_apply(int fd, const struct xs_ddpopt *o)
{
	if (!o || !o->ddp)
		return 0;
	if (set_int(fd, DDP_MODE, "DDP_MODE", 1))
		return -1;
	if (o->mpa_rev && set_int(fd, DDP_MPA_REV, "DDP_MPA_REV", o->mpa_rev))
		return -1;
	if (o->crc >= 0 && set_int(fd, DDP_CRC, "DDP_CRC", o->crc))
		return -1;
	if (o->markers >= 0 && set_int(fd, DDP_MARKERS, "DDP_MARKERS", o->markers))
		return -1;
	if (o->ird && set_int(fd, DDP_IRD, "DDP_IRD", o->ird))
		return -1;
	if (o->ord && set_int(fd, DDP_ORD, "DDP_ORD", o->ord))
		return -1;
	/* Options without a command-line flag, from the environment (as xs-rping reads them):
	 * XS_MPA_REV=1|2, XS_MARKERS=0|1, XS_P2P=DDP_RTR_* bits, XS_MARKERS_ALLOW=0|1. */
	const char *env;
	if (!o->mpa_rev && (env = getenv("XS_MPA_REV")) && *env &&
	    set_int(fd, DDP_MPA_REV, "DDP_MPA_REV", atoi(env)))
		return -1;
	if (o->markers < 0 && (env = getenv("XS_MARKERS")) && *env &&
	    set_int(fd, DDP_MARKERS, "DDP_MARKERS", atoi(env)))
		return -1;
	if ((env = getenv("XS_P2P")) && *env && set_int(fd, DDP_P2P, "DDP_P2P", atoi(env)))
		return -1;
	if ((env = getenv("XS_MARKERS_ALLOW")) && *env &&
	    set_int(fd, DDP_MARKERS_ALLOW, "DDP_MARKERS_ALLOW", atoi(env)))
		return -1;
	return 0;
}

void xs_connect_settle(void)
{
	const char *env = getenv("XS_CONNECT_SETTLE_MS");
	if (!env || !*env)
		return;
	uint64_t ms = xs_opt_u64("XS_CONNECT_SETTLE_MS", env, 0, 10000, 0);
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void nodelay(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
		xs_perr("setsockopt(TCP_NODELAY) (continuing)");
}

static struct addrinfo *resolve(const char *addr, const char *port, int passive)
{
	struct addrinfo hints = { 0 }, *res = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	if (passive && (!addr || !*addr))
		hints.ai_family = AF_INET;
	int r = getaddrinfo(addr && *addr ? addr : NULL, port, &hints, &res);
	if (r != 0)
		xs_fatal("cannot resolve %s:%s: %s", addr ? addr : "*", port, gai_strerror(r));
	return res;
}

int xs_listen(const char *addr, const char *port, const struct xs_ddpopt *o, int *port_out)
{
	struct addrinfo *res = resolve(addr, port, 1);
	int fd = socket(res->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		xs_pfatal("socket");
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
		xs_pfatal("setsockopt(SO_REUSEADDR)");
	if (xs_ddp_apply(fd, o) != 0)
		exit(XS_EXIT_FAIL);
	if (bind(fd, res->ai_addr, res->ai_addrlen) != 0)
		xs_pfatal("bind %s:%s", addr && *addr ? addr : "*", port);
	freeaddrinfo(res);
	if (listen(fd, 64) != 0)
		xs_pfatal("listen");
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		xs_pfatal("getsockname");
	char host[NI_MAXHOST], serv[NI_MAXSERV];
	if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv,
			NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		xs_fatal("getnameinfo failed");
	if (port_out)
		*port_out = atoi(serv);
	printf("%s: listening on %s:%s (%s)\n", xs_prog, host, serv, o && o->ddp ? "DDP" : "TCP");
	fflush(stdout);
	return fd;
}

int xs_accept(int lfd, int timeout_ms)
{
	uint64_t dl = xs_deadline(timeout_ms);
	for (;;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int r = poll(&p, 1, xs_ms_left(dl));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			xs_pfatal("poll(listener)");
		if (r == 0)
			xs_fatal("no connection within %d ms (accept timed out)", timeout_ms);
		int c = accept(lfd, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			xs_pfatal("accept");
		}
		nodelay(c);
		return c;
	}
}

int xs_connect(const char *addr, const char *port, const struct xs_ddpopt *o, int timeout_ms)
{
	uint64_t dl = xs_deadline(timeout_ms);
	struct addrinfo *res = resolve(addr, port, 0);
	for (;;) {
		int fd = socket(res->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			xs_pfatal("socket");
		if (xs_ddp_apply(fd, o) != 0)
			exit(XS_EXIT_FAIL);
		int r;
		do
			r = connect(fd, res->ai_addr, res->ai_addrlen);
		while (r != 0 && errno == EINTR);
		if (r == 0) {
			freeaddrinfo(res);
			nodelay(fd);
			return fd;
		}
		int e = errno;
		close(fd);
		if (e == ECONNREFUSED && xs_ms_left(dl) > 0) {
			/* The server is not listening yet: bounded polling of a real condition. */
			struct timespec ts = { 0, 20 * 1000000 };
			nanosleep(&ts, NULL);
			continue;
		}
		errno = e;
		xs_pfatal("connect to %s:%s", addr, port);
	}
}

int xs_print_conn_info(int fd, const char *who)
{
	struct ddp_conn_info ci;
	socklen_t len = sizeof ci;
	memset(&ci, 0, sizeof ci);
	if (getsockopt(fd, SOL_DDP, DDP_CONN_INFO, &ci, &len) != 0) {
		xs_perr("getsockopt(SOL_DDP, DDP_CONN_INFO)");
		return -1;
	}
	if (xs_verbose)
		printf("%s: %s: MPA rev %u, CRC %s, markers tx %u rx %u, p2p %u, %s, state %u, "
		       "IRD %u ORD %u, MULPDU %u, PD %u\n",
		       xs_prog, who, ci.mpa_rev, ci.crc ? "on" : "off", ci.markers_tx,
		       ci.markers_rx, ci.p2p, ci.initiator ? "initiator" : "responder", ci.state,
		       ci.ird, ci.ord, ci.mulpdu, ci.pd);
	return 0;
}

static int wait_fd(int fd, short ev, int timeout_ms)
{
	/* The clock is read only when a wait is repeated (xs_retry_ms): a round trip's waits
	 * read none. */
	uint64_t dl = 0;
	int ms = timeout_ms;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = ev };
		int r = poll(&p, 1, ms);
		if (r > 0)
			return 0;
		if (r == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (errno != EINTR)
			return -1;
		ms = xs_retry_ms(&dl, timeout_ms);
	}
}

int xs_read_full(int fd, void *buf, size_t n, int timeout_ms)
{
	size_t got = 0;
	while (got < n) {
		if (wait_fd(fd, POLLIN, timeout_ms) != 0)
			return -1;
		ssize_t r = recv(fd, (char *)buf + got, n - got, MSG_DONTWAIT);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0) {
			errno = EPIPE; /* EOF before n bytes */
			return -1;
		}
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			continue;
		return -1;
	}
	return 0;
}

int xs_write_full(int fd, const void *buf, size_t n, int timeout_ms)
{
	size_t put = 0;
	while (put < n) {
		if (wait_fd(fd, POLLOUT, timeout_ms) != 0)
			return -1;
		ssize_t r = send(fd, (const char *)buf + put, n - put, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r >= 0) {
			put += (size_t)r;
			continue;
		}
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			continue;
		return -1;
	}
	return 0;
}

/* ---- completions ----------------------------------------------------------------------------- */

void xs_cq_init(struct xs_cq *cq, int fd)
{
	cq->fd = fd;
	cq->head = cq->count = 0;
}

/* Pull completions from the library into the stash; waits up to timeout_ms for one.
 * ddp_wait writes them into the stash itself, and the clock is read only if the wait is
 * interrupted (xs_retry_ms). */
static int cq_pull(struct xs_cq *cq, int timeout_ms)
{
	if (cq->count == XS_CQ_STASH)
		return 0;
	if (cq->count == 0)
		cq->head = 0;
	int tail = (cq->head + cq->count) % XS_CQ_STASH;
	int max = tail < cq->head ? cq->head - tail : XS_CQ_STASH - tail; /* (room in one piece) */
	if (max > 64)
		max = 64;
	uint64_t dl = 0;
	int ms = timeout_ms;
	for (;;) {
		int n = ddp_wait(cq->fd, &cq->wc[tail], max, ms);
		if (n < 0 && errno == EINTR) {
			ms = xs_retry_ms(&dl, timeout_ms);
			continue;
		}
		if (n < 0)
			return -1;
		cq->count += n;
		return n;
	}
}

int xs_cq_next(struct xs_cq *cq, struct ddp_wc *wc, int timeout_ms)
{
	if (cq->count == 0) {
		int n = cq_pull(cq, timeout_ms);
		if (n <= 0)
			return n;
	}
	*wc = cq->wc[cq->head];
	cq->head = (cq->head + 1) % XS_CQ_STASH;
	cq->count--;
	return 1;
}

const char *xs_wc_status_str(uint32_t s)
{
	switch (s) {
	case DDP_WC_SUCCESS: return "SUCCESS";
	case DDP_WC_FLUSH_ERR: return "FLUSH_ERR";
	case DDP_WC_LOC_LEN_ERR: return "LOC_LEN_ERR";
	case DDP_WC_LOC_PROT_ERR: return "LOC_PROT_ERR";
	case DDP_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
	case DDP_WC_REM_OP_ERR: return "REM_OP_ERR";
	case DDP_WC_FATAL_ERR: return "FATAL_ERR";
	default: return "UNKNOWN_STATUS";
	}
}

const char *xs_wc_opcode_str(uint32_t op)
{
	switch (op) {
	case DDP_WC_OP_SEND: return "SEND";
	case DDP_WC_OP_WRITE: return "WRITE";
	case DDP_WC_OP_READ: return "READ";
	case DDP_WC_OP_RECV: return "RECV";
	default: return "UNKNOWN_OP";
	}
}

void xs_wc_describe(const struct ddp_wc *wc, char *buf, size_t len)
{
	snprintf(buf, len, "%s wr_id %llu status %s (%u) len %u vendor_err 0x%06x%s",
		 xs_wc_opcode_str(wc->opcode), (unsigned long long)wc->wr_id,
		 xs_wc_status_str(wc->status), wc->status, wc->byte_len, wc->vendor_err,
		 wc->flags & DDP_WC_WITH_INV ? " with-inv" : "");
}

void xs_wc_complain(const char *what, const struct ddp_wc *wc)
{
	char d[160];
	xs_wc_describe(wc, d, sizeof d);
	xs_msg("%s: %s", what, d);
}

#define POST_RETRY(call)                                                                      \
	do {                                                                                  \
		uint64_t dl_ = 0; /* (the clock only once the queue was full) */               \
		for (;;) {                                                                    \
			if ((call) == 0)                                                      \
				return 0;                                                     \
			if (errno == EINTR)                                                   \
				continue;                                                     \
			if (errno != EAGAIN)                                                  \
				return -1;                                                    \
			int ms_ = xs_retry_ms(&dl_, xs_timeout_ms);                           \
			if (ms_ == 0 || cq->count == XS_CQ_STASH) {                           \
				errno = ETIMEDOUT;                                            \
				return -1;                                                    \
			}                                                                     \
			if (cq_pull(cq, ms_ < 100 ? ms_ : 100) < 0)                           \
				return -1;                                                    \
		}                                                                             \
	} while (0)

int xs_post_send(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len, int flags)
{
	struct iovec iov = { buf, len };
	POST_RETRY(ddp_post_send(cq->fd, wr_id, &iov, 1, flags));
}

int xs_post_recv(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len)
{
	struct iovec iov = { buf, len };
	POST_RETRY(ddp_post_recv(cq->fd, wr_id, &iov, 1));
}

int xs_post_write(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len, uint32_t rstag,
		  uint64_t rto, int flags)
{
	struct iovec iov = { buf, len };
	POST_RETRY(ddp_post_write(cq->fd, wr_id, &iov, 1, rstag, rto, flags));
}

int xs_post_read(struct xs_cq *cq, uint64_t wr_id, void *buf, size_t len, uint32_t rstag,
		 uint64_t rto, int flags)
{
	struct iovec iov = { buf, len };
	POST_RETRY(ddp_post_read(cq->fd, wr_id, &iov, 1, rstag, rto, flags));
}

void *xs_alloc(size_t len)
{
	void *p = NULL;
	size_t l = (len + 4095) & ~(size_t)4095;
	if (l == 0)
		l = 4096;
	int r = posix_memalign(&p, 4096, l);
	if (r != 0) {
		errno = r;
		xs_pfatal("cannot allocate %zu bytes", len);
	}
	memset(p, 0, l);
	return p;
}

/* ---- DDP options ------------------------------------------------------------------------------- */

int xs_env_crc(int dflt)
{
	const char *e = getenv("XS_CRC");
	return e && *e ? (int)xs_opt_u64("XS_CRC", e, 0, 1, 0) : dflt;
}

/* ---- command line ------------------------------------------------------------------------------ */

void xs_check_args(int argc, char **argv, int is_server, const char *addr, const char *port)
{
	if (optind != argc)
		xs_usage_error("unexpected argument '%s'", argv[optind]);
	if (!is_server && !addr)
		xs_usage_error("either -s (server) or -c ADDR (client) is required");
	if (!is_server && !strcmp(port, "0"))
		xs_usage_error("-p 0 is only for the server");
}

/* ---- an advertised region ------------------------------------------------------------------------ */

#define XS_DONE_MAGIC 0x646f6e65u /* "done" */

struct region_wire {
	uint64_t addr; /* BE */
	uint32_t stag; /* BE */
	uint32_t len;  /* BE */
};
_Static_assert(sizeof(struct region_wire) == 16, "rping_rdma_info layout");

int xs_send_region(int fd, const void *addr, uint32_t stag, size_t len)
{
	struct region_wire w = { htobe64((uint64_t)(uintptr_t)addr), htonl(stag),
				 htonl((uint32_t)len) };
	if (xs_write_full(fd, &w, sizeof w, xs_timeout_ms) != 0) {
		xs_perr("write(advertisement)");
		return -1;
	}
	return 0;
}

int xs_recv_region(int fd, struct xs_region *r, size_t need)
{
	struct region_wire w;
	if (xs_read_full(fd, &w, sizeof w, xs_timeout_ms) != 0) {
		xs_perr("reading the peer's advertisement");
		return -1;
	}
	r->addr = be64toh(w.addr);
	r->stag = ntohl(w.stag);
	r->len = ntohl(w.len);
	if (r->len < need) {
		xs_msg("the peer's region has %u bytes, %zu needed", r->len, need);
		return -1;
	}
	return 0;
}

int xs_serve_reads_until_done(int fd, const uint8_t *region, size_t len, uint32_t stag,
			      uint64_t seed, int bound_ms)
{
	uint32_t done;
	if (xs_read_full(fd, &done, sizeof done, bound_ms) != 0 || ntohl(done) != XS_DONE_MAGIC) {
		xs_perr("waiting for the client's done (bound %d ms)", bound_ms);
		return -1;
	}
	if (ddp_dereg_mr(fd, stag) != 0) {
		xs_perr("ddp_dereg_mr");
		return -1;
	}
	if (xs_check(region, len, seed, 0, NULL)) {
		xs_msg("server: the region changed (it is read only to the peer)");
		return -1;
	}
	if (xs_write_full(fd, &done, sizeof done, xs_timeout_ms) != 0) {
		xs_perr("write(done)");
		return -1;
	}
	printf("%s: server: region of %zu bytes read by the client, intact\n", xs_prog, len);
	return 0;
}

int xs_reads_done(int fd)
{
	uint32_t done = htonl(XS_DONE_MAGIC);
	if (xs_write_full(fd, &done, sizeof done, xs_timeout_ms) != 0 ||
	    xs_read_full(fd, &done, sizeof done, xs_timeout_ms) != 0 ||
	    ntohl(done) != XS_DONE_MAGIC) {
		xs_perr("the closing exchange");
		return -1;
	}
	return 0;
}

/* ---- latency samples ------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void xs_print_lat_header(const char *mode, const char *what)
{
	printf("%-8s %8s %12s %12s %12s %12s   (%s mode, %s, in microseconds)\n", "size", "iters",
	       "median_us", "p99_us", "min_us", "mean_us", mode, what);
}

void xs_print_lat_row(uint32_t size, uint64_t *ns, uint64_t n)
{
	if (n == 0)
		return;
	qsort(ns, n, sizeof *ns, cmp_u64);
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += ns[i];
	uint64_t p99i = (n * 99 + 99) / 100;
	if (p99i > 0)
		p99i--;
	if (p99i >= n)
		p99i = n - 1;
	char sb[32];
	printf("%-8s %8llu %12.2f %12.2f %12.2f %12.2f\n", xs_fmt_size(size, sb), (unsigned long long)n,
	       ns[(n - 1) / 2] / 1e3, ns[p99i] / 1e3, ns[0] / 1e3, (double)sum / (double)n / 1e3);
}

/* ---- plan ------------------------------------------------------------------------------------- */

const char *xs_mode_name(uint32_t m)
{
	switch (m) {
	case XS_TCP: return "tcp";
	case XS_DDP: return "ddp";
	case XS_EXT: return "ext";
	case XS_WRITE: return "write";
	case XS_READ: return "read";
	default: return "?";
	}
}

enum xs_mode xs_parse_mode(const char *s, int allow_write)
{
	if (!strcmp(s, "tcp"))
		return XS_TCP;
	if (!strcmp(s, "ddp"))
		return XS_DDP;
	if (!strcmp(s, "ext"))
		return XS_EXT;
	if (allow_write && !strcmp(s, "write"))
		return XS_WRITE;
	xs_usage_error("-m: unknown mode '%s' (tcp, ddp, ext%s)", s, allow_write ? ", write" : "");
}

static void plan_swap(struct xs_plan *d, const struct xs_plan *s, int to_wire)
{
	uint32_t (*c32)(uint32_t) = to_wire ? htonl : ntohl;
	d->magic = c32(s->magic);
	d->prog = c32(s->prog);
	d->mode = c32(s->mode);
	d->nsizes = c32(s->nsizes);
	d->iters = c32(s->iters);
	d->warmup = c32(s->warmup);
	d->window = c32(s->window);
	d->flags = c32(s->flags);
	d->conn_index = c32(s->conn_index);
	d->nconns = c32(s->nconns);
	d->seed = to_wire ? htobe64(s->seed) : be64toh(s->seed);
	d->duration_ns = to_wire ? htobe64(s->duration_ns) : be64toh(s->duration_ns);
	d->max_ops = c32(s->max_ops);
	d->pad = 0;
	for (int i = 0; i < XS_MAX_SIZES; i++)
		d->sizes[i] = c32(s->sizes[i]);
}

int xs_send_plan(int fd, const struct xs_plan *p)
{
	struct xs_plan w;
	plan_swap(&w, p, 1);
	if (xs_write_full(fd, &w, sizeof w, xs_timeout_ms) != 0) {
		xs_perr("sending the test plan");
		return -1;
	}
	return 0;
}

int xs_recv_plan(int fd, struct xs_plan *p, uint32_t prog)
{
	struct xs_plan w;
	if (xs_read_full(fd, &w, sizeof w, xs_timeout_ms) != 0) {
		xs_perr("receiving the test plan");
		return -1;
	}
	plan_swap(p, &w, 0);
	if (p->magic != XS_PLAN_MAGIC) {
		xs_msg("the client's test plan has a bad magic 0x%08x (not an xs-* client?)", p->magic);
		return -1;
	}
	if (p->prog != prog) {
		xs_msg("the client is a different xs-* program ('%c', expected '%c')", (char)p->prog,
		       (char)prog);
		return -1;
	}
	if (p->nsizes == 0 || p->nsizes > XS_MAX_SIZES) {
		xs_msg("bad test plan: %u sizes", p->nsizes);
		return -1;
	}
	return 0;
}
