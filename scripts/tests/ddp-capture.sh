#!/usr/bin/env bash
# timeout: 300
# ddp-capture: what libexsock.so puts on the wire is standard iWARP, as tshark decodes it.
# A dumpcap on lo with a port filter (confirmed "Capturing on" before anything connects, and
# afterwards every expected connection must be in the capture) records the test-apps talking
# over 127.0.0.1 on one port; scripts/wirecheck must then pass: every FPDU decoded, good CRCs
# only, no malformed frame, no byte of an iWARP connection left undecoded, and every RDMAP
# opcode present.
#
#   run "crc" (CRC on, no markers):
#     xs-rdma (Send, RDMA Write, Read Request/Response; 1 B .. 1 MiB, FPDUs spanning segments),
#     xs-pingpong -m ext (posted Sends), ddp-opcodes (Send, Send with SE, Write, Read, Send with
#     Invalidate, Send with SE and Invalidate, and on a second connection a Write with a wrong
#     STag key answered by a Terminate). 4 connections; every opcode count > 0; FPDUs = good CRCs.
#   run "markers" (CRC on, markers both ways): ddp-opcodes -M alone: exactly its FPDUs
#     (13, every opcode, counts known) decoded with good CRCs.
#
# tshark 4.0's documented marker limits (scripts/tests/generated-capture.sh, header): it applies
# markers to both directions as soon as one side asks (so markers are used both ways here), and
# it dissects a marked stream only when each TCP segment carries one FPDU (ddp-opcodes
# serialises its operations and keeps the RDMA size <= MULPDU, so each FPDU leaves alone in its
# segment). The traffic stays inside those limits, so nothing is tolerated: wirecheck must pass
# in full, in both runs. The third limit (payload display after a second marker) is invisible to
# wirecheck and harmless here.
. "$(dirname "$0")/../lib/common.sh"

need_cmd gcc
need_cmd make
need_cmd python3
need_cmd ss iproute2
if ! command -v tshark >/dev/null 2>&1; then
  # tshark's postinst asks whether non-root users may capture: answer no, without a prompt
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
fi
need_cmd tshark tshark
need_cmd dumpcap wireshark-common

say "building libexsock.so and the test-apps"
# EXSOCK_LIB=/path/to/libexsock.so: use that library as is (as scripts/exsock-run does)
if [ -z "${EXSOCK_LIB:-}" ]; then
  (cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
  export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
fi
nm -D --defined-only "$EXSOCK_LIB" | grep -qw ddp_post_send \
  || die "$EXSOCK_LIB does not export the DDP extension API (ddp_post_send)"
apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/xs-rdma" "$apps/xs-pingpong" "$apps/ddp-opcodes" >&2
run=$EXSOCK_ROOT/scripts/exsock-run

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ddp-capture.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

cap_pid="" cap_port=""
# syn_from_port PORT: a SYN to the test port (nobody listens there between the programs: it is
# answered by a RST, an empty connection in the capture) from a fresh local port; prints it
syn_from_port() {
  python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); sys.stdout.flush()
try: s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError: pass' "$1"
}
# cap_has PCAP SPORT...: the (partly written) pcap holds a TCP packet from one of the ports
cap_has() {
  python3 - "$@" <<'PY'
import struct, sys
ports = {int(p) for p in sys.argv[2:]}
try:
    d = open(sys.argv[1], "rb").read()
except OSError:
    sys.exit(1)
if len(d) < 24 or d[:4] != b"\xd4\xc3\xb2\xa1":
    sys.exit(1)
link = struct.unpack_from("<I", d, 20)[0]
off = {1: 14, 113: 16, 276: 20, 0: 4}.get(link, 14)  # Ethernet, Linux cooked v1/v2, null
pos = 24
while pos + 16 <= len(d):
    incl = struct.unpack_from("<I", d, pos + 8)[0]
    f = pos + 16
    if f + incl > len(d):
        break
    ip = f + off
    if incl > off + 20 and d[ip] >> 4 == 4 and d[ip + 9] == 6:
        tcp = ip + (d[ip] & 15) * 4
        if struct.unpack_from(">H", d, tcp)[0] in ports:
            sys.exit(0)
    pos = f + incl
sys.exit(1)
PY
}
# start_capture NAME PORT: dumpcap on lo with a port filter and a 64 MiB kernel buffer (64 KiB
# loopback segments overflow the default 2 MiB; 256 MiB silently captures nothing here). Its
# "Capturing on" line comes before packets really reach the file (seen: a whole connection
# missed after it), so readiness is proven: a SYN to the closed test port from a known port
# every 100 ms until one of them is in the file (bounded).
start_capture() {
  local f=$tmp/$1.pcap probes=() i
  cap_port=$2
  dumpcap -i lo -f "tcp port $2" -B 64 -P -w "$f" > "$tmp/$1.dumpcap.log" 2>&1 &
  cap_pid=$!; pids+=("$cap_pid")
  wait_for "dumpcap to start on lo" 15 "$cap_pid" grep -qs "Capturing on" "$tmp/$1.dumpcap.log" \
    || { cat "$tmp/$1.dumpcap.log"; die "the capture did not start"; }
  for ((i = 0; i < 150; i++)); do
    probes+=("$(syn_from_port "$2")")
    cap_has "$f" "${probes[@]}" && return 0
    kill -0 "$cap_pid" 2>/dev/null || break
    sleep 0.1  # interval of a bounded readiness probe
  done
  cat "$tmp/$1.dumpcap.log"; die "the capture recorded none of ${#probes[@]} probe packets within 15 s"
}
# stop_capture NAME: a sentinel SYN, then wait until dumpcap has written it (packets reach the
# file in order and in blocks, with a delay: everything before the sentinel is then there too),
# then stop it; dumpcap must report no dropped packet
stop_capture() {
  local f=$tmp/$1.pcap sport drops
  sport=$(syn_from_port "$cap_port")
  wait_for "the sentinel packet in the capture" 20 "$cap_pid" cap_has "$f" "$sport" \
    || fail "$1: the capture did not record the sentinel packet within 20 s"
  kill -INT "$cap_pid" 2>/dev/null || true
  wait_pid "$cap_pid" 10 || true
  [ -s "$f" ] || die "no capture written ($f)"
  drops=$(sed -n "s|^Packets received/dropped on interface '[^']*': [0-9]*/\\([0-9]*\\) .*|\\1|p" "$tmp/$1.dumpcap.log")
  [ "$drops" = 0 ] || fail "$1: dumpcap dropped packets: $(grep dropped "$tmp/$1.dumpcap.log")"
}

# pair NAME PORT "SERVER ARGS" "CLIENT ARGS" PROG: both under libexsock.so, both must exit 0
pair() {
  local name=$1 port=$2 sargs=$3 cargs=$4 prog=$5 spid src=0 crc=0
  # shellcheck disable=SC2086
  timeout 120 "$run" "$apps/$prog" -s -a 127.0.0.1 -p "$port" $sargs > "$tmp/$name.srv" 2>&1 &
  spid=$!; pids+=("$spid")
  if ! wait_for "$prog server on port $port" 20 "$spid" listening "$port"; then
    fail "$name: the server did not listen"; sed 's/^/  server: /' "$tmp/$name.srv"; wait_pid "$spid" 2 || true; return
  fi
  # shellcheck disable=SC2086
  timeout 120 "$run" "$apps/$prog" -c 127.0.0.1 -p "$port" $cargs > "$tmp/$name.cli" 2>&1 || crc=$?
  wait_pid "$spid" 30 || src=$?
  if [ $crc -eq 0 ] && [ $src -eq 0 ]; then
    echo "ok: $name: $(tail -n 1 "$tmp/$name.cli")"
  else
    fail "$name (client exit $crc, server exit $src)"
    sed 's/^/  client: /' "$tmp/$name.cli"; sed 's/^/  server: /' "$tmp/$name.srv"
  fi
}

# single NAME CMD...: one program (both ends), under libexsock.so, must exit 0
single() {
  local name=$1 rc=0; shift
  timeout 120 "$run" "$@" > "$tmp/$name.out" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    echo "ok: $name: $(grep -c ': ok: ' "$tmp/$name.out") operations ok"
    grep -E 'connection 1:|Terminate' "$tmp/$name.out" | sed 's/^/    /'
  else
    fail "$name exited $rc"; sed 's/^/  /' "$tmp/$name.out"
  fi
}

# check RUN PORT CONNECTIONS [EXACT-OPCODES EXACT-FPDUS]: wirecheck passes in full, CRC good
check() {
  local name=$1 port=$2 conns=$3 exact=${4:-} fpdus_want=${5:-} out rc=0 before=$fails
  out=$("$EXSOCK_ROOT/scripts/wirecheck" "$tmp/$name.pcap" --port "$port" 2>&1) || rc=$?
  echo "$out" | sed 's/^/    /'
  [ $rc -eq 0 ] || { fail "$name: wirecheck exited $rc"; return 0; }
  grep -q "^  connections: $conns iWARP" <<< "$out" \
    || fail "$name: expected $conns iWARP connections in the capture"
  local line fpdus good bad
  line=$(grep '^  FPDUs: ' <<< "$out")
  read -r fpdus good bad < <(sed -n 's/^  FPDUs: \([0-9]*\)  good CRCs: \([0-9]*\)  bad CRCs: \([0-9]*\)  CRC negotiated: yes$/\1 \2 \3/p' <<< "$line")
  if [ -z "${fpdus:-}" ]; then
    fail "$name: CRC not negotiated on every connection: $line"
  elif [ "$bad" != 0 ] || [ "$good" != "$fpdus" ] || [ "$fpdus" -eq 0 ]; then
    fail "$name: expected good CRCs = FPDUs > 0 and no bad CRC: $line"
  fi
  if [ -n "$fpdus_want" ] && [ "${fpdus:-}" != "$fpdus_want" ]; then
    fail "$name: $fpdus FPDUs decoded, the programs sent $fpdus_want"
  fi
  local ops
  ops=$(sed -n 's/^  RDMAP opcodes (per DDP segment): //p' <<< "$out")
  python3 - "$ops" <<'PY' || fail "$name: not every RDMAP opcode was decoded: $ops"
import re, sys
names = ["Write", "Read Request", "Read Response", "Send", "Send Inv", "Send SE", "Send SE Inv",
         "Terminate"]
got = dict((m.group(1), int(m.group(2))) for m in re.finditer(r"([A-Za-z ]+?) (\d+)(?:, |$)", sys.argv[1]))
missing = [n for n in names if got.get(n, 0) == 0]
sys.exit(1 if missing else 0)
PY
  if [ -n "$exact" ] && [ "$ops" != "$exact" ]; then
    fail "$name: opcode counts [$ops], expected [$exact]"
  fi
  [ $fails -eq "$before" ] \
    && echo "ok: $name: wirecheck passes: $conns iWARP connections, $fpdus FPDUs, all CRCs good, every opcode decoded"
  return 0
}

P=$(free_port)

say "run crc: CRC on, no markers (port $P)"
start_capture crc "$P"
pair xs-rdma "$P" "-K 1" "-K 1 -S 1,100,4K,64K,1M -C 2" xs-rdma
pair xs-pingpong-ext "$P" "-m ddp -K 1" "-m ext -K 1 -S 64,4K -n 100 -w 5" xs-pingpong
single ddp-opcodes-crc "$apps/ddp-opcodes" -p "$P" -K 1
stop_capture crc
check crc "$P" 4

say "run markers: CRC on, markers both ways (port $P)"
start_capture markers "$P"
single ddp-opcodes-markers "$apps/ddp-opcodes" -p "$P" -K 1 -M
stop_capture markers
# ddp-opcodes -M: connection 1: Send x3 (64 B, check, reply), Send with SE, Send with
# Invalidate, Send with SE and Invalidate, one Write (<= MULPDU), two Reads (<= MULPDU each);
# connection 2: one Write and the Terminate
check markers "$P" 2 "Write 2, Read Request 2, Read Response 2, Send 3, Send Inv 1, Send SE 1, Send SE Inv 1, Terminate 1" 13
# the markers were really there, both ways
nmark=$(tshark -n --disable-protocol rpcordma -o tcp.try_heuristic_first:TRUE -2 -r "$tmp/markers.pcap" \
  -Y iwarp_mpa.markers -T fields -e tcp.srcport 2>/dev/null | sort -u | wc -l)
[ "$nmark" -ge 2 ] || fail "markers: tshark decoded markers in $nmark direction(s), expected both"

if [ $fails -ne 0 ]; then
  echo "FAIL: ddp-capture ($fails problems; captures kept in ${TMPDIR:-/tmp}/ddp-capture-failed)"
  rm -rf "${TMPDIR:-/tmp}/ddp-capture-failed"; cp -r "$tmp" "${TMPDIR:-/tmp}/ddp-capture-failed"
  exit 1
fi
echo "PASS: ddp-capture"
