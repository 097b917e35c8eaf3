#!/usr/bin/env python3
"""Subprocesses of a program with DDP sockets (scripts/tests/apps-fork.sh), unmodified Python.

Python's subprocess starts children with vfork (memory shared with the parent until exec) and,
in the child, closes every inherited fd with close_range and dup2s the child's stdio: calls
the library sees in the child while its memory is the parent's. Two checks, one process, both
ends of each connection in it (rules switch them to DDP mode):
  1. a connection carries verified data both ways, then subprocess.run(["true"]) (close_fds:
     close_range in the vfork child), then the connection still carries verified data both
     ways, and again after 20 more subprocesses;
  2. an accepted connection becomes the stdin and stdout of a `cat` started with
     subprocess.Popen, and the parent closes its own copy at once (an inetd-style hand-off):
     CONNS connections, each echoing BYTES pseudo-random bytes through its `cat`, verified,
     then EOF once the client shut down writing and `cat` exited;
  3. an accepted connection handed to a forked worker over a unix socket (SCM_RIGHTS), the
     parent closing its own copy at once: the worker echoes BYTES bytes, verified, and ends
     the stream.
Prints "ok: ..." and exits 0, or says what went wrong and exits 1.
"""
import argparse
import hashlib
import os
import random
import select
import socket
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--conns", type=int, default=4)
ap.add_argument("--bytes", type=int, default=2 << 20)
args = ap.parse_args()
T = 30  # seconds: the bound of every wait


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def pair(ls):
    """A connected pair in this process: a non-blocking connect (a blocking one waits for the
    accept), then the accept."""
    c = socket.socket()
    c.setblocking(False)
    c.connect_ex(("127.0.0.1", args.port))
    ls.settimeout(T)
    s, _ = ls.accept()
    if not select.select([], [c], [], T)[1]:
        fail("connect did not complete")
    c.setblocking(True)
    c.settimeout(T)
    s.settimeout(T)
    return c, s


def recv_exact(s, n):
    out = bytearray()
    while len(out) < n:
        b = s.recv(min(1 << 20, n - len(out)))
        if not b:
            fail("EOF after %d of %d bytes" % (len(out), n))
        out += b
    return bytes(out)


def both_ways(c, s, tag):
    for a, b, d in ((c, s, "c->s"), (s, c, "s->c")):
        msg = random.randbytes(70000)
        threading.Thread(target=a.sendall, args=(msg,), daemon=True).start()
        if recv_exact(b, len(msg)) != msg:
            fail("%s %s: content differs" % (tag, d))


ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", args.port))
ls.listen(64)

# 1: subprocesses beside a live connection
c, s = pair(ls)
both_ways(c, s, "before any subprocess")
r = subprocess.run(["true"])
if r.returncode != 0:
    fail("true exited %d" % r.returncode)
both_ways(c, s, "after subprocess.run")
for i in range(20):
    subprocess.run(["true"], check=True)
both_ways(c, s, "after 21 subprocesses")
c.close()
s.close()

# 2: connections handed to `cat` children
t0 = time.monotonic()
moved = 0
for i in range(args.conns):
    c, s = pair(ls)
    s.setblocking(True)  # (a socket with a timeout is non-blocking underneath: cat would see EAGAIN)
    p = subprocess.Popen(["cat"], stdin=s, stdout=s)
    s.close()  # the parent lets go: the connection is cat's now
    data = random.randbytes(args.bytes)
    w = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)), daemon=True)
    w.start()
    got = bytearray()
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        got += b
        if len(got) > len(data):
            break
    w.join(T)
    if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
        fail("connection %d: %d of %d bytes back, content differs" % (i, len(got), len(data)))
    if p.wait(T) != 0:
        fail("cat of connection %d exited %d" % (i, p.returncode))
    c.close()
    moved += len(data)
t_cat = time.monotonic() - t0

# 3: connections handed to a worker process over SCM_RIGHTS
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    code = 1
    try:
        ls.close()
        a.close()
        for i in range(args.conns):
            _, fds, _, _ = socket.recv_fds(b, 16, 1)
            w = socket.socket(fileno=fds[0])
            w.setblocking(True)
            while True:
                d = w.recv(1 << 20)
                if not d:
                    break
                w.sendall(d)
            w.shutdown(socket.SHUT_WR)
            w.close()
        code = 0
    finally:
        os._exit(code)
b.close()
passed = 0
for i in range(args.conns):
    c, s = pair(ls)
    s.setblocking(True)
    socket.send_fds(a, [b"c"], [s.fileno()])
    s.close()  # the parent lets go: the connection is the worker's now
    data = random.randbytes(args.bytes)
    w = threading.Thread(target=lambda: (c.sendall(data), c.shutdown(socket.SHUT_WR)), daemon=True)
    w.start()
    got = bytearray()
    while len(got) <= len(data):
        d = c.recv(1 << 20)
        if not d:
            break
        got += d
    w.join(T)
    if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
        fail("SCM_RIGHTS connection %d: %d of %d bytes back, content differs" % (i, len(got), len(data)))
    c.close()
    passed += len(data)
_, st = os.waitpid(pid, 0)
if st != 0:
    fail("the SCM_RIGHTS worker failed (status %d)" % st)
print("ok: a connection carried verified data before and after 21 subprocesses; "
      "%d connections handed to cat children echoed %d bytes, verified, and ended, in %.2f s; "
      "%d handed to a worker over SCM_RIGHTS echoed %d bytes, verified"
      % (args.conns, moved, t_cat, args.conns, passed), flush=True)
