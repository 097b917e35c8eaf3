#!/usr/bin/env bash
# timeout: 300
# scripts/demo runs to the end (exit 0) and its output shows what it claims: the MPA Request
# and Reply decoded, a frame of every opcode the exchange uses, the bytes verified, no CRC
# error, both sides closed.
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"

err=$(mktemp "${TMPDIR:-/tmp}/demo-test.XXXXXX")
trap 'rm -f "$err"' EXIT
rc=0
out=$("$EXSOCK_ROOT/scripts/demo" 2> "$err") || rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: scripts/demo exited $rc"; echo "$out"; cat "$err"; exit 1
fi

fails=0
# expect PATTERN: an extended regular expression some line of the output matches
expect() {
  if grep -Eq -- "$1" <<< "$out"; then
    echo "ok: $1"
  else
    echo "FAIL: no line matches '$1'"; fails=$((fails + 1))
  fi
}

expect '^1\. The protocol core, in memory$'
expect '^-> MPA Request +rev 2 +CRC +markers:no +IRD 4 ORD 4 +pd "exsock demo"$'
expect '^<- MPA Reply +rev 2 +CRC +markers:no +IRD 4 ORD 4 +pd "exsock demo"$'
expect '^-> FPDU +[0-9]+ B +Send +QN 0 MSN 1 MO 0 +L +payload 32 B +CRC ok$'
expect '^<- FPDU +[0-9]+ B +Send +QN 0 MSN 1 MO 0 +L +payload 16 B +CRC ok$'
expect '^-> FPDU +[0-9]+ B +RDMA Write +STag 0x[0-9a-f]{8} TO 0x[0-9a-f]+ +L +payload 4096 B +x[0-9]+ segments +CRC ok$'
expect '^-> FPDU +[0-9]+ B +Read Request +QN 1 MSN 1 MO 0 +L +read 4096 B at STag 0x[0-9a-f]{8} '
expect '^<- FPDU +[0-9]+ B +Read Response +STag 0x[0-9a-f]{8} TO 0x[0-9a-f]+ +L +payload 4096 B .*CRC ok$'
expect '^-> FPDU +[0-9]+ B +Send Inv +QN 0 MSN 2 MO 0 +L +invalidate 0x[0-9a-f]{8} +payload [0-9]+ B +CRC ok$'
expect '^-> TCP FIN'
expect '^<- TCP FIN'
expect '^ +per opcode +RDMA Write 1 \([0-9]+ FPDUs\), RDMA Read Request 1, RDMA Read Response 1 \([0-9]+ FPDUs\), Send 2, Send with Invalidate 1$'
expect '^ +bytes verified +[0-9]+ \(.*RDMA Write 4096, RDMA Read 4096'
expect '^ +CRC errors 0, Terminates 0'
expect '^OK$'
expect 'scripts/test'
if grep -q $'\033' <<< "$out"; then
  echo "FAIL: terminal escapes in the standard output of a pipe"; fails=$((fails + 1))
fi

[ $fails -eq 0 ] || { echo "$out"; echo "$fails demo checks failed"; exit 1; }
echo "demo output as expected"
