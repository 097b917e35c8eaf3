/*
 * ddp-readbw — RDMA Read bandwidth, in the window style of xs-bw (whose output format it
 * shares): the server (data source) registers a region of WINDOW x SIZE bytes filled with a
 * known pattern and advertises it on the byte stream; the client posts WINDOW RDMA Reads of
 * SIZE bytes (one per slot of the region; at most ORD on the wire, the rest wait in order),
 * waits for their completions, checks each buffer, and repeats for N windows (or T seconds)
 * per size. Prints MB/s (10^6 B/s) per size.
 *
 *   ddp-readbw -s [-a ADDR] [-p PORT] [-t SECONDS] [-K 0|1]
 *   ddp-readbw -c ADDR [-p PORT] [-S SIZES] [-W WINDOW] [-n WINDOWS | -T SECONDS] [-w WARMUP] [-V]
 *
 * Content: every read buffer is poisoned (first and last 64 bytes; all with -V) before its
 * Read is posted and checked after the completion: the first and last 64 bytes and 16 sampled
 * words against the server's pattern at that slot's offset (every byte with -V).
 * exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded.
 */
#include "common.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG_ID 'D'
#define MAX_SIZE (4u << 20)
#define MAX_WINDOW 1024
#define MEM_CAP (128ull << 20)
#define SAMPLES 16
static const uint64_t SRC_SEED = 0x5eadbeefull;


static uint32_t eff_window(uint32_t w, uint32_t size)
{
	uint64_t m = MEM_CAP / size;
	if (m < 1)
		m = 1;
	return w < m ? w : (uint32_t)m;
}

static int server(int fd, const struct xs_plan *p)
{
	size_t len = 0;
	for (uint32_t i = 0; i < p->nsizes; i++) {
		size_t need = (size_t)eff_window(p->window, p->sizes[i]) * p->sizes[i];
		if (need > len)
			len = need;
	}
	uint8_t *region = xs_alloc(len);
	xs_fill(region, len, SRC_SEED, 0);
	uint32_t stag;
	if (ddp_reg_mr(fd, region, len, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_READ, &stag) != 0) {
		xs_perr("ddp_reg_mr(%zu bytes, remote read)", len);
		return -1;
	}
	if (xs_send_region(fd, region, stag, len) != 0)
		return -1;
	/* the client reads for as long as its plan says; wait for its "done", bounded by that */
	uint64_t per_size = p->duration_ns ? p->duration_ns / 1000000 + 1000ull * (p->warmup + 1)
					   : 1000ull * (p->iters + p->warmup + 1);
	int bound = (int)(xs_timeout_ms + p->nsizes * per_size);
	return xs_serve_reads_until_done(fd, region, len, stag, SRC_SEED, bound);
}

static int client(int fd, const struct xs_plan *p, int verify_all)
{
	size_t len = 0;
	for (uint32_t i = 0; i < p->nsizes; i++) {
		size_t need = (size_t)eff_window(p->window, p->sizes[i]) * p->sizes[i];
		if (need > len)
			len = need;
	}
	struct xs_region a;
	if (xs_recv_region(fd, &a, len) != 0)
		return -1;
	uint64_t raddr = a.addr;
	uint32_t rstag = a.stag;
	uint8_t *pool = xs_alloc(len);
	struct xs_cq *cq = malloc(sizeof *cq);
	if (!cq)
		xs_pfatal("malloc");
	xs_cq_init(cq, fd);
	printf("%-8s %7s %8s %12s %10s   (read mode%s)\n", "size", "window", "windows", "MB/s",
	       "seconds", verify_all ? ", every byte verified" : "");
	uint64_t verified = 0;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si], w = eff_window(p->window, size);
		uint64_t t0 = xs_now_ns(), timed = 0;
		for (uint32_t win = 0;; win++) {
			if (win == p->warmup)
				t0 = xs_now_ns();
			for (uint32_t k = 0; k < w; k++) {
				uint8_t *b = pool + (size_t)k * size;
				if (verify_all)
					memset(b, 0, size);
				else {
					memset(b, 0, size < 64 ? size : 64);
					memset(b + size - (size < 64 ? size : 64), 0, size < 64 ? size : 64);
				}
				/* every Read signaled: each buffer is checked after its completion */
				if (xs_post_read(cq, k, b, size, rstag, raddr + (uint64_t)k * size,
						 DDP_SIGNALED) != 0) {
					xs_perr("ddp_post_read (size %u slot %u)", size, k);
					return -1;
				}
			}
			for (uint32_t k = 0; k < w; k++) {
				struct ddp_wc wc;
				int r = xs_cq_next(cq, &wc, xs_timeout_ms);
				if (r <= 0) {
					if (r < 0)
						xs_perr("ddp_wait");
					else
						xs_msg("no Read completion within %d ms", xs_timeout_ms);
					return -1;
				}
				if (wc.status != DDP_WC_SUCCESS || wc.opcode != DDP_WC_OP_READ || wc.wr_id != k ||
				    wc.byte_len != size) {
					char w[96];
					snprintf(w, sizeof w, "unexpected completion (expected READ wr_id %u len %u)",
						 k, size);
					xs_wc_complain(w, &wc);
					return -1;
				}
				const uint8_t *b = pool + (size_t)k * size;
				size_t bad, checked = size;
				int mis = verify_all ? xs_check(b, size, SRC_SEED, (uint64_t)k * size, &bad)
						     : xs_check_sampled(b, size, SRC_SEED, (uint64_t)k * size,
									SAMPLES, &bad, &checked);
				if (mis) {
					xs_report_mismatch("RDMA Read", b, size, SRC_SEED, (uint64_t)k * size, bad);
					return -1;
				}
				verified += size;
			}
			int last;
			if (win + 1 < p->warmup)
				last = 0;
			else if (p->duration_ns)
				last = win >= p->warmup && xs_now_ns() - t0 >= p->duration_ns;
			else
				last = win + 1 >= p->warmup + p->iters;
			if (win >= p->warmup)
				timed++;
			if (last)
				break;
		}
		double secs = (double)(xs_now_ns() - t0) / 1e9;
		double mbs = secs > 0 ? (double)timed * w * size / secs / 1e6 : 0;
		char sb[32];
		printf("%-8s %7u %8llu %12.2f %10.3f\n", xs_fmt_size(size, sb), w,
		       (unsigned long long)timed, mbs, secs);
	}
	if (xs_reads_done(fd) != 0)
		return -1;
	printf("%s: client: %llu bytes read by RDMA Read and verified (%s)\n", xs_prog,
	       (unsigned long long)verified, verify_all ? "every byte" : "sampled");
	free(cq);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddp-readbw -s [-a ADDR] [-p PORT] [options]\n"
		"       ddp-readbw -c ADDR [-p PORT] [-S SIZES] [-W WINDOW] [-n WINDOWS | -T SECONDS] [-w WARMUP] [-V] [options]\n"
		"  -s          server = data source (serves one client, then exits)\n"
		"  -c ADDR     client = reader\n"
		"  -a ADDR     server: address to listen on (default: any)\n"
		"  -p PORT     TCP port (default 18518; server: 0 = any free port, printed)\n"
		"  -S SIZES    Read sizes, 1 B to 4 MiB (default 1M)\n"
		"  -W WINDOW   Reads per window (default 64, max %d; window x size <= 128 MiB)\n"
		"  -n WINDOWS  timed windows per size (default 100)\n"
		"  -T SECONDS  instead of -n: read for this long per size\n"
		"  -w WARMUP   untimed windows per size before (default 2)\n"
		"  -V          verify every byte (default: first/last 64 B + 16 sampled words)\n"
		"  -t SECONDS  bound of every single wait (default 10)\n"
		"  -K 0|1      DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -v          verbose\n"
		"exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n",
		MAX_WINDOW);
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int is_server = 0, verify_all = 0;
	const char *addr = NULL, *port = "18518", *sizes_s = "1M";
	uint64_t windows = 100, warmup = 2, window = 64, seconds = 0;
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.crc = xs_env_crc(o.crc);
	int op;
	while ((op = getopt(argc, argv, "sc:a:p:S:W:n:T:w:Vt:K:vh")) != -1) {
		switch (op) {
		case 's': is_server = 1; break;
		case 'c': is_server = 0; addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': xs_opt_u64("-p", optarg, 0, 65535, 0); port = optarg; break;
		case 'S': sizes_s = optarg; break;
		case 'W': window = xs_opt_u64("-W", optarg, 1, MAX_WINDOW, 0); break;
		case 'n': windows = xs_opt_u64("-n", optarg, 1, 1000000000, 1); break;
		case 'T': seconds = xs_opt_u64("-T", optarg, 1, 3600, 0); break;
		case 'w': warmup = xs_opt_u64("-w", optarg, 0, 1000000, 1); break;
		case 'V': verify_all = 1; break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 86400, 0) * 1000; break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	xs_check_args(argc, argv, is_server, addr, port);
	struct xs_plan plan = { 0 };
	plan.nsizes = (uint32_t)xs_parse_sizes("-S", sizes_s, plan.sizes, XS_MAX_SIZES, 1, MAX_SIZE);
	xs_require_ddp();
	o.ddp = 1;
	int rc, fd;
	if (is_server) {
		int lfd = xs_listen(addr, port, &o, NULL);
		fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
		if (xs_recv_plan(fd, &plan, PROG_ID) != 0)
			return XS_EXIT_FAIL;
		if (plan.window < 1 || plan.window > MAX_WINDOW)
			xs_fatal("bad window %u in the client's plan", plan.window);
		for (uint32_t i = 0; i < plan.nsizes; i++)
			if (plan.sizes[i] < 1 || plan.sizes[i] > MAX_SIZE)
				xs_fatal("bad size %u in the client's plan", plan.sizes[i]);
		xs_print_conn_info(fd, "server");
		rc = server(fd, &plan);
	} else {
		plan.magic = XS_PLAN_MAGIC;
		plan.prog = PROG_ID;
		plan.mode = XS_EXT;
		plan.iters = (uint32_t)windows;
		plan.warmup = (uint32_t)warmup;
		plan.window = (uint32_t)window;
		plan.duration_ns = seconds * 1000000000ull;
		fd = xs_connect(addr, port, &o, xs_timeout_ms);
		xs_print_conn_info(fd, "client");
		if (xs_send_plan(fd, &plan) != 0)
			return XS_EXIT_FAIL;
		rc = client(fd, &plan, verify_all);
	}
	close(fd);
	return rc == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
