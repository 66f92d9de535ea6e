// A job's run limits on the head: when its --signal and --time-limit fall due (on the head's
// clock, checked with the node liveness every limits::kNodeCheckInterval), and how long a stop
// waits between SIGTERM and SIGKILL. The head sends SignalJob at the first and stops the job
// gracefully at the second (it ends FAILED, JOB_END_REASON_TIME_LIMIT).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "herd/v1/common.pb.h"
#include "shared/common/clock.hpp"
#include "shared/common/duration_text.hpp"

namespace herd::agent {

// The grace of a stop the job's own spec governs (a time limit, a hang, a lost node's survivors,
// a cancel without --grace): TaskSpec.grace_ms, else limits::kDefaultStopGrace.
std::chrono::milliseconds StopGrace(const herd::v1::TaskSpec& spec);
// A cancel's grace: the request's when given, else StopGrace.
std::chrono::milliseconds CancelGrace(std::optional<int64_t> request_grace_ms,
                                      const herd::v1::TaskSpec& spec);

class JobDeadlines {
 public:
  struct Event {
    enum class Kind { kSignal, kTimeLimit };
    int64_t job_id = 0;
    Kind kind = Kind::kSignal;
    int signal = 0;  // kSignal: which
    bool operator==(const Event&) const = default;
  };

  // The job started (placed: SETTING_UP or RUNNING) at `started`; nothing is tracked without a
  // time limit.
  void Start(int64_t job_id, std::chrono::steady_clock::time_point started,
             const herd::v1::TaskSpec& spec);
  void Forget(int64_t job_id);
  // What fell due by `now`, each event once; a job's signal before its time limit.
  std::vector<Event> Due(std::chrono::steady_clock::time_point now);
  bool Tracks(int64_t job_id) const { return jobs_.count(job_id) > 0; }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point signal_at;
    int signal = 0;  // 0: none, or already sent
    std::chrono::steady_clock::time_point limit_at;
  };
  std::map<int64_t, Entry> jobs_;
};

// Why the spec's run limits cannot be taken (a negative duration, a signal that is no signal or
// comes after the limit); nullopt when they can. The CLI checks the same before it submits.
std::optional<std::string> WhyBadLimits(const herd::v1::TaskSpec& spec);

// "SIGUSR1"; "signal 99" for one without a name.
std::string SignalText(int signal);

}  // namespace herd::agent
