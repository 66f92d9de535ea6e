#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz) with clang + libFuzzer + ASan/UBSan into build-fuzz/ (or
# $HERD_FUZZ_BUILD_DIR) and runs them.
#   scripts/fuzz.sh [SECONDS]   each target for SECONDS (default 20) through ctest: the CI run
#   scripts/fuzz.sh --runs N    each target for N executions (the bench run: N = 10000000),
#                               printing libFuzzer's final stats (executions, speed, coverage)
# Inputs that crash are written by libFuzzer as crash-<sha1> in the build folder; add the ones
# worth keeping to tests/fuzz/corpus/<target>/ so the regular build replays them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HERD_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=20 runs=""
case "${1:-}" in
  --runs) runs=${2:?--runs needs a count} ;;
  "") ;;
  *) seconds=$1 ;;
esac
targets=(frame_fuzz task_fuzz register_fuzz api_request_fuzz)

"$root/scripts/install-deps.sh"
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHERD_FUZZ=ON -DHERD_WERROR=OFF -DHERD_FUZZ_SECONDS="$seconds" >/dev/null
ninja -C "$build" -j"${HERD_JOBS:-$(nproc)}" "${targets[@]}"

if [ -z "$runs" ]; then
  exec ctest --test-dir "$build" -L fuzz --output-on-failure
fi
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$build/tests/fuzz/found-$t"
  echo "== $t: $runs runs"
  log="$build/tests/fuzz/$t.log"
  start=$(date +%s)
  rc=0
  (cd "$build/tests/fuzz" && "./$t" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "found-$t" "$root/tests/fuzz/corpus/$t") >"$log" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|#[0-9]+ +DONE|==[0-9]+==ERROR|SUMMARY)' "$log" || true
  echo "   exit $rc after $(($(date +%s) - start)) s (log: $log)"
  [ "$rc" -eq 0 ] || failed=1
done
exit $failed
