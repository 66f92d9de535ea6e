#include "controller/storage/node_keys.hpp"

#include <boost/json.hpp>
#include <filesystem>

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
                         const std::vector<std::string>& buckets) override {
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
    HERD_RETURN_IF_ERROR(Rescope(key.iam_user, buckets));
    HERD_ASSIGN_OR_RETURN(controller::IamAccessKey k, iam_.CreateAccessKey(key.iam_user));
    key.access_key_id = std::move(k.access_key_id);
    key.secret_access_key = std::move(k.secret_access_key);
    return key;
  }

  Status Rescope(const std::string& iam_user, const std::vector<std::string>& buckets) override {
    return iam_.PutUserPolicy(iam_user, kBucketsPolicyName, BucketsPolicy(buckets));
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

std::string BucketsPolicy(const std::vector<std::string>& buckets) {
  json::array bucket_arns;
  json::array object_arns;
  for (const auto& b : buckets) {
    bucket_arns.emplace_back("arn:aws:s3:::" + b);
    object_arns.emplace_back("arn:aws:s3:::" + b + "/*");
  }
  json::object on_buckets{{"Sid", "HerdMountBuckets"},
                          {"Effect", "Allow"},
                          {"Action", json::array{"s3:ListBucket", "s3:GetBucketLocation",
                                                 "s3:ListBucketMultipartUploads"}},
                          {"Resource", std::move(bucket_arns)}};
  json::object on_objects{
      {"Sid", "HerdMountObjects"},
      {"Effect", "Allow"},
      {"Action", json::array{"s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                             "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}},
      {"Resource", std::move(object_arns)}};
  json::object doc{{"Version", "2012-10-17"},
                   {"Statement", json::array{std::move(on_buckets), std::move(on_objects)}}};
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
    return std::optional<NodeKey>(NodeKey{std::string(o.at("iam_user").as_string()),
                                          std::string(o.at("access_key_id").as_string()),
                                          std::string(o.at("secret_access_key").as_string())});
  } catch (const std::exception& e) {
    return IoError(path + ": damaged bucket key: " + e.what());
  }
}

Status SaveNodeKey(const std::string& dir, const std::string& cluster, const NodeKey& key) {
  HERD_ASSIGN_OR_RETURN(std::string path, KeyPath(dir, cluster));
  HERD_ASSIGN_OR_RETURN(SecretBox box, OpenBox(dir, true));
  const std::string text =
      json::serialize(json::object{{"iam_user", key.iam_user},
                                   {"access_key_id", key.access_key_id},
                                   {"secret_access_key", key.secret_access_key}});
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
