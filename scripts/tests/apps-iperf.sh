#!/usr/bin/env bash
# apps-iperf: unmodified iperf3 and iperf2, server and client under libexsock.so, switched to
# DDP mode by EXSOCK_RULES only (server rule on the port, client rule on the destination).
# iperf3 normal, -R and -P 4 (2 s each) and iperf2 (2 s) must complete and move data; the
# EXSOCK_LOG of each side must show every socket switched by a rule with its MPA exchange
# done; a short iperf2 run (2 MiB) is captured on lo and scripts/wirecheck must find the bytes
# inside FPDUs with good CRCs.
# Not iperf2 -P: its server accepts one connection at a time and waits up to 4 s for each one's
# first bytes before the next accept, while its client connects all streams before any sends;
# a DDP connect completes only when the server program accepts (the MPA Reply), so the last
# streams hit the MPA timeout (docs/rules.md, LIMITATIONS).
# timeout: 240
. "$(dirname "$0")/apps-lib.bash"

need_cmd iperf3
need_cmd iperf

# iperf3 -J result: sum of received bits/s and bytes, or the error
iperf3_result() {
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("error"): print("error", r["error"]); sys.exit(1)
bps = r["end"]["sum_received"]["bits_per_second"]
nbytes = r["end"]["sum_received"]["bytes"]
print("%.2f Gbit/s, %d bytes" % (bps / 1e9, nbytes))
sys.exit(0 if nbytes > 0 else 1)' "$1"
}

port=$(free_port)
srv_rules="use ddp tcp_server *:$port"
cli_rules="use tcp tcp_client 127.0.0.1:1-1023; use ddp tcp_client 127.0.0.1:$port"

say "iperf3 server on 127.0.0.1:$port, rule: $srv_rules"
EXSOCK_RULES=$srv_rules EXSOCK_LOG=debug:"$tmp/iperf3-s.log" "$run" iperf3 -s -B 127.0.0.1 -p "$port" \
  > "$tmp/iperf3-s.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "iperf3 server on $port" 20 "$spid" listening "$port" || { cat "$tmp/iperf3-s.out"; die "iperf3 server did not start"; }

clients=0
for args in "" "-R" "-P 4"; do
  # shellcheck disable=SC2086
  EXSOCK_RULES=$cli_rules EXSOCK_LOG=debug:"$tmp/iperf3-c.log" timeout 30 "$run" iperf3 -c 127.0.0.1 -p "$port" -t 2 -J $args \
    > "$tmp/iperf3.json" 2> "$tmp/iperf3.err" || { cat "$tmp/iperf3.err" "$tmp/iperf3.json" | tail -n 20; fail "iperf3 ${args:-(normal)} failed"; continue; }
  if res=$(iperf3_result "$tmp/iperf3.json"); then ok "iperf3 ${args:-(normal)} over DDP: $res"; else fail "iperf3 ${args:-(normal)}: $res"; fi
  clients=$((clients + 2)); [ "$args" = "-P 4" ] && clients=$((clients + 3))
done

stop_pid "$spid"
ddp_used "iperf3 client" "$tmp/iperf3-c.log" "$clients"
ddp_used "iperf3 server" "$tmp/iperf3-s.log" "$clients"
grep -q "mode: listen(.*DDP listener, dual mode (rule 1" "$tmp/iperf3-s.log" || fail "iperf3 server: no rule-switched listener in its log"
grep -qF "rule 1: $srv_rules" "$tmp/iperf3-s.log" || fail "iperf3 server: no startup banner with its rule"

# iperf2: one stream for 2 s, then 2 MiB captured (iperf2's client closes its stream when done
# and the server reads to EOF, so the capture holds every FPDU; iperf3 ends a test by resetting
# streams with data in flight, which leaves a cut FPDU at the end of the capture).
port=$(free_port)
say "iperf2 on 127.0.0.1:$port"
EXSOCK_RULES="use ddp tcp_server 127.0.0.0/8:$port" EXSOCK_LOG=debug:"$tmp/iperf2-s.log" "$run" iperf -s -B 127.0.0.1 -p "$port" \
  > "$tmp/iperf2-s.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "iperf2 server on $port" 20 "$spid" listening "$port" || { cat "$tmp/iperf2-s.out"; die "iperf2 server did not start"; }
i2_rules="use ddp tcp_client *:$port program iperf"
EXSOCK_RULES=$i2_rules EXSOCK_LOG=debug:"$tmp/iperf2-c.log" timeout 30 "$run" iperf -c 127.0.0.1 -p "$port" -t 2 \
  > "$tmp/iperf2.out" 2>&1 || fail "iperf2 failed: $(tail -n 5 "$tmp/iperf2.out")"
rate=$(grep -E 'sec .*bits/sec' "$tmp/iperf2.out" | tail -n 1)
if [ -n "$rate" ] && ! grep -qiE 'error|failed|refused' "$tmp/iperf2.out"; then ok "iperf2 over DDP: $rate"; else cat "$tmp/iperf2.out"; fail "iperf2: no rate"; fi
say "iperf2, 2 MiB, captured on lo"
# a capture that lost segments (tshark says so itself: tcp.analysis.lost_segment) cannot be
# decoded; that is the capture's fault, not the wire's: take it again (at most 3 times)
for try in 1 2 3; do
  start_capture iperf2 "$port"
  EXSOCK_RULES=$i2_rules EXSOCK_LOG=debug:"$tmp/iperf2-c.log" timeout 30 "$run" iperf -c 127.0.0.1 -p "$port" -n 2M \
    > "$tmp/iperf2-cap.out" 2>&1 || fail "captured iperf2 run failed: $(tail -n 3 "$tmp/iperf2-cap.out")"
  stop_capture iperf2
  capture_complete "$tmp/iperf2.pcap" && break
  echo "note: the capture lost segments (try $try); capturing again"
done
stop_pid "$spid"
wire_check iperf2 "$port" 1
ddp_used "iperf2 client" "$tmp/iperf2-c.log" 2
ddp_used "iperf2 server" "$tmp/iperf2-s.log" 2

finish "apps-iperf (iperf3 normal, -R, -P 4 and iperf2: DDP mode by rules, wirecheck clean)"
