#!/usr/bin/env bash
# apps-stat: exsock-stat reads the DDP sockets of running processes from outside. An iperf3
# server and client (DDP mode by rules) run for 4 s; meanwhile `exsock-stat` must list both
# processes, and `exsock-stat PID` must show the client's data socket in state RTS with its
# addresses, the negotiated MPA parameters (rev 2, CRC on, markers off, IRD/ORD 16) and growing
# byte/FPDU counters, no CRC error and no Terminate, and the server's sockets as accepted by a
# dual-mode listener. When the client has exited, its segment (/dev/shm/exsock-PID) is gone.
# Then a connection whose reader reads nothing: its queues show where the bytes wait.
# timeout: 120
. "$(dirname "$0")/apps-lib.bash"

need_cmd iperf3

port=$(free_port)
EXSOCK_RULES="use ddp tcp_server *:$port" "$run" iperf3 -s -B 127.0.0.1 -p "$port" > "$tmp/s.out" 2>&1 &
spid=$!; pids+=("$spid")
wait_for "iperf3 server on $port" 20 "$spid" listening "$port" || die "iperf3 server did not start"
EXSOCK_RULES="use ddp tcp_client 127.0.0.1:$port" "$run" iperf3 -c 127.0.0.1 -p "$port" -t 4 > "$tmp/c.out" 2>&1 &
cpid=$!; pids+=("$cpid")  # exsock-run execs: this is the pid of iperf3 (bounded by wait_pid below)

# the client's data socket has moved bytes (bounded wait)
moving() { "$STAT" "$cpid" > "$tmp/stat1.txt" 2>&1 && grep -Eq '^    tx [1-9][0-9]{6,} bytes' "$tmp/stat1.txt"; }
wait_for "exsock-stat to show the client's data moving" 15 "$cpid" moving || { cat "$tmp/stat1.txt"; fail "exsock-stat $cpid: no socket with bytes"; }
"$STAT" > "$tmp/list.txt" 2>&1 || fail "exsock-stat (list) exited $?"
"$STAT" "$cpid" > "$tmp/stat2.txt" 2>&1 || fail "exsock-stat $cpid exited $?"
"$STAT" "$spid" > "$tmp/stat3.txt" 2>&1 || fail "exsock-stat $spid exited $?"
sed 's/^/    /' "$tmp/list.txt"
sed 's/^/    /' "$tmp/stat2.txt"
for p in "$spid" "$cpid"; do
  grep -Eq "^ *$p +iperf3 +[1-9][0-9]* +running" "$tmp/list.txt" || fail "exsock-stat does not list pid $p (iperf3, running, with sockets)"
done
grep -q "^pid $cpid (iperf3): 2 DDP sockets" "$tmp/stat2.txt" || fail "client: expected 2 DDP sockets (control and data)"
[ "$(grep -cE "^  fd [0-9]+ +RTS +127\.0\.0\.1:[0-9]+ -> 127\.0\.0\.1:$port +initiator" "$tmp/stat2.txt")" = 2 ] \
  || fail "client: expected both sockets RTS, 127.0.0.1 -> port $port, initiator"
[ "$(grep -c "MPA rev 2, CRC on, markers tx off rx off, IRD 16 ORD 16, MULPDU [1-9]" "$tmp/stat2.txt")" = 2 ] \
  || fail "client: negotiated parameters missing"
[ "$(grep -c "CRC errors 0, Terminates sent 0 received 0" "$tmp/stat2.txt")" = 2 ] || fail "client: CRC errors or Terminates"
b1=$(grep -Eo '^    tx [0-9]+' "$tmp/stat1.txt" | awk '{print $2}' | sort -n | tail -n 1)
b2=$(grep -Eo '^    tx [0-9]+' "$tmp/stat2.txt" | awk '{print $2}' | sort -n | tail -n 1)
[ "$b2" -gt "$b1" ] && ok "client's tx counter grew between two reads: $b1 -> $b2 bytes" || fail "client's tx counter did not grow ($b1 -> $b2)"
grep -Eq "fpdus|in [1-9][0-9]* FPDUs" "$tmp/stat2.txt" || fail "client: no FPDU count"
[ "$(grep -cE "^  fd [0-9]+ +RTS +127\.0\.0\.1:$port -> 127\.0\.0\.1:[0-9]+ +responder \(dual-mode listener\)" "$tmp/stat3.txt")" -ge 2 ] \
  || { sed 's/^/    /' "$tmp/stat3.txt"; fail "server: expected its sockets as responders from a dual-mode listener"; }
wait_pid "$cpid" 30 || fail "iperf3 client failed: $(tail -n 3 "$tmp/c.out")"
[ ! -e "/dev/shm/exsock-$cpid" ] && ok "the client's segment was removed at exit" || fail "/dev/shm/exsock-$cpid left behind"
"$STAT" "$cpid" > /dev/null 2>&1 && fail "exsock-stat $cpid succeeds for an exited process"
stop_pid "$spid"

# Where unread data waits: a python3 process sends 100,000 bytes to itself over a DDP
# connection and reads none until told to. Once the sending end shows nothing left to send
# ("out:" all 0), the receiving end's "bytes in:" (TCP, engine, socketpair) must add up to the
# 100,000 bytes, plus at most the FPDUs' framing in the TCP part.
mkfifo "$tmp/unread.in"
EXSOCK_RULES="use ddp tcp_server 127.0.0.1:* program python3; use ddp tcp_client 127.0.0.1:* program python3" \
  "$run" python3 "$EXSOCK_ROOT/test-apps/py/unread.py" < "$tmp/unread.in" > "$tmp/unread.out" 2>&1 &
upid=$!; pids+=("$upid")
exec 9> "$tmp/unread.in"  # (its stdin stays open until closed below)
wait_for "unread.py to send" 20 "$upid" grep -q '^ready' "$tmp/unread.out" || { cat "$tmp/unread.out"; fail "unread.py did not start"; }
read -r _ ufd_c ufd_s un < "$tmp/unread.out"
# the "bytes in:"/"out:" line of fd $1 in $2: the six numbers
qline() { awk -v fd="$1" '$1 == "fd" { on = ($2 == fd) } on && /bytes in:/ { print $4, $6, $8, $12, $14, $16 }' "$2"; }
sent_all() { "$STAT" "$upid" > "$tmp/stat-u.txt" 2>&1 && [ "$(qline "$ufd_c" "$tmp/stat-u.txt" | awk '{ print $4 + $5 + $6 }')" = 0 ]; }
if wait_for "the sending end to have nothing left to send" 15 "$upid" sent_all; then
  sed 's/^/    /' "$tmp/stat-u.txt"
  read -r qt qe qp _ <<< "$(qline "$ufd_s" "$tmp/stat-u.txt")"
  if [ -n "$qt" ] && [ $((qt + qe + qp)) -ge "$un" ] && [ $((qe + qp)) -le "$un" ] && [ $((qt + qe + qp)) -le $((un + un / 50)) ]; then
    ok "the unread $un bytes show where they wait: TCP $qt, engine $qe, socketpair $qp"
  else
    fail "the unread $un bytes: exsock-stat shows TCP '$qt' engine '$qe' socketpair '$qp'"
  fi
else
  cat "$tmp/stat-u.txt"; fail "the sending end of unread.py still shows bytes to send"
fi
exec 9>&-
wait_pid "$upid" 30 && grep -q '^ok' "$tmp/unread.out" && ok "unread.py: $(sed -n 's/^ok: //p' "$tmp/unread.out")" \
  || fail "unread.py: $(tail -n 2 "$tmp/unread.out")"

[ "$fails" -eq 0 ] && ok "exsock-stat shows peers, negotiated options, counters, state, queues"
finish "apps-stat (exsock-stat on a running iperf3 pair)"
