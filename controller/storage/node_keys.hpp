// The key a cluster's nodes mount its buckets with. Where the store has an IAM (AWS S3, or an
// S3-compatible store given AWS_ENDPOINT_URL_IAM), herd makes, with the user's own credentials,
// one IAM user per cluster ("herd-buckets-<cluster>", tagged herd-cluster=<cluster>) whose one
// inline policy ("herd-buckets") allows only what an rclone mount does, on exactly the buckets (or
// the prefixes of them) the cluster mounts, read only where it only COPYs them, and one access key
// for it; the nodes' rclone.conf gets that key, never the user's. A later launch on the cluster
// that names more buckets, or writes to one it only read, replaces the policy with one that
// allows what both launches need (same user, same key: mounts already running keep working); `herd
// down` deletes the key, the policy and the user. The key is kept on the user's side sealed
// (shared/crypto/secret_box.hpp) in <herd home>/storage_keys/<cluster>, under a key file of its own
// there, for later launches and `herd start`. Where the store has no IAM herd can reach (an
// S3-compatible endpoint without AWS_ENDPOINT_URL_IAM: R2, MinIO, Ceph), the nodes get the user's
// keys and the launch says so.
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

// What a cluster's nodes may do in one bucket: all of it (prefix "") or only under `prefix` (a
// folder, no slashes at its ends, as `/path: s3://bucket/prefix` gives it); read only (every mount
// of it is COPY) or read and write (MOUNT, MOUNT_CACHED).
struct BucketScope {
  std::string bucket;
  std::string prefix;
  bool read_only = false;
  bool operator==(const BucketScope&) const = default;
};

// The least scopes that allow what all of `scopes` allow, sorted by bucket and prefix: in one
// bucket a whole-bucket read-write scope covers every other, a whole-bucket read-only one covers
// the read-only prefixes, and a prefix read-write somewhere covers its read-only twin.
std::vector<BucketScope> MergeScopes(std::vector<BucketScope> scopes);

// The policy of a cluster's bucket user (of MergeScopes(scopes)): on each bucket GetBucketLocation
// and ListBucket, the latter limited by an s3:prefix condition ("P/*" and "P") when the cluster
// uses only prefixes P of it; on its objects (arn:aws:s3:::BUCKET/* or BUCKET/P/*) GetObject, and
// for read-write scopes PutObject, DeleteObject and the multipart calls too
// (ListBucketMultipartUploads on the bucket only for a whole-bucket read-write one); nothing else
// (no CreateBucket, no DeleteBucket, no bucket policy) and no other bucket. JSON, as PutUserPolicy
// takes it. `scopes` must not be empty.
std::string BucketsPolicy(const std::vector<BucketScope>& scopes);
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
  // What its policy allows now (MergeScopes'd). A key kept before scopes were recorded has none:
  // its policy allowed every bucket the cluster mounts, read and write, whole.
  std::vector<BucketScope> scopes;
};

// The IAM side, behind an interface so that the operations can be tested without one.
class NodeKeyIssuer {
 public:
  virtual ~NodeKeyIssuer();
  virtual std::string Describe() const = 0;  // "IAM at https://iam.amazonaws.com", for messages
  // Makes the cluster's user with BucketsPolicy(scopes) and one access key (its `scopes` set). A
  // user of that name left behind (a crash before its key was kept) loses its old keys first.
  virtual Result<NodeKey> Create(const std::string& cluster,
                                 const std::vector<BucketScope>& scopes) = 0;
  // Replaces the user's policy with BucketsPolicy(scopes).
  virtual Status Rescope(const std::string& iam_user, const std::vector<BucketScope>& scopes) = 0;
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
