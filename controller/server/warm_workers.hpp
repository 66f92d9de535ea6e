// The API server's warm workers: long-lived `herd _serve` processes (controller/cli/serve.cpp),
// each with one user's environment, that run that user's read commands (status, queue, nodes,
// jobs queue; warm_protocol.hpp) one at a time. A read through the server then costs a request on
// a socket instead of a `herd` process started for it. Workers are started on demand, at most
// Options::per_user per user and Options::max_total in all, and exit by themselves when idle
// (limits::kApiWarmWorkerIdle); one that is gone is replaced.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "controller/server/stream_frames.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::server {

class WarmWorkers {
 public:
  struct Options {
    std::size_t per_user = limits::kApiWarmWorkersPerUser;
    std::size_t max_total = limits::kApiWarmWorkersMax;
    limits::Duration queue_wait = limits::kApiWarmQueueWait;
  };
  // How a user's worker is started: its program and words (`herd _serve`), its whole environment
  // and its working directory. Its stdin is the socket; stdout and stderr are /dev/null.
  struct Spawn {
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::string cwd;
  };
  // Output of the command (kStdout, kStderr) in order; kStdout with no bytes is a heartbeat, sent
  // after limits::kApiStreamHeartbeat without output.
  using OutputFn = std::function<void(FrameTag stream, std::string_view bytes)>;

  explicit WarmWorkers(Options options) : options_(options) {}
  WarmWorkers() : WarmWorkers(Options{}) {}
  ~WarmWorkers() { Close(); }
  WarmWorkers(const WarmWorkers&) = delete;
  WarmWorkers& operator=(const WarmWorkers&) = delete;

  // Runs `args` (IsWarmRead) in one of `user`'s workers and returns its exit code. Unavailable,
  // with nothing given to on_output, when no worker could run it (each one the user may have is
  // busy for longer than Options::queue_wait, or one could not be started): the caller runs the
  // command another way. A worker that ends in the middle of a command ends it with a line on
  // kStderr and exit code 1. Blocks; call it from threads that live as long as the workers should
  // (a worker dies with the thread that started it).
  Result<int> Run(const std::string& user, const Spawn& spawn, const std::vector<std::string>& args,
                  const OutputFn& on_output);

  // Ends every worker (closes its socket, waits for it); Run is Unavailable from then on.
  void Close();

  // Workers alive or starting, all users together; of them, those running a command.
  std::size_t size() const;
  std::size_t busy() const;

 private:
  struct Worker {
    int pid = -1;
    int fd = -1;
    bool busy = false;
    // When it last finished a command: it exits by itself kApiWarmWorkerIdle after.
    std::chrono::steady_clock::time_point idle_since{};
  };
  enum class Outcome { kDone, kGoneBeforeAnswer, kGoneMidway };

  Result<std::shared_ptr<Worker>> Take(const std::string& user);
  Status Start(Worker& w, const Spawn& spawn);
  Outcome Exchange(Worker& w, const std::vector<std::string>& args, const OutputFn& on_output,
                   int* exit_code);
  void Give(const std::string& user, const std::shared_ptr<Worker>& w);
  void Retire(const std::string& user, const std::shared_ptr<Worker>& w);
  void ReapIdleLocked();

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::map<std::string, std::vector<std::shared_ptr<Worker>>> workers_;
  std::size_t total_ = 0;
  bool closed_ = false;
};

}  // namespace herd::server
