#!/usr/bin/env python3
"""signal_wait: a Python signal handler interrupts blocking calls on DDP sockets.

The SIGALRM handler is installed before the process has a DDP socket (the library puts it
under its trampoline when its engine starts: docs/engine.md, "Signal handlers"); it raises an
exception, which Python lets out of the interrupted call. A blocking accept() on a DDP
listener and a blocking recv() on a connected DDP socket are each interrupted by an alarm
0.3 s later, well before a 3 s bound; the connection still carries data both ways afterwards
(content checked). Prints "ok: ..." and exits 0, or says what failed and exits 1. Run under
libexsock.so with rules that make both sides DDP (scripts/tests/apps-python.sh).
"""
import argparse
import signal
import socket
import sys
import threading
import time


class Alarm(Exception):
    pass


def on_alarm(sig, frame):
    raise Alarm()


def interrupted(what, call):
    """Runs call() with an alarm 0.3 s ahead; returns the seconds until the handler ended it."""
    t0 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        call()
    except Alarm:
        return time.monotonic() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    sys.exit(f"FAIL: {what} returned instead of being interrupted")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args()
    signal.signal(signal.SIGALRM, on_alarm)
    l = socket.socket()
    l.bind(("127.0.0.1", a.port))
    l.listen(4)
    # Blocking sockets (no Python timeout, which would wait in poll instead): the bound on a
    # handler that never runs is the caller's `timeout`.
    t_accept = interrupted("accept", l.accept)
    box = {}
    th = threading.Thread(target=lambda: box.setdefault(
        "c", socket.create_connection(("127.0.0.1", a.port), timeout=5)))
    th.start()
    s, _ = l.accept()
    th.join(5)
    c = box.get("c")
    if c is None:
        sys.exit("FAIL: the client did not connect")
    c.sendall(b"before" * 100)
    got = b""
    while len(got) < 600:
        got += s.recv(600 - len(got))
    if got != b"before" * 100:
        sys.exit("FAIL: content before the signal differs")
    t_recv = interrupted("recv", lambda: s.recv(10))
    c.sendall(b"after" * 100)
    got = b""
    while len(got) < 500:
        got += s.recv(500 - len(got))
    s.sendall(got)
    back = b""
    c.settimeout(3)
    while len(back) < 500:
        back += c.recv(500 - len(back))
    if got != b"after" * 100 or back != got:
        sys.exit("FAIL: content after the signal differs")
    for x in (c, s, l):
        x.close()
    if max(t_accept, t_recv) > 2.0:
        sys.exit(f"FAIL: the handler ran late (accept {t_accept:.2f} s, recv {t_recv:.2f} s)")
    print(f"ok: a SIGALRM handler installed before the first DDP socket interrupted a blocking "
          f"accept after {t_accept:.2f} s and a blocking recv after {t_recv:.2f} s; "
          f"1,600 bytes checked around them")


if __name__ == "__main__":
    main()
