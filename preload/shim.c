/*
 * Variadic entry points of libexsock.so.
 *
 * Stable Rust cannot define C-variadic functions, so fcntl, fcntl64 and ioctl are defined here:
 * each reads its single optional argument the way glibc itself does (as a pointer-sized word,
 * which covers both the `int` and the pointer forms on every ABI we build for) and forwards to a
 * non-variadic Rust function. execl, execlp and execle collect their argument list into an
 * argv array on the stack, as glibc does, and forward to the Rust execv, execvp and execve
 * hooks (src/exec.rs). Nothing else lives here: no state, no allocation, no errno access.
 */
#include <stdarg.h>
#include <stddef.h>

int exsock_fcntl(int fd, int cmd, void *arg);
int exsock_fcntl64(int fd, int cmd, void *arg);
int exsock_ioctl(int fd, unsigned long request, void *arg);
int exsock_execv(const char *path, char *const argv[]);
int exsock_execvp(const char *file, char *const argv[]);
int exsock_execve(const char *path, char *const argv[], char *const envp[]);

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

/* How many arguments an execl-family list holds, arg0 included, the null pointer not. */
static size_t exsock_argc(va_list ap)
{
    size_t n = 1;
    while (va_arg(ap, const char *))
        n++;
    return n;
}

/* Declares argv[] (ARG, then the variadic arguments up to and with the NULL) and leaves AP
 * open after the NULL (execle's envp follows it): the caller ends it with va_end. */
#define EXSOCK_ARGV(arg, argv, ap)                     \
    va_list ap;                                        \
    va_start(ap, arg);                                 \
    size_t n_##argv = exsock_argc(ap);                 \
    va_end(ap);                                        \
    char *argv[n_##argv + 1];                          \
    argv[0] = (char *)(arg);                           \
    va_start(ap, arg);                                 \
    for (size_t i = 1; i <= n_##argv; i++)             \
        argv[i] = va_arg(ap, char *)

int execl(const char *path, const char *arg, ...)
{
    EXSOCK_ARGV(arg, argv, ap);
    va_end(ap);
    return exsock_execv(path, argv);
}

int execlp(const char *file, const char *arg, ...)
{
    EXSOCK_ARGV(arg, argv, ap);
    va_end(ap);
    return exsock_execvp(file, argv);
}

int execle(const char *path, const char *arg, ...)
{
    EXSOCK_ARGV(arg, argv, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return exsock_execve(path, argv, envp);
}
