#!/usr/bin/env bash
# preload-stress: test-apps/stress/pt-stress.c under libexsock.so — threads opening,
# connecting, dup'ing and closing sockets while another thread forks and execs and a 1 ms
# timer's signal handler makes socket calls. No hang (watchdog + timeout), no crash, no
# failed call, no fd leak, errno preserved in the handler. Runs without the library (the
# program's own baseline), plain, and with EXSOCK_TRACK=all.
# timeout: 120
. "$(dirname "$0")/../lib/common.sh"

build_lib_and_apps "$apps/pt-stress"

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
seconds=${EXSOCK_STRESS_SECONDS:-4}

say "baseline (no library)"
timeout $((seconds + 40)) "$apps/pt-stress" "$seconds" 4 || fail "pt-stress fails even without the library"
say "under libexsock.so"
timeout $((seconds + 40)) "$run" "$apps/pt-stress" "$seconds" 4 || fail "pt-stress under libexsock.so"
say "under libexsock.so, EXSOCK_TRACK=all"
EXSOCK_TRACK=all timeout $((seconds + 40)) "$run" "$apps/pt-stress" "$seconds" 4 \
  || fail "pt-stress under libexsock.so with EXSOCK_TRACK=all"

echo "PASS: preload-stress"
