#!/usr/bin/env bash
# apps-sockperf: unmodified programs that leave Nagle's algorithm on, or block in recvfrom, over
# iWARP (EXSOCK_RULES only).
#   - test-apps/py/small_writes.py: 50,000 small writes of random sizes without TCP_NODELAY (the
#     default), SHA-256 equal at both ends; TCP_NODELAY reads 0 as on TCP, then 1 once set;
#     300 request-response rounds of single writes finish without Nagle stalls. Captured on lo:
#     scripts/wirecheck must decode every FPDU with a good CRC, and the small writes must have
#     been coalesced (fewer TCP segments than half the writes; with TCP_NODELAY forced by the
#     engine, as before, nearly every write was a segment of its own).
#   - sockperf ping-pong (server and client block in recvfrom) and throughput (Nagle on) over
#     DDP: both run and report (sockperf checks no content: small_writes does).
# timeout: 240
. "$(dirname "$0")/apps-lib.bash"
need_cmd sockperf

py=$EXSOCK_ROOT/test-apps/py
port=$(free_port)
rules="use ddp tcp_server 127.0.0.1:$port; use ddp tcp_client 127.0.0.1:$port"
say "small writes with Nagle's algorithm on, captured on lo"
start_capture small "$port"
out=$(EXSOCK_RULES=$rules EXSOCK_LOG=debug:"$tmp/small.log" timeout 120 "$run" python3 "$py/small_writes.py" \
  --port "$port" --writes 50000) || fail "small_writes failed: $out"
stop_capture small
[[ $out == ok:* ]] && ok "small writes over DDP: ${out#ok: }"
ddp_used "small_writes" "$tmp/small.log" 4
wire_check small "$port" 2
# the first connection's client-to-server data segments (the streamed writes)
first=$(tshark -r "$tmp/small.pcap" -Y "tcp.dstport == $port && tcp.flags.syn == 1 && tcp.flags.ack == 0" \
  -T fields -e tcp.srcport 2>/dev/null | head -n 1)
segs=$(tshark -r "$tmp/small.pcap" -Y "tcp.srcport == ${first:-0} && tcp.dstport == $port && tcp.len > 0" 2>/dev/null | wc -l)
if [ -n "$first" ] && [ "$segs" -gt 0 ] && [ "$segs" -lt 25000 ]; then
  ok "50,000 small writes went out in $segs TCP segments (coalesced, as on TCP)"
else
  fail "50,000 small writes: $segs TCP segments from port ${first:-?} (expected fewer than 25,000: not coalesced?)"
fi

say "sockperf over DDP: ping-pong (blocking recvfrom on both sides) and throughput"
sport=$(free_port)
srules="use ddp tcp_server 127.0.0.1:$sport; use ddp tcp_client 127.0.0.1:$sport"
EXSOCK_RULES=$srules EXSOCK_LOG=debug:"$tmp/sp-server.log" "$run" sockperf server --tcp -i 127.0.0.1 -p "$sport" \
  > "$tmp/sp-server.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "sockperf server on $sport" 20 "$spid" listening "$sport" || { cat "$tmp/sp-server.out"; die "sockperf server did not start"; }
out=$(EXSOCK_RULES=$srules EXSOCK_LOG=debug:"$tmp/sp-pp.log" timeout 60 "$run" sockperf ping-pong --tcp -i 127.0.0.1 \
  -p "$sport" -t 2 -m 64 2>&1) || fail "sockperf ping-pong exited $?: $(tail -n 5 <<< "$out")"
lat=$(sed -n 's/.*Latency is \([0-9.]*\) usec.*/\1/p' <<< "$out")
recv=$(sed -n 's/.*\[Valid Duration\].*ReceivedMessages=\([0-9]*\).*/\1/p' <<< "$out")
if [ -n "$lat" ] && [ "${recv:-0}" -gt 1000 ]; then
  ok "sockperf ping-pong over DDP: $recv replies, average latency $lat us"
else
  fail "sockperf ping-pong: no latency or too few replies: $(tail -n 5 <<< "$out")"
fi
ddp_used "sockperf ping-pong" "$tmp/sp-pp.log" 1
out=$(EXSOCK_RULES=$srules EXSOCK_LOG=debug:"$tmp/sp-tp.log" timeout 60 "$run" sockperf throughput --tcp -i 127.0.0.1 \
  -p "$sport" -t 2 -m 64 2>&1) || fail "sockperf throughput exited $?: $(tail -n 5 <<< "$out")"
rate=$(sed -n 's/.*Message Rate is \([0-9]*\).*/\1/p' <<< "$out")
if [ "${rate:-0}" -gt 0 ]; then ok "sockperf throughput over DDP (64 B, Nagle on): $rate messages/s"; else
  fail "sockperf throughput: no rate: $(tail -n 5 <<< "$out")"; fi
ddp_used "sockperf throughput" "$tmp/sp-tp.log" 1
stop_pid "$spid"
ddp_used "sockperf server" "$tmp/sp-server.log" 2
grep -qiE "error|fail" "$tmp/sp-server.out" && { cat "$tmp/sp-server.out"; fail "the sockperf server reported errors"; }
finish "apps-sockperf (small writes coalesced as on TCP with every byte checked and the wire clean; sockperf over iWARP)"
