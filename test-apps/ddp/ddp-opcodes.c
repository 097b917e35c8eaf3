/*
 * ddp-opcodes — puts every RDMAP opcode on the wire between two DDP sockets over 127.0.0.1,
 * for capture checks (scripts/tests/ddp-capture.sh) and the demo. One process: the server is
 * a thread, the client is the main thread; they share STags through memory (not over the wire)
 * and serialise every operation (each waits for its completion), so that every FPDU leaves in
 * its own TCP segment.
 *
 * Connection 1 (client = MPA initiator):
 *   Send                      client -> server, 64 B        server checks content, flags 0
 *   Send with SE              client -> server, 100 B       server checks DDP_WC_SOLICITED
 *   RDMA Write                client -> server region R, SIZE bytes
 *   RDMA Read Request/Resp.   client reads R back (SIZE), then the server-filled half (SIZE)
 *   Send with Invalidate      client -> server, 200 B, invalidates STag B
 *   Send with SE + Invalidate client -> server, 300 B, invalidates STag C
 *   Send                      client -> server "check": the server verifies R against the Write
 *   Send                      server -> client: the result, 64 B
 * Connection 2: the client RDMA Writes to the server's region with a wrong STag key: the server
 *   answers with a Terminate (DDP tagged buffer error) and the connection ends on both sides.
 *
 *   ddp-opcodes [-p PORT] [-M] [-K 0|1] [-S SIZE] [-t SECONDS] [-v]
 *     -p PORT  the server's port (default 0: any free port)
 *     -M       markers both ways (DDP_MARKERS on both ends)
 *     -K 0|1   DDP_CRC on both ends (default 1)
 *     -S SIZE  RDMA Write/Read size (default 64K; with -M at most min(MULPDU, 16K): one FPDU)
 * Prints one line per operation, the negotiated parameters and the Terminate's codes.
 * exit: 0 all done and verified, 1 failure, 2 usage, 77 libexsock.so not loaded.
 */
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int opt_markers, opt_crc = 1, opt_port;
static uint32_t opt_size = 64 << 10;

/* what the server publishes for the client */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int port;
	int stage;        /* 1 listening, 2 connection 1 ready, 3 connection 2 ready, 4 done; -1 failed */
	uint32_t size;    /* the size both use */
	uint32_t r_stag, b_stag, c_stag, r2_stag;
	uint64_t r_addr, r2_addr;
	uint32_t srv_mulpdu;
	int check_ok;
	struct ddp_conn_info term_info; /* the server's connection 2 at the end */
} sh = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void publish(int stage)
{
	pthread_mutex_lock(&sh.mu);
	sh.stage = stage;
	pthread_cond_broadcast(&sh.cv);
	pthread_mutex_unlock(&sh.mu);
}

/* waits (bounded) until the server reached stage; 0 or -1 */
static int await_stage(int stage)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += xs_timeout_ms / 1000;
	pthread_mutex_lock(&sh.mu);
	int r = 0;
	while (sh.stage != stage && sh.stage >= 0 && r == 0)
		r = pthread_cond_timedwait(&sh.cv, &sh.mu, &dl);
	int ok = sh.stage == stage;
	pthread_mutex_unlock(&sh.mu);
	if (!ok)
		xs_msg("the server did not reach stage %d within %d ms", stage, xs_timeout_ms);
	return ok ? 0 : -1;
}

static int apply(int fd)
{
	int one = 1;
	if (setsockopt(fd, SOL_DDP, DDP_MODE, &one, sizeof one) ||
	    setsockopt(fd, SOL_DDP, DDP_CRC, &opt_crc, sizeof opt_crc) ||
	    setsockopt(fd, SOL_DDP, DDP_MARKERS, &opt_markers, sizeof opt_markers)) {
		xs_perr("setsockopt(SOL_DDP)");
		return -1;
	}
	int t = xs_timeout_ms;
	if (setsockopt(fd, SOL_DDP, DDP_MPA_TIMEOUT_MS, &t, sizeof t)) {
		xs_perr("setsockopt(DDP_MPA_TIMEOUT_MS)");
		return -1;
	}
	return 0;
}

static int info(int fd, struct ddp_conn_info *ci)
{
	socklen_t l = sizeof *ci;
	if (getsockopt(fd, SOL_DDP, DDP_CONN_INFO, ci, &l) != 0) {
		xs_perr("getsockopt(DDP_CONN_INFO)");
		return -1;
	}
	return 0;
}

/* one completion (bounded), must be for wr_id and successful */
static int expect_wc(int fd, uint64_t wr_id, uint32_t opcode, struct ddp_wc *out, const char *what)
{
	struct ddp_wc wc;
	int n;
	do
		n = ddp_wait(fd, &wc, 1, xs_timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		xs_perr("%s: ddp_wait", what);
		return -1;
	}
	if (n == 0) {
		xs_msg("%s: no completion within %d ms", what, xs_timeout_ms);
		return -1;
	}
	char d[160];
	xs_wc_describe(&wc, d, sizeof d);
	if (wc.status != DDP_WC_SUCCESS || wc.wr_id != wr_id || wc.opcode != opcode) {
		xs_msg("%s: unexpected completion: %s", what, d);
		return -1;
	}
	if (out)
		*out = wc;
	return 0;
}

#define NMSG 5
static const uint32_t msg_len[NMSG] = { 64, 100, 200, 300, 16 };
static uint64_t msg_seed(int k) { return xs_seed('O', 'p', (uint64_t)k); }
static const uint64_t SRV_SEED = 0x0bcdef01ull;
static uint64_t write_seed(void) { return xs_seed('O', 'W', 1); }

static void *server(void *unused)
{
	(void)unused;
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)opt_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || apply(lfd) ||
	    bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4)) {
		xs_perr("server: listen on 127.0.0.1:%d", opt_port);
		goto fail;
	}
	socklen_t al = sizeof a;
	getsockname(lfd, (struct sockaddr *)&a, &al);
	pthread_mutex_lock(&sh.mu);
	sh.port = ntohs(a.sin_port);
	pthread_mutex_unlock(&sh.mu);
	printf("%s: listening on 127.0.0.1:%d (DDP, CRC %s, markers %s)\n", xs_prog, sh.port,
	       opt_crc ? "on" : "off", opt_markers ? "both ways" : "off");
	publish(1);

	/* ---- connection 1 */
	int s = xs_accept(lfd, xs_timeout_ms);
	struct ddp_conn_info ci;
	if (info(s, &ci))
		goto fail;
	uint32_t size = opt_size;
	if (opt_markers) {
		uint32_t cap = ci.mulpdu < 16384 ? ci.mulpdu : 16384;
		if (size > cap)
			size = cap;
	}
	uint8_t *R = xs_alloc(2 * (size_t)size), *B = xs_alloc(4096), *C = xs_alloc(4096);
	xs_fill(R + size, size, SRV_SEED, 0);
	uint32_t rs, bs, cs;
	if (ddp_reg_mr(s, R, 2 * (size_t)size, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE |
			       DDP_ACCESS_REMOTE_READ, &rs) ||
	    ddp_reg_mr(s, B, 4096, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE, &bs) ||
	    ddp_reg_mr(s, C, 4096, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE, &cs)) {
		xs_perr("server: ddp_reg_mr");
		goto fail;
	}
	uint8_t *rb[NMSG];
	for (int k = 0; k < NMSG; k++) {
		rb[k] = xs_alloc(4096);
		struct iovec iov = { rb[k], 4096 };
		if (ddp_post_recv(s, 100 + (uint64_t)k, &iov, 1)) {
			xs_perr("server: ddp_post_recv");
			goto fail;
		}
	}
	pthread_mutex_lock(&sh.mu);
	sh.size = size;
	sh.r_stag = rs;
	sh.b_stag = bs;
	sh.c_stag = cs;
	sh.r_addr = (uint64_t)(uintptr_t)R;
	sh.srv_mulpdu = ci.mulpdu;
	pthread_mutex_unlock(&sh.mu);
	publish(2);
	static const uint32_t want_flags[NMSG] = { 0, DDP_WC_SOLICITED, DDP_WC_WITH_INV,
						   DDP_WC_WITH_INV | DDP_WC_SOLICITED, 0 };
	for (int k = 0; k < NMSG; k++) {
		struct ddp_wc wc;
		char what[64];
		snprintf(what, sizeof what, "server: message %d", k + 1);
		if (expect_wc(s, 100 + (uint64_t)k, DDP_WC_OP_RECV, &wc, what))
			goto fail;
		size_t bad;
		if (wc.byte_len != msg_len[k] || xs_check(rb[k], msg_len[k], msg_seed(k), 0, &bad)) {
			xs_msg("%s: %u bytes (expected %u) or content mismatch", what, wc.byte_len, msg_len[k]);
			goto fail;
		}
		uint32_t f = wc.flags & (DDP_WC_WITH_INV | DDP_WC_SOLICITED);
		if (f != want_flags[k]) {
			xs_msg("%s: completion flags 0x%x, expected 0x%x", what, wc.flags, want_flags[k]);
			goto fail;
		}
		uint32_t want_inv = k == 2 ? bs : k == 3 ? cs : 0;
		if (want_inv && wc.inv_stag != want_inv) {
			xs_msg("%s: invalidated STag 0x%08x, expected 0x%08x", what, wc.inv_stag, want_inv);
			goto fail;
		}
		if (xs_verbose)
			printf("%s: server: message %d: %u bytes verified, flags 0x%x%s\n", xs_prog, k + 1,
			       wc.byte_len, wc.flags, want_inv ? " (STag invalidated)" : "");
	}
	/* the "check" message: the client's Write is in R */
	size_t bad;
	int ok = xs_check(R, size, write_seed(), 0, &bad) == 0 &&
		 xs_check(R + size, size, SRV_SEED, 0, &bad) == 0;
	pthread_mutex_lock(&sh.mu);
	sh.check_ok = ok;
	pthread_mutex_unlock(&sh.mu);
	uint8_t *reply = xs_alloc(64);
	xs_fill(reply, 64, msg_seed(99), 0);
	reply[0] = (uint8_t)ok;
	struct iovec iov = { reply, 64 };
	if (ddp_post_send(s, 200, &iov, 1, DDP_SIGNALED) || expect_wc(s, 200, DDP_WC_OP_SEND, NULL, "server: reply")) {
		xs_perr("server: reply");
		goto fail;
	}

	/* ---- connection 2: the violation */
	int s2 = xs_accept(lfd, xs_timeout_ms);
	uint8_t *R2 = xs_alloc(4096);
	uint32_t r2s;
	if (ddp_reg_mr(s2, R2, 4096, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE, &r2s)) {
		xs_perr("server: ddp_reg_mr (connection 2)");
		goto fail;
	}
	pthread_mutex_lock(&sh.mu);
	sh.r2_stag = r2s;
	sh.r2_addr = (uint64_t)(uintptr_t)R2;
	pthread_mutex_unlock(&sh.mu);
	publish(3);
	uint64_t dl = xs_deadline(xs_timeout_ms);
	for (;;) {
		struct ddp_wc wc;
		int n = ddp_wait(s2, &wc, 1, xs_ms_left(dl));
		if (n < 0 && errno == EPIPE)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			xs_perr("server: connection 2: ddp_wait");
			goto fail;
		}
		if (n == 0 && xs_ms_left(dl) == 0) {
			xs_msg("server: connection 2 did not end within %d ms (no Terminate?)", xs_timeout_ms);
			goto fail;
		}
	}
	struct ddp_conn_info t2;
	if (info(s2, &t2))
		goto fail;
	pthread_mutex_lock(&sh.mu);
	sh.term_info = t2;
	pthread_mutex_unlock(&sh.mu);
	ddp_dereg_mr(s, rs);
	close(s2);
	close(s);
	close(lfd);
	publish(4);
	return NULL;
fail:
	publish(-1);
	return NULL;
}

static int client_conn(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || apply(fd))
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		xs_perr("connect to 127.0.0.1:%d", port);
		close(fd);
		return -1;
	}
	return fd;
}

static int client(void)
{
	if (await_stage(1))
		return -1;
	int c = client_conn(sh.port);
	if (c < 0)
		return -1;
	uint8_t *rrep = xs_alloc(4096);
	struct iovec riov = { rrep, 4096 };
	if (ddp_post_recv(c, 1, &riov, 1)) {
		xs_perr("ddp_post_recv");
		return -1;
	}
	if (await_stage(2))
		return -1;
	struct ddp_conn_info ci;
	if (info(c, &ci))
		return -1;
	uint32_t size = sh.size;
	printf("%s: connection 1: MPA rev %u, CRC %s, markers tx %u rx %u, IRD %u ORD %u, MULPDU %u/%u; "
	       "RDMA size %u\n",
	       xs_prog, ci.mpa_rev, ci.crc ? "on" : "off", ci.markers_tx, ci.markers_rx, ci.ird, ci.ord,
	       ci.mulpdu, sh.srv_mulpdu, size);
	if (ci.crc != (opt_crc ? 1 : 0) || ci.markers_tx != (uint8_t)opt_markers ||
	    ci.markers_rx != (uint8_t)opt_markers) {
		xs_msg("negotiated CRC/markers differ from what both sides asked for");
		return -1;
	}
	uint8_t *m[NMSG];
	for (int k = 0; k < NMSG; k++) {
		m[k] = xs_alloc(msg_len[k]);
		xs_fill(m[k], msg_len[k], msg_seed(k), 0);
	}
	struct iovec iov;
#define SEND(k, call, name)                                                                      \
	do {                                                                                     \
		iov = (struct iovec){ m[k], msg_len[k] };                                        \
		if ((call) != 0) {                                                               \
			xs_perr("%s", name);                                                     \
			return -1;                                                               \
		}                                                                                \
		if (expect_wc(c, 10 + (uint64_t)(k), DDP_WC_OP_SEND, NULL, name))                 \
			return -1;                                                               \
		printf("%s: ok: %-26s %4u B\n", xs_prog, name, msg_len[k]);                      \
	} while (0)
	SEND(0, ddp_post_send(c, 10, &iov, 1, DDP_SIGNALED), "Send");
	SEND(1, ddp_post_send(c, 11, &iov, 1, DDP_SIGNALED | DDP_SOLICITED), "Send with SE");
	/* RDMA Write, Read back, Read of the server's half */
	uint8_t *w = xs_alloc(size), *back = xs_alloc(size), *srv = xs_alloc(size);
	xs_fill(w, size, write_seed(), 0);
	iov = (struct iovec){ w, size };
	if (ddp_post_write(c, 20, &iov, 1, sh.r_stag, sh.r_addr, DDP_SIGNALED) ||
	    expect_wc(c, 20, DDP_WC_OP_WRITE, NULL, "RDMA Write"))
		return -1;
	printf("%s: ok: %-26s %4u B -> STag 0x%08x\n", xs_prog, "RDMA Write", size, sh.r_stag);
	iov = (struct iovec){ back, size };
	if (ddp_post_read(c, 21, &iov, 1, sh.r_stag, sh.r_addr, DDP_SIGNALED) ||
	    expect_wc(c, 21, DDP_WC_OP_READ, NULL, "RDMA Read back"))
		return -1;
	size_t bad;
	if (xs_check(back, size, write_seed(), 0, &bad)) {
		xs_report_mismatch("RDMA Read of what was written", back, size, write_seed(), 0, bad);
		return -1;
	}
	iov = (struct iovec){ srv, size };
	if (ddp_post_read(c, 22, &iov, 1, sh.r_stag, sh.r_addr + size, DDP_SIGNALED) ||
	    expect_wc(c, 22, DDP_WC_OP_READ, NULL, "RDMA Read"))
		return -1;
	if (xs_check(srv, size, SRV_SEED, 0, &bad)) {
		xs_report_mismatch("RDMA Read of the server's data", srv, size, SRV_SEED, 0, bad);
		return -1;
	}
	printf("%s: ok: %-26s %4u B x 2 (read back the Write, and the server's data): verified\n",
	       xs_prog, "RDMA Read", size);
	SEND(2, ddp_post_send_inv(c, 12, &iov, 1, sh.b_stag, DDP_SIGNALED), "Send with Invalidate");
	SEND(3, ddp_post_send_inv(c, 13, &iov, 1, sh.c_stag, DDP_SIGNALED | DDP_SOLICITED),
	     "Send with SE and Invalidate");
	SEND(4, ddp_post_send(c, 14, &iov, 1, DDP_SIGNALED), "Send (check request)");
	struct ddp_wc wc;
	if (expect_wc(c, 1, DDP_WC_OP_RECV, &wc, "the server's reply"))
		return -1;
	uint8_t want[64];
	xs_fill(want, 64, msg_seed(99), 0);
	want[0] = 1;
	if (wc.byte_len != 64 || memcmp(rrep, want, 64) != 0) {
		xs_msg("the server's reply (%u bytes) says the RDMA Write did not arrive intact", wc.byte_len);
		return -1;
	}
	printf("%s: ok: %-26s %4u B (server verified the Write and every Send)\n", xs_prog,
	       "Send (reply, server->client)", wc.byte_len);
	struct ddp_conn_info end1;
	if (info(c, &end1))
		return -1;

	/* ---- connection 2 */
	int c2 = client_conn(sh.port);
	if (c2 < 0 || await_stage(3))
		return -1;
	uint32_t bad_stag = sh.r2_stag ^ 0x5a; /* the right index, a wrong key */
	uint8_t *w2 = xs_alloc(512);
	xs_fill(w2, 512, write_seed(), 0);
	iov = (struct iovec){ w2, 512 };
	if (ddp_post_write(c2, 30, &iov, 1, bad_stag, sh.r2_addr, DDP_SIGNALED)) {
		xs_perr("ddp_post_write (wrong key)");
		return -1;
	}
	/* completions until the connection ends (the Terminate arrives) */
	uint64_t dl = xs_deadline(xs_timeout_ms);
	int ended = 0;
	while (!ended) {
		int n = ddp_wait(c2, &wc, 1, xs_ms_left(dl));
		if (n < 0 && errno == EPIPE)
			ended = 1;
		else if (n < 0 && errno != EINTR) {
			xs_perr("connection 2: ddp_wait");
			return -1;
		} else if (n == 1 && xs_verbose) {
			char d[160];
			xs_wc_describe(&wc, d, sizeof d);
			printf("%s: connection 2: completion %s\n", xs_prog, d);
		} else if (n == 0 && xs_ms_left(dl) == 0) {
			xs_msg("connection 2 did not end within %d ms after the bad Write", xs_timeout_ms);
			return -1;
		}
	}
	struct ddp_conn_info t;
	if (info(c2, &t))
		return -1;
	if (await_stage(4))
		return -1;
	const struct ddp_conn_info *st = &sh.term_info;
	printf("%s: ok: %-26s server sent layer %u etype %u ecode %u (term_sent %u); client received "
	       "layer %u etype %u ecode %u (term_sent %u)\n",
	       xs_prog, "Terminate", st->term_layer, st->term_etype, st->term_ecode, st->term_sent,
	       t.term_layer, t.term_etype, t.term_ecode, t.term_sent);
	if (st->term_sent != 1 || t.term_sent != 2 || st->term_layer != t.term_layer ||
	    st->term_etype != t.term_etype || st->term_ecode != t.term_ecode) {
		xs_msg("expected a Terminate sent by the server (term_sent 1) and received by the client "
		       "(term_sent 2) with the same codes");
		return -1;
	}
	iov = (struct iovec){ w2, 16 };
	if (ddp_post_send(c2, 31, &iov, 1, DDP_SIGNALED) == 0 || errno != EPIPE) {
		xs_msg("after the Terminate, ddp_post_send did not fail with EPIPE");
		return -1;
	}
	printf("%s: connection 1: %llu bytes sent, %llu received in %llu/%llu FPDUs; all opcodes done, "
	       "every byte verified\n",
	       xs_prog, (unsigned long long)end1.bytes_tx, (unsigned long long)end1.bytes_rx,
	       (unsigned long long)end1.fpdus_tx, (unsigned long long)end1.fpdus_rx);
	close(c2);
	close(c);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ddp-opcodes [-p PORT] [-M] [-K 0|1] [-S SIZE] [-t SECONDS] [-v]\n"
		   "  -p PORT     server port on 127.0.0.1 (default 0: any free port)\n"
		   "  -M          markers both ways\n"
		   "  -K 0|1      DDP_CRC on both ends (default 1)\n"
		   "  -S SIZE     RDMA Write/Read size (default 64K; with -M at most min(MULPDU, 16K))\n"
		   "  -t SECONDS  bound of every wait (default 10)\n"
		   "exit: 0 ok, 1 failure, 2 usage, 77 libexsock.so not loaded\n");
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int op;
	while ((op = getopt(argc, argv, "p:MK:S:t:vh")) != -1) {
		switch (op) {
		case 'p': opt_port = (int)xs_opt_u64("-p", optarg, 0, 65535, 0); break;
		case 'M': opt_markers = 1; break;
		case 'K': opt_crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'S': opt_size = (uint32_t)xs_opt_u64("-S", optarg, 1, 16u << 20, 1); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 3600, 0) * 1000; break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc)
		xs_usage_error("unexpected argument '%s'", argv[optind]);
	xs_require_ddp();
	pthread_t t;
	if (pthread_create(&t, NULL, server, NULL) != 0)
		xs_pfatal("pthread_create");
	int rc = client();
	if (rc != 0) {
		xs_msg("FAILED");
		return 1; /* the server thread may still wait: exit ends it */
	}
	pthread_join(t, NULL);
	printf("%s: OK\n", xs_prog);
	return 0;
}
