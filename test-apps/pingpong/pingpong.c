/*
 * pingpong: small-message TCP round trips over loopback, for `scripts/bench passthrough`.
 *
 *   pingpong server PORT                 echo whatever each client sends until its EOF, one
 *                                         client after another, until killed
 *   pingpong client HOST PORT ITERS SIZE  send ITERS messages, wait for each echo, print the
 *                                         mean round trip in microseconds ("rtt_us 12.345")
 *
 * Blocking sockets, TCP_NODELAY, plain read/write: the calls an ordinary program makes.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) { perror(what); exit(1); }

static int read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) return r == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

static int write_full(int fd, const char *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = write(fd, buf + put, n - put);
        if (r < 0) return -1;
        put += (size_t)r;
    }
    return 1;
}

static void nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("setsockopt");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "server") == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        if (l < 0) die("socket");
        int one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(l, (struct sockaddr *)&a, sizeof a) != 0) die("bind");
        if (listen(l, 4) != 0) die("listen");
        /* serve clients one after another until killed (a readiness probe is a client too) */
        static char buf[65536];
        for (;;) {
            int c = accept(l, NULL, NULL);
            if (c < 0) die("accept");
            nodelay(c);
            for (;;) {
                ssize_t r = read(c, buf, sizeof buf);
                if (r <= 0) break;
                if (write_full(c, buf, (size_t)r) < 0) break;
            }
            close(c);
        }
    }
    if (argc == 6 && strcmp(argv[1], "client") == 0) {
        long iters = atol(argv[4]);
        size_t size = (size_t)atol(argv[5]);
        if (iters <= 0 || size == 0 || size > 65536) { fprintf(stderr, "bad ITERS/SIZE\n"); return 2; }
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) die("socket");
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
        if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) { fprintf(stderr, "bad HOST\n"); return 2; }
        if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
        nodelay(s);
        char *buf = calloc(1, size);
        if (!buf) die("calloc");
        /* warm-up round trips, not timed */
        for (int i = 0; i < 1000; i++)
            if (write_full(s, buf, size) < 0 || read_full(s, buf, size) != 1) die("warm-up");
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < iters; i++)
            if (write_full(s, buf, size) < 0 || read_full(s, buf, size) != 1) die("round trip");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters;
        printf("rtt_us %.3f\n", us);
        close(s);
        free(buf);
        return 0;
    }
    fprintf(stderr, "usage: pingpong server PORT | pingpong client HOST PORT ITERS SIZE\n");
    return 2;
}
