// One `herd` command: its flags (Add registers them on the app) and what it does (Run). Each
// command lives in a file of its own (controller/cli/<command>.cpp) and is made by its Make*
// function; cli.cpp parses the command line and runs the one the user chose.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/core/progress.hpp"
#include "controller/ops/cluster_ops.hpp"
#include "controller/state/api_config.hpp"

namespace herd::cli {

// What every command runs with. The cluster operations are made on first use: `herd check` and
// `herd certs` never touch a cluster.
class CliContext {
 public:
  CliContext(bool quiet, bool verbose, std::ostream& out, std::ostream& err)
      : quiet(quiet), verbose(verbose), out(out), err(err), progress(quiet) {}
  ops::ClusterOps& Ops();
  // The API server this CLI sends its commands to, or nullopt in local mode (api_config.hpp).
  Result<std::optional<controller::ApiConfig>> Api();

  const bool quiet;
  const bool verbose;
  bool async = false;  // --async: through a server, return the request id at once
  std::ostream& out;
  std::ostream& err;
  controller::Progress progress;

 private:
  std::unique_ptr<ops::ClusterOps> ops_;
  std::optional<Result<std::optional<controller::ApiConfig>>> api_;
};

class Command {
 public:
  virtual ~Command() = default;
  // Registers the command (and its flags) on the app; returns its subcommand.
  virtual CLI::App* Add(CLI::App& app) = 0;
  // Whether the user chose this command (or one of its subcommands).
  virtual bool Chosen() const = 0;
  // The words after `--`: the command to run, for commands that run one.
  virtual void TakeCommandAfterDashes(const std::vector<std::string>&) {}
  // The process exit code.
  virtual int Run(CliContext& ctx) = 0;

  // Whether the command goes through the API server when one is configured (the server runs it
  // for the user and streams its output back), and the cluster it acts on ("" for none).
  virtual bool Remote() const { return false; }
  virtual std::string Cluster() const { return ""; }
  // Runs it through the server: by default the words of the command line as they are
  // (`args`: the verb and what follows it); commands that read local files send them.
  virtual int RunRemote(CliContext& ctx, const controller::ApiConfig& api,
                        const std::vector<std::string>& args);
};

std::unique_ptr<Command> MakeCheckCommand();
std::unique_ptr<Command> MakeCertsCommand();
std::unique_ptr<Command> MakeLaunchCommand();
std::unique_ptr<Command> MakeExecCommand();
std::unique_ptr<Command> MakeStatusCommand();
std::unique_ptr<Command> MakeQueueCommand();
std::unique_ptr<Command> MakeLogsCommand();
std::unique_ptr<Command> MakeCancelCommand();
std::unique_ptr<Command> MakeStackCommand();
std::unique_ptr<Command> MakeStopCommand();
std::unique_ptr<Command> MakeStartCommand();
std::unique_ptr<Command> MakeDownCommand();
std::unique_ptr<Command> MakeAutostopCommand();
std::unique_ptr<Command> MakeAutostopSweepCommand();
std::unique_ptr<Command> MakeJobsCommand();
std::unique_ptr<Command> MakeNodesCommand();
std::unique_ptr<Command> MakeMuxCommand();
std::unique_ptr<Command> MakeServeCommand();
std::unique_ptr<Command> MakeApiCommand();
std::unique_ptr<Command> MakeStorageCommand();
std::unique_ptr<Command> MakeGpusCommand();
std::unique_ptr<Command> MakeDashboardCommand();
std::unique_ptr<Command> MakeInfraCommand();

}  // namespace herd::cli
