#!/usr/bin/env bash
# apps-redis: unmodified redis-benchmark <-> redis-server (epoll, non-blocking sockets) over
# iWARP, switched by EXSOCK_RULES only (the rules come from a file named by EXSOCK_CONFIG for the
# server, inline for the clients). redis-cli SET/GET round trip; redis-benchmark with 20 clients,
# unpipelined and -P 16, seven commands, no errors; a short redis-cli session is captured on lo
# and scripts/wirecheck must find the RESP bytes inside FPDUs with good CRCs.
# timeout: 180
. "$(dirname "$0")/apps-lib.bash"

need_cmd redis-server redis-server
need_cmd redis-benchmark redis-tools
need_cmd redis-cli redis-tools

port=$(free_port)
cat > "$tmp/exsock.conf" <<CONF
# exsock rules for redis-server (EXSOCK_CONFIG)
use tcp tcp_server *:1-1023            # never a privileged port
use ddp tcp_server 127.0.0.1:$port program redis-server
CONF
cli_rules="use ddp tcp_client 127.0.0.1:$port"
say "redis-server on 127.0.0.1:$port, EXSOCK_CONFIG rules"
EXSOCK_CONFIG=$tmp/exsock.conf EXSOCK_LOG=debug:"$tmp/server.log" "$run" redis-server --port "$port" --bind 127.0.0.1 \
  --save '' --appendonly no --daemonize no --dir "$tmp" --logfile "$tmp/redis.log" &
spid=$!; pids+=("$spid")
wait_for "redis-server on $port" 20 "$spid" listening "$port" || { cat "$tmp/redis.log"; die "redis-server did not start"; }
grep -q "mode: listen(.*DDP listener, dual mode (rule 2: " "$tmp/server.log" || fail "redis-server: listener not switched by rule 2 of the file"

say "redis-cli SET/GET, captured on lo"
start_capture cli "$port"
value="exsock-$RANDOM-$$"
[ "$(EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/cli.log" timeout 10 "$run" redis-cli -h 127.0.0.1 -p "$port" SET exsock:key "$value")" = OK ] || fail "SET"
[ "$(EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/cli.log" timeout 10 "$run" redis-cli -h 127.0.0.1 -p "$port" GET exsock:key)" = "$value" ] || fail "GET returned another value"
stop_capture cli
wire_check cli "$port" 2
ddp_used "redis-cli" "$tmp/cli.log" 2

for pipeline in 1 16; do
  EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/bench.log" timeout 60 "$run" redis-benchmark -h 127.0.0.1 -p "$port" \
    -n 5000 -c 20 -P "$pipeline" -q -t ping,set,get,incr,lpush,lpop,mset --csv > "$tmp/bench.csv" 2> "$tmp/bench.err" \
    || { cat "$tmp/bench.err" "$tmp/bench.csv"; fail "redis-benchmark -P $pipeline failed"; continue; }
  if grep -qiE 'error|refused|reset' "$tmp/bench.err" "$tmp/bench.csv"; then
    cat "$tmp/bench.err" "$tmp/bench.csv"; fail "redis-benchmark -P $pipeline reported errors"
  fi
  rows=$(grep -c '^"[A-Z]' "$tmp/bench.csv" || true)
  if [ "$rows" -ge 7 ]; then
    ok "redis-benchmark -P $pipeline over DDP: $(awk -F, 'NR>1 { n=$1; r=$2; gsub(/"/,"",n); gsub(/"/,"",r); printf "%s %d/s  ", n, r }' "$tmp/bench.csv")"
  else
    cat "$tmp/bench.csv"; fail "redis-benchmark -P $pipeline: $rows result rows, expected 7+"
  fi
done
ddp_used "redis-benchmark" "$tmp/bench.log" 40
stop_pid "$spid"
ddp_used "redis-server" "$tmp/server.log" 42
finish "apps-redis (redis-cli and redis-benchmark <-> redis-server over iWARP, rules from EXSOCK_CONFIG)"
