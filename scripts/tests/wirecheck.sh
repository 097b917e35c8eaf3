#!/usr/bin/env bash
# timeout: 300
# scripts/wirecheck on real siw captures (must pass) and on damaged copies of them (must fail
# with the right message): one CRC byte flipped, one ULPDU length changed, the MPA key altered.
# Then a copy of a capture with the TCP disorder a capture on lo under load has (a segment
# split in two halves that arrive out of order and are then retransmitted whole, two segments
# swapped and one of them sent again, probes below the next sequence number, a duplicate in
# the other direction) must pass with exactly the counts of the original, and the same copy must still
# fail on a real fault: an FPDU octet flipped (Bad CRC32), a retransmitted copy that differs, a
# garbled ULPDU length, octets missing from the capture, an FPDU truncated before the FIN. A
# capture that stops inside an FPDU (no FIN) passes with a note. A copy re-cut so that a segment
# ends 6 octets into an FPDU (tshark 4.0 then loses the FPDU boundaries) passes with a note and
# the original's counts, and fails on an octet flipped or a ULPDU length garbled after that point.
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"

caps=${EXSOCK_CAPTURES:-$EXSOCK_ROOT/../shared/interop/siw-vm/captures}
if [ ! -d "$caps" ]; then
  [ -n "${EXSOCK_NO_CAPTURES:-}" ] && { echo "SKIP: no siw captures (EXSOCK_NO_CAPTURES set)"; exit 0; }
  die "siw captures not found at $caps (set EXSOCK_CAPTURES=DIR, or EXSOCK_NO_CAPTURES=1 to skip)"
fi
need_cmd python3 python3
wc=$EXSOCK_ROOT/scripts/wirecheck
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wirecheck-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect_pass PCAP GREP-PATTERN...: wirecheck exits 0 and its output has every pattern
expect_pass() {
  local pcap=$1 out rc=0; shift
  out=$("$wc" "$pcap" 2>&1) || rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: wirecheck $(basename "$pcap") exited $rc, expected 0"; echo "$out"; fails=$((fails + 1)); return
  fi
  for pat in "$@"; do
    grep -q -- "$pat" <<< "$out" || { echo "FAIL: $(basename "$pcap"): no '$pat' in:"; echo "$out"; fails=$((fails + 1)); return; }
  done
  echo "ok: $(basename "$pcap") passes"
}

# expect_fail PCAP MESSAGE [WIRECHECK-ARGS...]: wirecheck exits non-zero and says MESSAGE
expect_fail() {
  local pcap=$1 msg=$2 out rc=0
  out=$("$wc" "$pcap" "${@:3}" 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL: wirecheck $(basename "$pcap") exited 0, expected failure"; echo "$out"; fails=$((fails + 1)); return
  fi
  grep -q -- "$msg" <<< "$out" || { echo "FAIL: $(basename "$pcap"): no '$msg' in:"; echo "$out"; fails=$((fails + 1)); return; }
  echo "ok: $(basename "$pcap") fails (exit $rc) with '$msg'"
}

# damage SRC DST MODE: copy a little-endian classic Ethernet/IPv4 pcap, changing the first frame
# whose TCP payload is exactly one FPDU (crc: flip a bit of its CRC; len: add 8 to its ULPDU
# length) or the MPA Request key (key).
damage() {
  python3 - "$@" <<'PY'
import struct, sys
src, dst, mode = sys.argv[1:4]
d = bytearray(open(src, "rb").read())
assert d[:4] == b"\xd4\xc3\xb2\xa1", "little-endian microsecond pcap expected"
assert struct.unpack_from("<I", d, 20)[0] == 1, "Ethernet link type expected"
pos = 24
while pos + 16 <= len(d):
    incl = struct.unpack_from("<I", d, pos + 8)[0]
    f = pos + 16
    if struct.unpack_from(">H", d, f + 12)[0] == 0x0800 and d[f + 23] == 6:
        ip = f + 14
        tcp = ip + (d[ip] & 15) * 4
        payload = tcp + (d[tcp + 12] >> 4) * 4
        end = ip + struct.unpack_from(">H", d, ip + 2)[0]
        if mode == "key" and d[payload:end].startswith(b"MPA ID Req Frame"):
            d[payload + 7] ^= 0x20          # "MPA ID req Frame": no longer an MPA Request
            break
        if mode in ("crc", "len") and end - payload >= 8 and not d[payload:end].startswith(b"MPA "):
            ulen = struct.unpack_from(">H", d, payload)[0]
            if (2 + ulen + 3) // 4 * 4 + 4 == end - payload:
                if mode == "crc":
                    d[end - 1] ^= 0x01
                else:
                    struct.pack_into(">H", d, payload, ulen + 8)
                break
    pos = f + incl
else:
    sys.exit("damage: nothing to change in " + src)
open(dst, "wb").write(d)
PY
}

# disorder SRC DST MODE: copy a little-endian classic Ethernet/IPv4 pcap of one iWARP
# connection, reordering and repeating TCP segments the way a capture on lo under load has them
# (every octet of the streams still the same):
#   - the initiator's 2nd FPDU segment S: its second half first (out of order), then its first
#     half, then all of it again (a retransmission);
#   - before its 3rd, T: probes with the sequence number one below the next octet: an empty one
#     (as Linux sends zero-window probes and keep-alives) and a keep-alive with one garbage
#     octet (as RFC 1122 allows);
#   - its 4th and 5th, U and V: V first, then U, then V again;
#   - the responder's 1st FPDU segment twice, its 3rd and 4th swapped.
# MODE disorder: only that; flip: also one octet of S flipped in every copy of it (a bad FPDU,
# retransmitted as it was); flip-copy: that octet flipped in the whole retransmission of S only;
# len: V's ULPDU_LENGTH 8 more in every copy; gap: S's first half and its retransmission never
# captured. MODE cut / cut-fin (no disorder): the initiator's last FPDU segment cut to its first
# half, and then the capture stops (cut) or only the initiator's FIN follows (cut-fin).
# MODE lostsync (no disorder): the initiator's 2nd and 3rd FPDU segments re-cut so that one
# segment ends 6 octets into the 3rd FPDU; lostsync-flip: also an octet of the 5th FPDU's
# payload flipped; lostsync-len: the 5th FPDU's ULPDU_LENGTH 8 more; disorder-lostsync: the
# disorder, and the 6th and 7th re-cut that way.
disorder() {
  python3 - "$@" <<'PY'
import struct, sys
src, dst, mode = sys.argv[1:4]
d = bytes(open(src, "rb").read())
assert d[:4] == b"\xd4\xc3\xb2\xa1", "little-endian microsecond pcap expected"
assert struct.unpack_from("<I", d, 20)[0] == 1, "Ethernet link type expected"
recs, pos = [], 24
while pos + 16 <= len(d):
    incl = struct.unpack_from("<I", d, pos + 8)[0]
    recs.append((d[pos:pos + 8], bytearray(d[pos + 16:pos + 16 + incl])))
    pos += 16 + incl

def parts(fr):
    """(ip, tcp, payload, end) offsets in an IPv4/TCP frame, or None"""
    if len(fr) < 34 or struct.unpack_from(">H", fr, 12)[0] != 0x0800 or fr[23] != 6:
        return None
    tcp = 14 + (fr[14] & 15) * 4
    return 14, tcp, tcp + (fr[tcp + 12] >> 4) * 4, 14 + struct.unpack_from(">H", fr, 16)[0]

def size(i):
    p = parts(recs[i][1])
    return p[3] - p[2]

def csum(b):
    b = bytes(b) + (b"\0" if len(b) % 2 else b"")
    s = sum(struct.unpack(">%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff

def seg(fr, off, n, flip=None):
    """frame fr carrying only payload octets [off, off + n) (sequence number moved along), the
    octet at payload offset flip inverted; IP and TCP checksums recomputed"""
    pl = parts(fr)[2]
    body = bytearray(fr[pl + off:pl + off + n])
    if flip is not None and off <= flip < off + n:
        body[flip - off] ^= 0x5a
    return carry(fr, off, body)

def carry(fr, off, body):
    """frame fr with the payload body instead, its sequence number off octets further"""
    ip, tcp, pl, _ = parts(fr)
    n = len(body)
    out = bytearray(fr[:pl]) + body
    struct.pack_into(">H", out, ip + 2, pl - ip + n)
    struct.pack_into(">H", out, ip + 10, 0)
    struct.pack_into(">H", out, ip + 10, csum(out[ip:tcp]))
    struct.pack_into(">I", out, tcp + 4, (struct.unpack_from(">I", fr, tcp + 4)[0] + off) % 2**32)
    struct.pack_into(">H", out, tcp + 16, 0)
    pseudo = bytes(out[ip + 12:ip + 20]) + struct.pack(">HH", 6, len(out) - tcp)
    struct.pack_into(">H", out, tcp + 16, csum(pseudo + bytes(out[tcp:])))
    return out

# the segments with FPDUs of each direction; the initiator sends the MPA Request
data, client = {True: [], False: []}, None
for i, (_, fr) in enumerate(recs):
    p = parts(fr)
    if p is None or p[3] <= p[2]:
        continue
    sport = struct.unpack_from(">H", fr, p[1])[0]
    if fr[p[2]:p[3]].startswith(b"MPA ID Req Frame"):
        client = sport
    elif not fr[p[2]:p[3]].startswith(b"MPA "):
        data[sport == client].append(i)
up, down = data[True], data[False]
assert len(up) >= 5 and len(down) >= 4, "too few FPDU segments in " + src
S, T, U, V = up[1:5]
out = {}  # record index -> the frames written instead of it

def lostsync(X, Y):
    """X, Y: FPDU segments in a row: X's first 10 octets, then the rest of X together with Y's
    first 6 octets, then the rest of Y"""
    fx, fy = recs[X][1], recs[Y][1]
    (_, tx, plx, ex), (_, ty, ply, ey) = parts(fx), parts(fy)
    sx, sy = (struct.unpack_from(">I", fr, t + 4)[0] for fr, t in ((fx, tx), (fy, ty)))
    assert sy == (sx + ex - plx) % 2**32 and ex - plx > 10 and ey - ply > 6, "X, Y: FPDUs in a row"
    out[X] = [seg(fx, 0, 10), carry(fx, 10, fx[plx + 10:ex] + fy[ply:ply + 6])]
    out[Y] = [seg(fy, 6, ey - ply - 6)]

if mode in ("cut", "cut-fin"):
    L = up[-1]
    half = size(L) // 2
    out[L] = [seg(recs[L][1], 0, half)]
    for i in range(L + 1, len(recs)):
        fr = bytearray(recs[i][1])
        p = parts(fr)
        out[i] = []
        if mode == "cut-fin" and p and struct.unpack_from(">H", fr, p[1])[0] == client:
            seq = struct.unpack_from(">I", fr, p[1] + 4)[0]
            struct.pack_into(">I", fr, p[1] + 4, (seq - (size(L) - half)) % 2**32)
            out[i] = [seg(fr, 0, p[3] - p[2])]
elif mode.startswith("lostsync"):
    lostsync(up[1], up[2])
    W = up[4]
    pw = parts(recs[W][1])[2]
    if mode == "lostsync-flip":  # an octet of a later FPDU's payload, its only copy
        recs[W][1][pw + 20] ^= 0x5a
    elif mode == "lostsync-len":
        struct.pack_into(">H", recs[W][1], pw, struct.unpack_from(">H", recs[W][1], pw)[0] + 8)
else:
    if mode == "len":
        pl = parts(recs[V][1])[2]
        struct.pack_into(">H", recs[V][1], pl, struct.unpack_from(">H", recs[V][1], pl)[0] + 8)
    slen = size(S)
    assert slen >= 16, "an FPDU segment of at least 16 octets expected"
    h = slen // 2
    flip = h + 2 if mode in ("flip", "flip-copy") else None
    out[S] = [seg(recs[S][1], h, slen - h, flip if mode == "flip" else None),
              seg(recs[S][1], 0, h),
              seg(recs[S][1], 0, slen, flip)]
    if mode == "gap":
        out[S] = out[S][:1]
    out[T] = [seg(recs[S][1], slen - 1, 0), seg(recs[S][1], slen - 1, 1, slen - 1), recs[T][1]]
    out[U] = [recs[V][1], recs[U][1]]
    out[V] = [recs[V][1]]
    out[down[0]] = [recs[down[0]][1], recs[down[0]][1]]
    out[down[2]], out[down[3]] = [recs[down[3]][1]], [recs[down[2]][1]]
    if mode == "disorder-lostsync":
        lostsync(up[5], up[6])
with open(dst, "wb") as w:
    w.write(d[:24])
    for i, (ts, fr) in enumerate(recs):
        for x in out.get(i, [fr]):
            w.write(ts + struct.pack("<II", len(x), len(x)) + bytes(x))
PY
}

expect_pass "$caps/rping-crc.lo.pcap" "good CRCs: 35  bad CRCs: 0  CRC negotiated: yes" \
  "MPA requests: 1  replies: 1" "Read Request 5, Read Response 5, Send 20"
expect_pass "$caps/read_bw-default.server.pcap" "CRC negotiated: no" "MPA requests: 2  replies: 2" \
  "Read Request 5, Read Response 5, Send 32"
expect_pass "$caps/rping-p2p.client.pcap" "Write 4,"

damage "$caps/rping-crc.lo.pcap" "$tmp/bad-crc.pcap" crc
expect_fail "$tmp/bad-crc.pcap" "Bad CRC32"
damage "$caps/rping-default.lo.pcap" "$tmp/bad-len.pcap" len
expect_fail "$tmp/bad-len.pcap" "not dissected as iWARP MPA"
damage "$caps/rping-default.lo.pcap" "$tmp/no-mpa.pcap" key
expect_fail "$tmp/no-mpa.pcap" "no MPA Request and Reply"
# with --port, a connection on that port that is not iWARP is an error; other ports are ignored
expect_fail "$tmp/no-mpa.pcap" "carries payload but no MPA Request" --port 7174
expect_fail "$caps/rping-default.lo.pcap" "no MPA Request and Reply" --port 1
if out=$("$wc" "$caps/rping-default.lo.pcap" --port 7174 2>&1) && grep -q "connections: 1 iWARP" <<< "$out"; then
  echo "ok: rping-default.lo.pcap --port 7174 passes"
else
  echo "FAIL: rping-default.lo.pcap --port 7174:"; echo "$out"; fails=$((fails + 1))
fi

# TCP disorder in correct traffic: tshark must see it (or this proves nothing), wirecheck must
# count every FPDU once, as in the original capture
disorder "$caps/rping-crc.lo.pcap" "$tmp/disorder.pcap" disorder
seen=$(tshark -n -r "$tmp/disorder.pcap" -Y "tcp.analysis.out_of_order || tcp.analysis.retransmission || tcp.analysis.keep_alive" \
  -T fields -e tcp.analysis.out_of_order -e tcp.analysis.retransmission -e tcp.analysis.keep_alive 2>/dev/null || true)
if [ "$(cut -f1 <<< "$seen" | grep -c .)" -ge 2 ] && [ "$(cut -f2 <<< "$seen" | grep -c .)" -ge 3 ] \
  && [ "$(cut -f3 <<< "$seen" | grep -c .)" -ge 2 ]; then
  echo "ok: disorder.pcap has out-of-order segments, retransmissions and probes (tshark's analysis)"
else
  echo "FAIL: disorder.pcap: tshark does not see the out-of-order segments, retransmissions and probes"; fails=$((fails + 1))
fi
expect_pass "$tmp/disorder.pcap" "FPDUs: 35  good CRCs: 35  bad CRCs: 0  CRC negotiated: yes" \
  "MPA requests: 1  replies: 1" "Write 5, Read Request 5, Read Response 5, Send 20, Send Inv 0"
# ... and still fail on real faults in it
disorder "$caps/rping-crc.lo.pcap" "$tmp/disorder-flip.pcap" flip
expect_fail "$tmp/disorder-flip.pcap" "FAIL: frame [0-9]*: Bad CRC32"
disorder "$caps/rping-crc.lo.pcap" "$tmp/disorder-flip-copy.pcap" flip-copy
expect_fail "$tmp/disorder-flip-copy.pcap" "differs from the copy in frame"
disorder "$caps/rping-crc.lo.pcap" "$tmp/disorder-len.pcap" len
expect_fail "$tmp/disorder-len.pcap" "not dissected as iWARP MPA"
disorder "$caps/rping-crc.lo.pcap" "$tmp/disorder-gap.pcap" gap
expect_fail "$tmp/disorder-gap.pcap" "42 bytes of the initiator's data were not captured"
# tshark 4.0 loses the FPDU boundaries after a segment that ends a few octets into an FPDU:
# without the re-check wirecheck would fail this correct traffic; with it the counts are the
# original's, with a note; a fault after that point still fails in the re-cut capture
disorder "$caps/rping-crc.lo.pcap" "$tmp/lostsync.pcap" lostsync
expect_pass "$tmp/lostsync.pcap" "tshark 4.0 lost the FPDU boundaries ([1-9][0-9]* problems) after TCP segments that end inside an FPDU's first 7 octets (the initiator's at relative seq" \
  "FPDUs: 35  good CRCs: 35  bad CRCs: 0  CRC negotiated: yes" "Write 5, Read Request 5, Read Response 5, Send 20, Send Inv 0"
# ... also after the disorder above (the keep-alive's garbage octet is not taken for data)
disorder "$caps/rping-crc.lo.pcap" "$tmp/disorder-lostsync.pcap" disorder-lostsync
expect_pass "$tmp/disorder-lostsync.pcap" "tshark 4.0 lost the FPDU boundaries" \
  "FPDUs: 35  good CRCs: 35  bad CRCs: 0  CRC negotiated: yes" "Write 5, Read Request 5, Read Response 5, Send 20, Send Inv 0"
disorder "$caps/rping-crc.lo.pcap" "$tmp/lostsync-flip.pcap" lostsync-flip
expect_fail "$tmp/lostsync-flip.pcap" "the re-cut capture (one segment per FPDU) fails too: frame [0-9]*: Bad CRC32"
disorder "$caps/rping-crc.lo.pcap" "$tmp/lostsync-len.pcap" lostsync-len
expect_fail "$tmp/lostsync-len.pcap" "stream 0: not re-checked in a re-cut capture: the initiator's stream: its last FPDU (relative seq [0-9]*, [0-9]* octets) is cut short by the FIN or RST"
# a capture that stops inside an FPDU is not a fault of the traffic; an FPDU cut short by a FIN is
disorder "$caps/rping-crc.lo.pcap" "$tmp/cut.pcap" cut
expect_pass "$tmp/cut.pcap" "the capture ends inside the initiator's last FPDU (relative seq 805, ULPDU_LENGTH 34, 40 octets; 20 octets captured" \
  "FPDUs: 32  good CRCs: 32  bad CRCs: 0"
disorder "$caps/rping-crc.lo.pcap" "$tmp/cut-fin.pcap" cut-fin
expect_fail "$tmp/cut-fin.pcap" "the initiator sent 824 bytes, tshark's MPA PDUs cover 804"

[ $fails -eq 0 ] || { echo "$fails wirecheck checks failed"; exit 1; }
echo "all wirecheck checks passed"
