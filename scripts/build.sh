#!/usr/bin/env bash
# Configures and builds herd into build/ (or $HERD_BUILD_DIR) with ccache shared across clones.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HERD_BUILD_DIR:-$root/build}
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${HERD_BUILD_TYPE:-RelWithDebInfo} >/dev/null
ninja -C "$build" -j"${HERD_JOBS:-$(nproc)}"
