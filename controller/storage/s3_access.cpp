#include "controller/storage/s3_access.hpp"

namespace herd::storage {

std::string S3Access::BucketUrl(const std::string& bucket) const {
  if (!endpoint.empty()) return endpoint + "/" + bucket;
  return "https://" + bucket + ".s3." + region + ".amazonaws.com";
}

std::string S3Access::Describe() const {
  return endpoint.empty() ? "AWS S3 (" + region + ")" : endpoint;
}

Result<S3Access> LoadS3Access(const controller::GetenvFn& getenv) {
  S3Access a;
  if (auto e = getenv("AWS_ENDPOINT_URL_S3")) {
    a.endpoint = *e;
    a.endpoint_source = "AWS_ENDPOINT_URL_S3";
  } else if (auto e2 = getenv("AWS_ENDPOINT_URL")) {
    a.endpoint = *e2;
    a.endpoint_source = "AWS_ENDPOINT_URL";
  } else {
    HERD_ASSIGN_OR_RETURN(a.endpoint, controller::LoadAwsConfigValue("endpoint_url", getenv));
    if (!a.endpoint.empty()) {
      std::string profile = getenv("AWS_PROFILE").value_or("default");
      a.endpoint_source =
          getenv("AWS_CONFIG_FILE").value_or("~/.aws/config") + " [" + profile + "]";
    }
  }
  while (!a.endpoint.empty() && a.endpoint.back() == '/') a.endpoint.pop_back();
  if (!a.endpoint.empty() && a.endpoint.rfind("http://", 0) != 0 &&
      a.endpoint.rfind("https://", 0) != 0) {
    return InvalidArgument(a.endpoint_source + ": endpoint '" + a.endpoint +
                           "' is not an http:// or https:// URL");
  }
  HERD_ASSIGN_OR_RETURN(std::string region, controller::LoadAwsRegion(getenv));
  if (!region.empty()) a.region = region;
  HERD_ASSIGN_OR_RETURN(a.credentials, controller::LoadAwsCredentials(getenv));
  return a;
}

}  // namespace herd::storage
