// herd storage ls | delete NAME...: the buckets herd mounted for this user (SkyPilot's
// `sky storage ls/delete`), from <herd home>/storage.db.
#include <algorithm>
#include <boost/json.hpp>
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/core/table.hpp"
#include "controller/jobs/managed_jobs.hpp"
#include "controller/storage/storage_ops.hpp"

namespace herd::cli {
namespace {

class StorageCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("storage", "buckets herd mounted (file_mounts): ls, delete");
    cmd_->require_subcommand(1);
    ls_ = cmd_->add_subcommand("ls", "list the buckets herd knows");
    ls_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    delete_ = cmd_->add_subcommand("delete", "delete buckets herd made (others leave the table)");
    delete_->add_option("names", names_, "bucket names")->required();
    delete_->add_flag("-y,--yes", yes_, "do not ask");
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    storage::StorageParts parts = storage::SystemStorageParts();
    if (ls_->parsed()) return List(ctx, parts);
    // A bucket held by a managed job is deleted only once the job ended (a job whose controller
    // died counts as ended: FAILED_CONTROLLER); a job no longer listed is gone.
    parts.managed_job_ended = [](int64_t id) {
      auto jobs = controller::ListManagedJobs();
      if (!jobs.ok()) return false;
      for (const auto& j : *jobs) {
        if (j.id == id) return jobs::IsTerminal(j.state);
      }
      return true;
    };
    int rc = 0;
    for (const auto& name : names_) {
      if (!yes_ && !ConfirmOnTty(ctx, "Delete storage " + name + "?")) continue;
      auto done = storage::DeleteStorage(name, parts);
      if (!done.ok()) {
        rc = FailForStatus(ctx, done.status());
        continue;
      }
      ctx.err << *done << "\n";
    }
    return rc;
  }

 private:
  int List(CliContext& ctx, storage::StorageParts& parts) {
    auto table = parts.open_table();
    if (!table.ok()) return FailForStatus(ctx, table.status());
    auto all = (*table)->List();
    if (!all.ok()) return FailForStatus(ctx, all.status());
    // A holding job whose controller died ends (FAILED_CONTROLLER) when the jobs are looked at,
    // and lets its buckets go: look, then read the table again.
    if (std::any_of(all->begin(), all->end(),
                    [](const storage::StorageRecord& r) { return !r.managed_jobs.empty(); })) {
      (void)controller::ListManagedJobs();
      all = (*table)->List();
      if (!all.ok()) return FailForStatus(ctx, all.status());
    }
    if (output_ == "json") {
      boost::json::array arr;
      for (const auto& r : *all) {
        boost::json::object o = storage::StorageRecordJson(r);
        o["name"] = r.name;
        arr.push_back(std::move(o));
      }
      ctx.out << boost::json::serialize(arr) << "\n";
      return 0;
    }
    if (all->empty()) {
      ctx.out << "No existing storage.\n";
      return 0;
    }
    controller::Table t(
        {"NAME", "CREATED", "STORE", "SOURCE", "MODE", "CLUSTERS", "MADE BY HERD", "PERSISTENT"});
    for (const auto& r : *all) {
      std::string clusters;
      for (const auto& c : r.clusters) clusters += (clusters.empty() ? "" : ",") + c;
      for (int64_t j : r.managed_jobs) {
        clusters += (clusters.empty() ? "" : ",") + std::string("managed job ") + std::to_string(j);
      }
      t.AddRow({r.name, Ago(r.created_unix_ms), r.store + " (" + r.endpoint + ")",
                r.source.empty() ? "-" : r.source, r.mode, clusters.empty() ? "-" : clusters,
                r.herd_made ? "yes" : "no", r.persistent ? "yes" : "no"});
    }
    ctx.out << t.Render();
    return 0;
  }

  CLI::App* cmd_ = nullptr;
  CLI::App* ls_ = nullptr;
  CLI::App* delete_ = nullptr;
  std::string output_;
  std::vector<std::string> names_;
  bool yes_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeStorageCommand() { return std::make_unique<StorageCommand>(); }

}  // namespace herd::cli
