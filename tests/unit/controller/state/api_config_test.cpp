// Which API server the CLI uses: ~/.herd/config.yaml's api_server section, shared with the aws
// provider's section, and the environment's overrides.
#include "controller/state/api_config.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include "controller/state/herd_home.hpp"
#include "shared/common/file_util.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

using testing::ReadAll;
using testing::ScopedEnv;
using testing::TempHome;

struct NoEnv {
  ScopedEnv server{"HERD_API_SERVER", nullptr}, token{"HERD_API_TOKEN", nullptr},
      ca{"HERD_API_CA_CERT", nullptr};
};

TEST_CASE("login and logout keep the file's other sections") {
  TempHome home;
  NoEnv env;
  REQUIRE(EnsureDir(HerdHome()).ok());
  const std::string aws = "aws:\n  ssh_user: admin\n  image_id: ami-123\n";
  REQUIRE(WriteFileAtomic(ApiConfigPath(), aws, 0600).ok());
  REQUIRE(SaveApiConfig({"https://127.0.0.1:46580", "herd_tok", "/ca.crt"}).ok());
  auto c = LoadApiConfig();
  REQUIRE(c.ok());
  REQUIRE(c->has_value());
  CHECK((*c)->endpoint == "https://127.0.0.1:46580");
  CHECK((*c)->token == "herd_tok");
  CHECK((*c)->ca_cert == "/ca.crt");
  struct stat st {};
  REQUIRE(::stat(ApiConfigPath().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(ReadAll(ApiConfigPath()).find("image_id: ami-123") != std::string::npos);

  REQUIRE(ClearApiConfig().ok());
  c = LoadApiConfig();
  REQUIRE(c.ok());
  CHECK_FALSE(c->has_value());
  const std::string left = ReadAll(ApiConfigPath());
  CHECK(left.find("ssh_user: admin") != std::string::npos);
  CHECK(left.find("api_server") == std::string::npos);
}

TEST_CASE("logout of a file that held only the server removes it; twice is fine") {
  TempHome home;
  NoEnv env;
  REQUIRE(SaveApiConfig({"https://h:1", "t", ""}).ok());
  REQUIRE(ClearApiConfig().ok());
  CHECK(ReadAll(ApiConfigPath()).empty());
  CHECK(ClearApiConfig().ok());
}

TEST_CASE("the environment overrides the file, and local forces local mode") {
  TempHome home;
  NoEnv env;
  REQUIRE(SaveApiConfig({"https://file:1", "file-token", ""}).ok());
  {
    ScopedEnv token("HERD_API_TOKEN", "env-token");
    auto c = LoadApiConfig();
    REQUIRE((c.ok() && c->has_value()));
    CHECK((*c)->endpoint == "https://file:1");
    CHECK((*c)->token == "env-token");
  }
  ScopedEnv local("HERD_API_SERVER", "local");
  auto c = LoadApiConfig();
  REQUIRE(c.ok());
  CHECK_FALSE(c->has_value());
}

TEST_CASE("a malformed file is an error naming file:line:col, and login changes nothing") {
  TempHome home;
  NoEnv env;
  REQUIRE(EnsureDir(HerdHome()).ok());
  const std::string bad = "aws:\n  ssh_user: [unclosed\n";
  REQUIRE(WriteFileAtomic(ApiConfigPath(), bad, 0600).ok());
  auto c = LoadApiConfig();
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find(ApiConfigPath() + ":") == 0);
  CHECK_FALSE(SaveApiConfig({"https://h:1", "t", ""}).ok());
  CHECK(ReadAll(ApiConfigPath()) == bad);
}

}  // namespace
}  // namespace herd::controller
