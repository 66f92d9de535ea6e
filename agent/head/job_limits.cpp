#include "agent/head/job_limits.hpp"

#include <string.h>

#include <algorithm>
#include <csignal>

#include "shared/common/limits.hpp"

namespace herd::agent {

using std::chrono::milliseconds;

milliseconds StopGrace(const herd::v1::TaskSpec& spec) {
  if (spec.grace_ms() > 0) return milliseconds(spec.grace_ms());
  return std::chrono::duration_cast<milliseconds>(limits::kDefaultStopGrace);
}

milliseconds CancelGrace(std::optional<int64_t> request_grace_ms, const herd::v1::TaskSpec& spec) {
  if (request_grace_ms) return milliseconds(std::max<int64_t>(*request_grace_ms, 0));
  return StopGrace(spec);
}

void JobDeadlines::Start(int64_t job_id, std::chrono::steady_clock::time_point started,
                         const herd::v1::TaskSpec& spec) {
  if (spec.time_limit_ms() <= 0) return;
  Entry e;
  e.limit_at = started + milliseconds(spec.time_limit_ms());
  if (spec.limit_signal() > 0) {
    e.signal = spec.limit_signal();
    e.signal_at = e.limit_at - milliseconds(spec.limit_signal_before_ms());
  }
  jobs_[job_id] = e;
}

void JobDeadlines::Forget(int64_t job_id) { jobs_.erase(job_id); }

std::vector<JobDeadlines::Event> JobDeadlines::Due(std::chrono::steady_clock::time_point now) {
  std::vector<Event> due;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Entry& e = it->second;
    if (e.signal != 0 && now >= e.signal_at) {
      due.push_back({it->first, Event::Kind::kSignal, e.signal});
      e.signal = 0;
    }
    if (now >= e.limit_at) {
      due.push_back({it->first, Event::Kind::kTimeLimit, 0});
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  return due;
}

std::optional<std::string> WhyBadLimits(const herd::v1::TaskSpec& spec) {
  if (spec.time_limit_ms() < 0) return "the time limit cannot be negative";
  if (spec.grace_ms() < 0) return "the grace period cannot be negative";
  if (spec.grace_ms() > std::chrono::duration_cast<milliseconds>(limits::kMaxStopGrace).count()) {
    return "the grace period is at most " +
           DurationText(std::chrono::duration_cast<milliseconds>(limits::kMaxStopGrace));
  }
  if (spec.hang_timeout_ms() < 0) return "the hang timeout cannot be negative";
  if (spec.limit_signal() < 0 || spec.limit_signal() >= NSIG) {
    return "no signal has number " + std::to_string(spec.limit_signal());
  }
  if (spec.limit_signal() > 0) {
    if (spec.time_limit_ms() == 0) return "a limit signal needs a time limit";
    if (spec.limit_signal_before_ms() <= 0 ||
        spec.limit_signal_before_ms() >= spec.time_limit_ms()) {
      return SignalText(spec.limit_signal()) +
             " must come after the start and before the time limit";
    }
  }
  return std::nullopt;
}

std::string SignalText(int signal) {
  const char* abbrev = signal > 0 && signal < NSIG ? ::sigabbrev_np(signal) : nullptr;
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

}  // namespace herd::agent
