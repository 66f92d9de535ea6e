// Failover: launching a plan's candidates one after another until one comes up, as SkyPilot's
// provisioner does. A launch that fails for lack of capacity or quota blocks where it failed and
// the next cheapest candidate that is not blocked is tried; any other failure ends the launch.
//
//   what failed (the EC2 code in the error, ec2_client.hpp)        what is blocked
//   capacity (InsufficientInstanceCapacity, spot capacity, ...)    that zone when the candidate
//                                                                  named one, else the region (the
//                                                                  provider tried all its zones),
//                                                                  for that instance type and
//                                                                  market
//   quota (InstanceLimitExceeded, VcpuLimitExceeded, ...)          the region
//   credentials (AuthFailure, SignatureDoesNotMatch, no keys)      the whole cloud
//   anything else (a bad request, SSH, bootstrap)                  nothing: the launch stops
//
// Every attempt is reported (note) with its reason and what it blocked. With retry_until_up a pass
// in which every candidate failed on capacity or quota is followed, after a backoff
// (limits::kRetryUntilUpBackoffInitial, doubling to kRetryUntilUpBackoffMax), by another pass with
// an empty blocklist; a credential error still ends it at once.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "controller/optimizer/optimizer.hpp"
#include "controller/task/task.hpp"
#include "shared/common/clock.hpp"
#include "shared/common/status.hpp"

namespace herd::optimizer {

enum class BlockScope {
  kNone,    // not a capacity matter: stop failing over
  kZone,    // aws/REGION/ZONE, for one instance type and market
  kRegion,  // aws/REGION (for one instance type and market on capacity; all on quota)
  kCloud,   // every candidate of the cloud
};
std::string_view BlockScopeName(BlockScope s);

// One blocked place: candidates whose infra is `infra` or under it ("aws/us-east-1" covers
// "aws/us-east-1/us-east-1a"); instance_type "" = every type; spot nullopt = both markets.
struct Block {
  std::string infra;
  std::string instance_type;
  std::optional<bool> spot;
  bool Covers(const Candidate& c) const;
  std::string Describe() const;  // "region aws/us-east-1 for m6i.2xlarge (on-demand)"
};

// What a failed launch of candidate `c` means. code: the EC2 code found in the error ("" when
// none, e.g. credentials that could not be loaded).
struct LaunchFailure {
  BlockScope scope = BlockScope::kNone;
  std::string code;
  Block block;  // what to block (scope != kNone)
};
LaunchFailure ClassifyLaunchFailure(const Status& error, const Candidate& c);

// The EC2 error named in a message of the form Ec2ErrorStatus writes ("EC2 <Action> in <region>:
// <Code>: ..."): action, region, code; nullopt when there is none.
struct NamedEc2Error {
  std::string action, region, code;
};
std::optional<NamedEc2Error> FindEc2Error(std::string_view message);

class Blocklist {
 public:
  void Add(Block b) { blocks_.push_back(std::move(b)); }
  bool Blocks(const Candidate& c) const;
  void Clear() { blocks_.clear(); }
  const std::vector<Block>& blocks() const { return blocks_; }

 private:
  std::vector<Block> blocks_;
};

// Infra prefixes that reorder the candidates before a pass: `prefer` ones first, `avoid` ones
// last (a managed job's recovery: FAILOVER prefers the region it ran in, EAGER_NEXT_REGION
// avoids it, jobs::RecoveryPreference), the plan's order kept within each part.
struct Preference {
  std::vector<std::string> prefer, avoid;
};

// The order a pass tries the plan's candidates in: usable (or named) ones only, reordered by
// `pref`. Indices into plan.candidates.
std::vector<std::size_t> PassOrder(const Plan& plan, const Preference& pref);
// The next candidate of `order` after position `from` that no block covers and that was not tried
// in this pass (same infra, instance type and market); nullopt when none is left.
std::optional<std::size_t> NextCandidate(const Plan& plan, const std::vector<std::size_t>& order,
                                         std::size_t from, const Blocklist& blocked,
                                         const std::vector<std::size_t>& tried);

struct FailoverOptions {
  bool retry_until_up = false;
  Preference preference;
  int max_attempts_per_pass = 0;  // 0 = limits::kMaxFailoverAttempts
  // Where each attempt's line goes.
  std::function<void(const std::string&)> note;
  // Waits between passes; returns false when the wait was interrupted (the launch then stops,
  // Cancelled).
  std::function<bool(std::chrono::milliseconds)> sleep;
};

// Launches one candidate: the task as ApplyCandidate makes it. OK when the cluster is up.
using AttemptFn = std::function<Status(const task::Task& applied, const Candidate& c)>;
// Removes what an attempt that failed on capacity or quota left (its half-made cluster), before
// the next is tried. Not called after other failures, which end the launch, nor after the last
// attempt of a launch that gives up: what becomes of that one is the caller's choice (`herd
// launch` removes a new cluster that got no nodes; one with nodes stays for `herd down`).
using CleanupFn = std::function<void(const Candidate& c)>;

// Tries the plan's candidates as described above. Returns the candidate that came up; else a
// non-capacity error as it was (so is the error of a launch that had one candidate to try), or
// Unavailable naming every attempt and its reason.
Result<Candidate> LaunchWithFailover(const task::Task& task, const Plan& plan,
                                     const AttemptFn& attempt, const CleanupFn& cleanup,
                                     const FailoverOptions& options);

// A FailoverOptions::sleep on `clock` (`herd launch -r`'s wait between passes): waits `d` in slices
// of at most 100 ms, false as soon as `interrupted` says so (before, during or at the end of the
// wait), true when the whole wait passed. `clock` must outlive the function returned.
std::function<bool(std::chrono::milliseconds)> InterruptibleSleep(
    Clock& clock, std::function<bool()> interrupted);

// "aws/us-east-1" of "aws/us-east-1/us-east-1a"; the infra itself off AWS or without a region.
std::string RegionOf(const std::string& infra);

}  // namespace herd::optimizer
