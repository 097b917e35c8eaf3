#!/usr/bin/env bash
# apps-fork: unmodified forking servers over iWARP, switched by EXSOCK_RULES only. Each hands an
# accepted DDP socket to a child and closes its own copy at once; the connection must live on
# with the child (served by the parent's engine, docs/engine.md "fork") and end when the child
# closes it, as a TCP socket does. Python's socketserver.ForkingTCPServer (test-apps/py/
# echo_server.py --fork) against the asyncio and blocking echo clients (half-close, 1 B .. 1 MiB
# messages); socat's fork server with EXEC:cat (the child forks cat on a pipe pair) and with
# EXEC:cat,nofork (the child execs cat on the socket itself), 8 MiB each way compared by sha256,
# one connection captured on lo and checked by scripts/wirecheck. Then the servers' descriptors:
# after 20 more connections each server holds no more fds than after the first (the engine let
# go of every connection its children closed), and exsock-stat shows a connection the server
# serves for its child, flagged `others`, while it lasts. Last, test-apps/py/spawn_child.py: Python's
# subprocess (vfork children that close_range and dup2 in the parent's memory before exec)
# beside live DDP connections, which must keep working, and connections handed to `cat`
# children as their stdin/stdout (verified echo, then EOF) or to a worker over SCM_RIGHTS.
# timeout: 180
. "$(dirname "$0")/apps-lib.bash"

need_cmd socat socat
need_cmd sha256sum coreutils

py=$EXSOCK_ROOT/test-apps/py
pyname=$(basename "$(readlink -f "$(command -v python3)")")

# fds PID: how many descriptors the process has open
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# fds_at_most PID N: the process has at most N descriptors open
fds_at_most() { [ "$(fds "$1")" -le "$2" ]; }

# leak_check NAME PID BASE: after the clients, PID's descriptors come back to BASE (bounded: the
# children's closes reach the parent's engine as hang-ups, each then closes its connection)
leak_check() {
  if wait_for "$1: descriptors back to $3" 20 "$2" fds_at_most "$2" "$3"; then
    ok "$1: the server holds $(fds "$2") descriptors after 20 more connections, as after the first"
  else
    fail "$1: the server holds $(fds "$2") descriptors after 20 more connections, $3 after the first"
  fi
}

say "socketserver.ForkingTCPServer on 127.0.0.1 (one child per connection)"
port=$(free_port)
EXSOCK_RULES="use ddp tcp_server 127.0.0.1:$port" EXSOCK_LOG=debug:"$tmp/py-server.log" \
  "$run" python3 "$py/echo_server.py" --fork --port "$port" > "$tmp/py-server.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "forking echo server on $port" 20 "$spid" listening "$port" || { cat "$tmp/py-server.out"; die "server did not start"; }
cli_rules="use ddp tcp_client 127.0.0.1:$port program $pyname"
out=$(EXSOCK_RULES=$cli_rules timeout 60 "$run" python3 "$py/echo_client.py" --port "$port" --blocking) \
  || fail "blocking client failed: $out"
[[ $out == ok:* ]] && ok "blocking client: ${out#ok: }"
base=$(fds "$spid")
out=$(EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/py-client.log" timeout 90 "$run" python3 "$py/echo_client.py" \
  --port "$port" --conns 8 --rounds 2 --bulk 2) || fail "asyncio client (8 connections) failed: $out"
[[ $out == ok:* ]] && ok "asyncio client against the forking server: ${out#ok: }"
ddp_used "asyncio client" "$tmp/py-client.log" 8
for i in $(seq 12); do
  out=$(EXSOCK_RULES=$cli_rules timeout 60 "$run" python3 "$py/echo_client.py" --port "$port" --rounds 1 --bulk 1) \
    || { fail "client $i failed: $out"; break; }
done
leak_check "ForkingTCPServer" "$spid" "$base"
stop_pid "$spid"
ddp_used "forking server" "$tmp/py-server.log" 21
grep -q "connection error\|Traceback" "$tmp/py-server.out" && { cat "$tmp/py-server.out"; fail "the server saw errors"; }

head -c $((8 << 20)) /dev/urandom > "$tmp/in.bin"
want=$(sha256sum < "$tmp/in.bin")
# socat_round NAME PORT: 8 MiB through the echo server at PORT, compared by sha256
socat_round() {
  local got rc=0
  EXSOCK_RULES="use ddp tcp_client 127.0.0.1:$2" EXSOCK_LOG=debug:"$tmp/$1-client.log" timeout 30 \
    "$run" socat -b 65536 -t 10 - "TCP:127.0.0.1:$2" < "$tmp/in.bin" > "$tmp/$1.out" 2> "$tmp/$1-client.err" || rc=$?
  got=$(sha256sum < "$tmp/$1.out")
  if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
    fail "$1: socat client rc $rc, $(stat -c %s "$tmp/$1.out") of $((8 << 20)) bytes back, sha256 ${got%% *}"
    sed 's/^/    /' "$tmp/$1-client.err" | tail -n 5
    return 1
  fi
}

# stat_check PID PORT: while a client keeps a connection to the socat server PID open (its
# input a fifo held open here), exsock-stat shows that connection in the server, flagged
# `others` (served for the child, the server's own fd closed); after the client ends, none
stat_check() {
  local out cpid
  mkfifo "$tmp/hold"
  EXSOCK_RULES="use ddp tcp_client 127.0.0.1:$2" timeout 60 "$run" socat - "TCP:127.0.0.1:$2" \
    < "$tmp/hold" > "$tmp/hold.out" 2>&1 &
  cpid=$!; pids+=("$cpid")
  exec 3> "$tmp/hold"
  echo "held open" >&3
  wait_for "the held connection's echo" 20 "$cpid" grep -q "held open" "$tmp/hold.out" \
    || fail "socat fork: the held connection echoed nothing"
  out=$("$STAT" "$1" 2>&1)
  if grep -q "1 DDP socket" <<< "$out" && grep -q "bytes in: .* others" <<< "$out"; then
    ok "exsock-stat shows the connection the server serves for its child: $(grep -o 'fd [0-9]* *RTS.*' <<< "$out" | head -n 1)"
  else
    fail "exsock-stat of the socat server while its child serves a connection:"; sed 's/^/    /' <<< "$out"
  fi
  exec 3>&-
  wait_pid "$cpid" 20 || fail "socat fork: the held client did not end"
  wait_for "exsock-stat to show no DDP socket" 20 "$1" \
    bash -c '"$0" "$1" | grep -q "0 DDP sockets"' "$STAT" "$1" \
    || fail "socat fork: exsock-stat still shows a socket after the client ended: $("$STAT" "$1" 2>&1 | head -n 3)"
}

for mode in fork nofork; do
  exec_opt=EXEC:cat; [ $mode = nofork ] && exec_opt=EXEC:cat,nofork
  say "socat TCP-LISTEN:PORT,fork $exec_opt"
  port=$(free_port)
  EXSOCK_RULES="use ddp tcp_server 127.0.0.1:$port program socat" EXSOCK_LOG=debug:"$tmp/socat-$mode.log" \
    "$run" socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" "$exec_opt" > "$tmp/socat-$mode.out" 2>&1 &
  spid=$!; pids+=("$spid")
  wait_for "socat on $port" 20 "$spid" listening "$port" || { cat "$tmp/socat-$mode.out"; die "socat did not start"; }
  if [ $mode = fork ]; then start_capture "socat-$mode" "$port"; fi
  socat_round "socat-$mode-1" "$port" && ok "socat $mode: 8 MiB echoed through the child, sha256 equal"
  if [ $mode = fork ]; then stop_capture "socat-$mode"; wire_check "socat-$mode" "$port"; fi
  ddp_used "socat client" "$tmp/socat-$mode-1-client.log" 1
  base=$(fds "$spid")
  n=0
  for i in $(seq 20); do
    out=$(printf 'round %d of socat %s\n' "$i" "$mode" | EXSOCK_RULES="use ddp tcp_client 127.0.0.1:$port" \
      timeout 20 "$run" socat -t 10 - "TCP:127.0.0.1:$port" 2>&1) || { fail "socat $mode: round $i: $out"; break; }
    [ "$out" = "round $i of socat $mode" ] || { fail "socat $mode: round $i echoed '$out'"; break; }
    n=$((n + 1))
  done
  [ $n -eq 20 ] && ok "socat $mode: 20 more short connections echoed"
  leak_check "socat $mode" "$spid" "$base"
  if [ $mode = fork ]; then stat_check "$spid" "$port"; fi
  stop_pid "$spid"
  ddp_used "socat $mode server" "$tmp/socat-$mode.log" 21
done

say "subprocesses of a program with DDP sockets (vfork children: close_range, dup2, exec)"
sport=$(free_port)
out=$(EXSOCK_RULES="use ddp tcp_server 127.0.0.1:$sport; use ddp tcp_client 127.0.0.1:$sport" \
  EXSOCK_LOG=debug:"$tmp/spawn.log" timeout 90 "$run" python3 "$py/spawn_child.py" --port "$sport") \
  || fail "spawn_child failed: $out"
[[ $out == ok:* ]] && ok "subprocess: ${out#ok: }"
ddp_used "spawn_child" "$tmp/spawn.log" 10

finish "apps-fork (forking servers: socketserver.ForkingTCPServer, socat fork with EXEC:cat and nofork; Python subprocesses; over iWARP)"
