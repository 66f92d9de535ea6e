#!/usr/bin/env bash
# The test command of the README and of CI: installs what is missing, builds, runs every test
# (unit and integration) with ctest. Integration tests need root (network namespaces).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
build=${HERD_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure "$@"
