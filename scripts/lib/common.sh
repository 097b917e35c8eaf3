# Shared helpers for exsock's scripts. Source it: . "$(dirname "$0")/lib/common.sh"
# (from scripts/tests/*: . "$(dirname "$0")/../lib/common.sh").
# shellcheck shell=bash
set -euo pipefail

EXSOCK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export EXSOCK_ROOT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$EXSOCK_ROOT/target}

say()  { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }

# need_cmd CMD [DEBIAN-PACKAGE]: install the package with apt-get if CMD is missing.
need_cmd() {
  local cmd=$1 pkg=${2:-$1}
  command -v "$cmd" >/dev/null 2>&1 && return 0
  need_pkg "$pkg"
  command -v "$cmd" >/dev/null 2>&1 || die "installed $pkg but $cmd is still missing"
}

# need_pkg PKG...: install Debian packages that are not installed yet (non-interactive).
need_pkg() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  if [ ! -e /var/lib/apt/lists/.exsock-updated ] || [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit)" ]; then
    $sudo apt-get update -qq >&2 && $sudo touch /var/lib/apt/lists/.exsock-updated
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# wait_port HOST PORT [TIMEOUT_S]: wait until a TCP listener accepts on HOST:PORT (bounded).
wait_port() {
  local host=$1 port=$2 t=${3:-10} i=0
  while ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
    i=$((i + 1)); [ $i -gt $((t * 20)) ] && return 1
    sleep 0.05  # polling interval of a bounded readiness wait, not a fixed delay
  done
}

# listen_port FILE PID: the port of the first "listening on ADDR:PORT (" line a test-app
# server (started as PID, output to FILE) prints; bounded: 10 s, or until PID exits. Prints
# nothing and returns 1 if there was none.
listen_port() {
  local f=$1 pid=$2 i port
  for ((i = 0; i < 200; i++)); do
    port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\) (.*/\1/p' "$f")
    [ -n "$port" ] && { echo "$port"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05  # bounded polling of the server's readiness line
  done
  return 1
}

# build_release: the release build of the workspace (libexsock.so and the tools).
build_release() { cargo build --release --workspace --quiet; }

# Where the test-apps are built, and the runner that preloads libexsock.so.
apps=$CARGO_TARGET_DIR/test-apps
run=$EXSOCK_ROOT/scripts/exsock-run

# build_lib_and_apps MAKE-TARGET...: libexsock.so (release) and the test-apps targets (in
# $apps); exports EXSOCK_LIB.
build_lib_and_apps() {
  need_cmd gcc
  need_cmd make
  say "building libexsock.so and test-apps"
  (cd "$EXSOCK_ROOT" && cargo build --release -p preload --quiet)
  export EXSOCK_LIB=$CARGO_TARGET_DIR/release/libexsock.so
  make -s -C "$EXSOCK_ROOT/test-apps" OUT="$apps" "$@" >&2
}

# tmp_and_server: a scratch directory $tmp and a server pid slot $spid (set it when a server
# starts, clear it when it is reaped); on exit the server, if any, is killed and $tmp removed.
tmp_and_server() {
  tmp=$(mktemp -d)
  spid=
  trap '[ -n "$spid" ] && kill "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
}
