/*
 * chaos-relay — a user-space TCP relay that does to a byte stream what the kernel's qdiscs
 * cannot: re-segment it into random writes down to 1 byte, stall it, reset it in the middle
 * of an FPDU, or flip one bit. Used by scripts/tests/faults-*.sh between two DDP programs.
 *
 *   chaos-relay -l ADDR:PORT -f ADDR:PORT [options]
 *     -l ADDR:PORT  listen here (PORT 0 = any; "listening on ADDR:PORT" is printed on stdout)
 *     -f ADDR:PORT  connect every accepted connection onward to here
 *     -s SEED       random seed (default 1); every connection/direction derives its own
 *     -r MAXSEG     re-segment: forward in writes of 1..MAXSEG bytes (uniform), TCP_NODELAY on
 *                   both legs (default 0 = forward what was read, as read)
 *     -p PERMILLE   stall before a write with this probability (per mille, default 0) ...
 *     -m MAXMS      ... for 1..MAXMS milliseconds (default 20)
 *     -R K          RST after K bytes of the chosen direction(s): forward exactly K bytes,
 *                   then close both legs with SO_LINGER {1, 0} (a TCP RST each way)
 *     -F K          flip bit (seeded, 0..7) of stream byte K of the chosen direction(s)
 *     -D DIR        c2s | s2c | both: the direction(s) -R and -F act on (default c2s);
 *                   -r and -p always act on both
 *     -n CONNS      exit after CONNS connections have ended (default 0 = never)
 *     -T SECONDS    hard bound on the relay's lifetime (default 600; SIGALRM ends it)
 *     -q            no per-connection summary lines
 *
 * Design: one thread per direction with blocking I/O (a read, then its bytes written out in
 * random-sized pieces), so a stalled or full direction never blocks the other one (the DDP
 * engine may be writing on both legs at once). EOF is forwarded as shutdown(SHUT_WR); a
 * reset or error on one leg resets the other. Each connection prints one summary line per
 * direction on stderr: bytes, writes, stalls, and the flip/RST offsets when they happened.
 *
 * Why C and not Rust: it is built by the same Makefile as the programs it sits between,
 * needs only libc and pthreads, and runs inside network namespaces without cargo.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF 65536

static uint64_t opt_seed = 1, opt_rst = UINT64_MAX, opt_flip = UINT64_MAX;
static unsigned opt_maxseg, opt_stall_pm, opt_stall_ms = 20, opt_conns, opt_lifetime = 600;
static int opt_dir_c2s = 1, opt_dir_s2c, opt_quiet;
static struct sockaddr_in fwd_addr;
static atomic_uint conns_done;

static _Noreturn void die(const char *what)
{
	fprintf(stderr, "chaos-relay: %s: %s\n", what, strerror(errno));
	exit(1);
}

static _Noreturn void usage(void)
{
	fprintf(stderr, "usage: chaos-relay -l ADDR:PORT -f ADDR:PORT [-s SEED] [-r MAXSEG] "
			"[-p PERMILLE] [-m MAXMS] [-R K] [-F K] [-D c2s|s2c|both] [-n CONNS] "
			"[-T SECONDS] [-q]\n");
	exit(2);
}

static void parse_addr(const char *s, struct sockaddr_in *a)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof host)
		usage();
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	memset(a, 0, sizeof *a);
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
		usage();
}

/* splitmix64 */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* An immediate RST on this leg, and no FIN before it: connect(AF_UNSPEC) is TCP's
 * disconnect (tcp_disconnect sends the RST and wakes a thread blocked on the socket); the
 * SO_LINGER {1, 0} makes the final close() abortive too. */
static void reset(int fd)
{
	struct linger l = { 1, 0 };
	struct sockaddr sa = { .sa_family = AF_UNSPEC };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
	connect(fd, &sa, sizeof sa);
}

struct conn;
struct dir {
	struct conn *c;
	int from, to, chaos; /* chaos: -R/-F act on this direction */
	const char *name;
	uint64_t rng, bytes, writes, stalls, flipped_at, rst_at;
	int flip_bit;
};
struct conn {
	int id, a, b;
	atomic_int reset; /* a leg was reset: both legs get SO_LINGER 0 */
	struct dir d[2];
};

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void *pump(void *arg)
{
	struct dir *d = arg;
	struct conn *c = d->c;
	static __thread uint8_t buf[BUF];
	/* the destination is gone: keep reading (and dropping) what the source sends, so that
	 * closing later is not a reset that would throw away bytes still queued toward the
	 * source from the other direction (e.g. the peer's Terminate) */
	int sink_dead = 0;
	for (;;) {
		size_t want = BUF;
		if (d->chaos && opt_rst != UINT64_MAX) {
			if (d->bytes >= opt_rst) {
				d->rst_at = d->bytes;
				goto do_reset;
			}
			if (opt_rst - d->bytes < want)
				want = (size_t)(opt_rst - d->bytes);
		}
		ssize_t n = recv(d->from, buf, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) { /* EOF: half-close onward */
			if (!atomic_load(&c->reset))
				shutdown(d->to, SHUT_WR);
			break;
		}
		if (n < 0) {
			/* our own deliberate reset (RST mode, other direction): nothing more to do */
			if (atomic_load(&c->reset))
				break;
			/* the source reset its end: pass on the end of the stream, after every byte
			 * already queued toward the destination (a reset here would discard them) */
			if (!sink_dead)
				shutdown(d->to, SHUT_WR);
			break;
		}
		if (sink_dead)
			continue;
		if (d->chaos && opt_flip != UINT64_MAX && d->flipped_at == UINT64_MAX &&
		    opt_flip >= d->bytes && opt_flip < d->bytes + (uint64_t)n) {
			buf[opt_flip - d->bytes] ^= (uint8_t)(1u << d->flip_bit);
			d->flipped_at = opt_flip;
		}
		size_t off = 0;
		while (off < (size_t)n) {
			size_t seg = (size_t)n - off;
			if (opt_maxseg) {
				size_t s = 1 + (size_t)(rnd(&d->rng) % opt_maxseg);
				if (s < seg)
					seg = s;
			}
			if (opt_stall_pm && rnd(&d->rng) % 1000 < opt_stall_pm) {
				unsigned ms = 1 + (unsigned)(rnd(&d->rng) % opt_stall_ms);
				struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
				while (nanosleep(&ts, &ts) && errno == EINTR)
					;
				d->stalls++;
			}
			if (write_all(d->to, buf + off, seg)) {
				sink_dead = 1;
				break;
			}
			off += seg;
			d->writes++;
		}
		d->bytes += (uint64_t)n;
	}
	return NULL;
do_reset:
	atomic_store(&c->reset, 1);
	reset(d->from);
	reset(d->to);
	return NULL;
}

static void *serve(void *arg)
{
	struct conn *c = arg;
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, pump, &c->d[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; !opt_quiet && i < 2; i++) {
		struct dir *d = &c->d[i];
		char ev[96] = "";
		int k = 0;
		if (d->flipped_at != UINT64_MAX)
			k += snprintf(ev + k, sizeof ev - (size_t)k, " flipped bit %d of byte %llu",
				      d->flip_bit, (unsigned long long)d->flipped_at);
		if (d->rst_at != UINT64_MAX)
			snprintf(ev + k, sizeof ev - (size_t)k, " RST after %llu bytes",
				 (unsigned long long)d->rst_at);
		fprintf(stderr, "chaos-relay: conn %d %s: %llu bytes in %llu writes, %llu stalls%s\n",
			c->id, d->name, (unsigned long long)d->bytes, (unsigned long long)d->writes,
			(unsigned long long)d->stalls, ev);
	}
	close(c->a);
	close(c->b);
	free(c);
	unsigned done = atomic_fetch_add(&conns_done, 1) + 1;
	if (opt_conns && done >= opt_conns) {
		fflush(stderr);
		_exit(0);
	}
	return NULL;
}

static uint64_t parse_u64(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || end == s)
		usage();
	return v;
}

int main(int argc, char **argv)
{
	struct sockaddr_in la;
	int have_l = 0, have_f = 0, opt;
	while ((opt = getopt(argc, argv, "l:f:s:r:p:m:R:F:D:n:T:q")) != -1) {
		switch (opt) {
		case 'l': parse_addr(optarg, &la); have_l = 1; break;
		case 'f': parse_addr(optarg, &fwd_addr); have_f = 1; break;
		case 's': opt_seed = parse_u64(optarg); break;
		case 'r': opt_maxseg = (unsigned)parse_u64(optarg); break;
		case 'p': opt_stall_pm = (unsigned)parse_u64(optarg); break;
		case 'm': opt_stall_ms = (unsigned)parse_u64(optarg); if (!opt_stall_ms) usage(); break;
		case 'R': opt_rst = parse_u64(optarg); break;
		case 'F': opt_flip = parse_u64(optarg); break;
		case 'D':
			opt_dir_c2s = !strcmp(optarg, "c2s") || !strcmp(optarg, "both");
			opt_dir_s2c = !strcmp(optarg, "s2c") || !strcmp(optarg, "both");
			if (!opt_dir_c2s && !opt_dir_s2c)
				usage();
			break;
		case 'n': opt_conns = (unsigned)parse_u64(optarg); break;
		case 'T': opt_lifetime = (unsigned)parse_u64(optarg); break;
		case 'q': opt_quiet = 1; break;
		default: usage();
		}
	}
	if (!have_l || !have_f || optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	alarm(opt_lifetime); /* SIGALRM's default action ends the process: a hard bound */

	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0)
		die("socket");
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(ls, (struct sockaddr *)&la, sizeof la) || listen(ls, 1024))
		die("bind/listen");
	socklen_t sl = sizeof la;
	getsockname(ls, (struct sockaddr *)&la, &sl);
	char host[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &la.sin_addr, host, sizeof host);
	printf("chaos-relay: listening on %s:%u\n", host, ntohs(la.sin_port));
	fflush(stdout);

	for (int id = 0;; id++) {
		int a = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (a < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept");
		}
		int b = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (b < 0)
			die("socket");
		if (opt_maxseg) {
			nodelay(a);
			nodelay(b);
		}
		if (connect(b, (struct sockaddr *)&fwd_addr, sizeof fwd_addr)) {
			fprintf(stderr, "chaos-relay: conn %d: connect onward: %s\n", id, strerror(errno));
			reset(a);
			close(a);
			close(b);
			continue;
		}
		struct conn *c = calloc(1, sizeof *c);
		if (!c)
			die("calloc");
		c->id = id;
		c->a = a;
		c->b = b;
		for (int i = 0; i < 2; i++) {
			struct dir *d = &c->d[i];
			d->c = c;
			d->from = i ? b : a;
			d->to = i ? a : b;
			d->name = i ? "s2c" : "c2s";
			d->chaos = i ? opt_dir_s2c : opt_dir_c2s;
			d->rng = opt_seed * 0x100000001b3ull + (uint64_t)id * 2 + (uint64_t)i;
			d->flip_bit = (int)(rnd(&d->rng) & 7);
			d->flipped_at = d->rst_at = UINT64_MAX;
		}
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, serve, c))
			die("pthread_create");
		pthread_attr_destroy(&at);
	}
}
