#!/usr/bin/env python3
"""Echo server for exsock's application tests (scripts/tests/apps-python.sh, apps-dual.sh).

Every byte a client sends is sent back. Three ways to serve, all unmodified Python:
  (default)   asyncio: a non-blocking listener and non-blocking connections on epoll
  --threads   one blocking thread per connection behind a blocking accept() (socketserver)
  --fork      one child process per connection (socketserver.ForkingTCPServer: the parent
              closes its copy of the accepted socket at once, the child serves it)
--greet makes the server speak first: "HELLO <n>\\n" on every new connection before echoing
(a server-speaks-first protocol, for the dual-mode listener). Prints "listening on PORT" once
the listener is up, then runs until killed.
"""
import argparse
import asyncio
import socket
import socketserver
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--threads", action="store_true")
ap.add_argument("--fork", action="store_true")
ap.add_argument("--greet", action="store_true")
args = ap.parse_args()
count = 0


def greeting():
    global count
    count += 1
    return b"HELLO %d\n" % count


async def serve_conn(reader, writer):
    if args.greet:
        writer.write(greeting())
        await writer.drain()
    try:
        while True:
            data = await reader.read(256 * 1024)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError) as e:
        print("connection error:", e, file=sys.stderr)
    finally:
        writer.close()


async def main_asyncio():
    srv = await asyncio.start_server(serve_conn, args.host, args.port, backlog=128)
    print("listening on", args.port, flush=True)
    async with srv:
        await srv.serve_forever()


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        if args.greet:
            s.sendall(greeting())
        while True:
            data = s.recv(256 * 1024)
            if not data:
                break
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)


if args.fork:
    socketserver.ForkingTCPServer.allow_reuse_address = True
    with socketserver.ForkingTCPServer((args.host, args.port), Handler) as srv:
        print("listening on", args.port, flush=True)
        srv.serve_forever()
elif args.threads:
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer((args.host, args.port), Handler) as srv:
        print("listening on", args.port, flush=True)
        srv.serve_forever()
else:
    asyncio.run(main_asyncio())
