#!/usr/bin/env bash
# valgrind: scripts/valgrind (the engine's tests — ddp-user's unit and integration tests,
# including the 77 hostile-peer cases, and ddp-proto's lib tests — under valgrind memcheck:
# no invalid access, no use of uninitialised memory, no definite or indirect leak). About
# 2–3 minutes here on 2 vCPUs.
# timeout: 1200
exec "$(dirname "$0")/../valgrind"
