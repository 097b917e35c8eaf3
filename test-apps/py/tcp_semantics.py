#!/usr/bin/env python3
"""TCP semantics a DDP socket must keep, tried as real programs use sockets.

Each case runs over loopback; run it under libexsock.so with the rules
`use ddp tcp_server 127.0.0.1:*; use ddp tcp_client 127.0.0.1:*` (--rules), or without rules and
with --sockopt, where every socket this program makes is switched with
setsockopt(SOL_DDP, DDP_MODE, 1) before connect/listen. Without the library it checks plain TCP
(the baseline: every case must pass there too).

Cases (all content-checked, all loops bounded in count and time):
  close      nonblocking and blocking connect, write/writev/sendfile of 1 B .. 1 MiB, close at
             once; the server reads to EOF and must get every byte (N iterations)
  backlog    connect() before accept() in one thread; then 100 clients connect at once to a
             server that accepts one connection per 100 ms: all connect within 1 s
  epollet    both ends registered EPOLLIN|EPOLLOUT|EPOLLET, both write: the next epoll_wait
             reports EPOLLIN|EPOLLOUT on each at once
  reader     a thread reads the socket (select + recv) while another is in connect(); the server
             accepts, sends a known message and closes: the reader sees only that message
  oob        send(MSG_OOB) gives EOPNOTSUPP on a DDP socket (TCP: sent)
  forked     a listener made before a fork, closed at once by the parent (as a daemon's parent
             that exits): the child waits with epoll, accepts and echoes; rounds in a row
Prints "ok: ..." and exits 0, or prints what failed and exits 1.
"""

import argparse
import errno
import hashlib
import os
import select
import socket
import sys
import threading
import time

SOL_DDP = 0x6578
DDP_MODE = 1
SOCKOPT = False


def tcp_socket(family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    if SOCKOPT:
        s.setsockopt(SOL_DDP, DDP_MODE, 1)
    return s


def listener(backlog=128):
    ls = tcp_socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(backlog)
    return ls


def payload(n, seed):
    out = bytearray()
    h = hashlib.sha256(b"%d:%d" % (seed, n)).digest()
    while len(out) < n:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:n])


def read_to_eof(conn, deadline):
    conn.settimeout(max(0.1, deadline - time.monotonic()))
    chunks = []
    while True:
        b = conn.recv(1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def nb_connect(addr):
    c = tcp_socket()
    c.setblocking(False)
    rc = c.connect_ex(addr)
    if rc not in (0, errno.EINPROGRESS):
        raise OSError(rc, "connect")
    p = select.poll()
    p.register(c, select.POLLOUT)
    if not p.poll(10_000):
        raise TimeoutError("nonblocking connect: not writable within 10 s")
    err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, "nonblocking connect")
    return c


def nb_write_all(c, data, how):
    """Writes all of data on a nonblocking socket (poll for POLLOUT when it is full)."""
    p = select.poll()
    p.register(c, select.POLLOUT)
    view = memoryview(data)
    tmpf = None
    if how == "sendfile":
        import tempfile
        tmpf = tempfile.TemporaryFile()
        tmpf.write(data)
        tmpf.flush()
    off = 0
    deadline = time.monotonic() + 20
    while off < len(data):
        try:
            if how == "write":
                n = os.write(c.fileno(), view[off:])
            elif how == "writev":
                mid = off + (len(data) - off) // 2
                n = os.writev(c.fileno(), [view[off:mid], view[mid:]])
            else:
                n = os.sendfile(c.fileno(), tmpf.fileno(), off, len(data) - off)
            off += n
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError("write: no room for 20 s")
            p.poll(1000)
    if tmpf:
        tmpf.close()


def case_close(n_iter, sizes):
    """Write then close at once; the server must read every byte."""
    ls = listener(1024)
    addr = ls.getsockname()
    results = {}
    lost = []
    stop = threading.Event()

    def server():
        ls.settimeout(30)
        while not stop.is_set():
            try:
                conn, _ = ls.accept()
            except socket.timeout:
                return
            except OSError:
                return
            with conn:
                try:
                    first = read_to_eof(conn, time.monotonic() + 20)
                except OSError as e:
                    first = ("error", e)
                results[len(results)] = first

    t = threading.Thread(target=server, daemon=True)
    t.start()
    i = 0
    kinds = [("nonblocking", "write"), ("nonblocking", "writev"),
             ("nonblocking", "sendfile"), ("blocking", "write")]
    expected = []
    for it in range(n_iter):
        size = sizes[it % len(sizes)]
        mode, how = kinds[it % len(kinds)]
        data = payload(size, it)
        expected.append((mode, how, data))
        if mode == "nonblocking":
            c = nb_connect(addr)
            nb_write_all(c, data, how)
        else:
            c = tcp_socket()
            c.connect(addr)
            c.sendall(data)
        c.close()
        i += 1
    # the server takes the connections in order (one client at a time)
    deadline = time.monotonic() + 60
    while len(results) < n_iter and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.01)  # bounded wait for the server thread's count
    stop.set()
    # (the connections reach accept in the order their set-up ends, which for DDP sockets
    # whose close runs in the background need not be the order they were made: each payload
    # is unique, so every one must have arrived whole on some connection)
    want = [hashlib.sha256(data).digest() for _, _, data in expected]
    arrived = {}
    odd = []
    for got in results.values():
        if isinstance(got, bytes):
            h = hashlib.sha256(got).digest()
            arrived[h] = arrived.get(h, 0) + 1
        else:
            odd.append(repr(got))
    for k, ((mode, how, data), h) in enumerate(zip(expected, want)):
        if arrived.get(h, 0) > 0:
            arrived[h] -= 1
        else:
            lost.append("#%d %s %s %d B: not received whole" % (k, mode, how, len(data)))
    wanted = set(want)
    odd += ["%d bytes" % len(g) for g in results.values()
            if isinstance(g, bytes) and hashlib.sha256(g).digest() not in wanted]
    if lost and odd:
        lost.append("received instead: " + ", ".join(odd[:5]))
    ls.close()
    if lost:
        raise AssertionError("%d of %d connections lost data: %s" % (
            len(lost), n_iter, "; ".join(lost[:5])))
    return "%d write+close (sizes %s), every byte delivered" % (n_iter, ",".join(map(str, sizes)))


def case_backlog(n_clients, accept_every):
    # 1. connect before accept, one thread
    ls = listener(128)
    addr = ls.getsockname()
    c = tcp_socket()  # blocking: connect() itself waits
    t0 = time.monotonic()
    c.connect(addr)
    c.settimeout(5)
    self_ms = (time.monotonic() - t0) * 1000
    c.sendall(b"hello")
    conn, _ = ls.accept()
    conn.settimeout(5)
    got = conn.recv(16)
    if got != b"hello":
        raise AssertionError("connect-before-accept: server read %r" % got)
    conn.close()
    c.close()
    # 2. many clients, slow acceptor
    ls2 = listener(n_clients + 28)
    addr2 = ls2.getsockname()
    stop = threading.Event()
    served = []

    def acceptor():
        ls2.settimeout(30)
        while not stop.is_set() and len(served) < n_clients:
            try:
                conn, _ = ls2.accept()
            except OSError:
                return
            conn.settimeout(10)
            try:
                msg = conn.recv(64)
                conn.sendall(msg)
            except OSError as e:
                msg = b"error %r" % e
            served.append(msg)
            conn.close()
            time.sleep(accept_every)  # the slow server under test: one accept per interval
    at = threading.Thread(target=acceptor, daemon=True)
    at.start()
    times = [None] * n_clients
    errors = []
    socks = [None] * n_clients

    def client(k):
        s = tcp_socket()
        # even clients block in connect() itself; odd ones connect as Python does with a
        # timeout (non-blocking connect + poll)
        s.settimeout(None if k % 2 == 0 else 20)
        t0 = time.monotonic()
        try:
            s.connect(addr2)
            times[k] = time.monotonic() - t0
            s.sendall(b"client %d" % k)
            socks[k] = s
        except OSError as e:
            errors.append("client %d: %r after %.1f s" % (k, e, time.monotonic() - t0))
            s.close()
    ths = [threading.Thread(target=client, args=(k,)) for k in range(n_clients)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(30)
    # every connected client gets its echo once the server gets to it
    bad = []
    for k, s in enumerate(socks):
        if s is None:
            continue
        try:
            s.settimeout(n_clients * accept_every + 15)
            got = s.recv(64)
            if got != b"client %d" % k:
                bad.append("client %d: echo %r" % (k, got))
        except OSError as e:
            bad.append("client %d: echo %r" % (k, e))
        s.close()
    stop.set()
    ls2.close()
    ls.close()
    if errors:
        raise AssertionError("%d of %d connects failed: %s" % (len(errors), n_clients, "; ".join(errors[:3])))
    slowest = max(times)
    if slowest > 1.0:
        raise AssertionError("slowest connect %.2f s (> 1 s) with a server accepting one per %d ms" % (
            slowest, accept_every * 1000))
    if bad:
        raise AssertionError("%d echoes wrong: %s" % (len(bad), "; ".join(bad[:3])))
    return "connect before accept %.1f ms; %d clients against one accept per %d ms: slowest connect %.0f ms, all echoed" % (
        self_ms, n_clients, accept_every * 1000, slowest * 1000)


def case_epollet(n_iter):
    for it in range(n_iter):
        ls = listener(4)
        c = nb_connect(ls.getsockname())
        ls.settimeout(5)
        s, _ = ls.accept()
        s.setblocking(False)
        ep = select.epoll()
        m = select.EPOLLIN | select.EPOLLOUT | select.EPOLLET
        ep.register(c.fileno(), m)
        ep.register(s.fileno(), m)
        # drain the initial EPOLLOUT edge on each
        first = dict(ep.poll(1))
        deadline = time.monotonic() + 5
        while len(first) < 2 and time.monotonic() < deadline:
            first.update(dict(ep.poll(0.1)))
        for fd in (c.fileno(), s.fileno()):
            if not first.get(fd, 0) & select.EPOLLOUT:
                raise AssertionError("iteration %d: fd %d never writable (%r)" % (it, fd, first))
        c.send(b"ping")
        s.send(b"pong")
        got = {}
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            for fd, ev in ep.poll(0.5):
                got.setdefault(fd, ev)
        want = select.EPOLLIN | select.EPOLLOUT
        for fd, name in ((c.fileno(), "client"), (s.fileno(), "server")):
            ev = got.get(fd, 0)
            if ev & want != want:
                raise AssertionError("iteration %d: %s's first event after both wrote is %#x, want EPOLLIN|EPOLLOUT (%#x)" % (
                    it, name, ev, want))
        if c.recv(16) != b"pong" or s.recv(16) != b"ping":
            raise AssertionError("iteration %d: wrong bytes" % it)
        ep.close()
        c.close()
        s.close()
        ls.close()
    return "%d rounds: EPOLLIN|EPOLLOUT in the first epoll_wait after both wrote" % n_iter


def case_reader(n_iter):
    ls = listener(64)
    addr = ls.getsockname()
    stop = threading.Event()

    def server():
        ls.settimeout(30)
        k = 0
        while not stop.is_set():
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            try:
                conn.sendall(b"greeting %d" % k)
            except OSError:
                pass
            conn.close()
            k += 1
    t = threading.Thread(target=server, daemon=True)
    t.start()
    bad = []
    connect_errors = 0
    for it in range(n_iter):
        c = tcp_socket()
        seen = []

        def reader():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    r, _, _ = select.select([c], [], [], 0.05)
                except (OSError, ValueError):
                    return
                if r:
                    try:
                        b = c.recv(1)
                    except BlockingIOError:
                        continue
                    except OSError:
                        return
                    if not b:
                        return
                    seen.append(b)
        rt = threading.Thread(target=reader)
        rt.start()
        try:
            c.connect(addr)
        except OSError:
            connect_errors += 1
        rt.join(15)
        c.close()
        got = b"".join(seen)
        if got and not got.startswith(b"greeting"):
            bad.append("iteration %d: reader saw %r" % (it, got[:20]))
        if len(bad) > 3:
            break
    stop.set()
    ls.close()
    if bad:
        raise AssertionError("protocol bytes reached the application: %s" % "; ".join(bad))
    if connect_errors:
        raise AssertionError("%d of %d connects failed while another thread read" % (connect_errors, n_iter))
    return "%d connects with a concurrent reader: no protocol byte seen" % n_iter


def case_oob(ddp):
    ls = listener(4)
    c = tcp_socket()
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    try:
        c.send(b"x", socket.MSG_OOB)
        res = "sent"
    except OSError as e:
        res = "EOPNOTSUPP" if e.errno == errno.EOPNOTSUPP else errno.errorcode.get(e.errno, str(e.errno))
    c.close()
    s.close()
    ls.close()
    want = "EOPNOTSUPP" if ddp else "sent"
    if res != want:
        raise AssertionError("send(MSG_OOB): %s, want %s" % (res, want))
    return "send(MSG_OOB): %s" % res


def case_forked(rounds):
    for rnd in range(rounds):
        ls = listener(16)
        addr = ls.getsockname()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ep = select.epoll()
                ep.register(ls.fileno(), select.EPOLLIN)
                if ep.poll(10):
                    conn, _ = ls.accept()
                    conn.settimeout(10)
                    data = b""
                    while len(data) < 1000:
                        b = conn.recv(4096)
                        if not b:
                            break
                        data += b
                    conn.sendall(data[::-1])
                    conn.close()
                    code = 0
            finally:
                os._exit(code)
        ls.close()  # the parent lets go of the listener (its acceptor with it)
        c = tcp_socket()
        c.settimeout(10)
        msg = payload(1000, rnd)
        try:
            c.connect(addr)
            c.sendall(msg)
            got = b""
            while len(got) < len(msg):
                b = c.recv(4096)
                if not b:
                    break
                got += b
        finally:
            c.close()
            _, status = os.waitpid(pid, 0)
        if got != msg[::-1]:
            raise AssertionError("round %d: the child echoed %d bytes, not the 1000 sent" % (rnd, len(got)))
        if status != 0:
            raise AssertionError("round %d: the child exited with %#x" % (rnd, status))
    return "%d rounds: a forked child served a listener its parent had closed" % rounds


def main():
    global SOCKOPT
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockopt", action="store_true", help="switch sockets with setsockopt(DDP_MODE)")
    ap.add_argument("--ddp", action="store_true", help="the sockets are DDP sockets (rules or --sockopt)")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("cases", nargs="*", default=["close", "backlog", "epollet", "reader", "oob", "forked"])
    a = ap.parse_args()
    SOCKOPT = a.sockopt
    ddp = a.ddp or a.sockopt
    out = []
    failed = []
    for name in a.cases:
        t0 = time.monotonic()
        try:
            if name == "close":
                r = case_close(a.iterations, [1, 7, 1000, 65536, 1 << 20])
            elif name == "backlog":
                r = case_backlog(a.clients, 0.1)
            elif name == "epollet":
                r = case_epollet(min(a.iterations, 200))
            elif name == "reader":
                r = case_reader(a.iterations)
            elif name == "oob":
                r = case_oob(ddp)
            elif name == "forked":
                r = case_forked(20)
            else:
                raise SystemExit("unknown case %s" % name)
            out.append("%s: %s (%.1f s)" % (name, r, time.monotonic() - t0))
        except Exception as e:  # a failed case is reported, the others still run
            failed.append("%s FAILED: %s" % (name, e))
    for line in out:
        print("  " + line, file=sys.stderr)
    if failed:
        print("\n".join(failed))
        sys.exit(1)
    print("ok: " + "; ".join(x.split(":")[0] for x in out))


if __name__ == "__main__":
    main()
