#!/usr/bin/env bash
# The benchmark suite (bench/README.md): installs what the anchors need (Debian packages only,
# never in CI), then runs bench/suite.py with the given flags (--help lists them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  exec /usr/bin/python3 "$root/bench/suite.py" --help
fi
need=()
for p in slurm-wlm munge pdsh; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "bench/run.sh: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi
exec /usr/bin/python3 "$root/bench/suite.py" "$@"
