/*
 * pt-noalloc: the pass-through path must not allocate.
 *
 * This program defines malloc, calloc, realloc, free (and the aligned variants) itself,
 * forwarding to glibc's __libc_* versions and counting every call while `counting` is set.
 * Symbols of the executable come first in the dynamic lookup order, so libexsock.so's own
 * allocations (if any) are counted too. After setup, it makes every kind of socket call many
 * times with counting on and reports the count, which must be 0 with and without the preload.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static atomic_int counting;
static atomic_long allocations;

static void count(void)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
}

void *malloc(size_t n) { count(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { count(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count(); return __libc_realloc(p, n); }
void free(void *p) { if (p) count(); __libc_free(p); }
void *memalign(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
void *aligned_alloc(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
int posix_memalign(void **out, size_t al, size_t n)
{
    count();
    void *p = __libc_memalign(al, n);
    if (!p) return 12;
    *out = p;
    return 0;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) ||
        getsockname(l, (struct sockaddr *)&a, &alen)) { perror("listener"); return 1; }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
    int s = accept(l, NULL, NULL);
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = s }, out[4];
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
    char buf[256];
    memset(buf, 'x', sizeof buf);

    atomic_store(&counting, 1);
    for (long i = 0; i < rounds; i++) {
        struct iovec iov = { buf, 64 };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
        struct mmsghdr mm = { .msg_hdr = m };
        int v = 1;
        socklen_t vl = sizeof v;
        write(c, buf, 16);
        read(s, buf, 16);
        send(c, buf, 16, 0);
        recv(s, buf, 16, 0);
        sendto(c, buf, 16, 0, NULL, 0);
        recvfrom(s, buf, 16, 0, NULL, NULL);
        writev(c, &iov, 1);
        readv(s, &iov, 1);
        sendmsg(c, &m, 0);
        recvmsg(s, &m, 0);
        sendmmsg(c, &mm, 1, 0);
        recvmmsg(s, &mm, 1, 0, NULL);
        struct pollfd p = { .fd = s, .events = POLLIN };
        poll(&p, 1, 0);
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(s, &rs);
        struct timeval tv = { 0, 0 };
        select(s + 1, &rs, NULL, NULL, &tv);
        epoll_wait(ep, out, 4, 0);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v);
        getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &vl);
        fcntl(s, F_GETFL);
        ioctl(s, FIONREAD, &v);
        getsockname(s, (struct sockaddr *)&a, &alen);
        getpeername(s, (struct sockaddr *)&a, &alen);
        int d = dup(s);
        close(d);
        int t = socket(AF_INET, SOCK_STREAM, 0);
        close(t);
        read(-1, buf, 1);
        close(-1);
    }
    atomic_store(&counting, 0);

    printf("pt-noalloc: %ld rounds, %ld allocations\n", rounds, atomic_load(&allocations));
    return atomic_load(&allocations) == 0 ? 0 : 1;
}
