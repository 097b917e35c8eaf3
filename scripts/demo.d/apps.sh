#!/usr/bin/env bash
# scripts/demo.d/apps.sh — demo section: an unmodified iperf3 over iWARP via exsock-run and
# EXSOCK_RULES (no change to the program), next to plain TCP. Self-contained: builds what it
# needs, prints about ten lines:
#   - the rules, and what EXSOCK_LOG says each side's sockets became (and why);
#   - a 16 MiB iperf2 transfer captured on lo, decoded by scripts/wirecheck (MPA parameters,
#     FPDUs, CRCs, RDMAP opcodes): the program's bytes travel inside FPDUs;
#   - iperf3 throughput (3 s, single stream, client and server pinned to one CPU each) over DDP
#     and over plain TCP, both under the library, the rules the only difference.
# Exit status 0 only if every step succeeded. Needs iperf3, iperf, tshark/dumpcap (installed
# if missing).
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/../lib/common.sh"

need_cmd iperf3
need_cmd iperf
need_cmd python3
need_cmd ss iproute2
if ! command -v tshark >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
fi
need_cmd tshark tshark
need_cmd dumpcap wireshark-common

(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet) > /dev/null 2>&1 || die "build failed"
export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
run=$EXSOCK_ROOT/scripts/exsock-run
unset EXSOCK_RULES EXSOCK_CONFIG EXSOCK_LOG EXSOCK_TRACK

tmp=$(mktemp -d "${TMPDIR:-/tmp}/demo-apps.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
until_true() { # SECONDS CMD...: bounded readiness wait
  local i=0 t=$1; shift
  until "$@"; do i=$((i + 1)); [ $i -gt $((t * 20)) ] && return 1; sleep 0.05; done  # polling interval
}
listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

P=$(free_port) P2=$(free_port) S=$(free_port)
srv="use ddp tcp_server *:$P; use ddp tcp_server *:$P2"
cli="use ddp tcp_client 127.0.0.1:$P; use ddp tcp_client 127.0.0.1:$P2"
echo "rules: server EXSOCK_RULES='$srv'"
echo "       client EXSOCK_RULES='$cli'"
# iperf3 client and server on one CPU each, as `scripts/bench apps` runs them
pin_s=(); pin_c=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then pin_s=(taskset -c 1); pin_c=(taskset -c 0); fi
EXSOCK_RULES=$srv EXSOCK_LOG=debug:"$tmp/s.log" "${pin_s[@]}" "$run" iperf3 -s -B 127.0.0.1 -p "$P" > /dev/null 2>&1 &
pids+=($!)
EXSOCK_RULES=$srv "$run" iperf -s -B 127.0.0.1 -p "$P2" > /dev/null 2>&1 &
pids+=($!)
until_true 20 listening "$P" && until_true 20 listening "$P2" || die "servers did not start"

# a short transfer, captured (iperf2 closes its stream cleanly: every FPDU is in the capture)
sentinel_syn() {
  python3 -c 'import socket,sys
try: socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)
except OSError: pass' "$S"
}
sentinel_count() { tshark -n -r "$tmp/c.pcap" -Y "tcp.port == $S" 2>/dev/null | wc -l; }
sentinel_grew() { [ "$(sentinel_count)" -gt "$1" ]; }
sentinel_in_capture() { sentinel_syn; tshark -n -r "$tmp/c.pcap" -Y "tcp.port == $S" 2>/dev/null | grep -q .; }
# capture_once: returns 0 if dumpcap kept every packet, 2 if it reported drops (then retried:
# a lost packet would show as a bogus bad CRC, which is the capture's fault, not the wire's)
capture_once() {
  rm -f "$tmp/c.pcap"
  dumpcap -i lo -f "tcp port $P2 or tcp port $S" -B 64 -P -w "$tmp/c.pcap" > "$tmp/dc.log" 2>&1 &
  dc=$!; pids+=("$dc")
  until_true 15 grep -q "Capturing on" "$tmp/dc.log" || die "capture did not start"
  # "Capturing on" comes before packets reach the file: probe until one is there
  until_true 20 sentinel_in_capture || die "capture did not record a probe packet"
  EXSOCK_RULES=$cli EXSOCK_LOG=debug:"$tmp/c.log" "$run" iperf -c 127.0.0.1 -p "$P2" -n 2M > /dev/null 2>&1 || die "iperf2 failed"
  # packets reach the file in order: once a sentinel sent after the transfer is in it, all of
  # the transfer is too
  local n0
  n0=$(sentinel_count)
  sentinel_syn
  until_true 30 sentinel_grew "$n0" || die "capture incomplete"
  kill -INT "$dc"; wait "$dc" 2>/dev/null || true
  local drops
  drops=$(sed -n "s|^Packets received/dropped on interface '[^']*': [0-9]*/\([0-9]*\) .*|\1|p" "$tmp/dc.log")
  [ "${drops:-0}" = 0 ] || return 2
}
for try in 1 2 3; do
  rc=0; capture_once || rc=$?
  [ $rc -eq 0 ] && break
  [ $try -eq 3 ] && die "dumpcap dropped packets in 3 captures"
done

bps() { # MODE-RULES PORT
  EXSOCK_RULES=$1 "${pin_c[@]}" "$run" iperf3 -c 127.0.0.1 -p "$2" -t 3 -J 2>/dev/null \
    | python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}
ddp=$(bps "$cli" "$P")
Pt=$(free_port)
"${pin_s[@]}" "$run" iperf3 -s -B 127.0.0.1 -p "$Pt" > /dev/null 2>&1 &
pids+=($!)
until_true 20 listening "$Pt" || die "plain server did not start"
tcp=$(bps "" "$Pt")

echo "client log: $(grep -m1 'mode: connect' "$tmp/c.log" | sed 's/^exsock\[[0-9]*\]: //')"
echo "server log: $(grep -m1 'mode: accept' "$tmp/s.log" | sed 's/^exsock\[[0-9]*\]: //')"
echo "            $(grep -m1 'ddp accept(' "$tmp/s.log" | sed 's/^exsock\[[0-9]*\]: //; s/ DdpSocket.*//')"
echo "wire (iperf2 -n 2M, scripts/wirecheck):"
"$EXSOCK_ROOT/scripts/wirecheck" "$tmp/c.pcap" --port "$P2" 2>&1 | grep -E '^  (MPA|FPDUs|RDMAP)|: (OK|FAILED)' | sed 's/^ */    /'
echo "iperf3, 3 s, one stream: over iWARP $ddp Gbit/s, plain TCP $tcp Gbit/s ($(python3 -c "print('%.2f' % ($ddp / $tcp))")x)"
