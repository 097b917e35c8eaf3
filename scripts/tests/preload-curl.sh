#!/usr/bin/env bash
# preload-curl: curl under libexsock.so downloads a 100 MB file from python's http.server and
# from nginx, both also under the preload; sha256 must match. Then keep-alive: several
# requests on one connection (curl's num_connects 1, 0, 0...), each checked by sha256.
# Runs twice: plain pass-through, and EXSOCK_TRACK=all (every TCP socket through the routing
# points). EXSOCK_LOG files prove that each process really ran with the library.
# timeout: 300
. "$(dirname "$0")/../lib/common.sh"

need_cmd curl
need_cmd nginx nginx-light
need_cmd python3
need_cmd sha256sum coreutils

say "building libexsock.so"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
run=$EXSOCK_ROOT/scripts/exsock-run  # a path, not a function: "&" and timeout must exec it

tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }

mkdir -p "$tmp/www"
say "generating test files"
head -c $((100 * 1024 * 1024)) /dev/urandom > "$tmp/www/big.bin"
for i in 1 2 3 4; do head -c $((i * 300000 + 17)) /dev/urandom > "$tmp/www/small$i.bin"; done
(cd "$tmp/www" && sha256sum -- *.bin) > "$tmp/www.sha256"
sum_of() { awk -v f="$1" '$2 == f { print $1 }' "$tmp/www.sha256"; }

# A keep-alive (HTTP/1.1) static file server on python's http.server.
cat > "$tmp/pyserve.py" <<'PY'
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])
handler.func.protocol_version = "HTTP/1.1"
handler.func.log_message = lambda *a: None
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
PY

nginx_conf() { # PORT DIR
  mkdir -p "$2/tmp"
  cat > "$2/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes 2;
user root;
pid $2/nginx.pid;
error_log $2/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000;
  client_body_temp_path $2/tmp/body;
  proxy_temp_path $2/tmp/proxy;
  fastcgi_temp_path $2/tmp/fastcgi;
  uwsgi_temp_path $2/tmp/uwsgi;
  scgi_temp_path $2/tmp/scgi;
  types { application/octet-stream bin; }
  server {
    listen 127.0.0.1:$1;
    root $tmp/www;
  }
}
NGX
}

check_log() { # FILE WHAT...
  local f=$1; shift
  [ -s "$f" ] || fail "no EXSOCK_LOG output in $f: library not active?"
  for w in "$@"; do grep -q -- "$w" "$f" || fail "$f lacks '$w'"; done
}

fetch_and_check() { # NAME PORT MODE
  local name=$1 port=$2 mode=$3 out="$tmp/dl-$1-$3"
  mkdir -p "$out"
  say "$name ($mode): 100 MB download"
  EXSOCK_LOG=debug:"$out/curl.log" timeout 60 "$run" curl -sS --fail -o "$out/big.bin" \
    "http://127.0.0.1:$port/big.bin" || fail "$name: curl failed"
  [ "$(sha256sum < "$out/big.bin" | cut -d' ' -f1)" = "$(sum_of big.bin)" ] \
    || fail "$name ($mode): sha256 of the 100 MB download differs"
  check_log "$out/curl.log" "connect("
  rm -f "$out/big.bin"

  say "$name ($mode): keep-alive, 4 requests on one connection"
  local conns
  conns=$(EXSOCK_LOG=debug:"$out/curl-ka.log" timeout 30 "$run" curl -sS --fail \
    -w '%{num_connects} ' \
    -o "$out/small1.bin" "http://127.0.0.1:$port/small1.bin" \
    -o "$out/small2.bin" "http://127.0.0.1:$port/small2.bin" \
    -o "$out/small3.bin" "http://127.0.0.1:$port/small3.bin" \
    -o "$out/small4.bin" "http://127.0.0.1:$port/small4.bin") || fail "$name: keep-alive curl failed"
  [ "$conns" = "1 0 0 0 " ] || fail "$name ($mode): expected one connection reused (num_connects '1 0 0 0 '), got '$conns'"
  for i in 1 2 3 4; do
    [ "$(sha256sum < "$out/small$i.bin" | cut -d' ' -f1)" = "$(sum_of "small$i.bin")" ] \
      || fail "$name ($mode): sha256 of small$i.bin differs"
  done
  [ "$(grep -c 'connect(' "$out/curl-ka.log")" -ge 1 ] || fail "keep-alive log empty"
}

for mode in plain track; do
  track=""; [ "$mode" = track ] && track=all

  port=$(free_port)
  say "python http.server ($mode) on 127.0.0.1:$port"
  EXSOCK_TRACK=$track EXSOCK_LOG=debug:"$tmp/py-$mode.log" "$run" python3 "$tmp/pyserve.py" "$port" "$tmp/www" &
  pypid=$!; pids+=("$pypid")
  wait_port 127.0.0.1 "$port" 20 || fail "python http.server did not start"
  EXSOCK_TRACK=$track fetch_and_check python "$port" "$mode"
  check_log "$tmp/py-$mode.log" "listen(" "accept("
  [ "$mode" = track ] && check_log "$tmp/py-$mode.log" "[tracked]"
  kill "$pypid"; wait "$pypid" 2>/dev/null || true

  port=$(free_port)
  ndir="$tmp/nginx-$mode"; mkdir -p "$ndir"; nginx_conf "$port" "$ndir"
  say "nginx ($mode) on 127.0.0.1:$port"
  EXSOCK_TRACK=$track EXSOCK_LOG=debug:"$ndir/exsock.log" "$run" nginx -p "$ndir" -e "$ndir/error.log" -c "$ndir/nginx.conf" &
  npid=$!; pids+=("$npid")
  wait_port 127.0.0.1 "$port" 20 || { cat "$ndir/error.log" >&2 || true; fail "nginx did not start"; }
  grep -q libexsock "/proc/$npid/maps" || fail "nginx master runs without libexsock.so"
  EXSOCK_TRACK=$track fetch_and_check nginx "$port" "$mode"
  check_log "$ndir/exsock.log" "listen(" "accept" "fork()"
  [ "$mode" = track ] && check_log "$ndir/exsock.log" "[tracked]"
  kill "$npid"; wait "$npid" 2>/dev/null || true
  ! grep -E '\[(alert|emerg|crit)\]' "$ndir/error.log" || fail "nginx logged errors"
done

echo "PASS: preload-curl (python http.server and nginx, 100 MB + keep-alive, plain and tracked)"
