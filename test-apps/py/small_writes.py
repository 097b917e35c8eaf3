#!/usr/bin/env python3
"""small_writes: an unmodified program that streams small writes with Nagle's algorithm on.

A plain blocking client (no TCP_NODELAY: the default of a TCP socket) connects to a server
thread over 127.0.0.1 (both ends DDP when run under libexsock.so with rules for the port):

1. TCP_NODELAY reads 0 on both ends, as on a TCP socket.
2. The client writes --writes messages of random sizes (1..--max bytes, a seeded pattern), then
   shuts down its side; the server reads to EOF and sends back the SHA-256 of what it read and
   its length; the client compares them with its own.
3. Request-response with one write per message each way (--rounds round trips of 1..200 bytes,
   content checked): Nagle's algorithm must not hold a message (no acknowledgement is awaited
   when nothing small is unacknowledged), so it finishes within --rr-bound seconds (a held
   message costs the peer's delayed-ACK timer, 40 ms or more, per round trip).
4. TCP_NODELAY set to 1 by the client reads back 1.

Prints "ok: ..." and exits 0, or says what failed and exits 1.
Used by scripts/tests/apps-sockperf.sh.
"""
import argparse
import hashlib
import random
import socket
import struct
import sys
import threading
import time


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += b
    return bytes(buf)


def nodelay(s):
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def server(lst, rounds, result):
    try:
        srv, _ = lst.accept()
        srv.settimeout(60)
        result["server_nodelay"] = nodelay(srv)
        h = hashlib.sha256()
        total = 0
        while True:
            b = srv.recv(65536)
            if not b:
                break
            h.update(b)
            total += len(b)
        srv.sendall(h.digest() + struct.pack("!Q", total))
        srv.close()
        # request-response on a second connection: echo each message as one write
        rr, _ = lst.accept()
        rr.settimeout(60)
        for _ in range(rounds):
            n = struct.unpack("!H", recv_exact(rr, 2))[0]
            body = recv_exact(rr, n)
            rr.sendall(struct.pack("!H", n) + body[::-1])
        rr.close()
        result["server"] = "done"
    except Exception as e:  # reported by the client side
        result["server"] = f"server: {e!r}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--writes", type=int, default=50_000)
    ap.add_argument("--max", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--rr-bound", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=12345)
    a = ap.parse_args()

    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", a.port))
    lst.listen(4)
    result = {}
    t = threading.Thread(target=server, args=(lst, a.rounds, result), daemon=True)
    t.start()

    cli = socket.create_connection(("127.0.0.1", a.port), timeout=60)
    if nodelay(cli) != 0:
        print(f"FAIL: TCP_NODELAY on a new client socket reads {nodelay(cli)}, expected 0 (as TCP)")
        return 1
    rng = random.Random(a.seed)
    h = hashlib.sha256()
    total = 0
    t0 = time.monotonic()
    for i in range(a.writes):
        n = rng.randint(1, a.max)
        msg = bytes(((i + j) * 31 + 7) & 0xFF for j in range(n))
        cli.sendall(msg)
        h.update(msg)
        total += n
    cli.shutdown(socket.SHUT_WR)
    reply = recv_exact(cli, 40)
    stream_s = time.monotonic() - t0
    cli.close()
    if reply[:32] != h.digest() or struct.unpack("!Q", reply[32:])[0] != total:
        got = struct.unpack("!Q", reply[32:])[0]
        print(f"FAIL: the server read {got} bytes with another digest; {total} bytes were written")
        return 1

    rr = socket.create_connection(("127.0.0.1", a.port), timeout=60)
    t1 = time.monotonic()
    for i in range(a.rounds):
        n = rng.randint(1, 200)
        body = bytes(rng.getrandbits(8) for _ in range(n))
        rr.sendall(struct.pack("!H", n) + body)
        m = struct.unpack("!H", recv_exact(rr, 2))[0]
        back = recv_exact(rr, m)
        if m != n or back != body[::-1]:
            print(f"FAIL: round {i}: the echo differs ({m} bytes for {n})")
            return 1
    rr_s = time.monotonic() - t1
    rr.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    set_back = nodelay(rr)
    rr.close()
    t.join(30)
    if result.get("server") != "done":
        print(f"FAIL: {result.get('server', 'server thread did not finish')}")
        return 1
    if result.get("server_nodelay") != 0:
        print(f"FAIL: TCP_NODELAY on an accepted socket reads {result.get('server_nodelay')}, expected 0")
        return 1
    if set_back != 1:
        print(f"FAIL: TCP_NODELAY set to 1 reads back {set_back}")
        return 1
    if rr_s > a.rr_bound:
        print(f"FAIL: {a.rounds} request-response rounds took {rr_s:.2f} s (bound {a.rr_bound} s): "
              "messages held by Nagle's algorithm?")
        return 1
    print(f"ok: {a.writes} writes, {total} bytes in {stream_s:.2f} s, digest equal; "
          f"{a.rounds} request-response rounds in {rr_s * 1000:.0f} ms; TCP_NODELAY 0 then 1 as TCP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
