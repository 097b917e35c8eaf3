#!/usr/bin/env bash
# faults-netns: DDP transfers (CRC on, every byte verified by its receiver) across two network
# namespaces joined by a veth pair, with
#   - nftables dropping a random 1% (FAULTS_DROP_PCT) of TCP packets each way in the server's
#     namespace (`numgen random mod 100 < 1 drop`, input and output hooks; offloads are off
#     on the veth pair, so these are wire-sized packets, not GSO aggregates),
#   - a tbf qdisc (rate + queue latency bound) on the client's veth,
#   - and, for a share of the bytes, test-apps/chaos/chaos-relay in the client's namespace
#     re-segmenting the stream into random writes (1..1400 bytes, and 1..8 bytes for a small
#     run) with random stalls.
# Programs: xs-bw (write = RDMA Writes, ext = Sends into posted receives, -V: every byte
# compared), xs-transact (seeded mix of Sends, Writes and Reads, all verified) and xs-rdma
# (Write, Read back, Read). The receivers' "verified" byte counts are summed and printed; the
# total must reach FAULTS_MIN_BYTES (default 1 GiB). FAULTS_SCALE=N multiplies the bulk runs
# (the CI default, 1, moves ~1.2 GiB in about a minute here).
#
# The namespaces (exsock-f$$-a/-b, a private /30 picked at random inside 10.213.0.0/16) exist
# only inside this test and are removed by an EXIT trap; processes started here are killed by
# pid. Needs root and `ip netns add`; fails with the reason otherwise.
# timeout: 420
. "$(dirname "$0")/../lib/common.sh"

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, nftables, tc)"
need_cmd gcc
need_cmd make
need_cmd ip iproute2
need_cmd tc iproute2
need_cmd nft nftables
need_cmd ethtool

build_lib_and_apps xs "$apps/chaos-relay"

scale=${FAULTS_SCALE:-1}
drop_pct=${FAULTS_DROP_PCT:-1}
[[ $drop_pct =~ ^[0-9]+$ ]] && [ "$drop_pct" -le 50 ] || fail "FAULTS_DROP_PCT must be 0..50"
min_bytes=${FAULTS_MIN_BYTES:-$((1 << 30))}
NA=exsock-f$$-a
NB=exsock-f$$-b
net=$((RANDOM % 250 + 1))
IPA=10.213.$net.1
IPB=10.213.$net.2
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  ip netns del "$NA" 2>/dev/null || true
  ip netns del "$NB" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

say "namespaces $NA ($IPA) and $NB ($IPB)"
ip netns add "$NA" || fail "cannot create a network namespace (ip netns add $NA)"
ip netns add "$NB" || fail "cannot create a network namespace (ip netns add $NB)"
ip -n "$NA" link add veth0 type veth peer name veth1 netns "$NB" || fail "cannot create a veth pair"
ip -n "$NA" addr add "$IPA/30" dev veth0
ip -n "$NB" addr add "$IPB/30" dev veth1
for ns in "$NA" "$NB"; do
  ip -n "$ns" link set lo up
done
ip -n "$NA" link set veth0 up
ip -n "$NB" link set veth1 up
# no segmentation offloads: nftables then sees (and drops) wire-sized packets of <= 1500 bytes,
# not 64 KiB GSO/GRO aggregates
ip netns exec "$NA" ethtool -K veth0 tso off gso off gro off >/dev/null 2>&1 || fail "ethtool -K veth0"
ip netns exec "$NB" ethtool -K veth1 tso off gso off gro off >/dev/null 2>&1 || fail "ethtool -K veth1"
# rate and queue bound: 2 Gbit/s, at most 20 ms of queue
tc -n "$NA" qdisc add dev veth0 root tbf rate 2gbit burst 512kb latency 20ms \
  || fail "cannot add a tbf qdisc"
ip netns exec "$NB" nft -f - <<EOF || fail "cannot load the nftables drop rules"
table inet exsock_chaos {
  chain in  { type filter hook input  priority 0; meta l4proto tcp numgen random mod 100 < $drop_pct counter drop; }
  chain out { type filter hook output priority 0; meta l4proto tcp numgen random mod 100 < $drop_pct counter drop; }
}
EOF
ip netns exec "$NA" ping -c 1 -W 5 "$IPB" >/dev/null 2>&1 || true  # ARP warm-up (ICMP is not dropped)

verified=0
cases=0

# wait_line FILE PATTERN PID: the first line of FILE matching PATTERN (bounded: 20 s, or the
# process exits), printed on stdout
wait_line() {
  local f=$1 pat=$2 pid=$3 i=0 line
  while :; do
    line=$(grep -m 1 -E "$pat" "$f" 2>/dev/null || true)
    [ -n "$line" ] && { echo "$line"; return 0; }
    kill -0 "$pid" 2>/dev/null || return 1
    i=$((i + 1)); [ $i -gt 400 ] && return 1
    sleep 0.05  # polling interval of a bounded wait for a real condition (the listen line)
  done
}
port_of() { sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' <<< "$1"; }

# xfer NAME PROG "SERVER ARGS" "CLIENT ARGS" RELAY-ARGS: server in $NB on $IPB, client in $NA
# (through chaos-relay in $NA when RELAY-ARGS is not "-"); both must exit 0. Adds the bytes
# the receivers verified (xs-bw: the server's line; xs-transact/xs-rdma: the client's count).
xfer() {
  local name=$1 prog=$2 sargs=$3 cargs=$4 rargs=$5
  local d=$tmp/$name; mkdir -p "$d"
  local start=$SECONDS
  # shellcheck disable=SC2086
  ip netns exec "$NB" env XS_CRC=1 "$run" "$apps/$prog" -s -a "$IPB" -p 0 -K 1 -t 30 $sargs \
    > "$d/server.out" 2>&1 &
  local spid=$!; pids+=("$spid")
  local line port target rpid=
  line=$(wait_line "$d/server.out" 'listening on' "$spid") || { cat "$d/server.out"; fail "$name: the server did not listen"; }
  port=$(port_of "$line")
  target=$IPB:$port
  if [ "$rargs" != - ]; then
    # shellcheck disable=SC2086
    ip netns exec "$NA" "$apps/chaos-relay" -l 127.0.0.1:0 -f "$target" -T 300 $rargs \
      > "$d/relay.out" 2> "$d/relay.err" &
    rpid=$!; pids+=("$rpid")
    line=$(wait_line "$d/relay.out" 'listening on' "$rpid") || { cat "$d/relay.err"; fail "$name: the relay did not listen"; }
    target=127.0.0.1:$(port_of "$line")
  fi
  local rc=0 src=0
  # shellcheck disable=SC2086
  ip netns exec "$NA" env XS_CRC=1 "$run" "$apps/$prog" -c "${target%:*}" -p "${target##*:}" -K 1 -t 30 $cargs \
    > "$d/client.out" 2>&1 || rc=$?
  wait "$spid" || src=$?
  [ -n "$rpid" ] && { kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; }
  if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
    echo "--- $name client (exit $rc):"; tail -n 20 "$d/client.out"
    echo "--- $name server (exit $src):"; tail -n 20 "$d/server.out"
    [ -n "$rpid" ] && { echo "--- relay:"; tail -n 5 "$d/relay.err"; }
    fail "$name"
  fi
  local bytes
  case $prog in
    xs-bw) bytes=$(sed -n 's/.*receiver: \([0-9]*\) bytes received and verified.*/\1/p' "$d/server.out") ;;
    # both sides verify what they receive or read: the sum of the two lines
    xs-transact) bytes=$(sed -n 's/.*; \([0-9]*\) bytes verified$/\1/p' "$d/client.out" "$d/server.out" \
                          | awk '{ s += $1; n++ } END { if (n == 2) print s }') ;;
    xs-rdma) bytes=$(sed -n 's/.* \([0-9]*\) bytes transferred by RDMA and verified.*/\1/p' "$d/client.out") ;;
  esac
  [ -n "$bytes" ] || { cat "$d/client.out" "$d/server.out"; fail "$name: no verified byte count"; }
  verified=$((verified + bytes))
  cases=$((cases + 1))
  local relay=""
  [ -n "$rpid" ] && relay=" via relay: $(grep -c . "$d/relay.err") lines, $(awk '/c2s/ {w+=$(NF-3)} END {print w+0}' "$d/relay.err") writes c2s"
  say "ok: $name: $bytes bytes verified in $((SECONDS - start)) s$relay"
}

# RDMA Writes (every byte compared), 4 MiB messages: 4M x 16 x (6 + 2 warm-up) = 512 MiB
xfer write-4M xs-bw "-m ddp" "-m write -S 4M -W 16 -n $((6 * scale)) -V" -
# Sends into posted receives: 1M x 32 x (14 + 2) = 512 MiB
xfer send-1M xs-bw "-m ddp" "-m ext -S 1M -W 32 -n $((14 * scale)) -V" -
# mixed Sends/Writes/Reads on 8 connections from 4 threads
xfer transact xs-transact "" "-n 8 -T 4 -i $((150 * scale)) -S 256K -k 6 -r 7" -
# through the relay: re-segmented into 1..1400-byte writes, 1% of writes stall 1..5 ms
xfer relay-write xs-bw "-m ddp" "-m write -S 1M -W 16 -n $((4 * scale)) -V" "-s 11 -r 1400 -p 10 -m 5"
xfer relay-send xs-bw "-m ddp" "-m ext -S 64K,1M -W 16 -n $((2 * scale)) -V" "-s 12 -r 1400 -p 10 -m 5"
xfer relay-transact xs-transact "" "-n 4 -T 2 -i $((100 * scale)) -S 256K -k 4 -r 9" "-s 13 -r 1400 -p 5 -m 5"
# down to 1-byte writes (1..8 bytes), small sizes
xfer relay-tiny xs-rdma "" "-S 1,100,4095,4096,65537 -C 2" "-s 14 -r 8 -p 2 -m 3"

drops=$(ip netns exec "$NB" nft list ruleset | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
say "$cases transfers, $verified bytes verified ($((verified >> 20)) MiB), TCP packets dropped by nftables: $drops"
[ "$verified" -ge "$min_bytes" ] || fail "only $verified bytes verified (< $min_bytes)"
echo "PASS: faults-netns ($verified bytes verified under $drop_pct% loss each way, tbf, re-segmentation)"
