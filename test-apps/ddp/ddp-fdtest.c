/*
 * ddp-fdtest — a DDP socket's fd must keep behaving like a TCP socket under everything an
 * unmodified program does (DESIGN.md "Engine and fd model", docs/engine.md "The fd model").
 *
 *   ddp-fdtest [-t SECONDS] [-v] [CASE...]     run the cases (default: all), one PASS/FAIL line each
 *   ddp-fdtest -l                              list the cases
 *   ddp-fdtest -T [CASE...]                    the baseline: the same cases on plain TCP sockets
 *                                              (no library needed; DDP-only checks skipped)
 *
 * Every case runs in its own process (this program re-executed with --case NAME, in its own
 * process group), killed after -t SECONDS (default 30): a hang or a crash fails that case only.
 * Every socket is a DDP socket over 127.0.0.1 (both ends in the case's process: threads, or a
 * forked child where the case is about fork); every transfer's content is a known pattern,
 * checked byte for byte. Every single wait is bounded (5 s). Run it under scripts/exsock-run.
 *
 * exit: 0 every case passed, 1 a case failed, 2 usage, 77 libexsock.so (DDP API) not loaded.
 */
#include "common.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 5000 /* bound of every single wait inside a case */

static const char *cur_case = "?";
/* -T: the same cases on plain TCP sockets (DDP-only checks skipped): the baseline that shows
 * the expectations are Linux TCP behaviour. Passed to the case processes as DDP_FDTEST_TCP=1. */
static int tcp_mode;
#define CASE_SKIP 77

/* ---- failure reporting --------------------------------------------------------------------- */

static int fail_(int line, int with_errno, int e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail_(int line, int with_errno, int e, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (with_errno)
		printf("  %s: %s: %s (%s) [line %d]\n", cur_case, msg, xs_errname(e), strerror(e), line);
	else
		printf("  %s: %s [line %d]\n", cur_case, msg, line);
	fflush(stdout);
	return -1;
}
/* REQ(cond, fmt...): the case fails with the message unless cond. REQE: the same, with errno. */
#define REQ(cond, ...)                                                                          \
	do {                                                                                    \
		if (!(cond))                                                                    \
			return fail_(__LINE__, 0, 0, __VA_ARGS__);                              \
	} while (0)
#define REQE(cond, ...)                                                                         \
	do {                                                                                    \
		int e_ = errno;                                                                 \
		if (!(cond))                                                                    \
			return fail_(__LINE__, 1, e_, __VA_ARGS__);                             \
	} while (0)
#define TRY(call)                                                                               \
	do {                                                                                    \
		if ((call) != 0)                                                                \
			return -1;                                                              \
	} while (0)

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	if (!xs_verbose)
		return;
	va_list ap;
	va_start(ap, fmt);
	printf("  %s: ", cur_case);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
}

static void sleep_ms(int ms) /* only for pacing and for bounded polling of a condition */
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- sockets ------------------------------------------------------------------------------- */

struct dopt {
	int crc, markers, ird, ord, pd; /* -1: leave the default */
	const char *pdata;              /* DDP_PRIVATE_DATA or NULL */
};
#define DOPT_DEFAULT { -1, -1, -1, -1, -1, NULL }

static int set_ddp_int(int fd, int opt, int v, const char *name)
{
	if (setsockopt(fd, SOL_DDP, opt, &v, sizeof v) != 0)
		return fail_(__LINE__, 1, errno, "setsockopt(SOL_DDP, %s, %d)", name, v);
	return 0;
}

/* A DDP-mode TCP socket with the options (before connect/listen). */
static int ddp_sock(const struct dopt *o)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return fail_(__LINE__, 1, errno, "socket");
	if (tcp_mode)
		return fd;
	if (set_ddp_int(fd, DDP_MODE, 1, "DDP_MODE") || set_ddp_int(fd, DDP_MPA_TIMEOUT_MS, WAIT_MS, "DDP_MPA_TIMEOUT_MS"))
		return -1;
	if (o) {
		if (o->crc >= 0 && set_ddp_int(fd, DDP_CRC, o->crc, "DDP_CRC"))
			return -1;
		if (o->markers >= 0 && set_ddp_int(fd, DDP_MARKERS, o->markers, "DDP_MARKERS"))
			return -1;
		if (o->ird >= 0 && set_ddp_int(fd, DDP_IRD, o->ird, "DDP_IRD"))
			return -1;
		if (o->ord >= 0 && set_ddp_int(fd, DDP_ORD, o->ord, "DDP_ORD"))
			return -1;
		if (o->pd >= 0 && set_ddp_int(fd, DDP_PD, o->pd, "DDP_PD"))
			return -1;
		if (o->pdata && setsockopt(fd, SOL_DDP, DDP_PRIVATE_DATA, o->pdata,
					   (socklen_t)strlen(o->pdata)) != 0)
			return fail_(__LINE__, 1, errno, "setsockopt(SOL_DDP, DDP_PRIVATE_DATA)");
	}
	return fd;
}

/* A listener on 127.0.0.1, ephemeral port; ddp: DDP mode with the options, else plain TCP. */
static int mk_listener(int ddp, const struct dopt *o, int *port)
{
	int fd = ddp ? ddp_sock(o) : socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return ddp ? -1 : fail_(__LINE__, 1, errno, "socket");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0)
		return fail_(__LINE__, 1, errno, "bind/listen");
	socklen_t l = sizeof a;
	if (getsockname(fd, (struct sockaddr *)&a, &l) != 0)
		return fail_(__LINE__, 1, errno, "getsockname(listener)");
	*port = ntohs(a.sin_port);
	return fd;
}

static struct sockaddr_in lo_addr(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return a;
}

/* accept (or accept4 with flags >= 0), bounded by WAIT_MS via poll on the listener. */
static int acc_flags(int lfd, int flags)
{
	uint64_t dl = xs_deadline(WAIT_MS);
	for (;;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int r = poll(&p, 1, xs_ms_left(dl));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return fail_(__LINE__, 1, errno, "poll(listener)");
		if (r == 0)
			return fail_(__LINE__, 0, 0, "no connection to accept within %d ms", WAIT_MS);
		int c = flags >= 0 ? accept4(lfd, NULL, NULL, flags) : accept(lfd, NULL, NULL);
		if (c >= 0)
			return c;
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			return fail_(__LINE__, 1, errno, "accept");
	}
}
static int acc(int lfd) { return acc_flags(lfd, -1); }

struct conn_arg {
	int port, ddp;
	const struct dopt *o;
	int fd, err;
};
static void *connector(void *p)
{
	struct conn_arg *a = p;
	a->fd = -1;
	int fd = a->ddp ? ddp_sock(a->o) : socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0) {
		a->err = errno ? errno : EINVAL;
		return NULL;
	}
	struct sockaddr_in sa = lo_addr(a->port);
	int r;
	do
		r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	while (r != 0 && errno == EINTR);
	if (r != 0) {
		a->err = errno;
		close(fd);
		return NULL;
	}
	a->fd = fd;
	return NULL;
}

/* Blocking connect from a thread to lfd's port while this thread accepts (both ends of a DDP
 * connection need each other for the MPA exchange). */
static int connect_accept(int lfd, int port, int ddp, const struct dopt *co, int *cli, int *srv)
{
	struct conn_arg a = { .port = port, .ddp = ddp, .o = co, .fd = -1 };
	pthread_t t;
	if (pthread_create(&t, NULL, connector, &a) != 0)
		return fail_(__LINE__, 0, 0, "pthread_create");
	int s = acc(lfd);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += WAIT_MS / 1000 + 2;
	int jr = pthread_timedjoin_np(t, NULL, &dl);
	if (jr != 0)
		return fail_(__LINE__, 0, 0, "connect() did not return within %d ms", WAIT_MS + 2000);
	if (a.fd < 0)
		return fail_(__LINE__, 1, a.err, "connect to 127.0.0.1:%d", port);
	if (s < 0)
		return -1;
	*cli = a.fd;
	*srv = s;
	return 0;
}

/* A connected pair: *cli (connect side, MPA initiator) and *srv (accepted). */
static int mkpair_o(int ddp, const struct dopt *lo, const struct dopt *co, int *cli, int *srv)
{
	int port, lfd = mk_listener(ddp, lo, &port);
	if (lfd < 0)
		return -1;
	int r = connect_accept(lfd, port, ddp, co, cli, srv);
	close(lfd);
	return r;
}
static int mkpair(int *cli, int *srv) { return mkpair_o(1, NULL, NULL, cli, srv); }

/* ---- transfers with content checks ------------------------------------------------------------ */

static int wait_ev(int fd, short ev, int ms)
{
	uint64_t dl = xs_deadline(ms);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = ev };
		int r = poll(&p, 1, xs_ms_left(dl));
		if (r > 0)
			return p.revents;
		if (r == 0)
			return 0;
		if (errno != EINTR)
			return -1;
	}
}

/* Writes n bytes of pattern (seed, off..off+n) to fd; poll-bounded. */
static int put(int fd, size_t n, uint64_t seed, uint64_t off, const char *what)
{
	uint8_t *b = malloc(n ? n : 1);
	if (!b)
		return fail_(__LINE__, 0, 0, "malloc");
	xs_fill(b, n, seed, off);
	size_t done = 0;
	while (done < n) {
		int ev = wait_ev(fd, POLLOUT, WAIT_MS);
		if (ev <= 0) {
			free(b);
			return fail_(__LINE__, ev < 0, errno, "%s: not writable within %d ms (%zu of %zu bytes written)",
				     what, WAIT_MS, done, n);
		}
		ssize_t r = write(fd, b + done, n - done);
		if (r > 0)
			done += (size_t)r;
		else if (r < 0 && errno != EAGAIN && errno != EINTR) {
			int e = errno;
			free(b);
			return fail_(__LINE__, 1, e, "%s: write (%zu of %zu bytes written)", what, done, n);
		}
	}
	free(b);
	return 0;
}

/* Reads exactly n bytes from fd and checks them against pattern (seed, off); poll-bounded. */
static int get(int fd, size_t n, uint64_t seed, uint64_t off, const char *what)
{
	uint8_t *b = malloc(n ? n : 1);
	if (!b)
		return fail_(__LINE__, 0, 0, "malloc");
	size_t got = 0;
	while (got < n) {
		int ev = wait_ev(fd, POLLIN, WAIT_MS);
		if (ev <= 0) {
			free(b);
			return fail_(__LINE__, ev < 0, errno, "%s: no data within %d ms (%zu of %zu bytes read)",
				     what, WAIT_MS, got, n);
		}
		ssize_t r = read(fd, b + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else if (r == 0) {
			free(b);
			return fail_(__LINE__, 0, 0, "%s: EOF after %zu of %zu bytes", what, got, n);
		} else if (errno != EAGAIN && errno != EINTR) {
			int e = errno;
			free(b);
			return fail_(__LINE__, 1, e, "%s: read (%zu of %zu bytes read)", what, got, n);
		}
	}
	size_t bad;
	if (xs_check(b, n, seed, off, &bad)) {
		xs_report_mismatch(what, b, n, seed, off, bad);
		free(b);
		return fail_(__LINE__, 0, 0, "%s: content mismatch at byte %zu of %zu", what, bad, n);
	}
	free(b);
	return 0;
}

static uint64_t seed_n;
/* from -> to: n bytes (n <= 64 KiB: fits the buffers, one thread is enough), verified. */
static int xfer(int from, int to, size_t n, const char *what)
{
	uint64_t seed = xs_seed(0xfd7e57, ++seed_n, n);
	TRY(put(from, n, seed, 0, what));
	return get(to, n, seed, 0, what);
}

/* Both directions, then one more each way: the connection carries verified data. */
static int both_ways(int a, int b, const char *what)
{
	char w[128];
	snprintf(w, sizeof w, "%s (a->b)", what);
	TRY(xfer(a, b, 4099, w));
	snprintf(w, sizeof w, "%s (b->a)", what);
	return xfer(b, a, 7001, w);
}

/* Waits for EOF on fd (after no more data): read returns 0 within WAIT_MS. */
static int expect_eof(int fd, const char *what)
{
	int ev = wait_ev(fd, POLLIN, WAIT_MS);
	REQ(ev > 0, "%s: no EOF (not readable) within %d ms", what, WAIT_MS);
	char c;
	ssize_t r = read(fd, &c, 1);
	REQE(r == 0, "%s: expected EOF (read 0), read returned %zd", what, r);
	return 0;
}

static int get_info(int fd, struct ddp_conn_info *ci)
{
	socklen_t l = sizeof *ci;
	memset(ci, 0, sizeof *ci);
	REQE(getsockopt(fd, SOL_DDP, DDP_CONN_INFO, ci, &l) == 0, "getsockopt(DDP_CONN_INFO)");
	REQ(l == sizeof *ci, "DDP_CONN_INFO: length %u, expected %zu", l, sizeof *ci);
	return 0;
}

static int set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	REQE(fl >= 0, "fcntl(F_GETFL)");
	fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	REQE(fcntl(fd, F_SETFL, fl) == 0, "fcntl(F_SETFL)");
	return 0;
}

/* Waits until the thread that set *entered (after *tid) sleeps in the kernel: it entered the
 * blocking call. Bounded. */
static int wait_blocked(volatile pid_t *tid, volatile int *entered, const char *what)
{
	uint64_t dl = xs_deadline(WAIT_MS);
	while (xs_ms_left(dl) > 0) {
		if (__atomic_load_n(entered, __ATOMIC_ACQUIRE)) {
			char path[64], buf[512];
			snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)*tid);
			FILE *f = fopen(path, "r");
			if (f) {
				size_t n = fread(buf, 1, sizeof buf - 1, f);
				fclose(f);
				buf[n] = 0;
				char *p = strrchr(buf, ')');
				if (p && p[1] == ' ' && (p[2] == 'S' || p[2] == 'D'))
					return 0;
			}
		}
		sleep_ms(1); /* bounded polling of the thread's state */
	}
	return fail_(__LINE__, 0, 0, "%s: the thread did not block within %d ms", what, WAIT_MS);
}

static int timed_join(pthread_t t, int ms, const char *what)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	int r = pthread_timedjoin_np(t, NULL, &dl);
	REQ(r == 0, "%s: the thread did not finish within %d ms (hang)", what, ms);
	return 0;
}

/* ---- cases ------------------------------------------------------------------------------------- */

static int outq_drains(int fd, int *q, int *nsd);

/* How readiness is asked in pieces(): poll or select, on one fd, with a timeout in ms. */
static int ready_in(int fd, int use_select, int ms)
{
	if (use_select) {
		fd_set rd;
		FD_ZERO(&rd);
		FD_SET(fd, &rd);
		struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
		int r = select(fd + 1, &rd, NULL, NULL, &tv);
		return r < 0 ? -1 : r == 1 && FD_ISSET(fd, &rd);
	}
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, ms);
	return r < 0 ? -1 : r == 1 && (p.revents & POLLIN);
}

/* Reading in pieces smaller than what has arrived: after each partial read the fd must still be
 * readable at once (timeout 0), as a TCP socket's is, until the last byte; then not. (Under the
 * library the rest is held in the engine after the first inline receive and reported by the
 * wait itself.) Content checked. */
static int pieces(int c, int s, int use_select, uint64_t seed)
{
	const size_t total = 48000; /* within a fresh TCP receive window: all of it is acknowledged */
	TRY(put(s, total, seed, 0, "writer"));
	int q, nsd;
	REQ(outq_drains(s, &q, &nsd), "the peer's TCP did not acknowledge everything (SIOCOUTQ %d)", q);
	const char *how = use_select ? "select" : "poll";
	int r = ready_in(c, use_select, WAIT_MS);
	REQ(r == 1, "%s: not readable after the peer wrote (%d)", how, r);
	size_t got = 0, piece = 997;
	while (got < total) {
		size_t n = total - got < piece ? total - got : piece;
		TRY(get(c, n, seed, got, "piece"));
		got += n;
		piece = piece * 3 % 9001 + 100;
		r = ready_in(c, use_select, 0);
		REQ(r == (got < total), "%s(timeout 0) after %zu of %zu bytes read = %d", how, got, total, r);
	}
	return 0;
}

static int c_poll(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	struct pollfd p = { .fd = c, .events = POLLIN | POLLOUT };
	int r = poll(&p, 1, 0);
	REQ(r == 1 && (p.revents & POLLOUT) && !(p.revents & POLLIN),
	    "fresh connection: poll = %d revents 0x%x, expected POLLOUT without POLLIN", r, p.revents);
	p.events = POLLIN;
	r = poll(&p, 1, 100);
	REQ(r == 0, "nothing sent, but poll(POLLIN, 100 ms) = %d revents 0x%x", r, p.revents);
	uint64_t seed = xs_seed(1, 2, 3);
	TRY(put(s, 1000, seed, 0, "server write"));
	r = poll(&p, 1, WAIT_MS);
	REQ(r == 1 && (p.revents & POLLIN), "after the peer wrote: poll = %d revents 0x%x", r, p.revents);
	TRY(get(c, 1000, seed, 0, "read after POLLIN"));
	r = poll(&p, 1, 0);
	REQ(r == 0, "all data read, but poll(POLLIN) = %d revents 0x%x", r, p.revents);
	/* the other direction, ppoll */
	TRY(put(c, 3000, seed, 1000, "client write"));
	struct pollfd q = { .fd = s, .events = POLLIN };
	struct timespec ts = { WAIT_MS / 1000, 0 };
	r = ppoll(&q, 1, &ts, NULL);
	REQ(r == 1 && (q.revents & POLLIN), "ppoll on the accepted socket = %d revents 0x%x", r, q.revents);
	TRY(get(s, 3000, seed, 1000, "read after ppoll"));
	TRY(pieces(c, s, 0, seed + 1));
	close(c);
	close(s);
	return 0;
}

/* Zero-length Sends into a socket that waits in poll: each one wakes the wait without making the
 * fd readable, so the wait goes on with the time left; the timeout still ends it on time. The
 * first comes late in the wait (200 ms of 300), so that a wait that took its full timeout again
 * after that wake-up would overrun by 200 ms. */
struct empties_arg {
	int fd;
	volatile int stop;
	int posted, result;
};

static void *empties(void *p)
{
	struct empties_arg *a = p;
	static uint8_t none[1];
	struct iovec iov = { none, 0 };
	uint64_t dl = xs_deadline(3000);
	sleep_ms(200); /* pacing: the first one late in the peer's wait */
	while (!a->stop && xs_ms_left(dl) > 0) {
		if (ddp_post_send(a->fd, (uint64_t)a->posted, &iov, 1, DDP_SIGNALED) != 0) {
			a->result = errno ? errno : -1;
			return NULL;
		}
		struct ddp_wc wc;
		if (ddp_wait(a->fd, &wc, 1, WAIT_MS) != 1 || wc.status != DDP_WC_SUCCESS) {
			a->result = -2;
			return NULL;
		}
		a->posted++;
		sleep_ms(2); /* pacing: one every 2 ms */
	}
	return NULL;
}

static int c_poll_goes_on(void)
{
	if (tcp_mode)
		return CASE_SKIP; /* (no zero-length messages on TCP) */
	int c, s;
	TRY(mkpair(&c, &s));
	struct empties_arg a = { .fd = s };
	pthread_t t;
	REQ(pthread_create(&t, NULL, empties, &a) == 0, "pthread_create");
	struct pollfd p = { .fd = c, .events = POLLIN };
	uint64_t t0 = xs_now_ns();
	int r = poll(&p, 1, 300);
	uint64_t ms = (xs_now_ns() - t0) / 1000000;
	int posted = a.posted;
	a.stop = 1;
	TRY(timed_join(t, 10000, "sender of empty messages"));
	REQ(a.result == 0, "posting zero-length Sends failed (%d)", a.result);
	REQ(r == 0, "only zero-length Sends arrived, but poll(POLLIN, 300 ms) = %d revents 0x%x", r,
	    p.revents);
	REQ(posted >= 5, "only %d zero-length Sends went out during the wait", posted);
	REQ(ms >= 290 && ms < 450, "poll(POLLIN, 300 ms) woken by %d empty messages returned after %llu ms",
	    posted, (unsigned long long)ms);
	note("poll(300 ms) through %d empty messages: %llu ms", posted, (unsigned long long)ms);
	/* the stream is intact */
	uint64_t seed = xs_seed(71, 72, 73);
	TRY(put(s, 5000, seed, 0, "write after the empty messages"));
	TRY(get(c, 5000, seed, 0, "read after the empty messages"));
	close(c);
	close(s);
	return 0;
}

/* Two threads wait in poll(POLLIN) on the same fd, each with a set of that fd alone (one of them
 * gets the socket's own epoll wait set, the other polls both of the socket's fds itself): data
 * that arrives wakes both, as it wakes every poller of a TCP socket. Three rounds, so that the
 * wait set changes hands. Then one thread polls while another reads part of the data: what is
 * left wakes the poller. Every byte is checked. */
struct poller_arg {
	int fd;
	volatile int entered;
	volatile pid_t tid;
	int r;
	short revents;
};

static void *poller(void *p)
{
	struct poller_arg *a = p;
	a->tid = gettid();
	struct pollfd q = { .fd = a->fd, .events = POLLIN };
	__atomic_store_n(&a->entered, 1, __ATOMIC_RELEASE);
	a->r = poll(&q, 1, WAIT_MS);
	a->revents = q.revents;
	return NULL;
}

static int c_poll_two_threads(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	for (int round = 0; round < 3; round++) {
		struct poller_arg a[2] = { { .fd = c }, { .fd = c } };
		pthread_t t[2];
		for (int i = 0; i < 2; i++) {
			REQ(pthread_create(&t[i], NULL, poller, &a[i]) == 0, "pthread_create");
			TRY(wait_blocked(&a[i].tid, &a[i].entered, "poller"));
		}
		uint64_t seed = xs_seed(81, 82, (uint64_t)round);
		TRY(put(s, 700, seed, 0, "write to two pollers"));
		for (int i = 0; i < 2; i++) {
			TRY(timed_join(t[i], WAIT_MS + 1000, "poller"));
			REQ(a[i].r == 1 && (a[i].revents & POLLIN),
			    "round %d: poller %d of 2: poll = %d revents 0x%x, expected POLLIN", round, i,
			    a[i].r, a[i].revents);
		}
		TRY(get(c, 700, seed, 0, "read after both pollers woke"));
		struct pollfd q = { .fd = c, .events = POLLIN };
		int r = poll(&q, 1, 0);
		REQ(r == 0, "round %d: all data read, but poll(POLLIN) = %d revents 0x%x", round, r,
		    q.revents);
	}
	/* one thread polls while this one reads part of what arrives: the rest wakes the poller */
	for (int round = 0; round < 3; round++) {
		struct poller_arg a = { .fd = c };
		pthread_t t;
		REQ(pthread_create(&t, NULL, poller, &a) == 0, "pthread_create");
		TRY(wait_blocked(&a.tid, &a.entered, "poller"));
		uint64_t seed = xs_seed(83, 84, (uint64_t)round);
		TRY(put(s, 700, seed, 0, "write to a poller and a reader"));
		if (round == 2) {
			/* a blocking read with no poll of its own first: it takes the TCP input */
			uint8_t part[100];
			size_t got = 0;
			while (got < sizeof part) {
				ssize_t r = read(c, part + got, sizeof part - got);
				REQE(r > 0, "blocking read beside the poller = %zd", r);
				got += (size_t)r;
			}
			size_t bad;
			REQ(xs_check(part, sizeof part, seed, 0, &bad) == 0, "content mismatch at %zu", bad);
		} else {
			TRY(get(c, 100, seed, 0, "part read beside the poller"));
		}
		TRY(timed_join(t, WAIT_MS + 1000, "poller"));
		REQ(a.r == 1 && (a.revents & POLLIN),
		    "round %d: 600 of 700 bytes unread, but the poller's poll = %d revents 0x%x", round,
		    a.r, a.revents);
		TRY(get(c, 600, seed, 100, "the rest after the poller woke"));
	}
	TRY(both_ways(c, s, "after the pollers"));
	close(c);
	close(s);
	return 0;
}

/* poll (how 0), select (1) or epoll_wait on ep (2: a and b registered for EPOLLIN, data = the
 * fd) of fds a and b for input, waiting at most ms: the call's result; *in_a and *in_b say which
 * were reported readable. */
static int two_in(int a, int b, int how, int ep, int ms, int *in_a, int *in_b)
{
	int r;
	if (how == 2) {
		struct epoll_event ev[4];
		r = epoll_wait(ep, ev, 4, ms);
		*in_a = *in_b = 0;
		for (int i = 0; i < r; i++) {
			*in_a |= ev[i].data.fd == a && (ev[i].events & EPOLLIN);
			*in_b |= ev[i].data.fd == b && (ev[i].events & EPOLLIN);
		}
	} else if (how == 1) {
		fd_set rs;
		FD_ZERO(&rs);
		FD_SET(a, &rs);
		FD_SET(b, &rs);
		struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
		r = select((a > b ? a : b) + 1, &rs, NULL, NULL, &tv);
		*in_a = r > 0 && FD_ISSET(a, &rs);
		*in_b = r > 0 && FD_ISSET(b, &rs);
	} else {
		struct pollfd p[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
		r = poll(p, 2, ms);
		*in_a = r > 0 && (p[0].revents & POLLIN);
		*in_b = r > 0 && (p[1].revents & POLLIN);
	}
	return r;
}

/* Input one fd's reader leaves unread must not hide another fd's: a poll or select of both
 * reports the second as soon as its data is there, though the first stays readable all along
 * (iperf3 -R: the data stream's first bytes come before the control message that tells the
 * client to read them, and its select must still report that message). Both watched by this
 * thread first, so that their TCP input is this thread's to look at. */
static int c_poll_held_other(void)
{
	int c1, s1, c2, s2;
	TRY(mkpair(&c1, &s1));
	TRY(mkpair(&c2, &s2));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	REQE(ep >= 0, "epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = c1 };
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c1, &ev) == 0, "epoll_ctl(ADD)");
	ev.data.fd = c2;
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c2, &ev) == 0, "epoll_ctl(ADD)");
	for (int how = 0; how < 3; how++) {
		const char *call = how == 2 ? "epoll_wait" : how ? "select" : "poll";
		uint64_t seed1 = xs_seed(95, 96, (uint64_t)how);
		uint64_t seed2 = xs_seed(97, 98, (uint64_t)how);
		int in1 = 0, in2 = 0;
		int r = two_in(c1, c2, how, ep, 20, &in1, &in2);
		REQE(r == 0, "%s of two quiet fds = %d", call, r);
		TRY(put(s1, 300, seed1, 0, "data for the first fd"));
		uint64_t dl = xs_deadline(WAIT_MS);
		while (!in1 && xs_ms_left(dl) > 0) {
			r = two_in(c1, c2, how, ep, xs_ms_left(dl), &in1, &in2);
			REQE(r >= 0, "%s", call);
		}
		REQ(in1 && !in2, "%s: first fd readable %d, second %d; expected only the first", call,
		    in1, in2);
		TRY(put(s2, 200, seed2, 0, "data for the second fd"));
		int calls = 0;
		dl = xs_deadline(WAIT_MS);
		while (!in2 && xs_ms_left(dl) > 0) {
			calls++;
			r = two_in(c1, c2, how, ep, xs_ms_left(dl), &in1, &in2);
			REQE(r >= 0, "%s", call);
			REQ(in1, "%s %d: the first fd's unread data no longer reported", call, calls);
		}
		REQ(in2,
		    "%s: the second fd's input not reported in %d calls over %d ms while the first "
		    "fd's data waited unread",
		    call, calls, WAIT_MS);
		note("%s: the second fd reported after %d call(s)", call, calls);
		TRY(get(c1, 300, seed1, 0, "the first fd's data"));
		TRY(get(c2, 200, seed2, 0, "the second fd's data"));
	}
	close(ep);
	TRY(both_ways(c1, s1, "first connection after"));
	TRY(both_ways(c2, s2, "second connection after"));
	close(c1);
	close(s1);
	close(c2);
	close(s2);
	return 0;
}

static volatile sig_atomic_t sig_count; /* (the SIGUSR1 handler's, below) */
static void on_usr1(int sig);

/* ppoll's signal mask is the one in force during its wait: SIGUSR1, blocked in this thread and
 * already pending, is delivered as soon as ppoll unblocks it (EINTR, the handler ran), with
 * nothing to read; the same ppoll without that mask waits out its timeout, the signal still
 * pending. Then data still reads. */
static int c_ppoll_mask(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	struct sigaction sa = { .sa_handler = on_usr1 }, old;
	sigemptyset(&sa.sa_mask);
	REQE(sigaction(SIGUSR1, &sa, &old) == 0, "sigaction");
	sigset_t usr1, prev, open;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	REQ(pthread_sigmask(SIG_BLOCK, &usr1, &prev) == 0, "pthread_sigmask");
	REQ(pthread_kill(pthread_self(), SIGUSR1) == 0, "pthread_kill");
	int before = sig_count;
	struct pollfd p = { .fd = c, .events = POLLIN };
	struct timespec ts = { 0, 150 * 1000 * 1000 };
	int r = ppoll(&p, 1, &ts, NULL); /* SIGUSR1 stays blocked */
	REQ(r == 0 && sig_count == before, "ppoll without a mask, SIGUSR1 blocked and pending: = %d "
					   "revents 0x%x, handler ran %d times", r, p.revents,
	    sig_count - before);
	REQ(pthread_sigmask(SIG_BLOCK, NULL, &open) == 0, "pthread_sigmask");
	sigdelset(&open, SIGUSR1);
	ts.tv_sec = WAIT_MS / 1000;
	ts.tv_nsec = 0;
	uint64_t t0 = xs_now_ns();
	r = ppoll(&p, 1, &ts, &open);
	int err = errno;
	uint64_t ms = (xs_now_ns() - t0) / 1000000;
	REQ(r == -1 && err == EINTR && sig_count == before + 1,
	    "ppoll with a mask that unblocks the pending SIGUSR1: = %d (%s), handler ran %d times, "
	    "after %llu ms; expected -1 EINTR at once", r, r < 0 ? xs_errname(err) : "-",
	    sig_count - before, (unsigned long long)ms);
	REQ(pthread_sigmask(SIG_SETMASK, &prev, NULL) == 0, "pthread_sigmask");
	sigaction(SIGUSR1, &old, NULL);
	uint64_t seed = xs_seed(91, 92, 93);
	TRY(put(s, 300, seed, 0, "write after the signal"));
	r = ppoll(&p, 1, &ts, NULL);
	REQ(r == 1 && (p.revents & POLLIN), "ppoll after the peer wrote: = %d revents 0x%x", r, p.revents);
	TRY(get(c, 300, seed, 0, "read after ppoll"));
	close(c);
	close(s);
	return 0;
}

/* Reads exactly n bytes of pattern (seed, off) with raw ppoll/read syscalls (the library does not
 * see them); bounded. */
static int get_raw(int fd, size_t n, uint64_t seed, uint64_t off, const char *what)
{
	uint8_t *b = malloc(n ? n : 1);
	if (!b)
		return fail_(__LINE__, 0, 0, "malloc");
	size_t got = 0;
	uint64_t dl = xs_deadline(WAIT_MS);
	while (got < n && xs_ms_left(dl) > 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		long r = syscall(SYS_ppoll, &p, 1, &ts, NULL, 8);
		if (r <= 0)
			continue;
		r = syscall(SYS_read, fd, b + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
			free(b);
			return fail_(__LINE__, r < 0, errno, "%s: raw read = %ld after %zu of %zu bytes", what, r,
				     got, n);
		}
	}
	size_t bad;
	int mismatch = got == n && xs_check(b, n, seed, off, &bad);
	free(b);
	REQ(got == n, "%s: %zu of %zu bytes within %d ms", what, got, n, WAIT_MS);
	REQ(!mismatch, "%s: content mismatch at byte %zu of %zu", what, bad, n);
	return 0;
}

/* Large messages, whose FPDUs are large: after POLLIN the data may still wait in the kernel for
 * the reader's own receive, which places it straight into its buffer. Every way of reading after
 * POLLIN gets every byte in order. */
static int c_poll_large(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	uint64_t seed = xs_seed(61, 62, 63);
	const size_t msg = 64 * 1024;
	uint64_t off = 0;
	uint8_t *b = malloc(msg + 4096);
	REQ(b, "malloc");
	/* (raw reads last: after them the library cannot know the socketpair is empty) */
	static const int ways[] = { 0, 1, 0, 2, 0, 3, 0, 5, 0, 1, 2, 3, 5, 0, 0, 4 };
	for (int round = 0; round < (int)(sizeof ways / sizeof ways[0]); round++) {
		TRY(put(s, msg, seed, off, "server write"));
		struct pollfd p = { .fd = c, .events = POLLIN };
		int r = poll(&p, 1, WAIT_MS);
		if (r != 1 || !(p.revents & POLLIN)) {
			free(b);
			return fail_(__LINE__, r < 0, errno, "round %d: poll = %d revents 0x%x", round, r,
				     p.revents);
		}
		char what[64];
		snprintf(what, sizeof what, "round %d (way %d)", round, ways[round]);
		size_t bad;
		int avail = -1;
		ssize_t n;
		switch (ways[round]) {
		case 0: /* whole messages */
			TRY(get(c, msg, seed, off, what));
			break;
		case 1: /* a small piece, then the rest */
			TRY(get(c, 1000, seed, off, what));
			TRY(get(c, msg - 1000, seed, off + 1000, what));
			break;
		case 2: /* MSG_PEEK first: the same bytes, still there */
			n = recv(c, b, 100, MSG_PEEK);
			REQE(n > 0 && n <= 100, "%s: recv(MSG_PEEK) = %zd", what, n);
			REQ(!xs_check(b, (size_t)n, seed, off, &bad), "%s: peeked bytes differ at %zu", what,
			    bad);
			TRY(get(c, msg, seed, off, what));
			break;
		case 3: /* FIONREAD after POLLIN: something to read */
			REQE(ioctl(c, FIONREAD, &avail) == 0, "%s: ioctl(FIONREAD)", what);
			REQ(avail > 0 && (size_t)avail <= msg, "%s: FIONREAD = %d after POLLIN", what, avail);
			TRY(get(c, msg, seed, off, what));
			break;
		case 4: /* raw syscalls after POLLIN: the bytes reach the fd itself */
			TRY(get_raw(c, msg, seed, off, what));
			break;
		case 5: /* a buffer larger than the message, one nonblocking call, then the rest */
			n = recv(c, b, msg + 4096, MSG_DONTWAIT);
			REQE(n > 0 && (size_t)n <= msg, "%s: recv = %zd", what, n);
			REQ(!xs_check(b, (size_t)n, seed, off, &bad), "%s: mismatch at %zu", what, bad);
			if ((size_t)n < msg)
				TRY(get(c, msg - (size_t)n, seed, off + (size_t)n, what));
			break;
		}
		off += msg;
	}
	free(b);
	/* the reader's buffers took the payload straight from the socket at least once */
	if (!tcp_mode) {
		struct ddp_conn_info ci;
		TRY(get_info(c, &ci));
		REQ(ci.placed_direct > 0, "no byte placed directly (%llu bytes received)",
		    (unsigned long long)ci.bytes_rx);
	}
	TRY(both_ways(c, s, "after large messages"));
	close(c);
	close(s);
	return 0;
}

static int c_select(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	REQ(c < FD_SETSIZE && s < FD_SETSIZE, "fd numbers too large for select");
	fd_set rd, wr;
	struct timeval tv = { 0, 0 };
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(c, &rd);
	FD_SET(c, &wr);
	int r = select(c + 1, &rd, &wr, NULL, &tv);
	REQ(r == 1 && FD_ISSET(c, &wr) && !FD_ISSET(c, &rd),
	    "fresh connection: select = %d, expected writable only", r);
	FD_ZERO(&rd);
	FD_SET(c, &rd);
	tv = (struct timeval){ 0, 100000 };
	r = select(c + 1, &rd, NULL, NULL, &tv);
	REQ(r == 0, "nothing sent, but select(read, 100 ms) = %d", r);
	REQ(tv.tv_sec == 0 && tv.tv_usec == 0, "select timed out: time left %ld.%06ld, expected 0 (Linux)",
	    (long)tv.tv_sec, (long)tv.tv_usec);
	/* a closed fd in a set: EBADF; an unreadable set: EFAULT */
	int pf[2];
	REQE(pipe(pf) == 0, "pipe");
	close(pf[0]);
	close(pf[1]);
	int hi = (c > pf[0] ? c : pf[0]) + 1;
	REQ(hi <= FD_SETSIZE, "fd numbers too large for select");
	FD_ZERO(&rd);
	FD_SET(c, &rd);
	FD_SET(pf[0], &rd);
	tv = (struct timeval){ 0, 0 };
	errno = 0;
	r = select(hi, &rd, NULL, NULL, &tv);
	REQ(r == -1 && errno == EBADF, "select with a closed fd = %d (errno %d), expected EBADF", r, errno);
	tv = (struct timeval){ 0, 0 };
	errno = 0;
	r = select(c + 1, (fd_set *)8, NULL, NULL, &tv);
	REQ(r == -1 && errno == EFAULT, "select with a bad set pointer = %d (errno %d), expected EFAULT", r,
	    errno);
	uint64_t seed = xs_seed(4, 5, 6);
	TRY(put(s, 2500, seed, 0, "server write"));
	FD_ZERO(&rd);
	FD_SET(c, &rd);
	FD_SET(s, &rd);
	tv = (struct timeval){ WAIT_MS / 1000, 0 };
	int mx = c > s ? c : s;
	r = select(mx + 1, &rd, NULL, NULL, &tv);
	REQ(r == 1 && FD_ISSET(c, &rd) && !FD_ISSET(s, &rd),
	    "after the peer wrote: select = %d (c readable %d, s readable %d), expected c only", r,
	    FD_ISSET(c, &rd) != 0, FD_ISSET(s, &rd) != 0);
	TRY(get(c, 2500, seed, 0, "read after select"));
	/* pselect, other direction */
	TRY(put(c, 700, seed, 2500, "client write"));
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	struct timespec ts = { WAIT_MS / 1000, 0 };
	r = pselect(s + 1, &rd, NULL, NULL, &ts, NULL);
	REQ(r == 1 && FD_ISSET(s, &rd), "pselect on the accepted socket = %d", r);
	TRY(get(s, 700, seed, 2500, "read after pselect"));
	TRY(pieces(c, s, 1, seed + 1));
	close(c);
	close(s);
	return 0;
}

static int c_epoll_lt(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	REQE(ep >= 0, "epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0xc0ffee };
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0, "epoll_ctl(ADD)");
	struct epoll_event out[4];
	int n = epoll_wait(ep, out, 4, 100);
	REQ(n == 0, "nothing sent, but epoll_wait(100 ms) = %d", n);
	uint64_t seed = xs_seed(7, 8, 9);
	TRY(put(s, 200, seed, 0, "server write"));
	n = epoll_wait(ep, out, 4, WAIT_MS);
	REQ(n == 1 && (out[0].events & EPOLLIN) && out[0].data.u64 == 0xc0ffee,
	    "after the peer wrote: epoll_wait = %d events 0x%x", n, n > 0 ? out[0].events : 0);
	/* wait until all 200 bytes are there (FIONREAD), then read half: level-triggered fires again */
	uint64_t dl = xs_deadline(WAIT_MS);
	int avail = 0;
	while (ioctl(c, FIONREAD, &avail) == 0 && avail < 200 && xs_ms_left(dl) > 0)
		sleep_ms(1); /* bounded polling of a condition */
	REQ(avail == 200, "FIONREAD %d, expected 200", avail);
	TRY(get(c, 100, seed, 0, "first half"));
	n = epoll_wait(ep, out, 4, 0);
	REQ(n == 1 && (out[0].events & EPOLLIN), "level-triggered: 100 bytes left, epoll_wait = %d", n);
	n = epoll_wait(ep, out, 4, 0);
	REQ(n == 1, "level-triggered: reported again without reading, epoll_wait = %d", n);
	TRY(get(c, 100, seed, 100, "second half"));
	n = epoll_wait(ep, out, 4, 0);
	REQ(n == 0, "everything read, but epoll_wait = %d events 0x%x", n, n > 0 ? out[0].events : 0);
	/* EPOLLOUT level-triggered */
	ev.events = EPOLLOUT;
	REQE(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0, "epoll_ctl(MOD, EPOLLOUT)");
	n = epoll_wait(ep, out, 4, WAIT_MS);
	REQ(n == 1 && (out[0].events & EPOLLOUT), "EPOLLOUT: epoll_wait = %d", n);
	/* epoll_pwait2: the timespec form; nothing, then data; bad timeouts as the kernel says */
	ev.events = EPOLLIN;
	REQE(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0, "epoll_ctl(MOD, EPOLLIN)");
	struct timespec t100 = { 0, 100 * 1000 * 1000 };
	n = epoll_pwait2(ep, out, 4, &t100, NULL);
	REQ(n == 0, "nothing sent, but epoll_pwait2(100 ms) = %d", n);
	TRY(put(s, 300, seed, 200, "server write (epoll_pwait2)"));
	struct timespec tw = { WAIT_MS / 1000, 0 };
	n = epoll_pwait2(ep, out, 4, &tw, NULL);
	REQ(n == 1 && (out[0].events & EPOLLIN) && out[0].data.u64 == 0xc0ffee,
	    "after the peer wrote: epoll_pwait2 = %d events 0x%x", n, n > 0 ? out[0].events : 0);
	TRY(get(c, 300, seed, 200, "read after epoll_pwait2"));
	struct timespec tbad = { 0, 2000000000L };
	errno = 0;
	n = epoll_pwait2(ep, out, 4, &tbad, NULL);
	REQ(n == -1 && errno == EINVAL, "epoll_pwait2(tv_nsec 2e9) = %d (errno %d), expected EINVAL", n,
	    errno);
	errno = 0;
	n = epoll_pwait2(ep, out, 4, (const struct timespec *)8, NULL);
	REQ(n == -1 && errno == EFAULT, "epoll_pwait2(bad pointer) = %d (errno %d), expected EFAULT", n,
	    errno);
	REQE(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) == 0, "epoll_ctl(DEL)");
	TRY(both_ways(c, s, "after DEL"));
	close(ep);
	close(c);
	close(s);
	return 0;
}

/* edge-triggered: a writer thread sends many small writes; the reader drains to EAGAIN on
 * every wakeup and must see every byte without a lost wakeup. */
struct et_arg {
	int fd, nwrites;
	uint64_t seed;
	size_t total;
	int err;
	const char *errwhat;
};
static size_t et_len(int i) { return 1 + (size_t)((i * 7919) % 97); }
static void *et_writer(void *p)
{
	struct et_arg *a = p;
	uint8_t buf[128];
	uint64_t off = 0;
	for (int i = 0; i < a->nwrites; i++) {
		size_t len = et_len(i);
		xs_fill(buf, len, a->seed, off);
		size_t done = 0;
		while (done < len) {
			ssize_t r = write(a->fd, buf + done, len - done);
			if (r > 0)
				done += (size_t)r;
			else if (errno != EINTR) {
				a->err = errno;
				a->errwhat = "write";
				return NULL;
			}
		}
		off += len;
		if (i % 5 == 0)
			sched_yield();
		if (i % 97 == 0)
			sleep_ms(1); /* pacing: let the reader catch up and wait again */
	}
	return NULL;
}

static int c_epoll_et(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(set_nonblock(c, 1));
	int ep = epoll_create1(0);
	REQE(ep >= 0, "epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.fd = c };
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0, "epoll_ctl(ADD, EPOLLIN|EPOLLET)");
	struct et_arg a = { .fd = s, .nwrites = 4000, .seed = xs_seed(10, 11, 12) };
	for (int i = 0; i < a.nwrites; i++)
		a.total += et_len(i);
	pthread_t t;
	REQ(pthread_create(&t, NULL, et_writer, &a) == 0, "pthread_create");
	uint8_t *buf = malloc(a.total);
	size_t got = 0;
	int wakeups = 0;
	while (got < a.total) {
		struct epoll_event o;
		int n = epoll_wait(ep, &o, 1, WAIT_MS);
		if (n < 0 && errno == EINTR)
			continue;
		REQ(n == 1, "lost wakeup: no EPOLLIN within %d ms with %zu of %zu bytes received "
			    "(epoll_wait = %d)", WAIT_MS, got, a.total, n);
		wakeups++;
		for (;;) { /* drain to EAGAIN */
			ssize_t r = read(c, buf + got, a.total - got);
			if (r > 0) {
				got += (size_t)r;
				if (got == a.total) {
					/* the stream is complete: one more read must say EAGAIN */
					char x;
					r = read(c, &x, 1);
					REQE(r < 0 && errno == EAGAIN, "extra bytes after the end: read = %zd", r);
					break;
				}
				continue;
			}
			REQ(r != 0, "EOF after %zu of %zu bytes", got, a.total);
			if (errno == EAGAIN)
				break;
			REQE(errno == EINTR, "read");
		}
	}
	TRY(timed_join(t, WAIT_MS, "writer"));
	REQ(a.err == 0, "writer: %s: %s", a.errwhat, xs_errname(a.err));
	size_t bad;
	if (xs_check(buf, a.total, a.seed, 0, &bad)) {
		xs_report_mismatch("edge-triggered stream", buf, a.total, a.seed, 0, bad);
		return fail_(__LINE__, 0, 0, "content mismatch at byte %zu of %zu", bad, a.total);
	}
	free(buf);
	/* drained, nothing new: edge-triggered must not report again */
	struct epoll_event o;
	int n = epoll_wait(ep, &o, 1, 100);
	REQ(n == 0, "drained to EAGAIN and nothing new, but epoll_wait(ET) = %d events 0x%x", n,
	    n > 0 ? o.events : 0);
	/* one more write: exactly one new edge */
	uint64_t seed = xs_seed(13, 14, 15);
	TRY(put(s, 10, seed, 0, "one more write"));
	n = epoll_wait(ep, &o, 1, WAIT_MS);
	REQ(n == 1 && (o.events & EPOLLIN), "new data after draining: epoll_wait = %d", n);
	TRY(get(c, 10, seed, 0, "after the new edge"));
	note("%d writes, %zu bytes, %d wakeups", a.nwrites, a.total, wakeups);
	close(ep);
	close(c);
	close(s);
	return 0;
}

static int c_epoll_oneshot(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	int ep = epoll_create1(0);
	REQE(ep >= 0, "epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = c }, o;
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0, "epoll_ctl(ADD, EPOLLONESHOT)");
	uint64_t seed = xs_seed(16, 17, 18);
	TRY(put(s, 64, seed, 0, "first write"));
	int n = epoll_wait(ep, &o, 1, WAIT_MS);
	REQ(n == 1 && (o.events & EPOLLIN), "first event: epoll_wait = %d", n);
	n = epoll_wait(ep, &o, 1, 100);
	REQ(n == 0, "ONESHOT fired and not re-armed, but epoll_wait = %d (data still unread)", n);
	TRY(put(s, 64, seed, 64, "second write"));
	n = epoll_wait(ep, &o, 1, 100);
	REQ(n == 0, "ONESHOT not re-armed, new data, but epoll_wait = %d", n);
	ev.events = EPOLLIN | EPOLLONESHOT;
	REQE(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0, "epoll_ctl(MOD) re-arm");
	n = epoll_wait(ep, &o, 1, WAIT_MS);
	REQ(n == 1 && (o.events & EPOLLIN), "re-armed with data pending: epoll_wait = %d", n);
	TRY(get(c, 128, seed, 0, "both writes"));
	/* re-arm with nothing pending: fires on the next write only */
	REQE(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0, "epoll_ctl(MOD) re-arm");
	n = epoll_wait(ep, &o, 1, 100);
	REQ(n == 0, "re-armed, nothing pending, but epoll_wait = %d", n);
	TRY(put(s, 1000, seed, 128, "third write"));
	n = epoll_wait(ep, &o, 1, WAIT_MS);
	REQ(n == 1 && (o.events & EPOLLIN), "re-armed, new data: epoll_wait = %d", n);
	TRY(get(c, 1000, seed, 128, "third write"));
	close(ep);
	close(c);
	close(s);
	return 0;
}

static int c_epoll_rdhup(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(set_nonblock(c, 1));
	int ep = epoll_create1(0);
	REQE(ep >= 0, "epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = c }, o;
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0, "epoll_ctl(ADD, EPOLLIN|EPOLLRDHUP)");
	uint64_t seed = xs_seed(19, 20, 21);
	TRY(put(s, 3333, seed, 0, "data before the shutdown"));
	REQE(shutdown(s, SHUT_WR) == 0, "shutdown(SHUT_WR) on the peer");
	uint8_t buf[4096];
	size_t got = 0;
	int rdhup = 0, eof = 0;
	uint64_t dl = xs_deadline(WAIT_MS);
	while (!eof) {
		int n = epoll_wait(ep, &o, 1, xs_ms_left(dl));
		REQ(n == 1, "no EPOLLRDHUP/EOF within %d ms (%zu of 3333 bytes, rdhup %d)", WAIT_MS, got,
		    rdhup);
		if (o.events & EPOLLRDHUP)
			rdhup = 1;
		for (;;) {
			ssize_t r = read(c, buf + got, sizeof buf - got);
			if (r > 0) {
				got += (size_t)r;
				continue;
			}
			if (r == 0) {
				eof = 1;
				break;
			}
			REQE(errno == EAGAIN || errno == EINTR, "read");
			break;
		}
	}
	/* The data and the EOF may become readable in two steps (as with TCP when the data and the
	 * FIN arrive in separate segments): epoll may have reported EPOLLIN alone and the read loop
	 * then met the EOF. Either way EPOLLRDHUP must be reported now (level-triggered, below). */
	(void)rdhup;
	REQ(got == 3333, "EOF after %zu bytes, expected 3333", got);
	size_t bad;
	REQ(xs_check(buf, got, seed, 0, &bad) == 0, "content mismatch at byte %zu", bad);
	int n = epoll_wait(ep, &o, 1, 0);
	REQ(n == 1 && (o.events & EPOLLRDHUP), "after EOF: EPOLLRDHUP no longer reported (n %d)", n);
	/* half-close: we can still send to the peer */
	TRY(xfer(c, s, 5000, "send back after the peer's SHUT_WR"));
	close(ep);
	close(c);
	close(s);
	return 0;
}

/* Reads exactly n bytes with plain read() calls (no poll in between, which would change how
 * the library holds the data) and checks them against pattern (seed, off). */
static int read_check(int fd, size_t n, uint64_t seed, uint64_t off, const char *what)
{
	uint8_t b[8192];
	REQ(n <= sizeof b, "%s: %zu bytes asked, at most %zu", what, n, sizeof b);
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else
			REQE(r < 0 && errno == EINTR, "%s: read = %zd after %zu of %zu bytes", what, r, got, n);
	}
	size_t bad;
	if (xs_check(b, n, seed, off, &bad)) {
		xs_report_mismatch(what, b, n, seed, off, bad);
		return fail_(__LINE__, 0, 0, "%s: content mismatch at byte %zu", what, bad);
	}
	return 0;
}

/* The entries of out[0..n) with data d: how many, and their events OR'ed. */
static int entries_of(const struct epoll_event *out, int n, uint64_t d, uint32_t *events)
{
	int k = 0;
	*events = 0;
	for (int i = 0; i < n; i++)
		if (out[i].data.u64 == d) {
			k++;
			*events |= out[i].events;
		}
	return k;
}

/* Data that arrives while the reader waits in epoll_wait (and that the library may keep for
 * the next read instead of passing it through the socketpair): one entry per fd, EPOLLIN and
 * EPOLLOUT together, reported level-triggered until every byte was read, each of two ready
 * fds reported in turn to a one-entry array, edge-triggered reported again only for new data,
 * and a closed fd's number reused by another connection never reported with the old data. */
static int c_epoll_held(void)
{
	int c, s, c2, s2;
	TRY(mkpair(&c, &s));
	TRY(mkpair(&c2, &s2));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	REQE(ep >= 0, "epoll_create1");
	const uint64_t A = 0xa11ce0001, B = 0xb0b0002;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = A };
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0, "epoll_ctl(ADD c)");
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = B };
	REQE(epoll_ctl(ep, EPOLL_CTL_ADD, c2, &ev) == 0, "epoll_ctl(ADD c2)");
	struct epoll_event out[4];
	uint32_t e;
	/* level-triggered: 3000 bytes in, 1000 read per wakeup, then the rest */
	uint64_t seed = xs_seed(40, 41, 42);
	size_t sent = 0, got = 0;
	for (int i = 0; i < 40; i++) {
		TRY(put(s, 3000, seed, sent, "server write (level-triggered)"));
		sent += 3000;
		int n = epoll_wait(ep, out, 4, WAIT_MS);
		REQE(n >= 1, "round %d: epoll_wait", i);
		REQ(entries_of(out, n, A, &e) == 1 && (e & EPOLLIN),
		    "round %d: %d entries for the fd (events 0x%x), expected one with EPOLLIN", i,
		    entries_of(out, n, A, &e), e);
		TRY(read_check(c, 1000, seed, got, "level-triggered read"));
		got += 1000;
	}
	while (got < sent) {
		int n = epoll_wait(ep, out, 4, WAIT_MS);
		REQE(n >= 1, "drain: epoll_wait");
		REQ(entries_of(out, n, A, &e) == 1 && (e & EPOLLIN),
		    "%zu of %zu bytes read: EPOLLIN missing (events 0x%x)", got, sent, e);
		size_t k = sent - got < 7000 ? sent - got : 7000;
		TRY(read_check(c, k, seed, got, "level-triggered drain"));
		got += k;
	}
	int n = epoll_wait(ep, out, 4, 0);
	REQ(entries_of(out, n, A, &e) == 0, "everything read, but reported: events 0x%x", e);
	/* EPOLLIN|EPOLLOUT: one entry with both while data is left */
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT, .data.u64 = A };
	REQE(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev) == 0, "epoll_ctl(MOD c, EPOLLIN|EPOLLOUT)");
	for (int i = 0; i < 10; i++) {
		TRY(put(s, 3000, seed, sent, "server write (in and out)"));
		sent += 3000;
		uint64_t dl = xs_deadline(WAIT_MS);
		do { /* EPOLLOUT is always ready: wait (bounded) until the data is reported too */
			n = epoll_wait(ep, out, 4, WAIT_MS);
			REQE(n >= 1, "in and out: epoll_wait");
			REQ(entries_of(out, n, A, &e) == 1, "in and out: %d entries for the fd",
			    entries_of(out, n, A, &e));
		} while (!(e & EPOLLIN) && xs_ms_left(dl) > 0);
		REQ((e & EPOLLIN) && (e & EPOLLOUT), "in and out: events 0x%x", e);
		TRY(read_check(c, 1000, seed, got, "in and out read"));
		got += 1000;
		n = epoll_wait(ep, out, 4, 0);
		REQ(entries_of(out, n, A, &e) == 1 && (e & EPOLLIN) && (e & EPOLLOUT),
		    "in and out, data left: %d entries, events 0x%x", entries_of(out, n, A, &e), e);
		TRY(read_check(c, 2000, seed, got, "in and out read (rest)"));
		got += 2000;
	}
	n = epoll_wait(ep, out, 4, 0);
	REQ(entries_of(out, n, A, &e) == 1 && !(e & EPOLLIN) && (e & EPOLLOUT),
	    "everything read: events 0x%x, expected EPOLLOUT only", e);
	/* two ready fds, a one-entry array, nothing read: each is reported in turn */
	uint64_t s2seed = xs_seed(43, 44, 45);
	TRY(put(s, 500, seed, sent, "server write (turns)"));
	TRY(put(s2, 500, s2seed, 0, "server write 2 (turns)"));
	int seen_a = 0, seen_b = 0;
	uint64_t dl = xs_deadline(WAIT_MS);
	for (int i = 0; i < 100000 && !(seen_a && seen_b) && xs_ms_left(dl) > 0; i++) {
		n = epoll_wait(ep, out, 1, WAIT_MS);
		REQE(n == 1, "one-entry array: epoll_wait");
		seen_a |= out[0].data.u64 == A && (out[0].events & EPOLLIN);
		seen_b |= out[0].data.u64 == B && (out[0].events & EPOLLIN);
	}
	REQ(seen_a && seen_b, "one-entry array: fd 1 %s, fd 2 %s", seen_a ? "seen" : "never reported",
	    seen_b ? "seen" : "never reported");
	TRY(read_check(c, 500, seed, sent, "read after turns"));
	TRY(read_check(c2, 500, s2seed, 0, "read 2 after turns"));
	/* edge-triggered: reported for new data, not again once drained */
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLET, .data.u64 = B };
	REQE(epoll_ctl(ep, EPOLL_CTL_MOD, c2, &ev) == 0, "epoll_ctl(MOD c2, EPOLLET)");
	TRY(set_nonblock(c2, 1));
	size_t off2 = 500;
	for (int i = 0; i < 20; i++) {
		TRY(put(s2, 2000, s2seed, off2, "server write (edge-triggered)"));
		n = epoll_wait(ep, out, 4, WAIT_MS);
		REQ(n >= 1 && entries_of(out, n, B, &e) == 1 && (e & EPOLLIN),
		    "edge-triggered round %d: epoll_wait = %d, no EPOLLIN", i, n);
		size_t want = off2 + 2000, at = off2;
		uint8_t b[4096];
		for (int j = 0; j < 1000 && at < want; j++) { /* drain to EAGAIN (bounded) */
			ssize_t r = read(c2, b, sizeof b);
			if (r > 0) {
				size_t bad;
				REQ(!xs_check(b, (size_t)r, s2seed, at, &bad), "edge-triggered: mismatch at %zu",
				    at + bad);
				at += (size_t)r;
			} else if (r < 0 && errno == EAGAIN) {
				n = epoll_wait(ep, out, 4, WAIT_MS);
				REQE(n >= 0, "edge-triggered: epoll_wait for the rest");
			} else
				REQE(r < 0 && errno == EINTR, "edge-triggered read = %zd", r);
		}
		REQ(at == want, "edge-triggered round %d: %zu of %zu bytes", i, at - off2, want - off2);
		char x;
		REQE(read(c2, &x, 1) < 0 && errno == EAGAIN, "edge-triggered: extra bytes");
		off2 = want;
		n = epoll_wait(ep, out, 4, 0);
		REQ(entries_of(out, n, B, &e) == 0, "edge-triggered: drained, but reported again (0x%x)", e);
	}
	/* the fd closed (its registration goes with it) and its number reused by another DDP
	 * connection with data waiting: not reported */
	int c3, s3;
	TRY(mkpair(&c3, &s3));
	close(c2);
	REQE(dup2(c3, c2) == c2, "dup2 onto the closed number");
	close(c3);
	uint64_t s3seed = xs_seed(46, 47, 48);
	TRY(put(s3, 3000, s3seed, 0, "server write 3"));
	REQ(wait_ev(c2, POLLIN, WAIT_MS) > 0, "the reused number: no POLLIN");
	n = epoll_wait(ep, out, 4, 0);
	REQ(entries_of(out, n, B, &e) == 0, "a closed registration reported: events 0x%x", e);
	TRY(read_check(c2, 3000, s3seed, 0, "read on the reused number"));
	close(ep);
	close(c);
	close(s);
	close(c2);
	close(s2);
	close(s3);
	return 0;
}

/* ---- both ends ready at once ------------------------------------------------------------------ */

/* After each end of a connection wrote a few bytes, the next readiness call reports the input
 * and the room to write together: EPOLLIN|EPOLLOUT (POLLIN|POLLOUT) for each end in the same
 * call, as Linux TCP does (data arriving wakes the socket, and a wakeup reports every ready
 * event, also on an edge-triggered registration); and EPOLLRDHUP with the last data when the
 * peer's FIN came behind it. Under the library the data may be held for the reader and
 * reported by the library itself, where the kernel sees no new edge. */
#define INOUT_ROUNDS 300
#define INOUT_FRESH 100
#define INOUT_EV (EPOLLIN | EPOLLOUT | EPOLLRDHUP)

/* Round i's bytes, i from 0: a few, varying. */
static size_t inout_len(int i, int end) { return 1 + (size_t)((i * 31 + end * 17) % 61); }

/* Both ends write their round's bytes (pattern seed, stream offset off[end]). */
static int inout_write(const int *fds, uint64_t seed, const uint64_t *off, int i)
{
	for (int end = 0; end < 2; end++) {
		uint8_t b[64];
		size_t n = inout_len(i, end);
		xs_fill(b, n, seed + (uint64_t)end, off[end]);
		ssize_t r;
		do
			r = write(fds[end], b, n);
		while (r < 0 && errno == EINTR);
		REQE(r == (ssize_t)n, "round %d: write of %zu bytes = %zd", i, n, r);
	}
	return 0;
}

/* End `end` reads the other's bytes of round i, checks them, and finds nothing more (EAGAIN:
 * the ends are nonblocking; with eof, the end of the stream instead). */
static int inout_read1(const int *fds, uint64_t seed, uint64_t *off, int i, int end, int eof)
{
	int from = 1 - end;
	size_t n = inout_len(i, from);
	uint8_t b[64];
	size_t got = 0;
	for (int k = 0; k < 1000 && got < n; k++) { /* (bounded: the data was reported) */
		ssize_t r = read(fds[end], b + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else
			REQE(r < 0 && (errno == EINTR || errno == EAGAIN),
			     "round %d: read = %zd after %zu of %zu bytes", i, r, got, n);
	}
	REQ(got == n, "round %d: %zu of %zu bytes readable after they were reported", i, got, n);
	size_t bad;
	if (xs_check(b, n, seed + (uint64_t)from, off[from], &bad)) {
		xs_report_mismatch("round's bytes", b, n, seed + (uint64_t)from, off[from], bad);
		return fail_(__LINE__, 0, 0, "round %d: content mismatch at byte %zu", i, bad);
	}
	char x;
	ssize_t r = read(fds[end], &x, 1);
	if (eof)
		REQE(r == 0, "round %d: the end of the stream expected, read = %zd", i, r);
	else
		REQE(r < 0 && errno == EAGAIN, "round %d: more than the round's bytes: read = %zd", i, r);
	off[from] += n;
	return 0;
}

static int inout_read(const int *fds, uint64_t seed, uint64_t *off, int i)
{
	TRY(inout_read1(fds, seed, off, i, 0, 0));
	return inout_read1(fds, seed, off, i, 1, 0);
}

/* One byte each way, each waited for with poll (as a request-response exchange does: under the
 * library this thread then has the sockets' TCP input for a while). */
static int inout_ping(const int *fds, int i)
{
	for (int end = 0; end < 2; end++) {
		char x = (char)('a' + end), y = 0;
		REQE(write(fds[end], &x, 1) == 1, "round %d: write of one byte", i);
		REQ(wait_ev(fds[1 - end], POLLIN, WAIT_MS) > 0, "round %d: one byte not readable", i);
		REQE(read(fds[1 - end], &y, 1) == 1 && y == x, "round %d: one byte: read '%c'", i, y);
		REQE(read(fds[1 - end], &y, 1) < 0 && errno == EAGAIN, "round %d: more than one byte", i);
	}
	return 0;
}

/* One-shot (with oneshot): both ends' registrations re-armed with reg. */
static int inout_rearm(int ep, const int *fds, uint32_t reg, int oneshot)
{
	for (int end = 0; oneshot && end < 2; end++) {
		struct epoll_event ev = { .events = reg, .data.u64 = 0xe0 + (uint64_t)end };
		REQE(epoll_ctl(ep, EPOLL_CTL_MOD, fds[end], &ev) == 0, "epoll_ctl(MOD) re-arm");
	}
	return 0;
}

/* The first entry for each end in out[0..n): events[end], or 0; false if an end has two. */
static int inout_events(const struct epoll_event *out, int n, uint32_t *events)
{
	for (int end = 0; end < 2; end++)
		if (entries_of(out, n, 0xe0 + (uint64_t)end, &events[end]) > 1)
			return 0;
	return 1;
}

enum inout_mode { INOUT_LT, INOUT_ET, INOUT_ONESHOT };

/* epoll, both ends in one set (level- or edge-triggered, or one-shot and re-armed before each
 * round): the call after both wrote reports EPOLLIN|EPOLLOUT for each end, without
 * EPOLLRDHUP; level-triggered, the call before reports EPOLLOUT alone. First the same with a
 * new epoll set for each round, made after a poll-paced exchange and the writes (under
 * EXSOCK_EPOLL_INLINE=0 each is a new epoll group, which takes the sockets' TCP input over
 * from wherever it is). Last, one end writes and shuts down: EPOLLIN|EPOLLOUT|EPOLLRDHUP on
 * the other at once. */
static int inout_epoll(enum inout_mode mode)
{
	int fds[2];
	TRY(mkpair(&fds[0], &fds[1]));
	TRY(set_nonblock(fds[0], 1));
	TRY(set_nonblock(fds[1], 1));
	const int et = mode == INOUT_ET, oneshot = mode == INOUT_ONESHOT;
	const uint32_t reg = INOUT_EV | (et ? EPOLLET : 0) | (oneshot ? EPOLLONESHOT : 0);
	const char *how = et ? "edge-triggered" : oneshot ? "one-shot" : "level-triggered";
	struct epoll_event out[8];
	uint32_t e[2];
	uint64_t seed = xs_seed(0x10, 0x0e, (uint64_t)mode), off[2] = { 0, 0 };
	/* new sets */
	for (int i = 0; i < INOUT_FRESH; i++) {
		TRY(inout_ping(fds, i));
		if (i % 2)
			sleep_ms(3); /* pacing: the library gives the TCP input back to its progress
				      * thread (docs/engine.md LAZY_REARM), which then sees the data */
		TRY(inout_write(fds, seed, off, i));
		int ep = epoll_create1(EPOLL_CLOEXEC);
		REQE(ep >= 0, "epoll_create1");
		for (int end = 0; end < 2; end++) {
			struct epoll_event ev = { .events = reg, .data.u64 = 0xe0 + (uint64_t)end };
			REQE(epoll_ctl(ep, EPOLL_CTL_ADD, fds[end], &ev) == 0, "epoll_ctl(ADD)");
		}
		int n = epoll_wait(ep, out, 8, WAIT_MS);
		REQE(n >= 0, "new set %d: epoll_wait", i);
		REQ(inout_events(out, n, e) && e[0] == (EPOLLIN | EPOLLOUT) && e[1] == (EPOLLIN | EPOLLOUT),
		    "%s, new set %d: the first call reports 0x%x and 0x%x (expected EPOLLIN|EPOLLOUT for "
		    "each, once)", how, i, e[0], e[1]);
		TRY(inout_read(fds, seed, off, i));
		close(ep);
	}
	/* one set */
	int ep = epoll_create1(EPOLL_CLOEXEC);
	REQE(ep >= 0, "epoll_create1");
	for (int end = 0; end < 2; end++) {
		struct epoll_event ev = { .events = reg, .data.u64 = 0xe0 + (uint64_t)end };
		REQE(epoll_ctl(ep, EPOLL_CTL_ADD, fds[end], &ev) == 0, "epoll_ctl(ADD)");
	}
	if (et) { /* the first edge: both writable */
		int seen[2] = { 0, 0 };
		uint64_t dl = xs_deadline(WAIT_MS);
		while (!(seen[0] && seen[1]) && xs_ms_left(dl) > 0) {
			int n = epoll_wait(ep, out, 8, xs_ms_left(dl));
			REQE(n >= 0 || errno == EINTR, "epoll_wait (first edge)");
			for (int end = 0; end < 2; end++) {
				uint32_t ev;
				if (entries_of(out, n, 0xe0 + (uint64_t)end, &ev) > 0 && (ev & EPOLLOUT))
					seen[end] = 1;
			}
		}
		REQ(seen[0] && seen[1], "%s: the first EPOLLOUT edge missing (%d %d)", how, seen[0], seen[1]);
	}
	int extra = 0, i;
	for (i = INOUT_FRESH; i < INOUT_FRESH + INOUT_ROUNDS; i++) {
		int n = epoll_wait(ep, out, 8, 0);
		REQE(n >= 0, "round %d: epoll_wait(0) before the writes", i);
		if (et)
			extra += n; /* (an edge with nothing new: not TCP's, and harmless) */
		else if (!oneshot || i == INOUT_FRESH) /* (one-shot: armed by the ADD) */
			REQ(n == 2 && inout_events(out, n, e) && e[0] == EPOLLOUT && e[1] == EPOLLOUT,
			    "%s round %d: nothing to read, %d entries, events 0x%x and 0x%x (expected "
			    "EPOLLOUT for each)", how, i, n, e[0], e[1]);
		else
			REQ(n == 0, "one-shot round %d: %d entries, not re-armed", i, n);
		TRY(inout_rearm(ep, fds, reg, oneshot));
		TRY(inout_write(fds, seed, off, i));
		n = epoll_wait(ep, out, 8, WAIT_MS);
		REQE(n >= 0, "round %d: epoll_wait after the writes", i);
		REQ(inout_events(out, n, e) && e[0] == (EPOLLIN | EPOLLOUT) && e[1] == (EPOLLIN | EPOLLOUT),
		    "%s round %d: the call after both wrote reports 0x%x and 0x%x (expected "
		    "EPOLLIN|EPOLLOUT for each, once)", how, i, e[0], e[1]);
		TRY(inout_read(fds, seed, off, i));
	}
	/* the last bytes and the FIN behind them */
	TRY(inout_rearm(ep, fds, reg, oneshot));
	TRY(inout_write(fds, seed, off, i));
	REQE(shutdown(fds[1], SHUT_WR) == 0, "shutdown(SHUT_WR)");
	int n = epoll_wait(ep, out, 8, WAIT_MS);
	REQE(n >= 0, "epoll_wait after the peer's shutdown");
	REQ(inout_events(out, n, e) && e[0] == (EPOLLIN | EPOLLOUT | EPOLLRDHUP),
	    "%s: data and the peer's FIN: the next call reports 0x%x (expected "
	    "EPOLLIN|EPOLLOUT|EPOLLRDHUP, once)", how, e[0]);
	TRY(inout_read1(fds, seed, off, i, 0, 1));
	TRY(inout_read1(fds, seed, off, i, 1, 0));
	if (et)
		note("%s: %d rounds, %d edges with nothing new", how, INOUT_FRESH + INOUT_ROUNDS, extra);
	close(ep);
	close(fds[0]);
	close(fds[1]);
	return 0;
}

static int c_epoll_inout_et(void) { return inout_epoll(INOUT_ET); }
static int c_epoll_inout_lt(void) { return inout_epoll(INOUT_LT); }
static int c_epoll_inout_oneshot(void) { return inout_epoll(INOUT_ONESHOT); }

/* poll of both ends (an array on this thread's stack, or on the heap: the library reads the
 * former itself), of each end alone, and select: the call after both wrote reports
 * POLLIN|POLLOUT for each end; the call before, POLLOUT alone. Last, one end writes and shuts
 * down: POLLIN|POLLOUT|POLLRDHUP on the other at once. */
static int c_poll_inout(void)
{
	int fds[2];
	TRY(mkpair(&fds[0], &fds[1]));
	TRY(set_nonblock(fds[0], 1));
	TRY(set_nonblock(fds[1], 1));
	struct pollfd *heap = calloc(2, sizeof *heap);
	REQ(heap, "calloc");
	const char *names[5] = { "poll (stack array)", "poll (heap array)", "poll of one fd (stack)",
				 "poll of one fd (heap)", "select" };
	const short asked = POLLIN | POLLOUT | POLLRDHUP;
	uint64_t seed = xs_seed(0x10, 0x0e, 2), off[2] = { 0, 0 };
	int i;
	for (i = 0; i < INOUT_ROUNDS + 5; i++) {
		int last = i == INOUT_ROUNDS + 4, how = last ? 3 : i % 5; /* (poll of one fd, heap) */
		for (int after = 0; after < 2; after++) {
			short want = after ? POLLIN | POLLOUT : POLLOUT;
			short got[2] = { 0, 0 };
			if (after)
				TRY(inout_write(fds, seed, off, i));
			if (after && last) {
				REQE(shutdown(fds[1], SHUT_WR) == 0, "shutdown(SHUT_WR)");
				want |= POLLRDHUP;
			}
			int ms = after ? WAIT_MS : 0;
			if (how < 2) {
				struct pollfd stack[2];
				struct pollfd *p = how ? heap : stack;
				for (int end = 0; end < 2; end++)
					p[end] = (struct pollfd){ .fd = fds[end], .events = asked };
				int n = poll(p, 2, ms);
				REQE(n >= 0, "%s round %d: poll", names[how], i);
				got[0] = p[0].revents;
				got[1] = p[1].revents;
			} else if (how < 4) {
				for (int end = 0; end < 2; end++) {
					struct pollfd stack[1];
					struct pollfd *p = how == 3 ? heap : stack;
					p[0] = (struct pollfd){ .fd = fds[end], .events = asked };
					int n = poll(p, 1, ms);
					REQE(n >= 0, "%s round %d: poll", names[how], i);
					got[end] = p[0].revents;
				}
			} else {
				fd_set rs, ws;
				FD_ZERO(&rs);
				FD_ZERO(&ws);
				for (int end = 0; end < 2; end++) {
					FD_SET(fds[end], &rs);
					FD_SET(fds[end], &ws);
				}
				struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
				int n = select((fds[0] > fds[1] ? fds[0] : fds[1]) + 1, &rs, &ws, NULL, &tv);
				REQE(n >= 0, "select round %d", i);
				for (int end = 0; end < 2; end++)
					got[end] = (short)((FD_ISSET(fds[end], &rs) ? POLLIN : 0) |
							   (FD_ISSET(fds[end], &ws) ? POLLOUT : 0));
			}
			REQ(got[0] == want,
			    "%s round %d, %s both wrote%s: end 0 revents 0x%x, expected 0x%x", names[how], i,
			    after ? "after" : "before", last ? " (and end 1 shut down)" : "", got[0], want);
			if (!last)
				REQ(got[1] == want,
				    "%s round %d, %s both wrote: end 1 revents 0x%x, expected 0x%x", names[how],
				    i, after ? "after" : "before", got[1], want);
		}
		if (last) {
			TRY(inout_read1(fds, seed, off, i, 0, 1));
			TRY(inout_read1(fds, seed, off, i, 1, 0));
		} else
			TRY(inout_read(fds, seed, off, i));
	}
	free(heap);
	close(fds[0]);
	close(fds[1]);
	return 0;
}

static int c_epoll_nested(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	int inner = epoll_create1(0), outer = epoll_create1(0);
	REQE(inner >= 0 && outer >= 0, "epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = c }, o;
	REQE(epoll_ctl(inner, EPOLL_CTL_ADD, c, &ev) == 0, "epoll_ctl(inner, ADD socket)");
	ev.data.fd = inner;
	REQE(epoll_ctl(outer, EPOLL_CTL_ADD, inner, &ev) == 0, "epoll_ctl(outer, ADD inner epoll)");
	int n = epoll_wait(outer, &o, 1, 100);
	REQ(n == 0, "nothing sent, but the outer epoll_wait = %d", n);
	uint64_t seed = xs_seed(22, 23, 24);
	TRY(put(s, 777, seed, 0, "server write"));
	n = epoll_wait(outer, &o, 1, WAIT_MS);
	REQ(n == 1 && o.data.fd == inner && (o.events & EPOLLIN),
	    "outer epoll_wait = %d (fd %d, expected the inner epoll %d)", n, n > 0 ? o.data.fd : -1, inner);
	n = epoll_wait(inner, &o, 1, 0);
	REQ(n == 1 && o.data.fd == c && (o.events & EPOLLIN), "inner epoll_wait = %d", n);
	TRY(get(c, 777, seed, 0, "read after nested epoll"));
	n = epoll_wait(outer, &o, 1, 0);
	REQ(n == 0, "everything read, but the outer epoll_wait = %d", n);
	close(outer);
	close(inner);
	close(c);
	close(s);
	return 0;
}

static int c_nb_connect(void)
{
	int port, lfd = mk_listener(1, NULL, &port);
	if (lfd < 0)
		return -1;
	int c = ddp_sock(NULL);
	if (c < 0)
		return -1;
	TRY(set_nonblock(c, 1));
	struct sockaddr_in sa = lo_addr(port);
	int r = connect(c, (struct sockaddr *)&sa, sizeof sa);
	REQE(r == 0 || errno == EINPROGRESS, "nonblocking connect: expected EINPROGRESS (or 0), got %d", r);
	note("connect returned %s", r == 0 ? "0" : "EINPROGRESS");
	int s = acc(lfd);
	if (s < 0)
		return -1;
	int ev = wait_ev(c, POLLOUT, WAIT_MS);
	REQ(ev > 0 && (ev & POLLOUT), "not writable within %d ms after connect (revents 0x%x)", WAIT_MS, ev);
	REQ(!(ev & (POLLERR | POLLHUP)), "POLLERR/POLLHUP after connect (revents 0x%x)", ev);
	int err = -1;
	socklen_t l = sizeof err;
	REQE(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l) == 0, "getsockopt(SO_ERROR)");
	REQ(err == 0, "SO_ERROR after connect = %d (%s)", err, xs_errname(err));
	r = connect(c, (struct sockaddr *)&sa, sizeof sa);
	/* Linux answers the first connect() after a completed nonblocking connect with 0, later
	 * ones with EISCONN (EALREADY while still connecting) */
	REQE(r == 0 || errno == EISCONN || errno == EALREADY,
	     "connect again after completion: expected 0, EISCONN or EALREADY, got %d", r);
	r = connect(c, (struct sockaddr *)&sa, sizeof sa);
	REQE(r == -1 && (errno == EISCONN || errno == EALREADY), "connect a third time: %d, expected EISCONN", r);
	TRY(both_ways(c, s, "after nonblocking connect"));
	struct ddp_conn_info ci = { .state = DDP_STATE_RTS, .initiator = 1 };
	if (!tcp_mode)
		TRY(get_info(c, &ci));
	REQ(ci.state == DDP_STATE_RTS && ci.initiator == 1, "DDP_CONN_INFO: state %u initiator %u",
	    ci.state, ci.initiator);
	close(lfd);
	close(c);
	close(s);
	return 0;
}

/* A nonblocking connect to a port nobody listens on: the refusal is reported (SO_ERROR after
 * POLLOUT/POLLERR, or the error on the next read), bounded. */
static int c_nb_connect_refused(void)
{
	int port, lfd = mk_listener(0, NULL, &port);
	if (lfd < 0)
		return -1;
	close(lfd); /* nobody listens on port now */
	int c = ddp_sock(NULL);
	if (c < 0)
		return -1;
	TRY(set_nonblock(c, 1));
	struct sockaddr_in sa = lo_addr(port);
	int r = connect(c, (struct sockaddr *)&sa, sizeof sa);
	if (r != 0 && errno == ECONNREFUSED) {
		note("connect reported ECONNREFUSED at once");
		close(c);
		return 0;
	}
	REQE(r != 0 && errno == EINPROGRESS, "nonblocking connect to a closed port: %d", r);
	uint64_t dl = xs_deadline(WAIT_MS);
	int err = 0;
	for (;;) {
		int ev = wait_ev(c, POLLOUT | POLLIN, xs_ms_left(dl));
		REQ(ev > 0, "the refusal was not reported within %d ms", WAIT_MS);
		socklen_t l = sizeof err;
		REQE(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l) == 0, "getsockopt(SO_ERROR)");
		if (err)
			break;
		if (ev & (POLLIN | POLLHUP | POLLERR)) {
			char x;
			ssize_t n = read(c, &x, 1);
			if (n < 0 && errno != EAGAIN) {
				err = errno;
				break;
			}
			REQ(n != 1, "read data from a refused connection");
			if (n == 0) {
				/* EOF: SO_ERROR must say why */
				REQE(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &l) == 0, "getsockopt(SO_ERROR)");
				REQ(err != 0, "refused connection: EOF with SO_ERROR 0");
				break;
			}
		}
		REQ(xs_ms_left(dl) > 0, "the refusal was not reported within %d ms (poll 0x%x, SO_ERROR 0)",
		    WAIT_MS, ev);
		sleep_ms(2); /* POLLOUT is immediate on a queued connect: bounded polling */
	}
	REQ(err == ECONNREFUSED, "refused connection reported as %s, expected ECONNREFUSED", xs_errname(err));
	close(c);
	return 0;
}

static int c_nb_accept(void)
{
	int port, lfd = mk_listener(1, NULL, &port);
	if (lfd < 0)
		return -1;
	TRY(set_nonblock(lfd, 1));
	int r = accept(lfd, NULL, NULL);
	REQE(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK),
	     "nonblocking listener, nobody connecting: accept = %d", r);
	for (int round = 0; round < 2; round++) {
		struct conn_arg a = { .port = port, .ddp = 1, .fd = -1 };
		pthread_t t;
		REQ(pthread_create(&t, NULL, connector, &a) == 0, "pthread_create");
		int s = acc_flags(lfd, round == 0 ? -1 : SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s < 0)
			return -1;
		int fl = fcntl(s, F_GETFL), fdfl = fcntl(s, F_GETFD);
		if (round == 0) {
			REQ(!(fl & O_NONBLOCK), "accept() from a nonblocking listener: O_NONBLOCK set "
						"(Linux does not inherit it)");
			REQ(!(fdfl & FD_CLOEXEC), "accept(): FD_CLOEXEC set");
		} else {
			REQ(fl & O_NONBLOCK, "accept4(SOCK_NONBLOCK): O_NONBLOCK not set");
			REQ(fdfl & FD_CLOEXEC, "accept4(SOCK_CLOEXEC): FD_CLOEXEC not set");
			char x;
			ssize_t n = read(s, &x, 1);
			REQE(n < 0 && errno == EAGAIN, "accept4(SOCK_NONBLOCK), nothing sent: read = %zd", n);
		}
		TRY(timed_join(t, WAIT_MS + 2000, "connect"));
		REQ(a.fd >= 0, "connect: %s", xs_errname(a.err));
		TRY(both_ways(a.fd, s, round == 0 ? "accept" : "accept4"));
		struct ddp_conn_info ci = { .state = DDP_STATE_RTS };
		if (!tcp_mode)
			TRY(get_info(s, &ci));
		REQ(ci.state == DDP_STATE_RTS && ci.initiator == 0, "accepted: state %u initiator %u",
		    ci.state, ci.initiator);
		close(a.fd);
		close(s);
	}
	close(lfd);
	return 0;
}

static int c_nb_read(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(set_nonblock(c, 1));
	char buf[64];
	ssize_t r = read(c, buf, sizeof buf);
	REQE(r < 0 && errno == EAGAIN, "O_NONBLOCK, nothing sent: read = %zd", r);
	r = recv(c, buf, sizeof buf, 0);
	REQE(r < 0 && errno == EAGAIN, "O_NONBLOCK: recv = %zd", r);
	struct iovec iov = { buf, sizeof buf };
	r = readv(c, &iov, 1);
	REQE(r < 0 && errno == EAGAIN, "O_NONBLOCK: readv = %zd", r);
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	r = recvmsg(c, &mh, 0);
	REQE(r < 0 && errno == EAGAIN, "O_NONBLOCK: recvmsg = %zd", r);
	TRY(set_nonblock(c, 0));
	r = recv(c, buf, sizeof buf, MSG_DONTWAIT);
	REQE(r < 0 && errno == EAGAIN, "blocking socket, recv(MSG_DONTWAIT) = %zd", r);
	TRY(set_nonblock(c, 1));
	TRY(xfer(s, c, 500, "nonblocking read of data"));
	r = read(c, buf, sizeof buf);
	REQE(r < 0 && errno == EAGAIN, "everything read: read = %zd", r);
	close(c);
	close(s);
	return 0;
}

/* Nonblocking writes into a peer that does not read: EAGAIN eventually, not writable then;
 * writable again once the peer drains; every byte arrives. */
struct drain_arg {
	int fd;
	uint64_t seed;
	size_t total;
	int result;
};
static void *drainer(void *p)
{
	struct drain_arg *a = p;
	a->result = get(a->fd, a->total, a->seed, 0, "draining the peer");
	return NULL;
}

static int c_nb_write_full(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(set_nonblock(c, 1));
	const size_t chunk = 65536, cap = 512u << 20;
	uint8_t *buf = malloc(chunk);
	uint64_t seed = xs_seed(25, 26, 27);
	size_t off = 0;
	int eagain = 0;
	uint64_t dl = xs_deadline(20000);
	while (off < cap && xs_ms_left(dl) > 0) {
		xs_fill(buf, chunk, seed, off);
		ssize_t r = write(c, buf, chunk);
		if (r > 0) {
			off += (size_t)r;
			continue; /* a partial write: the next fill starts at the new offset */
		}
		REQE(r < 0 && (errno == EAGAIN || errno == EINTR), "nonblocking write");
		if (errno == EAGAIN) {
			eagain = 1;
			break;
		}
	}
	REQ(eagain, "no EAGAIN after %zu bytes written to a peer that does not read", off);
	note("EAGAIN after %zu bytes", off);
	struct pollfd p = { .fd = c, .events = POLLOUT };
	int pr = poll(&p, 1, 0);
	int pollout_while_full = pr == 1 && (p.revents & POLLOUT);
	/* drain on the peer in a thread, then POLLOUT must come back (bounded) */
	struct drain_arg d = { .fd = s, .seed = seed, .total = off };
	pthread_t t;
	REQ(pthread_create(&t, NULL, drainer, &d) == 0, "pthread_create");
	int ev = wait_ev(c, POLLOUT, WAIT_MS);
	int pollout_after = ev > 0 && (ev & POLLOUT);
	TRY(timed_join(t, 60000, "drainer"));
	REQ(d.result == 0, "the peer did not receive every byte written before EAGAIN");
	free(buf);
	REQ(!pollout_while_full, "write said EAGAIN but poll reports POLLOUT at once (an event loop "
				 "would spin): %zu bytes buffered", off);
	REQ(pollout_after, "not writable again within %d ms after the peer drained", WAIT_MS);
	TRY(set_nonblock(c, 0));
	TRY(both_ways(c, s, "after the full buffer"));
	close(c);
	close(s);
	return 0;
}

static int c_fcntl(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	int fl = fcntl(c, F_GETFL);
	REQE(fl >= 0, "F_GETFL");
	REQ((fl & O_ACCMODE) == O_RDWR && !(fl & O_NONBLOCK), "F_GETFL = 0x%x: expected O_RDWR, blocking", fl);
	REQE(fcntl(c, F_SETFL, fl | O_NONBLOCK) == 0, "F_SETFL O_NONBLOCK");
	int fl2 = fcntl(c, F_GETFL);
	REQ(fl2 & O_NONBLOCK, "F_SETFL O_NONBLOCK not reflected by F_GETFL (0x%x)", fl2);
	char buf[16];
	ssize_t r = read(c, buf, sizeof buf);
	REQE(r < 0 && errno == EAGAIN, "after F_SETFL O_NONBLOCK: read = %zd", r);
	REQE(fcntl(c, F_SETFL, fl2 & ~O_NONBLOCK) == 0, "F_SETFL blocking");
	REQ(!(fcntl(c, F_GETFL) & O_NONBLOCK), "O_NONBLOCK cleared, F_GETFL still shows it");
	REQ(fcntl(c, F_GETFD) == 0, "F_GETFD = 0x%x, expected 0", fcntl(c, F_GETFD));
	REQE(fcntl(c, F_SETFD, FD_CLOEXEC) == 0, "F_SETFD FD_CLOEXEC");
	REQ(fcntl(c, F_GETFD) == FD_CLOEXEC, "F_SETFD not reflected");
	REQE(fcntl(c, F_SETFD, 0) == 0, "F_SETFD 0");
	/* blocking again: a blocking read with SO_RCVTIMEO 200 ms waits, then EAGAIN */
	struct timeval tv = { 0, 200000 };
	REQE(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0, "SO_RCVTIMEO");
	uint64_t t0 = xs_now_ns();
	r = read(c, buf, sizeof buf);
	uint64_t ms = (xs_now_ns() - t0) / 1000000;
	REQE(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK),
	     "blocking read with SO_RCVTIMEO 200 ms, nothing sent: %zd after %llu ms", r,
	     (unsigned long long)ms);
	REQ(ms >= 150 && ms < 3000, "SO_RCVTIMEO 200 ms: the read returned after %llu ms",
	    (unsigned long long)ms);
	tv = (struct timeval){ 0, 0 };
	REQE(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0, "SO_RCVTIMEO 0");
	/* F_DUPFD */
	int d = fcntl(c, F_DUPFD_CLOEXEC, 200);
	REQE(d >= 200, "F_DUPFD_CLOEXEC 200");
	REQ(fcntl(d, F_GETFD) == FD_CLOEXEC, "F_DUPFD_CLOEXEC: FD_CLOEXEC not set");
	TRY(both_ways(d, s, "via F_DUPFD_CLOEXEC copy"));
	close(d);
	TRY(both_ways(c, s, "after closing the F_DUPFD copy"));
	close(c);
	close(s);
	return 0;
}

static int wait_child(pid_t pid, int ms, int *status);

/* A blocking read on c (nothing sent): fails unless it says EAGAIN; *ms its duration. */
static int read_eagain(int c, uint64_t *ms, const char *what)
{
	char buf[16];
	uint64_t t0 = xs_now_ns();
	ssize_t r = read(c, buf, sizeof buf);
	*ms = (xs_now_ns() - t0) / 1000000;
	REQE(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "%s: read = %zd after %llu ms", what, r,
	     (unsigned long long)*ms);
	return 0;
}

static int set_rcvtimeo(int c, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	REQE(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0, "SO_RCVTIMEO %d ms", ms);
	return 0;
}

/* The library keeps O_NONBLOCK and SO_RCVTIMEO once a blocking call asked them
 * (ddp-user/src/driver/settings.rs): every way of changing them must be seen by the next call,
 * each step after one that made the library ask. A kept old value shows as a read that waits
 * when it should not, or for the old time. */
static int c_settings(void)
{
	int c, s;
	uint64_t ms;
	TRY(mkpair(&c, &s));
	TRY(set_rcvtimeo(c, 100));
	TRY(read_eagain(c, &ms, "blocking, SO_RCVTIMEO 100 ms"));
	REQ(ms >= 80, "SO_RCVTIMEO 100 ms: returned after %llu ms", (unsigned long long)ms);
	TRY(set_rcvtimeo(c, 400));
	TRY(read_eagain(c, &ms, "SO_RCVTIMEO raised to 400 ms"));
	REQ(ms >= 350, "SO_RCVTIMEO raised to 400 ms: returned after %llu ms (the old 100 ms kept?)",
	    (unsigned long long)ms);
	TRY(set_nonblock(c, 1));
	TRY(read_eagain(c, &ms, "F_SETFL O_NONBLOCK"));
	REQ(ms < 200, "O_NONBLOCK set by F_SETFL: the read waited %llu ms", (unsigned long long)ms);
	int zero = 0, one = 1;
	REQE(ioctl(c, FIONBIO, &zero) == 0, "ioctl(FIONBIO, 0)");
	TRY(read_eagain(c, &ms, "FIONBIO 0"));
	REQ(ms >= 350, "blocking again by FIONBIO 0: returned after %llu ms", (unsigned long long)ms);
	REQE(ioctl(c, FIONBIO, &one) == 0, "ioctl(FIONBIO, 1)");
	TRY(read_eagain(c, &ms, "FIONBIO 1"));
	REQ(ms < 200, "O_NONBLOCK set by FIONBIO: the read waited %llu ms", (unsigned long long)ms);
	/* through a copy of the fd (the same open file) */
	int d = dup(c);
	REQE(d >= 0, "dup");
	TRY(set_nonblock(d, 0));
	TRY(read_eagain(c, &ms, "blocking again through a dup"));
	REQ(ms >= 350, "blocking again through a dup: returned after %llu ms", (unsigned long long)ms);
	TRY(set_rcvtimeo(d, 150));
	TRY(read_eagain(c, &ms, "SO_RCVTIMEO 150 ms through a dup"));
	REQ(ms >= 120 && ms < 350, "SO_RCVTIMEO 150 ms through a dup: returned after %llu ms",
	    (unsigned long long)ms);
	close(d);
	/* a forked child shares the open file: its F_SETFL is seen by the parent, which the
	   library cannot be told of (so from the fork on it asks the kernel) */
	TRY(set_rcvtimeo(c, 400));
	TRY(read_eagain(c, &ms, "before the fork"));
	REQ(ms >= 350, "before the fork: returned after %llu ms", (unsigned long long)ms);
	fflush(stdout);
	pid_t pid = fork();
	REQE(pid >= 0, "fork");
	if (pid == 0) {
		int fl = fcntl(c, F_GETFL);
		_exit(fl >= 0 && fcntl(c, F_SETFL, fl | O_NONBLOCK) == 0 ? 0 : 1);
	}
	int st;
	TRY(wait_child(pid, 20000, &st));
	REQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status 0x%x)", st);
	TRY(read_eagain(c, &ms, "O_NONBLOCK set by a forked child"));
	REQ(ms < 200, "O_NONBLOCK set by a forked child: the parent's read waited %llu ms",
	    (unsigned long long)ms);
	TRY(set_nonblock(c, 0));
	TRY(set_rcvtimeo(c, 0));
	TRY(both_ways(c, s, "after the changes"));
	close(c);
	close(s);
	return 0;
}

static int get_nodelay(int fd, int *v)
{
	socklen_t l = sizeof *v;
	*v = -1;
	REQE(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, v, &l) == 0 && l == sizeof *v, "getsockopt(TCP_NODELAY)");
	return 0;
}

/* Nagle's algorithm is the application's choice on a DDP socket's byte stream, as on TCP: the
 * library switches it per write size underneath (ddp-user NAGLE_WRITE_MAX) but TCP_NODELAY reads
 * what the application set; the first extension call sets TCP_NODELAY for good. Streams of small
 * and large writes, mixed, arrive whole either way. */
static int c_nagle(void)
{
	int c, s, v;
	TRY(mkpair(&c, &s));
	TRY(get_nodelay(c, &v));
	REQ(v == 0, "TCP_NODELAY of a new client socket: %d, expected 0 (as TCP)", v);
	TRY(get_nodelay(s, &v));
	REQ(v == 0, "TCP_NODELAY of an accepted socket: %d, expected 0", v);
	/* small and large writes, interleaved, Nagle on: every byte arrives (the reader checks) */
	uint64_t seed = xs_seed(61, 62, 63), off = 0;
	static const size_t sizes[] = { 17, 300, 65536, 5, 4096, 4097, 200000, 1, 1, 1, 9000, 64 };
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			TRY(put(c, sizes[i], seed, off, "client write"));
			TRY(get(s, sizes[i], seed, off, "server read"));
			off += sizes[i];
		}
	TRY(get_nodelay(c, &v));
	REQ(v == 0, "TCP_NODELAY after large writes: %d, expected the application's 0", v);
	char cv = 7;
	socklen_t l = 1;
	REQE(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &cv, &l) == 0, "getsockopt(TCP_NODELAY) into a char");
	REQ(l == 1 && cv == 0, "TCP_NODELAY into a char: length %u, value %d (expected 1, 0)", l, cv);
	int one = 1, zero = 0;
	REQE(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0, "TCP_NODELAY 1");
	TRY(put(c, 100, seed, off, "write after TCP_NODELAY 1"));
	TRY(get(s, 100, seed, off, "read after TCP_NODELAY 1"));
	off += 100;
	TRY(get_nodelay(c, &v));
	REQ(v == 1, "TCP_NODELAY set to 1 reads %d", v);
	REQE(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &zero, sizeof zero) == 0, "TCP_NODELAY 0");
	TRY(put(c, 70000, seed, off, "large write after TCP_NODELAY 0"));
	TRY(get(s, 70000, seed, off, "read after TCP_NODELAY 0"));
	TRY(get_nodelay(c, &v));
	REQ(v == 0, "TCP_NODELAY set back to 0 reads %d after a large write", v);
	TRY(both_ways(c, s, "after the TCP_NODELAY changes"));
	if (!tcp_mode) {
		/* an extension call: the engine's TCP_NODELAY from now on */
		static uint8_t rb[256];
		struct iovec ri = { rb, sizeof rb };
		REQE(ddp_post_recv(s, 1, &ri, 1) == 0, "ddp_post_recv");
		TRY(get_nodelay(s, &v));
		REQ(v == 1, "TCP_NODELAY after an extension call: %d, expected 1", v);
	}
	close(c);
	close(s);
	return 0;
}

static int c_ioctl(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	int one = 1, zero = 0, avail = -1;
	REQE(ioctl(c, FIONBIO, &one) == 0, "ioctl(FIONBIO, 1)");
	REQ(fcntl(c, F_GETFL) & O_NONBLOCK, "FIONBIO 1: F_GETFL shows no O_NONBLOCK");
	char buf[16];
	ssize_t r = read(c, buf, sizeof buf);
	REQE(r < 0 && errno == EAGAIN, "after FIONBIO 1: read = %zd", r);
	REQE(ioctl(c, FIONREAD, &avail) == 0, "ioctl(FIONREAD)");
	REQ(avail == 0, "nothing sent: FIONREAD = %d", avail);
	uint64_t seed = xs_seed(28, 29, 30);
	TRY(put(s, 777, seed, 0, "server write"));
	uint64_t dl = xs_deadline(WAIT_MS);
	do {
		REQE(ioctl(c, FIONREAD, &avail) == 0, "ioctl(FIONREAD)");
		if (avail == 777)
			break;
		REQ(avail >= 0 && avail < 777, "FIONREAD = %d, expected <= 777", avail);
		sleep_ms(1); /* bounded polling: the bytes arrive in pieces */
	} while (xs_ms_left(dl) > 0);
	REQ(avail == 777, "FIONREAD = %d, expected 777 within %d ms", avail, WAIT_MS);
	int inq = -1;
	REQE(ioctl(c, SIOCINQ, &inq) == 0 && inq == 777, "SIOCINQ = %d", inq);
	TRY(get(c, 300, seed, 0, "first 300 bytes"));
	REQE(ioctl(c, FIONREAD, &avail) == 0 && avail == 477, "FIONREAD after reading 300 = %d", avail);
	TRY(get(c, 477, seed, 300, "the rest"));
	REQE(ioctl(c, FIONREAD, &avail) == 0 && avail == 0, "FIONREAD after reading all = %d", avail);
	REQE(ioctl(c, FIONBIO, &zero) == 0, "ioctl(FIONBIO, 0)");
	REQ(!(fcntl(c, F_GETFL) & O_NONBLOCK), "FIONBIO 0: F_GETFL still shows O_NONBLOCK");
	TRY(both_ways(c, s, "after FIONBIO 0"));
	close(c);
	close(s);
	return 0;
}

/* ioctl(fd, SIOCOUTQ|SIOCOUTQNSD) as one int; -1 with errno on failure. */
static int outq(int fd, unsigned long req)
{
	int n = -1;
	return ioctl(fd, req, &n) == 0 ? n : -1;
}

/* Waits (bounded) until SIOCOUTQ and SIOCOUTQNSD of fd are 0; the last values in q and nsd. */
static int outq_drains(int fd, int *q, int *nsd)
{
	uint64_t dl = xs_deadline(WAIT_MS);
	do {
		*nsd = outq(fd, SIOCOUTQNSD);
		*q = outq(fd, SIOCOUTQ);
		if (*q == 0 && *nsd == 0)
			return 1;
		if (*q < 0 || *nsd < 0)
			return 0;
		/* bounded polling: acknowledgements raise no event on the sender's fd */
		sleep_ms(1);
	} while (xs_ms_left(dl) > 0);
	return 0;
}

/* SIOCOUTQ: bytes the peer has not acknowledged; SIOCOUTQNSD: bytes not sent yet (Linux TCP,
 * tcp_ioctl). On a DDP socket: the engine's unsent bytes plus the TCP socket's (engine.md). */
static int c_ioctl_outq(void)
{
	int port, lfd = mk_listener(1, NULL, &port);
	if (lfd < 0)
		return -1;
	int r = outq(lfd, SIOCOUTQ);
	REQE(r < 0 && errno == EINVAL, "SIOCOUTQ on a listener = %d, expected EINVAL (as TCP)", r);
	int c, s;
	TRY(connect_accept(lfd, port, 1, NULL, &c, &s));
	close(lfd);
	int q, nsd;
	REQE(outq_drains(c, &q, &nsd), "fresh connection: SIOCOUTQ %d, SIOCOUTQNSD %d, expected 0 "
	     "within %d ms", q, nsd, WAIT_MS);
	/* N bytes to a peer that reads them: every byte is acknowledged, the count drains to 0 */
	const size_t n = 300000;
	uint64_t seed = xs_seed(31, 32, 33);
	struct drain_arg d = { .fd = s, .seed = seed, .total = n };
	pthread_t t;
	REQ(pthread_create(&t, NULL, drainer, &d) == 0, "pthread_create");
	int pr = put(c, n, seed, 0, "writing to a reading peer");
	TRY(timed_join(t, 60000, "reader"));
	TRY(pr);
	REQ(d.result == 0, "the peer did not receive the %zu bytes", n);
	REQE(outq_drains(c, &q, &nsd), "after the peer read all %zu bytes: SIOCOUTQ %d, SIOCOUTQNSD "
	     "%d, expected 0 within %d ms", n, q, nsd, WAIT_MS);
	/* a peer that does not read: write until EAGAIN; then bytes are unacknowledged and unsent */
	TRY(set_nonblock(c, 1));
	const size_t chunk = 65536, cap = 512u << 20;
	uint8_t *buf = malloc(chunk);
	REQ(buf != NULL, "malloc");
	seed = xs_seed(34, 35, 36);
	size_t off = 0;
	int eagain = 0;
	uint64_t dl = xs_deadline(20000);
	while (off < cap && xs_ms_left(dl) > 0) {
		xs_fill(buf, chunk, seed, off);
		ssize_t w = write(c, buf, chunk);
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		REQE(w < 0 && (errno == EAGAIN || errno == EINTR), "nonblocking write");
		if (errno == EAGAIN) {
			eagain = 1;
			break;
		}
	}
	free(buf);
	REQ(eagain, "no EAGAIN after %zu bytes written to a peer that does not read", off);
	nsd = outq(c, SIOCOUTQNSD);
	REQE(nsd > 0, "window full (%zu bytes written): SIOCOUTQNSD = %d, expected > 0", off, nsd);
	q = outq(c, SIOCOUTQ);
	REQE(q > 0, "window full (%zu bytes written): SIOCOUTQ = %d, expected > 0", off, q);
	/* DDP: the bytes in the TCP socket are FPDUs, whose headers, CRCs and markers count
	 * (at most 1/64 more; EAGAIN comes when the kernel's buffer is full, as for TCP, so most
	 * of what is unacknowledged is there) */
	size_t most = tcp_mode ? off : off + off / 64 + 4096;
	REQ((size_t)q <= most, "SIOCOUTQ = %d, more than the %zu bytes written (at most %zu)", q,
	    off, most);
	note("EAGAIN after %zu bytes: SIOCOUTQ %d, SIOCOUTQNSD %d", off, q, nsd);
	/* the peer reads everything: the count drains to 0 again */
	d = (struct drain_arg){ .fd = s, .seed = seed, .total = off };
	REQ(pthread_create(&t, NULL, drainer, &d) == 0, "pthread_create");
	TRY(timed_join(t, 60000, "drainer"));
	REQ(d.result == 0, "the peer did not receive every byte written before EAGAIN");
	REQE(outq_drains(c, &q, &nsd), "after the peer drained: SIOCOUTQ %d, SIOCOUTQNSD %d, "
	     "expected 0 within %d ms", q, nsd, WAIT_MS);
	TRY(set_nonblock(c, 0));
	TRY(both_ways(c, s, "after SIOCOUTQ"));
	close(c);
	close(s);
	return 0;
}

static int c_dup(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	int d1 = dup(c);
	REQE(d1 >= 0, "dup");
	int d2 = dup2(c, 150);
	REQE(d2 == 150, "dup2(c, 150)");
	int d3 = dup3(c, 151, O_CLOEXEC);
	REQE(d3 == 151, "dup3(c, 151, O_CLOEXEC)");
	REQ(fcntl(d3, F_GETFD) == FD_CLOEXEC && fcntl(d2, F_GETFD) == 0 && fcntl(c, F_GETFD) == 0,
	    "FD_CLOEXEC: only the dup3(O_CLOEXEC) copy must have it");
	/* dup2 over an fd that is already a DDP socket of another connection */
	int c2, s2;
	TRY(mkpair(&c2, &s2));
	TRY(both_ways(c2, s2, "second connection"));
	REQE(dup2(c, c2) == c2, "dup2(c, c2) over another DDP socket (closes it)");
	TRY(expect_eof(s2, "the replaced connection's peer"));
	close(s2);
	/* every copy carries the same connection */
	TRY(xfer(d1, s, 3000, "write via dup"));
	TRY(xfer(s, d2, 3000, "read via dup2"));
	TRY(xfer(c2, s, 1000, "write via the dup2'd-over fd"));
	struct ddp_conn_info ci = { .state = DDP_STATE_RTS };
	if (!tcp_mode)
		TRY(get_info(d3, &ci));
	REQ(ci.state == DDP_STATE_RTS, "DDP_CONN_INFO via dup3 copy: state %u", ci.state);
	/* closing all but one keeps the connection */
	close(c);
	close(d1);
	close(d2);
	close(c2);
	TRY(both_ways(d3, s, "the last copy after closing the others"));
	/* the peer sees nothing yet */
	struct pollfd p = { .fd = s, .events = POLLIN };
	REQ(poll(&p, 1, 50) == 0, "the peer sees an event (0x%x) while a copy is still open", p.revents);
	close(d3);
	TRY(expect_eof(s, "peer after the last copy was closed"));
	close(s);
	return 0;
}

/* close() from another thread while a thread is blocked in read(): the read returns, bounded. */
struct rd_arg {
	int fd;
	volatile int entered;
	volatile pid_t tid;
	ssize_t r;
	int err;
	volatile int done;
	uint8_t buf[256];
};
static void *blocked_reader(void *p)
{
	struct rd_arg *a = p;
	a->tid = gettid();
	__atomic_store_n(&a->entered, 1, __ATOMIC_RELEASE);
	a->r = read(a->fd, a->buf, sizeof a->buf);
	a->err = errno;
	a->done = 1;
	return NULL;
}

static int c_close_blocked_read(void)
{
	if (tcp_mode)
		return CASE_SKIP; /* Linux leaves the reader of a closed TCP socket blocked */
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(both_ways(c, s, "before"));
	struct rd_arg a = { .fd = c };
	pthread_t t;
	REQ(pthread_create(&t, NULL, blocked_reader, &a) == 0, "pthread_create");
	TRY(wait_blocked(&a.tid, &a.entered, "reader"));
	uint64_t t0 = xs_now_ns();
	REQE(close(c) == 0, "close while another thread reads");
	uint64_t close_ms = (xs_now_ns() - t0) / 1000000;
	/* Linux itself leaves a reader blocked on a closed TCP socket; the engine ends the
	 * connection when the last fd closes, so the reader must come back (EOF or an error). */
	if (timed_join(t, WAIT_MS, "read blocked during close") != 0) {
		/* unblock it so that the process can end: the peer sends */
		return -1;
	}
	uint64_t ms = (xs_now_ns() - t0) / 1000000;
	REQ(a.r <= 0, "the blocked read returned %zd bytes of data nobody sent", a.r);
	note("close took %llu ms; the blocked read returned %zd (%s) after %llu ms",
	     (unsigned long long)close_ms, a.r, a.r < 0 ? xs_errname(a.err) : "EOF",
	     (unsigned long long)ms);
	TRY(expect_eof(s, "peer after close"));
	close(s);
	return 0;
}

static int c_shutdown_wr(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	uint64_t seed = xs_seed(31, 32, 33);
	TRY(put(c, 20000, seed, 0, "data before SHUT_WR"));
	REQE(shutdown(c, SHUT_WR) == 0, "shutdown(SHUT_WR)");
	TRY(get(s, 20000, seed, 0, "peer reads the data before the EOF"));
	TRY(expect_eof(s, "peer after SHUT_WR"));
	/* the peer can still send back, and we read it */
	TRY(xfer(s, c, 30000, "peer sends back after our SHUT_WR"));
	TRY(xfer(s, c, 17, "and again"));
	/* writing after SHUT_WR: EPIPE (MSG_NOSIGNAL), and SIGPIPE without it */
	ssize_t r = send(c, "x", 1, MSG_NOSIGNAL);
	REQE(r < 0 && errno == EPIPE, "send after SHUT_WR: %zd, expected EPIPE", r);
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	r = write(c, "x", 1);
	int e = errno;
	struct timespec zero = { 0, 0 };
	int sig = sigtimedwait(&set, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	REQE(r < 0 && errno == EPIPE, "write after SHUT_WR: %zd, expected EPIPE", r);
	REQ(sig == SIGPIPE, "write after SHUT_WR without MSG_NOSIGNAL raised no SIGPIPE");
	REQE(shutdown(s, SHUT_WR) == 0, "peer shutdown(SHUT_WR)");
	TRY(expect_eof(c, "our EOF after the peer's SHUT_WR"));
	close(c);
	close(s);
	return 0;
}

static int same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_family == b->sin_family && a->sin_port == b->sin_port &&
	       a->sin_addr.s_addr == b->sin_addr.s_addr;
}

struct sockq {
	int type, domain, proto, error, nodelay, rcvbuf, acceptconn, keepalive;
};
static int sock_query(int fd, struct sockq *q, const char *who)
{
	socklen_t l;
#define GO(level, opt, field)                                                                     \
	l = sizeof q->field;                                                                      \
	REQE(getsockopt(fd, level, opt, &q->field, &l) == 0, "%s: getsockopt(" #opt ")", who);
	GO(SOL_SOCKET, SO_TYPE, type)
	GO(SOL_SOCKET, SO_DOMAIN, domain)
	GO(SOL_SOCKET, SO_PROTOCOL, proto)
	GO(SOL_SOCKET, SO_ERROR, error)
	GO(IPPROTO_TCP, TCP_NODELAY, nodelay)
	GO(SOL_SOCKET, SO_RCVBUF, rcvbuf)
	GO(SOL_SOCKET, SO_ACCEPTCONN, acceptconn)
	GO(SOL_SOCKET, SO_KEEPALIVE, keepalive)
#undef GO
	return 0;
}

static int c_sockname(void)
{
	int port, lfd = mk_listener(1, NULL, &port);
	if (lfd < 0)
		return -1;
	int acon = -1;
	socklen_t l = sizeof acon;
	REQE(getsockopt(lfd, SOL_SOCKET, SO_ACCEPTCONN, &acon, &l) == 0 && acon == 1,
	     "DDP listener: SO_ACCEPTCONN = %d", acon);
	int c, s;
	TRY(connect_accept(lfd, port, 1, NULL, &c, &s));
	int tc, ts;
	TRY(mkpair_o(0, NULL, NULL, &tc, &ts));
	struct sockaddr_in cl, cp, sl, sp;
	l = sizeof cl;
	REQE(getsockname(c, (struct sockaddr *)&cl, &l) == 0 && l == sizeof cl, "getsockname(client)");
	l = sizeof cp;
	REQE(getpeername(c, (struct sockaddr *)&cp, &l) == 0 && l == sizeof cp, "getpeername(client)");
	l = sizeof sl;
	REQE(getsockname(s, (struct sockaddr *)&sl, &l) == 0 && l == sizeof sl, "getsockname(accepted)");
	l = sizeof sp;
	REQE(getpeername(s, (struct sockaddr *)&sp, &l) == 0 && l == sizeof sp, "getpeername(accepted)");
	struct sockaddr_in want = lo_addr(port);
	REQ(cl.sin_family == AF_INET && cl.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && cl.sin_port != 0,
	    "client getsockname: family %d addr 0x%08x port %d", cl.sin_family, ntohl(cl.sin_addr.s_addr),
	    ntohs(cl.sin_port));
	REQ(same_addr(&cp, &want), "client getpeername: port %d, expected the listener's %d",
	    ntohs(cp.sin_port), port);
	REQ(same_addr(&sl, &want), "accepted getsockname: port %d, expected %d", ntohs(sl.sin_port), port);
	REQ(same_addr(&sp, &cl), "accepted getpeername (port %d) != client getsockname (port %d)",
	    ntohs(sp.sin_port), ntohs(cl.sin_port));
	/* accept's address argument too */
	struct conn_arg a = { .port = port, .ddp = 1, .fd = -1 };
	pthread_t t;
	REQ(pthread_create(&t, NULL, connector, &a) == 0, "pthread_create");
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	REQ(poll(&p, 1, WAIT_MS) == 1, "no connection");
	struct sockaddr_in aa;
	socklen_t al = sizeof aa;
	int s3 = accept(lfd, (struct sockaddr *)&aa, &al);
	REQE(s3 >= 0, "accept with address");
	TRY(timed_join(t, WAIT_MS + 2000, "connect"));
	REQ(a.fd >= 0, "connect: %s", xs_errname(a.err));
	struct sockaddr_in a3;
	l = sizeof a3;
	REQE(getsockname(a.fd, (struct sockaddr *)&a3, &l) == 0, "getsockname");
	REQ(al == sizeof aa && same_addr(&aa, &a3), "accept's address (port %d) != the client's (port %d)",
	    ntohs(aa.sin_port), ntohs(a3.sin_port));
	close(a.fd);
	close(s3);
	/* socket options: the same answers as a TCP socket */
	int one = 1, rb = 65536;
	const int fds[4] = { c, s, tc, ts };
	for (int i = 0; i < 4; i++) {
		REQE(setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0, "TCP_NODELAY");
		REQE(setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &rb, sizeof rb) == 0, "SO_RCVBUF");
	}
	struct sockq q[4];
	const char *names[4] = { "DDP client", "DDP accepted", "TCP client", "TCP accepted" };
	for (int i = 0; i < 4; i++)
		TRY(sock_query(fds[i], &q[i], names[i]));
	for (int i = 0; i < 2; i++) {
		const struct sockq *d = &q[i], *b = &q[i + 2];
		REQ(d->type == SOCK_STREAM && d->type == b->type, "%s: SO_TYPE %d, TCP %d", names[i], d->type, b->type);
		REQ(d->domain == b->domain, "%s: SO_DOMAIN %d, TCP %d", names[i], d->domain, b->domain);
		REQ(d->proto == b->proto, "%s: SO_PROTOCOL %d, TCP %d", names[i], d->proto, b->proto);
		REQ(d->error == 0 && b->error == 0, "%s: SO_ERROR %d", names[i], d->error);
		REQ(d->nodelay == b->nodelay && d->nodelay != 0, "%s: TCP_NODELAY %d, TCP %d", names[i],
		    d->nodelay, b->nodelay);
		REQ(d->rcvbuf == b->rcvbuf, "%s: SO_RCVBUF %d after setting 65536, TCP %d", names[i], d->rcvbuf,
		    b->rcvbuf);
		REQ(d->acceptconn == 0, "%s: SO_ACCEPTCONN %d", names[i], d->acceptconn);
		REQ(d->keepalive == b->keepalive, "%s: SO_KEEPALIVE %d, TCP %d", names[i], d->keepalive,
		    b->keepalive);
	}
	note("SO_TYPE %d SO_DOMAIN %d SO_PROTOCOL %d TCP_NODELAY %d SO_RCVBUF %d (TCP: %d)", q[0].type,
	     q[0].domain, q[0].proto, q[0].nodelay, q[0].rcvbuf, q[2].rcvbuf);
	int zero = 0, v = -1;
	REQE(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &zero, sizeof zero) == 0, "TCP_NODELAY 0");
	l = sizeof v;
	REQE(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &l) == 0 && v == 0, "TCP_NODELAY after setting 0: %d", v);
	struct stat st;
	REQE(fstat(c, &st) == 0 && S_ISSOCK(st.st_mode), "fstat: not S_ISSOCK");
	TRY(both_ways(c, s, "after the queries"));
	close(c);
	close(s);
	close(tc);
	close(ts);
	close(lfd);
	return 0;
}

static volatile sig_atomic_t sig_count;
static void on_usr1(int sig)
{
	(void)sig;
	sig_count++;
}

struct eintr_arg {
	int fd;
	volatile int entered;
	volatile pid_t tid;
	size_t want;
	size_t got;
	int saw_eintr;
	ssize_t r;
	int err;
	uint8_t buf[256];
};
static void *eintr_reader(void *p)
{
	struct eintr_arg *a = p;
	a->tid = gettid();
	__atomic_store_n(&a->entered, 1, __ATOMIC_RELEASE);
	while (a->got < a->want) {
		ssize_t r = read(a->fd, a->buf + a->got, a->want - a->got);
		a->r = r;
		if (r > 0) {
			a->got += (size_t)r;
			continue;
		}
		a->err = errno;
		if (r < 0 && errno == EINTR)
			a->saw_eintr = 1;
		break;
	}
	return NULL;
}

static int c_eintr(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	struct sigaction sa = { .sa_handler = on_usr1 }, old;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART */
	REQE(sigaction(SIGUSR1, &sa, &old) == 0, "sigaction");
	struct eintr_arg a = { .fd = c, .want = 100 };
	pthread_t t;
	REQ(pthread_create(&t, NULL, eintr_reader, &a) == 0, "pthread_create");
	TRY(wait_blocked(&a.tid, &a.entered, "reader"));
	int before = sig_count;
	REQ(pthread_kill(t, SIGUSR1) == 0, "pthread_kill");
	TRY(timed_join(t, WAIT_MS, "blocking read interrupted by a signal without SA_RESTART"));
	REQ(sig_count == before + 1, "the handler did not run");
	REQ(a.r == -1 && a.err == EINTR, "blocking read + signal without SA_RESTART: read = %zd (%s), "
					 "expected -1 EINTR", a.r, a.r < 0 ? xs_errname(a.err) : "data");
	/* with SA_RESTART: the read goes on and completes with the data */
	sa.sa_flags = SA_RESTART;
	REQE(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction(SA_RESTART)");
	struct eintr_arg b = { .fd = c, .want = 100 };
	REQ(pthread_create(&t, NULL, eintr_reader, &b) == 0, "pthread_create");
	TRY(wait_blocked(&b.tid, &b.entered, "reader"));
	before = sig_count;
	REQ(pthread_kill(t, SIGUSR1) == 0, "pthread_kill");
	uint64_t dl = xs_deadline(WAIT_MS);
	while (sig_count == before && xs_ms_left(dl) > 0)
		sleep_ms(1); /* bounded: wait for the handler */
	REQ(sig_count == before + 1, "the handler did not run within %d ms", WAIT_MS);
	/* the read is restarted: it must not return EINTR but complete with data sent now */
	uint64_t seed = xs_seed(34, 35, 36);
	TRY(put(s, 100, seed, 0, "data for the restarted read"));
	TRY(timed_join(t, WAIT_MS, "restarted read"));
	REQ(!b.saw_eintr, "SA_RESTART: the read returned EINTR");
	REQ(b.got == 100, "SA_RESTART: the read got %zu of 100 bytes (last %zd %s)", b.got, b.r,
	    xs_errname(b.err));
	size_t bad;
	REQ(xs_check(b.buf, 100, seed, 0, &bad) == 0, "content mismatch at %zu", bad);
	sigaction(SIGUSR1, &old, NULL);
	TRY(both_ways(c, s, "after the signals"));
	close(c);
	close(s);
	return 0;
}

/* wait for a child, bounded; returns its status or -1 (killed after the bound) */
static int wait_child(pid_t pid, int ms, int *status)
{
	uint64_t dl = xs_deadline(ms);
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return fail_(__LINE__, 1, errno, "waitpid");
		if (xs_ms_left(dl) == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, status, 0);
			return fail_(__LINE__, 0, 0, "child %d did not finish within %d ms (killed)", (int)pid, ms);
		}
		sleep_ms(2); /* bounded polling for the child's exit */
	}
}

static int fork_child_body(int c)
{
	cur_case = "fork (child)";
	uint64_t sd1 = xs_seed(40, 41, 42), sd2 = xs_seed(43, 44, 45);
	TRY(put(c, 2000, sd1, 0, "child writes on the inherited DDP fd"));
	TRY(get(c, 3000, sd2, 0, "child reads on the inherited DDP fd"));
	if (tcp_mode)
		return 0;
	/* extension calls on the inherited socket: EOPNOTSUPP */
	static uint8_t mb[4096];
	struct iovec iov = { mb, 64 };
	errno = 0;
	int r = ddp_post_send(c, 1, &iov, 1, DDP_SIGNALED);
	REQE(r == -1 && errno == EOPNOTSUPP, "child: ddp_post_send on the inherited fd = %d, expected EOPNOTSUPP", r);
	uint32_t st;
	r = ddp_reg_mr(c, mb, sizeof mb, DDP_ACCESS_LOCAL_WRITE, &st);
	REQE(r == -1 && errno == EOPNOTSUPP, "child: ddp_reg_mr on the inherited fd = %d, expected EOPNOTSUPP", r);
	struct ddp_wc wc;
	r = ddp_poll(c, &wc, 1);
	REQE(r == -1 && errno == EOPNOTSUPP, "child: ddp_poll on the inherited fd = %d, expected EOPNOTSUPP", r);
	/* the child's own new DDP connection works, extension API included */
	int c2, s2;
	TRY(mkpair(&c2, &s2));
	TRY(both_ways(c2, s2, "child's own connection"));
	static uint8_t rb[1024], sb[1024];
	uint64_t s3 = xs_seed(46, 47, 48);
	xs_fill(sb, sizeof sb, s3, 0);
	struct iovec ri = { rb, sizeof rb }, si = { sb, sizeof sb };
	REQE(ddp_post_recv(s2, 7, &ri, 1) == 0, "child: ddp_post_recv on its own connection");
	REQE(ddp_post_send(c2, 8, &si, 1, DDP_SIGNALED) == 0, "child: ddp_post_send on its own connection");
	r = ddp_wait(s2, &wc, 1, WAIT_MS);
	REQE(r == 1 && wc.status == DDP_WC_SUCCESS && wc.wr_id == 7 && wc.byte_len == sizeof sb,
	     "child: receive completion: r %d status %u wr_id %llu len %u", r, wc.status,
	     (unsigned long long)wc.wr_id, wc.byte_len);
	REQ(memcmp(rb, sb, sizeof sb) == 0, "child: received message differs");
	r = ddp_wait(c2, &wc, 1, WAIT_MS);
	REQE(r == 1 && wc.status == DDP_WC_SUCCESS && wc.wr_id == 8, "child: send completion r %d", r);
	close(c2);
	close(s2);
	return 0;
}

static int c_fork(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(both_ways(c, s, "before fork"));
	fflush(stdout);
	pid_t pid = fork();
	REQE(pid >= 0, "fork");
	if (pid == 0) {
		int r = fork_child_body(c);
		fflush(stdout);
		_exit(r == 0 ? 0 : 1);
	}
	uint64_t sd1 = xs_seed(40, 41, 42), sd2 = xs_seed(43, 44, 45);
	TRY(get(s, 2000, sd1, 0, "parent's peer reads what the child wrote"));
	TRY(put(s, 3000, sd2, 0, "parent's peer writes for the child"));
	int st;
	TRY(wait_child(pid, 20000, &st));
	REQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status 0x%x)", st);
	/* the parent's connection survives the child's exit, extension API included */
	TRY(both_ways(c, s, "parent after the child exited"));
	if (tcp_mode)
		return 0;
	static uint8_t rb[512], sb[512];
	uint64_t s3 = xs_seed(49, 50, 51);
	xs_fill(sb, sizeof sb, s3, 0);
	struct iovec ri = { rb, sizeof rb }, si = { sb, sizeof sb };
	REQE(ddp_post_recv(s, 1, &ri, 1) == 0, "parent: ddp_post_recv");
	REQE(ddp_post_send(c, 2, &si, 1, DDP_SIGNALED) == 0, "parent: ddp_post_send");
	struct ddp_wc wc;
	int r = ddp_wait(s, &wc, 1, WAIT_MS);
	REQE(r == 1 && wc.status == DDP_WC_SUCCESS && wc.byte_len == sizeof sb, "parent: receive completion r %d", r);
	REQ(memcmp(rb, sb, sizeof sb) == 0, "parent: received message differs");
	r = ddp_wait(c, &wc, 1, WAIT_MS);
	REQE(r == 1 && wc.status == DDP_WC_SUCCESS, "parent: send completion r %d", r);
	close(c);
	close(s);
	return 0;
}

/* the sockets this process has open (bounded; the library's own eventfds and epoll fds,
 * made with its first DDP socket, are not sockets) */
static int count_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0, seen = 0;
	struct dirent *e;
	struct stat st;
	while ((e = readdir(d)) != NULL && ++seen < 1000000)
		if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISSOCK(st.st_mode))
			n++;
	closedir(d);
	return n;
}

/* A forking case's end: tells the child (waiting on the pipe `go_w`) to exit and reaps it: a
 * failure of its own, or the parent's result so far `rc` (not hidden by the telling). */
static int tell_child_to_exit(pid_t pid, int go_w, int rc)
{
	if (write(go_w, "x", 1) != 1 && rc == 0)
		rc = fail_(__LINE__, 1, errno, "telling the child to exit");
	close(go_w);
	int st;
	TRY(wait_child(pid, 20000, &st));
	REQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status 0x%x)", st);
	return rc;
}

/* the forking server's child: it serves the accepted sockets the parent let go of, then
 * closes them and stays alive until told (the peer's EOF must come from its close, not its
 * exit) */
static int fork_server_child(const int *c, const int *s, int go)
{
	cur_case = "fork-server (child)";
	for (int i = 0; i < 3; i++)
		close(c[i]); /* the child does not use the parent's ends */
	uint64_t in = xs_seed(52, 53, 54), out = xs_seed(55, 56, 57);
	/* 1: both ways, then a half close: the child reads on after its shutdown */
	TRY(get(s[0], 300000, in, 0, "child reads the peer's request on inherited socket 1"));
	TRY(put(s[0], 500000, out, 0, "child answers on inherited socket 1"));
	REQE(shutdown(s[0], SHUT_WR) == 0, "child: shutdown(SHUT_WR) of socket 1");
	TRY(get(s[0], 7000, in, 300000, "child reads on socket 1 after its shutdown"));
	TRY(expect_eof(s[0], "child: the peer's shutdown of socket 1"));
	close(s[0]);
	/* 2: an answer, then a close: that close is the end of the stream for the peer */
	TRY(get(s[1], 1000, in, 0, "child reads the peer's request on inherited socket 2"));
	TRY(put(s[1], 200000, out, 0, "child answers on inherited socket 2"));
	close(s[1]);
	/* 3: the peer closes first: the end of the stream, then the child's close */
	TRY(get(s[2], 3000, in, 0, "child reads the peer's last words on inherited socket 3"));
	TRY(expect_eof(s[2], "child: the peer's close of socket 3"));
	close(s[2]);
	char b;
	REQE(read(go, &b, 1) == 1, "child: waiting to be told to exit");
	return 0;
}

/* The forking server: accepted sockets are handed to a child and the parent closes its copies
 * at once (socat fork, inetd, ForkingMixIn). The connections live on with the child in both
 * directions, a half close included, and one ends when the child closes it, before the child
 * exits. */
static int c_fork_server(void)
{
	int c[3], s[3], go[2];
	int socks0 = count_sockets();
	for (int i = 0; i < 3; i++)
		TRY(mkpair(&c[i], &s[i]));
	TRY(both_ways(c[0], s[0], "before fork"));
	REQE(pipe(go) == 0, "pipe");
	fflush(stdout);
	pid_t pid = fork();
	REQE(pid >= 0, "fork");
	if (pid == 0) {
		close(go[1]);
		int r = fork_server_child(c, s, go[0]);
		fflush(stdout);
		_exit(r == 0 ? 0 : 1);
	}
	close(go[0]);
	for (int i = 0; i < 3; i++)
		close(s[i]); /* the parent lets go of the accepted sockets */
	uint64_t in = xs_seed(52, 53, 54), out = xs_seed(55, 56, 57);
	int rc = put(c[0], 300000, in, 0, "peer's request on connection 1");
	if (rc == 0)
		rc = get(c[0], 500000, out, 0, "peer reads the child's answer on connection 1");
	if (rc == 0)
		rc = expect_eof(c[0], "peer: the child's shutdown(SHUT_WR) of connection 1");
	if (rc == 0)
		rc = put(c[0], 7000, in, 300000, "peer writes on connection 1 after the child's shutdown");
	if (rc == 0)
		rc = shutdown(c[0], SHUT_WR) == 0 ? 0 : fail_(__LINE__, 1, errno, "peer: shutdown(SHUT_WR)");
	if (rc == 0)
		rc = put(c[1], 1000, in, 0, "peer's request on connection 2");
	if (rc == 0)
		rc = get(c[1], 200000, out, 0, "peer reads the child's answer on connection 2");
	if (rc == 0)
		rc = expect_eof(c[1], "peer: the child's close of connection 2 (the child still lives)");
	if (rc == 0)
		rc = put(c[2], 3000, in, 0, "peer's last words on connection 3");
	close(c[2]);
	rc = tell_child_to_exit(pid, go[1], rc);
	close(c[0]);
	close(c[1]);
	TRY(rc);
	/* every connection is over: the parent holds no socket of any of them any more (the
	 * library's descriptors of a socket included) */
	uint64_t dl = xs_deadline(WAIT_MS);
	int n;
	while ((n = count_sockets()) > socks0 && xs_ms_left(dl) > 0)
		sleep_ms(2); /* bounded polling: closes finish on the engine's thread */
	REQ(n == socks0, "%d sockets open after the connections ended, %d before", n, socks0);
	return 0;
}

/* The end of a connection served for a forked child, read by the child: EOF or ECONNRESET
 * within WAIT_MS, after the bytes it was sent were read. */
static int read_to_end(int fd, const char *what)
{
	uint64_t dl = xs_deadline(WAIT_MS);
	char b[4096];
	for (int i = 0; i < 10000; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = xs_ms_left(dl);
		REQ(left > 0, "%s: no end within %d ms", what, WAIT_MS);
		int r = poll(&p, 1, left);
		REQE(r >= 0, "%s: poll", what);
		if (r == 0)
			continue;
		ssize_t n = read(fd, b, sizeof b);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 0;
		REQE(n > 0 || errno == EAGAIN || errno == EINTR, "%s: read", what);
		REQ(n <= 0, "%s: %zd bytes nobody sent", what, n);
	}
	return fail_(__LINE__, 0, 0, "%s: too many wake-ups", what);
}

/* Connections handed to a forked child (the parent closed its copies at once) end while the
 * child has them: one reset by the peer, one (DDP only) ended by the peer's RDMA Write to an
 * STag that does not exist (the parent's engine answers with a Terminate: the connection is
 * over). The child reads each end and closes its copy, and then, while the child still lives,
 * the parent's engine, which served the connections for it, lets go of every descriptor of
 * them. Once a connection is over the engine no longer reads what the child writes, so the
 * hang-up of the app end (its interest kept for that, `ConnState::eng_interest`) is how it
 * hears the child's close. */
static int c_fork_ended(void)
{
	int c[2], s[2], go[2];
	int n_conns = tcp_mode ? 1 : 2;
	int socks0 = count_sockets();
	for (int i = 0; i < n_conns; i++) {
		TRY(mkpair(&c[i], &s[i]));
		TRY(both_ways(c[i], s[i], "before fork"));
	}
	REQE(pipe(go) == 0, "pipe");
	uint64_t in = xs_seed(61, 62, 63), out = xs_seed(64, 65, 66);
	fflush(stdout);
	pid_t pid = fork();
	REQE(pid >= 0, "fork");
	if (pid == 0) {
		cur_case = "fork-ended (child)";
		close(go[1]);
		int r = 0;
		for (int i = 0; i < n_conns; i++) {
			close(c[i]);
			if (r == 0)
				r = get(s[i], 5000, in, 0, "child reads the peer's request");
			if (r == 0)
				r = put(s[i], 100, out, 0, "child answers");
			if (r == 0)
				r = read_to_end(s[i], i == 0 ? "child: the peer's reset" : "child: the end after a Terminate");
			close(s[i]);
		}
		char b;
		if (read(go[0], &b, 1) != 1 && r == 0)
			r = fail_(__LINE__, 1, errno, "child: waiting to be told to exit");
		fflush(stdout);
		_exit(r == 0 ? 0 : 1);
	}
	close(go[0]);
	for (int i = 0; i < n_conns; i++)
		close(s[i]); /* the parent lets go: its engine serves the connections for the child */
	int rc = 0;
	for (int i = 0; i < n_conns && rc == 0; i++) {
		rc = put(c[i], 5000, in, 0, "peer's request");
		if (rc == 0)
			rc = get(c[i], 100, out, 0, "peer reads the child's answer");
		if (rc != 0)
			break;
		if (i == 0) {
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };
			if (setsockopt(c[0], SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
				rc = fail_(__LINE__, 1, errno, "peer: SO_LINGER 0");
			close(c[0]); /* a reset */
			c[0] = -1;
		} else {
			static uint8_t wb[64];
			struct iovec iov = { wb, sizeof wb };
			if (ddp_post_write(c[1], 7, &iov, 1, 0x7ffe0100u, 0, 0) != 0)
				rc = fail_(__LINE__, 1, errno, "peer: ddp_post_write to an STag that does not exist");
			/* (the peer reads the end too: the Terminate) */
			if (rc == 0)
				rc = read_to_end(c[1], "peer: the Terminate");
		}
	}
	for (int i = 0; i < n_conns; i++)
		if (c[i] >= 0)
			close(c[i]);
	/* the child reads each end and closes; every socket of the connections goes (both ends
	 * are this process's), while the child waits to be told to exit */
	uint64_t dl = xs_deadline(WAIT_MS);
	int n = count_sockets();
	while (rc == 0 && n > socks0 && xs_ms_left(dl) > 0) {
		sleep_ms(2); /* bounded polling: the close is made on the engine's thread */
		n = count_sockets();
	}
	if (rc == 0 && n != socks0)
		rc = fail_(__LINE__, 0, 0, "%d sockets open %d ms after the child closed its copies of the ended connections, %d before",
			   n, WAIT_MS, socks0);
	rc = tell_child_to_exit(pid, go[1], rc);
	TRY(rc);
	printf("  fork-ended: the child read the end of %d connection(s), closed, and the parent released them\n", n_conns);
	return 0;
}

/* fork-exec traffic: 256 bytes each way, a pattern anyone can recompute (no seed state). */
#define FX_LEN 256
static void fx_fill(uint8_t *b, int dir)
{
	for (int i = 0; i < FX_LEN; i++)
		b[i] = (uint8_t)(i * 7 + dir * 101 + 3);
}

/* the exec'd program: the inherited DDP fd is the same byte stream, shared with the parent
 * (docs/engine.md "fork"/"exec"), as an inherited TCP socket: what it writes reaches the peer,
 * what the peer sends it reads */
static int exec_child(int fd)
{
	cur_case = "fork-exec (exec'd program)";
	uint8_t out[FX_LEN], want[FX_LEN], in[FX_LEN];
	fx_fill(out, 1);
	fx_fill(want, 2);
	if (xs_write_full(fd, out, FX_LEN, WAIT_MS) != 0)
		return fail_(__LINE__, 1, errno, "write on the inherited DDP fd");
	if (xs_read_full(fd, in, FX_LEN, WAIT_MS) != 0)
		return fail_(__LINE__, 1, errno, "read on the inherited DDP fd (expected the peer's %d bytes)", FX_LEN);
	if (memcmp(in, want, FX_LEN) != 0)
		return fail_(__LINE__, 0, 0, "the exec'd program read different bytes than the peer sent");
	printf("  fork-exec: the exec'd program wrote and read %d bytes on inherited fd %d\n", FX_LEN, fd);
	return 0;
}

static int c_fork_exec(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(both_ways(c, s, "before fork+exec"));
	fflush(stdout);
	pid_t pid = fork();
	REQE(pid >= 0, "fork");
	if (pid == 0) {
		char fdb[16];
		snprintf(fdb, sizeof fdb, "%d", c);
		execl("/proc/self/exe", "ddp-fdtest", "--exec-child", fdb, (char *)NULL);
		_exit(127);
	}
	/* the peer hears the exec'd program on the shared stream, and answers it there (the
	 * parent does not read c meanwhile) */
	uint8_t want[FX_LEN], in[FX_LEN], out[FX_LEN];
	fx_fill(want, 1);
	fx_fill(out, 2);
	REQE(xs_read_full(s, in, FX_LEN, WAIT_MS) == 0, "peer: reading what the exec'd program wrote");
	REQ(memcmp(in, want, FX_LEN) == 0, "peer: the exec'd program's bytes differ");
	REQE(xs_write_full(s, out, FX_LEN, WAIT_MS) == 0, "peer: answering the exec'd program");
	int st;
	TRY(wait_child(pid, 20000, &st));
	REQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the exec'd program failed (status 0x%x)", st);
	/* the parent's connection is not affected */
	TRY(both_ways(c, s, "parent after the exec'd child exited"));
	close(c);
	close(s);
	return 0;
}

static int c_listener_inherit(void)
{
	if (tcp_mode)
		return CASE_SKIP;
	struct dopt lo = { .crc = 1, .markers = 1, .ird = 5, .ord = 3, .pd = 4242, .pdata = "lsnr-pd" };
	struct dopt co = { .crc = 0, .markers = 0, .ird = -1, .ord = -1, .pd = -1, .pdata = "client-pd" };
	int c, s;
	TRY(mkpair_o(1, &lo, &co, &c, &s));
	struct ddp_conn_info ci, cc;
	TRY(get_info(s, &ci));
	TRY(get_info(c, &cc));
	note("accepted: rev %u crc %u markers tx %u rx %u ird %u ord %u pd %u; client: crc %u markers tx %u rx %u ird %u ord %u",
	     ci.mpa_rev, ci.crc, ci.markers_tx, ci.markers_rx, ci.ird, ci.ord, ci.pd, cc.crc, cc.markers_tx,
	     cc.markers_rx, cc.ird, cc.ord);
	REQ(ci.initiator == 0 && ci.state == DDP_STATE_RTS, "accepted: initiator %u state %u", ci.initiator, ci.state);
	REQ(ci.crc == 1 && cc.crc == 1, "CRC: the listener asked (DDP_CRC 1), the client did not: crc %u/%u",
	    ci.crc, cc.crc);
	REQ(ci.markers_rx == 1 && cc.markers_tx == 1, "markers: the listener asked for them: accepted rx %u, client tx %u",
	    ci.markers_rx, cc.markers_tx);
	REQ(ci.markers_tx == 0 && cc.markers_rx == 0, "markers toward the client, which did not ask: %u/%u",
	    ci.markers_tx, cc.markers_rx);
	REQ(ci.pd == 4242, "accepted socket's PD %u, the listener's DDP_PD is 4242", ci.pd);
	REQ(ci.mpa_rev == 2, "MPA rev %u", ci.mpa_rev);
	REQ(ci.ird == 5 && ci.ord == 3, "accepted IRD/ORD %u/%u: expected the listener's 5/3", ci.ird, ci.ord);
	REQ(cc.ord == 5 && cc.ird == 3, "client IRD/ORD %u/%u: expected 3/5 (the listener's 5/3)", cc.ird, cc.ord);
	/* the option values themselves */
	int v;
	socklen_t l;
#define OPTEQ(fd, opt, want)                                                                     \
	l = sizeof v;                                                                            \
	v = -1;                                                                                  \
	REQE(getsockopt(fd, SOL_DDP, opt, &v, &l) == 0, "getsockopt(accepted, " #opt ")");      \
	REQ(v == (want), "accepted socket: " #opt " = %d, the listener's is %d", v, (want));
	OPTEQ(s, DDP_MODE, 1)
	OPTEQ(s, DDP_CRC, 1)
	OPTEQ(s, DDP_MARKERS, 1)
	OPTEQ(s, DDP_IRD, 5)
	OPTEQ(s, DDP_ORD, 3)
	OPTEQ(s, DDP_PD, 4242)
#undef OPTEQ
	char pd[600];
	l = sizeof pd;
	REQE(getsockopt(c, SOL_DDP, DDP_PEER_PRIVATE_DATA, pd, &l) == 0, "getsockopt(client, DDP_PEER_PRIVATE_DATA)");
	REQ(l == 7 && memcmp(pd, "lsnr-pd", 7) == 0, "client sees peer private data '%.*s' (%u bytes), "
						    "expected the listener's 'lsnr-pd'", (int)l, pd, l);
	l = sizeof pd;
	REQE(getsockopt(s, SOL_DDP, DDP_PEER_PRIVATE_DATA, pd, &l) == 0, "getsockopt(accepted, DDP_PEER_PRIVATE_DATA)");
	REQ(l == 9 && memcmp(pd, "client-pd", 9) == 0, "accepted sees '%.*s'", (int)l, pd);
	TRY(both_ways(c, s, "listener-inherit"));
	TRY(xfer(c, s, 60000, "a larger transfer (markers, CRC)"));
	close(c);
	close(s);
	return 0;
}

/* raw syscalls (not interposed): the fd is a real byte stream */
static int c_raw_syscalls(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	uint64_t seed = xs_seed(52, 53, 54);
	uint8_t buf[4000];
	xs_fill(buf, 1500, seed, 0);
	long r = syscall(SYS_write, c, buf, 1500);
	REQE(r == 1500, "syscall(SYS_write) = %ld", r);
	TRY(get(s, 1500, seed, 0, "peer reads what a raw write(2) sent"));
	TRY(put(s, 4000, seed, 1500, "peer writes"));
	size_t got = 0;
	uint64_t dl = xs_deadline(WAIT_MS);
	while (got < 4000) {
		struct pollfd p = { .fd = c, .events = POLLIN };
		struct timespec ts = { 0, 50000000 };
		r = syscall(SYS_ppoll, &p, 1, &ts, NULL, 8);
		REQE(r >= 0 || errno == EINTR, "syscall(SYS_ppoll)");
		REQ(xs_ms_left(dl) > 0, "raw read: %zu of 4000 bytes within %d ms", got, WAIT_MS);
		if (r <= 0)
			continue;
		r = syscall(SYS_read, c, buf + got, 4000 - got);
		REQE(r > 0, "syscall(SYS_read) = %ld", r);
		got += (size_t)r;
	}
	size_t bad;
	REQ(xs_check(buf, 4000, seed, 1500, &bad) == 0, "raw read: content mismatch at %zu", bad);
	TRY(both_ways(c, s, "after raw syscalls"));
	close(c);
	close(s);
	return 0;
}

/* A reader thread: get() of a->total bytes from a->fd (content checked against a->seed). */
struct reuse_arg {
	int fd;
	size_t total;
	uint64_t seed;
	int rc;
};

static void *reuse_reader(void *p)
{
	struct reuse_arg *a = p;
	a->rc = get(a->fd, a->total, a->seed, 0, "reader");
	return NULL;
}

/* Large writes whose buffer the writer overwrites as soon as write() returns: nothing of the
 * old content may reach the peer, nor anything the kernel did not take at once be lost (under
 * the library a large write is sent straight from the caller's buffer and copied only as far as
 * the socket did not take it). Nonblocking writes until EAGAIN first (socket and engine full:
 * writes taken in part), then blocking writes while a reader thread drains and checks 24 MiB. */
static int c_write_reuse(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	const size_t blk = 1u << 20, total = 24u << 20;
	uint64_t seed = xs_seed(61, 62, 63);
	uint8_t *b = malloc(blk);
	REQ(b != NULL, "malloc");
	TRY(set_nonblock(c, 1));
	size_t off = 0, partial = 0;
	int full = 0;
	while (!full && off < total) {
		size_t n = total - off < blk ? total - off : blk;
		xs_fill(b, n, seed, off);
		ssize_t r = write(c, b, n);
		if (r < 0) {
			REQE(errno == EAGAIN, "nonblocking write");
			full = 1;
		} else {
			partial += (size_t)r < n;
			off += (size_t)r;
		}
		memset(b, 0xee, blk); /* the caller's buffer is its own again */
	}
	REQ(full, "%zu bytes written without EAGAIN: the socket never filled", off);
	struct reuse_arg a = { .fd = s, .total = total, .seed = seed };
	pthread_t t;
	REQ(pthread_create(&t, NULL, reuse_reader, &a) == 0, "pthread_create");
	TRY(set_nonblock(c, 0));
	while (off < total) {
		size_t n = total - off < blk ? total - off : blk;
		xs_fill(b, n, seed, off);
		ssize_t r = write(c, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(b);
			return fail_(__LINE__, 1, e, "blocking write at %zu of %zu", off, total);
		}
		off += (size_t)r;
		memset(b, 0xee, blk);
	}
	free(b);
	TRY(timed_join(t, 4 * WAIT_MS, "reader"));
	REQ(a.rc == 0, "the reader failed (content or EOF, above)");
	if (xs_verbose)
		printf("  write-reuse: %zu nonblocking writes taken in part before EAGAIN\n", partial);
	close(c);
	close(s);
	return 0;
}

/* readv/writev, sendmsg/recvmsg, MSG_PEEK, MSG_WAITALL */
static int c_msg_io(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	uint64_t seed = xs_seed(55, 56, 57);
	uint8_t out[2137], in[2137];
	xs_fill(out, sizeof out, seed, 0);
	struct iovec wv[3] = { { out, 100 }, { out + 100, 2000 }, { out + 2100, 37 } };
	ssize_t r = writev(c, wv, 3);
	REQE(r == 2137, "writev = %zd", r);
	REQ(wait_ev(s, POLLIN, WAIT_MS) > 0, "no data");
	uint8_t pk[16];
	r = recv(s, pk, sizeof pk, MSG_PEEK);
	REQE(r > 0 && memcmp(pk, out, (size_t)r) == 0, "MSG_PEEK = %zd / content", r);
	r = recv(s, in, sizeof in, MSG_WAITALL);
	REQE(r == 2137, "recv(MSG_WAITALL) = %zd", r);
	REQ(memcmp(in, out, sizeof in) == 0, "writev -> recv(MSG_WAITALL): content differs");
	xs_fill(out, sizeof out, seed, 2137);
	struct iovec sv[2] = { { out, 1000 }, { out + 1000, 1137 } };
	struct msghdr mh = { .msg_iov = sv, .msg_iovlen = 2 };
	r = sendmsg(s, &mh, MSG_NOSIGNAL);
	REQE(r == 2137, "sendmsg = %zd", r);
	memset(in, 0, sizeof in);
	struct iovec rv[2] = { { in, 37 }, { in + 37, 2100 } };
	struct msghdr rh = { .msg_iov = rv, .msg_iovlen = 2 };
	r = recvmsg(c, &rh, MSG_WAITALL);
	REQE(r == 2137, "recvmsg(MSG_WAITALL) = %zd", r);
	REQ(memcmp(in, out, sizeof in) == 0, "sendmsg -> recvmsg: content differs");
	TRY(xfer(c, s, 1, "1 byte"));
	close(c);
	close(s);
	return 0;
}

/* The signal cases' main loop: 100-byte round trips c -> s for 300 ms with SIGALRM every
 * 200 us from setitimer (bounded by 200,000 rounds and 3 s); the timer is stopped before it
 * returns. Fails if fewer than 200 rounds ran. */
static int alarmed_round_trips(int c, int s, uint64_t seed, int *rounds)
{
	struct itimerval it = { { 0, 200 }, { 0, 200 } }, off = { { 0, 0 }, { 0, 0 } };
	REQE(setitimer(ITIMER_REAL, &it, NULL) == 0, "setitimer");
	uint64_t t0 = xs_now_ns(), dl = xs_deadline(3000);
	int n = 0, rc = 0;
	while (xs_now_ns() - t0 < 300 * 1000000ull && n < 200000 && xs_ms_left(dl) > 0 && rc == 0) {
		uint64_t at = (uint64_t)n * 100;
		rc = put(c, 100, seed, at, "main loop, out");
		if (rc == 0)
			rc = get(s, 100, seed, at, "main loop, in");
		n++;
	}
	setitimer(ITIMER_REAL, &off, NULL);
	*rounds = n;
	TRY(rc);
	REQ(n >= 200, "only %d rounds in 300 ms", n);
	return 0;
}

/* Reads what a handler sent on fd (one byte of a counter each, counting from *got) until
 * `sent` bytes arrived, each checked in order; bounded by WAIT_MS. */
static int drain_counter(int fd, uint32_t sent, uint32_t *got)
{
	uint64_t dl = xs_deadline(WAIT_MS);
	while (*got < sent && xs_ms_left(dl) > 0) {
		if (wait_ev(fd, POLLIN, xs_ms_left(dl)) <= 0)
			break;
		uint8_t in[256];
		ssize_t r = recv(fd, in, sizeof in, MSG_DONTWAIT);
		for (ssize_t i = 0; i < r; i++) {
			REQ(in[i] == (uint8_t)*got, "handler's byte %u: %u", (unsigned)*got, in[i]);
			(*got)++;
		}
	}
	REQ(*got == sent, "the handler sent %u bytes, %u arrived", (unsigned)sent, (unsigned)*got);
	return 0;
}

/* I/O from a signal handler on a second connection while this thread keeps calling on its
 * first: SIGALRM every 200 us, the handler writes one byte of a counter on one end and reads
 * what arrived on the other (both non-blocking). The handler's calls come between the main
 * loop's calls and inside them (a call on the main connection holds this thread's cached
 * entry; the handler's then takes a counted reference, or moves the cache to its own socket
 * between calls). Both streams arrive whole and in order. */
static int sig_io_w = -1, sig_io_r = -1;
static volatile sig_atomic_t sig_io_runs, sig_io_bad;
static volatile uint32_t sig_io_sent, sig_io_got;
static volatile pid_t sig_io_tid;
static volatile sig_atomic_t sig_io_elsewhere;
static void on_alrm_io(int sig)
{
	(void)sig;
	int e = errno;
	/* SIGALRM from setitimer is for the process: it must reach this (only) application
	 * thread, never a library thread (where the handler would race this one) */
	if ((pid_t)syscall(SYS_gettid) != sig_io_tid)
		sig_io_elsewhere++;
	uint8_t b = (uint8_t)sig_io_sent;
	if (send(sig_io_w, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
		sig_io_sent++;
	uint8_t in[64];
	ssize_t r = recv(sig_io_r, in, sizeof in, MSG_DONTWAIT);
	for (ssize_t i = 0; i < r; i++) {
		if (in[i] != (uint8_t)sig_io_got)
			sig_io_bad = 1;
		sig_io_got++;
	}
	sig_io_runs++;
	errno = e;
}

static int c_signal_io(void)
{
	int c, s, c2, s2;
	TRY(mkpair(&c, &s));
	TRY(mkpair(&c2, &s2));
	sig_io_w = c2;
	sig_io_r = s2;
	sig_io_runs = sig_io_bad = sig_io_elsewhere = 0;
	sig_io_tid = (pid_t)syscall(SYS_gettid);
	sig_io_sent = sig_io_got = 0;
	struct sigaction sa = { .sa_handler = on_alrm_io, .sa_flags = SA_RESTART }, old;
	sigemptyset(&sa.sa_mask);
	REQE(sigaction(SIGALRM, &sa, &old) == 0, "sigaction");
	/* 300 ms of round trips (about 1,500 signals) */
	int rounds = 0;
	int rc = alarmed_round_trips(c, s, xs_seed(81, 82, 83), &rounds);
	sigaction(SIGALRM, &old, NULL);
	TRY(rc);
	REQ(sig_io_runs >= 100, "the handler ran only %d times in 300 ms", (int)sig_io_runs);
	REQ(!sig_io_elsewhere, "the handler ran %d times on a thread other than the application's",
	    (int)sig_io_elsewhere);
	REQ(!sig_io_bad, "the handler's connection delivered a byte out of order");
	/* the rest of the handler's bytes, read here */
	uint32_t got = sig_io_got;
	TRY(drain_counter(s2, sig_io_sent, &got));
	note("%d round trips, the handler ran %d times and moved %u bytes", rounds, (int)sig_io_runs,
	     (unsigned)sig_io_sent);
	TRY(both_ways(c, s, "main connection after the signals"));
	TRY(both_ways(c2, s2, "handler's connection after the signals"));
	close(c);
	close(s);
	close(c2);
	close(s2);
	return 0;
}

/* A signal handler's calls on the very sockets the interrupted code is using (async-signal-safe
 * on a kernel socket): SIGALRM every 200 us, installed before the sockets exist; the handler
 * asks FIONREAD, poll, SO_ERROR (and DDP_CONN_INFO) of both ends, peeks at the receiving end,
 * and sends one byte of a counter back on it while the thread loops writing one end and
 * reading the other. The library must not run the handler inside its own critical section
 * on that socket (it would wait for itself). Both directions arrive whole and in order. */
static int sig_same_c = -1, sig_same_s = -1;
static volatile sig_atomic_t sig_same_runs, sig_same_bad;
static volatile uint32_t sig_same_sent;
static volatile pid_t sig_same_tid;
static void on_alrm_same(int sig)
{
	(void)sig;
	int e = errno;
	if ((pid_t)syscall(SYS_gettid) != sig_same_tid)
		sig_same_bad |= 1;
	int fds[2] = { sig_same_c, sig_same_s };
	for (int i = 0; i < 2; i++) {
		int n = -1;
		if (ioctl(fds[i], FIONREAD, &n) != 0 || n < 0)
			sig_same_bad |= 2;
		struct pollfd p = { .fd = fds[i], .events = POLLIN | POLLOUT };
		if (poll(&p, 1, 0) < 0 || (p.revents & (POLLERR | POLLNVAL)))
			sig_same_bad |= 4;
		int err = -1;
		socklen_t l = sizeof err;
		if (getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err != 0)
			sig_same_bad |= 8;
		if (!tcp_mode) {
			struct ddp_conn_info ci;
			l = sizeof ci;
			if (getsockopt(fds[i], SOL_DDP, DDP_CONN_INFO, &ci, &l) != 0)
				sig_same_bad |= 16;
		}
	}
	uint8_t pk[8];
	if (recv(sig_same_s, pk, sizeof pk, MSG_PEEK | MSG_DONTWAIT) < 0 && errno != EAGAIN)
		sig_same_bad |= 32;
	uint8_t b = (uint8_t)sig_same_sent;
	if (send(sig_same_s, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
		sig_same_sent++;
	sig_same_runs++;
	errno = e;
}

static int c_signal_same(void)
{
	struct sigaction sa = { .sa_handler = on_alrm_same, .sa_flags = SA_RESTART }, old;
	sigemptyset(&sa.sa_mask);
	REQE(sigaction(SIGALRM, &sa, &old) == 0, "sigaction");
	int c, s;
	TRY(mkpair(&c, &s));
	sig_same_c = c;
	sig_same_s = s;
	sig_same_runs = sig_same_bad = 0;
	sig_same_sent = 0;
	sig_same_tid = (pid_t)syscall(SYS_gettid);
	int rounds = 0;
	int rc = alarmed_round_trips(c, s, xs_seed(91, 92, 93), &rounds);
	sigaction(SIGALRM, &old, NULL);
	TRY(rc);
	REQ(sig_same_runs >= 100, "the handler ran only %d times in 300 ms", (int)sig_same_runs);
	REQ(!(sig_same_bad & 1), "the handler ran on a thread other than the application's");
	REQ(!sig_same_bad, "a call in the handler failed (bits %d: 2 FIONREAD, 4 poll, 8 SO_ERROR, "
			   "16 DDP_CONN_INFO, 32 MSG_PEEK)", (int)sig_same_bad);
	/* the handler's bytes, s to c, whole and in order */
	uint32_t got = 0;
	TRY(drain_counter(c, sig_same_sent, &got));
	note("%d round trips, the handler ran %d times on the same sockets and sent %u bytes back",
	     rounds, (int)sig_same_runs, (unsigned)sig_same_sent);
	TRY(both_ways(c, s, "after the signals"));
	close(c);
	close(s);
	return 0;
}

/* What sigaction and signal report once the process has a DDP socket: the application's own
 * handlers and flags (the library's trampoline never shows), for a handler installed before
 * the first socket and for ones installed after; handlers run with their siginfo. */
static volatile sig_atomic_t act_h1, act_h2, act_h3;
static volatile int act_value, act_code;
static void act_on1(int sig) { (void)sig; act_h1++; }
static void act_on2(int sig) { (void)sig; act_h2++; }
static void act_on3(int sig, siginfo_t *si, void *ctx)
{
	(void)sig;
	(void)ctx;
	act_h3++;
	act_value = si->si_value.sival_int;
	act_code = si->si_code;
}

static int c_signal_actions(void)
{
	struct sigaction sa = { .sa_handler = act_on1, .sa_flags = SA_RESTART }, q, saved;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	REQE(sigaction(SIGUSR1, &sa, &saved) == 0, "sigaction");
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(both_ways(c, s, "the pair"));
	REQE(sigaction(SIGUSR1, NULL, &q) == 0, "sigaction(query)");
	REQ(q.sa_handler == act_on1, "the handler installed before the first socket reads back as %p",
	    (void *)q.sa_handler);
	REQ((q.sa_flags & SA_RESTART) && !(q.sa_flags & SA_SIGINFO),
	    "its flags read back as %#x (SA_RESTART without SA_SIGINFO expected)", q.sa_flags);
	REQ(sigismember(&q.sa_mask, SIGUSR2) == 1, "its mask lost SIGUSR2");
	REQE(raise(SIGUSR1) == 0, "raise");
	REQ(act_h1 == 1, "raise: the first handler ran %d times", (int)act_h1);
	void (*prev)(int) = signal(SIGUSR1, act_on2);
	REQ(prev == act_on1, "signal() returned %p, the previous handler is %p", (void *)prev,
	    (void *)act_on1);
	REQE(sigaction(SIGUSR1, NULL, &q) == 0, "sigaction(query)");
	REQ(q.sa_handler == act_on2, "after signal(): %p", (void *)q.sa_handler);
	REQE(raise(SIGUSR1) == 0, "raise");
	REQ(act_h2 == 1 && act_h1 == 1, "raise: handlers ran %d and %d times", (int)act_h1, (int)act_h2);
	struct sigaction si = { .sa_sigaction = act_on3, .sa_flags = SA_SIGINFO };
	sigemptyset(&si.sa_mask);
	REQE(sigaction(SIGUSR1, &si, &q) == 0, "sigaction(SA_SIGINFO)");
	REQ(q.sa_handler == act_on2, "the old action returned: %p", (void *)q.sa_handler);
	union sigval v = { .sival_int = 4242 };
	REQE(sigqueue(getpid(), SIGUSR1, v) == 0, "sigqueue");
	uint64_t dl = xs_deadline(WAIT_MS);
	while (act_h3 == 0 && xs_ms_left(dl) > 0)
		sleep_ms(1); /* bounded: a process-directed signal reaches this thread */
	REQ(act_h3 == 1, "sigqueue: the SA_SIGINFO handler ran %d times", (int)act_h3);
	REQ(act_value == 4242 && act_code == SI_QUEUE, "siginfo: value %d code %d (4242, SI_QUEUE "
						       "expected)", act_value, act_code);
	REQE(sigaction(SIGUSR1, NULL, &q) == 0, "sigaction(query)");
	REQ(q.sa_sigaction == act_on3 && (q.sa_flags & SA_SIGINFO), "SA_SIGINFO action reads back "
								    "as %p %#x", (void *)q.sa_handler, q.sa_flags);
	/* a forked child inherits the actions as they read: its handler runs with its data, and
	 * its queries report the application's handler */
	pid_t pid = fork();
	REQE(pid >= 0, "fork");
	if (pid == 0) {
		struct sigaction cq;
		if (sigaction(SIGUSR1, NULL, &cq) != 0 || cq.sa_sigaction != act_on3)
			_exit(3);
		union sigval cv = { .sival_int = 77 };
		if (sigqueue(getpid(), SIGUSR1, cv) != 0)
			_exit(4);
		for (int i = 0; i < 5000 && act_h3 < 2; i++)
			sleep_ms(1); /* bounded: the handler runs on this (only) thread */
		_exit(act_h3 == 2 && act_value == 77 ? 0 : 5);
	}
	int st = 0;
	TRY(wait_child(pid, WAIT_MS, &st));
	REQ(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child: status %#x (3 query, 4 sigqueue, "
						     "5 handler or its data)", st);
	void (*was)(int) = signal(SIGUSR1, SIG_IGN);
	REQ((void *)was == (void *)act_on3, "signal(SIG_IGN) returned %p", (void *)was);
	REQE(raise(SIGUSR1) == 0, "raise (ignored)");
	REQE(sigaction(SIGUSR1, &saved, &q) == 0, "sigaction(restore)");
	REQ(q.sa_handler == SIG_IGN, "SIG_IGN reads back as %p", (void *)q.sa_handler);
	note("handlers and flags read back as installed; siginfo passed through");
	close(c);
	close(s);
	return 0;
}

/* A closed DDP socket's fd number taken by a new one: calls on the number reach the new
 * socket (not the entry this thread used for the old one), the old one's peer reads EOF. */
static int c_fd_reuse(void)
{
	int c, s;
	TRY(mkpair(&c, &s));
	TRY(both_ways(c, s, "first connection"));
	int old_c = c;
	REQE(close(c) == 0, "close");
	uint8_t b[16];
	int ev = wait_ev(s, POLLIN, WAIT_MS);
	REQ(ev > 0, "the peer of a closed socket saw nothing within %d ms", WAIT_MS);
	ssize_t r = read(s, b, sizeof b);
	REQ(r == 0, "the peer of a closed socket read %zd (%s), expected EOF", r,
	    r < 0 ? xs_errname(errno) : "data");
	REQE(close(s) == 0, "close");
	int c2, s2;
	TRY(mkpair(&c2, &s2));
	int reused = c2 == old_c || s2 == old_c;
	TRY(both_ways(c2, s2, "second connection"));
	TRY(both_ways(s2, c2, "second connection, reversed"));
	if (!tcp_mode) {
		struct ddp_conn_info ci;
		TRY(get_info(c2, &ci));
		REQ(ci.bytes_rx > 0 && ci.bytes_tx > 0, "DDP_CONN_INFO of the new socket: %llu out, %llu in",
		    (unsigned long long)ci.bytes_tx, (unsigned long long)ci.bytes_rx);
	}
	note("closed fd %d; new sockets %d, %d (%s)", old_c, c2, s2,
	     reused ? "the number reused" : "the number not reused");
	close(c2);
	close(s2);
	return 0;
}

/* ---- the runner ------------------------------------------------------------------------------ */

struct tcase {
	const char *name;
	int (*fn)(void);
	const char *what;
};
static const struct tcase cases[] = {
	{ "poll", c_poll, "poll/ppoll: no POLLIN before data, POLLIN after, POLLOUT, partial reads" },
	{ "poll-goes-on", c_poll_goes_on, "poll woken by zero-length Sends goes on with the time left, ends on time" },
	{ "poll-two-threads", c_poll_two_threads, "two threads in poll(POLLIN) on one fd, or one in poll and one reading: data wakes both" },
	{ "poll-held-other", c_poll_held_other, "poll/select/epoll_wait of two fds: the first one's unread data does not hide the second one's input" },
	{ "ppoll-mask", c_ppoll_mask, "ppoll's signal mask holds during its wait: a pending signal it unblocks is EINTR" },
	{ "poll-large", c_poll_large, "large messages after POLLIN: whole, pieces, MSG_PEEK, FIONREAD, raw read" },
	{ "write-reuse", c_write_reuse, "large writes, buffer overwritten at once: peer gets every byte as written" },
	{ "select", c_select, "select/pselect readability and writability, partial reads, time left, EBADF, EFAULT" },
	{ "epoll-lt", c_epoll_lt, "epoll level-triggered: reported until drained, EPOLLOUT, epoll_pwait2, DEL" },
	{ "epoll-et", c_epoll_et, "epoll edge-triggered: 4000 small writes, drain to EAGAIN, no lost wakeup" },
	{ "epoll-oneshot", c_epoll_oneshot, "EPOLLONESHOT: disarmed after one event, re-armed by MOD" },
	{ "epoll-rdhup", c_epoll_rdhup, "EPOLLRDHUP on the peer's shutdown(SHUT_WR), data then EOF" },
	{ "epoll-held", c_epoll_held, "epoll with data kept for the reader: one entry per fd, LT/ET, turns, reused fd" },
	{ "epoll-inout-et", c_epoll_inout_et, "epoll edge-triggered, both ends write: the next call reports EPOLLIN|EPOLLOUT for each" },
	{ "epoll-inout-lt", c_epoll_inout_lt, "epoll level-triggered, both ends write: the next call reports EPOLLIN|EPOLLOUT for each" },
	{ "epoll-inout-oneshot", c_epoll_inout_oneshot, "EPOLLONESHOT re-armed, both ends write: the next call reports EPOLLIN|EPOLLOUT for each" },
	{ "poll-inout", c_poll_inout, "poll (stack and heap arrays, one fd or two) and select, both ends write: the next call reports POLLIN|POLLOUT for each" },
	{ "epoll-nested", c_epoll_nested, "an epoll fd inside an epoll fd" },
	{ "nb-connect", c_nb_connect, "nonblocking connect: EINPROGRESS, writable, SO_ERROR 0, data" },
	{ "nb-connect-refused", c_nb_connect_refused, "nonblocking connect to a closed port: ECONNREFUSED" },
	{ "nb-accept", c_nb_accept, "nonblocking listener: EAGAIN, accept, accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)" },
	{ "nb-read", c_nb_read, "read/recv/readv/recvmsg EAGAIN, MSG_DONTWAIT" },
	{ "nb-write-full", c_nb_write_full, "nonblocking writes to a non-reading peer: EAGAIN, POLLOUT semantics" },
	{ "fcntl", c_fcntl, "F_GETFL/F_SETFL O_NONBLOCK, F_GETFD/F_SETFD, SO_RCVTIMEO, F_DUPFD_CLOEXEC" },
	{ "ioctl", c_ioctl, "FIONBIO, FIONREAD/SIOCINQ" },
	{ "nagle", c_nagle, "TCP_NODELAY reads the application's choice (0 by default, as TCP) through writes of every size, which arrive whole; an extension call sets it" },
	{ "settings", c_settings, "O_NONBLOCK and SO_RCVTIMEO changed by F_SETFL, FIONBIO, setsockopt, through a dup and by a forked child: each change seen by the next blocking read" },
	{ "ioctl-outq", c_ioctl_outq, "SIOCOUTQ/SIOCOUTQNSD: unacknowledged/unsent bytes, 0 once the peer read all" },
	{ "dup", c_dup, "dup/dup2/dup3: every copy works, the last close ends the connection" },
	{ "close-blocked-read", c_close_blocked_read, "close from another thread while one is blocked in read" },
	{ "shutdown-wr", c_shutdown_wr, "SHUT_WR: peer reads EOF then still sends back; EPIPE/SIGPIPE" },
	{ "sockname", c_sockname, "getsockname/getpeername/accept address, getsockopt as a TCP socket" },
	{ "signal-io", c_signal_io, "I/O on a second connection from a SIGALRM handler (every 200 us) during a loop on the first: both streams whole and in order" },
	{ "signal-same", c_signal_same, "a SIGALRM handler (every 200 us) calling on the sockets the thread is using: FIONREAD, poll, getsockopt, MSG_PEEK, send back; both directions whole and in order" },
	{ "signal-actions", c_signal_actions, "sigaction/signal report the application's handlers and flags with DDP sockets open, in a forked child too; siginfo reaches an SA_SIGINFO handler" },
	{ "fd-reuse", c_fd_reuse, "a closed socket's fd number taken by a new socket: calls reach the new one, the old one's peer reads EOF" },
	{ "eintr", c_eintr, "signal during a blocking read: EINTR; with SA_RESTART the read completes" },
	{ "fork", c_fork, "fork: child uses the inherited fd as a byte stream, ext calls EOPNOTSUPP, own connection" },
	{ "fork-ended", c_fork_ended, "forking server: connections the child has end (reset; Terminate); the child's close releases them in the parent" },
	{ "fork-server", c_fork_server, "forking server: the parent closes accepted sockets at once, the child serves them (both ways, half close), its close ends the stream" },
	{ "fork-exec", c_fork_exec, "fork+exec: the inherited fd is the byte stream shared with the parent (as TCP)" },
	{ "listener-inherit", c_listener_inherit, "a DDP listener's options on its accepted sockets (DDP_CONN_INFO)" },
	{ "raw-syscalls", c_raw_syscalls, "raw write/read/ppoll syscalls on the fd" },
	{ "msg-io", c_msg_io, "writev/readv, sendmsg/recvmsg, MSG_PEEK, MSG_WAITALL" },
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static int run_one_inprocess(const char *name)
{
	for (int i = 0; i < NCASES; i++)
		if (!strcmp(cases[i].name, name)) {
			cur_case = name;
			signal(SIGPIPE, SIG_IGN);
			int r = cases[i].fn();
			fflush(stdout);
			return r == 0 ? 0 : r == CASE_SKIP ? CASE_SKIP : 1;
		}
	fprintf(stderr, "ddp-fdtest: no case '%s'\n", name);
	return 2;
}

/* the running case's process group: killed if the runner is terminated */
static volatile pid_t running_pgid;
static void on_term(int sig)
{
	if (running_pgid > 0)
		kill(-running_pgid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int run_case(const struct tcase *tc, int timeout_s)
{
	fflush(stdout);
	uint64_t t0 = xs_now_ns();
	pid_t pid = fork();
	if (pid < 0) {
		printf("FAIL %s: fork: %s\n", tc->name, strerror(errno));
		return 1;
	}
	if (pid == 0) {
		setpgid(0, 0);
		char v[16];
		snprintf(v, sizeof v, "%d", xs_verbose);
		execl("/proc/self/exe", "ddp-fdtest", "--case", tc->name, v, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	running_pgid = pid;
	int st = 0, timed_out = 0;
	uint64_t dl = xs_deadline(timeout_s * 1000);
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (xs_ms_left(dl) == 0) {
			timed_out = 1;
			kill(-pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		sleep_ms(2); /* bounded polling for the case's exit */
	}
	kill(-pid, SIGKILL); /* stragglers of the case (forked children) */
	running_pgid = 0;
	double ms = (double)(xs_now_ns() - t0) / 1e6;
	if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		printf("PASS %-20s %7.0f ms  %s\n", tc->name, ms, tc->what);
		return 0;
	}
	if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == CASE_SKIP) {
		printf("SKIP %-20s %7.0f ms  %s (DDP only)\n", tc->name, ms, tc->what);
		return 0;
	}
	char why[64];
	if (timed_out)
		snprintf(why, sizeof why, "timed out after %d s (hang)", timeout_s);
	else if (WIFSIGNALED(st))
		snprintf(why, sizeof why, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	else
		snprintf(why, sizeof why, "exit %d", WEXITSTATUS(st));
	printf("FAIL %-20s %7.0f ms  %s: %s\n", tc->name, ms, tc->what, why);
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ddp-fdtest [-t SECONDS] [-v] [CASE...]   (under scripts/exsock-run)\n"
		   "       ddp-fdtest -l\n"
		   "  -t SECONDS  bound of each case (default 30; every wait inside is bounded by %d ms)\n"
		   "  -D SECONDS  bound of the whole run (cases beyond it fail as not run)\n"
		   "  -v          details of passing cases too\n"
		   "  -T          baseline: the same cases on plain TCP sockets (DDP-only checks skipped)\n"
		   "  -l          list the cases\n"
		   "exit: 0 all passed, 1 a case failed, 2 usage, 77 libexsock.so not loaded\n",
		WAIT_MS);
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	xs_prog = "ddp-fdtest";
	int timeout_s = 30, total_s = 0;
	/* internal: one case in this process (the runner's child), the fork-exec case's program */
	const char *tm = getenv("DDP_FDTEST_TCP");
	tcp_mode = tm && !strcmp(tm, "1");
	if (argc == 4 && !strcmp(argv[1], "--case")) {
		xs_verbose = atoi(argv[3]);
		return run_one_inprocess(argv[2]);
	}
	if (argc == 3 && !strcmp(argv[1], "--exec-child"))
		return exec_child(atoi(argv[2])) == 0 ? 0 : 1;
	int op;
	while ((op = getopt(argc, argv, "t:D:vlTh")) != -1) {
		switch (op) {
		case 'T':
			tcp_mode = 1;
			setenv("DDP_FDTEST_TCP", "1", 1);
			break;
		case 't': timeout_s = (int)xs_opt_u64("-t", optarg, 1, 3600, 0); break;
		case 'D': total_s = (int)xs_opt_u64("-D", optarg, 1, 86400, 0); break;
		case 'v': xs_verbose++; break;
		case 'l':
			for (int i = 0; i < NCASES; i++)
				printf("%-20s %s\n", cases[i].name, cases[i].what);
			return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!tcp_mode && !ddp_available()) {
		printf("ddp-fdtest: libexsock.so with the DDP API is not loaded: run under scripts/exsock-run\n");
		return 77;
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	signal(SIGHUP, on_term);
	uint64_t all_dl = total_s ? xs_deadline(total_s * 1000) : 0;
	int fails = 0, ran = 0;
	for (int i = optind; i < argc; i++) {
		int found = 0;
		for (int j = 0; j < NCASES; j++)
			if (!strcmp(cases[j].name, argv[i]))
				found = 1;
		if (!found) {
			fprintf(stderr, "ddp-fdtest: no case '%s' (-l lists them)\n", argv[i]);
			return 2;
		}
	}
	for (int i = 0; i < NCASES; i++) {
		int sel = optind == argc;
		for (int j = optind; j < argc; j++)
			if (!strcmp(cases[i].name, argv[j]))
				sel = 1;
		if (!sel)
			continue;
		ran++;
		int left = all_dl ? xs_ms_left(all_dl) / 1000 : timeout_s;
		if (all_dl && left < 1) {
			printf("FAIL %-20s %7s     not run: the overall bound of %d s (-D) is used up\n",
			       cases[i].name, "-", total_s);
			fails++;
			continue;
		}
		fails += run_case(&cases[i], left < timeout_s ? left : timeout_s);
	}
	printf("ddp-fdtest: %d passed, %d failed\n", ran - fails, fails);
	return fails ? 1 : 0;
}
