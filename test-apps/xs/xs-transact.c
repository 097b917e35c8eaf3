/*
 * xs-transact — a transaction test in the spirit of dapltest's T mode.
 *
 * The client opens N DDP connections and drives them from M threads (thread t owns
 * connections t, t+M, ...; it steps them round-robin, one transaction each). Every
 * transaction has two phases: the client runs 1..K random operations (Send, RDMA Write into
 * the server's write area, RDMA Read from the server's read area) and ends the phase with an
 * END Send; then the server checks everything that arrived and runs its own 1..K random
 * operations against the client, ending with an END Send that carries its verdict. Both sides
 * derive the same operations, sizes, offsets and contents from (-r SEED, connection,
 * transaction), so every byte that moves is verified by its receiver (Sends, Writes) or its
 * reader (Reads). Written areas are poisoned after each check. Any mismatch, error completion
 * or timeout ends the run with exit 1.
 */
#include "common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG_ID 'T'
#define MAX_CONNS 64
#define MAX_OPS 8
#define MIN_SIZE 64 /* receive buffers must hold a control message */
#define MAX_SIZE (1u << 20)

enum { OP_SEND, OP_WRITE, OP_READ };
static const char *op_name[] = { "Send", "Write", "Read" };

#define CTL_MAGIC 0x78735478u /* "xsTx" */
enum { T_INFO = 1, T_END = 2, T_BYE = 3 };
struct ctl {
	uint32_t magic, type, txn, phase, status, pad;
	uint32_t wr_stag, rd_stag;
	uint64_t wr_addr, rd_addr;
};

struct op {
	int type;
	uint32_t size, off;
	uint64_t seed;
};

struct conn {
	int fd, index, is_server;
	uint32_t S, K, txns;
	uint64_t seed;
	struct xs_cq cq;
	uint8_t *wr_area, *rd_area; /* K slots of S: peer writes here / peer reads from here */
	uint32_t wr_stag, rd_stag;
	uint8_t *src, *dst;         /* K slots of S: my sends and writes / my reads */
	uint8_t *pool;              /* K + 2 receive buffers of S */
	int npool;
	/* the peer */
	uint32_t p_wr_stag, p_rd_stag;
	uint64_t p_wr_addr, p_rd_addr;
	/* completion state */
	int outstanding;            /* my signaled work requests not completed */
	int rq_head, rq_count;      /* completed receives, in order */
	int rq_buf[64];
	uint32_t rq_len[64];
	struct ctl sctl;
	/* statistics */
	uint64_t n_ops[3], bytes_verified;
	const char *who;
};

static _Atomic int failed;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xs-transact -s [-a ADDR] [-p PORT] [options]\n"
		"       xs-transact -c ADDR [-p PORT] [-n CONNS] [-T THREADS] [-i TRANSACTIONS] [-r SEED] [-S MAXSIZE] [-k MAXOPS] [options]\n"
		"  -s              server (serves the N connections of one client, then exits)\n"
		"  -c ADDR         client, connect to ADDR\n"
		"  -a ADDR         server: address to listen on (default: any)\n"
		"  -p PORT         TCP port (default 18518; server: 0 = any free port, printed)\n"
		"  -n CONNS        connections (default 4, max %d)\n"
		"  -T THREADS      client threads (default 2; at most CONNS)\n"
		"  -i TRANSACTIONS transactions per connection (default 200)\n"
		"  -r SEED         seed of the random operation mix (default 1)\n"
		"  -S MAXSIZE      largest transfer, %u B to %u B (default 64K)\n"
		"  -k MAXOPS       operations per phase: 1..MAXOPS (default 4, max %d)\n"
		"  -t SECONDS      bound of every single wait (default 10)\n"
		"  -K 0|1          DDP_CRC (default: env XS_CRC, else the library default)\n"
		"  -v              verbose (-vv: every operation)\n"
		"  -h              this help\n"
		"exit: 0 all verified, 1 error/mismatch/timeout, 2 usage, 77 libexsock.so not loaded\n",
		MAX_CONNS, MIN_SIZE, MAX_SIZE, MAX_OPS);
}

/* ---- the operation mix --------------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* phase 0: the client initiates; phase 1: the server. Returns the number of ops. */
static int make_ops(const struct conn *c, uint32_t txn, int phase, struct op *ops)
{
	uint64_t st = xs_seed(c->seed, ((uint64_t)c->index << 32) | txn, (uint64_t)phase);
	int n = 1 + (int)(rnd(&st) % c->K);
	int log2s = 0;
	while ((1u << (log2s + 1)) <= c->S)
		log2s++;
	for (int i = 0; i < n; i++) {
		ops[i].type = (int)(rnd(&st) % 3);
		uint32_t lim = 1u << (rnd(&st) % (uint64_t)(log2s + 1)); /* log-uniform sizes */
		ops[i].size = 1 + (uint32_t)(rnd(&st) % lim);
		if (ops[i].size > c->S)
			ops[i].size = c->S;
		ops[i].off = (uint32_t)(rnd(&st) % (c->S - ops[i].size + 1));
		ops[i].seed = rnd(&st);
	}
	return n;
}

/* ---- completions ----------------------------------------------------------------------------- */

static int dispatch(struct conn *c, const char *what)
{
	struct ddp_wc wc;
	int r = xs_cq_next(&c->cq, &wc, xs_timeout_ms);
	if (r < 0) {
		xs_perr("%s conn %d: ddp_wait (waiting for %s)", c->who, c->index, what);
		return -1;
	}
	if (r == 0) {
		xs_msg("%s conn %d: timeout: no completion within %d ms (waiting for %s)", c->who,
		       c->index, xs_timeout_ms, what);
		return -1;
	}
	char d[160];
	xs_wc_describe(&wc, d, sizeof d);
	if (wc.status != DDP_WC_SUCCESS) {
		xs_msg("%s conn %d: error completion (waiting for %s): %s", c->who, c->index, what, d);
		return -1;
	}
	if (wc.opcode == DDP_WC_OP_RECV) {
		if (wc.wr_id >= (uint64_t)c->npool || c->rq_count >= 64) {
			xs_msg("%s conn %d: unexpected completion %s", c->who, c->index, d);
			return -1;
		}
		int at = (c->rq_head + c->rq_count++) % 64;
		c->rq_buf[at] = (int)wc.wr_id;
		c->rq_len[at] = wc.byte_len;
		return 0;
	}
	if (c->outstanding <= 0) {
		xs_msg("%s conn %d: unexpected completion %s", c->who, c->index, d);
		return -1;
	}
	c->outstanding--;
	return 0;
}

/* The next received message (in order): buffer index and length. */
static int next_recv(struct conn *c, int *buf, uint32_t *len, const char *what)
{
	while (c->rq_count == 0)
		if (dispatch(c, what) != 0)
			return -1;
	*buf = c->rq_buf[c->rq_head];
	*len = c->rq_len[c->rq_head];
	c->rq_head = (c->rq_head + 1) % 64;
	c->rq_count--;
	return 0;
}

static uint8_t *pool_buf(struct conn *c, int i) { return c->pool + (size_t)i * c->S; }

static int repost(struct conn *c, int i)
{
	if (xs_post_recv(&c->cq, (uint64_t)i, pool_buf(c, i), c->S) != 0) {
		xs_perr("%s conn %d: ddp_post_recv", c->who, c->index);
		return -1;
	}
	return 0;
}

static int drain(struct conn *c, const char *what)
{
	while (c->outstanding > 0)
		if (dispatch(c, what) != 0)
			return -1;
	return 0;
}

static int send_ctl(struct conn *c, uint32_t type, uint32_t txn, uint32_t phase, uint32_t status)
{
	if (drain(c, "earlier completions") != 0) /* sctl is reused */
		return -1;
	struct ctl *m = &c->sctl;
	memset(m, 0, sizeof *m);
	m->magic = htonl(CTL_MAGIC);
	m->type = htonl(type);
	m->txn = htonl(txn);
	m->phase = htonl(phase);
	m->status = htonl(status);
	m->wr_stag = htonl(c->wr_stag);
	m->rd_stag = htonl(c->rd_stag);
	m->wr_addr = htobe64((uint64_t)(uintptr_t)c->wr_area);
	m->rd_addr = htobe64((uint64_t)(uintptr_t)c->rd_area);
	c->outstanding++;
	if (xs_post_send(&c->cq, 1000, m, sizeof *m, DDP_SIGNALED) != 0) {
		xs_perr("%s conn %d: ddp_post_send(control)", c->who, c->index);
		return -1;
	}
	return 0;
}

static int recv_ctl(struct conn *c, struct ctl *out, uint32_t type, const char *what)
{
	int b;
	uint32_t len;
	if (next_recv(c, &b, &len, what) != 0)
		return -1;
	if (len != sizeof *out) {
		xs_msg("%s conn %d: %s: message of %u bytes, expected a %zu-byte control message",
		       c->who, c->index, what, len, sizeof *out);
		return -1;
	}
	memcpy(out, pool_buf(c, b), sizeof *out);
	out->magic = ntohl(out->magic);
	out->type = ntohl(out->type);
	out->txn = ntohl(out->txn);
	out->phase = ntohl(out->phase);
	out->status = ntohl(out->status);
	out->wr_stag = ntohl(out->wr_stag);
	out->rd_stag = ntohl(out->rd_stag);
	out->wr_addr = be64toh(out->wr_addr);
	out->rd_addr = be64toh(out->rd_addr);
	if (out->magic != CTL_MAGIC || out->type != type) {
		xs_msg("%s conn %d: %s: bad control message (type %u)", c->who, c->index, what,
		       out->type);
		return -1;
	}
	/* Nothing follows a goodbye: a receive posted after it races with the peer's close
	 * (a post on an ended connection says EPIPE). */
	return type == T_BYE ? 0 : repost(c, b);
}

/* ---- one phase ------------------------------------------------------------------------------ */

/* Before the peer's phase `phase` of txn: fill the read area slots the peer will Read. */
static void prepare_reads(struct conn *c, uint32_t txn, int phase)
{
	struct op ops[MAX_OPS];
	int n = make_ops(c, txn, phase, ops);
	for (int i = 0; i < n; i++)
		if (ops[i].type == OP_READ)
			xs_fill(c->rd_area + (size_t)i * c->S + ops[i].off, ops[i].size, ops[i].seed, 0);
}

static int check(struct conn *c, const uint8_t *p, const struct op *o, uint32_t txn, int phase,
		 int i, const char *what)
{
	size_t bad;
	if (xs_check(p, o->size, o->seed, 0, &bad)) {
		char w[160];
		snprintf(w, sizeof w, "%s conn %d txn %u phase %d op %d (%s of %u bytes, %s)", c->who,
			 c->index, txn, phase, i, op_name[o->type], o->size, what);
		xs_report_mismatch(w, p, o->size, o->seed, 0, bad);
		return -1;
	}
	c->bytes_verified += o->size;
	return 0;
}

static int initiate(struct conn *c, uint32_t txn, int phase, uint32_t status)
{
	struct op ops[MAX_OPS];
	int n = make_ops(c, txn, phase, ops);
	for (int i = 0; i < n; i++) {
		const struct op *o = &ops[i];
		uint8_t *src = c->src + (size_t)i * c->S, *dst = c->dst + (size_t)i * c->S;
		int r = 0;
		c->outstanding++;
		if (xs_verbose > 1)
			printf("%s: %s conn %d txn %u: %s %u bytes (offset %u)\n", xs_prog, c->who,
			       c->index, txn, op_name[o->type], o->size, o->off);
		switch (o->type) {
		case OP_SEND:
			xs_fill(src, o->size, o->seed, 0);
			r = xs_post_send(&c->cq, (uint64_t)i, src, o->size, DDP_SIGNALED);
			break;
		case OP_WRITE:
			xs_fill(src, o->size, o->seed, 0);
			r = xs_post_write(&c->cq, (uint64_t)i, src, o->size, c->p_wr_stag,
					  c->p_wr_addr + (uint64_t)i * c->S + o->off, DDP_SIGNALED);
			break;
		case OP_READ:
			memset(dst, 0, o->size);
			r = xs_post_read(&c->cq, (uint64_t)i, dst, o->size, c->p_rd_stag,
					 c->p_rd_addr + (uint64_t)i * c->S + o->off, DDP_SIGNALED);
			break;
		}
		if (r != 0) {
			xs_perr("%s conn %d txn %u: posting %s of %u bytes", c->who, c->index, txn,
				op_name[o->type], o->size);
			return -1;
		}
		c->n_ops[o->type]++;
	}
	if (drain(c, "the phase's completions") != 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (ops[i].type == OP_READ &&
		    check(c, c->dst + (size_t)i * c->S, &ops[i], txn, phase, i, "read") != 0)
			return -1;
	return send_ctl(c, T_END, txn, (uint32_t)phase, status);
}

/* The peer's phase: its Sends, its END, then its Writes. Returns 0 ok, -1 fatal. */
static int respond(struct conn *c, uint32_t txn, int phase, uint32_t *peer_status)
{
	struct op ops[MAX_OPS];
	int n = make_ops(c, txn, phase, ops);
	for (int i = 0; i < n; i++) {
		if (ops[i].type != OP_SEND)
			continue;
		int b;
		uint32_t len;
		if (next_recv(c, &b, &len, "the peer's Sends") != 0)
			return -1;
		if (len != ops[i].size) {
			xs_msg("%s conn %d txn %u: received %u bytes, expected a Send of %u", c->who,
			       c->index, txn, len, ops[i].size);
			return -1;
		}
		if (check(c, pool_buf(c, b), &ops[i], txn, phase, i, "received") != 0)
			return -1;
		memset(pool_buf(c, b), 0, len);
		if (repost(c, b) != 0)
			return -1;
	}
	struct ctl e;
	if (recv_ctl(c, &e, T_END, "the peer's END") != 0)
		return -1;
	if (e.txn != txn || e.phase != (uint32_t)phase) {
		xs_msg("%s conn %d: END of txn %u phase %u, expected txn %u phase %d", c->who, c->index,
		       e.txn, e.phase, txn, phase);
		return -1;
	}
	*peer_status = e.status;
	/* The Writes were placed before the END Send arrived (RDMAP ordering). */
	for (int i = 0; i < n; i++) {
		if (ops[i].type != OP_WRITE)
			continue;
		uint8_t *p = c->wr_area + (size_t)i * c->S + ops[i].off;
		if (check(c, p, &ops[i], txn, phase, i, "written into my region") != 0)
			return -1;
		memset(p, 0, ops[i].size);
	}
	return 0;
}

/* ---- connection setup ------------------------------------------------------------------------- */

static int setup(struct conn *c)
{
	size_t slots = (size_t)c->K * c->S;
	c->wr_area = xs_alloc(slots);
	c->rd_area = xs_alloc(slots);
	c->src = xs_alloc(slots);
	c->dst = xs_alloc(slots);
	c->npool = (int)c->K + 2;
	c->pool = xs_alloc((size_t)c->npool * c->S);
	xs_cq_init(&c->cq, c->fd);
	if (ddp_reg_mr(c->fd, c->wr_area, slots, DDP_ACCESS_LOCAL_WRITE | DDP_ACCESS_REMOTE_WRITE,
		       &c->wr_stag) != 0 ||
	    ddp_reg_mr(c->fd, c->rd_area, slots, DDP_ACCESS_REMOTE_READ, &c->rd_stag) != 0) {
		xs_perr("%s conn %d: ddp_reg_mr", c->who, c->index);
		return -1;
	}
	for (int i = 0; i < c->npool; i++)
		if (repost(c, i) != 0)
			return -1;
	return 0;
}

static int take_info(struct conn *c)
{
	struct ctl m;
	if (recv_ctl(c, &m, T_INFO, "the peer's region info") != 0)
		return -1;
	c->p_wr_stag = m.wr_stag;
	c->p_rd_stag = m.rd_stag;
	c->p_wr_addr = m.wr_addr;
	c->p_rd_addr = m.rd_addr;
	if (xs_verbose)
		printf("%s: %s conn %d: peer write area 0x%llx stag 0x%08x, read area 0x%llx stag "
		       "0x%08x\n",
		       xs_prog, c->who, c->index, (unsigned long long)m.wr_addr, m.wr_stag,
		       (unsigned long long)m.rd_addr, m.rd_stag);
	return 0;
}

static void teardown(struct conn *c)
{
	ddp_dereg_mr(c->fd, c->wr_stag);
	ddp_dereg_mr(c->fd, c->rd_stag);
	close(c->fd);
	free(c->wr_area);
	free(c->rd_area);
	free(c->src);
	free(c->dst);
	free(c->pool);
}

/* ---- server ----------------------------------------------------------------------------------- */

static void *server_conn(void *arg)
{
	struct conn *c = arg;
	int ok = 0;
	/* The plan came in on the stream; our receives go up now, then our region info. */
	if (setup(c) != 0)
		goto out;
	prepare_reads(c, 0, 0);
	if (send_ctl(c, T_INFO, 0, 0, 0) != 0 || take_info(c) != 0)
		goto out;
	for (uint32_t t = 0; t < c->txns && !atomic_load(&failed); t++) {
		uint32_t st;
		if (respond(c, t, 0, &st) != 0)
			goto out;
		/* my phase; the next transaction's read data is ready before my END goes out */
		if (t + 1 < c->txns)
			prepare_reads(c, t + 1, 0);
		if (initiate(c, t, 1, 1) != 0)
			goto out;
	}
	struct ctl bye;
	if (recv_ctl(c, &bye, T_BYE, "the client's goodbye") != 0 || send_ctl(c, T_BYE, 0, 0, 1) != 0 ||
	    drain(c, "the goodbye's completion") != 0)
		goto out;
	ok = 1;
out:
	if (!ok)
		atomic_store(&failed, 1);
	return NULL;
}

/* ---- client ----------------------------------------------------------------------------------- */

struct cthread {
	pthread_t tid;
	struct conn **conns;
	int n;
};

static void *client_thread(void *arg)
{
	struct cthread *th = arg;
	for (int i = 0; i < th->n; i++) {
		struct conn *c = th->conns[i];
		if (take_info(c) != 0 || (prepare_reads(c, 0, 1), send_ctl(c, T_INFO, 0, 0, 0)) != 0)
			goto fail;
	}
	for (uint32_t t = 0; t < th->conns[0]->txns; t++) {
		for (int i = 0; i < th->n; i++) {
			struct conn *c = th->conns[i];
			if (atomic_load(&failed))
				return NULL;
			if (initiate(c, t, 0, 1) != 0)
				goto fail;
			uint32_t st;
			if (respond(c, t, 1, &st) != 0)
				goto fail;
			if (t + 1 < c->txns)
				prepare_reads(c, t + 1, 1);
			if (xs_verbose && (t + 1) % 100 == 0)
				printf("%s: client conn %d: %u transactions done\n", xs_prog, c->index, t + 1);
		}
	}
	for (int i = 0; i < th->n; i++) {
		struct conn *c = th->conns[i];
		struct ctl bye;
		if (send_ctl(c, T_BYE, 0, 0, 1) != 0 || recv_ctl(c, &bye, T_BYE, "the server's goodbye") != 0 ||
		    drain(c, "the goodbye's completion") != 0)
			goto fail;
	}
	return NULL;
fail:
	atomic_store(&failed, 1);
	return NULL;
}

static void totals(struct conn **cs, int n, const char *who)
{
	uint64_t ops[3] = { 0 }, bytes = 0;
	for (int i = 0; i < n; i++) {
		for (int k = 0; k < 3; k++)
			ops[k] += cs[i]->n_ops[k];
		bytes += cs[i]->bytes_verified;
	}
	printf("%s: %s: %d connections, initiated %llu Sends, %llu Writes, %llu Reads; %llu bytes "
	       "verified%s\n",
	       xs_prog, who, n, (unsigned long long)ops[0], (unsigned long long)ops[1],
	       (unsigned long long)ops[2], (unsigned long long)bytes,
	       atomic_load(&failed) ? " (FAILED)" : "");
}

int main(int argc, char **argv)
{
	xs_init(argv[0]);
	int is_server = 0;
	const char *addr = NULL, *port = "18518";
	uint64_t nconns = 4, nthreads = 2, txns = 200, seed = 1, maxsize = 64 << 10, maxops = 4;
	struct xs_ddpopt o = XS_DDPOPT_INIT;
	o.crc = xs_env_crc(o.crc);
	int op;
	while ((op = getopt(argc, argv, "sc:a:p:n:T:i:r:S:k:t:K:vh")) != -1) {
		switch (op) {
		case 's': is_server = 1; break;
		case 'c': is_server = 0; addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': xs_opt_u64("-p", optarg, 0, 65535, 0); port = optarg; break;
		case 'n': nconns = xs_opt_u64("-n", optarg, 1, MAX_CONNS, 0); break;
		case 'T': nthreads = xs_opt_u64("-T", optarg, 1, MAX_CONNS, 0); break;
		case 'i': txns = xs_opt_u64("-i", optarg, 1, 100000000, 1); break;
		case 'r': seed = xs_opt_u64("-r", optarg, 0, UINT64_MAX, 0); break;
		case 'S': maxsize = xs_opt_u64("-S", optarg, MIN_SIZE, MAX_SIZE, 1); break;
		case 'k': maxops = xs_opt_u64("-k", optarg, 1, MAX_OPS, 0); break;
		case 't': xs_timeout_ms = (int)xs_opt_u64("-t", optarg, 1, 86400, 0) * 1000; break;
		case 'K': o.crc = (int)xs_opt_u64("-K", optarg, 0, 1, 0); break;
		case 'v': xs_verbose++; break;
		case 'h': usage(stdout); return XS_EXIT_OK;
		default: usage(stderr); return XS_EXIT_USAGE;
		}
	}
	xs_check_args(argc, argv, is_server, addr, port);
	if (nthreads > nconns)
		nthreads = nconns;
	xs_require_ddp();
	o.ddp = 1;

	struct conn *cs[MAX_CONNS];
	int n = 0;
	if (is_server) {
		int lfd = xs_listen(addr, port, &o, NULL);
		pthread_t tids[MAX_CONNS];
		uint32_t want = 1;
		while ((uint32_t)n < want) {
			struct conn *c = calloc(1, sizeof *c);
			if (!c)
				xs_pfatal("calloc");
			c->who = "server";
			c->is_server = 1;
			c->fd = xs_accept(lfd, xs_timeout_ms);
			struct xs_plan p;
			if (xs_recv_plan(c->fd, &p, PROG_ID) != 0)
				return XS_EXIT_FAIL;
			if (n == 0)
				want = p.nconns;
			if (p.nconns != want || want < 1 || want > MAX_CONNS || p.conn_index >= want ||
			    p.max_ops < 1 || p.max_ops > MAX_OPS || p.sizes[0] < MIN_SIZE ||
			    p.sizes[0] > MAX_SIZE || p.iters < 1) {
				xs_msg("bad test plan from the client");
				return XS_EXIT_FAIL;
			}
			c->index = (int)p.conn_index;
			c->S = p.sizes[0];
			c->K = p.max_ops;
			c->txns = p.iters;
			c->seed = p.seed;
			if (n == 0) {
				xs_print_conn_info(c->fd, "server");
				printf("%s: server: %u connections, %u transactions each, seed %llu, max "
				       "size %u, max %u ops per phase\n",
				       xs_prog, want, c->txns, (unsigned long long)c->seed, c->S, c->K);
			}
			cs[n] = c;
			if (pthread_create(&tids[n], NULL, server_conn, c) != 0)
				xs_fatal("pthread_create failed");
			n++;
		}
		close(lfd);
		for (int i = 0; i < n; i++)
			pthread_join(tids[i], NULL);
		totals(cs, n, "server");
	} else {
		for (n = 0; n < (int)nconns; n++) {
			struct conn *c = calloc(1, sizeof *c);
			if (!c)
				xs_pfatal("calloc");
			c->who = "client";
			c->index = n;
			c->S = (uint32_t)maxsize;
			c->K = (uint32_t)maxops;
			c->txns = (uint32_t)txns;
			c->seed = seed;
			c->fd = xs_connect(addr, port, &o, xs_timeout_ms);
			if (n == 0)
				xs_print_conn_info(c->fd, "client");
			if (setup(c) != 0)
				return XS_EXIT_FAIL;
			struct xs_plan p = { .magic = XS_PLAN_MAGIC, .prog = PROG_ID, .mode = XS_EXT,
					     .nsizes = 1, .iters = (uint32_t)txns,
					     .conn_index = (uint32_t)n, .nconns = (uint32_t)nconns,
					     .seed = seed, .max_ops = (uint32_t)maxops };
			p.sizes[0] = (uint32_t)maxsize;
			if (xs_send_plan(c->fd, &p) != 0)
				return XS_EXIT_FAIL;
			cs[n] = c;
		}
		printf("%s: client: %d connections, %llu threads, %llu transactions each, seed %llu\n",
		       xs_prog, n, (unsigned long long)nthreads, (unsigned long long)txns,
		       (unsigned long long)seed);
		struct cthread th[MAX_CONNS];
		for (int t = 0; t < (int)nthreads; t++) {
			th[t].conns = calloc((size_t)n, sizeof(struct conn *));
			th[t].n = 0;
			for (int i = t; i < n; i += (int)nthreads)
				th[t].conns[th[t].n++] = cs[i];
			if (pthread_create(&th[t].tid, NULL, client_thread, &th[t]) != 0)
				xs_fatal("pthread_create failed");
		}
		for (int t = 0; t < (int)nthreads; t++)
			pthread_join(th[t].tid, NULL);
		totals(cs, n, "client");
	}
	for (int i = 0; i < n; i++)
		teardown(cs[i]);
	return atomic_load(&failed) ? XS_EXIT_FAIL : XS_EXIT_OK;
}
