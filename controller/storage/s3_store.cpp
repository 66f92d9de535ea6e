// S3's REST API for buckets: HeadBucket, CreateBucket, ListObjectsV2, DeleteObject, DeleteBucket.
// Every request carries x-amz-content-sha256 (S3 requires it; libcurl signs the headers it is
// given, so it is part of the signature).
#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <sstream>

#include "controller/bootstrap/sha256.hpp"
#include "controller/provider/ec2_client.hpp"
#include "controller/storage/object_store.hpp"
#include "shared/common/limits.hpp"

namespace herd::storage {

ObjectStore::~ObjectStore() = default;

namespace {

namespace pt = boost::property_tree;

// "<Code>: <Message>" of an S3 error body, or "HTTP <status>" when there is none (HEAD).
std::string ErrorText(const controller::HttpResponse& r) {
  std::string code, message;
  try {
    std::istringstream in(r.body);
    pt::ptree doc;
    pt::read_xml(in, doc, pt::xml_parser::trim_whitespace);
    code = doc.get<std::string>("Error.Code", "");
    message = doc.get<std::string>("Error.Message", "");
  } catch (const std::exception&) {
  }
  std::string out = "HTTP " + std::to_string(r.status);
  if (!code.empty()) out += " " + code;
  if (!message.empty()) out += ": " + message;
  return out;
}

class S3Store final : public ObjectStore {
 public:
  S3Store(S3Access access, std::shared_ptr<controller::HttpClient> http)
      : a_(std::move(access)), http_(std::move(http)) {}

  std::string Scheme() const override { return "s3"; }
  std::string Describe() const override { return a_.Describe(); }

  Result<bool> BucketExists(const std::string& bucket) override {
    HERD_ASSIGN_OR_RETURN(auto r, Send("HEAD", a_.BucketUrl(bucket) + "/", bucket));
    if (r.status == 200) return true;
    if (r.status == 404) return false;
    return Failed(r, "HeadBucket", bucket);
  }

  Status CreateBucket(const std::string& bucket) override {
    std::string body;
    // AWS wants the region named unless it is us-east-1; custom endpoints take no body.
    if (a_.endpoint.empty() && a_.region != "us-east-1") {
      body =
          "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
          "<LocationConstraint>" +
          a_.region + "</LocationConstraint></CreateBucketConfiguration>";
    }
    HERD_ASSIGN_OR_RETURN(auto r, Send("PUT", a_.BucketUrl(bucket) + "/", bucket, body));
    if (r.status == 200) return Status::Ok();
    return Failed(r, "CreateBucket", bucket);
  }

  Status DeleteBucket(const std::string& bucket) override {
    // Emptied a page at a time: each listing starts over, so no continuation token is needed.
    for (;;) {
      auto objects = ListObjects(bucket, "", limits::kS3ListPageKeys);
      if (!objects.ok() && objects.status().code() == Code::kNotFound) return Status::Ok();
      HERD_RETURN_IF_ERROR(objects.status());
      if (objects->empty()) break;
      for (const ObjectInfo& o : *objects) {
        HERD_ASSIGN_OR_RETURN(
            auto r,
            Send("DELETE", a_.BucketUrl(bucket) + "/" + controller::AwsUriEncode(o.key, true),
                 bucket));
        if (r.status != 204 && r.status != 200 && r.status != 404) {
          return Failed(r, "DeleteObject " + o.key, bucket);
        }
      }
    }
    HERD_ASSIGN_OR_RETURN(auto r, Send("DELETE", a_.BucketUrl(bucket) + "/", bucket));
    if (r.status == 204 || r.status == 200 || r.status == 404) return Status::Ok();
    return Failed(r, "DeleteBucket", bucket);
  }

  Result<std::vector<ObjectInfo>> ListObjects(const std::string& bucket, const std::string& prefix,
                                              int max_keys) override {
    // Parameters in sorted order, already encoded: the signed canonical query is the URL's.
    std::string url = a_.BucketUrl(bucket) + "/?list-type=2&max-keys=" + std::to_string(max_keys);
    if (!prefix.empty()) url += "&prefix=" + controller::AwsUriEncode(prefix, false);
    HERD_ASSIGN_OR_RETURN(auto r, Send("GET", url, bucket));
    if (r.status == 404) return NotFound("bucket '" + bucket + "' does not exist at " + Describe());
    if (r.status != 200) return Failed(r, "ListObjectsV2", bucket);
    std::vector<ObjectInfo> out;
    try {
      std::istringstream in(r.body);
      pt::ptree doc;
      pt::read_xml(in, doc, pt::xml_parser::trim_whitespace);
      for (const auto& [tag, node] : doc.get_child("ListBucketResult")) {
        if (tag != "Contents") continue;
        out.push_back({node.get<std::string>("Key"), node.get<int64_t>("Size", 0)});
      }
    } catch (const std::exception& e) {
      return Internal("ListObjectsV2 of bucket '" + bucket + "' at " + Describe() +
                      ": unreadable answer: " + e.what());
    }
    return out;
  }

  std::string RcloneConfig() const override {
    const auto& c = a_.credentials;
    return Rclone(c.access_key_id, c.secret_access_key, c.session_token, false);
  }

  std::string RcloneConfigWithKey(const std::string& access_key_id,
                                  const std::string& secret_access_key) const override {
    return Rclone(access_key_id, secret_access_key, "", true);
  }

 private:
  std::string Rclone(const std::string& key_id, const std::string& secret, const std::string& token,
                     bool no_check_bucket) const {
    std::string out = "type = s3\nenv_auth = false\n";
    out += "provider = " + std::string(a_.endpoint.empty() ? "AWS" : "Other") + "\n";
    out += "access_key_id = " + key_id + "\n";
    out += "secret_access_key = " + secret + "\n";
    if (!token.empty()) out += "session_token = " + token + "\n";
    out += "region = " + a_.region + "\n";
    if (!a_.endpoint.empty()) out += "endpoint = " + a_.endpoint + "\nforce_path_style = true\n";
    if (no_check_bucket) out += "no_check_bucket = true\n";
    return out;
  }

  Result<controller::HttpResponse> Send(const std::string& method, const std::string& url,
                                        const std::string& bucket, const std::string& body = "") {
    controller::HttpRequest req;
    req.method = method;
    req.url = url;
    req.body = body;
    req.headers.push_back({"x-amz-content-sha256", controller::Sha256Hex(body)});
    req.sign = controller::AwsSigning{a_.credentials.access_key_id,
                                      a_.credentials.secret_access_key,
                                      a_.credentials.session_token,
                                      a_.region,
                                      "s3",
                                      ""};
    req.timeout = limits::kS3RequestTimeout;
    req.connect_timeout = limits::kS3ConnectTimeout;
    auto r = http_->Send(req);
    if (!r.ok()) {
      return Unavailable("bucket '" + bucket + "': cannot reach " + Describe() + " (" +
                         r.status().message() + ")");
    }
    return r;
  }

  Status Failed(const controller::HttpResponse& r, const std::string& call,
                const std::string& bucket) const {
    std::string what =
        "bucket '" + bucket + "' at " + Describe() + ": " + call + " failed: " + ErrorText(r);
    if (r.status == 403) {
      return PermissionDenied(what + " (check the AWS credentials from " + a_.credentials.source +
                              ")");
    }
    if (r.status == 404) return NotFound(what);
    if (r.status == 409) return AlreadyExists(what);
    return Unavailable(what);
  }

  S3Access a_;
  std::shared_ptr<controller::HttpClient> http_;
};

}  // namespace

std::unique_ptr<ObjectStore> MakeS3Store(S3Access access,
                                         std::shared_ptr<controller::HttpClient> http) {
  return std::make_unique<S3Store>(std::move(access), std::move(http));
}

}  // namespace herd::storage
