// herd nodes CLUSTER: the nodes registered with a cluster's head, and how each is.
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/cli/infra_json.hpp"
#include "controller/core/table.hpp"

namespace herd::cli {
namespace {

using namespace herd::v1;

class NodesCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("nodes", "list the nodes registered with a cluster's head");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("cluster", cluster_, "cluster name");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    cmd_->add_option("--drain", drain_, "drain this node: no new jobs (give --reason)");
    cmd_->add_option("--reason", reason_, "why the node is drained");
    cmd_->add_option("--undrain", undrain_, "take jobs on this node again");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return cluster_; }
  int Run(CliContext& ctx) override {
    auto client = ConnectTarget(ctx, cluster_, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    if (!drain_.empty() && !undrain_.empty()) {
      return Fail(ctx, InvalidArgument("--drain and --undrain: one at a time"), 2);
    }
    if (!drain_.empty() && reason_.empty()) {
      return Fail(ctx, InvalidArgument("--drain " + drain_ + ": give a --reason"), 2);
    }
    if (!reason_.empty() && drain_.empty()) {
      return Fail(ctx, InvalidArgument("--reason goes with --drain NODE"), 2);
    }
    const std::string& target = drain_.empty() ? undrain_ : drain_;
    auto reply =
        target.empty() ? (*client)->Nodes() : (*client)->Drain(target, !drain_.empty(), reason_);
    if (!reply.ok()) return FailForStatus(ctx, reply.status());
    if (!target.empty()) {
      ctx.err << "Node " << target
              << (drain_.empty() ? " undrained: it takes jobs again.\n"
                                 : " drained: no new jobs.\n");
    }
    // What starts an agent that is not running (bootstrap starts it again; jobs on the node keep
    // running where they still do).
    const std::string restart =
        "herd start " + (cluster_.empty() ? std::string("CLUSTER") : cluster_);
    if (output_ == "json") {
      boost::json::array arr;
      for (int i = 0; i < reply->nodes_size(); ++i) {
        const auto& n = reply->nodes(i);
        boost::json::object o;
        o["node_id"] = n.node_id();
        o["address"] = n.addresses_size() ? n.addresses(0) : "";
        o["hostname"] = n.hostname();
        o["cpus"] = n.cpus();
        o["gpus"] = n.gpu_count();
        o["gpu_source"] = n.gpu_source();
        o["is_head"] = n.is_head();
        o["alive"] = reply->alive(i);
        const NodeHealth h = i < reply->health_size() ? reply->health(i) : NodeHealth{};
        o["status"] = NodeConditionWord(h, reply->alive(i));
        o["silent_ms"] = h.silent_ms();
        if (h.condition() == NODE_CONDITION_STOPPED) {
          o["stopped_reason"] = h.stopped_reason();
          o["stopped_at_ms"] = h.stopped_unix_ms();
        }
        if (!reply->alive(i)) o["restart_command"] = restart;
        o["drained"] = h.drained();
        if (h.drained()) {
          o["drain_reason"] = h.drain_reason();
          o["drained_at_ms"] = h.drained_unix_ms();
        }
        arr.push_back(std::move(o));
      }
      ctx.out << boost::json::serialize(arr) << "\n";
      return 0;
    }
    controller::Table table({"NODE", "ADDRESS", "HOSTNAME", "CPUS", "GPUS", "STATUS"});
    std::vector<std::string> notes;
    for (int i = 0; i < reply->nodes_size(); ++i) {
      const auto& n = reply->nodes(i);
      std::string gpus = std::to_string(n.gpu_count());
      if (n.gpu_names_size()) gpus += " (" + n.gpu_names(0) + ")";
      const NodeHealth h = i < reply->health_size() ? reply->health(i) : NodeHealth{};
      table.AddRow({n.node_id() + (n.is_head() ? " (head)" : ""),
                    n.addresses_size() ? n.addresses(0) : "-", n.hostname(),
                    std::to_string(n.cpus()), gpus,
                    NodeConditionWord(h, reply->alive(i)) + (h.drained() ? ", DRAINED" : "")});
      if (h.drained()) {
        notes.push_back(n.node_id() + " is drained (" + h.drain_reason() + ", " +
                        Ago(h.drained_unix_ms()) + "): no new jobs. When it is fixed: herd nodes " +
                        (cluster_.empty() ? std::string("CLUSTER") : cluster_) + " --undrain " +
                        n.node_id());
      }
      const std::string silent = std::to_string(h.silent_ms() / 1000) + " s";
      if (h.condition() == NODE_CONDITION_STOPPED) {
        notes.push_back(n.node_id() + " is stopped: " + h.stopped_reason() + " " +
                        Ago(h.stopped_unix_ms()) +
                        "; nothing restarts it by itself. Start its agent again with: " + restart);
      } else if (h.condition() == NODE_CONDITION_LOST) {
        notes.push_back(n.node_id() + " is lost: no message from its agent for " + silent +
                        ". Start its agent again with: " + restart);
      }
    }
    ctx.out << table.Render();
    for (const auto& line : notes) ctx.out << line << "\n";
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::string cluster_, output_, drain_, reason_, undrain_;
};

}  // namespace

std::unique_ptr<Command> MakeNodesCommand() { return std::make_unique<NodesCommand>(); }

}  // namespace herd::cli
