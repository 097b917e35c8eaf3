#!/usr/bin/env bash
# faults-kill: what a DDP program sees when its peer dies or the stream is damaged, with
# test-apps/chaos/xs-fault and chaos-relay (all on 127.0.0.1 except the last case):
#  1. kill-sender / kill-receiver: a stream of RDMA Writes + Sends, the receiver checking
#     every byte and acking; one side is killed with SIGKILL mid-transfer. The survivor must
#     report the failure within 1 s of the kill (measured from the kill to the survivor's
#     CLOCK_REALTIME stamp) and every message it completed before was verified (the receiver
#     exits 1 on any mismatch, the sender counts only acked = verified messages).
#  2. close-read: close() while another thread waits for an outstanding 64 MiB RDMA Read
#     (slowed down by the relay so it cannot finish within close's 2 s linger): close returns
#     at once, the waiter returns promptly with FLUSH_ERR (or EBADF/EPIPE), never hangs.
#  3. dereg: ddp_dereg_mr while the peer's Writes arrive: Terminate (1,1,0), the peer's Writes
#     fail, and no byte of the region changes after the call returned.
#  4. bit flip: chaos-relay flips one bit of the Write stream; the receiver must detect it
#     by CRC and send Terminate (2,0,2) (its completion shows vendor_err 0x020002, the
#     sender's shows the Terminate it received), and no corrupted byte is accepted (xs-bw -V
#     verifies every byte it delivers).
#  5. rst: chaos-relay resets both legs after K bytes (in the middle of an FPDU): both
#     programs fail with an error within 2 s, no hang.
#  6. silent peer (power loss), in two network namespaces: nftables drops every packet
#     between them mid-transfer; with SO_KEEPALIVE (1 s idle, 1 s interval, 2 probes) and
#     TCP_USER_TIMEOUT 2 s set by the application (xs-fault -k; the preload forwards them to
#     the TCP connection), both sides report the failure; the detection time is printed and
#     must be under 6 s. Skipped (with a note) when network namespaces are unavailable.
# timeout: 240
. "$(dirname "$0")/../lib/common.sh"

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
build_lib_and_apps xs chaos

tmp=$(mktemp -d)
pids=()
NA=exsock-k$$-a
NB=exsock-k$$-b
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$NA" 2>/dev/null || true
  ip netns del "$NB" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
summary=()

# wait_line FILE PATTERN PID [SECONDS]: bounded wait for a line in FILE (or PID's exit)
wait_line() {
  local f=$1 pat=$2 pid=$3 t=${4:-20} i=0 line
  while :; do
    line=$(grep -m 1 -E "$pat" "$f" 2>/dev/null || true)
    [ -n "$line" ] && { echo "$line"; return 0; }
    kill -0 "$pid" 2>/dev/null || return 1
    i=$((i + 1)); [ $i -gt $((t * 20)) ] && return 1
    sleep 0.05  # polling interval of a bounded wait for a real condition (a line)
  done
}
port_of() { sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' <<< "$1"; }
now_ns() { date +%s%N; }

# start_server NAME PROG ARGS...: server on 127.0.0.1:0; sets $spid and $port
start_server() {
  local name=$1 prog=$2; shift 2
  mkdir -p "$tmp/$name"
  "$run" "$apps/$prog" -s -a 127.0.0.1 -p 0 "$@" > "$tmp/$name/server.out" 2>&1 &
  spid=$!; pids+=("$spid")
  local line
  line=$(wait_line "$tmp/$name/server.out" 'listening on' "$spid") \
    || { cat "$tmp/$name/server.out"; fail "$name: the server did not listen"; }
  port=$(port_of "$line")
}
# start_relay NAME ARGS...: chaos-relay to 127.0.0.1:$port; sets $rpid and $rport
start_relay() {
  local name=$1; shift
  "$apps/chaos-relay" -l 127.0.0.1:0 -f "127.0.0.1:$port" -T 120 "$@" \
    > "$tmp/$name/relay.out" 2> "$tmp/$name/relay.err" &
  rpid=$!; pids+=("$rpid")
  local line
  line=$(wait_line "$tmp/$name/relay.out" 'listening on' "$rpid") \
    || { cat "$tmp/$name/relay.err"; fail "$name: the relay did not listen"; }
  rport=$(port_of "$line")
}
# wait_exit PID SECONDS: wait for a background process (bounded); its exit status in $xrc
wait_exit() {
  local pid=$1 t=$2 i=0
  while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt $((t * 50)) ] && { kill -9 "$pid" 2>/dev/null; xrc=124; wait "$pid" 2>/dev/null || true; return; }
    sleep 0.02  # polling interval of a bounded wait for a process to exit
  done
  xrc=0; wait "$pid" || xrc=$?
}

# 1. SIGKILL mid-transfer, each side in turn
kill_case() {
  local name=$1 victim=$2
  local d=$tmp/$name
  start_server "$name" xs-fault -M stream -R 8M -K 1 -t 10
  "$run" "$apps/xs-fault" -c 127.0.0.1 -p "$port" -M stream -R 8M -K 1 -t 10 > "$d/client.out" 2>&1 &
  cpid=$!; pids+=("$cpid")
  wait_line "$d/client.out" 'client: running' "$cpid" > /dev/null || { cat "$d"/*.out; fail "$name: client did not start"; }
  # let it run mid-transfer: a deliberate part of the scenario, not a readiness wait
  sleep 1
  local vpid=$cpid survivor=server spid_s=$spid out=$d/server.out
  if [ "$victim" = server ]; then vpid=$spid; survivor=client; spid_s=$cpid; out=$d/client.out; fi
  local t0; t0=$(now_ns)
  kill -9 "$vpid"
  wait "$vpid" 2>/dev/null || true
  wait_exit "$spid_s" 15
  [ "$xrc" -eq 3 ] || { cat "$d"/*.out; fail "$name: the $survivor exited $xrc, expected 3 (failure detected)"; }
  local line t1 n ms
  line=$(grep -m 1 'failure detected at' "$out")
  t1=$(sed -n 's/.*detected at \([0-9]*\) .*/\1/p' <<< "$line")
  n=$(sed -n 's/.* after \([0-9]*\) messages.*/\1/p' <<< "$line")
  ms=$(( (t1 - t0) / 1000000 ))
  say "$name: the $survivor detected the kill after $ms ms ($n messages of 64 KiB verified before): ${line#*messages: }"
  [ "$n" -gt 0 ] || fail "$name: no message was verified before the kill"
  [ "$ms" -le 1000 ] || fail "$name: detection took $ms ms (> 1000)"
  summary+=("$name: detected in $ms ms after $n verified messages ($((n * 64)) KiB)")
}
kill_case kill-sender client
kill_case kill-receiver server

# 2. close() while a Read is outstanding (the Read Response is slowed down by the relay)
name=close-read; d=$tmp/$name
start_server "$name" xs-fault -M close-read -R 64M -K 1 -t 10
start_relay "$name" -s 21 -r 1400 -p 20 -m 10
rc=0
timeout 30 "$run" "$apps/xs-fault" -c 127.0.0.1 -p "$rport" -M close-read -R 64M -K 1 -t 10 -w 50 \
  > "$d/client.out" 2>&1 || rc=$?
wait_exit "$spid" 15
cat "$d/client.out"
[ $rc -eq 0 ] || fail "$name: client exited $rc"
[ "$xrc" -eq 0 ] || { cat "$d/server.out"; fail "$name: server exited $xrc"; }
grep -q 'FLUSH_ERR' "$d/client.out" || fail "$name: the Read did not complete with FLUSH_ERR"
kill "$rpid" 2>/dev/null || true
summary+=("close-read: $(sed -n 's/.*close-read: //p' "$d/client.out" | head -n 1)")

# 3. deregistration while Writes arrive
name=dereg; d=$tmp/$name
start_server "$name" xs-fault -M dereg -R 16M -K 1 -t 10
rc=0
timeout 30 "$run" "$apps/xs-fault" -c 127.0.0.1 -p "$port" -M dereg -R 16M -K 1 -t 10 > "$d/client.out" 2>&1 || rc=$?
wait_exit "$spid" 15
cat "$d/client.out" "$d/server.out"
[ $rc -eq 0 ] && [ "$xrc" -eq 0 ] || fail "$name: client exited $rc, server $xrc"
grep -q 'vendor_err 0x010100' "$d/client.out" || fail "$name: the client did not see Terminate (1,1,0)"
summary+=("dereg: $(grep -o 'ddp_dereg_mr took [0-9.]* ms' "$d/server.out"), Terminate (1,1,0), region untouched")

# 4. one flipped bit in the stream of Writes + Sends (byte 3,000,017 client->server)
name=bitflip; d=$tmp/$name
start_server "$name" xs-fault -M stream -R 8M -K 1 -t 10
start_relay "$name" -s 31 -F 3000017 -D c2s
"$run" "$apps/xs-fault" -c 127.0.0.1 -p "$rport" -M stream -R 8M -K 1 -t 10 > "$d/client.out" 2>&1 &
cpid=$!; pids+=("$cpid")
t0=$(now_ns)
wait_exit "$spid" 15; src=$xrc
wait_exit "$cpid" 15; crc=$xrc
ms=$(( ($(now_ns) - t0) / 1000000 ))
kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true
echo "--- client:"; cat "$d/client.out"; echo "--- server:"; cat "$d/server.out"; cat "$d/relay.err"
grep -q 'flipped bit' "$d/relay.err" || fail "$name: the relay flipped nothing"
# exit 3 = failure detected and reported; 1 would be a content mismatch (corrupted data
# accepted) or a timeout
[ "$src" -eq 3 ] && [ "$crc" -eq 3 ] || fail "$name: server exited $src, client $crc (expected 3 and 3)"
grep -q 'Terminate sent (2,0,2)' "$d/server.out" \
  || fail "$name: the receiver did not detect the CRC error and send Terminate (2,0,2)"
grep -q 'Terminate received (2,0,2)' "$d/client.out" || fail "$name: the sender did not receive Terminate (2,0,2)"
n=$(sed -n 's/.* after \([0-9]*\) messages.*/\1/p' "$d/server.out")
summary+=("bitflip: receiver sent Terminate (2,0,2) after $n verified messages, sender received it; both done in $ms ms; no corrupted message accepted")

# 5. RST in the middle of an FPDU
name=rst; d=$tmp/$name
start_server "$name" xs-bw -m ddp -K 1 -t 10
start_relay "$name" -s 41 -R 5000013 -D c2s
rc=0
t0=$(now_ns)
timeout 30 "$run" "$apps/xs-bw" -c 127.0.0.1 -p "$rport" -m write -S 1M -W 8 -n 20 -V -K 1 -t 10 \
  > "$d/client.out" 2>&1 || rc=$?
wait_exit "$spid" 15
ms=$(( ($(now_ns) - t0) / 1000000 ))
kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true
echo "--- client:"; cat "$d/client.out"; echo "--- server:"; cat "$d/server.out"; cat "$d/relay.err"
grep -q 'RST after 5000013' "$d/relay.err" || fail "$name: the relay did not reset"
[ $rc -ne 0 ] && [ "$xrc" -ne 0 ] || fail "$name: the reset went unnoticed (client $rc, server $xrc)"
[ "$xrc" -ne 124 ] && [ $rc -ne 124 ] || fail "$name: hang"
[ "$ms" -le 3000 ] || fail "$name: took $ms ms"
summary+=("rst: both sides failed within $ms ms of the start (RST after 5000013 bytes)")

# 6. silent peer: every packet dropped (power loss), TCP keepalive + user timeout set by the app
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && ip netns add "$NA" 2>/dev/null; then
  need_cmd nft nftables
  name=silent; d=$tmp/$name; mkdir -p "$d"
  ip netns add "$NB" || fail "ip netns add $NB"
  ip -n "$NA" link add veth0 type veth peer name veth1 netns "$NB"
  ip -n "$NA" addr add 10.214.9.1/30 dev veth0
  ip -n "$NB" addr add 10.214.9.2/30 dev veth1
  ip -n "$NA" link set veth0 up; ip -n "$NB" link set veth1 up
  ip netns exec "$NB" "$run" "$apps/xs-fault" -s -a 10.214.9.2 -p 0 -M stream -R 8M -K 1 -t 20 -k \
    > "$d/server.out" 2>&1 &
  spid=$!; pids+=("$spid")
  line=$(wait_line "$d/server.out" 'listening on' "$spid") || { cat "$d/server.out"; fail "$name: no listen"; }
  port=$(port_of "$line")
  ip netns exec "$NA" "$run" "$apps/xs-fault" -c 10.214.9.2 -p "$port" -M stream -R 8M -K 1 -t 20 -k \
    > "$d/client.out" 2>&1 &
  cpid=$!; pids+=("$cpid")
  wait_line "$d/client.out" 'client: running' "$cpid" > /dev/null || { cat "$d"/*.out; fail "$name: client did not start"; }
  sleep 1  # mid-transfer (deliberate)
  t0=$(now_ns)
  ip netns exec "$NB" nft -f - <<'EOF' || fail "$name: nft"
table inet exsock_blackhole {
  chain in  { type filter hook input  priority -10; drop; }
  chain out { type filter hook output priority -10; drop; }
}
EOF
  wait_exit "$cpid" 25; crc=$xrc
  wait_exit "$spid" 25; src=$xrc
  cat "$d/client.out" "$d/server.out"
  [ "$crc" -eq 3 ] && [ "$src" -eq 3 ] || fail "$name: client exited $crc, server $src (expected 3 and 3)"
  ms_c=$(( ($(sed -n 's/.*detected at \([0-9]*\) .*/\1/p' "$d/client.out") - t0) / 1000000 ))
  ms_s=$(( ($(sed -n 's/.*detected at \([0-9]*\) .*/\1/p' "$d/server.out") - t0) / 1000000 ))
  say "$name: sender detected the silent peer after $ms_c ms, receiver after $ms_s ms"
  [ "$ms_c" -le 6000 ] && [ "$ms_s" -le 6000 ] || fail "$name: detection took too long"
  summary+=("silent peer (all packets dropped), keepalive 1+1x2 s, user timeout 2 s: sender $ms_c ms, receiver $ms_s ms")
else
  summary+=("silent peer: skipped (needs root and ip netns)")
fi

say "summary"
printf '  %s\n' "${summary[@]}"
echo "PASS: faults-kill"
