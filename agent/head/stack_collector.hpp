// Stacks of a job's ranks on the head: a capture (a hang, `herd stack`) asks every node of the job
// for its ranks' stacks (CaptureStacks), gathers the StackReports as they come and finishes when
// every rank reported or its deadline passed (the head's clock, checked with node liveness). Then
// CompareStacks says where each rank stands and which ranks differ from the rest, so a user reads
// "rank 1 differs: <module> (train.py:12)" instead of comparing pages of frames.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/common/clock.hpp"

namespace herd::agent {

class StackCollector {
 public:
  struct Rank {
    int rank = 0;
    std::string key;  // ProcessKeyString of its run process
  };
  struct Result {
    int64_t job_id = 0;
    std::map<int, std::string> texts;  // rank -> its report
    std::vector<int> missing;          // ranks without a report in time, ascending
  };
  using Done = std::function<void(const Result&)>;

  // A capture of these ranks, finished by `deadline` at the latest; its id goes into the
  // CaptureStacks messages. With no ranks, done runs at once.
  uint64_t Begin(int64_t job_id, const std::vector<Rank>& ranks,
                 std::chrono::steady_clock::time_point deadline, Done done);
  // A node's report for one process; done runs when it was the last one awaited. Reports for
  // unknown captures or keys (late, repeated) are dropped.
  void Report(uint64_t capture_id, const std::string& key, std::string text);
  // Finishes the captures whose deadline passed.
  void Expire(std::chrono::steady_clock::time_point now);
  // The job ended: its captures finish with what they have.
  void FinishJob(int64_t job_id);
  bool Capturing(int64_t job_id) const;

 private:
  struct Capture {
    int64_t job_id = 0;
    std::chrono::steady_clock::time_point deadline;
    std::map<std::string, int> waiting;  // key -> rank
    Result result;
    Done done;
  };
  void Finish(uint64_t id);

  uint64_t next_id_ = 1;
  std::map<uint64_t, Capture> captures_;
};

// Where a rank stands, from its report: for each process with Python frames, the innermost frame
// of its main thread (faulthandler lists it last) as "function (file:line)"; without any, the
// innermost native frame of each process. Processes joined with " | ".
std::string StackSignature(std::string_view report);

struct StackComparison {
  std::map<std::string, std::vector<int>> groups;  // signature -> ranks, ascending
  std::string majority;                            // the largest group's signature
  std::vector<int> differing;                      // ranks outside it, ascending
};
// Groups the ranks by signature. The largest group is the rest; of groups of one size, one
// waiting in a collective (all_reduce, barrier, ...) is, since the rank that differs is the one
// the others wait for.
StackComparison CompareStacks(const std::map<int, std::string>& texts);
// One line: "ranks 0, 2 wait in all_reduce (distributed_c10d.py:1536); rank 1 differs:
// <module> (train.py:12)", or "every rank waits in ...".
std::string DescribeComparison(const StackComparison& comparison);
// "0, 2, 3".
std::string RankList(const std::vector<int>& ranks);

// Every line of text with prefix in front (a final line without '\n' gets one).
std::string PrefixLines(std::string_view prefix, std::string_view text);

}  // namespace herd::agent
