#!/usr/bin/env bash
# summary: DDP sockets vs plain TCP: 64 B round trip, 64 KiB stream, 1 MiB RDMA Write/Read bandwidth
#
# bench ddp [RUNS] — measures, in one invocation, alternating run by run (the order flips every
# run, so drift and warm-up hit both sides alike), over 127.0.0.1, against plain TCP measured in
# the same run (TCP without libexsock.so; DDP under it, CRC on):
#   - round trip of 64-byte messages: xs-pingpong -m tcp | ddp (read/write on a DDP socket) |
#     ext (ddp_post_send/ddp_post_recv); EXSOCK_BENCH_ITERS round trips (default 20000, after
#     1000 warm-up); the client's median. Target: DDP <= 1.25 x TCP.
#   - stream bandwidth with plain writes of 64 KiB: xs-bw -m tcp | ddp, CRC on.
#     Target: DDP >= 0.85 x TCP.
#   - RDMA Write bandwidth, 1 MiB: xs-bw -m write vs xs-bw -m tcp with 1 MiB writes.
#     Target: >= 0.90 x TCP.
#   - RDMA Read bandwidth, 1 MiB: test-apps/ddp/ddp-readbw vs the same TCP number (no target).
#   Bandwidth runs last EXSOCK_BENCH_SECONDS each (default 2), windows of 64 messages, every
#   message's content checked (sampled: stamp, last 64 B, 16 words).
# CPU placement (as bench passthrough): the ping-pong client and server share one CPU
# (EXSOCK_BENCH_RTT_CPU, default 0: a cross-CPU wake-up on a VM costs tens of microseconds and
# varies by as much); bandwidth client and server get one CPU each (EXSOCK_BENCH_BW_CPUS,
# default "0 1"). EXSOCK_BENCH_PIN=0 disables pinning. Prints every sample, the medians, the
# ratios of the medians and the median of the per-run ratios, the targets, and the machine.
# A benchmark: it measures and prints, it does not fail on a missed target.
. "$(dirname "$0")/../lib/common.sh"

need_cmd python3
need_cmd gcc
need_cmd make
need_cmd taskset util-linux

runs=${1:-${EXSOCK_BENCH_RUNS:-5}}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "usage: bench ddp [RUNS]"
seconds=${EXSOCK_BENCH_SECONDS:-2}
iters=${EXSOCK_BENCH_ITERS:-20000}
pin=${EXSOCK_BENCH_PIN:-1}
rtt_cpu=${EXSOCK_BENCH_RTT_CPU:-0}
if [ "$(nproc)" -ge 2 ]; then default_cpus="0 1"; else default_cpus="0 0"; fi
read -r bw_client_cpu bw_server_cpu <<< "${EXSOCK_BENCH_BW_CPUS:-$default_cpus}"

say "building libexsock.so and the test-apps"
# EXSOCK_LIB=/path/to/libexsock.so: use that library as is (as scripts/exsock-run does)
if [ -z "${EXSOCK_LIB:-}" ]; then
  (cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
  EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
fi
lib=$EXSOCK_LIB
nm -D --defined-only "$lib" | grep -qw ddp_post_send || die "$lib has no DDP extension API"
apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/xs-pingpong" "$apps/xs-bw" "$apps/ddp-readbw" >&2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-ddp.XXXXXX")
spid=""
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# on CPU CMD...: CMD pinned to CPU (unless EXSOCK_BENCH_PIN=0)
on() { local cpu=$1; shift; if [ "$pin" = 1 ]; then taskset -c "$cpu" "$@"; else "$@"; fi; }

# measure SIDE SCPU CCPU PROG "SERVER ARGS" "CLIENT ARGS" COLUMN ROW: one server + client run;
# prints column COLUMN of the client's table row starting with ROW. SIDE tcp runs without the
# library, ddp under it. Returns 1 (output shown on stderr) if either side fails.
measure() {
  local side=$1 scpu=$2 ccpu=$3 prog=$4 sargs=$5 cargs=$6 col=$7 row=$8 pre="" port=""
  [ "$side" = ddp ] && pre=$lib
  : > "$tmp/srv"
  # shellcheck disable=SC2086
  LD_PRELOAD=$pre on "$scpu" timeout 300 "$apps/$prog" -s -a 127.0.0.1 -p 0 -K 1 $sargs > "$tmp/srv" 2>&1 &
  spid=$!
  if ! port=$(listen_port "$tmp/srv" "$spid"); then
    cat "$tmp/srv" >&2; echo "$prog server ($side) did not start" >&2
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; spid=""; return 1
  fi
  # shellcheck disable=SC2086
  if ! LD_PRELOAD=$pre on "$ccpu" timeout 300 "$apps/$prog" -c 127.0.0.1 -p "$port" -K 1 $cargs > "$tmp/cli" 2>&1; then
    sed 's/^/    client: /' "$tmp/cli" >&2; echo "  $prog client ($side: $cargs) failed" >&2
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; spid=""; return 1
  fi
  if ! wait "$spid"; then
    spid=""; sed 's/^/    server: /' "$tmp/srv" >&2; echo "  $prog server ($side: $sargs) failed" >&2; return 1
  fi
  spid=""
  awk -v r="$row" -v c="$col" '$1 == r { print $c; found = 1 } END { exit !found }' "$tmp/cli" \
    || { cat "$tmp/cli" >&2; echo "no '$row' row in the $prog output" >&2; return 1; }
}
# sample KIND SIDE FUNC ARGS...: one sample into the list; a failed measurement is retried once,
# then recorded as "fail" (and counted in the summary)
sample() {
  local kind=$1 side=$2 v; shift 2
  v=$("$@") || { echo "  (retrying $kind $side once)" >&2; v=$("$@"); } || v=fail
  echo "$kind $side $v" >> "$tmp/samples"
}

rtt() { # SIDE(tcp|ddp) MODE(tcp|ddp|ext) -> median us
  local smode=$2; [ "$2" = ext ] && smode=ddp
  measure "$1" "$rtt_cpu" "$rtt_cpu" xs-pingpong "-m $smode" "-m $2 -S 64 -n $iters -w 1000" 3 64
}
bw() { # SIDE MODE SIZE -> MB/s
  local smode=tcp; [ "$2" != tcp ] && smode=ddp
  measure "$1" "$bw_server_cpu" "$bw_client_cpu" xs-bw "-m $smode" "-m $2 -S $3 -W 64 -T $seconds -w 2" 4 "$3"
}
rdbw() { # -> MB/s
  measure ddp "$bw_server_cpu" "$bw_client_cpu" ddp-readbw "" "-S 1M -W 64 -T $seconds -w 2" 4 1M
}

machine="$(nproc) vCPU $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
command -v systemd-detect-virt >/dev/null 2>&1 && machine+=", virt: $(systemd-detect-virt 2>/dev/null || echo none)"
if [ "$pin" = 1 ]; then
  placement="ping-pong client+server on CPU $rtt_cpu; bandwidth client CPU $bw_client_cpu, server CPU $bw_server_cpu"
else
  placement="not pinned"
fi

say "$runs alternating runs: RTT 64 B x $iters, bandwidth ${seconds}s each"
: > "$tmp/samples"
for ((r = 1; r <= runs; r++)); do
  if ((r % 2)); then o1=tcp; o2=ddp; else o1=ddp; o2=tcp; fi
  for s in $o1 $o2; do
    if [ "$s" = tcp ]; then
      sample rtt tcp rtt tcp tcp
    else
      sample rtt ddp rtt ddp ddp
      sample rtt ext rtt ddp ext
    fi
  done
  for s in $o1 $o2; do
    if [ "$s" = tcp ]; then sample stream tcp bw tcp tcp 64K
    else sample stream ddp bw ddp ddp 64K; fi
  done
  for s in $o1 $o2; do
    if [ "$s" = tcp ]; then
      sample big tcp bw tcp tcp 1M
    else
      sample big write bw ddp write 1M
      sample big read rdbw
    fi
  done
  printf '  run %d/%d: %s\n' "$r" "$runs" "$(tail -n 8 "$tmp/samples" | awk '{ printf "%s/%s=%s  ", $1, $2, $3 }')" >&2
done

python3 - "$tmp/samples" "$runs" "$machine" "$placement" <<'PY'
import statistics, sys
path, runs, machine, placement = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s, failed = {}, {}
for line in open(path):
    kind, side, v = (line.split() + ["fail"])[:3]
    try:
        x = float(v)
    except ValueError:
        x = float("nan")
        failed[(kind, side)] = failed.get((kind, side), 0) + 1
    s.setdefault((kind, side), []).append(x)
ok = lambda xs: [x for x in xs if x == x]  # without failed samples (NaN)
m = {k: statistics.median(ok(v)) if ok(v) else float("nan") for k, v in s.items()}
def paired(kind, a, b):  # median over runs of a/b (each run's samples were taken back to back)
    r = [x / y for x, y in zip(s[(kind, a)], s[(kind, b)]) if x == x and y == y]
    return statistics.median(r) if r else float("nan")
print(f"bench ddp: medians of {runs} alternating runs over 127.0.0.1, DDP with CRC on")
print(f"  machine: {machine}")
print(f"  placement: {placement}")
print(f"  {'test':34s} {'TCP':>11s} {'DDP':>11s} {'ratio':>7s} {'paired':>7s}   target")
rows = [
    ("round trip 64 B, read/write", "rtt", "tcp", "ddp", "us", "<=", 1.25),
    ("round trip 64 B, ext (post/wait)", "rtt", "tcp", "ext", "us", "<=", 1.25),
    ("stream 64 KiB writes", "stream", "tcp", "ddp", "MB/s", ">=", 0.85),
    ("RDMA Write 1 MiB (vs TCP 1 MiB)", "big", "tcp", "write", "MB/s", ">=", 0.90),
    ("RDMA Read 1 MiB (vs TCP 1 MiB)", "big", "tcp", "read", "MB/s", None, None),
]
for name, kind, base, side, unit, op, tgt in rows:
    b, d = m[(kind, base)], m[(kind, side)]
    ratio = d / b
    pr = paired(kind, side, base)
    if op is None:
        verdict = "(none)"
    else:
        ok = ratio <= tgt if op == "<=" else ratio >= tgt
        verdict = f"{op} {tgt:.2f}x: {'met' if ok else 'MISSED'}"
    print(f"  {name:34s} {b:8.2f} {unit:<4s}{d:8.2f} {unit:<4s}{ratio:6.2f}x {pr:6.2f}x   {verdict}")
for k in sorted(s):
    print(f"  samples {k[0]:6s} {k[1]:5s}: " + " ".join("fail" if v != v else f"{v:.2f}" for v in s[k]))
for k, n in sorted(failed.items()):
    print(f"  FAILED samples: {k[0]} {k[1]}: {n} of {len(s[k])} (after one retry each; see stderr)")
PY
