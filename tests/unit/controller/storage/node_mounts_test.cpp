// herd_storage: the node-side scripts, run with bash in a scratch home: the flush waits for
// rclone's dirty files and fails when their rclone is gone; a wrapped run keeps its exit code
// unless the flush fails; unmount with nothing mounted is a no-op that removes the keys.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "controller/ssh/subprocess.hpp"
#include "controller/storage/node_mounts.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::storage {
namespace {

using herd::testing::TempDir;

controller::ProcResult Bash(const TempDir& home, const std::string& script) {
  auto r = controller::RunProcess({"bash", "-c", script}, "", std::chrono::seconds(20),
                                  {{"HOME", home.path()}});
  REQUIRE(r.ok());
  return *r;
}

// One mount's directory as MountScript leaves it.
std::string Mount(const TempDir& home, const std::string& id, const std::string& mode,
                  const std::string& pid, bool dirty) {
  const std::string m = NodeStorageDir() + "/mounts/" + id;
  home.Write(m + "/target", "/ckpt-" + id + "\n");
  home.Write(m + "/mode", mode + "\n");
  home.Write(m + "/pid", pid + "\n");
  home.Write(m + "/cache/vfsMeta/herd-s3/b/f.pt",
             std::string("{\n\t\"Size\": 3,\n\t\"Dirty\": ") + (dirty ? "true" : "false") + "\n}");
  return home / (m + "/cache/vfsMeta/herd-s3/b/f.pt");
}

TEST_CASE("flush: clean mounts pass, a dirty file of a dead rclone fails naming the mount") {
  TempDir home;
  // Nothing mounted at all.
  CHECK(Bash(home, FlushScript()).exit_code == 0);
  Mount(home, "a", "MOUNT_CACHED", "1", false);
  Mount(home, "c", "COPY", "999999999", true);  // COPY has no rclone process: never waited for
  CHECK(Bash(home, FlushScript()).exit_code == 0);
  Mount(home, "b", "MOUNT", "999999999", true);
  auto r = Bash(home, FlushScript());
  CHECK(r.exit_code == 1);
  CHECK(r.err == "herd: bucket mount /ckpt-b stopped before its writes were uploaded\n");
}

TEST_CASE("flush waits while a live rclone still has dirty files") {
  TempDir home;
  // A sleep stands for rclone; the file turns clean after a moment, as after its upload.
  const std::string meta = Mount(home, "a", "MOUNT_CACHED", "0", true);
  const std::string pid_file = home / (NodeStorageDir() + "/mounts/a/pid");
  const std::string script = "sleep 20 >/dev/null 2>&1 & S=$!; echo $S > '" + pid_file +
                             "'\n(sleep 0.5; printf '{\"Dirty\": false}' > '" + meta + "') &\n" +
                             FlushScript() + "echo flushed\nkill $S\n";
  auto r = Bash(home, script);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "flushed\n");
  std::ifstream in(meta);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "{\"Dirty\": false}");  // it returned only after the file was clean
}

TEST_CASE("a wrapped run keeps its exit code, and fails when the flush fails") {
  TempDir home;
  home.Write(NodeStorageDir() + "/flush.sh", "exit 0\n");
  CHECK(Bash(home, WrapRunWithFlush("echo run; exit 3")).exit_code == 3);
  auto ok = Bash(home, WrapRunWithFlush("echo run"));
  CHECK(ok.exit_code == 0);
  CHECK(ok.out == "run\n");
  home.Write(NodeStorageDir() + "/flush.sh", "echo 'not uploaded' >&2; exit 1\n");
  auto bad = Bash(home, WrapRunWithFlush("echo run"));
  CHECK(bad.exit_code == 1);
  CHECK(bad.err == "not uploaded\n");
  CHECK(Bash(home, WrapRunWithFlush("exit 7")).exit_code == 1);
}

TEST_CASE("unmount with nothing mounted removes the keys and the mount records") {
  TempDir home;
  const std::string conf = home.Write(NodeStorageDir() + "/rclone.conf", "secret\n");
  Mount(home, "a", "COPY", "999999999", false);
  auto r = Bash(home, UnmountScript(true));
  CHECK(r.exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(conf));
  CHECK_FALSE(std::filesystem::exists(home / (NodeStorageDir() + "/mounts/a")));
  // No storage directory at all: nothing to do.
  TempDir empty;
  CHECK(Bash(empty, UnmountScript(true)).exit_code == 0);
}

TEST_CASE("the mount script reads the keys from stdin only") {
  std::string s = MountScript({{"~/ckpt", "MOUNT_CACHED", "bucket/prefix"}});
  CHECK(s.find("cat > \"$D/rclone.conf.new\"") != std::string::npos);
  CHECK(s.find("herd_mount '~/ckpt' 'MOUNT_CACHED' 'bucket/prefix' ") != std::string::npos);
  CHECK(s.find("--vfs-cache-mode full --write-back-cache") != std::string::npos);
}

}  // namespace
}  // namespace herd::storage
