#!/usr/bin/env bash
# timeout: 300
# scripts/wirecheck on real siw captures (must pass) and on damaged copies of them (must fail
# with the right message): one CRC byte flipped, one ULPDU length changed, the MPA key altered.
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

[ $fails -eq 0 ] || { echo "$fails wirecheck checks failed"; exit 1; }
echo "all wirecheck checks passed"
