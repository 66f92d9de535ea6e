// Bounded parallel fan-out over nodes (ssh, rsync): never more children than file descriptors
// allow, which is what broke SkyPilot at 75-100 nodes ("Too many open files").
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller {

// How many items ForEachParallel runs at once: min(limits::kSshMaxParallel, a quarter of the
// RLIMIT_NOFILE soft limit / limits::kFdsPerSshChild), at least 1. The first call raises the soft
// limit to the hard limit.
size_t MaxParallelism();

// Runs fn(0..n-1), at most MaxParallelism() at a time, every item even after a failure. Returns OK
// or the first failing item's code with every failure joined: "2 of 5 failed: item 1: ...;
// item 3: ...". name(i) replaces "item i" in that message when given. An exception thrown by fn is
// an Internal error of that item.
Status ForEachParallel(size_t n, std::function<Status(size_t)> fn,
                       std::function<std::string(size_t)> name = {});

}  // namespace herd::controller
