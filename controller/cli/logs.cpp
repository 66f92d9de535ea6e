// herd logs CLUSTER [JOB]: follow a job's merged log (the latest job by default).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "controller/cli/common.hpp"
#include "shared/proto/job_state.hpp"

namespace herd::cli {
namespace {

namespace fs = std::filesystem;

class LogsCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("logs", "stream a job's logs (the latest job by default)");
    AddTargetFlags(cmd_, target_);
    cmd_->add_option("args", args_, "CLUSTER [JOB]");
    cmd_->add_flag("--no-follow", no_follow_, "print what is there and exit");
    cmd_->add_flag("--status", status_, "print only the job's status; exit code tells it");
    cmd_->add_option("--tail", tail_, "start at the last N lines (0: the whole log)")
        ->check(CLI::NonNegativeNumber);
    cmd_->add_flag("--sync-down", sync_down_,
                   "download the job's whole log to ~/herd_logs/CLUSTER/JOB/run.log and print "
                   "where");
    cmd_->add_option("--offset", offset_, "start at this byte of the merged log")
        ->check([](const std::string& value) -> std::string {
          // CLI11 would read "-5" into the unsigned offset as a huge number.
          if (value.find_first_not_of("0123456789") == std::string::npos && !value.empty()) {
            return "";
          }
          return "expected a byte offset (0 or more), got '" + value + "'";
        });
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  bool Remote() const override { return target_.endpoint.empty(); }
  std::string Cluster() const override { return args_.empty() ? "" : args_[0]; }
  int Run(CliContext& ctx) override {
    auto [cluster, rest] = SplitCluster(args_, target_);
    if (rest.size() > 1) return Fail(ctx, InvalidArgument("logs takes one job id"), 2);
    auto ids = ParseJobIds(rest);
    if (!ids.ok()) return Fail(ctx, ids.status(), 2);
    int64_t job = ids->empty() ? 0 : (*ids)[0];
    auto client = ConnectTarget(ctx, cluster, target_);
    if (!client.ok()) return FailForStatus(ctx, client.status());
    InstallSigint();
    if (status_) {
      controller::HeadApi::StreamCallbacks none;
      // Ask for the end of the log only: the status comes with end_of_stream.
      auto last = (*client)->Stream(job, UINT64_MAX, false, none);
      if (!last.ok()) return FailForStatus(ctx, last.status());
      ctx.out << "Job " << last->job_id() << ": " << proto::JobStateName(last->state()) << "\n";
      return controller::ExitCodeForJob(*last);
    }
    if (sync_down_) return SyncDown(ctx, **client, cluster.empty() ? "endpoint" : cluster, job);
    return FollowJob(ctx, **client, cluster, job, offset_, !no_follow_, false, 0, tail_);
  }

 private:
  CLI::App* cmd_ = nullptr;
  TargetFlags target_;
  std::vector<std::string> args_;
  uint64_t offset_ = 0;
  int tail_ = 0;
  bool no_follow_ = false, status_ = false, sync_down_ = false;

  // The job's whole log, as it is now, into ~/herd_logs/CLUSTER/JOB/run.log (written beside and
  // renamed: an earlier copy is replaced whole or not at all).
  static int SyncDown(CliContext& ctx, controller::HeadApi& client, const std::string& cluster,
                      int64_t job) {
    const char* home = ::getenv("HOME");
    const fs::path base = fs::path(home && *home ? home : ".") / "herd_logs" / cluster;
    std::error_code ec;
    fs::create_directories(base, ec);
    if (ec) return Fail(ctx, IoError("cannot create " + base.string() + ": " + ec.message()));
    const fs::path partial = base / (".run.log." + std::to_string(::getpid()));
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) return Fail(ctx, IoError("cannot write " + partial.string()));
    controller::HeadApi::StreamCallbacks cb;
    cb.on_data = [&out](std::string_view bytes) {
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    };
    auto last = client.Stream(job, 0, false, cb);
    out.close();
    if (!last.ok() || !out) {
      fs::remove(partial, ec);
      if (!last.ok()) return FailForStatus(ctx, last.status());
      return Fail(ctx, IoError("cannot write " + partial.string()));
    }
    const fs::path dir = base / std::to_string(last->job_id());
    fs::create_directories(dir, ec);
    fs::rename(partial, dir / "run.log", ec);
    if (ec) {
      fs::remove(partial, ec);
      return Fail(ctx, IoError("cannot write " + (dir / "run.log").string()));
    }
    ctx.out << (dir / "run.log").string() << "\n";
    ctx.err << "Job " << last->job_id() << " (" << proto::JobStateName(last->state())
            << "): log downloaded.\n";
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> MakeLogsCommand() { return std::make_unique<LogsCommand>(); }

}  // namespace herd::cli
