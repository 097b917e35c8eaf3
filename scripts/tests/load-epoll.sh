#!/usr/bin/env bash
# load-epoll: test-apps/load/xs-conns — one single-threaded epoll process per side streaming
# 64 KiB writes over n DDP connections (CRC on) for 2 s, every byte of every connection
# verified by the receiver and its count checked by the sender. The shapes cover the epoll
# paths of docs/engine.md "Readiness waits and the latency path": 1 connection (served inline,
# data held and reported by epoll_wait), 20 and 300 connections (epoll groups), and 20 again
# with every epoll set in a group from its first socket (EXSOCK_EPOLL_INLINE=0). On dfde626
# the 20-connection shape hung in one run of three (the lost-deadline race, docs/reliability.md);
# with that fix undone on the final code it passed three runs of three (the progress thread's
# wake-ups changed since), so this is coverage of the epoll paths under real traffic, not a
# reliable regression test for that race. xs-conns fails on any error, a content mismatch, or
# 20 s without progress.
# timeout: 240
. "$(dirname "$0")/../lib/common.sh"

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
build_lib_and_apps load

tmp_and_server
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# one_run LABEL N [ENV=VALUE...]: a server and a client of N connections, 2 s of streaming
one_run() {
  local label=$1 n=$2
  shift 2
  # (emptied here, not only by the background job's redirection: the wait below must not
  # find the previous run's "listening on" line and send the client to a closed port)
  : > "$tmp/server.out"
  env "$@" "$run" "$apps/xs-conns" -s -a 127.0.0.1 -p 0 -m ddp -t 20 > "$tmp/server.out" 2>&1 &
  spid=$!
  local i=0
  until grep -q 'listening on' "$tmp/server.out"; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$tmp/server.out"; fail "$label: the server did not listen"; }
    kill -0 "$spid" 2>/dev/null || { cat "$tmp/server.out"; fail "$label: the server exited"; }
    sleep 0.05  # polling interval of a bounded wait for the listen line
  done
  local port rc=0 src=0
  port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$tmp/server.out")
  timeout 60 env "$@" "$run" "$apps/xs-conns" -c 127.0.0.1 -p "$port" -m ddp -n "$n" -S 64K \
    -b 64G -T 2 -t 20 > "$tmp/client.out" 2>&1 || rc=$?
  timeout 30 tail --pid="$spid" -f /dev/null || true  # bounded wait for the server's exit
  kill "$spid" 2>/dev/null || true
  wait "$spid" || src=$?
  spid=
  local line
  line=$(grep '^xs-conns: mode=' "$tmp/client.out" | tr ' ' '\n' | grep -E '^(conns|bytes|MBps|errors)=' | tr '\n' ' ')
  if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
    echo "--- client:"; cat "$tmp/client.out"; echo "--- server:"; cat "$tmp/server.out"
    fail "$label: client exit $rc, server exit $src"
  fi
  printf 'ok   %-34s %s\n' "$label" "$line"
}

one_run "1 connection" 1
one_run "20 connections (epoll group)" 20
one_run "300 connections (epoll group)" 300
one_run "20 connections, groups from the first" 20 EXSOCK_EPOLL_INLINE=0
echo "PASS: load-epoll (xs-conns over DDP: 1, 20, 300 connections; every byte verified)"
