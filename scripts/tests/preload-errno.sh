#!/usr/bin/env bash
# preload-errno: errno parity. test-apps/errno/errno-parity.c makes ~160 calls (bad fds,
# closed fds, non-sockets, bad lengths and pointers, wrong levels, bad flags, and successful
# calls that must leave errno untouched), built with _FORTIFY_SOURCE=2 so the __*_chk entry
# points are exercised too. Its output must be identical without the library, with it, and
# with EXSOCK_TRACK=all (the routed path).
# timeout: 60
. "$(dirname "$0")/../lib/common.sh"

need_cmd gcc
need_cmd make
need_cmd nm binutils

build_lib_and_apps "$apps/errno-parity"

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for sym in __read_chk __recv_chk __recvfrom_chk; do
  nm -D "$apps/errno-parity" | grep -q " U $sym" || fail "errno-parity does not call $sym (fortify off?)"
done

timeout 20 "$apps/errno-parity" > "$tmp/without.txt" || fail "battery failed without the library"
timeout 20 "$run" "$apps/errno-parity" > "$tmp/with.txt" || fail "battery failed under the library"
EXSOCK_TRACK=all timeout 20 "$run" "$apps/errno-parity" > "$tmp/tracked.txt" || fail "battery failed with EXSOCK_TRACK=all"
EXSOCK_LOG=debug:"$tmp/log" timeout 20 "$run" "$apps/errno-parity" > "$tmp/logged.txt" || fail "battery failed with EXSOCK_LOG"
[ -s "$tmp/log" ] || fail "EXSOCK_LOG wrote nothing: library not active?"

cases=$(tail -1 "$tmp/without.txt")
for v in with tracked logged; do
  diff -u "$tmp/without.txt" "$tmp/$v.txt" || fail "errno parity differs ($v)"
done
echo "PASS: preload-errno ($cases identical without/with/tracked/logged)"
