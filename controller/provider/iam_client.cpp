#include "controller/provider/iam_client.hpp"

#include <boost/json.hpp>
#include <cstdint>
#include <iomanip>
#include <sstream>

#include "shared/common/limits.hpp"

namespace herd::controller {

namespace pt = boost::property_tree;
namespace json = boost::json;

namespace {

// The root element's child named `result` ("CreateUserResult"), or the root.
const pt::ptree& ResultOf(const pt::ptree& doc, const std::string& action) {
  for (const auto& [k, v] : doc) {
    if (k == "<xmlcomment>" || k == "<xmldecl>") continue;
    if (auto r = v.get_child_optional(action + "Result")) return *r;
    return v;
  }
  return doc;
}

bool IamNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("+=,.@_-").find(c) != std::string_view::npos;
}

}  // namespace

std::string AutostopPolicy(const std::string& cluster, const std::string& region,
                           const std::string& tag_key) {
  json::object cond{{"StringEquals", json::object{{"ec2:ResourceTag/" + tag_key, cluster}}}};
  json::object stmt{{"Sid", "HerdAutostopOwnInstances"},
                    {"Effect", "Allow"},
                    {"Action", json::array{"ec2:StopInstances", "ec2:TerminateInstances"}},
                    {"Resource", "arn:aws:ec2:" + region + ":*:instance/*"},
                    {"Condition", std::move(cond)}};
  json::object doc{{"Version", "2012-10-17"}, {"Statement", json::array{std::move(stmt)}}};
  return json::serialize(doc);
}

std::string AutostopUserName(const std::string& cluster) {
  return ClusterIamUserName("herd-autostop-", cluster);
}

std::string ClusterIamUserName(std::string_view prefix_view, const std::string& cluster) {
  const std::string prefix(prefix_view);
  bool clean = true;
  for (char c : cluster) clean = clean && IamNameChar(c);
  std::string name = prefix + cluster;
  if (clean && name.size() <= limits::kIamUserNameMax) return name;
  std::string kept;
  for (char c : cluster) kept += IamNameChar(c) ? c : '-';
  // FNV-1a of the whole name: stable across builds, enough to tell long names apart.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : cluster) h = (h ^ c) * 1099511628211ull;
  std::ostringstream hex;
  hex << std::hex << std::setw(16) << std::setfill('0') << h;
  const std::string hash = hex.str().substr(0, 12);
  const std::size_t room = limits::kIamUserNameMax - prefix.size() - hash.size() - 1;
  return prefix + kept.substr(0, room) + "-" + hash;
}

IamClient::IamClient(HttpClient& http, AwsCredentials credentials, std::string endpoint)
    : http_(http),
      credentials_(std::move(credentials)),
      endpoint_(endpoint.empty() ? "https://iam.amazonaws.com" : std::move(endpoint)) {}

Result<pt::ptree> IamClient::Call(const std::string& action, const Ec2Params& params) {
  HttpRequest req;
  req.method = "POST";
  req.url = endpoint_ + "/";
  req.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  req.body = Ec2QueryBody(action, params, kIamApiVersion);
  req.sign = AwsSigning{credentials_.access_key_id,
                        credentials_.secret_access_key,
                        credentials_.session_token,
                        "us-east-1",
                        "iam",
                        ""};
  req.timeout = limits::kAwsHttpTimeout;
  req.connect_timeout = limits::kAwsHttpConnectTimeout;
  auto resp = http_.Send(req);
  if (!resp.ok()) return Unavailable("IAM " + action + ": " + resp.status().message());
  if (resp->status >= 200 && resp->status < 300) {
    HERD_ASSIGN_OR_RETURN(pt::ptree doc, ParseEc2Xml(resp->body));
    return ResultOf(doc, action);
  }
  Ec2Error e = ParseEc2Error(action, resp->status, resp->body);
  std::string msg = "IAM " + action + ": " + e.code + ": " + e.message +
                    (e.request_id.empty() ? "" : " (request id " + e.request_id + ")");
  if (e.code == "NoSuchEntity") return NotFound(msg);
  if (e.code == "EntityAlreadyExists") return AlreadyExists(msg);
  if (e.code == "AccessDenied" || e.code == "InvalidClientTokenId" ||
      e.code == "SignatureDoesNotMatch" || e.code == "AuthFailure" ||
      e.code == "UnauthorizedOperation") {
    return PermissionDenied(msg);
  }
  if (e.code == "LimitExceeded" || e.code == "Throttling" || resp->status >= 500) {
    return Unavailable(msg);
  }
  return InvalidArgument(msg);
}

Status IamClient::CreateUser(const std::string& user, const std::string& cluster) {
  return Call("CreateUser", {{"UserName", user},
                             {"Tags.member.1.Key", "herd-cluster"},
                             {"Tags.member.1.Value", cluster}})
      .status();
}

Status IamClient::PutUserPolicy(const std::string& user, std::string_view policy_name,
                                const std::string& document) {
  return Call("PutUserPolicy", {{"UserName", user},
                                {"PolicyName", std::string(policy_name)},
                                {"PolicyDocument", document}})
      .status();
}

Result<IamAccessKey> IamClient::CreateAccessKey(const std::string& user) {
  HERD_ASSIGN_OR_RETURN(pt::ptree r, Call("CreateAccessKey", {{"UserName", user}}));
  IamAccessKey key{r.get<std::string>("AccessKey.AccessKeyId", ""),
                   r.get<std::string>("AccessKey.SecretAccessKey", "")};
  if (key.access_key_id.empty() || key.secret_access_key.empty()) {
    return Internal("IAM CreateAccessKey: the reply has no key");
  }
  return key;
}

Result<std::vector<std::string>> IamClient::ListAccessKeys(const std::string& user) {
  HERD_ASSIGN_OR_RETURN(pt::ptree r, Call("ListAccessKeys", {{"UserName", user}}));
  std::vector<std::string> out;
  if (auto set = r.get_child_optional("AccessKeyMetadata")) {
    for (const auto& [k, v] : *set) {
      if (k == "member") out.push_back(v.get<std::string>("AccessKeyId", ""));
    }
  }
  return out;
}

Status IamClient::DeleteAccessKey(const std::string& user, const std::string& key_id) {
  return Call("DeleteAccessKey", {{"UserName", user}, {"AccessKeyId", key_id}}).status();
}

Status IamClient::DeleteUserPolicy(const std::string& user, std::string_view policy_name) {
  return Call("DeleteUserPolicy", {{"UserName", user}, {"PolicyName", std::string(policy_name)}})
      .status();
}

Status IamClient::DeleteUser(const std::string& user) {
  return Call("DeleteUser", {{"UserName", user}}).status();
}

Status IamClient::RemoveUser(const std::string& user, std::string_view policy_name) {
  auto keys = ListAccessKeys(user);
  if (!keys.ok()) {
    return keys.status().code() == Code::kNotFound ? Status::Ok() : keys.status();
  }
  for (const auto& k : *keys) {
    Status s = DeleteAccessKey(user, k);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  Status s = DeleteUserPolicy(user, policy_name);
  if (!s.ok() && s.code() != Code::kNotFound) return s;
  s = DeleteUser(user);
  return s.ok() || s.code() == Code::kNotFound ? Status::Ok() : s;
}

}  // namespace herd::controller
