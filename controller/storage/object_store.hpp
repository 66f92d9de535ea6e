// A bucket store as herd uses it: whether a bucket exists, make it, list it, empty and delete it,
// and how a node's rclone reaches it. S3 (and S3-compatible endpoints) is the one implementation;
// another store (GCS) is another ObjectStore and another scheme in the task spec.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "controller/provider/http_client.hpp"
#include "controller/storage/s3_access.hpp"
#include "shared/common/status.hpp"

namespace herd::storage {

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore();
  virtual std::string Scheme() const = 0;    // "s3": the URI scheme and the task's `store`
  virtual std::string Describe() const = 0;  // where the store is, for messages
  // Errors (each one line naming the bucket and the store): the endpoint does not answer
  // (Unavailable), the credentials are refused (PermissionDenied), anything else the store says.
  virtual Result<bool> BucketExists(const std::string& bucket) = 0;
  virtual Status CreateBucket(const std::string& bucket) = 0;
  // Deletes every object, then the bucket. A bucket that is not there is no error.
  virtual Status DeleteBucket(const std::string& bucket) = 0;
  // At most max_keys objects under prefix ("" = all), in key order.
  virtual Result<std::vector<ObjectInfo>> ListObjects(const std::string& bucket,
                                                      const std::string& prefix, int max_keys) = 0;
  // The body of an rclone config section (`type = s3`, endpoint, keys) that reaches this store
  // with the user's credentials: secret, written only into a 0600 file on the nodes.
  virtual std::string RcloneConfig() const = 0;
  // The same section with a key of its own for the nodes (node_keys.hpp) instead of the user's
  // credentials, and without rclone's bucket check (a key scoped to buckets may not create one;
  // the launch made the buckets already).
  virtual std::string RcloneConfigWithKey(const std::string& access_key_id,
                                          const std::string& secret_access_key) const = 0;
};

// S3 over `http` (SigV4-signed by it: controller/provider/http_client.hpp).
std::unique_ptr<ObjectStore> MakeS3Store(S3Access access,
                                         std::shared_ptr<controller::HttpClient> http);

}  // namespace herd::storage
