// The `aws` provider: EC2 instances for a cluster (SkyPilot's `infra: aws[/REGION[/ZONE]]`).
//
// Provision: credentials and region from the standard chain (aws_credentials.hpp); the instance
// type from resources.instance_type as is, else the catalog (instance_catalog.hpp); both checked
// with DescribeInstanceTypes before anything is made. Then, all named "herd-<cluster>" and tagged
// herd-cluster=<cluster>: an imported key pair (the cluster key's .pub), a security group (SSH
// from the caller's address, all traffic within the group), and num_nodes instances from one
// RunInstances per zone tried: InsufficientInstanceCapacity (and the other capacity codes) in a
// zone moves on to the next zone of the region, each attempt printed; when none has capacity the
// error names the region and the last code in Ec2ErrorStatus's form, and `herd launch` fails over
// to the next candidate of its plan (controller/optimizer/failover.hpp). Instances are tagged
// Name=<node name>; Provision waits until they run and their sshd answers.
// Stop/Start/Teardown map to Stop/Start/TerminateInstances; Teardown also deletes the group and
// the key pair and then lists all three to check that nothing is left.
//
// The record (state_dir/aws.json) is written before anything is made, so Teardown after a crash
// knows the region and names; instances are found by their tag.
//
// Settings: $HERD_HOME/config.yaml, section `aws:` (ssh_user, default "ubuntu" as on the Ubuntu
// and Deep Learning AMIs; image_id, default the newest Ubuntu 22.04 / Deep Learning Base AMI of
// the region; ssh_cidr, default the caller's public address from checkip.amazonaws.com).
// HERD_AWS_ENDPOINT (tests only) replaces https://ec2.<region>.amazonaws.com, IAM and checkip;
// HERD_AWS_NODE_ENDPOINT (tests only) is EC2 as the nodes reach it (autostop from the head).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/provider/aws_credentials.hpp"
#include "controller/provider/herd_config.hpp"
#include "controller/provider/http_client.hpp"
#include "controller/provider/instance_catalog.hpp"
#include "controller/provider/provider.hpp"

namespace herd::controller {

// What a launch asks of AWS beyond ProvisionRequest.
struct AwsLaunchSpec {
  std::string region;  // "" = the configured region
  std::string zone;    // "" = every zone of the region, in order
  InstanceDemand demand;
  std::string instance_type;  // "" = chosen from the catalog
  bool use_spot = false;
  std::optional<int> disk_size_gb;
  // The task's ports ("8080", "10000-10100"): opened to everyone in the cluster's security group,
  // as SkyPilot opens resources.ports.
  std::vector<std::string> ports;
};

// "aws", "aws/REGION", "aws/REGION/ZONE" ("*" as REGION = any) -> region and zone.
Result<AwsLaunchSpec> ParseAwsInfra(const std::string& infra);

struct AwsConfig {
  std::string ssh_user = "ubuntu";
  std::string image_id;
  std::string ssh_cidr;
};
// The file's `aws:` section; defaults when the file or the section does not exist; errors name
// "file:line:col: aws.field".
Result<AwsConfig> LoadAwsConfig(const std::string& file);

class AwsProvider : public Provider {
 public:
  using NoteFn = std::function<void(const std::string&)>;
  // note: where progress lines (each zone tried) go; default stderr.
  explicit AwsProvider(AwsLaunchSpec spec, std::unique_ptr<HttpClient> http = nullptr,
                       GetenvFn getenv = SystemGetenv, std::string config_file = "",
                       NoteFn note = nullptr);

  std::string name() const override { return "aws"; }
  Result<std::vector<NodeHandle>> Provision(const ProvisionRequest& request) override;
  // Spot instances cannot be stopped (EC2's one-time spot requests): FailedPrecondition.
  Status CheckStoppable(const std::string& cluster, const std::string& state_dir) override;
  Status Stop(const std::string& cluster, const std::string& state_dir) override;
  Result<std::vector<NodeHandle>> Start(const std::string& cluster,
                                        const std::string& state_dir) override;
  Status Teardown(const std::string& cluster, const std::string& state_dir) override;
  // Any recorded cluster (a team server stops it with its own credentials).
  Status CheckAutostop(const std::string& cluster, const std::string& state_dir) override;
  // The cluster's IAM user (iam_client.hpp: may only stop or terminate this cluster's instances)
  // and its key, made on first use and kept in the record; Teardown deletes them.
  Result<AutostopGrant> GrantAutostop(const std::string& cluster,
                                      const std::string& state_dir) override;
  // DescribeInstances of the recorded instances.
  Result<MachinesView> Machines(const std::string& cluster, const std::string& state_dir) override;

 private:
  AwsLaunchSpec spec_;
  std::unique_ptr<HttpClient> http_;
  GetenvFn getenv_;
  std::string config_file_;
  NoteFn note_;
};

}  // namespace herd::controller
