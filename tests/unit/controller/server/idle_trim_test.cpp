// IdleTrim (idle_trim.hpp): when the server gives its allocator's free memory back. Ticks stand
// for the server's timer (every limits::kApiIdleTrimAfter) with the count of requests seen.
#include "controller/server/idle_trim.hpp"

#include <doctest/doctest.h>

namespace herd::server {
namespace {

TEST_CASE("a quiet server trims once; a busy one never") {
  int trims = 0;
  IdleTrim t([&] { ++trims; });
  CHECK_FALSE(t.Tick(0));  // the first look: nothing to compare with yet
  CHECK(t.Tick(0));        // a whole interval without a request
  CHECK(trims == 1);
  CHECK_FALSE(t.Tick(0));  // still quiet: given back already
  CHECK_FALSE(t.Tick(0));
  CHECK(trims == 1);
  // Requests in every interval: never while they come.
  for (std::uint64_t seen = 5; seen <= 50; seen += 5) CHECK_FALSE(t.Tick(seen));
  CHECK(trims == 1);
  CHECK(t.Tick(50));  // quiet again after them: once more
  CHECK_FALSE(t.Tick(50));
  CHECK(trims == 2);
}

TEST_CASE("one request after a trim makes the next quiet interval trim again") {
  int trims = 0;
  IdleTrim t([&] { ++trims; });
  CHECK_FALSE(t.Tick(7));
  CHECK(t.Tick(7));
  CHECK_FALSE(t.Tick(8));  // one request came in this interval
  CHECK(t.Tick(8));
  CHECK(trims == 2);
}

}  // namespace
}  // namespace herd::server
