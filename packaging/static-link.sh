#!/bin/bash
# Linker launcher (CMake's <LANG>_LINKER_LAUNCHER) that turns a dynamic link line into one that
# links every third-party library statically and leaves only glibc dynamic.
#
#   static-link.sh NAME=ARCHIVE... [+ARCHIVE...] -- <compiler> <link arguments...>
#
# CMake's imported targets (OpenSSL::SSL, protobuf::libprotobuf, ...) put the shared objects on the
# link line as full paths, and other people's targets choose them, so they cannot be swapped in
# CMake for one executable only. Here each argument that is a shared library (/x/libNAME.so[.N])
# is replaced by the ARCHIVE given for NAME; a shared library without one fails the link, so a new
# dynamic dependency is noticed at build time rather than on a node without it. "+ARCHIVE" entries
# are appended (dependencies of archives that came in through a .so's DT_NEEDED, like libz).
# "NAME=-" keeps that shared object dynamic (a library whose own dependencies are not to be had as
# archives, like libcurl's for `herd`: the controller runs where its -dev packages are). All
# archives are linked as one group: their order on the original line was made for shared objects.
set -euo pipefail

declare -A archive=()
extra=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    +*) extra+=("${1#+}") ;;
    *=*) archive["${1%%=*}"]="${1#*=}" ;;
    *) echo "static-link.sh: bad mapping '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ "$#" -gt 0 ] && shift  # the "--"
[ "$#" -gt 0 ] || { echo "static-link.sh: no link command" >&2; exit 2; }

out=()
grouped=0
for arg in "$@"; do
  if [[ "$arg" =~ ^/.*/lib([^/]+)\.so(\.[0-9.]+)?$ ]]; then
    name="${BASH_REMATCH[1]}"
    if [ -z "${archive[$name]+set}" ]; then
      echo "static-link.sh: no static archive for $arg (add '$name' to HERD_STATIC_ARCHIVES in" \
        "packaging/static_link.cmake)" >&2
      exit 1
    fi
    if [ "${archive[$name]}" != "-" ]; then arg="${archive[$name]}"; fi
  fi
  if [ "$grouped" = 0 ] && [[ "$arg" == *.a ]]; then
    out+=("-Wl,--start-group")
    grouped=1
  fi
  out+=("$arg")
done
if [ "$grouped" = 0 ]; then out+=("-Wl,--start-group"); fi
out+=("${extra[@]}" "-Wl,--end-group")
exec "${out[@]}"
