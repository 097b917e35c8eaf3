#!/usr/bin/env bash
# summary: DDP vs TCP bandwidth across a veth pair at real MTUs (1500, 9000): stream, Sends, RDMA Write
#
# bench veth [RUNS] — what a real network's MSS does to DDP: on loopback TCP's MSS is 32-64 KiB,
# so FPDUs are large; on a 1500-byte-MTU network a peer's FPDUs are MSS-sized (1,448 bytes,
# RFC 5044 §4.1) and the per-FPDU costs show. Two network namespaces made here (removed by an
# EXIT trap) joined by a veth pair with offloads as the kernel sets them, for each MTU in
# EXSOCK_BENCH_MTUS (default "1500 9000"), alternating run by run (the order flips every run):
#   - stream: xs-bw -m ddp (plain writes of 64 KiB) vs xs-bw -m tcp, 64 KiB;
#   - send:   xs-bw -m ext (posted Sends into posted receives), 64 KiB, vs the same TCP number;
#   - write:  xs-bw -m write (RDMA Writes) 1 MiB vs xs-bw -m tcp with 1 MiB writes.
# EXSOCK_BENCH_SECONDS (default 2) a sample, CRC on, sampled content checks; sender and receiver
# on one CPU each. Each sample also records the receiver's and the sender's CPU seconds per GB
# (user + system, from bash's `time`). Prints the samples, medians and ratios to TCP, and
# writes them to bench-results/veth.md (EXSOCK_BENCH_OUT: elsewhere). Needs root (ip netns).
# A benchmark: it measures and prints, it does not fail on a missed target.
. "$(dirname "$0")/../lib/common.sh"

[ "$(id -u)" -eq 0 ] || die "bench veth needs root (network namespaces)"
need_cmd python3
need_cmd ip iproute2
need_cmd taskset util-linux

runs=${1:-${EXSOCK_BENCH_RUNS:-3}}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "usage: bench veth [RUNS]"
seconds=${EXSOCK_BENCH_SECONDS:-2}
mtus=${EXSOCK_BENCH_MTUS:-1500 9000}
if [ "$(nproc)" -ge 2 ]; then ccpu=0 scpu=1; else ccpu=0 scpu=0; fi

build_lib_and_apps "$apps/xs-bw"
lib=${EXSOCK_BENCH_LIB:-$EXSOCK_LIB}  # (EXSOCK_BENCH_LIB: another build of the library, for A/B)

NA=exsock-bv$$-a
NB=exsock-bv$$-b
IPA=10.214.$((RANDOM % 250 + 1)).1
IPB=${IPA%.1}.2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-veth.XXXXXX")
spid=""
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  wait 2>/dev/null || true
  ip netns del "$NA" 2>/dev/null || true
  ip netns del "$NB" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$NA" || die "cannot create a network namespace (ip netns add $NA)"
ip netns add "$NB" || die "cannot create a network namespace"
ip -n "$NA" link add veth0 type veth peer name veth1 netns "$NB" || die "cannot create a veth pair"
ip -n "$NA" addr add "$IPA/30" dev veth0
ip -n "$NB" addr add "$IPB/30" dev veth1
for ns in "$NA" "$NB"; do ip -n "$ns" link set lo up; done

# timed NS CPU OUT CMD...: CMD in namespace NS on CPU, output to OUT, and its user + system CPU
# seconds appended to OUT as a line "cpu USER SYSTEM" (bash's `time`)
timed() {
  local ns=$1 cpu=$2 out=$3; shift 3
  ip netns exec "$ns" taskset -c "$cpu" bash -c 'TIMEFORMAT="cpu %U %S"; time "$@"' _ "$@" > "$out" 2>&1
}
# measure SIDE MODE SIZE: one xs-bw run (server in NB, client in NA); prints
# "MB/s rx-cpu-s/GB tx-cpu-s/GB". SIDE tcp runs without the library.
measure() {
  local side=$1 mode=$2 size=$3 pre="" smode=tcp port=""
  [ "$side" = ddp ] && { pre=$lib; smode=ddp; }
  : > "$tmp/srv"
  timed "$NB" "$scpu" "$tmp/srv" env LD_PRELOAD="$pre" timeout 120 \
    "$apps/xs-bw" -s -a "$IPB" -p 0 -K 1 -m "$smode" &
  spid=$!
  if ! port=$(listen_port "$tmp/srv" "$spid"); then
    cat "$tmp/srv" >&2; echo "xs-bw server ($side) did not start" >&2
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; spid=""; return 1
  fi
  if ! timed "$NA" "$ccpu" "$tmp/cli" env LD_PRELOAD="$pre" timeout 120 \
      "$apps/xs-bw" -c "$IPB" -p "$port" -K 1 -m "$mode" -S "$size" -W 64 -T "$seconds" -w 2; then
    sed 's/^/    client: /' "$tmp/cli" >&2; echo "  xs-bw client ($side $mode $size) failed" >&2
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; spid=""; return 1
  fi
  if ! wait "$spid"; then
    spid=""; sed 's/^/    server: /' "$tmp/srv" >&2; echo "  xs-bw server ($side) failed" >&2; return 1
  fi
  spid=""
  local row=$size
  [ "$size" = 1048576 ] && row=1M
  [ "$size" = 65536 ] && row=64K
  awk -v r="$row" '
    FILENAME ~ /cli$/ && $1 == r { mbs = $4 }
    FILENAME ~ /cli$/ && $1 == "cpu" { tx = $2 + $3 }
    FILENAME ~ /srv$/ && /receiver: [0-9]+ bytes/ { match($0, /receiver: [0-9]+/); b = substr($0, RSTART + 10, RLENGTH - 10) }
    FILENAME ~ /srv$/ && $1 == "cpu" { rx = $2 + $3 }
    END { if (mbs == "" || b == "" || b == 0) exit 1; g = b / 1e9; printf "%s %.3f %.3f\n", mbs, rx / g, tx / g }
  ' "$tmp/cli" "$tmp/srv" || { cat "$tmp/cli" "$tmp/srv" >&2; echo "no result in the xs-bw output" >&2; return 1; }
}
sample() { # MTU KIND SIDE MODE SIZE
  local mtu=$1 kind=$2 side=$3 v; shift 3
  v=$(measure "$side" "$@") || { echo "  (retrying $kind $side once)" >&2; v=$(measure "$side" "$@"); } || v="fail - -"
  echo "$mtu $kind $side $v" >> "$tmp/samples"
}

machine="$(nproc) vCPU $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), Linux $(uname -r)"
: > "$tmp/samples"
for mtu in $mtus; do
  ip -n "$NA" link set veth0 mtu "$mtu" up
  ip -n "$NB" link set veth1 mtu "$mtu" up
  say "MTU $mtu: $runs alternating runs, ${seconds}s a sample"
  for ((r = 1; r <= runs; r++)); do
    if ((r % 2)); then order="tcp ddp"; else order="ddp tcp"; fi
    for s in $order; do
      if [ "$s" = tcp ]; then
        sample "$mtu" stream tcp tcp 65536
        sample "$mtu" write tcp tcp 1048576
      else
        sample "$mtu" stream ddp ddp 65536
        sample "$mtu" send ddp ext 65536
        sample "$mtu" write ddp write 1048576
      fi
    done
    printf '  MTU %s run %d/%d: %s\n' "$mtu" "$r" "$runs" \
      "$(tail -n 5 "$tmp/samples" | awk '{ printf "%s/%s=%s  ", $2, $3, $4 }')" >&2
  done
done

out=${EXSOCK_BENCH_OUT:-$EXSOCK_ROOT/bench-results/veth.md}
mkdir -p "$(dirname "$out")"
python3 - "$tmp/samples" "$runs" "$machine" "$out" <<'PY'
import statistics, sys, time
path, runs, machine, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = {}
for line in open(path):
    mtu, kind, side, *v = line.split()
    vals = [float(x) if x not in ("fail", "-") else float("nan") for x in v]
    s.setdefault((int(mtu), kind, side), []).append(vals)
def med(k, i):
    xs = [v[i] for v in s.get(k, []) if v[i] == v[i]]
    return statistics.median(xs) if xs else float("nan")
print(f"bench veth: medians of {runs} alternating runs across a veth pair between two network")
print(f"namespaces, DDP with CRC on; CPU = user + system seconds per GB moved")
print(f"  machine: {machine}")
print(f"  {'MTU':>5s} {'test':28s} {'TCP MB/s':>9s} {'DDP MB/s':>9s} {'ratio':>6s}  {'CPU s/GB rx/tx: TCP':>20s} {'DDP':>11s}")
rows = [("stream 64 KiB writes", "stream", "tcp", "stream", "ddp"),
        ("posted Sends 64 KiB", "stream", "tcp", "send", "ddp"),
        ("RDMA Write 1 MiB", "write", "tcp", "write", "ddp")]
for mtu in sorted({k[0] for k in s}):
    for name, bk, bs, dk, ds in rows:
        b, d = (mtu, bk, bs), (mtu, dk, ds)
        print(f"  {mtu:5d} {name:28s} {med(b, 0):9.0f} {med(d, 0):9.0f} {med(d, 0) / med(b, 0):5.2f}x"
              f"  {med(b, 1):9.2f} / {med(b, 2):4.2f} {med(d, 1):5.2f} / {med(d, 2):4.2f}")
for k in sorted(s):
    print(f"  samples MTU {k[0]} {k[1]:6s} {k[2]}: " + "  ".join(
        "fail" if v[0] != v[0] else f"{v[0]:.0f} ({v[1]:.2f}/{v[2]:.2f})" for v in s[k]))
failed = sum(1 for vs in s.values() for v in vs if v[0] != v[0])
if failed:
    print(f"  FAILED samples: {failed} (after one retry each; see stderr)")
# the same as a markdown table, for bench-results/
md = ["# exsock across a veth pair (`scripts/bench veth`)", "",
      f"Machine: {machine}. Generated on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
      f"medians of {runs} alternating runs; xs-bw between two network namespaces joined by a veth "
      "pair, sender and receiver on one CPU each; DDP with CRC on. CPU: user + system seconds "
      "per GB moved, receiver / sender.", "",
      "| MTU | test | TCP MB/s | DDP MB/s | × TCP | CPU s/GB TCP | CPU s/GB DDP |",
      "|---:|---|---:|---:|---:|---:|---:|"]
for mtu in sorted({k[0] for k in s}):
    for name, bk, bs, dk, ds in rows:
        b, d = (mtu, bk, bs), (mtu, dk, ds)
        md.append(f"| {mtu} | {name} | {med(b, 0):.0f} | {med(d, 0):.0f} | {med(d, 0) / med(b, 0):.2f} "
                  f"| {med(b, 1):.2f} / {med(b, 2):.2f} | {med(d, 1):.2f} / {med(d, 2):.2f} |")
md += ["", "Samples (MB/s, CPU rx/tx):", ""]
for k in sorted(s):
    md.append(f"- MTU {k[0]} {k[1]} {k[2]}: " + ", ".join(
        "fail" if v[0] != v[0] else f"{v[0]:.0f} ({v[1]:.2f}/{v[2]:.2f})" for v in s[k]))
open(out, "w").write("\n".join(md) + "\n")
print(f"  results: {out}")
PY
