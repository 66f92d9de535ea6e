#include "shared/proto/job_array.hpp"

#include <algorithm>
#include <charconv>
#include <set>

#include "shared/common/limits.hpp"

namespace herd::proto {
namespace {

// A non-negative decimal number that is the whole of `text`.
bool ParseNumber(std::string_view text, int64_t& out) {
  if (text.empty() || text.size() > 18) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

Status Bad(std::string_view what, std::string_view spec, const std::string& why) {
  return InvalidArgument(std::string(what) + " " + std::string(spec) + ": " + why);
}

}  // namespace

Result<herd::v1::JobArray> ParseJobArray(std::string_view spec, std::string_view what) {
  herd::v1::JobArray array;
  array.set_spec(std::string(spec));
  std::string_view list = spec;
  if (const auto pct = spec.find('%'); pct != std::string_view::npos) {
    int64_t limit = 0;
    if (!ParseNumber(spec.substr(pct + 1), limit)) {
      return Bad(what, spec, "the limit after % must be a whole number");
    }
    if (limit < 1) return Bad(what, spec, "the limit after % must be at least 1 (%0 runs nothing)");
    array.set_max_running(static_cast<int32_t>(std::min<int64_t>(limit, limits::kMaxArrayJobs)));
    list = spec.substr(0, pct);
  }
  if (list.empty()) return Bad(what, spec, "give indices, e.g. 0-99%8 or 1,3,5-7");
  std::set<int64_t> seen;
  for (std::string_view item : Split(list, ',')) {
    if (item.empty()) return Bad(what, spec, "an empty item between commas");
    int64_t step = 1;
    std::string_view range = item;
    if (const auto colon = item.find(':'); colon != std::string_view::npos) {
      if (!ParseNumber(item.substr(colon + 1), step) || step < 1) {
        return Bad(what, spec, "the step after : in " + std::string(item) + " must be at least 1");
      }
      range = item.substr(0, colon);
    }
    int64_t first = 0, last = 0;
    if (const auto dash = range.find('-'); dash != std::string_view::npos) {
      if (!ParseNumber(range.substr(0, dash), first) ||
          !ParseNumber(range.substr(dash + 1), last)) {
        return Bad(what, spec, std::string(item) + " is not a range like 0-99");
      }
      if (last < first) {
        return Bad(what, spec, "the range " + std::string(range) + " ends before it starts");
      }
    } else {
      if (range.size() != item.size()) {
        return Bad(what, spec, "a step needs a range (" + std::string(item) + ")");
      }
      if (!ParseNumber(range, first))
        return Bad(what, spec, std::string(item) + " is not an index");
      last = first;
    }
    if (last > limits::kMaxArrayIndex) {
      return Bad(what, spec,
                 "indices go up to " + std::to_string(limits::kMaxArrayIndex) + " at most");
    }
    for (int64_t i = first; i <= last; i += step) {
      if (!seen.insert(i).second) {
        return Bad(what, spec, "index " + std::to_string(i) + " is given twice");
      }
      if (static_cast<int>(seen.size()) > limits::kMaxArrayJobs) {
        return Bad(what, spec,
                   "an array holds at most " + std::to_string(limits::kMaxArrayJobs) + " jobs");
      }
      array.add_indices(static_cast<int32_t>(i));
    }
  }
  return array;
}

Status ValidateJobArray(const herd::v1::JobArray& array) {
  if (array.indices_size() == 0) return InvalidArgument("the array has no indices");
  if (array.indices_size() > limits::kMaxArrayJobs) {
    return InvalidArgument("an array holds at most " + std::to_string(limits::kMaxArrayJobs) +
                           " jobs, not " + std::to_string(array.indices_size()));
  }
  if (array.max_running() < 0) return InvalidArgument("the array's running limit is negative");
  std::set<int32_t> seen;
  for (int32_t i : array.indices()) {
    if (i < 0 || i > limits::kMaxArrayIndex) {
      return InvalidArgument("array index " + std::to_string(i) + " is outside 0.." +
                             std::to_string(limits::kMaxArrayIndex));
    }
    if (!seen.insert(i).second) {
      return InvalidArgument("array index " + std::to_string(i) + " is given twice");
    }
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> ParseJobIdList(std::string_view text, std::string_view what) {
  std::vector<int64_t> ids;
  if (text.empty()) return InvalidArgument(std::string(what) + ": give job ids, e.g. 3 or 3,4");
  for (std::string_view item : Split(text, ',')) {
    int64_t id = 0;
    if (!ParseNumber(item, id) || id < 1) {
      return InvalidArgument(std::string(what) + " " + std::string(text) + ": " +
                             (item.empty() ? std::string("an empty item between commas")
                                           : "'" + std::string(item) + "' is not a job id"));
    }
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      return InvalidArgument(std::string(what) + " " + std::string(text) + ": job " +
                             std::to_string(id) + " is given twice");
    }
    ids.push_back(id);
  }
  if (static_cast<int>(ids.size()) > limits::kMaxJobDependencies) {
    return InvalidArgument(std::string(what) + ": at most " +
                           std::to_string(limits::kMaxJobDependencies) + " jobs");
  }
  return ids;
}

std::string DescribeJobArray(const herd::v1::JobArray& array) {
  std::string out;
  const auto& idx = array.indices();
  for (int i = 0; i < idx.size();) {
    // The longest run from i with one step: "A-B:S" (or "A-B" for step 1), else a lone index.
    int j = i + 1;
    const int64_t step = j < idx.size() ? int64_t{idx[j]} - idx[i] : 0;
    while (step > 0 && j < idx.size() && int64_t{idx[j]} - idx[j - 1] == step) ++j;
    if (!out.empty()) out += ',';
    if (j - i >= 3 || (j - i == 2 && step == 1)) {
      out += std::to_string(idx[i]) + "-" + std::to_string(idx[j - 1]);
      if (step != 1) out += ":" + std::to_string(step);
      i = j;
    } else {
      out += std::to_string(idx[i]);
      ++i;
    }
  }
  if (array.max_running() > 0) out += "%" + std::to_string(array.max_running());
  return out;
}

}  // namespace herd::proto
