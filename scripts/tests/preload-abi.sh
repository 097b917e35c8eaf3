#!/usr/bin/env bash
# preload-abi: what libexsock.so exports and what its pass-through path costs.
#  - the dynamic symbol table holds exactly the interposed symbols (and ddp_* when they exist);
#  - the pass-through path allocates nothing: test-apps/noalloc/pt-noalloc.c counts every
#    malloc/calloc/realloc/free (its own definitions shadow libc's and the library's) across
#    thousands of socket calls, plain and with EXSOCK_TRACK=all and EXSOCK_LOG;
#  - the hot hooks are branch + tail jump: no stack frame before the first branch;
#  - calls made before libexsock.so's constructor (from another preloaded library's
#    constructor, test-apps/early/early-ctor.c) work through the lazy resolution path, and the
#    errno battery still matches the baseline afterwards.
# timeout: 60
. "$(dirname "$0")/../lib/common.sh"

need_cmd gcc
need_cmd make
need_cmd objdump binutils

say "building libexsock.so and test-apps"
(cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
lib=$CARGO_TARGET_DIR/release/libexsock.so
export EXSOCK_LIB=$lib
run=$EXSOCK_ROOT/scripts/exsock-run
apps=$CARGO_TARGET_DIR/test-apps
make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$apps/pt-noalloc" "$apps/early-ctor.so" "$apps/errno-parity" >&2

fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. exports = the symbols listed in exsock.map (ddp_* aside)
perl -0pe 's{/\*.*?\*/}{}gs' "$EXSOCK_ROOT/preload/exsock.map" | tr -s ' ;\n' '\n' \
  | grep -E '^[_a-z][_a-z0-9]*$' | grep -vE '^(global|local)$' | grep -v '^ddp_' | sort > "$tmp/want"
nm -D --defined-only "$lib" | awk '{ print $3 }' | sed 's/@.*//' | grep -v '^ddp_' | sort > "$tmp/have"
diff -u "$tmp/want" "$tmp/have" || fail "exported symbols differ from exsock.map"
say "exports: $(wc -l < "$tmp/have") interposed symbols, nothing else"

# 2. no allocation on the pass-through (and routed) path
"$apps/pt-noalloc" 2000 || fail "pt-noalloc without the library"
"$run" "$apps/pt-noalloc" 2000 || fail "allocation on the pass-through path"
EXSOCK_TRACK=all "$run" "$apps/pt-noalloc" 2000 || fail "allocation on the routed path"

# 3. hot hooks: the first instructions are the fd-table flag load and its branch
objdump -d --no-show-raw-insn "$lib" > "$tmp/dis"
for f in read write send recv sendmsg recvmsg readv writev poll epoll_wait epoll_ctl close; do
  first=$(awk -v f="<$f>:" '$2 == f { getline; print; exit }' "$tmp/dis")
  echo "$first" | grep -q 'fdtable3ANY' || fail "$f does not start with the fd-table flag load: $first"
  body=$(awk -v f="<$f>:" '$2 == f { on=1; next } on && /^$/ { exit } on' "$tmp/dis" | grep -v int3)
  echo "$body" | grep -qE '\s(push|sub\s+\$0x[0-9a-f]+,%rsp)' && fail "$f sets up a stack frame"
  echo "$body" | grep -q 'jmp  *\*%r' || fail "$f does not tail-jump to the real function"
done
say "hot hooks: flag load, branch, slot load, tail jump"
# 4. lazy resolution: early-ctor.so, listed after libexsock.so, runs its constructor first
"$apps/errno-parity" > "$tmp/errno-base.txt" || fail "errno battery without the library"
# (LD_PRELOAD set directly: early-ctor.so prints, and must not run inside exsock-run's shell)
early="$lib:$apps/early-ctor.so"
out=$(LD_PRELOAD=$early "$apps/errno-parity" 2>&1 > "$tmp/errno-early.txt"; \
      LD_PRELOAD=$early "$apps/pt-noalloc" 10)
echo "$out" | grep -q '^early-ctor: ok$' || fail "socket calls before the constructor: $out"
grep -q '^early-ctor: ok$' "$tmp/errno-early.txt" || fail "early-ctor did not run in the errno battery"
diff -u "$tmp/errno-base.txt" <(grep -v '^early-ctor' "$tmp/errno-early.txt") || fail "errno parity after lazy resolution"
LD_DEBUG=libs LD_PRELOAD=$early /bin/true 2>&1 \
  | grep -o 'calling init: [^ ]*' | grep -E 'early-ctor|libexsock' | head -1 | grep -q 'early-ctor' \
  || say "note: the loader ran libexsock.so's constructor first; lazy path not exercised"
say "calls before the constructor: ok"
echo "PASS: preload-abi"
