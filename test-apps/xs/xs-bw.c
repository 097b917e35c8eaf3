/*
 * xs-bw — window-based bandwidth, as in Balaji et al. 2005, Fig. 5/6: the sender (client)
 * sends a window of W messages, the receiver (server) acknowledges after the whole window;
 * repeated for N windows (or T seconds) per message size. Prints MB/s (10^6 B/s) per size.
 *
 * Modes: tcp (plain TCP), ddp (DDP socket, plain read/write), ext (ddp_post_send into
 * posted receives), write (RDMA Writes into a registered region of the receiver; every 16th
 * and the last Write of a window are signaled; a small Send after the Writes ends the window).
 * Every window ends with a 16-byte trailer message (window number, "last" flag), then the
 * receiver verifies and acks with 16 bytes.
 *
 * Content: each message is a pattern of (size, slot) with its first 64 bytes re-stamped per
 * message with a pattern of (size, window, slot) (whole message re-stamped for sizes <= 4K).
 * The receiver checks the stamp, the last 64 bytes and 16 sampled words of every message, or
 * every byte with -V (and then also poisons buffers before reuse, so stale data cannot pass).
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

#define PROG_ID 'B'
#define MAX_SIZE (16u << 20)
#define MAX_WINDOW 1024
#define MEM_CAP (128ull << 20) /* per side: window * size is reduced to fit */
#define STAMP 64
#define SMALL 4096
#define SAMPLES 16

#define CTL_MAGIC 0x78734277u /* "xsBw" */
#define F_LAST 0x1
#define F_BAD 0x2
struct ctl { /* trailer, ack and ready message: 24 bytes, big-endian */
	uint32_t magic;
	uint32_t window;
	uint32_t flags;
	uint32_t stag;
	uint64_t addr;
};

/* wr_ids */
#define WR_TRAIL_SEND 5000
#define WR_ACK_SEND 5001
#define WR_READY_SEND 5002
#define WR_TR_RECV 6000 /* + 0/1 */
#define WR_ACK_RECV 7000 /* + 0/1 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-bw -s [-a ADDR] [-p PORT] [-m tcp|ddp] [options]\n"
		"       xs-bw -c ADDR [-p PORT] [-m tcp|ddp|ext|write] [-S SIZES] [-W WINDOW] [-n WINDOWS | -T SECONDS] [-w WARMUP] [-V] [options]\n"
		"  -s          server = receiver (serves one client, then exits)\n"
		"  -c ADDR     client = sender, connect to ADDR\n"
		"  -a ADDR     server: address to listen on (default: any)\n"
		"  -p PORT     TCP port (default 18516; server: 0 = any free port, printed)\n"
		"  -m MODE     tcp | ddp (DDP socket, read/write) | ext (posted Sends) | write (RDMA Write)\n"
		"              (default tcp; a ddp server serves ddp, ext and write clients)\n"
		"  -S SIZES    message sizes, 0 B to 16 MiB, list and/or ranges (default 1K-1M)\n"
		"  -W WINDOW   messages per window (default 64, max %d; reduced so that\n"
		"              window x size <= 128 MiB)\n"
		"  -n WINDOWS  timed windows per size (default 100)\n"
		"  -T SECONDS  instead of -n: send windows for this long per size\n"
		"  -w WARMUP   untimed windows per size before (default 2)\n"
		"  -V          verify every byte (default: stamp + last 64 B + 16 sampled words)\n"
		"  -t SECONDS  bound of every single wait (default 10)\n"
		"  -K 0|1      DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -v          verbose\n"
		"  -h          this help\n"
		"exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n",
		MAX_WINDOW);
}

struct bw {
	int fd;
	enum xs_mode mode;
	int verify_all;
	struct xs_cq cq;
	uint8_t *pool;       /* data buffers: window x size */
	size_t pool_len;
	uint8_t *ctlr[2];    /* control receive buffers: receiver: [0] trailers; sender: acks */
	uint32_t ctlr_len[2];
	struct ctl ctlbuf[2]; /* control send buffers */
	/* completion bookkeeping */
	int recv_done[MAX_WINDOW];
	uint32_t recv_len[MAX_WINDOW];
	int tr_done[2], ack_done[2];
	int signaled_outstanding;
	/* write mode: the receiver's region */
	uint32_t rstag;
	uint64_t raddr;
	uint64_t verified_bytes, checked_bytes;
};

static uint32_t eff_window(uint32_t w, uint32_t size)
{
	uint64_t m = MEM_CAP / (size ? size : 1);
	if (m < 1)
		m = 1;
	return w < m ? w : (uint32_t)m;
}

static void ctl_enc(struct ctl *c, uint32_t window, uint32_t flags, uint32_t stag, uint64_t addr)
{
	c->magic = htonl(CTL_MAGIC);
	c->window = htonl(window);
	c->flags = htonl(flags);
	c->stag = htonl(stag);
	c->addr = htobe64(addr);
}

static int ctl_dec(const void *buf, uint32_t len, struct ctl *out, const char *what)
{
	struct ctl c;
	if (len != sizeof c) {
		xs_msg("%s: %u bytes, expected %zu", what, len, sizeof c);
		return -1;
	}
	memcpy(&c, buf, sizeof c);
	out->magic = ntohl(c.magic);
	out->window = ntohl(c.window);
	out->flags = ntohl(c.flags);
	out->stag = ntohl(c.stag);
	out->addr = be64toh(c.addr);
	if (out->magic != CTL_MAGIC) {
		xs_msg("%s: bad magic 0x%08x", what, out->magic);
		return -1;
	}
	return 0;
}

/* Takes one completion and records it. */
static int dispatch(struct bw *b, const char *waiting_for)
{
	struct ddp_wc wc;
	int r = xs_cq_next(&b->cq, &wc, xs_timeout_ms);
	if (r < 0) {
		xs_perr("ddp_wait (waiting for %s)", waiting_for);
		return -1;
	}
	if (r == 0) {
		xs_msg("timeout: no completion within %d ms (waiting for %s)", xs_timeout_ms,
		       waiting_for);
		return -1;
	}
	if (wc.status != DDP_WC_SUCCESS) {
		char w[96];
		snprintf(w, sizeof w, "error completion (waiting for %s)", waiting_for);
		xs_wc_complain(w, &wc);
		return -1;
	}
	if (wc.opcode == DDP_WC_OP_RECV) {
		if (wc.wr_id < MAX_WINDOW) {
			b->recv_done[wc.wr_id] = 1;
			b->recv_len[wc.wr_id] = wc.byte_len;
		} else if (wc.wr_id - WR_TR_RECV < 2) {
			b->tr_done[wc.wr_id - WR_TR_RECV] = 1;
			b->ctlr_len[wc.wr_id - WR_TR_RECV] = wc.byte_len;
		} else if (wc.wr_id - WR_ACK_RECV < 2) {
			b->ack_done[wc.wr_id - WR_ACK_RECV] = 1;
			b->ctlr_len[wc.wr_id - WR_ACK_RECV] = wc.byte_len;
		} else {
			xs_wc_complain("unexpected completion", &wc);
			return -1;
		}
		return 0;
	}
	if (wc.opcode == DDP_WC_OP_SEND || wc.opcode == DDP_WC_OP_WRITE) {
		if (b->signaled_outstanding <= 0) {
			xs_wc_complain("unexpected completion", &wc);
			return -1;
		}
		b->signaled_outstanding--;
		return 0;
	}
	xs_wc_complain("unexpected completion", &wc);
	return -1;
}

/* The stamp: whole message for small sizes, else the first STAMP bytes. */
static uint64_t stamp_seed(uint32_t size, uint32_t win, uint32_t k)
{
	return xs_seed(PROG_ID, ((uint64_t)size << 32) | win, k + 1);
}
static uint64_t body_seed(uint32_t size, uint32_t k)
{
	return xs_seed(PROG_ID, size, ((uint64_t)k << 32) | 0xb0d1);
}

static void stamp(uint8_t *m, uint32_t size, uint32_t win, uint32_t k)
{
	size_t n = size <= SMALL ? size : STAMP;
	xs_fill(m, n, stamp_seed(size, win, k), 0);
}

static int verify_msg(struct bw *b, const uint8_t *m, uint32_t size, uint32_t win, uint32_t k)
{
	size_t bad, checked = 0;
	int r;
	uint64_t seed = stamp_seed(size, win, k);
	if (size <= SMALL) {
		r = xs_check(m, size, seed, 0, &bad);
		checked = size;
		if (r) {
			char what[96];
			snprintf(what, sizeof what, "size %u window %u message %u", size, win, k);
			xs_report_mismatch(what, m, size, seed, 0, bad);
			return -1;
		}
	} else {
		if (xs_check(m, STAMP, seed, 0, &bad)) {
			char what[96];
			snprintf(what, sizeof what, "size %u window %u message %u (stamp)", size, win, k);
			xs_report_mismatch(what, m, STAMP, seed, 0, bad);
			return -1;
		}
		uint64_t bs = body_seed(size, k);
		if (b->verify_all) {
			r = xs_check(m + STAMP, size - STAMP, bs, STAMP, &bad);
			checked = size;
		} else {
			r = xs_check_sampled(m + STAMP, size - STAMP, bs, STAMP, SAMPLES, &bad, &checked);
			checked += STAMP;
		}
		if (r) {
			char what[96];
			snprintf(what, sizeof what, "size %u window %u message %u", size, win, k);
			xs_report_mismatch(what, m + STAMP, size - STAMP, bs, STAMP, bad);
			return -1;
		}
	}
	b->verified_bytes += size;
	b->checked_bytes += checked;
	return 0;
}

/* ---- receiver ------------------------------------------------------------------------------ */

static int post_data_recvs(struct bw *b, uint32_t size, uint32_t w)
{
	if (b->mode == XS_EXT) {
		for (uint32_t k = 0; k < w; k++) {
			b->recv_done[k] = 0;
			if (xs_post_recv(&b->cq, k, b->pool + (size_t)k * size, size) != 0) {
				xs_perr("ddp_post_recv");
				return -1;
			}
		}
	}
	return 0;
}

/* Receives complete in the order they were posted: a window's W data receives are followed
 * by exactly one trailer receive, so the queue always reads [data x W, trailer]. */
static int post_trailer_recv(struct bw *b)
{
	b->tr_done[0] = 0;
	if (xs_post_recv(&b->cq, WR_TR_RECV, b->ctlr[0], 64) != 0) {
		xs_perr("ddp_post_recv(trailer)");
		return -1;
	}
	return 0;
}

static int send_ctl(struct bw *b, int slot, uint64_t wr_id, uint32_t win, uint32_t flags,
		    uint32_t stag, uint64_t addr)
{
	if (b->mode == XS_TCP || b->mode == XS_DDP) {
		struct ctl c;
		ctl_enc(&c, win, flags, stag, addr);
		if (xs_write_full(b->fd, &c, sizeof c, xs_timeout_ms) != 0) {
			xs_perr("write(control message)");
			return -1;
		}
		return 0;
	}
	/* Reuse of the buffer: wait until earlier signaled sends have completed. */
	while (b->signaled_outstanding > 0)
		if (dispatch(b, "an earlier send's completion") != 0)
			return -1;
	ctl_enc(&b->ctlbuf[slot], win, flags, stag, addr);
	b->signaled_outstanding++;
	if (xs_post_send(&b->cq, wr_id, &b->ctlbuf[slot], sizeof(struct ctl), DDP_SIGNALED) != 0) {
		xs_perr("ddp_post_send(control message)");
		return -1;
	}
	return 0;
}

static int receiver(struct bw *b, const struct xs_plan *p)
{
	uint32_t first = p->sizes[0], w0 = eff_window(p->window, first);
	if (b->mode == XS_EXT || b->mode == XS_WRITE) {
		if (post_data_recvs(b, first, w0) || post_trailer_recv(b))
			return -1;
	}
	if (b->mode == XS_WRITE) {
		if (ddp_reg_mr(b->fd, b->pool, b->pool_len,
			       DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE, &b->rstag) != 0) {
			xs_perr("ddp_reg_mr(%zu bytes)", b->pool_len);
			return -1;
		}
		if (xs_verbose)
			printf("%s: registered %zu bytes at %p, stag 0x%08x\n", xs_prog, b->pool_len,
			       (void *)b->pool, b->rstag);
	}
	if (send_ctl(b, 0, WR_READY_SEND, 0, 0, b->rstag, (uint64_t)(uintptr_t)b->pool) != 0)
		return -1;
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si], w = eff_window(p->window, size);
		for (uint32_t win = 0;; win++) {
			for (uint32_t k = 0; k < w; k++) {
				uint8_t *m = b->pool + (size_t)k * size;
				if (b->mode == XS_TCP || b->mode == XS_DDP) {
					if (xs_read_full(b->fd, m, size, xs_timeout_ms) != 0) {
						xs_perr("read (size %u window %u message %u)", size, win, k);
						return -1;
					}
				} else if (b->mode == XS_EXT) {
					while (!b->recv_done[k])
						if (dispatch(b, "a data message") != 0)
							return -1;
					if (b->recv_len[k] != size) {
						xs_msg("size %u window %u message %u: received %u bytes",
						       size, win, k, b->recv_len[k]);
						return -1;
					}
				} else
					break; /* write: nothing arrives as messages */
				if (verify_msg(b, m, size, win, k) != 0)
					return -1;
			}
			struct ctl t;
			if (b->mode == XS_TCP || b->mode == XS_DDP) {
				struct ctl raw;
				if (xs_read_full(b->fd, &raw, sizeof raw, xs_timeout_ms) != 0) {
					xs_perr("read(trailer)");
					return -1;
				}
				if (ctl_dec(&raw, sizeof raw, &t, "trailer") != 0)
					return -1;
			} else {
				while (!b->tr_done[0])
					if (dispatch(b, "the window trailer") != 0)
						return -1;
				if (ctl_dec(b->ctlr[0], b->ctlr_len[0], &t, "trailer") != 0)
					return -1;
			}
			if (t.window != win) {
				xs_msg("trailer of window %u, expected window %u (size %u)", t.window, win,
				       size);
				return -1;
			}
			if (b->mode == XS_WRITE) /* the Writes are placed before the trailer Send */
				for (uint32_t k = 0; k < w; k++)
					if (verify_msg(b, b->pool + (size_t)k * size, size, win, k) != 0) {
						send_ctl(b, 1, WR_ACK_SEND, win, F_BAD, 0, 0);
						return -1;
					}
			if (b->verify_all && b->mode != XS_TCP && b->mode != XS_DDP)
				memset(b->pool, 0, (size_t)w * size); /* poison before reuse */
			int last = (t.flags & F_LAST) != 0;
			if (b->mode == XS_EXT || b->mode == XS_WRITE) {
				/* Post the next window's receives before the ack lets the sender go
				 * on: this size again, the next size, or nothing after the last. */
				int r = 0;
				if (!last)
					r = post_data_recvs(b, size, w) || post_trailer_recv(b);
				else if (si + 1 < p->nsizes)
					r = post_data_recvs(b, p->sizes[si + 1],
							    eff_window(p->window, p->sizes[si + 1])) ||
					    post_trailer_recv(b);
				if (r)
					return -1;
			}
			if (send_ctl(b, 1, WR_ACK_SEND, win, 0, 0, 0) != 0)
				return -1;
			if (last) {
				if (xs_verbose)
					printf("%s: size %u: %u windows of %u received\n", xs_prog, size,
					       win + 1, w);
				break;
			}
		}
	}
	while (b->signaled_outstanding > 0)
		if (dispatch(b, "the last ack's send completion") != 0)
			return -1;
	printf("%s: receiver: %llu bytes received and verified (%llu bytes compared%s)\n", xs_prog,
	       (unsigned long long)b->verified_bytes, (unsigned long long)b->checked_bytes,
	       b->verify_all ? ", all" : ", sampled");
	if (b->mode == XS_WRITE && ddp_dereg_mr(b->fd, b->rstag) != 0) {
		xs_perr("ddp_dereg_mr");
		return -1;
	}
	return 0;
}

/* ---- sender -------------------------------------------------------------------------------- */

static int wait_ack(struct bw *b, uint32_t win, struct ctl *a)
{
	{
		struct ctl raw;
		if (xs_read_full(b->fd, &raw, sizeof raw, xs_timeout_ms) != 0) {
			xs_perr("read(ack of window %u)", win);
			return -1;
		}
		if (ctl_dec(&raw, sizeof raw, a, "ack") != 0)
			return -1;
	}
	return 0;
}

static int sender(struct bw *b, const struct xs_plan *p)
{
	struct ctl ready;
	/* The ready message (and in write mode the region) */
	if (b->mode == XS_TCP || b->mode == XS_DDP) {
		struct ctl raw;
		if (xs_read_full(b->fd, &raw, sizeof raw, xs_timeout_ms) != 0) {
			xs_perr("waiting for the receiver's ready message");
			return -1;
		}
		if (ctl_dec(&raw, sizeof raw, &ready, "ready message") != 0)
			return -1;
	} else {
		/* ackbuf[0] was posted before the plan went out (wr WR_ACK_RECV+0) */
		while (!b->ack_done[0])
			if (dispatch(b, "the receiver's ready message") != 0)
				return -1;
		if (ctl_dec(b->ctlr[0], b->ctlr_len[0], &ready, "ready message") != 0)
			return -1;
		b->ack_done[0] = 0;
		if (xs_post_recv(&b->cq, WR_ACK_RECV + 0, b->ctlr[0], 64) != 0) {
			xs_perr("ddp_post_recv(ack)");
			return -1;
		}
		b->rstag = ready.stag;
		b->raddr = ready.addr;
		if (b->mode == XS_WRITE && xs_verbose)
			printf("%s: receiver region at 0x%llx stag 0x%08x\n", xs_prog,
			       (unsigned long long)b->raddr, b->rstag);
	}
	printf("%-8s %7s %8s %12s %10s   (%s mode%s)\n", "size", "window", "windows", "MB/s",
	       "seconds", xs_mode_name(b->mode), b->verify_all ? ", every byte verified" : "");
	int aj = 1; /* ack buffer 0 carried the ready message and was reposted after buffer 1 */
	for (uint32_t si = 0; si < p->nsizes; si++) {
		uint32_t size = p->sizes[si], w = eff_window(p->window, size);
		if (size > SMALL)
			for (uint32_t k = 0; k < w; k++)
				xs_fill(b->pool + (size_t)k * size, size, body_seed(size, k), 0);
		uint64_t t0 = xs_now_ns(), timed = 0;
		uint32_t win;
		for (win = 0;; win++) {
			if (win == p->warmup)
				t0 = xs_now_ns();
			for (uint32_t k = 0; k < w; k++) {
				uint8_t *m = b->pool + (size_t)k * size;
				stamp(m, size, win, k);
				if (b->mode == XS_TCP || b->mode == XS_DDP) {
					if (xs_write_full(b->fd, m, size, xs_timeout_ms) != 0) {
						xs_perr("write (size %u window %u message %u)", size, win, k);
						return -1;
					}
				} else if (b->mode == XS_EXT) {
					b->signaled_outstanding++;
					if (xs_post_send(&b->cq, k, m, size, DDP_SIGNALED) != 0) {
						xs_perr("ddp_post_send (size %u message %u)", size, k);
						return -1;
					}
				} else {
					int sig = (k == w - 1 || k % 16 == 15) ? DDP_SIGNALED : 0;
					if (sig)
						b->signaled_outstanding++;
					if (xs_post_write(&b->cq, k, m, size, b->rstag,
							  b->raddr + (uint64_t)k * size, sig) != 0) {
						xs_perr("ddp_post_write (size %u message %u)", size, k);
						return -1;
					}
				}
			}
			int last;
			if (win + 1 < p->warmup)
				last = 0;
			else if (p->duration_ns)
				last = win >= p->warmup && xs_now_ns() - t0 >= p->duration_ns;
			else
				last = win + 1 >= p->warmup + p->iters;
			if (b->mode == XS_TCP || b->mode == XS_DDP) {
				struct ctl t;
				ctl_enc(&t, win, last ? F_LAST : 0, 0, 0);
				if (xs_write_full(b->fd, &t, sizeof t, xs_timeout_ms) != 0) {
					xs_perr("write(trailer)");
					return -1;
				}
			} else {
				ctl_enc(&b->ctlbuf[0], win, last ? F_LAST : 0, 0, 0);
				b->signaled_outstanding++;
				if (xs_post_send(&b->cq, WR_TRAIL_SEND, &b->ctlbuf[0], sizeof(struct ctl),
						 DDP_SIGNALED) != 0) {
					xs_perr("ddp_post_send(trailer)");
					return -1;
				}
			}
			struct ctl a;
			if (b->mode == XS_TCP || b->mode == XS_DDP) {
				if (wait_ack(b, win, &a) != 0)
					return -1;
			} else {
				while (!b->ack_done[aj] || b->signaled_outstanding > 0)
					if (dispatch(b, "the window's completions and the ack") != 0)
						return -1;
				if (ctl_dec(b->ctlr[aj], b->ctlr_len[aj], &a, "ack") != 0)
					return -1;
				b->ack_done[aj] = 0;
				if (xs_post_recv(&b->cq, WR_ACK_RECV + (uint64_t)aj, b->ctlr[aj], 64) != 0 &&
				    !(last && errno == EPIPE)) {
					/* after the last window the receiver may close as soon as it has
					 * acked: a refused repost there is not an error (a real failure
					 * shows at the next size's first post) */
					xs_perr("ddp_post_recv(ack)");
					return -1;
				}
				aj ^= 1;
			}
			if (a.window != win || (a.flags & F_BAD)) {
				xs_msg("the receiver reports %s for window %u (size %u)",
				       a.flags & F_BAD ? "a content mismatch" : "a wrong window number",
				       win, size);
				return -1;
			}
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
	printf("%s: sender: all windows acknowledged, the receiver verified every message\n", xs_prog);
	return 0;
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int server = 0, verify_all = 0;
	const char *addr = NULL, *port = "18516", *sizes_s = "1K-1M";
	enum xs_mode mode = XS_TCP;
	uint64_t windows = 100, warmup = 2, window = 64, seconds = 0;
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.crc = xs_env_crc(o.crc);
	int op;
	while ((op = getopt(argc, argv, "sc:a:p:m:S:W:n:T:w:Vt:K:vh")) != -1) {
		switch (op) {
		case 's': server = 1; break;
		case 'c': server = 0; addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': xs_opt_u64("-p", optarg, 0, 65535, 0); port = optarg; break;
		case 'm': mode = xs_parse_mode(optarg, 1); break;
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
	xs_check_args(argc, argv, server, addr, port);
	struct xs_plan plan = { 0 };
	plan.nsizes = (uint32_t)xs_parse_sizes("-S", sizes_s, plan.sizes, XS_MAX_SIZES, 0, MAX_SIZE);
	if (mode != XS_TCP)
		xs_require_ddp();
	o.ddp = mode != XS_TCP;
	if (server && mode != XS_TCP)
		mode = XS_DDP; /* the client's plan says ddp/ext/write */

	struct bw *b = calloc(1, sizeof *b);
	if (!b)
		xs_pfatal("calloc");
	b->mode = mode;
	b->ctlr[0] = xs_alloc(64);
	b->ctlr[1] = xs_alloc(64);
	int rc;
	if (server) {
		int lfd = xs_listen(addr, port, &o, NULL);
		b->fd = xs_accept(lfd, xs_timeout_ms);
		close(lfd);
		if (xs_recv_plan(b->fd, &plan, PROG_ID) != 0)
			return XS_EXIT_FAIL;
		if ((mode == XS_TCP) != (plan.mode == XS_TCP)) {
			xs_msg("mode mismatch: server runs %s, client asks for %s", xs_mode_name(mode),
			       xs_mode_name(plan.mode));
			return XS_EXIT_FAIL;
		}
		b->mode = (enum xs_mode)plan.mode;
		b->verify_all = (plan.flags & XS_PLAN_VERIFY_ALL) != 0;
		if (plan.window < 1 || plan.window > MAX_WINDOW) {
			xs_msg("bad window %u in the client's plan", plan.window);
			return XS_EXIT_FAIL;
		}
		for (uint32_t i = 0; i < plan.nsizes; i++) {
			if (plan.sizes[i] > MAX_SIZE) {
				xs_msg("bad size %u in the client's plan", plan.sizes[i]);
				return XS_EXIT_FAIL;
			}
			size_t need = (size_t)eff_window(plan.window, plan.sizes[i]) * plan.sizes[i];
			if (need > b->pool_len)
				b->pool_len = need;
		}
		if (b->mode != XS_TCP)
			xs_print_conn_info(b->fd, "receiver");
		xs_cq_init(&b->cq, b->fd);
		b->pool = xs_alloc(b->pool_len);
		rc = receiver(b, &plan);
	} else {
		plan.magic = XS_PLAN_MAGIC;
		plan.prog = PROG_ID;
		plan.mode = mode;
		plan.iters = (uint32_t)windows;
		plan.warmup = (uint32_t)warmup;
		plan.window = (uint32_t)window;
		plan.duration_ns = seconds * 1000000000ull;
		plan.flags = verify_all ? XS_PLAN_VERIFY_ALL : 0;
		b->verify_all = verify_all;
		for (uint32_t i = 0; i < plan.nsizes; i++) {
			size_t need = (size_t)eff_window(plan.window, plan.sizes[i]) * plan.sizes[i];
			if (need > b->pool_len)
				b->pool_len = need;
			if (eff_window(plan.window, plan.sizes[i]) < plan.window)
				xs_msg("size %u: window reduced to %u (window x size <= 128 MiB)",
				       plan.sizes[i], eff_window(plan.window, plan.sizes[i]));
		}
		b->fd = xs_connect(addr, port, &o, xs_timeout_ms);
		if (mode != XS_TCP)
			xs_print_conn_info(b->fd, "sender");
		xs_cq_init(&b->cq, b->fd);
		b->pool = xs_alloc(b->pool_len);
		if (mode == XS_EXT || mode == XS_WRITE) {
			/* ack receives (the first one takes the ready message) before the plan */
			for (int j = 0; j < 2; j++)
				if (xs_post_recv(&b->cq, WR_ACK_RECV + (uint64_t)j, b->ctlr[j], 64) != 0)
					xs_pfatal("ddp_post_recv");
		}
		if (xs_send_plan(b->fd, &plan) != 0)
			return XS_EXIT_FAIL;
		rc = sender(b, &plan);
	}
	close(b->fd);
	return rc == 0 ? XS_EXIT_OK : XS_EXIT_FAIL;
}
