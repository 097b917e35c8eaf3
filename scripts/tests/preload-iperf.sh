#!/usr/bin/env bash
# preload-iperf: iperf3 server and client under libexsock.so (normal, -R, -P 4) and iperf2
# with -P 4. Each run must complete without error and move data; the library must be loaded
# in every process (EXSOCK_LOG shows their sockets). Runs plain and with EXSOCK_TRACK=all.
# timeout: 240
. "$(dirname "$0")/../lib/common.sh"

need_cmd iperf3
need_cmd iperf
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

# iperf3 -J result: sum of received bits/s and the error field, if any.
iperf3_result() {
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("error"): print("error", r["error"]); sys.exit(1)
bps = r["end"]["sum_received"]["bits_per_second"]
nbytes = r["end"]["sum_received"]["bytes"]
print("%.2f Gbit/s, %d bytes" % (bps / 1e9, nbytes))
sys.exit(0 if nbytes > 0 else 1)' "$1"
}

for mode in plain track; do
  track=""; [ "$mode" = track ] && track=all
  export EXSOCK_TRACK=$track

  port=$(free_port)
  say "iperf3 server ($mode) on 127.0.0.1:$port"
  EXSOCK_LOG=debug:"$tmp/iperf3-s-$mode.log" "$run" iperf3 -s -B 127.0.0.1 -p "$port" >"$tmp/iperf3-s-$mode.out" 2>&1 &
  spid=$!; pids+=("$spid")
  wait_port 127.0.0.1 "$port" 20 || fail "iperf3 server did not start"
  for args in "" "-R" "-P 4"; do
    # shellcheck disable=SC2086
    EXSOCK_LOG=debug:"$tmp/iperf3-c-$mode.log" timeout 30 "$run" iperf3 -c 127.0.0.1 -p "$port" -t 2 -J $args \
      >"$tmp/iperf3.json" 2>"$tmp/iperf3.err" || { cat "$tmp/iperf3.err" "$tmp/iperf3.json" >&2; fail "iperf3 $args ($mode) failed"; }
    res=$(iperf3_result "$tmp/iperf3.json") || fail "iperf3 $args ($mode): $res"
    say "iperf3 ${args:-(normal)} ($mode): $res"
  done
  kill "$spid"; wait "$spid" 2>/dev/null || true
  check_log "$tmp/iperf3-s-$mode.log" "listen(" "accept("
  check_log "$tmp/iperf3-c-$mode.log" "connect("
  [ "$mode" = track ] && check_log "$tmp/iperf3-s-$mode.log" "[tracked]"

  port=$(free_port)
  say "iperf2 server ($mode) on 127.0.0.1:$port"
  EXSOCK_LOG=debug:"$tmp/iperf2-s-$mode.log" "$run" iperf -s -B 127.0.0.1 -p "$port" >"$tmp/iperf2-s-$mode.out" 2>&1 &
  spid=$!; pids+=("$spid")
  wait_port 127.0.0.1 "$port" 20 || fail "iperf2 server did not start"
  EXSOCK_LOG=debug:"$tmp/iperf2-c-$mode.log" timeout 30 "$run" iperf -c 127.0.0.1 -p "$port" -t 2 -P 4 \
    >"$tmp/iperf2.out" 2>&1 || { cat "$tmp/iperf2.out" >&2; fail "iperf2 -P 4 ($mode) failed"; }
  sum=$(grep -E '^\[SUM\]' "$tmp/iperf2.out" | tail -1)
  [ -n "$sum" ] || { cat "$tmp/iperf2.out" >&2; fail "iperf2 -P 4 ($mode): no [SUM] line"; }
  echo "$sum" | grep -Eq '[0-9.]+ [KMG]?bits/sec' || fail "iperf2 ($mode): no rate in '$sum'"
  grep -qiE 'error|failed|refused' "$tmp/iperf2.out" && { cat "$tmp/iperf2.out" >&2; fail "iperf2 ($mode) reported an error"; }
  say "iperf2 -P 4 ($mode): $sum"
  [ "$(grep -c 'connect(' "$tmp/iperf2-c-$mode.log")" -ge 4 ] || fail "iperf2 client log: fewer than 4 connects"
  kill "$spid"; wait "$spid" 2>/dev/null || true
  check_log "$tmp/iperf2-s-$mode.log" "listen(" "accept("
done

echo "PASS: preload-iperf (iperf3 normal, -R, -P 4; iperf2 -P 4; plain and tracked)"
