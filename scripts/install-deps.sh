#!/usr/bin/env bash
# Installs every Debian package that herd's build and tests need. Idempotent, and quick (no apt
# call at all) when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libboost1.81-dev libboost-json1.81-dev libboost-system1.81-dev
  libyaml-cpp-dev libssl-dev libprotobuf-dev protobuf-compiler libuv1-dev doctest-dev
  libsqlite3-dev libcli11-dev libcurl4-openssl-dev libpq-dev postgresql-15
  openssh-server openssh-client rsync iproute2 iptables util-linux procps psmisc
  python3 python3-torch pdsh systemd slurm-wlm munge slurmdbd mariadb-server
  elfutils gdb
  clang-14 libfuzzer-14-dev
  chromium
  podman runc docker-registry apache2-utils
  rclone fuse3 nodejs
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The tests start their own mariadbd and slurmdbd on private ports (slurm_cluster.py): the
  # services these packages bring are stopped if the install started them, and kept off.
  for pkg_svc in mariadb-server:mariadb slurmdbd:slurmdbd; do
    pkg=${pkg_svc%%:*}
    svc=${pkg_svc#*:}
    [[ " ${missing[*]} " == *" $pkg "* ]] || continue
    if command -v systemctl >/dev/null; then  # works without systemd running: the unit links
      $SUDO systemctl disable "$svc" >/dev/null 2>&1 || true
    fi
    if [ -d /run/systemd/system ]; then
      $SUDO systemctl stop "$svc" >/dev/null 2>&1 || true
    elif [ -x "/etc/init.d/$svc" ]; then
      $SUDO "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
      $SUDO update-rc.d "$svc" disable >/dev/null 2>&1 || true
    fi
  done
  # Not fatal: the tests use private ports and do not need it gone.
  if [[ " ${missing[*]} " == *" mariadb-server "* ]] && ss -Hltn 'sport = :3306' | grep -q .; then
    echo "install-deps: warning: the system's mariadb still listens on port 3306" >&2
  fi
  echo "install-deps: done"
fi

# s3rver (npm): the S3-compatible server the storage tests start (tests/integration/storage_test.py
# looks for it here).
S3RVER_DIR=${HERD_S3RVER_DIR:-$HOME/.cache/herd/s3rver}
if [ ! -e "$S3RVER_DIR/node_modules/.bin/s3rver" ]; then
  if ! command -v npm >/dev/null; then
    $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  mkdir -p "$S3RVER_DIR"
  (cd "$S3RVER_DIR" && npm install --no-audit --no-fund --silent s3rver@3.7.1 >/dev/null)
  echo "install-deps: s3rver installed in $S3RVER_DIR"
fi
