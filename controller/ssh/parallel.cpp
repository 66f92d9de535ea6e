#include "controller/ssh/parallel.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::controller {
namespace {

rlim_t RaiseNofileSoftLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      rl = raised;
    } else {
      HERD_LOG(kWarn) << "cannot raise the open-file limit to " << rl.rlim_max;
    }
  }
  return rl.rlim_cur == RLIM_INFINITY ? rlim_t{1} << 20 : rl.rlim_cur;
}

}  // namespace

size_t MaxParallelism() {
  static const rlim_t nofile = RaiseNofileSoftLimit();
  size_t by_fds = static_cast<size_t>(nofile / 4 / limits::kFdsPerSshChild);
  return std::max<size_t>(1, std::min<size_t>(limits::kSshMaxParallel, by_fds));
}

Status ForEachParallel(size_t n, std::function<Status(size_t)> fn,
                       std::function<std::string(size_t)> name) {
  if (n == 0) return Status::Ok();
  std::vector<Status> results(n);
  auto run_one = [&](size_t i) {
    try {
      results[i] = fn(i);
    } catch (const std::exception& e) {
      results[i] = Internal(std::string("exception: ") + e.what());
    } catch (...) {
      results[i] = Internal("unknown exception");
    }
  };
  size_t workers = std::min(n, MaxParallelism());
  if (workers == 1) {
    for (size_t i = 0; i < n; ++i) run_one(i);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    threads.reserve(workers);
    for (size_t w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) run_one(i);
      });
    }
    for (auto& t : threads) t.join();
  }

  size_t failed = 0;
  const Status* first = nullptr;
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    if (results[i].ok()) continue;
    ++failed;
    if (first == nullptr) first = &results[i];
    if (!joined.empty()) joined += "; ";
    joined += (name ? name(i) : "item " + std::to_string(i)) + ": " + results[i].message();
  }
  if (first == nullptr) return Status::Ok();
  return Status(first->code(),
                std::to_string(failed) + " of " + std::to_string(n) + " failed: " + joined);
}

}  // namespace herd::controller
