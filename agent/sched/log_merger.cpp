#include "agent/sched/log_merger.hpp"

#include <algorithm>

#include "shared/common/limits.hpp"

namespace herd::agent {

std::string PrefixFor(const ProcessLabel& label) {
  const std::string pid = "pid=" + std::to_string(label.pid);
  const std::string ip = label.ip.empty() ? "" : ", ip=" + label.ip;
  if (label.setup) {
    if (label.num_nodes > 1 && label.rank > 0) return "(setup " + pid + ip + ") ";
    return "(setup " + pid + ") ";
  }
  if (label.num_nodes <= 1) return "(task, " + pid + ") ";
  if (label.rank == 0) return "(head, rank=0, " + pid + ") ";
  const std::string rank = std::to_string(label.rank);
  return "(worker" + rank + ", rank=" + rank + ", " + pid + ip + ") ";
}

LinePrefixer::LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}

void LinePrefixer::Emit(std::string_view terminator, std::string& out) {
  out += prefix_;
  out += pending_;
  out += terminator;
  pending_.clear();
}

void LinePrefixer::AppendContent(std::string_view content, std::string& out) {
  while (!content.empty()) {
    // Cut only when a byte beyond the limit arrives, so a line of exactly the limit followed by
    // '\n' stays one line; the cut points depend on the bytes only, not on how they were split.
    if (pending_.size() >= limits::kMaxLogLineBytes) Emit("\n", out);
    const std::size_t take = std::min(content.size(), limits::kMaxLogLineBytes - pending_.size());
    pending_.append(content.substr(0, take));
    content.remove_prefix(take);
  }
}

void LinePrefixer::Feed(std::string_view data, std::string& out) {
  std::size_t i = 0;
  const std::size_t n = data.size();
  if (pending_cr_ && n > 0) {
    pending_cr_ = false;
    if (data[0] == '\n') {
      Emit("\r\n", out);
      i = 1;
    } else {
      Emit("\r", out);
    }
  }
  while (i < n) {
    const std::size_t j = data.find_first_of("\r\n", i);
    if (j == std::string_view::npos) {
      AppendContent(data.substr(i), out);
      return;
    }
    AppendContent(data.substr(i, j - i), out);
    if (data[j] == '\n') {
      Emit("\n", out);
      i = j + 1;
    } else if (j + 1 == n) {
      pending_cr_ = true;  // decided by the next Feed or by Flush
      return;
    } else if (data[j + 1] == '\n') {
      Emit("\r\n", out);
      i = j + 2;
    } else {
      Emit("\r", out);
      i = j + 1;
    }
  }
}

void LinePrefixer::Flush(std::string& out) {
  if (pending_cr_) {
    pending_cr_ = false;
    Emit("\r\n", out);
  } else if (!pending_.empty()) {
    Emit("\n", out);
  }
}

std::size_t LinePrefixer::pending_bytes() const { return pending_.size() + (pending_cr_ ? 1 : 0); }

}  // namespace herd::agent
