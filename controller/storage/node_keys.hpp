// The key a cluster's nodes mount its buckets with. Where the store has an IAM (AWS S3, or an
// S3-compatible store given AWS_ENDPOINT_URL_IAM), herd makes, with the user's own credentials,
// one IAM user per cluster ("herd-buckets-<cluster>", tagged herd-cluster=<cluster>) whose one
// inline policy ("herd-buckets") allows only what an rclone mount does, on exactly the buckets the
// cluster mounts, and one access key for it; the nodes' rclone.conf gets that key, never the
// user's. A later launch on the cluster that names more buckets replaces the policy (same user,
// same key: mounts already running keep working); `herd down` deletes the key, the policy and the
// user. The key is kept on the user's side sealed (shared/crypto/secret_box.hpp) in
// <herd home>/storage_keys/<cluster>, under a key file of its own there, for later launches and
// `herd start`. Where the store has no IAM herd can reach (an S3-compatible endpoint without
// AWS_ENDPOINT_URL_IAM: R2, MinIO, Ceph), the nodes get the user's keys and the launch says so.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/provider/aws_credentials.hpp"
#include "controller/provider/http_client.hpp"
#include "controller/storage/s3_access.hpp"
#include "shared/common/status.hpp"

namespace herd::storage {

inline constexpr std::string_view kBucketsPolicyName = "herd-buckets";
inline constexpr std::string_view kBucketsUserPrefix = "herd-buckets-";

// The policy of a cluster's bucket user: list and locate each bucket, read, write and delete its
// objects (multipart uploads included), on arn:aws:s3:::BUCKET and arn:aws:s3:::BUCKET/* of the
// buckets given and nothing else (no CreateBucket, no DeleteBucket, no bucket policy). JSON, as
// PutUserPolicy takes it. `buckets` must not be empty.
std::string BucketsPolicy(const std::vector<std::string>& buckets);
// "herd-buckets-<cluster>", cut short with a hash when long (controller::ClusterIamUserName).
std::string BucketsUserName(const std::string& cluster);

// IAM's endpoint for keys that reach `access`'s store: AWS_ENDPOINT_URL_IAM when set; else, for
// AWS S3 itself (no custom endpoint), IAM's global endpoint; else "" (the store has no IAM herd
// knows of).
std::string IamEndpointFor(const S3Access& access,
                           const controller::GetenvFn& getenv = controller::SystemGetenv);

struct NodeKey {
  std::string iam_user;
  std::string access_key_id;
  std::string secret_access_key;
};

// The IAM side, behind an interface so that the operations can be tested without one.
class NodeKeyIssuer {
 public:
  virtual ~NodeKeyIssuer();
  virtual std::string Describe() const = 0;  // "IAM at https://iam.amazonaws.com", for messages
  // Makes the cluster's user with BucketsPolicy(buckets) and one access key. A user of that name
  // left behind (a crash before its key was kept) loses its old keys first.
  virtual Result<NodeKey> Create(const std::string& cluster,
                                 const std::vector<std::string>& buckets) = 0;
  // Replaces the user's policy with BucketsPolicy(buckets).
  virtual Status Rescope(const std::string& iam_user, const std::vector<std::string>& buckets) = 0;
  // Deletes the user's keys, its policy and the user; OK when it does not exist.
  virtual Status Remove(const std::string& iam_user) = 0;
};

// The IAM Query API at `endpoint`, called with the user's credentials.
std::unique_ptr<NodeKeyIssuer> MakeIamKeyIssuer(std::shared_ptr<controller::HttpClient> http,
                                                controller::AwsCredentials credentials,
                                                std::string endpoint);

// <herd home>/storage_keys
std::string NodeKeysDir();
// The cluster's key kept in `dir` (nullopt when none). Errors: a file that does not open with
// the directory's seal key (damaged, or another machine's).
Result<std::optional<NodeKey>> LoadNodeKey(const std::string& dir, const std::string& cluster);
// Seals and writes the key (0600; the directory 0700, its seal key made on first use).
Status SaveNodeKey(const std::string& dir, const std::string& cluster, const NodeKey& key);
// Removes the kept key; OK when there is none.
Status ForgetNodeKey(const std::string& dir, const std::string& cluster);

}  // namespace herd::storage
