#!/usr/bin/env bash
# The test command of the README and of CI: installs what is missing, builds, runs every test
# (unit and integration) with ctest. Integration tests need root (network namespaces).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
build=${HERD_BUILD_DIR:-$root/build}
# Each fuzz target for a short, bounded run under libFuzzer + ASan/UBSan (a clang build in
# build-fuzz/); the regular ctest below also replays their committed corpora.
"$root/scripts/fuzz.sh" "${HERD_FUZZ_SECONDS:-20}"
ctest --test-dir "$build" --output-on-failure "$@"
