#!/usr/bin/env python3
"""Echo client for exsock's application tests: asyncio (epoll, non-blocking sockets) or
--blocking (plain blocking sockets), checking every byte that comes back.

Each of --conns concurrent connections (asyncio) runs the same script of edge cases:
  - messages of 1 B .. 1 MiB (and --bulk MiB in 64 KiB writes), each echoed back exactly;
  - bursts of many tiny writes before reading (readiness with data already queued);
  - a read that must wait (the reply is not there yet when the read starts);
  - half-close: write_eof after the last message, then the rest of the echo and EOF.
With --greet the server speaks first: the greeting line is read (and timed) before anything is
sent. --bind PORT binds the (single) client socket to a local port first (for a capture
filter). Prints one "ok" line with the byte count and exits 0, or prints the problem and
exits 1.
"""
import argparse
import asyncio
import os
import socket
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--conns", type=int, default=1)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--bulk", type=int, default=4, help="MiB of bulk data per connection")
ap.add_argument("--greet", action="store_true")
ap.add_argument("--bind", type=int, default=0)
ap.add_argument("--blocking", action="store_true")
args = ap.parse_args()

SIZES = [1, 2, 3, 7, 100, 511, 512, 513, 4096, 65535, 65536, 65537, 1 << 20]


def payload(n, seed):
    b = os.urandom(min(n, 4096))
    return (b * (n // len(b) + 1))[:n] if b else b""


async def conn_script(i):
    sock = None
    if args.bind:
        sock = socket.socket()
        sock.bind(("127.0.0.1", args.bind))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (args.host, args.port))
        reader, writer = await asyncio.open_connection(sock=sock)
    else:
        reader, writer = await asyncio.open_connection(args.host, args.port)
    total = 0
    if args.greet:
        t0 = time.monotonic()
        line = await asyncio.wait_for(reader.readline(), 10)
        if not line.startswith(b"HELLO"):
            raise RuntimeError("conn %d: greeting %r" % (i, line))
        print("conn %d: greeting after %.2f s" % (i, time.monotonic() - t0), flush=True)
    for r in range(args.rounds):
        for n in SIZES:
            msg = payload(n, r)
            writer.write(msg)
            await writer.drain()
            got = await asyncio.wait_for(reader.readexactly(n), 30)
            if got != msg:
                raise RuntimeError("conn %d: echo of %d bytes differs" % (i, n))
            total += n
        # a burst of tiny writes, then read them all back
        burst = [bytes([65 + k % 26]) * (1 + k % 5) for k in range(200)]
        for b in burst:
            writer.write(b)
        await writer.drain()
        want = b"".join(burst)
        got = await asyncio.wait_for(reader.readexactly(len(want)), 30)
        if got != want:
            raise RuntimeError("conn %d: burst echo differs" % i)
        total += len(want)
        # a read that starts before the reply can be there
        rd = asyncio.ensure_future(reader.readexactly(5))
        await asyncio.sleep(0)
        writer.write(b"later")
        await writer.drain()
        if await asyncio.wait_for(rd, 30) != b"later":
            raise RuntimeError("conn %d: late read differs" % i)
        total += 5
    # bulk, then half-close: the rest of the echo and EOF must still arrive
    bulk = payload(args.bulk << 20, 7)
    async def send_bulk():
        for off in range(0, len(bulk), 65536):
            writer.write(bulk[off:off + 65536])
            await writer.drain()
        writer.write_eof()
    sender = asyncio.ensure_future(send_bulk())
    got = await asyncio.wait_for(reader.read(), 60)  # until EOF
    await sender
    if got != bulk:
        raise RuntimeError("conn %d: bulk echo differs (%d of %d bytes)" % (i, len(got), len(bulk)))
    total += len(bulk)
    writer.close()
    await writer.wait_closed()
    return total


async def main_async():
    totals = await asyncio.gather(*(conn_script(i) for i in range(args.conns)))
    return sum(totals)


def main_blocking():
    s = socket.socket()
    if args.bind:
        s.bind(("127.0.0.1", args.bind))
    s.connect((args.host, args.port))
    f = s.makefile("rb")
    total = 0
    if args.greet:
        line = f.readline()
        if not line.startswith(b"HELLO"):
            raise RuntimeError("greeting %r" % line)
    for r in range(args.rounds):
        for n in SIZES:
            msg = payload(n, r)
            s.sendall(msg)
            got = f.read(n)
            if got != msg:
                raise RuntimeError("echo of %d bytes differs" % n)
            total += n
    s.shutdown(socket.SHUT_WR)
    if f.read() != b"":
        raise RuntimeError("bytes after the last echo")
    s.close()
    return total


t0 = time.monotonic()
try:
    total = main_blocking() if args.blocking else asyncio.run(main_async())
except Exception as e:  # noqa: BLE001 - the test wants one line saying what went wrong
    print("FAILED: %s: %s" % (type(e).__name__, e), flush=True)
    sys.exit(1)
print("ok: %d connection(s), %d bytes echoed in %.2f s" % (
    1 if args.blocking else args.conns, total, time.monotonic() - t0), flush=True)
