/*
 * early-ctor.so: a library whose ELF constructor makes socket calls, preloaded next to
 * libexsock.so so that (in one of the two orders) its calls arrive before libexsock.so's own
 * constructor has resolved anything — the lazy-resolution path. It reports on stdout what it
 * saw; the program it is preloaded into does the same again from main.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__attribute__((constructor)) static void early(void)
{
    int sv[2];
    char c = 0;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int ok = s >= 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 &&
             write(sv[0], "e", 1) == 1 && read(sv[1], &c, 1) == 1 && c == 'e' &&
             close(sv[0]) == 0 && close(sv[1]) == 0 && close(s) == 0;
    errno = 0;
    int bad = close(-1) == -1 && errno == EBADF;
    static const char yes[] = "early-ctor: ok\n", no[] = "early-ctor: FAILED\n";
    if (ok && bad)
        write(1, yes, sizeof yes - 1);
    else
        write(1, no, sizeof no - 1);
}
