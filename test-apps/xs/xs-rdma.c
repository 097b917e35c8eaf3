/*
 * xs-rdma — RDMA Write and RDMA Read demo with content verification.
 *
 * The server registers a region of 2 x MAXSIZE bytes (remote write + remote read): the first
 * half receives the client's Writes, the second half is filled by the server with a known
 * pattern. It advertises (addr, stag, len) in a Send, laid out like rping's
 * struct rping_rdma_info (BE64 addr, BE32 stag, BE32 len). For each size and -C count the
 * client then
 *   1. RDMA Writes a pattern (seeded by size and iteration) to the start of the write half,
 *   2. RDMA Reads it back into a second buffer (posted right after the Write: RDMAP processes
 *      the Read Request after the Write) and compares,
 *   3. RDMA Reads SIZE bytes of the server-filled half at an offset that moves with the
 *      iteration and compares them with the server's pattern,
 *   4. asks the server (Send) to check its write half, and waits for the answer (Send).
 */
#include "common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG_ID 'R'
#define MAX_SIZE (16u << 20)

struct advert { /* rping's struct rping_rdma_info */
	uint64_t buf;  /* BE */
	uint32_t rkey; /* BE */
	uint32_t size; /* BE */
};
_Static_assert(sizeof(struct advert) == 16, "advert layout");

#define CTL_MAGIC 0x78735264u /* "xsRd" */
enum { T_CHECK = 1, T_STATUS = 2, T_BYE = 3 };
struct ctl {
	uint32_t magic, type, size, iter, status, pad;
};

#define WR_CTL_RECV 10 /* + 0/1 */
#define WR_SEND 20
#define WR_WRITE 30
#define WR_READ_BACK 31
#define WR_READ_SRV 32

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-rdma -s [-a ADDR] [-p PORT] [options]\n"
		"       xs-rdma -c ADDR [-p PORT] [-S SIZES] [-C COUNT] [options]\n"
		"  -s          server: registers the region, checks the client's Writes\n"
		"  -c ADDR     client: Writes, Reads back, Reads the server's data\n"
		"  -a ADDR     server: address to listen on (default: any)\n"
		"  -p PORT     TCP port (default 18517; server: 0 = any free port, printed)\n"
		"  -S SIZES    transfer sizes, 0 B to 16 MiB (default 1,100,4K,64K,1M)\n"
		"  -C COUNT    iterations per size (default 3)\n"
		"  -t SECONDS  bound of every single wait (default 10)\n"
		"  -K 0|1      DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -v          verbose: one line per operation\n"
		"  -h          this help\n"
		"exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n");
}

struct st {
	int fd;
	struct xs_cq cq;
	struct ctl *ctlr[2];
	int ctl_done[2];
	uint32_t ctl_len[2];
	int next_ctl;
	struct ctl sctl;
	int done[64];
};

static int dispatch(struct st *s, const char *waiting_for)
{
	struct ddp_wc wc;
	int r = xs_cq_next(&s->cq, &wc, xs_timeout_ms);
	if (r < 0) {
		xs_perr("ddp_wait (waiting for %s)", waiting_for);
		return -1;
	}
	if (r == 0) {
		xs_msg("timeout: no completion within %d ms (waiting for %s)", xs_timeout_ms,
		       waiting_for);
		return -1;
	}
	char d[160];
	xs_wc_describe(&wc, d, sizeof d);
	if (xs_verbose > 1)
		printf("%s: completion %s\n", xs_prog, d);
	if (wc.status != DDP_WC_SUCCESS) {
		xs_msg("error completion (waiting for %s): %s", waiting_for, d);
		return -1;
	}
	if (wc.wr_id - WR_CTL_RECV < 2 && wc.opcode == DDP_WC_OP_RECV) {
		s->ctl_done[wc.wr_id - WR_CTL_RECV] = 1;
		s->ctl_len[wc.wr_id - WR_CTL_RECV] = wc.byte_len;
	} else if (wc.wr_id < 64 && wc.opcode != DDP_WC_OP_RECV) {
		s->done[wc.wr_id] = 1;
	} else {
		xs_msg("unexpected completion: %s", d);
		return -1;
	}
	return 0;
}

static int wait_done(struct st *s, int wr, const char *what)
{
	while (!s->done[wr])
		if (dispatch(s, what) != 0)
			return -1;
	s->done[wr] = 0;
	return 0;
}

/* The next control message (receives complete in posting order: 0, 1, 0, 1, ...); its
 * receive is posted again unless it is the last one (after the peer's goodbye the peer may
 * have closed already: a receive posted then fails with EPIPE, as it should). */
static int next_ctl_ex(struct st *s, void *out, uint32_t want_len, const char *what, int last)
{
	int j = s->next_ctl;
	while (!s->ctl_done[j])
		if (dispatch(s, what) != 0)
			return -1;
	if (s->ctl_len[j] != want_len) {
		xs_msg("%s: %u bytes, expected %u", what, s->ctl_len[j], want_len);
		return -1;
	}
	memcpy(out, s->ctlr[j], want_len);
	s->ctl_done[j] = 0;
	if (!last && xs_post_recv(&s->cq, WR_CTL_RECV + (uint64_t)j, s->ctlr[j], 64) != 0) {
		xs_perr("ddp_post_recv");
		return -1;
	}
	s->next_ctl ^= 1;
	return 0;
}

static int next_ctl(struct st *s, void *out, uint32_t want_len, const char *what)
{
	return next_ctl_ex(s, out, want_len, what, 0);
}

static int send_buf(struct st *s, void *buf, size_t len, const char *what)
{
	if (xs_post_send(&s->cq, WR_SEND, buf, len, DDP_SIGNALED) != 0) {
		xs_perr("ddp_post_send(%s)", what);
		return -1;
	}
	return wait_done(s, WR_SEND, what);
}

static int send_ctl(struct st *s, uint32_t type, uint32_t size, uint32_t iter, uint32_t status)
{
	s->sctl = (struct ctl){ htonl(CTL_MAGIC), htonl(type), htonl(size), htonl(iter),
				htonl(status), 0 };
	return send_buf(s, &s->sctl, sizeof s->sctl, "control message");
}

static int recv_ctl_ex(struct st *s, struct ctl *c, const char *what, int last)
{
	if (next_ctl_ex(s, c, sizeof *c, what, last) != 0)
		return -1;
	c->magic = ntohl(c->magic);
	c->type = ntohl(c->type);
	c->size = ntohl(c->size);
	c->iter = ntohl(c->iter);
	c->status = ntohl(c->status);
	if (c->magic != CTL_MAGIC) {
		xs_msg("%s: bad magic", what);
		return -1;
	}
	return 0;
}

static int recv_ctl(struct st *s, struct ctl *c, const char *what)
{
	return recv_ctl_ex(s, c, what, 0);
}

static uint64_t write_seed(uint32_t size, uint32_t iter) { return xs_seed(PROG_ID, size, iter); }
static const uint64_t SRV_SEED = 0x5e7ea11dull;

static int server(struct st *s, const struct xs_plan *p, uint32_t maxsize)
{
	(void)p;
	size_t len = 2 * (size_t)maxsize;
	uint8_t *region = xs_alloc(len);
	xs_fill(region + maxsize, maxsize, SRV_SEED, 0);
	uint32_t stag;
	if (ddp_reg_mr(s->fd, region, len,
		       DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE | DDP_ACCESS_REMOTE_READ,
		       &stag) != 0) {
		xs_perr("ddp_reg_mr(%zu bytes, remote write+read)", len);
		return -1;
	}
	printf("%s: server: registered %zu bytes at %p, stag 0x%08x (remote write + read); "
	       "bytes %u.. hold the server's pattern\n",
	       xs_prog, len, (void *)region, stag, maxsize);
	for (int j = 0; j < 2; j++)
		if (xs_post_recv(&s->cq, WR_CTL_RECV + (uint64_t)j, s->ctlr[j], 64) != 0) {
			xs_perr("ddp_post_recv");
			return -1;
		}
	static struct advert adv;
	adv.buf = htobe64((uint64_t)(uintptr_t)region);
	adv.rkey = htonl(stag);
	adv.size = htonl((uint32_t)len);
	if (send_buf(s, &adv, sizeof adv, "advertisement") != 0)
		return -1;
	uint64_t checks = 0, bytes = 0;
	for (;;) {
		struct ctl c;
		if (recv_ctl(s, &c, "the client's request") != 0)
			return -1;
		if (c.type == T_BYE)
			break;
		if (c.type != T_CHECK || c.size > maxsize) {
			xs_msg("bad request from the client (type %u size %u)", c.type, c.size);
			return -1;
		}
		size_t bad;
		uint32_t ok = 1;
		if (xs_check(region, c.size, write_seed(c.size, c.iter), 0, &bad)) {
			xs_report_mismatch("server: the client's RDMA Write", region, c.size,
					   write_seed(c.size, c.iter), 0, bad);
			ok = 0;
		} else {
			checks++;
			bytes += c.size;
		}
		if (xs_verbose)
			printf("%s: server: checked the client's Write of %u bytes (iteration %u): %s\n",
			       xs_prog, c.size, c.iter, ok ? "ok" : "MISMATCH");
		memset(region, 0, c.size); /* poison: the next Write must really arrive */
		if (send_ctl(s, T_STATUS, c.size, c.iter, ok) != 0 || !ok)
			return -1;
	}
	if (send_ctl(s, T_BYE, 0, 0, 1) != 0)
		return -1;
	if (ddp_dereg_mr(s->fd, stag) != 0) {
		xs_perr("ddp_dereg_mr");
		return -1;
	}
	if (xs_check(region + maxsize, maxsize, SRV_SEED, 0, NULL)) {
		xs_msg("server: the read-only half of the region changed");
		return -1;
	}
	printf("%s: server: %llu Writes (%llu bytes) verified in the region, read half intact\n",
	       xs_prog, (unsigned long long)checks, (unsigned long long)bytes);
	free(region);
	return 0;
}

static int client(struct st *s, const struct xs_plan *p, uint32_t maxsize)
{
	struct advert adv;
	if (next_ctl(s, &adv, sizeof adv, "the server's advertisement") != 0)
		return -1;
	uint64_t raddr = be64toh(adv.buf);
	uint32_t rstag = ntohl(adv.rkey), rlen = ntohl(adv.size);
	printf("%s: client: server region at 0x%llx, stag 0x%08x, %u bytes\n", xs_prog,
	       (unsigned long long)raddr, rstag, rlen);
	if (rlen != 2 * (uint64_t)maxsize) {
		xs_msg("the server's region has %u bytes, expected %llu", rlen,
		       2 * (unsigned long long)maxsize);
		return -1;
	}
	uint8_t *src = xs_alloc(maxsize), *back = xs_alloc(maxsize), *srv = xs_alloc(maxsize);
	uint64_t ops = 0, bytes = 0;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si];
		for (uint32_t it = 0; it < p->iters; it++) {
			uint64_t ws = write_seed(size, it);
			xs_fill(src, size, ws, 0);
			memset(back, 0, size);
			memset(srv, 0, size);
			if (xs_post_write(&s->cq, WR_WRITE, src, size, rstag, raddr, DDP_SIGNALED) != 0) {
				xs_perr("ddp_post_write(%u bytes)", size);
				return -1;
			}
			if (xs_post_read(&s->cq, WR_READ_BACK, back, size, rstag, raddr, DDP_SIGNALED) != 0) {
				xs_perr("ddp_post_read(%u bytes)", size);
				return -1;
			}
			if (wait_done(s, WR_WRITE, "the Write's completion") ||
			    wait_done(s, WR_READ_BACK, "the read-back's completion"))
				return -1;
			size_t bad;
			if (xs_check(back, size, ws, 0, &bad)) {
				xs_report_mismatch("client: read back after Write", back, size, ws, 0, bad);
				return -1;
			}
			uint64_t off = ((uint64_t)it * 4099 + size) % ((uint64_t)maxsize - size + 1);
			if (xs_post_read(&s->cq, WR_READ_SRV, srv, size, rstag, raddr + maxsize + off,
					 DDP_SIGNALED) != 0) {
				xs_perr("ddp_post_read(%u bytes)", size);
				return -1;
			}
			if (wait_done(s, WR_READ_SRV, "the Read's completion"))
				return -1;
			if (xs_check(srv, size, SRV_SEED, off, &bad)) {
				xs_report_mismatch("client: Read of the server's data", srv, size,
						   SRV_SEED, off, bad);
				return -1;
			}
			struct ctl c;
			if (send_ctl(s, T_CHECK, size, it, 0) != 0 ||
			    recv_ctl(s, &c, "the server's check result") != 0)
				return -1;
			if (c.type != T_STATUS || c.size != size || c.iter != it || c.status != 1) {
				xs_msg("the server reports a mismatch in the Write of %u bytes (iteration %u)",
				       size, it);
				return -1;
			}
			ops += 4;
			bytes += 3ull * size;
			if (xs_verbose)
				printf("%s: client: Write %u B -> 0x%llx: server checked ok; Read back %u B: "
				       "ok; Read %u B of server data @+%llu: ok\n",
				       xs_prog, size, (unsigned long long)raddr, size, size,
				       (unsigned long long)(maxsize + off));
		}
		char sb[32];
		printf("%s: client: size %-6s x %u: Write, Read back, Read of server data, server "
		       "check: all verified\n",
		       xs_prog, xs_fmt_size(size, sb), p->iters);
	}
	struct ctl c;
	if (send_ctl(s, T_BYE, 0, 0, 0) != 0 || recv_ctl_ex(s, &c, "the server's goodbye", 1) != 0)
		return -1;
	if (c.type != T_BYE) {
		xs_msg("unexpected answer to goodbye (type %u)", c.type);
		return -1;
	}
	printf("%s: client: %llu operations, %llu bytes transferred by RDMA and verified\n", xs_prog,
	       (unsigned long long)ops, (unsigned long long)bytes);
	free(src);
	free(back);
	free(srv);
	return 0;
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int is_server = 0;
	const char *addr = NULL, *port = "18517", *sizes_s = "1,100,4K,64K,1M";
	uint64_t count = 3;
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.crc = xs_env_crc(o.crc);
	int op;
	while ((op = getopt(argc, argv, "sc:a:p:S:C:t:K:vh")) != -1) {
		switch (op) {
		case 's': is_server = 1; break;
		case 'c': is_server = 0; addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': xs_opt_u64("-p", optarg, 0, 65535, 0); port = optarg; break;
		case 'S': sizes_s = optarg; break;
		case 'C': count = xs_opt_u64("-C", optarg, 1, 1000000, 1); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 86400, 0) * 1000; break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	xs_check_args(argc, argv, is_server, addr, port);
	struct xs_plan plan = { 0 };
	plan.nsizes = (uint32_t)xs_parse_sizes("-S", sizes_s, plan.sizes, XS_MAX_SIZES, 0, MAX_SIZE);
	xs_require_ddp();
	o.ddp = 1;

	struct st *s = calloc(1, sizeof *s);
	if (!s)
		xs_pfatal("calloc");
	s->ctlr[0] = xs_alloc(64);
	s->ctlr[1] = xs_alloc(64);
	uint32_t maxsize = 0;
	int rc;
	if (is_server) {
		int lfd = xs_listen(addr, port, &o, NULL);
		s->fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
		if (xs_recv_plan(s->fd, &plan, PROG_ID) != 0)
			return XS_EXIT_FAIL;
		for (uint32_t i = 0; i < plan.nsizes; i++) {
			if (plan.sizes[i] > MAX_SIZE) {
				xs_msg("bad size %u in the client's plan", plan.sizes[i]);
				return XS_EXIT_FAIL;
			}
			if (plan.sizes[i] > maxsize)
				maxsize = plan.sizes[i];
		}
		xs_print_conn_info(s->fd, "server");
		xs_cq_init(&s->cq, s->fd);
		rc = server(s, &plan, maxsize);
	} else {
		plan.magic = XS_PLAN_MAGIC;
		plan.prog = PROG_ID;
		plan.mode = XS_EXT;
		plan.iters = (uint32_t)count;
		for (uint32_t i = 0; i < plan.nsizes; i++)
			if (plan.sizes[i] > maxsize)
				maxsize = plan.sizes[i];
		s->fd = xs_connect(addr, port, &o, xs_timeout_ms);
		xs_print_conn_info(s->fd, "client");
		xs_cq_init(&s->cq, s->fd);
		for (int j = 0; j < 2; j++)
			if (xs_post_recv(&s->cq, WR_CTL_RECV + (uint64_t)j, s->ctlr[j], 64) != 0)
				xs_pfatal("ddp_post_recv");
		if (xs_send_plan(s->fd, &plan) != 0)
			return XS_EXIT_FAIL;
		rc = client(s, &plan, maxsize);
	}
	close(s->fd);
	return rc == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
