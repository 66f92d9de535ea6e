// Memory back to the system once the server is quiet. Under load each of the server's threads
// allocates from an arena of its own, and glibc keeps what an arena held at its peak for reuse: an
// idle server that was busy kept ~20 MB more than one that never was. IdleTrim decides when to
// give it back: asked every limits::kApiIdleTrimAfter with the count of requests seen so far, it
// trims when none came since it was last asked and some came since its last trim (or it never
// trimmed), so a quiet server trims once, and a busy one never.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace herd::server {

class IdleTrim {
 public:
  // `trim` gives the memory back (malloc_trim(0) in the server; a counter in tests).
  explicit IdleTrim(std::function<void()> trim) : trim_(std::move(trim)) {}

  // Called every interval with the requests seen since the server started; true when it trimmed.
  bool Tick(std::uint64_t requests_seen);

 private:
  std::function<void()> trim_;
  std::optional<std::uint64_t> last_seen_;  // what the previous Tick saw; none before the first
  bool trimmed_ = false;                    // trimmed since the last request came
};

}  // namespace herd::server
