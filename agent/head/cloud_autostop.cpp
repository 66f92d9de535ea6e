#include "agent/head/cloud_autostop.hpp"

#include <chrono>

#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::agent {
namespace {

bool OnlyOf(const std::string& s, std::string_view allowed_extra, bool lower, bool upper) {
  if (s.empty()) return false;
  for (char ch : s) {
    const bool ok = (ch >= '0' && ch <= '9') || (lower && ch >= 'a' && ch <= 'z') ||
                    (upper && ch >= 'A' && ch <= 'Z') ||
                    allowed_extra.find(ch) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

std::string Secs(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

}  // namespace

std::string CloudCredentialsPath(const std::string& state_dir) {
  return state_dir + "/autostop-cloud.key";
}

Status ValidateCloudAutostop(const herd::v1::CloudAutostop& cloud) {
  if (cloud.provider() != "aws") {
    return InvalidArgument("autostop: unknown cloud provider '" + cloud.provider() + "'");
  }
  if (!OnlyOf(cloud.region(), "-", true, false)) {
    return InvalidArgument("autostop: bad region '" + cloud.region() + "'");
  }
  const std::string& e = cloud.endpoint();
  const bool scheme = e.starts_with("https://") || e.starts_with("http://");
  if (!scheme || !OnlyOf(e.substr(e.find("//") + 2), "-._:/[]", true, true)) {
    return InvalidArgument("autostop: bad endpoint '" + e + "'");
  }
  if (cloud.instance_ids_size() == 0) return InvalidArgument("autostop: no instances");
  for (const auto& id : cloud.instance_ids()) {
    if (!id.starts_with("i-") || !OnlyOf(id.substr(2), "", true, false)) {
      return InvalidArgument("autostop: bad instance id '" + id + "'");
    }
  }
  if (!OnlyOf(cloud.access_key_id(), "", false, true)) {
    return InvalidArgument("autostop: bad access key id");
  }
  if (!OnlyOf(cloud.secret_access_key(), "/+=", true, true)) {
    return InvalidArgument("autostop: bad secret access key");
  }
  return Status::Ok();
}

Status WriteCloudCredentials(const std::string& path, const herd::v1::CloudAutostop& cloud) {
  return WriteFileAtomic(
      path, "user = \"" + cloud.access_key_id() + ":" + cloud.secret_access_key() + "\"\n", 0600);
}

herd::v1::SetAutostop WithoutSecret(const herd::v1::SetAutostop& setting) {
  herd::v1::SetAutostop out = setting;
  if (out.has_cloud()) out.mutable_cloud()->clear_secret_access_key();
  return out;
}

std::string CloudStopCommand(const herd::v1::CloudAutostop& cloud, bool down,
                             const std::string& credentials_path) {
  std::string body = std::string("Action=") + (down ? "TerminateInstances" : "StopInstances") +
                     "&Version=2016-11-15";
  for (int i = 0; i < cloud.instance_ids_size(); ++i) {
    body += "&InstanceId." + std::to_string(i + 1) + "=" + cloud.instance_ids(i);
  }
  std::string endpoint = cloud.endpoint();
  if (!endpoint.ends_with("/")) endpoint += "/";
  return "exec curl -sS --fail-with-body --retry " + std::to_string(limits::kCloudAutostopRetries) +
         " --retry-all-errors --retry-delay " + Secs(limits::kCloudAutostopRetryDelay) +
         " --connect-timeout " + Secs(limits::kCloudAutostopConnectTimeout) + " --max-time " +
         Secs(limits::kCloudAutostopCallTimeout) + " -K " + Quote(credentials_path) +
         " --aws-sigv4 " + Quote("aws:amz:" + cloud.region() + ":ec2") + " -H " +
         Quote("Content-Type: application/x-www-form-urlencoded; charset=utf-8") + " --data " +
         Quote(body) + " " + Quote(endpoint);
}

}  // namespace herd::agent
