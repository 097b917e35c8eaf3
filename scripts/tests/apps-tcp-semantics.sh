#!/usr/bin/env bash
# apps-tcp-semantics: what event-driven and threaded programs expect of a TCP socket, checked on
# DDP sockets (test-apps/py/tcp_semantics.py; content-checked, bounded):
#   close    write/writev/sendfile of 1 B .. 1 MiB on a nonblocking or blocking socket, then
#            close at once: the server reads every byte to EOF (1,000 connections)
#   backlog  connect() before accept() in one thread; 100 clients (half of them blocking in
#            connect itself) against a server that accepts one per 100 ms: all connected within
#            1 s, all echoed
#   epollet  both ends EPOLLIN|EPOLLOUT|EPOLLET, both write: EPOLLIN|EPOLLOUT in one epoll_wait
#   reader   another thread reads (select + recv) while connect() runs: never a protocol byte
#            (1,000 connections)
#   oob      send(MSG_OOB) says EOPNOTSUPP (docs/rules.md, URGENT DATA)
# and test-apps/py/exit_flush.py: bytes written just before exit(3), close+exit, an exec (the
# socket close-on-exec or kept, execv and execl) reach the peer whole; a stalled peer at exit
# gets a reset and the program's stderr says so.
# Each run three ways: plain TCP without the library (the baseline: the same cases must pass),
# switched by EXSOCK_RULES, and switched with setsockopt(SOL_DDP, DDP_MODE) by the program.
# timeout: 420
. "$(dirname "$0")/apps-lib.bash"

py=$EXSOCK_ROOT/test-apps/py/tcp_semantics.py
xf=$EXSOCK_ROOT/test-apps/py/exit_flush.py
iters=${EXSOCK_TCP_SEMANTICS_ITERATIONS:-1000}

say "the baseline: plain TCP, no library"
out=$(timeout 120 python3 "$py" --iterations "$iters" 2>"$tmp/tcp.err") \
  || { cat "$tmp/tcp.err"; fail "plain TCP: $out"; }
[[ $out == ok:* ]] && ok "plain TCP: ${out#ok: }"
out=$(timeout 120 python3 "$xf" 2>"$tmp/tcp-exit.err") \
  || { cat "$tmp/tcp-exit.err"; fail "plain TCP, exit/exec: $out"; }
[[ $out == ok:* ]] && ok "plain TCP, exit/exec: ${out#ok: }"

say "DDP sockets switched by rules"
out=$(EXSOCK_RULES='use ddp tcp_server 127.0.0.1:*; use ddp tcp_client 127.0.0.1:*' \
  EXSOCK_LOG=debug:"$tmp/rules.log" timeout 150 "$run" python3 "$py" --ddp --iterations "$iters" \
  2>"$tmp/rules.err") || { cat "$tmp/rules.err"; fail "rules: $out"; }
[[ $out == ok:* ]] && { sed 's/^/    /' "$tmp/rules.err"; ok "DDP by rules: ${out#ok: }"; }
ddp_used "tcp_semantics (rules)" "$tmp/rules.log" 1000
grep -q 'MPA answered in the background' "$tmp/rules.log" \
  || fail "rules: no listener answered MPA in the background"
out=$(EXSOCK_RULES='use ddp tcp_server 127.0.0.1:*; use ddp tcp_client 127.0.0.1:*' \
  timeout 150 "$run" python3 "$xf" --ddp 2>"$tmp/rules-exit.err") \
  || { cat "$tmp/rules-exit.err"; fail "rules, exit/exec: $out"; }
[[ $out == ok:* ]] && ok "DDP by rules, exit/exec: ${out#ok: }"

say "DDP sockets switched with setsockopt(DDP_MODE)"
out=$(timeout 150 "$run" python3 "$py" --sockopt --iterations "$iters" 2>"$tmp/sockopt.err") \
  || { cat "$tmp/sockopt.err"; fail "setsockopt: $out"; }
[[ $out == ok:* ]] && { sed 's/^/    /' "$tmp/sockopt.err"; ok "DDP by setsockopt: ${out#ok: }"; }
out=$(timeout 150 "$run" python3 "$xf" --sockopt 2>"$tmp/sockopt-exit.err") \
  || { cat "$tmp/sockopt-exit.err"; fail "setsockopt, exit/exec: $out"; }
[[ $out == ok:* ]] && ok "DDP by setsockopt, exit/exec: ${out#ok: }"

finish apps-tcp-semantics
