// What runs on a node for bucket mounts (over SSH, from the cluster operations): shell scripts
// around Debian's rclone. Layout on the node, under <agent dir>/storage (0700):
//   rclone.conf          the store's remote with the user's keys (0600, from stdin, never argv)
//   mounts/<id>/         one per mount: target, mode, pid (of `rclone mount`), log, cache/
//   flush.sh             waits for every mount's write-back queue to drain
// MOUNT: `rclone mount --vfs-cache-mode writes` (reads go to the bucket; a file written is
// uploaded kStorageWriteBack after it is closed). MOUNT_CACHED: `--vfs-cache-mode full` (reads are
// cached on the node's disk too; writes at local-disk speed, uploaded in the background). Either
// way a run is reported done only after flush.sh saw every write uploaded. COPY: `rclone copy`
// into the path before setup.
#pragma once

#include <string>
#include <vector>

namespace herd::storage {

// The rclone remote every mount of a node goes through.
inline constexpr char kRcloneRemote[] = "herd-s3";

struct NodeMount {
  std::string target;       // the task's remote path ("~/ckpt" or "/checkpoints")
  std::string mode;         // MOUNT, MOUNT_CACHED or COPY
  std::string bucket_path;  // "bucket" or "bucket/prefix"
};

// <agent dir>/storage relative to the node user's home.
std::string NodeStorageDir();
// A bash script (run as `bash -c`) that writes its stdin to rclone.conf (0600) and makes every
// mount, waiting for each FUSE mount to be ready (kStorageMountReadyTimeout). A mount that is
// already there (same target, rclone alive) is kept. On failure it prints one line, "<target>:
// <reason>", and exits non-zero, leaving the mounts it made (UnmountScript removes them).
std::string MountScript(const std::vector<NodeMount>& mounts);
// flush.sh: waits until no mount of the node has a file rclone still has to upload (its VFS
// cache marks those "Dirty"), at most kStorageFlushTimeout; exits 1 with a line on stderr when
// that time ran out or a mount's rclone is gone with writes not uploaded.
std::string FlushScript();
// Flushes the mounts when `flush` (bounded by kStorageFlushTimeout), then unmounts every
// mount, stops its rclone, and removes rclone.conf. Safe to run when nothing is mounted.
std::string UnmountScript(bool flush);
// `run` wrapped so that its exit waits for flush.sh (when the node has one): an exit trap keeps
// the script's own exit code, or makes it 1 when the flush fails (the checkpoint is not in the
// bucket).
std::string WrapRunWithFlush(const std::string& run);

}  // namespace herd::storage
