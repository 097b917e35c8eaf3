#!/usr/bin/env python3
"""Bytes a program writes just before it exits or execs reach the peer, as with TCP.

Run it under libexsock.so with the rules `use ddp tcp_server 127.0.0.1:*; use ddp tcp_client
127.0.0.1:*`, or without rules and with --sockopt (every socket switched with
setsockopt(SOL_DDP, DDP_MODE, 1)); without the library it checks plain TCP (the baseline).

Each check starts a child program (this script with --child) that connects to the server here
with a nonblocking connect (the MPA exchange may still be under way when it is done), writes
SIZE bytes and at once:
  exit        calls exit(3) without closing the socket (libc's exit: the library's
              destructor runs, Python's own finalization does not close the socket)
  close-exit  closes the socket, then calls exit(3)
  exec        execs /bin/true without closing (the socket is close-on-exec, Python's default)
  exec-keep   execs /bin/true with the socket kept across the exec (inheritable)
  execl       as exec, through libc's variadic execl
The server reads to EOF and must get every byte, in order, then a clean end.
  stalled     the server reads nothing until the child is gone; the child writes until the
              way to the server is full (a blocking write with SO_SNDTIMEO 0.5 s that could
              place nothing), then exits; with --ddp its exit flush gives up after 2 s: it
              must say so on stderr (one line) and the server must see a reset after what
              arrived, not a clean end (plain TCP instead delivers everything: the kernel
              keeps sending after the exit)
Prints "ok: ..." and exits 0, or prints what failed and exits 1. Every wait is bounded.
"""

import argparse
import ctypes
import errno
import hashlib
import os
import select
import socket
import struct
import subprocess
import sys
import time

SOL_DDP = 0x6578
DDP_MODE = 1
MODES = ["exit", "close-exit", "exec", "exec-keep", "execl"]


def payload(n, seed):
    out = bytearray()
    h = hashlib.sha256(b"%d:%d" % (seed, n)).digest()
    while len(out) < n:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:n])


def tcp_socket(sockopt):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if sockopt:
        s.setsockopt(SOL_DDP, DDP_MODE, 1)
    return s


def child(a):
    """Connect, write, then end as the mode says (never returns)."""
    c = tcp_socket(a.sockopt)
    c.setblocking(False)
    rc = c.connect_ex(("127.0.0.1", a.port))
    if rc not in (0, errno.EINPROGRESS):
        raise OSError(rc, "connect")
    p = select.poll()
    p.register(c, select.POLLOUT)
    if not p.poll(10_000):
        raise TimeoutError("nonblocking connect: not writable within 10 s")
    data = payload(a.size, a.seed)
    view = memoryview(data)
    off = 0
    deadline = time.monotonic() + 20
    if a.mode == "stalled":
        # The server reads nothing: write until the whole way to it is full (a blocking
        # write that could place nothing for 0.5 s), so that nothing can move at the exit.
        c.setblocking(True)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 500_000))
    while off < len(data):
        try:
            n = os.write(c.fileno(), view[off:off + (1 << 20)])
            off += n
            if a.mode == "stalled" and n < min(1 << 20, len(data) - off + n):
                break
        except BlockingIOError:
            if a.mode == "stalled":
                break
            if time.monotonic() > deadline:
                raise TimeoutError("write: no room for 20 s")
            p.poll(1000)
    print(off, flush=True)  # what was written, for the server
    libc = ctypes.CDLL(None, use_errno=True)
    if a.mode in ("exit", "stalled"):
        libc.exit(0)
    elif a.mode == "close-exit":
        c.close()
        libc.exit(0)
    elif a.mode == "exec":
        os.execv("/bin/true", ["true"])
    elif a.mode == "exec-keep":
        os.set_inheritable(c.fileno(), True)
        os.execv("/bin/true", ["true"])
    elif a.mode == "execl":
        libc.execl(b"/bin/true", b"true", ctypes.c_char_p(None))
        raise OSError(ctypes.get_errno(), "execl")
    raise SystemExit("unknown mode %s" % a.mode)


def read_to_end(conn, secs):
    """Every byte until the end, and how it ended: None (a clean end) or the error."""
    conn.settimeout(secs)
    chunks = []
    while True:
        try:
            b = conn.recv(1 << 20)
        except ConnectionResetError as e:
            return b"".join(chunks), e
        if not b:
            err = conn.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            return b"".join(chunks), (OSError(err, os.strerror(err)) if err else None)
        chunks.append(b)


def spawn(a, ls, mode, size, seed):
    args = [sys.executable, os.path.abspath(__file__), "--child", mode,
            "--port", str(ls.getsockname()[1]), "--size", str(size), "--seed", str(seed)]
    if a.sockopt:
        args.append("--sockopt")
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def check(a, ls, mode, size, seed):
    proc = spawn(a, ls, mode, size, seed)
    ls.settimeout(20)
    conn, _ = ls.accept()
    with conn:
        if mode == "stalled":
            out, err = proc.communicate(timeout=30)
        got, end = read_to_end(conn, 20)
        if mode != "stalled":
            out, err = proc.communicate(timeout=30)
    err = err.decode(errors="replace")
    if proc.returncode != 0:
        return "%s %d B: the child exited %d: %s" % (mode, size, proc.returncode, err.strip())
    written = int(out.split()[0])
    data = payload(size, seed)[:written]
    if mode == "stalled":
        warned = [l for l in err.splitlines() if "exit: 1 DDP socket(s) still had" in l]
        if a.ddp and (len(warned) != 1 or end is None):
            return "stalled: %d of %d B, end %r, child's stderr %r" % (
                len(got), written, end, err.strip())
        if got != data[:len(got)]:
            return "stalled: the bytes that arrived differ"
        if not a.ddp and (got != data or end is not None):
            return "stalled (TCP): %d of %d B, end %r" % (len(got), written, end)
        return None
    if got != data or end is not None:
        return "%s %d B: got %d B, end %r, child's stderr %r" % (
            mode, size, len(got), end, err.strip())
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockopt", action="store_true", help="switch sockets with setsockopt(DDP_MODE)")
    ap.add_argument("--ddp", action="store_true", help="the sockets are DDP sockets (rules or --sockopt)")
    ap.add_argument("--iterations", type=int, default=4, help="rounds of every mode and size")
    ap.add_argument("--child", metavar="MODE")
    ap.add_argument("--port", type=int)
    ap.add_argument("--size", type=int)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.ddp = a.ddp or a.sockopt
    if a.child:
        a.mode = a.child
        child(a)
        return
    ls = tcp_socket(a.sockopt)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    t0 = time.monotonic()
    failed = []
    n = 0
    for it in range(a.iterations):
        for mode in MODES:
            for size in (1, 65536, 1 << 20):
                n += 1
                f = check(a, ls, mode, size, n)
                if f:
                    failed.append(f)
    n += 1
    f = check(a, ls, "stalled", 32 << 20, n)
    if f:
        failed.append(f)
    ls.close()
    if failed:
        print("%d of %d failed: %s" % (len(failed), n, "; ".join(failed[:5])))
        sys.exit(1)
    print("ok: %d children wrote and exited or exec'd at once (%s; 1 B .. 1 MiB), a stalled "
          "exit (%.1f s)" % (n, ", ".join(MODES), time.monotonic() - t0))


if __name__ == "__main__":
    main()
