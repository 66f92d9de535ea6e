// herd status [-r]: the clusters, and for each UP one whether its head still has every node; with
// -r (and always for clusters with autostop on a cloud) what their providers say of the machines.
#include <algorithm>
#include <map>
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/core/table.hpp"

namespace herd::cli {
namespace {

using controller::ClusterRecord;
using controller::ClusterStatus;

std::string AutostopText(const ClusterRecord& c) {
  if (c.autostop_idle_minutes < 0) return "-";
  return std::to_string(c.autostop_idle_minutes) + "m" + (c.autostop_down ? " (down)" : "");
}

class StatusCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("status", "list clusters");
    cmd_->add_option("clusters", names_, "only these clusters");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    cmd_->add_flag("--ip", ip_, "print only the head node's IP of the one cluster named");
    cmd_->add_flag("-r,--refresh", refresh_,
                   "ask the providers for every cluster's machines and update the records");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return true; }
  int Run(CliContext& ctx) override {
    if (ip_) return HeadIp(ctx);
    std::vector<ClusterRecord> shown;
    auto list = [&]() -> Status {
      auto all = ctx.Ops().List();
      if (!all.ok()) return all.status();
      shown.clear();
      for (const auto& c : *all) {
        if (names_.empty() || std::find(names_.begin(), names_.end(), c.name) != names_.end()) {
          shown.push_back(c);
        }
      }
      return Status::Ok();
    };
    if (Status s = list(); !s.ok()) return FailForStatus(ctx, s);
    // The providers' view first (every cluster with -r; else clusters that may have stopped
    // themselves): records of stopped or gone machines are updated before they are shown.
    const ops::RefreshOutcome refreshed = ctx.Ops().Refresh(shown, refresh_);
    if (Status s = list(); !s.ok()) return FailForStatus(ctx, s);
    // The record says UP once every agent registered; whether they still are, only the head
    // knows: an UP cluster whose head is without a node (or does not answer) shows as INIT.
    std::vector<ClusterRecord> ask;
    for (const auto& c : shown) {
      if (!refreshed.shown.count(c.name)) ask.push_back(c);
    }
    const std::map<std::string, ops::ClusterHealth> health = ctx.Ops().Health(ask);
    auto shown_status = [&](const ClusterRecord& c) -> std::string {
      if (auto r = refreshed.shown.find(c.name); r != refreshed.shown.end()) return r->second;
      auto h = health.find(c.name);
      if (h != health.end() && h->second.answered && h->second.autostop_due) return "AUTOSTOPPING";
      if (h == health.end() || (h->second.answered && h->second.down.empty())) {
        return std::string(controller::Name(c.status));
      }
      return std::string(controller::Name(ClusterStatus::kInit));
    };
    if (output_ == "json") {
      boost::json::array arr;
      for (const auto& c : shown) {
        boost::json::object o;
        o["name"] = c.name;
        o["infra"] = c.infra;
        o["status"] = shown_status(c);
        // UP clusters only: the nodes the head is without, and whether it answered at all.
        boost::json::array lost;
        if (auto h = health.find(c.name); h != health.end()) {
          for (const auto& [node, why] : h->second.down) lost.push_back(boost::json::string(node));
          o["head_answered"] = h->second.answered;
          if (!h->second.answered) o["head_error"] = h->second.error;
          if (!h->second.allocation.empty()) o["allocation"] = h->second.allocation;
        }
        o["lost_nodes"] = std::move(lost);
        if (auto h = health.find(c.name); h != health.end() && !h->second.drained.empty()) {
          boost::json::object drained;
          for (const auto& [node, why] : h->second.drained) drained[node] = why;
          o["drained_nodes"] = std::move(drained);
        }
        o["resources"] = c.resources;
        o["autostop"] = c.autostop_idle_minutes;
        o["launched_at_ms"] = c.launched_unix_ms;
        boost::json::array ns;
        for (const auto& n : c.nodes) {
          boost::json::object no;
          no["name"] = n.name;
          no["ip"] = n.ip;
          no["is_head"] = n.is_head;
          ns.push_back(std::move(no));
        }
        o["nodes"] = std::move(ns);
        arr.push_back(std::move(o));
      }
      ctx.out << boost::json::serialize(arr) << "\n";
      return 0;
    }
    if (shown.empty()) {
      ctx.out << "No existing clusters.\n";
      for (const auto& line : refreshed.notes) ctx.out << line << "\n";
      return 0;
    }
    // NOT UP: why an UP cluster shows as INIT; the column is there only when one does.
    std::vector<std::string> headers = {"NAME",   "INFRA",    "RESOURCES",
                                        "STATUS", "AUTOSTOP", "LAUNCHED"};
    std::vector<std::string> hints;
    std::map<std::string, std::string> not_up;
    for (const auto& [name, h] : health) {
      if (!h.allocation_alive) {
        not_up[name] = "Slurm job " + h.allocation;
        hints.push_back("Cluster " + name + ": " + h.error + "; `herd down " + name +
                        "` removes it, `herd launch -c " + name + "` allocates it again.");
        continue;
      }
      if (!h.answered) {
        not_up[name] = "head not answering";
        hints.push_back("Cluster " + name + ": " + h.error + ".");
        continue;
      }
      for (const auto& [node, why] : h.down) {
        std::string shown_name = node.starts_with(name + "-") ? node.substr(name.size() + 1) : node;
        not_up[name] += (not_up[name].empty() ? "" : ", ") + shown_name + " " + why;
      }
      if (!h.down.empty()) {
        hints.push_back("Cluster " + name + ": " + std::to_string(h.down.size()) + " node(s) " +
                        "without a running agent; start them again with: herd start " + name);
      }
      for (const auto& [node, why] : h.drained) {
        hints.push_back("Cluster " + name + ": node " + node + " is DRAINED (" + why +
                        "): no new jobs; when it is fixed: herd nodes " + name + " --undrain " +
                        node);
      }
    }
    if (!not_up.empty()) headers.push_back("NOT UP");
    controller::Table table(headers);
    for (const auto& c : shown) {
      std::vector<std::string> row = {c.name,          c.infra,         c.resources,
                                      shown_status(c), AutostopText(c), Ago(c.launched_unix_ms)};
      if (!not_up.empty()) row.push_back(not_up.count(c.name) ? not_up[c.name] : "-");
      table.AddRow(row);
    }
    ctx.out << table.Render();
    for (const auto& line : refreshed.notes) ctx.out << line << "\n";
    for (const auto& line : hints) ctx.out << line << "\n";
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::vector<std::string> names_;
  std::string output_;
  bool ip_ = false;
  bool refresh_ = false;

  // `status --ip CLUSTER` (SkyPilot's): the head's IP alone, for scripts.
  int HeadIp(CliContext& ctx) {
    if (names_.size() != 1) {
      return Fail(ctx, InvalidArgument("--ip: name exactly one cluster"), 2);
    }
    auto c = ctx.Ops().Get(names_[0]);
    if (!c.ok()) return FailForStatus(ctx, c.status());
    const auto* head = controller::HeadNode(*c);
    if (head == nullptr || head->ip.empty() || c->status != ClusterStatus::kUp) {
      return Fail(ctx, FailedPrecondition("cluster " + c->name + " is " +
                                          std::string(controller::Name(c->status)) +
                                          ": it has no head IP"));
    }
    ctx.out << head->ip << "\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeStatusCommand() { return std::make_unique<StatusCommand>(); }

}  // namespace herd::cli
