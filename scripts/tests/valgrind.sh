#!/usr/bin/env bash
# valgrind: scripts/valgrind (the engine's tests — ddp-user's unit and integration tests,
# including the 77 hostile-peer cases, and ddp-proto's lib tests — under valgrind memcheck:
# no invalid access, no use of uninitialised memory, no definite or indirect leak). About
# 2–3 minutes here on 2 vCPUs.
#
# scripts/valgrind scales the tests' time bounds (EXSOCK_TEST_TIME_SCALE=10): memcheck is slow,
# and a bound hit while a test unwinds used to free memory that was still registered.
# timeout: 1200
exec "$(dirname "$0")/../valgrind"
