// The nodes' key policy (node_keys.hpp): MergeScopes and the statements BucketsPolicy writes for
// whole, read-only and prefixed buckets. The key's life over a fake IAM is storage_ops_test's.
#include "controller/storage/node_keys.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace herd::storage {
namespace {

TEST_CASE("MergeScopes keeps the least scopes that allow as much") {
  auto names = [](const std::vector<BucketScope>& scopes) {
    std::vector<std::string> out;
    for (const auto& s : MergeScopes(scopes)) {
      out.push_back(s.bucket + (s.prefix.empty() ? "" : "/" + s.prefix) +
                    (s.read_only ? " ro" : " rw"));
    }
    return out;
  };
  CHECK(names({{"b", "p", true}, {"b", "", false}, {"b", "q", false}}) ==
        std::vector<std::string>{"b rw"});
  CHECK(names({{"b", "p", true}, {"b", "", true}, {"b", "q", false}}) ==
        std::vector<std::string>{"b ro", "b/q rw"});
  CHECK(names({{"b", "p", true}, {"b", "p", false}, {"b", "p", true}, {"a", "", true}}) ==
        std::vector<std::string>{"a ro", "b/p rw"});
}

TEST_CASE("the policy: read-only buckets get no writes, a prefix's key lists and reaches only it") {
  const auto doc = boost::json::parse(BucketsPolicy({{"b1", "", false},
                                                     {"b2", "", true},
                                                     {"b3", "team/a", true},
                                                     {"b3", "team/b", false}}))
                       .as_object();
  std::map<std::string, boost::json::object> by_sid;
  for (const auto& st : doc.at("Statement").as_array()) {
    CHECK(st.at("Effect").as_string() == "Allow");
    by_sid[std::string(st.at("Sid").as_string())] = st.as_object();
  }
  auto strings = [](const boost::json::value& v) {
    std::set<std::string> out;
    for (const auto& x : v.as_array()) out.emplace(x.as_string());
    return out;
  };
  using Set = std::set<std::string>;
  REQUIRE(by_sid.size() == 6);
  CHECK(strings(by_sid["HerdMountBuckets"].at("Resource")) == Set{"arn:aws:s3:::b1"});
  CHECK(strings(by_sid["HerdMountBuckets"].at("Action")) ==
        Set{"s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"});
  CHECK(strings(by_sid["HerdReadBuckets"].at("Resource")) == Set{"arn:aws:s3:::b2"});
  CHECK(strings(by_sid["HerdReadBuckets"].at("Action")) ==
        Set{"s3:ListBucket", "s3:GetBucketLocation"});
  CHECK(strings(by_sid["HerdLocatePrefixBuckets"].at("Resource")) == Set{"arn:aws:s3:::b3"});
  CHECK(strings(by_sid["HerdLocatePrefixBuckets"].at("Action")) == Set{"s3:GetBucketLocation"});
  const auto& list = by_sid["HerdListPrefixes1"];
  CHECK(strings(list.at("Resource")) == Set{"arn:aws:s3:::b3"});
  CHECK(strings(list.at("Action")) == Set{"s3:ListBucket"});
  CHECK(strings(list.at("Condition").at("StringLike").at("s3:prefix")) ==
        Set{"team/a/*", "team/a", "team/b/*", "team/b"});
  CHECK(strings(by_sid["HerdMountObjects"].at("Resource")) ==
        Set{"arn:aws:s3:::b1/*", "arn:aws:s3:::b3/team/b/*"});
  CHECK(strings(by_sid["HerdMountObjects"].at("Action")) ==
        Set{"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts"});
  CHECK(strings(by_sid["HerdReadObjects"].at("Resource")) ==
        Set{"arn:aws:s3:::b2/*", "arn:aws:s3:::b3/team/a/*"});
  CHECK(strings(by_sid["HerdReadObjects"].at("Action")) == Set{"s3:GetObject"});
  // Only the prefix statement has a condition.
  for (const auto& [sid, st] : by_sid) {
    CHECK((st.if_contains("Condition") != nullptr) == (sid == "HerdListPrefixes1"));
  }
}

}  // namespace
}  // namespace herd::storage
