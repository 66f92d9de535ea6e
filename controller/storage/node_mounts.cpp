#include "controller/storage/node_mounts.hpp"

#include <chrono>

#include "controller/bootstrap/sha256.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "shared/common/agent_layout.hpp"
#include "shared/common/limits.hpp"

namespace herd::storage {
namespace {

using controller::ShellQuote;

std::string Seconds(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

// Seconds with a fraction, for sleep: "0.2".
std::string FractionalSeconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// Common head of every script: the storage dir and the tool environment. rclone's S3 backend
// refuses a custom CA bundle given through AWS_CA_BUNDLE ("LoadCustomCABundleError"); rclone uses
// the system's trust store instead.
std::string Prelude() {
  return "set -u\nunset AWS_CA_BUNDLE\nD=\"$HOME/" + NodeStorageDir() + "\"\n";
}

}  // namespace

std::string NodeStorageDir() { return std::string(kDefaultAgentDir) + "/storage"; }

std::string FlushScript() {
  std::string s = Prelude();
  s += "deadline=$((SECONDS + " + Seconds(limits::kStorageFlushTimeout) + "))\n";
  s += R"SH(for m in "$D"/mounts/*/; do
  [ "$(cat "$m/mode" 2>/dev/null)" = COPY ] && continue
  while grep -rqsE '"Dirty": *true' "$m/cache/vfsMeta"; do
    if ! kill -0 "$(cat "$m/pid" 2>/dev/null)" 2>/dev/null; then
      echo "herd: bucket mount $(cat "$m/target") stopped before its writes were uploaded" >&2; exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "herd: bucket mount $(cat "$m/target"): writes not uploaded within )SH" +
       Seconds(limits::kStorageFlushTimeout) + R"SH( s" >&2; exit 1
    fi
    sleep )SH" +
       FractionalSeconds(limits::kStorageFlushPoll) + R"SH(
  done
done
)SH";
  return s;
}

std::string MountScript(const std::vector<NodeMount>& mounts) {
  const std::string ready = Seconds(limits::kStorageMountReadyTimeout);
  std::string s = Prelude();
  s += R"SH(mkdir -p "$D/mounts" && chmod 700 "$D" || { echo "storage: cannot create $D"; exit 1; }
umask 077
cat > "$D/rclone.conf.new" && mv "$D/rclone.conf.new" "$D/rclone.conf" || { echo "storage: cannot write $D/rclone.conf"; exit 1; }
command -v rclone >/dev/null || { echo "storage: rclone is not installed on this node (Debian: apt-get install rclone fuse3)"; exit 3; }
cat > "$D/flush.sh" <<'HERD_FLUSH'
)SH";
  s += FlushScript();
  s += R"SH(HERD_FLUSH
herd_mount() {
  target="$1"; mode="$2"; src="$3"; id="$4"
  case "$target" in "~") target="$HOME";; "~/"*) target="$HOME/${target#\~/}";; esac
  m="$D/mounts/$id"
  if [ -f "$m/pid" ] && kill -0 "$(cat "$m/pid")" 2>/dev/null && grep -qs " $target fuse.rclone " /proc/mounts; then
    return 0
  fi
  mkdir -p "$m" "$target" || { echo "$1: cannot create the mount point"; return 1; }
  printf '%s\n' "$target" > "$m/target"; printf '%s\n' "$mode" > "$m/mode"
  if [ "$mode" = COPY ]; then
    if ! rclone --config "$D/rclone.conf" copy )SH" +
       std::string(kRcloneRemote) +
       R"SH(:"$src" "$target" --log-file "$m/log" --log-level ERROR; then
      echo "$1: copy from s3://$src failed: $(tail -n 1 "$m/log" 2>/dev/null)"; return 1
    fi
    return 0
  fi
  # MOUNT_CACHED: the kernel also buffers writes before rclone gets them (FUSE's write-back
  # cache: larger writes than write-through; bench/storage_bench.py); a close or fsync hands them
  # to rclone, whose cache then uploads them in the background.
  if [ "$mode" = MOUNT_CACHED ]; then cache="--vfs-cache-mode full --write-back-cache"; else cache="--vfs-cache-mode writes"; fi
  # shellcheck disable=SC2086
  setsid rclone --config "$D/rclone.conf" mount )SH" +
       std::string(kRcloneRemote) + R"SH(:"$src" "$target" $cache --vfs-write-back )SH" +
       FractionalSeconds(limits::kStorageWriteBack) + R"SH(s --cache-dir "$m/cache" \
    --dir-cache-time 5s --log-file "$m/log" --log-level NOTICE </dev/null >/dev/null 2>&1 &
  echo $! > "$m/pid"
  end=$((SECONDS + )SH" +
       ready + R"SH())
  until grep -qs " $target fuse.rclone " /proc/mounts; do
    if ! kill -0 "$(cat "$m/pid")" 2>/dev/null; then
      echo "$1: rclone mount of s3://$src failed: $(grep -v '^$' "$m/log" 2>/dev/null | tail -n 1)"; return 1
    fi
    if [ "$SECONDS" -ge "$end" ]; then
      echo "$1: the mount of s3://$src was not ready within )SH" +
       ready + R"SH( s"; return 1
    fi
    sleep 0.1
  done
}
)SH";
  for (const NodeMount& m : mounts) {
    const std::string id = controller::Sha256Hex(m.target).substr(0, 16);
    s += "herd_mount " + ShellQuote(m.target) + " " + ShellQuote(m.mode) + " " +
         ShellQuote(m.bucket_path) + " " + id + " || exit 1\n";
  }
  return s;
}

std::string UnmountScript(bool flush) {
  std::string s = Prelude();
  s += "[ -d \"$D\" ] || exit 0\nrc=0\n";
  if (flush) s += "[ -f \"$D/flush.sh\" ] && { bash \"$D/flush.sh\" || rc=1; }\n";
  s += R"SH(for m in "$D"/mounts/*/; do
  [ -d "$m" ] || continue
  t=$(cat "$m/target" 2>/dev/null)
  if [ -n "$t" ] && grep -qs " $t fuse.rclone " /proc/mounts; then
    fusermount3 -u "$t" 2>/dev/null || fusermount -u "$t" 2>/dev/null || umount -l "$t" 2>/dev/null
  fi
  p=$(cat "$m/pid" 2>/dev/null)
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill "$p" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  fi
  if [ -n "$t" ] && grep -qs " $t fuse.rclone " /proc/mounts; then umount -l "$t" 2>/dev/null; fi
  rm -rf "$m"
done
rm -f "$D/rclone.conf" "$D/flush.sh"
exit $rc
)SH";
  return s;
}

std::string WrapRunWithFlush(const std::string& run) {
  const std::string flush = "\"$HOME/" + NodeStorageDir() + "/flush.sh\"";
  return "trap '__herd_rc=$?; [ ! -f " + flush + " ] || bash " + flush +
         " || __herd_rc=1; exit $__herd_rc' EXIT\n" + run;
}

}  // namespace herd::storage
