#include "controller/cli/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "controller/cli/command.hpp"
#include "controller/core/trace.hpp"
#include "shared/common/heap.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {

int RunCli(int argc, char** argv) {
  TraceMark("cli start");
  TuneHeapForStreaming();  // `herd _mux` and a followed job's output: large messages
  return RunCliArgs(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}

namespace {

using Factory = std::unique_ptr<cli::Command> (*)();
constexpr Factory kCommands[] = {
    cli::MakeCheckCommand,   cli::MakeCertsCommand,        cli::MakeLaunchCommand,
    cli::MakeExecCommand,    cli::MakeStatusCommand,       cli::MakeQueueCommand,
    cli::MakeLogsCommand,    cli::MakeCancelCommand,       cli::MakeStopCommand,
    cli::MakeStartCommand,   cli::MakeDownCommand,         cli::MakeAutostopCommand,
    cli::MakeJobsCommand,    cli::MakeNodesCommand,        cli::MakeMuxCommand,
    cli::MakeServeCommand,   cli::MakeApiCommand,          cli::MakeGpusCommand,
    cli::MakeStackCommand,   cli::MakeDashboardCommand,    cli::MakeInfraCommand,
    cli::MakeStorageCommand, cli::MakeAutostopSweepCommand};

// The command a word names (its name or an alias), or null: from one parser of every command,
// made once per process.
Factory CommandNamed(const std::string& word) {
  static const std::map<std::string, Factory> by_name = [] {
    std::map<std::string, Factory> m;
    CLI::App scratch;
    std::vector<std::unique_ptr<cli::Command>> keep;  // each parser's options point into its own
    for (Factory make : kCommands) {
      keep.push_back(make());
      const CLI::App* sub = keep.back()->Add(scratch);
      m.emplace(sub->get_name(), make);
      for (const std::string& alias : sub->get_aliases()) m.emplace(alias, make);
    }
    return m;
  }();
  auto it = by_name.find(word);
  return it == by_name.end() ? nullptr : it->second;
}

int RunCommands(std::vector<std::string> args, std::ostream& out, std::ostream& err, Factory only) {
  CLI::App app{"herd: launch distributed jobs on clusters of machines"};
  app.name("herd");
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");
  app.set_version_flag("--version", HERD_VERSION, "print the version and exit");
  app.fallthrough();  // -q/-v also after the verb: `herd launch ... -q`
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "no progress output");

  std::vector<std::unique_ptr<cli::Command>> commands;
  for (Factory make : kCommands) {
    if (only != nullptr && make != only) continue;
    commands.push_back(make());
    commands.back()->Add(app);
  }

  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log what herd does (to stderr)");
  bool async = false;
  app.add_flag("--async", async,
               "through an API server: submit the command and print its request id at once");
  std::vector<std::string> command_after_dashes;
  if (auto dashes = std::find(args.begin(), args.end(), "--"); dashes != args.end()) {
    command_after_dashes.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  const std::vector<std::string> words_given = args;
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector of words last to first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? 0 : 2;
  }
  TraceMark("arguments parsed");
  log::SetLevel(verbose ? log::Level::kDebug : log::Level::kWarn);
  cli::CliContext ctx(quiet, verbose, out, err);
  ctx.async = async;
  for (auto& command : commands) {
    if (!command->Chosen()) continue;
    // Everything after `--` is the command to run (`herd exec demo --num-nodes 2 -- nvidia-smi`).
    command->TakeCommandAfterDashes(command_after_dashes);
    if (command->Remote()) {
      auto api = ctx.Api();
      if (!api.ok()) {
        err << "herd: " << api.status().message() << "\n";
        return 2;
      }
      if (*api) {
        // The words of the command line as the server's herd gets them: all but this CLI's own
        // flags (-v logs here; --async is how it is sent; -q goes after the verb).
        std::vector<std::string> words;
        for (const std::string& w : words_given) {
          if (w != "-v" && w != "--verbose" && w != "--async" && w != "-q" && w != "--quiet") {
            words.emplace_back(w);
          }
        }
        if (quiet) words.push_back("-q");
        if (!command_after_dashes.empty()) {
          words.push_back("--");
          words.insert(words.end(), command_after_dashes.begin(), command_after_dashes.end());
        }
        return command->RunRemote(ctx, **api, words);
      }
    }
    if (async) {
      err << "herd: --async needs an API server (`herd api login -e URL --token TOKEN`)\n";
      return 2;
    }
    return command->Run(ctx);
  }
  return 2;
}

}  // namespace

int RunCliArgs(std::vector<std::string> args, std::ostream& out, std::ostream& err) {
  return RunCommands(std::move(args), out, err, nullptr);
}

int RunOneCommandArgs(std::vector<std::string> args, std::ostream& out, std::ostream& err) {
  Factory only = args.empty() ? nullptr : CommandNamed(args[0]);
  if (std::find(args.begin(), args.end(), "--help-all") != args.end()) only = nullptr;
  return RunCommands(std::move(args), out, err, only);
}

}  // namespace herd::controller
