// The EC2 Query API (POST Action=...&Version=2016-11-15, form-encoded, SigV4-signed by the
// HttpClient) and its XML replies, parsed with Boost.PropertyTree's XML reader. Every error reply
// (<Response><Errors><Error><Code>..) becomes a one-line Status naming the call, the EC2 code and
// message and the request id; last_error() keeps the parts for callers that branch on the code
// (zone failover on InsufficientInstanceCapacity, "already gone" on *.NotFound).
#pragma once

#include <boost/property_tree/ptree.hpp>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/provider/aws_credentials.hpp"
#include "controller/provider/http_client.hpp"
#include "shared/common/status.hpp"

namespace herd::controller {

inline constexpr std::string_view kEc2ApiVersion = "2016-11-15";

using Ec2Params = std::vector<std::pair<std::string, std::string>>;

struct Ec2Error {
  std::string action;  // "RunInstances"
  std::string code;    // "InsufficientInstanceCapacity"; "" for no error
  std::string message;
  std::string request_id;
  long http_status = 0;
};

// What an error code means for the caller.
enum class Ec2ErrorKind {
  kNone,
  kAuth,        // AuthFailure, SignatureDoesNotMatch, UnauthorizedOperation, ...: fix credentials
  kCapacity,    // InsufficientInstanceCapacity, ...: this zone has none now, try another
  kQuota,       // InstanceLimitExceeded, VcpuLimitExceeded, ...: the account's limit in the region
  kInvalid,     // InvalidParameterValue, InvalidAMIID.*, ...: the request is wrong
  kNotFound,    // *.NotFound (not an Invalid* request parameter): the thing is gone
  kDuplicate,   // *.Duplicate: the thing exists already
  kDependency,  // DependencyViolation: still in use (a group while its instances terminate)
  kTransient,   // RequestLimitExceeded, InternalError, Unavailable, HTTP 5xx: retry later
  kOther,
};
Ec2ErrorKind ClassifyEc2Error(std::string_view code);

// The Status for an error: PermissionDenied (auth), Unavailable (capacity, quota, transient),
// InvalidArgument (invalid), NotFound, AlreadyExists, FailedPrecondition (dependency), else
// Internal. Message: "EC2 <Action> in <region>: <Code>: <Message> (request id <id>)", one line.
Status Ec2ErrorStatus(const Ec2Error& error, const std::string& region);

// XML text -> tree; InvalidArgument with the parser's line on malformed XML.
Result<boost::property_tree::ptree> ParseEc2Xml(std::string_view body);
// The error of a reply that is not 2xx: its <Errors><Error> if it has one, else "HTTP<status>"
// with the start of the body (made one line).
Ec2Error ParseEc2Error(std::string_view action, long http_status, std::string_view body);

struct Ec2Instance {
  std::string id, type, state;  // state: pending, running, stopping, stopped, shutting-down, ...
  std::string public_ip, private_ip, zone, key_name, lifecycle;  // lifecycle "spot" or ""
  std::map<std::string, std::string> tags;
};
// The instances of a RunInstances reply (instancesSet) or a DescribeInstances reply
// (reservationSet/item/instancesSet), in reply order.
std::vector<Ec2Instance> ParseEc2Instances(const boost::property_tree::ptree& reply);

struct Ec2InstanceType {
  std::string name;
  int vcpus = 0;
  double memory_gib = 0;
  std::string gpu_name;  // "A100" ("" without GPUs)
  int gpu_count = 0;
};
std::vector<Ec2InstanceType> ParseEc2InstanceTypes(const boost::property_tree::ptree& reply);

struct Ec2Filter {
  std::string name;  // "tag:herd-cluster", "instance-state-name", "group-name"
  std::vector<std::string> values;
};

// RFC 3986 percent-encoding of all but the unreserved characters (what curl_easy_escape does;
// AWS's UriEncode), '/' kept when keep_slash (an S3 object key in a path).
std::string AwsUriEncode(std::string_view s, bool keep_slash = false);
// "Action=X&Version=...&k=v..." with RFC 3986 percent-encoding (version: another Query API's,
// such as IAM's).
std::string Ec2QueryBody(std::string_view action, const Ec2Params& params,
                         std::string_view version = kEc2ApiVersion);

class Ec2Client {
 public:
  // endpoint "" = https://ec2.<region>.amazonaws.com.
  Ec2Client(HttpClient& http, AwsCredentials credentials, std::string region,
            std::string endpoint = "");

  const std::string& region() const { return region_; }
  const std::string& endpoint() const { return endpoint_; }
  // The error of the last failed call (code "" after a success).
  const Ec2Error& last_error() const { return last_error_; }

  // One call; transient errors (throttling, 5xx) are retried a few times.
  Result<boost::property_tree::ptree> Call(const std::string& action, Ec2Params params);

  Result<std::vector<Ec2Instance>> DescribeInstances(const std::vector<Ec2Filter>& filters,
                                                     const std::vector<std::string>& ids = {});
  Result<std::vector<Ec2Instance>> RunInstances(const Ec2Params& params);
  Status StopInstances(const std::vector<std::string>& ids);
  Status StartInstances(const std::vector<std::string>& ids);
  Status TerminateInstances(const std::vector<std::string>& ids);
  Status CreateTags(const std::vector<std::string>& resources,
                    const std::vector<std::pair<std::string, std::string>>& tags);
  Result<std::string> CreateSecurityGroup(
      const std::string& name, const std::string& description,
      const std::vector<std::pair<std::string, std::string>>& tags);
  Status AuthorizeSecurityGroupIngress(const std::string& group_id, const Ec2Params& permissions);
  Status DeleteSecurityGroup(const std::string& group_id);
  // Group ids of the matching groups.
  Result<std::vector<std::string>> DescribeSecurityGroups(const std::vector<Ec2Filter>& filters);
  Status ImportKeyPair(const std::string& name, const std::string& public_key,
                       const std::vector<std::pair<std::string, std::string>>& tags);
  Status DeleteKeyPair(const std::string& name);
  // Names of the matching key pairs.
  Result<std::vector<std::string>> DescribeKeyPairs(const std::vector<Ec2Filter>& filters);
  Result<std::vector<Ec2InstanceType>> DescribeInstanceTypes(const std::vector<std::string>& names);
  // Zone names of the region whose state is "available", sorted.
  Result<std::vector<std::string>> DescribeAvailabilityZones();
  // The newest available image matching owner and name pattern: its id.
  Result<std::string> NewestImage(const std::string& owner, const std::string& name_pattern);

 private:
  HttpClient& http_;
  AwsCredentials credentials_;
  std::string region_, endpoint_;
  Ec2Error last_error_;
};

}  // namespace herd::controller
