#include "agent/head/stack_collector.hpp"

#include <algorithm>
#include <utility>

namespace herd::agent {

uint64_t StackCollector::Begin(int64_t job_id, const std::vector<Rank>& ranks,
                               std::chrono::steady_clock::time_point deadline, Done done) {
  const uint64_t id = next_id_++;
  Capture& c = captures_[id];
  c.job_id = job_id;
  c.deadline = deadline;
  c.result.job_id = job_id;
  c.done = std::move(done);
  for (const Rank& r : ranks) c.waiting[r.key] = r.rank;
  if (c.waiting.empty()) Finish(id);
  return id;
}

void StackCollector::Report(uint64_t capture_id, const std::string& key, std::string text) {
  auto it = captures_.find(capture_id);
  if (it == captures_.end()) return;
  Capture& c = it->second;
  auto w = c.waiting.find(key);
  if (w == c.waiting.end()) return;
  c.result.texts[w->second] = std::move(text);
  c.waiting.erase(w);
  if (c.waiting.empty()) Finish(capture_id);
}

void StackCollector::Expire(std::chrono::steady_clock::time_point now) {
  std::vector<uint64_t> due;
  for (const auto& [id, c] : captures_) {
    if (now >= c.deadline) due.push_back(id);
  }
  for (uint64_t id : due) Finish(id);
}

void StackCollector::FinishJob(int64_t job_id) {
  std::vector<uint64_t> due;
  for (const auto& [id, c] : captures_) {
    if (c.job_id == job_id) due.push_back(id);
  }
  for (uint64_t id : due) Finish(id);
}

bool StackCollector::Capturing(int64_t job_id) const {
  return std::any_of(captures_.begin(), captures_.end(),
                     [&](const auto& entry) { return entry.second.job_id == job_id; });
}

void StackCollector::Finish(uint64_t id) {
  auto it = captures_.find(id);
  if (it == captures_.end()) return;
  Capture c = std::move(it->second);
  captures_.erase(it);
  for (const auto& [key, rank] : c.waiting) c.result.missing.push_back(rank);
  std::sort(c.result.missing.begin(), c.result.missing.end());
  if (c.done) c.done(c.result);
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// `  File "/x/y/train.py", line 12 in main` -> "main (train.py:12)".
std::string PythonFrame(std::string_view line) {
  line = Trim(line);
  if (!line.starts_with("File \"")) return "";
  line.remove_prefix(6);
  auto quote = line.find('"');
  if (quote == std::string_view::npos) return "";
  std::string_view file = line.substr(0, quote);
  if (auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  std::string_view rest = line.substr(quote + 1);
  std::string number;
  if (auto l = rest.find("line "); l != std::string_view::npos) {
    for (std::size_t i = l + 5; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) {
      number += rest[i];
    }
  }
  std::string func;
  if (auto in = rest.find(" in "); in != std::string_view::npos) func = rest.substr(in + 4);
  return func + " (" + std::string(file) + (number.empty() ? "" : ":" + number) + ")";
}

// eu-stack "#0  0x00007f1c2b8e3d46 __select" / gdb "#0  0x... in __select (...) from /lib/..."
// -> "__select".
std::string NativeFrame(std::string_view line) {
  line = Trim(line);
  if (!line.starts_with("#0 ")) return "";
  line.remove_prefix(3);
  line = Trim(line);
  if (line.starts_with("0x")) {
    auto sp = line.find(' ');
    if (sp == std::string_view::npos) return "";
    line = Trim(line.substr(sp));
  }
  if (line.starts_with("in ")) line.remove_prefix(3);
  auto end = line.find_first_of(" (");
  return std::string(line.substr(0, end));
}

bool IsCollective(std::string_view signature) {
  static constexpr std::string_view kCollectives[] = {"all_reduce",
                                                      "all_gather",
                                                      "reduce_scatter",
                                                      "broadcast",
                                                      "barrier",
                                                      "all_to_all",
                                                      "reduce (",
                                                      "gather (",
                                                      "scatter (",
                                                      "monitored_barrier",
                                                      "all_gather_into_tensor",
                                                      "wait ("};
  return std::any_of(std::begin(kCollectives), std::end(kCollectives), [&](std::string_view c) {
    return signature.find(c) != std::string_view::npos;
  });
}

}  // namespace

std::string StackSignature(std::string_view report) {
  // Per process (a line starting with "== pid"): the first frame of the last Python thread block,
  // and the first native frame.
  struct Proc {
    std::string python, native;
    bool in_thread = false;  // the next File line is a thread's innermost frame
  };
  std::vector<Proc> procs;
  std::size_t pos = 0;
  while (pos < report.size()) {
    std::size_t nl = report.find('\n', pos);
    std::string_view line =
        report.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? report.size() : nl + 1;
    if (line.starts_with("== pid")) {
      procs.emplace_back();
      continue;
    }
    if (procs.empty()) procs.emplace_back();
    Proc& p = procs.back();
    std::string_view t = Trim(line);
    if (t.starts_with("Thread 0x") || t.starts_with("Current thread 0x")) {
      p.in_thread = true;
      continue;
    }
    if (p.in_thread) {
      std::string f = PythonFrame(line);
      if (!f.empty()) {
        p.python = f;  // the last block's innermost frame wins
        p.in_thread = false;
      }
      continue;
    }
    if (p.native.empty()) p.native = NativeFrame(line);
  }
  bool any_python =
      std::any_of(procs.begin(), procs.end(), [](const Proc& p) { return !p.python.empty(); });
  std::string out;
  for (const Proc& p : procs) {
    const std::string& s = any_python ? p.python : p.native;
    if (s.empty()) continue;
    out += (out.empty() ? "" : " | ") + s;
  }
  return out.empty() ? "no frames captured" : out;
}

StackComparison CompareStacks(const std::map<int, std::string>& texts) {
  StackComparison c;
  for (const auto& [rank, text] : texts) c.groups[StackSignature(text)].push_back(rank);
  std::size_t best = 0;
  bool best_collective = false;
  for (const auto& [sig, ranks] : c.groups) {
    const bool collective = IsCollective(sig);
    if (ranks.size() > best || (ranks.size() == best && collective && !best_collective)) {
      best = ranks.size();
      best_collective = collective;
      c.majority = sig;
    }
  }
  for (const auto& [sig, ranks] : c.groups) {
    if (sig != c.majority) c.differing.insert(c.differing.end(), ranks.begin(), ranks.end());
  }
  std::sort(c.differing.begin(), c.differing.end());
  return c;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string DescribeComparison(const StackComparison& c) {
  if (c.groups.empty()) return "no rank reported its stacks";
  auto ranks_word = [](const std::vector<int>& r) {
    return std::string(r.size() == 1 ? "rank " : "ranks ") + RankList(r);
  };
  const std::vector<int>& rest = c.groups.at(c.majority);
  const bool collective = IsCollective(c.majority);
  auto verb = [&](bool one) {
    return collective ? (one ? " waits in " : " wait in ") : (one ? " stands at " : " stand at ");
  };
  if (c.groups.size() == 1) {
    return (rest.size() == 1 ? "rank " + RankList(rest) : std::string("every rank")) + verb(true) +
           c.majority;
  }
  std::string out = ranks_word(rest) + verb(rest.size() == 1) + c.majority;
  for (const auto& [sig, ranks] : c.groups) {
    if (sig == c.majority) continue;
    out += "; " + ranks_word(ranks) + (ranks.size() == 1 ? " differs: " : " differ: ") + sig;
  }
  return out;
}

std::string PrefixLines(std::string_view prefix, std::string_view text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    out += prefix;
    out += text.substr(pos, end - pos);
    out += '\n';
    pos = end + 1;
  }
  return out;
}

}  // namespace herd::agent
