#!/usr/bin/env bash
# run-selftest.sh — what the xs-* programs can show without DDP support in libexsock.so:
#   * tcp modes of xs-pingpong and xs-bw end to end over 127.0.0.1 (server + client, exit codes);
#   * that a corrupted echo and a silent peer are detected (exit 1, bounded time);
#   * that every DDP program says "libexsock.so is not loaded" and exits 77 without the library;
#   * -h (exit 0) and bad usage (exit 2).
# With EXSOCK_LIB=/path/to/libexsock.so the tcp modes also run with the library preloaded
# (pass-through), and the DDP programs must still exit 77 while the library lacks the API.
#
# Usage: OUT=../target/test-apps ./run-selftest.sh      (make -C test-apps selftest)
# Every wait is bounded: servers and clients run under timeout(1), readiness is the server's
# "listening on ADDR:PORT" line, polled for at most 10 s.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../target/test-apps}
tmp=$(mktemp -d /tmp/xs-selftest.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

pass=0 fail=0
ok()  { pass=$((pass + 1)); printf 'ok   %s\n' "$*"; }
bad() { fail=$((fail + 1)); printf 'FAIL %s\n' "$*"; }

for p in xs-pingpong xs-bw xs-rdma xs-rping xs-transact; do
  [ -x "$OUT/$p" ] || { echo "missing $OUT/$p (make -C test-apps xs)"; exit 1; }
done

# start_server NAME PRELOAD CMD...: runs CMD in the background (timeout 120 s), waits for its
# "listening on" line and sets $port. Returns 1 if the line does not appear within 10 s.
start_server() {
  local name=$1 pre=$2; shift 2
  : >"$tmp/$name.srv"
  if [ -n "$pre" ]; then
    LD_PRELOAD=$pre timeout 120 "$@" >"$tmp/$name.srv" 2>&1 &
  else
    timeout 120 "$@" >"$tmp/$name.srv" 2>&1 &
  fi
  srv_pid=$!
  pids+=("$srv_pid")
  local i
  for ((i = 0; i < 200; i++)); do
    port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\) (.*/\1/p' "$tmp/$name.srv")
    [ -n "$port" ] && return 0
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.05 # bounded polling of the server's readiness line
  done
  return 1
}

# pair NAME PRELOAD "SERVER ARGS" "CLIENT ARGS" PROG: both must exit 0.
pair() {
  local name=$1 pre=$2 sargs=$3 cargs=$4 prog=$5
  # shellcheck disable=SC2086
  if ! start_server "$name" "$pre" "$OUT/$prog" -s -a 127.0.0.1 -p 0 $sargs; then
    bad "$name: server did not start"; cat "$tmp/$name.srv"; return
  fi
  local crc=0 src=0
  # shellcheck disable=SC2086
  if [ -n "$pre" ]; then
    LD_PRELOAD=$pre timeout 120 "$OUT/$prog" -c 127.0.0.1 -p "$port" $cargs >"$tmp/$name.cli" 2>&1 || crc=$?
  else
    timeout 120 "$OUT/$prog" -c 127.0.0.1 -p "$port" $cargs >"$tmp/$name.cli" 2>&1 || crc=$?
  fi
  wait "$srv_pid" || src=$?
  if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
    ok "$name"
    [ -n "${VERBOSE:-}" ] && cat "$tmp/$name.cli"
  else
    bad "$name (client exit $crc, server exit $src)"
    sed 's/^/  client: /' "$tmp/$name.cli"; sed 's/^/  server: /' "$tmp/$name.srv"
  fi
}

# expect_exit NAME CODE PATTERN CMD...: CMD (timeout 30 s) exits CODE and its output matches.
expect_exit() {
  local name=$1 code=$2 pat=$3; shift 3
  local rc=0
  timeout 30 "$@" >"$tmp/x.out" 2>&1 || rc=$?
  if [ "$rc" -eq "$code" ] && grep -Eq -- "$pat" "$tmp/x.out"; then
    ok "$name"
  else
    bad "$name (exit $rc, expected $code; output must match '$pat')"
    sed 's/^/  /' "$tmp/x.out"
  fi
}

run_tcp_pairs() {
  local pre=$1 tag=$2
  pair "pingpong tcp$tag" "$pre" "" "-S 1,3,64,4K,64K,1M,4M -n 20 -w 2" xs-pingpong
  pair "pingpong tcp range$tag" "$pre" "-m tcp" "-m tcp -S 1-128 -n 5 -w 0" xs-pingpong
  pair "bw tcp$tag" "$pre" "" "-S 1,100,5000,64K,1M,4M -W 8 -n 4 -w 1" xs-bw
  pair "bw tcp -V$tag" "$pre" "" "-S 7,4K,100000 -W 16 -n 3 -V" xs-bw
  pair "bw tcp -T 1$tag" "$pre" "" "-S 64K -W 32 -T 1 -w 0" xs-bw
}

echo "== tcp modes over 127.0.0.1"
run_tcp_pairs "" ""

echo "== error detection"
# A peer that echoes every message with one byte flipped: the client must report a mismatch.
cat >"$tmp/corrupt.py" <<'EOF'
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 0)); l.listen(1)
print("corrupt: listening on 127.0.0.1:%d (TCP)" % l.getsockname()[1], flush=True)
l.settimeout(20); c, _ = l.accept(); c.settimeout(20)
def rd(n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x: sys.exit(0)
        b += x
    return b
plan = rd(320)
c.sendall(bytes.fromhex("52454459"))  # READY
m = bytearray(rd(64)); m[17] ^= 0x40; c.sendall(bytes(m)); rd(1)
EOF
if start_server corrupt "" python3 "$tmp/corrupt.py"; then
  expect_exit "pingpong detects a corrupted echo" 1 "content mismatch at byte 17" \
    "$OUT/xs-pingpong" -c 127.0.0.1 -p "$port" -S 64 -n 1 -w 0 -t 5
else bad "corrupt server did not start"; fi
# A peer that accepts and never answers: bounded wait, ETIMEDOUT, exit 1.
cat >"$tmp/silent.py" <<'EOF'
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
print("silent: listening on 127.0.0.1:%d (TCP)" % l.getsockname()[1], flush=True)
l.settimeout(20); c, _ = l.accept(); c.settimeout(20)
try:
    while c.recv(65536): pass
except Exception: pass
EOF
if start_server silent "" python3 "$tmp/silent.py"; then
  t0=$(date +%s)
  expect_exit "bw times out on a silent peer (-t 1)" 1 "ETIMEDOUT" \
    "$OUT/xs-bw" -c 127.0.0.1 -p "$port" -S 64 -n 1 -t 1
  if [ $(( $(date +%s) - t0 )) -le 5 ]; then ok "... within 5 s"; else bad "timeout took too long"; fi
  kill "$srv_pid" 2>/dev/null
else bad "silent server did not start"; fi
expect_exit "connect to a closed port fails after -t" 1 "ECONNREFUSED" \
  "$OUT/xs-pingpong" -c 127.0.0.1 -p 1 -t 1

echo "== without the library (DDP programs exit 77 with a clear message)"
nolib="libexsock.so is not loaded: run under scripts/exsock-run"
check_nolib() {
  local tag=$1; shift
  local -a env=("$@")
  expect_exit "pingpong -m ddp client$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-pingpong" -c 127.0.0.1 -m ddp
  expect_exit "pingpong -m ext client$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-pingpong" -c 127.0.0.1 -m ext
  expect_exit "pingpong -m ddp server$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-pingpong" -s -m ddp
  expect_exit "bw -m write client$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-bw" -c 127.0.0.1 -m write
  expect_exit "bw -m ext server$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-bw" -s -m ext
  expect_exit "rdma client$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-rdma" -c 127.0.0.1
  expect_exit "rdma server$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-rdma" -s
  expect_exit "rping client$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-rping" -c -a 127.0.0.1 -C 1
  expect_exit "rping server$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-rping" -s -a 127.0.0.1
  expect_exit "transact client$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-transact" -c 127.0.0.1
  expect_exit "transact server$tag" 77 "$nolib" env "${env[@]}" "$OUT/xs-transact" -s
}
check_nolib "" -u LD_PRELOAD

echo "== usage"
for p in xs-pingpong xs-bw xs-rdma xs-rping xs-transact; do
  expect_exit "$p -h" 0 "usage|$p -s" "$OUT/$p" -h
done
expect_exit "pingpong: no role" 2 "either -s" "$OUT/xs-pingpong"
expect_exit "pingpong: size too big" 2 "out of range" "$OUT/xs-pingpong" -c x -S 1-8M
expect_exit "pingpong: bad size" 2 "bad size" "$OUT/xs-pingpong" -c x -S 12Q
expect_exit "pingpong: bad mode" 2 "unknown mode" "$OUT/xs-pingpong" -c x -m rdma
expect_exit "pingpong: write mode is bw only" 2 "unknown mode" "$OUT/xs-pingpong" -c x -m write
expect_exit "bw: window too big" 2 "out of range" "$OUT/xs-bw" -c x -W 5000
expect_exit "bw: bad -T" 2 "not a number" "$OUT/xs-bw" -c x -T 1s
expect_exit "rping: size below rping's minimum" 2 "Invalid size 16 \\(valid range is 26 to 65535\\)" "$OUT/xs-rping" -c -a x -S 16
expect_exit "rping: size above rping's maximum" 2 "Invalid size 65536" "$OUT/xs-rping" -c -a x -S 65536
expect_exit "rping: bad count" 2 "Invalid count" "$OUT/xs-rping" -c -a x -C -1
expect_exit "rping: no -s/-c" 2 "xs-rping -s" "$OUT/xs-rping" -a x
expect_exit "rping: unknown option" 2 "xs-rping -c" "$OUT/xs-rping" -c -a x -Z
expect_exit "transact: too many connections" 2 "out of range" "$OUT/xs-transact" -c x -n 65
expect_exit "transact: -S too small" 2 "out of range" "$OUT/xs-transact" -c x -S 16
expect_exit "rdma: -C 0" 2 "out of range" "$OUT/xs-rdma" -c x -C 0
expect_exit "bw: -K 2" 2 "out of range" "$OUT/xs-bw" -c x -K 2
expect_exit "XS_CRC=5" 2 "XS_CRC" env XS_CRC=5 "$OUT/xs-pingpong" -c x

if [ -n "${EXSOCK_LIB:-}" ]; then
  lib=$(readlink -f "$EXSOCK_LIB") || lib=""
  if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    bad "EXSOCK_LIB=$EXSOCK_LIB: no such file (give an absolute path)"; lib=""
  fi
fi
if [ -n "${EXSOCK_LIB:-}" ] && [ -n "$lib" ]; then
  echo "== with $lib preloaded"
  run_tcp_pairs "$lib" " (preloaded)"
  if LD_PRELOAD=$lib "$OUT/xs-rdma" -h >/dev/null 2>&1 && ! nm -D --defined-only "$lib" 2>/dev/null | grep -q ' ddp_version$'; then
    check_nolib " (preloaded, no DDP API yet)" LD_PRELOAD="$lib"
  fi
fi

echo "== $pass passed, $fail failed"
[ "$fail" -eq 0 ]
