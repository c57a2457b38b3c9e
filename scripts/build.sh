#!/usr/bin/env bash
# Configures and builds into build/ (or $EPHD_BUILD_DIR) with any extra cmake
# arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${EPHD_BUILD_DIR:-build}"
cmake -S . -B "$build" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
