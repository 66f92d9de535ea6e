// Autostop on AWS, the controller's side (controller/provider/iam_client, AwsProvider's
// GrantAutostop/Machines/Teardown) on a scripted HttpClient: the policy allows only stopping and
// terminating this cluster's tagged instances in its region; the IAM user's name fits IAM's
// rules; the user, policy and key are made once and kept in the record (a second grant calls
// nothing); a leftover user loses its old keys; a refused CreateUser says what the credentials
// lack; Teardown removes keys, policy and user; Machines sums the instances' states.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "controller/provider/aws_provider.hpp"
#include "controller/provider/iam_client.hpp"
#include "shared/common/limits.hpp"
#include "tests/fakes/fake_http_client.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::controller {
namespace {

using herd::testing::FakeHttp;
using herd::testing::TempDir;

GetenvFn Env(const std::string& home) {
  std::map<std::string, std::string> m{
      {"HOME", home}, {"AWS_ACCESS_KEY_ID", "AKIDUSER"}, {"AWS_SECRET_ACCESS_KEY", "user-secret"}};
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

std::string IamOk(const std::string& action, const std::string& inner = "") {
  return "<" + action + "Response xmlns=\"https://iam.amazonaws.com/doc/2010-05-08/\"><" + action +
         "Result>" + inner + "</" + action +
         "Result><ResponseMetadata><RequestId>r1</RequestId>"
         "</ResponseMetadata></" +
         action + "Response>";
}

std::string IamErr(const std::string& code, const std::string& msg) {
  return "<ErrorResponse><Error><Type>Sender</Type><Code>" + code + "</Code><Message>" + msg +
         "</Message></Error><RequestId>r2</RequestId></ErrorResponse>";
}

struct Fixture {
  TempDir d{"herd-aws-autostop"};
  FakeHttp* http = nullptr;
  std::unique_ptr<AwsProvider> provider;
  Fixture() {
    d.Write("state/aws.json",
            "{\"cluster\":\"c1\",\"region\":\"us-west-2\",\"key_name\":\"herd-c1\","
            "\"group_name\":\"herd-c1\",\"group_id\":\"sg-1\","
            "\"instance_ids\":[\"i-0aa\",\"i-0bb\"]}");
    auto h = std::make_unique<FakeHttp>();
    http = h.get();
    provider = std::make_unique<AwsProvider>(AwsLaunchSpec{}, std::move(h), Env(d.path()),
                                             d.path() + "/config.yaml", [](const std::string&) {});
  }
  std::string state() const { return d.path() + "/state"; }
};

TEST_CASE("the policy: stop and terminate, only this cluster's tagged instances in its region") {
  const std::string doc = AutostopPolicy("train", "us-west-2", "herd-cluster");
  CHECK(boost::json::parse(doc) == boost::json::parse(R"({"Version":"2012-10-17","Statement":[{
            "Sid":"HerdAutostopOwnInstances","Effect":"Allow",
            "Action":["ec2:StopInstances","ec2:TerminateInstances"],
            "Resource":"arn:aws:ec2:us-west-2:*:instance/*",
            "Condition":{"StringEquals":{"ec2:ResourceTag/herd-cluster":"train"}}}]})"));
}

TEST_CASE("the IAM user's name fits IAM's length and alphabet, and long names stay apart") {
  CHECK(AutostopUserName("train") == "herd-autostop-train");
  const std::string a = AutostopUserName(std::string(80, 'x') + "a");
  const std::string b = AutostopUserName(std::string(80, 'x') + "b");
  CHECK(a.size() <= limits::kIamUserNameMax);
  CHECK(a.starts_with("herd-autostop-xxxx"));
  CHECK(a != b);
  const std::string odd = AutostopUserName("a/b c");
  CHECK(odd.find_first_of("/ ") == std::string::npos);
}

TEST_CASE("a grant makes the user, its policy and one key once; down removes all three") {
  Fixture f;
  auto& R = f.http->replies;
  R["CreateUser"] = {
      {200, IamOk("CreateUser", "<User><UserName>herd-autostop-c1</UserName></User>")}};
  R["PutUserPolicy"] = {{200, IamOk("PutUserPolicy")}};
  R["CreateAccessKey"] = {{200, IamOk("CreateAccessKey",
                                      "<AccessKey><AccessKeyId>AKIASCOPED</AccessKeyId>"
                                      "<SecretAccessKey>scoped/secret+1</SecretAccessKey>"
                                      "</AccessKey>")}};
  auto g = f.provider->GrantAutostop("c1", f.state());
  REQUIRE(g.ok());
  CHECK(g->provider == "aws");
  CHECK(g->region == "us-west-2");
  CHECK(g->endpoint == "https://ec2.us-west-2.amazonaws.com");
  CHECK(g->instance_ids == std::vector<std::string>{"i-0aa", "i-0bb"});
  CHECK(g->access_key_id == "AKIASCOPED");
  CHECK(g->secret_access_key == "scoped/secret+1");
  CHECK(f.http->Actions() ==
        std::vector<std::string>{"CreateUser", "PutUserPolicy", "CreateAccessKey"});
  CHECK(f.http->bodies[0].find("Version=2010-05-08") != std::string::npos);
  CHECK(f.http->bodies[0].find("UserName=herd-autostop-c1") != std::string::npos);
  CHECK(f.http->bodies[1].find("PolicyName=herd-autostop") != std::string::npos);
  CHECK(f.http->bodies[1].find("ec2%3AResourceTag%2Fherd-cluster") != std::string::npos);
  // Kept: a second grant (autostop set again) asks IAM nothing.
  auto again = f.provider->GrantAutostop("c1", f.state());
  REQUIRE(again.ok());
  CHECK(again->access_key_id == "AKIASCOPED");
  CHECK(f.http->bodies.size() == 3);

  f.http->bodies.clear();
  R["DescribeInstances"] = {{200, "<r><reservationSet/></r>"}};
  R["DescribeSecurityGroups"] = {{200, "<r><securityGroupInfo/></r>"}};
  R["DeleteSecurityGroup"] = {{200, "<ok/>"}};
  R["DeleteKeyPair"] = {{200, "<ok/>"}};
  R["DescribeKeyPairs"] = {{200, "<r><keySet/></r>"}};
  R["ListAccessKeys"] = {{200, IamOk("ListAccessKeys",
                                     "<AccessKeyMetadata><member><AccessKeyId>AKIASCOPED"
                                     "</AccessKeyId></member></AccessKeyMetadata>")}};
  R["DeleteAccessKey"] = {{200, IamOk("DeleteAccessKey")}};
  R["DeleteUserPolicy"] = {{200, IamOk("DeleteUserPolicy")}};
  R["DeleteUser"] = {{200, IamOk("DeleteUser")}};
  REQUIRE(f.provider->Teardown("c1", f.state()).ok());
  auto acts = f.http->Actions();
  const std::vector<std::string> iam(acts.end() - 4, acts.end());
  CHECK(iam == std::vector<std::string>{"ListAccessKeys", "DeleteAccessKey", "DeleteUserPolicy",
                                        "DeleteUser"});
}

TEST_CASE("a leftover user loses its old keys; a refused CreateUser names what is missing") {
  {
    Fixture f;
    auto& R = f.http->replies;
    R["CreateUser"] = {{409, IamErr("EntityAlreadyExists", "User exists.")}};
    R["ListAccessKeys"] = {{200, IamOk("ListAccessKeys",
                                       "<AccessKeyMetadata><member><AccessKeyId>AKIAOLD"
                                       "</AccessKeyId></member></AccessKeyMetadata>")}};
    R["DeleteAccessKey"] = {{200, IamOk("DeleteAccessKey")}};
    R["PutUserPolicy"] = {{200, IamOk("PutUserPolicy")}};
    R["CreateAccessKey"] = {{200, IamOk("CreateAccessKey",
                                        "<AccessKey><AccessKeyId>AKIANEW</AccessKeyId>"
                                        "<SecretAccessKey>s</SecretAccessKey></AccessKey>")}};
    auto g = f.provider->GrantAutostop("c1", f.state());
    REQUIRE(g.ok());
    CHECK(g->access_key_id == "AKIANEW");
    CHECK(f.http->Actions() == std::vector<std::string>{"CreateUser", "ListAccessKeys",
                                                        "DeleteAccessKey", "PutUserPolicy",
                                                        "CreateAccessKey"});
    CHECK(f.http->bodies[2].find("AccessKeyId=AKIAOLD") != std::string::npos);
  }
  {
    Fixture f;
    f.http->replies["CreateUser"] = {
        {403, IamErr("AccessDenied", "User: arn:aws:iam::1:user/u is not authorized")}};
    auto g = f.provider->GrantAutostop("c1", f.state());
    REQUIRE(!g.ok());
    CHECK(g.status().code() == Code::kPermissionDenied);
    CHECK(g.status().message() ==
          "IAM CreateUser: AccessDenied: User: arn:aws:iam::1:user/u is not authorized (request "
          "id r2) (autostop on aws makes an IAM user per cluster: the credentials need "
          "iam:CreateUser and friends)");
  }
}

std::string Instances(const std::string& a, const std::string& b) {
  auto one = [](const std::string& id, const std::string& state) {
    return "<item><instancesSet><item><instanceId>" + id + "</instanceId><instanceState><name>" +
           state + "</name></instanceState></item></instancesSet></item>";
  };
  return "<r><reservationSet>" + (a.empty() ? "" : one("i-0aa", a)) +
         (b.empty() ? "" : one("i-0bb", b)) + "</reservationSet></r>";
}

TEST_CASE("the machines' state sums the instances' states") {
  const std::vector<std::tuple<std::string, std::string, MachinesState>> cases = {
      {"running", "pending", MachinesState::kRunning},
      {"stopping", "stopped", MachinesState::kStopping},
      {"shutting-down", "terminated", MachinesState::kStopping},
      {"stopped", "stopped", MachinesState::kStopped},
      {"terminated", "", MachinesState::kGone},
      {"running", "stopped", MachinesState::kMixed},
  };
  for (const auto& [a, b, want] : cases) {
    Fixture f;
    f.http->replies["DescribeInstances"] = {{200, Instances(a, b)}};
    auto v = f.provider->Machines("c1", f.state());
    REQUIRE(v.ok());
    CHECK(v->state == want);
    CHECK(v->detail == "i-0aa " + a + ", i-0bb " + (b.empty() ? "gone" : b));
  }
  Fixture none;
  std::filesystem::remove(none.state() + "/aws.json");
  auto v = none.provider->Machines("c1", none.state());
  REQUIRE(v.ok());
  CHECK(v->state == MachinesState::kGone);
  CHECK(none.http->bodies.empty());
}

}  // namespace
}  // namespace herd::controller
