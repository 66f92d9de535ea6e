#include "controller/server/idle_trim.hpp"

namespace herd::server {

bool IdleTrim::Tick(std::uint64_t requests_seen) {
  const bool quiet = last_seen_ == requests_seen;
  last_seen_ = requests_seen;
  if (!quiet) {
    trimmed_ = false;
    return false;
  }
  if (trimmed_) return false;
  trim_();
  trimmed_ = true;
  return true;
}

}  // namespace herd::server
