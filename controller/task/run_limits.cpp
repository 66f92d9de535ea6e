#include "controller/task/run_limits.hpp"

#include <string.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <vector>

#include "shared/common/limits.hpp"

namespace herd::task {
namespace {

using std::chrono::milliseconds;

std::optional<int64_t> Digits(std::string_view s) {
  if (s.empty() || s.size() > 12) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

Result<milliseconds> Bounded(Result<milliseconds> d, std::string_view text, bool allow_zero,
                             milliseconds max, std::string_view what) {
  if (!d.ok()) return d;
  if (*d == milliseconds(0) && !allow_zero) {
    return InvalidArgument(std::string(what) + " must be positive, got " + Quoted(text));
  }
  if (*d > max) {
    return InvalidArgument(std::string(what) + " is at most " + DurationText(max) + ", got " +
                           Quoted(text));
  }
  return d;
}

}  // namespace

Result<milliseconds> ParseDuration(std::string_view text, milliseconds bare_unit) {
  const std::string_view original = text;
  auto bad = [&] {
    return InvalidArgument("expected a duration such as 90s, 10m, 2h or 1h30m, got " +
                           Quoted(original));
  };
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  if (text.empty()) return bad();
  if (text.front() == '-') {
    return InvalidArgument("a duration cannot be negative, got " + Quoted(original));
  }
  if (auto v = Digits(text)) return milliseconds(*v * bare_unit.count());
  int64_t total = 0;
  while (!text.empty()) {
    std::size_t n = 0;
    while (n < text.size() && text[n] >= '0' && text[n] <= '9') ++n;
    auto v = Digits(text.substr(0, n));
    if (!v) return bad();
    text.remove_prefix(n);
    std::size_t u = 0;
    while (u < text.size() && std::isalpha(static_cast<unsigned char>(text[u]))) ++u;
    const std::string_view unit = text.substr(0, u);
    text.remove_prefix(u);
    int64_t ms = 0;
    if (unit == "ms")
      ms = 1;
    else if (unit == "s")
      ms = 1000;
    else if (unit == "m" || unit == "min")
      ms = 60'000;
    else if (unit == "h")
      ms = 3'600'000;
    else if (unit == "d")
      ms = 86'400'000;
    else
      return bad();
    if (*v > (INT64_C(1) << 40) / ms) return bad();
    total += *v * ms;
  }
  return milliseconds(total);
}

Result<milliseconds> ParseTimeLimit(std::string_view text) {
  const std::string what = "the time limit";
  const bool slurm =
      !text.empty() && text.find_first_not_of("0123456789:-") == std::string_view::npos;
  if (!slurm) {
    auto d = ParseDuration(text, std::chrono::minutes(1));
    if (!d.ok())
      return InvalidArgument("bad time limit: " + d.status().message() +
                             " (or Slurm's MINUTES, HH:MM:SS, D-HH:MM:SS)");
    return Bounded(d, text, false, limits::kMaxTimeLimit, what);
  }
  auto bad = [&] {
    return InvalidArgument("bad time limit " + Quoted(text) +
                           ": expected MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or a "
                           "duration such as 90m");
  };
  int64_t days = 0;
  std::string_view rest = text;
  const bool with_days = rest.find('-') != std::string_view::npos;
  if (with_days) {
    auto dash = rest.find('-');
    auto d = Digits(rest.substr(0, dash));
    if (!d) return bad();
    days = *d;
    rest.remove_prefix(dash + 1);
  }
  std::vector<int64_t> parts;
  while (true) {
    auto colon = rest.find(':');
    auto v = Digits(rest.substr(0, colon));
    if (!v) return bad();
    parts.push_back(*v);
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (parts.size() > 3) return bad();
  int64_t seconds = 0;
  if (with_days) {  // D-HH, D-HH:MM, D-HH:MM:SS
    seconds = parts[0] * 3600 + (parts.size() > 1 ? parts[1] * 60 : 0) +
              (parts.size() > 2 ? parts[2] : 0);
  } else if (parts.size() == 1) {  // MINUTES
    seconds = parts[0] * 60;
  } else if (parts.size() == 2) {  // MM:SS
    seconds = parts[0] * 60 + parts[1];
  } else {  // HH:MM:SS
    seconds = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  if (days > 100000 || seconds > (INT64_C(1) << 40)) return bad();
  return Bounded(milliseconds((days * 86400 + seconds) * 1000), text, false, limits::kMaxTimeLimit,
                 what);
}

Result<milliseconds> ParseHangTimeout(std::string_view text) {
  auto d = ParseDuration(text, std::chrono::seconds(1));
  if (!d.ok()) return InvalidArgument("bad hang timeout: " + d.status().message());
  return Bounded(d, text, false, limits::kMaxTimeLimit, "the hang timeout");
}

Result<milliseconds> ParseGrace(std::string_view text) {
  auto d = ParseDuration(text, std::chrono::seconds(1));
  if (!d.ok()) return InvalidArgument("bad grace period: " + d.status().message());
  return Bounded(d, text, true, limits::kMaxStopGrace, "the grace period");
}

std::string SignalName(int signal) {
  const char* abbrev = signal > 0 && signal < NSIG ? ::sigabbrev_np(signal) : nullptr;
  if (abbrev) return std::string("SIG") + abbrev;
  if (signal >= SIGRTMIN && signal <= SIGRTMAX)
    return "SIGRTMIN+" + std::to_string(signal - SIGRTMIN);
  return "signal " + std::to_string(signal);
}

Result<LimitSignal> ParseSignalSpec(std::string_view text) {
  const std::string_view original = text;
  auto bad = [&](std::string why) {
    return InvalidArgument("bad --signal " + Quoted(original) + ": " + why +
                           " (expected SIG[@SECONDS], e.g. USR1@300)");
  };
  if (text.starts_with("B:") || text.starts_with("R:")) text.remove_prefix(2);
  LimitSignal out;
  out.before = std::chrono::duration_cast<milliseconds>(limits::kDefaultLimitSignalBefore);
  if (auto at = text.find('@'); at != std::string_view::npos) {
    auto secs = Digits(text.substr(at + 1));
    if (!secs) return bad("the time after @ must be a whole number of seconds");
    if (*secs == 0) return bad("the time after @ must be positive");
    out.before = milliseconds(*secs * 1000);
    text = text.substr(0, at);
  }
  if (text.empty()) return bad("no signal");
  if (auto n = Digits(text)) {
    if (*n < 1 || *n >= NSIG) return bad("no signal has number " + std::string(text));
    out.signal = static_cast<int>(*n);
  } else {
    std::string name(text);
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.starts_with("SIG")) name.erase(0, 3);
    for (int s = 1; s < NSIG && out.signal == 0; ++s) {
      const char* abbrev = ::sigabbrev_np(s);
      if (abbrev && name == abbrev) out.signal = s;
    }
    if (out.signal == 0) return bad("unknown signal name " + Quoted(text));
  }
  if (out.signal == SIGKILL || out.signal == SIGSTOP) {
    return bad(SignalName(out.signal) + " cannot be caught: the job could do nothing with it");
  }
  return out;
}

Status CheckRunLimits(const RunLimits& l) {
  if (l.limit_signal != 0 && l.time_limit.count() == 0) {
    return InvalidArgument("--signal " + SignalName(l.limit_signal) +
                           " is sent before the time limit: give --time-limit too");
  }
  if (l.limit_signal != 0 && l.limit_signal_before >= l.time_limit) {
    return InvalidArgument("--signal " + SignalName(l.limit_signal) + "@" +
                           std::to_string(l.limit_signal_before.count() / 1000) +
                           " comes before the job starts: the time limit is only " +
                           DurationText(l.time_limit));
  }
  return Status::Ok();
}

void SetSpecLimits(const RunLimits& l, herd::v1::TaskSpec& spec) {
  spec.set_time_limit_ms(l.time_limit.count());
  spec.set_limit_signal(l.limit_signal);
  spec.set_limit_signal_before_ms(l.limit_signal != 0 ? l.limit_signal_before.count() : 0);
  // 0 in the spec is the default; an explicit --grace 0 is kept as 1 ms (SIGKILL at once).
  spec.set_grace_ms(l.grace ? std::max<int64_t>(l.grace->count(), 1) : 0);
  spec.set_hang_timeout_ms(l.hang_timeout.count());
}

}  // namespace herd::task
