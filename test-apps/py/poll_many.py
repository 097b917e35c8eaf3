#!/usr/bin/env python3
"""poll_many: many DDP client sockets, each waited on alone with poll(), over one process.

Each of N client connections (N > 256) gets messages from the server side of the same process
and waits for them with select.poll() on its fd alone, so the library gives the first 256 of
them an epoll wait set of their own (docs/engine.md, "A poll of one DDP fd waits on the
socket's own epoll instance") and the rest wait the old way. Every message's content is
checked. Then: the process holds at most 2 + 256 epoll descriptors (the engine's, its DDP
listener's acceptor's and the wait sets), at least one wait set, and after every socket is
closed only the engine's and the acceptor's (within 5 s).
Prints "ok: ..." and exits 0, or says what failed and exits 1. Run under libexsock.so with
rules that make both sides DDP (scripts/tests/apps-python.sh).
"""
import argparse
import os
import select
import socket
import sys
import threading
import time

MAX_WAIT_SETS = 256
# epoll descriptors that are not wait sets: the engine's and the DDP listener's acceptor's
BASE = 2


def epoll_fds():
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            if "eventpoll" in os.readlink("/proc/self/fd/" + f):
                n += 1
        except OSError:
            pass  # (closed meanwhile: the listing's own fd)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.port))
    srv.listen(1024)
    accepted = []
    t = threading.Thread(target=lambda: accepted.extend(srv.accept()[0] for _ in range(a.conns)))
    t.start()
    clients = [socket.create_connection(("127.0.0.1", a.port), timeout=10) for _ in range(a.conns)]
    t.join(30)
    if len(accepted) != a.conns:
        print(f"accepted {len(accepted)} of {a.conns} connections")
        return 1
    for c in clients:
        c.settimeout(None)
    # accepted[i] is not necessarily clients[i]'s peer: pair them by port
    peer = {s.getpeername()[1]: s for s in accepted}
    pairs = [(c, peer[c.getsockname()[1]]) for c in clients]

    checked = 0
    for rnd in range(a.rounds):
        for i, (c, s) in enumerate(pairs):
            msg = (b"%d.%d:" % (rnd, i)) * (1 + (i % 40))
            s.sendall(msg)
            p = select.poll()
            p.register(c, select.POLLIN)
            got = b""
            while len(got) < len(msg):
                if not p.poll(5000):
                    print(f"round {rnd}, connection {i}: no data within 5 s")
                    return 1
                got += c.recv(65536)
            if got != msg:
                print(f"round {rnd}, connection {i}: content differs")
                return 1
            checked += 1
    open_eps = epoll_fds()
    if not BASE + 1 <= open_eps <= BASE + MAX_WAIT_SETS:
        print(f"{open_eps} epoll descriptors with {a.conns} sockets polled "
              f"(expected the engine's and 1 to {MAX_WAIT_SETS} wait sets)")
        return 1
    for c, s in pairs:
        c.close()
        s.close()
    deadline = time.monotonic() + 5
    closed_eps = epoll_fds()
    while closed_eps > BASE and time.monotonic() < deadline:
        time.sleep(0.05)  # (bounded: the sockets are freed as their closes complete)
        closed_eps = epoll_fds()
    if closed_eps > BASE:
        print(f"{closed_eps} epoll descriptors 5 s after every socket was closed")
        return 1
    print(f"ok: {checked} messages checked over {a.conns} connections, "
          f"{open_eps - BASE} wait sets while open, none after close")
    return 0


if __name__ == "__main__":
    sys.exit(main())
