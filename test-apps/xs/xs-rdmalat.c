/*
 * xs-rdmalat — RDMA Write and RDMA Read latency (what perftest's ib_write_lat and ib_read_lat
 * measure), in xs-pingpong's output format, every transfer verified by content.
 *
 *   xs-rdmalat -s [-a ADDR] [-p PORT] [options]
 *   xs-rdmalat -c ADDR [-p PORT] -m read|write [-S SIZES] [-n ITERS] [-w WARMUP] [options]
 *
 * read:  the client posts one RDMA Read of SIZE bytes from the server's region and waits for
 *        its completion; a sample is post to completion, as ib_read_lat's. Meanwhile the
 *        server's application only waits in a blocking read of its byte stream (the library
 *        answers the Read Requests). The Read's source offset moves with the iteration over a
 *        region that holds a known pattern; the client's buffer is poisoned (every byte made
 *        different from what the Read must bring) before each post and every byte is checked
 *        after the completion, outside the sample. At the end the server checks that its
 *        region, read-only to the peer, is unchanged.
 * write: a ping-pong of RDMA Writes, each followed by a Send that says it is there. iWARP has
 *        no Write with Immediate (RFC 5040), and RDMAP delivers a Send only after the Writes
 *        before it are placed: the pattern of rping and of storage protocols over iWARP. The
 *        client Writes SIZE bytes into the server's region and Sends an 8-byte notice; the
 *        server, on the notice, Writes SIZE bytes into the client's region and Sends its notice
 *        back. A sample is the client's round trip (its post to the completion of the server's
 *        notice); ib_write_lat prints half of that. Each side checks every byte the other wrote
 *        (a pattern seeded by side, size and iteration) after it has answered, outside the
 *        sample.
 *
 * Output per size: "size iters median_us p99_us min_us mean_us", as xs-pingpong.
 * exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded.
 */
#include "common.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG_ID 'L'
#define MAX_SIZE (16u << 20)
#define MAX_ITERS 1000000u
/* Read mode: the source offset moves by 64 bytes per iteration within this span. */
#define READ_SPAN 4096u
#define READY_IT UINT64_MAX    /* the server's first notice: its receive is posted */
enum { WR_WRITE = 1, WR_SEND = 2, WR_READ = 3, WR_RECV = 4 };
static const uint64_t SRC_SEED = 0x5eadbeefull;


/* The pattern side `who` ('c' client, 's' server) writes at iteration `it` of `size`. */
static uint64_t wseed(int who, uint32_t size, uint64_t it)
{
	return xs_seed(PROG_ID + ((uint64_t)who << 8), size, it);
}

static uint32_t max_size(const struct xs_plan *p)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < p->nsizes; i++)
		if (p->sizes[i] > m)
			m = p->sizes[i];
	return m;
}

/* A bound for a wait that lasts the whole run: the plain timeout plus 100 ms per iteration. */
static int run_bound(const struct xs_plan *p)
{
	uint64_t ms = (uint64_t)xs_timeout_ms + 100ull * p->nsizes * ((uint64_t)p->iters + p->warmup);
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Registers a zeroed region of len bytes (at least 1) with `access`. */
static uint8_t *region(int fd, size_t len, int access, uint32_t *stag)
{
	uint8_t *r = xs_alloc(len ? len : 1);
	if (ddp_reg_mr(fd, r, len ? len : 1, access, stag) != 0) {
		xs_perr("ddp_reg_mr(%zu bytes)", len);
		return NULL;
	}
	return r;
}

/* ---- write mode -------------------------------------------------------------------------- */

struct wside {
	int who;               /* 'c' or 's' */
	struct xs_cq *cq;
	uint8_t *mine, *src;   /* my registered region (the peer writes it), my Write source */
	size_t slot;           /* the largest size: `mine` holds two slots of it (see below) */
	struct xs_region peer; /* the peer's region */
	uint64_t notice_in, notice_out;
	int have_notice;       /* a receive completed; its notice is in `notice` */
	uint64_t notice;
	int sends_out;         /* signaled Sends not yet completed */
};

/* The next completion, or -1 with a message (an error, or none within the timeout). */
static int next_wc(struct xs_cq *cq, struct ddp_wc *wc)
{
	int r = xs_cq_next(cq, wc, xs_timeout_ms);
	if (r < 0)
		xs_perr("ddp_wait");
	else if (r == 0)
		xs_msg("no completion within %d ms", xs_timeout_ms);
	return r > 0 ? 0 : -1;
}

/* Takes one completion: a Send's (counted off) or the notice receive's (kept). */
static int take_one(struct wside *w)
{
	struct ddp_wc wc;
	if (next_wc(w->cq, &wc) != 0)
		return -1;
	if (wc.status != DDP_WC_SUCCESS) {
		xs_wc_complain("error completion", &wc);
		return -1;
	}
	if (wc.opcode == DDP_WC_OP_SEND && wc.wr_id == WR_SEND && w->sends_out > 0) {
		w->sends_out--;
	} else if (wc.opcode == DDP_WC_OP_RECV && wc.wr_id == WR_RECV && !w->have_notice &&
		   wc.byte_len == sizeof w->notice_in) {
		w->notice = w->notice_in;
		w->have_notice = 1;
	} else {
		xs_wc_complain("unexpected completion", &wc);
		return -1;
	}
	return 0;
}

/* Waits for the peer's notice, which must say `it`. */
static int wait_notice(struct wside *w, uint64_t it)
{
	while (!w->have_notice)
		if (take_one(w) != 0)
			return -1;
	w->have_notice = 0;
	if (w->notice != it) {
		xs_msg("notice for iteration %llu, expected %llu", (unsigned long long)w->notice,
		       (unsigned long long)it);
		return -1;
	}
	return 0;
}

/* Waits until every Send posted so far has completed: RDMAP completes in order, so the Writes
 * before them have left the source buffer too. */
static int wait_sends(struct wside *w)
{
	while (w->sends_out > 0)
		if (take_one(w) != 0)
			return -1;
	return 0;
}

static int post_notice_recv(struct wside *w)
{
	if (xs_post_recv(w->cq, WR_RECV, &w->notice_in, sizeof w->notice_in) != 0) {
		xs_perr("ddp_post_recv");
		return -1;
	}
	return 0;
}

/* Writes `size` bytes of src into the peer's region, then Sends the notice `it`: one batch
 * (DDP_MORE on the Write), so that both go out in one system call and the peer is woken once,
 * by the notice, not first by the Write alone. */
static int write_and_notify(struct wside *w, uint32_t size, uint64_t it)
{
	if (xs_post_write(w->cq, WR_WRITE, w->src, size, w->peer.stag,
			  w->peer.addr + (it & 1) * w->slot, DDP_MORE) != 0) {
		xs_perr("ddp_post_write (size %u)", size);
		return -1;
	}
	w->notice_out = it;
	if (xs_post_send(w->cq, WR_SEND, &w->notice_out, sizeof w->notice_out, DDP_SIGNALED) != 0) {
		xs_perr("ddp_post_send (notice)");
		return -1;
	}
	w->sends_out++;
	return 0;
}

static int check_written(struct wside *w, uint32_t size, uint64_t it)
{
	size_t bad;
	uint64_t seed = wseed(w->who == 'c' ? 's' : 'c', size, it);
	const uint8_t *at = w->mine + (it & 1) * w->slot;
	if (xs_check(at, size, seed, 0, &bad)) {
		xs_report_mismatch(w->who == 'c' ? "the server's RDMA Write" : "the client's RDMA Write",
				   at, size, seed, 0, bad);
		return -1;
	}
	return 0;
}

static int write_setup(int fd, const struct xs_plan *p, struct wside *w, int who)
{
	uint32_t ms = max_size(p), stag;
	memset(w, 0, sizeof *w);
	w->who = who;
	w->cq = malloc(sizeof *w->cq);
	if (!w->cq)
		xs_pfatal("malloc");
	xs_cq_init(w->cq, fd);
	w->src = xs_alloc(ms);
	/* Two slots, iteration `it` in slot it & 1: the server checks the client's Write after it
	 * has answered (outside the sample), and the client's next Write may then arrive while
	 * it checks; it goes into the other slot (the one after it waits for the server's next
	 * answer, which comes after this check). */
	w->slot = ms;
	w->mine = region(fd, 2 * (size_t)ms, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE, &stag);
	if (!w->mine)
		return -1;
	if (who == 's') {
		/* advertise, learn the client's region, then say "ready" with a Send */
		if (xs_send_region(fd, w->mine, stag, 2 * (size_t)ms) != 0 ||
		    xs_recv_region(fd, &w->peer, 2 * (size_t)ms) != 0 ||
		    post_notice_recv(w) != 0)
			return -1;
		w->notice_out = READY_IT;
		if (xs_post_send(w->cq, WR_SEND, &w->notice_out, sizeof w->notice_out,
				 DDP_SIGNALED) != 0) {
			xs_perr("ddp_post_send (ready)");
			return -1;
		}
		w->sends_out++;
		return 0;
	}
	/* the client's receive is posted before its advertisement lets the server go on */
	if (xs_recv_region(fd, &w->peer, 2 * (size_t)ms) != 0 || post_notice_recv(w) != 0 ||
	    xs_send_region(fd, w->mine, stag, 2 * (size_t)ms) != 0 || wait_notice(w, READY_IT) != 0)
		return -1;
	return post_notice_recv(w);
}

static int write_server(int fd, const struct xs_plan *p)
{
	struct wside w;
	if (write_setup(fd, p, &w, 's') != 0)
		return -1;
	uint64_t verified = 0;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si];
		uint64_t total = (uint64_t)p->iters + p->warmup;
		for (uint64_t it = 0; it < total; it++) {
			/* the source is free once the last Send completed (RDMAP completes in order) */
			if (wait_sends(&w) != 0)
				return -1;
			xs_fill(w.src, size, wseed('s', size, it), 0);
			if (wait_notice(&w, it) != 0)
				return -1;
			int last = si + 1 == p->nsizes && it + 1 == total;
			/* the receive for the client's next notice first: the client sends it as soon
			 * as this notice arrives, and a Send that finds no receive posted ends the
			 * connection (DDP Terminate "no buffer available") */
			if ((!last && post_notice_recv(&w) != 0) || write_and_notify(&w, size, it) != 0)
				return -1;
			if (check_written(&w, size, it) != 0)
				return -1;
			verified += size;
		}
	}
	if (wait_sends(&w) != 0)
		return -1;
	printf("%s: server: %llu bytes RDMA Written by the client, verified\n", xs_prog,
	       (unsigned long long)verified);
	return 0;
}

static int write_client(int fd, const struct xs_plan *p, uint64_t *lat)
{
	struct wside w;
	if (write_setup(fd, p, &w, 'c') != 0)
		return -1;
	xs_print_lat_header("write", "round trip: Write + Send each way");
	uint64_t verified = 0;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si];
		uint64_t total = (uint64_t)p->iters + p->warmup;
		for (uint64_t it = 0; it < total; it++) {
			xs_fill(w.src, size, wseed('c', size, it), 0);
			uint64_t t0 = xs_now_ns();
			if (write_and_notify(&w, size, it) != 0 || wait_notice(&w, it) != 0)
				return -1;
			uint64_t t1 = xs_now_ns();
			if (it >= p->warmup)
				lat[it - p->warmup] = t1 - t0;
			/* my Send's completion too, before the source changes */
			if (wait_sends(&w) != 0 || check_written(&w, size, it) != 0)
				return -1;
			verified += size;
			int last = si + 1 == p->nsizes && it + 1 == total;
			if (!last && post_notice_recv(&w) != 0)
				return -1;
		}
		xs_print_lat_row(size, lat, p->iters);
	}
	printf("%s: client: %llu bytes RDMA Written by the server, verified\n", xs_prog,
	       (unsigned long long)verified);
	return 0;
}

/* ---- read mode --------------------------------------------------------------------------- */

static int read_server(int fd, const struct xs_plan *p)
{
	size_t len = (size_t)max_size(p) + READ_SPAN;
	uint32_t stag;
	uint8_t *r = region(fd, len, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_READ, &stag);
	if (!r)
		return -1;
	xs_fill(r, len, SRC_SEED, 0);
	if (xs_send_region(fd, r, stag, len) != 0)
		return -1;
	/* the client reads for as long as its plan says, then says done */
	return xs_serve_reads_until_done(fd, r, len, stag, SRC_SEED, run_bound(p));
}

static int read_client(int fd, const struct xs_plan *p, uint64_t *lat)
{
	size_t len = (size_t)max_size(p) + READ_SPAN;
	struct xs_region a;
	if (xs_recv_region(fd, &a, len) != 0)
		return -1;
	uint8_t *buf = xs_alloc(max_size(p));
	struct xs_cq *cq = malloc(sizeof *cq);
	if (!cq)
		xs_pfatal("malloc");
	xs_cq_init(cq, fd);
	xs_print_lat_header("read", "post to completion");
	uint64_t verified = 0;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si];
		uint64_t total = (uint64_t)p->iters + p->warmup;
		for (uint64_t it = 0; it < total; it++) {
			uint64_t off = it * 64 % READ_SPAN;
			/* poison: every byte unlike the one the Read must bring */
			xs_fill(buf, size, SRC_SEED, off);
			for (uint32_t i = 0; i < size; i++)
				buf[i] ^= 0xff;
			uint64_t t0 = xs_now_ns();
			if (xs_post_read(cq, WR_READ, buf, size, a.stag, a.addr + off, DDP_SIGNALED) != 0) {
				xs_perr("ddp_post_read (size %u)", size);
				return -1;
			}
			struct ddp_wc wc;
			int r = next_wc(cq, &wc);
			uint64_t t1 = xs_now_ns();
			if (r != 0)
				return -1;
			if (wc.status != DDP_WC_SUCCESS || wc.opcode != DDP_WC_OP_READ ||
			    wc.wr_id != WR_READ || wc.byte_len != size) {
				xs_wc_complain("unexpected completion (expected a READ of the size)", &wc);
				return -1;
			}
			if (it >= p->warmup)
				lat[it - p->warmup] = t1 - t0;
			size_t bad;
			if (xs_check(buf, size, SRC_SEED, off, &bad)) {
				xs_report_mismatch("RDMA Read", buf, size, SRC_SEED, off, bad);
				return -1;
			}
			verified += size;
		}
		xs_print_lat_row(size, lat, p->iters);
	}
	if (xs_reads_done(fd) != 0)
		return -1;
	printf("%s: client: %llu bytes read by RDMA Read, verified\n", xs_prog,
	       (unsigned long long)verified);
	free(cq);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-rdmalat -s [-a ADDR] [-p PORT] [options]\n"
		"       xs-rdmalat -c ADDR [-p PORT] -m read|write [-S SIZES] [-n ITERS] [-w WARMUP] [options]\n"
		"  -s          server (serves one client, then exits)\n"
		"  -c ADDR     client\n"
		"  -a ADDR     server: address to listen on (default: any)\n"
		"  -p PORT     TCP port (default 18519; server: 0 = any free port, printed)\n"
		"  -m MODE     read: RDMA Read, post to completion; write: RDMA Write + Send each way,\n"
		"              the round trip\n"
		"  -S SIZES    sizes, 0 B to 16 MiB (default 64)\n"
		"  -n ITERS    timed iterations per size (default 1000)\n"
		"  -w WARMUP   untimed iterations per size before them (default 100)\n"
		"  -t SECONDS  bound of every single wait (default 10)\n"
		"  -K 0|1      DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -v          verbose\n"
		"exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n");
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int is_server = 0;
	const char *addr = NULL, *port = "18519", *sizes_s = "64", *mode_s = NULL;
	uint64_t iters = 1000, warmup = 100;
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.crc = xs_env_crc(o.crc);
	int op;
	while ((op = getopt(argc, argv, "sc:a:p:m:S:n:w:t:K:vh")) != -1) {
		switch (op) {
		case 's': is_server = 1; break;
		case 'c': is_server = 0; addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': xs_opt_u64("-p", optarg, 0, 65535, 0); port = optarg; break;
		case 'm': mode_s = optarg; break;
		case 'S': sizes_s = optarg; break;
		case 'n': iters = xs_opt_u64("-n", optarg, 1, MAX_ITERS, 1); break;
		case 'w': warmup = xs_opt_u64("-w", optarg, 0, MAX_ITERS, 1); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 86400, 0) * 1000; break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	xs_check_args(argc, argv, is_server, addr, port);
	uint32_t mode = 0;
	if (!is_server) {
		if (!mode_s)
			xs_usage_error("-m read|write is required");
		if (!strcmp(mode_s, "read"))
			mode = XS_READ;
		else if (!strcmp(mode_s, "write"))
			mode = XS_WRITE;
		else
			xs_usage_error("-m: unknown mode '%s' (read, write)", mode_s);
	} else if (mode_s) {
		xs_usage_error("-m is the client's: the server learns it from the client's plan");
	}
	struct xs_plan plan = { 0 };
	plan.nsizes = (uint32_t)xs_parse_sizes("-S", sizes_s, plan.sizes, XS_MAX_SIZES, 0, MAX_SIZE);
	xs_require_ddp();
	o.ddp = 1;
	int rc, fd;
	if (is_server) {
		int lfd = xs_listen(addr, port, &o, NULL);
		fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
		if (xs_recv_plan(fd, &plan, PROG_ID) != 0)
			return XS_EXIT_FAIL;
		if (plan.mode != XS_READ && plan.mode != XS_WRITE)
			xs_fatal("bad mode %u in the client's plan", plan.mode);
		if (plan.iters < 1 || plan.iters > MAX_ITERS || plan.warmup > MAX_ITERS)
			xs_fatal("bad iteration counts %u/%u in the client's plan", plan.iters,
				 plan.warmup);
		for (uint32_t i = 0; i < plan.nsizes; i++)
			if (plan.sizes[i] > MAX_SIZE)
				xs_fatal("bad size %u in the client's plan", plan.sizes[i]);
		xs_print_conn_info(fd, "server");
		rc = plan.mode == XS_READ ? read_server(fd, &plan) : write_server(fd, &plan);
	} else {
		plan.magic = XS_PLAN_MAGIC;
		plan.prog = PROG_ID;
		plan.mode = mode;
		plan.iters = (uint32_t)iters;
		plan.warmup = (uint32_t)warmup;
		fd = xs_connect(addr, port, &o, xs_timeout_ms);
		xs_print_conn_info(fd, "client");
		if (xs_send_plan(fd, &plan) != 0)
			return XS_EXIT_FAIL;
		uint64_t *lat = malloc(sizeof *lat * plan.iters);
		if (!lat)
			xs_pfatal("malloc");
		rc = mode == XS_READ ? read_client(fd, &plan, lat) : write_client(fd, &plan, lat);
		free(lat);
	}
	close(fd);
	return rc == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
