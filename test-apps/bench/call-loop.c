/*
 * call-loop N: makes N recv(-1, ..., MSG_DONTWAIT) and N close(-1) calls (each fails at once
 * with EBADF). Run under callgrind with N = 0 and N > 0, with and without libexsock.so, it
 * gives the user-space instructions the library adds per pass-through call.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    char b[4];
    for (long i = 0; i < n; i++) {
        recv(-1, b, sizeof b, MSG_DONTWAIT);
        close(-1);
    }
    return 0;
}
