/*
 * xs-fault — DDP programs for scripts/tests/faults-kill.sh: what a survivor sees when its
 * peer dies or misbehaves, and what it keeps.
 *
 *   xs-fault -s [-a ADDR] [-p PORT] -M MODE [options]     (server)
 *   xs-fault -c ADDR [-p PORT] -M MODE [options]          (client)
 *
 * The client posts its receives and writes an 8-byte hello on the byte stream; the server
 * reads it, posts its receives, registers a region of -R bytes (remote write + read, filled
 * with a known pattern) and advertises it in a Send. Then, by MODE:
 *
 *   stream      the client streams, forever (or -d SECONDS), message i = an RDMA Write of
 *               64 KiB (pattern i) into slot i % 64 of the region followed by a 64-byte Send
 *               naming i; the server checks the Send and the slot's every byte, and acks every
 *               16 messages (the client keeps at most 48 unacknowledged). Either process is
 *               then killed with SIGKILL by the script: the survivor must report the failure.
 *               On the first error (error completion, error return, EOF) the survivor prints
 *               "xs-fault: failure detected at REALTIME_NS after N messages verified/acked:
 *               WHAT" and exits 3. Exit 1 on a content mismatch or a timeout (-t).
 *   close-read  the client posts a Read of the whole region, and while a second thread
 *               waits in ddp_wait() for it, closes the socket (-w MS after posting). The
 *               waiter must return within -t, with the Read completed (FLUSH_ERR, or SUCCESS
 *               if the Read was already done) or an error (EBADF/EPIPE); close() must return
 *               within -t. Prints both durations. The server waits for the end of the
 *               connection (bounded) and exits 0.
 *   dereg       the client RDMA Writes 64 KiB messages into the region without pause and
 *               tells the server (Send) once 32 have completed; the server deregisters the
 *               region while Writes keep arriving, then fills it with 0xee. The client must
 *               see its Writes fail (error completion with the Terminate's code), the server
 *               must have sent DDP Terminate (1,1,0) (invalid STag) and the region must still
 *               be all 0xee at the end (no placement after ddp_dereg_mr returned).
 *
 * Options: -R BYTES region size (default 4M; >= 64 x 64K for stream), -K 0|1 DDP_CRC,
 *          -t SECONDS bound of every wait (default 10), -d SECONDS stream duration (0 = until
 *          killed), -w MS close-read delay (default 20), -v verbose.
 * Exit: 0 ok, 1 failure, 2 usage, 3 (stream) the peer's failure was detected, 77 no library.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define MSG 65536u
#define SLOTS 64u
#define ACK_EVERY 16u
#define MAX_UNACKED 48u
#define NRECV 64
#define CTL 64
#define HELLO 0x78734661756c7431ull /* "xsFault1" */

enum { M_STREAM, M_CLOSE_READ, M_DEREG };

struct advert {
	uint64_t addr, len;
	uint32_t stag, pad;
};
struct note {
	uint64_t seq;
	uint32_t kind, pad; /* 1 = message, 2 = ack, 3 = "32 Writes done" */
};

static int mode = -1;
static size_t region_len = 4u << 20;
static int duration_s, close_delay_ms = 20, keepalive;

/* -k: TCP-level liveness on the DDP socket (forwarded to its TCP connection). */
static void set_keepalive(int fd)
{
	int one = 1, idle = 1, intvl = 1, cnt = 2;
	unsigned ut = 2000;
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut))
		xs_pfatal("setsockopt (keepalive)");
}

static uint64_t now_real_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int g_fd = -1;

/* stream: the survivor's report, with the Terminate (if any) from DDP_CONN_INFO */
static _Noreturn void detected(const char *who, uint64_t n, const char *what)
{
	uint64_t t = now_real_ns();
	struct ddp_conn_info ci;
	socklen_t cl = sizeof ci;
	char term[64] = "no Terminate";
	if (getsockopt(g_fd, SOL_DDP, DDP_CONN_INFO, &ci, &cl) == 0 && ci.term_sent)
		snprintf(term, sizeof term, "Terminate %s (%u,%u,%u)",
			 ci.term_sent == 1 ? "sent" : "received", ci.term_layer, ci.term_etype,
			 ci.term_ecode);
	printf("xs-fault: failure detected at %" PRIu64 " by the %s after %" PRIu64
	       " messages: %s; %s\n",
	       t, who, n, what, term);
	fflush(stdout);
	exit(3);
}

static void wc_str(const struct ddp_wc *wc, char *buf, size_t len)
{
	xs_wc_describe(wc, buf, len);
}

/* After a post failed (the connection ended), the completions of the work already posted are
 * still owed (sockopt_ext.h: they are delivered before ddp_poll/ddp_wait report EPIPE): take
 * them, bounded, and describe the first error among them into buf (kept if there is none). */
static void drain_error(struct xs_cq *cq, char *buf, size_t len)
{
	struct ddp_wc wc;
	for (int i = 0; i < 100000; i++) {
		if (xs_cq_next(cq, &wc, 1000) != 1)
			return;
		if (wc.status != DDP_WC_SUCCESS) {
			wc_str(&wc, buf, len);
			return;
		}
	}
}

/* ---- server ------------------------------------------------------------------------------ */

static void server(int fd)
{
	uint64_t hello;
	if (xs_read_full(fd, &hello, sizeof hello, xs_timeout_ms) || hello != HELLO)
		xs_fatal("server: no hello");
	struct xs_cq cq;
	xs_cq_init(&cq, fd);
	uint8_t *pool = xs_alloc((size_t)NRECV * CTL);
	for (int i = 0; i < NRECV; i++)
		if (xs_post_recv(&cq, (uint64_t)i, pool + (size_t)i * CTL, CTL))
			xs_pfatal("server: post_recv");
	uint8_t *region = xs_alloc(region_len);
	xs_fill(region, region_len, 0x5eed, 0);
	uint32_t stag;
	if (ddp_reg_mr(fd, region, region_len,
		       DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE | DDP_ACCESS_REMOTE_READ,
		       &stag))
		xs_pfatal("server: ddp_reg_mr");
	struct advert ad = { (uint64_t)(uintptr_t)region, region_len, stag, 0 };
	if (xs_post_send(&cq, 1000, &ad, sizeof ad, DDP_SIGNALED))
		xs_pfatal("server: post_send advert");
	printf("xs-fault: server: running\n");
	fflush(stdout);

	struct note *acks = xs_alloc(SLOTS * sizeof *acks);
	uint64_t verified = 0;
	int deregistered = 0, post_failed = 0;
	char d[160];
	for (;;) {
		struct ddp_wc wc;
		int r = xs_cq_next(&cq, &wc, xs_timeout_ms);
		if (r == 0) {
			if (mode == M_STREAM)
				xs_fatal("server: nothing for %d ms", xs_timeout_ms);
			xs_fatal("server: the connection did not end within %d ms", xs_timeout_ms);
		}
		if (r < 0) {
			snprintf(d, sizeof d, "ddp_wait: %s", xs_errname(errno));
			goto ended;
		}
		if (wc.status != DDP_WC_SUCCESS) {
			wc_str(&wc, d, sizeof d);
			goto ended;
		}
		if (wc.opcode != DDP_WC_OP_RECV)
			continue; /* our own Sends */
		struct note *n = (struct note *)(pool + wc.wr_id * CTL);
		if (mode == M_STREAM) {
			if (wc.byte_len != sizeof *n || n->kind != 1 || n->seq != verified)
				xs_fatal("server: message %" PRIu64 ": bad note (len %u kind %u seq %" PRIu64 ")",
					 verified, wc.byte_len, n->kind, n->seq);
			size_t bad;
			uint8_t *slot = region + (n->seq % SLOTS) * MSG;
			if (xs_check(slot, MSG, xs_seed('F', n->seq, 1), 0, &bad))
				xs_fatal("server: message %" PRIu64 ": the Write's bytes differ at %zu",
					 n->seq, bad);
			verified++;
			if (verified % ACK_EVERY == 0) {
				/* a ring: a buffer stays untouched until its Send has long completed */
				struct note *ack = &acks[(verified / ACK_EVERY) % SLOTS];
				*ack = (struct note){ verified, 2, 0 };
				if (!post_failed && xs_post_send(&cq, 2000, ack, sizeof *ack, DDP_SIGNALED))
					post_failed = errno;
			}
		} else if (mode == M_DEREG && !deregistered) {
			uint64_t t0 = xs_now_ns();
			if (ddp_dereg_mr(fd, stag))
				xs_pfatal("server: ddp_dereg_mr");
			memset(region, 0xee, region_len);
			deregistered = 1;
			printf("xs-fault: server: deregistered while Writes arrive (ddp_dereg_mr took %.3f ms)\n",
			       (double)(xs_now_ns() - t0) / 1e6);
			fflush(stdout);
		}
		/* after the end, keep taking (and verifying) the completions already there: the
		 * error completion or EPIPE from ddp_wait comes after them */
		if (!post_failed && xs_post_recv(&cq, wc.wr_id, pool + wc.wr_id * CTL, CTL))
			post_failed = errno;
	}
ended:
	if (mode == M_STREAM)
		detected("server", verified, d);
	struct ddp_conn_info ci;
	socklen_t cl = sizeof ci;
	if (getsockopt(fd, SOL_DDP, DDP_CONN_INFO, &ci, &cl))
		xs_pfatal("server: DDP_CONN_INFO");
	printf("xs-fault: server: connection ended (%s); term_sent %u (%u,%u,%u)\n", d,
	       ci.term_sent, ci.term_layer, ci.term_etype, ci.term_ecode);
	if (mode == M_DEREG) {
		if (!deregistered)
			xs_fatal("server: the connection ended before the deregistration");
		if (ci.term_sent != 1 || ci.term_layer != 1 || ci.term_etype != 1 || ci.term_ecode != 0)
			xs_fatal("server: expected our Terminate (1,1,0)");
		for (size_t i = 0; i < region_len; i++)
			if (region[i] != 0xee)
				xs_fatal("server: byte %zu of the region changed after ddp_dereg_mr", i);
		printf("xs-fault: server: region untouched after the deregistration (%zu bytes checked)\n",
		       region_len);
	}
	exit(0);
}

/* ---- client ------------------------------------------------------------------------------ */

struct waiter {
	int fd;
	_Atomic int tid; /* set by the waiter just before its first ddp_wait */
	uint64_t t_ret;
	int rc, err, others;
	struct ddp_wc wc;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	/* the Read's completion (flushed receives may come first), or an error, or the bound */
	uint64_t deadline = xs_deadline(xs_timeout_ms);
	struct ddp_wc wcs[NRECV + 8];
	w->tid = (int)syscall(SYS_gettid);
	for (;;) {
		int n = ddp_wait(w->fd, wcs, NRECV + 8, xs_ms_left(deadline));
		w->err = errno;
		w->rc = n < 0 ? -1 : 0;
		for (int i = 0; i < n; i++) {
			if (wcs[i].wr_id == 77) {
				w->wc = wcs[i];
				w->rc = 1;
			} else {
				w->others++;
			}
		}
		if (n <= 0 || w->rc == 1 || xs_ms_left(deadline) == 0)
			break;
	}
	w->t_ret = xs_now_ns();
	return NULL;
}

/* true once the waiter thread has announced itself and sleeps (state 'S' in
 * /proc/self/task/TID/stat): it is then blocked in ddp_wait. Bounded by ms. */
static int waiter_blocked(struct waiter *w, int ms)
{
	uint64_t dl = xs_deadline(ms);
	do {
		int tid = w->tid;
		if (tid > 0) {
			char path[64], buf[256];
			snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
			FILE *f = fopen(path, "r");
			if (f) {
				size_t n = fread(buf, 1, sizeof buf - 1, f);
				fclose(f);
				buf[n] = 0;
				const char *p = strrchr(buf, ')'); /* "tid (comm) S ..." */
				if (p && p[1] == ' ' && p[2] == 'S')
					return 1;
			}
		}
		struct timespec ts = { 0, 200000 }; /* re-check the state every 0.2 ms */
		nanosleep(&ts, NULL);
	} while (xs_ms_left(dl) > 0);
	return 0;
}

static void client(int fd)
{
	struct xs_cq cq;
	xs_cq_init(&cq, fd);
	uint8_t *pool = xs_alloc((size_t)NRECV * CTL);
	for (int i = 0; i < NRECV; i++)
		if (xs_post_recv(&cq, (uint64_t)i, pool + (size_t)i * CTL, CTL))
			xs_pfatal("client: post_recv");
	uint64_t hello = HELLO;
	if (xs_write_full(fd, &hello, sizeof hello, xs_timeout_ms))
		xs_pfatal("client: hello");
	struct ddp_wc wc;
	struct advert ad;
	char d[160];
	for (;;) {
		if (xs_cq_next(&cq, &wc, xs_timeout_ms) != 1)
			xs_pfatal("client: no advert");
		if (wc.status != DDP_WC_SUCCESS) {
			wc_str(&wc, d, sizeof d);
			xs_fatal("client: %s", d);
		}
		if (wc.opcode == DDP_WC_OP_RECV)
			break;
	}
	memcpy(&ad, pool + wc.wr_id * CTL, sizeof ad);
	if (xs_post_recv(&cq, wc.wr_id, pool + wc.wr_id * CTL, CTL))
		xs_pfatal("client: post_recv");
	if (ad.len < region_len)
		xs_fatal("client: region of %" PRIu64 " bytes, expected %zu", ad.len, region_len);

	if (mode == M_CLOSE_READ) {
		uint8_t *dst = xs_alloc(region_len);
		if (xs_post_read(&cq, 77, dst, region_len, ad.stag, ad.addr, DDP_SIGNALED))
			xs_pfatal("client: post_read");
		struct waiter w = { .fd = fd };
		pthread_t t;
		pthread_create(&t, NULL, wait_thread, &w);
		/* the Read is outstanding: close only once the waiter is asleep inside ddp_wait (its
		 * thread state in /proc turns 'S' after it announced itself), then after the
		 * scenario's own delay (-w) with the Read still in flight */
		if (!waiter_blocked(&w, 5000))
			xs_fatal("close-read: the waiter never blocked in ddp_wait within 5 s");
		usleep((useconds_t)close_delay_ms * 1000);
		uint64_t t0 = xs_now_ns();
		int crc = close(fd);
		int cerr = errno;
		uint64_t t1 = xs_now_ns();
		pthread_join(t, NULL);
		double close_ms = (double)(t1 - t0) / 1e6, wait_ms = (double)(w.t_ret - t0) / 1e6;
		if (w.rc == 1)
			wc_str(&w.wc, d, sizeof d);
		else
			snprintf(d, sizeof d, "rc %d (%s)", w.rc, w.rc < 0 ? xs_errname(w.err) : "timeout");
		printf("xs-fault: close-read: close() = %d%s%s after %.3f ms; the waiter returned %.3f ms "
		       "after close: %s (after %d other completions)\n",
		       crc, crc ? " " : "", crc ? xs_errname(cerr) : "", close_ms, wait_ms, d, w.others);
		if (crc)
			xs_fatal("close failed");
		if (w.rc == 0)
			xs_fatal("close-read: ddp_wait hung until its timeout");
		if (w.rc == 1 && !(w.wc.wr_id == 77 && (w.wc.status == DDP_WC_FLUSH_ERR ||
							w.wc.status == DDP_WC_SUCCESS)))
			xs_fatal("close-read: unexpected completion");
		if (w.rc < 0 && w.err != EBADF && w.err != EPIPE)
			xs_fatal("close-read: unexpected error");
		if (w.rc == 1 && w.wc.status == DDP_WC_SUCCESS)
			printf("xs-fault: close-read: note: the Read completed before the close\n");
		exit(0);
	}

	uint8_t *src = xs_alloc(MSG);
	if (mode == M_DEREG) {
		uint64_t done = 0, posted = 0;
		int told = 0;
		for (;;) {
			while (posted - done < 16) {
				uint64_t off = (posted % (region_len / MSG)) * MSG;
				if (xs_post_write(&cq, 100 + posted, src, MSG, ad.stag, ad.addr + off,
						  DDP_SIGNALED)) {
					snprintf(d, sizeof d, "post_write: %s", xs_errname(errno));
					drain_error(&cq, d, sizeof d);
					goto dereg_end;
				}
				posted++;
			}
			if (xs_cq_next(&cq, &wc, xs_timeout_ms) != 1)
				xs_fatal("client: Writes never failed after the deregistration (%s)",
					 xs_errname(errno));
			if (wc.status != DDP_WC_SUCCESS) {
				wc_str(&wc, d, sizeof d);
				goto dereg_end;
			}
			if (wc.opcode == DDP_WC_OP_WRITE)
				done++;
			if (done >= 32 && !told) {
				static struct note told_note; /* lives until the end */
				told_note = (struct note){ done, 3, 0 };
				if (xs_post_send(&cq, 3000, &told_note, sizeof told_note, 0))
					xs_pfatal("client: post_send");
				told = 1;
			}
		}
	dereg_end:
		printf("xs-fault: client: %" PRIu64 " Writes completed, then: %s\n", done, d);
		exit(told ? 0 : 1);
	}

	/* stream */
	uint8_t *srcs = xs_alloc((size_t)SLOTS * MSG);
	struct note *notes = xs_alloc(SLOTS * sizeof *notes);
	uint64_t seq = 0, acked = 0, t_end = duration_s ? xs_deadline(duration_s * 1000) : 0;
	printf("xs-fault: client: running\n");
	fflush(stdout);
	for (;;) {
		if (t_end && xs_now_ns() >= t_end) {
			printf("xs-fault: client: %" PRIu64 " messages sent, %" PRIu64 " acked\n", seq,
			       acked);
			exit(0);
		}
		while (seq - acked < MAX_UNACKED) {
			/* one source buffer per slot: a slot is reused only after the server acked
			 * a later message, so the Write from it is complete */
			uint8_t *src = srcs + (seq % SLOTS) * MSG;
			xs_fill(src, MSG, xs_seed('F', seq, 1), 0);
			/* the note too: unsignaled, it may be sent from our memory later */
			struct note *n = &notes[seq % SLOTS];
			*n = (struct note){ seq, 1, 0 };
			if (xs_post_write(&cq, 4000, src, MSG, ad.stag, ad.addr + (seq % SLOTS) * MSG,
					  seq % 16 == 15 ? DDP_SIGNALED : 0) ||
			    xs_post_send(&cq, 5000, n, sizeof *n, seq % 16 == 15 ? DDP_SIGNALED : 0)) {
				snprintf(d, sizeof d, "post: %s", xs_errname(errno));
				drain_error(&cq, d, sizeof d);
				detected("client", acked, d);
			}
			seq++;
		}
		int r = xs_cq_next(&cq, &wc, xs_timeout_ms);
		if (r == 0)
			xs_fatal("client: no ack for %d ms", xs_timeout_ms);
		if (r < 0) {
			snprintf(d, sizeof d, "ddp_wait: %s", xs_errname(errno));
			detected("client", acked, d);
		}
		if (wc.status != DDP_WC_SUCCESS) {
			wc_str(&wc, d, sizeof d);
			detected("client", acked, d);
		}
		if (wc.opcode != DDP_WC_OP_RECV)
			continue;
		struct note *a = (struct note *)(pool + wc.wr_id * CTL);
		if (a->kind != 2 || a->seq < acked || a->seq > seq)
			xs_fatal("client: bad ack");
		acked = a->seq;
		if (xs_post_recv(&cq, wc.wr_id, pool + wc.wr_id * CTL, CTL)) {
			snprintf(d, sizeof d, "post_recv: %s", xs_errname(errno));
			detected("client", acked, d);
		}
	}
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int is_server = 0, opt;
	const char *addr = NULL, *port = "18519";
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.ddp = 1;
	while ((opt = getopt(argc, argv, "sc:a:p:M:R:K:t:d:w:kvh")) != -1) {
		switch (opt) {
		case 's': is_server = 1; break;
		case 'c': addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'M':
			mode = !strcmp(optarg, "stream")	   ? M_STREAM
			       : !strcmp(optarg, "close-read") ? M_CLOSE_READ
			       : !strcmp(optarg, "dereg")	   ? M_DEREG
								   : -2;
			if (mode == -2)
				xs_usage_error("unknown mode %s", optarg);
			break;
		case 'R': region_len = xs_opt_u64("-R", optarg, MSG * SLOTS, 1ull << 30, 1); break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 3600, 0) * 1000; break;
		case 'd': duration_s = (int)xs_opt_u64("-d", optarg, 0, 3600, 0); break;
		case 'w': close_delay_ms = (int)xs_opt_u64("-w", optarg, 0, 10000, 0); break;
		case 'k': keepalive = 1; break;
		case 'v': xs_verbose++; break;
		case 'h':
			printf("usage: xs-fault -s|-c ADDR [-a ADDR] [-p PORT] -M stream|close-read|dereg "
			       "[-R BYTES] [-K 0|1] [-t S] [-d S] [-w MS] [-k]\n");
			return 0;
		default: xs_usage_error("bad option");
		}
	}
	if (mode < 0)
		xs_usage_error("-M is required");
	xs_require_ddp();
	if (is_server) {
		int p;
		int lfd = xs_listen(addr, port, &o, &p);
		int fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
		if (keepalive)
			set_keepalive(fd);
		g_fd = fd;
		server(fd);
	} else {
		if (!addr)
			xs_usage_error("-c ADDR or -s");
		int fd = xs_connect(addr, port, &o, xs_timeout_ms);
		if (keepalive)
			set_keepalive(fd);
		g_fd = fd;
		client(fd);
	}
	return 0;
}
