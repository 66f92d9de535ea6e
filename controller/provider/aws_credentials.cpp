#include "controller/provider/aws_credentials.hpp"

#include <boost/property_tree/ini_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cstdlib>
#include <filesystem>

namespace herd::controller {

namespace pt = boost::property_tree;

std::optional<std::string> SystemGetenv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

namespace {

std::string AwsFile(const GetenvFn& getenv, const char* override_var, const char* name) {
  if (auto f = getenv(override_var)) return *f;
  std::string home = getenv("HOME").value_or("");
  return home + "/.aws/" + name;
}

std::string Profile(const GetenvFn& getenv) {
  return getenv("AWS_PROFILE").value_or(getenv("AWS_DEFAULT_PROFILE").value_or("default"));
}

// The file's sections, or nullopt when it does not exist.
Result<std::optional<pt::ptree>> ReadIni(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<pt::ptree>();
  try {
    pt::ptree tree;
    pt::read_ini(path, tree);
    return std::optional<pt::ptree>(std::move(tree));
  } catch (const pt::ini_parser_error& e) {
    return InvalidArgument(path + ":" + std::to_string(e.line()) + ": " + e.message());
  }
}

std::string Get(const pt::ptree& section, const char* key) {
  auto v = section.get_optional<std::string>(pt::ptree::path_type(key, '\0'));
  return v ? *v : "";
}

}  // namespace

Result<AwsCredentials> LoadAwsCredentials(const GetenvFn& getenv) {
  auto id = getenv("AWS_ACCESS_KEY_ID");
  auto secret = getenv("AWS_SECRET_ACCESS_KEY");
  if (id && secret) {
    return AwsCredentials{*id, *secret, getenv("AWS_SESSION_TOKEN").value_or(""), "environment"};
  }
  if (id || secret) {
    return InvalidArgument(std::string("the environment sets ") +
                           (id ? "AWS_ACCESS_KEY_ID but not AWS_SECRET_ACCESS_KEY"
                               : "AWS_SECRET_ACCESS_KEY but not AWS_ACCESS_KEY_ID"));
  }
  std::string file = AwsFile(getenv, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  std::string profile = Profile(getenv);
  HERD_ASSIGN_OR_RETURN(auto ini, ReadIni(file));
  if (ini) {
    if (auto section = ini->get_child_optional(pt::ptree::path_type(profile, '\0'))) {
      AwsCredentials c{Get(*section, "aws_access_key_id"), Get(*section, "aws_secret_access_key"),
                       Get(*section, "aws_session_token"), file + " [" + profile + "]"};
      if (c.access_key_id.empty() || c.secret_access_key.empty()) {
        return InvalidArgument(file + ": profile [" + profile +
                               "] needs both aws_access_key_id and aws_secret_access_key");
      }
      return c;
    }
  }
  return NotFound(
      "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add "
      "profile [" +
      profile + "] to " + file + (ini ? "" : " (it does not exist)") +
      " (`aws configure` writes it)");
}

Result<std::string> LoadAwsRegion(const GetenvFn& getenv) {
  if (auto r = getenv("AWS_REGION")) return *r;
  if (auto r = getenv("AWS_DEFAULT_REGION")) return *r;
  return LoadAwsConfigValue("region", getenv);
}

Result<std::string> LoadAwsConfigValue(const std::string& key, const GetenvFn& getenv) {
  std::string file = AwsFile(getenv, "AWS_CONFIG_FILE", "config");
  std::string profile = Profile(getenv);
  HERD_ASSIGN_OR_RETURN(auto ini, ReadIni(file));
  if (!ini) return std::string();
  std::string name = profile == "default" ? "default" : "profile " + profile;
  auto section = ini->get_child_optional(pt::ptree::path_type(name, '\0'));
  if (!section) return std::string();
  return Get(*section, key.c_str());
}

}  // namespace herd::controller
