#!/usr/bin/env bash
# timeout: 300
# scripts/demo runs to the end (exit 0) and its output shows what it claims: the MPA Request
# and Reply decoded, a frame of every opcode the exchange uses, the bytes verified, no CRC
# error, both sides closed. Section 2 (xs-rdma over libexsock.so, captured): what DDP_CONN_INFO
# says was negotiated on both sides, the bytes both programs verified, the MPA Request/Reply
# and a Send, an RDMA Write, a Read Request and a Read Response as tshark decodes them with
# good CRCs, and scripts/wirecheck's counts (FPDUs = good CRCs, no bad one).
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
expect '^2\. DDP-aware programs over libexsock\.so$'
expect '^  negotiated \(DDP_CONN_INFO\) +client: MPA rev 2, CRC on, markers tx 0 rx 0, initiator, IRD 16 ORD 16, MULPDU [0-9]+$'
expect '^ +server: MPA rev 2, CRC on, markers tx 0 rx 0, responder, IRD 16 ORD 16, MULPDU [0-9]+$'
expect '^  bytes verified +client: 4 operations, 12288 bytes transferred by RDMA and verified$'
expect '^ +server: 1 Writes \(4096 bytes\) verified in the region, read half intact$'
expect '^-> MPA Request +rev 2 +CRC +markers:no +private data 4 B \(IRD/ORD\)$'
expect '^<- MPA Reply +rev 2 +CRC +markers:no +private data 4 B \(IRD/ORD\)$'
expect '^-> FPDU +344 B +Send +QN 0 MSN 1 MO 0 +payload 320 B +CRC ok$'
expect '^<- FPDU +40 B +Send +QN 0 MSN 1 MO 0 +payload 16 B +CRC ok$'
expect '^-> FPDU +4116 B +RDMA Write +STag 0x[0-9a-f]{8} TO 0x[0-9a-f]+ +payload 4096 B +CRC ok$'
expect '^-> FPDU +52 B +Read Request +QN 1 MSN 1 MO 0 +read 4096 B at STag 0x[0-9a-f]{8} TO 0x[0-9a-f]+ +CRC ok$'
expect '^<- FPDU +4116 B +Read Response +STag 0x[0-9a-f]{8} TO 0x[0-9a-f]+ +payload 4096 B +CRC ok$'
expect '^  scripts/wirecheck +FPDUs: ([0-9]+)  good CRCs: \1  bad CRCs: 0  CRC negotiated: yes$'
expect '^ +per opcode: Write 1, Read Request 2, Read Response 2, Send [1-9][0-9]*, Send Inv 0, Send SE 0, Send SE Inv 0, Terminate 0$'
expect '^section 2: OK$'
if grep -q 'CRC BAD\|CRC not checked' <<< "$out"; then
  echo "FAIL: a frame of section 2 without a good CRC"; fails=$((fails + 1))
fi
expect 'scripts/test'
if grep -q $'\033' <<< "$out"; then
  echo "FAIL: terminal escapes in the standard output of a pipe"; fails=$((fails + 1))
fi

[ $fails -eq 0 ] || { echo "$out"; echo "$fails demo checks failed"; exit 1; }
echo "demo output as expected"
