// herd_task: SkyPilot's bucket forms in file_mounts (`/p: s3://b/prefix`, `/p: {name, source,
// store, mode, persistent}`), their errors at the place, and S3's bucket-name rules.
#include <doctest/doctest.h>

#include "controller/task/task.hpp"

namespace herd::task {
namespace {

ParseOptions Home() {
  ParseOptions o;
  o.getenv = [](const std::string& name) -> std::optional<std::string> {
    if (name == "HOME") return "/home/u";
    return std::nullopt;
  };
  return o;
}

Task Parse(std::string_view yaml) {
  auto t = ParseTaskYaml(yaml, "t.yaml", Home());
  REQUIRE_MESSAGE(t.ok(), t.status().message());
  return *t;
}

std::string ErrorOf(std::string_view yaml) {
  auto t = ParseTaskYaml(yaml, "t.yaml", Home());
  REQUIRE(!t.ok());
  return t.status().message();
}

TEST_CASE("the storage object: name, source, store, mode, persistent") {
  Task t = Parse(
      "file_mounts:\n"
      "  /checkpoints:\n    name: my-ckpt\n    mode: mount_cached\n"
      "  /out:\n    name: outs\n    source: ~/results\n    store: S3\n    persistent: false\n"
      "  /in:\n    source: s3://data.set/a/b/\n    mode: COPY\n"
      "  /local: ~/x\n");
  REQUIRE(t.storage_mounts.size() == 3);
  const StorageMount& c = t.storage_mounts.at("/checkpoints");
  CHECK(c.bucket == "my-ckpt");
  CHECK(c.mode == "MOUNT_CACHED");
  CHECK(c.create);
  CHECK(c.persistent);
  CHECK(c.source.empty());
  const StorageMount& o = t.storage_mounts.at("/out");
  CHECK(o.mode == "MOUNT");  // SkyPilot's default
  CHECK(o.source == "/home/u/results");
  CHECK(o.store == "s3");
  CHECK_FALSE(o.persistent);
  const StorageMount& i = t.storage_mounts.at("/in");
  CHECK(i.bucket == "data.set");
  CHECK(i.prefix == "a/b");
  CHECK_FALSE(i.create);  // a bucket URI names a bucket that must exist
  CHECK(t.file_mounts == std::map<std::string, std::string>{{"/local", "/home/u/x"}});
}

TEST_CASE("bad storage objects are refused at their place") {
  CHECK(ErrorOf("file_mounts:\n  /d:\n    mode: COPY\n") ==
        "t.yaml:3:5: file_mounts./d: a bucket needs a name (herd makes the bucket when it does "
        "not exist) or a source (s3://bucket/prefix, or a local directory to upload with a name)");
  CHECK(ErrorOf("file_mounts:\n  /d:\n    name: abc\n    mode: FAST\n") ==
        "t.yaml:4:11: file_mounts./d.mode: unknown mode 'FAST': expected MOUNT, COPY or "
        "MOUNT_CACHED");
  CHECK(ErrorOf("file_mounts:\n  /d:\n    name: abc\n    store: minio\n") ==
        "t.yaml:4:12: file_mounts./d.store: unknown store 'minio': expected s3");
  CHECK(ErrorOf("file_mounts:\n  /d:\n    name: abc\n    store: gcs\n")
            .rfind("t.yaml:4:12: file_mounts./d.store: store 'gcs' is not supported by herd", 0) ==
        0);
  CHECK(ErrorOf("file_mounts:\n  /d:\n    name: abc\n    persistent: maybe\n") ==
        "t.yaml:4:17: file_mounts./d.persistent: expected true or false, got 'maybe'");
  CHECK(ErrorOf("file_mounts:\n  /d:\n    source: ~/data\n") ==
        "t.yaml:3:13: file_mounts./d.source: a local source is uploaded into a bucket: give the "
        "bucket's name too");
  CHECK(ErrorOf("file_mounts:\n  /d:\n    name: abc\n    source: s3://other\n") ==
        "t.yaml:3:5: file_mounts./d.name: give either name or a bucket URI as source, not both "
        "(the URI names the bucket)");
  CHECK(ErrorOf("file_mounts:\n  /d:\n    name: abc\n    source: [a, b]\n") ==
        "t.yaml:4:13: file_mounts./d.source: a list of sources is not supported by herd: give one "
        "local directory or one bucket URI");
  CHECK(ErrorOf("file_mounts:\n  /d: s3://Bad_Bucket/x\n") ==
        "t.yaml:2:7: file_mounts./d: 's3://Bad_Bucket/x': 'Bad_Bucket' is not a valid S3 bucket "
        "name: use lower-case letters, digits, '.' and '-' only");
  CHECK(ErrorOf("file_mounts:\n  /d: ~/a\n  /d:\n    name: abc\n") ==
        "t.yaml:3:3: file_mounts./d: given twice (first on line 2): keep one");
}

TEST_CASE("S3's bucket-name rules") {
  for (const std::string& ok :
       std::vector<std::string>{"abc", "my-bucket.v2", "a1b", std::string(63, 'a')}) {
    CAPTURE(ok);
    CHECK(CheckBucketName(ok).ok());
  }
  auto why = [](std::string_view name) { return CheckBucketName(name).message(); };
  CHECK(why("ab").find("3 to 63") != std::string::npos);
  CHECK(why(std::string(64, 'a')).find("3 to 63") != std::string::npos);
  CHECK(why("-abc").find("start and end") != std::string::npos);
  CHECK(why("abc.").find("start and end") != std::string::npos);
  CHECK(why("a..b").find("two dots") != std::string::npos);
  CHECK(why("192.168.5.4").find("IP address") != std::string::npos);
  CHECK(why("xn--abc").find("reserved") != std::string::npos);
  CHECK(why("abc-s3alias").find("reserved") != std::string::npos);
  CHECK(why("a_b").find("lower-case") != std::string::npos);
}

TEST_CASE("bucket mounts survive the JSON form the managed-job store keeps") {
  Task t = Parse(
      "file_mounts:\n  /c:\n    name: ckpt\n    mode: MOUNT_CACHED\n    persistent: "
      "false\n  /d: s3://data/x\n");
  auto back = StorageMountsFromJson(StorageMountsToJson(t.storage_mounts));
  REQUIRE(back.ok());
  CHECK(*back == t.storage_mounts);
  CHECK_FALSE(StorageMountsFromJson("{\"/c\": {\"bucket\": 1}}").ok());
}

}  // namespace
}  // namespace herd::task
