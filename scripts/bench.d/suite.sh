#!/usr/bin/env bash
# summary: the issue-8 suite: latency/bandwidth over sizes (TCP, DDP plain, DDP ext), RDMA, 64 B rate, connections, CPU/GB; table + plots in bench-results/
#
# bench suite [--quick] [--only LIST] [RUNS]
#   Measures, in one invocation, alternating TCP and DDP run by run (order flipped every run),
#   over 127.0.0.1, DDP with CRC on, and quotes medians and median ratios to plain TCP:
#     rtt      ping-pong round trip, sizes 1 B .. 4 MiB: xs-pingpong -m tcp | ddp | ext
#              plus 64 B in close triplets (TCP, plain, ext back to back) for the targets
#     bw       window bandwidth (64 messages in flight), sizes 1 B .. 4 MiB: xs-bw -m tcp | ddp | ext
#     rdma     RDMA Write (xs-bw -m write) and Read (ddp-readbw) 1 MiB, vs TCP 1 MiB writes
#              and RDMA latency up to 1 MiB (xs-rdmalat: a Read, post to completion; the round
#              trip of an RDMA Write + Send each way), beside the ping-pong round trips
#     rate     64 B message rate (xs-rate: tcp, ddp plain, posted Sends with DDP_MORE, one Send per syscall)
#     conns    aggregate stream throughput with 1, 10, 100 and 1000 concurrent connections:
#              xs-conns, one single-threaded epoll process per side, 64 KiB writes, content
#              verified; also the setup time (connect + MPA of all connections)
#     cpu      CPU time per GB streamed (user+sys of both processes, getrusage in each over the
#              transfer, and wait4 of the whole processes), 1 connection, 64 KiB writes (xs-conns)
#   --only rtt,bw,...  a subset; --quick: fewer sizes, 1 s runs, 3 runs.
#   Output: bench-results/README.md (table, machine, load), bench-results/*.png (Fig. 5/6
#   style: latency and bandwidth vs size, one line per mode), bench-results/samples.json,
#   and a short summary on the terminal. Progress lines go to stderr while it runs.
#   Pass-through overhead is `scripts/bench passthrough` (iperf3 + TCP RTT; run by `bench all`).
. "$(dirname "$0")/../lib/common.sh"
need_cmd python3
need_cmd gcc
need_cmd make
need_cmd taskset util-linux
# plots need matplotlib: Debian's package serves the system python3 (/usr/bin/python3), which
# may not be the python3 on PATH (pyenv, venv): use whichever one can import it
py=python3
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  need_pkg python3-matplotlib || true
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then py=/usr/bin/python3
  else echo "note: no matplotlib for $(command -v python3) or /usr/bin/python3: no plots" >&2; fi
fi
say "building libexsock.so and the test-apps"
if [ -z "${EXSOCK_LIB:-}" ]; then
  (cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
  EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
fi
apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/xs-pingpong" "$apps/xs-bw" "$apps/xs-rate" "$apps/ddp-readbw" "$apps/xs-conns" "$apps/xs-rdmalat" >&2
exec "$py" "$(dirname "$0")/suite.py" --lib "$EXSOCK_LIB" --apps "$apps" --out "$EXSOCK_ROOT/bench-results" "$@"
