// Job arrays (Slurm's --array) and dependency lists (--after, --after-ok): parsed by the CLI,
// checked again by the head, which trusts no client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "herd/v1/client.pb.h"
#include "shared/common/status.hpp"

namespace herd::proto {

// Slurm's array syntax: a comma-separated list of indices `N`, ranges `A-B` and stepped ranges
// `A-B:S`, optionally ended by `%M` (at most M of the array's jobs run at once). "0-99%8",
// "1,3,5-7", "0-15:4". Indices come out in the order written and must be distinct, in
// 0..limits::kMaxArrayIndex, at most limits::kMaxArrayJobs of them. `what` names the input in
// errors ("--array").
Result<herd::v1::JobArray> ParseJobArray(std::string_view spec, std::string_view what = "--array");

// The checks ParseJobArray makes, on an array as a submit carries it.
Status ValidateJobArray(const herd::v1::JobArray& array);

// "3", "3,4,9": job ids (each >= 1, at most limits::kMaxJobDependencies, no repeats).
Result<std::vector<int64_t>> ParseJobIdList(std::string_view text, std::string_view what);

// "0-99%8" rendered back from indices (ranges collapsed, steps kept where regular) and the limit.
std::string DescribeJobArray(const herd::v1::JobArray& array);

}  // namespace herd::proto
