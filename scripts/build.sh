#!/usr/bin/env bash
# Configures and builds herd into build/ (or $HERD_BUILD_DIR) with ccache shared across clones.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HERD_BUILD_DIR:-$root/build}
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Warnings are errors in CI only (CI=true there); -Wall -Wextra stay on everywhere.
werror=OFF
case "${CI:-}" in "" | 0 | false | False | FALSE) ;; *) werror=ON ;; esac
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${HERD_BUILD_TYPE:-RelWithDebInfo} \
  -DHERD_WERROR=$werror >/dev/null
ninja -C "$build" -j"${HERD_JOBS:-$(nproc)}"
