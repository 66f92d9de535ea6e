// A task's run limits: how long its job may run (--time-limit, Slurm's --time), which signal it
// gets before that (--signal SIG@SECONDS, Slurm's --signal), how long a stop waits between SIGTERM
// and SIGKILL (--grace, Slurm's KillWait) and after how long without progress a rank is hung
// (`config: {herd: {hang_timeout: 10m}}`, --hang-timeout). Parsed and checked here, at submit:
// a bad value is refused before anything is queued.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "herd/v1/common.pb.h"
#include "shared/common/duration_text.hpp"
#include "shared/common/status.hpp"

namespace herd::task {

struct RunLimits {
  std::chrono::milliseconds time_limit{0};  // 0: none
  int limit_signal = 0;                     // 0: none; sent limit_signal_before the limit
  std::chrono::milliseconds limit_signal_before{0};
  std::optional<std::chrono::milliseconds> grace;  // unset: limits::kDefaultStopGrace
  std::chrono::milliseconds hang_timeout{0};       // 0: not watched
};

// A duration: "90s", "10m", "2h", "1d", "1h30m", "500ms"; a bare number is in bare_unit.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text,
                                                std::chrono::milliseconds bare_unit);
// --time-limit: Slurm's forms ("MINUTES", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS")
// or a duration with units ("90m"); positive, at most limits::kMaxTimeLimit.
Result<std::chrono::milliseconds> ParseTimeLimit(std::string_view text);
// A hang timeout: a duration (a bare number is seconds); positive, at most kMaxTimeLimit.
Result<std::chrono::milliseconds> ParseHangTimeout(std::string_view text);
// --grace: seconds, or a duration with units; >= 0, at most limits::kMaxStopGrace.
Result<std::chrono::milliseconds> ParseGrace(std::string_view text);

struct LimitSignal {
  int signal = 0;
  std::chrono::milliseconds before{0};
};
// --signal: "[B:|R:]SIG[@SECONDS]", SIG a name (USR1, SIGUSR1) or a number (10); SECONDS before
// the time limit, default limits::kDefaultLimitSignalBefore. Slurm's B:/R: prefixes are taken;
// herd sends the signal to every process of the job either way.
Result<LimitSignal> ParseSignalSpec(std::string_view text);
// "SIGUSR1" for 10; "signal 99" for one without a name.
std::string SignalName(int signal);

// The limits together: a --signal needs a --time-limit and must come before it.
Status CheckRunLimits(const RunLimits& limits);
// Into the spec the head gets (TaskSpec fields 20-24).
void SetSpecLimits(const RunLimits& limits, herd::v1::TaskSpec& spec);

}  // namespace herd::task
