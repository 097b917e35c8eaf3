#!/usr/bin/env python3
"""unread: a connection whose reader leaves data unread, for exsock-stat to show where it waits.

Makes a connection to itself over 127.0.0.1 (both ends DDP when run under libexsock.so with
rules for them), sends N bytes of a known pattern from the client end and reads nothing, prints
"ready CLIENT_FD SERVER_FD N" and waits until its stdin is closed. Then it reads the N bytes on
the server end, checks every byte, prints "ok: ..." and exits 0 (or says what failed, exit 1).
Used by scripts/tests/apps-stat.sh.
"""
import socket
import sys

N = 100_000


def pattern(n):
    return bytes((i * 7 + 3) & 0xFF for i in range(n))


def main():
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    cli = socket.create_connection(lst.getsockname(), timeout=30)
    srv, _ = lst.accept()
    srv.settimeout(30)
    want = pattern(N)
    cli.sendall(want)
    print(f"ready {cli.fileno()} {srv.fileno()} {N}", flush=True)
    sys.stdin.read()
    got = bytearray()
    while len(got) < N:
        b = srv.recv(N - len(got))
        if not b:
            print(f"FAIL: EOF after {len(got)} of {N} bytes")
            return 1
        got += b
    if got != want:
        at = next(i for i in range(N) if got[i] != want[i])
        print(f"FAIL: content differs at byte {at}")
        return 1
    print(f"ok: {N} bytes read after the wait, every byte as sent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
