#include "controller/ops/agent_install.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "controller/bootstrap/remote_scripts.hpp"
#include "controller/bootstrap/sha256.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "controller/ops/node_targets.hpp"
#include "shared/common/file_util.hpp"
#include "shared/tls/certs.hpp"

namespace herd::ops {

namespace fs = std::filesystem;
using namespace herd::controller;

namespace {

void Report(const ProgressFn& p, const std::string& stage, int done, int total) {
  if (p) p(stage, done, total);
}

}  // namespace

std::string AgentConfigYaml(const ClusterRecord& c, std::size_t i) {
  const NodeRecord& n = c.nodes[i];
  const NodeRecord* head = HeadNode(c);
  std::string y;
  y += "role: " + std::string(n.is_head ? "head" : "worker") + "\n";
  y += "cluster: " + c.name + "\n";
  y += "node_id: " + n.name + "\n";
  y += "address: " + InternalIp(n) + "\n";
  if (n.is_head) {
    y += "listen: " + InternalIp(n) + ":" + std::to_string(c.head_port) + "\n";
    y += "expected_nodes: " + std::to_string(c.nodes.size()) + "\n";
  } else {
    y += "head: " + InternalIp(*head) + ":" + std::to_string(c.head_port) + "\n";
    y += "head_node: " + head->name + "\n";
  }
  y += "certs: certs\nstate_dir: state\nready_file: " + std::string(kRemoteReadyFile) +
       "\ncloud: " + c.provider + "\n";
  if (!n.spot_metadata.empty()) y += "spot_metadata: " + n.spot_metadata + "\n";
  return y;
}

Result<BootstrapResult> BootstrapCluster(SshRunner& ssh, const ClusterRecord& c,
                                         const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(std::string herdlet, HerdletBinary());
  std::vector<AgentInstall> installs;
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    const NodeRecord& n = c.nodes[i];
    std::string dir = c.state_dir + "/nodes/" + n.name + "/certs";
    // A missing certificate, or one that does not prove this node (an older herd's): its head
    // would refuse the agent.
    if (!tls::AgentCertsProve(c.certs_dir, n.name, dir)) {
      HERD_RETURN_IF_ERROR(tls::IssueAgentCerts(c.certs_dir, n.name, {InternalIp(n)}, dir));
    }
    AgentInstall a;
    a.target = TargetOf(c, n);
    a.node_name = n.name;
    a.agent_config_yaml = AgentConfigYaml(c, i);
    a.certs_dir = dir;
    a.host_home = n.host_home;
    installs.push_back(std::move(a));
  }
  Report(progress, "Bootstrapping agents", 0, static_cast<int>(c.nodes.size()));
  BootstrapOptions opts;
  opts.herdlet_path = herdlet;
  opts.host_cache_dir = c.state_dir;
  HERD_ASSIGN_OR_RETURN(auto result, BootstrapAgents(ssh, installs, opts));
  Report(progress, "Bootstrapping agents", static_cast<int>(c.nodes.size()),
         static_cast<int>(c.nodes.size()));
  return result;
}

Result<BootstrapResult> StartProviderAgents(Provider& provider, const ClusterRecord& c,
                                            const ProgressFn& progress) {
  HERD_ASSIGN_OR_RETURN(std::string herdlet, HerdletBinary());
  std::vector<AgentFiles> files;
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    const NodeRecord& n = c.nodes[i];
    std::string dir = c.state_dir + "/nodes/" + n.name + "/certs";
    // Always issued afresh: a new allocation may put the node on another machine and address.
    HERD_RETURN_IF_ERROR(tls::IssueAgentCerts(c.certs_dir, n.name, {InternalIp(n)}, dir));
    files.push_back({n.name, AgentConfigYaml(c, i), dir});
  }
  const int total = static_cast<int>(c.nodes.size());
  Report(progress, "Starting agents in the allocation", 0, total);
  HERD_RETURN_IF_ERROR(provider.StartAgents(c.name, c.state_dir + "/provider", herdlet, files));
  Report(progress, "Starting agents in the allocation", total, total);
  BootstrapResult result;
  result.uploaded = total;
  result.restarted = total;
  result.agent_pids.assign(c.nodes.size(), 0);
  return result;
}

Result<std::string> AgentStamp(const ClusterRecord& c) {
  HERD_ASSIGN_OR_RETURN(std::string herdlet, HerdletBinary());
  struct stat st {};
  if (::stat(herdlet.c_str(), &st) != 0) return ErrnoError("stat " + herdlet, errno);
  std::string all = herdlet + "\n" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) +
                    ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) +
                    "." + std::to_string(st.st_mtim.tv_nsec) + "\n" +
                    BootstrapOptions{}.remote_dir + "\n";
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    all += AgentConfigYaml(c, i);
    const std::string dir = c.state_dir + "/nodes/" + c.nodes[i].name + "/certs/";
    for (const char* f : {"ca.crt", "agent.crt", "agent.key"}) {
      HERD_ASSIGN_OR_RETURN(std::string data, ReadFile(dir + f));
      all += Sha256Hex(data) + "\n";
    }
  }
  return Sha256Hex(all);
}

Result<std::string> HerdletBinary() {
  if (const char* env = ::getenv("HERDLET_BINARY"); env && *env) return std::string(env);
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // herdlet.upload is herdlet without debug info (a fifth of the size), made by the build.
    for (const fs::path& p : {self.parent_path() / "herdlet",
                              self.parent_path().parent_path() / "agent" / "herdlet.upload",
                              self.parent_path().parent_path() / "agent" / "herdlet"}) {
      if (fs::exists(p)) return p.string();
    }
  }
  return NotFound("cannot find the herdlet binary next to " + self.string() +
                  "; set HERDLET_BINARY");
}

}  // namespace herd::ops
