#!/usr/bin/env bash
# apps-dual: the dual-mode listener. One port, one listener switched to DDP mode by a rule,
# serving an iWARP client and a plain TCP client (no library) at the same time:
#   A. a blocking, threaded echo server (test-apps/py/echo_server.py --threads): an asyncio
#      client under a DDP rule and a plain asyncio client run concurrently; both must get every
#      byte echoed; the server's EXSOCK_LOG must classify one connection as DDP by its MPA
#      Request and the other as plain TCP by its first bytes. The iWARP client binds a known
#      local port, and that connection alone is captured: scripts/wirecheck must pass.
#   B. a server that speaks first (--greet, asyncio: non-blocking listener): a plain client
#      that waits for the greeting before sending anything must still be served (after the
#      TCP_DEFER_ACCEPT deferral, EXSOCK_DUAL_DEFER_S=1), as plain TCP; an iWARP client too.
# timeout: 180
. "$(dirname "$0")/apps-lib.bash"

py=$EXSOCK_ROOT/test-apps/py
port=$(free_port)
say "A. threaded (blocking) echo server on 127.0.0.1:$port, dual-mode listener"
EXSOCK_RULES="use ddp tcp_server 127.0.0.1:$port" EXSOCK_LOG=debug:"$tmp/a-server.log" \
  "$run" python3 "$py/echo_server.py" --threads --port "$port" > "$tmp/a-server.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "echo server on $port" 20 "$spid" listening "$port" || { cat "$tmp/a-server.out"; die "echo server did not start"; }
cport=$(free_port)
start_capture dual "$cport"
EXSOCK_RULES="use ddp tcp_client 127.0.0.1:$port" EXSOCK_LOG=debug:"$tmp/a-ddp.log" timeout 90 "$run" python3 \
  "$py/echo_client.py" --port "$port" --bind "$cport" --rounds 2 --bulk 2 > "$tmp/a-ddp.out" 2>&1 &
dpid=$!; pids+=("$dpid")
timeout 90 python3 "$py/echo_client.py" --port "$port" --conns 2 --rounds 3 --bulk 16 > "$tmp/a-plain.out" 2>&1 &
ppid=$!; pids+=("$ppid")
wait_pid "$dpid" 100 && ok "iWARP client: $(cat "$tmp/a-ddp.out")" || fail "iWARP client: $(cat "$tmp/a-ddp.out")"
wait_pid "$ppid" 100 && ok "plain client: $(cat "$tmp/a-plain.out")" || fail "plain client: $(cat "$tmp/a-plain.out")"
stop_capture dual
stop_pid "$spid"
ddp_used "iWARP client" "$tmp/a-ddp.log" 1
n_ddp=$(log_count "$tmp/a-server.log" ": DDP (dual: the client sent an MPA Request)")
n_plain=$(grep -c ': plain TCP (dual: first bytes are not an MPA Request' "$tmp/a-server.log" || true)
[ "$n_ddp" = 1 ] && [ "$n_plain" = 2 ] && ok "server: 1 connection classified DDP (MPA Request), 2 plain TCP (first bytes)" \
  || { grep 'mode:' "$tmp/a-server.log" | sed 's/^/    /'; fail "server: expected 1 DDP and 2 plain verdicts, got $n_ddp and $n_plain"; }
wire_check dual "$cport" 1

port=$(free_port)
say "B. asyncio server that speaks first on 127.0.0.1:$port (non-blocking dual-mode listener)"
EXSOCK_RULES="use ddp tcp_server *:$port" EXSOCK_DUAL_DEFER_S=1 EXSOCK_LOG=debug:"$tmp/b-server.log" \
  "$run" python3 "$py/echo_server.py" --greet --port "$port" > "$tmp/b-server.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "greeting server on $port" 20 "$spid" listening "$port" || { cat "$tmp/b-server.out"; die "greeting server did not start"; }
out=$(timeout 30 python3 "$py/echo_client.py" --port "$port" --greet --rounds 1 --bulk 1) || fail "plain client of a server-speaks-first protocol: $out"
[[ $out == *ok:* ]] && ok "plain client waiting for the greeting: $(echo "$out" | tr '\n' ' ')"
out=$(EXSOCK_RULES="use ddp tcp_client 127.0.0.1:$port" EXSOCK_LOG=debug:"$tmp/b-ddp.log" timeout 30 "$run" python3 \
  "$py/echo_client.py" --port "$port" --greet --rounds 1 --bulk 1) || fail "iWARP client of the greeting server: $out"
[[ $out == *ok:* ]] && ok "iWARP client with the greeting: $(echo "$out" | tr '\n' ' ')"
ddp_used "iWARP client (greeting)" "$tmp/b-ddp.log" 1
stop_pid "$spid"
grep -qE ': plain TCP \(dual: (no bytes yet and the listener is non-blocking|the client closed|no bytes within)' "$tmp/b-server.log" \
  && ok "server: the silent client was classified plain TCP" || { grep 'mode:' "$tmp/b-server.log" | sed 's/^/    /'; fail "server: no plain verdict for the silent client"; }
[ "$(log_count "$tmp/b-server.log" ": DDP (dual: the client sent an MPA Request)")" = 1 ] || fail "server: expected one DDP verdict"
finish "apps-dual (one dual-mode listener: iWARP and plain clients at the same time; server-speaks-first)"
