/*
 * xs-rate — small-message rate: one sender, one receiver (two processes, loopback), as many
 * S-byte messages (default 64) as go through in T seconds (or exactly N messages). Unlike
 * xs-bw there are no windows and no acknowledgements on the data path, so it measures the
 * stack's per-message cost, not the application's.
 *
 * Modes:
 *   tcp        plain TCP: the sender write()s each message (TCP_NODELAY), the receiver read()s
 *              64 KiB at a time and verifies the byte stream.
 *   ddp-plain  the same program with both sockets in DDP mode (setsockopt SOL_DDP DDP_MODE):
 *              every write() is one RDMAP Send on the wire. Needs libexsock.so.
 *   ddp-send   extension API: the receiver keeps Q receives of S bytes posted (ddp_post_recv)
 *              and reposts each as soon as it is verified; the sender ddp_post_send()s with
 *              every 64th Send signaled, never more than the receiver's credit: Q plus the
 *              number of receives the receiver reported reposted. The receiver reports that
 *              count in 8-byte credit Sends on the same connection every Q/4 messages, so no
 *              Send ever finds no posted receive. The end is a 0-byte Send.
 *
 * Every message's content is a function of its sequence number (8-byte little-endian
 * sequence, then (seq * 7 + i) & 0xff); the receiver checks every byte of every message.
 *
 * Output (stdout, one line, from the receiver after both sides finished):
 *   rate mode=ddp-send size=64 msgs=1234567 secs=2.000 mmsg_per_s=0.617 snd_user=1.10
 *        snd_sys=0.80 rcv_user=0.90 rcv_sys=1.00 cpu_us_per_msg=3.11
 * secs is the receiver's time from the first to the last message; cpu is getrusage of each
 * process (all threads, the engine's progress thread included), cpu_us_per_msg the sum of
 * both sides' user+sys per message.
 *
 * Exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 DDP mode without libexsock.so.
 */
#include "common.h"

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum rmode { M_TCP, M_PLAIN, M_SEND };
static const char *mode_names[] = { "tcp", "ddp-plain", "ddp-send" };

#define MAX_SIZE 65536u
#define SIGNAL_EVERY 64
#define CREDIT_SLOTS 64  /* sender: posted receives for credit messages */
#define CREDIT_SENDS 16  /* receiver: credit send buffers */
#define WR_DATA 0x1000000000ull
#define WR_CREDIT 0x2000000000ull

struct cfg {
	enum rmode mode;
	uint32_t size;
	uint64_t count;     /* 0: duration */
	double secs;
	uint32_t queue;     /* ddp-send: posted receives */
	int cpu_snd, cpu_rcv;
	int crc;
	int more;           /* ddp-send: DDP_MORE on unsignaled Sends */
};

struct result { /* sender -> receiver through a pipe */
	uint64_t msgs;
	double secs;
	struct rusage ru;
	int ok;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-rate [-m tcp|ddp-plain|ddp-send] [-S SIZE] [-T SECONDS | -n COUNT] [-Q DEPTH]\n"
		"               [-C SNDCPU,RCVCPU] [-K 0|1] [-M 0|1] [-t SECONDS] [-v]\n"
		"  -m MODE     tcp (default) | ddp-plain (DDP socket, write/read) | ddp-send (ext API)\n"
		"  -S SIZE     message size, 1 B to 64 KiB (default 64; ddp-send: >= 8)\n"
		"  -T SECONDS  send for this long (default 2)\n"
		"  -n COUNT    instead of -T: send exactly COUNT messages\n"
		"  -Q DEPTH    ddp-send: receives kept posted (default 1024 = DDP_QUEUE_DEPTH, min 16)\n"
		"  -C S,R      pin the sender to CPU S and the receiver to CPU R\n"
		"  -K 0|1      DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -M 0|1      ddp-send: post unsignaled Sends with DDP_MORE (default 1)\n"
		"  -t SECONDS  bound of every single wait (default 10)\n"
		"output: rate mode=M size=S msgs=N secs=X mmsg_per_s=R snd_user= snd_sys= rcv_user=\n"
		"        rcv_sys= cpu_us_per_msg= (CPU seconds per process, all threads)\n"
		"exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n");
}

static void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof s, &s) != 0)
		xs_pfatal("sched_setaffinity(%d)", cpu);
}

static double tv_s(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

/* ---- content -------------------------------------------------------------------------- */

static void fill_msg(uint8_t *p, uint32_t size, uint64_t seq)
{
	uint8_t b = (uint8_t)(seq * 7);
	uint32_t i = 0;
	if (size >= 8) {
		memcpy(p, &seq, 8); /* little-endian hosts only (x86, arm64) */
		i = 8;
		b = (uint8_t)(b + 8);
	}
	for (; i < size; i++, b++)
		p[i] = b;
}

/* Checks bytes [off, off+len) of message seq. 0 or the index (+1) of the first bad byte. */
static size_t check_part(const uint8_t *p, uint32_t size, uint64_t seq, uint32_t off,
			 uint32_t len)
{
	uint8_t m[MAX_SIZE];
	fill_msg(m, size, seq);
	if (memcmp(p, m + off, len) == 0)
		return 0;
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != m[off + i])
			return i + 1;
	return 1;
}

/* ---- sockets --------------------------------------------------------------------------- */

static void set_timeouts(int fd)
{
	struct timeval tv = { xs_timeout_ms / 1000, (xs_timeout_ms % 1000) * 1000 };
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
		xs_pfatal("setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)");
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
		xs_pfatal("setsockopt(TCP_NODELAY)");
}

static struct xs_ddpopt ddpopt(const struct cfg *c)
{
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.ddp = c->mode != M_TCP;
	o.crc = c->crc;
	return o;
}

/* A TCP socket with the mode's DDP options applied (exits on failure). */
static int new_socket(const struct cfg *c)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		xs_pfatal("socket");
	struct xs_ddpopt o = ddpopt(c);
	if (xs_ddp_apply(fd, &o) != 0)
		exit(XS_EXIT_FAIL);
	return fd;
}

static int do_listen(const struct cfg *c, int *port)
{
	int fd = new_socket(c);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0)
		xs_pfatal("bind/listen");
	socklen_t l = sizeof a;
	if (getsockname(fd, (struct sockaddr *)&a, &l) != 0)
		xs_pfatal("getsockname");
	*port = ntohs(a.sin_port);
	return fd;
}

static int do_connect(const struct cfg *c, int port)
{
	int fd = new_socket(c);
	set_timeouts(fd);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
		xs_pfatal("connect");
	return fd;
}

/* ---- stream modes (tcp, ddp-plain) ------------------------------------------------------ */

static int stream_send(const struct cfg *c, int fd, struct result *r)
{
	uint8_t *ring = xs_alloc((size_t)c->size * 256);
	for (uint64_t i = 0; i < 256; i++)
		fill_msg(ring + i * c->size, c->size, i);
	uint64_t t0 = xs_now_ns(), end = t0 + (uint64_t)(c->secs * 1e9), seq = 0;
	for (;;) {
		if (c->count ? seq == c->count : (seq % 256 == 0 && xs_now_ns() >= end))
			break;
		uint8_t *m = ring + (seq % 256) * c->size;
		if (c->size >= 8)
			memcpy(m, &seq, 8);
		size_t done = 0;
		while (done < c->size) {
			ssize_t n = write(fd, m + done, c->size - done);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				xs_perr("write (message %llu)", (unsigned long long)seq);
				return -1;
			}
			done += (size_t)n;
		}
		seq++;
	}
	if (shutdown(fd, SHUT_WR) != 0) {
		xs_perr("shutdown");
		return -1;
	}
	/* Wait for the receiver's close: everything was delivered (bounded by SO_RCVTIMEO). */
	char b;
	ssize_t n;
	while ((n = read(fd, &b, 1)) < 0 && errno == EINTR)
		;
	r->msgs = seq;
	r->secs = (double)(xs_now_ns() - t0) / 1e9;
	return 0;
}

static int stream_recv(const struct cfg *c, int fd, uint64_t *msgs, double *secs)
{
	size_t cap = 64 * 1024;
	uint8_t *buf = xs_alloc(cap);
	uint64_t pos = 0, t0 = 0, t1 = 0;
	for (;;) {
		ssize_t n = read(fd, buf, cap);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			xs_perr("read at stream byte %llu", (unsigned long long)pos);
			return -1;
		}
		if (n == 0)
			break;
		uint64_t now = xs_now_ns();
		if (!t0)
			t0 = now;
		t1 = now;
		/* verify: the chunk covers parts of messages pos / size ... */
		size_t i = 0;
		while (i < (size_t)n) {
			uint64_t seq = (pos + i) / c->size;
			uint32_t off = (uint32_t)((pos + i) % c->size);
			uint32_t len = c->size - off;
			if (len > (size_t)n - i)
				len = (uint32_t)((size_t)n - i);
			size_t bad = check_part(buf + i, c->size, seq, off, len);
			if (bad) {
				xs_msg("content mismatch in message %llu at byte %u (stream byte %llu)",
				       (unsigned long long)seq, off + (uint32_t)bad - 1,
				       (unsigned long long)(pos + i + bad - 1));
				return -1;
			}
			i += len;
		}
		pos += (uint64_t)n;
	}
	if (pos % c->size) {
		xs_msg("stream ended inside a message (%llu bytes)", (unsigned long long)pos);
		return -1;
	}
	*msgs = pos / c->size;
	*secs = (double)(t1 - t0) / 1e9;
	return 0;
}

/* ---- ddp-send --------------------------------------------------------------------------- */

static int wait_wc(int fd, struct ddp_wc *wc, int max, const char *what)
{
	int n = ddp_poll(fd, wc, max);
	if (n == 0)
		n = ddp_wait(fd, wc, max, xs_timeout_ms);
	if (n < 0) {
		if (errno == EINTR)
			return 0;
		xs_perr("ddp_wait (%s)", what);
		return -1;
	}
	if (n == 0) {
		xs_msg("timeout waiting for %s", what);
		return -1;
	}
	return n;
}

/* An error completion is a failure, except a flushed receive once the end was sent or seen
 * (the peer closes when it is done; receives still posted then are flushed). */
static int wc_ok(const struct ddp_wc *wc, int ended, const char *who)
{
	if (wc->status == DDP_WC_SUCCESS)
		return 1;
	if (ended && wc->opcode == DDP_WC_OP_RECV && wc->status == DDP_WC_FLUSH_ERR)
		return 0;
	char d[160];
	xs_wc_describe(wc, d, sizeof d);
	xs_msg("%s: error completion: %s", who, d);
	return -1;
}

static int post_send_retry(int fd, uint64_t wr_id, void *p, size_t len, int flags)
{
	struct iovec v = { p, len };
	for (;;) {
		if (ddp_post_send(fd, wr_id, &v, len ? 1 : 0, flags) == 0)
			return 0;
		if (errno != EINTR) {
			xs_perr("ddp_post_send");
			return -1;
		}
	}
}

/* The sender's completions: a Send done frees ring slots up to it; a credit message raises
 * the limit and its receive is posted again. -1 on an error completion. */
static int sender_wcs(const struct cfg *c, int fd, const struct ddp_wc *wc, int n, uint64_t *cred,
		      uint64_t *completed, uint64_t *limit)
{
	for (int i = 0; i < n; i++) {
		if (wc_ok(&wc[i], 0, "sender") < 0)
			return -1;
		if (wc[i].opcode == DDP_WC_OP_SEND) {
			*completed = (wc[i].wr_id & ~WR_DATA) + 1;
		} else {
			int k = (int)(wc[i].wr_id - WR_CREDIT);
			if (cred[k] + c->queue > *limit)
				*limit = cred[k] + c->queue;
			struct iovec v = { &cred[k], 8 };
			if (ddp_post_recv(fd, wc[i].wr_id, &v, 1) != 0)
				xs_pfatal("ddp_post_recv (credit)");
		}
	}
	return 0;
}

static int send_send(const struct cfg *c, int fd, struct result *r)
{
	uint32_t ring_n = DDP_QUEUE_DEPTH; /* send buffers: one per send-queue slot */
	uint8_t *ring = xs_alloc((size_t)c->size * ring_n);
	uint64_t *cred = xs_alloc(sizeof(uint64_t) * CREDIT_SLOTS);
	for (int i = 0; i < CREDIT_SLOTS; i++) {
		struct iovec v = { &cred[i], 8 };
		if (ddp_post_recv(fd, WR_CREDIT + (uint64_t)i, &v, 1) != 0)
			xs_pfatal("ddp_post_recv (credit)");
	}
	/* Our credit receives are posted: tell the receiver (still in stream mode, this lands in
	 * its byte stream), which then posts its receives and sends credit 0 (the start). */
	if (xs_write_full(fd, "r", 1, xs_timeout_ms) != 0)
		xs_pfatal("write (ready)");
	uint64_t limit = 0; /* credit: messages we may have sent (from the receiver) */
	uint64_t seq = 0, completed = 0; /* completed: sends known done (frees ring slots) */
	uint64_t t0 = xs_now_ns(), end = t0 + (uint64_t)(c->secs * 1e9);
	struct ddp_wc wc[64];
	int last_sent = 0;
	while (!last_sent) {
		int stop = c->count ? seq == c->count : (seq % 64 == 0 && xs_now_ns() >= end);
		/* room: credit for one more (the final 0-byte Send needs one too), a free slot */
		int room = seq + 1 <= limit && seq - completed < ring_n - SIGNAL_EVERY;
		if (room) {
			if (stop) {
				if (post_send_retry(fd, WR_DATA | seq, NULL, 0, DDP_SIGNALED) != 0)
					return -1;
				last_sent = 1;
				break;
			}
			uint8_t *m = ring + (seq % ring_n) * c->size;
			fill_msg(m, c->size, seq);
			/* every 64th signaled; the others with DDP_MORE (-M 1): the library may put
			 * them out together with the following ones (the signaled one ends a batch) */
			int fl = (seq % SIGNAL_EVERY == SIGNAL_EVERY - 1) ? DDP_SIGNALED
			       : c->more ? DDP_MORE : 0;
			if (post_send_retry(fd, WR_DATA | seq, m, c->size, fl) != 0)
				return -1;
			seq++;
			/* take what is there without waiting, after each signaled one */
			if (seq % SIGNAL_EVERY != 0)
				continue;
			/* ddp_wait with timeout 0, not ddp_poll: it also reads the socket inline
			 * (credits), where ddp_poll only looks at the completion queue */
			int n = ddp_wait(fd, wc, 64, 0);
			if (n < 0 && errno == EINTR)
				n = 0;
			if (n < 0) {
				xs_perr("ddp_wait");
				return -1;
			}
			if (sender_wcs(c, fd, wc, n, cred, &completed, &limit) < 0)
				return -1;
			continue;
		}
		int n = wait_wc(fd, wc, 64, "sender: credit or send completion");
		if (n < 0)
			return -1;
		if (sender_wcs(c, fd, wc, n, cred, &completed, &limit) < 0)
			return -1;
	}
	/* wait for the final Send's completion */
	while (completed != seq + 1) {
		int n = wait_wc(fd, wc, 64, "sender: last send completion");
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			int ok = wc_ok(&wc[i], 1, "sender");
			if (ok < 0)
				return -1;
			if (ok == 0)
				continue; /* a credit receive flushed: the receiver is done */
			if (wc[i].opcode == DDP_WC_OP_SEND)
				completed = (wc[i].wr_id & ~WR_DATA) + 1;
			else {
				int k = (int)(wc[i].wr_id - WR_CREDIT);
				struct iovec v = { &cred[k], 8 };
				if (ddp_post_recv(fd, wc[i].wr_id, &v, 1) != 0 && errno != EPIPE)
					xs_pfatal("ddp_post_recv (credit)");
			}
		}
	}
	r->msgs = seq;
	r->secs = (double)(xs_now_ns() - t0) / 1e9;
	return 0;
}

static int send_recv(const struct cfg *c, int fd, uint64_t *msgs, double *secs)
{
	uint8_t *bufs = xs_alloc((size_t)c->size * c->queue);
	uint64_t *cred = xs_alloc(sizeof(uint64_t) * CREDIT_SENDS);
	char ready;
	if (xs_read_full(fd, &ready, 1, xs_timeout_ms) != 0)
		xs_pfatal("waiting for the sender's credit receives");
	for (uint32_t i = 0; i < c->queue; i++) {
		struct iovec v = { bufs + (size_t)i * c->size, c->size };
		if (ddp_post_recv(fd, WR_DATA | i, &v, 1) != 0)
			xs_pfatal("ddp_post_recv");
	}
	uint32_t batch = c->queue / 4;
	uint64_t seq = 0, credit_sent = 0, credit_done = 0, t0 = 0, t1 = 0;
	int64_t reported = -(int64_t)batch; /* credit 0 (the start) goes out at once */
	struct ddp_wc wc[64];
	int done = 0;
	while (!done) {
		/* a credit Send: how many receives were reposted so far (skipped while CREDIT_SENDS
		 * are in flight: their completions come through this loop) */
		if ((int64_t)seq - reported >= (int64_t)batch && !done &&
		    credit_sent - credit_done < CREDIT_SENDS) {
			uint64_t *cp = &cred[credit_sent % CREDIT_SENDS];
			*cp = seq;
			struct iovec v = { cp, 8 };
			int r;
			while ((r = ddp_post_send(fd, WR_CREDIT | credit_sent, &v, 1, DDP_SIGNALED)) != 0 &&
			       errno == EINTR)
				;
			if (r != 0 && errno != EPIPE) {
				xs_perr("ddp_post_send (credit)");
				return -1;
			}
			/* EPIPE: the sender is done and closed; its end message must still be here */
			credit_sent += r == 0;
			reported = (int64_t)seq;
		}
		int n = wait_wc(fd, wc, 64, "receiver: message");
		if (n < 0)
			return -1;
		uint64_t now = xs_now_ns();
		for (int i = 0; i < n; i++) {
			int ok = wc_ok(&wc[i], done, "receiver");
			if (ok < 0)
				return -1;
			if (ok == 0)
				continue;
			if (wc[i].opcode == DDP_WC_OP_SEND) {
				credit_done++;
				continue;
			}
			uint32_t slot = (uint32_t)(wc[i].wr_id & ~WR_DATA);
			uint8_t *p = bufs + (size_t)slot * c->size;
			if (wc[i].byte_len == 0) { /* the end */
				done = 1;
				t1 = now;
				continue;
			}
			if (!t0)
				t0 = now;
			if (done) {
				xs_msg("message after the end");
				return -1;
			}
			if (wc[i].byte_len != c->size) {
				xs_msg("message %llu: %u bytes, expected %u", (unsigned long long)seq,
				       wc[i].byte_len, c->size);
				return -1;
			}
			size_t bad = check_part(p, c->size, seq, 0, c->size);
			if (bad) {
				xs_msg("content mismatch in message %llu at byte %zu",
				       (unsigned long long)seq, bad - 1);
				return -1;
			}
			struct iovec v = { p, c->size };
			/* EPIPE: the sender is done and closed (its end message must still come,
			 * else the next wait reports the flushed receives) */
			if (ddp_post_recv(fd, wc[i].wr_id, &v, 1) != 0 && errno != EPIPE) {
				xs_perr("ddp_post_recv (repost)");
				return -1;
			}
			seq++;
		}
	}
	*msgs = seq;
	*secs = (double)(t1 - t0) / 1e9;
	return 0;
}

/* ---- main ------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	struct cfg c = { M_TCP, 64, 0, 2.0, DDP_QUEUE_DEPTH, -1, -1, -1, 1 };
	c.crc = xs_env_crc(c.crc);
	int opt;
	while ((opt = getopt(argc, argv, "m:S:T:n:Q:C:K:M:t:vh")) != -1) {
		switch (opt) {
		case 'm':
			if (!strcmp(optarg, "tcp"))
				c.mode = M_TCP;
			else if (!strcmp(optarg, "ddp-plain") || !strcmp(optarg, "ddp"))
				c.mode = M_PLAIN;
			else if (!strcmp(optarg, "ddp-send") || !strcmp(optarg, "ext"))
				c.mode = M_SEND;
			else
				xs_usage_error("-m: unknown mode '%s'", optarg);
			break;
		case 'S': c.size = (uint32_t)xs_opt_u64("-S", optarg, 1, MAX_SIZE, 1); break;
		case 'T': {
			char *e;
			c.secs = strtod(optarg, &e);
			if (*e || c.secs <= 0 || c.secs > 3600)
				xs_usage_error("-T: bad duration '%s'", optarg);
			break;
		}
		case 'n': c.count = xs_opt_u64("-n", optarg, 1, UINT64_MAX >> 2, 1); break;
		case 'Q': c.queue = (uint32_t)xs_opt_u64("-Q", optarg, 16, DDP_QUEUE_DEPTH, 1); break;
		case 'C':
			if (sscanf(optarg, "%d,%d", &c.cpu_snd, &c.cpu_rcv) != 2 || c.cpu_snd < 0 ||
			    c.cpu_rcv < 0)
				xs_usage_error("-C: expected SNDCPU,RCVCPU");
			break;
		case 'K': c.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'M': c.more = (int)xs_opt_u64("-M", optarg, 0, 1, 0); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 3600, 0) * 1000; break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	if (optind != argc)
		xs_usage_error("unexpected argument '%s'", argv[optind]);
	if (c.mode == M_SEND && c.size < 8)
		xs_usage_error("-S: ddp-send needs messages of at least 8 bytes");
	if (c.mode != M_TCP)
		xs_require_ddp();
	signal(SIGPIPE, SIG_IGN);

	int port;
	int lfd = do_listen(&c, &port);
	int res[2];
	if (pipe(res) != 0)
		xs_pfatal("pipe");
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		xs_pfatal("fork");
	if (pid == 0) { /* sender */
		close(res[0]);
		close(lfd);
		pin(c.cpu_snd);
		struct result r = { 0 };
		int fd = do_connect(&c, port);
		int rc = c.mode == M_SEND ? send_send(&c, fd, &r) : stream_send(&c, fd, &r);
		r.ok = rc == 0;
		close(fd);
		getrusage(RUSAGE_SELF, &r.ru);
		if (write(res[1], &r, sizeof r) != (ssize_t)sizeof r)
			_exit(XS_EXIT_FAIL);
		_exit(rc == 0 ? XS_EXIT_OK : XS_EXIT_FAIL);
	}
	close(res[1]);
	pin(c.cpu_rcv);
	struct pollfd pf = { lfd, POLLIN, 0 };
	if (poll(&pf, 1, xs_timeout_ms) != 1)
		xs_fatal("no connection from the sender within %d ms", xs_timeout_ms);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		xs_pfatal("accept");
	set_timeouts(fd);
	uint64_t msgs = 0;
	double secs = 0;
	int rc = c.mode == M_SEND ? send_recv(&c, fd, &msgs, &secs) : stream_recv(&c, fd, &msgs, &secs);
	close(fd);
	close(lfd);
	struct rusage me;
	getrusage(RUSAGE_SELF, &me);
	struct result r = { 0 };
	ssize_t got;
	while ((got = read(res[0], &r, sizeof r)) < 0 && errno == EINTR)
		;
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc != 0)
		return XS_EXIT_FAIL;
	if (got != (ssize_t)sizeof r || !r.ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		xs_msg("the sender failed");
		return XS_EXIT_FAIL;
	}
	if (r.msgs != msgs) {
		xs_msg("sender sent %llu messages, receiver verified %llu", (unsigned long long)r.msgs,
		       (unsigned long long)msgs);
		return XS_EXIT_FAIL;
	}
	if (secs <= 0)
		secs = 1e-9;
	double su = tv_s(r.ru.ru_utime), ss = tv_s(r.ru.ru_stime);
	double ru = tv_s(me.ru_utime), rs = tv_s(me.ru_stime);
	printf("rate mode=%s%s size=%u msgs=%llu secs=%.3f mmsg_per_s=%.3f snd_user=%.2f "
	       "snd_sys=%.2f rcv_user=%.2f rcv_sys=%.2f cpu_us_per_msg=%.2f\n",
	       mode_names[c.mode], c.mode == M_SEND && !c.more ? " more=0" : "", c.size, (unsigned long long)msgs, secs, msgs / secs / 1e6, su,
	       ss, ru, rs, msgs ? (su + ss + ru + rs) * 1e6 / msgs : 0.0);
	return XS_EXIT_OK;
}
