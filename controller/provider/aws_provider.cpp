#include "controller/provider/aws_provider.hpp"

#include "controller/provider/iam_client.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "controller/provider/ec2_client.hpp"
#include "controller/provider/node_files.hpp"
#include "controller/ssh/tcp_probe.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::controller {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kRecordFile = "aws.json";
constexpr const char* kClusterTag = "herd-cluster";
constexpr const char* kNodeTag = "herd-node";
// Canonical's account (Ubuntu images) and Amazon's (Deep Learning AMIs).
constexpr const char* kUbuntuOwner = "099720108685";
constexpr const char* kUbuntuImage = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*";
constexpr const char* kAmazonOwner = "amazon";
constexpr const char* kGpuImage = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *";

struct Record {
  std::string cluster, region, instance_type, key_name, group_name, group_id, ssh_user;
  bool use_spot = false;
  std::vector<std::string> instance_ids;  // node order: head first
  // Autostop's IAM user (iam_client.hpp) and its one key: written before the user is made, so
  // Teardown removes it after a crash too.
  std::string autostop_user, autostop_key_id, autostop_secret;
};

std::string Seconds(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

Result<std::optional<Record>> ReadRecord(const std::string& state_dir) {
  auto text = ReadFile(state_dir + "/" + kRecordFile);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return std::optional<Record>();
    return text.status();
  }
  try {
    json::object o = json::parse(*text).as_object();
    Record r;
    auto str = [&](const char* k) {
      auto* v = o.if_contains(k);
      return v && v->is_string() ? std::string(v->as_string()) : std::string();
    };
    r.cluster = str("cluster");
    r.region = str("region");
    r.instance_type = str("instance_type");
    r.key_name = str("key_name");
    r.group_name = str("group_name");
    r.group_id = str("group_id");
    r.ssh_user = str("ssh_user");
    r.autostop_user = str("autostop_user");
    r.autostop_key_id = str("autostop_key_id");
    r.autostop_secret = str("autostop_secret");
    if (auto* v = o.if_contains("use_spot"); v && v->is_bool()) r.use_spot = v->as_bool();
    if (auto* v = o.if_contains("instance_ids"); v && v->is_array()) {
      for (const auto& id : v->as_array()) {
        if (id.is_string()) r.instance_ids.emplace_back(id.as_string());
      }
    }
    return std::optional<Record>(r);
  } catch (const std::exception& e) {
    return IoError(state_dir + "/" + kRecordFile + ": " + e.what());
  }
}

Status WriteRecord(const std::string& state_dir, const Record& r) {
  json::array ids;
  for (const auto& id : r.instance_ids) ids.emplace_back(id);
  json::object o{
      {"cluster", r.cluster},   {"region", r.region},         {"instance_type", r.instance_type},
      {"key_name", r.key_name}, {"group_name", r.group_name}, {"group_id", r.group_id},
      {"ssh_user", r.ssh_user}, {"use_spot", r.use_spot},     {"instance_ids", ids}};
  if (!r.autostop_user.empty()) {
    o["autostop_user"] = r.autostop_user;
    o["autostop_key_id"] = r.autostop_key_id;
    o["autostop_secret"] = r.autostop_secret;
  }
  HERD_RETURN_IF_ERROR(node_files::MakeDir(state_dir, 0700));
  return WriteFileAtomic(state_dir + "/" + kRecordFile, json::serialize(o) + "\n", 0600);
}

std::string NodeName(const std::string& cluster, size_t index) {
  return index == 0 ? cluster + "-head" : cluster + "-worker" + std::to_string(index);
}

std::vector<Ec2Filter> ClusterFilter(const std::string& cluster) {
  return {{std::string("tag:") + kClusterTag, {cluster}},
          {"instance-state-name", {"pending", "running", "stopping", "stopped", "shutting-down"}}};
}

std::string Endpoint(const GetenvFn& getenv) { return getenv("HERD_AWS_ENDPOINT").value_or(""); }

// EC2 as the cluster's nodes reach it: HERD_AWS_NODE_ENDPOINT (tests only: the fake on an
// address the nodes' network has), else the region's public endpoint.
std::string NodeEndpoint(const GetenvFn& getenv, const std::string& region) {
  return getenv("HERD_AWS_NODE_ENDPOINT").value_or("https://ec2." + region + ".amazonaws.com");
}

// The instance metadata service as a node reaches it: HERD_AWS_METADATA_ENDPOINT (tests only:
// the fake, which answers each node by its address), else EC2's link-local one.
std::string MetadataEndpoint(const GetenvFn& getenv) {
  return getenv("HERD_AWS_METADATA_ENDPOINT").value_or("http://169.254.169.254");
}

// The caller's public address as checkip.amazonaws.com sees it, as a /32.
Result<std::string> CallerCidr(HttpClient& http, const GetenvFn& getenv) {
  std::string endpoint = Endpoint(getenv);
  HttpRequest req;
  req.method = "GET";
  req.url = endpoint.empty() ? "https://checkip.amazonaws.com/" : endpoint + "/checkip";
  req.timeout = limits::kAwsHttpTimeout;
  req.connect_timeout = limits::kAwsHttpConnectTimeout;
  auto resp = http.Send(req);
  std::string ip = resp.ok() ? resp->body : "";
  while (!ip.empty() && (ip.back() == '\n' || ip.back() == '\r' || ip.back() == ' ')) ip.pop_back();
  bool looks_ok = resp.ok() && resp->status == 200 && !ip.empty() &&
                  ip.find_first_not_of("0123456789.") == std::string::npos;
  if (!looks_ok) {
    return Unavailable(
        "cannot learn this machine's public address from " + req.url + " (" +
        (resp.ok() ? "HTTP " + std::to_string(resp->status) : resp.status().message()) +
        "); set aws.ssh_cidr in " + DefaultHerdConfigFile());
  }
  return ip + "/32";
}

class Session {
 public:
  Session(HttpClient& http, const GetenvFn& getenv, const AwsProvider::NoteFn& note)
      : http_(http), getenv_(getenv), note_(note) {}

  Status Open(const std::string& region_wanted, const Record* record) {
    HERD_ASSIGN_OR_RETURN(AwsCredentials creds, LoadAwsCredentials(getenv_));
    std::string region = region_wanted;
    if (region.empty() && record != nullptr) region = record->region;
    if (region.empty()) {
      HERD_ASSIGN_OR_RETURN(region, LoadAwsRegion(getenv_));
    }
    if (region.empty()) {
      return InvalidArgument(
          "no AWS region: give --infra aws/REGION (or infra: aws/REGION), set AWS_REGION, or "
          "set region in ~/.aws/config");
    }
    ec2_.emplace(http_, std::move(creds), region, Endpoint(getenv_));
    return Status::Ok();
  }
  Ec2Client& ec2() { return *ec2_; }

  // Polls until every instance is in `want`; a state in `bad` (or a missing instance) fails.
  Result<std::vector<Ec2Instance>> WaitFor(const std::vector<std::string>& ids,
                                           const std::string& want,
                                           const std::vector<std::string>& bad,
                                           std::chrono::milliseconds limit) {
    auto deadline = Clock::now() + limit;
    std::string last;
    while (true) {
      HERD_ASSIGN_OR_RETURN(auto found, ec2_->DescribeInstances({}, ids));
      std::vector<Ec2Instance> ordered;
      bool all = true;
      last.clear();
      for (const auto& id : ids) {
        auto it = std::find_if(found.begin(), found.end(),
                               [&](const Ec2Instance& i) { return i.id == id; });
        if (it == found.end()) return FailedPrecondition("instance " + id + " is gone");
        if (std::find(bad.begin(), bad.end(), it->state) != bad.end()) {
          return FailedPrecondition("instance " + id + " is " + it->state + ", not " + want);
        }
        if (it->state != want) all = false;
        last += (last.empty() ? "" : ", ") + id + " " + it->state;
        ordered.push_back(*it);
      }
      if (all) return ordered;
      if (Clock::now() >= deadline) {
        return DeadlineExceeded("instances not " + want + " within " + Seconds(limit) + ": " +
                                last);
      }
      std::this_thread::sleep_for(limits::kAwsPollInterval);
    }
  }

  // Instances that run -> handles, once each answers with an SSH banner.
  Result<std::vector<NodeHandle>> Handles(const std::string& cluster,
                                          const std::vector<Ec2Instance>& instances,
                                          const std::string& ssh_user) {
    std::vector<NodeHandle> out;
    for (size_t i = 0; i < instances.size(); ++i) {
      const Ec2Instance& x = instances[i];
      NodeHandle h;
      h.name = NodeName(cluster, i);
      h.ip = !x.public_ip.empty() ? x.public_ip : x.private_ip;
      h.internal_ip = x.private_ip;
      h.ssh_port = 22;
      h.ssh_user = ssh_user;
      if (h.ip.empty()) return Internal("instance " + x.id + " runs but has no address");
      out.push_back(h);
    }
    for (const auto& h : out) {
      auto deadline = Clock::now() + limits::kAwsWaitSsh;
      Status last;
      while (true) {
        last = ProbeSshBanner(h.ip, h.ssh_port, limits::kSshConnectTimeout);
        if (last.ok()) break;
        if (Clock::now() >= deadline) {
          return DeadlineExceeded(h.name + " (" + h.ip + "): no SSH banner within " +
                                  Seconds(limits::kAwsWaitSsh) + ": " + last.message());
        }
        std::this_thread::sleep_for(limits::kAwsPollInterval);
      }
    }
    return out;
  }

  // Brings recorded instances to running (starting stopped ones) and returns their handles.
  Result<std::vector<NodeHandle>> Resume(const Record& r) {
    HERD_ASSIGN_OR_RETURN(auto found, ec2_->DescribeInstances({}, r.instance_ids));
    std::vector<std::string> to_start;
    for (const auto& id : r.instance_ids) {
      auto it = std::find_if(found.begin(), found.end(),
                             [&](const Ec2Instance& i) { return i.id == id; });
      if (it == found.end() || it->state == "terminated" || it->state == "shutting-down") {
        return FailedPrecondition("instance " + id + " of cluster " + r.cluster + " is " +
                                  (it == found.end() ? std::string("gone") : it->state) +
                                  " (terminated outside herd?); `herd down " + r.cluster +
                                  "` and launch again");
      }
      if (it->state == "stopping") {
        HERD_RETURN_IF_ERROR(
            WaitFor({id}, "stopped", {"terminated"}, limits::kAwsWaitStopped).status());
        to_start.push_back(id);
      } else if (it->state == "stopped") {
        to_start.push_back(id);
      }
    }
    if (!to_start.empty()) {
      note_("Starting " + std::to_string(to_start.size()) + " instance(s) in " + r.region);
      HERD_RETURN_IF_ERROR(ec2_->StartInstances(to_start));
    }
    HERD_ASSIGN_OR_RETURN(auto running,
                          WaitFor(r.instance_ids, "running", {"terminated", "shutting-down"},
                                  limits::kAwsWaitRunning));
    HERD_ASSIGN_OR_RETURN(auto handles, Handles(r.cluster, running, r.ssh_user));
    // A spot node's agent polls its instance metadata for an interruption notice.
    if (r.use_spot) {
      for (auto& h : handles) h.spot_metadata = MetadataEndpoint(getenv_);
    }
    return handles;
  }

 private:
  HttpClient& http_;
  const GetenvFn& getenv_;
  const AwsProvider::NoteFn& note_;
  std::optional<Ec2Client> ec2_;
};

Status ValidateCluster(const std::string& cluster) {
  if (cluster.empty()) return InvalidArgument("cluster name is empty");
  return Status::Ok();
}

Result<Record> LoadExisting(const std::string& cluster, const std::string& state_dir) {
  HERD_ASSIGN_OR_RETURN(auto r, ReadRecord(state_dir));
  if (!r || r->instance_ids.empty()) {
    return NotFound("aws cluster " + cluster + " has no instances (no record in " + state_dir +
                    ")");
  }
  return *r;
}

}  // namespace

Result<AwsLaunchSpec> ParseAwsInfra(const std::string& infra) {
  AwsLaunchSpec s;
  if (infra == "aws") return s;
  if (infra.rfind("aws/", 0) != 0) return InvalidArgument("infra '" + infra + "' is not aws");
  std::string rest = infra.substr(4);
  size_t slash = rest.find('/');
  s.region = rest.substr(0, slash);
  if (s.region == "*") s.region.clear();
  if (slash != std::string::npos) s.zone = rest.substr(slash + 1);
  if (!s.zone.empty() && !s.region.empty() && s.zone.rfind(s.region, 0) != 0) {
    return InvalidArgument("infra '" + infra + "': zone " + s.zone + " is not in region " +
                           s.region + " (zones are named REGION + a letter, e.g. " + s.region +
                           "a)");
  }
  return s;
}

Result<AwsConfig> LoadAwsConfig(const std::string& file) {
  AwsConfig c;
  HERD_ASSIGN_OR_RETURN(YAML::Node root, LoadHerdConfigYaml(file));
  if (!root || root.IsNull()) return c;
  auto where = [&](const YAML::Node& n, const std::string& path) {
    return file + ":" + std::to_string(n.Mark().line + 1) + ":" +
           std::to_string(n.Mark().column + 1) + ": " + path;
  };
  if (!root.IsMap()) return InvalidArgument(where(root, "") + "expected a mapping");
  YAML::Node aws = root["aws"];
  if (!aws || aws.IsNull()) return c;
  if (!aws.IsMap()) return InvalidArgument(where(aws, "aws") + ": expected a mapping");
  for (const auto& kv : aws) {
    std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    std::string path = "aws." + key;
    std::string* target = key == "ssh_user"   ? &c.ssh_user
                          : key == "image_id" ? &c.image_id
                          : key == "ssh_cidr" ? &c.ssh_cidr
                                              : nullptr;
    if (target == nullptr) {
      return InvalidArgument(where(kv.first, path) +
                             ": unknown field (known: ssh_user, image_id, ssh_cidr)");
    }
    if (!v.IsScalar() || v.Scalar().empty()) {
      return InvalidArgument(where(v, path) + ": expected a non-empty string");
    }
    *target = v.Scalar();
  }
  return c;
}

AwsProvider::AwsProvider(AwsLaunchSpec spec, std::unique_ptr<HttpClient> http, GetenvFn getenv,
                         std::string config_file, NoteFn note)
    : spec_(std::move(spec)),
      http_(http ? std::move(http) : std::make_unique<CurlHttpClient>()),
      getenv_(std::move(getenv)),
      config_file_(config_file.empty() ? DefaultHerdConfigFile() : std::move(config_file)),
      note_(note ? std::move(note)
                 : NoteFn([](const std::string& line) { std::cerr << line << std::endl; })) {}

Result<std::vector<NodeHandle>> AwsProvider::Provision(const ProvisionRequest& req) {
  HERD_RETURN_IF_ERROR(ValidateCluster(req.cluster));
  if (req.num_nodes < 1) return InvalidArgument("num_nodes must be at least 1");
  if (req.state_dir.empty()) return InvalidArgument("state_dir is empty");
  HERD_ASSIGN_OR_RETURN(AwsConfig config, LoadAwsConfig(config_file_));
  HERD_ASSIGN_OR_RETURN(std::optional<Record> existing, ReadRecord(req.state_dir));
  Session s(*http_, getenv_, note_);
  HERD_RETURN_IF_ERROR(s.Open(spec_.region, existing ? &*existing : nullptr));
  Ec2Client& ec2 = s.ec2();
  if (existing && !spec_.region.empty() && existing->region != ec2.region()) {
    return FailedPrecondition("aws cluster " + req.cluster + " is in " + existing->region +
                              ", not " + spec_.region);
  }
  if (existing && !existing->instance_ids.empty()) {
    if (static_cast<int>(existing->instance_ids.size()) != req.num_nodes) {
      return FailedPrecondition(
          "aws cluster " + req.cluster + " has " + std::to_string(existing->instance_ids.size()) +
          " instance(s), not " + std::to_string(req.num_nodes) + "; tear it down first");
    }
    return s.Resume(*existing);
  }

  // What to launch; checked with EC2 before anything is made (also proves the credentials).
  std::string type = spec_.instance_type;
  bool gpu = false;
  if (type.empty()) {
    HERD_ASSIGN_OR_RETURN(CatalogEntry e, ChooseInstanceType(spec_.demand));
    type = std::string(e.name);
    gpu = !e.gpu.empty();
  }
  HERD_ASSIGN_OR_RETURN(auto types, ec2.DescribeInstanceTypes({type}));
  auto offered = std::find_if(types.begin(), types.end(),
                              [&](const Ec2InstanceType& t) { return t.name == type; });
  if (offered == types.end()) {
    return InvalidArgument("instance type " + type + " is not offered in " + ec2.region());
  }
  gpu = gpu || offered->gpu_count > 0;
  std::string image = config.image_id;
  if (image.empty()) {
    HERD_ASSIGN_OR_RETURN(image, gpu ? ec2.NewestImage(kAmazonOwner, kGpuImage)
                                     : ec2.NewestImage(kUbuntuOwner, kUbuntuImage));
  }
  std::string cidr = config.ssh_cidr;
  if (cidr.empty()) {
    HERD_ASSIGN_OR_RETURN(cidr, CallerCidr(*http_, getenv_));
  }

  Record r;
  r.cluster = req.cluster;
  r.region = ec2.region();
  r.instance_type = type;
  r.key_name = "herd-" + req.cluster;
  r.group_name = "herd-" + req.cluster;
  r.ssh_user = config.ssh_user;
  r.use_spot = spec_.use_spot;
  HERD_RETURN_IF_ERROR(WriteRecord(req.state_dir, r));
  std::vector<std::pair<std::string, std::string>> tags = {{kClusterTag, req.cluster}};

  // Key pair: the cluster key; one left by an earlier attempt is replaced.
  std::string pub = req.ssh_public_key;
  while (!pub.empty() && (pub.back() == '\n' || pub.back() == '\r')) pub.pop_back();
  if (Status st = ec2.ImportKeyPair(r.key_name, pub, tags); !st.ok()) {
    if (ClassifyEc2Error(ec2.last_error().code) != Ec2ErrorKind::kDuplicate) return st;
    HERD_RETURN_IF_ERROR(ec2.DeleteKeyPair(r.key_name));
    HERD_RETURN_IF_ERROR(ec2.ImportKeyPair(r.key_name, pub, tags));
  }
  // Security group: SSH from the caller, everything between the cluster's nodes.
  HERD_ASSIGN_OR_RETURN(auto groups, ec2.DescribeSecurityGroups({{"group-name", {r.group_name}}}));
  if (!groups.empty()) {
    r.group_id = groups.front();
  } else {
    HERD_ASSIGN_OR_RETURN(
        r.group_id, ec2.CreateSecurityGroup(r.group_name, "herd cluster " + req.cluster, tags));
  }
  HERD_RETURN_IF_ERROR(WriteRecord(req.state_dir, r));
  auto authorize = [&](const Ec2Params& p) -> Status {
    Status st = ec2.AuthorizeSecurityGroupIngress(r.group_id, p);
    if (!st.ok() && ClassifyEc2Error(ec2.last_error().code) == Ec2ErrorKind::kDuplicate) {
      return Status::Ok();
    }
    return st;
  };
  HERD_RETURN_IF_ERROR(authorize({{"IpPermissions.1.IpProtocol", "tcp"},
                                  {"IpPermissions.1.FromPort", "22"},
                                  {"IpPermissions.1.ToPort", "22"},
                                  {"IpPermissions.1.IpRanges.1.CidrIp", cidr}}));
  HERD_RETURN_IF_ERROR(authorize(
      {{"IpPermissions.1.IpProtocol", "-1"}, {"IpPermissions.1.Groups.1.GroupId", r.group_id}}));
  for (const std::string& port : spec_.ports) {
    const auto dash = port.find('-');
    const std::string from = port.substr(0, dash);
    const std::string to = dash == std::string::npos ? from : port.substr(dash + 1);
    HERD_RETURN_IF_ERROR(authorize({{"IpPermissions.1.IpProtocol", "tcp"},
                                    {"IpPermissions.1.FromPort", from},
                                    {"IpPermissions.1.ToPort", to},
                                    {"IpPermissions.1.IpRanges.1.CidrIp", "0.0.0.0/0"}}));
  }

  // Instances: one RunInstances per zone until one has capacity (SkyPilot's failover).
  std::vector<std::string> zones;
  if (!spec_.zone.empty()) {
    zones = {spec_.zone};
  } else {
    HERD_ASSIGN_OR_RETURN(zones, ec2.DescribeAvailabilityZones());
    if (zones.empty()) return Unavailable("EC2 lists no available zone in " + ec2.region());
  }
  std::string what =
      std::to_string(req.num_nodes) + "x " + type + (spec_.use_spot ? " (spot)" : "");
  std::vector<Ec2Instance> launched;
  std::string tried, last_code;
  for (size_t z = 0; z < zones.size() && launched.empty(); ++z) {
    note_("Launching " + what + " in " + zones[z] + " (" + std::to_string(z + 1) + "/" +
          std::to_string(zones.size()) + ")");
    Ec2Params p{{"ImageId", image},
                {"InstanceType", type},
                {"MinCount", std::to_string(req.num_nodes)},
                {"MaxCount", std::to_string(req.num_nodes)},
                {"KeyName", r.key_name},
                {"SecurityGroupId.1", r.group_id},
                {"Placement.AvailabilityZone", zones[z]},
                {"ClientToken",
                 "herd-" + req.cluster + "-" + zones[z] + "-" +
                     std::to_string(std::chrono::system_clock::now().time_since_epoch().count())},
                {"TagSpecification.1.ResourceType", "instance"},
                {"TagSpecification.1.Tag.1.Key", kClusterTag},
                {"TagSpecification.1.Tag.1.Value", req.cluster}};
    if (spec_.disk_size_gb) {
      p.insert(p.end(),
               {{"BlockDeviceMapping.1.DeviceName", "/dev/sda1"},
                {"BlockDeviceMapping.1.Ebs.VolumeSize", std::to_string(*spec_.disk_size_gb)},
                {"BlockDeviceMapping.1.Ebs.VolumeType", "gp3"},
                {"BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true"}});
    }
    if (spec_.use_spot) {
      p.insert(p.end(),
               {{"InstanceMarketOptions.MarketType", "spot"},
                {"InstanceMarketOptions.SpotOptions.SpotInstanceType", "one-time"},
                {"InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior", "terminate"}});
    }
    auto run = ec2.RunInstances(p);
    if (run.ok()) {
      launched = std::move(run).value();
      break;
    }
    const Ec2Error& e = ec2.last_error();
    if (ClassifyEc2Error(e.code) != Ec2ErrorKind::kCapacity) return run.status();
    note_("  " + zones[z] + ": " + e.code + ": " + e.message +
          (z + 1 < zones.size() ? "; trying the next zone" : ""));
    tried += (tried.empty() ? "" : ", ") + zones[z] + " (" + e.code + ")";
    last_code = e.code;
  }
  if (launched.empty()) {
    // In Ec2ErrorStatus's form, so that failover (optimizer/failover.hpp) reads the region and
    // the code and blocks the region for this type.
    return Unavailable("EC2 RunInstances in " + ec2.region() + ": " + last_code +
                       ": no zone has capacity for " + what + ": tried " + tried);
  }
  if (static_cast<int>(launched.size()) != req.num_nodes) {
    std::vector<std::string> ids;
    for (const auto& i : launched) ids.push_back(i.id);
    (void)ec2.TerminateInstances(ids);
    return Internal("EC2 RunInstances in " + ec2.region() + " returned " +
                    std::to_string(launched.size()) + " instance(s) for " + what);
  }
  for (const auto& i : launched) r.instance_ids.push_back(i.id);
  HERD_RETURN_IF_ERROR(WriteRecord(req.state_dir, r));
  note_("Launched " + what + " in " + launched.front().zone + ": " + [&] {
    std::string ids;
    for (const auto& id : r.instance_ids) ids += (ids.empty() ? "" : " ") + id;
    return ids;
  }());
  for (size_t i = 0; i < r.instance_ids.size(); ++i) {
    HERD_RETURN_IF_ERROR(ec2.CreateTags(
        {r.instance_ids[i]}, {{"Name", NodeName(req.cluster, i)}, {kNodeTag, std::to_string(i)}}));
  }
  return s.Resume(r);
}

Result<std::vector<NodeHandle>> AwsProvider::Start(const std::string& cluster,
                                                   const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  HERD_ASSIGN_OR_RETURN(Record r, LoadExisting(cluster, state_dir));
  Session s(*http_, getenv_, note_);
  HERD_RETURN_IF_ERROR(s.Open(r.region, &r));
  return s.Resume(r);
}

Status AwsProvider::CheckStoppable(const std::string& cluster, const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  HERD_ASSIGN_OR_RETURN(Record r, LoadExisting(cluster, state_dir));
  if (r.use_spot) {
    return FailedPrecondition("aws cluster " + cluster +
                              " runs on spot instances, which EC2 cannot stop; use `herd down " +
                              cluster + "`");
  }
  return Status::Ok();
}

Status AwsProvider::Stop(const std::string& cluster, const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(CheckStoppable(cluster, state_dir));
  HERD_ASSIGN_OR_RETURN(Record r, LoadExisting(cluster, state_dir));
  Session s(*http_, getenv_, note_);
  HERD_RETURN_IF_ERROR(s.Open(r.region, &r));
  note_("Stopping " + std::to_string(r.instance_ids.size()) + " instance(s) in " + r.region);
  HERD_RETURN_IF_ERROR(s.ec2().StopInstances(r.instance_ids));
  return s
      .WaitFor(r.instance_ids, "stopped", {"terminated", "shutting-down"}, limits::kAwsWaitStopped)
      .status();
}

Status AwsProvider::Teardown(const std::string& cluster, const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  HERD_ASSIGN_OR_RETURN(std::optional<Record> rec, ReadRecord(state_dir));
  if (!rec) return Status::Ok();  // written before anything is made: nothing was
  const Record& r = *rec;
  Session s(*http_, getenv_, note_);
  HERD_RETURN_IF_ERROR(s.Open(r.region, &r));
  Ec2Client& ec2 = s.ec2();

  HERD_ASSIGN_OR_RETURN(auto instances, ec2.DescribeInstances(ClusterFilter(cluster)));
  std::vector<std::string> ids;
  for (const auto& i : instances) ids.push_back(i.id);
  if (!ids.empty()) {
    note_("Terminating " + std::to_string(ids.size()) + " instance(s) in " + r.region);
    HERD_RETURN_IF_ERROR(ec2.TerminateInstances(ids));
    HERD_RETURN_IF_ERROR(s.WaitFor(ids, "terminated", {}, limits::kAwsWaitStopped).status());
  }
  // The group: deleting it fails (DependencyViolation) while a terminating instance uses it.
  std::vector<std::string> group_ids;
  if (!r.group_id.empty()) group_ids.push_back(r.group_id);
  HERD_ASSIGN_OR_RETURN(auto named, ec2.DescribeSecurityGroups({{"group-name", {r.group_name}}}));
  for (const auto& g : named) {
    if (std::find(group_ids.begin(), group_ids.end(), g) == group_ids.end()) group_ids.push_back(g);
  }
  for (const auto& g : group_ids) {
    auto deadline = Clock::now() + limits::kAwsWaitStopped;
    while (true) {
      Status st = ec2.DeleteSecurityGroup(g);
      auto kind = ClassifyEc2Error(ec2.last_error().code);
      if (st.ok() || kind == Ec2ErrorKind::kNotFound) break;
      if (kind != Ec2ErrorKind::kDependency || Clock::now() >= deadline) return st;
      std::this_thread::sleep_for(limits::kAwsPollInterval);
    }
  }
  if (!r.key_name.empty()) {
    Status st = ec2.DeleteKeyPair(r.key_name);
    if (!st.ok() && ClassifyEc2Error(ec2.last_error().code) != Ec2ErrorKind::kNotFound) return st;
  }
  // Verify by listing: nothing of the cluster may be left to bill.
  std::string left;
  HERD_ASSIGN_OR_RETURN(auto still, ec2.DescribeInstances(ClusterFilter(cluster)));
  for (const auto& i : still) left += " instance " + i.id + " (" + i.state + ")";
  HERD_ASSIGN_OR_RETURN(auto sgs, ec2.DescribeSecurityGroups({{"group-name", {r.group_name}}}));
  for (const auto& g : sgs) left += " security group " + g;
  HERD_ASSIGN_OR_RETURN(auto keys, ec2.DescribeKeyPairs({{"key-name", {r.key_name}}}));
  for (const auto& k : keys) left += " key pair " + k;
  if (!left.empty()) {
    return Internal("left in " + r.region + " after tearing down " + cluster + ":" + left);
  }
  if (!r.autostop_user.empty()) {
    HERD_ASSIGN_OR_RETURN(AwsCredentials creds, LoadAwsCredentials(getenv_));
    IamClient iam(*http_, std::move(creds), Endpoint(getenv_));
    HERD_RETURN_IF_ERROR(iam.RemoveUser(r.autostop_user));
  }
  std::error_code ec;
  fs::remove(state_dir + "/" + kRecordFile, ec);
  fs::remove(state_dir, ec);  // only when empty
  return Status::Ok();
}

Status AwsProvider::CheckAutostop(const std::string& cluster, const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  return LoadExisting(cluster, state_dir).status();
}

Result<AutostopGrant> AwsProvider::GrantAutostop(const std::string& cluster,
                                                 const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  HERD_ASSIGN_OR_RETURN(Record r, LoadExisting(cluster, state_dir));
  if (r.autostop_key_id.empty()) {
    HERD_ASSIGN_OR_RETURN(AwsCredentials creds, LoadAwsCredentials(getenv_));
    IamClient iam(*http_, std::move(creds), Endpoint(getenv_));
    r.autostop_user = AutostopUserName(cluster);
    HERD_RETURN_IF_ERROR(WriteRecord(state_dir, r));
    Status made = iam.CreateUser(r.autostop_user, cluster);
    if (made.code() == Code::kAlreadyExists) {
      // Left by a crash between CreateUser and the record of its key: its keys' secrets are
      // lost, so they go, and the user gets a new one.
      HERD_ASSIGN_OR_RETURN(auto keys, iam.ListAccessKeys(r.autostop_user));
      for (const auto& k : keys) HERD_RETURN_IF_ERROR(iam.DeleteAccessKey(r.autostop_user, k));
    } else if (!made.ok()) {
      return Status(made.code(), made.message() +
                                     " (autostop on aws makes an IAM user per cluster: the "
                                     "credentials need iam:CreateUser and friends)");
    }
    HERD_RETURN_IF_ERROR(iam.PutUserPolicy(r.autostop_user, kIamPolicyName,
                                           AutostopPolicy(cluster, r.region, kClusterTag)));
    HERD_ASSIGN_OR_RETURN(IamAccessKey key, iam.CreateAccessKey(r.autostop_user));
    r.autostop_key_id = key.access_key_id;
    r.autostop_secret = key.secret_access_key;
    HERD_RETURN_IF_ERROR(WriteRecord(state_dir, r));
    note_("Made IAM user " + r.autostop_user + " (may only stop or terminate instances tagged " +
          kClusterTag + "=" + cluster + ") for the head's autostop");
  }
  AutostopGrant g;
  g.provider = "aws";
  g.region = r.region;
  g.endpoint = NodeEndpoint(getenv_, r.region);
  g.instance_ids = r.instance_ids;
  g.access_key_id = r.autostop_key_id;
  g.secret_access_key = r.autostop_secret;
  return g;
}

Result<MachinesView> AwsProvider::Machines(const std::string& cluster,
                                           const std::string& state_dir) {
  HERD_RETURN_IF_ERROR(ValidateCluster(cluster));
  HERD_ASSIGN_OR_RETURN(std::optional<Record> rec, ReadRecord(state_dir));
  if (!rec || rec->instance_ids.empty()) return MachinesView{MachinesState::kGone, "no instances"};
  Session s(*http_, getenv_, note_);
  HERD_RETURN_IF_ERROR(s.Open(rec->region, &*rec));
  HERD_ASSIGN_OR_RETURN(auto found, s.ec2().DescribeInstances({}, rec->instance_ids));
  int running = 0, stopping = 0, stopped = 0, gone = 0;
  MachinesView v;
  for (const auto& id : rec->instance_ids) {
    auto it =
        std::find_if(found.begin(), found.end(), [&](const Ec2Instance& i) { return i.id == id; });
    const std::string state = it == found.end() ? "gone" : it->state;
    if (state == "running" || state == "pending") {
      ++running;
    } else if (state == "stopping" || state == "shutting-down") {
      ++stopping;
    } else if (state == "stopped") {
      ++stopped;
    } else {
      ++gone;  // terminated, or no longer listed
    }
    v.detail += (v.detail.empty() ? "" : ", ") + id + " " + state;
  }
  const int n = static_cast<int>(rec->instance_ids.size());
  v.state = stopping > 0   ? MachinesState::kStopping
            : running == n ? MachinesState::kRunning
            : stopped == n ? MachinesState::kStopped
            : gone == n    ? MachinesState::kGone
                           : MachinesState::kMixed;
  return v;
}

}  // namespace herd::controller
