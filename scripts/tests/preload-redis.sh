#!/usr/bin/env bash
# preload-redis: redis-server and redis-benchmark under libexsock.so. A few thousand requests
# of several commands (pipelined and not, 20 clients), no errors; redis-cli SET/GET round trip
# with a checked value. Runs plain and with EXSOCK_TRACK=all.
# timeout: 180
. "$(dirname "$0")/../lib/common.sh"

need_cmd redis-server redis-server
need_cmd redis-benchmark redis-tools
need_cmd redis-cli redis-tools
need_cmd python3

say "building libexsock.so"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
run=$EXSOCK_ROOT/scripts/exsock-run  # a path, not a function: "&" and timeout must exec it

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
check_log() { # FILE WHAT...
  local f=$1; shift
  [ -s "$f" ] || fail "no EXSOCK_LOG output in $f: library not active?"
  for w in "$@"; do grep -q -- "$w" "$f" || fail "$f lacks '$w'"; done
}

for mode in plain track; do
  track=""; [ "$mode" = track ] && track=all
  export EXSOCK_TRACK=$track
  port=$(free_port)
  say "redis-server ($mode) on 127.0.0.1:$port"
  mkdir -p "$tmp/$mode"
  EXSOCK_LOG=debug:"$tmp/server-$mode.log" "$run" redis-server --port "$port" --bind 127.0.0.1 \
    --save '' --appendonly no --daemonize no --dir "$tmp/$mode" --logfile "$tmp/redis-$mode.log" &
  spid=$!; pids+=("$spid")
  wait_port 127.0.0.1 "$port" 20 || { cat "$tmp/redis-$mode.log" >&2; fail "redis-server did not start"; }

  value="exsock-$mode-$RANDOM-$$"
  [ "$(timeout 10 "$run" redis-cli -h 127.0.0.1 -p "$port" SET exsock:key "$value")" = OK ] || fail "SET"
  [ "$(timeout 10 "$run" redis-cli -h 127.0.0.1 -p "$port" GET exsock:key)" = "$value" ] || fail "GET returned another value"

  for pipeline in 1 16; do
    EXSOCK_LOG=debug:"$tmp/bench-$mode.log" timeout 60 "$run" redis-benchmark -h 127.0.0.1 -p "$port" \
      -n 5000 -c 20 -P "$pipeline" -q -t ping,set,get,incr,lpush,lpop,mset --csv >"$tmp/bench.csv" 2>"$tmp/bench.err" \
      || { cat "$tmp/bench.err" "$tmp/bench.csv" >&2; fail "redis-benchmark -P $pipeline ($mode) failed"; }
    if grep -qiE 'error|refused|reset' "$tmp/bench.err" "$tmp/bench.csv"; then
      cat "$tmp/bench.err" "$tmp/bench.csv" >&2; fail "redis-benchmark -P $pipeline ($mode) reported errors"
    fi
    rows=$(grep -c '^"[A-Z]' "$tmp/bench.csv" || true)
    [ "$rows" -ge 7 ] || { cat "$tmp/bench.csv" >&2; fail "redis-benchmark -P $pipeline ($mode): $rows result rows, expected 7+"; }
    say "redis-benchmark -P $pipeline ($mode): $(awk -F, 'NR>1 { n=$1; r=$2; gsub(/"/,"",n); gsub(/"/,"",r); printf "%s %d/s  ", n, r }' "$tmp/bench.csv")"
    if [ "$pipeline" = 1 ]; then
      # Unpipelined, INCR runs exactly -n times: every request must have arrived once.
      incr=$(timeout 10 "$run" redis-cli -h 127.0.0.1 -p "$port" GETDEL counter:__rand_int__)
      [ "$incr" = 5000 ] || fail "INCR counter is '$incr', expected 5000 (lost or repeated requests?)"
    fi
  done

  kill "$spid"; wait "$spid" 2>/dev/null || true
  check_log "$tmp/server-$mode.log" "listen(" "accept("
  check_log "$tmp/bench-$mode.log" "connect("
  [ "$mode" = track ] && check_log "$tmp/server-$mode.log" "[tracked]"
done

echo "PASS: preload-redis (redis-server + redis-benchmark, 5000 requests per test, plain and tracked)"
