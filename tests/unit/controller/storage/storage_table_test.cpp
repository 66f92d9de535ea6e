// herd_storage: the user's storage table (storage.db): records round-trip, list by name, remove,
// and a second connection sees the first one's writes.
#include <doctest/doctest.h>

#include "controller/storage/storage_table.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::storage {
namespace {

using herd::testing::TempDir;

TEST_CASE("storage records round-trip and list by name") {
  TempDir dir;
  const std::string path = dir / "sub/storage.db";
  auto table = StorageTable::Open(path);
  REQUIRE(table.ok());
  StorageRecord r;
  r.name = "zeta";
  r.store = "s3";
  r.endpoint = "http://10.0.0.1:9000";
  r.source = "/home/u/data";
  r.mode = "MOUNT_CACHED";
  r.herd_made = true;
  r.persistent = false;
  r.clusters = {"c1", "c2"};
  r.created_unix_ms = 1234;
  REQUIRE((*table)->Put(r).ok());
  StorageRecord a = r;
  a.name = "alpha";
  a.clusters.clear();
  REQUIRE((*table)->Put(a).ok());

  auto other = StorageTable::Open(path);
  REQUIRE(other.ok());
  auto got = (*other)->Get("zeta");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->endpoint == r.endpoint);
  CHECK((*got)->source == r.source);
  CHECK((*got)->mode == r.mode);
  CHECK((*got)->herd_made);
  CHECK_FALSE((*got)->persistent);
  CHECK((*got)->clusters == std::vector<std::string>{"c1", "c2"});
  CHECK((*got)->created_unix_ms == 1234);
  auto all = (*other)->List();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].name == "alpha");
  CHECK((*all)[1].name == "zeta");

  REQUIRE((*table)->Remove("zeta").ok());
  REQUIRE((*table)->Remove("zeta").ok());  // again: not an error
  CHECK_FALSE((*other)->Get("zeta")->has_value());
}

TEST_CASE("a file that is not a storage table is refused naming it") {
  TempDir dir;
  const std::string path = dir.Write("storage.db", "not a database, just text of some length\n");
  auto table = StorageTable::Open(path);
  REQUIRE_FALSE(table.ok());
  CHECK(table.status().message().find(path) != std::string::npos);
}

}  // namespace
}  // namespace herd::storage
