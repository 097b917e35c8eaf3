#!/usr/bin/env bash
# apps-python: an unmodified asyncio echo server and client (test-apps/py: epoll, non-blocking
# listener, non-blocking connect, edge cases of readiness: data already queued, reads that must
# wait, bursts of tiny writes, 1 B .. 1 MiB messages, half-close with write_eof) over iWARP,
# switched by EXSOCK_RULES only, with "program" rules. 8 concurrent connections must echo every
# byte; a blocking-socket client too; one connection is captured on lo and scripts/wirecheck
# must find the bytes inside FPDUs with good CRCs. Then test-apps/py/poll_many.py: 300 DDP
# connections in one process, each waited on alone with poll() (the first 256 get wait sets,
# all of them released when the sockets close). Then test-apps/py/signal_wait.py: a SIGALRM
# handler installed before the first DDP socket interrupts a blocking accept and a blocking recv.
# timeout: 180
. "$(dirname "$0")/apps-lib.bash"

py=$EXSOCK_ROOT/test-apps/py
port=$(free_port)
say "asyncio echo server on 127.0.0.1:$port"
EXSOCK_RULES="use ddp tcp_server *:$port program python3" EXSOCK_LOG=debug:"$tmp/server.log" \
  "$run" python3 "$py/echo_server.py" --port "$port" > "$tmp/server.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "echo server on $port" 20 "$spid" listening "$port" || { cat "$tmp/server.out"; die "echo server did not start"; }
pyname=$(basename "$(readlink -f "$(command -v python3)")")
cli_rules="use tcp tcp_client *:1-1023; use ddp tcp_client 127.0.0.1:$port program $pyname"

out=$(EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/client.log" timeout 90 "$run" python3 "$py/echo_client.py" \
  --port "$port" --conns 8 --rounds 3 --bulk 4) || fail "asyncio client (8 connections) failed: $out"
[[ $out == ok:* ]] && ok "asyncio echo over DDP: ${out#ok: }"
ddp_used "asyncio client" "$tmp/client.log" 8

out=$(EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/client-b.log" timeout 60 "$run" python3 "$py/echo_client.py" \
  --port "$port" --blocking) || fail "blocking client failed: $out"
[[ $out == ok:* ]] && ok "blocking client over DDP: ${out#ok: }"
ddp_used "blocking client" "$tmp/client-b.log" 1

say "300 connections in one process, each waited on alone with poll (wait sets, their cap, their release)"
mport=$(free_port)
out=$(EXSOCK_RULES="use ddp tcp_server 127.0.0.1:$mport; use ddp tcp_client 127.0.0.1:$mport" \
  timeout 90 "$run" python3 "$py/poll_many.py" --port "$mport" --conns 300) \
  || fail "poll_many failed: $out"
[[ $out == ok:* ]] && ok "poll of one fd each: ${out#ok: }"

say "a signal handler installed before the first DDP socket interrupts blocking accept and recv"
sport=$(free_port)
out=$(EXSOCK_RULES="use ddp tcp_server 127.0.0.1:$sport; use ddp tcp_client 127.0.0.1:$sport" \
  EXSOCK_LOG=debug:"$tmp/signal.log" timeout 30 "$run" python3 "$py/signal_wait.py" --port "$sport") \
  || fail "signal_wait failed (rc $?): $out"
[[ $out == ok:* ]] && ok "signals: ${out#ok: }"
ddp_used "signal_wait" "$tmp/signal.log" 2

say "one connection, captured on lo"
start_capture echo "$port"
out=$(EXSOCK_RULES=$cli_rules timeout 60 "$run" python3 "$py/echo_client.py" --port "$port" --rounds 1 --bulk 1) \
  || fail "captured client failed: $out"
stop_capture echo
wire_check echo "$port" 1

stop_pid "$spid"
ddp_used "asyncio server" "$tmp/server.log" 10
grep -q "connection error" "$tmp/server.out" && { cat "$tmp/server.out"; fail "the server saw connection errors"; }
finish "apps-python (asyncio echo server and clients over iWARP, readiness edge cases, wirecheck clean)"
