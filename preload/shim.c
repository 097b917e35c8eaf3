/*
 * Variadic entry points of libexsock.so.
 *
 * Stable Rust cannot define C-variadic functions, so fcntl, fcntl64 and ioctl are defined here:
 * each reads its single optional argument the way glibc itself does (as a pointer-sized word,
 * which covers both the `int` and the pointer forms on every ABI we build for) and forwards to a
 * non-variadic Rust function. Nothing else lives here: no state, no allocation, no errno access.
 */
#include <stdarg.h>

int exsock_fcntl(int fd, int cmd, void *arg);
int exsock_fcntl64(int fd, int cmd, void *arg);
int exsock_ioctl(int fd, unsigned long request, void *arg);

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return exsock_fcntl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return exsock_fcntl64(fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return exsock_ioctl(fd, request, arg);
}
