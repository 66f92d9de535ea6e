// How the user's machine reaches S3 or an S3-compatible store, found the way AWS's own tools find
// it: the endpoint from AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else `endpoint_url` of the
// profile in ~/.aws/config, else AWS itself (https://s3.<region>.amazonaws.com); credentials from
// the standard chain (controller/provider/aws_credentials.hpp); the region from the same chain,
// else us-east-1.
#pragma once

#include <string>

#include "controller/provider/aws_credentials.hpp"
#include "shared/common/status.hpp"

namespace herd::storage {

struct S3Access {
  // "http://10.0.0.1:9000" without a trailing slash; "" = AWS (virtual-hosted bucket URLs).
  std::string endpoint;
  std::string endpoint_source;  // "AWS_ENDPOINT_URL_S3", "~/.aws/config [default]", ...
  std::string region = "us-east-1";
  controller::AwsCredentials credentials;

  // The URL of a bucket (no trailing slash): path style on a custom endpoint (MinIO, R2, Ceph
  // all take it), https://BUCKET.s3.REGION.amazonaws.com on AWS.
  std::string BucketUrl(const std::string& bucket) const;
  // What messages call the store: the endpoint, or "AWS S3 (REGION)".
  std::string Describe() const;
};

// Errors: the credential chain's (NotFound naming where it looked), a malformed endpoint URL.
Result<S3Access> LoadS3Access(const controller::GetenvFn& getenv = controller::SystemGetenv);

}  // namespace herd::storage
