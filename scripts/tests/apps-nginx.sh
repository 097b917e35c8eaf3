#!/usr/bin/env bash
# apps-nginx: unmodified curl <-> nginx (master + 2 workers, sendfile, epoll, non-blocking
# listener) over iWARP, switched by EXSOCK_RULES only. Checks: a 1 GiB download (sha256 equal),
# keep-alive (4 requests on one connection, each sha256-checked), and a plain curl (no rule)
# served by the same dual-mode listener while the 1 GiB download runs. The keep-alive run is
# captured on lo: scripts/wirecheck must find the HTTP bytes in FPDUs with good CRCs. EXSOCK_LOG
# must show the DDP sockets on both sides and the plain one classified as plain TCP.
# timeout: 300
. "$(dirname "$0")/apps-lib.bash"

need_cmd curl
need_cmd nginx nginx-light
need_cmd sha256sum coreutils

chmod 755 "$tmp"
mkdir -p "$tmp/www"
say "generating a 1 GiB file (64 MiB random, 16 times) and small files"
head -c $((64 << 20)) /dev/urandom > "$tmp/r64"
big_sum=$(for _ in $(seq 16); do cat "$tmp/r64"; done | tee "$tmp/www/big.bin" | sha256sum | cut -d' ' -f1)
rm -f "$tmp/r64"
for i in 1 2 3 4; do head -c $((i * 300000 + 17)) /dev/urandom > "$tmp/www/small$i.bin"; done
(cd "$tmp/www" && sha256sum -- small*.bin) > "$tmp/small.sha256"
sum_of() { awk -v f="$1" '$2 == f { print $1 }' "$tmp/small.sha256"; }

port=$(free_port)
nd=$tmp/nginx; mkdir -p "$nd/tmp"
cat > "$nd/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes 2;
user root;
pid $nd/nginx.pid;
error_log $nd/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000;
  client_body_temp_path $nd/tmp/body;
  proxy_temp_path $nd/tmp/proxy;
  fastcgi_temp_path $nd/tmp/fastcgi;
  uwsgi_temp_path $nd/tmp/uwsgi;
  scgi_temp_path $nd/tmp/scgi;
  types { application/octet-stream bin; }
  server {
    listen 127.0.0.1:$port;
    root $tmp/www;
  }
}
NGX
srv_rules="use ddp tcp_server 127.0.0.1:$port program nginx"
cli_rules="use ddp tcp_client 127.0.0.1:$port program curl"
say "nginx on 127.0.0.1:$port, rule: $srv_rules"
EXSOCK_RULES=$srv_rules EXSOCK_LOG=debug:"$nd/exsock.log" "$run" nginx -p "$nd" -e "$nd/error.log" -c "$nd/nginx.conf" &
npid=$!; pids+=("$npid")
wait_for "nginx on $port" 20 "$npid" listening "$port" || { cat "$nd/error.log"; die "nginx did not start"; }

say "1 GiB download over DDP, and a plain curl meanwhile"
t0=$(date +%s.%N)
EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/curl-big.log" timeout 120 "$run" curl -sS --fail "http://127.0.0.1:$port/big.bin" \
  | sha256sum | cut -d' ' -f1 > "$tmp/big.sum" &
bigpid=$!; pids+=("$bigpid")
# the plain client: no rule, so no DDP (same listener, dual mode); its bytes must match too
wait_for "the DDP download to start" 20 "$bigpid" grep -q "ddp connect(" "$tmp/curl-big.log" || fail "the DDP download did not start"
for i in 1 2; do
  EXSOCK_LOG=debug:"$tmp/curl-plain.log" timeout 30 "$run" curl -sS --fail -o "$tmp/plain$i.bin" "http://127.0.0.1:$port/small$i.bin" \
    || fail "plain curl failed"
  [ "$(sha256sum < "$tmp/plain$i.bin" | cut -d' ' -f1)" = "$(sum_of "small$i.bin")" ] || fail "plain curl: sha256 of small$i.bin differs"
done
kill -0 "$bigpid" 2>/dev/null && ok "a plain curl was served by the dual-mode listener during the DDP download" \
  || echo "note: the 1 GiB download ended before the plain requests did (nothing concurrent to show)"
wait_pid "$bigpid" 150 || fail "1 GiB download failed"
t1=$(date +%s.%N)
if [ "$(cat "$tmp/big.sum")" = "$big_sum" ]; then
  ok "1 GiB over DDP, sha256 equal ($(python3 -c "print('%.1f s, %.2f Gbit/s' % ($t1 - $t0, 8 * 2**30 / ($t1 - $t0) / 1e9))"))"
else
  fail "1 GiB download: sha256 differs"
fi
ddp_used "curl (1 GiB)" "$tmp/curl-big.log" 1
[ "$(log_count "$tmp/curl-plain.log" "ddp ")" = 0 ] || fail "the plain curl used DDP"
grep -q "mode: accept(.*: plain TCP (dual: first bytes are not an MPA Request: \"GET /small" "$nd/exsock.log" \
  && ok "nginx classified the plain curl as plain TCP by its first bytes" || fail "nginx log: no plain-TCP verdict for the plain curl"

say "keep-alive: 4 requests on one DDP connection, captured on lo"
start_capture keepalive "$port"
conns=$(EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/curl-ka.log" timeout 30 "$run" curl -sS --fail -w '%{num_connects} ' \
  -o "$tmp/ka1.bin" "http://127.0.0.1:$port/small1.bin" -o "$tmp/ka2.bin" "http://127.0.0.1:$port/small2.bin" \
  -o "$tmp/ka3.bin" "http://127.0.0.1:$port/small3.bin" -o "$tmp/ka4.bin" "http://127.0.0.1:$port/small4.bin") \
  || fail "keep-alive curl failed"
stop_capture keepalive
[ "$conns" = "1 0 0 0 " ] && ok "keep-alive: one connection, 4 requests" || fail "keep-alive: num_connects '$conns', expected '1 0 0 0 '"
for i in 1 2 3 4; do
  [ "$(sha256sum < "$tmp/ka$i.bin" | cut -d' ' -f1)" = "$(sum_of "small$i.bin")" ] || fail "keep-alive: sha256 of small$i.bin differs"
done
wire_check keepalive "$port" 1
ddp_used "curl (keep-alive)" "$tmp/curl-ka.log" 1

stop_pid "$npid"
ddp_used "nginx" "$nd/exsock.log" 2
grep -q "fork()" "$nd/exsock.log" || fail "nginx log: no fork (workers not under the library?)"
! grep -E '\[(alert|emerg|crit)\]' "$nd/error.log" || fail "nginx logged errors"
finish "apps-nginx (curl <-> nginx over iWARP: 1 GiB sha256, keep-alive, plain client on the dual listener)"
