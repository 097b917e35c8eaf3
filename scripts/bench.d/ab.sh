#!/usr/bin/env bash
# summary: A/B of two builds of libexsock.so on the 64 B round trip (paired rounds, sign counts)
#
# bench ab LIB_A LIB_B [ROUNDS] — two builds of the library against each other on the 64 B
# round trip (xs-pingpong -S 64, client and server on one CPU). Each round runs, for one
# library and then the other (the order flips every round), TCP, DDP with plain calls and DDP
# with extension calls back to back, and takes both DDP modes' ratios to that TCP run. The
# VM's speed drifts by more than most changes move the ratio, so the result is paired: per
# mode, the median of the per-round differences B - A (rounds where either ratio is above 1.3,
# the VM's slow state, left out) and in how many rounds B did better. As a sign test, B better
# in 44 of 51 rounds is far outside chance; 23 of 49 is no difference.
#   EXSOCK_BENCH_ITERS   round trips per run (default 30000, after 200 warm-up)
#   EXSOCK_BENCH_RTT_CPU the CPU of both processes (default 0); EXSOCK_BENCH_PIN=0: no pinning
# A benchmark: it measures and prints.
. "$(dirname "$0")/../lib/common.sh"

need_cmd python3
need_cmd gcc
need_cmd make
need_cmd taskset util-linux

[ $# -ge 2 ] || die "usage: bench ab LIB_A LIB_B [ROUNDS]"
for l in "$1" "$2"; do
  [ -f "$l" ] || die "$l: no such library"
  nm -D --defined-only "$l" | grep -qw ddp_post_send || die "$l has no DDP extension API"
done
rounds=${3:-31}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "usage: bench ab LIB_A LIB_B [ROUNDS]"

apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/xs-pingpong" >&2
exec python3 "$(dirname "$0")/ab.py" --apps "$apps" --rounds "$rounds" \
  --iters "${EXSOCK_BENCH_ITERS:-30000}" --cpu "${EXSOCK_BENCH_RTT_CPU:-0}" \
  --pin "${EXSOCK_BENCH_PIN:-1}" "$1" "$2"
