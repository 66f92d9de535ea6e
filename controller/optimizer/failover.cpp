#include "controller/optimizer/failover.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "controller/provider/ec2_client.hpp"
#include "shared/common/limits.hpp"

namespace herd::optimizer {

namespace {

bool Under(const std::string& infra, const std::string& prefix) {
  return infra == prefix || (infra.size() > prefix.size() && infra.rfind(prefix, 0) == 0 &&
                             infra[prefix.size()] == '/');
}

bool IsAws(const std::string& infra) { return infra == "aws" || infra.rfind("aws/", 0) == 0; }

bool SameOffer(const Candidate& a, const Candidate& b) {
  return a.infra == b.infra && a.instance_type == b.instance_type && a.spot == b.spot &&
         a.alternative == b.alternative;
}

std::string Describe(const Candidate& c) {
  std::string out = c.infra;
  if (!c.instance_type.empty()) out += " " + c.instance_type;
  if (c.spot) out += "[Spot]";
  if (c.cost) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " ($%.2f/hr)", *c.cost);
    out += buf;
  }
  return out;
}

std::string Seconds(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + " s";
}

}  // namespace

std::string_view BlockScopeName(BlockScope s) {
  switch (s) {
    case BlockScope::kNone:
      return "none";
    case BlockScope::kZone:
      return "zone";
    case BlockScope::kRegion:
      return "region";
    case BlockScope::kCloud:
      return "cloud";
  }
  return "none";
}

std::function<bool(std::chrono::milliseconds)> InterruptibleSleep(
    Clock& clock, std::function<bool()> interrupted) {
  return [&clock, interrupted = std::move(interrupted)](std::chrono::milliseconds d) {
    const auto end = clock.Now() + d;
    while (clock.Now() < end) {
      if (interrupted()) return false;
      clock.SleepFor(std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(100),
          std::chrono::duration_cast<std::chrono::milliseconds>(end - clock.Now())));
    }
    return !interrupted();
  };
}

std::string RegionOf(const std::string& infra) {
  if (infra.rfind("aws/", 0) != 0) return infra;
  std::size_t slash = infra.find('/', 4);
  return slash == std::string::npos ? infra : infra.substr(0, slash);
}

bool Block::Covers(const Candidate& c) const {
  if (!Under(c.infra, infra)) return false;
  if (!instance_type.empty() && c.instance_type != instance_type) return false;
  return !spot || *spot == c.spot;
}

std::string Block::Describe() const {
  std::string where;
  int depth = static_cast<int>(std::count(infra.begin(), infra.end(), '/'));
  where = depth == 0 ? "cloud " + infra : depth == 1 ? "region " + infra : "zone " + infra;
  if (!instance_type.empty()) where += " for " + instance_type;
  if (spot) where += *spot ? " (spot)" : " (on-demand)";
  return where;
}

std::optional<NamedEc2Error> FindEc2Error(std::string_view m) {
  // "EC2 <Action> in <region>: <Code>: ..." (Ec2ErrorStatus), possibly after a context prefix.
  for (std::size_t at = m.find("EC2 "); at != std::string_view::npos; at = m.find("EC2 ", at + 1)) {
    std::size_t p = at + 4;
    auto word = [&](auto ok) {
      std::size_t start = p;
      while (p < m.size() && ok(m[p])) ++p;
      return std::string(m.substr(start, p - start));
    };
    auto alnum = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
    NamedEc2Error e;
    e.action = word(alnum);
    if (e.action.empty() || m.substr(p, 4) != " in ") continue;
    p += 4;
    e.region = word([](char ch) {
      return std::islower(static_cast<unsigned char>(ch)) || std::isdigit(ch) || ch == '-';
    });
    if (e.region.empty() || m.substr(p, 2) != ": ") continue;
    p += 2;
    e.code = word([&](char ch) { return alnum(ch) || ch == '.'; });
    if (e.code.empty() || m.substr(p, 1) != ":") continue;
    return e;
  }
  return std::nullopt;
}

LaunchFailure ClassifyLaunchFailure(const Status& error, const Candidate& c) {
  LaunchFailure f;
  if (error.ok() || !IsAws(c.infra)) return f;
  auto named = FindEc2Error(error.message());
  if (!named) {
    if (error.message().rfind("no AWS credentials", 0) == 0) {
      f.scope = BlockScope::kCloud;
      f.block = {"aws", "", std::nullopt};
    }
    return f;
  }
  f.code = named->code;
  const std::string region = "aws/" + named->region;
  switch (controller::ClassifyEc2Error(named->code)) {
    case controller::Ec2ErrorKind::kAuth:
      f.scope = BlockScope::kCloud;
      f.block = {"aws", "", std::nullopt};
      break;
    case controller::Ec2ErrorKind::kQuota:
      f.scope = BlockScope::kRegion;
      f.block = {region, "", std::nullopt};
      break;
    case controller::Ec2ErrorKind::kCapacity: {
      // A candidate in one zone failed only there; one of a whole region had every zone tried.
      bool zoned = RegionOf(c.infra) != c.infra && RegionOf(c.infra) == region;
      f.scope = zoned ? BlockScope::kZone : BlockScope::kRegion;
      f.block = {zoned ? c.infra : region, c.instance_type, c.spot};
      break;
    }
    default:
      break;
  }
  return f;
}

bool Blocklist::Blocks(const Candidate& c) const {
  return std::any_of(blocks_.begin(), blocks_.end(), [&](const Block& b) { return b.Covers(c); });
}

std::vector<std::size_t> PassOrder(const Plan& plan, const Preference& pref) {
  auto matches = [](const std::vector<std::string>& prefixes, const Candidate& c) {
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& p) { return Under(c.infra, p); });
  };
  std::vector<std::size_t> first, middle, last;
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    if (!c.usable && !c.named) continue;
    if (matches(pref.prefer, c)) {
      first.push_back(i);
    } else if (matches(pref.avoid, c)) {
      last.push_back(i);
    } else {
      middle.push_back(i);
    }
  }
  first.insert(first.end(), middle.begin(), middle.end());
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::optional<std::size_t> NextCandidate(const Plan& plan, const std::vector<std::size_t>& order,
                                         std::size_t from, const Blocklist& blocked,
                                         const std::vector<std::size_t>& tried) {
  for (std::size_t pos = from; pos < order.size(); ++pos) {
    const Candidate& c = plan.candidates[order[pos]];
    if (blocked.Blocks(c)) continue;
    bool again = std::any_of(tried.begin(), tried.end(),
                             [&](std::size_t t) { return SameOffer(plan.candidates[t], c); });
    if (!again) return pos;
  }
  return std::nullopt;
}

Result<Candidate> LaunchWithFailover(const task::Task& task, const Plan& plan,
                                     const AttemptFn& attempt, const CleanupFn& cleanup,
                                     const FailoverOptions& o) {
  auto note = [&](const std::string& line) {
    if (o.note) o.note(line);
  };
  const int max_attempts =
      o.max_attempts_per_pass > 0 ? o.max_attempts_per_pass : limits::kMaxFailoverAttempts;
  const std::vector<std::size_t> order = PassOrder(plan, o.preference);
  if (order.empty()) return FailedPrecondition("no usable candidate to launch");
  auto backoff =
      std::chrono::duration_cast<std::chrono::milliseconds>(limits::kRetryUntilUpBackoffInitial);
  for (int pass = 1;; ++pass) {
    Blocklist blocked;
    std::vector<std::size_t> tried;
    std::vector<std::string> failures;
    Status last;
    int attempts = 0;
    bool capped = false;
    for (std::size_t pos = 0;; ++pos) {
      auto next = NextCandidate(plan, order, pos, blocked, tried);
      if (!next) break;
      if (attempts == max_attempts) {
        capped = true;
        break;
      }
      pos = *next;
      const Candidate& c = plan.candidates[order[pos]];
      ++attempts;
      tried.push_back(order[pos]);
      if (attempts > 1 || pass > 1) {
        note("Trying " + Describe(c) + (pass > 1 ? " (pass " + std::to_string(pass) + ")" : ""));
      }
      last = attempt(ApplyCandidate(task, plan, c), c);
      if (last.ok()) return c;
      LaunchFailure f = ClassifyLaunchFailure(last, c);
      note("Attempt " + std::to_string(attempts) + " failed: " + Describe(c) + ": " +
           last.message());
      // Not a matter of capacity: no failover, and what the attempt left stays for the user to
      // look at (`herd down` removes it), as after any failed launch.
      if (f.scope == BlockScope::kNone) return last;
      blocked.Add(f.block);
      note("  blocked " + f.block.Describe() + " (" +
           (f.code.empty() ? std::string("credentials") : f.code) + ")");
      failures.push_back(Describe(c) + ": " + (f.code.empty() ? last.message() : f.code));
      // Credentials: nothing of the cloud works, waiting does not change that, and EC2 would
      // refuse to remove anything (nothing was made).
      if (f.scope == BlockScope::kCloud) {
        if (!NextCandidate(plan, order, 0, blocked, tried)) return last;
        continue;
      }
      // The next attempt reuses the cluster's name: what this one made goes first. The last one
      // of a launch that gives up stays, as any failed launch does, for `herd down`.
      bool more = o.retry_until_up ||
                  (attempts < max_attempts && NextCandidate(plan, order, pos + 1, blocked, tried));
      if (more && cleanup) cleanup(c);
    }
    if (!o.retry_until_up && attempts == 1) return last;  // the one error, as it was
    std::string summary;
    for (const auto& f : failures) summary += (summary.empty() ? "" : "; ") + f;
    if (capped) {
      summary += "; stopped after " + std::to_string(max_attempts) + " attempts";
    }
    if (!o.retry_until_up) {
      return Unavailable("no candidate could be launched (" + std::to_string(attempts) +
                         " attempt(s): " + summary +
                         "); -r/--retry-until-up keeps trying, or ask for other resources");
    }
    note("Every candidate failed (" + summary + "); retrying in " + Seconds(backoff) +
         " (--retry-until-up)");
    if (o.sleep && !o.sleep(backoff)) return Cancelled("interrupted while waiting to retry");
    backoff = std::min(backoff * 2, std::chrono::duration_cast<std::chrono::milliseconds>(
                                        limits::kRetryUntilUpBackoffMax));
  }
}

}  // namespace herd::optimizer
