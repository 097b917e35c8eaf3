/*
 * pt-stress: the preload must survive what real programs do to it at once.
 *
 * For SECONDS (default 3), in one process:
 *   - an acceptor thread: accept4 on a loopback listener, echo one message per connection
 *     through poll + recv/send, close;
 *   - WORKERS client threads (default 4): socket, connect, write, read the echo and compare,
 *     dup / dup2 / fcntl(F_DUPFD_CLOEXEC) the socket and close every copy, socketpair round
 *     trips, epoll_create1 + epoll_ctl + epoll_wait on the connected socket;
 *   - a forker thread: fork; the child makes socket calls (async-signal-safe only) and execs
 *     itself with "child" (which makes more socket calls and exits 0); the parent reaps it;
 *   - a 1 ms interval timer whose SIGALRM handler makes socket calls (socket, getsockopt,
 *     setsockopt, close, send on a socketpair) and checks errno is preserved across them.
 * At the end all threads are joined and the fds open in /proc/self/fd must be exactly those
 * open at the start. Exit 0 and "PASS" on success; any error prints what failed and exits 1.
 * A watchdog alarm (SECONDS + 30 s, via timer_create on a separate clock) aborts on a hang.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop, stop_acceptor;
static atomic_long failures, connections, forks, signals_handled, dups;
static unsigned short port;
static int sigpair[2];
static const char *self;

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "pt-stress: " __VA_ARGS__);                                        \
        fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));                       \
        atomic_fetch_add(&failures, 1);                                                    \
    } while (0)

static struct sockaddr_in loopback(unsigned short p)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(p) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static void *acceptor(void *arg)
{
    int l = *(int *)arg;
    while (!atomic_load(&stop_acceptor)) {
        struct pollfd p = { .fd = l, .events = POLLIN };
        int r = poll(&p, 1, 50);
        if (r < 0 && errno != EINTR) { FAIL("acceptor poll"); break; }
        if (r <= 0) continue;
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno != EINTR && errno != EAGAIN) FAIL("accept4");
            continue;
        }
        char buf[64];
        ssize_t n;
        do n = recv(c, buf, sizeof buf, 0); while (n < 0 && errno == EINTR);
        if (n > 0) {
            ssize_t m;
            do m = send(c, buf, (size_t)n, MSG_NOSIGNAL); while (m < 0 && errno == EINTR);
            if (m != n) FAIL("acceptor send");
        } else if (n < 0) {
            FAIL("acceptor recv");
        }
        if (close(c) != 0) FAIL("acceptor close");
    }
    return NULL;
}

static ssize_t read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static void *worker(void *arg)
{
    long id = (long)arg;
    char msg[64], echo[64];
    for (long i = 0; !atomic_load(&stop); i++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) { FAIL("socket"); continue; }
        struct sockaddr_in a = loopback(port);
        int r;
        do r = connect(s, (struct sockaddr *)&a, sizeof a); while (r < 0 && errno == EINTR);
        if (r != 0) { FAIL("connect"); close(s); continue; }
        int len = snprintf(msg, sizeof msg, "worker %ld message %ld", id, i);
        ssize_t w;
        do w = write(s, msg, (size_t)len); while (w < 0 && errno == EINTR);
        if (w != len) FAIL("write");
        if (read_full(s, echo, (size_t)len) != len || memcmp(msg, echo, (size_t)len) != 0)
            FAIL("echo mismatch");
        else
            atomic_fetch_add(&connections, 1);

        /* duplicates of a live socket, all closed again */
        int d1 = dup(s);
        int d2 = fcntl(s, F_DUPFD_CLOEXEC, 100 + (int)id * 10);
        int d3 = d1 >= 0 ? dup2(s, d1) : -1; /* onto itself's copy: replaces d1 */
        if (d1 < 0 || d2 < 0 || d3 != d1) FAIL("dup family");
        int ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = { .events = EPOLLOUT }, out;
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, d2, &ev) != 0) FAIL("epoll setup");
        else {
            do r = epoll_wait(ep, &out, 1, 1000); while (r < 0 && errno == EINTR);
            if (r != 1) FAIL("epoll_wait");
        }
        if (ep >= 0) close(ep);
        if (d1 >= 0 && close(d1) != 0) FAIL("close d1");
        if (d2 >= 0 && close(d2) != 0) FAIL("close d2");
        if (shutdown(s, SHUT_RDWR) != 0 && errno != ENOTCONN) FAIL("shutdown");
        if (close(s) != 0) FAIL("close");
        atomic_fetch_add(&dups, 1);

        int sp[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) { FAIL("socketpair"); continue; }
        if (send(sp[0], "x", 1, 0) != 1 || recv(sp[1], echo, 1, 0) != 1) FAIL("socketpair io");
        close(sp[0]);
        close(sp[1]);
    }
    return NULL;
}

static void *forker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        pid_t pid = fork();
        if (pid < 0) { FAIL("fork"); continue; }
        if (pid == 0) {
            /* async-signal-safe calls only, then exec */
            int s = socket(AF_INET, SOCK_STREAM, 0);
            if (s < 0 || close(s) != 0) _exit(3);
            char *argv[] = { (char *)self, "child", NULL };
            execv(self, argv);
            _exit(4);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
            if (errno != EINTR) { FAIL("waitpid"); break; }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            errno = 0;
            FAIL("child status %d", st);
        }
        atomic_fetch_add(&forks, 1);
    }
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
    int saved = errno;
    errno = 777;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0) {
        int v = 1;
        socklen_t vl = sizeof v;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &v, sizeof v);
        getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &vl);
        close(s);
    }
    send(sigpair[0], "s", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    char c;
    recv(sigpair[1], &c, 1, MSG_DONTWAIT);
    if (errno != 777) {
        static const char m[] = "pt-stress: errno changed by successful calls in handler\n";
        write(2, m, sizeof m - 1);
        atomic_fetch_add(&failures, 1);
    }
    atomic_fetch_add(&signals_handled, 1);
    errno = saved;
}

static void on_watchdog(int sig)
{
    (void)sig;
    static const char m[] = "pt-stress: FAIL: hang (watchdog)\n";
    write(2, m, sizeof m - 1);
    _exit(2);
}

static int child_main(void)
{
    int s = socket(AF_INET6, SOCK_STREAM, 0);
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sp) != 0) return 5;
    if (send(sp[0], "ok", 2, 0) != 2) return 6;
    char b[2];
    if (recv(sp[1], b, 2, 0) != 2) return 7;
    close(sp[0]);
    close(sp[1]);
    if (s >= 0) close(s);
    return 0;
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 2 && strcmp(argv[1], "child") == 0) return child_main();
    int seconds = argc > 1 ? atoi(argv[1]) : 3;
    int workers = argc > 2 ? atoi(argv[2]) : 4;
    if (seconds <= 0 || workers <= 0 || workers > 64) { fprintf(stderr, "usage: pt-stress [SECONDS [WORKERS]]\n"); return 2; }

    signal(SIGPIPE, SIG_IGN);
    /* watchdog on its own signal and clock, independent of the 1 ms SIGALRM timer */
    struct sigaction wd = { .sa_handler = on_watchdog };
    sigaction(SIGUSR2, &wd, NULL);
    timer_t wt;
    struct sigevent se = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR2 };
    if (timer_create(CLOCK_MONOTONIC, &se, &wt) != 0) { perror("timer_create"); return 1; }
    struct itimerspec wits = { .it_value = { seconds + 30, 0 } };
    timer_settime(wt, 0, &wits, NULL);

    int fds_before = count_fds();

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sigpair) != 0) { perror("socketpair"); return 1; }
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = loopback(0);
    socklen_t alen = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 256) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) != 0) {
        perror("listener");
        return 1;
    }
    port = ntohs(a.sin_port);

    struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { .it_interval = { 0, 1000 }, .it_value = { 0, 1000 } };
    setitimer(ITIMER_REAL, &it, NULL);

    pthread_t acc, fk, w[64];
    pthread_create(&acc, NULL, acceptor, &l);
    pthread_create(&fk, NULL, forker, NULL);
    for (long i = 0; i < workers; i++) pthread_create(&w[i], NULL, worker, (void *)i);

    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += seconds;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR) {}
    atomic_store(&stop, 1);

    for (int i = 0; i < workers; i++) pthread_join(w[i], NULL);
    pthread_join(fk, NULL);
    atomic_store(&stop_acceptor, 1); /* only now: workers may have been waiting for it */
    pthread_join(acc, NULL);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    close(l);
    close(sigpair[0]);
    close(sigpair[1]);

    int fds_after = count_fds();
    printf("pt-stress: %ld connections, %ld dup rounds, %ld fork+exec, %ld signal handlers, "
           "fds %d -> %d, %ld failures\n",
           atomic_load(&connections), atomic_load(&dups), atomic_load(&forks),
           atomic_load(&signals_handled), fds_before, fds_after, atomic_load(&failures));
    if (fds_after != fds_before) { printf("pt-stress: FAIL: fd leak\n"); return 1; }
    if (atomic_load(&failures) || !atomic_load(&connections) || !atomic_load(&forks) ||
        !atomic_load(&signals_handled)) {
        printf("pt-stress: FAIL\n");
        return 1;
    }
    printf("pt-stress: PASS\n");
    return 0;
}
