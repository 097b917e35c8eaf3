#!/usr/bin/env bash
# ddp-abi: sockopt_ext.h and libexsock.so agree.
#  1. `make -C sockopt-ext-h check` without the library: header self-checks, the presence probe
#     says "not loaded" (ddp_available() = 0), C++ and pedantic C99 compile, install +
#     pkg-config.
#  2. The same ABI program with libexsock.so preloaded: ddp_available() = 1, ddp_version(),
#     getsockopt(SOL_DDP, DDP_MODE) = 0 on a new TCP socket, and ddp_abi_describe() (computed
#     from the Rust definitions) equal to the header's table line for line.
#     (Not `make check` itself under LD_PRELOAD: its install step runs a program whose exit
#     status is ddp_available(), which is 1 with the library — see the report.)
#  3. A battery of the documented errno values of SOL_DDP options and ddp_* functions, and of
#     socket behaviour on DDP fds (names, SOL_SOCKET options, switch in place, non-blocking
#     connect, dup/close, sendfile, EPIPE after the peer left), written in C against the header.
# timeout: 120
. "$(dirname "$0")/../lib/common.sh"

need_cmd gcc
need_cmd g++
need_cmd make
need_cmd pkg-config

say "building libexsock.so"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
lib=$CARGO_TARGET_DIR/release/libexsock.so
out=$CARGO_TARGET_DIR/sockopt-ext-h
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }

# 1. without the library
make -s -C "$EXSOCK_ROOT/sockopt-ext-h" OUT="$out" check > "$tmp/check.out" 2>&1 \
  || { cat "$tmp/check.out"; fail "make -C sockopt-ext-h check (without the library)"; }
grep -q 'is not loaded' "$tmp/check.out" || { cat "$tmp/check.out"; fail "probe without the library"; }
grep -q 'entries, ok' "$tmp/check.out" || fail "abi self-check"
say "make check without the library: ok"

# 2. with the library
LD_PRELOAD=$lib "$out/abi" -q 2> "$tmp/abi.err" || { cat "$tmp/abi.err"; fail "abi with the library"; }
cat "$tmp/abi.err" >&2
grep -q 'libexsock.so is loaded, DDP API version 1' "$tmp/abi.err" || fail "ddp_available() with the library"
n=$(sed -n 's/^abi: compared \([0-9]*\) lines of ddp_abi_describe.*/\1/p' "$tmp/abi.err")
if [ -z "$n" ] || [ "$n" -ne "$(wc -l < "$out/abi.txt")" ]; then fail "ddp_abi_describe() not compared in full ($n lines)"; fi
say "ddp_abi_describe(): $n lines equal to the header's"

# 3. the errno / behaviour battery
cat > "$tmp/battery.c" <<'EOF'
#define _GNU_SOURCE
#include "sockopt_ext.h"
#include <arpa/inet.h>
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
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

static int fails, checks;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { fails++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); } } while (0)
#define ERR(call, e) do { errno = 0; int r_ = (call); CHECK(r_ == -1 && errno == (e), "%s: expected %s, got %d", #call, #e, r_); } while (0)
#define OK(call) do { errno = 0; int r_ = (call); CHECK(r_ >= 0, "%s = %d", #call, r_); } while (0)

static int seti(int fd, int opt, int v) { return setsockopt(fd, SOL_DDP, opt, &v, sizeof v); }
static int geti(int fd, int opt) { int v = -12345; socklen_t l = sizeof v; return getsockopt(fd, SOL_DDP, opt, &v, &l) ? -12345 : v; }
static int tcp(void) { return socket(AF_INET, SOCK_STREAM, 0); }

static struct sockaddr_in lsa;
static int listener(int ddp)
{
	int l = tcp(), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (ddp)
		seti(l, DDP_MODE, 1);
	memset(&lsa, 0, sizeof lsa);
	lsa.sin_family = AF_INET;
	lsa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (struct sockaddr *)&lsa, sizeof lsa) || listen(l, 8)) { perror("listen"); exit(1); }
	socklen_t sl = sizeof lsa;
	getsockname(l, (struct sockaddr *)&lsa, &sl);
	return l;
}

struct acc { int l, fd, switch_after; };
static void *acceptor(void *p)
{
	struct acc *a = p;
	a->fd = accept(a->l, NULL, NULL);
	if (a->switch_after && a->fd >= 0 && seti(a->fd, DDP_MODE, 1) != 0)
		a->fd = -2;
	return NULL;
}

static void read_exact(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r <= 0) { CHECK(0, "read_exact got %zd after %zu of %zu", r, got, n); return; }
		got += (size_t)r;
	}
}

/* A connected DDP pair: *c (client, initiator), *s (server). switch_in_place: both connect
 * as plain TCP and switch with DDP_MODE afterwards. */
static void ddp_pair(int *c, int *s, int switch_in_place, const char *pdata)
{
	int l = listener(!switch_in_place);
	struct acc a = { l, -1, switch_in_place };
	pthread_t t;
	pthread_create(&t, NULL, acceptor, &a);
	int fd = tcp();
	if (!switch_in_place)
		seti(fd, DDP_MODE, 1);
	if (pdata)
		setsockopt(fd, SOL_DDP, DDP_PRIVATE_DATA, pdata, strlen(pdata));
	OK(connect(fd, (struct sockaddr *)&lsa, sizeof lsa));
	if (switch_in_place)
		OK(seti(fd, DDP_MODE, 1));
	pthread_join(t, NULL);
	CHECK(a.fd >= 0, "accept/switch on the server side: %d", a.fd);
	close(l);
	*c = fd;
	*s = a.fd;
}

int main(void)
{
	if (!ddp_available()) { fprintf(stderr, "library not loaded\n"); return 77; }
	signal(SIGPIPE, SIG_IGN);
	int fd = tcp(), udp = socket(AF_INET, SOCK_DGRAM, 0), un = socket(AF_UNIX, SOCK_STREAM, 0);
	int file = open("/dev/null", O_RDONLY), v = 1;
	socklen_t len = sizeof v;

	/* level checks: fd kinds */
	ERR(seti(udp, DDP_MODE, 1), EOPNOTSUPP);
	ERR(seti(un, DDP_MODE, 1), EOPNOTSUPP);
	ERR(seti(file, DDP_MODE, 1), ENOTSOCK);
	ERR(seti(9999, DDP_MODE, 1), EBADF);
	ERR(getsockopt(udp, SOL_DDP, DDP_MODE, &v, &len), EOPNOTSUPP);
	/* defaults */
	CHECK(geti(fd, DDP_MODE) == 0, "DDP_MODE default");
	CHECK(geti(fd, DDP_CRC) == 1 && geti(fd, DDP_MARKERS) == 0 && geti(fd, DDP_MPA_REV) == 2, "crc/markers/rev defaults");
	CHECK(geti(fd, DDP_IRD) == 16 && geti(fd, DDP_ORD) == 16 && geti(fd, DDP_P2P) == 0, "ird/ord/p2p defaults");
	CHECK(geti(fd, DDP_PD) == 0 && geti(fd, DDP_ZERO_BASED_TO) == 0 && geti(fd, DDP_MPA_TIMEOUT_MS) == 10000, "pd/zbto/timeout defaults");
	CHECK(geti(fd, DDP_MARKERS_ALLOW) == 1, "markers-allow default");
	/* validation */
	ERR(seti(fd, DDP_CRC, 2), EINVAL);
	ERR(seti(fd, DDP_MODE, -1), EINVAL);
	ERR(seti(fd, DDP_MPA_REV, 3), EINVAL);
	ERR(seti(fd, DDP_IRD, 16384), EINVAL);
	ERR(seti(fd, DDP_ORD, -1), EINVAL);
	ERR(seti(fd, DDP_P2P, 8), EINVAL);
	ERR(seti(fd, DDP_PD, -5), EINVAL);
	ERR(seti(fd, DDP_MPA_TIMEOUT_MS, 0), EINVAL);
	ERR(seti(fd, DDP_MARKERS_ALLOW, 2), EINVAL);
	short sh = 1;
	ERR(setsockopt(fd, SOL_DDP, DDP_CRC, &sh, sizeof sh), EINVAL);
	ERR(setsockopt(fd, SOL_DDP, DDP_CRC, NULL, sizeof v), EFAULT);
	char big[513] = { 0 };
	ERR(setsockopt(fd, SOL_DDP, DDP_PRIVATE_DATA, big, sizeof big), EINVAL);
	OK(setsockopt(fd, SOL_DDP, DDP_PRIVATE_DATA, big, 512));
	ERR(seti(fd, DDP_CONN_INFO, 1), ENOPROTOOPT);
	ERR(seti(fd, DDP_PEER_PRIVATE_DATA, 1), ENOPROTOOPT);
	ERR(seti(fd, 99, 1), ENOPROTOOPT);
	ERR(getsockopt(fd, SOL_DDP, 99, &v, &len), ENOPROTOOPT);
	CHECK(geti(fd, DDP_CRC) == 1, "a refused value changes nothing");
	OK(seti(fd, DDP_IRD, 5));
	CHECK(geti(fd, DDP_IRD) == 5, "IRD kept");
	struct ddp_conn_info ci;
	len = sizeof ci;
	ERR(getsockopt(fd, SOL_DDP, DDP_CONN_INFO, &ci, &len), EOPNOTSUPP);
	OK(seti(fd, DDP_MODE, 1));
	CHECK(geti(fd, DDP_MODE) == 1, "DDP_MODE set");
	len = sizeof ci;
	ERR(getsockopt(fd, SOL_DDP, DDP_CONN_INFO, &ci, &len), ENOTCONN);
	/* ddp_* on fds that are not (connected) DDP sockets */
	uint32_t stag;
	char mem[64];
	struct ddp_wc wc[4];
	ERR(ddp_reg_mr(9999, mem, sizeof mem, 0, &stag), EBADF);
	ERR(ddp_reg_mr(file, mem, sizeof mem, 0, &stag), ENOTSOCK);
	ERR(ddp_reg_mr(udp, mem, sizeof mem, 0, &stag), EOPNOTSUPP);
	ERR(ddp_poll(un, wc, 4), EOPNOTSUPP);
	ERR(ddp_poll(fd, wc, 4), ENOTCONN);
	ERR(ddp_event_fd(-1), EBADF);

	/* a connected pair */
	int c, s;
	ddp_pair(&c, &s, 0, "hello");
	len = sizeof ci;
	OK(getsockopt(c, SOL_DDP, DDP_CONN_INFO, &ci, &len));
	CHECK(len == sizeof ci && ci.state == DDP_STATE_RTS && ci.initiator == 1 && ci.mpa_rev == 2 && ci.crc == 1, "client conn info");
	len = sizeof ci;
	OK(getsockopt(s, SOL_DDP, DDP_CONN_INFO, &ci, &len));
	CHECK(ci.state == DDP_STATE_RTS && ci.initiator == 0, "server conn info");
	char pd[64] = { 0 };
	len = sizeof pd;
	OK(getsockopt(s, SOL_DDP, DDP_PEER_PRIVATE_DATA, pd, &len));
	CHECK(len == 5 && !memcmp(pd, "hello", 5), "peer private data (%u bytes)", len);
	ERR(seti(c, DDP_CRC, 0), EISCONN);
	ERR(seti(c, DDP_MODE, 0), EISCONN);
	OK(seti(c, DDP_MODE, 1));
	CHECK(geti(c, DDP_MODE) == 1, "DDP_MODE on a DDP socket");
	/* socket-level calls go to the TCP socket */
	int ty = 0, dom = 0, pro = 0, err = -1, nd = 0;
	len = sizeof ty; OK(getsockopt(c, SOL_SOCKET, SO_TYPE, &ty, &len));
	len = sizeof dom; OK(getsockopt(c, SOL_SOCKET, SO_DOMAIN, &dom, &len));
	len = sizeof pro; OK(getsockopt(c, SOL_SOCKET, SO_PROTOCOL, &pro, &len));
	len = sizeof err; OK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len));
	CHECK(ty == SOCK_STREAM && dom == AF_INET && pro == IPPROTO_TCP && err == 0, "SO_TYPE/DOMAIN/PROTOCOL/ERROR %d %d %d %d", ty, dom, pro, err);
	OK(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v));
	len = sizeof nd; OK(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &nd, &len));
	CHECK(nd == 1, "TCP_NODELAY");
	struct sockaddr_in a1, a2;
	socklen_t l1 = sizeof a1, l2 = sizeof a2;
	OK(getsockname(c, (struct sockaddr *)&a1, &l1));
	OK(getpeername(s, (struct sockaddr *)&a2, &l2));
	CHECK(a1.sin_port == a2.sin_port && a1.sin_family == AF_INET, "names");
	/* argument checks */
	ERR(ddp_reg_mr(c, mem, 0, DDP_ACCESS_REMOTE_WRITE, &stag), EINVAL);
	ERR(ddp_reg_mr(c, mem, sizeof mem, 8, &stag), EINVAL);
	ERR(ddp_reg_mr(c, mem, sizeof mem, 1, NULL), EINVAL);
	OK(ddp_reg_mr(c, mem, sizeof mem, DDP_ACCESS_REMOTE_WRITE | DDP_ACCESS_LOCAL_WRITE, &stag));
	ERR(ddp_dereg_mr(c, stag ^ 0x100), EINVAL);
	ERR(ddp_dereg_mr(s, stag), EINVAL); /* another PD */
	OK(ddp_dereg_mr(c, stag));
	ERR(ddp_dereg_mr(c, stag), EINVAL);
	struct iovec iov = { mem, 8 };
	ERR(ddp_post_send(c, 1, &iov, 17, DDP_SIGNALED), EINVAL);
	ERR(ddp_post_send(c, 1, &iov, -1, DDP_SIGNALED), EINVAL);
	ERR(ddp_post_send(c, 1, &iov, 1, 0x10), EINVAL);
	ERR(ddp_post_write(c, 1, &iov, 1, 0, 0, DDP_SOLICITED), EINVAL);
	ERR(ddp_poll(c, wc, -1), EINVAL);
	CHECK(ddp_poll(c, wc, 0) == 0 && ddp_poll(c, wc, 4) == 0, "empty CQ");
	CHECK(ddp_wait(c, wc, 4, 10) == 0, "ddp_wait times out with 0");
	CHECK(ddp_event_fd(c) >= 0, "event fd");
	/* stream data both ways, readv/writev, send/recv flags, FIONREAD natively */
	OK(write(c, "ping", 4));
	char buf[64] = { 0 };
	read_exact(s, buf, 4);
	CHECK(!memcmp(buf, "ping", 4), "stream data");
	ERR(recv(s, buf, sizeof buf, MSG_DONTWAIT), EAGAIN);
	ERR(recv(s, buf, sizeof buf, MSG_OOB), EINVAL);
	struct iovec wv[2] = { { "ab", 2 }, { "cd", 2 } };
	OK(writev(s, wv, 2));
	CHECK(recv(c, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "abcd", 4), "writev/MSG_WAITALL");
	/* sendfile into a DDP socket; a DDP in_fd is EINVAL */
	char path[] = "/tmp/ddp-abi-XXXXXX";
	int tf = mkstemp(path);
	unlink(path);
	CHECK(write(tf, "0123456789", 10) == 10, "temp file");
	off_t off = 2;
	CHECK(sendfile(c, tf, &off, 5) == 5 && off == 7, "sendfile with offset");
	memset(buf, 0, sizeof buf);
	read_exact(s, buf, 5);
	CHECK(!memcmp(buf, "23456", 5), "sendfile data '%s'", buf);
	ERR(sendfile(tf, s, NULL, 5), EINVAL);
	close(tf);
	/* dup: the connection lives while an fd refers to it */
	int d = dup(c);
	OK(close(c));
	OK(write(d, "dup", 3));
	read_exact(s, buf, 3);
	CHECK(!memcmp(buf, "dup", 3), "write through a dup");
	int d2 = fcntl(d, F_DUPFD_CLOEXEC, 100);
	CHECK(d2 >= 100, "F_DUPFD_CLOEXEC");
	OK(close(d));
	len = sizeof ci;
	OK(getsockopt(d2, SOL_DDP, DDP_CONN_INFO, &ci, &len));
	/* the peer posts a receive, we close: its receive is flushed, then EPIPE */
	iov.iov_base = mem; iov.iov_len = sizeof mem;
	OK(ddp_post_recv(s, 7, &iov, 1));
	OK(close(d2));
	int n = ddp_wait(s, wc, 4, 5000);
	CHECK(n == 1 && wc[0].wr_id == 7 && wc[0].status == DDP_WC_FLUSH_ERR, "flushed receive (n %d status %u)", n, n > 0 ? wc[0].status : 99);
	ERR(ddp_wait(s, wc, 4, 5000), EPIPE);
	ERR(ddp_poll(s, wc, 4), EPIPE);
	ERR(ddp_post_recv(s, 8, &iov, 1), EPIPE);
	close(s);

	/* switch in place: plain TCP first, then DDP_MODE on both (roles from connect/accept) */
	ddp_pair(&c, &s, 1, NULL);
	len = sizeof ci;
	OK(getsockopt(c, SOL_DDP, DDP_CONN_INFO, &ci, &len));
	CHECK(ci.initiator == 1 && ci.state == DDP_STATE_RTS, "switched client is the initiator");
	len = sizeof ci;
	OK(getsockopt(s, SOL_DDP, DDP_CONN_INFO, &ci, &len));
	CHECK(ci.initiator == 0 && ci.state == DDP_STATE_RTS, "switched server is the responder");
	OK(send(c, "sw", 2, 0));
	read_exact(s, buf, 2);
	CHECK(!memcmp(buf, "sw", 2), "data after the switch");
	OK(shutdown(c, SHUT_WR));
	CHECK(read(s, buf, sizeof buf) == 0, "EOF after shutdown(SHUT_WR)");
	ERR(send(c, "x", 1, MSG_NOSIGNAL), EPIPE);
	close(c);
	close(s);

	/* non-blocking connect: EINPROGRESS, writable, writes queued until MPA completes */
	int l = listener(1);
	struct acc a = { l, -1, 0 };
	pthread_t t;
	pthread_create(&t, NULL, acceptor, &a);
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	OK(seti(c, DDP_MODE, 1));
	int r = connect(c, (struct sockaddr *)&lsa, sizeof lsa);
	CHECK(r == 0 || errno == EINPROGRESS, "non-blocking connect: %d", r);
	struct pollfd p = { c, POLLOUT, 0 };
	CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT), "writable");
	CHECK(write(c, "nb", 2) == 2, "queued write");
	pthread_join(t, NULL);
	read_exact(a.fd, buf, 2);
	CHECK(!memcmp(buf, "nb", 2), "data of a non-blocking connect");
	ERR(connect(c, (struct sockaddr *)&lsa, sizeof lsa), EISCONN);
	close(c);
	CHECK(read(a.fd, buf, sizeof buf) == 0, "EOF after the peer's close");
	close(a.fd);
	close(l);

	fprintf(stderr, "battery: %d checks, %d failed\n", checks, fails);
	return fails ? 1 : 0;
}
EOF
gcc -std=c11 -O1 -g -Wall -Wextra -Werror -pthread -I"$EXSOCK_ROOT/sockopt-ext-h" -o "$tmp/battery" "$tmp/battery.c" \
  || fail "battery does not compile"
LD_PRELOAD=$lib timeout 60 "$tmp/battery" || fail "errno/behaviour battery"
echo "PASS: ddp-abi ($n ABI lines, battery passed)"
