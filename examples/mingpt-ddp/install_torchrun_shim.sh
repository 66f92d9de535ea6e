#!/usr/bin/env bash
# Makes sure a working torchrun exists. Debian's torch 1.13 ships a torchrun that crashes on
# Python 3.11 (Std.from_str("0") returns None); only where the torchrun on PATH (or, without one,
# /usr/bin/python3's torch) has that bug, this installs torchrun_shim/torchrun as
# $HOME/.local/bin/torchrun. Commands that follow must put $HOME/.local/bin first on PATH; the
# task YAMLs do that in `run:`. A working pip/conda torchrun is left alone.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin_dir="${HOME}/.local/bin"
say() { echo "install_torchrun_shim: $*"; }

# The interpreter behind the torchrun on PATH, from its "#!" line (it may be "/usr/bin/env
# python3"); /usr/bin/python3 when there is no torchrun or it is not a script.
torchrun_path="$(command -v torchrun || true)"
python_cmd=(/usr/bin/python3)
if [[ -n "${torchrun_path}" ]]; then
  first_line=""
  IFS= read -r first_line <"${torchrun_path}" || true
  if [[ "${first_line}" == '#!'* ]]; then
    read -r -a python_cmd <<<"${first_line#\#!}"
  fi
fi

# 0: from_str works; 1: the Python 3.11 bug; 2: this interpreter has no torch.
set +e
"${python_cmd[@]}" - <<'PY'
import sys
try:
    from torch.distributed.elastic.multiprocessing.api import Std
except Exception as e:  # any import failure means "no usable torch here"
    print(f"cannot import torch: {e}", file=sys.stderr)
    sys.exit(2)
sys.exit(0 if Std.from_str("0") is not None else 1)
PY
verdict=$?
set -e

where="${torchrun_path:-no torchrun on PATH}, python ${python_cmd[*]}"
case "${verdict}" in
  0)
    if [[ -n "${torchrun_path}" ]]; then
      say "${where}: torchrun works; nothing to do"
      exit 0
    fi
    ;;
  1) ;;
  *)
    say "${where}: torch is not importable; install it first (pip install -r requirements.txt)" >&2
    exit 1
    ;;
esac

# Write the shim with the interpreter that has this torch, so its workers (sys.executable) get
# the same torch; write then rename, so a concurrent reader never sees half a file.
python_exe="$("${python_cmd[@]}" -c 'import sys; print(sys.executable)')"
mkdir -p "${bin_dir}"
tmp="$(mktemp "${bin_dir}/.torchrun.XXXXXX")"
trap 'rm -f "${tmp}"' EXIT
{
  echo "#!${python_exe}"
  tail -n +2 "${here}/torchrun_shim/torchrun"
} >"${tmp}"
chmod 755 "${tmp}"
mv -f "${tmp}" "${bin_dir}/torchrun"
trap - EXIT
if [[ "${verdict}" == 1 ]]; then
  say "${where}: Std.from_str(\"0\") is None (torch 1.13 on Python 3.11); installed ${bin_dir}/torchrun"
else
  say "${where}: installed ${bin_dir}/torchrun"
fi
