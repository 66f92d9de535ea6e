// herd infra [CLUSTER...]: where the user's machines are and how busy their GPUs are (the
// dashboard's infra page; SkyPilot's dashboard "Infra"): each infra herd can use here (local, each
// SSH node pool with its hosts, AWS, each Slurm cluster; `herd check`'s list), the user's clusters
// on it, and each cluster's nodes with their GPUs, free and in use. Nodes and GPUs are what each
// UP cluster's head says (`herd nodes`); a GPU is in use while an unfinished job holds it (the
// head's queue: each rank's GPU indices). Heads are asked at once, each within
// limits::kStatusHeadTimeout. With CLUSTER names: only those clusters and the infra they are on.
#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/cli/infra_json.hpp"
#include "controller/core/table.hpp"
#include "controller/optimizer/infra.hpp"
#include "controller/provider/ssh_pool_provider.hpp"
#include "controller/state/cluster_record.hpp"
#include "herd/v1/client.pb.h"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"

namespace herd::cli {
namespace {

using controller::ClusterRecord;
using controller::ClusterStatus;

// What one head says: its nodes, then its unfinished jobs (their ranks' GPUs). Asked in a child
// process (AskEachHead), both come back in one string: "N<length of nodes>:<nodes><queue>"
// (serialized NodesReply and QueueReply), or "E<why>".
std::string AskHead(ops::ClusterOps& ops, const ClusterRecord& c) {
  auto client = ops.ConnectHead(c);
  if (!client.ok()) return "E" + client.status().message();
  auto nodes = (*client)->Nodes();
  if (!nodes.ok()) return "E" + nodes.status().message();
  int64_t left_out = 0;
  auto jobs = (*client)->Queue(/*skip_finished=*/true, &left_out);
  if (!jobs.ok()) return "E" + jobs.status().message();
  herd::v1::QueueReply queue;
  for (auto& j : *jobs) *queue.add_jobs() = std::move(j);
  const std::string n = nodes->SerializeAsString();
  return "N" + std::to_string(n.size()) + ":" + n + queue.SerializeAsString();
}

struct HeadView {
  herd::v1::NodesReply nodes;
  herd::v1::QueueReply queue;
};

Result<HeadView> ParseAnswer(const std::optional<std::string>& answer) {
  if (!answer) {
    return Unavailable("its head did not answer within " +
                       std::to_string(limits::kStatusHeadTimeout.count() / 1000) + " s");
  }
  const std::string& a = *answer;
  if (a.size() > 1 && a[0] == 'E') return Unavailable(a.substr(1));
  const auto colon = a.find(':');
  HeadView v;
  if (a.empty() || a[0] != 'N' || colon == std::string::npos) return Unavailable("no answer");
  std::size_t len = 0;
  const auto [end, ec] = std::from_chars(a.data() + 1, a.data() + colon, len);
  if (ec != std::errc() || end != a.data() + colon || len > a.size() - colon - 1 ||
      !v.nodes.ParseFromString(a.substr(colon + 1, len)) ||
      !v.queue.ParseFromString(a.substr(colon + 1 + len))) {
    return Unavailable("a garbled answer");
  }
  return v;
}

class InfraCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand(
        "infra",
        "where your clusters run: each infra (local, SSH node pools, clouds, Slurm), its "
        "clusters and their nodes with GPUs free and in use");
    cmd_->add_option("clusters", clusters_, "only these clusters");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  std::string Cluster() const override { return clusters_.size() == 1 ? clusters_[0] : ""; }
  int Run(CliContext& ctx) override {
    auto all = ctx.Ops().List();
    if (!all.ok()) return FailForStatus(ctx, all.status());
    std::vector<const ClusterRecord*> shown;
    for (const std::string& name : clusters_) {
      auto it = std::find_if(all->begin(), all->end(),
                             [&](const ClusterRecord& c) { return c.name == name; });
      if (it == all->end()) return FailForStatus(ctx, ctx.Ops().Get(name).status());
      shown.push_back(&*it);
    }
    if (clusters_.empty()) {
      for (const auto& c : *all) shown.push_back(&c);
    }
    std::vector<const ClusterRecord*> up;
    for (const auto* c : shown) {
      if (c->status == ClusterStatus::kUp) up.push_back(c);
    }
    // The question holds its own ClusterOps (AskEachHead: it may outlive this command).
    auto answers = ctx.Ops().AskEachHead(
        up,
        [parts = ctx.Ops().parts()](const ClusterRecord& c) {
          ops::ClusterOps ops(parts);
          return AskHead(ops, c);
        },
        limits::kStatusHeadTimeout);
    std::map<std::string, Result<HeadView>> heads;
    for (const auto* c : up) heads.emplace(c->name, ParseAnswer(answers[c->name]));

    // The infra list: `herd check`'s (without a name filter), then any infra a cluster is on that
    // it does not name (an infra of an older config).
    struct Item {
      boost::json::object o;
      boost::json::array clusters;
    };
    std::vector<Item> items;
    std::map<std::string, std::size_t> index;
    auto add = [&](const std::string& infra, const std::string& kind, bool usable,
                   const std::string& reason) -> Item& {
      if (auto it = index.find(infra); it != index.end()) return items[it->second];
      index[infra] = items.size();
      items.push_back(
          Item{boost::json::object{
                   {"infra", infra}, {"kind", kind}, {"usable", usable}, {"reason", reason}},
               {}});
      return items.back();
    };
    auto kind_of = [](const std::string& infra) -> std::string {
      if (infra.rfind("ssh/", 0) == 0) return "ssh";
      if (infra.rfind("slurm", 0) == 0) return "slurm";
      if (infra == "local") return "local";
      return "cloud";
    };
    auto env = optimizer::ProbeEnvironment();
    if (env.ok() && clusters_.empty()) {
      for (const auto& s : env->All()) add(s.infra, kind_of(s.infra), s.usable, s.reason);
      // Each pool's hosts as its file lists them.
      const std::string file = controller::DefaultSshNodePoolsFile();
      if (auto text = ReadFileIfExists(file); text.ok() && *text) {
        if (auto pools = controller::ParseSshNodePools(**text, file); pools.ok()) {
          for (const auto& p : *pools) {
            boost::json::array hosts;
            for (const auto& host : p.hosts) hosts.push_back(boost::json::string(host.address));
            auto& o = add("ssh/" + p.name, "ssh", true, "").o;
            o["hosts"] = std::move(hosts);
            // Which of the user's clusters holds each host (the dashboard's infra page).
            o["held_by"] = PoolHostHolders(
                p, *all, [&p](std::size_t i) -> Result<std::pair<std::string, int>> {
                  HERD_ASSIGN_OR_RETURN(auto h, controller::ResolveSshPoolHost(p, i));
                  return std::make_pair(h.ip, h.port);
                });
          }
        }
      }
    } else if (!env.ok()) {
      ctx.err << "herd: which infra are usable here is unknown: " << env.status().message() << "\n";
    }
    for (const auto* c : shown) {
      // A cluster on aws/REGION is the aws infra's; on slurm/C/P, slurm/C's.
      std::string infra = c->infra;
      bool usable = true;
      std::string reason;
      if (env.ok()) {
        if (const auto* s = env->Find(c->infra)) {
          infra = s->infra;
          usable = s->usable;
          reason = s->reason;
        }
      }
      const auto h = heads.find(c->name);
      add(infra, kind_of(infra), usable, reason)
          .clusters.push_back(
              h == heads.end() ? InfraClusterJson(*c, nullptr, nullptr, nullptr)
              : h->second.ok() ? InfraClusterJson(*c, &h->second->nodes, &h->second->queue, nullptr)
                               : InfraClusterJson(*c, nullptr, nullptr, &h->second.status()));
    }
    boost::json::array out;
    for (auto& item : items) {
      int gpus = 0, in_use = 0, nodes = 0;
      for (const auto& c : item.clusters) {
        gpus += static_cast<int>(c.at("gpus").as_int64());
        in_use += static_cast<int>(c.at("gpus_in_use").as_int64());
        nodes += static_cast<int>(c.at("nodes").as_array().size());
      }
      item.o["gpus"] = gpus;
      item.o["gpus_in_use"] = in_use;
      item.o["nodes"] = nodes;
      item.o["clusters"] = std::move(item.clusters);
      out.push_back(std::move(item.o));
    }
    if (output_ == "json") {
      ctx.out << boost::json::serialize(out) << "\n";
      return 0;
    }
    controller::Table infra({"INFRA", "USABLE", "CLUSTERS", "NODES", "GPUS IN USE"});
    controller::Table nodes({"CLUSTER", "NODE", "ADDRESS", "GPUS", "IN USE", "FREE", "STATUS"});
    bool any_node = false;
    for (const auto& v : out) {
      const auto& o = v.as_object();
      const auto& cl = o.at("clusters").as_array();
      std::string usable = o.at("usable").as_bool() ? "yes" : "no";
      if (const auto* hosts = o.if_contains("hosts")) {
        const auto* held = o.if_contains("held_by");
        usable += " (" + std::to_string(hosts->as_array().size()) + " hosts, " +
                  std::to_string(held && held->is_object() ? held->as_object().size() : 0) +
                  " held)";
      }
      infra.AddRow({std::string(o.at("infra").as_string()), usable, std::to_string(cl.size()),
                    std::to_string(o.at("nodes").as_int64()),
                    std::to_string(o.at("gpus_in_use").as_int64()) + " of " +
                        std::to_string(o.at("gpus").as_int64())});
      for (const auto& cv : cl) {
        const auto& c = cv.as_object();
        const bool known = c.at("gpus_known").as_bool();
        for (const auto& nv : c.at("nodes").as_array()) {
          const auto& n = nv.as_object();
          const std::string gpus = known ? std::to_string(n.at("gpus").as_int64()) : "-";
          const std::string used = known ? std::to_string(n.at("gpus_in_use").as_int64()) : "-";
          const std::string free =
              known ? std::to_string(std::max<int64_t>(
                          0, n.at("gpus").as_int64() - n.at("gpus_in_use").as_int64()))
                    : "-";
          nodes.AddRow({std::string(c.at("name").as_string()),
                        std::string(n.at("node_id").as_string()),
                        std::string(n.at("address").as_string()), gpus, used, free,
                        std::string(n.at("status").as_string())});
          any_node = true;
        }
        if (const auto* e = c.if_contains("error")) {
          ctx.err << "Cluster " << c.at("name").as_string() << ": " << e->as_string() << "\n";
        }
      }
    }
    ctx.out << infra.Render();
    if (any_node) ctx.out << "\n" << nodes.Render();
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::vector<std::string> clusters_;
  std::string output_;
};

}  // namespace

std::unique_ptr<Command> MakeInfraCommand() { return std::make_unique<InfraCommand>(); }

}  // namespace herd::cli
