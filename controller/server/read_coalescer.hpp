// Reads that share one run. Many clients asking the server the same read at once (every user's
// dashboard tab and scripts polling `herd status`) would each cost a warm worker's run: a query of
// the user's state and of each cluster's head. A read of one user with the same words that
// arrives while such a read runs instead waits for the next run of those words, which starts
// after the running one ends, and gets its output as it is printed, with every other read that
// waited for that run. A read never gets output of a run that started before it arrived: what it
// sees is as fresh as if it had run alone, and the work per distinct read is one run at a time.
//
// Rounds: the reads waiting for a run are its round; a run's output goes to each read of its
// round (in order, as it comes) and its end to each, then the reads that arrived meanwhile are
// the next round. Every round runs through the executor given: Join never blocks (the server's
// request handlers stay free), and a finished round queues the next instead of running it on its
// own thread (one busy read cannot keep a thread from every other).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "controller/server/stream_frames.hpp"
#include "shared/common/status.hpp"

namespace herd::server {

class ReadCoalescer {
 public:
  // Output of the run as the warm worker gives it (WarmWorkers::OutputFn).
  using OutputFn = std::function<void(FrameTag stream, std::string_view bytes)>;
  // Runs the read once, giving its output to the function; its exit code, or a status when it
  // could not be run (WarmWorkers::Run's Unavailable, nothing given to the output).
  using RunFn = std::function<Result<int>(const OutputFn&)>;
  // Starts a function on another thread (the server's handler pool).
  using Executor = std::function<void(std::function<void()>)>;

  struct Waiter {
    OutputFn on_output;                     // each piece of the run's output
    std::function<void(Result<int>)> done;  // once: the run's end (or why it could not run)
  };

  explicit ReadCoalescer(Executor executor) : executor_(std::move(executor)) {}
  ReadCoalescer(const ReadCoalescer&) = delete;
  ReadCoalescer& operator=(const ReadCoalescer&) = delete;

  // Waits for the next run of `key` (the user and the words): a round of its own queued on the
  // executor when none of that key runs or is queued, the queued round when one is, the round
  // after the running one otherwise. Returns at once; the waiter is told from the thread that
  // runs its round. `run` is the run of that round if this read is the first of it.
  void Join(const std::string& key, RunFn run, Waiter waiter);

  // Keys with a run in flight or queued (for tests and the server's own counters).
  std::size_t active() const;
  // Runs started, all keys together since construction.
  std::size_t runs() const;

 private:
  struct Key {
    RunFn run;                 // the run of the next round (the first waiter's)
    std::vector<Waiter> next;  // waiting for the next round
  };
  void StartRound(const std::string& key);

  Executor executor_;
  mutable std::mutex mu_;
  std::map<std::string, Key> running_;  // a key is here while a round of it runs or is queued
  std::size_t runs_ = 0;
};

// The key of a read: the user and each word, each ended by a NUL (words hold no NUL).
std::string ReadKey(const std::string& user, const std::vector<std::string>& args);

}  // namespace herd::server
