// AWS credentials and region from the standard chain, as the AWS CLI and SkyPilot find them:
//   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN) in the environment;
//   2. the profile AWS_PROFILE (else "default") of AWS_SHARED_CREDENTIALS_FILE (else
//      ~/.aws/credentials): aws_access_key_id, aws_secret_access_key, aws_session_token.
// Region: AWS_REGION, else AWS_DEFAULT_REGION, else `region` of the profile in AWS_CONFIG_FILE
// (else ~/.aws/config; section "[default]" or "[profile NAME]").
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" for long-term keys
  std::string source;         // "environment" or "<file> [profile]", for messages
};

using GetenvFn = std::function<std::optional<std::string>(const std::string&)>;
// ::getenv as a GetenvFn (unset and empty are both nullopt).
std::optional<std::string> SystemGetenv(const std::string& name);

// NotFound naming every place looked at when there are none; InvalidArgument ("file:line: ...")
// for a file that cannot be parsed or a profile with half a key.
Result<AwsCredentials> LoadAwsCredentials(const GetenvFn& getenv = SystemGetenv);
// The configured region, "" when none is configured anywhere.
Result<std::string> LoadAwsRegion(const GetenvFn& getenv = SystemGetenv);
// `key` of the profile (AWS_PROFILE, else "default") in AWS_CONFIG_FILE (else ~/.aws/config), ""
// when the file, the profile or the key is not there (e.g. "endpoint_url").
Result<std::string> LoadAwsConfigValue(const std::string& key,
                                       const GetenvFn& getenv = SystemGetenv);

}  // namespace herd::controller
