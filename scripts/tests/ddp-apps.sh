#!/usr/bin/env bash
# ddp-apps: the extension-API test programs (test-apps/xs) end to end over 127.0.0.1 under
# libexsock.so, every transfer verified by content:
#  - xs-rdma (RDMA Write, Read back, Read of server data), xs-pingpong ddp/ext, xs-bw
#    ddp/ext/write, xs-rdmalat read/write (RDMA Read; RDMA Write + Send ping-pong), at sizes 0,
#    1, 4095, 4096, 65536, 1 MiB + 1 and 16 MiB;
#  - MPA variants: CRC on/off, markers on/off, MPA revision 1 and 2, peer-to-peer RTR (Write,
#    Read) — set through the programs' -K / XS_* environment and checked in the
#    EXSOCK_LOG=debug line of the negotiated connection;
#  - xs-transact: several connections from several threads, a seeded random mix of Sends,
#    Writes and Reads (two seeds);
#  - xs-rping client <-> xs-rping server (rping's protocol), plain and with variants;
#  - xs-rate: a counted stream of small messages, plain (write/read) and posted Sends with and
#    without DDP_MORE batching (many FPDUs per sendmsg), every message verified.
# timeout: 600
. "$(dirname "$0")/../lib/common.sh"

build_lib_and_apps xs

tmp_and_server
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }

SIZES=0,1,4095,4096,65536,1048577,16M
cases=0

# pair NAME PROG "SERVER ARGS" "CLIENT ARGS" [LOG-PATTERN]: a server on an ephemeral port of
# 127.0.0.1 (its "listening on" line gives the port), then the client; both must exit 0. With
# LOG-PATTERN, both run with EXSOCK_LOG=debug and the client's negotiated-connection line must
# match it (grep -E).
pair() {
  local name=$1 prog=$2 sargs=$3 cargs=$4 pat=${5:-}
  local d=$tmp/$name; mkdir -p "$d"
  local logenv=()
  [ -n "$pat" ] && logenv=(EXSOCK_LOG=debug:"$d/log")
  mkfifo "$d/fifo"
  # shellcheck disable=SC2086 # argument lists
  env "${logenv[@]}" "$run" "$apps/$prog" -s -a 127.0.0.1 -p 0 $sargs > "$d/fifo" 2> "$d/server.err" &
  spid=$!
  exec 3< "$d/fifo"
  local line
  read -r -t 20 -u 3 line || { exec 3<&-; cat "$d/server.err"; fail "$name: the server did not listen"; }
  local port=${line##*:}; port=${port%% *}
  cat <&3 > "$d/server.out" &
  local cat_pid=$!
  local rc=0
  # shellcheck disable=SC2086
  env "${logenv[@]}" "$run" "$apps/$prog" -c 127.0.0.1 -p "$port" $cargs > "$d/client.out" 2>&1 || rc=$?
  local src=0
  wait "$spid" || src=$?
  spid=
  wait "$cat_pid" || true
  exec 3<&-
  if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
    echo "--- $name client (exit $rc):"; tail -n 20 "$d/client.out"
    echo "--- $name server (exit $src):"; tail -n 20 "$d/server.out" "$d/server.err"
    fail "$name"
  fi
  if [ -n "$pat" ]; then
    grep -E "ddp connect\([0-9]+\): initiator" "$d/log" | grep -qE "$pat" \
      || { grep -E 'ddp (connect|accept)' "$d/log"; fail "$name: negotiated connection does not match '$pat'"; }
    grep -qE "ddp accept\([0-9]+\): responder" "$d/log" || fail "$name: no DDP accept in the log"
  fi
  cases=$((cases + 1))
  say "ok: $name"
}

# rping NAME "ARGS" [ENV...]: xs-rping server and client on a free port (rping prints no
# listening line: wait for the LISTEN socket in /proc/net/tcp, without connecting to it).
rping() {
  local name=$1 args=$2; shift 2
  local d=$tmp/$name; mkdir -p "$d"
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
         || echo $((20000 + RANDOM % 20000)))
  # shellcheck disable=SC2086
  env "$@" "$run" "$apps/xs-rping" -s -V -a 127.0.0.1 -p "$port" $args > "$d/server.out" 2>&1 &
  spid=$!
  local hex i=0
  hex=$(printf ':%04X ' "$port")
  until grep -q "${hex}00000000:0000 0A" /proc/net/tcp; do
    i=$((i + 1)); [ $i -gt 400 ] && fail "$name: xs-rping server did not listen"
    kill -0 "$spid" 2>/dev/null || { cat "$d/server.out"; fail "$name: xs-rping server exited"; }
    sleep 0.05  # polling interval of a bounded wait for a real condition (LISTEN state)
  done
  local rc=0 src=0
  # shellcheck disable=SC2086
  env "$@" "$run" "$apps/xs-rping" -c -a 127.0.0.1 -p "$port" $args > "$d/client.out" 2>&1 || rc=$?
  wait "$spid" || src=$?
  spid=
  if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
    echo "--- $name client (exit $rc):"; tail -n 20 "$d/client.out"
    echo "--- $name server (exit $src):"; tail -n 20 "$d/server.out"
    fail "$name"
  fi
  cases=$((cases + 1))
  say "ok: $name"
}

# 1. every operation at every size, default options (MPA rev 2, CRC on, no markers)
pair rdma xs-rdma "" "-S $SIZES -C 2"
pair pingpong-ddp xs-pingpong "-m ddp" "-m ddp -S $SIZES -n 3 -w 1"
pair pingpong-ext xs-pingpong "-m ddp" "-m ext -S $SIZES -n 3 -w 1"
for m in ddp ext write; do
  pair "bw-$m" xs-bw "-m ddp" "-m $m -S $SIZES -n 3 -W 8 -V"
done
for m in read write; do
  pair "rdmalat-$m" xs-rdmalat "" "-m $m -S $SIZES -n 3 -w 1"
done

# 2. MPA variants (checked in the negotiated-connection log line)
pair rdma-crc0 xs-rdma "-K 0" "-K 0 -S $SIZES -C 1" 'CRC off, markers tx 0 rx 0'
pair rdma-crc1 xs-rdma "-K 1" "-K 1 -S $SIZES -C 1" 'MPA rev 2, CRC on'
XS_MARKERS=1 pair rdma-markers xs-rdma "" "-S $SIZES -C 1" 'markers tx 1 rx 1'
XS_MARKERS=1 XS_CRC=0 pair bw-markers-crc0 xs-bw "-m ddp" "-m write -S $SIZES -n 2 -W 4 -V" 'CRC off, markers tx 1 rx 1'
XS_MPA_REV=1 pair rdma-rev1 xs-rdma "" "-S $SIZES -C 1" 'MPA rev 1, '
XS_MPA_REV=1 XS_MARKERS=1 pair pingpong-rev1-markers xs-pingpong "-m ddp" "-m ext -S $SIZES -n 2 -w 1" 'MPA rev 1, CRC on, markers tx 1 rx 1'
XS_P2P=1 pair rdma-p2p-write xs-rdma "" "-S $SIZES -C 1" 'p2p 1 rtr 0x1'
XS_P2P=2 pair bw-p2p-read xs-bw "-m ddp" "-m ext -S $SIZES -n 2 -W 4 -V" 'p2p 1 rtr 0x2'
XS_MARKERS=1 XS_CRC=0 pair rdmalat-write-markers-crc0 xs-rdmalat "" "-m write -S $SIZES -n 2 -w 1" 'CRC off, markers tx 1 rx 1'
XS_MPA_REV=1 pair rdmalat-read-rev1 xs-rdmalat "" "-m read -S $SIZES -n 2 -w 1" 'MPA rev 1, '

# 3. several connections, several threads, a seeded random mix
pair transact-seed1 xs-transact "" "-n 6 -T 3 -i 100 -r 1 -S 1048576 -k 6"
pair transact-seed42 xs-transact "" "-n 4 -T 2 -i 100 -r 42 -S 65536 -k 8"
XS_MARKERS=1 XS_CRC=0 pair transact-markers xs-transact "" "-n 3 -T 3 -i 50 -r 7 -S 65536" 'CRC off, markers tx 1 rx 1'

# 4. rping's protocol, client <-> server
rping rping "-C 20 -S 100"
rping rping-big "-C 5 -S 65535"
rping rping-crc0-rev1-markers "-C 10 -S 64" XS_CRC=0 XS_MPA_REV=1 XS_MARKERS=1
rping rping-p2p-read "-C 10 -S 64" XS_P2P=2

# 5. message rate: counted runs (sender and receiver in one xs-rate run), every message checked
# rate NAME "ARGS" [ENV...]
rate() {
  local name=$1 args=$2; shift 2
  local d=$tmp/$name; mkdir -p "$d"
  local rc=0
  # shellcheck disable=SC2086
  env "$@" timeout 120 "$run" "$apps/xs-rate" $args > "$d/out" 2>&1 || rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^rate mode=' "$d/out"; then
    echo "--- $name (exit $rc):"; tail -n 20 "$d/out"
    fail "$name"
  fi
  cases=$((cases + 1))
  say "ok: $name"
}
rate rate-plain "-m ddp-plain -n 20000"
rate rate-send "-m ddp-send -n 50000"
rate rate-send-nomore "-m ddp-send -M 0 -n 20000"
rate rate-send-1k-markers "-m ddp-send -S 1000 -Q 64 -n 20000" XS_MARKERS=1
rate rate-send-odd-crc0 "-m ddp-send -S 61 -n 20000 -K 0"

echo "PASS: ddp-apps ($cases client/server runs verified)"
