#!/usr/bin/env bash
# timeout: 900
# interop-siw: exsock against the Linux kernel's soft-iWARP (siw) in a qemu VM, the CI subset
# of scripts/interop-siw: our xs-rping client against siw's `rping -s`, siw's `rping -c`
# against our xs-rping server, and siw's `ib_write_bw -R` client against our xs-perftest
# server, all with CRC on; every capture must pass scripts/wirecheck and every side must
# verify its data (docs/interop-siw.md). ~1.5 min when the harness is built. On a fresh
# machine scripts/interop-siw first runs the harness's build.sh (root or sudo; it installs its
# own host packages with apt and builds /var/tmp/siw-vm, ~2 min), and installs tshark and
# socat itself. If the harness cannot be built this test FAILS with the reason: it never
# skips. Captures and logs go to a temporary directory, kept (and named) when something
# fails. The full matrix: scripts/interop-siw --full.
. "$(dirname "$0")/../lib/common.sh"
out=$(mktemp -d "${TMPDIR:-/tmp}/interop-siw-ci.XXXXXX")
rc=0
"$EXSOCK_ROOT/scripts/interop-siw" --out "$out" || rc=$?
if [ $rc -eq 0 ]; then
  rm -rf "$out"
else
  echo "interop-siw: captures and logs kept in $out" >&2
fi
exit $rc
