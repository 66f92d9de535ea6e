// IAM for autostop on AWS: each cluster with autostop gets an IAM user of its own
// ("herd-autostop-<cluster>") whose only policy lets it stop and terminate instances tagged
// herd-cluster=<cluster> in the cluster's region, and one access key that the head uses to stop
// its own instances (agent/head/cloud_autostop.hpp). The user's full credentials never reach a
// node. The Query API (Action=...&Version=2010-05-08) is signed for us-east-1/iam, IAM's only
// signing region; its XML replies and errors (<ErrorResponse><Error>) are read with the EC2
// client's parser.
#pragma once

#include <string>
#include <vector>

#include "controller/provider/aws_credentials.hpp"
#include "controller/provider/ec2_client.hpp"
#include "controller/provider/http_client.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

inline constexpr std::string_view kIamApiVersion = "2010-05-08";
inline constexpr std::string_view kIamPolicyName = "herd-autostop";

// The policy document of a cluster's autostop user: ec2:StopInstances and
// ec2:TerminateInstances, only on instances of `region` tagged `tag_key`=`cluster`; nothing else
// (no Describe, no Start, no IAM). JSON, as PutUserPolicy takes it.
std::string AutostopPolicy(const std::string& cluster, const std::string& region,
                           const std::string& tag_key);

// "<prefix><cluster>" when it fits IAM's 64 characters and alphabet, else that cut short with a
// hash of the whole name, so two long names do not collide.
std::string ClusterIamUserName(std::string_view prefix, const std::string& cluster);
// ClusterIamUserName("herd-autostop-", cluster).
std::string AutostopUserName(const std::string& cluster);

struct IamAccessKey {
  std::string access_key_id;
  std::string secret_access_key;
};

class IamClient {
 public:
  // endpoint "" = https://iam.amazonaws.com.
  IamClient(HttpClient& http, AwsCredentials credentials, std::string endpoint = "");

  // A user tagged herd-cluster=<cluster>; AlreadyExists when it exists.
  Status CreateUser(const std::string& user, const std::string& cluster);
  Status PutUserPolicy(const std::string& user, std::string_view policy_name,
                       const std::string& document);
  Result<IamAccessKey> CreateAccessKey(const std::string& user);
  Result<std::vector<std::string>> ListAccessKeys(const std::string& user);
  Status DeleteAccessKey(const std::string& user, const std::string& key_id);
  Status DeleteUserPolicy(const std::string& user, std::string_view policy_name);
  Status DeleteUser(const std::string& user);
  // Its keys, its inline policy `policy_name` and the user; OK when the user does not exist.
  Status RemoveUser(const std::string& user, std::string_view policy_name = kIamPolicyName);

 private:
  Result<boost::property_tree::ptree> Call(const std::string& action, const Ec2Params& params);

  HttpClient& http_;
  AwsCredentials credentials_;
  std::string endpoint_;
};

}  // namespace herd::controller
