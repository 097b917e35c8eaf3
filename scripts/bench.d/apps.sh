#!/usr/bin/env bash
# summary: unmodified apps over iWARP (EXSOCK_RULES) vs plain TCP: iperf3, redis-benchmark, sockperf
#
# bench apps [RUNS] — in one invocation, alternating run by run (the order flips every run), both
# ends under libexsock.so in both modes, the only difference being EXSOCK_RULES:
#   - iperf3 single stream over 127.0.0.1, EXSOCK_BENCH_SECONDS (default 3) a run, client and
#     server on one CPU each (EXSOCK_BENCH_IPERF_CPUS, default "0 1"): receiver Gbit/s;
#   - redis-benchmark against redis-server: SET and GET, 50 clients, unpipelined and -P 16
#     (EXSOCK_BENCH_REDIS_N requests per test, default 100000): requests/s;
#   - sockperf ping-pong, 64 B, EXSOCK_BENCH_SECONDS a run, client and server on CPU 0 (as the
#     suite's round trips): its average latency (half the round trip) in µs. Both sides block
#     in recvfrom, the pattern of simple request-response programs.
# "ddp" = server and client switched to DDP mode by rules; "tcp" = the same processes with no
# rule (plain pass-through). Prints every sample, the medians and the ratio ddp/tcp of the
# medians (target for iperf3: >= 0.85).
. "$(dirname "$0")/../lib/common.sh"

need_cmd iperf3
need_cmd redis-server redis-server
need_cmd redis-benchmark redis-tools
need_cmd sockperf
need_cmd python3
need_cmd taskset util-linux
need_cmd ss iproute2

runs=${1:-${EXSOCK_BENCH_RUNS:-5}}
seconds=${EXSOCK_BENCH_SECONDS:-3}
redis_n=${EXSOCK_BENCH_REDIS_N:-100000}
if [ "$(nproc)" -ge 2 ]; then default_cpus="0 1"; else default_cpus="0 0"; fi
read -r ccpu scpu <<< "${EXSOCK_BENCH_IPERF_CPUS:-$default_cpus}"

say "building libexsock.so"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
run=$EXSOCK_ROOT/scripts/exsock-run
unset EXSOCK_RULES EXSOCK_CONFIG EXSOCK_LOG EXSOCK_TRACK

tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
wait_listen() { # PORT PID: bounded readiness wait
  local i=0
  until listening "$1"; do
    i=$((i + 1)); [ $i -gt 400 ] && die "no listener on $1"
    kill -0 "$2" 2>/dev/null || die "server exited"
    sleep 0.05  # polling interval of a bounded readiness wait
  done
}
rules_for() { # MODE PORT: the server and client rules of a mode
  if [ "$1" = ddp ]; then
    echo "use ddp tcp_server 127.0.0.1:$2" "use ddp tcp_client 127.0.0.1:$2"
  else
    echo "" ""
  fi
}

# iperf3: one server per mode (rules are read at startup), runs alternate between them
declare -A iport ipid
for mode in ddp tcp; do
  iport[$mode]=$(free_port)
  srv_rule=""; [ $mode = ddp ] && srv_rule="use ddp tcp_server 127.0.0.1:${iport[$mode]}"
  EXSOCK_RULES=$srv_rule taskset -c "$scpu" "$run" iperf3 -s -B 127.0.0.1 -p "${iport[$mode]}" > "$tmp/iperf3-$mode.out" 2>&1 &
  ipid[$mode]=$!; pids+=("${ipid[$mode]}")
  wait_listen "${iport[$mode]}" "${ipid[$mode]}"
done
iperf_once() { # MODE -> Gbit/s (receiver)
  local mode=$1 cli_rule=""
  [ "$mode" = ddp ] && cli_rule="use ddp tcp_client 127.0.0.1:${iport[$mode]}"
  EXSOCK_RULES=$cli_rule timeout $((seconds + 30)) taskset -c "$ccpu" "$run" iperf3 -c 127.0.0.1 -p "${iport[$mode]}" \
    -t "$seconds" -J > "$tmp/i.json" 2>/dev/null || { echo 0; return; }
  python3 -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e9))' "$tmp/i.json"
}

# redis: one server per mode
declare -A rport rpid
for mode in ddp tcp; do
  rport[$mode]=$(free_port)
  srv_rule=""; [ $mode = ddp ] && srv_rule="use ddp tcp_server 127.0.0.1:${rport[$mode]}"
  mkdir -p "$tmp/r-$mode"
  EXSOCK_RULES=$srv_rule taskset -c "$scpu" "$run" redis-server --port "${rport[$mode]}" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no --dir "$tmp/r-$mode" --logfile "$tmp/r-$mode/log" &
  rpid[$mode]=$!; pids+=("${rpid[$mode]}")
  wait_listen "${rport[$mode]}" "${rpid[$mode]}"
done
redis_once() { # MODE PIPELINE -> "set get" requests/s
  local mode=$1 p=$2 cli_rule=""
  [ "$mode" = ddp ] && cli_rule="use ddp tcp_client 127.0.0.1:${rport[$mode]}"
  EXSOCK_RULES=$cli_rule timeout 120 taskset -c "$ccpu" "$run" redis-benchmark -h 127.0.0.1 -p "${rport[$mode]}" \
    -n "$redis_n" -c 50 -P "$p" -t set,get -q --csv 2>/dev/null \
    | awk -F, '/^"SET"/ { gsub(/"/,"",$2); s=$2 } /^"GET"/ { gsub(/"/,"",$2); g=$2 } END { printf "%d %d\n", s, g }'
}

# sockperf: one server per mode, on CPU 0 with its client
declare -A sport spid
for mode in ddp tcp; do
  sport[$mode]=$(free_port)
  srv_rule=""; [ $mode = ddp ] && srv_rule="use ddp tcp_server 127.0.0.1:${sport[$mode]}"
  EXSOCK_RULES=$srv_rule taskset -c 0 "$run" sockperf server --tcp -i 127.0.0.1 -p "${sport[$mode]}" > "$tmp/sockperf-$mode.out" 2>&1 &
  spid[$mode]=$!; pids+=("${spid[$mode]}")
  wait_listen "${sport[$mode]}" "${spid[$mode]}"
done
sockperf_once() { # MODE -> average latency in µs (half the round trip)
  local mode=$1 cli_rule=""
  [ "$mode" = ddp ] && cli_rule="use ddp tcp_client 127.0.0.1:${sport[$mode]}"
  EXSOCK_RULES=$cli_rule timeout $((seconds + 30)) taskset -c 0 "$run" sockperf ping-pong --tcp -i 127.0.0.1 \
    -p "${sport[$mode]}" -t "$seconds" -m 64 2>/dev/null | sed -n 's/.*Latency is \([0-9.]*\) usec.*/\1/p' | grep . || echo 0
}

declare -A samples
say "$runs runs, alternating ddp/tcp (iperf3 ${seconds}s; redis-benchmark $redis_n requests per test)"
for r in $(seq "$runs"); do
  order="ddp tcp"; [ $((r % 2)) = 0 ] && order="tcp ddp"
  for mode in $order; do
    g=$(iperf_once "$mode")
    read -r s1 g1 <<< "$(redis_once "$mode" 1)"
    read -r s16 g16 <<< "$(redis_once "$mode" 16)"
    sp=$(sockperf_once "$mode")
    samples[$mode,sockperf]+="$sp "
    samples[$mode,iperf]+="$g "
    samples[$mode,set1]+="$s1 "; samples[$mode,get1]+="$g1 "
    samples[$mode,set16]+="$s16 "; samples[$mode,get16]+="$g16 "
    printf 'run %d %-3s  iperf3 %6s Gbit/s   redis SET %7s GET %7s /s   -P16 SET %8s GET %8s /s   sockperf %6s us\n' \
      "$r" "$mode" "$g" "$s1" "$g1" "$s16" "$g16" "$sp"
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo
printf '%-26s %12s %12s %8s\n' "median of $runs runs" "ddp" "tcp" "ddp/tcp"
for k in "iperf:iperf3 (Gbit/s)" "set1:redis SET (req/s)" "get1:redis GET (req/s)" "set16:redis SET -P16 (req/s)" "get16:redis GET -P16 (req/s)" "sockperf:sockperf 64 B latency (us)"; do
  key=${k%%:*} label=${k#*:}
  d=$(median <<< "${samples[ddp,$key]}"); t=$(median <<< "${samples[tcp,$key]}")
  ratio=$(python3 -c "import sys; d,t=float(sys.argv[1]),float(sys.argv[2]); print('%.2f' % (d/t) if t else '-')" "$d" "$t")
  printf '%-26s %12s %12s %8s\n' "$label" "$d" "$t" "$ratio"
done
echo "(target: iperf3 ddp/tcp >= 0.85)"
