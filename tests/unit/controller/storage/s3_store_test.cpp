// herd_storage: where S3 is reached (endpoint and credentials the way AWS's tools take them) and
// the S3 calls herd makes, over a scripted HttpClient: what is sent (method, URL, the signed
// x-amz-content-sha256) and how answers become errors that name the bucket.
#include <doctest/doctest.h>

#include <deque>
#include <map>

#include "controller/storage/object_store.hpp"
#include "controller/storage/s3_access.hpp"
#include "tests/unit/test_support.hpp"

namespace herd::storage {
namespace {

using herd::testing::TempDir;

controller::GetenvFn Env(std::map<std::string, std::string> env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// Answers requests from a queue of (status, body) and records them.
class ScriptedHttp : public controller::HttpClient {
 public:
  std::deque<std::pair<long, std::string>> replies;
  std::vector<controller::HttpRequest> sent;
  bool unreachable = false;
  Result<controller::HttpResponse> Send(const controller::HttpRequest& r) override {
    sent.push_back(r);
    if (unreachable) return Unavailable(r.method + " " + r.url + ": Connection refused");
    REQUIRE(!replies.empty());
    auto [status, body] = replies.front();
    replies.pop_front();
    return controller::HttpResponse{status, body, ""};
  }
};

S3Access Minio() {
  S3Access a;
  a.endpoint = "http://10.0.0.1:9000";
  a.credentials = {"AKID", "SECRET", "", "environment"};
  return a;
}

TEST_CASE("the endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then the profile's endpoint_url") {
  TempDir dir;
  const std::string config = dir.Write("config",
                                       "[default]\nendpoint_url = http://cfg:1/\n"
                                       "[profile r2]\nendpoint_url = https://r2.example\n"
                                       "region = auto\n");
  std::map<std::string, std::string> env = {{"AWS_ACCESS_KEY_ID", "A"},
                                            {"AWS_SECRET_ACCESS_KEY", "S"},
                                            {"AWS_CONFIG_FILE", config},
                                            {"HOME", dir.path()}};
  auto a = LoadS3Access(Env(env));
  REQUIRE(a.ok());
  CHECK(a->endpoint == "http://cfg:1");
  CHECK(a->region == "us-east-1");
  CHECK(a->BucketUrl("b") == "http://cfg:1/b");
  env["AWS_PROFILE"] = "r2";
  a = LoadS3Access(Env(env));
  REQUIRE(a.ok());
  CHECK(a->endpoint == "https://r2.example");
  CHECK(a->region == "auto");
  env["AWS_ENDPOINT_URL"] = "http://general:2";
  CHECK(LoadS3Access(Env(env))->endpoint == "http://general:2");
  env["AWS_ENDPOINT_URL_S3"] = "http://s3only:3";
  CHECK(LoadS3Access(Env(env))->endpoint_source == "AWS_ENDPOINT_URL_S3");
  env["AWS_ENDPOINT_URL_S3"] = "ftp://x";
  CHECK(LoadS3Access(Env(env)).status().message().find("not an http:// or https:// URL") !=
        std::string::npos);
  // No endpoint anywhere: AWS, a bucket as a virtual host of its region.
  auto aws = LoadS3Access(Env({{"AWS_ACCESS_KEY_ID", "A"},
                               {"AWS_SECRET_ACCESS_KEY", "S"},
                               {"AWS_REGION", "eu-west-1"},
                               {"HOME", dir.path()}}));
  REQUIRE(aws.ok());
  CHECK(aws->BucketUrl("b") == "https://b.s3.eu-west-1.amazonaws.com");
  CHECK(aws->Describe() == "AWS S3 (eu-west-1)");
  // No credentials: the chain's own error.
  CHECK(LoadS3Access(Env({{"HOME", dir.path()}})).status().code() == Code::kNotFound);
}

TEST_CASE("HeadBucket, CreateBucket and their errors name the bucket and the store") {
  auto http = std::make_shared<ScriptedHttp>();
  auto store = MakeS3Store(Minio(), http);
  http->replies = {{200, ""}, {404, ""}, {403, ""}};
  CHECK(*store->BucketExists("b1") == true);
  CHECK(*store->BucketExists("b2") == false);
  auto denied = store->BucketExists("b3");
  CHECK(denied.status().code() == Code::kPermissionDenied);
  CHECK(denied.status().message() ==
        "bucket 'b3' at http://10.0.0.1:9000: HeadBucket failed: HTTP 403 (check the AWS "
        "credentials from environment)");
  const auto& head = http->sent.front();
  CHECK(head.method == "HEAD");
  CHECK(head.url == "http://10.0.0.1:9000/b1/");
  REQUIRE(head.sign.has_value());
  CHECK(head.sign->service == "s3");
  CHECK(head.sign->region == "us-east-1");
  CHECK(head.sign->access_key_id == "AKID");
  REQUIRE(head.headers.size() == 1);
  CHECK(head.headers[0] == std::pair<std::string, std::string>{
                               "x-amz-content-sha256",
                               "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"});

  http->replies = {{409,
                    "<?xml version=\"1.0\"?><Error><Code>BucketAlreadyExists</Code><Message>"
                    "taken</Message></Error>"}};
  Status s = store->CreateBucket("b4");
  CHECK(s.code() == Code::kAlreadyExists);
  CHECK(s.message() ==
        "bucket 'b4' at http://10.0.0.1:9000: CreateBucket failed: HTTP 409 BucketAlreadyExists: "
        "taken");
  CHECK(http->sent.back().method == "PUT");
  CHECK(http->sent.back().body.empty());  // a custom endpoint takes no location

  http->unreachable = true;
  auto down = store->BucketExists("b5");
  CHECK(down.status().code() == Code::kUnavailable);
  CHECK(down.status().message().rfind("bucket 'b5': cannot reach http://10.0.0.1:9000 (", 0) == 0);
}

TEST_CASE("CreateBucket on AWS outside us-east-1 names the region") {
  S3Access a = Minio();
  a.endpoint.clear();
  a.region = "eu-central-1";
  auto http = std::make_shared<ScriptedHttp>();
  auto store = MakeS3Store(a, http);
  http->replies = {{200, ""}};
  REQUIRE(store->CreateBucket("b").ok());
  CHECK(http->sent[0].url == "https://b.s3.eu-central-1.amazonaws.com/");
  CHECK(http->sent[0].body.find("<LocationConstraint>eu-central-1</LocationConstraint>") !=
        std::string::npos);
}

TEST_CASE("DeleteBucket empties the bucket a page at a time, then deletes it") {
  auto http = std::make_shared<ScriptedHttp>();
  auto store = MakeS3Store(Minio(), http);
  const std::string page =
      "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>"
      "<Contents><Key>a b/c.txt</Key><Size>3</Size></Contents>"
      "<Contents><Key>d</Key><Size>40</Size></Contents></ListBucketResult>";
  http->replies = {{200, page},
                   {204, ""},
                   {204, ""},
                   {200, "<ListBucketResult><Name>b</Name></ListBucketResult>"},
                   {204, ""}};
  REQUIRE(store->DeleteBucket("b").ok());
  REQUIRE(http->sent.size() == 5);
  CHECK(http->sent[0].url == "http://10.0.0.1:9000/b/?list-type=2&max-keys=1000");
  CHECK(http->sent[1].method == "DELETE");
  CHECK(http->sent[1].url == "http://10.0.0.1:9000/b/a%20b/c.txt");
  CHECK(http->sent[2].url == "http://10.0.0.1:9000/b/d");
  CHECK(http->sent[4].url == "http://10.0.0.1:9000/b/");
  // A bucket that is already gone is no error.
  http->replies = {{404, ""}};
  CHECK(store->DeleteBucket("gone").ok());

  http->replies = {{200, page}};
  auto list = store->ListObjects("b", "a b/", 10);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0].key == "a b/c.txt");
  CHECK((*list)[1].size == 40);
  CHECK(http->sent.back().url == "http://10.0.0.1:9000/b/?list-type=2&max-keys=10&prefix=a%20b%2F");
}

TEST_CASE("the rclone remote reaches the same store with the same keys") {
  auto http = std::make_shared<ScriptedHttp>();
  S3Access a = Minio();
  a.credentials.session_token = "TOKEN";
  std::string conf = MakeS3Store(a, http)->RcloneConfig();
  CHECK(conf ==
        "type = s3\nenv_auth = false\nprovider = Other\naccess_key_id = AKID\n"
        "secret_access_key = SECRET\nsession_token = TOKEN\nregion = us-east-1\n"
        "endpoint = http://10.0.0.1:9000\nforce_path_style = true\n");
  a.endpoint.clear();
  CHECK(MakeS3Store(a, http)->RcloneConfig().find("provider = AWS\n") != std::string::npos);
}

}  // namespace
}  // namespace herd::storage
