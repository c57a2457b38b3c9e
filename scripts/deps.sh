#!/usr/bin/env bash
# Installs the Debian packages ephd builds, runs and tests with, plus any
# named as arguments, only when one is missing: one apt-get update, then one
# apt-get install.
set -euo pipefail

PACKAGES=(
  cmake gcc make pkg-config
  libluajit2-5.1-dev luajit2 libuv1-dev node-llhttp libpq-dev libssl-dev postgresql
  lua-cjson lua-busted lua-socket
  chromium nodejs
  "$@"
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${missing[*]}" >&2
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
