/*
 * errno-parity: a battery of invalid (and a few valid) socket calls. Each line prints the
 * call's return value and errno; errno is set to a sentinel (4242) before every call, so a
 * call that succeeds shows whether anything touched errno. The test runs this without and
 * with libexsock.so preloaded and requires identical output.
 *
 * Built with -D_FORTIFY_SOURCE=2 so that read/recv/recvfrom/poll/ppoll on known-size buffers
 * go through glibc's __read_chk, __recv_chk, __recvfrom_chk, __poll_chk and __ppoll_chk.
 * Everything printed must be deterministic: fd numbers are, ports and addresses are not
 * printed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define SENTINEL 4242

static int cases;

#define T(name, expr)                                                            \
    do {                                                                         \
        errno = SENTINEL;                                                        \
        long rc_ = (long)(expr);                                                 \
        int e_ = errno;                                                          \
        printf("%-44s rc=%-6ld errno=%d (%s)\n", name, rc_, e_,                  \
               e_ == SENTINEL ? "untouched" : strerrorname_np(e_));              \
        cases++;                                                                 \
    } while (0)

/* Pointers the compiler cannot see through, so no call is rejected at compile time and the
   deliberately wrong ones reach the library at run time. */
static void *volatile launder_slot;
static void *launder(void *p) { launder_slot = p; return launder_slot; }
#define NUL launder(0)

/* A value the compiler cannot see through, so fortified calls keep their runtime length. */
static volatile size_t sixteen = 16;
static volatile int minus_one = -1;

static int tcp_socket(void) { return socket(AF_INET, SOCK_STREAM, 0); }

static struct sockaddr_in loopback(unsigned short port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    char buf[16];
    struct sockaddr_in a;
    socklen_t alen;
    int v;
    socklen_t vlen;

    /* fds: a closed number, a pipe (not a socket), a regular file, sockets */
    int closed = 999; /* never opened (a freshly closed number would be reused below) */
    int pfd[2];
    if (pipe(pfd) != 0) return 1;
    int devnull = open("/dev/null", O_RDWR);

    /* a listener with one connected pair */
    int lst = tcp_socket();
    a = loopback(0);
    T("bind listener", bind(lst, (struct sockaddr *)&a, sizeof a));
    alen = sizeof a;
    T("getsockname listener", getsockname(lst, (struct sockaddr *)&a, &alen));
    unsigned short port = ntohs(a.sin_port);
    T("listen", listen(lst, 8));
    int cli = tcp_socket();
    a = loopback(port);
    T("connect ok", connect(cli, (struct sockaddr *)&a, sizeof a));
    int srv;
    T("accept ok", (srv = accept(lst, NULL, NULL)));

    /* a port nobody listens on */
    int tmp = tcp_socket();
    a = loopback(0);
    bind(tmp, (struct sockaddr *)&a, sizeof a);
    alen = sizeof a;
    getsockname(tmp, (struct sockaddr *)&a, &alen);
    unsigned short dead_port = ntohs(a.sin_port);
    close(tmp);

    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    int fresh = tcp_socket();

    /* socket / socketpair */
    T("socket bad domain", socket(9999, SOCK_STREAM, 0));
    T("socket bad type", socket(AF_INET, 9999, 0));
    T("socket bad protocol", socket(AF_INET, SOCK_STREAM, IPPROTO_UDP));
    T("socket bad flags", socket(AF_INET, SOCK_STREAM | 0x40000000, 0));
    int sv[2];
    T("socketpair AF_INET", socketpair(AF_INET, SOCK_STREAM, 0, sv));
    T("socketpair NULL sv", socketpair(AF_UNIX, SOCK_STREAM, 0, NUL));

    /* bind / listen / accept / connect / shutdown */
    a = loopback(port);
    T("bind in-use port", bind(fresh, (struct sockaddr *)&a, sizeof a));
    T("bind short len", bind(fresh, (struct sockaddr *)&a, 3));
    T("bind NULL addr", bind(fresh, NUL, sizeof a));
    T("bind bad fd", bind(-1, (struct sockaddr *)&a, sizeof a));
    T("bind closed fd", bind(closed, (struct sockaddr *)&a, sizeof a));
    T("bind not socket", bind(pfd[0], (struct sockaddr *)&a, sizeof a));
    T("bind already bound", bind(lst, (struct sockaddr *)&a, sizeof a));
    T("listen udp", listen(udp, 1));
    T("listen bad fd", listen(-7, 1));
    T("listen not socket", listen(pfd[0], 1));
    T("accept not listening", accept(fresh, NULL, NULL));
    T("accept bad fd", accept(closed, NULL, NULL));
    T("accept not socket", accept(devnull, NULL, NULL));
    T("accept4 bad flags", accept4(lst, NULL, NULL, 0x1234));
    fcntl(lst, F_SETFL, O_NONBLOCK);
    T("accept nonblock empty", accept(lst, NULL, NULL));
    alen = 1;
    T("accept4 nonblock empty", accept4(lst, (struct sockaddr *)&a, &alen, SOCK_CLOEXEC));
    a = loopback(dead_port);
    T("connect refused", connect(fresh, (struct sockaddr *)&a, sizeof a));
    int fresh2 = tcp_socket();
    T("connect short len", connect(fresh2, (struct sockaddr *)&a, 4));
    T("connect NULL addr", connect(fresh2, NUL, sizeof a));
    T("connect bad fd", connect(-1, (struct sockaddr *)&a, sizeof a));
    T("connect not socket", connect(pfd[1], (struct sockaddr *)&a, sizeof a));
    a = loopback(port);
    T("connect already connected", connect(cli, (struct sockaddr *)&a, sizeof a));
    T("shutdown bad how", shutdown(cli, 99));
    T("shutdown not connected", shutdown(fresh2, SHUT_RDWR));
    T("shutdown bad fd", shutdown(closed, SHUT_RD));
    T("shutdown not socket", shutdown(pfd[0], SHUT_RD));

    /* read / write family */
    size_t n = sixteen;
    T("read bad fd", read(-1, buf, n));
    T("read closed fd", read(closed, buf, n));
    fcntl(srv, F_SETFL, O_NONBLOCK);
    T("read nonblock empty", read(srv, buf, n));
    T("recv nonblock empty", recv(srv, buf, n, 0));
    T("recv MSG_DONTWAIT empty", recv(cli, buf, n, MSG_DONTWAIT));
    T("recv not socket", recv(pfd[0], buf, n, MSG_DONTWAIT));
    T("recv bad flags", recv(srv, buf, n, 0x7fff0000));
    alen = 1;
    T("recvfrom bad fd", recvfrom(closed, buf, n, 0, (struct sockaddr *)&a, &alen));
    T("recvfrom NULL len", recvfrom(srv, buf, n, MSG_DONTWAIT, (struct sockaddr *)&a, NUL));
    T("write bad fd", write(-1, buf, n));
    T("write closed fd", write(closed, "x", 1));
    T("write NULL buf", write(cli, NUL, 16));
    T("write unconnected", write(fresh2, "x", 1));
    T("send unconnected", send(fresh2, "x", 1, MSG_NOSIGNAL));
    T("send not socket", send(pfd[1], "x", 1, 0));
    T("send ok", send(cli, "hello", 5, 0));
    T("read NULL buf", read(srv, NUL, 16));
    T("read ok", read(srv, buf, n));
    T("write ok", write(cli, "abc", 3));
    T("recv ok", recv(srv, buf, n, 0));
    T("sendto ok", sendto(cli, "abcd", 4, 0, NULL, 0));
    alen = sizeof a;
    T("recvfrom ok", recvfrom(srv, buf, n, 0, (struct sockaddr *)&a, &alen));
    a = loopback(port);
    T("sendto udp short addr", sendto(udp, "x", 1, 0, (struct sockaddr *)&a, 3));
    T("sendto udp no addr", sendto(udp, "x", 1, 0, NULL, 0));
    struct iovec iov[2] = { { buf, 4 }, { buf + 4, 4 } };
    T("readv bad count", readv(srv, launder(iov), minus_one));
    T("readv huge count", readv(srv, launder(iov), 100000));
    T("readv bad fd", readv(closed, iov, 2));
    T("writev bad count", writev(cli, launder(iov), minus_one));
    T("writev NULL iov", writev(cli, NUL, 2));
    T("writev ok", writev(cli, iov, 2));
    T("readv ok", readv(srv, iov, 2));
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
    T("sendmsg NULL msg", sendmsg(cli, NUL, 0));
    T("sendmsg ok", sendmsg(cli, &msg, 0));
    T("recvmsg ok", recvmsg(srv, &msg, 0));
    T("recvmsg NULL msg", recvmsg(srv, NUL, 0));
    T("recvmsg empty", recvmsg(srv, &msg, MSG_DONTWAIT));
    T("recvmsg bad fd", recvmsg(-3, &msg, 0));
    struct mmsghdr mm[1] = { { .msg_hdr = msg } };
    T("sendmmsg bad fd", sendmmsg(closed, mm, 1, 0));
    T("sendmmsg ok", sendmmsg(cli, mm, 1, 0));
    T("recvmmsg ok", recvmmsg(srv, mm, 1, 0, NULL));
    T("recvmmsg empty", recvmmsg(srv, mm, 1, MSG_DONTWAIT, NULL));
    T("recvmmsg not socket", recvmmsg(pfd[0], mm, 1, 0, NULL));
    off_t off = 0;
    T("sendfile bad out", sendfile(closed, devnull, &off, 10));
    T("sendfile bad in", sendfile(cli, closed, &off, 10));
    T("sendfile from devnull", sendfile(cli, devnull, &off, 10));
    T("sendfile64 bad", sendfile64(-1, -1, NULL, 1));

    /* close / dup family */
    T("close bad fd", close(-1));
    T("close closed fd", close(closed));
    int dead = tcp_socket();
    T("close ok", close(dead));
    T("close again", close(dead));
    T("dup bad fd", dup(-1));
    T("dup2 bad old", dup2(-1, 50));
    T("dup2 bad new", dup2(cli, -1));
    T("dup2 same", dup2(cli, cli));
    T("dup2 same closed", dup2(closed, closed));
    T("dup3 same", dup3(cli, cli, 0));
    T("dup3 bad flags", dup3(cli, 60, 0x1234));
    T("dup ok", dup(cli));
    T("dup2 ok", dup2(cli, 70));
    T("dup3 ok", dup3(cli, 71, O_CLOEXEC));
    T("close dup2", close(70));
    T("close dup3", close(71));

    /* fcntl / ioctl */
    T("fcntl bad fd", fcntl(-1, F_GETFL));
    T("fcntl closed fd", fcntl(closed, F_GETFD));
    T("fcntl bad cmd", fcntl(cli, 99999));
    T("fcntl dupfd negative", fcntl(cli, F_DUPFD, -1));
    T("fcntl dupfd ok", fcntl(cli, F_DUPFD, 80));
    T("fcntl dupfd_cloexec ok", fcntl(cli, F_DUPFD_CLOEXEC, 90));
    T("fcntl getfl", fcntl(srv, F_GETFL));
    T("fcntl setfl", fcntl(srv, F_SETFL, 0));
    T("fcntl getfd", fcntl(91, F_GETFD));
    struct flock fl = { .l_type = F_RDLCK };
    T("fcntl getlk socket", fcntl(cli, F_GETLK, &fl));
    T("fcntl setlk NULL", fcntl(devnull, F_SETLK, NUL));
    T("ioctl FIONREAD NULL", ioctl(srv, FIONREAD, NUL));
    T("ioctl FIONREAD ok", ioctl(srv, FIONREAD, &v));
    T("ioctl bad fd", ioctl(-1, FIONREAD, &v));
    T("ioctl bad request", ioctl(cli, 0x12345678, &v));
    T("ioctl not tty", ioctl(pfd[0], TIOCGWINSZ, buf));

    /* poll / select / epoll */
    struct pollfd pf[3] = { { .fd = cli, .events = POLLOUT }, { .fd = -1 }, { .fd = closed, .events = POLLIN } };
    T("poll mixed", poll(pf, 3, 0));
    printf("  revents %d %d %d\n", pf[0].revents, pf[1].revents, pf[2].revents);
    T("poll NULL", poll(NUL, 1, 0));
    T("poll too many", poll((struct pollfd *)launder(pf), 1u << 30, 0));
    struct timespec ts0 = { 0, 0 }, tsbad = { 0, -1 };
    T("ppoll ok", ppoll(pf, 1, &ts0, NULL));
    T("ppoll bad timeout", ppoll(pf, 1, &tsbad, NULL));
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(srv, &rs);
    struct timeval tv0 = { 0, 0 }, tvbad = { -1, 0 };
    T("select ok", select(srv + 1, &rs, NULL, NULL, &tv0));
    T("select negative n", select(-1, NULL, NULL, NULL, &tv0));
    T("select bad timeout", select(0, NULL, NULL, NULL, &tvbad));
    FD_ZERO(&rs);
    FD_SET(closed, &rs);
    T("select closed fd", select(closed + 1, &rs, NULL, NULL, &tv0));
    T("pselect ok", pselect(0, NULL, NULL, NULL, &ts0, NULL));
    T("pselect bad timeout", pselect(0, NULL, NULL, NULL, &tsbad, NULL));
    T("epoll_create zero", epoll_create(0));
    T("epoll_create1 bad flags", epoll_create1(0x1234));
    int ep;
    T("epoll_create1 ok", (ep = epoll_create1(EPOLL_CLOEXEC)));
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = srv }, evs[4];
    T("epoll_ctl add", epoll_ctl(ep, EPOLL_CTL_ADD, srv, &ev));
    T("epoll_ctl add again", epoll_ctl(ep, EPOLL_CTL_ADD, srv, &ev));
    T("epoll_ctl bad op", epoll_ctl(ep, 99, srv, &ev));
    T("epoll_ctl self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
    T("epoll_ctl regular file", epoll_ctl(ep, EPOLL_CTL_ADD, devnull, &ev) == 0 ? 0 : -1);
    T("epoll_ctl mod absent", epoll_ctl(ep, EPOLL_CTL_MOD, cli, &ev));
    T("epoll_ctl bad fd", epoll_ctl(ep, EPOLL_CTL_ADD, closed, &ev));
    T("epoll_ctl bad epfd", epoll_ctl(pfd[0], EPOLL_CTL_ADD, srv, &ev));
    T("epoll_wait zero max", epoll_wait(ep, evs, 0, 0));
    T("epoll_wait bad fd", epoll_wait(closed, evs, 4, 0));
    T("epoll_wait empty", epoll_wait(ep, evs, 4, 0));
    sigset_t none;
    sigemptyset(&none);
    T("epoll_pwait empty", epoll_pwait(ep, evs, 4, 0, &none));
    T("epoll_pwait2 empty", epoll_pwait2(ep, evs, 4, &ts0, NULL));
    T("epoll_pwait2 bad timeout", epoll_pwait2(ep, evs, 4, &tsbad, NULL));
    T("epoll_ctl del", epoll_ctl(ep, EPOLL_CTL_DEL, srv, NULL));

    /* socket options and names */
    vlen = sizeof v;
    T("getsockopt SO_TYPE", getsockopt(cli, SOL_SOCKET, SO_TYPE, &v, &vlen));
    printf("  SO_TYPE %d len %u\n", v, vlen);
    T("getsockopt bad level", getsockopt(cli, 9999, 1, &v, &vlen));
    T("getsockopt unassigned level 283", getsockopt(cli, 283, 1, &v, &vlen));
    T("getsockopt NULL len", getsockopt(cli, SOL_SOCKET, SO_TYPE, &v, NUL));
    vlen = 0;
    T("getsockopt zero len", getsockopt(cli, SOL_SOCKET, SO_TYPE, &v, &vlen));
    vlen = sizeof v;
    T("getsockopt tcp on udp", getsockopt(udp, IPPROTO_TCP, TCP_NODELAY, &v, &vlen));
    T("getsockopt not socket", getsockopt(pfd[0], SOL_SOCKET, SO_TYPE, &v, &vlen));
    v = 1;
    T("setsockopt ok", setsockopt(cli, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v));
    T("setsockopt short len", setsockopt(cli, SOL_SOCKET, SO_RCVBUF, &v, 1));
    T("setsockopt bad name", setsockopt(cli, SOL_SOCKET, 9999, &v, sizeof v));
    T("setsockopt unassigned level 283", setsockopt(cli, 283, 1, &v, sizeof v));
    T("setsockopt NULL val", setsockopt(cli, SOL_SOCKET, SO_RCVBUF, NUL, sizeof v));
    T("setsockopt bad fd", setsockopt(closed, SOL_SOCKET, SO_RCVBUF, &v, sizeof v));
    alen = sizeof a;
    T("getsockname bad fd", getsockname(-1, (struct sockaddr *)&a, &alen));
    T("getsockname NULL len", getsockname(cli, (struct sockaddr *)&a, NUL));
    T("getsockname not socket", getsockname(pfd[0], (struct sockaddr *)&a, &alen));
    T("getpeername unconnected", getpeername(fresh2, (struct sockaddr *)&a, &alen));
    T("getpeername ok", getpeername(cli, (struct sockaddr *)&a, &alen));
    printf("  peer len %u\n", alen);

    /* fork: the child exits with a status made of its own socket calls' results */
    fflush(stdout);
    pid_t pid = fork();
    printf("fork %s\n", pid < 0 ? "failed" : "ok");
    if (pid == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        int ok = s >= 0 && write(cli, "c", 1) == 1 && close(s) == 0 && close(-1) == -1 && errno == EBADF;
        _exit(ok ? 42 : 1);
    }
    cases++;
    int status = 0;
    waitpid(pid, &status, 0);
    printf("  child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    printf("%d cases\n", cases);
    return 0;
}
