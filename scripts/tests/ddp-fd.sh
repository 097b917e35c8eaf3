#!/usr/bin/env bash
# timeout: 540
# ddp-fd: a DDP socket's fd behaves like a TCP socket under everything an unmodified program
# does (DESIGN.md "Engine and fd model", docs/engine.md "The fd model"): test-apps/ddp/ddp-fdtest
# under libexsock.so, one PASS/FAIL line per case (poll, select, epoll LT/ET/ONESHOT/RDHUP/
# nested, nonblocking connect/accept/read/write, fcntl, ioctl (FIONREAD, SIOCOUTQ), dup*,
# close during a blocked read, shutdown, names and socket options, EINTR/SA_RESTART, signal
# handlers calling on a second socket and on the one they interrupted, sigaction queries, fork,
# fork+exec, listener option inheritance, raw syscalls, msg I/O). Every case runs in its own process with a 20 s bound (230 s for all);
# every wait inside is bounded (5 s); every transfer's content is checked.
# First the same cases run on plain TCP sockets without the library (ddp-fdtest -T): that
# baseline shows the expectations are Linux's own TCP behaviour.
. "$(dirname "$0")/../lib/common.sh"

need_cmd gcc
need_cmd make

say "building libexsock.so and test-apps/ddp"
# EXSOCK_LIB=/path/to/libexsock.so: use that library as is (as scripts/exsock-run does)
if [ -z "${EXSOCK_LIB:-}" ]; then
  (cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
  export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
fi
nm -D --defined-only "$EXSOCK_LIB" | grep -qw ddp_post_send \
  || die "$EXSOCK_LIB does not export the DDP extension API (ddp_post_send)"
apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/ddp-fdtest" >&2

rc=0
say "baseline: the cases on plain TCP sockets, no library"
timeout 45 "$apps/ddp-fdtest" -T -t 10 -D 35 || { echo "FAIL: the TCP baseline fails (the test itself is wrong)"; rc=1; }

say "the cases on DDP sockets under libexsock.so"
timeout 245 "$EXSOCK_ROOT/scripts/exsock-run" "$apps/ddp-fdtest" -t 20 -D 230 || rc=1

# Epoll fds that watch many DDP sockets are served through an epoll group (docs/engine.md
# "Epoll groups"); EXSOCK_EPOLL_INLINE=0 puts every epoll set into one, so the epoll cases
# (and everything else) run through that path too.
say "again, every epoll set in an epoll group (EXSOCK_EPOLL_INLINE=0)"
EXSOCK_EPOLL_INLINE=0 timeout 245 "$EXSOCK_ROOT/scripts/exsock-run" "$apps/ddp-fdtest" -t 20 -D 230 || rc=1

[ $rc -eq 0 ] && echo "PASS: ddp-fd" || echo "FAIL: ddp-fd"
exit $rc
