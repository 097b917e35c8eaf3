#!/usr/bin/env bash
# load [--full]: test-apps/load/xs-load — 1,000 concurrent DDP connections (CRC on) in one
# client process against one server process over 127.0.0.1, a seeded random mix of Sends,
# RDMA Writes and RDMA Reads with every byte verified, for 20 s (CI) or 120 s (--full, or
# LOAD_SECONDS=N). Both processes sample their RSS and fd count every LOAD_SAMPLE seconds
# (default 2 s in CI, 5 s with --full) and print them; each fails on any error and unless,
# over the steady state (after max(10 s, a quarter of the run)), the fd count is constant and
# RSS grows by less than 10%. LOAD_CONNS (default 1000) and LOAD_THREADS (client, default 4)
# change the shape.
# timeout: 300
. "$(dirname "$0")/../lib/common.sh"

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
seconds=${LOAD_SECONDS:-20}
sample=${LOAD_SAMPLE:-2}
if [ "${1:-}" = --full ]; then seconds=${LOAD_SECONDS:-120}; sample=${LOAD_SAMPLE:-5}; fi
conns=${LOAD_CONNS:-1000}
threads=${LOAD_THREADS:-4}

build_lib_and_apps load

tmp_and_server

# each DDP connection holds 5 fds in each process
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((conns * 5 + 64)) ] || fail "RLIMIT_NOFILE $(ulimit -n) too low for $conns connections"

say "$conns connections, $seconds s, client threads $threads, samples every $sample s"
"$run" "$apps/xs-load" -s -a 127.0.0.1 -p 0 -n "$conns" -T 2 -i "$sample" -t 30 > "$tmp/server.out" 2>&1 &
spid=$!
i=0
until grep -q 'listening on' "$tmp/server.out"; do
  i=$((i + 1)); [ $i -gt 400 ] && { cat "$tmp/server.out"; fail "the server did not listen"; }
  kill -0 "$spid" 2>/dev/null || { cat "$tmp/server.out"; fail "the server exited"; }
  sleep 0.05  # polling interval of a bounded wait for the listen line
done
port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$tmp/server.out")
rc=0
timeout $((seconds + 120)) "$run" "$apps/xs-load" -c 127.0.0.1 -p "$port" -n "$conns" -T "$threads" \
  -d "$seconds" -i "$sample" -t 30 > "$tmp/client.out" 2>&1 || rc=$?
src=0
# the server ends when every connection has ended (bounded)
for _ in $(seq 600); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done  # bounded wait for exit
kill "$spid" 2>/dev/null || true
wait "$spid" || src=$?
spid=
echo "--- client:"; cat "$tmp/client.out"
echo "--- server:"; cat "$tmp/server.out"
[ $rc -eq 0 ] || fail "client exited $rc"
[ $src -eq 0 ] || fail "server exited $src"
echo "PASS: load ($conns connections, $seconds s, zero errors, flat RSS and fd count)"
