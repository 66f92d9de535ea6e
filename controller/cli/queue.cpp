// herd queue [CLUSTER...]: the jobs of clusters (every cluster when none is named), newest first.
#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <vector>

#include "controller/cli/common.hpp"
#include "controller/core/table.hpp"
#include "controller/state/cluster_record.hpp"
#include "herd/v1/client.pb.h"
#include "shared/common/limits.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::cli {
namespace {

class QueueCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand(
        "queue", "list the jobs of clusters (every cluster when none is named), newest first");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("clusters", clusters_, "cluster names");
    cmd_->add_flag("-s,--skip-finished", skip_, "only jobs that have not finished");
    cmd_->add_flag("-r,--array", expand_,
                   "one line per job of an array (by default an array is one line with its "
                   "jobs counted by state)");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return clusters_.size() == 1 ? clusters_[0] : ""; }
  int Run(CliContext& ctx) override {
    if (!target_.endpoint.empty() || clusters_.size() == 1) {
      return RunOne(ctx, clusters_.empty() ? "" : clusters_[0]);
    }
    return RunMany(ctx);
  }

 private:
  // One cluster's queue (or the head of --endpoint).
  int RunOne(CliContext& ctx, const std::string& cluster) {
    auto client = ConnectTarget(ctx, cluster, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    int64_t left_out = 0;
    auto jobs = (*client)->Queue(skip_, &left_out);
    if (!jobs.ok()) return FailForStatus(ctx, jobs.status());
    if (output_ == "json") {
      boost::json::array arr;
      for (const auto& j : *jobs) arr.push_back(JobJson(j));
      ctx.out << boost::json::serialize(arr) << "\n";
      ctx.err << LeftOutLine(left_out, jobs->size());
      return 0;
    }
    if (!cluster.empty()) ctx.out << "Job queue of cluster " << cluster << "\n";
    ctx.out << Render(*jobs) << LeftOutLine(left_out, jobs->size());
    return 0;
  }

  // The named clusters, or every cluster: their heads asked at once (ClusterOps::AskEachHead), a
  // head that does not answer within limits::kStatusHeadTimeout named on stderr. A cluster that
  // is not UP has no queue to show: it is named, not asked. The exit code is that of the first
  // cluster that could not be listed, after every other one is shown.
  int RunMany(CliContext& ctx) {
    auto all = ctx.Ops().List();
    if (!all.ok()) return FailForStatus(ctx, all.status());
    std::vector<const controller::ClusterRecord*> shown;
    for (const std::string& name : clusters_) {
      auto it = std::find_if(all->begin(), all->end(),
                             [&](const controller::ClusterRecord& c) { return c.name == name; });
      // Bad input changes nothing and asks no head: every name is checked first.
      if (it == all->end()) return FailForStatus(ctx, ctx.Ops().Get(name).status());
      shown.push_back(&*it);
    }
    if (clusters_.empty()) {
      for (const auto& c : *all) shown.push_back(&c);
    }
    std::vector<const controller::ClusterRecord*> up;
    for (const auto* c : shown) {
      if (c->status == controller::ClusterStatus::kUp) up.push_back(c);
    }
    const bool skip = skip_;
    // The question holds its own ClusterOps (AskEachHead: it may outlive this command).
    auto answers = ctx.Ops().AskEachHead(
        up,
        [parts = ctx.Ops().parts(), skip](const controller::ClusterRecord& c) -> std::string {
          ops::ClusterOps ops(parts);
          auto client = ops.ConnectHead(c);
          if (!client.ok()) return "E" + client.status().ToString();
          int64_t left_out = 0;
          auto jobs = (*client)->Queue(skip, &left_out);
          if (!jobs.ok()) return "E" + jobs.status().ToString();
          herd::v1::QueueReply reply;
          for (auto& j : *jobs) *reply.add_jobs() = std::move(j);
          reply.set_older_left_out(left_out);
          return "Q" + reply.SerializeAsString();
        },
        limits::kStatusHeadTimeout);
    Status first_failure = Status::Ok();
    boost::json::array arr;
    bool first_table = true;
    for (const auto* c : shown) {
      if (c->status != controller::ClusterStatus::kUp) {
        ctx.err << "Cluster " << c->name << " is " << controller::Name(c->status)
                << ": no job queue to show\n";
        continue;
      }
      const std::optional<std::string>& answer = answers[c->name];
      herd::v1::QueueReply reply;
      Status failed = Status::Ok();
      if (!answer) {
        failed = Unavailable("its head did not answer within " +
                             std::to_string(limits::kStatusHeadTimeout.count() / 1000) + " s");
      } else if (answer->empty() || (*answer)[0] != 'Q' ||
                 !reply.ParseFromString(answer->substr(1))) {
        failed = Unavailable(answer->size() > 1 && (*answer)[0] == 'E' ? answer->substr(1)
                                                                       : "no answer");
      }
      if (!failed.ok()) {
        ctx.err << "herd: cannot list the jobs of cluster " << c->name << ": " << failed.message()
                << "\n";
        if (first_failure.ok()) first_failure = failed;
        continue;
      }
      std::vector<herd::v1::JobInfo> jobs(reply.jobs().begin(), reply.jobs().end());
      const std::string left_out = LeftOutLine(reply.older_left_out(), jobs.size());
      if (output_ == "json") {
        for (const auto& j : jobs) {
          boost::json::object o = JobJson(j);
          o["cluster"] = c->name;
          arr.push_back(std::move(o));
        }
        if (!left_out.empty()) ctx.err << "Cluster " << c->name << ": " << left_out;
        continue;
      }
      ctx.out << (first_table ? "" : "\n") << "Job queue of cluster " << c->name << "\n"
              << Render(jobs) << left_out;
      first_table = false;
    }
    if (output_ == "json") ctx.out << boost::json::serialize(arr) << "\n";
    return first_failure.ok() ? 0 : FailForStatus(ctx, first_failure);
  }

  // The head lists the newest jobs that fit one reply; the line says how many it left out.
  static std::string LeftOutLine(int64_t left_out, std::size_t listed) {
    if (left_out == 0) return "";
    return std::to_string(left_out) + " older job" + (left_out == 1 ? "" : "s") +
           " not shown: the head lists the newest " + std::to_string(listed) +
           " (as many as fit one reply, at most " + std::to_string(limits::kMaxJobsListed) + ")\n";
  }

  std::string Render(const std::vector<herd::v1::JobInfo>& jobs) const {
    controller::Table table({"ID", "NAME", "USER", "SUBMITTED", "STARTED", "DURATION", "RESOURCES",
                             "STATUS", "LOG", "ATTEMPT"});
    // Newest first; an array's line stands where its newest job is.
    std::map<int64_t, std::vector<const herd::v1::JobInfo*>> arrays;
    if (!expand_) {
      for (const auto& j : jobs) {
        if (j.array_size() > 0) arrays[j.array_id()].push_back(&j);
      }
    }
    for (const auto& j : jobs) {
      auto array = arrays.find(j.array_id());
      if (j.array_size() > 0 && array != arrays.end()) {
        if (array->second.front() == &j) table.AddRow(ArrayRow(array->second));
        continue;
      }
      std::string id = std::to_string(j.job_id());
      if (j.array_size() > 0) {
        id += " (" + std::to_string(j.array_id()) + "_" + std::to_string(j.array_index()) + ")";
      }
      table.AddRow({id, j.name().empty() ? "-" : j.name(), j.user(), Ago(j.submitted_unix_ms()),
                    Ago(j.started_unix_ms()), Duration(j), j.resources(), StatusCell(j),
                    j.log_path(), std::to_string(j.attempt())});
    }
    return table.Render();
  }

  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::vector<std::string> clusters_;
  std::string output_;
  bool skip_ = false, expand_ = false;

  // A PENDING job that waits for something says what (its dependencies, its array's limit, lost
  // nodes): "PENDING (waiting for job 4 (RUNNING) to end)".
  static std::string StatusCell(const herd::v1::JobInfo& j) {
    std::string cell(proto::JobStateName(j.state()));
    const std::string prefix = "Job " + std::to_string(j.job_id()) + " is ";
    if (j.state() == herd::v1::JOB_STATE_PENDING && j.message().rfind(prefix, 0) == 0) {
      std::string why = j.message().substr(prefix.size());
      if (!why.empty() && why.back() == '.') why.pop_back();
      if (why.rfind("waiting: ", 0) == 0) why = why.substr(9);
      cell += " (" + why + ")";
    }
    return cell;
  }

  // One line for the jobs of an array in this listing (newest first): "5_[0-99%8]", its jobs
  // counted by state ("8 RUNNING, 80 PENDING, 12 SUCCEEDED").
  static std::vector<std::string> ArrayRow(const std::vector<const herd::v1::JobInfo*>& jobs) {
    const herd::v1::JobInfo& newest = *jobs.front();
    std::map<int, int> by_state;
    int64_t submitted = newest.submitted_unix_ms(), started = 0;
    for (const auto* j : jobs) {
      ++by_state[j->state()];
      if (j->started_unix_ms() > 0 && (started == 0 || j->started_unix_ms() < started)) {
        started = j->started_unix_ms();
      }
    }
    // Running first, then waiting, then ended (the job state enum's order is SkyPilot's).
    std::string states;
    for (int s :
         {herd::v1::JOB_STATE_RUNNING, herd::v1::JOB_STATE_SETTING_UP, herd::v1::JOB_STATE_PENDING,
          herd::v1::JOB_STATE_INIT, herd::v1::JOB_STATE_SUCCEEDED, herd::v1::JOB_STATE_FAILED,
          herd::v1::JOB_STATE_FAILED_SETUP, herd::v1::JOB_STATE_FAILED_DRIVER,
          herd::v1::JOB_STATE_CANCELLED}) {
      auto it = by_state.find(s);
      if (it == by_state.end()) continue;
      if (!states.empty()) states += ", ";
      states += std::to_string(it->second) + " " +
                std::string(proto::JobStateName(static_cast<herd::v1::JobState>(s)));
    }
    std::string listed;
    if (static_cast<int>(jobs.size()) < newest.array_size()) {
      listed = " (" + std::to_string(jobs.size()) + " of " + std::to_string(newest.array_size()) +
               " listed)";
    }
    return {std::to_string(newest.array_id()) + "_[" + newest.array_spec() + "]",
            newest.name().empty() ? "-" : newest.name(),
            newest.user(),
            Ago(submitted),
            Ago(started),
            "-",
            newest.resources(),
            states + listed,
            "-",
            std::to_string(newest.attempt())};
  }
};

}  // namespace

std::unique_ptr<Command> MakeQueueCommand() { return std::make_unique<QueueCommand>(); }

}  // namespace herd::cli
