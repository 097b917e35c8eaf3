# shellcheck shell=bash
# Shared helpers of the scripts/tests/apps-*.sh tests (sourced; not a test itself): unmodified
# programs under libexsock.so switched to DDP mode by EXSOCK_RULES, a bounded capture on lo
# checked by scripts/wirecheck, and checks that DDP was really used.
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

need_cmd python3
need_cmd ss iproute2
if ! command -v tshark >/dev/null 2>&1; then
  # tshark's postinst asks whether non-root users may capture: answer no, without a prompt
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
fi
need_cmd tshark tshark
need_cmd dumpcap wireshark-common

say "building libexsock.so and exsock-stat"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload -p exsock-stat --quiet)
export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
STAT=$CARGO_TARGET_DIR/release/exsock-stat
run=$EXSOCK_ROOT/scripts/exsock-run  # a path, not a function: "&" and timeout must exec it
unset EXSOCK_RULES EXSOCK_CONFIG EXSOCK_LOG EXSOCK_TRACK

tmp=$(mktemp -d "${TMPDIR:-/tmp}/apps.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${EXSOCK_KEEP_TMP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
finish() { # NAME: the verdict line and exit status
  if [ "$fails" -eq 0 ]; then echo "PASS: $1"; exit 0; fi
  echo "FAIL: $1 ($fails problems)"; exit 1
}

# wait_for DESC SECONDS PID CMD...: poll a condition every 0.05 s, bounded; gives up early when
# PID (the process that should make it true) has exited
wait_for() {
  local desc=$1 t=$2 p=$3 i=0; shift 3
  until "$@"; do
    i=$((i + 1))
    if [ $i -gt $((t * 20)) ]; then echo "timeout (${t}s) waiting for $desc" >&2; return 1; fi
    if [ -n "$p" ] && ! kill -0 "$p" 2>/dev/null; then echo "gave up waiting for $desc: pid $p exited" >&2; return 1; fi
    sleep 0.05  # polling interval of a bounded readiness wait
  done
}
# wait_pid PID SECONDS: wait for a background process, bounded (then killed); its exit status
wait_pid() {
  local p=$1 t=$2 rc=0
  wait_for "pid $p to exit" "$t" "" bash -c "! kill -0 $p 2>/dev/null" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || rc=$?
  return $rc
}
# stop_pid PID: SIGTERM, then wait (bounded)
stop_pid() { kill "$1" 2>/dev/null || true; wait_pid "$1" 10 || true; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# listening PORT: a TCP listener is on PORT (asked from ss: no connection is made)
listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

cap_pid="" cap_sentinel=""
# start_capture NAME PORT: dumpcap on lo, filtered on PORT and on a closed sentinel port (see
# stop_capture); returns once it is capturing
start_capture() {
  cap_sentinel=$(free_port)
  dumpcap -i lo -f "tcp port $2 or tcp port $cap_sentinel" -B 64 -P -w "$tmp/$1.pcap" > "$tmp/$1.dumpcap.log" 2>&1 &
  cap_pid=$!; pids+=("$cap_pid")
  wait_for "dumpcap to capture on lo" 15 "$cap_pid" grep -qs "Capturing on" "$tmp/$1.dumpcap.log" \
    || { cat "$tmp/$1.dumpcap.log"; die "the capture did not start"; }
  # "Capturing on" is printed before packets really reach the file: probe the sentinel port
  # until a probe is in the capture, so nothing of the test's traffic can be missed
  wait_for "a probe packet in the capture" 20 "$cap_pid" probe_in_capture "$tmp/$1.pcap" \
    || { cat "$tmp/$1.dumpcap.log"; die "the capture did not record a probe packet"; }
}
# probe_in_capture PCAP: one SYN to the closed sentinel port, then whether one is in PCAP
probe_in_capture() {
  python3 -c '
import socket, sys
s = socket.socket()
try: s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError: pass' "$cap_sentinel"
  in_capture "$1" "$cap_sentinel"
}
# in_capture PCAP PORT: the (partly written) capture holds a packet from/to PORT (no -c: with a
# display filter, tshark 4.0 counts packets read, not packets shown)
in_capture() { tshark -n -r "$1" -Y "tcp.port == $2" 2>/dev/null | grep -q .; }
# capture_complete PCAP: tshark finds no segment missing from the capture
capture_complete() {
  ! tshark -n -r "$1" -Y 'tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment' 2>/dev/null | grep -q .
}
# stop_capture NAME: a SYN to the closed sentinel port; once dumpcap wrote it (packets reach the
# file in order, so everything before it is there too), stop dumpcap; it must report no drop
stop_capture() {
  local f=$tmp/$1.pcap drops
  python3 -c '
import socket, sys
s = socket.socket()
try: s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError: pass' "$cap_sentinel"
  wait_for "the sentinel packet in the capture" 30 "$cap_pid" in_capture "$f" "$cap_sentinel" \
    || fail "$1: the capture did not record the sentinel packet within 20 s"
  kill -INT "$cap_pid" 2>/dev/null || true
  wait_pid "$cap_pid" 10 || true
  [ -s "$f" ] || die "no capture written ($f)"
  drops=$(sed -n "s|^Packets received/dropped on interface '[^']*': [0-9]*/\([0-9]*\) .*|\1|p" "$tmp/$1.dumpcap.log")
  [ "$drops" = 0 ] || fail "$1: dumpcap dropped packets: $(grep dropped "$tmp/$1.dumpcap.log")"
}

# wire_check NAME PORT [MIN-IWARP-CONNECTIONS]: scripts/wirecheck passes on the capture (every
# byte of each iWARP connection decoded as MPA/FPDUs, CRCs good), with FPDUs > 0, good CRCs =
# FPDUs, Sends > 0 and at least MIN iWARP connections (default 1)
wire_check() {
  local name=$1 port=$2 min=${3:-1} out rc=0 conns fpdus good bad sends
  out=$("$EXSOCK_ROOT/scripts/wirecheck" "$tmp/$name.pcap" --port "$port" 2>&1) || rc=$?
  echo "$out" | grep -E '^  (connections|MPA|FPDUs|RDMAP)' | sed 's/^/    /'
  [ $rc -eq 0 ] || { echo "$out" | tail -n 20 | sed 's/^/    /'; fail "$name: wirecheck exited $rc"; return 0; }
  conns=$(sed -n 's/^  connections: \([0-9]*\) iWARP.*/\1/p' <<< "$out")
  read -r fpdus good bad < <(sed -n 's/^  FPDUs: \([0-9]*\)  good CRCs: \([0-9]*\)  bad CRCs: \([0-9]*\).*/\1 \2 \3/p' <<< "$out")
  sends=$(sed -n 's/.*[:,] Send \([0-9][0-9]*\),.*/\1/p' <<< "$out" | head -n 1)
  if [ "${conns:-0}" -lt "$min" ] || [ "${fpdus:-0}" -eq 0 ] || [ "${bad:-1}" != 0 ] \
     || [ "${good:-0}" != "$fpdus" ] || [ "${sends:-0}" -eq 0 ]; then
    fail "$name: expected >= $min iWARP connections, FPDUs = good CRCs > 0, Sends > 0 (got $conns, $fpdus/$good/$bad, Send ${sends:-?})"
  else
    ok "$name: on the wire: $conns iWARP connections, $fpdus FPDUs, all CRCs good, $sends Sends"
  fi
}

# log_count FILE PATTERN: how many lines of FILE match (fixed string)
log_count() { grep -cF -- "$2" "$1" 2>/dev/null || true; }
# ddp_used NAME LOG MIN: at least MIN sockets in LOG switched by a rule and set up as DDP
ddp_used() {
  local n neg
  n=$(grep -cE 'mode: (connect|accept)\(.*: DDP \(' "$2" 2>/dev/null || true)
  neg=$(grep -cE 'ddp (connect|accept)\([0-9]+\): ((initiator|responder) MPA rev|MPA exchange under way)' "$2" 2>/dev/null || true)
  if [ "${n:-0}" -ge "$3" ] && [ "${neg:-0}" -ge "$3" ]; then
    ok "$1: $n sockets switched to DDP mode by a rule, $neg MPA exchanges done"
  else
    fail "$1: expected >= $3 rule-switched DDP sockets with MPA done in $2 (got $n, $neg)"
    grep -E 'mode:|ddp |warning' "$2" | head -n 20 | sed 's/^/    /'
  fi
}
