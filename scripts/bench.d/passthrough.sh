#!/usr/bin/env bash
# summary: libexsock.so pass-through cost: iperf3 throughput and small-message TCP RTT
#
# bench passthrough [RUNS] — measures, in one invocation and alternating run by run (the order
# flips every run, so drift and warm-up hit both sides alike), with and without libexsock.so
# preloaded into both ends:
#   - iperf3 single-stream throughput over 127.0.0.1 (EXSOCK_BENCH_SECONDS, default 3 s a run);
#   - TCP ping-pong round trip of 64-byte messages (test-apps/pingpong, blocking read/write,
#     TCP_NODELAY; EXSOCK_BENCH_ITERS round trips a run, default 20000, after 1000 warm-up).
# CPU placement is fixed so that the scheduler does not dominate the numbers: the ping-pong
# client and server share one CPU (EXSOCK_BENCH_RTT_CPU, default 0: a cross-CPU wake-up on a
# VM costs tens of microseconds and varies by as much), the iperf3 client and server get one
# CPU each (EXSOCK_BENCH_IPERF_CPUS, default "0 1"; one CPU if the machine has only one).
#   - with valgrind: the user-space instructions libexsock.so adds per pass-through call
#     (callgrind, test-apps/bench/call-loop: deterministic, immune to machine load).
# Prints every sample, the medians, the throughput ratio (target >= 0.99) and the RTT
# difference (target <= 0.3 us), and the same two from per-run pairs (robust to drift).
. "$(dirname "$0")/../lib/common.sh"

need_cmd iperf3
need_cmd python3
need_cmd gcc
need_cmd make
need_cmd taskset util-linux
need_cmd valgrind

runs=${1:-${EXSOCK_BENCH_RUNS:-7}}
seconds=${EXSOCK_BENCH_SECONDS:-3}
iters=${EXSOCK_BENCH_ITERS:-20000}
rtt_cpu=${EXSOCK_BENCH_RTT_CPU:-0}
if [ "$(nproc)" -ge 2 ]; then default_cpus="0 1"; else default_cpus="0 0"; fi
read -r ip_client_cpu ip_server_cpu <<< "${EXSOCK_BENCH_IPERF_CPUS:-$default_cpus}"

say "building libexsock.so and test-apps/pingpong"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
lib=$CARGO_TARGET_DIR/release/libexsock.so
apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/pingpong" "$apps/call-loop" >&2

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One server of each kind per side, for the whole run.
declare -A ip_port pp_port
for side in base exsock; do
  pre=""; [ "$side" = exsock ] && pre=$lib
  ip_port[$side]=$(free_port)
  LD_PRELOAD=$pre taskset -c "$ip_server_cpu" iperf3 -s -B 127.0.0.1 -p "${ip_port[$side]}" >/dev/null 2>&1 &
  pids+=($!)
  pp_port[$side]=$(free_port)
  LD_PRELOAD=$pre taskset -c "$rtt_cpu" "$apps/pingpong" server "${pp_port[$side]}" &
  pids+=($!)
done
for side in base exsock; do
  wait_port 127.0.0.1 "${ip_port[$side]}" 20 || die "iperf3 server ($side) did not start"
  wait_port 127.0.0.1 "${pp_port[$side]}" 20 || die "pingpong server ($side) did not start"
done

iperf_once() { # SIDE -> Gbit/s
  local pre=""; [ "$1" = exsock ] && pre=$lib
  LD_PRELOAD=$pre timeout $((seconds + 30)) taskset -c "$ip_client_cpu" iperf3 -c 127.0.0.1 -p "${ip_port[$1]}" -t "$seconds" -J > "$tmp/ip.json" \
    || die "iperf3 client ($1) failed"
  python3 -c 'import json,sys; print("%.3f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9))' "$tmp/ip.json"
}
rtt_once() { # SIDE -> us
  local pre=""; [ "$1" = exsock ] && pre=$lib
  LD_PRELOAD=$pre timeout 120 taskset -c "$rtt_cpu" "$apps/pingpong" client 127.0.0.1 "${pp_port[$1]}" "$iters" 64 | awk '{ print $2 }'
}

say "$runs alternating runs: iperf3 ${seconds}s, ping-pong $iters x 64 B"
: > "$tmp/samples"
for ((i = 1; i <= runs; i++)); do
  if ((i % 2)); then order="base exsock"; else order="exsock base"; fi
  for side in $order; do echo "iperf $side $(iperf_once "$side")" >> "$tmp/samples"; done
  for side in $order; do echo "rtt $side $(rtt_once "$side")" >> "$tmp/samples"; done
  printf '  run %d/%d: %s\n' "$i" "$runs" "$(tail -4 "$tmp/samples" | sort | awk '{ printf "%s %s=%s  ", $1, $2, $3 }')" >&2
done

python3 - "$tmp/samples" "$runs" <<'PY'
import statistics, sys
s = {}
for line in open(sys.argv[1]):
    kind, side, v = line.split()
    s.setdefault((kind, side), []).append(float(v))
m = {k: statistics.median(v) for k, v in s.items()}
ratio = m[("iperf", "exsock")] / m[("iperf", "base")]
diff = m[("rtt", "exsock")] - m[("rtt", "base")]
print(f"bench passthrough: medians of {sys.argv[2]} alternating runs (without / with libexsock.so)")
print(f"  iperf3 throughput   {m[('iperf','base')]:8.2f} / {m[('iperf','exsock')]:8.2f} Gbit/s   ratio {ratio:.3f}   (target >= 0.99: {'met' if ratio >= 0.99 else 'MISSED'})")
print(f"  TCP RTT, 64 B       {m[('rtt','base')]:8.2f} / {m[('rtt','exsock')]:8.2f} us       diff {diff:+.2f} us  (target <= 0.3: {'met' if diff <= 0.3 else 'MISSED'})")
# Paired statistics: each run's two samples were taken back to back, so their ratio (or
# difference) cancels slow drift such as other load on the machine.
pr = statistics.median(e / b for b, e in zip(s[("iperf", "base")], s[("iperf", "exsock")]))
pd = statistics.median(e - b for b, e in zip(s[("rtt", "base")], s[("rtt", "exsock")]))
print(f"  paired (median over runs of with/without):  throughput ratio {pr:.3f}   RTT diff {pd:+.2f} us")
for k in sorted(s):
    print(f"  samples {k[0]:5s} {k[1]:6s}: " + " ".join(f"{v:.2f}" for v in s[k]))
PY

# Instructions per call, from callgrind's totals: (N calls - 0 calls) / (2 N), each side.
instr() { # PRELOAD N
  LD_PRELOAD=$1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$apps/call-loop" "$2" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
n=100000
b0=$(instr "" 0); b1=$(instr "" $n); e0=$(instr "$lib" 0); e1=$(instr "$lib" $n)
python3 -c '
import sys
b0, b1, e0, e1, n = map(int, sys.argv[1:])
base, ex = (b1 - b0) / (2 * n), (e1 - e0) / (2 * n)
print(f"  instructions per call (callgrind, recv + close on a bad fd): {base:.1f} / {ex:.1f}   added {ex - base:+.1f}")
' "$b0" "$b1" "$e0" "$e1" "$n"
