#include "controller/storage/node_keys.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <tuple>

#include "controller/provider/iam_client.hpp"
#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "shared/crypto/secret_box.hpp"

namespace herd::storage {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

constexpr char kSealKeyFile[] = "seal.key";

// The seal's context: a file sealed for one cluster does not open as another's.
std::string SealContext(const std::string& cluster) { return "herd-storage-key:" + cluster; }

Result<std::string> KeyPath(const std::string& dir, const std::string& cluster) {
  // Cluster names are checked before they get here; this keeps the path inside `dir` anyway.
  if (cluster.empty() || cluster.front() == '.' ||
      cluster.find_first_of("/\\") != std::string::npos || cluster == kSealKeyFile) {
    return InvalidArgument("cluster name '" + cluster + "' cannot name a key file");
  }
  return dir + "/" + cluster;
}

Result<SecretBox> OpenBox(const std::string& dir, bool create) {
  const std::string path = dir + "/" + kSealKeyFile;
  auto box = SecretBox::Load(path);
  if (box.ok() || box.status().code() != Code::kNotFound || !create) return box;
  HERD_RETURN_IF_ERROR(controller::EnsureDir(dir, 0700));
  return SecretBox::Create(path);
}

class IamKeyIssuer final : public NodeKeyIssuer {
 public:
  IamKeyIssuer(std::shared_ptr<controller::HttpClient> http, controller::AwsCredentials creds,
               std::string endpoint)
      : http_(std::move(http)), endpoint_(endpoint), iam_(*http_, std::move(creds), endpoint) {}

  std::string Describe() const override { return "IAM at " + endpoint_; }

  Result<NodeKey> Create(const std::string& cluster,
                         const std::vector<BucketScope>& scopes) override {
    NodeKey key;
    key.iam_user = BucketsUserName(cluster);
    Status made = iam_.CreateUser(key.iam_user, cluster);
    if (made.code() == Code::kAlreadyExists) {
      // Left by a crash before its key was kept: that key's secret is lost, so it goes.
      HERD_ASSIGN_OR_RETURN(auto keys, iam_.ListAccessKeys(key.iam_user));
      for (const auto& k : keys) HERD_RETURN_IF_ERROR(iam_.DeleteAccessKey(key.iam_user, k));
    } else if (!made.ok()) {
      return made;
    }
    HERD_RETURN_IF_ERROR(Rescope(key.iam_user, scopes));
    key.scopes = MergeScopes(scopes);
    HERD_ASSIGN_OR_RETURN(controller::IamAccessKey k, iam_.CreateAccessKey(key.iam_user));
    key.access_key_id = std::move(k.access_key_id);
    key.secret_access_key = std::move(k.secret_access_key);
    return key;
  }

  Status Rescope(const std::string& iam_user, const std::vector<BucketScope>& scopes) override {
    return iam_.PutUserPolicy(iam_user, kBucketsPolicyName, BucketsPolicy(scopes));
  }

  Status Remove(const std::string& iam_user) override {
    return iam_.RemoveUser(iam_user, kBucketsPolicyName);
  }

 private:
  std::shared_ptr<controller::HttpClient> http_;
  std::string endpoint_;
  controller::IamClient iam_;
};

}  // namespace

NodeKeyIssuer::~NodeKeyIssuer() = default;

std::vector<BucketScope> MergeScopes(std::vector<BucketScope> scopes) {
  std::sort(scopes.begin(), scopes.end(), [](const BucketScope& a, const BucketScope& b) {
    return std::tie(a.bucket, a.prefix, a.read_only) < std::tie(b.bucket, b.prefix, b.read_only);
  });
  std::vector<BucketScope> out;
  for (std::size_t i = 0; i < scopes.size();) {
    std::size_t end = i;
    while (end < scopes.size() && scopes[end].bucket == scopes[i].bucket) ++end;
    // scopes[i, end): one bucket's, by prefix, read-write before read-only for one prefix.
    bool whole_rw = false;
    bool whole_ro = false;
    for (std::size_t j = i; j < end; ++j) {
      if (scopes[j].prefix.empty()) (scopes[j].read_only ? whole_ro : whole_rw) = true;
    }
    if (whole_rw) {
      out.push_back({scopes[i].bucket, "", false});
      i = end;
      continue;
    }
    for (std::size_t j = i; j < end; ++j) {
      const BucketScope& s = scopes[j];
      if (j > i && s.prefix == scopes[j - 1].prefix) continue;  // its read-only twin
      if (s.read_only && whole_ro && !s.prefix.empty()) continue;
      out.push_back(s);
    }
    i = end;
  }
  return out;
}

std::string BucketsPolicy(const std::vector<BucketScope>& scopes) {
  const std::vector<BucketScope> merged = MergeScopes(scopes);
  constexpr char kArn[] = "arn:aws:s3:::";
  json::array whole_rw;    // buckets: list, locate, multipart uploads
  json::array whole_ro;    // buckets: list, locate
  json::array write_objs;  // objects: read, write, delete, multipart
  json::array read_objs;   // objects: read
  // Buckets used only under prefixes: locate, and list only under them.
  std::vector<std::pair<std::string, json::array>> prefixed;
  for (std::size_t i = 0; i < merged.size(); ++i) {
    const BucketScope& s = merged[i];
    const std::string bucket_arn = kArn + s.bucket;
    const bool first_of_bucket = i == 0 || merged[i - 1].bucket != s.bucket;
    if (s.prefix.empty()) {
      (s.read_only ? whole_ro : whole_rw).emplace_back(bucket_arn);
    } else if (first_of_bucket) {
      prefixed.emplace_back(bucket_arn, json::array());
    }
    if (!s.prefix.empty() && !prefixed.empty() && prefixed.back().first == bucket_arn) {
      prefixed.back().second.emplace_back(s.prefix + "/*");
      prefixed.back().second.emplace_back(s.prefix);
    }
    (s.read_only ? read_objs : write_objs)
        .emplace_back(bucket_arn + "/" + (s.prefix.empty() ? "" : s.prefix + "/") + "*");
  }
  json::array statements;
  auto add = [&](const char* sid, json::array actions, json::array resources) {
    if (resources.empty()) return;
    statements.emplace_back(json::object{{"Sid", sid},
                                         {"Effect", "Allow"},
                                         {"Action", std::move(actions)},
                                         {"Resource", std::move(resources)}});
  };
  add("HerdMountBuckets",
      {"s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"},
      std::move(whole_rw));
  add("HerdReadBuckets", {"s3:ListBucket", "s3:GetBucketLocation"}, std::move(whole_ro));
  json::array locate;
  for (const auto& [arn, prefixes] : prefixed) locate.emplace_back(arn);
  add("HerdLocatePrefixBuckets", {"s3:GetBucketLocation"}, std::move(locate));
  // One statement a bucket: a condition holds for every resource of its statement.
  for (std::size_t i = 0; i < prefixed.size(); ++i) {
    statements.emplace_back(json::object{
        {"Sid", "HerdListPrefixes" + std::to_string(i + 1)},
        {"Effect", "Allow"},
        {"Action", json::array{"s3:ListBucket"}},
        {"Resource", json::array{json::string(prefixed[i].first)}},
        {"Condition", json::object{{"StringLike",
                                    json::object{{"s3:prefix", std::move(prefixed[i].second)}}}}}});
  }
  add("HerdMountObjects",
      {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
       "s3:ListMultipartUploadParts"},
      std::move(write_objs));
  add("HerdReadObjects", {"s3:GetObject"}, std::move(read_objs));
  json::object doc{{"Version", "2012-10-17"}, {"Statement", std::move(statements)}};
  return json::serialize(doc);
}

std::string BucketsUserName(const std::string& cluster) {
  return controller::ClusterIamUserName(kBucketsUserPrefix, cluster);
}

std::string IamEndpointFor(const S3Access& access, const controller::GetenvFn& getenv) {
  if (auto e = getenv("AWS_ENDPOINT_URL_IAM")) {
    std::string endpoint = *e;
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    return endpoint;
  }
  return access.endpoint.empty() ? "https://iam.amazonaws.com" : "";
}

std::unique_ptr<NodeKeyIssuer> MakeIamKeyIssuer(std::shared_ptr<controller::HttpClient> http,
                                                controller::AwsCredentials credentials,
                                                std::string endpoint) {
  return std::make_unique<IamKeyIssuer>(std::move(http), std::move(credentials),
                                        std::move(endpoint));
}

std::string NodeKeysDir() { return controller::HerdHome() + "/storage_keys"; }

Result<std::optional<NodeKey>> LoadNodeKey(const std::string& dir, const std::string& cluster) {
  HERD_ASSIGN_OR_RETURN(std::string path, KeyPath(dir, cluster));
  HERD_ASSIGN_OR_RETURN(auto sealed, ReadFileIfExists(path));
  if (!sealed) return std::optional<NodeKey>();
  HERD_ASSIGN_OR_RETURN(SecretBox box, OpenBox(dir, false));
  auto text = box.Open(*sealed, SealContext(cluster));
  if (!text.ok()) return text.status().WithContext("bucket key of cluster " + cluster);
  try {
    const json::object o = json::parse(*text).as_object();
    NodeKey key{std::string(o.at("iam_user").as_string()),
                std::string(o.at("access_key_id").as_string()),
                std::string(o.at("secret_access_key").as_string()),
                {}};
    if (const json::value* scopes = o.if_contains("scopes")) {
      for (const auto& v : scopes->as_array()) {
        const json::object& sc = v.as_object();
        key.scopes.push_back({std::string(sc.at("bucket").as_string()),
                              std::string(sc.at("prefix").as_string()),
                              sc.at("read_only").as_bool()});
      }
    }
    return std::optional<NodeKey>(std::move(key));
  } catch (const std::exception& e) {
    return IoError(path + ": damaged bucket key: " + e.what());
  }
}

Status SaveNodeKey(const std::string& dir, const std::string& cluster, const NodeKey& key) {
  HERD_ASSIGN_OR_RETURN(std::string path, KeyPath(dir, cluster));
  HERD_ASSIGN_OR_RETURN(SecretBox box, OpenBox(dir, true));
  json::array scopes;
  for (const BucketScope& sc : key.scopes) {
    scopes.emplace_back(
        json::object{{"bucket", sc.bucket}, {"prefix", sc.prefix}, {"read_only", sc.read_only}});
  }
  const std::string text =
      json::serialize(json::object{{"iam_user", key.iam_user},
                                   {"access_key_id", key.access_key_id},
                                   {"secret_access_key", key.secret_access_key},
                                   {"scopes", std::move(scopes)}});
  HERD_ASSIGN_OR_RETURN(std::string sealed, box.Seal(text, SealContext(cluster)));
  return WriteFileAtomic(path, sealed, 0600, Durability::kProcessCrash);
}

Status ForgetNodeKey(const std::string& dir, const std::string& cluster) {
  HERD_ASSIGN_OR_RETURN(std::string path, KeyPath(dir, cluster));
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return IoError("removing " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace herd::storage
