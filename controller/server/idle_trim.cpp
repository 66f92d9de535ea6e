#include "controller/server/idle_trim.hpp"

namespace herd::server {

bool IdleTrim::Tick(std::uint64_t requests_seen) {
  const bool quiet = asked_ && requests_seen == last_seen_;
  if (!asked_ || requests_seen != last_seen_) trimmed_ = false;
  asked_ = true;
  last_seen_ = requests_seen;
  if (!quiet || trimmed_) return false;
  trim_();
  trimmed_ = true;
  return true;
}

}  // namespace herd::server
