#include "controller/provider/ec2_client.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <boost/property_tree/xml_parser.hpp>
#include <sstream>
#include <thread>

#include "shared/common/limits.hpp"

namespace herd::controller {

namespace pt = boost::property_tree;

namespace {

constexpr int kTransientAttempts = 3;

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Newlines and runs of spaces in a message become one space; very long text is cut.
std::string OneLine(std::string_view text, size_t max = 400) {
  std::string out;
  for (char c : text) {
    bool space = c == '\n' || c == '\r' || c == '\t' || c == ' ';
    if (space) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > max) out = out.substr(0, max) + "...";
  return out;
}

std::string Text(const pt::ptree& t, const char* path) { return t.get<std::string>(path, ""); }

// The children named "item" of t.get_child(path), or none.
std::vector<const pt::ptree*> Items(const pt::ptree& t, const char* path) {
  std::vector<const pt::ptree*> out;
  auto set = t.get_child_optional(path);
  if (!set) return out;
  for (const auto& [k, v] : *set) {
    if (k == "item") out.push_back(&v);
  }
  return out;
}

// The document's root element ("RunInstancesResponse", "Response", ...).
const pt::ptree& Root(const pt::ptree& doc) {
  static const pt::ptree kEmpty;
  for (const auto& [k, v] : doc) {
    if (k != "<xmlcomment>" && k != "<xmldecl>") return v;
  }
  return kEmpty;
}

void AddFilters(Ec2Params& p, const std::vector<Ec2Filter>& filters) {
  for (size_t i = 0; i < filters.size(); ++i) {
    std::string f = "Filter." + std::to_string(i + 1);
    p.emplace_back(f + ".Name", filters[i].name);
    for (size_t j = 0; j < filters[i].values.size(); ++j) {
      p.emplace_back(f + ".Value." + std::to_string(j + 1), filters[i].values[j]);
    }
  }
}

void AddList(Ec2Params& p, const std::string& prefix, const std::vector<std::string>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    p.emplace_back(prefix + "." + std::to_string(i + 1), values[i]);
  }
}

void AddTagSpec(Ec2Params& p, int index, const std::string& type,
                const std::vector<std::pair<std::string, std::string>>& tags) {
  std::string s = "TagSpecification." + std::to_string(index);
  p.emplace_back(s + ".ResourceType", type);
  for (size_t i = 0; i < tags.size(); ++i) {
    std::string t = s + ".Tag." + std::to_string(i + 1);
    p.emplace_back(t + ".Key", tags[i].first);
    p.emplace_back(t + ".Value", tags[i].second);
  }
}

}  // namespace

Ec2ErrorKind ClassifyEc2Error(std::string_view code) {
  static constexpr std::string_view kAuth[] = {"AuthFailure",
                                               "SignatureDoesNotMatch",
                                               "UnauthorizedOperation",
                                               "InvalidClientTokenId",
                                               "IncompleteSignature",
                                               "MissingAuthenticationToken",
                                               "RequestExpired",
                                               "OptInRequired",
                                               "Blocked",
                                               "PendingVerification",
                                               "UnrecognizedClientException"};
  static constexpr std::string_view kCapacity[] = {"InsufficientInstanceCapacity",
                                                   "InsufficientHostCapacity",
                                                   "InsufficientReservedInstanceCapacity",
                                                   "InsufficientCapacity",
                                                   "InsufficientFreeAddressesInSubnet",
                                                   "Unsupported",
                                                   "SpotMaxPriceTooLow"};
  static constexpr std::string_view kQuota[] = {"InstanceLimitExceeded", "VcpuLimitExceeded",
                                                "MaxSpotInstanceCountExceeded",
                                                "InsufficientVcpuLimit"};
  static constexpr std::string_view kTransient[] = {"RequestLimitExceeded", "Throttling",
                                                    "InternalError",        "InternalFailure",
                                                    "Unavailable",          "ServiceUnavailable"};
  auto in = [&](const auto& list) {
    return std::find(std::begin(list), std::end(list), code) != std::end(list);
  };
  if (code.empty()) return Ec2ErrorKind::kNone;
  if (in(kAuth)) return Ec2ErrorKind::kAuth;
  if (in(kCapacity)) return Ec2ErrorKind::kCapacity;
  if (in(kQuota)) return Ec2ErrorKind::kQuota;
  if (in(kTransient) || StartsWith(code, "HTTP5")) return Ec2ErrorKind::kTransient;
  if (code == "DependencyViolation") return Ec2ErrorKind::kDependency;
  if (EndsWith(code, ".Duplicate")) return Ec2ErrorKind::kDuplicate;
  if (EndsWith(code, ".NotFound") && !StartsWith(code, "InvalidAMIID") &&
      !StartsWith(code, "InvalidSubnetID") && !StartsWith(code, "InvalidVpcID")) {
    return Ec2ErrorKind::kNotFound;
  }
  if (StartsWith(code, "Invalid") || code == "MissingParameter" || code == "UnknownParameter" ||
      code == "InvalidAction" || code == "UnsupportedOperation") {
    return Ec2ErrorKind::kInvalid;
  }
  return Ec2ErrorKind::kOther;
}

Status Ec2ErrorStatus(const Ec2Error& e, const std::string& region) {
  std::string msg = "EC2 " + e.action + (region.empty() ? "" : " in " + region) + ": " + e.code +
                    ": " + OneLine(e.message);
  if (!e.request_id.empty()) msg += " (request id " + e.request_id + ")";
  switch (ClassifyEc2Error(e.code)) {
    case Ec2ErrorKind::kAuth:
      return PermissionDenied(msg);
    case Ec2ErrorKind::kCapacity:
    case Ec2ErrorKind::kQuota:
    case Ec2ErrorKind::kTransient:
      return Unavailable(msg);
    case Ec2ErrorKind::kInvalid:
      return InvalidArgument(msg);
    case Ec2ErrorKind::kNotFound:
      return NotFound(msg);
    case Ec2ErrorKind::kDuplicate:
      return AlreadyExists(msg);
    case Ec2ErrorKind::kDependency:
      return FailedPrecondition(msg);
    case Ec2ErrorKind::kNone:
    case Ec2ErrorKind::kOther:
      break;
  }
  return Internal(msg);
}

Result<pt::ptree> ParseEc2Xml(std::string_view body) {
  try {
    std::istringstream in{std::string(body)};
    pt::ptree doc;
    pt::read_xml(in, doc, pt::xml_parser::trim_whitespace);
    return doc;
  } catch (const pt::xml_parser_error& e) {
    return InvalidArgument("EC2 reply is not XML (line " + std::to_string(e.line()) +
                           "): " + e.message());
  }
}

Ec2Error ParseEc2Error(std::string_view action, long http_status, std::string_view body) {
  Ec2Error e;
  e.action = std::string(action);
  e.http_status = http_status;
  if (auto doc = ParseEc2Xml(body); doc.ok()) {
    const pt::ptree& root = Root(*doc);
    // <Response><Errors><Error>..</Error></Errors><RequestID>..</RequestID></Response>; a few
    // services answer <ErrorResponse><Error>.. instead.
    auto error = root.get_child_optional("Errors.Error");
    if (!error) error = root.get_child_optional("Error");
    if (error) {
      e.code = Text(*error, "Code");
      e.message = Text(*error, "Message");
      e.request_id = Text(root, "RequestID");
      if (e.request_id.empty()) e.request_id = Text(root, "RequestId");
      if (!e.code.empty()) return e;
    }
  }
  e.code = "HTTP" + std::to_string(http_status);
  e.message = body.empty() ? "(empty reply)" : OneLine(body, 200);
  return e;
}

std::vector<Ec2Instance> ParseEc2Instances(const pt::ptree& reply) {
  std::vector<const pt::ptree*> items;
  if (reply.get_child_optional("reservationSet")) {
    for (const pt::ptree* r : Items(reply, "reservationSet")) {
      for (const pt::ptree* i : Items(*r, "instancesSet")) items.push_back(i);
    }
  } else {
    items = Items(reply, "instancesSet");
  }
  std::vector<Ec2Instance> out;
  for (const pt::ptree* i : items) {
    Ec2Instance x;
    x.id = Text(*i, "instanceId");
    x.type = Text(*i, "instanceType");
    x.state = Text(*i, "instanceState.name");
    x.public_ip = Text(*i, "ipAddress");
    x.private_ip = Text(*i, "privateIpAddress");
    x.zone = Text(*i, "placement.availabilityZone");
    x.key_name = Text(*i, "keyName");
    x.lifecycle = Text(*i, "instanceLifecycle");
    for (const pt::ptree* t : Items(*i, "tagSet")) x.tags[Text(*t, "key")] = Text(*t, "value");
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<Ec2InstanceType> ParseEc2InstanceTypes(const pt::ptree& reply) {
  std::vector<Ec2InstanceType> out;
  for (const pt::ptree* i : Items(reply, "instanceTypeSet")) {
    Ec2InstanceType t;
    t.name = Text(*i, "instanceType");
    t.vcpus = i->get<int>("vCpuInfo.defaultVCpus", 0);
    t.memory_gib = i->get<double>("memoryInfo.sizeInMiB", 0) / 1024.0;
    for (const pt::ptree* g : Items(*i, "gpuInfo.gpus")) {
      t.gpu_name = Text(*g, "name");
      t.gpu_count += g->get<int>("count", 0);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string AwsUriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string Ec2QueryBody(std::string_view action, const Ec2Params& params,
                         std::string_view version) {
  auto escape = [](std::string_view s) { return AwsUriEncode(s); };
  std::string body = "Action=" + escape(action) + "&Version=" + std::string(version);
  for (const auto& [k, v] : params) body += "&" + escape(k) + "=" + escape(v);
  return body;
}

Ec2Client::Ec2Client(HttpClient& http, AwsCredentials credentials, std::string region,
                     std::string endpoint)
    : http_(http),
      credentials_(std::move(credentials)),
      region_(std::move(region)),
      endpoint_(endpoint.empty() ? "https://ec2." + region_ + ".amazonaws.com" : endpoint) {
  while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
}

Result<pt::ptree> Ec2Client::Call(const std::string& action, Ec2Params params) {
  HttpRequest req;
  req.method = "POST";
  req.url = endpoint_ + "/";
  req.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}};
  req.body = Ec2QueryBody(action, params);
  req.sign = AwsSigning{credentials_.access_key_id,
                        credentials_.secret_access_key,
                        credentials_.session_token,
                        region_,
                        "ec2",
                        ""};
  req.timeout = limits::kAwsHttpTimeout;
  req.connect_timeout = limits::kAwsHttpConnectTimeout;
  for (int attempt = 1;; ++attempt) {
    auto resp = http_.Send(req);
    if (!resp.ok()) {
      last_error_ = {action, "RequestFailed", resp.status().message(), "", 0};
      return Unavailable("EC2 " + action + " in " + region_ + ": " + resp.status().message());
    }
    if (resp->status >= 200 && resp->status < 300) {
      last_error_ = {};
      HERD_ASSIGN_OR_RETURN(pt::ptree doc, ParseEc2Xml(resp->body));
      return Root(doc);
    }
    last_error_ = ParseEc2Error(action, resp->status, resp->body);
    if (ClassifyEc2Error(last_error_.code) != Ec2ErrorKind::kTransient ||
        attempt >= kTransientAttempts) {
      return Ec2ErrorStatus(last_error_, region_);
    }
    std::this_thread::sleep_for(limits::kAwsPollInterval * attempt);
  }
}

Result<std::vector<Ec2Instance>> Ec2Client::DescribeInstances(const std::vector<Ec2Filter>& filters,
                                                              const std::vector<std::string>& ids) {
  Ec2Params p;
  AddFilters(p, filters);
  AddList(p, "InstanceId", ids);
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("DescribeInstances", p));
  return ParseEc2Instances(reply);
}

Result<std::vector<Ec2Instance>> Ec2Client::RunInstances(const Ec2Params& params) {
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("RunInstances", params));
  return ParseEc2Instances(reply);
}

Status Ec2Client::StopInstances(const std::vector<std::string>& ids) {
  Ec2Params p;
  AddList(p, "InstanceId", ids);
  return Call("StopInstances", p).status();
}

Status Ec2Client::StartInstances(const std::vector<std::string>& ids) {
  Ec2Params p;
  AddList(p, "InstanceId", ids);
  return Call("StartInstances", p).status();
}

Status Ec2Client::TerminateInstances(const std::vector<std::string>& ids) {
  Ec2Params p;
  AddList(p, "InstanceId", ids);
  return Call("TerminateInstances", p).status();
}

Status Ec2Client::CreateTags(const std::vector<std::string>& resources,
                             const std::vector<std::pair<std::string, std::string>>& tags) {
  Ec2Params p;
  AddList(p, "ResourceId", resources);
  for (size_t i = 0; i < tags.size(); ++i) {
    p.emplace_back("Tag." + std::to_string(i + 1) + ".Key", tags[i].first);
    p.emplace_back("Tag." + std::to_string(i + 1) + ".Value", tags[i].second);
  }
  return Call("CreateTags", p).status();
}

Result<std::string> Ec2Client::CreateSecurityGroup(
    const std::string& name, const std::string& description,
    const std::vector<std::pair<std::string, std::string>>& tags) {
  Ec2Params p{{"GroupName", name}, {"GroupDescription", description}};
  AddTagSpec(p, 1, "security-group", tags);
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("CreateSecurityGroup", p));
  std::string id = Text(reply, "groupId");
  if (id.empty())
    return Internal("EC2 CreateSecurityGroup in " + region_ + ": no groupId in reply");
  return id;
}

Status Ec2Client::AuthorizeSecurityGroupIngress(const std::string& group_id,
                                                const Ec2Params& permissions) {
  Ec2Params p{{"GroupId", group_id}};
  p.insert(p.end(), permissions.begin(), permissions.end());
  return Call("AuthorizeSecurityGroupIngress", p).status();
}

Status Ec2Client::DeleteSecurityGroup(const std::string& group_id) {
  return Call("DeleteSecurityGroup", {{"GroupId", group_id}}).status();
}

Result<std::vector<std::string>> Ec2Client::DescribeSecurityGroups(
    const std::vector<Ec2Filter>& filters) {
  Ec2Params p;
  AddFilters(p, filters);
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("DescribeSecurityGroups", p));
  std::vector<std::string> out;
  for (const pt::ptree* g : Items(reply, "securityGroupInfo")) out.push_back(Text(*g, "groupId"));
  return out;
}

Status Ec2Client::ImportKeyPair(const std::string& name, const std::string& public_key,
                                const std::vector<std::pair<std::string, std::string>>& tags) {
  // PublicKeyMaterial is base64 in the Query API (the SDKs encode it).
  std::string b64(4 * ((public_key.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                          reinterpret_cast<const unsigned char*>(public_key.data()),
                          static_cast<int>(public_key.size()));
  b64.resize(static_cast<size_t>(std::max(n, 0)));
  Ec2Params p{{"KeyName", name}, {"PublicKeyMaterial", b64}};
  AddTagSpec(p, 1, "key-pair", tags);
  return Call("ImportKeyPair", p).status();
}

Status Ec2Client::DeleteKeyPair(const std::string& name) {
  return Call("DeleteKeyPair", {{"KeyName", name}}).status();
}

Result<std::vector<std::string>> Ec2Client::DescribeKeyPairs(
    const std::vector<Ec2Filter>& filters) {
  Ec2Params p;
  AddFilters(p, filters);
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("DescribeKeyPairs", p));
  std::vector<std::string> out;
  for (const pt::ptree* k : Items(reply, "keySet")) out.push_back(Text(*k, "keyName"));
  return out;
}

Result<std::vector<Ec2InstanceType>> Ec2Client::DescribeInstanceTypes(
    const std::vector<std::string>& names) {
  Ec2Params p;
  AddList(p, "InstanceType", names);
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("DescribeInstanceTypes", p));
  return ParseEc2InstanceTypes(reply);
}

Result<std::vector<std::string>> Ec2Client::DescribeAvailabilityZones() {
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("DescribeAvailabilityZones", {}));
  std::vector<std::string> out;
  for (const pt::ptree* z : Items(reply, "availabilityZoneInfo")) {
    if (Text(*z, "zoneState") == "available") out.push_back(Text(*z, "zoneName"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> Ec2Client::NewestImage(const std::string& owner,
                                           const std::string& name_pattern) {
  Ec2Params p{{"Owner.1", owner}};
  AddFilters(p, {{"name", {name_pattern}}, {"state", {"available"}}});
  HERD_ASSIGN_OR_RETURN(pt::ptree reply, Call("DescribeImages", p));
  std::string best_id, best_date;
  for (const pt::ptree* i : Items(reply, "imagesSet")) {
    std::string date = Text(*i, "creationDate");
    if (best_id.empty() || date > best_date) {
      best_id = Text(*i, "imageId");
      best_date = date;
    }
  }
  if (best_id.empty()) {
    return NotFound("EC2 DescribeImages in " + region_ + ": no image of owner " + owner +
                    " named " + name_pattern + "; set aws.image_id in herd's config.yaml");
  }
  return best_id;
}

}  // namespace herd::controller
