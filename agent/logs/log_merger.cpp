#include "agent/logs/log_merger.hpp"

#include <algorithm>
#include <cstring>

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
  // Room for the bytes and a prefix per ~64 bytes of them, so out grows once per chunk.
  out.reserve(out.size() + n + (n / 64 + 1) * prefix_.size());
  // The next '\n' and '\r' at or after i (n: none), each found once by memchr (vectorised) and
  // searched again only after i passes it: linear time however the terminators mix.
  const char* base = data.data();
  auto next = [&](char c, std::size_t from) {
    const void* hit = from < n ? std::memchr(base + from, c, n - from) : nullptr;
    return hit ? static_cast<std::size_t>(static_cast<const char*>(hit) - base) : n;
  };
  std::size_t nl = next('\n', i);
  std::size_t cr = next('\r', i);
  while (i < n) {
    if (nl < i) nl = next('\n', i);
    if (cr < i) cr = next('\r', i);
    const std::size_t j = std::min(nl, cr);
    if (j == n) {
      AppendContent(data.substr(i), out);
      return;
    }
    const std::size_t len = j - i;
    if (data[j] == '\r' && j + 1 == n) {
      // "\r\n" or a redraw: decided by the next Feed or by Flush.
      AppendContent(data.substr(i, len), out);
      pending_cr_ = true;
      return;
    }
    const std::string_view terminator = data[j] == '\n'       ? std::string_view("\n")
                                        : data[j + 1] == '\n' ? std::string_view("\r\n")
                                                              : std::string_view("\r");
    if (pending_.empty() && len <= limits::kMaxLogLineBytes) {
      out += prefix_;  // a whole segment within this chunk: straight to out, no copy in pending_
      out.append(base + i, len);
      out += terminator;
    } else {
      AppendContent(data.substr(i, len), out);
      Emit(terminator, out);
    }
    i = j + terminator.size();
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
